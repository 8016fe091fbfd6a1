#!/usr/bin/env bash
# llama.cpp vs GreenBoost on a GPU machine: llama-bench pp512/tg128 on a random-weight
# Llama-3-8B-shaped F16 GGUF (~16 GB) that does not fit an 8 GiB VRAM budget, in three
# configurations: (a) all in VRAM, the reference; (b) llama.cpp's own partial offload,
# -ngl fitted to the budget; (c) -ngl 99 under the GreenBoost shim with that budget.
# With a mixture-of-experts shape (LLAMACPP_SHAPE=qwen3moe-30b-a3b-24l, 31 GB), (b) is
# llama.cpp's answer for experts that do not fit: -ngl 99 --n-cpu-moe N, the fewest
# layers' experts on the CPU that let the rest fit the budget (cpu_moe), and -ngl 99
# -ot exps=CPU, every expert on the CPU (ot_cpu).
# With LLAMACPP_DEPTH=D (long context), every test runs at a context already D tokens
# deep (llama-bench -d D, flash attention on): (b) is -ngl 99 -nkvo 1, the KV cache and
# attention on the CPU (nkvo), and (c) gets the VRAM (b)'s GPU buffers took as its
# budget, so that the weights fit and the KV cache does not.
#
# Run from the repository root with build/llama-carry (bench/llamacpp/prepare.sh) and
# build/gpu-carry (the shim) carried:
#   bench/llamacpp/run.sh build    builds llama-bench for CUDA (sm_90) from the carried
#                                  source into build/llama-device/ (once per machine)
#   bench/llamacpp/run.sh bench    writes the model, runs (a) (b) (c), writes the report
#   bench/llamacpp/run.sh all      both, in one call
#   bench/llamacpp/run.sh report RAW_DIR   the report again from a captured run
# Output: bench/results/llamacpp-<kind>-<UTC date>-<commit>.md and llamacpp-<kind>-latest.json
# (kind: dense, moe or longctx), with what bounds each configuration, and a copy of
# them plus the raw logs (llamacpp-<kind>-raw.tar.gz) under $OUT when it is set. A
# failing step is reported and the others still run. Environment (defaults in brackets):
#   LLAMACPP_BUDGET_MIB [8192]  VRAM budget of (b) and (c)
#   LLAMACPP_SHAPE [llama3-8b]  make_gguf.py shape (tiny, qwen3moe-tiny: local smoke tests;
#                               qwen3moe-*: the experts-on-CPU comparison)
#   LLAMACPP_BIN                llama-bench to use instead of the built/carried one
#   LLAMACPP_REPS [2]           llama-bench -r
#   LLAMACPP_DEPTH [0]          the long-context comparison at this depth (see above);
#                               LLAMACPP_BUDGET_MIB then defaults to (b)'s GPU buffers
#   LLAMACPP_CUDA_FA [OFF; ON with LLAMACPP_DEPTH]  build: compile the CUDA flash-attention
#                               kernels (the long-context comparison runs -fa on: without
#                               them its attention falls back to the CPU, and bench refuses)
#   LLAMACPP_NVCC, LLAMACPP_LIBCUDA   build: nvcc and libcuda.so.1 instead of the found ones
#   LLAMACPP_CONFIGURE_ONLY     build: stop after cmake's configure step (local check)
#   LLAMACPP_BUILD_TIMEOUT_S [540]  build: stop there (a device call has 600 s); the
#                               next 'build' call continues from the objects already built
#   GREENBOOST_SHIM [build/gpu-carry/libgreenboost_cuda.so]
#   LLAMACPP_TIMEOUT_{VRAM,PARTIAL,CPU_MOE,GREENBOOST} [120,150,150,240]  seconds per configuration
#                               (GREENBOOST's also for greenboost_tiering)
#   LLAMACPP_SKIP [""]          configurations not to run, by name (vram partial cpu_moe ot_cpu
#                               nkvo greenboost greenboost_tiering): a device call too short
#                               for all of them measures the ones that matter
#   LLAMACPP_DEADLINE_S [470]   the whole bench phase, model writing included; later
#                               configurations get what is left (the report is always written)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

carry=build/llama-carry
work=build/llama-device
shim=${GREENBOOST_SHIM:-build/gpu-carry/libgreenboost_cuda.so}
budget_mib=${LLAMACPP_BUDGET_MIB:-8192}
depth=${LLAMACPP_DEPTH:-0}
# Flags every configuration of a run shares (the depth and flash attention of the
# long-context comparison).
shared_flags=()
((depth > 0)) && shared_flags=(-d "$depth" -fa on)
# The CUDA flash-attention kernels: needed by -fa on, a third of the CUDA compile time otherwise.
cuda_fa=${LLAMACPP_CUDA_FA:-$( ((depth > 0)) && echo ON || echo OFF)}
shape=${LLAMACPP_SHAPE:-llama3-8b}
reps=${LLAMACPP_REPS:-2}
n_prompt=512
n_gen=128
results=${LLAMACPP_RESULTS_DIR:-bench/results}
here=bench/llamacpp

log() { echo "llamacpp: $*" >&2; }

python=python3
[[ -x /opt/torch/.venv/bin/python3 ]] && python=/opt/torch/.venv/bin/python3

# The directories that hold libcudart.so.13 and libcublas.so.13 on this machine (the
# toolkit's, else the nvidia-* wheels of a Python environment), for LD_LIBRARY_PATH.
cuda_lib_path() {
    local dirs=() d lib
    for lib in libcudart.so.13 libcublas.so.13; do
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
            /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
            /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do
            if [[ -e $d/$lib ]]; then
                [[ " ${dirs[*]} " == *" $d "* ]] || dirs+=("$d")
                break
            fi
        done
    done
    local IFS=:
    echo "${dirs[*]}"
}

llama_bench_bin() {
    if [[ -n ${LLAMACPP_BIN:-} ]]; then echo "$LLAMACPP_BIN"
    elif [[ -x $carry/bin/llama-bench ]]; then echo "$carry/bin/llama-bench"
    else echo "$work/bin/llama-bench"; fi
}

# Sets cuda_root, a CUDAToolkit_ROOT that CMake's FindCUDAToolkit accepts, and nvcc, for
# the toolkit of the nvcc in $1. A full toolkit (/usr/local/cuda) is used as it is. The
# PyPI wheels' layout (nvidia/cu13/{bin,include,lib}, only versioned library names, no
# lib64 where nvcc's own profile links from) gets an overlay in $work/cuda-root: a copy
# of bin/ (nvcc finds its toolkit from where its binary really is), links to the rest,
# and lib64/ with the unversioned names CMake looks for.
cuda_root_for() {
    local root overlay f
    root=$(dirname "$(dirname "$(readlink -f "$1")")")
    nvcc=$1
    cuda_root=$root
    if [[ -e $root/lib64/libcudart.so || -e $root/targets/x86_64-linux/lib/libcudart.so ]]; then
        return
    fi
    overlay=$(realpath -m "$work/cuda-root")
    rm -rf "$overlay"
    mkdir -p "$overlay/lib64"
    cp -r "$root/bin" "$overlay/bin"
    for f in include nvvm; do [[ -e $root/$f ]] && ln -s "$root/$f" "$overlay/$f"; done
    for f in "$root"/lib/*; do ln -s "$f" "$overlay/lib64/"; done
    for f in "$root"/lib/lib*.so.*; do
        f=$(basename "$f")
        ln -sf "$f" "$overlay/lib64/${f%%.so.*}.so"
    done
    nvcc=$overlay/bin/nvcc
    cuda_root=$overlay
}

# The driver library to link against when the toolkit has no stubs/libcuda.so (wheels):
# the driver's own libcuda.so.1, which this machine has since it has the GPU.
libcuda_path() {
    local d
    [[ -n ${LLAMACPP_LIBCUDA:-} ]] && { echo "$LLAMACPP_LIBCUDA"; return; }
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
        [[ -e $d/libcuda.so.1 ]] && { echo "$d/libcuda.so.1"; return; }
    done
    ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}'
}

build() {
    local started=$SECONDS nvcc llama_commit cuda_root driver_args=() d tool stamp
    # cmake and ninja may come from the Python environment's packages.
    for d in /opt/torch/.venv/bin /usr/local/cuda/bin; do
        [[ -d $d && :$PATH: != *:$d:* ]] && PATH=$PATH:$d
    done
    nvcc=${LLAMACPP_NVCC:-$(command -v nvcc)}
    if [[ ! -x $nvcc ]]; then log "build: no nvcc (PATH, /usr/local/cuda/bin)"; return 1; fi
    for tool in cmake ninja; do
        command -v "$tool" >/dev/null || { log "build: no $tool on PATH"; return 1; }
    done
    cuda_root_for "$nvcc"
    if ! compgen -G "$cuda_root/lib*/stubs/libcuda.so" >/dev/null \
        && ! compgen -G "$cuda_root/targets/*/lib/stubs/libcuda.so" >/dev/null; then
        driver_args=(-DCUDA_cuda_driver_LIBRARY="$(libcuda_path)")
    fi
    log "build: nvcc $nvcc, toolkit root $cuda_root, $(cmake --version | head -1), ninja $(ninja --version) ${driver_args[*]}"
    [[ -f $carry/llama.cpp-src.tar.xz ]] || { log "build: $carry/llama.cpp-src.tar.xz missing: run bench/llamacpp/prepare.sh here and carry $carry"; return 1; }
    llama_commit=$(sed -n 's/^llama.cpp \([0-9a-f]*\).*/\1/p' "$carry/llama-version")
    # The build is incremental across calls: the same carried source keeps the tree and
    # the objects already built, so a build cut short by the time limit continues.
    stamp=$(sha256sum "$carry/llama.cpp-src.tar.xz" | cut -c1-16)
    if [[ $(cat "$work/src.stamp" 2>/dev/null) != "$stamp" ]]; then
        rm -rf "${work:?}/src" "${work:?}/cmake" "${work:?}/bin" "$work/src.stamp"
        mkdir -p "$work/src"
        tar -xJf "$carry/llama.cpp-src.tar.xz" -C "$work/src" || return 1
        echo "$stamp" >"$work/src.stamp"
    fi
    mkdir -p "$work/bin"
    # Only what the benchmark runs: llama-bench, CUDA for sm_90 and the CPU backend tuned
    # to this host (partial offload runs the CPU layers here), static ggml so the binary
    # needs no libggml*.so beside it. Flash-attention kernels (F16 K/V only) only for the
    # long-context comparison ($cuda_fa): they are a third of the CUDA compile time, and
    # at a 640-token context attention is a rounding error next to streaming 16 GB of
    # weights, which is what the three configurations differ in.
    cmake -S "$work/src" -B "$work/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$cuda_root" "${driver_args[@]}" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DGGML_CUDA_FA="$cuda_fa" -DGGML_CUDA_FA_ALL_QUANTS=OFF \
        -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_NCCL=OFF \
        -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_COMMIT="${llama_commit:0:12}" -DLLAMA_BUILD_NUMBER=0 \
        >"$work/cmake-configure.log" 2>&1 || { tail -30 "$work/cmake-configure.log" >&2; return 1; }
    grep -E 'CUDA Toolkit|CUDA compiler identification|ARCHITECTURES' "$work/cmake-configure.log" >&2
    [[ -n ${LLAMACPP_CONFIGURE_ONLY:-} ]] && return 0  # local check of the steps above
    # The model is written meanwhile (disk-bound, one core), so that the bench call has
    # its whole time for measuring.
    local limit=$((${LLAMACPP_BUILD_TIMEOUT_S:-540} - (SECONDS - started))) model_writer rc
    write_model >"$work/model-write.log" 2>&1 &
    model_writer=$!
    timeout "$limit" ninja -C "$work/cmake" -j "$(nproc)" llama-bench >>"$work/ninja.log" 2>&1
    rc=$?
    wait "$model_writer" || log "build: writing the model failed: $(tail -3 "$work/model-write.log")"
    case $rc in
        0) ;;
        124)
            log "build: not finished within ${LLAMACPP_BUILD_TIMEOUT_S:-540} s ($(tail -1 "$work/ninja.log" | cut -c1-60)); run 'bench/llamacpp/run.sh build' again: it continues"
            return 1 ;;
        *)
            grep -B2 -A12 -m3 'error' "$work/ninja.log" >&2
            tail -5 "$work/ninja.log" >&2
            return 1 ;;
    esac
    cp "$work/cmake/bin/llama-bench" "$work/bin/llama-bench"
    echo "on the device in $((SECONDS - started)) s ($(nproc) CPUs, flash attention $cuda_fa), nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" >"$work/bin/build-info"
    log "build: llama-bench built in $((SECONDS - started)) s"
}

# Polls GPU memory every 0.2 s into $1: "<epoch> <GPU memory.used MiB> <pid,MiB;...>".
poll_vram() {
    local gpu procs
    while :; do
        gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' ')
        procs=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | paste -sd';')
        echo "$(date +%s.%N) ${gpu:-NA} ${procs:-none}"
        sleep 0.2
    done
}

# run_config NAME TIMEOUT "NGL [MORE PLACEMENT FLAGS]" [ENV=VALUE...]: one llama-bench
# run (pp and tg), its logs, exit status, wall time and VRAM samples in $raw/NAME.*.
run_config() {
    local name=$1 limit=$2 ngl=$3 started poller rc
    shift 3
    echo "$ngl" >"$raw/$name.ngl"
    if [[ " ${LLAMACPP_SKIP:-} " == *" $name "* ]]; then
        log "$name: skipped (LLAMACPP_SKIP)"
        echo asked >"$raw/$name.rc"
        return 0
    fi
    # Each configuration gets its own limit, cut to what is left of the whole run's.
    ((limit > deadline - SECONDS - 15)) && limit=$((deadline - SECONDS - 15))
    if ((limit < 20)); then
        log "$name: skipped, the run's ${LLAMACPP_DEADLINE_S:-470} s are spent"
        echo skipped >"$raw/$name.rc"
        return 0
    fi
    log "$name: -ngl $ngl ${*:-} (limit ${limit}s)"
    poll_vram >"$raw/$name.vram" &
    poller=$!
    started=$(date +%s.%N)
    # env inside timeout: the preload reaches llama-bench alone, not timeout itself.
    # shellcheck disable=SC2086  # $ngl is "-ngl's value [flags...]", split on purpose
    timeout -k 10 "$limit" env "$@" "$bin" -m "$model" -p "$n_prompt" -n "$n_gen" -r "$reps" \
        "${shared_flags[@]}" -ngl $ngl -o jsonl -v >"$raw/$name.jsonl" 2>"$raw/$name.err"
    rc=$?
    awk -v end="$(date +%s.%N)" -v start="$started" 'BEGIN { printf "%.1f\n", end - start }' >"$raw/$name.wall"
    kill "$poller" 2>/dev/null
    wait "$poller" 2>/dev/null
    echo "$rc" >"$raw/$name.rc"
    log "$name: exit $rc after $(cat "$raw/$name.wall") s"
    grep -h 'summary:' "$raw/$name.err" >&2
    return 0
}

write_model() {
    local dir=$work/model
    model=$dir/$shape-f16.gguf
    if [[ -s $dir/$shape.json && -s $model ]]; then
        log "model: reusing $model"
        return 0
    fi
    mkdir -p "$dir"
    rm -f "$model" "$dir/$shape.json"
    log "model: writing $model"
    "$python" "$here/make_gguf.py" "$model" --shape "$shape" --gguf-py "$carry/gguf-py" \
        >"$dir/$shape.json.part" && mv "$dir/$shape.json.part" "$dir/$shape.json"
}

# plan_placement FIT KEY PREFIX: the placement flags for the budget, "PREFIX<value>",
# the value KEY of `analyze.py FIT` (fit-ngl: the most layers whose weights + KV cache +
# compute buffer fit; fit-ncmoe, for a mixture-of-experts model: the fewest layers whose
# experts stay on the CPU so that everything else fits). The compute buffer comes from a
# probe run at a first guess, as llama.cpp reports it; 512 MiB where it reports none.
plan_placement() {
    local fit=$1 key=$2 prefix=$3 guess compute
    guess=$("$python" "$here/analyze.py" "$fit" "$model" --budget-mib "$budget_mib" \
        --compute-mib 512 --ctx $((n_prompt + n_gen)) --gguf-py "$carry/gguf-py") || return 1
    guess=$(echo "$guess" | "$python" -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$key")
    compute=$(probe_compute_mib "$prefix$guess")
    "$python" "$here/analyze.py" "$fit" "$model" --budget-mib "$budget_mib" \
        --compute-mib "$compute" --ctx $((n_prompt + n_gen)) --gguf-py "$carry/gguf-py" \
        >"$raw/ngl-plan.json" || return 1
    "$python" -c 'import json,sys; print(sys.argv[3] + str(json.load(open(sys.argv[1]))[sys.argv[2]]))' \
        "$raw/ngl-plan.json" "$key" "$prefix"
}

# The compute buffer llama.cpp reports for placement flags "$1" (MiB; 512 without a
# report), from a short probe run with the measured runs' context.
probe_compute_mib() {
    # -d makes the context as large as the measured runs' (n_ctx and n_ubatch, which size
    # the compute buffer, follow n_prompt + n_gen + depth); one token is generated after it.
    # shellcheck disable=SC2086  # placement flags, split on purpose
    timeout -k 10 60 "$bin" -m "$model" -p 0 -n 1 -d $((n_prompt + n_gen - 1)) -r 1 --no-warmup \
        "${shared_flags[@]:2}" -ngl $1 -o jsonl -v \
        >"$raw/probe.jsonl" 2>"$raw/probe.err"
    echo $? >"$raw/probe.rc"
    "$python" "$here/analyze.py" buffers "$raw/probe.err" | "$python" -c '
import json, re, sys
b = json.load(sys.stdin)
print(max([v for k, v in b.items() if re.fullmatch(r"CUDA\d+ compute", k)] or [512]))'
}

# Facts about the machine and the inputs, as JSON in $raw/meta.json.
write_meta() {
    local smi
    smi=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    GB_GPU=${smi%%,*} GB_DRIVER=${smi##*, } \
    GB_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1) \
    GB_CPU=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) GB_CPUS=$(nproc) \
    GB_RAM=$(free -g | awk '/^Mem:/{print $2 " GiB"}') \
    GB_LLAMA_VERSION=$(paste -sd',' "$carry/llama-version" 2>/dev/null) \
    GB_LLAMA_BUILD=$(cat "$(dirname "$bin")/build-info" 2>/dev/null || echo "here, carried") \
    GB_COMMIT=$(cat "$carry/commit" 2>/dev/null || echo unknown) \
    GB_SHIM=$shim GB_SHIM_COMMIT=$(cat "$(dirname "$shim")/COMMIT" "$(dirname "$shim")/commit" 2>/dev/null | head -1) \
    GB_MODEL_JSON=$(cat "$work/model/$shape.json" 2>/dev/null) GB_NGL_PLAN=$(cat "$raw/ngl-plan.json" 2>/dev/null) \
    GB_BASELINE=$gpu_baseline \
    GB_BUDGET=$budget_mib GB_REPS=$reps GB_NP=$n_prompt GB_NG=$n_gen GB_DEPTH=$depth GB_NOTES=$(printf '%s\n' "${notes[@]}") \
    "$python" - "$raw/meta.json" <<'EOF'
import datetime, json, os, sys
e = os.environ
def js(v):
    try:
        return json.loads(v)
    except (ValueError, TypeError):
        return None
meta = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    "gpu": e["GB_GPU"] or None, "driver": e["GB_DRIVER"] or None, "cuda": e["GB_CUDA"] or None,
    "cpu": e["GB_CPU"], "cpus": e["GB_CPUS"], "ram": e["GB_RAM"],
    "llama_version": e["GB_LLAMA_VERSION"], "llama_build": e["GB_LLAMA_BUILD"],
    "greenboost_commit": e["GB_COMMIT"], "shim": e["GB_SHIM"], "shim_commit": e["GB_SHIM_COMMIT"] or None,
    "model": js(e["GB_MODEL_JSON"]) or {}, "ngl_plan": js(e["GB_NGL_PLAN"]),
    "gpu_used_baseline_mib": int(e["GB_BASELINE"]) if e["GB_BASELINE"].isdigit() else None,
    "budget_mib": int(e["GB_BUDGET"]), "reps": int(e["GB_REPS"]),
    "n_prompt": int(e["GB_NP"]), "n_gen": int(e["GB_NG"]), "depth": int(e["GB_DEPTH"]),
    "notes": [n for n in e["GB_NOTES"].splitlines() if n],
}
json.dump(meta, open(sys.argv[1], "w"), indent=2)
EOF
}

make_report() {
    local md
    md=$("$python" "$here/analyze.py" report "$raw" "$results") || { log "report: failed"; return 1; }
    log "report: $md"
    if [[ -n ${OUT:-} ]]; then
        kind=${md##*/llamacpp-}
        kind=${kind%%-*}
        cp "$md" "$results/llamacpp-$kind-latest.json" "$OUT/" 2>/dev/null
        # The device tool brings back a few files only: the raw logs as one tarball,
        # named for the comparison so that a second bench in the same call keeps it.
        tar -C "$(dirname "$raw")" -czf "$OUT/llamacpp-$kind-raw.tar.gz" "$(basename "$raw")" 2>/dev/null \
            && rm -rf "$raw"
    fi
    cat "$md"
}

bench() {
    local ngl started=$SECONDS
    deadline=$((SECONDS + ${LLAMACPP_DEADLINE_S:-470}))
    notes=()
    bin=$(llama_bench_bin)
    if [[ ! -x $bin ]]; then
        log "bench: no llama-bench at $bin: run 'bench/llamacpp/run.sh build' first (same machine)"
        return 1
    fi
    # A build without the CUDA flash-attention kernels runs -fa on's attention on the CPU:
    # every configuration would measure that, not where the KV cache sits.
    if ((depth > 0)) && grep -q 'flash attention OFF' "$(dirname "$bin")/build-info" 2>/dev/null; then
        log "bench: $bin was built without the CUDA flash-attention kernels, which LLAMACPP_DEPTH=$depth" \
            "needs (-fa on): rebuild with 'LLAMACPP_DEPTH=$depth bench/llamacpp/run.sh build' (LLAMACPP_CUDA_FA=ON)"
        return 1
    fi
    raw=${OUT:-$work}/llamacpp-raw
    rm -rf "$raw"
    # Idle GPU memory, before any configuration runs: the base of "GPU used peak - idle".
    gpu_baseline=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' ')
    mkdir -p "$raw" "$results"
    export LD_LIBRARY_PATH
    LD_LIBRARY_PATH=$(cuda_lib_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ldd "$bin" >"$raw/ldd.txt" 2>&1
    if grep -q 'not found' "$raw/ldd.txt"; then
        notes+=("llama-bench has unresolved libraries: $(grep 'not found' "$raw/ldd.txt" | paste -sd' ')")
    fi
    if ! write_model; then
        notes+=("writing the model failed; nothing was measured")
        write_meta
        make_report
        return 1
    fi
    log "model ready after $((SECONDS - started)) s"
    # What bounds each configuration: which tensors a token reads, and the rates of the
    # link, the HBM and the host's RAM, measured now on the idle GPU.
    "$python" "$here/bound.py" layout "$model" --gguf-py "$carry/gguf-py" >"$raw/layout.json" 2>"$raw/layout.err" \
        || notes+=("reading the model's layout failed: $(tail -1 "$raw/layout.err")")
    timeout 120 "$python" "$here/bound.py" rates >"$raw/rates.json" 2>"$raw/rates.err" \
        || notes+=("measuring the rates failed: $(tail -1 "$raw/rates.err")")

    run_config vram "${LLAMACPP_TIMEOUT_VRAM:-120}" 99

    if ((depth > 0)); then
        run_config nkvo "${LLAMACPP_TIMEOUT_PARTIAL:-150}" "99 -nkvo 1"
        if [[ -z ${LLAMACPP_BUDGET_MIB:-} ]]; then
            # The VRAM -nkvo's GPU buffers took (weights, compute buffer), rounded up.
            budget_mib=$("$python" "$here/analyze.py" buffers "$raw/nkvo.err" | "$python" -c '
import json, math, re, sys
b = json.load(sys.stdin)
print(math.ceil(sum(v for k, v in b.items() if re.match(r"CUDA\d+ ", k))) or 8192)')
            log "budget: ${budget_mib} MiB, what -nkvo's GPU buffers took"
        fi
    elif grep -q '"experts"' "$work/model/$shape.json" 2>/dev/null; then
        if ngl=$(plan_placement fit-ncmoe ncmoe "99 -ncmoe "); then
            run_config cpu_moe "${LLAMACPP_TIMEOUT_CPU_MOE:-150}" "$ngl"
        else
            notes+=("planning --n-cpu-moe failed (see probe.err); (b) not run")
        fi
        run_config ot_cpu "${LLAMACPP_TIMEOUT_CPU_MOE:-150}" "99 -ot exps=CPU"
    elif ngl=$(plan_placement fit-ngl ngl ""); then
        run_config partial "${LLAMACPP_TIMEOUT_PARTIAL:-150}" "$ngl"
    else
        notes+=("planning the partial-offload -ngl failed (see probe.err); (b) not run")
    fi

    if [[ -f $shim ]]; then
        run_config greenboost "${LLAMACPP_TIMEOUT_GREENBOOST:-240}" 99 \
            LD_PRELOAD="$(realpath "$shim")" GREENBOOST_VRAM_BUDGET="${budget_mib}M" GREENBOOST_LOG=debug
        # (debug: a line per placement, from which the bounds read where each buffer went)
        # Live tiering on: llama.cpp's one weight buffer (and KV cache) in 2 MiB parts that
        # go to VRAM by heat, kernels weighed by their sampled times.
        run_config greenboost_tiering "${LLAMACPP_TIMEOUT_GREENBOOST:-240}" 99 \
            LD_PRELOAD="$(realpath "$shim")" GREENBOOST_VRAM_BUDGET="${budget_mib}M" GREENBOOST_TIERING=on \
            GREENBOOST_LOG=info
    else
        notes+=("no shim at $shim; (c) not run")
    fi
    notes+=("whole bench phase: $((SECONDS - started)) s")
    write_meta
    make_report
}

case ${1:-all} in
    build) build ;;
    bench) bench ;;
    all)
        if [[ -z ${LLAMACPP_BIN:-} && ! -x $carry/bin/llama-bench && ! -x $work/bin/llama-bench ]]; then
            build || log "build failed; bench will report it"
        fi
        bench ;;
    report)
        raw=${2:?usage: run.sh report RAW_DIR}
        make_report ;;
    *) echo "usage: $0 [build|bench|all|report RAW_DIR]" >&2; exit 2 ;;
esac
