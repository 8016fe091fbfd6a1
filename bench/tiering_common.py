"""What bench/tiering.py's roles share: the units, the shim's counters read through its
exports (tests/gpu/shim_exports.py; the roles under the shim, which is LD_PRELOADed
there), the wait for a promotion, and the process helpers (kill a foreign process, die
with the parent)."""

import ctypes
import os
import signal
import sys
import time

GIB = 1 << 30
MIB = 1 << 20


# --- the shim's counters (tests/gpu/shim_exports.py, the one copy of their layout) ----

# Appended, not put first: tests/gpu has modules of the same names as bench's own.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import shim_exports  # noqa: E402  (found through the line above)


class Shim(shim_exports.Shim):
    """The shim's exports; a role under the shim cannot go on without them."""

    def __init__(self):
        super().__init__()
        if not self.has_tiering():
            raise SystemExit(f"tiering.py: the shim's exports are missing or without the tiering counters (size "
                             f"{self.size}): is libgreenboost_cuda.so preloaded, and built with live tiering?")


def wait_promoted(shim, tensors, timeout_s, step=None):
    """Polls until tier_vram covers the tensors and the shim says none is in T2; calls
    step() between polls when given. Returns seconds waited, or None on timeout."""
    need = sum(t.numel() * t.element_size() for t in tensors)
    started = time.monotonic()
    while True:
        if shim.stats().tier_vram >= need and all(shim.t2_bytes(t) == 0 for t in tensors):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            return None
        if step:
            step()
        else:
            time.sleep(0.005)


# --- processes -----------------------------------------------------------------------

def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def die_with_parent():
    """No subprocess outlives the run (a foreign one holds the device's VRAM)."""
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    parent = int(os.environ.get("GB_TIERING_PARENT", "0"))
    if parent and os.getppid() != parent:
        os._exit(1)
