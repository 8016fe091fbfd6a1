#!/usr/bin/env bash
# Run here (not on the device) before a device call of `make bench`: builds the shim
# and stages what bench/run.sh needs from this machine in build/bench-carry/, which git
# ignores and the device call names in its carry list:
#   build/bench-carry/libgreenboost_cuda.so   the shim (the device has no cargo)
#   build/bench-carry/python/gbgpu/           python/gbgpu, the Python helpers of
#       tiering.py and the probes (the shim's counters, whose layout must be this shim's):
#       PYTHONPATH=build/bench-carry/python on the device
#   build/bench-carry/launch_ab_probe         bench/probes/launch_ab_probe.c, built
#   build/bench-carry/commit                  the commit measured (the device gets no .git)
set -euo pipefail
cd "$(dirname "$0")/.."
carry=build/bench-carry
mkdir -p "$carry"
cargo build --release -p greenboost-shim
# Debug info stays in target/; the carried copy is stripped to keep the transfer small.
objcopy --strip-debug target/release/libgreenboost_cuda.so "$carry/libgreenboost_cuda.so"
# The sources only (no __pycache__), afresh so that a removed module does not linger.
rm -rf "$carry/python"
mkdir -p "$carry/python/gbgpu"
cp python/gbgpu/*.py "$carry/python/gbgpu/"
cc -O2 -o "$carry/launch_ab_probe" bench/probes/launch_ab_probe.c -ldl -lpthread
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- shim abi bench python Cargo.toml Cargo.lock || commit="$commit-dirty"
echo "$commit" >"$carry/commit"
echo "staged $carry: $(ls "$carry" | tr '\n' ' ')(commit $commit)"
