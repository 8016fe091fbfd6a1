"""The driver's managed-memory calls, through libcuda (ctypes) and CuPy, as the shim's
movable T2 uses them: host-preferred managed buffers written by the GPU, advised and
prefetched to the device (`promote`, in the variants issue 12's study compared), and
the wait of a foreign cuMemAlloc that makes the driver evict them (`eviction_wait`).
bench/tiering.py's prefetch and uvm roles measure with it; bench/probes/
tiering_promote_probe.py and tiering_probe.py are the studies it came from."""

import ctypes
import subprocess
import sys
import time

GIB = 1 << 30
GROUP = 2 * GIB
CU_MEM_ATTACH_GLOBAL = 1
CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
CU_MEM_ADVISE_SET_ACCESSED_BY = 5
LOCATION_DEVICE, LOCATION_HOST = 1, 2


class Location(ctypes.Structure):
    """CUmemLocation: a type (LOCATION_DEVICE, LOCATION_HOST) and an id."""

    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Driver:
    """libcuda's managed-memory calls on device 0, whose primary context CuPy makes
    current; CuPy's arrays view the buffers for the GPU's writes and reads."""

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.cuda = ctypes.CDLL("libcuda.so.1")
        cupy.cuda.Device(0).use()
        cupy.zeros(1).sum()  # the primary context, current in this thread

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA error {status}")

    def free(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.check(self.cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value

    def advise(self, ptr, size, where):
        self.check(self.cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size),
                                            CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Location(where, 0)), "cuMemAdvise")

    def prefetch(self, ptr, size, where, stream):
        self.check(self.cuda.cuMemPrefetchAsync_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size), Location(where, 0),
                                                   0, ctypes.c_void_p(stream)), "cuMemPrefetchAsync")

    def prefetch_batch(self, ptrs, size, where, stream):
        count = len(ptrs)
        dptrs = (ctypes.c_uint64 * count)(*ptrs)
        sizes = (ctypes.c_size_t * count)(*([size] * count))
        locations = (Location * 1)(Location(where, 0))
        first = (ctypes.c_size_t * 1)(0)
        self.check(self.cuda.cuMemPrefetchBatchAsync(dptrs, sizes, ctypes.c_size_t(count), locations, first,
                                                     ctypes.c_size_t(1), ctypes.c_ulonglong(0),
                                                     ctypes.c_void_p(stream)), "cuMemPrefetchBatchAsync")

    def managed(self, size, fill):
        ptr = ctypes.c_uint64()
        self.check(self.cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL),
                   "cuMemAllocManaged")
        self.advise(ptr.value, size, LOCATION_HOST)
        self.check(self.cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr.value), ctypes.c_size_t(size),
                                            CU_MEM_ADVISE_SET_ACCESSED_BY, Location(LOCATION_DEVICE, 0)),
                   "cuMemAdvise accessed-by")
        self.view(ptr.value, size).fill(fill)  # written by the GPU, over the link
        return ptr.value

    def view(self, ptr, size):
        memory = self.cupy.cuda.UnownedMemory(ptr, size, None)
        return self.cupy.ndarray((size,), dtype=self.cupy.uint8, memptr=self.cupy.cuda.MemoryPointer(memory, 0))

    def timed_read(self, ptr, size):
        """GB/s of a GPU sum over the buffer, and whether every byte was what `fill` wrote."""
        array = self.view(ptr, size)
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record()
        total = int(array.sum(dtype=self.cupy.uint64))
        end.record()
        end.synchronize()
        return total, size / (self.cupy.cuda.get_elapsed_time(start, end) / 1e3) / 1e9

    def sync(self):
        self.cupy.cuda.runtime.deviceSynchronize()

    def release(self, ptrs):
        self.sync()
        for ptr in ptrs:
            self.check(self.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")


def promote(driver, variant, ptrs, size, streams):
    """Moves `ptrs` to the device as `variant` says; returns the timings (seconds)."""
    advise_s = issue_s = 0.0
    began = time.perf_counter()
    if variant == "advise_first":
        t = time.perf_counter()
        for ptr in ptrs:
            driver.advise(ptr, size, LOCATION_DEVICE)
        advise_s = time.perf_counter() - t
    if variant == "batch":
        t = time.perf_counter()
        driver.prefetch_batch(ptrs, size, LOCATION_DEVICE, streams[0].ptr)
        issue_s = time.perf_counter() - t
    else:
        since_wait = 0
        for index, ptr in enumerate(ptrs):
            if variant == "shim":
                t = time.perf_counter()
                driver.advise(ptr, size, LOCATION_DEVICE)
                advise_s += time.perf_counter() - t
            stream = streams[index % 2] if variant == "two_streams" else streams[0]
            t = time.perf_counter()
            driver.prefetch(ptr, size, LOCATION_DEVICE, stream.ptr)
            issue_s += time.perf_counter() - t
            since_wait += size
            if variant in ("shim", "grouped") and since_wait >= GROUP:
                stream.synchronize()
                since_wait = 0
    for stream in streams:
        stream.synchronize()
    return {"wall_s": time.perf_counter() - began, "advise_s": advise_s, "issue_s": issue_s}


FOREIGN_ALLOC = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
device, context, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
cuda.cuDeviceGet(ctypes.byref(device), 0)
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
cuda.cuCtxSetCurrent(context)
began = time.perf_counter()
status = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1])))
print(status, time.perf_counter() - began, flush=True)
sys.stdin.read()
"""


def eviction_wait(driver, ptrs, size, extra):
    """With `ptrs` resident in VRAM: a foreign process (the driver API, nothing else)
    allocates the free VRAM + `extra`, so the driver must evict that much of ours. How
    long its cuMemAlloc takes, and how fast we read our buffers while it holds it."""
    want = driver.free() + extra
    child = subprocess.Popen([sys.executable, "-c", FOREIGN_ALLOC, str(want)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        result = {"foreign_want": want, "foreign_status": int(line[0]) if line else None,
                  "foreign_alloc_s": float(line[1]) if len(line) > 1 else None}
        reads = [driver.timed_read(ptr, size) for ptr in ptrs]
        result["read_while_held_GBps"] = len(ptrs) * size / sum(size / rate for _, rate in reads)  # GB/s
        result["sums_ok"] = all(total == size * ((index % 250) + 1) for index, (total, _) in enumerate(reads))
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    return result
