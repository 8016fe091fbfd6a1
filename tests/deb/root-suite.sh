#!/usr/bin/env bash
# root-suite.sh ROOT DEBS FAKECUDA WHEEL: make deb-test's checks in a fresh Debian 12 root
# (tests/deb/run.sh runs it under `unshare --mount --pid --fork`: every mount below is
# this namespace's and goes with it). Prints ok/FAIL lines and `N passed, M failed`.
#   ROOT      the unpacked debootstrap root (tests/deb/make-root.sh)
#   DEBS      make deb's packages
#   FAKECUDA  tests/fakecuda/build.sh's output: lib/ (the fake CUDA libraries), bin/
#   WHEEL     a directory holding the Python package's wheel (build-wheel.sh)
#
# Inside the root: the refusal beside a `make install` manifest, `dpkg -i`, the group
# and the installing user in it, `greenboost run` of a fake-CUDA program (gbballoon:
# cuMemAlloc past the VRAM budget, so into T2) and `status --prometheus` seeing it,
# the same program in "containers" (tests/deb/containers.sh), `service enable`, `apt
# remove` and `apt purge` (drop-ins, swap files, /dev/shm records, group), the dkms
# package's scripts with a stand-in dkms, the Python package's wheel installed into a
# venv of the root's python3 and its tests run there (tests/python-package/installed.sh),
# and the root's file list before and after.
set -uo pipefail
root=$1 debs=$2 fakecuda=$3 wheel=$4
here=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0
out=$root/tmp/check.out
check() {
  local what=$1; shift
  if "$@" >"$out" 2>&1; then passed=$((passed + 1)); echo "ok   $what"
  else failed=$((failed + 1)); echo "FAIL $what"; sed 's/^/     /' "$out" | head -20; fi
}
# in_root CMD...: CMD in the root with a clean environment, as root (dpkg, apt, the CLI)
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# --- the machine around the root: /proc of this pid namespace, a /dev with a /dev/shm
# of its own, /tmp and /run as tmpfs, the fake CUDA and the packages under /mnt --------
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755 dev "$root/dev"
for node in null zero full random urandom tty; do
  touch "$root/dev/$node"; mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir "$root/dev/shm" "$root/dev/pts"
mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
for i in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${i%%:*}" "$root/dev/${i#*:}"; done
mount -t tmpfs -o mode=1777 tmp "$root/tmp"
mount -t tmpfs -o mode=0755 run "$root/run"
mkdir -p "$root/run/lock"
mount -t tmpfs -o mode=0755 mnt "$root/mnt"
mkdir "$root/mnt/fakecuda" "$root/mnt/debs" "$root/mnt/wheel" "$root/mnt/src"
mount --bind -o ro "$fakecuda" "$root/mnt/fakecuda"
mount --bind -o ro "$wheel" "$root/mnt/wheel"
mount --bind -o ro "$here/../.." "$root/mnt/src"
cp "$debs"/*.deb "$root/mnt/debs/"
version=$(dpkg-deb -f "$debs"/greenboost_*.deb Version)

# --- the file list: type, mode, owner and (files, links) size of everything on the
# root's filesystem. Left out, each because it records the installation itself or is
# rewritten whatever the packages do:
#   /var/lib/dpkg/status-old, /var/lib/dpkg/available-old: dpkg's backup copies of its
#       database from before its last run (the database itself, status and available,
#       is compared: a purged package leaves no entry)
#   /var/lib/dpkg/triggers/Unincorp: dpkg's trigger queue, rewritten on every run
#   /var/log/dpkg.log, /var/log/apt/: the logs of the install and purge
#   /var/cache/apt/*.bin: apt's caches of the package lists, rebuilt when dpkg's status
#       changes (apt's own cache, no package's file)
#   /var/cache/debconf/*-old: debconf's backups, rewritten by every run that loads it
#   /var/lib/apt/extended_states: apt's record of the packages it installed as
#       dependencies, which its first removal creates (checked apart: it names no
#       package of ours)
#   /etc/group-, /etc/gshadow-: the backups shadow's groupadd/groupdel write of the
#       previous /etc/group and /etc/gshadow (those two are compared)
snapshot() {
  (cd "$root" && find . -xdev \( -path ./var/lib/dpkg/status-old -o -path ./var/lib/dpkg/available-old \
      -o -path ./var/lib/dpkg/triggers/Unincorp -o -path ./var/log/dpkg.log -o -path ./var/log/apt \
      -o -path './var/cache/apt/*.bin' -o -path './var/cache/debconf/*-old' \
      -o -path ./var/lib/apt/extended_states -o -path ./etc/group- -o -path ./etc/gshadow- \) -prune \
      -o -type d -printf '%y %m %U:%G %p\n' -o -printf '%y %m %U:%G %s %p %l\n' | sort -k5)
}
# A user who "ran sudo apt install", a unit to enable the shim for, a drop-in of another
# tool that purge must keep: made before the first list, removed after the last.
in_root useradd --no-create-home gbuser
mkdir -p "$root/etc/systemd/system/other.service.d"
printf '[Service]\nExecStart=/bin/true\n' > "$root/etc/systemd/system/ollama.service"
printf '[Service]\nEnvironment=NOT_OURS=1\n' > "$root/etc/systemd/system/other.service.d/greenboost.conf"
snapshot > "$root/tmp/files-before"

# --- 1. both packages refuse to install beside make install's manifest -----------------
manifest=/usr/local/share/greenboost/install-manifest
mkdir -p "$root${manifest%/*}"
echo "# GreenBoost install manifest" > "$root$manifest"
for p in greenboost greenboost-dkms; do
  deb=$(cd "$debs" && ls "${p}"_*.deb)
  check "$p refuses to install while make install's manifest exists, naming \`make uninstall\`" bash -c "
    out=\$(chroot '$root' dpkg -i --force-depends /mnt/debs/$deb 2>&1); rc=\$?; echo \"\$out\"
    [ \$rc -ne 0 ] && grep -q 'sudo make uninstall' <<<\"\$out\" && grep -q '$manifest' <<<\"\$out\""
  check "after the refusal $p is not installed" bash -c \
    "! chroot '$root' dpkg-query -W -f='\${Status}' $p 2>/dev/null | grep -q 'ok installed'"
done
rm -rf "$root/usr/local/share/greenboost"

# --- 2. dpkg -i, as `sudo dpkg -i` by gbuser --------------------------------------------
check "dpkg -i greenboost succeeds" in_root SUDO_USER=gbuser dpkg -i "/mnt/debs/greenboost_${version}_$(dpkg --print-architecture).deb"
cat "$out" | sed 's/^/     | /'
check "postinst created the system group greenboost, with the installing user in it" bash -c "
  chroot '$root' getent group greenboost | grep -q ':gbuser\$' && [ \$(chroot '$root' getent group greenboost | cut -d: -f3) -lt 1000 ]"
check "the CLI runs: greenboost --version" bash -c "chroot '$root' greenboost --version | grep -q '^greenboost $version '"
check "installed: shim, CLI, rules, limits, man pages, completions; no install manifest" bash -c "
  cd '$root' && ls usr/bin/greenboost usr/lib/libgreenboost_cuda.so etc/udev/rules.d/70-greenboost.rules \
    etc/security/limits.d/greenboost.conf etc/modprobe.d/greenboost.conf usr/share/man/man1/greenboost.1.gz \
    usr/share/man/man4/greenboost.4.gz usr/share/bash-completion/completions/greenboost \
    usr/share/zsh/vendor-completions/_greenboost && [ ! -e usr/share/greenboost ]"
check "the udev rule, limits and modprobe.d are conffiles" bash -c "
  [ \$(chroot '$root' dpkg-query -W -f='\${Conffiles}' greenboost | grep -c '^ /etc/') = 3 ]"

# --- 3. greenboost run of a fake-CUDA program, seen by status --prometheus ---------------
. "$here/containers.sh"

# --- 4. service enable, then apt remove and apt purge ------------------------------------
# --root /: write the drop-in without asking systemd, which a chroot has not running
# (--root asks for the shim's path on that system).
check "greenboost service enable ollama writes the drop-in" bash -c "
  chroot '$root' greenboost service enable ollama --report combined --root / --shim /usr/lib/libgreenboost_cuda.so;
  grep -q 'LD_PRELOAD=/usr/lib/libgreenboost_cuda.so' '$root/etc/systemd/system/ollama.service.d/greenboost.conf'"
# What the tools leave at run time, for purge: a swap file `greenboost swap add` recorded
# (a plain file here: not active, so no swapoff), the record of a killed process.
mkdir -p "$root/var/lib/greenboost"
head -c 65536 /dev/zero > "$root/var/lib/greenboost/t3.swap"
printf '# swap files\n/var/lib/greenboost/t3.swap\n' > "$root/var/lib/greenboost/swapfiles"
touch "$root/dev/shm/greenboost-shim.999999"
check "apt-get remove greenboost succeeds" in_root apt-get remove -y greenboost
cp "$out" "$root/tmp/remove.out"
check "remove keeps the drop-in and says that purge removes it" bash -c "
  [ -f '$root/etc/systemd/system/ollama.service.d/greenboost.conf' ] && grep -q 'kept /etc/systemd/system/ollama.service.d/greenboost.conf' '$root/tmp/remove.out'"
check "apt-get purge greenboost succeeds" in_root apt-get purge -y greenboost
cp "$out" "$root/tmp/purge.out"
sed 's/^/     | /' "$root/tmp/purge.out" | grep 'greenboost:'
check "purge removed the drop-in service enable wrote, and its directory" test ! -e "$root/etc/systemd/system/ollama.service.d"
check "purge kept another tool's drop-in of the same name" test -f "$root/etc/systemd/system/other.service.d/greenboost.conf"
check "purge removed the recorded swap file and the record" test ! -e "$root/var/lib/greenboost"
check "purge removed a dead process's record from /dev/shm" test ! -e "$root/dev/shm/greenboost-shim.999999"
check "purge removed the group it created (and gbuser's membership)" bash -c \
  "! chroot '$root' getent group greenboost && ! grep -q greenboost '$root/etc/group' '$root/etc/gshadow'"

# --- 5. greenboost-dkms's scripts, with a stand-in dkms ----------------------------------
. "$here/dkms-scripts.sh"

# --- 6. the Python package: its wheel in a venv of the root's python3, its tests there ----
in_root bash /mnt/src/tests/python-package/installed.sh /mnt/wheel/"$(cd "$wheel" && ls greenboost-*.whl)" \
  > "$root/tmp/python.out" 2>&1
grep -Ev '^[0-9]+ passed, [0-9]+ failed$' "$root/tmp/python.out" | sed 's/^\(ok\|FAIL\)\( *\)/\1\2python: /'
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$root/tmp/python.out" | tail -1)
if [ -n "$summary" ]; then
  passed=$((passed + ${summary%% *})); f=${summary##*, }; failed=$((failed + ${f%% *}))
else
  failed=$((failed + 1)); echo "FAIL python: installed.sh ended without its summary"
fi

# --- 7. the root as it was ----------------------------------------------------------------
check "apt's extended_states names no GreenBoost package" bash -c "! grep -qs greenboost '$root/var/lib/apt/extended_states'"
snapshot > "$root/tmp/files-after"
check "the root's file list (type, mode, owner, size) is as before the install" \
  diff "$root/tmp/files-before" "$root/tmp/files-after"
in_root userdel gbuser
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
