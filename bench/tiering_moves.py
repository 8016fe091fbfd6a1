"""bench/tiering.py's roles that move memory: migrate (the shim's promotion rate against
pinned cudaMemcpy H2D, under the shim), prefetch (the driver's own rate for the same
moves: host-preferred managed buffers prefetched in 2 GiB groups, without the shim),
uvm (Unified Memory's fault-driven migration, without the shim) and demote (a matmul chain kept running, and checked bit for bit,
while a foreign process takes VRAM we hold, under the shim). Each prints one JSON line."""

import argparse
import ctypes
import json
import os
import select
import sys
import time

from gbgpu.foreign import kill_pid
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver, Location, eviction_wait, promote
from tiering_shim import GIB, MIB, Shim, wait_promoted


# --- migration (under the shim) ------------------------------------------------------

def role_migrate(args):
    parser = argparse.ArgumentParser(prog="tiering.py migrate")
    parser.add_argument("--kill-pid", type=int, required=True)
    parser.add_argument("--tensors", type=int, default=16, help="tensors of 1 GiB")
    opts = parser.parse_args(args)
    import torch

    shim = Shim()
    torch.zeros(1, device="cuda")
    tensors = []
    for index in range(opts.tensors):
        t = torch.empty(GIB, dtype=torch.uint8, device="cuda")
        t.fill_(index + 1)
        tensors.append(t)
    torch.cuda.synchronize()
    movable = [t for t in tensors if shim.t2_bytes(t) == GIB]
    before = shim.stats()
    killed = time.monotonic()
    kill_pid(opts.kill_pid)
    waited = wait_promoted(shim, movable, 60)
    wall = time.monotonic() - killed
    after = shim.stats()
    moved, ns = after.promoted_bytes - before.promoted_bytes, after.promote_ns - before.promote_ns
    data_ok = all(bool((t == index + 1).all()) for index, t in enumerate(tensors))
    # Pinned cudaMemcpy H2D in the same process, into VRAM (the GPU is free now).
    source = torch.empty(2 * GIB, dtype=torch.uint8, pin_memory=True)
    source.fill_(7)
    target = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    copies = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source, non_blocking=True)
        end.record()
        end.synchronize()
        copies.append(2 * GIB / (start.elapsed_time(end) / 1e3) / 1e9)
    result = {"role": "migrate", "tensors": len(tensors), "movable": len(movable),
              "movable_bytes": len(movable) * GIB, "promoted": waited is not None, "wait_s": waited, "wall_s": wall,
              "promoted_bytes": moved, "promote_ns": ns, "promotions": after.promotions - before.promotions,
              "promote_GBps": moved / ns if ns else None,
              "promote_wall_GBps": len(movable) * GIB / wall / 1e9 if waited is not None else None,
              "data_ok": data_ok, "pinned_h2d_GBps": max(copies), "pinned_h2d_each": copies,
              "pinned_target_t2_bytes": shim.t2_bytes(target), "tier_at_end": shim.tier()}
    print(json.dumps(result), flush=True)


# --- the driver's prefetch rate for the same moves (no shim) -----------------------

def role_prefetch(args):
    """16 x 1 GiB of managed memory, preferred on the host, accessed by the device and
    written by the GPU (movable T2 as the shim makes it), prefetched to the device in
    groups of 2 GiB as the shim's tier thread does: the rate the driver gives, right
    after the foreign process (--kill-pid) exits as the shim sees it, and on a settled
    GPU (the same buffers sent back and moved again). Then the eviction the shim's
    preferred location leads to: a foreign cuMemAlloc of the free VRAM + 4 GiB beside
    the buffers in VRAM, once preferred on the host (the shim's way), once on the device."""
    parser = argparse.ArgumentParser(prog="tiering.py prefetch")
    parser.add_argument("--kill-pid", type=int, default=0)
    parser.add_argument("--buffers", type=int, default=16)
    opts = parser.parse_args(args)
    driver = Driver()
    ptrs = [driver.managed(GIB, index + 1) for index in range(opts.buffers)]
    driver.sync()
    streams = [driver.cupy.cuda.Stream(non_blocking=True)]
    need = (opts.buffers + 1) * GIB
    out = {"role": "prefetch", "bytes": opts.buffers * GIB}
    if opts.kill_pid:
        killed = time.monotonic()
        kill_pid(opts.kill_pid)
        while driver.free() < need and time.monotonic() - killed < 30:
            time.sleep(0.002)
        out["room_after_s"] = time.monotonic() - killed
        out["after_exit"] = promote(driver, "grouped", ptrs, GIB, streams)
        out["after_exit_GBps"] = opts.buffers * GIB / out["after_exit"]["wall_s"] / 1e9
        for ptr in ptrs:
            driver.prefetch(ptr, GIB, LOCATION_HOST, streams[0].ptr)
        streams[0].synchronize()
        time.sleep(1)
    out["settled"] = promote(driver, "grouped", ptrs, GIB, streams)
    out["driver_prefetch_GBps"] = opts.buffers * GIB / out["settled"]["wall_s"] / 1e9
    out["data_ok"] = all(driver.timed_read(ptr, GIB)[0] == GIB * (index + 1) for index, ptr in enumerate(ptrs))
    out["evict_preferred_host"] = eviction_wait(driver, ptrs, GIB, 4 * GIB)
    promote(driver, "grouped", ptrs, GIB, streams)  # what was evicted, back
    for ptr in ptrs:
        driver.advise(ptr, GIB, LOCATION_DEVICE)
    out["evict_preferred_device"] = eviction_wait(driver, ptrs, GIB, 4 * GIB)
    driver.release(ptrs)
    print(json.dumps(out), flush=True)


# --- Unified Memory's fault-driven migration (no shim) --------------------------------

def role_uvm(args):
    gib = float(args[0]) if args else 8.0
    import cupy

    cuda = ctypes.CDLL("libcuda.so.1")

    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA error {status}")

    cupy.cuda.Device(0).use()
    cupy.zeros(1).sum()  # the primary context, current in this thread
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    size = int(gib * GIB)
    # Managed memory is never oversubscribed (the device may be shared).
    if free.value < size + 4 * GIB:
        print(json.dumps({"role": "uvm", "skipped": f"{free.value // MIB} MiB free, {size // MIB} MiB needed + 4 GiB"}))
        return
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1), "cuMemAllocManaged")  # ATTACH_GLOBAL
    try:
        # CU_MEM_ADVISE_SET_PREFERRED_LOCATION (3) = device 0 (CU_MEM_LOCATION_TYPE_DEVICE, 1)
        check(cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr.value), ctypes.c_size_t(size), 3, Location(1, 0)), "cuMemAdvise")
        touched = time.perf_counter()
        ctypes.memset(ptr.value, 1, size)  # first touch: the CPU
        touch_s = time.perf_counter() - touched
        memory = cupy.cuda.UnownedMemory(ptr.value, size, None)
        words = cupy.ndarray((size // 4,), dtype=cupy.uint32, memptr=cupy.cuda.MemoryPointer(memory, 0))
        expected = (size // 4) * 0x01010101
        passes = []
        for _ in range(2):  # the first pass migrates by faults; the second reads VRAM
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            total_sum = int(words.sum(dtype=cupy.uint64))
            end.record()
            end.synchronize()
            seconds = cupy.cuda.get_elapsed_time(start, end) / 1e3
            passes.append({"GBps": size / seconds / 1e9, "s": seconds, "sum_ok": total_sum == expected})
        after = ctypes.c_size_t()
        check(cuda.cuMemGetInfo_v2(ctypes.byref(after), ctypes.byref(total)), "cuMemGetInfo")
        del words, memory
        result = {"role": "uvm", "bytes": size, "cpu_touch_s": touch_s, "uvm_fault_GBps": passes[0]["GBps"],
                  "passes": passes, "vram_taken": free.value - after.value}
    finally:
        cupy.cuda.Device(0).synchronize()
        cuda.cuMemFree_v2(ctypes.c_uint64(ptr.value))
    print(json.dumps(result), flush=True)


# --- demotion (under the shim) -------------------------------------------------------

def role_demote(args):
    parser = argparse.ArgumentParser(prog="tiering.py demote")
    parser.add_argument("--kill-pid", type=int, required=True)
    parser.add_argument("--matrices", type=int, default=16, help="16384 x 16384 bf16 matrices (512 MiB each)")
    parser.add_argument("--max-s", type=float, default=90.0)
    opts = parser.parse_args(args)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.use_deterministic_algorithms(True)
    shim = Shim()
    n = 16384
    generator = torch.Generator(device="cuda")
    mats = []
    for index in range(opts.matrices):
        m = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        generator.manual_seed(99 + index)
        m.normal_(0.0, 1.0 / n ** 0.5, generator=generator)
        mats.append(m)
    x0 = torch.randn(16, n, dtype=torch.bfloat16, device="cuda", generator=generator.manual_seed(5))
    movable = [m for m in mats if shim.t2_bytes(m) == m.numel() * 2]

    def chain():
        x = x0
        for m in mats:
            x = torch.tanh(x @ m)
        return x

    with torch.inference_mode():
        in_t2 = chain()
        torch.cuda.synchronize()
        before = shim.stats()
        kill_pid(opts.kill_pid)
        waited = wait_promoted(shim, movable, 60)
        promoted = shim.stats()
        reference = chain()
        same_as_t2 = torch.equal(reference, in_t2)
        print(f"promoted {waited} {time.time():.3f}", flush=True)
        steps, mismatches, began = [], 0, time.time()
        stop = False
        while not stop and time.time() - began < opts.max_s:
            x = chain()
            checksum = x.float().sum().item()
            same = torch.equal(x, reference)
            mismatches += 0 if same else 1
            steps.append(round(time.time(), 4))
            print(f"step {len(steps)} {steps[-1]:.4f} {checksum:.6f} {int(same)}", flush=True)
            if select.select([sys.stdin], [], [], 0)[0]:
                stop = sys.stdin.readline().strip() in ("stop", "")
    after = shim.stats()
    result = {"role": "demote", "matrices": len(mats), "movable": len(movable),
              "movable_bytes": sum(m.numel() * 2 for m in movable), "promote_wait_s": waited,
              "promoted_bytes": promoted.promoted_bytes - before.promoted_bytes,
              "demoted_bytes": after.demoted_bytes - promoted.demoted_bytes,
              "demote_ns": after.demote_ns - promoted.demote_ns, "demotions": after.demotions - promoted.demotions,
              "steps": len(steps), "step_times": steps, "mismatches": mismatches, "same_as_in_t2": same_as_t2,
              "reference_checksum": reference.float().sum().item(),
              "movable_in_t2_at_end": sum(1 for m in movable if shim.t2_bytes(m) == m.numel() * 2),
              "tier_at_end": shim.tier()}
    print(json.dumps(result), flush=True)
