//! Room in VRAM for the working set, made at once: while the program computes, an
//! allocation that finds no room in VRAM sends movable VRAM it loaded before computing
//! (its weights, read once per pass) to T2, coldest per byte first, and takes the room
//! they gave back. Live tiering's swaps (`rules::tiering`) would get there too, but a
//! tick later and only once launches have warmed the new allocation: a long prompt's
//! activations would meanwhile be read over the link, tile after tile, at the start of
//! the very pass they serve. What is demoted comes back into VRAM the working set frees
//! or other processes leave, or over parts of the working set idle for long
//! (`rules::tiering`'s swaps).
//!
//! Only inside the VRAM this process holds (the room is its own demoted bytes), for
//! allocations of at most `MOST` bytes, with the victims `rules::room_victims` chooses:
//! a small allocation never costs a large weight's round trip.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::engine::give_back;
use crate::engine::room_made;
use crate::engine::tier_lock::{self, Held, Turn};
use crate::engine::tier_moves;
use crate::engine::tier_thread::{self, Moving};
use crate::memory::budget::{self, VramReservation};
use crate::memory::movable::{self, Run};
use crate::rules::config;
use crate::rules::room_victims;
use crate::rules::tiering;
use crate::sys::log::Mib;
use crate::sys::stats::STATS;

/// The largest allocation room is made for: about 0.2 s of demotion on the H200
/// (9-12 GB/s, bench/results/tiering-probe-2026-12-01.md), as one tick's swaps.
const MOST: u64 = 2 << 30;

/// Waited for the GPU's tiering lock (`tier_lock`): about one tick's moves. Past it the room
/// is made without giving back what the driver keeps of it.
const LOCK_WAIT: Duration = Duration::from_millis(250);

/// What room made holds until the allocation is in it (dropped with it): the tier
/// thread's `MOVING`, so that no tick of this process measures meanwhile, and, with the
/// give-back on, the GPU's tiering lock where it was had, so that no tick of another does.
/// Dropped, it tells the next tick what of the drop of free VRAM since the room was made
/// the driver's keeping of the victims explains (`room_made`).
pub struct RoomHeld {
    _moving: Moving,
    _lock: Option<Held>,
    device: CuDevice,
    /// What the driver kept of the victims, and free VRAM once the room was made.
    kept: u64,
    free_after_room: u64,
}

impl Drop for RoomHeld {
    /// The allocation is in the room (or gave up), `MOVING` still held: the free VRAM it
    /// took, up to what the driver kept, answers for the next tick.
    fn drop(&mut self) {
        if self.kept > 0 {
            let free = cuda::device_memory().map_or(self.free_after_room, |(free, _)| free);
            room_made::note(self.device, self.kept.min(self.free_after_room.saturating_sub(free)));
        }
    }
}

/// Demotes movable VRAM loaded before the program's working memory (its weights) on
/// `device` to make room for `len` bytes of working memory, and reserves that room;
/// `None` (nothing moved) when not enough of it can go. The current context is the
/// allocation's.
pub fn make_room(len: u64, device: CuDevice) -> Option<(VramReservation, RoomHeld)> {
    if len > MOST || !budget::allocating_working_memory() || !movable::any() {
        return None;
    }
    let began = Instant::now();
    let made = demote_for(len, device);
    let waited = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
    STATS.room_made_ns.fetch_add(waited, Ordering::Relaxed);
    made
}

/// `make_room` past its cheap checks: the victims chosen and sent to T2.
fn demote_for(len: u64, device: CuDevice) -> Option<(VramReservation, RoomHeld)> {
    let live = movable::live();
    // Runs no larger than the room wanted: a large buffer gives what is needed. Those the
    // driver may have evicted in part would give less than they count.
    let (mut loaded, maybe_evicted): (Vec<Run<'_>>, Vec<Run<'_>>) = live
        .iter()
        .filter(|m| m.device() == device && !m.working_memory())
        .flat_map(|m| m.runs(&m.reads(false), len))
        .filter(|run| run.in_vram)
        .partition(|run| !run.maybe_evicted);
    // Coldest per byte first, the newest first among equals.
    loaded.sort_by(|a, b| {
        tiering::per_byte((a.heat, a.bytes), (b.heat, b.bytes))
            .then(b.allocation.sequence().cmp(&a.allocation.sequence()))
    });
    let sizes: Vec<u64> = loaded.iter().map(|run| run.bytes).collect();
    let Some(chosen) = room_victims::room_victims(len, &sizes) else {
        debug!(
            "no room made on device {} for {}: {} of movable VRAM loaded before computing can go ({} more \
             may have been evicted in part)",
            device,
            Mib(len),
            Mib(sizes.iter().sum()),
            Mib(maybe_evicted.iter().map(|run| run.bytes).sum())
        );
        return None;
    };
    let room: u64 = chosen.iter().map(|&at| sizes[at]).sum();
    // `chosen` is in `loaded`'s order.
    let victims: Vec<Run<'_>> =
        loaded.into_iter().enumerate().filter(|(at, _)| chosen.binary_search(at).is_ok()).map(|(_, run)| run).collect();
    // No tick measures while the room is made (it would make it again), and the room is
    // reserved before the victims give their VRAM back, so that no promotion takes it.
    // With the give-back on, the GPU's lock first (the lock order); without it, no
    // give-back: another process's tick could measure its moment. Off, nothing needs it.
    let lock = config::get()
        .give_back
        .then(|| tier_lock::acquire(&tier_lock::lock_path(cuda::pci_address(device)), LOCK_WAIT));
    let may_give_back = !matches!(lock, Some(Turn::Busy));
    let moving = tier_thread::MOVING.lock();
    let reservation = budget::reserve_unchecked(len, device);
    // In relaxed capture mode, as the allocation's own calls (`movable::managed_in_vram`).
    let (demoted, came_back) = cuda::in_relaxed_capture_mode(|| {
        let free_before = cuda::device_memory().map_or(0, |(free, _)| free);
        let demoted = tier_moves::swap_out_now(device, &victims);
        // The allocation's move into VRAM would take fresh VRAM, not what the driver
        // keeps of the victims: that is turned into free VRAM for it where the give-back
        // may run; what stays kept answers the drop the allocation makes (`RoomHeld`).
        let came_back = match demoted {
            0 => 0,
            _ => give_back::after_moves_out(device, demoted, free_before, len, may_give_back),
        };
        (demoted, came_back)
    })
    .unwrap_or((0, 0));
    STATS.room_made_bytes.fetch_add(demoted, Ordering::Relaxed);
    if demoted < len {
        // What did move stays in T2 (the swaps bring it back if it is read); the
        // allocation takes the usual way.
        debug!("no room made on device {} for {}: {} of {} demoted", device, Mib(len), Mib(demoted), Mib(room));
        return None;
    }
    debug!("{} demoted on device {} to make room for {} the program computes with", Mib(demoted), device, Mib(len));
    room_made::made(device);
    let lock = match lock {
        Some(Turn::Held(held)) => Some(held),
        Some(Turn::Busy | Turn::Unlocked) | None => None,
    };
    let free_after_room = cuda::device_memory().map_or(0, |(free, _)| free);
    let kept = demoted.saturating_sub(came_back);
    Some((reservation, RoomHeld { _moving: moving, _lock: lock, device, kept, free_after_room }))
}
