"""Demotion from several threads at once (issue 34: the long prompt's wait for room).
Room made for a prefill's activations waits 0.4-1.8 s while weights go to T2, a prefetch
to the host per run issued from one thread, at 4-10 GB/s, with most of the time inside
cuMemPrefetchAsync itself (the shim's exit summary: "1545 ms of it issuing" of 2315 ms,
bench/results/2026-12-06-f5ed2f9ed5a7-longctx-repeat-h100.md), where the link carries
50 GB/s. Measures, beside a foreign process, the rate of demoting WEIGHTS_GIB of movable
VRAM (managed memory preferred on the host, prefetched to the device, as the shim makes
it) in 64 MiB runs issued from 1, 2, 4 and 8 threads, each with its own stream, and in
one cuMemPrefetchBatchAsync call; the promotion back between trials, from as many
threads; every byte checked at the end.

  python3 bench/probes/demote_threads_probe.py LEAVE_GIB WEIGHTS_GIB   (prints one JSON line)

Runs without the shim. The foreign process is gbgpu.foreign's balloon, leaving LEAVE_GIB.
"""

import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver  # noqa: E402
from movable_vram_probe import MIB, managed_in_vram, probe_main  # noqa: E402

RUN = 64 * MIB
THREADS = (1, 2, 4, 8)


def moved_by_threads(driver, context, ptrs, where, threads):
    """Seconds to move every run of `ptrs` to `where`, the runs dealt round-robin to
    `threads` threads, each prefetching on its own stream and waiting for it."""
    streams = [driver.cupy.cuda.Stream(non_blocking=True) for _ in range(threads)]
    errors = []

    def mover(index):
        try:
            driver.check(driver.cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
            stream = streams[index].ptr
            for ptr in ptrs[index::threads]:
                driver.prefetch(ptr, RUN, where, stream)
            driver.check(driver.cuda.cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")
        except Exception as error:  # reported by the caller
            errors.append(repr(error))

    workers = [threading.Thread(target=mover, args=(index,)) for index in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    if errors:
        raise RuntimeError(errors[0])
    return seconds


def measure(out, env):
    driver = Driver()
    context = ctypes.c_void_p()
    driver.check(driver.cuda.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    stream = driver.cupy.cuda.Stream(non_blocking=True)
    runs = out["weights_gib"] * 1024 * MIB // RUN
    ptrs = [managed_in_vram(driver, RUN, stream) for _ in range(runs)]
    stream.synchronize()
    for index, ptr in enumerate(ptrs):
        driver.view(ptr, RUN).fill(index % 250 + 1)
    driver.sync()
    gb = runs * RUN / 1e9
    out["free_with_runs_in_vram_mib"] = driver.free() >> 20
    for threads in THREADS:
        out[f"demote_{threads}_threads_GBps"] = gb / moved_by_threads(driver, context, ptrs, LOCATION_HOST, threads)
        out[f"promote_{threads}_threads_GBps"] = gb / moved_by_threads(driver, context, ptrs, LOCATION_DEVICE, threads)
    began = time.perf_counter()
    driver.prefetch_batch(ptrs, RUN, LOCATION_HOST, stream.ptr)
    stream.synchronize()
    out["demote_batch_call_GBps"] = gb / (time.perf_counter() - began)
    out["free_after_mib"] = driver.free() >> 20
    wrong = [index for index, ptr in enumerate(ptrs) if driver.timed_read(ptr, RUN)[0] != RUN * (index % 250 + 1)]
    out["runs_wrong"] = len(wrong)
    driver.release(ptrs)


if __name__ == "__main__":
    probe_main(measure)
