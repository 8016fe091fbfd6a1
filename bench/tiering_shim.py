"""What bench/tiering.py's roles under the shim share: the units, the shim's counters
read through its exports (gbgpu.shim_exports; the shim is LD_PRELOADed in these roles)
and the wait for a promotion."""

import time

from gbgpu import shim_exports

GIB = 1 << 30
MIB = 1 << 20


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
