#!/usr/bin/env bash
# Clippy gate for kmod/: builds greenboost.ko with the kernel's own clippy setup
# (KBUILD_CLIPPY=1: clippy-driver in place of rustc, with the lints the kernel's
# Makefile enables) and fails on any warning or error.
#
# Usage: check-kmod-clippy.sh [--kdir DIR]
#   --kdir   a Rust-enabled kernel build directory (default: the QEMU suite's test
#            kernel from scripts/build-test-kernel.sh, built first if not cached)
# Environment: CLIPPY_DRIVER (default /usr/bin/clippy-driver). It must be the clippy of
# the kernel's rustc ($KRUSTC, Debian's rustc-web): Debian ships it as rust-web-clippy
# (apt-get install rust-web-clippy); rustup's clippy cannot read the kernel's crates
# ("compiled by an incompatible version of rustc"). Only the ordinary (Rust-enabled
# kernel) build is linted; the self-contained build compiles the same sources.
# Prints the warnings and `kmod-clippy: N passed, M failed`; exit status 1 on failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

kdir=
while [ $# -gt 0 ]; do
  case $1 in
    --kdir) kdir=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "check-kmod-clippy.sh: unknown argument '$1' (see --help)" ;;
  esac
done
driver=${CLIPPY_DRIVER:-/usr/bin/clippy-driver}
[ -x "$driver" ] || die "$driver missing: apt-get install rust-web-clippy (the clippy of $KRUSTC)"
want=$("$KRUSTC" --version | awk '{print $2}')            # 1.96.0
have=$("$driver" --version | awk '{print $2}')             # 0.1.96
[ "${have#0.}" = "${want%.*}" ] || [ "0.${want%.*}" = "$have" ] \
  || die "$driver is clippy $have, the kernel's rustc is $want: they must match"
[ -n "$kdir" ] || kdir=$("$GB_ROOT/scripts/build-test-kernel.sh") || die "no test kernel"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The kernel's Makefile runs `clippy-driver` from PATH when KBUILD_CLIPPY=1.
PATH=$(dirname "$driver"):$PATH KBUILD_CLIPPY=1 "$GB_ROOT/scripts/build-kmod.sh" --kdir "$kdir" --out "$out" >/dev/null 2>"$out/stderr"
rc=$?
log=$out/build.log
grep -q 'CLIPPY \[M\]' "$log" 2>/dev/null || { cat "$out/stderr" >&2; echo "kmod-clippy: 0 passed, 1 failed (clippy did not run)"; exit 1; }
findings=$(grep -E '^(warning|error)(\[|:)' "$log" | grep -vE '^(warning|error): [0-9]+ (warning|error)s? emitted' | wc -l)
if [ $rc -ne 0 ] || [ "$findings" -ne 0 ]; then
  grep -vE '^(make|  [A-Z]+ |  LD|  CC|  MODPOST)' "$log"
  echo "kmod-clippy: 0 passed, 1 failed ($findings findings, build status $rc)"
  exit 1
fi
echo "kmod-clippy: 1 passed, 0 failed (greenboost.ko linted for $(cat "$kdir/include/config/kernel.release"), no findings)"
