# The GPU suite's shared-GPU section, sourced by tests/gpu/run.sh (it uses run_test,
# pass, fail, note, figure, background, logs, python, shim, carry). A foreign process
# (plain PyTorch, not under the shim) holds VRAM while programs under the shim run;
# nvml samples free VRAM every 50 ms (free_floor.sh), and the shim must never be the
# reason it falls below the headroom. With GB_GPU_OLD_SHIM=PATH (a shim built before the headroom, e.g.
# at 5872527), the same tests run with it too, once, to show that they fail there.
shared_py=$root/tests/gpu/shared_gpu.py

run_test shared.measure -- "$python" "$shared_py" measure

# start_foreign NAME LEAVE_GIB [GROW_GIB DELAY_S]: the balloon; sets foreign_pid.
start_foreign() {
  local name=$1; shift
  wanted "$name" || return 1
  "$python" -m gbgpu.foreign balloon "$@" >"$logs/$name.balloon" 2>&1 &
  foreign_pid=$!
  background+=("$foreign_pid")
  for _ in $(seq 1 120); do
    grep -q '^ready' "$logs/$name.balloon" && return 0
    kill -0 "$foreign_pid" 2>/dev/null || break
    sleep 0.5
  done
  fail "$name.foreign" "the foreign process did not start: $(tail -c 300 "$logs/$name.balloon" | tr '\n' ' ')"
  return 1
}

shared_section() {
  local shim_lib=$1 tag=$2 shim_headroom_mib=$3
  local env=(LD_PRELOAD="$shim_lib" GREENBOOST_LOG=info)
  # (a) HF generate of a model larger than what the foreign process leaves.
  run_test "shared$tag.generate_alone" "${env[@]}" -- "$python" "$shared_py" generate "shared$tag.alone"
  if start_foreign "shared$tag.generate" 2; then
    with_free_floor "shared$tag.generate" -- run_test "shared$tag.generate_beside" "${env[@]}" -- \
      "$python" "$shared_py" generate "shared$tag.beside"
    stop_pid "$foreign_pid"
    local alone beside
    alone=$(figure "shared$tag.alone.tokens"); beside=$(figure "shared$tag.beside.tokens")
    if [ -n "$alone" ] && [ "$alone" = "$beside" ]; then
      pass "shared$tag.generate.same_tokens" "tokens $alone with and without the foreign process"
    else
      fail "shared$tag.generate.same_tokens" "tokens ${alone:-none} alone, ${beside:-none} beside the foreign process"
    fi
  fi
  # (b) two programs under the shim at once, each holding more than half the VRAM.
  local total_gib half_gib
  total_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1 | awk '{print int($1/1024)}')
  half_gib=$((total_gib * 58 / 100))
  two() {
    GB_SHARED_HOLD_S=25 run_test "shared$tag.two_first" "${env[@]}" GB_SHARED_HOLD_S=25 -- \
      "$python" "$shared_py" hold "shared$tag.first" "$half_gib" &
    local first=$!
    sleep 12
    run_test "shared$tag.two_second" "${env[@]}" GB_SHARED_HOLD_S=2 -- "$python" "$shared_py" hold "shared$tag.second" "$half_gib"
    wait "$first"
  }
  with_free_floor "shared$tag.two" -- two
  # (c) the foreign process grows while ours allocates.
  if start_foreign "shared$tag.grows" 24 12 4; then
    with_free_floor "shared$tag.grows" -- run_test "shared$tag.grows_hold" "${env[@]}" GB_SHARED_STEP_S=0.5 \
      GB_SHARED_HOLD_S=1 -- "$python" "$shared_py" hold "shared$tag.grows" 20
    grep -q '^grown' "$logs/shared$tag.grows.balloon" && note "shared$tag.grows.foreign_grew_mib" \
      "$(grep '^grown' "$logs/shared$tag.grows.balloon" | awk '{print $2}')"
    stop_pid "$foreign_pid"
  fi
  # (f) frameworks' own pools beside a foreign process that leaves 16 GiB: each holds
  # 32 GiB (past what is left) and verifies it.
  if start_foreign "shared$tag.pools" 16; then
    pools() {
      run_test "shared$tag.pool_torch_default" "${env[@]}" GB_SHARED_HOLD_S=0 -- \
        "$python" "$shared_py" hold "shared$tag.pool_torch_default" 32
      run_test "shared$tag.pool_torch_expandable" "${env[@]}" GB_SHARED_HOLD_S=0 \
        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- \
        "$python" "$shared_py" hold "shared$tag.pool_torch_expandable" 32
      run_test "shared$tag.pool_cupy_default" "${env[@]}" -- "$python" "$shared_py" cupy "shared$tag.pool_cupy_default" 32 default
      run_test "shared$tag.pool_cupy_async" "${env[@]}" -- "$python" "$shared_py" cupy "shared$tag.pool_cupy_async" 32 async
    }
    "$python" -c "import cupy" 2>/dev/null || note "shared$tag.pools.cupy" "not installed"
    with_free_floor "shared$tag.pools" -- pools
    stop_pid "$foreign_pid"
  fi
}

# (d) JAX: XLA's arena by default, the platform allocator past VRAM, combined report.
jax_section() {
  local env=(LD_PRELOAD="$shim" GREENBOOST_LOG=info) jax=$root/tests/gpu/jax_check.py past_gib
  past_gib=$(( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1 | awk '{print int($1/1024)}') + 12 ))
  run_test shared.jax_default "${env[@]}" -- "$python" "$jax" shared.jax_default 12
  with_free_floor shared.jax_platform -- run_test shared.jax_platform "${env[@]}" XLA_PYTHON_CLIENT_ALLOCATOR=platform -- \
    "$python" "$jax" shared.jax_platform "$past_gib"
  # XLA's BFC allocator partitions a preallocated arena "spatially" by default; in JAX
  # 0.11 that can abort when a buffer is freed ("spatial partitioning expects one central
  # gap", seen without the shim too, about once in 120 runs, and every time at exit here
  # with an arena past VRAM). The README gives JAX users in combined mode this flag.
  run_test shared.jax_combined "${env[@]}" GREENBOOST_REPORT=combined \
    XLA_FLAGS=--xla_gpu_enable_allocator_spatial_partitioning=false -- "$python" "$jax" shared.jax_combined "$past_gib"
  # Without the flag: recorded, not judged (the abort is XLA's own check).
  if starts_in_time shared.jax_combined_spatial; then
    timeout --kill-after=10 "$(time_for_test)" env "${env[@]}" GREENBOOST_REPORT=combined \
      "$python" "$jax" shared.jax_combined_spatial "$past_gib" >"$logs/shared.jax_combined_spatial.out" 2>"$logs/shared.jax_combined_spatial.err"
    note shared.jax_combined_spatial.exit_status "$?"
  fi
  # XLA_PYTHON_CLIENT_PREALLOCATE=false: past its limit XLA retries each allocation for
  # 10 s, then answers out-of-memory; with the combined report its limit includes T2.
  run_test shared.jax_noprealloc_budget "${env[@]}" GREENBOOST_VRAM_BUDGET=4G XLA_PYTHON_CLIENT_PREALLOCATE=false -- \
    "$python" "$jax" shared.jax_noprealloc_budget 4
  run_test shared.jax_noprealloc_combined "${env[@]}" GREENBOOST_VRAM_BUDGET=4G GREENBOOST_REPORT=combined \
    XLA_PYTHON_CLIENT_PREALLOCATE=false -- "$python" "$jax" shared.jax_noprealloc_combined 12
  run_test shared.jax_budget_platform "${env[@]}" GREENBOOST_VRAM_BUDGET=4G XLA_PYTHON_CLIENT_ALLOCATOR=platform -- \
    "$python" "$jax" shared.jax_budget_platform 12
}

# (g) torch.distributed with NCCL, one rank per visible GPU, tensors in T2 under a budget.
nccl_section() {
  local gpus
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  run_test shared.nccl LD_PRELOAD="$shim" GREENBOOST_LOG=info GREENBOOST_VRAM_BUDGET=2G -- \
    "$python" "$root/tests/gpu/multi_gpu.py" shared.nccl 4
  [ "$gpus" -ge 2 ] || note shared.nccl.two_gpus "not run: this machine has $gpus GPU"
}

if [ "$mode" = full ] && [ -f "$shim" ]; then
  shared_section "$shim" "" "$headroom_mib"
  "$python" -c "import jax" 2>/dev/null && jax_section
  nccl_section
  if [ -n "${GB_GPU_OLD_SHIM:-}" ] && [ -f "$GB_GPU_OLD_SHIM" ]; then
    # Expected to fail: the shim before the headroom fills what the foreign process left.
    shared_section "$GB_GPU_OLD_SHIM" ".old_shim" -
  fi
fi
