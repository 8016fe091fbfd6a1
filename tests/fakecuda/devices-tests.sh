# Sourced by run-tests.sh (the two-device tests of gbdriver and gbtest-rt13).
# FAKECUDA_DEVICES=2: a second fake device (FAKECUDA_VRAM1 bytes, default VRAM) with VRAM
# of its own. The programs' "devices" test (programs/devices.h) allocates blocks of VRAM/16
# on both devices in turn, switching device before each, and checks every placement,
# the fake's VRAM in use of both devices and the current device's memory reports
# against the per-device budget and headroom it is given; it prints
# "device D: K of N in T2; device free F MiB" per device at the end.
MiB=1048576
devices_t2() { # $1: device, $2: "K of N", $3: MiB left free on the device
    out_has "^device $1: $2 in T2; device free $3 MiB" "device $1: want $2 in T2 and $3 MiB free: $(grep "^device $1: .* in T2" "$out")"
}
DEVBUDGET="0:$(( VRAM / 4 )),1:$(( VRAM * 3 / 4 ))"
t_devices_fake() {
    # Without the shim: each device's VRAM filled through each API, nothing in T2.
    for prog in gbdriver gbtest-rt13; do
        run "devices-fake-$prog" FAKECUDA_DEVICES=2 FAKECUDA_VRAM1=$(( VRAM / 2 )) \
            "$BIN/$prog" devices "$VRAM" $(( VRAM / 2 )) 0 0 16 8 || return 1
        devices_t2 0 "0 of 16" 0 || return 1
        devices_t2 1 "0 of 8" 0 || return 1
    done
}
t_devices_budget() {
    # A quarter of VRAM on device 0 (4 blocks), three quarters on device 1 (12 blocks).
    shim devices-budget $SHIMENV FAKECUDA_DEVICES=2 GREENBOOST_VRAM_BUDGET=$DEVBUDGET GREENBOOST_VRAM_HEADROOM=0 \
        "$BIN/gbtest-rt13" devices $(( VRAM / 4 )) $(( VRAM * 3 / 4 )) 0 0 6 14 || return 1
    devices_t2 0 "2 of 6" $(( VRAM * 3 / 4 / MiB )) || return 1
    devices_t2 1 "2 of 14" $(( VRAM / 4 / MiB ))
}
t_devices_control_uniform_fails() {
    # The same expectations under one budget for both devices: device 1's fail.
    run_fails devices-control-uniform-fails "device 1 reports a total of" $SHIMENV FAKECUDA_DEVICES=2 \
        GREENBOOST_VRAM_BUDGET=$(( VRAM / 4 )) GREENBOOST_VRAM_HEADROOM=0 \
        "$BIN/gbtest-rt13" devices $(( VRAM / 4 )) $(( VRAM * 3 / 4 )) 0 0 6 14
}
t_devices_headroom() {
    # Device 0 keeps VRAM/4 free (12 blocks fit, 2 to T2); device 1, half the size with
    # no headroom, fills to its last byte (8 blocks, the 9th to T2).
    shim devices-headroom $SHIMENV FAKECUDA_DEVICES=2 FAKECUDA_VRAM1=$(( VRAM / 2 )) \
        GREENBOOST_VRAM_HEADROOM="0:$(( VRAM / 4 )),1:0" \
        "$BIN/gbtest-rt13" devices "$VRAM" "$VRAM" $(( VRAM / 4 )) 0 14 9 || return 1
    devices_t2 0 "2 of 14" $(( VRAM / 4 / MiB )) || return 1
    devices_t2 1 "1 of 9" 0
}
t_devices_driver() {
    # devices-budget through the driver API: cuCtxSetCurrent between the two primary
    # contexts, cuMemAlloc_v2, cuMemGetInfo_v2, cuDeviceTotalMem_v2.
    shim devices-driver $SHIMENV FAKECUDA_DEVICES=2 GREENBOOST_VRAM_BUDGET=$DEVBUDGET GREENBOOST_VRAM_HEADROOM=0 \
        "$BIN/gbdriver" devices $(( VRAM / 4 )) $(( VRAM * 3 / 4 )) 0 0 6 14 || return 1
    devices_t2 0 "2 of 6" $(( VRAM * 3 / 4 / MiB )) || return 1
    devices_t2 1 "2 of 14" $(( VRAM / 4 / MiB ))
}
