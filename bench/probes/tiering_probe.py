"""Issue 12's first study, on a real GPU: CUDA managed memory as a T2 that can move.

Beside a foreign process that leaves LEAVE_GIB of VRAM free (gbgpu.foreign's balloon,
started by this script), it measures:
  safety     managed memory of 2 x LEAVE_GIB, preferred on the host and accessed by the
             device, filled by the CPU and read by the GPU twice: how much free VRAM the
             reads took (host-preferred pages must stay on the host; no migration), the
             read rate, the sum checked
  promote    a buffer of PROMOTE_GIB (within the free VRAM) in host-preferred managed
             memory, moved to the device (preferred location device + cuMemPrefetchAsync
             on a side stream) while the default stream reads it: the move's rate, the
             reads' sums, the read rate before and after
  demote     the same buffer moved back (preferred host, prefetch to the host): rate, the
             VRAM given back at once and 2 s later, and whether a foreign process can
             then allocate what is free plus half the buffer
  evict      the buffer promoted again, and a foreign process asking for what is free plus
             half of it: whether the driver evicts our pages for it, how long it takes,
             and what our reads see meanwhile and after
Output: KV lines and one JSON line (the last). Run without the shim:
  PYTHONPATH=build/bench-carry/python python3 bench/probes/tiering_probe.py [LEAVE_GIB=4] [PROMOTE_GIB=2]
(bench/prepare.sh carries the gbgpu package there)
"""

import ctypes
import json
import subprocess
import sys
import time

from gbgpu.managed import (CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_MEM_ATTACH_GLOBAL,
                           GIB, LOCATION_DEVICE, LOCATION_HOST, Location)


def main():
    leave_gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    promote_gib = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    balloon = subprocess.Popen([sys.executable, "-m", "gbgpu.foreign", "balloon", str(leave_gib)],
                               stdout=subprocess.PIPE, text=True)
    try:
        ready = balloon.stdout.readline().strip()
        print(f"KV balloon={ready}", flush=True)
        print(json.dumps(probe(leave_gib, promote_gib)), flush=True)
    finally:
        balloon.kill()
        balloon.wait()


def probe(leave_gib, promote_gib):
    import cupy

    cuda = ctypes.CDLL("libcuda.so.1")
    cupy.cuda.Device(0).use()
    cupy.zeros(1).sum()  # the primary context, current in this thread

    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA error {status}")

    def free_bytes():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value

    def advise(ptr, size, advice, where, dev=0):
        check(cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size), advice, Location(where, dev)), "cuMemAdvise")

    def prefetch(ptr, size, where, stream, dev=0):
        check(cuda.cuMemPrefetchAsync_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(size), Location(where, dev), 0,
                                         ctypes.c_void_p(stream)), "cuMemPrefetchAsync")

    def managed_host_preferred(size):
        ptr = ctypes.c_uint64()
        check(cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged")
        advise(ptr.value, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_HOST)
        advise(ptr.value, size, CU_MEM_ADVISE_SET_ACCESSED_BY, LOCATION_DEVICE)
        ctypes.memset(ptr.value, 1, size)  # first touch on the host
        return ptr.value

    def view(ptr, size):
        memory = cupy.cuda.UnownedMemory(ptr, size, None)
        return cupy.ndarray((size,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def timed_sum(array):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        total = int(array.sum(dtype=cupy.uint64))
        end.record()
        end.synchronize()
        return total, cupy.cuda.get_elapsed_time(start, end) / 1e3

    out = {"leave_gib": leave_gib, "free_at_start": free_bytes()}
    # --- safety: host-preferred managed memory larger than the free VRAM --------------
    size = int(2 * leave_gib * GIB)
    ptr = managed_host_preferred(size)
    free_before = free_bytes()
    reads = []
    for _ in range(2):
        total, seconds = timed_sum(view(ptr, size))
        reads.append({"sum_ok": total == size, "GBps": size / seconds / 1e9, "free_after": free_bytes()})
    out["safety"] = {"bytes": size, "free_before": free_before, "reads": reads,
                     "vram_taken": free_before - min(r["free_after"] for r in reads)}
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    print(f"KV safety={out['safety']}", flush=True)

    # --- promote and demote -----------------------------------------------------------
    size = int(promote_gib * GIB)
    ptr = managed_host_preferred(size)
    array = view(ptr, size)
    host_read = timed_sum(array)
    side = cupy.cuda.Stream(non_blocking=True)
    free_before = free_bytes()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    advise(ptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_DEVICE)
    start.record(side)
    prefetch(ptr, size, LOCATION_DEVICE, side.ptr)
    end.record(side)
    during = [timed_sum(array)[0] == size for _ in range(3)]  # reads racing the move
    end.synchronize()
    move_s = cupy.cuda.get_elapsed_time(start, end) / 1e3
    device_read = timed_sum(array)
    free_promoted = free_bytes()
    advise(ptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_HOST)
    start.record(side)
    prefetch(ptr, size, LOCATION_HOST, side.ptr)
    end.record(side)
    end.synchronize()
    demote_s = cupy.cuda.get_elapsed_time(start, end) / 1e3
    after_read = timed_sum(array)
    out["promote"] = {"bytes": size, "host_read_GBps": size / host_read[1] / 1e9, "promote_GBps": size / move_s / 1e9,
                      "reads_during_move_ok": during, "device_read_GBps": size / device_read[1] / 1e9,
                      "vram_taken": free_before - free_promoted, "demote_GBps": size / demote_s / 1e9,
                      "vram_back": free_bytes() - free_promoted, "read_after_demote_GBps": size / after_read[1] / 1e9,
                      "sums_ok": host_read[0] == size and device_read[0] == size and after_read[0] == size}
    print(f"KV promote={out['promote']}", flush=True)
    # Does the demoted buffer's VRAM come back to other processes: later, or when one
    # asks for it? (A foreign allocation of what is free now plus the buffer.)
    time.sleep(2)
    out["demote_later"] = {"vram_back_after_2s": free_bytes() - free_promoted}
    want = free_bytes() + size // 2
    child = subprocess.run([sys.executable, "-c", f"import torch; torch.empty({want}, dtype=torch.uint8, device='cuda'); "
                            "torch.cuda.synchronize(); print('ok')"], capture_output=True, text=True, timeout=60)
    out["demote_later"].update(foreign_alloc_bytes=want, foreign_alloc_ok=child.stdout.strip() == "ok",
                               foreign_error=child.stderr.strip().splitlines()[-1][:200] if child.returncode else None,
                               vram_back_after_foreign=free_bytes() - free_promoted)
    print(f"KV demote_later={out['demote_later']}", flush=True)
    del array
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    out["evict"] = evict(cuda, check, free_bytes, advise, prefetch, managed_host_preferred, view, timed_sum, size)
    print(f"KV evict={out['evict']}", flush=True)
    return out


def evict(cuda, check, free_bytes, advise, prefetch, managed_host_preferred, view, timed_sum, size):
    """A promoted buffer (preferred on the device, resident there) and a foreign process
    that asks for more than is free: does the driver evict our pages to make room, how
    long does the foreign allocation take, where do our pages end up, and do our reads
    stay right (and do they pull the pages back)?"""
    import cupy

    ptr = managed_host_preferred(size)
    array = view(ptr, size)
    advise(ptr, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, LOCATION_DEVICE)
    prefetch(ptr, size, LOCATION_DEVICE, 0)
    cupy.cuda.runtime.deviceSynchronize()
    resident = timed_sum(array)
    free_promoted = free_bytes()
    want = free_promoted + size // 2
    script = (f"import time, torch; t=time.time(); x=torch.empty({want}, dtype=torch.uint8, device='cuda'); "
              "torch.cuda.synchronize(); print('ok', time.time()-t, flush=True); import sys; sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    foreign_ok = bool(line) and line[0] == "ok"
    out = {"bytes": size, "resident_read_GBps": size / resident[1] / 1e9, "free_promoted": free_promoted,
           "foreign_want": want, "foreign_ok": foreign_ok, "foreign_s": float(line[1]) if foreign_ok else None,
           "free_with_foreign": free_bytes()}
    reads = []
    for _ in range(3):
        total, seconds = timed_sum(array)
        reads.append({"sum_ok": total == size, "GBps": size / seconds / 1e9, "free_after": free_bytes()})
    out["reads_while_foreign_holds"] = reads
    last = ctypes.c_int()
    status = cuda.cuMemRangeGetAttribute(ctypes.byref(last), ctypes.c_size_t(4), 4, ctypes.c_uint64(ptr),
                                         ctypes.c_size_t(size))
    out["last_prefetch_location"] = last.value if status == 0 else f"error {status}"
    child.stdin.close()
    child.wait(timeout=60)
    if not foreign_ok:
        out["foreign_error"] = child.stderr.read().strip().splitlines()[-1:][:1]
    time.sleep(1)
    total, seconds = timed_sum(array)
    out["after_foreign_exit"] = {"sum_ok": total == size, "GBps": size / seconds / 1e9, "free": free_bytes()}
    del array
    check(cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    return out


if __name__ == "__main__":
    main()
