#!/bin/sh
# The suite inside a QEMU guest against the real module (copied by run.sh --build-only
# to OUTDIR/run.sh; tests/qemu's guest suite runs /greenboost/extra/run.sh). Sizes fit
# a guest with 2 GiB of RAM; timeouts allow for TCG emulation.
here=$(cd "$(dirname "$0")" && pwd)
export FAKECUDA_VRAM=${FAKECUDA_VRAM:-64M} GBTEST_T2_CAP=${GBTEST_T2_CAP:-512M} GBTEST_SPLIT_SIZE=${GBTEST_SPLIT_SIZE:-256M}
export GBTEST_TIMEOUT=${GBTEST_TIMEOUT:-900} FAKECUDA_HOLD_TIMEOUT=${FAKECUDA_HOLD_TIMEOUT:-300}
exec sh "$here/run-tests.sh" --kmod "$@"
