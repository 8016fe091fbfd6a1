"""The shim's exports, read from Python through ctypes in a process where the shim is
LD_PRELOADed: `greenboost_shim_stats_sized` into ShimStats (shim/src/sys/stats.rs, through
the live-tiering counters appended last), `greenboost_shim_t2_bytes`, and what launches,
copies and memsets named (`greenboost_shim_launches_naming`, `greenboost_shim_writes_naming`). The one Python
copy of the layout, for tests/gpu/tiering_check.py's parts and bench/tiering.py's roles;
scripts/check-shim-stats.py (make lint) checks it against the Rust struct."""

import ctypes


class ShimStats(ctypes.Structure):
    """ShimStats of the shim's stats.rs, field by field."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "t1_used", "t1_peak", "t2_used", "t2_peak", "t1_allocs", "t2_allocs", "t2_after_vram_oom", "oom_returned",
        "vmm_host", "deferred_frees")] + [
        ("backend", ctypes.c_uint32), ("import_dmabuf_result", ctypes.c_int32),
        ("import_opaque_result", ctypes.c_int32), ("reserved", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in (
            "split_allocs", "gemm_staged", "gemm_staged_bytes", "headroom_spills", "unused_prefetched",
            "movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
            "promote_ns", "demote_ns", "move_issue_ns", "gemm_sliced", "gemm_slices_differed",
            "launches", "launches_unread", "launch_namings", "captured_launches", "graph_launches",
            "graphs_unread", "memory_ops", "host_funcs", "swaps", "gemm_ahead", "gemm_ahead_dropped",
            "launches_timed", "indirect_writers", "given_back_bytes", "give_backs",
            "room_made_bytes", "room_made_ns", "gemm_in_place", "gemm_in_place_bytes", "kept_vram",
            "kept_vram_peak")]


TIER_FIELDS = ("movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
               "promote_ns", "demote_ns", "move_issue_ns")

# What a report of the tiering state shows: where T2 came from, then the tiering counters.
REPORTED = ("t2_used", "headroom_spills", "split_allocs", "gemm_staged") + TIER_FIELDS


class Shim:
    """The shim's exports, found in the process; `has_tiering` says whether they are
    there with the tiering counters (a shim without them answers a smaller size)."""

    def __init__(self):
        lib = ctypes.CDLL(None)
        self.sized = getattr(lib, "greenboost_shim_stats_sized", None)
        self.t2 = getattr(lib, "greenboost_shim_t2_bytes", None)
        self.naming = getattr(lib, "greenboost_shim_launches_naming", None)
        self.writes = getattr(lib, "greenboost_shim_writes_naming", None)
        self.size = 0
        if self.sized is not None:
            self.sized.argtypes, self.sized.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long
            self.size = self.sized(ctypes.byref(ShimStats()), ctypes.sizeof(ShimStats))
        if self.t2 is not None:
            self.t2.argtypes, self.t2.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], ctypes.c_ulonglong
        for naming in (self.naming, self.writes):
            if naming is not None:
                naming.argtypes, naming.restype = [ctypes.c_ulonglong], ctypes.c_ulonglong

    def has_launches(self):
        """Whether the shim observes launches (its counters and the naming export)."""
        return self.naming is not None and self.size >= ctypes.sizeof(ShimStats)

    def launches_naming(self, tensor):
        """Kernel launches, copies and memsets so far that named an address inside the
        tensor's allocation."""
        return int(self.naming(tensor.data_ptr()))

    def writes_naming(self, tensor):
        """Copies and memsets so far that wrote in the tensor's allocation (0 from a shim
        without the export)."""
        return int(self.writes(tensor.data_ptr())) if self.writes is not None else 0

    def has_tiering(self):
        return self.t2 is not None and self.size >= ShimStats.move_issue_ns.offset + 8

    def stats(self):
        out = ShimStats()
        self.sized(ctypes.byref(out), ctypes.sizeof(out))
        return out

    def t2_bytes(self, tensor):
        """Bytes of a tensor's memory the shim holds in T2."""
        return int(self.t2(tensor.data_ptr(), tensor.numel() * tensor.element_size()))

    def tier(self):
        s = self.stats()
        return {name: getattr(s, name) for name in REPORTED}

    def counters(self):
        return " ".join(f"{name}={value}" for name, value in self.tier().items())
