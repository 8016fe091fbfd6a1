//! GEMM operand staging: a cuBLAS matrix product that reads an operand from T2 and is
//! at least GREENBOOST_STAGE_MIN_WIDTH wide (the dimension that re-reads the operand)
//! first gets that operand copied into a VRAM scratch buffer, on the product's own
//! stream, and reads it from there. A wide GEMM re-reads each tile of an operand once
//! per output tile: over PCIe that costs many times what one copy does (the copy engine
//! moves it at pinned-memcpy speed). The default width, 1, stages one-token products
//! too: the copy engine streams PCIe faster than a product's own zero-copy loads.
//!
//! The product is the one the program asked for, bit for bit: cuBLAS gets the same
//! dimensions, types, leading dimensions, strides and scalars, and an operand pointer
//! with the same offset modulo 256 bytes (its alignment, which cuBLAS's kernel choice
//! depends on), so it picks the same kernel over the same bytes.
//!
//! Scratch buffers are per context, grow to the largest staged product (its operands at
//! most GREENBOOST_STAGE_MAX, then its slices' workspace, a few KiB; counted against the
//! VRAM budget) and are never freed while the
//! process runs. Reuse is ordered: the copy and the product are enqueued on the product's
//! stream, and an event recorded after the product makes a product on another stream
//! wait before it overwrites the scratch. Products on a stream being captured into a
//! CUDA graph are not staged (a captured copy would replay into a scratch that later
//! products reuse): they run zero-copy as before.
//!
//! Slices (`staging_slices`, GREENBOOST_STAGE_SLICES, off by default): a wide product's
//! one staged operand can be copied in slices on a side stream, each ordered after
//! everything enqueued before the product, and the product computed slice by slice as
//! each lands (each slice with the whole product's cuBLASLt algorithm, `lt_algo`).
//!
//! Look-ahead (`lookahead`, GREENBOOST_STAGE_LOOKAHEAD, off by default): the next
//! product's operand copied while this one runs, read only if nothing named its memory in
//! between. Before launch observation an earlier copy ran before writes the shim could
//! not see (an optimizer step, PyTorch reusing a cached block) and read stale bytes (an
//! opt-in prefetch did so on the H200); the launches, copies and memsets it now sees are
//! what the look-ahead checks.
//!
//! Streamed (`staging_streamed`, on by default): an operand larger than
//! GREENBOOST_STAGE_MAX, which would otherwise be read zero-copy, is copied through two
//! halves of the scratch slice by slice, each slice of the product computed with the
//! whole product's algorithm once its shape proved bit-identical.
//!
//! What is done with a product is decided by `stage_plan::plan`; this file carries the
//! plan out: the scratch, its reuse across streams, the copies and the product.
//!
//! Lock: `SCRATCH` (`sys::lock_order`) is held across the asynchronous enqueues of one
//! staged product (copies, product, events) so that threads cannot interleave uses of
//! one scratch buffer.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::cuda::sm_copy::SmCopy;
use crate::gemm::lookahead::{self, LookAhead};
use crate::gemm::product::{Operand, Slice, Slicing};
use crate::gemm::stage_plan::{self, CutPlan, Layout, PlanInput, Settings, StagePlan, Staged, Streamed, ZeroCopy};
use crate::gemm::staging_slices::{self, Copier, Cut, SideCopies, SpanCopy};
use crate::gemm::staging_streamed::{self, Ring, RingEvents, Streams};
use crate::gemm::verdicts::{Comparison, Verdicts};
use crate::gemm::vram_buffer::{self, Refused, VramBuffer};
use crate::memory::budget::{self, VramReservation};
use crate::memory::registry::{self, T2Kind};
use crate::rules::config;
use crate::sys::lock::{const_mutex, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// A context's scratch buffer: where staged operands are read from instead of T2.
///
/// # Invariants
/// `buffer` is VRAM of `context`, counted against the device's budget; `read_done`, when not null,
/// is an event of `context` recorded after the last product that read the scratch, on
/// `last_reader`; `copies` and `ring_events` are `context`'s (its side stream carries
/// sliced and streamed copies); `verdicts` are of products in `context`; `sm_copy`'s
/// kernels are loaded into `context`.
struct Scratch {
    context: Context,
    buffer: VramBuffer,
    read_done: Event,
    last_reader: Option<Stream>,
    copies: SideCopies,
    ring_events: RingEvents,
    verdicts: Verdicts,
    sm_copy: SmCopyState,
    lookahead: LookAhead,
}

/// Whether the SMs can copy in a scratch's context (see `cuda::sm_copy`).
#[derive(Clone, Copy)]
enum SmCopyState {
    Untried,
    Loaded(SmCopy),
    Unavailable,
}

impl Scratch {
    fn new(context: Context) -> Scratch {
        Scratch {
            context,
            buffer: VramBuffer::EMPTY,
            read_done: Event::NULL,
            last_reader: None,
            copies: SideCopies::EMPTY,
            ring_events: RingEvents::EMPTY,
            verdicts: Verdicts::default(),
            sm_copy: SmCopyState::Untried,
            lookahead: LookAhead::new(),
        }
    }

    /// The SMs' copy kernel, loaded into the context (current) on first use.
    fn sm_copy(&mut self) -> Option<SmCopy> {
        if let SmCopyState::Untried = self.sm_copy {
            self.sm_copy = match SmCopy::load() {
                Some(loaded) => SmCopyState::Loaded(loaded),
                None => {
                    refuse_once(format_args!("the SMs' copy kernel does not load: movable T2 is read in place"));
                    SmCopyState::Unavailable
                }
            };
        }
        match self.sm_copy {
            SmCopyState::Loaded(loaded) => Some(loaded),
            SmCopyState::Untried | SmCopyState::Unavailable => None,
        }
    }

    /// How an operand of `kind` is copied here; `None` when it cannot be.
    fn copier(&mut self, kind: T2Kind) -> Option<Copier> {
        match kind {
            T2Kind::Pinned => Some(Copier::CopyEngine),
            T2Kind::Movable => self.sm_copy().map(Copier::Sms),
        }
    }

    fn bytes(&self) -> u64 {
        self.buffer.bytes()
    }

    /// Makes `stream` wait until the scratch may be written: its last reader (when on
    /// another stream) has run.
    fn wait_writable(&self, stream: Stream) -> bool {
        let other_reader = self.last_reader.is_some_and(|last| last != stream);
        self.read_done.is_null()
            || !other_reader
            || cuda::stream_wait_event(stream, self.read_done) == CuResult::SUCCESS
    }

    /// Records that a product on `stream` reads the scratch; without an event, waits for it.
    fn record_read(&mut self, stream: Stream) {
        if self.read_done.is_null() {
            self.read_done = cuda::event_create().unwrap_or(Event::NULL);
        }
        if !self.read_done.is_null() && cuda::event_record(self.read_done, stream) == CuResult::SUCCESS {
            self.last_reader = Some(stream);
        } else {
            // Without an event, order the next writer after this product the hard way.
            cuda::stream_synchronize(stream);
            self.last_reader = None;
        }
    }
}

static SCRATCH: Mutex<rank::Scratch, Vec<Scratch>> = const_mutex(Vec::new());

/// Logged once: why staging stays off in this process.
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

fn refuse_once(why: std::fmt::Arguments<'_>) {
    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
        info!("GEMM staging skipped: {}", why);
    }
}

/// Where a staged product runs: its stream, and the current context and device.
#[derive(Clone, Copy)]
struct Place {
    stream: Stream,
    context: Context,
    device: CuDevice,
}

/// Runs `product` for `operands` as `stage_plan::plan` decides. `product` receives the
/// address each operand is to be read from, and the slice of the output to compute
/// (`None`: all of it); `slicing` says how the hook's product may be cut.
pub fn run_staged(
    stream: Stream,
    operands: [Option<Operand>; 2],
    slicing: Option<Slicing>,
    mut product: impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    budget::note_computing();
    let originals = operands.map(|operand| operand.map(|operand| operand.address));
    let settings = Settings::of(config::get());
    // Measured only as far as the plan can use it: the registry for the candidates, the
    // stream's capture state when one is in T2, the context when it is not captured.
    let in_t2 = stage_plan::candidates(&settings, &operands)
        .map(|candidate| candidate.and_then(|operand| registry::t2_kind(operand.address, operand.bytes)));
    let any_in_t2 = in_t2.iter().any(Option::is_some);
    let capturing = any_in_t2 && cuda::stream_is_capturing(stream) != Ok(false);
    let place = (any_in_t2 && !capturing)
        .then(|| Some(Place { stream, context: cuda::current_context()?, device: cuda::current_device()? }))
        .flatten();
    // Room the scratch wanted and the budget refused, made before its lock is taken
    // (make_room's locks rank below it). The scratch grows into it at once, and the room
    // is let go before the product, whose own allocations may make room in turn.
    let made = place.and_then(|at| vram_buffer::room_for_wanted(at.device));
    let mut scratches = place.map(|_| SCRATCH.lock());
    if let (Some(scratches), Some(at), Some((room, held))) = (scratches.as_deref_mut(), place, made) {
        if let Some(scratch) = entry(scratches, at.context) {
            grow_into(scratch, room, at.device);
        }
        drop(held);
    }
    // The SMs' copy kernel, asked for (and loaded on first use) only for movable T2.
    let sm_copies = match (scratches.as_deref_mut(), place) {
        (Some(scratches), Some(at)) if in_t2.contains(&Some(T2Kind::Movable)) => {
            entry(scratches, at.context).is_some_and(|scratch| scratch.sm_copy().is_some())
        }
        _ => false,
    };
    let current = scratches
        .as_deref()
        .zip(place)
        .and_then(|(scratches, place)| scratches.iter().find(|scratch| scratch.context == place.context));
    let plan = stage_plan::plan(&PlanInput {
        settings,
        operands,
        in_t2,
        sm_copies,
        capturing,
        has_context: place.is_some(),
        slicing: slicing.as_ref(),
        scratch_bytes: current.map_or(0, Scratch::bytes),
        verdicts: current.map(|scratch| &scratch.verdicts),
    });
    let staged = match (plan, scratches.as_deref_mut(), place, slicing.as_ref()) {
        (StagePlan::Whole(layout), Some(scratches), Some(at), _) => {
            stage_into(scratches, &at, &layout, None, &mut product)
        }
        (StagePlan::Sliced(layout, cut), Some(scratches), Some(at), Some(slicing)) => {
            stage_into(scratches, &at, &layout, Some(Sliced { cut, slicing }), &mut product)
        }
        (StagePlan::Streamed(streamed), Some(scratches), Some(at), Some(slicing)) => {
            stream_through(scratches, &at, &streamed, slicing, &mut product)
        }
        (StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed }), ..) => {
            refuse_once(format_args!("an operand needs {} of scratch, above GREENBOOST_STAGE_MAX", Mib(needed)));
            None
        }
        _ => None,
    };
    drop(scratches);
    staged.unwrap_or_else(|| {
        if any_in_t2 {
            count_in_place(&operands, &in_t2);
        }
        product(originals, None)
    })
}

/// Counts a product that reads its operands in T2 (`in_t2`) in place.
fn count_in_place(operands: &[Option<Operand>; 2], in_t2: &[Option<T2Kind>; 2]) {
    let bytes: u64 =
        operands.iter().zip(in_t2).filter(|(_, kind)| kind.is_some()).flat_map(|(o, _)| *o).map(|o| o.bytes).sum();
    stats::bump(&STATS.gemm_in_place);
    STATS.gemm_in_place_bytes.fetch_add(bytes, Ordering::Relaxed);
}

/// Counts a staged product of `bytes` staged bytes.
fn count_staged(bytes: u64) {
    stats::bump(&STATS.gemm_staged);
    STATS.gemm_staged_bytes.fetch_add(bytes, Ordering::Relaxed);
}

/// A sliced plan's cut, with the product's description it was made from.
struct Sliced<'a> {
    cut: CutPlan,
    slicing: &'a Slicing,
}

/// Carries out a whole or sliced plan: each staged operand copied into the scratch, then
/// the product (in `cut`'s slices on the side stream when given; a failed sliced copy
/// falls back to whole copies). `None` (nothing enqueued that a product reads) when the
/// scratch cannot be had or a copy fails: the product then reads in place.
fn stage_into(
    scratches: &mut Vec<Scratch>,
    at: &Place,
    layout: &Layout,
    sliced: Option<Sliced<'_>>,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> Option<CublasStatus> {
    let scratch = scratch_for(scratches, at, layout.total_bytes, layout.operands_bytes)?;
    if !scratch.wait_writable(at.stream) {
        return None;
    }
    let workspace = scratch.buffer.base + layout.operands_bytes;
    let mut cut = sliced.as_ref().map(|sliced| executed(&sliced.cut, workspace));
    let mut placed = layout.staged.map(|staged| staged.map(|staged| staged.operand.address));
    let mut staged_bytes = 0;
    // Look-ahead (`lookahead`): a whole product's one staged operand, maybe copied already.
    let ahead = single_staged(layout).filter(|_| sliced.is_none() && config::get().stage_lookahead);
    let ahead = ahead.filter(|_| scratch.lookahead.mark_before(at.stream));
    let mut read_from_buffer = None;
    for ((target, offset), staged) in placed.iter_mut().zip(layout.offsets).zip(layout.staged) {
        let (Some(offset), Some(Staged { operand, kind })) = (offset, staged) else { continue };
        if let Some((key, _)) = ahead {
            if let Some((address, buffer)) = scratch.lookahead.ready(key, at.stream) {
                *target = Some(address);
                read_from_buffer = Some(buffer);
                staged_bytes += operand.bytes;
                continue;
            }
        }
        let copy = SpanCopy { source: operand.address, target: scratch.buffer.base + offset, bytes: operand.bytes };
        // Loaded before planning when the plan stages movable T2: never `None` here.
        let Some(copier) = scratch.copier(kind) else { return abandoned(scratch, at) };
        if let Some(sliced_copy) = &cut {
            if !scratch.copies.copy_sliced(at.stream, sliced_copy, copy, copier) {
                cut = None;
            }
        }
        if cut.is_none() {
            let status = copier.copy(copy, at.stream);
            if status != CuResult::SUCCESS {
                debug!("staging copy of {} failed (CUDA error {}): zero-copy", Mib(copy.bytes), status.0);
                return abandoned(scratch, at);
            }
        }
        *target = Some(copy.target);
        staged_bytes += operand.bytes;
    }
    let status = match (cut, sliced) {
        (Some(cut), Some(Sliced { cut: CutPlan { verify: false, .. }, slicing })) => {
            stats::bump(&STATS.gemm_sliced);
            staging_slices::run_slices(&scratch.copies, at.stream, &cut, placed, slicing.output, product)
        }
        (Some(cut), Some(Sliced { slicing, .. })) => {
            let copies = &scratch.copies;
            let mut compute = |into: Option<CuDevicePtr>| match into {
                Some(copy) => staging_slices::run_slices(copies, at.stream, &cut, placed, copy, &mut *product),
                // The whole product reads every slice: the last one landed, all have.
                None => {
                    copies.wait_landed(at.stream, cut.slices.count - 1);
                    product(placed, None)
                }
            };
            let (status, comparison) = staging_slices::verify(at.stream, at.device, slicing, &mut compute);
            record_verdict(&mut scratch.verdicts, slicing, &cut, comparison);
            status
        }
        _ => product(placed, None),
    };
    scratch.record_read(at.stream);
    if let Some((key, kind)) = ahead {
        copy_ahead(scratch, at, key, kind, read_from_buffer);
    }
    count_staged(staged_bytes);
    Some(status)
}

/// The one staged operand of a layout, if it has exactly one.
fn single_staged(layout: &Layout) -> Option<(lookahead::Key, T2Kind)> {
    let mut staged = layout.staged.iter().flatten();
    let Staged { operand, kind } = *staged.next()?;
    staged.next().is_none().then_some((lookahead::Key { address: operand.address, bytes: operand.bytes }, kind))
}

/// After a product that read `key` on `at`'s stream (from a look-ahead buffer, or not):
/// notes the read, and copies ahead what came after it last time.
fn copy_ahead(scratch: &mut Scratch, at: &Place, key: lookahead::Key, kind: T2Kind, buffer: Option<usize>) {
    scratch.lookahead.read(key, kind, at.stream, buffer);
    let Some(next) = scratch.lookahead.next(key) else { return };
    let (Some(copier), Some(side)) = (scratch.copier(next.kind), scratch.copies.side_stream()) else { return };
    scratch.lookahead.copy(next, copier, side, at.stream, at.device);
}

/// A staging abandoned after copies into the scratch may have been enqueued on the
/// product's stream: the next writer on another stream is ordered after them as after a
/// product, and the product reads in place (`None`).
fn abandoned(scratch: &mut Scratch, at: &Place) -> Option<CublasStatus> {
    scratch.record_read(at.stream);
    None
}

/// Carries out a streamed plan (`staging_streamed`), each shape verified first like a
/// sliced one. `None` (nothing enqueued) when the scratch or its side stream cannot be
/// had: the product then reads the operand in place.
fn stream_through(
    scratches: &mut Vec<Scratch>,
    at: &Place,
    streamed: &Streamed,
    slicing: &Slicing,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> Option<CublasStatus> {
    let Streamed { source, ring_bytes, workspace, cut: plan } = *streamed;
    let scratch = scratch_for(scratches, at, ring_bytes + workspace, ring_bytes)?;
    let copier = scratch.copier(source.kind)?;
    let ring = Ring { halves: [scratch.buffer.base, scratch.buffer.base + ring_bytes / 2], copier };
    let side = scratch.copies.side_stream()?;
    if !scratch.wait_writable(at.stream) {
        return None;
    }
    let cut = executed(&plan, scratch.buffer.base + ring_bytes);
    let streams = Streams { product: at.stream, side };
    let events = &mut scratch.ring_events;
    let status = if !plan.verify {
        stats::bump(&STATS.gemm_sliced);
        staging_streamed::run_streamed(events, streams, &cut, &source.operand, &ring, slicing.output, product)
    } else {
        let mut compute = |into: Option<CuDevicePtr>| match into {
            Some(copy) => {
                staging_streamed::run_streamed(events, streams, &cut, &source.operand, &ring, copy, &mut *product)
            }
            // The whole product, as the program asked for it: the operand read in place.
            None => product([None, None], None),
        };
        let (status, comparison) = staging_slices::verify(at.stream, at.device, slicing, &mut compute);
        record_verdict(&mut scratch.verdicts, slicing, &cut, comparison);
        status
    };
    scratch.record_read(at.stream);
    count_staged(source.operand.bytes);
    Some(status)
}

/// The cut a plan describes, with its slices' workspace at `workspace`.
fn executed(plan: &CutPlan, workspace: CuDevicePtr) -> Cut {
    Cut { slices: plan.slices, axis: plan.axis, operand: plan.operand, workspace }
}

/// What a shape's verification showed (`None`: nothing compared), remembered and counted.
fn record_verdict(verdicts: &mut Verdicts, slicing: &Slicing, cut: &Cut, comparison: Option<Comparison>) {
    let Some(comparison) = comparison else { return };
    if comparison == Comparison::Differs {
        stats::bump(&STATS.gemm_slices_differed);
    }
    debug!("GEMM slices of {} rows: {:?} to the whole product", cut.slices.per, comparison);
    verdicts.record(&slicing.shape, cut.slices, comparison);
}

/// The context's scratch, grown to at least `needed` bytes, of which the operands take
/// `operands` (grown to a power of two, the workspace after them not: a 128 MiB weight's
/// few KiB of workspace must not double the scratch); `None` (logged once) when VRAM for
/// it does not fit the budget or cannot be had.
fn scratch_for<'a>(scratches: &'a mut Vec<Scratch>, at: &Place, needed: u64, operands: u64) -> Option<&'a mut Scratch> {
    let Place { context, device, .. } = *at;
    let scratch = entry(scratches, context)?;
    if scratch.bytes() >= needed {
        return Some(scratch);
    }
    // Grown to a power of two for the operands (a 128 MiB weight's few KiB of workspace
    // must not double it), at most GREENBOOST_STAGE_MAX.
    let grown = operands.next_power_of_two().min(config::get().stage_max).max(operands) + (needed - operands);
    // The old buffer goes once every product that reads it has run (its copies ran
    // before those products on their streams).
    match scratch.buffer.grow_to(grown, device, &[scratch.read_done], None) {
        Ok(()) => debug!("GEMM staging scratch: {} in VRAM", Mib(grown)),
        Err(Refused::Budget) => {
            // The next product makes room for it where weights loaded before can go.
            vram_buffer::want_room(device, grown - scratch.bytes());
            refuse_once(format_args!(
                "{} of scratch does not fit the VRAM budget (room is made for it where weights loaded before \
                 computing can go to T2)",
                Mib(grown)
            ));
            return None;
        }
        Err(Refused::Driver(error)) => {
            refuse_once(format_args!("no VRAM for {} of scratch ({})", Mib(grown), error));
            return None;
        }
    }
    Some(scratch)
}

/// Grows `scratch` (on `device`, its context current) by the `room` made for it.
fn grow_into(scratch: &mut Scratch, room: VramReservation, device: CuDevice) {
    let grown = scratch.bytes() + room.bytes();
    match scratch.buffer.grow_to(grown, device, &[scratch.read_done], Some(room)) {
        Ok(()) => debug!("GEMM staging scratch: {} in VRAM, in room made for it", Mib(grown)),
        Err(_) => debug!("GEMM staging scratch: {} not had in the room made for it", Mib(grown)),
    }
}

/// The context's scratch record, made (empty) when it has none.
fn entry(scratches: &mut Vec<Scratch>, context: Context) -> Option<&mut Scratch> {
    let index = match scratches.iter().position(|scratch| scratch.context == context) {
        Some(index) => index,
        None => {
            scratches.try_reserve(1).ok()?;
            scratches.push(Scratch::new(context));
            scratches.len() - 1
        }
    };
    scratches.get_mut(index)
}
