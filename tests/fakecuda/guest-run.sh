#!/bin/sh
# The kmod-tagged shim tests (kmod-tests.list) inside a QEMU guest against the real
# module (copied by run.sh --build-only to OUTDIR/run.sh; tests/qemu's guest suite runs
# /greenboost/extra/run.sh). The host-tagged ones are shim logic `make shim-test`
# already covers; GB_SHIM_ALL=1 runs every kmod-capable test here anyway. Sizes fit a
# guest with 2 GiB of RAM; timeouts allow for TCG emulation.
here=$(cd "$(dirname "$0")" && pwd)
export FAKECUDA_VRAM=${FAKECUDA_VRAM:-64M} GBTEST_T2_CAP=${GBTEST_T2_CAP:-512M} GBTEST_SPLIT_SIZE=${GBTEST_SPLIT_SIZE:-256M}
export GBTEST_TIMEOUT=${GBTEST_TIMEOUT:-900} FAKECUDA_HOLD_TIMEOUT=${FAKECUDA_HOLD_TIMEOUT:-300}
# The markers carry the guest's uptime: tests/qemu/run.sh reports the suite's time.
echo "GUEST-SHIM-BEGIN uptime=$(cut -d. -f1 /proc/uptime)"
sh "$here/run-tests.sh" --kmod ${GB_SHIM_ALL:+--all} "$@"
rc=$?
echo "GUEST-SHIM-END uptime=$(cut -d. -f1 /proc/uptime)"
exit $rc
