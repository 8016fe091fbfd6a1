"""What tests/gpu/tiering_check.py's parts share: the units, the waits' limits (WAIT_S
each, DEADLINE_S in all), the output (KV lines, PASS/FAIL verdicts and their count) and
the shim's counters, read through its exports (ctypes; the shim is LD_PRELOADed)."""

import ctypes
import time

GIB = 1 << 30
MIB = 1 << 20
WAIT_S = 60                  # the longest any wait here may take
DEADLINE_S = 200             # no wait runs past this, from the start (run.sh's limit is 240 s)
STARTED = time.monotonic()

failures = 0


def wait_s():
    """A wait's timeout: WAIT_S, or what is left before the deadline."""
    return max(1.0, min(WAIT_S, STARTED + DEADLINE_S - time.monotonic()))


def kv(key, value):
    print(f"KV tiering.{key}={value}", flush=True)


def verdict(ok, name, why):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} tiering.{name}: {why}", flush=True)
    return ok


def failure_count():
    """How many verdicts failed so far."""
    return failures


class ShimStats(ctypes.Structure):
    """shim/src/stats.rs ShimStats, through the tiering counters appended last."""

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
    """The shim's exports, found in the process (it is LD_PRELOADed)."""

    def __init__(self):
        lib = ctypes.CDLL(None)
        self.sized = getattr(lib, "greenboost_shim_stats_sized", None)
        self.t2 = getattr(lib, "greenboost_shim_t2_bytes", None)
        self.size = 0
        if self.sized is not None:
            self.sized.argtypes, self.sized.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long
            self.size = self.sized(ctypes.byref(ShimStats()), ctypes.sizeof(ShimStats))
        if self.t2 is not None:
            self.t2.argtypes, self.t2.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], ctypes.c_ulonglong

    def has_tiering(self):
        return self.t2 is not None and self.size >= ctypes.sizeof(ShimStats)

    def stats(self):
        out = ShimStats()
        self.sized(ctypes.byref(out), ctypes.sizeof(out))
        return out

    def t2_bytes(self, tensor):
        return int(self.t2(tensor.data_ptr(), tensor.numel() * tensor.element_size()))

    def counters(self):
        s = self.stats()
        return " ".join(f"{name}={getattr(s, name)}" for name in ("t2_used", "headroom_spills", "split_allocs")
                        + TIER_FIELDS)

