//! The live-tiering thread: every GREENBOOST_TIER_INTERVAL_MS it measures each device
//! that holds movable allocations (`movable`), asks the policy (`tiering`) what moves,
//! and moves it: a prefetch per run of parts (`movable::Run`: a whole allocation, or
//! neighbouring parts of a large one) on a low-priority stream of the allocation's
//! context, in groups of at most `GROUP_BYTES`, each group waited for before the next, so
//! that a free of one of them waits at most one group. Started by the first movable
//! allocation; the program's own streams never wait for it.
//!
//! The preferred location stays the host (`movable`) whatever the residence: a move is
//! the prefetch alone. Measured on the H200 (bench/results/tiering-probe-2026-12-01.md):
//! advising the device before the prefetch made promotion 0.65 of the prefetch alone
//! (the advice call re-maps the whole range), and pages the driver then evicted for
//! another process faulted back at 6-7 GB/s; with the host preferred, promoted pages
//! stay in VRAM (the GPU's own accesses never fault), and evicted ones go to the host
//! where the device reads them over the link like any T2. The driver does not say what
//! it evicted: a tick that finds free VRAM under a quarter of the headroom marks what is
//! in VRAM as maybe evicted, and the policy moves it again once there is room.
//!
//! A tick holds its GPU's `tier_lock` from the measurement to the end of its moves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cuda::ffi::*;
use crate::cuda::{self, Where};
use crate::engine::give_back;
use crate::engine::heat_table;
use crate::engine::room_made;
use crate::engine::tier_lock::{self, Turn};
use crate::memory::budget;
use crate::memory::movable::{self, Movable, Run};
use crate::memory::movable_part::{Part, Reserved, Started};
use crate::memory::release;
use crate::rules::config;
use crate::rules::placement::Rules;
use crate::rules::tiering::{self, Candidate, Carried, Move, Outcome, Room};
use crate::sys::lock::{const_mutex, Mutex, StaticGuard};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::publish;
use crate::sys::shm_path::ShmPath;
use crate::sys::stats::{self, STATS};

/// Most bytes moved before the thread waits for them.
const GROUP_BYTES: u64 = 2 << 30;

/// Most bytes moved into VRAM before the thread waits for them and reads free VRAM again
/// (`arrivals_may_go`): what one group may take of the headroom past the plan.
const ARRIVAL_GROUP_BYTES: u64 = 256 << 20;

/// Most bytes a tick demotes to swap roles (`tiering::Room::swap_limit`): one group, about
/// 0.2 s of demotion on the H200.
const SWAP_BYTES: u64 = GROUP_BYTES;

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

/// A context's stream for moves, made on first use.
struct MoveStream {
    context: Context,
    stream: Stream,
}

/// What the thread keeps per device: what its ticks carry over (`Carried`), and the lock
/// they take.
struct PerDevice {
    device: CuDevice,
    carried: Carried,
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
                    known.push(PerDevice { device, carried: Carried::default(), lock });
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
            this.carried = cuda::with_context(context, || tick(device, &members, this.carried, &mut streams));
            drop(moving);
            drop(held);
        }
    }
}

/// One tick on `device` (a context of it current): measure, plan, move. Returns what the
/// next tick carries over.
fn tick(device: CuDevice, members: &[&Movable], carried: Carried, streams: &mut Vec<MoveStream>) -> Carried {
    let config = config::get();
    let (Some((free, total)), Some(physical)) = (cuda::device_memory(), cuda::physical_vram(device)) else {
        return carried;
    };
    let headroom = Rules::of(config).headroom(device, physical.max(total));
    // What room made left the driver since answers as the tick's own demotions (`room_made`).
    let answered = carried.answered.saturating_add(room_made::take(device));
    let carried = if free >= headroom { Carried::default() } else { Carried { answered, ..carried } };
    let room = Room {
        free,
        headroom,
        budget_room: budget::promotion_room(device, false),
        loaded_room: budget::promotion_room(device, true),
        // While the working set grows, the weights demoted for it stay in T2 (`room_made`).
        working_set_growing: room_made::recently(device),
        answered: carried.answered,
        demote: config.demote,
        swap_limit: SWAP_BYTES,
        swaps_while_short: !carried.swaps_took_fresh,
    };
    if room.pressing() {
        members.iter().for_each(|m| m.mark_maybe_evicted());
    }
    // Runs of at most a quarter of the room promotions may fill: they fill it to within that.
    let most = (room.fillable() / 4).clamp(movable::RUN_LEAST, movable::RUN_MOST);
    let runs: Vec<Run<'_>> = members.iter().flat_map(|m| m.runs(&m.heats(true), most)).collect();
    let candidates: Vec<Candidate> = runs
        .iter()
        .map(|run| Candidate {
            bytes: run.bytes,
            in_vram: run.in_vram,
            heat: run.heat,
            sequence: run.allocation.sequence(),
            after_computing: run.allocation.after_computing(),
            maybe_evicted: run.maybe_evicted,
        })
        .collect();
    let moves = tiering::plan(&room, &candidates);
    if moves.is_empty() {
        return carried;
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
    for group in groups(&leaving, GROUP_BYTES) {
        move_group(device, group, streams, &mut moved);
    }
    let arriving_bytes = arriving.iter().map(|(run, _)| run.bytes).sum();
    let given_back = match moved.demoted + moved.swapped_out {
        0 => 0,
        moved_out => give_back::after_moves_out(device, moved_out, free, arriving_bytes, true),
    };
    let mut arrivals = Arrivals { fresh: room.fillable() + given_back, first_free: None };
    for group in groups(&arriving, ARRIVAL_GROUP_BYTES) {
        if !arrivals.may_go() {
            info!(
                "live tiering on device {}: moves into VRAM took {} of free VRAM where {} was planned \
                 (the driver did not give back what this tick moved out): the rest wait",
                device,
                Mib(arrivals.taken()),
                Mib(arrivals.fresh)
            );
            break;
        }
        move_group(device, group, streams, &mut moved);
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
    if next.swaps_took_fresh && !carried.swaps_took_fresh {
        info!(
            "live tiering on device {}: swaps into VRAM took {} of free VRAM past the plan: no swaps while free VRAM \
             is under the headroom, until the driver has next to none left to give them",
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
    next
}

/// A tick's moves into VRAM, group by group. The driver keeps the VRAM that a move out
/// gave back (free VRAM does not rise: bench/results/movable-vram-probe-2026-12-05.md),
/// gives it to another process that asks, and to this process's later moves in; but on
/// the H200 moves in right after the same tick's moves out took fresh VRAM instead
/// (free VRAM fell from 1525 to 3 MiB after a 1.9 GB swap). So free VRAM is read again
/// before every group in, and they stop once they took more of it than the promotions'
/// room (`Room::fillable`): past the plan by one group at most. What they took in the end
/// (`taken`) tells the next ticks (`Carried::after`).
struct Arrivals {
    /// Free VRAM the plan let moves in take.
    fresh: u64,
    /// Free VRAM before the first group in.
    first_free: Option<u64>,
}

impl Arrivals {
    fn may_go(&mut self) -> bool {
        let Some((free, _)) = cuda::device_memory() else { return false };
        let first = *self.first_free.get_or_insert(free);
        first.saturating_sub(free) <= self.fresh
    }

    /// Free VRAM taken so far (as last read).
    fn taken(&self) -> u64 {
        let Some(first) = self.first_free else { return 0 };
        cuda::device_memory().map_or(0, |(free, _)| first.saturating_sub(free))
    }
}

/// What a tick's moves did so far.
#[derive(Default)]
struct Moved {
    /// Bytes demoted to answer a shortfall.
    demoted: u64,
    /// Bytes sent to T2 to swap roles.
    swapped_out: u64,
    /// Bytes moved to VRAM by swaps.
    swapped_in: u64,
    /// Of those, the VRAM not yet taken by swaps in.
    swap_room: u64,
}

/// Sends `victims` (runs of movable memory in VRAM on `device`) to T2 now, on streams
/// made for it, to make room for an allocation of this process (`make_room`): each
/// counted as a swap. Returns the bytes that went.
pub(super) fn swap_out_now(device: CuDevice, victims: &[Run<'_>]) -> u64 {
    let moves: Vec<(&Run<'_>, Move)> = victims.iter().enumerate().map(|(i, run)| (run, Move::SwapOut(i))).collect();
    let (mut streams, mut moved) = (Vec::new(), Moved::default());
    for group in groups(&moves, GROUP_BYTES) {
        move_group(device, group, &mut streams, &mut moved);
    }
    for made in streams {
        cuda::with_context(made.context, || cuda::stream_destroy(made.stream));
    }
    publish::update();
    moved.swapped_out
}

/// One run's move in a group: the parts that started, with their moves.
struct RunMove<'a> {
    run: &'a Run<'a>,
    step: Move,
    parts: Vec<(&'a Part, Started)>,
    /// The stream its prefetches went to, if every one was issued.
    stream: Option<Stream>,
}

impl RunMove<'_> {
    fn bytes(&self) -> u64 {
        self.parts.iter().map(|(part, _)| part.len()).sum()
    }

    /// Enqueues the migration of its started parts to `to` on `stream`, one prefetch per
    /// stretch of neighbours; whether every one was issued.
    fn prefetch(&self, to: Where, stream: Stream) -> bool {
        let allocation = self.run.allocation;
        let mut all = true;
        let mut at = 0;
        while at < self.parts.len() {
            let first = self.parts[at].0;
            let mut end = first.offset() + first.len();
            at += 1;
            while at < self.parts.len() && self.parts[at].0.offset() == end {
                end += self.parts[at].0.len();
                at += 1;
            }
            let start = allocation.base() + first.offset();
            all &= cuda::with_context(allocation.context(), || prefetch(start, end - first.offset(), to, stream));
        }
        all
    }
}

/// `moves` cut into groups of at most `most` bytes (one run larger is a group).
fn groups<'a>(moves: &'a [(&'a Run<'a>, Move)], most: u64) -> Vec<&'a [(&'a Run<'a>, Move)]> {
    let mut cut = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, (run, _)) in moves.iter().enumerate() {
        if i > start && bytes + run.bytes > most {
            cut.push(&moves[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += run.bytes;
    }
    if start < moves.len() {
        cut.push(&moves[start..]);
    }
    cut
}

/// Starts one part's move of `step` on `device` (`moved` holds the room this tick's swaps
/// out gave back).
fn start_part(part: &Part, step: Move, loaded: bool, device: CuDevice, moved: &mut Moved) -> Option<Started> {
    match step {
        Move::Promote(_) => {
            part.start_move(true, |len| budget::reserve_promotion(len, device, loaded).map(Reserved::Vram))
        }
        // Into the VRAM this process's swaps out gave back this tick, already its own.
        Move::SwapIn(_) => part.start_move(true, |len| {
            let fits = len <= moved.swap_room;
            fits.then(|| {
                moved.swap_room -= len;
                Reserved::Vram(budget::reserve_unchecked(len, device))
            })
        }),
        Move::Demote(_) | Move::SwapOut(_) => {
            part.start_move(false, |len| release::reserve_t2_now(len).map(Reserved::T2))
        }
        Move::Refresh(_) => part.start_refresh(),
    }
}

/// Starts every move of `group` (each part of each run), waits for the driver, ends
/// them; what moved is added to `moved`.
fn move_group<'a>(
    device: CuDevice,
    group: &'a [(&'a Run<'a>, Move)],
    streams: &mut Vec<MoveStream>,
    moved: &mut Moved,
) {
    let began = Instant::now();
    let mut started: Vec<RunMove<'a>> = Vec::new();
    for &(run, step) in group {
        let allocation: &Movable = run.allocation;
        let Some(stream) = stream_of(allocation.context(), streams) else { continue };
        let loaded = !allocation.after_computing();
        let parts: Vec<(&Part, Started)> = run
            .parts()
            .iter()
            .filter_map(|part| Some((part, start_part(part, step, loaded, device, moved)?)))
            .collect();
        if parts.is_empty() {
            continue;
        }
        let mut run_move = RunMove { run, step, parts, stream: None };
        let to = if matches!(step, Move::Demote(_) | Move::SwapOut(_)) { Where::Host } else { Where::Device(device) };
        let issuing = Instant::now();
        let issued = run_move.prefetch(to, stream);
        let issue_ns = u64::try_from(issuing.elapsed().as_nanos()).unwrap_or(u64::MAX);
        STATS.move_issue_ns.fetch_add(issue_ns, Ordering::Relaxed);
        run_move.stream = issued.then_some(stream);
        started.push(run_move);
    }
    if started.is_empty() {
        return;
    }
    // Each stream the group used, waited for once.
    let mut used: Vec<Stream> = Vec::new();
    for stream in started.iter().filter_map(|run_move| run_move.stream) {
        if !used.contains(&stream) {
            used.push(stream);
        }
    }
    let streams_done = used.into_iter().all(|stream| cuda::stream_synchronize(stream) == CuResult::SUCCESS);
    let elapsed = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let (mut promoted_any, mut demoted_any) = (false, false);
    for run_move in started {
        let arrived = run_move.stream.is_some() && streams_done;
        let (step, bytes, address) = (run_move.step, run_move.bytes(), run_move.run.address());
        if let (false, Move::Promote(_) | Move::SwapIn(_), Some(stream)) = (arrived, step, run_move.stream) {
            // The driver may have moved some of it into VRAM the accounts give back now:
            // send it home (best effort; the host is where eviction sends it anyway).
            run_move.prefetch(Where::Host, stream);
        }
        for (part, part_started) in run_move.parts {
            part.finish_move(part_started, arrived);
        }
        if !arrived {
            continue;
        }
        match step {
            // Charged and counted in VRAM already: no move in the counters.
            Move::Refresh(_) => {
                debug!("live tiering: {:#x} ({}) moved to VRAM again after an eviction", address, Mib(bytes))
            }
            Move::Promote(_) | Move::SwapIn(_) => {
                promoted_any = true;
                if matches!(step, Move::SwapIn(_)) {
                    moved.swapped_in += bytes;
                }
                stats::bump(&STATS.promotions);
                STATS.promoted_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Move::Demote(_) | Move::SwapOut(_) => {
                demoted_any = true;
                if matches!(step, Move::SwapOut(_)) {
                    moved.swapped_out += bytes;
                    moved.swap_room += bytes;
                    stats::bump(&STATS.swaps);
                } else {
                    moved.demoted += bytes;
                }
                stats::bump(&STATS.demotions);
                STATS.demoted_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
    }
    if promoted_any {
        STATS.promote_ns.fetch_add(elapsed, Ordering::Relaxed);
    }
    if demoted_any {
        STATS.demote_ns.fetch_add(elapsed, Ordering::Relaxed);
    }
}

/// Enqueues the migration of [`start`, `start + len`) to `to` on `stream`.
fn prefetch(start: CuDevicePtr, len: u64, to: Where, stream: Stream) -> bool {
    let prefetched = cuda::mem_prefetch_async(start, len, to, stream);
    if prefetched != CuResult::SUCCESS {
        info!("live tiering: cuMemPrefetchAsync of {:#x} failed (CUDA error {})", start, prefetched.0);
        return false;
    }
    true
}

/// The move stream of `context`, made (lowest priority, non-blocking) on first use.
fn stream_of(context: Context, streams: &mut Vec<MoveStream>) -> Option<Stream> {
    if let Some(known) = streams.iter().find(|s| s.context == context) {
        return Some(known.stream);
    }
    let stream = cuda::with_context(context, cuda::stream_create_low_priority).ok()?;
    streams.push(MoveStream { context, stream });
    Some(stream)
}
