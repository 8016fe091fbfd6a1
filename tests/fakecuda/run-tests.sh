#!/bin/sh
# Runs the shim suite from a built directory (tests/fakecuda/run.sh --build-only DIR
# puts this script at DIR/run-tests.sh beside lib/ and bin/). Needs only a POSIX sh
# (busybox is enough), grep and timeout.
#
#   run-tests.sh [--kmod [--all]] [TEST...]
#
#   --kmod   T2 from the real module: GREENBOOST_BACKEND=kmod, /dev/greenboost required;
#            only the tests kmod-tests.list tags `kmod` (the ones whose outcome depends
#            on the module; the rest is shim logic the host run covers).
#            Default: the userspace backend (and a check that auto picks it when the
#            module is absent).
#   --all    with --kmod: every test that can run on the module, tagged or not.
#   TEST     run only these tests (names as printed).
#
# Environment: FAKECUDA_VRAM (fake device size, default 128M; the tests size their
# allocations from it), GBTEST_T2_CAP (T2 cap given to the shim, default 8x VRAM; the
# async tests hold 4x VRAM of T2 at once, so not less than that),
# GBTEST_SPLIT_SIZE (fake device size and allocation of the split-* tests, default 1G;
# they need about 2.5 times that in RAM), GBTEST_WORK (directory for logs, default a temp
# dir; kept on failure),
# GBTEST_TIMEOUT (seconds per test, default 180), FAKECUDA_HOLD_TIMEOUT (seconds a
# test may hold a stream, default 10; longer under emulation).
#
# Prints "PASS name" / "FAIL name: why" per test and finally "N passed, M failed";
# exits non-zero when anything failed.
set -u
dir=$(cd "$(dirname "$0")" && pwd)
LIB=$dir/lib
BIN=$dir/bin
SHIM=$LIB/libgreenboost_cuda.so

backend=userspace
all=""
only=""
for arg in "$@"; do
    case $arg in
    --kmod) backend=kmod ;;
    --all) all=all ;;
    -*) echo "unknown option $arg" >&2; exit 2 ;;
    *) only="$only $arg" ;;
    esac
done

to_bytes() {
    case $1 in
    *[kK]) echo $(( ${1%?} * 1024 )) ;;
    *[mM]) echo $(( ${1%?} * 1048576 )) ;;
    *[gG]) echo $(( ${1%?} * 1073741824 )) ;;
    *) echo $(( $1 )) ;;
    esac
}
VRAM=$(to_bytes "${FAKECUDA_VRAM:-128M}")
T2CAP=$(to_bytes "${GBTEST_T2_CAP:-$(( VRAM * 8 ))}")
export FAKECUDA_VRAM=$VRAM FAKECUDA_HOLD_TIMEOUT=${FAKECUDA_HOLD_TIMEOUT:-10}
# The tests that measure reported free memory to the byte run without a headroom; the
# headroom tests (headroom-*) set their own.
export GREENBOOST_VRAM_HEADROOM=${GREENBOOST_VRAM_HEADROOM:-0}
test_timeout=${GBTEST_TIMEOUT:-180}
work=${GBTEST_WORK:-$(mktemp -d /tmp/gbtest.XXXXXX)}
mkdir -p "$work"

# The fake pins registered memory as the driver does, but io_uring and mlock pins count
# against RLIMIT_MEMLOCK for unprivileged users (the driver's do not).
if [ "$(id -u)" != 0 ]; then
    lim=$(ulimit -l)
    if [ "$lim" != unlimited ] && [ "$lim" -lt $(( (VRAM * 8) / 1024 )) ]; then
        echo "note: memlock limit ${lim} KiB is below what the fake pins; run as root or raise ulimit -l"
    fi
fi

passed=0
failed=0
why=""

# run NAME [VAR=value...] PROGRAM ARGS: runs with the fakes (and whatever LD_PRELOAD
# the assignments set), output in $work/NAME.out, fake's call log in $work/NAME.log.
# Fails (with $why) on a non-zero exit, a missing "ok" line, or a device fault.
run() {
    name=$1
    shift
    out=$work/$name.out
    log=$work/$name.log
    rm -f "$log"
    timeout "$test_timeout" env LD_LIBRARY_PATH="$LIB" FAKECUDA_LOG="$log" "$@" >"$out" 2>&1 </dev/null
    rc=$?
    if [ $rc -ne 0 ]; then
        why=$(grep -m1 '^FAIL:' "$out" | cut -c7-)
        [ -n "$why" ] || why="exit status $rc ($( [ $rc -eq 124 ] && echo 'timed out: hang?' || tail -n 2 "$out" | tr '\n' ' '))"
        return 1
    fi
    if ! grep -q '^ok ' "$out"; then
        why="no ok line: $(tail -n 2 "$out" | tr '\n' ' ')"
        return 1
    fi
    if [ -f "$log" ] && grep -q ' FAULT ' "$log"; then
        why="device fault: $(grep -m1 ' FAULT ' "$log" | cut -d' ' -f3-)"
        return 1
    fi
    return 0
}

# A run that must fail, for the reason given (proves the test can fail).
run_fails() {
    name=$1
    want=$2
    shift 2
    if run "$name" "$@"; then
        why="passed without the shim: this test cannot tell a working shim from none"
        return 1
    fi
    if ! grep -q -- "$want" "$out"; then
        why="failed, but not with '$want': $why"
        return 1
    fi
    return 0
}

log_has() {
    if ! grep -q -- "$1" "$log"; then
        why="$2 (no '$1' in the fake's call log $log)"
        return 1
    fi
}

out_has() {
    if ! grep -qi -- "$1" "$out"; then
        why="$2 (no '$1' in the output $out)"
        return 1
    fi
}

# Shim settings shared by the tests: no VRAM reserve (the fake device is small), a T2
# cap, the backend under test, and no T2 cache, so that every free is seen to unpin its
# memory (the *-t2cache tests run with the cache).
SHIMENV="LD_PRELOAD=$SHIM GREENBOOST_BACKEND=$backend GREENBOOST_VRAM_RESERVE=0 GREENBOOST_T2_CAP=$T2CAP GREENBOOST_T2_CACHE=0"
# The same with a T2 cache of one VRAM's size; the tests then accept that up to that much
# stays registered after every free.
CACHEENV="$SHIMENV GREENBOOST_T2_CACHE=$VRAM GBTEST_ALLOW_T2_CACHE=1"
shim() { run "$@"; }

# ---------------------------------------------------------------- control (no shim)

t_control_fake_selftest() {
    run control-fake-selftest "$BIN/gbdriver" hostreg || return 1
    log_has "PINNED by=" "the fake did not pin registered memory" || return 1
    log_has "PIN_FAILED" "the fake registered PROT_NONE memory" || return 1
}
t_control_fake_detectors() {
    # The fake's detectors fire: CUDA call in a host callback, illegal address, a wait on
    # held work (these faults are the point here, so run()'s verdict is not used).
    run control-fake-detectors FAKECUDA_HOLD_TIMEOUT=1 "$BIN/gbdriver" detectors
    if ! grep -q '^ok detectors' "$out"; then
        why="detectors: $(grep -m1 '^FAIL:' "$out" | cut -c7-)"
        return 1
    fi
    log_has "CALL_FROM_CALLBACK" "no fault logged for a CUDA call from a host callback" || return 1
    log_has "ILLEGAL_ADDRESS" "no fault logged for an illegal address" || return 1
    log_has "HOLD_TIMEOUT" "no fault logged for waiting on held work"
}
t_control_fake_managed() {
    # The fake's managed memory alone (drv_tests.c managed-fake-model): on two devices,
    # its VRAM counted in a device share file as other processes see it.
    share=$work/control-fake-managed.share
    rm -f "$share"
    run control-fake-managed FAKECUDA_DEVICES=2 FAKECUDA_VRAM1=$(( VRAM / 2 )) FAKECUDA_DEVICE_SHARE="$share" \
        "$BIN/gbdriver" managed-fake-model || return 1
    log_has "cuMemPrefetchAsync_v2 .* -> 0" "the fake did not log its prefetches"
}
t_control_fake_managed_kept() {
    # FAKECUDA_MANAGED_KEEPS_VRAM alone (drv_managed_tests.c managed-kept): the VRAM managed
    # pages leave stays taken, moves in take fresh VRAM, an allocation past free VRAM (this
    # process's, then another's) takes the kept VRAM first, a free gives back the rest.
    share=$work/control-fake-managed-kept.share
    rm -f "$share"
    run control-fake-managed-kept FAKECUDA_MANAGED_KEEPS_VRAM=1 FAKECUDA_DEVICE_SHARE="$share" \
        GBTEST_BALLOON_BIN="$BIN/gbballoon" "$BIN/gbdriver" managed-kept
}
t_control_runtime_uses_getprocaddress() {
    run control-runtime-getprocaddress "$BIN/gbtest-rt13" no-t2 || return 1
    log_has "cuGetProcAddress_v2 sym=cuMemAlloc ver=13000" "fake cudart 13 did not fetch cuMemAlloc through cuGetProcAddress_v2"
}
t_control_alloc4x_fails() {
    run_fails control-alloc4x-fails "error 2" "$BIN/gbtest-rt13" alloc4x
}
t_control_gpa_unhooked() {
    run_fails control-gpa-unhooked "VRAM allocation -> 2" "$BIN/gbdriver" gpa "$VRAM"
}
t_control_vmm_fails() {
    run_fails control-vmm-fails "cuMemCreate of chunk" "$BIN/gbdriver" vmm
}
t_control_async_fails() {
    run_fails control-async-fails "returned 2" "$BIN/gbtest-rt13" async
}
t_control_discover_physical() {
    run control-discover "$BIN/gbdiscover" "$VRAM"
}
t_control_framework_rtld_local() {
    run control-framework-rtld-local "$BIN/gbtest-fw" no-t2
}

# ---------------------------------------------------------------- under the shim

t_alloc4x() { # $1: program
    shim "alloc4x-$1" $SHIMENV GBTEST_EXPECT_VRAM_ALLOCS=2 "$BIN/gbtest-$1" alloc4x
}
t_alloc4x_rt13() { t_alloc4x rt13; }
t_alloc4x_rt12() { t_alloc4x rt12; }
t_alloc4x_fw() { t_alloc4x fw; }

t_caps_physical() { shim "caps-physical-$1" $SHIMENV GREENBOOST_REPORT=physical "$BIN/gbtest-$1" caps "$VRAM"; }
t_caps_combined() {
    shim "caps-combined-$1" $SHIMENV GREENBOOST_REPORT=combined "$BIN/gbtest-$1" caps $(( VRAM + T2CAP )) combined
}
t_caps_physical_rt13() { t_caps_physical rt13; }
t_caps_physical_rt12() { t_caps_physical rt12; }
t_caps_physical_fw() { t_caps_physical fw; }
t_caps_combined_rt13() { t_caps_combined rt13; }
t_caps_combined_rt12() { t_caps_combined rt12; }
t_caps_combined_fw() { t_caps_combined fw; }
t_caps_budget() {
    # A budget makes the device look smaller in physical mode.
    shim caps-budget-rt13 $SHIMENV GREENBOOST_REPORT=physical GREENBOOST_VRAM_BUDGET=$(( VRAM / 2 )) \
        "$BIN/gbtest-rt13" caps $(( VRAM / 2 ))
}

t_discover_physical() { shim discover-physical $SHIMENV GREENBOOST_REPORT=physical "$BIN/gbdiscover" "$VRAM"; }
t_discover_combined() {
    shim discover-combined $SHIMENV GREENBOOST_REPORT=combined "$BIN/gbdiscover" $(( VRAM + T2CAP ))
}

t_runtime_dlsym_13() { shim runtime-dlsym-13 $SHIMENV "$BIN/gbdiscover" runtime libcudart.so.13; }
t_runtime_dlsym_12() { shim runtime-dlsym-12 $SHIMENV "$BIN/gbdiscover" runtime libcudart.so.12; }
t_control_runtime_dlsym_fails() {
    run_fails control-runtime-dlsym-fails "bytes -> 2" "$BIN/gbdiscover" runtime libcudart.so.13
}

t_placement() {
    shim placement $SHIMENV GREENBOOST_VRAM_BUDGET=$(( VRAM / 2 )) GREENBOOST_MIN_T2_SIZE=4M \
        "$BIN/gbtest-rt13" placement
}

t_reserve() {
    # Quarter-VRAM allocations keep twice the reserve free while loading (half of VRAM);
    # the 20 MiB chunks after them fill VRAM up to the reserve.
    shim reserve $SHIMENV GREENBOOST_VRAM_RESERVE=$(( VRAM / 4 )) GREENBOOST_MIN_T2_SIZE=4M \
        "$BIN/gbtest-rt13" placement
}
t_reserve_split() {
    # The same with the quarter-VRAM allocations large enough to split: a split's VRAM
    # head keeps the chunks' room too, as the allocation whole would.
    shim reserve-split $SHIMENV GREENBOOST_VRAM_RESERVE=$(( VRAM / 4 )) GREENBOOST_MIN_T2_SIZE=4M \
        GREENBOOST_SPLIT_MIN=$(( VRAM / 4 )) "$BIN/gbtest-rt13" placement
}
t_alloc4x_deepbind() {
    shim alloc4x-fw-deepbind $SHIMENV GBTEST_DEEPBIND=1 GBTEST_EXPECT_VRAM_ALLOCS=2 "$BIN/gbtest-fw" alloc4x
}
t_alloc4x_mlock() {
    # Where io_uring is unavailable the fake pins with mlock; the shim must not care.
    shim alloc4x-mlock $SHIMENV FAKECUDA_PIN=mlock "$BIN/gbtest-rt13" alloc4x || return 1
    log_has "PINNED by=mlock" "the fake did not take its mlock path"
}

t_async_rt13() { shim async-rt13 $SHIMENV "$BIN/gbtest-rt13" async; }
t_async_fw() { shim async-fw $SHIMENV "$BIN/gbtest-fw" async; }
t_driver_async() { shim driver-async $SHIMENV "$BIN/gbdriver" driver-async; }

t_gpa_physical() {
    shim gpa-physical $SHIMENV GREENBOOST_REPORT=physical "$BIN/gbdriver" gpa "$VRAM" || return 1
    log_has "cuMemAllocAsync_ptsz" "CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM did not reach the driver's _ptsz variant" || return 1
    log_has "cuMemFreeAsync_ptsz" "per-thread cuMemFreeAsync did not reach the driver's _ptsz variant" || return 1
    log_has "cuMemAlloc(v1)" "cuGetProcAddress for version 3000 did not give the v1 entry point" || return 1
}
t_gpa_combined() {
    shim gpa-combined $SHIMENV GREENBOOST_REPORT=combined "$BIN/gbdriver" gpa $(( VRAM + T2CAP ))
}
t_entrypoints_rt13() { shim entrypoints-rt13 $SHIMENV "$BIN/gbtest-rt13" entrypoints; }
t_entrypoints_rt12() { shim entrypoints-rt12 $SHIMENV "$BIN/gbtest-rt12" entrypoints; }
t_entrypoints_fw() { shim entrypoints-fw $SHIMENV "$BIN/gbtest-fw" entrypoints; }

t_vmm() { shim vmm $SHIMENV "$BIN/gbdriver" vmm; }
t_vmm_rdma() { shim vmm-rdma $SHIMENV "$BIN/gbdriver" vmm rdma; }
# NCCL-style fabric buffers stay on the device under a budget.
t_vmm_shareable() { shim vmm-shareable $SHIMENV GREENBOOST_VRAM_BUDGET=$(( VRAM / 4 )) "$BIN/gbdriver" vmm-shareable; }
t_expandable_rt13() { shim expandable-rt13 $SHIMENV "$BIN/gbtest-rt13" expandable; }
t_control_expandable_fails() {
    run_fails control-expandable-fails "cuMemCreate (entry point)" "$BIN/gbtest-rt13" expandable
}

t_threads_rt13() { shim threads-rt13 $SHIMENV GREENBOOST_MIN_T2_SIZE=1M "$BIN/gbtest-rt13" threads; }
t_threads_fw() { shim threads-fw $SHIMENV GREENBOOST_MIN_T2_SIZE=1M "$BIN/gbtest-fw" threads; }
t_fork() {
    # A small budget so that the background threads' 4 MiB allocations go to T2 and keep
    # the shim's T2 bookkeeping busy while the main thread forks.
    shim fork $SHIMENV GREENBOOST_VRAM_BUDGET=$(( VRAM / 16 )) "$BIN/gbtest-rt13" fork
}

t_lasterror_rt13() {
    # Every allocation tries VRAM first, so the driver's out-of-memory is what sends the
    # later ones to T2.
    shim lasterror-rt13 $SHIMENV GREENBOOST_MIN_T2_SIZE=$(( VRAM * 2 )) "$BIN/gbtest-rt13" lasterror
}
t_lasterror_fw() {
    shim lasterror-fw $SHIMENV GREENBOOST_MIN_T2_SIZE=$(( VRAM * 2 )) "$BIN/gbtest-fw" lasterror
}
t_control_lasterror_fails() {
    run_fails control-lasterror-fails "bytes -> 2" "$BIN/gbtest-rt13" lasterror
}
t_errors_rt13() { shim errors-rt13 $SHIMENV "$BIN/gbtest-rt13" errors; }
t_errors_rt12() { shim errors-rt12 $SHIMENV "$BIN/gbtest-rt12" errors; }
t_t2cap() {
    run t2cap $SHIMENV GREENBOOST_T2_CAP=$VRAM GREENBOOST_VRAM_BUDGET=$(( VRAM / 2 )) "$BIN/gbtest-rt13" t2cap
}

# The T2 cache keeps pinned T2: live tiering off in these three, or the first allocation,
# larger than the budget (a pool of weights), would be movable memory.
t_t2cache() {
    shim t2cache $CACHEENV GREENBOOST_TIERING=off GREENBOOST_VRAM_BUDGET=$(( VRAM / 8 )) GREENBOOST_T2_CAP=$(( VRAM * 2 )) GREENBOOST_LOG=debug \
        "$BIN/gbtest-rt13" t2cache "$VRAM" $(( VRAM * 2 )) || return 1
    out_has "reused from the T2 cache" "the shim's debug log does not show a cached buffer reused"
}
# Module only: raises the module's reserve above RAM (root) to make pressure, frees a
# T2 buffer, and wants nothing kept in the cache; restores the reserve.
t_t2cache_pressure() {
    shim t2cache-pressure $CACHEENV GREENBOOST_TIERING=off GREENBOOST_VRAM_BUDGET=$(( VRAM / 8 )) GREENBOOST_T2_CAP=$(( VRAM * 2 )) \
        "$BIN/gbtest-rt13" t2cache-pressure
}
t_control_t2cache_off_fails() {
    run_fails control-t2cache-off-fails "was not kept registered" $SHIMENV GREENBOOST_TIERING=off GREENBOOST_VRAM_BUDGET=$(( VRAM / 8 )) \
        GREENBOOST_T2_CAP=$(( VRAM * 2 )) "$BIN/gbtest-rt13" t2cache "$VRAM" $(( VRAM * 2 ))
}
# With the cache on: stream-ordered frees, threads and fork as above, and a T2 cap that
# only holds when the cache gives its room back.
t_async_t2cache() { shim async-t2cache $CACHEENV "$BIN/gbtest-rt13" async; }
t_threads_t2cache() { shim threads-t2cache $CACHEENV GREENBOOST_MIN_T2_SIZE=1M "$BIN/gbtest-rt13" threads; }
t_fork_t2cache() { shim fork-t2cache $CACHEENV GREENBOOST_VRAM_BUDGET=$(( VRAM / 16 )) "$BIN/gbtest-rt13" fork; }
t_t2cap_t2cache() {
    run t2cap-t2cache $CACHEENV GREENBOOST_T2_CAP=$VRAM GREENBOOST_VRAM_BUDGET=$(( VRAM / 2 )) "$BIN/gbtest-rt13" t2cap
}

# Split placement: a fake device of SPLIT bytes (GBTEST_SPLIT_SIZE, default 1G), a budget
# of half of it, one cudaMalloc of SPLIT: a VRAM head of SPLIT/2 and a host tail.
SPLIT=$(to_bytes "${GBTEST_SPLIT_SIZE:-1G}")
# Live tiering off: at its default one allocation larger than the budget, the program's
# pool of weights, is movable memory instead (t_bound_pool_movable).
SPLITENV="$SHIMENV FAKECUDA_VRAM=$SPLIT GREENBOOST_VRAM_BUDGET=$(( SPLIT / 2 )) GREENBOOST_TIERING=off"
t_split() { # $1: program
    shim "split-$1" $SPLITENV GREENBOOST_REPORT=combined GREENBOOST_LOG=info \
        "$BIN/gbtest-$1" split "$SPLIT" split $(( SPLIT / 2 )) || return 1
    for call in "cuMemAddressReserve size=$SPLIT -> 0" "cuMemCreate size=$(( SPLIT / 2 )) loc=1" \
        "cuMemCreate size=$(( SPLIT / 2 )) loc=3" "cuMemUnmap" "cuMemRelease -> 0" "cuMemAddressFree -> 0"; do
        log_has "$call" "the split did not go through the driver's VMM calls" || return 1
    done
    out_has "split 2;" "GREENBOOST_LOG=info: the exit summary does not count the 2 split allocations"
}
t_split_rt13() { t_split rt13; }
t_split_fw() { t_split fw; }
t_control_split_fails() {
    run_fails control-split-fails "not split" FAKECUDA_VRAM=$SPLIT "$BIN/gbtest-rt13" split "$SPLIT" split
}
t_split_async() { shim split-async $SPLITENV "$BIN/gbtest-rt13" split-async "$SPLIT"; }
t_split_pool() {
    # A reserve of a quarter of the budget (the default's eighth would be 64 MiB here).
    shim split-pool $SPLITENV GREENBOOST_VRAM_RESERVE=$(( SPLIT / 8 )) GREENBOOST_LOG=info \
        "$BIN/gbtest-rt13" split-pool "$SPLIT" $(( SPLIT / 8 )) || return 1
    out_has "the program pools its weights" "GREENBOOST_LOG=info: no line says the reserve opened after the pool"
}
t_driver_split() { shim driver-split $SPLITENV "$BIN/gbdriver" driver-split "$SPLIT"; }
t_split_off() {
    # GREENBOOST_SPLIT_MIN=off: the allocation goes wholly to T2, as before splitting existed.
    shim split-off $SPLITENV GREENBOOST_SPLIT_MIN=off "$BIN/gbtest-rt13" split "$SPLIT" t2 || return 1
    if grep -q "cuMemAddressReserve" "$log"; then
        why="GREENBOOST_SPLIT_MIN=off, yet the shim reserved a VMM range"
        return 1
    fi
}
t_split_min() {
    shim split-min $SPLITENV GREENBOOST_SPLIT_MIN=$(( SPLIT + 1 )) "$BIN/gbtest-rt13" split "$SPLIT" t2
}
t_split_t2cap() {
    # The tail does not fit the T2 cap, and the whole allocation less so: out-of-memory.
    shim split-t2cap $SPLITENV GREENBOOST_T2_CAP=$(( SPLIT / 4 )) "$BIN/gbtest-rt13" split "$SPLIT" oom
}
t_split_undo() { # $1: the VMM step the fake fails
    shim "split-undo-$1" $SPLITENV FAKECUDA_FAIL_VMM=$1 GREENBOOST_LOG=info "$BIN/gbtest-rt13" split "$SPLIT" t2 || return 1
    log_has "INJECTED $1 failure" "the fake did not fail $1" || return 1
    out_has "split of .* failed at" "GREENBOOST_LOG=info: no line says why the allocation was not split"
}
t_split_undo_create_host() { t_split_undo create-host; }
t_bound_host_short() {
    # Live tiering at its default, the budget binding, and a host reserve no host has:
    # the weight pool is neither movable T2 nor a split tail (driver memory, which never
    # goes to swap); the backend's T2 is asked, and userspace keeps the same reserve: out
    # of memory, nothing held (the module would hand out its buffers, which swap can take).
    shim bound-host-short $SHIMENV FAKECUDA_VRAM=$SPLIT GREENBOOST_VRAM_BUDGET=$(( SPLIT / 2 )) \
        GREENBOOST_HOST_RESERVE=1T GREENBOOST_LOG=info "$BIN/gbtest-rt13" split "$SPLIT" oom
}
t_split_undo_set_access() { t_split_undo set-access; }

t_backend_auto_userspace() {
    if [ -e /dev/greenboost ]; then
        why="skipped check needs /dev/greenboost absent"
        return 0
    fi
    # The shim's defaults, the T2 cache included (so memory up to its size stays registered).
    shim backend-auto-userspace LD_PRELOAD="$SHIM" GREENBOOST_BACKEND=auto GREENBOOST_VRAM_RESERVE=0 \
        GREENBOOST_T2_CAP=$T2CAP GREENBOOST_LOG=info GBTEST_ALLOW_T2_CACHE=1 "$BIN/gbtest-rt13" alloc4x || return 1
    out_has "userspace" "with no /dev/greenboost the shim's log does not say it uses the userspace backend" || return 1
    out_has "peak T1" "GREENBOOST_LOG=info: no per-process summary with peak T1/T2 at exit" || return 1
    out_has "peak T2" "GREENBOOST_LOG=info: no per-process summary with peak T1/T2 at exit"
}
t_log_environment() {
    # At load the shim names GREENBOOST_* variables nothing reads and counts it clamps
    # (GREENBOOST_LOG=info); at debug level its configuration dump, longer than one
    # 512-byte line, goes out whole over continuation lines (it was cut).
    shim log-environment $SHIMENV GREENBOOST_LOG=debug GREENBOOST_VRAMBUDGET=8G GREENBOOST_STAGE_SLICES=99 \
        "$BIN/gbtest-rt13" forkexit || return 1
    out_has "GREENBOOST_VRAMBUDGET is not a GreenBoost variable" "the misspelled name was not named" || return 1
    out_has "GREENBOOST_STAGE_SLICES=99 is outside 1..=8: the shim uses 8" "the clamped count was not named" || return 1
    out_has "link_bytes_per_s: [0-9]* }" "the configuration dump was cut (its last field)"
}
t_summary_once() {
    # One summary line, the parent's, however many processes ran the shim's atexit handler.
    shim summary-once $SHIMENV GREENBOOST_LOG=info "$BIN/gbtest-rt13" forkexit || return 1
    parent=$(sed -n 's/^parent pid //p' "$out")
    n=$(grep -c 'summary: pid [0-9]*: peak' "$out")
    if [ "$n" -ne 1 ]; then
        why="$n exit summaries, want 1 (the parent is $parent): $(grep 'summary: pid [0-9]*: peak' "$out" | tr '\n' ' ')"
        return 1
    fi
    out_has "greenboost\[$parent\]: summary: pid $parent:" "the one summary is not the parent's (pid $parent)"
}
t_backend_kmod_absent() {
    if [ -e /dev/greenboost ]; then
        return 0
    fi
    shim backend-kmod-absent LD_PRELOAD="$SHIM" GREENBOOST_BACKEND=kmod GREENBOOST_VRAM_RESERVE=0 \
        GREENBOOST_LOG=info "$BIN/gbtest-rt13" no-t2 || return 1
    out_has "greenboost" "GREENBOOST_BACKEND=kmod without the module: no message says why T2 is missing"
}

# Module-backed (--kmod): the DMA-BUF import is tried once per process, refused, and
# the buffer is pinned long-term by cuMemHostRegister.
t_kmod_import_and_pin() {
    shim kmod-alloc4x $SHIMENV GBTEST_EXPECT_VRAM_ALLOCS=2 "$BIN/gbtest-rt13" alloc4x || return 1
    log_has "cuImportExternalMemory type=9 .* -> 801" "the shim never tried importing the DMA-BUF (DMABUF_FD)" || return 1
    log_has "cuImportExternalMemory type=1 .* -> 999" "the shim never tried importing the DMA-BUF as OPAQUE_FD" || return 1
    n9=$(grep -c "cuImportExternalMemory type=9" "$log")
    if [ "$n9" -ne 1 ]; then
        why="DMABUF_FD import tried $n9 times; once per process is enough"
        return 1
    fi
    log_has "PINNED by=" "no module buffer was registered with cuMemHostRegister" || return 1
    if grep -q "PIN_FAILED" "$log"; then
        why="cuMemHostRegister could not pin a module buffer long-term: $(grep -m1 PIN_FAILED "$log")"
        return 1
    fi
}

control_tests="control_fake_selftest control_fake_detectors control_fake_managed control_fake_managed_kept control_runtime_uses_getprocaddress control_alloc4x_fails
control_gpa_unhooked control_vmm_fails control_async_fails control_runtime_dlsym_fails control_expandable_fails control_lasterror_fails control_discover_physical control_framework_rtld_local"
shim_tests="alloc4x_rt13 alloc4x_rt12 alloc4x_fw caps_physical_rt13 caps_physical_rt12 caps_physical_fw
caps_combined_rt13 caps_combined_rt12 caps_combined_fw caps_budget discover_physical discover_combined runtime_dlsym_13 runtime_dlsym_12 placement
reserve reserve_split alloc4x_deepbind alloc4x_mlock
async_rt13 async_fw driver_async gpa_physical gpa_combined entrypoints_rt13 entrypoints_rt12 entrypoints_fw vmm vmm_rdma vmm_shareable expandable_rt13
threads_rt13 threads_fw fork log_environment summary_once errors_rt13 errors_rt12 lasterror_rt13 lasterror_fw t2cap
split_rt13 split_fw control_split_fails split_async split_pool driver_split split_off split_min split_t2cap split_undo_create_host split_undo_set_access bound_host_short
t2cache control_t2cache_off_fails async_t2cache threads_t2cache fork_t2cache t2cap_t2cache
gemm_products_rt13 gemm_products_fw gemm_products_old_lt gemm_movable gemm_movable_no_kernels gemm_staging_off gemm_default_width gemm_stage_max gemm_bf16_offset gemm_two_streams gemm_capture gemm_sliced gemm_sliced_narrow gemm_sliced_differs gemm_streamed gemm_sliced_off
gemm_lookahead_none gemm_lookahead_kernel gemm_lookahead_memset gemm_lookahead_memcpy gemm_lookahead_graph gemm_lookahead_unread gemm_lookahead_batched gemm_lookahead_ltbatched gemm_lookahead_symbol gemm_lookahead_library gemm_lookahead_graphsymbol gemm_lookahead_off"
headroom_tests="headroom_control_oom headroom_foreign headroom_grows headroom_two_shims headroom_report headroom_default"
. "$dir/gemm-tests.sh"
. "$dir/headroom-tests.sh"
. "$dir/tier-tests.sh"
. "$dir/devices-tests.sh"
. "$dir/launch-tests.sh"
devices_tests="devices_fake devices_budget devices_control_uniform_fails devices_headroom devices_driver"
kmod_capable="$control_tests kmod_import_and_pin t2cache_pressure $shim_tests $headroom_tests"
userspace_tests="$control_tests $shim_tests $headroom_tests $devices_tests $tier_tests $launch_tests backend_auto_userspace backend_kmod_absent"

# kmod-tests.list tags every test kmod or host (see there): each test of either list
# must be tagged exactly once, and every tagged name must be a test, or the selection
# itself fails. --kmod runs the kmod-tagged ones (--all: every kmod-capable test).
selection=$dir/kmod-tests.list
kmod_tagged=""
if [ ! -f "$selection" ]; then
    selection_errors="$selection missing"
else
    # One awk over the list and the test names (one process: this runs under TCG too).
    selection_errors=$(echo "$kmod_capable $userspace_tests" | tr '_' '-' | awk '
        FNR == NR { for (i = 1; i <= NF; i++) test[$i] = 1; next }
        { sub(/#.*/, "") }
        NF { n[$1]++; if (!($1 in test)) err = err "; " $1 " is tagged but no such test"
             if ($2 != "kmod" && $2 != "host") err = err "; " $1 " has tag \"" $2 "\" (kmod or host)" }
        END { for (t in test) if (n[t] != 1)
                  err = err "; " t " is tagged " (n[t] + 0) " times (want once: kmod or host, with the reason)"
              print substr(err, 3) }' - "$selection")
    kmod_tagged=" $(sed -e 's/#.*//' "$selection" | awk '$2 == "kmod" { printf "%s ", $1 }') "
fi
if [ -n "$selection_errors" ]; then
    echo "FAIL test-selection: ${selection_errors#; }"
    failed=$((failed + 1))
fi

if [ "$backend" = kmod ]; then
    if [ ! -e /dev/greenboost ]; then
        echo "FAIL kmod: --kmod needs /dev/greenboost (load greenboost.ko)"
        echo "0 passed, 1 failed"
        exit 1
    fi
    tests=""
    for t in $kmod_capable; do
        printed=$(echo "$t" | tr '_' '-')
        case "$all$kmod_tagged" in all* | *" $printed "*) tests="$tests $t" ;; esac
    done
else
    tests=$userspace_tests
fi
if [ ! -f "$SHIM" ]; then
    echo "FAIL shim: $SHIM missing"
    echo "0 passed, 1 failed"
    exit 1
fi

for t in $tests; do
    printed=$(echo "$t" | tr '_' '-')
    if [ -n "$only" ]; then
        case " $only " in *" $printed "*) ;; *) continue ;; esac
    fi
    why=""
    if "t_$t"; then
        echo "PASS $printed"
        passed=$((passed + 1))
    else
        echo "FAIL $printed: $why"
        failed=$((failed + 1))
    fi
done
[ $failed -eq 0 ] && [ -z "${GBTEST_WORK:-}" ] && rm -rf "$work"
[ $failed -ne 0 ] && echo "logs and outputs: $work"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
