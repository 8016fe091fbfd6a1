#!/usr/bin/env bash
# Several GPU measurements in one call of a time-limited GPU machine, each step's files
# under $OUT/STEP/ as it goes (a call cut at its limit still returns the steps done), a
# line per step in $OUT/steps.log. Needs build/gpu-carry and build/bench-carry
# (tests/gpu/prepare.sh, bench/prepare.sh), made on the build machine.
#
#   bash scripts/device-steps.sh STEP...
#
# Steps:
#   probe     bench/probes/$PROBE ($PROBE_ARGS), default read_mostly_probe.py 12 8
#   launch    BENCH_ONLY=launch,hook (launch and hook figures; deadline LAUNCH_S, 300)
#   launchab  bench/probes/launch_ab_probe under this shim and BASELINE (a file in
#             build/bench-carry) in turn, once per word of LAUNCH_AB (ALLOCATIONS:THREADS:
#             FUNCTIONS:SHAPE), 9 rounds of 20000 launches: launch-ab.jsonl
#   apicost   bench/probes/api_cost_probe.py plain, under this shim and under BASELINE
#   longctx   BENCH_ONLY=longctx, the caches of LONGCTX_MODES (default dynamic; a comma
#             list of bench/longctx.py's modes); beside BENCH_BASELINE_SHIM when
#             BASELINE names a file in build/bench-carry, and with LONGCTX_SETTINGS
#             (GreenBoost settings, VAR=VALUE words) when given (deadline LONGCTX_S, 300)
#   decode    BENCH_ONLY=decode with DECODE_CONFIGS (default "vram greenboost
#             greenboost_ahead": prefill and decode against their bounds, look-ahead staging
#             included), beside BENCH_BASELINE_SHIM when BASELINE names a file in
#             build/bench-carry (deadline DECODE_S, 400)
#   llamacpp  bench/llamacpp/run.sh bench, as the LLAMACPP_* variables say (needs
#             build/llama-carry; deadline LLAMA_S, 400)
#   repeat    bench/longctx_repeat.sh: the long prompt once per word of RUNS, shims side
#             by side (deadline REPEAT_S, 400)
#   shared    GPU suite sections plain pressure shared (deadline SUITE_S, 520)
#   tiering   GPU suite sections tiering swap (deadline SUITE_S)
#   ranges    GPU suite sections ranges longctx (deadline SUITE_S)
# The suite's steps run only the tests GB_GPU_ONLY names where it is set (tests/gpu/README.md).
set -u
out=${OUT:-/tmp/device-steps}
mkdir -p "$out"
log() { echo "[$(date -u +%T)] $*" | tee -a "$out/steps.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv >>"$out/steps.log" 2>&1
suite() { # SECTIONS DIR
  OUT=$2 GB_GPU_SECTIONS=$1 GB_GPU_DEADLINE_S=${SUITE_S:-520} bash tests/gpu/run.sh >"$2/run.log" 2>&1
}
for step in "$@"; do
  dir=$out/$step
  mkdir -p "$dir"
  log "$step: start"
  case $step in
    probe)
      # shellcheck disable=SC2086 # the arguments are words
      PYTHONPATH=$PWD/build/bench-carry/python timeout 240 python3 "bench/probes/${PROBE:-read_mostly_probe.py}" \
        ${PROBE_ARGS:-12 8} >"$dir/probe.json" 2>"$dir/run.log" ;;
    launch)
      OUT=$dir BENCH_ONLY=launch,hook BENCH_DEADLINE_S=${LAUNCH_S:-300} BENCH_RESULTS=/tmp/device-steps-launch \
        bash bench/run.sh >"$dir/run.log" 2>&1 ;;
    longctx)
      baseline=${BASELINE:+$PWD/build/bench-carry/$BASELINE}
      OUT=$dir BENCH_ONLY=longctx BENCH_LONGCTX_MODES=${LONGCTX_MODES:-dynamic} BENCH_BASELINE_SHIM=$baseline \
        BENCH_LONGCTX_SETTINGS="${LONGCTX_SETTINGS:-}" BENCH_DEADLINE_S=${LONGCTX_S:-300} \
        BENCH_RESULTS=/tmp/device-steps-longctx bash bench/run.sh >"$dir/run.log" 2>&1 ;;
    decode)
      baseline=${BASELINE:+$PWD/build/bench-carry/$BASELINE}
      OUT=$dir BENCH_ONLY=decode BENCH_DECODE_CONFIGS="${DECODE_CONFIGS:-vram greenboost greenboost_ahead}" \
        BENCH_BASELINE_SHIM=$baseline BENCH_DEADLINE_S=${DECODE_S:-400} BENCH_RESULTS=/tmp/device-steps-decode \
        bash bench/run.sh >"$dir/run.log" 2>&1 ;;
    llamacpp)
      OUT=$dir LLAMACPP_DEADLINE_S=${LLAMA_S:-400} timeout $((${LLAMA_S:-400} + 60)) bash bench/llamacpp/run.sh bench \
        >"$dir/run.log" 2>&1 ;;
    launchab)
      for config in ${LAUNCH_AB:-8:1:1:pointers 8:1:48:pointers 256:1:48:pointers 8:4:1:pointers 8:1:1:elementwise 8:1:48:elementwise}; do
        IFS=: read -r allocations threads functions shape <<<"$config"
        for shim in libgreenboost_cuda.so ${BASELINE:-}; do
          LD_PRELOAD=$PWD/build/bench-carry/$shim timeout 120 build/bench-carry/launch_ab_probe 9 20000 "$allocations" \
            "$threads" "$functions" "$shape" 2>>"$dir/run.log" | sed "s|^{|{\"shim_file\":\"$shim\",|" >>"$dir/launch-ab.jsonl"
        done
      done ;;
    apicost)
      for shim in plain libgreenboost_cuda.so ${BASELINE:-}; do
        preload=$PWD/build/bench-carry/$shim
        [ "$shim" = plain ] && preload=
        LD_PRELOAD=$preload PYTHONPATH=$PWD/build/bench-carry/python timeout 200 python3 bench/probes/api_cost_probe.py \
          >"$dir/api-cost-$shim.json" 2>>"$dir/run.log"
      done ;;
    repeat)
      OUT=$dir timeout "${REPEAT_S:-400}" bash bench/longctx_repeat.sh >"$dir/run.log" 2>&1 ;;
    shared) suite "plain pressure shared" "$dir" ;;
    tiering) suite "tiering swap" "$dir" ;;
    ranges) suite "ranges longctx" "$dir" ;;
    *) log "$step: no such step"; continue ;;
  esac
  log "$step: exit $?"
  tail -3 "$dir/run.log" >>"$out/steps.log" 2>/dev/null
done
