"""What bench/tiering.py's roles share: the units, the shim's counters read through its
exports (ctypes; the roles under the shim, which is LD_PRELOADed there), the wait for a
promotion, and the process helpers (kill a foreign process, die with the parent)."""

import ctypes
import os
import signal
import time

GIB = 1 << 30
MIB = 1 << 20


# --- the shim's counters (shim/src/stats.rs ShimStats) -------------------------------

class ShimStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "t1_used", "t1_peak", "t2_used", "t2_peak", "t1_allocs", "t2_allocs", "t2_after_vram_oom", "oom_returned",
        "vmm_host", "deferred_frees")] + [
        ("backend", ctypes.c_uint32), ("import_dmabuf_result", ctypes.c_int32),
        ("import_opaque_result", ctypes.c_int32), ("reserved", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in (
            "split_allocs", "gemm_staged", "gemm_staged_bytes", "headroom_spills", "gemm_prefetched",
            "movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
            "promote_ns", "demote_ns", "move_issue_ns")]


TIER_FIELDS = ("movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
               "promote_ns", "demote_ns", "move_issue_ns")


class Shim:
    def __init__(self):
        lib = ctypes.CDLL(None)
        self.sized = getattr(lib, "greenboost_shim_stats_sized", None)
        self.t2 = getattr(lib, "greenboost_shim_t2_bytes", None)
        if self.sized is None or self.t2 is None:
            raise SystemExit("tiering.py: the shim's exports are missing (is libgreenboost_cuda.so preloaded?)")
        self.sized.argtypes, self.sized.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long
        self.t2.argtypes, self.t2.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], ctypes.c_ulonglong
        size = self.sized(ctypes.byref(ShimStats()), ctypes.sizeof(ShimStats))
        if size < ctypes.sizeof(ShimStats):
            raise SystemExit(f"tiering.py: the shim's ShimStats has {size} bytes, not the {ctypes.sizeof(ShimStats)} "
                             "of the tiering counters: a shim without live tiering")

    def stats(self):
        out = ShimStats()
        self.sized(ctypes.byref(out), ctypes.sizeof(out))
        return out

    def tier(self):
        s = self.stats()
        return {name: getattr(s, name) for name in TIER_FIELDS + ("t2_used", "headroom_spills", "split_allocs",
                                                                 "gemm_staged")}

    def t2_bytes(self, tensor):
        return int(self.t2(tensor.data_ptr(), tensor.numel() * tensor.element_size()))


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
