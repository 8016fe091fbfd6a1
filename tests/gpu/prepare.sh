#!/usr/bin/env bash
# Builds what the GPU suite runs, on a machine with cargo, and puts it in build/gpu-carry/
# (ignored by git) for the GPU machine, which has no cargo:
#   libgreenboost_cuda.so   the shim (cargo build --release -p greenboost-shim)
#   gb-gpu-check            the suite's CUDA program (tests/gpu/cuda-check)
#   python/gbgpu/           the Python helpers the suite's programs import (python/gbgpu:
#                           the shim's counters, whose layout must be this shim's)
#   COMMIT                  the commit these were built from (+ "-dirty" with local changes)
# Usage: tests/gpu/prepare.sh [--control]   (--control: without the shim, for
# GB_GPU_MODE=control runs before the shim builds)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry=build/gpu-carry
cargo=${CARGO:-cargo}

mkdir -p "$carry"
rm -f "$carry/libgreenboost_cuda.so" "$carry/gb-gpu-check" "$carry/COMMIT"
rm -rf "$carry/python"

if [ "${1:-}" != --control ]; then
  "$cargo" build --release -p greenboost-shim
  # Debug info stays in target/; the carried copy is stripped to keep the transfer small.
  objcopy --strip-debug target/release/libgreenboost_cuda.so "$carry/libgreenboost_cuda.so"
fi

# Its own workspace and lock file, built into target/gpu-check (ignored by git).
(cd tests/gpu/cuda-check && CARGO_TARGET_DIR="$root/target/gpu-check" "$cargo" build --release --locked)
objcopy --strip-debug target/gpu-check/release/gb-gpu-check "$carry/gb-gpu-check"
# The sources only (no __pycache__); run.sh puts $carry/python on PYTHONPATH.
mkdir -p "$carry/python/gbgpu"
cp python/gbgpu/*.py "$carry/python/gbgpu/"

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- shim abi tests/gpu python 2>/dev/null; then
  commit=$commit-dirty
fi
echo "$commit" >"$carry/COMMIT"
ls -l "$carry"
echo "carry $carry to the GPU machine and run: bash tests/gpu/run.sh"
