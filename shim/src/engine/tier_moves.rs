//! Carrying out live tiering's moves: a prefetch per run of parts (`movable::Run`: a whole
//! allocation, or neighbouring parts of a large one) on a low-priority stream of the
//! allocation's context, in groups, each group waited for before the next, so that a free
//! of one of them waits at most one group; each part's charge moved with it (VRAM for a
//! promotion, T2 for a demotion) and the counters bumped. Used by the tier thread's ticks
//! (`tier_thread`) and by room made at once for an allocation (`make_room`).
//!
//! A group's prefetches are issued from `MOVE_LANES` threads at once, each lane on its own
//! streams: the driver carries out a migration to the host mostly inside the call that
//! asks for it (an HF prefill on an H100 spent 1545 of 2315 ms of demotion issuing, at
//! 4-10 GB/s where the link carries 50), so one thread issuing runs one migration at a
//! time. On an H100 two threads or more demoted 1.4-1.5x faster than one, and an HF
//! prefill beside another process took 1.34-1.69 s with four lanes where one took
//! 2.05-2.40 s (bench/results/2026-12-06-732e91636ef3-parallel-moves-ab-h100.md).
//!
//! The preferred location stays the host (`movable`) whatever the residence: a move is
//! the prefetch alone (why: `tier_thread`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::cuda::ffi::*;
use crate::cuda::{self, Where};
use crate::memory::budget;
use crate::memory::movable::{Movable, Run};
use crate::memory::movable_part::{Part, Reserved, Started};
use crate::memory::release;
use crate::rules::tiering::Move;
use crate::sys::log::{Level, Mib};
use crate::sys::publish;
use crate::sys::stats::{self, STATS};

/// Most bytes moved before the thread waits for them.
pub(super) const GROUP_BYTES: u64 = 2 << 30;

/// Threads that issue a group's prefetches at once (`issue_in_lanes`).
const MOVE_LANES: usize = 4;

/// A context's stream for the moves of one lane, made on first use.
pub(super) struct MoveStream {
    context: Context,
    lane: usize,
    stream: Stream,
}

/// What a tick's moves did so far.
#[derive(Default)]
pub(super) struct Moved {
    /// Bytes demoted to answer a shortfall.
    pub demoted: u64,
    /// Bytes sent to T2 to swap roles.
    pub swapped_out: u64,
    /// Bytes moved to VRAM by swaps.
    pub swapped_in: u64,
    /// Of those, the VRAM not yet taken by swaps in.
    swap_room: u64,
    /// The host RAM moves to T2 may still take.
    host: release::DriverHostRoom,
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
    /// Where it goes, and the stream of its lane.
    to: Where,
    lane_stream: Stream,
    /// Every one of its prefetches was issued (on `lane_stream`).
    issued: bool,
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
pub(super) fn groups<'a>(moves: &'a [(&'a Run<'a>, Move)], most: u64) -> Vec<&'a [(&'a Run<'a>, Move)]> {
    let mut cut = Vec::new();
    let mut rest = moves;
    while !rest.is_empty() {
        let group = first_group(rest, most);
        rest = &rest[group.len()..];
        cut.push(group);
    }
    cut
}

/// The first group of `moves`: the most of them that come to at most `most` bytes, one
/// run at least (empty only when `moves` is).
pub(super) fn first_group<'a>(moves: &'a [(&'a Run<'a>, Move)], most: u64) -> &'a [(&'a Run<'a>, Move)] {
    let mut bytes = 0u64;
    let past = moves.iter().position(|(run, _)| {
        bytes = bytes.saturating_add(run.bytes);
        bytes > most
    });
    &moves[..past.map_or(moves.len(), |at| at.max(1))]
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
        Move::Demote(_) | Move::SwapOut(_) => part.start_move(false, |len| {
            if !moved.host.take(len) {
                return None;
            }
            let reserved = release::reserve_t2_now(len);
            if reserved.is_none() {
                moved.host.give_back(len);
            }
            reserved.map(Reserved::T2)
        }),
        Move::Refresh(_) => part.start_refresh(),
    }
}

/// Starts every move of `group` (each part of each run), waits for the driver, ends
/// them; what moved is added to `moved`.
pub(super) fn move_group<'a>(
    device: CuDevice,
    group: &'a [(&'a Run<'a>, Move)],
    streams: &mut Vec<MoveStream>,
    moved: &mut Moved,
) {
    let began = Instant::now();
    let refused_before = moved.host.refused;
    let mut started: Vec<RunMove<'a>> = Vec::new();
    for &(run, step) in group {
        let allocation: &Movable = run.allocation;
        let lane = started.len() % MOVE_LANES;
        let Some(lane_stream) = stream_of(allocation.context(), lane, streams) else { continue };
        let loaded = !allocation.working_memory();
        let parts: Vec<(&Part, Started)> = run
            .parts()
            .iter()
            .filter_map(|part| Some((part, start_part(part, step, loaded, device, moved)?)))
            .collect();
        if parts.is_empty() {
            continue;
        }
        let to = if matches!(step, Move::Demote(_) | Move::SwapOut(_)) { Where::Host } else { Where::Device(device) };
        started.push(RunMove { run, step, parts, to, lane_stream, issued: false });
    }
    say_host_short(device, moved.host.refused - refused_before);
    if started.is_empty() {
        return;
    }
    let issuing = Instant::now();
    let issued = issue_in_lanes(&started);
    let issue_ns = u64::try_from(issuing.elapsed().as_nanos()).unwrap_or(u64::MAX);
    STATS.move_issue_ns.fetch_add(issue_ns, Ordering::Relaxed);
    for (run_move, issued) in started.iter_mut().zip(issued) {
        run_move.issued = issued;
    }
    // Each stream the group used, waited for once.
    let mut used: Vec<Stream> = Vec::new();
    for stream in started.iter().filter(|run_move| run_move.issued).map(|run_move| run_move.lane_stream) {
        if !used.contains(&stream) {
            used.push(stream);
        }
    }
    let streams_done = used.into_iter().all(|stream| cuda::stream_synchronize(stream) == CuResult::SUCCESS);
    let elapsed = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let (mut promoted_any, mut demoted_any) = (false, false);
    for run_move in started {
        let arrived = run_move.issued && streams_done;
        let (step, bytes, address) = (run_move.step, run_move.bytes(), run_move.run.address());
        if !arrived && run_move.issued && matches!(step, Move::Promote(_) | Move::SwapIn(_)) {
            // The driver may have moved some of it into VRAM the accounts give back now:
            // send it home (best effort; the host is where eviction sends it anyway).
            run_move.prefetch(Where::Host, run_move.lane_stream);
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

/// Says that `refused` bytes stayed in VRAM on `device` for want of host RAM: at `info`
/// the first time, at `debug` after (the tier thread may try again at every tick).
fn say_host_short(device: CuDevice, refused: u64) {
    if refused == 0 {
        return;
    }
    let first = !HOST_SHORT_SAID.swap(true, Ordering::Relaxed);
    let (level, why) = if first {
        (Level::Info, " (GREENBOOST_HOST_RESERVE); a process that needs that VRAM gets out-of-memory")
    } else {
        (Level::Debug, "")
    };
    log_at!(
        level,
        "live tiering on device {}: {} stays in VRAM: the host has no RAM for it above its reserve of {}{}",
        device,
        Mib(refused),
        Mib(release::host_reserve()),
        why
    );
}

/// Whether a move kept in VRAM for want of host RAM was said at `info`.
static HOST_SHORT_SAID: AtomicBool = AtomicBool::new(false);

/// Issues every run's prefetches, the runs dealt to lanes in turn (`started[at]` to lane
/// `at % MOVE_LANES`, whose stream it holds): lane 0 in this thread, each other in a thread
/// of its own, or in this one where a thread cannot be had. Whether each run's were all
/// issued.
fn issue_in_lanes(started: &[RunMove<'_>]) -> Vec<bool> {
    let lanes = MOVE_LANES.min(started.len());
    let issue_lane = |lane: usize| -> Vec<(usize, bool)> {
        started
            .iter()
            .enumerate()
            .skip(lane)
            .step_by(lanes)
            .map(|(at, run)| (at, run.prefetch(run.to, run.lane_stream)))
            .collect()
    };
    let mut issued = vec![false; started.len()];
    std::thread::scope(|scope| {
        let others: Vec<Result<_, usize>> = (1..lanes)
            .map(|lane| {
                std::thread::Builder::new()
                    .name("greenboost-move".into())
                    .spawn_scoped(scope, move || {
                        // As the threads that deal the lanes (the tier thread, an allocation
                        // making room): prefetches neither refused nor invalidating a capture
                        // another thread makes in global mode. Refused, they are tried all the same.
                        let _ = cuda::relax_stream_capture_mode();
                        issue_lane(lane)
                    })
                    .map_err(|_| lane)
            })
            .collect();
        let mut record = |lane_issued: Vec<(usize, bool)>| lane_issued.into_iter().for_each(|(at, ok)| issued[at] = ok);
        record(issue_lane(0));
        for other in others {
            match other {
                Ok(thread) => record(thread.join().unwrap_or_default()),
                Err(lane) => record(issue_lane(lane)),
            }
        }
    });
    issued
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

/// The move stream of `context` for `lane`, made (lowest priority, non-blocking) on first
/// use.
fn stream_of(context: Context, lane: usize, streams: &mut Vec<MoveStream>) -> Option<Stream> {
    if let Some(known) = streams.iter().find(|s| s.context == context && s.lane == lane) {
        return Some(known.stream);
    }
    let stream = cuda::with_context(context, cuda::stream_create_low_priority).ok()?;
    streams.push(MoveStream { context, lane, stream });
    Some(stream)
}
