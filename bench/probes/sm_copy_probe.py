#!/usr/bin/env python3
"""The shim's SM copy kernels (shim/src/cuda/sm_copy.rs, whose PTX this reads from that
file) on the device: that the driver JIT-compiles them (its error log if not), that they
copy every byte (an unaligned head and tail included), and how fast they read movable T2
(managed memory preferred on the host and mapped by the device, as the shim makes it)
against the copy engine reading the same memory, and pinned host memory for reference.

  PYTHONPATH=build/bench-carry/python python3 bench/probes/sm_copy_probe.py [GIB]

Prints one JSON line: {"jit": ..., "correct": ..., "<source>_<copier>_gbs": ...}."""

import ctypes
import json
import os
import re
import sys
import time

from gbgpu.managed import CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_DEVICE, \
    LOCATION_HOST, Location

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 5, 6
THREADS, MAX_BLOCKS = 256, 1024


def shim_ptx():
    """The PTX image of shim/src/cuda/sm_copy.rs, NUL-terminated as the shim loads it."""
    source = open(os.path.join(ROOT, "shim", "src", "cuda", "sm_copy.rs")).read()
    return re.search(r'const PTX: &\[u8\] = b"(.*?)\\0";', source, re.S).group(1).encode() + b"\0"


class Cuda:
    def __init__(self):
        import torch

        torch.zeros(1, device="cuda")  # the primary context, current in this thread
        self.lib = ctypes.CDLL("libcuda.so.1")

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"{name}: CUDA error {status}")

    def load(self, image):
        """(module, error log) — the module None when the JIT refused the image."""
        log = ctypes.create_string_buffer(8192)
        options = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
        module = ctypes.c_void_p()
        status = self.lib.cuModuleLoadDataEx(ctypes.byref(module), image, 2, options, values)
        return (module if status == 0 else None), f"status {status}: {log.value.decode(errors='replace')}"

    def function(self, module, name):
        function = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function

    def launch(self, function, dst, src, count):
        blocks = max(1, min(MAX_BLOCKS, (count + THREADS - 1) // THREADS))
        values = [ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_uint64(count)]
        params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        self.call("cuLaunchKernel", function, blocks, 1, 1, THREADS, 1, 1, 0, None, params, None)

    def managed_on_host(self, size):
        pointer = ctypes.c_uint64()
        self.call("cuMemAllocManaged", ctypes.byref(pointer), ctypes.c_size_t(size), 1)
        for advice, where in ((CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_HOST),
                              (CU_MEM_ADVISE_SET_ACCESSED_BY, LOCATION_DEVICE)):
            self.call("cuMemAdvise_v2", pointer, ctypes.c_size_t(size), advice, Location(where, 0))
        return pointer.value


def timed(run, size, repeats=3):
    """GB/s of the fastest of `repeats` runs of `run` moving `size` bytes."""
    import torch

    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return round(size / best / 1e9, 2)


def step(what):
    """Says on stderr how far the probe came (a crash in the driver leaves no trace)."""
    print(f"sm_copy_probe: {what}", file=sys.stderr, flush=True)


def main():
    import torch

    size = int(float(sys.argv[1]) * (1 << 30)) if len(sys.argv) > 1 else 1 << 30
    cuda = Cuda()
    step("context made; loading the shim's PTX")
    module, log = cuda.load(shim_ptx())
    step(f"loaded: {log}")
    result = {"jit": "ok" if module else log}
    if not module:
        print(json.dumps(result), flush=True)
        return
    vector = cuda.function(module, "gb_copy16")

    def sm_copy(dst, src, n):
        """As SmCopy::copy: the vectors by the kernel, the unaligned ends by the copy engine."""
        head = (16 - src % 16) % 16
        vectors = (n - head) // 16
        middle = head + vectors * 16
        for offset, count in ((0, head), (middle, n - middle)):
            if count:
                cuda.call("cuMemcpyAsync", ctypes.c_uint64(dst + offset), ctypes.c_uint64(src + offset),
                          ctypes.c_size_t(count), None)
        if vectors:
            cuda.launch(vector, dst + head, src + head, vectors)

    step("kernels found")
    source = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    managed = cuda.managed_on_host(size)
    on_host = source.cpu().numpy()  # held: memmove reads it
    ctypes.memmove(managed, on_host.ctypes.data, size)
    target = torch.zeros(size + 64, dtype=torch.uint8, device="cuda")
    step("managed memory written")
    # An unaligned head and tail: 5 bytes in, 1000003 bytes, at the same offset in the target.
    sm_copy(target.data_ptr() + 5, managed + 5, 1000003)
    torch.cuda.synchronize()
    step("unaligned copy ran")
    result["correct"] = bool(torch.equal(target[5:1000008], source[5:1000008]))
    result["managed_sm_gbs"] = timed(lambda: sm_copy(target.data_ptr(), managed, size), size)
    result["managed_copy_engine_gbs"] = timed(
        lambda: cuda.call("cuMemcpyAsync", ctypes.c_uint64(target.data_ptr()), ctypes.c_uint64(managed),
                          ctypes.c_size_t(size), None), size)
    pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    result["pinned_copy_engine_gbs"] = timed(lambda: target[:size].copy_(pinned, non_blocking=True), size)
    result["vram_sm_gbs"] = timed(lambda: sm_copy(target.data_ptr(), source.data_ptr(), size), size)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
