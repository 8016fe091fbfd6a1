#!/usr/bin/env bash
# GreenBoost GPU suite (`make gpu-test`), run from the repository root on a machine with an
# NVIDIA GPU. It needs no cargo: tests/gpu/prepare.sh builds libgreenboost_cuda.so and
# gb-gpu-check elsewhere and copies them into build/gpu-carry/ (see tests/gpu/README.md).
#
# Prints PASS/FAIL lines, ends with `N passed, M failed`, and writes
# bench/results/gpu-test-<date>-<commit>.md (also into $OUT when set) with the device, the
# versions, every test's outcome and its figures, and beside it
# gpu-test-<date>-<commit>-free-vram.json: the free VRAM sampled during each shared-GPU test
# (python/gbgpu/free_vram.py), which bench/plots.py draws.
#
# Settings (environment):
#   GB_GPU_CARRY   folder with libgreenboost_cuda.so, gb-gpu-check, python/gbgpu, COMMIT
#                  (build/gpu-carry)
#   GB_GPU_MODE    full (default) | control: control runs only the tests without the shim,
#                  to validate the programs and the device before the shim exists
#   PYTHON         python with torch and pynvml (python3)
#   GB_GPU_TEST_TIMEOUT  seconds one test process may take (240)
#   GB_GPU_DEADLINE_S  seconds from the start after which no test starts, and past which
#                  none runs (its timeout cut to what is left): a device call with a time
#                  limit still gets the page and free-VRAM series of what ran; the tests
#                  not run are one failure, suite.deadline, that names them
#   GB_GPU_SWAP_TIMEOUT  seconds the swap and ranges sections' programs may take (480 each)
#   GB_GPU_SHIM_LOG  GREENBOOST_LOG for the programs under the shim (info); debug prints
#                  each live-tiering tick's free VRAM and heat table
#   GB_GPU_SECTIONS  the sections to run, by name (plain pressure shared tiering swap ranges
#                  longctx; all when unset): the whole suite takes longer than one device call allows,
#                  so a session runs it in three calls: "plain pressure shared", "tiering
#                  swap" and "ranges longctx"; the device report and the results page come from each
#   GB_GPU_ONLY    test names (shell patterns, e.g. 'shared.two* shared.grows*') to run
#                  inside those sections; any other test is skipped, counted nowhere (a
#                  device call that repeats one failure needs no other test's time)
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry=${GB_GPU_CARRY:-build/gpu-carry}
mode=${GB_GPU_MODE:-full}
python=${PYTHON:-python3}
test_timeout=${GB_GPU_TEST_TIMEOUT:-240}
case $carry in /*) ;; *) carry=$root/$carry ;; esac
shim=$carry/libgreenboost_cuda.so
check=$carry/gb-gpu-check
torch_check=$root/tests/gpu/torch_check.py

budget_gib=8          # GREENBOOST_VRAM_BUDGET of the budget tests
total_gib=24          # 3x the budget, held at once
async_gib=12          # held at once through cudaMallocAsync
t2_cap_gib=64         # GREENBOOST_T2_CAP of the capacity tests (combined mode adds it)
small_t2_cap_gib=2    # GREENBOOST_T2_CAP of the T2-exhaustion test
leave_gib=6           # VRAM the balloon leaves free
pressure_gib=16       # held under the balloon: past free VRAM
split_gib=12          # one tensor this large under the budget: split between VRAM and T2
vram_slack_mib=2048   # context, cuBLAS workspace and kernels on top of the budget

logs=$(mktemp -d /tmp/gb-gpu-test.XXXXXX)
summary=$logs/summary.txt     # every PASS/FAIL line, in order
figures=$logs/figures.txt     # every KV line, in order
: >"$summary"; : >"$figures"
started=$(date -u +%s)

# Processes this script starts in the background (balloon, VRAM samplers); ended on exit.
background=()
cleanup() {
  local pid
  for pid in "${background[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  background=()
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# GB_GPU_DEADLINE_S (see the top): the time it ends at, and the timeout of a test started
# now (0 past it: the test does not start, and is noted in not-run.txt).
deadline=${GB_GPU_DEADLINE_S:+$(( started + GB_GPU_DEADLINE_S ))}
time_for_test() {
  local left
  if [ -z "$deadline" ]; then echo "$test_timeout"; return; fi
  left=$(( deadline - $(date -u +%s) ))
  [ "$left" -lt 0 ] && left=0
  echo $(( left < test_timeout ? left : test_timeout ))
}
# wanted NAME: whether GB_GPU_ONLY (unset: every test) names test NAME.
wanted() {
  local pattern patterns
  [ -z "${GB_GPU_ONLY:-}" ] && return 0
  read -ra patterns <<<"$GB_GPU_ONLY"  # split, never matched against files
  for pattern in "${patterns[@]}"; do
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    [[ $1 == $pattern ]] && return 0
  done
  return 1
}
# starts_in_time NAME: whether a test may start now (GB_GPU_ONLY wants it, and time is
# left); if time is not, notes it as not run.
starts_in_time() {
  wanted "$1" || return 1
  [ "$(time_for_test)" -gt 0 ] && return 0
  echo "$1" >>"$logs/not-run.txt"
  return 1
}

pass() { echo "PASS $1: $2" | tee -a "$summary"; }
fail() { echo "FAIL $1: $2" | tee -a "$summary"; }
note() { echo "KV $1=$2" | tee -a "$figures"; }

# run_test NAME ENV... -- CMD...: runs one test process with the given environment,
# collects its PASS/FAIL and KV lines, and fails NAME when it exits non-zero without
# reporting a failure (a crash, a timeout).
run_test() {
  local name=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local out=$logs/$name.out err=$logs/$name.err limit
  starts_in_time "$name" || return 0
  limit=$(time_for_test)
  echo "== $name: ${env[*]} $*" | tee -a "$logs/commands.txt"
  timeout --kill-after=10 "$limit" env "${env[@]}" "$@" >"$out" 2>"$err"
  local rc=$?
  # Test names are prefixed with the process's name where they do not already start with
  # it (gb-gpu-check report prints the same names in every configuration).
  grep -E '^(PASS|FAIL) ' "$out" | sed -E "/^(PASS|FAIL) $name[.:]/! s/^(PASS|FAIL) /\\1 $name\//" | tee -a "$summary"
  grep -E '^KV ' "$out" >>"$figures"
  if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
    local why="exited with status $rc"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${limit}s"
    fail "$name.exit" "$why without reporting a failure; stderr: $(tail -c 600 "$err" | tr '\n' ' ')"
  fi
  return 0
}

# VRAM really in use on the device (MiB), read by nvidia-smi outside the shim.
vram_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1 | tr -d ' '; }

# with_vram_peak NAME LIMIT_MIB -- run_test args...: samples device memory while the test
# runs and fails NAME.vram_peak when the test's own use went past LIMIT_MIB (0: only record).
with_vram_peak() {
  local name=$1 limit=$2; shift 3
  local base samples=$logs/$name.vram
  base=$(vram_used_mib)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$samples" 2>/dev/null &
  local sampler=$!
  background+=("$sampler")
  run_test "$name" "$@"
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  local peak
  peak=$(tr -d ' ' <"$samples" | grep -E '^[0-9]+$' | sort -n | tail -1)
  if [ -z "$peak" ]; then
    fail "$name.vram_peak" "nvidia-smi gave no memory readings while the test ran"
    return
  fi
  local grown=$((peak - base))
  note "$name.vram_base_mib" "$base"
  note "$name.vram_peak_mib" "$peak"
  if [ "$limit" -gt 0 ]; then
    if [ "$grown" -le "$limit" ]; then
      pass "$name.vram_peak" "device memory grew by ${grown} MiB (nvidia-smi), within budget + slack = ${limit} MiB"
    else
      fail "$name.vram_peak" "device memory grew by ${grown} MiB (nvidia-smi), more than budget + slack = ${limit} MiB"
    fi
  fi
}

# One tensor of $split_gib GiB under a budget of $budget_gib GiB, as test NAME, with the
# GreenBoost settings given after it.
one_tensor_past_budget() {
  local name=$1
  shift
  with_vram_peak "$name" "$budget_limit_mib" -- "${shim_env[@]}" GREENBOOST_VRAM_BUDGET="${budget_gib}G" "$@" -- \
    "$python" "$torch_check" tensors --label "$name" --total-gib "$split_gib" --chunk-mib $((split_gib * 1024)) \
    --budget-gib "$budget_gib" --expect t2 --pointer-placement 0
}

figure() { grep -E "^KV $1=" "$figures" | tail -1 | cut -d= -f2-; }

# in_section NAME: whether GB_GPU_SECTIONS (unset: every section) names section NAME.
in_section() { [ -z "${GB_GPU_SECTIONS:-}" ] || [[ " ${GB_GPU_SECTIONS//,/ } " == *" $1 "* ]]; }

# --- what runs where -------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: no NVIDIA GPU here (nvidia-smi fails); run it on a GPU machine (tests/gpu/README.md)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
if [ ! -x "$check" ]; then
  echo "tests/gpu/run.sh: $check is missing; run tests/gpu/prepare.sh on the build machine and carry $carry" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
if [ ! -f "$carry/python/gbgpu/shim_exports.py" ] || [ ! -f "$carry/python/gbgpu/free_vram.py" ]; then
  echo "tests/gpu/run.sh: $carry/python/gbgpu is missing; run tests/gpu/prepare.sh on the build machine and carry $carry" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
# The Python programs import the helpers prepare.sh carried (those of the shim's commit).
export PYTHONPATH=$carry/python${PYTHONPATH:+:$PYTHONPATH}
if [ "$mode" = full ] && [ ! -f "$shim" ]; then
  fail shim.present "$shim is missing: run tests/gpu/prepare.sh (or GB_GPU_MODE=control for the tests without the shim)"
fi

# gb-gpu-check dlopens libcudart.so.13 by name: add the toolkit's or PyTorch's copy to the
# search path when the system's loader does not know it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.13'; then
  cudart_dir=$("$python" - <<'EOF' 2>/dev/null
import glob, os, site
for base in site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]:
    hits = glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libcudart.so.13*")) + glob.glob(os.path.join(base, "libcudart.so.13*"))
    if hits:
        print(os.path.dirname(hits[0])); break
EOF
)
  [ -n "$cudart_dir" ] && export LD_LIBRARY_PATH=$cudart_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

commit=unknown
if [ -f "$carry/COMMIT" ]; then
  commit=$(head -1 "$carry/COMMIT")
elif git -C "$root" rev-parse --short=12 HEAD >/dev/null 2>&1; then
  commit=$(git -C "$root" rev-parse --short=12 HEAD)
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0 | head -1)
nvcc_version=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)
torch_version=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)
note device.gpu "$gpu_name"
note device.driver "$driver"
note device.nvcc "${nvcc_version:-none}"
note device.torch "${torch_version:-none}"
note device.kernel "$(uname -r)"

# --- without the shim: the device, the programs and the driver's own behaviour ------------
GB_GPU_ONLY= run_test report_plain -- "$check" report  # always: the page needs its figures
cp "$logs/report_plain.out" "$logs/report_plain.kv"
physical_total=$(figure cudaMemGetInfo.total)
physical_free=$(figure cudaMemGetInfo.free)
# Every section's programs under the shim get this (a section run alone too).
shim_env=(LD_PRELOAD="$shim" GREENBOOST_LOG=${GB_GPU_SHIM_LOG:-info})
# with_free_floor: free VRAM sampled outside the shim while a test runs beside a foreign process.
. "$root/tests/gpu/free_floor.sh"
in_section plain && . "$root/tests/gpu/plain.sh"

# --- real VRAM pressure: a second process holds all but a few GiB --------------------------
if in_section pressure && { wanted pressure_plain || wanted pressure_rust || wanted pressure_torch; }; then
  balloon_log=$logs/balloon.out
  "$check" balloon --leave-gib "$leave_gib" >"$balloon_log" 2>&1 &
  balloon=$!
  background+=("$balloon")
  for _ in $(seq 1 120); do
    grep -q '^BALLOON ' "$balloon_log" && break
    kill -0 "$balloon" 2>/dev/null || break
    sleep 0.5
  done
  if grep -q '^BALLOON ' "$balloon_log"; then
    note balloon.line "$(grep '^BALLOON ' "$balloon_log" | tr ' ' ',')"
    run_test pressure_plain -- "$check" alloc --label pressure_plain --total-gib "$pressure_gib" --expect oom
    if [ "$mode" = full ] && [ -f "$shim" ]; then
      # No budget variable: the driver's own out-of-memory must be retried in T2.
      run_test pressure_rust "${shim_env[@]}" -- "$check" alloc --label pressure_rust --total-gib "$pressure_gib" --async-gib 8 --expect t2
      run_test pressure_torch "${shim_env[@]}" -- "$python" "$torch_check" tensors --label pressure_torch --total-gib "$pressure_gib" --expect t2
      # The shim's exit summary counts the T2 allocations made because of the balloon: sent
      # there by the device's real state (the headroom), or after the driver refused VRAM.
      for name in pressure_rust pressure_torch; do
        wanted "$name" || continue
        line=$(grep 'summary:' "$logs/$name.err" | head -1)
        retried=$(grep -o '[0-9]* after a VRAM out-of-memory' <<<"$line" | awk '{s += $1} END {print s + 0}')
        spilled=$(grep -o '[0-9]* for the VRAM headroom' <<<"$line" | awk '{s += $1} END {print s + 0}')
        if [ $((retried + spilled)) -gt 0 ]; then
          pass "$name.spilled_past_the_balloon" "the shim's summary counts $spilled T2 allocations for the headroom and $retried after a driver out-of-memory"
        else
          fail "$name.spilled_past_the_balloon" "the shim's summary (GREENBOOST_LOG=info) shows no T2 allocation for the headroom or after a driver out-of-memory: $line"
        fi
      done
    fi
  else
    fail balloon.start "the balloon did not report: $(tail -c 400 "$balloon_log" | tr '\n' ' ')"
  fi
  kill "$balloon" 2>/dev/null; wait "$balloon" 2>/dev/null
  background=("${background[@]/$balloon}")
fi

# --- a shared GPU: a foreign process, two of ours, a foreign process growing ----------------
in_section shared && . "$root/tests/gpu/shared.sh"

# --- live tiering (issue 12): movable T2 promoted and demoted beside a foreign process ------
# One program (tests/gpu/tiering_check.py) starts and kills its foreign processes itself
# (without the shim) and prints tiering.* PASS/FAIL lines; tiering at its defaults
# (GREENBOOST_TIERING=auto, GREENBOOST_DEMOTE=on, GREENBOOST_TIER_INTERVAL_MS=100).
if [ "$mode" = full ] && [ -f "$shim" ] && in_section tiering; then
  run_test tiering "${shim_env[@]}" -- "$python" "$root/tests/gpu/tiering_check.py"
fi

# --- swapped roles (issues 34, 36): movable VRAM on a contested device ----------------------
# One program (tests/gpu/tiering_swap.py) starts its own foreign process (a balloon leaving
# 8 GiB, without the shim) and runs each check in processes of its own under the shim, at the
# defaults except where a check sets GREENBOOST_TIERING=off: training losses bit-identical
# with and without tiering while roles swap, tensors the shim moved through DLPack (CuPy,
# JAX) and Triton, cudaPointerGetAttributes, CUDA IPC refused with the shim's reason (and
# working with tiering off), make_room. It bounds each process itself; its own limit here.
if [ "$mode" = full ] && [ -f "$shim" ] && in_section swap; then
  saved_timeout=$test_timeout
  test_timeout=${GB_GPU_SWAP_TIMEOUT:-480}
  with_free_floor swap -- run_test swap "${shim_env[@]}" -- "$python" "$root/tests/gpu/tiering_swap.py"
  test_timeout=$saved_timeout
fi

# --- parts of one allocation (issue 36): GREENBOOST_TIERING=on, beside a balloon -----------
# One program (tests/gpu/tiering_ranges.py), tiering_swap.py's harness: the read quarter of a
# buffer far larger than the room promoted alone, and two kernels that name their pieces as
# often, one reading a sixteenth of them, weighed by their sampled times; the first again
# with GREENBOOST_GIVE_BACK=on beside a process allocating in a loop, which must never fail.
if [ "$mode" = full ] && [ -f "$shim" ] && in_section ranges; then
  saved_timeout=$test_timeout
  test_timeout=${GB_GPU_SWAP_TIMEOUT:-480}  # three roles of up to 150 s each
  with_free_floor ranges -- run_test ranges "${shim_env[@]}" -- "$python" "$root/tests/gpu/tiering_ranges.py"
  test_timeout=$saved_timeout
fi

# --- a long prompt beside a foreign process (issue 34): at the defaults ------------------------
# One program (tests/gpu/longctx_check.py), tiering_swap.py's harness: an HF generate of an
# 8B-shape model cut to 8 layers with an 8192-token prompt on the free GPU without the shim,
# then under the shim beside a balloon leaving the weights and 2 GiB: tokens identical; the
# prefill ratio is a figure.
if [ "$mode" = full ] && [ -f "$shim" ] && in_section longctx; then
  with_free_floor longctx -- run_test longctx "${shim_env[@]}" -- "$python" "$root/tests/gpu/longctx_check.py"
fi

# --- what the shim logged about its backend and cudaImportExternalMemory --------------------
shim_logs=$(ls "$logs"/*.err 2>/dev/null)
import_lines=$(cat $shim_logs /dev/null | grep -a -i 'importexternalmemory\|external memory' | sort | uniq -c | sort -rn | head -5)
backend_lines=$(cat $shim_logs /dev/null | grep -a -i 'T2 backend' | sed -E 's/greenboost\[[0-9]+\]: //' | sort | uniq -c | sort -rn | head -5)
summary_lines=$(grep -a -H 'summary:' $shim_logs /dev/null | sed -E "s#^$logs/##; s/greenboost\[[0-9]+\]: //" | head -20)

# --- results ---------------------------------------------------------------------------
date_utc=$(date -u +%Y-%m-%d)
# A run of some sections only (GB_GPU_SECTIONS) is named for them: two calls, two pages.
sections_tag=${GB_GPU_SECTIONS:+-$(tr ' ,' '--' <<<"$GB_GPU_SECTIONS")}
[ -n "${GB_GPU_ONLY:-}" ] && sections_tag=$sections_tag-only
# GreenBoost settings given to the run (GREENBOOST_GIVE_BACK=on, say) name it too, so that
# runs of one commit with and without a setting leave a page each.
# (The shim's settings are the names policy/src/settings.rs reads; GREENBOOST_LOG aside.)
settings=$(for name in $(grep -o '"GREENBOOST_[A-Z0-9_]*"' "$root/policy/src/settings.rs" | tr -d '"' | sort -u); do
  [ "$name" != GREENBOOST_LOG ] && [ -n "${!name:-}" ] && printf '%s=%s ' "$name" "${!name}"
done | sed 's/ $//')
[ -n "$settings" ] && sections_tag=$sections_tag-$(tr -c 'a-zA-Z0-9\n' '-' <<<"${settings//GREENBOOST_/}" | tr 'A-Z' 'a-z')
results_name=gpu-test-$date_utc-$commit$sections_tag.md
results=$logs/$results_name
# Free VRAM over time in the tests run beside a foreign process, from their sampler files
# (free_floor.sh's list).
series_name=
if [ -s "$logs/free-vram.tests" ]; then
  if "$python" -m gbgpu.free_vram series "$logs/free-vram.tests" "$logs/gpu-test-$date_utc-$commit$sections_tag-free-vram.json" \
    >"$logs/free-vram.series.out" 2>&1; then
    series_name=gpu-test-$date_utc-$commit$sections_tag-free-vram.json
  else
    fail free_vram.series "the free-VRAM series file could not be written: $(tail -c 400 "$logs/free-vram.series.out" | tr '\n' ' ')"
  fi
fi
if [ -s "$logs/not-run.txt" ]; then
  fail suite.deadline "$(wc -l <"$logs/not-run.txt") tests not run, past GB_GPU_DEADLINE_S=$GB_GPU_DEADLINE_S: $(tr '\n' ' ' <"$logs/not-run.txt")"
fi
passed=$(grep -c '^PASS ' "$summary")
failed=$(grep -c '^FAIL ' "$summary")
elapsed=$(( $(date -u +%s) - started ))
kvtable() {  # KV lines whose key starts with $1, as a two-column table
  grep -E "^KV $1" "$figures" | sed -E 's/^KV ([^=]*)=(.*)$/| \1 | \2 |/'
}
{
  echo "# GreenBoost GPU suite — $date_utc, commit $commit"
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| device | $gpu_name |"
  echo "| driver | $driver |"
  echo "| CUDA (driver API / runtime, from gb-gpu-check) | $(figure cuda.driver_version) / $(figure cuda.runtime_version) |"
  echo "| nvcc | ${nvcc_version:-none} |"
  echo "| PyTorch | ${torch_version:-none} |"
  echo "| kernel | $(uname -r) |"
  echo "| mode | $mode |"
  echo "| sections | ${GB_GPU_SECTIONS:-all} |"
  [ -n "${GB_GPU_ONLY:-}" ] && echo "| tests | only $GB_GPU_ONLY |"
  echo "| settings given (environment) | ${settings:-none: the defaults} |"
  echo "| physical VRAM (cudaMemGetInfo without the shim) | $physical_total bytes, $physical_free free |"
  echo "| result | $passed passed, $failed failed, ${elapsed}s |"
  echo "| free VRAM during the tests beside a foreign process | ${series_name:-(no samples)} |"
  echo
  echo "## cudaImportExternalMemory"
  echo
  echo "Asked directly of the driver by \`gb-gpu-check import\` (fd from $(figure import.source)):"
  echo "DMABUF_FD (9) -> $(figure import.dmabuf_fd_code), OPAQUE_FD (1) -> $(figure import.opaque_fd_code)"
  echo "(0 would be success; 1 CUDA_ERROR_INVALID_VALUE, 801 CUDA_ERROR_NOT_SUPPORTED, 999 CUDA_ERROR_UNKNOWN)."
  echo
  echo "What the shim logged about it (count, line):"
  echo
  echo '```'
  echo "${import_lines:-(no line mentions cudaImportExternalMemory: the shim did not try it, e.g. because /dev/greenboost is absent here and the userspace backend needs no import)}"
  echo '```'
  echo
  echo "Backend lines:"
  echo
  echo '```'
  echo "${backend_lines:-(none)}"
  echo '```'
  echo
  echo "## Host memory through VMM (cuMemCreate), asked directly of the driver"
  echo
  echo "Return codes by location and handle type (0: created), and the device attributes:"
  echo
  echo '```'
  grep -E '^KV vmm\.' "$figures" | sed 's/^KV //'
  echo '```'
  echo
  echo "## Outcomes"
  echo
  echo '```'
  cat "$summary"
  echo '```'
  echo
  echo "## Figures"
  echo
  echo "| key | value |"
  echo "| --- | --- |"
  kvtable ''
  echo
  echo "## Shim summaries at exit"
  echo
  echo '```'
  echo "${summary_lines:-(none)}"
  echo '```'
  echo
  echo "## Commands"
  echo
  echo '```'
  cat "$logs/commands.txt"
  echo '```'
} >"$results"

mkdir -p bench/results
cp "$results" "bench/results/$results_name"
[ -n "$series_name" ] && cp "$logs/$series_name" "bench/results/$series_name"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$results" "$OUT/$results_name"
  [ -n "$series_name" ] && cp "$logs/$series_name" "$OUT/$series_name"
  # Without the products the gemm checks saved to compare (*.pt, 25 MB each): with them
  # the tarball was too large for the device machine to send back, page and series lost.
  tar -czf "$OUT/gpu-test-logs.tar.gz" --exclude='*.pt' -C "$logs" .
fi
echo "results: bench/results/$results_name${series_name:+ and $series_name} (logs: $logs)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
