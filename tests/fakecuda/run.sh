#!/bin/bash
# make shim-test: builds the shim, the fake CUDA libraries and the test programs, and
# runs the suite (run-tests.sh) with no GPU.
#
#   tests/fakecuda/run.sh [--kmod] [TEST...]     build into target/fakecuda and run
#   tests/fakecuda/run.sh --build-only OUTDIR    build a self-contained directory
#       (lib/ with the fakes and libgreenboost_cuda.so, bin/, run-tests.sh,
#       kmod-tests.list, run.sh) to copy into a guest; there `OUTDIR/run.sh` runs the
#       kmod-tagged tests against the module.
# The sources: fakes/ (the fake libraries; fakes/gpu/ the simulated device) and
# programs/ (the test programs), compiled by build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cargo=${CARGO:-cargo}

# Every step says `|| return`: called as `if ! build`, the function runs without errexit,
# so a failed step would otherwise go on to the next and the suite would run without it.
build() {
    local out=$1
    # With the lock-order check (shim/src/sys/lock_order.rs), in a target directory of
    # its own: target/release keeps the shim that is installed and shipped, without it.
    (cd "$root" && "$cargo" build --release -p greenboost-shim --features lock-order \
        --target-dir "$root/target/lock-order") || return
    "$here/build.sh" "$out" || return
    cp "$root/target/lock-order/release/libgreenboost_cuda.so" "$out/lib/libgreenboost_cuda.so" || return
    cp "$here/run-tests.sh" "$here/gemm-tests.sh" "$here/headroom-tests.sh" "$here/tier-tests.sh" "$here/devices-tests.sh" "$here/launch-tests.sh" "$here/kmod-tests.list" "$out/" || return
    cp "$here/guest-run.sh" "$out/run.sh" || return
    chmod +x "$out/run-tests.sh" "$out/run.sh" || return
    rm -rf "$out/.build"
}

if [ "${1:-}" = "--build-only" ]; then
    [ $# -eq 2 ] || { echo "usage: $0 --build-only OUTDIR" >&2; exit 2; }
    mkdir -p "$2"
    build "$(cd "$2" && pwd)"
    exit 0
fi

# A directory of its own per run: concurrent runs (make test in two checkouts' worth
# of terminals) must not delete each other's binaries.
mkdir -p "$root/target/fakecuda"
out=$(mktemp -d "$root/target/fakecuda/run.XXXXXX")
trap 'rm -rf "$out"' EXIT
if ! build "$out" >"$out.build.log" 2>&1; then
    tail -n 30 "$out.build.log"
    echo "FAIL build: see $out.build.log"
    echo "0 passed, 1 failed"
    exit 1
fi
rm -f "$out.build.log"
"$out/run-tests.sh" "$@"
