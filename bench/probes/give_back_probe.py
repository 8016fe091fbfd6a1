"""Kept VRAM given back (shim/src/engine/give_back.rs): after managed pages leave VRAM the
driver keeps their chunks (UVM marks them unused; free VRAM does not rise). Does one plain
cuMemAlloc of free + X, freed at once, turn X of them into free VRAM, without touching
managed memory still in VRAM, how long does it hold all free VRAM, and does a neighbour
allocating meanwhile ever fail?

  python3 bench/probes/give_back_probe.py LEAVE_GIB   (prints one JSON line)

Runs without the shim, beside gbgpu.foreign's balloon leaving LEAVE_GIB. A (2 GiB) and
B (1 GiB) are managed memory preferred on the host and prefetched into VRAM, as the
shim's movable VRAM; A goes back to the host (a demotion) and B stays.
  1. free VRAM before and after A's demotion, and after the give-back (expect + 2 GiB);
  2. B's read rate before and after (VRAM rate: it stayed; link rate: it was evicted);
  3. a give-back asking for more than was kept: B's read rate says what went instead;
  4. promote/demote/give-back rounds while another process allocates and frees 64 MiB in
     a loop, each give-back asking for what the promotion took of free VRAM: first all of
     it, then less a 256 MiB cushion (kept chunks the neighbour can still evict): its
     failures and slowest allocation, each give-back's window, and B's read rate after
     (an allocation in a window may have evicted B instead of failing);
  5. every word of A and B afterwards.
"""

import ctypes
import os
import subprocess
import sys
import time

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYTHON_DIR)
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver  # noqa: E402
from movable_vram_probe import PIECE, beside_balloon, managed_in_vram, mem_alloc  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
ROUNDS = 15          # give-backs per arm of step 4
ARM_MOST_S = 10      # the most an arm's rounds take
CUSHION_MIB = 256    # kept VRAM a give-back leaves unused in the second arm



def uvm_parameter(name):
    try:
        with open(f"/sys/module/nvidia_uvm/parameters/{name}") as f:
            return f.read().strip()
    except OSError as error:
        return repr(error)


def read_rate(driver, ptrs):
    """The slowest piece's read rate, GB/s (second read: the first may fault)."""
    rates = []
    for ptr in ptrs:
        driver.timed_read(ptr, PIECE)
        rates.append(driver.timed_read(ptr, PIECE)[1])
    return min(rates)


def move(driver, ptrs, where, stream):
    for ptr in ptrs:
        driver.prefetch(ptr, PIECE, where, stream.ptr)
    stream.synchronize()


def give_back(driver, kept):
    """The shim's give-back: cuMemAlloc(free + kept), cuMemFree. Status, window seconds,
    free VRAM before and after."""
    before = driver.free()
    began = time.perf_counter()
    status, ptr, _ = mem_alloc(driver, before + kept)
    if status == 0:
        driver.check(driver.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    window = time.perf_counter() - began
    return {"status": status, "window_ms": window * 1e3, "free_before_mib": before // MIB,
            "free_after_mib": driver.free() // MIB}


def rounds_beside_neighbour(driver, a, stream, cushion):
    """ROUNDS promote/demote/give-back rounds of A while another process allocates and
    frees 64 MiB in a loop. Each give-back asks for what the shim would: A's bytes less
    the rise of free VRAM over the demotion, less `cushion`; what A's promotion took of
    free VRAM is noted (less than A: it reused kept chunks, or not all of A moved)."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    neighbour = subprocess.Popen([sys.executable, "-m", "gbgpu.foreign", "allocator", "64"], stdout=subprocess.PIPE,
                                 text=True, env=env)
    neighbour.stdout.readline()
    rounds, ended = [], time.perf_counter() + ARM_MOST_S
    while len(rounds) < ROUNDS and time.perf_counter() < ended:
        before = driver.free()
        move(driver, a, LOCATION_DEVICE, stream)
        promoted = driver.free()
        took = max(0, before - promoted)
        move(driver, a, LOCATION_HOST, stream)
        asked = max(0, 2 * GIB - max(0, driver.free() - promoted) - cushion)
        one = give_back(driver, asked)
        one.update({"promotion_took_mib": took // MIB, "asked_mib": asked // MIB})
        rounds.append(one)
        time.sleep(0.2)
    neighbour.terminate()
    tries, failed, slowest_ms = neighbour.stdout.readline().split()
    neighbour.wait()
    return {"rounds": rounds, "neighbour": {"allocations": int(tries), "failed": int(failed),
                                            "slowest_ms": float(slowest_ms)}}


def measure(out, _env):
    driver = Driver()
    stream = driver.cupy.cuda.Stream(non_blocking=True)
    a = [managed_in_vram(driver, PIECE, stream) for _ in range(2 * GIB // PIECE)]
    b = [managed_in_vram(driver, PIECE, stream) for _ in range(GIB // PIECE)]
    stream.synchronize()
    for index, ptr in enumerate(a + b):
        driver.view(ptr, PIECE).fill(index % 250 + 1)
    driver.sync()
    out["b_read_GBps_before"] = read_rate(driver, b)
    # 1. Demote A; free VRAM after; the give-back.
    out["free_before_demotion_mib"] = driver.free() // MIB
    move(driver, a, LOCATION_HOST, stream)
    time.sleep(0.5)
    out["free_after_demotion_mib"] = driver.free() // MIB
    out["give_back"] = give_back(driver, 2 * GIB)
    time.sleep(0.5)
    out["free_0_5s_after_give_back_mib"] = driver.free() // MIB
    # 2. Did B stay in VRAM?
    out["b_read_GBps_after_give_back"] = read_rate(driver, b)
    # 3. Asking for more than was kept (nothing is kept now): what goes instead?
    out["give_back_beyond_kept"] = give_back(driver, 512 * MIB)
    out["b_read_GBps_after_overreach"] = read_rate(driver, b)
    move(driver, b, LOCATION_DEVICE, stream)
    # 4. Rounds beside a neighbour allocating in a loop: asking for all that was kept, then
    # leaving a cushion of it unused (chunks the neighbour's allocation can still evict).
    for cushion_mib in (0, CUSHION_MIB):
        out[f"rounds_cushion_{cushion_mib}"] = rounds_beside_neighbour(driver, a, stream, cushion_mib * MIB)
    # What the neighbour's allocations in a window took instead: B, if anything.
    out["b_read_GBps_after_rounds"] = read_rate(driver, b)
    # 5. Every word.
    out["pieces_wrong"] = [index for index, ptr in enumerate(a + b)
                           if driver.timed_read(ptr, PIECE)[0] != PIECE * (index % 250 + 1)]
    driver.release(a + b)


def main():
    leave_gib = float(sys.argv[1])
    beside_balloon(leave_gib, {"leave_gib": leave_gib,
                               "uvm_global_oversubscription": uvm_parameter("uvm_global_oversubscription"),
                               "uvm_perf_pma_batch_nonpinned_order": uvm_parameter("uvm_perf_pma_batch_nonpinned_order")},
                   measure)


if __name__ == "__main__":
    main()
