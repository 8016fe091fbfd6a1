"""Issue 12's second study, on a real GPU: what limits promotion of host-preferred managed
memory (the shim's movable T2) to the copy engine's rate, and what eviction does to
pages promoted without changing their preferred location.

Without the shim, on a free GPU (the eviction step starts its own foreign process):
  PYTHONPATH=build/bench-carry/python python3 bench/probes/tiering_promote_probe.py [BUFFERS=16] [BUFFER_GIB=1]
(bench/prepare.sh carries the gbgpu package there)
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

import json
import sys
import time

from gbgpu.managed import GIB, GROUP, LOCATION_DEVICE, LOCATION_HOST, Driver, eviction_wait, promote


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
