"""Managed memory as VRAM that can leave (issue 36 item 1, issue 34 item 2): what it costs
to place an allocation in VRAM as managed memory instead of cudaMalloc memory, how fast
it can be sent back to the host to make room, whether the driver shows the VRAM a demotion
left as free (and when), and whether this process's own cuMemAlloc, its own later
promotions and another process's cuMemAlloc get that room, beside a foreign process.

  python3 bench/probes/movable_vram_probe.py LEAVE_GIB WEIGHTS_GIB   (prints one JSON line)

Runs without the shim. The foreign process is gbgpu.foreign's balloon, leaving LEAVE_GIB.
"""

import ctypes
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gbgpu.foreign import kill_pid  # noqa: E402
from gbgpu.managed import (CU_MEM_ADVISE_SET_ACCESSED_BY, LOCATION_DEVICE, LOCATION_HOST, Driver,  # noqa: E402
                           Location)

GIB = 1 << 30
MIB = 1 << 20
PIECE = 128 * MIB


def managed_in_vram(driver, size, stream):
    """Managed memory preferred on the host, mapped by the device, prefetched into VRAM
    before anything touched it: the shim's movable VRAM."""
    ptr = ctypes.c_uint64()
    driver.check(driver.cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1), "cuMemAllocManaged")
    driver.advise(ptr.value, size, LOCATION_HOST)
    driver.check(driver.cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr.value), ctypes.c_size_t(size),
                                            CU_MEM_ADVISE_SET_ACCESSED_BY, Location(LOCATION_DEVICE, 0)), "accessed-by")
    driver.prefetch(ptr.value, size, LOCATION_DEVICE, stream.ptr)
    return ptr.value


# The pieces the GEMM comparison overwrites (section 2): their sums are not the fill's.
GEMM_PIECES = (1, 2)

FOREIGN_ALLOC = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
context, ptr = ctypes.c_void_p(), ctypes.c_uint64()
cuda.cuInit(0)
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0)
cuda.cuCtxSetCurrent(context)
began = time.perf_counter()
status = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1])))
print(status, time.perf_counter() - began)
"""


def foreign_alloc(env, size):
    """Another process's cuMemAlloc of `size` bytes (its status and seconds; freed as it exits)."""
    done = subprocess.run([sys.executable, "-c", FOREIGN_ALLOC, str(size)], env=env, capture_output=True, text=True,
                          timeout=120)
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) != 2:
        return {"want": size, "error": done.stderr.strip()[-300:]}
    return {"want": size, "status": int(fields[0]), "s": float(fields[1])}


def poll_free(driver, seconds):
    time.sleep(seconds)
    return driver.free() // MIB


def mem_alloc(driver, size):
    ptr = ctypes.c_uint64()
    began = time.perf_counter()
    status = driver.cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
    return status, ptr.value, time.perf_counter() - began


def gemm_ms(cupy, a, b, repeat=5):
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.matmul(a, b)
    start.record()
    for _ in range(repeat):
        cupy.matmul(a, b)
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / repeat


def beside_balloon(leave_gib, out, measure):
    """Runs measure(out, env) beside gbgpu.foreign's balloon holding all but LEAVE_GIB of
    the free VRAM, then prints `out` as one JSON line: what measure filled in, and the
    error that stopped it if one did."""
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    balloon = subprocess.Popen([sys.executable, "-m", "gbgpu.foreign", "balloon", str(leave_gib)], env=env,
                               stdout=subprocess.PIPE, text=True)
    try:
        out["balloon"] = balloon.stdout.readline().strip()
        measure(out, env)
    except Exception as error:  # the figures so far still print
        out["error"] = repr(error)
    finally:
        kill_pid(balloon.pid)
        balloon.wait()
    print(json.dumps(out), flush=True)


def measure(out, env):
    weights_gib = out["weights_gib"]
    driver = Driver()
    cupy = driver.cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    out["free_at_start"] = driver.free()
    # 1. Allocation cost: managed in VRAM against cuMemAlloc, per 128 MiB piece.
    pieces = weights_gib * GIB // PIECE
    began = time.perf_counter()
    ptrs = []
    for _ in range(pieces):
        ptrs.append(managed_in_vram(driver, PIECE, stream))
    stream.synchronize()
    out["managed_alloc_ms_per_piece"] = (time.perf_counter() - began) * 1e3 / pieces
    out["free_after_managed"] = driver.free()
    plain = []
    began = time.perf_counter()
    for _ in range(8):
        status, ptr, _ = mem_alloc(driver, PIECE)
        driver.check(status, "cuMemAlloc")
        plain.append(ptr)
    out["plain_alloc_ms_per_piece"] = (time.perf_counter() - began) * 1e3 / 8
    for index, ptr in enumerate(ptrs):
        driver.view(ptr, PIECE).fill(index % 250 + 1)
    driver.sync()
    # 2. Reads and a GEMM from managed-in-VRAM against plain memory.
    total, rate = driver.timed_read(ptrs[0], PIECE)
    total, rate = driver.timed_read(ptrs[0], PIECE)
    out["managed_read_GBps"] = rate
    out["managed_sum_ok"] = total == PIECE * 1
    _, out["plain_read_GBps"] = driver.timed_read(plain[0], PIECE)
    _, out["plain_read_GBps"] = driver.timed_read(plain[0], PIECE)
    n = 4096
    def half(ptr):  # noqa: E306
        memory = cupy.cuda.UnownedMemory(ptr, n * n * 2, None)
        return cupy.ndarray((n, n), dtype=cupy.float16, memptr=cupy.cuda.MemoryPointer(memory, 0))
    a_m, b_m = half(ptrs[1]), half(ptrs[2])
    a_p, b_p = half(plain[1]), half(plain[2])
    a_m[...] = 0.01
    b_m[...] = 0.01
    a_p[...] = 0.01
    b_p[...] = 0.01
    out["gemm_ms_managed"] = gemm_ms(cupy, a_m, b_m)
    out["gemm_ms_plain"] = gemm_ms(cupy, a_p, b_p)
    for ptr in plain:
        driver.check(driver.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    driver.sync()
    # 3. Demotion to make room: prefetch to the host, one stream and four.
    quarter = pieces // 4
    for label, group, streams in (("one_stream", ptrs[:quarter], [stream]),
                                  ("four_streams", ptrs[quarter:2 * quarter],
                                   [cupy.cuda.Stream(non_blocking=True) for _ in range(4)])):
        free_before = driver.free()
        began = time.perf_counter()
        for index, ptr in enumerate(group):
            driver.prefetch(ptr, PIECE, LOCATION_HOST, streams[index % len(streams)].ptr)
        for s in streams:
            s.synchronize()
        seconds = time.perf_counter() - began
        out[f"demote_{label}_GBps"] = len(group) * PIECE / seconds / 1e9
        out[f"demote_{label}_free_delta"] = driver.free() - free_before
    # 3b. Does the driver give the demoted VRAM back, and when? Free VRAM every 100 ms
    # for 2 s after the demotions (the figures above read it right after them).
    out["free_after_demotion_series_mib"] = [poll_free(driver, 0.1) for _ in range(20)]
    # 3c. Does a later promotion of this process reuse what the demotion left the driver
    # (free does not fall), or take fresh VRAM? The first demoted quarter back to VRAM.
    free_before = driver.free()
    for ptr in ptrs[:quarter]:
        driver.prefetch(ptr, PIECE, LOCATION_DEVICE, stream.ptr)
    stream.synchronize()
    out["repromote_free_delta"] = driver.free() - free_before
    # 3d. Another process's cuMemAlloc of what the demotion (the second quarter) should
    # have left: does it get it, while this process's free VRAM says it is not there?
    free_before = driver.free()
    want = quarter * PIECE + max(free_before - 512 * MIB, 0)
    out["foreign_alloc_after_demotion"] = foreign_alloc(env, want) | {"free_before": free_before,
                                                                       "free_after": driver.free()}
    # 4. This process's cuMemAlloc of what was demoted: does it get the kept chunks?
    demoted = quarter * PIECE  # the second quarter: the first went back in 3c
    want = min(demoted, driver.free() + demoted - 512 * MIB)
    status, ptr, seconds = mem_alloc(driver, want)
    out["own_alloc_after_demotion"] = {"want": want, "status": status, "s": seconds, "free_after": driver.free()}
    if status == 0:
        driver.check(driver.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    # 5. With the rest still in VRAM: this process asks for free + 2 GiB at once.
    want = driver.free() + 2 * GIB
    status, ptr, seconds = mem_alloc(driver, want)
    out["own_alloc_beyond_free"] = {"want": want, "status": status, "s": seconds, "free_after": driver.free()}
    wrong = []
    for index, ptr_m in enumerate(ptrs):
        total, rate = driver.timed_read(ptr_m, PIECE)
        if index not in GEMM_PIECES and total != PIECE * (index % 250 + 1):
            wrong.append(index)
    out["pieces_changed_after"] = wrong
    if status == 0:
        driver.check(driver.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    # Reads of what stayed in VRAM, after the eviction (host-preferred: read over the link).
    _, out["read_last_piece_after_GBps"] = driver.timed_read(ptrs[-1], PIECE)
    driver.release(ptrs)


def probe_main(measure_with):
    """A probe's command line, LEAVE_GIB WEIGHTS_GIB: measure_with(out, env) beside the
    balloon, one JSON line printed."""
    leave_gib, weights_gib = float(sys.argv[1]), int(sys.argv[2])
    beside_balloon(leave_gib, {"leave_gib": leave_gib, "weights_gib": weights_gib}, measure_with)


if __name__ == "__main__":
    probe_main(measure)
