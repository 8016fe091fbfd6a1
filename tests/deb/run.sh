#!/usr/bin/env bash
# make deb-test (part of `make test`; root): the Debian packages, built, installed, used
# and purged. Ends with `N passed, M failed`.
#   1. make deb (packaging/deb/build.sh) and the packages' contents: the files
#      scripts/install.sh stages, stripped binaries with their debug symbols, conffiles,
#      the dkms package's dependencies;
#   2. in a fresh Debian 12 root (debootstrap, cached: tests/deb/make-root.sh), under
#      unshare --mount --pid --fork + chroot: tests/deb/root-suite.sh (dpkg -i, a
#      fake-CUDA program under `greenboost run`, status --prometheus, containers' /dev/shm
#      and pids, apt purge, the Python package's wheel installed and tested, the root's
#      file list as before);
#   3. the packaged module built by the real dkms and loaded in the stock QEMU guest
#      (tests/deb/dkms-build.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/lib.sh
[ "$(id -u)" = 0 ] || { echo "make deb-test needs root (debootstrap, chroot, unshare)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d /tmp/greenboost-deb-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 t0=$(date +%s)
check() {
  local what=$1; shift
  if "$@" >"$work/check.out" 2>&1; then passed=$((passed + 1)); echo "ok   $what"
  else failed=$((failed + 1)); echo "FAIL $what"; sed 's/^/     /' "$work/check.out" | head -20; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
stage() { echo "--- $1 ($(( $(date +%s) - t0 )) s)"; }

# --- 1. the packages -----------------------------------------------------------------------
stage "make deb"
debs=$work/debs
check "make deb builds greenboost, greenboost-dkms and greenboost-dbgsym" packaging/deb/build.sh "$debs"
[ "$failed" = 0 ] || finish
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
main=$debs/greenboost_${version}_$arch.deb dkms_deb=$debs/greenboost-dkms_${version}_all.deb
dbg=$debs/greenboost-dbgsym_${version}_$arch.deb
mkdir -p "$work/x/main" "$work/x/dkms" "$work/x/dbg"
dpkg-deb -x "$main" "$work/x/main"; dpkg-deb -x "$dkms_deb" "$work/x/dkms"; dpkg-deb -x "$dbg" "$work/x/dbg"
files_in() { (cd "$1" && find . -type f -o -type l | sed 's#^\./#/#' | sort); }

# The packages hold exactly what `make install` stages (PREFIX=/usr, no module), with
# make deb's three adaptations (build.sh's header) and the packages' copyright files.
DESTDIR=$work/staged PREFIX=/usr GREENBOOST_SKIP_KMOD=1 GREENBOOST_NO_BUILD=1 GREENBOOST_NO_APT=1 \
  scripts/install.sh > "$work/staged.log" 2>&1
check "the packages hold make install's files: same list, adapted as build.sh says" diff \
  <(files_in "$work/staged" | grep -v '^/usr/share/greenboost/install-manifest$' \
      | sed 's#/zsh/site-functions/#/zsh/vendor-completions/#; s#^\(/usr/share/man/.*\)$#\1.gz#' | sort) \
  <({ files_in "$work/x/main"; files_in "$work/x/dkms"; } | grep -v '^/usr/share/doc/\|^/usr/share/greenboost-dkms/' | sort)
check "the module's source tree is byte for byte make install's" diff -r "$work/staged/usr/src" "$work/x/dkms/usr/src"
for elf in usr/bin/greenboost usr/lib/libgreenboost_cuda.so; do
  id=$(readelf -n "$work/x/main/$elf" | sed -n 's/^ *Build ID: //p')
  debug=$work/x/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  check "$elf is stripped, with a debuglink to its symbols" bash -c "
    ! readelf -S '$work/x/main/$elf' | grep -q '\.debug_info' && readelf -S '$work/x/main/$elf' | grep -q '\.gnu_debuglink'"
  check "greenboost-dbgsym has $elf's debug info under its build ID ${id:0:8}..." \
    bash -c "readelf -S '$debug' | grep -q '\.debug_info' && readelf -n '$debug' | grep -q 'Build ID: $id'"
done
check "the stripped CLI is under 4 MB (it was 10.9 MB with its debug info)" \
  test "$(stat -c %s "$work/x/main/usr/bin/greenboost")" -lt 4000000
check "the debug files keep the symbol tables (function names for gdb and perf)" bash -c \
  "objdump -t $work/x/dbg/usr/lib/debug/.build-id/*/*.debug | grep -q 'greenboost'"
check "greenboost depends on libc6 (>= 2.34) (the shim's glibc)" bash -c \
  "dpkg-deb -f '$main' Depends | grep -q 'libc6 (>= 2.34)'"
kmod_packages=$(sed -n '/^kmod_packages=(/,/)/p' scripts/install.sh | sed 's/.*(//; s/).*//' | xargs)
check "greenboost-dkms depends on dkms and every package make install's module build installs" bash -c "
  deps=\$(dpkg-deb -f '$dkms_deb' Depends | tr ',' '\n' | sed 's/ *(.*//; s/^ *//')
  for p in dkms $kmod_packages; do grep -qx \"\$p\" <<<\"\$deps\" || { echo \"missing \$p\"; exit 1; }; done"
check "maintainer scripts parse" bash -c "
  for p in '$main' '$dkms_deb'; do d=\$(mktemp -d); dpkg-deb -e \"\$p\" \"\$d\"
    for s in \"\$d\"/{pre,post}{inst,rm}; do [ -f \"\$s\" ] || continue
      \$(head -1 \"\$s\" | sed 's/^#!//') -n \"\$s\" || exit 1; done; rm -rf \"\$d\"; done"

# --- 2. in a debootstrap root ---------------------------------------------------------------
stage "fake CUDA and the Debian 12 root"
check "the fake CUDA libraries and programs build (tests/fakecuda/build.sh)" \
  tests/fakecuda/build.sh "$work/fakecuda"
rm -rf "$work/fakecuda/.build"
check "a fresh Debian 12 root (debootstrap, cached)" tests/deb/make-root.sh "$work/root"
check "the Python package's wheel builds (tests/python-package/build-wheel.sh)" \
  tests/python-package/build-wheel.sh "$work/wheel"
[ "$failed" = 0 ] || finish
stage "in the root"
unshare --mount --pid --fork --propagation private tests/deb/root-suite.sh "$work/root" "$debs" "$work/fakecuda" \
  "$work/wheel" \
  | tee "$work/root-suite.log"
counts=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$work/root-suite.log" | tail -1)
if [ -z "$counts" ]; then echo "FAIL the root suite did not finish"; failed=$((failed + 1))
else passed=$((passed + ${counts% *})); failed=$((failed + ${counts#* })); fi

# --- 3. the packaged module: DKMS build, stock guest ---------------------------------------
stage "the packaged module"
. tests/deb/dkms-build.sh
stage "done"
finish
