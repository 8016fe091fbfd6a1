#!/usr/bin/env bash
# `sudo make install`: builds and installs GreenBoost, and records every file, directory,
# group and registration it creates in a manifest that scripts/uninstall.sh undoes.
#
#   $PREFIX/bin/greenboost                         the CLI            (PREFIX=/usr/local)
#   $PREFIX/lib/libgreenboost_cuda.so              the LD_PRELOAD shim
#   $PREFIX/include/greenboost.h                   the ioctl ABI for C users
#   $PREFIX/share/man/man1/greenboost*.1, man4/greenboost.4   manual pages
#   $PREFIX/share/{bash-completion,zsh,fish}/...    shell completions
#   /lib/modules/$KREL/extra/greenboost.ko         the module for the running kernel
#                       (updates/dkms/ instead when DKMS is installed: DKMS builds it)
#   /usr/src/greenboost-$VERSION/ + dkms.conf      DKMS rebuilds the module for new kernels
#   /etc/udev/rules.d/70-greenboost.rules          /dev/greenboost: group greenboost, 0660
#   /etc/modprobe.d/greenboost.conf                module parameters (all commented)
#   /etc/modules-load.d/greenboost.conf            load the module at boot (only when
#                                                  the module was installed)
#   /etc/security/limits.d/greenboost.conf         no memlock limit for the group
#   /etc/systemd/system/ollama.service.d/greenboost.conf
#                       only when an ollama.service unit exists: LD_PRELOAD for it alone
#                       (written by `greenboost service enable ollama`)
#   $PREFIX/share/greenboost/install-manifest      what uninstall removes
# and the system group `greenboost` (with the invoking sudo user in it).
#
# Never /etc/ld.so.preload: preloading into every process (what an earlier
# implementation's installer did) can freeze the boot. Programs opt in with
# `greenboost run -- CMD` or LD_PRELOAD.
#
# Environment:
#   DESTDIR=DIR              stage into DIR: no package installs, no groups, no
#                            modprobe/udevadm/systemctl/depmod/dkms; only files under DIR
#   PREFIX=/usr/local        where the CLI, shim and header go
#   KERNELRELEASE=REL        build the module for REL instead of the running kernel
#   KERNEL_HEADERS=DIR       that kernel's headers directory, when it is not installed
#                            under /lib/modules/REL/build (packagers, chroots)
#   GREENBOOST_SKIP_KMOD=1   do not build or install the module (the shim's userspace
#                            backend works without it)
#   GREENBOOST_NO_BUILD=1    install the CLI and shim already built in target/release
#   GREENBOOST_NO_APT=1      never install distribution packages; name them instead
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
DESTDIR=${DESTDIR:-}
DESTDIR=${DESTDIR%/}
PREFIX=${PREFIX:-/usr/local}
krel=${KERNELRELEASE:-$(uname -r)}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
target_dir=${CARGO_TARGET_DIR:-$root/target}/release
manifest=$PREFIX/share/greenboost/install-manifest
system_cache=/var/cache/greenboost
dkms_tree=/var/lib/dkms

say() { echo "greenboost install: $*"; }
warn() { echo "greenboost install: warning: $*" >&2; }
die() { echo "greenboost install: $*" >&2; exit 1; }
staged() { [ -n "$DESTDIR" ]; }

[ -n "$version" ] || die "cannot read the version from $root/Cargo.toml"
if ! staged && [ "$(id -u)" != 0 ]; then
  die "installing into the system needs root: run \`sudo make install\` (or stage it with DESTDIR=DIR)"
fi
if staged; then mkdir -p "$DESTDIR"; DESTDIR=$(cd "$DESTDIR" && pwd); fi

# --- the manifest: what this install created, in order ------------------------------
# Lines: "file PATH", "dir PATH" (created by us, removed when empty), "group NAME",
# "member GROUP USER", "dkms NAME/VERSION", "tree PATH" (removed recursively).
# Paths are as installed, without DESTDIR. A re-install keeps the earlier entries, so
# directories and the group created the first time are still removed at the end.
entries=()
if [ -f "$DESTDIR$manifest" ]; then
  mapfile -t entries < <(grep -v '^#' "$DESTDIR$manifest" || true)
fi
record() {
  local line="$*" e
  for e in "${entries[@]}"; do [ "$e" = "$line" ] && return 0; done
  entries+=("$line")
}
forget() {
  local line="$*" e kept=()
  for e in "${entries[@]}"; do [ "$e" = "$line" ] || kept+=("$e"); done
  entries=("${kept[@]}")
}
ensure_dir() {
  local dir=$1
  [ -d "$DESTDIR$dir" ] && return 0
  ensure_dir "$(dirname "$dir")"
  mkdir -m 0755 "$DESTDIR$dir"
  record dir "$dir"
}
# install_file MODE SOURCE DEST
install_file() {
  ensure_dir "$(dirname "$3")"
  install -m "$1" "$2" "$DESTDIR$3"
  record file "$3"
}
# install_text MODE DEST < content (not at the end of a pipe: `record` must run in
# this shell)
install_text() {
  local tmp
  tmp=$(mktemp)
  cat > "$tmp"
  install_file "$1" "$tmp" "$2"
  rm -f "$tmp"
}
write_manifest() {
  ensure_dir "$(dirname "$manifest")"
  { echo "# GreenBoost $version install manifest: scripts/uninstall.sh removes these"
    printf '%s\n' "${entries[@]}"; } > "$DESTDIR$manifest"
  chmod 0644 "$DESTDIR$manifest"
}
trap 'write_manifest' EXIT

if grep -qs greenboost /etc/ld.so.preload; then
  warn "/etc/ld.so.preload mentions greenboost (an earlier installer put it there). It loads the shim into every process and can freeze the boot. This installer never touches that file: remove the line yourself (sudo sed -i '/greenboost/d' /etc/ld.so.preload)."
fi

# The Debian packages (`make deb`) place the same commands, rules and group: one or the
# other, never both (the packages refuse to install beside this manifest likewise).
if ! staged && command -v dpkg-query >/dev/null; then
  for package in greenboost greenboost-dkms; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' \
      && die "the Debian package $package is installed: remove it first (sudo apt purge greenboost greenboost-dkms), or keep using the packages"
  done
fi

# --- distribution packages -----------------------------------------------------------
can_apt() { ! staged && [ "${GREENBOOST_NO_APT:-0}" != 1 ] && command -v apt-get >/dev/null && [ -f /etc/debian_version ]; }
package_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
package_known() { apt-cache show "$1" >/dev/null 2>&1; }
apt_updated=0
# apt_install PACKAGE...: installs the missing ones (when allowed); returns 1 when any
# is still missing afterwards, with their names in $still_missing.
still_missing=
apt_install() {
  local missing=() p
  for p in "$@"; do package_installed "$p" || missing+=("$p"); done
  still_missing="${missing[*]}"
  [ ${#missing[@]} -eq 0 ] && return 0
  can_apt || return 1
  if [ $apt_updated = 0 ]; then apt-get update -q >&2 || true; apt_updated=1; fi
  local available=()
  for p in "${missing[@]}"; do
    if package_known "$p"; then available+=("$p"); else warn "your package sources have no package '$p'"; fi
  done
  if [ ${#available[@]} -gt 0 ]; then
    say "installing ${available[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${available[@]}" >&2 \
      || warn "apt-get could not install ${available[*]}"
  fi
  still_missing=
  for p in "${missing[@]}"; do package_installed "$p" || still_missing+="${still_missing:+ }$p"; done
  [ -z "$still_missing" ]
}

# --- 1. the CLI and the shim ----------------------------------------------------------
# The checkout owner's cargo first (under sudo, root's PATH rarely has rustup's), then
# PATH, then root's.
owner=$(stat -c %U "$root")
owner_home=$(getent passwd "$owner" | cut -d: -f6)
find_cargo() {
  [ "$owner" != root ] && [ -x "$owner_home/.cargo/bin/cargo" ] && { echo "$owner_home/.cargo/bin/cargo"; return 0; }
  command -v cargo && return 0
  [ -x "$HOME/.cargo/bin/cargo" ] && { echo "$HOME/.cargo/bin/cargo"; return 0; }
  return 1
}
if [ "${GREENBOOST_NO_BUILD:-0}" != 1 ]; then
  cargo=$(find_cargo) || die "cargo is not installed: install Rust (https://rustup.rs) and run again, or build first with \`make shim cli\` and install with GREENBOOST_NO_BUILD=1"
  build=("$cargo" build --release -p greenboost-shim -p greenboost-cli)
  say "building the shim and the CLI"
  # Under sudo, build as the user who owns the checkout so target/ stays theirs.
  if [ "$(id -u)" = 0 ] && [ "$owner" != root ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
    (cd "$root" && runuser -u "$owner" -- env HOME="$owner_home" PATH="$(dirname "$cargo"):$PATH" "${build[@]}") >&2
  else
    (cd "$root" && "${build[@]}") >&2
  fi
fi
for built in greenboost libgreenboost_cuda.so; do
  [ -f "$target_dir/$built" ] || die "$target_dir/$built is missing: build it with \`make shim cli\`"
done
install_file 0755 "$target_dir/greenboost" "$PREFIX/bin/greenboost"
install_file 0755 "$target_dir/libgreenboost_cuda.so" "$PREFIX/lib/libgreenboost_cuda.so"
install_file 0644 "$root/abi/greenboost.h" "$PREFIX/include/greenboost.h"

# Manual pages and shell completions, generated by the installed CLI from its own
# command-line definition (greenboost(4): the module's parameters).
docs=$(mktemp -d)
"$DESTDIR$PREFIX/bin/greenboost" man "$docs" >/dev/null
for page in "$docs"/*.1; do install_file 0644 "$page" "$PREFIX/share/man/man1/${page##*/}"; done
install_file 0644 "$docs/greenboost.4" "$PREFIX/share/man/man4/greenboost.4"
for completion in bash:bash-completion/completions/greenboost zsh:zsh/site-functions/_greenboost \
                  fish:fish/vendor_completions.d/greenboost.fish; do
  "$DESTDIR$PREFIX/bin/greenboost" completions "${completion%%:*}" > "$docs/completion"
  install_file 0644 "$docs/completion" "$PREFIX/share/${completion#*:}"
done
rm -rf "$docs"

# --- 2. group, device access, limits, module configuration ----------------------------
group_user=
if staged; then
  say "staged install: not creating the greenboost group"
elif ! getent group greenboost >/dev/null; then
  groupadd --system greenboost
  record group greenboost
  say "created the system group greenboost"
fi
# The user who ran sudo joins the group; anyone else (every user, when root installs
# without sudo) is added by hand, which the last lines say.
if ! staged && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  if ! id -nG "$SUDO_USER" | tr ' ' '\n' | grep -qx greenboost; then
    usermod -aG greenboost "$SUDO_USER"
    record member greenboost "$SUDO_USER"
    say "added $SUDO_USER to the greenboost group (log out and in again for it to apply)"
  fi
  group_user=$SUDO_USER
fi
install_file 0644 "$root/packaging/udev/70-greenboost.rules" /etc/udev/rules.d/70-greenboost.rules
install_file 0644 "$root/packaging/modprobe.d/greenboost.conf" /etc/modprobe.d/greenboost.conf
install_file 0644 "$root/packaging/limits.d/greenboost.conf" /etc/security/limits.d/greenboost.conf

# --- 3. DKMS source tree (the same build as `make kmod`) ------------------------------
src_dir=/usr/src/greenboost-$version
dkms_sources=(Kbuild kmod abi/src abi/greenboost.h scripts/lib.sh scripts/build-kmod.sh
              scripts/build-stock-tree.sh scripts/check-config-diff.sh scripts/check-layout.py
              scripts/check-module-imports.py scripts/kbuild scripts/kernel-patches
              packaging/dkms/dkms-build.sh LICENSE-GPL2)
for path in "${dkms_sources[@]}"; do
  [ -e "$root/$path" ] || continue
  while IFS= read -r file; do
    mode=0644; [ -x "$root/$file" ] && mode=0755
    install_file "$mode" "$root/$file" "$src_dir/$file"
  done < <(cd "$root" && find "$path" -type f ! -name '*.o' ! -name '*.ko' ! -name '*.cmd' ! -name '*.mod' \
              ! -name '*.mod.c' ! -name '*.rmeta' ! -name modules.order ! -name Module.symvers \
              ! -name '*.pyc' ! -path '*/__pycache__/*' | sort)
done
install_text 0644 "$src_dir/dkms.conf" < <(sed "s/@VERSION@/$version/" "$root/packaging/dkms/dkms.conf.in")

# --- 4. the module for the running kernel ---------------------------------------------
module_note=
kernel_series=$(echo "${krel%%[-+]*}" | cut -d. -f1-2)
kmod_packages=(rustc-web rust-web-src clang lld llvm libclang-dev flex bison bc
               libelf-dev libssl-dev cpio xz-utils make gcc libc6-dev kmod dwarves python3)
config=${KERNEL_HEADERS:-/lib/modules/$krel/build}/.config
[ -f "$config" ] || config=/boot/config-$krel
[ -n "${KERNEL_HEADERS:-}" ] || kmod_packages+=("linux-headers-$krel")
grep -qs '^CONFIG_RUST=y' "$config" || kmod_packages+=("linux-source-$kernel_series")
# A kernel built without CONFIG_MODULES loads no module: nothing to build, install or
# register with DKMS for it. The running one says so by having no /proc/modules.
modules_unsupported() {
  if [ "$krel" = "$(uname -r)" ] && [ ! -e /proc/modules ]; then
    echo "no /proc/modules"
  elif [ -f "$config" ] && ! grep -qs '^CONFIG_MODULES=y' "$config"; then
    echo "CONFIG_MODULES is off in $config"
  else
    return 1
  fi
}
module_support=1
. "$root/scripts/install-dkms.sh"
install_module() {
  if [ "${GREENBOOST_SKIP_KMOD:-0}" = 1 ]; then
    module_note="module not built (GREENBOOST_SKIP_KMOD=1)"
    return 0
  fi
  local why
  if why=$(modules_unsupported); then
    module_support=0
    module_note="kernel $krel cannot load modules ($why: it was built without CONFIG_MODULES), so no module was built, installed or registered with DKMS for it"
    return 1
  fi
  if [ -f /etc/debian_version ] && command -v dpkg-query >/dev/null; then
    if ! apt_install "${kmod_packages[@]}" dkms; then
      if staged || [ "${GREENBOOST_NO_APT:-0}" = 1 ]; then
        warn "the module build for $krel needs packages that are not installed: sudo apt-get install $still_missing"
      else
        warn "could not install $still_missing, which the module build for $krel needs. A custom kernel: build against its tree with \`make kmod KDIR=/path/to/build\`"
      fi
    fi
  fi
  say "building the module for $krel; the first build takes several minutes (it installs bindgen and prepares a private kernel tree, both cached for later builds)"
  # The module build installs bindgen with cargo the first time.
  [ -n "${cargo:-}" ] && export PATH="$PATH:$(dirname "$cargo")"
  if ! staged && [ ! -d "$system_cache" ]; then record tree "$system_cache"; fi
  if ! staged && command -v dkms >/dev/null; then
    # DKMS builds from /usr/src/greenboost-$version for this kernel and every later one.
    dkms_install_module
    return
  fi
  # A staged install builds like `make kmod`, with the builder's own cache and the
  # checkout's build/; a system install (as root) keeps its build out of the checkout.
  local cache=$system_cache out=(--out "$system_cache/build/$krel") ko
  if staged; then cache=${GREENBOOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/greenboost}; out=(); fi
  local headers=()
  [ -n "${KERNEL_HEADERS:-}" ] && headers=(--headers "$KERNEL_HEADERS")
  if ! ko=$(GREENBOOST_CACHE=$cache "$root/scripts/build-kmod.sh" --kernelrelease "$krel" "${headers[@]}" "${out[@]}" | grep '/greenboost\.ko$' | tail -1) || [ -z "$ko" ]; then
    module_note="the module could not be built for $krel (see above)"
    return 1
  fi
  install_file 0644 "$ko" "/lib/modules/$krel/extra/greenboost.ko"
  module_note="module installed for $krel in /lib/modules/$krel/extra (install dkms to have it rebuilt for new kernels)"
}
module_ok=1
install_module || module_ok=0
# Load at boot only a module that is installed: a modules-load.d entry for a missing
# module makes systemd-modules-load.service fail at every boot.
if [ $module_ok = 1 ] && [ "${GREENBOOST_SKIP_KMOD:-0}" != 1 ]; then
  install_file 0644 "$root/packaging/modules-load.d/greenboost.conf" /etc/modules-load.d/greenboost.conf
fi

# --- 5. ollama, only if it is installed as a systemd service --------------------------
ollama_unit=
for dir in /etc/systemd/system /lib/systemd/system /usr/lib/systemd/system "$PREFIX/lib/systemd/system"; do
  [ -f "$DESTDIR$dir/ollama.service" ] && { ollama_unit=$dir/ollama.service; break; }
done
if [ -z "$ollama_unit" ] && ! staged && command -v systemctl >/dev/null \
   && systemctl cat ollama.service >/dev/null 2>&1; then
  ollama_unit=ollama.service
fi
if [ -n "$ollama_unit" ]; then
  # The drop-in is `greenboost service enable`'s, as for any service. --report combined
  # tells ollama the GPU has VRAM + T2, so that it places every layer on the GPU and
  # the shim backs what does not fit in VRAM with pinned RAM (`physical` lets ollama
  # split layers between GPU and CPU as it would without GreenBoost); --log info puts
  # the tier split at exit in the journal (journalctl -u ollama). Staged, or without
  # systemctl, the CLI writes the file under the root and asks systemd nothing.
  dropin=/etc/systemd/system/ollama.service.d/greenboost.conf
  ensure_dir "$(dirname "$dropin")"
  enable=("$DESTDIR$PREFIX/bin/greenboost" service enable ollama --report combined --log info
          --shim "$PREFIX/lib/libgreenboost_cuda.so")
  if staged || ! command -v systemctl >/dev/null; then enable+=(--root "${DESTDIR:-/}"); fi
  env -u GREENBOOST_SYSTEMD_DIR "${enable[@]}" >/dev/null || die "\`greenboost service enable ollama\` failed (see above)"
  record file "$dropin"
  say "ollama.service found ($ollama_unit): it will run under GreenBoost after \`sudo systemctl restart ollama\`; any other service: \`sudo greenboost service enable UNIT\`"
fi

# --- 6. activate (not when staging) ---------------------------------------------------
if ! staged; then
  command -v udevadm >/dev/null && udevadm control --reload-rules || true
  # depmod for the kernel we installed into (when it is installed here: it has its
  # modules.dep), modprobe only when that kernel is the running one.
  if [ $module_ok = 1 ] && [ "${GREENBOOST_SKIP_KMOD:-0}" != 1 ] && [ -f "/lib/modules/$krel/modules.dep" ]; then
    depmod -a "$krel"
  fi
  if [ $module_ok = 1 ] && [ "${GREENBOOST_SKIP_KMOD:-0}" != 1 ] && [ "$krel" = "$(uname -r)" ]; then
    if lsmod | grep -q '^greenboost '; then
      modprobe -r greenboost 2>/dev/null \
        || warn "the previously loaded greenboost module is in use; the new one loads after a reboot (or after \`sudo modprobe -r greenboost\` once nothing uses it)"
    fi
    if ! lsmod | grep -q '^greenboost '; then
      if out=$(modprobe greenboost 2>&1); then
        command -v udevadm >/dev/null && udevadm trigger --action=add --subsystem-match=misc --sysname-match=greenboost || true
      elif grep -qi 'key was rejected\|required key\|signature' <<<"$out"; then
        warn "the kernel refused the unsigned module (Secure Boot): $out. Enroll DKMS's key with \`sudo mokutil --import /var/lib/dkms/mok.pub\` and reboot, or sign greenboost.ko yourself (README, \"Secure Boot\")"
      else
        warn "modprobe greenboost failed: $out ($(dmesg 2>/dev/null | grep greenboost | tail -1))"
      fi
    fi
  fi
fi

say "installed GreenBoost $version into ${DESTDIR:-/} (manifest $manifest)"
say "$module_note"
if [ $module_ok != 1 ]; then
  needs=
  [ $module_support = 1 ] && needs="; \`greenboost doctor\` lists what the module build needs"
  say "meanwhile the shim uses its userspace backend (pinned memory without the module)$needs"
fi
[ -n "$group_user" ] || say "the greenboost group's members may open /dev/greenboost and lock memory without limit; add each user of the GPU: \`sudo usermod -aG greenboost USER\` (as root: \`usermod -aG greenboost USER\`), then they log in again"
say "next: greenboost demo    (or: greenboost run -- YOUR_PROGRAM)"
