#!/usr/bin/env bash
# Launch observation's cost, shim against shim (a probe; bench/run.sh's launch figures
# compare one shim with none): gbbench launch from 1 thread, without a shim and under each
# shim given, in rounds (the order turns each round), one process per measurement.
# Usage (on the GPU machine): bench/probes/launch_shims_probe.sh ROUNDS SHIM.so...
# Prints one line per run: label, then gbbench's JSON.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
rounds=${1:?usage: $0 ROUNDS SHIM.so...}
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cuda_home=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
rpath=()
for dir in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib" "$cuda_home/lib"; do
    [[ -d $dir ]] && rpath+=(-Xlinker -rpath -Xlinker "$dir")
done
nvcc -O3 -std=c++17 -arch=sm_90 -cudart shared "${rpath[@]}" -o "$work/gbbench" bench/gbbench.cu || exit 1
labels=(none "$@")
for r in $(seq "$rounds"); do
    for i in "${!labels[@]}"; do
        label=${labels[(i + r) % ${#labels[@]}]}
        if [[ $label == none ]]; then
            out=$("$work/gbbench" launch --threads 1 --iters 200000)
        else
            out=$(LD_PRELOAD=$(realpath "$label") GREENBOOST_BACKEND=userspace GREENBOOST_LOG=warn \
                "$work/gbbench" launch --threads 1 --iters 200000)
        fi
        echo "$(basename "$label") $out"
    done
done
