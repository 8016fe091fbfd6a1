#!/usr/bin/env bash
# `sudo make uninstall`: removes exactly what scripts/install.sh recorded in its
# manifest ($PREFIX/share/greenboost/install-manifest), nothing else. A file that was
# changed since (an edited modprobe.d option, say) is removed too, since install put
# it there; directories go only when empty, so files of others in them stay.
#
# It also removes the swap files `greenboost swap add` created, which it records in
# /var/lib/greenboost/swapfiles (one absolute path a line): each active one is turned
# off with swapoff (after the module is unloaded, so no T3 buffer has pages in it any
# more), then deleted; a file whose swapoff fails is kept, with its record.
#
# And what processes under the shim leave in /dev/shm: live tiering's lock files, and
# the figures a killed process published, unless in use.
#
# Environment: DESTDIR and PREFIX as for install.sh (the same values). With DESTDIR
# set, only files under it are touched (DESTDIR/dev/shm included): no rmmod, dkms,
# groupdel, swapoff or systemctl.
set -euo pipefail

DESTDIR=${DESTDIR:-}
DESTDIR=${DESTDIR%/}
PREFIX=${PREFIX:-/usr/local}
manifest=$PREFIX/share/greenboost/install-manifest

say() { echo "greenboost uninstall: $*"; }
warn() { echo "greenboost uninstall: warning: $*" >&2; }
die() { echo "greenboost uninstall: $*" >&2; exit 1; }
staged() { [ -n "$DESTDIR" ]; }

[ -f "$DESTDIR$manifest" ] || die "no install manifest at $DESTDIR$manifest: GreenBoost is not installed with PREFIX=$PREFIX${DESTDIR:+ and DESTDIR=$DESTDIR} (use the PREFIX/DESTDIR you installed with)"
if ! staged && [ "$(id -u)" != 0 ]; then
  die "uninstalling from the system needs root: run \`sudo make uninstall\`"
fi

mapfile -t entries < <(grep -v '^#' "$DESTDIR$manifest")
field() { sed -n "s/^$1 //p" <<<"$(printf '%s\n' "${entries[@]}")"; }

# 1. Stop using the module, then unregister it (the system only).
if ! staged; then
  if lsmod 2>/dev/null | grep -q '^greenboost '; then
    modprobe -r greenboost 2>/dev/null \
      || warn "the greenboost module is in use (buffers alive); it stays loaded until reboot or until \`sudo modprobe -r greenboost\` succeeds"
  fi
  while IFS= read -r registration; do
    [ -n "$registration" ] || continue
    if command -v dkms >/dev/null; then
      dkms remove "$registration" --all >&2 || warn "dkms remove $registration failed"
    else
      warn "dkms is no longer installed, so $registration cannot be unregistered from it"
    fi
  done < <(field dkms)
fi

# 2. and 3. Swap files `greenboost swap add` made, and what processes under the shim
# left in /dev/shm (scripts/uninstall-runtime.sh, shared with the Debian package's
# postrm).
. "$(dirname "$0")/uninstall-runtime.sh"
remove_recorded_swapfiles
remove_shm_leftovers

# 4. Files.
ollama_dropin=0 module_kernels=()
while IFS= read -r path; do
  [ -n "$path" ] || continue
  case $path in
    */ollama.service.d/*) ollama_dropin=1 ;;
    /lib/modules/*) krel=${path#/lib/modules/}; module_kernels+=("${krel%%/*}") ;;
  esac
  rm -f "$DESTDIR$path"
done < <(field file)
rm -f "$DESTDIR$manifest"

# 5. Trees created as a whole (the module build cache), then directories, deepest first.
while IFS= read -r tree; do
  [ -n "$tree" ] && ! staged && rm -rf "$tree"
done < <(field tree)
while IFS= read -r dir; do
  [ -n "$dir" ] || continue
  rmdir "$DESTDIR$dir" 2>/dev/null || [ ! -d "$DESTDIR$dir" ] || say "kept $dir: it holds files that are not GreenBoost's"
done < <(field dir | awk '{ print gsub("/", "/"), $0 }' | sort -rn | cut -d' ' -f2-)

# 6. Group membership and the group, when install created them; refresh the system.
if ! staged; then
  while read -r group user; do
    [ -n "$user" ] && gpasswd -d "$user" "$group" >/dev/null 2>&1 || true
  done < <(field member)
  while IFS= read -r group; do
    [ -n "$group" ] && getent group "$group" >/dev/null && groupdel "$group" || true
  done < <(field group)
  for krel in $(printf '%s\n' "${module_kernels[@]}" | sort -u); do
    [ -f "/lib/modules/$krel/modules.dep" ] && depmod -a "$krel" || true
  done
  command -v udevadm >/dev/null && udevadm control --reload-rules || true
  if [ $ollama_dropin = 1 ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload || true
    say "ollama no longer uses GreenBoost after \`sudo systemctl restart ollama\`"
  fi
fi
say "removed GreenBoost from ${DESTDIR:-/}"
