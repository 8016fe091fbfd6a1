//! How much of what a kernel names it reads, from sampled kernel times. A launch names
//! where a kernel reads, not how much: llama.cpp's mixture-of-experts product is given a
//! layer's whole expert tensor and reads the few experts a token routes to, and a decode
//! step's attention is given the whole KV cache of a layer and reads the filled part.
//! Counted as reading all of it, such a piece looks as hot per byte as the attention
//! weights read whole at every token, and would take their VRAM.
//!
//! So every `SAMPLE_EVERY`th launch of each thread while movable memory lives is timed
//! (counted per thread, so that threads launching at once share no counter), and the
//! first `FIRST_SAMPLES` of each function: an event before it and one after it on its
//! stream. A later sampled launch collects the samples whose events have passed. A
//! sample's time bounds the share of what it named that the kernel read
//! (`rules::read_share`: over T2 at the link's rate, over VRAM at the device memory's
//! peak, where only a bound below all of it says something). That share is kept per
//! function (the first measure, then halfway from the last), and each launch of the
//! function names with that weight (`address_index::WHOLE_READ` times the share; graph
//! kernel nodes of the function too). A function never sampled, or whose samples said
//! nothing, reads all it names. Shares are kept by a number each function is given on
//! first sight (a table that never forgets).
//!
//! Slots: each sample owns a slot from `before_launch` to its collection, by the slot's
//! state (`FREE` → `BUSY` by a compare-and-swap, `PENDING` once recorded), so its fields
//! need no lock. A slot keeps its two events for the context they were made in.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::cuda::ffi::{Context, CuDevicePtr, CuFunction, CuResult, Event, Stream};
use crate::cuda::{self};
use crate::launch::capture::{self, Enqueued};
use crate::memory::address_index::WHOLE_READ;
use crate::memory::{movable, registry};
use crate::rules::config;
use crate::rules::read_share::{self, Rates, Sample};
use crate::sys::intern_table::InternTable;
use crate::sys::stats::{self, STATS};

/// One launch in this many is timed (two event records: about a microsecond each); a
/// prime, so that a program repeating a sequence of kernels has each of them timed in turn.
const SAMPLE_EVERY: u64 = 257;

/// The first launches of each function timed whatever the turn: a kernel launched once
/// per pass of a few hundred (an embedding's lookup, once a token, beside a layer's
/// every kernel) would meet its turn once in `SAMPLE_EVERY` passes.
const FIRST_SAMPLES: u8 = 2;

/// Samples in flight at once; a launch whose turn finds none free is not timed.
const SLOTS: usize = 8;

/// Addresses a sample keeps of what its launch named.
pub const NAMED_KEPT: usize = 4;

const FREE: u8 = 0;
const BUSY: u8 = 1;
const PENDING: u8 = 2;

thread_local! {
    /// The calling thread's launches while movable memory lived, for its turns.
    static LAUNCHES: Cell<u64> = const { Cell::new(0) };
}

/// Kernel functions with a number of their own (1 and up); past them, a function is never
/// weighed (number 0: it reads all it names).
const NUMBERED: usize = 4096;
static NUMBERS: InternTable<8192> = InternTable::new(NUMBERED as u64 - 1);

/// Each numbered function's read share, in `WHOLE_READ` units (0: never measured).
static SHARES: [AtomicU64; NUMBERED] = [const { AtomicU64::new(0) }; NUMBERED];

/// Each numbered function's launches timed, up to `FIRST_SAMPLES`.
static TIMED: [AtomicU8; NUMBERED] = [const { AtomicU8::new(0) }; NUMBERED];

struct Slot {
    state: AtomicU8,
    /// The context `start` and `end` were made in (0: none made yet).
    context: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    number: AtomicU64,
    /// Bytes the launch named (of at most `NAMED_KEPT` pieces), and of them those in T2,
    /// as they lay when it was launched: by its collection the tier thread may have moved
    /// them (the move its own read share decided, for one).
    named_bytes: AtomicU64,
    named_t2: AtomicU64,
    /// The peak rate of the launch's device's memory, bytes per second (0: not known).
    vram_rate: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    state: AtomicU8::new(FREE),
    context: AtomicU64::new(0),
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
    number: AtomicU64::new(0),
    named_bytes: AtomicU64::new(0),
    named_t2: AtomicU64::new(0),
    vram_rate: AtomicU64::new(0),
};

static SAMPLES: [Slot; SLOTS] = [EMPTY_SLOT; SLOTS];

fn event(raw: u64) -> Event {
    Event(raw as *mut std::ffi::c_void)
}

/// A launch being timed: its slot, held `BUSY`.
#[must_use]
pub struct Sampling(usize);

/// `function`'s number (0: none left).
fn number(function: CuFunction) -> usize {
    NUMBERS.number(function.0 as u64).map_or(0, |number| number as usize)
}

/// The weight a launch of `function` names with: `WHOLE_READ` times its read share (only
/// movable memory's heat reads it: without any, it is not looked up).
pub fn weight(function: CuFunction) -> u64 {
    if !movable::any() {
        return WHOLE_READ;
    }
    weight_of(number(function))
}

/// The weight of the function numbered `number`: `WHOLE_READ` until a sample measured it.
fn weight_of(number: usize) -> u64 {
    match SHARES[number].load(Ordering::Relaxed) {
        0 => WHOLE_READ,
        share => share,
    }
}

/// What a launch carries from before it to after it: the weight it names with
/// (`weight`), and its timing where it is timed.
pub struct Timing {
    pub weight: u64,
    pub sampling: Option<Sampling>,
}

/// Before a launch of `function` on `stream` (its context current): its weight, found
/// once for both uses; and it is timed if movable memory lives, the stream runs what it
/// is given (not captured), and its thread's turn came (every `SAMPLE_EVERY`th launch of
/// the thread) or the function has had fewer than `FIRST_SAMPLES` timed.
pub fn before_launch(function: CuFunction, stream: Stream) -> Timing {
    if !movable::any() {
        return Timing { weight: WHOLE_READ, sampling: None };
    }
    let number = number(function);
    let weight = weight_of(number);
    let turn = turn_came();
    let first_sight = number != 0 && TIMED[number].load(Ordering::Relaxed) < FIRST_SAMPLES;
    if !(turn || first_sight) || capture::enqueued_on(stream) != Enqueued::Runs {
        return Timing { weight, sampling: None };
    }
    let sampling = cuda::in_relaxed_capture_mode(|| {
        collect();
        start_sample(stream, number)
    })
    .flatten();
    if first_sight && sampling.is_some() {
        TIMED[number].fetch_add(1, Ordering::Relaxed);
    }
    Timing { weight, sampling }
}

/// Counts a launch of the calling thread: whether it is one to time (its first, then
/// every `SAMPLE_EVERY`th; never for a thread whose locals are gone: exiting).
fn turn_came() -> bool {
    LAUNCHES.try_with(|launches| {
        let count = launches.get();
        launches.set(count.wrapping_add(1));
        count.is_multiple_of(SAMPLE_EVERY)
    }) == Ok(true)
}

/// Claims a free slot for a launch of the function numbered `number` and records its
/// start event on `stream`.
fn start_sample(stream: Stream, number: usize) -> Option<Sampling> {
    let context = cuda::current_context()?;
    let index = SAMPLES
        .iter()
        .position(|slot| slot.state.compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
    let slot = &SAMPLES[index];
    let recorded = events_for(slot, context)
        && cuda::event_record(event(slot.start.load(Ordering::Relaxed)), stream) == CuResult::SUCCESS;
    if !recorded {
        debug!("kernel {}: not timed (its events could not be made or its start recorded)", number);
        slot.state.store(FREE, Ordering::Release);
        return None;
    }
    slot.number.store(number as u64, Ordering::Relaxed);
    stats::bump(&STATS.samples_started);
    Some(Sampling(index))
}

/// Makes `slot`'s events in `context` unless it has them (the slot is `BUSY`, the context
/// current). Whether it has them.
fn events_for(slot: &Slot, context: Context) -> bool {
    if slot.context.load(Ordering::Relaxed) == context.0 as u64 {
        return true;
    }
    for made in [&slot.start, &slot.end] {
        let old = made.swap(0, Ordering::Relaxed);
        if old != 0 {
            let _ = cuda::event_destroy(event(old));
        }
    }
    slot.context.store(0, Ordering::Relaxed);
    let (start, end) = (cuda::event_create_timed(), cuda::event_create_timed());
    let (Ok(start), Ok(end)) = (start, end) else {
        // The one made, if any, goes back.
        for made in [start, end].into_iter().flatten() {
            let _ = cuda::event_destroy(made);
        }
        return false;
    };
    slot.start.store(start.0 as u64, Ordering::Relaxed);
    slot.end.store(end.0 as u64, Ordering::Relaxed);
    slot.context.store(context.0 as u64, Ordering::Relaxed);
    true
}

/// After the timed launch: the driver `accepted` it on `stream`, and it named `named`. The
/// sample waits for collection, or is given up (refused, or naming nothing the shim knows).
pub fn after_launch(sampling: Sampling, accepted: bool, stream: Stream, named: &[CuDevicePtr]) {
    let slot = &SAMPLES[sampling.0];
    let ended = accepted
        && !named.is_empty()
        && cuda::in_relaxed_capture_mode(|| cuda::event_record(event(slot.end.load(Ordering::Relaxed)), stream))
            == Some(CuResult::SUCCESS);
    if !ended {
        stats::bump(&STATS.samples_given_up);
        debug!(
            "kernel {}: sample given up at the launch ({})",
            slot.number.load(Ordering::Relaxed),
            if !accepted {
                "the driver refused it"
            } else if named.is_empty() {
                "it named nothing the shim knows"
            } else {
                "its end event was not recorded"
            }
        );
        slot.state.store(FREE, Ordering::Release);
        return;
    }
    let (bytes, t2) = named[..named.len().min(NAMED_KEPT)]
        .iter()
        .filter_map(|&address| registry::named_piece(address))
        .fold((0u64, 0u64), |(bytes, t2), (piece, piece_t2)| (bytes + piece, t2 + piece_t2));
    slot.named_bytes.store(bytes, Ordering::Relaxed);
    slot.named_t2.store(t2, Ordering::Relaxed);
    let vram_rate = cuda::current_device().and_then(cuda::vram_peak_bytes_per_s);
    slot.vram_rate.store(vram_rate.unwrap_or(0), Ordering::Relaxed);
    slot.state.store(PENDING, Ordering::Release);
}

/// Takes the read share of every sample whose end event has passed.
fn collect() {
    for slot in &SAMPLES {
        if slot.state.compare_exchange(PENDING, BUSY, Ordering::Acquire, Ordering::Relaxed).is_err() {
            continue;
        }
        let (start, end) = (event(slot.start.load(Ordering::Relaxed)), event(slot.end.load(Ordering::Relaxed)));
        match cuda::event_query(end) {
            CuResult::NOT_READY => {
                slot.state.store(PENDING, Ordering::Release);
                continue;
            }
            CuResult::SUCCESS => match cuda::event_elapsed_ms(start, end) {
                Ok(ms) => calibrate(slot, f64::from(ms) / 1000.0),
                Err(error) => unmeasured(slot, "cuEventElapsedTime", error.0),
            },
            status => unmeasured(slot, "cuEventQuery", status.0),
        }
        slot.state.store(FREE, Ordering::Release);
    }
}

/// A sample whose time could not be read: `call` answered `status`.
fn unmeasured(slot: &Slot, call: &str, status: i32) {
    stats::bump(&STATS.samples_unmeasured);
    debug!("kernel {}: sample's time unread ({} answered {})", slot.number.load(Ordering::Relaxed), call, status);
}

/// Folds one sample's time (`seconds`) into its kernel's read share, where it bounds it
/// (`read_share::bound`).
fn calibrate(slot: &Slot, seconds: f64) {
    let number = slot.number.load(Ordering::Relaxed) as usize;
    if number == 0 {
        // A function past the numbered ones: no share to keep.
        stats::bump(&STATS.samples_silent);
        return;
    }
    let sample =
        Sample { seconds, named: slot.named_bytes.load(Ordering::Relaxed), t2: slot.named_t2.load(Ordering::Relaxed) };
    let vram = slot.vram_rate.load(Ordering::Relaxed);
    let rates = Rates { link: config::get().link_bytes_per_s, vram: (vram != 0).then_some(vram) };
    let Some(share) = read_share::bound(sample, rates) else {
        stats::bump(&STATS.samples_silent);
        debug!(
            "kernel {}: {:.3} ms over {} bytes it named ({} in T2, device memory at {:?} bytes/s): bounds nothing",
            number,
            seconds * 1000.0,
            sample.named,
            sample.t2,
            rates.vram
        );
        return;
    };
    let measured = ((share * WHOLE_READ as f64) as u64).max(1);
    // The first measure is the share; later ones move it halfway.
    let folded = match SHARES[number].load(Ordering::Relaxed) {
        0 => measured,
        kept => ((kept + measured) / 2).max(1),
    };
    SHARES[number].store(folded, Ordering::Relaxed);
    stats::bump(&STATS.launches_timed);
    debug!(
        "kernel {}: {:.3} ms over {} bytes it named ({} in T2): reads {:.0}% of it at most (kept {:.0}%)",
        number,
        seconds * 1000.0,
        sample.named,
        sample.t2,
        share * 100.0,
        folded as f64 * 100.0 / WHOLE_READ as f64
    );
}
