# Kernel launches, copies, memsets, stream capture and graphs (gblaunch,
# programs/launch_tests.c, launch_graphs.c and launch_memory_ops.c), sourced by
# run-tests.sh. The control-* runs prove the fake's model alone (data the kernels wrote,
# the fake's counts); the others run the same programs under the shim, which must not
# break any launch path and must see every one: each program ends by comparing the
# shim's launch counters with the fake's (what a profiler counts: kernels, host
# functions, copies and memsets) and prints "observed PART:" when the shim observes.

launch_no_fault() { # the fake logged no invalidated capture
    if grep -q "CAPTURE_INVALIDATED" "$log"; then
        why="a capture was invalidated: $(grep -m1 CAPTURE_INVALIDATED "$log" | cut -d' ' -f2-)"
        return 1
    fi
}

t_control_launch_driver() { run control-launch-driver "$BIN/gblaunch" driver; }
t_control_launch_graphs() {
    run control-launch-graphs "$BIN/gblaunch" graphs || return 1
    log_has "CAPTURE_INVALIDATED by cuMemAlloc_v2" "the fake did not log the invalidated global capture"
}
t_control_launch_runtime() {
    run control-launch-runtime "$BIN/gblaunch" runtime || return 1
    log_has "cuGetProcAddress_v2 sym=cuLibraryLoadData ver=13000" "the runtime did not load its image through cuGetProcAddress" || return 1
    log_has "cuLaunchKernel fk_add_f32 .* via=cuLaunchKernel_ptsz" "cudaLaunchKernel_ptsz did not reach cuLaunchKernel_ptsz"
}
launch_observed() { # the program compared the shim's counts with the fake's
    out_has "observed $1: " "the shim's launch counters are missing: launches not observed"
}
t_launch_driver() {
    shim launch-driver $SHIMENV "$BIN/gblaunch" driver || return 1
    log_has "cuLaunchKernel fk_struct .* via=cuLaunchKernel -> 0" "fk_struct did not reach the driver" || return 1
    launch_observed driver
}
t_launch_driver_t2() {
    # A budget below one buffer: the kernels' 4 MiB buffers are T2 (registered host memory).
    shim launch-driver-t2 $SHIMENV GREENBOOST_VRAM_BUDGET=1M GREENBOOST_MIN_T2_SIZE=1M "$BIN/gblaunch" driver || return 1
    log_has "PINNED by=" "no buffer went to T2" || return 1
    launch_observed driver
}
t_launch_graphs() { shim launch-graphs $SHIMENV "$BIN/gblaunch" graphs && launch_observed graphs; }
t_launch_runtime() { shim launch-runtime $SHIMENV "$BIN/gblaunch" runtime && launch_observed runtime; }
t_control_launch_memops() {
    run control-launch-memops "$BIN/gblaunch" memops || return 1
    log_has "cuGetProcAddress_v2 sym=cuMemsetD8 ver=13000" "the runtime did not fetch cuMemsetD8 through cuGetProcAddress"
}
# Every form of a memset and a copy, direct (legacy and per-thread forms, through
# cuGetProcAddress) and through the runtime: the shim counts what the device ran and
# names the allocation each writes; -t2 with both buffers in T2 (registered host memory).
t_launch_memops() { shim launch-memops $SHIMENV "$BIN/gblaunch" memops && launch_observed memops; }
t_launch_memops_t2() {
    shim launch-memops-t2 $SHIMENV GREENBOOST_VRAM_BUDGET=1M GREENBOOST_MIN_T2_SIZE=1M "$BIN/gblaunch" memops || return 1
    log_has "PINNED by=" "no buffer went to T2" || return 1
    launch_observed memops
}
# Kernel times as events measure them (fk_read_u32, cuEventElapsedTime), no shim. The
# link at 10000 ns per KiB (~100 MB/s): reading 8 MiB from host memory takes 82 ms, far
# above what really reading it from the device's own memory takes here (about 1 ms, 6
# with both cores busy elsewhere).
t_control_launch_timing() {
    run control-launch-timing FAKECUDA_LINK_NS_PER_KIB=10000 "$BIN/gblaunch" timing || return 1
    log_has "KERNEL_TIME fk_read_u32 .* host=8388608 device=0 " "no read counted as from host memory" || return 1
    log_has "KERNEL_TIME fk_read_u32 .* host=0 device=8388608 " "no read counted as from device memory"
}
t_launch_capture_global() {
    # A global-mode capture held open for 500 ms while the shim works beside it (tiering
    # every 10 ms, half the blocks in T2): nothing the shim does may invalidate it.
    shim launch-capture-global $SHIMENV GREENBOOST_VRAM_BUDGET=$(( VRAM / 4 )) GREENBOOST_TIERING=on \
        GREENBOOST_TIER_INTERVAL_MS=10 GREENBOOST_VRAM_HEADROOM=$(( VRAM / 16 )) "$BIN/gblaunch" capture 500 || return 1
    launch_no_fault
}

launch_tests="control_launch_driver control_launch_graphs control_launch_runtime control_launch_memops control_launch_timing launch_driver launch_driver_t2 launch_graphs launch_runtime launch_memops launch_memops_t2 launch_capture_global"
