//! The live-tiering thread: every GREENBOOST_TIER_INTERVAL_MS it measures each device
//! that holds movable allocations (`movable`), asks the policy (`tiering`) what moves,
//! and has `tier_moves` carry it out. Started by the first movable allocation; the
//! program's own streams never wait for it.
//!
//! Measured on the H200 (bench/results/tiering-probe-2026-12-01.md): advising the device
//! before the prefetch made promotion 0.65 of the prefetch alone (the advice call re-maps
//! the whole range), and pages the driver then evicted for another process faulted back
//! at 6-7 GB/s; with the host preferred, promoted pages stay in VRAM (the GPU's own
//! accesses never fault), and evicted ones go to the host where the device reads them
//! over the link like any T2. The driver does not say what it evicted: a tick that finds
//! free VRAM under a quarter of the headroom marks what is in VRAM as maybe evicted, and
//! the policy moves it again once there is room.
//!
//! A tick holds its GPU's `tier_lock` from the measurement to the end of its moves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::engine::give_back;
use crate::engine::heat_table;
use crate::engine::room_made;
use crate::engine::tier_lock::{self, Turn};
use crate::engine::tier_moves::{self, MoveStream, Moved};
use crate::memory::budget;
use crate::memory::movable::{self, Movable, Run};
use crate::rules::config;
use crate::rules::placement::Rules;
use crate::rules::tiering::{self, Candidate, Carried, Move, Outcome, Room};
use crate::sys::lock::{const_mutex, Mutex, StaticGuard};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::publish;
use crate::sys::shm_path::ShmPath;
use crate::sys::stats;

/// Most bytes moved into VRAM before the thread waits for them and reads free VRAM again
/// (`Arrivals`); a group is no larger than what the plan still has, one run at least.
const ARRIVAL_GROUP_BYTES: u64 = 256 << 20;

/// Most bytes a tick demotes to swap roles (`tiering::Room::swap_limit`): one group, about
/// 0.2 s of demotion on the H200.
const SWAP_BYTES: u64 = tier_moves::GROUP_BYTES;

static STARTED: AtomicBool = AtomicBool::new(false);

/// Held by a tick from its measurement to the end of its moves, and from the room made
/// for an allocation (`make_room`) until the allocation is in it: a tick that measured
/// free VRAM meanwhile would demote again for the allocation the room is for, or promote
/// into the room once given back.
pub(super) static MOVING: Mutex<rank::TierMoves, ()> = const_mutex(());

/// `MOVING`, held.
pub(super) type Moving = StaticGuard<rank::TierMoves, ()>;

/// Starts the thread once per process.
pub(super) fn ensure_started() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Err(error) = std::thread::Builder::new().name("greenboost-tier".into()).spawn(run) {
        warn!("no live-tiering thread ({error}): movable T2 stays where it was placed");
    }
}

/// In the child of a fork: the thread stayed in the parent.
pub fn restart_in_child() {
    STARTED.store(false, Ordering::Release);
    give_back::reset_in_child();
    tier_lock::close_in_child();
}

/// What the thread keeps per device: what its ticks carry over (`Carried`), whether the
/// driver was seen to keep what moves out leave (`Room::driver_keeps`), and the lock they
/// take.
struct PerDevice {
    device: CuDevice,
    carried: Carried,
    driver_keeps: bool,
    lock: ShmPath,
}

fn run() {
    let status = cuda::relax_stream_capture_mode();
    if status != CuResult::SUCCESS {
        info!("live tiering: relaxed capture mode refused (CUDA error {})", status.0);
    }
    let interval = Duration::from_millis(config::get().tier_interval_ms);
    let mut streams: Vec<MoveStream> = Vec::new();
    let mut known: Vec<PerDevice> = Vec::new();
    let mut unlocked_said = false;
    loop {
        std::thread::sleep(interval);
        if !movable::any() {
            room_made::forget();
            continue;
        }
        let live = movable::live();
        let mut devices: Vec<CuDevice> = live.iter().map(|m| m.device()).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            let members: Vec<&Movable> = live.iter().filter(|m| m.device() == device).map(|m| &**m).collect();
            let slot = match known.iter().position(|d| d.device == device) {
                Some(index) => index,
                None => {
                    let lock = tier_lock::lock_path(cuda::pci_address(device));
                    known.push(PerDevice { device, carried: Carried::default(), driver_keeps: false, lock });
                    known.len() - 1
                }
            };
            let this = &mut known[slot];
            // Held from the measurement to the end of the moves (see `tier_lock`).
            let held = match tier_lock::acquire(&this.lock, tier_lock::WAIT) {
                Turn::Held(held) => Some(held),
                Turn::Busy => continue,
                Turn::Unlocked => {
                    if !unlocked_said {
                        unlocked_said = true;
                        info!("live tiering: no lock shared with other processes ({})", this.lock.as_str());
                    }
                    None
                }
            };
            let context = members[0].context();
            let moving = MOVING.lock();
            (this.carried, this.driver_keeps) =
                cuda::with_context(context, || tick(device, &members, this.carried, this.driver_keeps, &mut streams));
            drop(moving);
            drop(held);
        }
    }
}

/// Whether the program has had the GPU read its memory: a kernel launch or a graph launch
/// seen, or a cuBLAS handle or product (`budget::computing`).
fn gpu_has_read() -> bool {
    budget::computing()
        || stats::launch_total(|counts| &counts.launches) > 0
        || stats::launch_total(|counts| &counts.graph_launches) > 0
}

/// One tick on `device` (a context of it current): measure, plan, move. Returns what the
/// next tick carries over, and whether the driver keeps what moves out leave.
fn tick(
    device: CuDevice,
    members: &[&Movable],
    carried: Carried,
    driver_keeps: bool,
    streams: &mut Vec<MoveStream>,
) -> (Carried, bool) {
    let config = config::get();
    let (Some((free, total)), Some(physical)) = (cuda::device_memory(), cuda::physical_vram(device)) else {
        return (carried, driver_keeps);
    };
    let headroom = Rules::of(config).headroom(device, physical.max(total));
    // What room made left the driver since answers as the tick's own demotions (`room_made`).
    let answered = carried.answered.saturating_add(room_made::take(device));
    let carried = if free >= headroom { Carried::default() } else { Carried { answered } };
    let room = Room {
        free,
        headroom,
        budget_room: budget::promotion_room(device, false),
        loaded_room: budget::promotion_room(device, true),
        // While the working set grows, the weights demoted for it stay in T2 (`room_made`).
        working_set_growing: room_made::recently(device),
        answered: carried.answered,
        demote: config.demote,
        // Roles swap by what the GPU reads; before the program's first kernel or product
        // it has read nothing, and the only heat is the copies that load its memory: a
        // pool loading tensor by tensor would trade the parts just written for those
        // written before (llama.cpp's 29 GiB pool swapped 2 GB a tick while it loaded,
        // bench/results/llamacpp-moe-2026-12-06-5aafd9a89e03.md).
        swap_limit: if gpu_has_read() { SWAP_BYTES } else { 0 },
        driver_keeps,
    };
    if room.pressing() || room.drained() {
        // Allocations then take the chunks the driver keeps of moves out before any that
        // hold data: those of this process's parts in T2 may be gone; pressing, the driver
        // may be evicting this process's parts in VRAM for someone too.
        let evicting = room.pressing();
        members.iter().for_each(|m| m.note_shortage(evicting));
    }
    // Runs of at most a quarter of the room promotions may fill: they fill it to within that.
    let most = (room.fillable() / 4).clamp(movable::RUN_LEAST, movable::RUN_MOST);
    let runs: Vec<Run<'_>> = members.iter().flat_map(|m| m.runs(&m.reads(true), most)).collect();
    let candidates: Vec<Candidate> = runs
        .iter()
        .map(|run| Candidate {
            bytes: run.bytes,
            in_vram: run.in_vram,
            heat: run.heat,
            sequence: run.allocation.sequence(),
            working_memory: run.allocation.working_memory(),
            idle_ticks: run.idle_ticks,
            maybe_evicted: run.maybe_evicted,
            chunks_kept: run.chunks_kept,
        })
        .collect();
    let moves = tiering::plan(&room, &candidates);
    if moves.is_empty() {
        return (carried, driver_keeps);
    }
    heat_table::log(device, &runs, &candidates, &moves);
    let chosen: Vec<(&Run<'_>, Move)> = moves
        .iter()
        .map(|&step| match step {
            Move::Promote(i) | Move::Demote(i) | Move::Refresh(i) | Move::SwapIn(i) | Move::SwapOut(i) => {
                (&runs[i], step)
            }
        })
        .collect();
    // Demotions first: swaps move in only where their swap-outs made room.
    let (leaving, arriving): (Vec<_>, Vec<_>) =
        chosen.iter().partition(|(_, step)| matches!(step, Move::Demote(_) | Move::SwapOut(_)));
    let mut moved = Moved::default();
    for group in tier_moves::groups(&leaving, tier_moves::GROUP_BYTES) {
        tier_moves::move_group(device, group, streams, &mut moved);
    }
    let arriving_bytes = arriving.iter().map(|(run, _)| run.bytes).sum();
    let given_back = match moved.demoted + moved.swapped_out {
        0 => 0,
        moved_out => give_back::after_moves_out(device, moved_out, free, arriving_bytes, true),
    };
    let mut arrivals = Arrivals { fresh: room.fillable() + given_back, first_free: None };
    let mut rest: &[(&Run<'_>, Move)] = &arriving;
    while !rest.is_empty() {
        let Some(most) = arrivals.group_may_take() else {
            info!(
                "live tiering on device {}: moves into VRAM took {} of free VRAM where {} was planned \
                 (the driver did not give back what this tick moved out): the rest wait",
                device,
                Mib(arrivals.taken()),
                Mib(arrivals.fresh)
            );
            break;
        };
        let group = tier_moves::first_group(rest, most);
        tier_moves::move_group(device, group, streams, &mut moved);
        rest = &rest[group.len()..];
    }
    // Read once more after the last group: one group alone may have taken fresh VRAM.
    let outcome = Outcome {
        demoted: moved.demoted,
        swapped_in: moved.swapped_in,
        planned: arrivals.fresh,
        taken: arrivals.taken(),
        given_back,
    };
    let next = carried.after(&outcome);
    let took_fresh = outcome.kept_by_swaps() > 0;
    if took_fresh && !driver_keeps {
        info!(
            "live tiering on device {}: swaps into VRAM took {} of free VRAM past the plan (the driver keeps what \
             moves out leave): from now on they move in only what free VRAM beyond the headroom holds, or once the \
             driver has next to none left to give",
            device,
            Mib(outcome.kept_by_swaps())
        );
    }
    publish::update();
    debug!(
        "live tiering on device {}: {} free, headroom {}, {} moves ({} demoted, {} swapped)",
        device,
        Mib(free),
        Mib(headroom),
        chosen.len(),
        Mib(moved.demoted),
        Mib(moved.swapped_out)
    );
    (next, driver_keeps || took_fresh)
}

/// A tick's moves into VRAM, group by group. The driver keeps the VRAM that a move out
/// gave back (free VRAM does not rise: bench/results/movable-vram-probe-2026-12-05.md),
/// gives it to another process that asks, and back to the pages that left it when they
/// move in again; but moves in of other pages take fresh VRAM while the driver has any
/// (on the H200 free VRAM fell from 1525 to 3 MiB after a 1.9 GB swap; why, from
/// NVIDIA's source: `memory::movable_part`'s `chunks_kept`). So free VRAM is read again
/// before every group in, each group is no larger than what the plan still has (one run
/// at least), and they stop once they took more of it than the promotions' room
/// (`Room::fillable`): past the plan by one run at most. (Groups of 256 MiB whatever the
/// plan had left took 384 MiB where 281 MiB were planned on an H100, and free VRAM fell
/// to 452 MiB under a 1 GiB headroom:
/// bench/results/gpu-test-2026-12-05-25044a5f8e5a-plain-pressure-shared-h100.md.)
/// Where the device is drained, moves in take the chunks the driver keeps, not free VRAM
/// (`Room::drained`): whole groups go. What they took in the end (`taken`) tells the
/// next ticks (`Carried::after`).
struct Arrivals {
    /// Free VRAM the plan let moves in take.
    fresh: u64,
    /// Free VRAM before the first group in.
    first_free: Option<u64>,
}

impl Arrivals {
    /// The most bytes the next group may move in (it moves one run at least), or `None`
    /// once the moves in took more free VRAM than planned.
    fn group_may_take(&mut self) -> Option<u64> {
        let (free, _) = cuda::device_memory()?;
        let first = *self.first_free.get_or_insert(free);
        let left = self.fresh.checked_sub(first.saturating_sub(free))?;
        Some(if free < tiering::DRAINED_FREE { ARRIVAL_GROUP_BYTES } else { left.min(ARRIVAL_GROUP_BYTES) })
    }

    /// Free VRAM taken so far (as last read).
    fn taken(&self) -> u64 {
        let Some(first) = self.first_free else { return 0 };
        cuda::device_memory().map_or(0, |(free, _)| first.saturating_sub(free))
    }
}
