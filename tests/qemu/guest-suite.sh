#!/bin/sh
# The module suite inside a QEMU guest. tests/qemu/init runs it as
# `/bin/sh /greenboost/guest-suite.sh` from /greenboost, which holds greenboost.ko,
# gb_importer.ko (test-only importer) and gb-guest-tests (tests/qemu/guest).
#
# Phases (each test prints `PASS name` or `FAIL name: reason`; SKIP lines are not
# counted; the t3 guest runs tests/qemu/t3-suite.sh's phases instead of 1-5):
#   1. load greenboost.ko with the main parameters and the importer; /dev/ram0 present
#   2. `gb-guest-tests all`, then /greenboost/extra/run.sh when the runner shipped one
#   3. rmmod is refused while a buffer (held by another process) or a device file is
#      alive, and works once they are gone; the final stats line reaches dmesg; reloaded,
#      rmmod racing the kill of the last holder refuses or unloads cleanly
#   4. reload with a reserve above the guest's RAM: every ALLOC refused, pressure on
#   5. reload with the defaults: the module works with no parameters at all
#   6. the kernel log holds no complaint since the suite started
# The last line is exactly `GUEST-SUMMARY: N passed, M failed`.

GB=/greenboost
BIN=$GB/gb-guest-tests
passed=0
failed=0

pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
check() { # check NAME REASON-IF-FALSE COMMAND...
  name=$1 reason=$2; shift 2
  if "$@"; then pass "$name"; else fail "$name" "$reason"; fi
}

# run_counted LABEL CMD... : runs CMD, streaming its output, and counts its PASS/FAIL
# lines; a non-zero exit without a FAIL line, or no result at all, is one failure.
run_counted() {
  label=$1; shift
  out=/tmp/gb-run.out
  { "$@" 2>&1; echo "$?" > /tmp/gb-run.rc; } | tee "$out"
  rc=$(cat /tmp/gb-run.rc)
  p=$(grep -c '^PASS ' "$out")
  f=$(grep -c '^FAIL ' "$out")
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    fail "$label" "exited with status $rc without a FAIL line"
  fi
  if [ "$p" = 0 ] && [ "$f" = 0 ]; then
    fail "$label" "printed no results"
  fi
}

run_tests() { run_counted "gb-guest-tests $*" "$BIN" "$@"; }

loaded() { grep -q "^$1 " /proc/modules; }

# Unloads greenboost, retrying briefly: the last file reference of a killed process
# may be dropped just after it is reaped.
unload() {
  i=0
  while [ $i -lt 30 ]; do
    rmmod greenboost 2>/tmp/rmmod.err && return 0
    i=$((i + 1))
    sleep 0.1
  done
  cat /tmp/rmmod.err
  return 1
}

load() { # load NAME ARGS...
  name=$1; shift
  if insmod $GB/greenboost.ko "$@" 2>/tmp/insmod.err && [ -c /dev/greenboost ] \
     && [ -r /sys/kernel/greenboost/stats ]; then
    pass "$name"
    return 0
  fi
  fail "$name" "insmod greenboost.ko $* failed: $(cat /tmp/insmod.err)"
  return 1
}

# Boot-time kernel lines are the host runner's business; ours start here.
log_start=$(dmesg | wc -l)

for f in greenboost.ko gb_importer.ko gb-guest-tests; do
  [ -e "$GB/$f" ] || fail "guest_files" "$GB/$f missing"
done
echo "guest: $(uname -r), $(nproc) cpus, nodes: $(cat /sys/devices/system/node/online 2>/dev/null)," \
     "$(grep MemAvailable /proc/meminfo)"

main_phases() {
# --- 1. main load -----------------------------------------------------------------
# Cap above RAM (so the over-RAM test meets the reserve, not the cap), a small
# reserve and cache (1 GiB must fit in a 2 GiB guest; zeroing is slow under TCG).
if load insmod_main pool_cap_mb=4096 reserve_mb=128 cache_mb=64 watchdog_ms=200; then
  check params_visible "module parameters do not show the values given to insmod" \
    sh -c 'grep -qx 4096 /sys/module/greenboost/parameters/pool_cap_mb &&
           grep -qx 128 /sys/module/greenboost/parameters/reserve_mb'
  if insmod $GB/gb_importer.ko 2>/tmp/insmod.err && [ -c /dev/gb_importer ]; then
    pass insmod_importer
  else
    fail insmod_importer "$(cat /tmp/insmod.err)"
  fi
  if [ ! -b /dev/ram0 ]; then
    modprobe brd rd_nr=1 rd_size=65536 2>/dev/null
  fi
  check ramdisk_present "/dev/ram0 missing (brd: built into the test kernel, insmodded by init on the stock one)" \
    test -b /dev/ram0

  # --- 2. the in-process tests ----------------------------------------------------
  run_tests all
  # Programs other suites ship into the guest (GB_GUEST_EXTRA, tests/qemu/README.md),
  # e.g. the shim against fake CUDA libraries and the real module.
  if [ -f $GB/extra/run.sh ]; then
    run_counted "extra/run.sh" sh $GB/extra/run.sh
  fi

  # --- 3. unload rules ------------------------------------------------------------
  "$BIN" hold-buffer 4194304 > /tmp/hold.out 2>&1 &
  holder=$!
  i=0
  while ! grep -q '^HOLDING ' /tmp/hold.out && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  if grep -q '^HOLDING ' /tmp/hold.out; then
    if rmmod greenboost 2>/dev/null; then
      fail rmmod_refused_with_live_buffer "rmmod succeeded while pid $holder held a buffer"
    else
      check rmmod_refused_with_live_buffer "module gone after a refused rmmod" loaded greenboost
    fi
  else
    fail rmmod_refused_with_live_buffer "holder did not get a buffer: $(cat /tmp/hold.out)"
  fi
  kill -9 "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  # A device file alone (no buffer) also pins the module.
  exec 3<>/dev/greenboost
  if rmmod greenboost 2>/dev/null; then
    fail rmmod_refused_with_open_device "rmmod succeeded with /dev/greenboost open"
  else
    pass rmmod_refused_with_open_device
  fi
  exec 3>&-
  rmmod gb_importer 2>/dev/null || fail rmmod_importer "rmmod gb_importer failed"
  if unload; then
    if [ -e /dev/greenboost ] || [ -e /sys/kernel/greenboost ]; then
      fail rmmod_after_release "device node or sysfs directory left behind"
    else
      pass rmmod_after_release
    fi
    run_tests check-unload-log
  else
    fail rmmod_after_release "rmmod still refused after the holder was killed"
  fi
  # rmmod racing the last close: a holder of a mapped buffer and a device file is
  # killed while rmmod runs in a tight loop. Every refused rmmod leaves the module
  # whole; the first one after the last reference drops unloads it cleanly (any WARN
  # or oops fails the run through the kernel-log check). Phase 4 loads it again.
  if ! loaded greenboost && load insmod_rmmod_race cache_mb=16; then
    sh -c "exec 4<>/dev/greenboost; exec $BIN hold-buffer 4194304" > /tmp/hold2.out 2>&1 &
    holder=$!
    i=0
    while ! grep -q '^HOLDING ' /tmp/hold2.out && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    if grep -q '^HOLDING ' /tmp/hold2.out; then
      kill -9 "$holder"
      tries=0; refused_whole=1; gone=0
      while [ $tries -lt 500 ]; do
        tries=$((tries + 1))
        if rmmod greenboost 2>/dev/null; then gone=1; break; fi
        [ -c /dev/greenboost ] && loaded greenboost || refused_whole=0
      done
      wait "$holder" 2>/dev/null
      if [ $gone = 0 ]; then
        unload && gone=1
      fi
      if [ $refused_whole = 0 ]; then
        fail rmmod_racing_last_close "a refused rmmod left the module without its device node"
      elif [ $gone = 0 ]; then
        fail rmmod_racing_last_close "rmmod still refused after the holder died"
      elif [ -e /dev/greenboost ] || [ -e /sys/kernel/greenboost ]; then
        fail rmmod_racing_last_close "device node or sysfs directory left behind"
      else
        echo "  # rmmod succeeded on try $tries after kill -9 of the holder"
        pass rmmod_racing_last_close
      fi
    else
      fail rmmod_racing_last_close "holder did not get a buffer: $(cat /tmp/hold2.out)"
      kill -9 "$holder" 2>/dev/null
      wait "$holder" 2>/dev/null
      unload
    fi
  fi
fi

# --- 4. reserve above RAM ---------------------------------------------------------
if ! loaded greenboost && load insmod_reserve_above_ram reserve_mb=1000000 cache_mb=16 watchdog_ms=100; then
  run_tests reserve-refusal
  unload || fail rmmod_reserve_phase "rmmod failed"
fi

# --- 5. defaults ------------------------------------------------------------------
if ! loaded greenboost && load insmod_defaults; then
  check default_parameters "defaults not applied (pool_cap_mb/reserve_mb)" \
    sh -c '[ "$(cat /sys/module/greenboost/parameters/pool_cap_mb)" -gt 0 ] &&
           [ "$(cat /sys/module/greenboost/parameters/reserve_mb)" -ge 64 ]'
  run_tests run alloc_2mib
  run_tests run close_releases_to_baseline
  unload && pass rmmod_defaults || fail rmmod_defaults "rmmod failed"
fi

}

# The t3 guest (tests/qemu/run.sh): its own phases, the same kernel log check.
if [ "${GB_GUEST:-}" = t3 ]; then
  . $GB/t3-suite.sh
  t3_phases
else
  main_phases
fi

# --- 6. kernel log ----------------------------------------------------------------
complaints=$(dmesg | tail -n +$((log_start + 1)) | grep -E 'Oops|BUG:|kernel BUG|WARNING:|Call Trace|general protection|UBSAN|KASAN|refcount_t:|list_(add|del) corruption|possible circular locking|inconsistent lock state|suspicious RCU|Bad page|Out of memory|oom-kill|Kernel panic')
if [ -z "$complaints" ]; then
  pass kernel_log_clean
else
  fail kernel_log_clean "$(echo "$complaints" | head -3 | tr '\n' '|')"
fi
echo "GUEST-SUMMARY: $passed passed, $failed failed"
