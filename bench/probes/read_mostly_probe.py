"""Demotion without a copy (issue 34 item 2): movable VRAM given a host copy ahead of time
(cuMemAdvise SET_READ_MOSTLY, then a prefetch to the host, which duplicates instead of
moving), so that making room later only drops the device's copy (UNSET_READ_MOSTLY
collapses the copies to the preferred location, the host). Measures, beside a foreign
process: the plain demotion's rate (a prefetch to the host, as the shim does it now), the
duplicate's making (rate, free VRAM, reads still at VRAM speed), the drop (time, reads at
the link's speed afterwards, every byte kept, this process's cuMemAlloc of what was
dropped), what a GPU write to a duplicated piece costs, and whether reads of duplicated
pieces the driver evicted for another process take VRAM back.

  python3 bench/probes/read_mostly_probe.py LEAVE_GIB WEIGHTS_GIB   (prints one JSON line)

Runs without the shim. The foreign process is gbgpu.foreign's balloon, leaving LEAVE_GIB.
"""

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver, Location  # noqa: E402
from movable_vram_probe import PIECE, foreign_alloc, managed_in_vram, mem_alloc, probe_main  # noqa: E402

CU_MEM_ADVISE_SET_READ_MOSTLY = 1
CU_MEM_ADVISE_UNSET_READ_MOSTLY = 2


def advise(driver, ptr, advice):
    # The location is ignored for the read-mostly advice.
    driver.check(driver.cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(PIECE), advice,
                                            Location(LOCATION_DEVICE, 0)), f"cuMemAdvise({advice})")


def timed(driver, stream, each, group):
    """Seconds to run each(ptr) over the group, the stream and device drained after."""
    began = time.perf_counter()
    for ptr in group:
        each(ptr)
    stream.synchronize()
    driver.sync()
    return time.perf_counter() - began


def sums_wrong(driver, ptrs, first_index):
    wrong = []
    for offset, ptr in enumerate(ptrs):
        index = first_index + offset
        total, _ = driver.timed_read(ptr, PIECE)
        if total != PIECE * (index % 250 + 1):
            wrong.append(index)
    return wrong


def filled_pieces(driver, stream, gib):
    """`gib` GiB of movable VRAM in pieces, piece i filled with i % 250 + 1 (`sums_wrong`
    checks them)."""
    ptrs = [managed_in_vram(driver, PIECE, stream) for _ in range(gib * (1 << 30) // PIECE)]
    stream.synchronize()
    for index, ptr in enumerate(ptrs):
        driver.view(ptr, PIECE).fill(index % 250 + 1)
    driver.sync()
    return ptrs


def measure(out, env):
    driver = Driver()
    cupy = driver.cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    ptrs = filled_pieces(driver, stream, out["weights_gib"])
    pieces = len(ptrs)
    out["free_after_managed_mib"] = driver.free() >> 20
    quarter = pieces // 4
    plain, shadowed, written = ptrs[:quarter], ptrs[quarter:2 * quarter], ptrs[2 * quarter:3 * quarter]
    gb = quarter * PIECE / 1e9
    # 1. Today's demotion: a prefetch to the host.
    seconds = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_HOST, stream.ptr), plain)
    out["demote_prefetch_GBps"] = gb / seconds
    # 2. The host copy made ahead: read-mostly, then a prefetch to the host.
    free_before = driver.free()
    out["advise_read_mostly_s"] = timed(driver, stream, lambda p: advise(driver, p, CU_MEM_ADVISE_SET_READ_MOSTLY),
                                        shadowed)
    seconds = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_HOST, stream.ptr), shadowed)
    out["duplicate_GBps"] = gb / seconds
    out["duplicate_free_delta_mib"] = (driver.free() - free_before) >> 20
    driver.timed_read(shadowed[0], PIECE)
    _, out["duplicated_read_GBps"] = driver.timed_read(shadowed[0], PIECE)
    # 3. The drop: the copies collapse to the host, the preferred location.
    free_before = driver.free()
    out["drop_s"] = timed(driver, stream, lambda p: advise(driver, p, CU_MEM_ADVISE_UNSET_READ_MOSTLY), shadowed)
    out["drop_GBps_equivalent"] = gb / out["drop_s"]
    out["drop_free_delta_mib"] = (driver.free() - free_before) >> 20
    # The shim would follow a drop with a prefetch to the host, in case a GPU write had
    # collapsed a piece's copies onto the device: over pieces already on the host it
    # should cost next to nothing.
    out["prefetch_after_drop_s"] = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_HOST, stream.ptr),
                                         shadowed)
    driver.timed_read(shadowed[1], PIECE)
    _, out["dropped_read_GBps"] = driver.timed_read(shadowed[1], PIECE)
    out["dropped_wrong"] = sums_wrong(driver, shadowed, quarter)
    # This process's cuMemAlloc of what was dropped: at once if the drop left it VRAM.
    want = quarter * PIECE
    status, ptr, seconds = mem_alloc(driver, want)
    out["own_alloc_after_drop"] = {"want_mib": want >> 20, "status": status, "s": seconds,
                                   "free_after_mib": driver.free() >> 20}
    if status == 0:
        driver.check(driver.cuda.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")
    # 4. A GPU write to duplicated pieces, against the same write to pieces only in VRAM.
    rest = ptrs[3 * quarter:]
    seconds = timed(driver, stream, lambda p: driver.view(p, PIECE).fill(7), rest[:4])
    out["write_in_vram_ms_per_piece"] = seconds * 1e3 / 4
    for ptr in written:
        advise(driver, ptr, CU_MEM_ADVISE_SET_READ_MOSTLY)
        driver.prefetch(ptr, PIECE, LOCATION_HOST, stream.ptr)
    stream.synchronize()
    seconds = timed(driver, stream, lambda p: driver.view(p, PIECE).fill(7), written[:4])
    out["write_duplicated_ms_per_piece"] = seconds * 1e3 / 4
    driver.timed_read(written[0], PIECE)
    _, out["written_read_GBps"] = driver.timed_read(written[0], PIECE)
    # Dropping written pieces (their copies collapsed onto the device, maybe): the drop
    # and the prefetch to the host after it, and the VRAM that frees.
    free_before = driver.free()
    out["written_drop_s"] = timed(driver, stream, lambda p: advise(driver, p, CU_MEM_ADVISE_UNSET_READ_MOSTLY),
                                  written[:4])
    out["written_prefetch_after_drop_s"] = timed(
        driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_HOST, stream.ptr), written[:4])
    out["written_drop_free_delta_mib"] = (driver.free() - free_before) >> 20
    # 5. Promotion back of what was dropped: a prefetch to the device, rate and reads.
    seconds = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_DEVICE, stream.ptr), shadowed)
    out["promote_GBps"] = gb / seconds
    driver.timed_read(shadowed[2], PIECE)
    _, out["promoted_read_GBps"] = driver.timed_read(shadowed[2], PIECE)
    out["promoted_wrong"] = sums_wrong(driver, shadowed, quarter)
    # 6. Another process takes VRAM while pieces are duplicated: the driver must evict
    # some (their host copies make that a drop); then this process reads them all on the
    # GPU. Free VRAM falling during those reads would mean reads duplicate pieces back
    # into VRAM behind the shim's back (not to be had on a shared GPU).
    duplicated = shadowed + rest
    for ptr in duplicated:
        advise(driver, ptr, CU_MEM_ADVISE_SET_READ_MOSTLY)
        driver.prefetch(ptr, PIECE, LOCATION_HOST, stream.ptr)
    stream.synchronize()
    want = driver.free() + 2 * (1 << 30)
    out["foreign_alloc_beside_duplicates"] = foreign_alloc(env, want)
    free_before = driver.free()
    rates = [driver.timed_read(ptr, PIECE)[1] for ptr in duplicated]
    out["reads_after_eviction_free_delta_mib"] = (driver.free() - free_before) >> 20
    out["reads_after_eviction_GBps_min_max"] = [min(rates), max(rates)]
    out["duplicated_wrong_after_eviction"] = sums_wrong(driver, shadowed, quarter)
    driver.release(ptrs)


if __name__ == "__main__":
    probe_main(measure)
