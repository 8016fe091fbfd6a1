//! The heat table live tiering logs at debug level (`GREENBOOST_LOG=debug`) at each tick
//! that moves something: what is where, how hot, how long unread, and what the tick does
//! with it.

use crate::cuda::ffi::CuDevice;
use crate::memory::movable::Run;
use crate::rules::tiering::{self, Candidate, Move};
use crate::sys::log::Mib;

/// The heat table (`GREENBOOST_LOG=debug`), at ticks that move something: the hottest
/// runs per byte first, at most `HEAT_ROWS` of those the tick leaves in place, every one
/// it moves, and the `HEAT_ROWS` coldest it leaves in VRAM (the victims a swap passed
/// over), each with where it is, its size, its heat, the ticks since it was last read
/// (what lets loaded memory displace the working set: `tiering::swaps`) and what this
/// tick does with it.
pub(super) fn log(device: CuDevice, runs: &[Run<'_>], candidates: &[Candidate], moves: &[Move]) {
    const HEAT_ROWS: usize = 16;
    if !crate::sys::log::enabled(crate::sys::log::Level::Debug) {
        return;
    }
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    let heat = |i: usize| (candidates[i].heat, candidates[i].bytes);
    order.sort_by(|&a, &b| tiering::per_byte(heat(b), heat(a)));
    debug!(
        "live tiering on device {}: heat table ({} runs of movable memory, hottest per byte first)",
        device,
        order.len()
    );
    // What the tick does with each candidate, if anything.
    let mut steps: Vec<Option<&str>> = vec![None; candidates.len()];
    for step in moves {
        let (i, what) = match *step {
            Move::Promote(i) => (i, "promote"),
            Move::Demote(i) => (i, "demote"),
            Move::Refresh(i) => (i, "refresh"),
            Move::SwapIn(i) => (i, "swap in"),
            Move::SwapOut(i) => (i, "swap out"),
        };
        if let Some(slot) = steps.get_mut(i).filter(|slot| slot.is_none()) {
            *slot = Some(what);
        }
    }
    let coldest_in_vram: Vec<usize> =
        order.iter().rev().copied().filter(|&i| candidates[i].in_vram && steps[i].is_none()).take(HEAT_ROWS).collect();
    let mut unmoved_rows = 0;
    for &i in &order {
        let step = steps[i];
        if step.is_none() && !coldest_in_vram.contains(&i) {
            if unmoved_rows == HEAT_ROWS {
                continue;
            }
            unmoved_rows += 1;
        }
        let (c, run) = (&candidates[i], &runs[i]);
        debug!(
            "  {:#x} {} in {}: heat {} ({} per MiB), unread {} ticks{}{}",
            run.address(),
            Mib(c.bytes),
            match (c.in_vram, c.chunks_kept) {
                (true, _) => "VRAM",
                (false, true) => "T2 (its VRAM kept)",
                (false, false) => "T2",
            },
            Mib(c.heat),
            Mib(c.heat / (c.bytes >> 20).max(1)),
            c.idle_ticks,
            if c.working_memory { ", working memory" } else { "" },
            step.map_or(String::new(), |step| format!(": {step}"))
        );
    }
}
