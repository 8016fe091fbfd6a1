"""What the tests of greenboost.zerocopy (test_zerocopy*.py) share: memfd-backed
buffers, the fake ioctl layer of the tier tests, the tiered cache's shape and the skips
for missing optional libraries."""

import errno
import mmap
import os

import pytest

import greenboost.zerocopy as gz


def memfd_buffer(size, name="gb-test"):
    fd = os.memfd_create(name)
    os.ftruncate(fd, size)
    return gz.Buffer(fd, 0, size)


# --- the fake kernel of the tier tests ---------------------------------------------------
class FakeKernel:
    """The ioctl layer under a Device in the tier tests: answers INFO, ALLOC, MOVE and
    T3_STATS as the module does (ENOTTY for the T3 commands without T3), with memfd
    pages, and records every ALLOC's flags and every MOVE asked for. Its move leaves
    the data where it is (the memfd pages stay), so what these tests check is the
    policy above it: which moves are asked for, in what order, and what a refusal does.
    Use one per test: it keys buffers by fd, and closed fds are reused."""

    def __init__(self, t3=True, t3_room=1 << 40):
        self.features = gz.INFO_T3 if t3 else 0
        self.t3_room = t3_room
        self.busy = set()
        self.buffers = {}
        self.alloc_flags = []
        self.moves = []
        self.counters = {"moves_to_t3": 0, "moves_to_t2": 0, "moved_bytes": 0, "move_refusals": 0}

    def tier(self, buffer):
        return self.buffers[buffer.fd]["tier"]

    def t3_bytes(self):
        return sum(b["size"] for b in self.buffers.values() if b["tier"] == gz.TIER_T3)

    def __call__(self, fd, command, arg, mutate):
        if command == gz.IOCTLS["GB_IOC_INFO"]:
            arg[:] = gz.LAYOUTS["gb_info"].pack(gz.ABI_VERSION, self.features, gz.CHUNK_SIZE, 8 << 30, 1 << 30, 0, 0, 1 << 30)
        elif command == gz.IOCTLS["GB_IOC_ALLOC"]:
            self._alloc(arg)
        elif command == gz.IOCTLS["GB_IOC_MOVE"] and self.features & gz.INFO_T3:
            self._move(arg)
        elif command == gz.IOCTLS["GB_IOC_T3_STATS"] and self.features & gz.INFO_T3:
            fields = dict.fromkeys((field for field, _ in gz.STRUCTS["gb_t3_stats"]), 0)
            fields.update(self.counters, t3_used=self.t3_bytes(), t3_cap=self.t3_room,
                          t3_buffers=sum(b["tier"] == gz.TIER_T3 for b in self.buffers.values()))
            arg[:] = gz.LAYOUTS["gb_t3_stats"].pack(*(fields[f] for f, _ in gz.STRUCTS["gb_t3_stats"]))
        else:
            self._refuse(errno.ENOTTY)

    @staticmethod
    def _refuse(code):
        raise OSError(code, os.strerror(code))

    def _alloc(self, arg):
        request = gz.RECORDS["gb_alloc"]._make(gz.LAYOUTS["gb_alloc"].unpack(arg))
        self.alloc_flags.append(request.flags)
        t3 = bool(request.flags & gz.ALLOC_T3)
        if request.size == 0 or (t3 and not self.features & gz.INFO_T3):
            self._refuse(errno.EINVAL)
        size = -(-request.size // mmap.PAGESIZE) * mmap.PAGESIZE
        if t3 and self.t3_bytes() + size > self.t3_room:
            self._refuse(errno.ENOMEM)
        fd = os.memfd_create("fake-greenboost")
        os.ftruncate(fd, size)
        buffer_id = len(self.alloc_flags)
        self.buffers[fd] = {"id": buffer_id, "size": size, "tier": gz.TIER_T3 if t3 else gz.TIER_T2}
        arg[:] = gz.LAYOUTS["gb_alloc"].pack(request.size, request.flags, request.numa_node, fd, 0, buffer_id, size)

    def _move(self, arg):
        request = gz.RECORDS["gb_move"]._make(gz.LAYOUTS["gb_move"].unpack(arg))
        buffer = self.buffers.get(request.fd)
        if buffer is None or request.tier not in (gz.TIER_T2, gz.TIER_T3) or request.flags or request.pad0:
            self._refuse(errno.EINVAL)
        self.moves.append((buffer["id"], request.tier))
        moved = 0
        if request.tier != buffer["tier"]:
            if buffer["id"] in self.busy or (request.tier == gz.TIER_T3 and self.t3_bytes() + buffer["size"] > self.t3_room):
                self.counters["move_refusals"] += 1
                self._refuse(errno.EBUSY if buffer["id"] in self.busy else errno.ENOMEM)
            buffer["tier"] = request.tier
            moved = buffer["size"]
            self.counters["moves_to_t3" if request.tier == gz.TIER_T3 else "moves_to_t2"] += 1
            self.counters["moved_bytes"] += moved
        arg[:] = gz.LAYOUTS["gb_move"].pack(request.fd, request.tier, 0, 0, buffer["id"], moved)


CACHE_SHAPE = {"layers": 2, "kv_heads": 2, "head_dim": 32, "block_tokens": 8}


def import_or_skip(module, reason):
    """The module, or the test skipped with ``reason``."""
    try:
        return __import__(module)
    except ImportError:
        pytest.skip(reason)


def require_array_library():
    """The KV caches hand out numpy arrays or torch tensors: skip without either."""
    for module in ("torch", "numpy"):
        try:
            __import__(module)
            return
        except ImportError:
            pass
    pytest.skip("neither numpy nor PyTorch is installed")
