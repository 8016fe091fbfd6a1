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
//! each lands (each slice with the whole product's cuBLASLt algorithm, `lt_algo`). No copy is ever issued before the product that reads it: an earlier copy
//! (a prefetch of the next product's operand) would run before writes the shim cannot
//! see — unhooked kernels, an optimizer step, PyTorch reusing a cached block for
//! activations — and read stale bytes (an opt-in prefetch did so on the H200).
//!
//! Streamed (`staging_streamed`, on by default): an operand larger than
//! GREENBOOST_STAGE_MAX, which would otherwise be read zero-copy, is copied through two
//! halves of the scratch slice by slice, each slice of the product computed with the
//! whole product's algorithm once its shape proved bit-identical.
//!
//! Lock: `SCRATCH` is held across the asynchronous enqueues of one staged product (copies,
//! product, events) so that threads cannot interleave uses of one scratch buffer; it is
//! taken with no other lock held, and under it only the registry's (see lib.rs). The fork
//! handlers do not take it: a child forked after CUDA use never stages (the shim steps
//! aside there).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::gemm::staging_slices::{
    self, Comparison, Decision, Plan, Shape, SideCopies, Slice, SliceAxis, Slicing, Verdicts,
};
use crate::gemm::staging_streamed::{self, Ring, RingEvents};
use crate::memory::budget::{self, VramCharge};
use crate::memory::registry;
use crate::rules::config;
use crate::sys::lock::{const_mutex, Mutex};
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// Alignment a staged operand keeps (bytes): cuBLAS picks kernels by pointer alignment,
/// at most 256 bytes matters.
const KEPT_ALIGNMENT: u64 = 256;

/// Each half of a scratch grown for a streamed operand holds this much: on the H200 copies
/// of 64 MiB run at the link's rate, and an 8B model's other staged products already grow
/// the scratch to 128 MiB. A scratch already holding two halves of `MIN_STREAM_HALF` is
/// used as it is.
const STREAM_HALF: u64 = 64 << 20;
const MIN_STREAM_HALF: u64 = 8 << 20;

/// Bytes per element of a `cudaDataType_t`, for the types cuBLAS multiplies; `None`
/// for sub-byte and unknown types (never staged).
pub fn element_bytes(data_type: c_int) -> Option<u64> {
    Some(match data_type {
        // R_8I, R_8U, R_8F_E4M3, R_8F_E5M2, R_8F_UE8M0
        3 | 8 | 28 | 29 | 30 => 1,
        // R_16F, R_16BF, C_8I, C_8U, R_16I, R_16U
        2 | 14 | 7 | 9 | 20 | 22 => 2,
        // R_32F, C_16F, C_16BF, R_32I, R_32U, C_16I, C_16U
        0 | 6 | 15 | 10 | 12 | 21 | 23 => 4,
        // R_64F, C_32F, C_32I, C_32U, R_64I, R_64U
        1 | 4 | 11 | 13 | 24 | 26 => 8,
        // C_64F, C_64I, C_64U
        5 | 25 | 27 => 16,
        _ => return None,
    })
}

/// Bytes spanned by a column-major `rows` x `cols` matrix with leading dimension `ld`
/// repeated `batch` times `stride` elements apart; `None` when cuBLAS would refuse the
/// shape (it then answers the program itself) or the span does not fit 64 bits.
pub fn span_bytes(rows: i64, cols: i64, ld: i64, batch: i64, stride: i64, element: u64) -> Option<u64> {
    if rows <= 0 || cols <= 0 || batch <= 0 || ld < rows || stride < 0 {
        return None;
    }
    let matrix = ld.checked_mul(cols - 1)?.checked_add(rows)?;
    let elements = stride.checked_mul(batch - 1)?.checked_add(matrix)?;
    u64::try_from(elements).ok()?.checked_mul(element)
}

/// One operand of a product: where it is, how many bytes it spans, and the width of the
/// product that re-reads it.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub address: CuDevicePtr,
    pub bytes: u64,
    pub width: i64,
}

impl Operand {
    /// The operand of a column-major product stored `rows` x `cols` (as the program
    /// stored it, before any transpose).
    pub fn new(address: *const c_void, stored: Option<u64>, width: i64) -> Option<Operand> {
        Some(Operand { address: address as CuDevicePtr, bytes: stored?, width })
    }

    fn wants_staging(&self, min_width: u64) -> bool {
        self.address != 0
            && self.bytes != 0
            && u64::try_from(self.width).is_ok_and(|width| width >= min_width)
            && registry::touches_pinned_t2(self.address, self.bytes)
    }
}

/// Whether a product of `operands` may be computed in slices, so that the hooks describe
/// its slices (`cublas_gemm::gemm_slicing`, a cuBLAS query and a cuBLASLt lookup): with
/// pipelined staging asked for (GREENBOOST_STAGE_SLICES), or when an operand staging wants
/// is larger than GREENBOOST_STAGE_MAX — streamed through the scratch (`stream_through`),
/// by default, as the alternative is reading it zero-copy.
pub(super) fn may_cut(operands: &[Option<Operand>; 2]) -> bool {
    let config = config::get();
    let too_large =
        |operand: &Operand| operand.bytes > config.stage_max && operand.wants_staging(config.stage_min_width);
    config.staging && (config.stage_slices > 1 || operands.iter().flatten().any(too_large))
}

/// A context's scratch buffer: where staged operands are read from instead of T2.
///
/// # Invariants
/// `base` is `charge.bytes()` of VRAM from the real cuMemAlloc in `context` (none while
/// `charge` is `None`), counted against the device's budget; `read_done`, when not null,
/// is an event of `context` recorded after the last product that read the scratch, on
/// `last_reader`; `copies` and `ring_events` are `context`'s (its side stream carries
/// sliced and streamed copies); `verdicts` are of products in `context`.
struct Scratch {
    context: Context,
    base: CuDevicePtr,
    charge: Option<VramCharge>,
    read_done: Event,
    last_reader: Option<Stream>,
    copies: SideCopies,
    ring_events: RingEvents,
    verdicts: Verdicts,
}

impl Scratch {
    fn bytes(&self) -> u64 {
        self.charge.as_ref().map_or(0, VramCharge::bytes)
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

static SCRATCH: Mutex<Vec<Scratch>> = const_mutex(Vec::new());

/// Logged once: why staging stays off in this process.
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

fn refuse_once(why: std::fmt::Arguments<'_>) {
    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
        info!("GEMM staging skipped: {}", why);
    }
}

/// Runs `product` for `operands`, staging those that need it. `product` receives the
/// address each operand is to be read from, and the slice of the output to compute
/// (`None`: all of it); `slicing` says how the hook's product may be cut.
pub fn run_staged(
    stream: Stream,
    operands: [Option<Operand>; 2],
    slicing: Option<Slicing>,
    mut product: impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    budget::note_computing();
    let config = config::get();
    let originals = operands.map(|operand| operand.map(|operand| operand.address));
    if !config.staging {
        return product(originals, None);
    }
    let wanted = operands.map(|operand| operand.filter(|operand| operand.wants_staging(config.stage_min_width)));
    if wanted.iter().all(Option::is_none) || cuda::stream_is_capturing(stream) != Ok(false) {
        return product(originals, None);
    }
    let (Some(context), Some(device)) = (cuda::current_context(), cuda::current_device()) else {
        return product(originals, None);
    };
    // Each staged operand at its own alignment offset, one after the other.
    let mut offsets: [Option<u64>; 2] = [None, None];
    let mut needed: u64 = 0;
    for (slot, operand) in offsets.iter_mut().zip(wanted.iter()) {
        if let Some(operand) = operand {
            let start = needed + operand.address % KEPT_ALIGNMENT;
            *slot = Some(start);
            needed = (start + operand.bytes).div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT;
        }
    }
    // The workspace of slices run with the whole product's algorithm, after the operands.
    let workspace_offset = needed;
    let workspace = slicing.and_then(|slicing| slicing.whole_algorithm_workspace).unwrap_or(0);
    needed += workspace.div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT;
    // The operands are held to the limit; their slices' workspace (KiB) comes on top.
    if workspace_offset > config.stage_max {
        if let Some(status) = stream_through((stream, device, context), &wanted, slicing, &mut product) {
            return status;
        }
        refuse_once(format_args!("an operand needs {} of scratch, above GREENBOOST_STAGE_MAX", Mib(workspace_offset)));
        return product(originals, None);
    }
    let mut scratches = SCRATCH.lock();
    let Some(scratch) = scratch_for(&mut scratches, context, device, (needed, workspace_offset)) else {
        drop(scratches);
        return product(originals, None);
    };
    if !scratch.wait_writable(stream) {
        drop(scratches);
        return product(originals, None);
    }
    // A wide product copying one operand copies it in slices, when its shape allows.
    let mut sliced = slicing.and_then(|slicing| slices_for(&wanted, &slicing, &scratch.verdicts, config.stage_slices));
    let mut placed = originals;
    let mut staged_bytes = 0;
    for ((target, offset), operand) in placed.iter_mut().zip(offsets).zip(wanted) {
        let (Some(offset), Some(operand)) = (offset, operand) else { continue };
        let destination = scratch.base + offset;
        if let Some((plan, axis, ..)) = sliced {
            if !scratch.copies.copy_sliced(stream, plan, axis, (operand.address, destination, operand.bytes)) {
                sliced = None;
            }
        }
        if sliced.is_none() {
            let status = cuda::memcpy_async(destination, operand.address, operand.bytes, stream);
            if status != CuResult::SUCCESS {
                // Nothing was overwritten that a product still reads: the copies run on
                // this stream, after the wait above. The product reads in place.
                debug!("staging copy of {} failed (CUDA error {}): zero-copy", Mib(operand.bytes), status.0);
                drop(scratches);
                return product(originals, None);
            }
        }
        *target = Some(destination);
        staged_bytes += operand.bytes;
    }
    let status = match (sliced, slicing) {
        (Some((plan, axis, operand, decision)), Some(slicing)) => {
            let cut = (plan, axis, operand, scratch.base + workspace_offset);
            if decision == Decision::Slice {
                stats::bump(&STATS.gemm_sliced);
                staging_slices::run_slices(&scratch.copies, stream, cut, placed, slicing.output, &mut product)
            } else {
                let output = (slicing.output, slicing.output_bytes, slicing.output_element);
                let copies = &scratch.copies;
                let mut compute = |into: Option<CuDevicePtr>| match into {
                    Some(copy) => staging_slices::run_slices(copies, stream, cut, placed, copy, &mut product),
                    // The whole product reads every slice: the last one landed, all have.
                    None => {
                        copies.wait_landed(stream, plan.count - 1);
                        product(placed, None)
                    }
                };
                let (status, comparison) = staging_slices::verify(stream, device, output, &mut compute);
                record_verdict(&mut scratch.verdicts, (&slicing.shape, plan), comparison);
                status
            }
        }
        _ => product(placed, None),
    };
    scratch.record_read(stream);
    drop(scratches);
    stats::bump(&STATS.gemm_staged);
    STATS.gemm_staged_bytes.fetch_add(staged_bytes, Ordering::Relaxed);
    status
}

/// Streamed staging (`staging_streamed`) of a product's one operand too large for the
/// scratch (by default; GREENBOOST_STAGE_SLICES does not matter): with the whole
/// product's algorithm at hand, through two halves of the scratch (grown, when it is
/// small, to GREENBOOST_STAGE_MAX or 2 x 64 MiB, whichever is less); each shape verified
/// first like a sliced one. `None` (nothing enqueued) when it does not apply: the product
/// then reads the operand in place.
fn stream_through(
    (stream, device, context): (Stream, CuDevice, Context),
    wanted: &[Option<Operand>; 2],
    slicing: Option<Slicing>,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> Option<CublasStatus> {
    let config = config::get();
    let slicing = slicing?;
    let workspace = slicing.whole_algorithm_workspace?.div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT;
    let (operand, source) = match wanted {
        [Some(source), None] => (0, *source),
        [None, Some(source)] => (1, *source),
        _ => return None,
    };
    let axis = slicing.axes[operand]?;
    let mut scratches = SCRATCH.lock();
    // The scratch as it is when it holds two halves of a few MiB (the other staged
    // products grew it: streaming takes no more VRAM), else grown for two full halves —
    // only once the plan says the operand can be streamed and its shape may be.
    let existing = scratches.iter().find(|scratch| scratch.context == context);
    let ring_bytes = match existing.map_or(0, Scratch::bytes).checked_sub(workspace) {
        Some(room) if room >= 2 * MIN_STREAM_HALF => room,
        _ => config.stage_max.min(2 * STREAM_HALF),
    } / (2 * KEPT_ALIGNMENT)
        * (2 * KEPT_ALIGNMENT);
    let plan = staging_streamed::plan(ring_bytes / 2, axis.length, axis.operand_step)?;
    if existing.is_some_and(|scratch| scratch.verdicts.decide(&slicing.shape, plan) == Decision::Whole) {
        return None;
    }
    let scratch = scratch_for(&mut scratches, context, device, (ring_bytes + workspace, ring_bytes))?;
    let ring = Ring { halves: [scratch.base, scratch.base + ring_bytes / 2] };
    let decision = scratch.verdicts.decide(&slicing.shape, plan);
    let side = scratch.copies.side_stream()?;
    if decision == Decision::Whole || !scratch.wait_writable(stream) {
        return None;
    }
    let cut = (plan, axis, operand, scratch.base + ring_bytes);
    // The other operand is the program's own; the streamed one is set slice by slice.
    let placed = [None, None];
    let events = &mut scratch.ring_events;
    let source_span = (source.address, source.bytes);
    let status = if decision == Decision::Slice {
        stats::bump(&STATS.gemm_sliced);
        staging_streamed::run_streamed(events, (stream, side), cut, source_span, &ring, placed, slicing.output, product)
    } else {
        let output = (slicing.output, slicing.output_bytes, slicing.output_element);
        let mut compute = |into: Option<CuDevicePtr>| match into {
            Some(copy) => staging_streamed::run_streamed(
                events,
                (stream, side),
                cut,
                source_span,
                &ring,
                placed,
                copy,
                &mut *product,
            ),
            // The whole product, as the program asked for it: the operand read in place.
            None => product([None, None], None),
        };
        let (status, comparison) = staging_slices::verify(stream, device, output, &mut compute);
        record_verdict(&mut scratch.verdicts, (&slicing.shape, plan), comparison);
        status
    };
    scratch.record_read(stream);
    drop(scratches);
    stats::bump(&STATS.gemm_staged);
    STATS.gemm_staged_bytes.fetch_add(source.bytes, Ordering::Relaxed);
    Some(status)
}

/// What a shape's verification showed (`None`: nothing compared), remembered and counted.
fn record_verdict(verdicts: &mut Verdicts, (shape, plan): (&Shape, Plan), comparison: Option<Comparison>) {
    let Some(comparison) = comparison else { return };
    if comparison == Comparison::Differs {
        stats::bump(&STATS.gemm_slices_differed);
    }
    debug!("GEMM slices of {} rows: {:?} to the whole product", plan.per, comparison);
    verdicts.record(shape, plan, comparison);
}

/// How to slice a product whose one copied operand is wide enough: the plan, the axis,
/// which operand, and whether its shape is sliced or verified first; `None`: whole.
fn slices_for(
    wanted: &[Option<Operand>; 2],
    slicing: &Slicing,
    verdicts: &Verdicts,
    slices: u64,
) -> Option<(Plan, SliceAxis, usize, Decision)> {
    let operand = match wanted {
        [Some(_), None] => 0,
        [None, Some(_)] => 1,
        _ => return None,
    };
    if wanted[operand]?.width < staging_slices::MIN_SLICED_WIDTH {
        return None;
    }
    let axis = slicing.axes[operand]?;
    let plan = Plan::new(axis.length, axis.operand_step, slices)?;
    match verdicts.decide(&slicing.shape, plan) {
        Decision::Whole => None,
        decision => Some((plan, axis, operand, decision)),
    }
}

/// The context's scratch, grown to at least `needed` bytes, of which the operands take
/// `operands` (grown to a power of two, the workspace after them not: a 128 MiB weight's
/// few KiB of workspace must not double the scratch); `None` (logged once) when VRAM for
/// it does not fit the budget or cannot be had.
fn scratch_for(
    scratches: &mut Vec<Scratch>,
    context: Context,
    device: CuDevice,
    (needed, operands): (u64, u64),
) -> Option<&mut Scratch> {
    let index = match scratches.iter().position(|scratch| scratch.context == context) {
        Some(index) => index,
        None => {
            scratches.try_reserve(1).ok()?;
            scratches.push(Scratch {
                context,
                base: 0,
                charge: None,
                read_done: Event::NULL,
                last_reader: None,
                copies: SideCopies::EMPTY,
                ring_events: RingEvents::EMPTY,
                verdicts: Verdicts::default(),
            });
            scratches.len() - 1
        }
    };
    let scratch = scratches.get_mut(index)?;
    if scratch.bytes() >= needed {
        return Some(scratch);
    }
    // Grow: the growth counts against the budget like any allocation (the old buffer's
    // charge becomes the new one's).
    let grown = operands.next_power_of_two().min(config::get().stage_max).max(operands) + (needed - operands);
    let Some(growth) = budget::reserve_vram(grown.saturating_sub(scratch.bytes()), device) else {
        refuse_once(format_args!("{} of scratch does not fit the VRAM budget", Mib(grown)));
        return None;
    };
    let base = match cuda::mem_alloc(grown) {
        Ok(base) => base,
        Err(error) => {
            refuse_once(format_args!("no VRAM for {} of scratch ({})", Mib(grown), error));
            return None;
        }
    };
    if scratch.base != 0 {
        // The old buffer goes once every product that reads it has run (its copies ran
        // before those products on their streams).
        if scratch.read_done.is_null() || cuda::event_synchronize(scratch.read_done) != CuResult::SUCCESS {
            cuda::ctx_synchronize();
        }
        cuda::mem_free(scratch.base);
    }
    debug!("GEMM staging scratch: {} in VRAM", Mib(grown));
    scratch.base = base;
    scratch.charge = Some(match scratch.charge.take() {
        Some(mut charge) => {
            charge.absorb(growth);
            charge
        }
        None => growth.commit(),
    });
    Some(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_exactly_what_cublas_reads() {
        // 4 x 3 column-major, ld 4: 12 elements.
        assert_eq!(span_bytes(4, 3, 4, 1, 0, 2), Some(24));
        // ld 6: the last column ends at 6 * 2 + 4.
        assert_eq!(span_bytes(4, 3, 6, 1, 0, 2), Some(32));
        // A batch of 3, 20 elements apart; stride 0 broadcasts one matrix.
        assert_eq!(span_bytes(4, 3, 6, 3, 20, 1), Some(56));
        assert_eq!(span_bytes(4, 3, 6, 3, 0, 1), Some(16));
        // Shapes cuBLAS refuses are never staged.
        assert_eq!(span_bytes(4, 3, 3, 1, 0, 2), None);
        assert_eq!(span_bytes(0, 3, 4, 1, 0, 2), None);
        assert_eq!(span_bytes(4, 3, 4, 2, -1, 2), None);
        assert_eq!(span_bytes(i64::MAX, 3, i64::MAX, 1, 0, 2), None);
    }
}
