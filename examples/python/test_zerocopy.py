#!/usr/bin/env python3
"""Tests of greenboost_zerocopy.py. Ends with `N passed, M failed`.

1. ABI: every struct size, field offset, ioctl number and constant the Python module
   uses is compared with abi/greenboost.h, compiled by the C compiler (the header is in
   turn checked against the Rust ABI crate by abi/tests/header.rs).
2. The numpy/torch/KV-cache views, on memfd-backed buffers (no module needed): shared
   memory really is shared, shapes and offsets are right, close() refuses while views
   are alive.
3. T3 and the tiered KV cache against a fake ioctl layer (FakeKernel, memfd pages; in
   test_zerocopy_tiers.py, with what the sections share in zerocopy_testlib.py):
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import greenboost_kvcache as kv  # noqa: E402
import greenboost_zerocopy as gz  # noqa: E402
from test_zerocopy_tiers import (test_tier_api, test_tiered_degradation, test_tiered_policy,  # noqa: E402
                                 test_tiered_refusals)
from zerocopy_testlib import (CACHE_SHAPE, FakeKernel, check, check_raises, have_array_library,  # noqa: E402
                              memfd_buffer, results, run_section, skip)


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
    cache = kv.KVCache(device, layers=3, max_tokens=64, kv_heads=4, head_dim=32)
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
        cache = kv.TieredKVCache(device, blocks=4, hot_blocks=2, **CACHE_SHAPE)
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
