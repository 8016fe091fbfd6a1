# The GPU suite's free-VRAM floor, sourced by tests/gpu/run.sh before its sections (it
# uses pass, fail, note, background, logs, python): while a program under the shim runs
# beside a foreign process, nvml samples the device's free VRAM every 50 ms, outside the
# shim, and the shim must never be the reason it falls below the headroom.
headroom_mib=1024                 # the default headroom
min_free_mib=$((headroom_mib / 2)) # what "never below the headroom because of us" allows for small allocations
stop_pid() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# with_free_floor NAME -- run_test args...: samples free VRAM during the test (NAME.free:
# `UNIX_SECONDS FREE_MIB KEPT_MIB` a line), checks its minimum against the floor, and adds the test
# to free-vram.tests, from which run.sh writes the series file beside the results page
# (python/gbgpu/free_vram.py describes both). The headroom recorded is shim_headroom_mib
# where the caller sets it ("-": a shim without one), else the default.
with_free_floor() {
  local name=$1; shift 2
  starts_in_time "$name" || return 0
  "$python" -m gbgpu.free_vram sample "$logs/$name.free" &
  local sampler=$!
  background+=("$sampler")
  sleep 1
  local started ended
  started=$(date +%s.%3N)
  "$@"
  ended=$(date +%s.%3N)
  stop_pid "$sampler"
  local lowest kept verdict=FAIL
  # The lowest reading, and what the driver kept then for what our processes moved to T2
  # (their records): used as nvml counts it, though any allocation gets it.
  read -r lowest kept < <("$python" -m gbgpu.free_vram floor "$logs/$name.free")
  note "$name.min_free_mib" "${lowest:-?}"
  note "$name.kept_at_min_free_mib" "${kept:-?}"
  if [ -n "$lowest" ] && [ "$lowest" -ge "$min_free_mib" ]; then
    verdict=PASS
    pass "$name.free_floor" "free VRAM never below ${lowest} MiB (floor ${min_free_mib} MiB)"
  else
    fail "$name.free_floor" "free VRAM fell to ${lowest:-?} MiB (floor ${min_free_mib} MiB); the driver kept ${kept:-?} MiB then for what processes under the shim moved to T2"
  fi
  echo "$name $min_free_mib ${shim_headroom_mib:-$headroom_mib} $started $ended $verdict" >>"$logs/free-vram.tests"
}

