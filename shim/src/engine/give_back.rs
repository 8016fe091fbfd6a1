//! Kept VRAM given back. When managed pages leave VRAM (a demotion, a swap out, room made
//! for the working set), the driver keeps the chunks they leave: free VRAM does not rise,
//! for nvidia-smi, for another process sizing itself from `cuMemGetInfo` (ollama's layer
//! count, vLLM's KV cache), and for this process's moves into VRAM of other pages and
//! its new allocations, which take fresh VRAM instead (on the H200 a 1.9 GB swap took
//! free VRAM from 1525 to 3 MiB; only the pages that left come back into those chunks,
//! `memory::movable_part`). The
//! driver hands those chunks at once to an allocation that finds too little free VRAM
//! (bench/results/movable-vram-probe-2026-12-05.md). So after moving `X` bytes out whose
//! VRAM did not come free, the shim asks the driver for one plain allocation of free
//! VRAM + `X` and frees it at once: the `X` bytes it took from the kept chunks become free
//! VRAM that everyone sees, and that the same tick's moves in then take.
//!
//! When (`tiering::AfterMovesOut::give_back_wanted`): where the device binds, for 32 MiB
//! or more, not where free VRAM was under a quarter of the headroom before the moves,
//! when the driver may have evicted those pages for someone already and keeps none of
//! their chunks, and only while this process keeps at least the headroom of managed
//! memory in VRAM besides (`movable::vram_bytes`), which the driver can evict for another
//! process's allocation made during the moment. The driver evicts chunks that hold no
//! data first (`pick_root_chunk_to_evict` in NVIDIA's open nvidia-uvm: free, then unused,
//! then used ones), so the allocation takes the kept ones. For its moment every free byte
//! of the device is this process's: another process allocating then gets VRAM only by the
//! driver evicting managed pages for it. So
//! it is done once per tick that moved something out (or room made), never while a
//! stream capture is open (`cuMemFree` may synchronise) or another give-back of this
//! process runs, and no more in a process where one held all free VRAM longer than
//! `WINDOW_MOST` or where it did not raise free VRAM (`GIVE_UP_AFTER` times in a row).
//! Off by default (GREENBOOST_GIVE_BACK=on turns it on): on an H100 a give-back took
//! 50-136 ms, and another process allocating in a loop meanwhile failed 4 times in 36006,
//! the probe's other managed memory evicted by then, it seems for its earlier allocations
//! (bench/results/give-back-probe-2026-12-05.md); an HF prefill with it on died of an
//! illegal memory access after a give-back that held all free VRAM for 278 ms
//! (bench/results/longctx-2026-12-05.md). What the driver's source (open-gpu-kernel-modules
//! 595.45.04) says of that moment: the allocation takes every free page before it evicts
//! anything (`pmaAllocatePages` evicts only the pages still missing), so no smaller request
//! leaves free VRAM while it evicts; and a fault of a copy engine (not replayable) on
//! managed memory that cannot be served for want of memory kills the faulting channel
//! (`service_fault_once` in uvm_gpu_non_replayable_faults.c), where a kernel's fault would
//! be retried. Whether that is what happened is not known.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::cuda;
use crate::cuda::captures;
use crate::cuda::ffi::{CuDevice, CuResult};
use crate::memory::{budget, movable};
use crate::rules::config;
use crate::rules::placement::Rules;
use crate::rules::tiering;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// Give-backs in a row that raised free VRAM by less than half of what they asked, after
/// which this process stops trying.
const GIVE_UP_AFTER: u32 = 3;

/// The longest a give-back may hold all free VRAM: one that took longer is the last of the
/// process. Another process allocating meanwhile waits for the driver to evict this
/// one's managed memory (`AfterMovesOut::evictable`): this bounds the wait. Above the
/// H100's 50-136 ms (bench/results/give-back-probe-2026-12-05.md), so that give-backs as
/// measured go on, and a stall of seconds is the last.
const WINDOW_MOST: Duration = Duration::from_millis(250);

/// Reads of free VRAM after a give-back before it is judged, and the wait between them.
const SETTLE_READS: u32 = 4;
const SETTLE_WAIT: Duration = Duration::from_millis(5);

/// A give-back of this process is under way (the others skip theirs).
static RUNNING: AtomicBool = AtomicBool::new(false);
/// Give-backs in a row that gave too little back.
static FAILED_IN_A_ROW: AtomicU32 = AtomicU32::new(0);
/// Stopped for this process (`GIVE_UP_AFTER`).
static GIVEN_UP: AtomicBool = AtomicBool::new(false);

/// In the child of a fork: a give-back the parent ran when it forked is not the child's.
pub(super) fn reset_in_child() {
    RUNNING.store(false, Ordering::Release);
}

/// After moves out of `moved_out` bytes on `device` (a context of it current), which had
/// `free_before` bytes of free VRAM before them: gives back what the driver kept of them
/// where the device binds, i.e. where free VRAM does not hold what promotions leave free
/// (`tiering::kept_free`) and the `wanted` bytes about to move in, unless `may` is false
/// (room made without the GPU's lock). Returns how much free VRAM rose from
/// `free_before`, the moves' own effect included, at most `moved_out`.
pub(super) fn after_moves_out(device: CuDevice, moved_out: u64, free_before: u64, wanted: u64, may: bool) -> u64 {
    let Some((free, total)) = cuda::device_memory() else { return 0 };
    let rose = free.saturating_sub(free_before).min(moved_out);
    let kept = moved_out - rose;
    let config = config::get();
    // A capture open: cuMemFree may synchronise the device, which would invalidate it.
    if !may || !config.give_back || GIVEN_UP.load(Ordering::Relaxed) || captures::any_open() {
        return rose;
    }
    let physical = cuda::physical_vram(device).unwrap_or(total).max(total);
    let headroom = Rules::of(config).headroom(device, physical);
    let evictable = movable::vram_bytes(device);
    let after_moves = tiering::AfterMovesOut { kept, free_before, free, headroom, wanted, evictable };
    if !after_moves.give_back_wanted() || RUNNING.swap(true, Ordering::Acquire) {
        return rose;
    }
    let after = ask_for(free, kept);
    RUNNING.store(false, Ordering::Release);
    let given = after.saturating_sub(free).min(kept);
    judge(kept, given);
    rose + given
}

/// One plain allocation of `free + kept` bytes, freed at once; free VRAM after it. The
/// driver may clear freed memory before it counts it free again: read up to
/// `SETTLE_READS` times, `SETTLE_WAIT` apart, until it shows half of `kept`. Placement
/// keeps its last measurement meanwhile: the allocation is not another process's.
fn ask_for(free: u64, kept: u64) -> u64 {
    let asked = free.saturating_add(kept);
    let began = Instant::now();
    let answered = budget::with_measurements_held(|| cuda::mem_alloc(asked).map(cuda::mem_free));
    let held = began.elapsed();
    if held > WINDOW_MOST && !GIVEN_UP.swap(true, Ordering::Relaxed) {
        info!(
            "giving kept VRAM back held all free VRAM for {} ms (more than {} ms): no more for this process",
            held.as_millis(),
            WINDOW_MOST.as_millis()
        );
    }
    match answered {
        Ok(CuResult::SUCCESS) => {}
        Ok(freed) => {
            warn!(
                "giving kept VRAM back: cuMemFree of {} failed (CUDA error {}); no more give-backs",
                Mib(asked),
                freed.0
            );
            GIVEN_UP.store(true, Ordering::Relaxed);
            return free;
        }
        Err(error) => {
            debug!("giving kept VRAM back: the driver refused {} (CUDA error {})", Mib(asked), error.0);
            return free;
        }
    }
    let mut after = free;
    for read in 0..SETTLE_READS {
        if read > 0 {
            std::thread::sleep(SETTLE_WAIT);
        }
        after = cuda::device_memory().map_or(free, |(now, _)| now);
        if after.saturating_sub(free) >= kept / 2 {
            break;
        }
    }
    after
}

/// Counts a give-back that asked for `kept` and saw free VRAM rise by `given`; stops
/// asking after `GIVE_UP_AFTER` that gave less than half.
fn judge(kept: u64, given: u64) {
    STATS.given_back_bytes.fetch_add(given, Ordering::Relaxed);
    if given >= kept / 2 {
        stats::bump(&STATS.give_backs);
        FAILED_IN_A_ROW.store(0, Ordering::Relaxed);
        debug!("gave back {} of kept VRAM (asked for {})", Mib(given), Mib(kept));
        return;
    }
    let failed = FAILED_IN_A_ROW.fetch_add(1, Ordering::Relaxed) + 1;
    info!("giving kept VRAM back: free VRAM rose by {} where the driver kept {}", Mib(given), Mib(kept));
    if failed >= GIVE_UP_AFTER && !GIVEN_UP.swap(true, Ordering::Relaxed) {
        info!("giving kept VRAM back did not raise free VRAM {failed} times in a row: no more for this process");
    }
}
