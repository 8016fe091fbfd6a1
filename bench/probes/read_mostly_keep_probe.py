"""A host duplicate given up while the device keeps its copy (issue 34, after
read_mostly_probe.py). Weights duplicated ahead (SET_READ_MOSTLY, then a prefetch to the
host) are dropped in 0.04 s per 8 GiB when room is wanted, where a demotion moves them at
7.6-12.6 GB/s; but a GPU write to a duplicated piece cost 299 ms per 128 MiB and
duplicated pieces read at 399 GB/s against 540 in plain VRAM
(results/read-mostly-probe-2026-12-06-5878ef91b36a-h100.json). So the duplicates not
dropped must turn back into plain movable VRAM, in VRAM, before a launch that may write
them, and for a decode that reads them at every token. Measures, beside a foreign process:

1. reads of duplicated pieces against plain ones, five passes each: does the gap last?
2. keeping the device copy: SET_PREFERRED_LOCATION device, UNSET_READ_MOSTLY,
   SET_PREFERRED_LOCATION host, per piece: its time, free VRAM after (no change if the
   device copy stays), reads after, a GPU write after (as cheap as in plain VRAM?), a
   demotion after (a prefetch to the host that really moves: plain movable VRAM again),
   every byte kept;
3. the plain drop for comparison: UNSET_READ_MOSTLY (the copies collapse to the host, the
   preferred location), then a prefetch back to the device: time, reads after.

Usage, without the shim, beside gbgpu.foreign's balloon leaving LEAVE_GIB of VRAM free
(one JSON line out): python3 bench/probes/read_mostly_keep_probe.py LEAVE_GIB WEIGHTS_GIB
"""

import ctypes
import os
import sys
import time

# The probes' folder and the repository's python/ (gbgpu), as every probe here does.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gbgpu.managed import LOCATION_DEVICE, LOCATION_HOST, Driver, Location  # noqa: E402
from movable_vram_probe import PIECE, probe_main  # noqa: E402
from read_mostly_probe import CU_MEM_ADVISE_SET_READ_MOSTLY, CU_MEM_ADVISE_UNSET_READ_MOSTLY, advise  # noqa: E402
from read_mostly_probe import filled_pieces, sums_wrong, timed  # noqa: E402

CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3
PASSES = 5
SAMPLE = 4


def prefer(driver, ptr, where):
    driver.check(driver.cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr), ctypes.c_size_t(PIECE),
                                            CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Location(where, 0)),
                 "cuMemAdvise(preferred location)")


def duplicate(driver, stream, ptrs):
    for ptr in ptrs:
        advise(driver, ptr, CU_MEM_ADVISE_SET_READ_MOSTLY)
        driver.prefetch(ptr, PIECE, LOCATION_HOST, stream.ptr)
    stream.synchronize()


def read_passes(driver, ptrs):
    """GB/s of each of PASSES reads of each piece, pass by pass (the median piece)."""
    passes = []
    for _ in range(PASSES):
        rates = sorted(driver.timed_read(ptr, PIECE)[1] for ptr in ptrs)
        passes.append(round(rates[len(rates) // 2], 1))
    return passes


def keep_device_copy(driver, ptr):
    prefer(driver, ptr, LOCATION_DEVICE)
    advise(driver, ptr, CU_MEM_ADVISE_UNSET_READ_MOSTLY)
    prefer(driver, ptr, LOCATION_HOST)


def measure(out, env):
    driver = Driver()
    stream = driver.cupy.cuda.Stream(non_blocking=True)
    ptrs = filled_pieces(driver, stream, out["weights_gib"])
    quarter = len(ptrs) // 4
    plain, kept, dropped = ptrs[:quarter], ptrs[quarter:2 * quarter], ptrs[2 * quarter:3 * quarter]
    gb = quarter * PIECE / 1e9
    free_before = driver.free()
    began = time.perf_counter()
    duplicate(driver, stream, kept + dropped)
    out["duplicate_GBps"] = 2 * gb / (time.perf_counter() - began)
    out["duplicate_free_delta_mib"] = (driver.free() - free_before) >> 20
    # 1. Reads, pass after pass.
    out["plain_read_GBps_passes"] = read_passes(driver, plain[:SAMPLE])
    out["duplicated_read_GBps_passes"] = read_passes(driver, kept[:SAMPLE])
    # 2. The device copy kept, the host copy given up.
    free_before = driver.free()
    out["keep_s"] = timed(driver, stream, lambda p: keep_device_copy(driver, p), kept)
    out["keep_ms_per_piece"] = out["keep_s"] * 1e3 / quarter
    out["keep_free_delta_mib"] = (driver.free() - free_before) >> 20
    out["kept_read_GBps_passes"] = read_passes(driver, kept[:SAMPLE])
    out["kept_wrong"] = sums_wrong(driver, kept, quarter)
    seconds = timed(driver, stream, lambda p: driver.view(p, PIECE).fill(7), plain[:SAMPLE])
    out["write_plain_ms_per_piece"] = seconds * 1e3 / SAMPLE
    seconds = timed(driver, stream, lambda p: driver.view(p, PIECE).fill(7), kept[:SAMPLE])
    out["write_kept_ms_per_piece"] = seconds * 1e3 / SAMPLE
    rest = kept[SAMPLE:]
    free_before = driver.free()
    seconds = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_HOST, stream.ptr), rest)
    out["kept_demote_GBps"] = len(rest) * PIECE / 1e9 / seconds
    out["kept_demote_free_delta_mib"] = (driver.free() - free_before) >> 20
    out["kept_demoted_wrong"] = sums_wrong(driver, rest, quarter + SAMPLE)
    # 3. The plain drop, then the way back.
    out["drop_s"] = timed(driver, stream, lambda p: advise(driver, p, CU_MEM_ADVISE_UNSET_READ_MOSTLY), dropped)
    seconds = timed(driver, stream, lambda p: driver.prefetch(p, PIECE, LOCATION_DEVICE, stream.ptr), dropped)
    out["dropped_promote_GBps"] = gb / seconds
    out["dropped_promoted_read_GBps_passes"] = read_passes(driver, dropped[:SAMPLE])
    out["dropped_wrong"] = sums_wrong(driver, dropped, 2 * quarter)
    out["free_after_mib"] = driver.free() >> 20
    driver.release(ptrs)


if __name__ == "__main__":
    probe_main(measure)
