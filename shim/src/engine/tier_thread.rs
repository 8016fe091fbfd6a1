//! The live-tiering thread: every GREENBOOST_TIER_INTERVAL_MS it measures each device
//! that holds movable allocations (`movable`), asks the policy (`tiering`) what moves,
//! and moves it: a prefetch per allocation on a low-priority stream of the allocation's
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
use crate::engine::tier_lock::{self, Turn};
use crate::memory::budget;
use crate::memory::movable::{self, Movable, Reserved, Started};
use crate::memory::release;
use crate::rules::config;
use crate::rules::placement::Rules;
use crate::rules::tiering::{self, Candidate, Move, Room};
use crate::sys::log::Mib;
use crate::sys::publish;
use crate::sys::shm_path::ShmPath;
use crate::sys::stats::{self, STATS};

/// Most bytes moved before the thread waits for them.
const GROUP_BYTES: u64 = 2 << 30;

/// Most bytes a tick demotes to swap roles (`tiering::Room::swap_limit`): one group, about
/// 0.2 s of demotion on the H200.
const SWAP_BYTES: u64 = GROUP_BYTES;

static STARTED: AtomicBool = AtomicBool::new(false);

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
    tier_lock::close_in_child();
}

/// A context's stream for moves, made on first use.
struct MoveStream {
    context: Context,
    stream: Stream,
}

/// What the thread keeps per device: bytes demoted since free VRAM last stood at the
/// headroom, and the lock its ticks take.
struct PerDevice {
    device: CuDevice,
    answered: u64,
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
                    known.push(PerDevice { device, answered: 0, lock });
                    known.len() - 1
                }
            };
            let this = &mut known[slot];
            // Held from the measurement to the end of the moves (see `tier_lock`).
            let held = match tier_lock::acquire(&this.lock) {
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
            this.answered = cuda::with_context(context, || tick(device, &members, this.answered, &mut streams));
            drop(held);
        }
    }
}

/// One tick on `device` (a context of it current): measure, plan, move. Returns the
/// bytes answered from now on.
fn tick(device: CuDevice, members: &[&Movable], answered: u64, streams: &mut Vec<MoveStream>) -> u64 {
    let config = config::get();
    let (Some((free, total)), Some(physical)) = (cuda::device_memory(), cuda::physical_vram(device)) else {
        return answered;
    };
    let headroom = Rules::of(config).headroom(device, physical.max(total));
    let answered = if free >= headroom { 0 } else { answered };
    let room = Room {
        free,
        headroom,
        budget_room: budget::promotion_room(device, false),
        loaded_room: budget::promotion_room(device, true),
        answered,
        demote: config.demote,
        swap_limit: SWAP_BYTES,
    };
    if room.pressing() {
        members.iter().for_each(|m| m.mark_maybe_evicted());
    }
    let candidates: Vec<Candidate> = members
        .iter()
        .map(|m| Candidate {
            bytes: m.len(),
            in_vram: m.in_vram(),
            heat: m.take_heat(),
            sequence: m.sequence(),
            after_computing: m.after_computing(),
            maybe_evicted: m.maybe_evicted(),
        })
        .collect();
    let moves = tiering::plan(&room, &candidates);
    if moves.is_empty() {
        return answered;
    }
    log_heat_table(device, members, &candidates, &moves);
    let chosen: Vec<(&Movable, Move)> = moves
        .iter()
        .map(|&step| match step {
            Move::Promote(i) | Move::Demote(i) | Move::Refresh(i) | Move::SwapIn(i) | Move::SwapOut(i) => {
                (members[i], step)
            }
        })
        .collect();
    // Demotions first: swaps move in only where their swap-outs made room.
    let (leaving, arriving): (Vec<_>, Vec<_>) =
        chosen.iter().partition(|(_, step)| matches!(step, Move::Demote(_) | Move::SwapOut(_)));
    let mut moved = Moved::default();
    for group in groups(&leaving).into_iter().chain(groups(&arriving)) {
        move_group(device, group, streams, &mut moved);
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
    answered + moved.demoted
}

/// The heat table (`GREENBOOST_LOG=debug`), at ticks that move something: the hottest
/// allocations per byte first, at most `HEAT_ROWS`, each with where it is, its size, its
/// heat and what this tick does with it.
fn log_heat_table(device: CuDevice, members: &[&Movable], candidates: &[Candidate], moves: &[Move]) {
    const HEAT_ROWS: usize = 16;
    if !crate::sys::log::enabled(crate::sys::log::Level::Debug) {
        return;
    }
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    let heat = |i: usize| (candidates[i].heat, candidates[i].bytes);
    order.sort_by(|&a, &b| tiering::per_byte(heat(b), heat(a)));
    debug!(
        "live tiering on device {}: heat table ({} movable allocations, hottest per byte first)",
        device,
        order.len()
    );
    for &i in order.iter().take(HEAT_ROWS) {
        let (c, m) = (&candidates[i], members[i]);
        let step = moves.iter().find_map(|step| match *step {
            Move::Promote(j) if j == i => Some("promote"),
            Move::Demote(j) if j == i => Some("demote"),
            Move::Refresh(j) if j == i => Some("refresh"),
            Move::SwapIn(j) if j == i => Some("swap in"),
            Move::SwapOut(j) if j == i => Some("swap out"),
            _ => None,
        });
        debug!(
            "  {:#x} {} in {}: heat {} ({} per MiB){}{}",
            m.base(),
            Mib(c.bytes),
            if c.in_vram { "VRAM" } else { "T2" },
            Mib(c.heat),
            Mib(c.heat / (c.bytes >> 20).max(1)),
            if c.after_computing { ", allocated computing" } else { "" },
            step.map_or(String::new(), |step| format!(": {step}"))
        );
    }
}

/// What a tick's moves did so far.
#[derive(Default)]
struct Moved {
    /// Bytes demoted to answer a shortfall.
    demoted: u64,
    /// Bytes sent to T2 to swap roles.
    swapped_out: u64,
    /// Of those, the VRAM not yet taken by swaps in.
    swap_room: u64,
}

/// Sends `victims` (movable, in VRAM, on `device`) to T2 now, on streams made for it, to
/// make room for an allocation of this process (`make_room`): each counted as a swap.
/// Returns the bytes that went.
pub(super) fn swap_out_now(device: CuDevice, victims: &[&Movable]) -> u64 {
    let moves: Vec<(&Movable, Move)> = victims.iter().enumerate().map(|(i, &m)| (m, Move::SwapOut(i))).collect();
    let (mut streams, mut moved) = (Vec::new(), Moved::default());
    for group in groups(&moves) {
        move_group(device, group, &mut streams, &mut moved);
    }
    for made in streams {
        cuda::with_context(made.context, || cuda::stream_destroy(made.stream));
    }
    publish::update();
    moved.swapped_out
}

/// `moves` cut into runs of at most `GROUP_BYTES` (one allocation larger is a run).
fn groups<'a>(moves: &'a [(&'a Movable, Move)]) -> Vec<&'a [(&'a Movable, Move)]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, (m, _)) in moves.iter().enumerate() {
        if i > start && bytes + m.len() > GROUP_BYTES {
            runs.push(&moves[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += m.len();
    }
    if start < moves.len() {
        runs.push(&moves[start..]);
    }
    runs
}

/// Starts every move of `group`, waits for the driver, ends them; what moved is added
/// to `moved`.
fn move_group(device: CuDevice, group: &[(&Movable, Move)], streams: &mut Vec<MoveStream>, moved: &mut Moved) {
    let began = Instant::now();
    let mut started: Vec<(&Movable, Move, Started, Option<Stream>)> = Vec::new();
    for &(m, step) in group {
        let Some(stream) = stream_of(m.context(), streams) else { continue };
        let move_started = match step {
            Move::Promote(_) => {
                let loaded = !m.after_computing();
                m.start_move(true, |len| budget::reserve_promotion(len, device, loaded).map(Reserved::Vram))
            }
            // Into the VRAM this process's swaps out gave back this tick, already its own.
            Move::SwapIn(_) => m.start_move(true, |len| {
                let fits = len <= moved.swap_room;
                fits.then(|| {
                    moved.swap_room -= len;
                    Reserved::Vram(budget::reserve_unchecked(len, device))
                })
            }),
            Move::Demote(_) | Move::SwapOut(_) => {
                m.start_move(false, |len| release::reserve_t2_now(len).map(Reserved::T2))
            }
            Move::Refresh(_) => m.start_refresh(),
        };
        let Some(move_started) = move_started else { continue };
        let to = if matches!(step, Move::Demote(_) | Move::SwapOut(_)) { Where::Host } else { Where::Device(device) };
        let issuing = Instant::now();
        let issued = cuda::with_context(m.context(), || prefetch(m, to, stream));
        let issue_ns = u64::try_from(issuing.elapsed().as_nanos()).unwrap_or(u64::MAX);
        STATS.move_issue_ns.fetch_add(issue_ns, Ordering::Relaxed);
        started.push((m, step, move_started, issued.then_some(stream)));
    }
    if started.is_empty() {
        return;
    }
    // Each stream the group used, waited for once.
    let mut used: Vec<Stream> = Vec::new();
    for stream in started.iter().filter_map(|(_, _, _, stream)| *stream) {
        if !used.contains(&stream) {
            used.push(stream);
        }
    }
    let streams_done = used.into_iter().all(|stream| cuda::stream_synchronize(stream) == CuResult::SUCCESS);
    let elapsed = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let (mut promoted_any, mut demoted_any) = (false, false);
    for (m, step, move_started, stream) in started {
        let arrived = stream.is_some() && streams_done;
        if let (false, Move::Promote(_) | Move::SwapIn(_), Some(stream)) = (arrived, step, stream) {
            // The driver may have moved part of it into VRAM the accounts give back now:
            // send it home (best effort; the host is where eviction sends it anyway).
            cuda::with_context(m.context(), || prefetch(m, Where::Host, stream));
        }
        m.finish_move(move_started, arrived);
        if !arrived {
            continue;
        }
        match step {
            // Charged and counted in VRAM already: no move in the counters.
            Move::Refresh(_) => {
                debug!("live tiering: {:#x} ({}) moved to VRAM again after an eviction", m.base(), Mib(m.len()))
            }
            Move::Promote(_) | Move::SwapIn(_) => {
                promoted_any = true;
                stats::bump(&STATS.promotions);
                STATS.promoted_bytes.fetch_add(m.len(), Ordering::Relaxed);
            }
            Move::Demote(_) | Move::SwapOut(_) => {
                demoted_any = true;
                if matches!(step, Move::SwapOut(_)) {
                    moved.swapped_out += m.len();
                    moved.swap_room += m.len();
                    stats::bump(&STATS.swaps);
                } else {
                    moved.demoted += m.len();
                }
                stats::bump(&STATS.demotions);
                STATS.demoted_bytes.fetch_add(m.len(), Ordering::Relaxed);
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

/// Enqueues the migration of `m` to `to` on `stream`.
fn prefetch(m: &Movable, to: Where, stream: Stream) -> bool {
    let prefetched = cuda::mem_prefetch_async(m.base(), m.len(), to, stream);
    if prefetched != CuResult::SUCCESS {
        info!("live tiering: cuMemPrefetchAsync of {:#x} failed (CUDA error {})", m.base(), prefetched.0);
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
