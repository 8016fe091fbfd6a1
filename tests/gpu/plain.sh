# The GPU suite's plain section, sourced by tests/gpu/run.sh (it uses run_test, pass, fail,
# note, figure, with_vram_peak, one_tensor_past_budget, wanted, logs, python, check,
# torch_check, shim, shim_env, mode and the sizes run.sh sets): the device alone, programs
# with and without the shim under a budget variable, operand staging bit-identical to
# zero-copy and to all-VRAM, and the capacity each report mode gives.
run_test import_probe -- "$check" import
run_test vmm_probe -- "$check" vmm
run_test rust_plain -- "$check" alloc --label rust_plain --total-gib 4 --async-gib 2 --expect vram
run_test torch_plain -- "$python" "$torch_check" tensors --label torch_plain --total-gib 4 --expect vram

budget_limit_mib=$((budget_gib * 1024 + vram_slack_mib))

if [ "$mode" = full ] && [ -f "$shim" ]; then
  # --- a VRAM budget: 3x the budget held at once ------------------------------------------
  with_vram_peak rust_budget "$budget_limit_mib" -- "${shim_env[@]}" GREENBOOST_VRAM_BUDGET=${budget_gib}G -- \
    "$check" alloc --label rust_budget --total-gib "$total_gib" --async-gib "$async_gib" --budget-gib "$budget_gib" --expect t2
  run_test rust_t2_cap "${shim_env[@]}" GREENBOOST_VRAM_BUDGET=${budget_gib}G GREENBOOST_T2_CAP=${small_t2_cap_gib}G -- \
    "$check" alloc --label rust_t2_cap --total-gib 16 --budget-gib "$budget_gib" --t2-cap-gib "$small_t2_cap_gib" --expect oom
  with_vram_peak torch_default "$budget_limit_mib" -- "${shim_env[@]}" GREENBOOST_VRAM_BUDGET=${budget_gib}G -- \
    "$python" "$torch_check" tensors --label torch_default --total-gib "$total_gib" --budget-gib "$budget_gib" --expect t2
  # Expandable segments map cuMemCreate handles into one reserved range: the VMM path. The
  # pointer's memory type does not tell the tier there, nvidia-smi's peak does.
  with_vram_peak torch_expandable "$budget_limit_mib" -- "${shim_env[@]}" GREENBOOST_VRAM_BUDGET=${budget_gib}G \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- \
    "$python" "$torch_check" tensors --label torch_expandable --total-gib "$total_gib" --budget-gib "$budget_gib" --expect t2 --pointer-placement 0

  # --- one allocation larger than the budget: split into a VRAM head and a T2 tail ----------
  # Placed once (GREENBOOST_TIERING=off): at the default the budget makes such a pool
  # movable instead (engine/movability.rs), which torch_bound_pool checks.
  one_tensor_past_budget torch_split GREENBOOST_TIERING=off
  if grep -q 'split 1;' "$logs/torch_split.err"; then
    pass torch_split.split "the shim's summary counts the ${split_gib} GiB tensor as split"
  else
    fail torch_split.split "the shim's summary does not count one split allocation: $(grep 'summary:' "$logs/torch_split.err" | head -1)"
  fi
  one_tensor_past_budget torch_bound_pool
  if grep -Eq 'live tiering: [1-9][0-9]* movable allocations' "$logs/torch_bound_pool.err"; then
    pass torch_bound_pool.movable "the ${split_gib} GiB tensor the budget binds is movable at the default"
  else
    fail torch_bound_pool.movable "the shim's summary counts no movable allocation: $(grep 'live tiering:' "$logs/torch_bound_pool.err" | tail -1)"
  fi

  # --- launch observation: the shim counts every kernel a profiler records ----------------
  run_test launch "${shim_env[@]}" -- "$python" "$root/tests/gpu/launch_check.py" --label launch

  # --- pool chunks keep VRAM: the 20 MiB segments PyTorch later fills with activations ----
  run_test torch_chunks "${shim_env[@]}" GREENBOOST_VRAM_BUDGET=2G -- "$python" "$torch_check" chunks --label torch_chunks

  # --- GEMM operand staging: bit-identical to zero-copy and to all-VRAM --------------------
  gemm_env=("${shim_env[@]}" GREENBOOST_VRAM_BUDGET=2G GREENBOOST_VRAM_RESERVE=2G)
  # t2_run KIND NAME SETTINGS...: torch_check's KIND (gemm, train) with its weights in T2,
  # as test NAME, under gemm_env and SETTINGS, its outputs into NAME.pt.
  t2_run() {
    local kind=$1 name=$2; shift 2
    run_test "$name" "${gemm_env[@]}" "$@" -- "$python" "$torch_check" "$kind" --label "$name" --expect t2 \
      --out "$logs/$name.pt"
  }
  run_test gemm_plain -- "$python" "$torch_check" gemm --label gemm_plain --expect vram --out "$logs/gemm_plain.pt"
  t2_run gemm gemm_zero_copy GREENBOOST_STAGING=off
  # Staged (the default: whole copies), pipelined (GREENBOOST_STAGE_SLICES=4: each slice
  # computed with the whole product's cuBLASLt algorithm) and streamed (a 16 MiB scratch for
  # the 32 MiB weights: each through two 8 MiB halves; on by default, GREENBOOST_STAGE_SLICES
  # as it is).
  t2_run gemm gemm_staged
  t2_run gemm gemm_sliced GREENBOOST_STAGE_SLICES=4
  t2_run gemm gemm_streamed GREENBOOST_STAGE_MAX=16M
  run_test gemm_compare -- "$python" "$torch_check" gemm-compare --label gemm_compare \
    --reference "$logs/gemm_plain.pt" --others "$logs/gemm_zero_copy.pt" "$logs/gemm_staged.pt" "$logs/gemm_sliced.pt" \
    "$logs/gemm_streamed.pt"
  # Training: the optimizer writes the T2 weights between the products that read them.
  run_test train_plain -- "$python" "$torch_check" train --label train_plain --expect vram --out "$logs/train_plain.pt"
  t2_run train train_staged
  t2_run train train_sliced GREENBOOST_STAGE_SLICES=4
  t2_run train train_streamed GREENBOOST_STAGE_MAX=16M
  run_test train_compare -- "$python" "$torch_check" gemm-compare --label train_compare \
    --reference "$logs/train_plain.pt" --others "$logs/train_staged.pt" "$logs/train_sliced.pt" "$logs/train_streamed.pt"
  # Pipelined (GREENBOOST_STAGE_SLICES=4) and streamed staging: the products were computed
  # in slices as their operand landed, the results above bit-identical all the same.
  for name in gemm_sliced train_sliced gemm_streamed train_streamed; do
    wanted "$name" || continue
    sliced=$(grep -o '[0-9]* in slices' "$logs/$name.err" | awk '{print $1}' | head -1)
    differed=$(grep -o '[0-9]* shapes unsliced' "$logs/$name.err" | awk '{print $1}' | head -1)
    note "$name.gemms_sliced" "${sliced:-none}"
    note "$name.shapes_unsliced" "${differed:-none}"
    if [ "${sliced:-0}" != none ] && [ "${sliced:-0}" -gt 0 ]; then
      pass "$name.slices_used" "$sliced products computed in slices as their operand landed (${differed:-?} shapes left whole as their slices differed)"
    else
      fail "$name.slices_used" "no product was computed in slices (${differed:-?} shapes left whole as their slices differed): $(grep 'summary:' "$logs/$name.err" | head -1)"
    fi
  done
  for name in gemm_zero_copy gemm_staged; do
    staged=$(grep -o 'GEMMs staged [0-9]*' "$logs/$name.err" | awk '{print $3}' | head -1)
    note "$name.gemms_staged" "${staged:-none}"
  done
  staged=$(figure gemm_staged.gemms_staged)
  if ! wanted gemm_staged || ! wanted gemm_zero_copy; then
    :  # GB_GPU_ONLY left one of them out: nothing to compare
  elif [ "${staged:-0}" != none ] && [ "${staged:-0}" -gt 0 ] && [ "$(figure gemm_zero_copy.gemms_staged)" = 0 ]; then
    pass gemm.staging_used "the staged run copied the T2 weights of $staged products into VRAM; GREENBOOST_STAGING=off copied none"
  else
    fail gemm.staging_used "staged products: $staged with staging on, $(figure gemm_zero_copy.gemms_staged) with it off (want >0 and 0)"
  fi

  # --- capacity reports in each mode --------------------------------------------------------
  for config in "physical $budget_gib" "combined $budget_gib" "combined 0"; do
    read -r report budget <<<"$config"
    label=capacity_${report}_budget${budget}
    cap_env=("${shim_env[@]}" GREENBOOST_REPORT=$report GREENBOOST_T2_CAP=${t2_cap_gib}G)
    [ "$budget" -gt 0 ] && cap_env+=(GREENBOOST_VRAM_BUDGET=${budget}G)
    run_test "${label}_rust" "${cap_env[@]}" -- "$check" report
    run_test "$label" "${cap_env[@]}" -- "$python" "$torch_check" capacity --label "$label" --report-mode "$report" \
      --budget-gib "$budget" --t2-cap-gib "$t2_cap_gib" --plain-report "$logs/report_plain.kv" \
      --rust-report "$logs/${label}_rust.out"
  done
fi
