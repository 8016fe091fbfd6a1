"""The GPU suite's live-tiering checks (tests/gpu/run.sh, section "live tiering"; issue 12).

Run under the shim (run.sh: LD_PRELOAD=libgreenboost_cuda.so GREENBOOST_LOG=info, the
tiering settings at their defaults: GREENBOOST_TIERING=auto, GREENBOOST_DEMOTE=on,
GREENBOOST_TIER_INTERVAL_MS=100):

  python3 tests/gpu/tiering_check.py            (the checks, in this order, one process)

  movable                with a foreign process leaving 6 GiB free, five 2 GiB int32
                         tensors (arange + a per-tensor offset): those the device's
                         state sends to T2 are movable (greenboost_shim_t2_bytes == their
                         size; movable_allocs grows by at least as many)
  promote_while_running  the foreign process is killed; add_(1) runs over every tensor,
                         round after round, on the program's stream while the shim
                         promotes; once tier_vram covers every movable tensor (and
                         greenboost_shim_t2_bytes says 0 for each) every word must be
                         pattern + rounds, and what was still in T2 at the kill must
                         have been promoted; promoted bytes, promote_ns and the rate
  demote_while_running   a foreign process asks for the free VRAM plus the movable bytes
                         in VRAM minus 2 GiB (memory we hold: the driver evicts, the shim
                         demotes); the same loop runs until demoted_bytes grew and the
                         foreign process has its memory; every word again
  graph_replay           add_(1) over one movable tensor captured in a CUDA graph
                         (warmed up on a side stream), replayed while the foreign process
                         is killed (promotion) and another asks for that tensor's VRAM
                         (demotion); every word of it
  model_bit_identical    four bf16 Linear(8192, 8192) layers allocated beside a foreign
                         process leaving 1 GiB (their weights in movable T2), a fixed
                         input: y0; the foreign process killed, the weights promoted: y1;
                         torch.equal(y0, y1) (deterministic algorithms, no TF32,
                         CUBLAS_WORKSPACE_CONFIG=:4096:8; the GEMMs the shim staged for
                         each are given)

The foreign processes are this program's own roles (its first argument), started
without the shim (LD_PRELOAD removed from their environment), killed when the program
ends and when it dies (PR_SET_PDEATHSIG):
  balloon LEAVE_GIB      holds all but LEAVE_GIB of the free VRAM (gbgpu.foreign's
                         balloon), prints "ready MIB", holds until killed
  grab LEAVE_GIB EXTRA   asks for the free VRAM + EXTRA bytes - LEAVE_GIB (more than is
                         free: VRAM we hold) every 100 ms for up to 50 s, prints
                         "ready MIB SECONDS ATTEMPTS" once it has it (or "failed ..."),
                         holds until killed
Nothing here allocates managed memory or prefetches: only the shim moves memory. Every
wait has a timeout; a timeout prints FAIL with the shim's counters.
Output lines: PASS name: why / FAIL name: why / KV key=value; exit status 1 when anything
failed.

This file holds the entry point: the checks' order and the role dispatch. Beside it:
tiering_tensors.py (movable, promote_while_running, demote_while_running, graph_replay),
tiering_model.py (model_bit_identical), tiering_foreign.py (the roles and the Foreign
processes that run them), tiering_common.py (limits, KV/PASS/FAIL output); the shim's
counters are gbgpu.shim_exports' (python/gbgpu, on PYTHONPATH: run.sh puts the copy
tests/gpu/prepare.sh carries there).
"""

import os

# Before torch is imported: cuBLAS reads it when its first handle is created.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import ctypes
import signal
import sys
import time

from gbgpu.shim_exports import Shim, ShimStats
from tiering_common import failure_count, kv, verdict
from tiering_foreign import LIVE, role_balloon, role_grab
from tiering_model import check_model
from tiering_tensors import check_demote, check_graph, check_movable, check_promote


def checks():
    import torch

    shim = Shim()
    if not shim.has_tiering():
        verdict(False, "shim", f"no tiering counters: greenboost_shim_stats_sized answers size {shim.size} (want >= "
                f"{ctypes.sizeof(ShimStats)}), greenboost_shim_t2_bytes {'found' if shim.t2 else 'missing'}; is the "
                f"shim preloaded and built with live tiering?")
        return
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    kv("settings", " ".join(f"{name}={os.environ.get(name, '(default)')}" for name in (
        "GREENBOOST_TIERING", "GREENBOOST_DEMOTE", "GREENBOOST_TIER_INTERVAL_MS")))
    started = time.monotonic()
    items, holder = check_movable(shim)
    if items is not None and sum(1 for item in items if item.where == "t2") >= 1:
        check_promote(shim, items, holder)
        holder = check_demote(shim, items)
        holder = check_graph(shim, items, holder)
    elif items is not None:
        for name in ("promote_while_running", "demote_while_running", "graph_replay"):
            verdict(False, name, "not run: no tensor went to T2 as movable")
    if holder is not None:
        holder.kill()
    del items
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    check_model(shim)
    kv("seconds", f"{time.monotonic() - started:.1f}")


def main():
    role, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("checks", [])
    if role == "balloon":
        return role_balloon(float(args[0]))
    if role == "grab":
        return role_grab(float(args[0]), int(args[1]))
    if role != "checks":
        raise SystemExit(f"unknown role {role}")
    # run.sh's timeout sends SIGTERM: end through the finally below, which kills the
    # foreign processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        checks()
    except Exception as error:  # a crash is a failure with its reason, not a silent exit
        import traceback

        traceback.print_exc()
        verdict(False, "crash", f"{type(error).__name__}: {str(error)[:300]}")
    finally:
        for foreign in list(LIVE):
            foreign.kill()
    sys.exit(1 if failure_count() else 0)


if __name__ == "__main__":
    main()
