#!/usr/bin/env python3
"""Tests of greenboost_zerocopy.py. Ends with `N passed, M failed`.

1. ABI: every struct size, field offset, ioctl number and constant the Python module
   uses is compared with abi/greenboost.h, compiled by the C compiler (the header is in
   turn checked against the Rust ABI crate by abi/tests/header.rs).
2. The numpy/torch/KV-cache views, on memfd-backed buffers (no module needed): shared
   memory really is shared, shapes and offsets are right, close() refuses while views
   are alive.
3. T3 and the tiered KV cache against a fake ioctl layer (FakeKernel, memfd pages):
   the calls Buffer.move and Device make, the LRU promote/demote policy, refusals
   (EBUSY, ENOMEM) and the fall back to T2 only when T3 is missing or full.
4. With /dev/greenboost: a real round trip (alloc, write, read back through a second
   mapping, per-process accounting, errors; T3 moves when the module has T3). Skipped
   with the reason when absent.
5. With PyTorch and a CUDA GPU: a GPU kernel writes through the zero-copy CUDA view
   and the CPU sees it. Skipped with the reason otherwise.
"""

import errno
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import greenboost_zerocopy as gz  # noqa: E402

results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    if condition:
        results["passed"] += 1
        print(f"ok   {name}")
    else:
        results["failed"] += 1
        print(f"FAIL {name} {detail}")


def check_raises(name, call, exception, accept):
    """``call()`` must raise ``exception``, and ``accept(error)`` hold for what it raised."""
    try:
        call()
    except exception as error:
        check(name, accept(error), str(error))
    else:
        check(name, False, "no exception")


def skip(name, reason):
    print(f"skip {name}: {reason}")


def run_section(name, function):
    """A section that raises counts as one failure, and the others still run."""
    try:
        function()
    except Exception as error:  # noqa: BLE001 - reported as a failure
        check(f"{name} ran without an exception", False, repr(error))


# --- 1. ABI against the C header --------------------------------------------------------
CONSTANTS = {
    "GB_ABI_VERSION": gz.ABI_VERSION,
    "GB_CHUNK_SIZE": gz.CHUNK_SIZE,
    "GB_ALLOC_NODE_STRICT": gz.ALLOC_NODE_STRICT,
    "GB_ALLOC_T3": gz.ALLOC_T3,
    "GB_INFO_T3": gz.INFO_T3,
    "GB_TIER_T2": gz.TIER_T2,
    "GB_TIER_T3": gz.TIER_T3,
}


def c_layout():
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (cc/gcc) to compile abi/greenboost.h")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "greenboost.h"', "int main(void) {"]
    for name, fields in gz.STRUCTS.items():
        lines.append(f'printf("size {name} %zu\\n", sizeof(struct {name}));')
        for field, _ in fields:
            lines.append(f'printf("offset {name}.{field} %zu\\n", offsetof(struct {name}, {field}));')
    for name in gz.IOCTLS:
        lines.append(f'printf("ioctl {name} %lu\\n", (unsigned long){name});')
    for name in CONSTANTS:
        lines.append(f'printf("const {name} %lu\\n", (unsigned long){name});')
    lines.append('printf("path GB_DEVICE_PATH %s\\n", GB_DEVICE_PATH);')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "layout.c")
        binary = os.path.join(tmp, "layout")
        with open(source, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run([compiler, "-Wall", "-Werror", "-I", os.path.join(ROOT, "abi"), source, "-o", binary],
                       check=True, capture_output=True, text=True)
        output = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in output.splitlines():
        kind, key, value = line.split(" ", 2)
        table[(kind, key)] = value
    return table


def test_abi():
    try:
        table = c_layout()
    except subprocess.CalledProcessError as error:
        check("abi/greenboost.h compiles with every field this module names", False, error.stderr)
        return
    check("abi/greenboost.h compiles with every field this module names", True)
    for name, fields in gz.STRUCTS.items():
        check(f"sizeof(struct {name}) matches", int(table[("size", name)]) == gz.LAYOUTS[name].size,
              f"C {table[('size', name)]} Python {gz.LAYOUTS[name].size}")
        offsets = gz.field_offsets(name)
        wrong = [f for f, _ in fields if int(table[("offset", f"{name}.{f}")]) != offsets[f]]
        check(f"field offsets of struct {name} match", not wrong, f"differ: {wrong}")
    for name, number in gz.IOCTLS.items():
        check(f"{name} matches", int(table[("ioctl", name)]) == number,
              f"C {int(table[('ioctl', name)]):#x} Python {number:#x}")
    for name, value in CONSTANTS.items():
        check(f"{name} matches", int(table[("const", name)]) == value, f"C {table[('const', name)]} Python {value}")
    check("device path matches", table[("path", "GB_DEVICE_PATH")] == gz.DEVICE_PATH)


# --- 2. views on memfd-backed buffers ---------------------------------------------------
def memfd_buffer(size, name="gb-test"):
    fd = os.memfd_create(name)
    os.ftruncate(fd, size)
    return gz.Buffer(fd, 0, size)


class MemfdDevice:
    """Stands in for Device.alloc in the KV-cache test: same Buffer type, memfd pages."""

    def __init__(self):
        self.sizes = []

    def alloc(self, size):
        self.sizes.append(size)
        return memfd_buffer(size)


def test_views():
    size = 4 << 20
    buffer = memfd_buffer(size)
    view = buffer.memoryview()
    view[0:4] = b"\x01\x02\x03\x04"
    view[size - 4:size] = b"tail"
    other = mmap.mmap(buffer.fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    check("a second mapping of the fd sees writes through the first", other[0:4] == b"\x01\x02\x03\x04" and other[size - 4:] == b"tail")
    other.close()
    try:
        buffer.close()
        check("close() refuses while a view is alive", False, "closed with a live memoryview")
    except BufferError:
        check("close() refuses while a view is alive", True)
    view.release()
    address = buffer.address()
    check("address() is page-aligned and non-zero", address != 0 and address % mmap.PAGESIZE == 0, hex(address))
    buffer.close()
    check_raises("close() closes the fd", lambda: os.fstat(buffer.fd), OSError, lambda error: error.errno == errno.EBADF)

    try:
        import numpy as np
    except ImportError:
        skip("numpy views", "numpy is not installed (pip install numpy)")
        np = None
    if np is not None:
        with memfd_buffer(size) as buffer:
            array = buffer.numpy("float32", (1024, 1024))
            check("numpy view has the shape and dtype asked for", array.shape == (1024, 1024) and array.dtype == np.float32)
            array[3, 5] = 2.5
            raw = buffer.numpy("float32")
            check("numpy views share memory", raw[3 * 1024 + 5] == 2.5 and raw.size == size // 4)
            offset_view = buffer.numpy("uint8", offset=4096)
            offset_view[0] = 77
            check("numpy offset view starts at the offset", buffer.numpy("uint8")[4096] == 77 and offset_view.size == size - 4096)
            del array, raw, offset_view

    try:
        import torch
    except ImportError:
        skip("torch views", "PyTorch is not installed")
        torch = None
    if torch is not None:
        with memfd_buffer(size) as buffer:
            tensor = buffer.torch(torch.float16, (2, 512, 8, 128))
            check("torch view has the shape and dtype asked for", tuple(tensor.shape) == (2, 512, 8, 128) and tensor.dtype == torch.float16)
            tensor[1, 0, 0, 0] = 1.5
            flat = buffer.torch(torch.float16)
            check("torch views share memory", float(flat[512 * 8 * 128]) == 1.5)
            del tensor, flat

    if np is None and torch is None:
        skip("KV cache views", "neither numpy nor PyTorch is installed")
        return
    device = MemfdDevice()
    cache = gz.KVCache(device, layers=3, max_tokens=64, kv_heads=4, head_dim=32)
    check("KV cache: one buffer per layer of 2*tokens*heads*dim*2 bytes", device.sizes == [2 * 64 * 4 * 32 * 2] * 3, str(device.sizes))
    k0, v0 = cache.layer(0)
    k1, v1 = cache.layer(1)
    check("KV cache: K and V have [tokens, heads, dim]", tuple(k0.shape) == (64, 4, 32) and tuple(v0.shape) == (64, 4, 32))
    k0[0, 0, 0] = 1.0
    v0[0, 0, 0] = 2.0
    check("KV cache: K, V and other layers are separate memory", float(k0[0, 0, 0]) == 1.0 and float(v0[0, 0, 0]) == 2.0 and float(k1[0, 0, 0]) == 0.0)
    del k0, v0, k1, v1
    cache.close()
    check("KV cache: close() releases every layer", cache.buffers == [])


# --- 3. T3 and the tiered KV cache, against a fake kernel ------------------------------------
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


def test_tier_api():
    kernel = FakeKernel()
    with gz.Device(os.devnull, ioctl=kernel) as device:
        check("has_t3 follows GB_INFO_T3", device.has_t3)
        buffer = device.alloc(1 << 20, t3=True)
        check("alloc(t3=True) asks for GB_ALLOC_T3, and the buffer starts in T3",
              kernel.alloc_flags == [gz.ALLOC_T3] and buffer.tier == gz.TIER_T3 == kernel.tier(buffer))
        check_raises("register_with_cuda refuses a T3 buffer (the GPU reads T2 only)", buffer.register_with_cuda,
                     gz.GreenBoostError, lambda error: "move(TIER_T2) first" in str(error))
        view = buffer.memoryview()
        view[:4] = b"cold"
        moved = buffer.move(gz.TIER_T2)
        check("move(TIER_T2) issues one MOVE and reports the bytes copied",
              kernel.moves == [(buffer.id, gz.TIER_T2)] and moved == 1 << 20, f"{kernel.moves} {moved}")
        check("after the move the tier is T2, here and in the kernel", buffer.tier == gz.TIER_T2 == kernel.tier(buffer))
        check("a view taken before the move still reads the data", bytes(view[:4]) == b"cold")
        check("a move to the tier the buffer is in copies nothing", buffer.move(gz.TIER_T2) == 0)
        stats = device.t3_stats()
        check("T3_STATS unpacks into its named fields", stats.moves_to_t2 == 1 and stats.moved_bytes == 1 << 20
              and stats.t3_used == 0 and stats.t3_cap == kernel.t3_room, str(stats))

        check_raises("a tier that does not exist is refused with EINVAL", lambda: buffer.move(7), gz.GreenBoostError,
                     lambda error: error.errno == errno.EINVAL and "TIER_T2 and TIER_T3" in str(error))
        kernel.busy.add(buffer.id)
        check_raises("EBUSY on a move says the buffer is pinned and to unregister it first",
                     lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: error.errno == errno.EBUSY and "cudaHostUnregister" in str(error) and f"buffer {buffer.id}" in str(error))
        check("a refused move leaves the buffer where it was", buffer.tier == gz.TIER_T2 == kernel.tier(buffer))
        kernel.busy.clear()
        kernel.t3_room = 0
        check_raises("ENOMEM on a demote says T3 has no room and that it needs swap",
                     lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOMEM and "T3 has no room" in str(error) and "greenboost swap add" in str(error))
        check_raises("ENOMEM on a T3 allocation says the same", lambda: device.alloc(4096, t3=True), gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOMEM and "greenboost swap add" in str(error))
        kernel.t3_room = 1 << 40

        # A buffer this object registered with CUDA is unregistered before it is demoted:
        # the kernel would refuse to move pages CUDA holds pinned. The CUDA call itself is
        # stood in for, so that the order is checked on machines without a GPU.
        events = []

        def unregister():
            events.append(("cudaHostUnregister", len(kernel.moves)))
            buffer._cuda_registered = False

        buffer._cuda_registered = True
        buffer._unregister_from_cuda = unregister
        moves_before = len(kernel.moves)
        buffer.move(gz.TIER_T3)
        check("a demote of a buffer it registered with CUDA unregisters it first, then moves",
              events == [("cudaHostUnregister", moves_before)] and kernel.moves[-1] == (buffer.id, gz.TIER_T3), str(events))
        buffer.move(gz.TIER_T2)
        buffer._cuda_registered = True
        buffer.move(gz.TIER_T2)
        check("a move that is no demote leaves the CUDA registration alone", len(events) == 1 and buffer._cuda_registered)
        buffer._cuda_registered = False
        view.release()
        buffer.close()

    with gz.Device(os.devnull, ioctl=FakeKernel(t3=False)) as device:
        check("has_t3 is False without GB_INFO_T3", not device.has_t3)
        check_raises("T3_STATS on a module without T3 says so", device.t3_stats, gz.GreenBoostError,
                     lambda error: error.errno == errno.ENOTTY and "no T3" in str(error))
        check_raises("alloc(t3=True) on a module without T3 says so", lambda: device.alloc(4096, t3=True), gz.GreenBoostError,
                     lambda error: error.errno == errno.EINVAL and "no T3" in str(error))
        with device.alloc(4096) as buffer:
            check_raises("a move on a module without T3 says so", lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                         lambda error: error.errno == errno.ENOTTY and "no T3" in str(error))
    with memfd_buffer(4096) as buffer:
        check_raises("a buffer that no Device allocated cannot move", lambda: buffer.move(gz.TIER_T3), gz.GreenBoostError,
                     lambda error: "not allocated from a Device" in str(error))


# One page of 4 KiB per block, so that the block is exactly the buffer (sizes round up to pages).
CACHE_SHAPE = {"layers": 2, "kv_heads": 2, "head_dim": 32, "block_tokens": 8}
BLOCK_BYTES = 2 * 2 * 8 * 2 * 32 * 2  # layers * (K, V) * tokens * heads * dim * float16


def tiered_cache(kernel, blocks, hot_blocks):
    """(device, cache, warnings the cache's construction gave)."""
    device = gz.Device(os.devnull, ioctl=kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = gz.TieredKVCache(device, blocks=blocks, hot_blocks=hot_blocks, **CACHE_SHAPE)
    return device, cache, caught


def degradation_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "TieredKVCache" in str(w.message)]


def have_array_library(name):
    for module in ("torch", "numpy"):
        try:
            __import__(module)
            return True
        except ImportError:
            pass
    skip(name, "neither numpy nor PyTorch is installed")
    return False


def test_tiered_policy():
    if not have_array_library("tiered KV cache policy"):
        return
    kernel = FakeKernel()
    device, cache, caught = tiered_cache(kernel, blocks=6, hot_blocks=2)
    ids = [buffer.id for buffer in cache.buffers]
    check("tiered cache: no warning while T3 works", not caught and cache.degraded is None, str([str(w.message) for w in caught]))
    check("tiered cache: one buffer per block of layers*2*tokens*heads*dim*2 bytes",
          [buffer.size for buffer in cache.buffers] == [BLOCK_BYTES] * 6)
    check("tiered cache: the first hot_blocks blocks start in T2, the others in T3",
          [buffer.tier for buffer in cache.buffers] == [2, 2, 3, 3, 3, 3]
          and kernel.alloc_flags == [0, 0] + [gz.ALLOC_T3] * 4 and cache.hot == [0, 1] and not kernel.moves)
    view = cache.block(0)
    check("tiered cache: a block view is [layers, 2, block_tokens, kv_heads, head_dim]", tuple(view.shape) == (2, 2, 8, 2, 32))
    cache.block(2)
    check("tiered cache: using a cold block demotes the least recently used hot block first, then promotes it",
          kernel.moves == [(ids[1], gz.TIER_T3), (ids[2], gz.TIER_T2)] and cache.hot == [0, 2], f"{kernel.moves} {cache.hot}")
    del kernel.moves[:]
    cache.block(0)
    check("tiered cache: using a hot block asks the kernel for nothing and makes it the most recent",
          not kernel.moves and cache.hot == [2, 0])

    # A reference LRU of hot_blocks entries: the cache must ask for exactly its moves,
    # keep exactly its hot set, and never hold more than hot_blocks blocks in T2.
    reference, expected_moves, problems = [2, 0], [], []
    first_views, stamps = {}, {}
    for step, index in enumerate([3, 3, 1, 4, 0, 5, 2, 2, 3, 1, 0, 5, 4]):
        view = cache.block(index)
        if index in reference:
            reference.remove(index)
        else:
            if len(reference) == cache.hot_blocks:
                expected_moves.append((ids[reference.pop(0)], gz.TIER_T3))
            expected_moves.append((ids[index], gz.TIER_T2))
        reference.append(index)
        in_t2 = [i for i, buffer in enumerate(cache.buffers) if buffer.tier == gz.TIER_T2]
        in_t2_for_kernel = [i for i, buffer in enumerate(cache.buffers) if kernel.tier(buffer) == gz.TIER_T2]
        if len(in_t2) > cache.hot_blocks or sorted(cache.hot) != in_t2 or in_t2 != in_t2_for_kernel or cache.hot != reference:
            problems.append(f"step {step}: hot {cache.hot}, T2 {in_t2}, kernel's T2 {in_t2_for_kernel}, reference {reference}")
        if first_views.setdefault(index, view) is not view:
            problems.append(f"step {step}: block {index} came back as another view object")
        if not float(view.min()) == float(view.max()) == stamps.get(index, 0):
            problems.append(f"step {step}: block {index} does not hold {stamps.get(index, 0)} everywhere")
        stamps[index] = float(step + 1)
        view[...] = step + 1
    check("tiered cache: the hot set never exceeds hot_blocks, is the LRU's, and is what is in T2", not problems, "; ".join(problems))
    check("tiered cache: the moves asked for are the LRU's, demote before promote", kernel.moves == expected_moves,
          f"{kernel.moves} != {expected_moves}")
    check("tiered cache: every block kept its data across its moves (same view, same mapping)",
          all(float(cache.block(i).min()) == float(cache.block(i).max()) == stamps[i] for i in stamps))
    check_raises("tiered cache: a block index out of range is an IndexError", lambda: cache.block(6), IndexError, lambda error: True)
    check_raises("tiered cache: hot_blocks 0 is refused", lambda: gz.TieredKVCache(device, 2, 0, **CACHE_SHAPE),
                 ValueError, lambda error: "hot_blocks" in str(error))
    del view, first_views
    cache.close()
    check("tiered cache: close() releases every block", cache.buffers == [])
    device.close()


def test_tiered_refusals():
    if not have_array_library("tiered KV cache refusals"):
        return
    kernel = FakeKernel()
    device, cache, _ = tiered_cache(kernel, blocks=4, hot_blocks=2)
    kernel.busy.add(cache.buffers[0].id)
    check_raises("tiered cache: EBUSY demoting the LRU block names it, the block asked for, and the way out",
                 lambda: cache.block(2), gz.GreenBoostError,
                 lambda error: error.errno == errno.EBUSY and "block 0" in str(error) and "block 2" in str(error)
                 and "unregister it first" in str(error))
    check("tiered cache: after a refused demote nothing moved",
          cache.hot == [0, 1] and [kernel.tier(buffer) for buffer in cache.buffers] == [2, 2, 3, 3]
          and [buffer.tier for buffer in cache.buffers] == [2, 2, 3, 3])
    kernel.busy = {cache.buffers[2].id}
    check_raises("tiered cache: EBUSY promoting a block names it", lambda: cache.block(2), gz.GreenBoostError,
                 lambda error: error.errno == errno.EBUSY and "block 2 cannot be promoted" in str(error))
    check("tiered cache: a refused promote leaves the block in T3 and out of the hot set",
          cache.buffers[2].tier == gz.TIER_T3 == kernel.tier(cache.buffers[2]) and cache.hot == [1])
    kernel.busy.clear()
    cache.block(2)
    check("tiered cache: once the pin is gone the same call promotes it", cache.buffers[2].tier == gz.TIER_T2 and cache.hot == [1, 2])
    cache.close()
    device.close()


def test_tiered_degradation():
    if not have_array_library("tiered KV cache without T3"):
        return
    kernel = FakeKernel(t3=False)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        for index in (3, 0, 2, 1, 3):
            cache.block(index)
    check("without T3 in the module: one warning that says so", len(degradation_warnings(caught)) == 1
          and "no T3" in str(caught[0].message) and not later and "no T3" in cache.degraded,
          str([str(w.message) for w in caught + later]))
    check("without T3 in the module: every block in T2, no T3 allocation, no MOVE",
          all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and kernel.alloc_flags == [0] * 4 and not kernel.moves)
    cache.close()
    device.close()

    kernel = FakeKernel(t3_room=0)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    check("without swap: one warning that T3 has no room", len(degradation_warnings(caught)) == 1
          and "T3 has no room" in cache.degraded, str([str(w.message) for w in caught]))
    check("without swap: the refused T3 block and the rest are allocated in T2",
          kernel.alloc_flags == [0, 0, gz.ALLOC_T3, 0, 0] and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers))
    cache.block(3)
    check("without swap: using a block moves nothing", not kernel.moves)
    cache.close()
    device.close()

    kernel = FakeKernel(t3_room=2 * BLOCK_BYTES)
    device, cache, caught = tiered_cache(kernel, blocks=4, hot_blocks=2)
    ids = [buffer.id for buffer in cache.buffers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.block(2)
        cache.block(3)
    check("when swap fills up: one warning, then T2 only", len(degradation_warnings(caught)) == 1
          and "T3 has no room" in cache.degraded, str([str(w.message) for w in caught]))
    check("when swap fills up: the refused demote stays in T2, the blocks used are promoted, nothing more is demoted",
          kernel.moves == [(ids[0], gz.TIER_T3), (ids[2], gz.TIER_T2), (ids[3], gz.TIER_T2)]
          and all(buffer.tier == gz.TIER_T2 for buffer in cache.buffers) and cache.hot == [0, 1, 2, 3], f"{kernel.moves} {cache.hot}")
    cache.close()
    device.close()


# --- 4. the real module ------------------------------------------------------------------
def test_device_errors():
    check_raises("a missing node is a GreenBoostError that says to load the module",
                 lambda: gz.Device("/nonexistent/greenboost"), gz.GreenBoostError,
                 lambda error: error.errno == errno.ENOENT and "modprobe greenboost" in str(error))
    # /dev/null answers every ioctl with ENOTTY: the INFO call is made, and refused.
    check_raises("a node that is not GreenBoost's is refused at INFO", lambda: gz.Device("/dev/null"),
                 gz.GreenBoostError, lambda error: error.errno == errno.ENOTTY and "GB_IOC_INFO" in str(error))


def open_real_device(name):
    """The real module's Device, or None after saying why ``name`` is skipped."""
    path = os.environ.get("GREENBOOST_DEVICE", gz.DEVICE_PATH)
    if not os.path.exists(path):
        skip(name, f"{path} does not exist (module not loaded): nothing to test against")
        return None
    try:
        return gz.Device(path)
    except gz.GreenBoostError as error:
        skip(name, str(error))
        return None


def test_device():
    device = open_real_device("real round trip")
    if device is None:
        return
    with device:
        info = device.info()
        check("INFO: ABI version and chunk size", info.abi_version == gz.ABI_VERSION and info.chunk_size == gz.CHUNK_SIZE, str(info))
        before = device.proc_stats().t2_used
        size = 8 << 20
        buffer = device.alloc(size)
        check("ALLOC returns a buffer of the size asked for", buffer.size == size and buffer.id > 0, f"{buffer.size} id {buffer.id}")
        check("PROC_STATS counts the buffer", device.proc_stats().t2_used >= before + size)
        view = buffer.memoryview()
        check("fresh pages are zero", view[:4096] == bytes(4096) and view[size - 4096:] == bytes(4096))
        pattern = bytes(range(256)) * 16
        view[0:4096] = pattern
        view[size - 4096:size] = pattern
        view.release()
        second = mmap.mmap(os.dup(buffer.fd), size, mmap.MAP_SHARED, mmap.PROT_READ)
        check("a second mapping (dup'd DMA-BUF fd) reads what the first wrote", second[0:4096] == pattern and second[size - 4096:] == pattern)
        second.close()
        buffer.close()
        check("closing the buffer gives the memory back", device.proc_stats().t2_used == before)
        with device.alloc(5000) as odd:
            check("an unaligned size is rounded up to the page size", odd.size == 8192, str(odd.size))
        check_raises("size 0 is refused with EINVAL", lambda: device.alloc(0), gz.GreenBoostError,
                     lambda error: error.errno == errno.EINVAL and "invalid argument" in str(error))


def test_device_t3():
    device = open_real_device("real T3 moves")
    if device is None:
        return
    with device:
        if not device.has_t3:
            skip("real T3 moves", "this module has no T3 (GB_INFO_T3 is not set)")
            return
        size = 8 << 20
        before = device.t3_stats()
        try:
            buffer = device.alloc(size, t3=True)
        except gz.GreenBoostError as error:
            if error.errno != errno.ENOMEM:
                raise
            skip("real T3 moves", str(error))
            return
        with buffer:
            view = buffer.memoryview()
            pattern = bytes(range(256)) * 16
            view[0:4096] = pattern
            view[size - 4096:size] = pattern
            promoted = buffer.move(gz.TIER_T2)
            check("MOVE to T2 keeps the data under the mapping made in T3",
                  view[0:4096] == pattern and view[size - 4096:] == pattern and 0 < promoted <= size, str(promoted))
            demoted = buffer.move(gz.TIER_T3)
            check("MOVE back to T3 keeps it too", view[0:4096] == pattern and view[size - 4096:] == pattern and 0 < demoted <= size,
                  str(demoted))
            check("a MOVE to the tier the buffer is in copies nothing", buffer.move(gz.TIER_T3) == 0)
            view.release()
            stats = device.t3_stats()
            check("T3_STATS counts the buffer and the moves", stats.t3_used >= size and stats.moves_to_t2 > before.moves_to_t2
                  and stats.moves_to_t3 > before.moves_to_t3, str(stats))
        if not have_array_library("tiered KV cache on the module"):
            return
        cache = gz.TieredKVCache(device, blocks=4, hot_blocks=2, **CACHE_SHAPE)
        for index in (0, 1, 2, 3, 0, 2):
            cache.block(index)[...] = index + 1
        check("tiered cache on the module: at most hot_blocks blocks in T2, unless it said it could not tier",
              cache.degraded is not None or sum(b.tier == gz.TIER_T2 for b in cache.buffers) <= 2, str(cache.degraded))
        check("tiered cache on the module: every block keeps its data through its moves",
              all(float(cache.block(i).min()) == float(cache.block(i).max()) == i + 1 for i in range(4)))
        cache.close()


# --- 5. zero-copy CUDA view ----------------------------------------------------------------
def test_cuda():
    try:
        import torch
    except ImportError:
        skip("CUDA zero-copy view", "PyTorch is not installed")
        return
    if not torch.cuda.is_available():
        skip("CUDA zero-copy view", "no CUDA GPU visible to PyTorch")
        return
    path = os.environ.get("GREENBOOST_DEVICE", gz.DEVICE_PATH)
    size = 64 << 20
    if os.path.exists(path):
        device = gz.Device(path)
        buffer = device.alloc(size)
        source = "a /dev/greenboost buffer"
    else:
        device = None
        buffer = memfd_buffer(size)
        source = "a memfd buffer (no module here)"
    try:
        host = buffer.torch(torch.float32)
        host.copy_(torch.arange(host.numel(), dtype=torch.float32))
        buffer.register_with_cuda()
        gpu = buffer.cuda_tensor(torch.float32)
        check(f"CUDA view of {source} is on the GPU with the same shape", gpu.is_cuda and gpu.shape == host.shape)
        check("the GPU reads what the CPU wrote", bool(torch.equal(gpu[-1000:].cpu(), host[-1000:].clone())))
        gpu.mul_(2.0)
        torch.cuda.synchronize()
        check("the CPU reads what the GPU wrote, without a copy", float(host[12345]) == 2.0 * 12345 and float(host[-1]) == 2.0 * (host.numel() - 1))
        del gpu, host
    finally:
        buffer.close()
        if device is not None:
            device.close()

    # The fake kernel's buffers are memfd pages, which CUDA registers like the module's;
    # registering twice fails (cudaErrorHostMemoryAlreadyRegistered), so a second
    # registration after a round trip through T3 proves the demote unregistered it.
    with gz.Device(os.devnull, ioctl=FakeKernel()) as fake_device, fake_device.alloc(size) as buffer:
        buffer.register_with_cuda()
        buffer.move(gz.TIER_T3)
        buffer.move(gz.TIER_T2)
        try:
            buffer.register_with_cuda()
            registered_again = True
        except gz.GreenBoostError as error:
            registered_again = str(error)
        check("a demote unregisters the buffer from CUDA: it registers again once back in T2", registered_again is True,
              str(registered_again))


for section in (test_abi, test_views, test_tier_api, test_tiered_policy, test_tiered_refusals, test_tiered_degradation,
                test_device_errors, test_device, test_device_t3, test_cuda):
    run_section(section.__name__, section)
print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
