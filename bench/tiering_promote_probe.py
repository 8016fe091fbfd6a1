"""Issue 12's second study, on a real GPU: what limits promotion of host-preferred managed
memory (the shim's movable T2) to the copy engine's rate, and what eviction does to
pages promoted without changing their preferred location.

Without the shim, on a free GPU (the eviction step starts its own foreign process):
  python3 bench/tiering_promote_probe.py [BUFFERS=16] [BUFFER_GIB=1]
Each variant gets fresh buffers, host-preferred and accessed by the device, written by
the GPU (as movable T2 is), moves them to the device, checks every byte, frees them:
  shim           per buffer: preferred location device, prefetch; waits every 2 GiB
  advise_first   every buffer advised first (timed apart), then all prefetched, one wait
  prefetch_only  all prefetched with the preferred location left on the host, one wait
  grouped        as prefetch_only, waiting every 2 GiB
  two_streams    as prefetch_only, alternating two streams
  batch          one cuMemPrefetchBatchAsync (CUDA 13) for every buffer
then demotion of one variant's buffers back to the host (advised or not), and eviction:
a foreign process asks for the free VRAM + 1 GiB while prefetch-only-promoted pages fill
the device; our read rate meanwhile (zero-copy ~50 GB/s, or faulting?) and after.
Also pinned cudaMemcpy H2D for the ratio. Output: KV lines and a JSON line (the last).
"""

import ctypes
import json
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
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Driver:
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


def demote(driver, ptrs, size, advised, stream):
    began = time.perf_counter()
    for ptr in ptrs:
        if advised:
            driver.advise(ptr, size, LOCATION_HOST)
        driver.prefetch(ptr, size, LOCATION_HOST, stream.ptr)
    stream.synchronize()
    return time.perf_counter() - began


def pinned_h2d(driver):
    cupy = driver.cupy
    host = cupy.cuda.alloc_pinned_memory(GROUP)
    target = cupy.empty(GROUP, dtype=cupy.uint8)
    rates = []
    for _ in range(5):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        cupy.cuda.runtime.memcpyAsync(target.data.ptr, host.ptr, GROUP, 1, 0)  # cudaMemcpyHostToDevice
        end.record()
        end.synchronize()
        rates.append(GROUP / (cupy.cuda.get_elapsed_time(start, end) / 1e3) / 1e9)
    del target, host
    return rates


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


def evict(driver, size):
    """A prefetch-only-promoted buffer (preferred location still the host) and a foreign
    process taking the free VRAM + 1 GiB: do our pages go to the host and get read there
    over the link, rather than faulting back as device-preferred pages do (6-7 GB/s)?
    And where are they once it has left?"""
    ptr = driver.managed(size, 1)
    stream = driver.cupy.cuda.Stream(non_blocking=True)
    driver.prefetch(ptr, size, LOCATION_DEVICE, stream.ptr)
    stream.synchronize()
    resident = driver.timed_read(ptr, size)
    out = {"bytes": size, "resident_read_GBps": resident[1], "resident_sum_ok": resident[0] == size}
    out.update(eviction_wait(driver, [ptr], size, GIB))
    time.sleep(1)
    after = driver.timed_read(ptr, size)
    out["after_foreign_exit"] = {"sum_ok": after[0] == size, "GBps": after[1], "free": driver.free()}
    driver.release([ptr])
    return out


def main():
    buffers = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    size = int(float(sys.argv[2]) * GIB) if len(sys.argv) > 2 else GIB
    driver = Driver()
    streams = [driver.cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    out = {"buffers": buffers, "buffer_bytes": size, "free_at_start": driver.free(), "pinned_h2d_GBps": pinned_h2d(driver)}
    print(f"KV pinned_h2d={out['pinned_h2d_GBps']}", flush=True)
    variants = {}
    for variant in ("shim", "advise_first", "prefetch_only", "grouped", "two_streams", "batch", "prefetch_only"):
        free_before = driver.free()
        ptrs = [driver.managed(size, (index % 250) + 1) for index in range(buffers)]
        driver.sync()
        try:
            timing = promote(driver, variant, ptrs, size, streams)
        except RuntimeError as error:
            variants[variant] = {"error": str(error)}
            driver.release(ptrs)
            continue
        sums = [driver.timed_read(ptr, size) for ptr in ptrs]
        ok = all(total == size * ((index % 250) + 1) for index, (total, _) in enumerate(sums))
        result = dict(timing, GBps=buffers * size / timing["wall_s"] / 1e9, data_ok=ok,
                      vram_taken=free_before - driver.free(), read_after_GBps=min(rate for _, rate in sums))
        if variant in ("prefetch_only", "shim") and "demote_s" not in variants.get(variant, {}):
            advised = variant == "shim"
            seconds = demote(driver, ptrs, size, advised, streams[0])
            result.update(demote_advised=advised, demote_s=seconds, demote_GBps=buffers * size / seconds / 1e9,
                          read_after_demote_GBps=min(driver.timed_read(ptr, size)[1] for ptr in ptrs[:2]))
        key = variant if variant not in variants else variant + "_again"
        variants[key] = result
        print(f"KV {key}={result}", flush=True)
        driver.release(ptrs)
    out["variants"] = variants
    out["evict"] = evict(driver, min(driver.free() - 4 * GIB, 16 * GIB))
    print(f"KV evict={out['evict']}", flush=True)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
