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
//! Scratch buffers are per context, grow to the largest staged product (at most
//! GREENBOOST_STAGE_MAX, counted against the VRAM budget) and are never freed while the
//! process runs. Reuse is ordered: the copy and the product are enqueued on the product's
//! stream, and an event recorded after the product makes a product on another stream
//! wait before it overwrites the scratch. Products on a stream being captured into a
//! CUDA graph are not staged (a captured copy would replay into a scratch that later
//! products reuse): they run zero-copy as before.
//!
//! Prefetch (GREENBOOST_STAGE_PREFETCH, off by default): the scratch has two slots, and
//! while a product computes from one, the operand that followed it last time (`prefetch`)
//! is copied into the other on a side stream, so that the copy engine and the product
//! overlap. That copy is ordered after everything the program enqueued before this
//! product, and after the last product that read the slot, but not after what the
//! program enqueues between this product and the next: a write to the next operand in
//! between (an optimizer step, an unhooked kernel) would not be seen. Hence opt-in, for
//! programs that do not write their T2 operands while running (inference). A product
//! whose operand is not the one prefetched copies it as without prefetch.
//!
//! Lock: `SCRATCH` is held across the asynchronous enqueues of one staged product (copies,
//! product, events) so that threads cannot interleave uses of one scratch buffer; it is
//! taken with no other lock held, and under it only the registry's (see lib.rs). The fork
//! handlers do not take it: a child forked after CUDA use never stages (the shim steps
//! aside there).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::budget::{self, VramCharge};
use crate::config;
use crate::cuda;
use crate::ffi::*;
use crate::lock::{const_mutex, Mutex};
use crate::log::Mib;
use crate::prefetch::{OperandKey, ReadOrder};
use crate::registry;
use crate::staging_slices::{self, Comparison, Decision, Plan, SideCopies, Slice, SliceAxis, Slicing, Verdicts};
use crate::stats::{self, STATS};

/// Alignment a staged operand keeps (bytes): cuBLAS picks kernels by pointer alignment,
/// at most 256 bytes matters.
const KEPT_ALIGNMENT: u64 = 256;

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

/// Where an operand is read from instead of T2: one slot of a context's scratch.
///
/// # Invariants
/// `read_done`, when not null, is an event of the scratch's context recorded after the
/// last product that read this slot, on `last_reader`; `ahead`, when set, is an operand a
/// prefetch copies into this slot (at its address modulo `KEPT_ALIGNMENT`) and `copied`
/// an event recorded after that copy on the scratch's side stream.
struct Slot {
    read_done: Event,
    last_reader: Option<Stream>,
    ahead: Option<OperandKey>,
    copied: Event,
}

impl Slot {
    const EMPTY: Slot = Slot { read_done: Event::NULL, last_reader: None, ahead: None, copied: Event::NULL };

    /// Makes `stream` wait until this slot may be written: its last reader (when on
    /// another stream) and a prefetch copy into it have finished.
    fn wait_writable(&self, stream: Stream) -> bool {
        let other_reader = self.last_reader.is_some_and(|last| last != stream);
        let reader_ok = self.read_done.is_null()
            || !other_reader
            || cuda::stream_wait_event(stream, self.read_done) == CuResult::SUCCESS;
        let copy_ok = self.ahead.is_none() || cuda::stream_wait_event(stream, self.copied) == CuResult::SUCCESS;
        reader_ok && copy_ok
    }

    /// Records that a product on `stream` reads the slot; without an event, waits for it.
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
        self.ahead = None;
    }

    /// Waits until nothing reads or writes the slot any more.
    fn quiesce(&mut self) {
        for event in [self.read_done, self.copied] {
            if !event.is_null() {
                cuda::event_synchronize(event);
            }
        }
        self.ahead = None;
    }
}

/// A context's scratch buffer.
///
/// # Invariants
/// `base` is `charge.bytes()` of VRAM from the real cuMemAlloc in `context` (none while
/// `charge` is `None`), counted against the device's budget, cut into slots of
/// `slot_bytes` (one, or two with prefetch); `copies` are `context`'s, its side stream
/// carrying prefetch and sliced copies; `verdicts` are of products in `context`.
struct Scratch {
    context: Context,
    base: CuDevicePtr,
    charge: Option<VramCharge>,
    slot_bytes: u64,
    slots: [Slot; 2],
    /// The slot the next product that finds no prefetch of its operand uses.
    next: usize,
    copies: SideCopies,
    order: ReadOrder,
    verdicts: Verdicts,
}

impl Scratch {
    fn slot_base(&self, index: usize) -> CuDevicePtr {
        self.base + index as u64 * self.slot_bytes
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
    let slot_count = if config.stage_prefetch { 2 } else { 1 };
    if needed.saturating_mul(slot_count) > config.stage_max {
        refuse_once(format_args!(
            "an operand needs {} of scratch ({} slots), above GREENBOOST_STAGE_MAX",
            Mib(needed),
            slot_count
        ));
        return product(originals, None);
    }
    // Only a product with one staged operand is prefetched for, and predicts the next.
    let key = match wanted {
        [Some(operand), None] | [None, Some(operand)] => Some((operand.address, operand.bytes)),
        _ => None,
    };
    let mut scratches = SCRATCH.lock();
    let Some(scratch) = scratch_for(&mut scratches, context, device, needed, slot_count) else {
        drop(scratches);
        return product(originals, None);
    };
    // The slot a prefetch already filled with this operand, else the next one.
    let prefetched = key.and_then(|key| scratch.slots.iter().position(|slot| slot.ahead == Some(key)));
    let index = prefetched.unwrap_or(scratch.next);
    let base = scratch.slot_base(index);
    let mut placed = originals;
    let mut staged_bytes = 0;
    // A prefetched slot is read once its copy has run; any other is written first.
    let ready = match prefetched {
        Some(_) => cuda::stream_wait_event(stream, scratch.slots[index].copied) == CuResult::SUCCESS,
        None => scratch.slots[index].wait_writable(stream),
    };
    if !ready {
        drop(scratches);
        return product(originals, None);
    }
    // A wide product copying one operand copies it in slices, when its shape allows.
    let mut sliced = match (prefetched, slicing) {
        (None, Some(slicing)) => slices_for(&wanted, &slicing, &scratch.verdicts, config.stage_slices),
        _ => None,
    };
    for ((target, offset), operand) in placed.iter_mut().zip(offsets).zip(wanted) {
        let (Some(offset), Some(operand)) = (offset, operand) else { continue };
        if let Some((plan, axis, ..)) = sliced {
            let copy = (operand.address, base + offset, operand.bytes);
            if !scratch.copies.copy_sliced(stream, plan, axis, copy) {
                sliced = None;
            }
        }
        if prefetched.is_none() && sliced.is_none() {
            let status = cuda::memcpy_async(base + offset, operand.address, operand.bytes, stream);
            if status != CuResult::SUCCESS {
                // Nothing was overwritten that a product still reads: the copies run on
                // this stream, after the waits above. The product reads in place.
                debug!("staging copy of {} failed (CUDA error {}): zero-copy", Mib(operand.bytes), status.0);
                drop(scratches);
                return product(originals, None);
            }
        }
        *target = Some(base + offset);
        staged_bytes += operand.bytes;
    }
    if prefetched.is_some() {
        stats::bump(&STATS.gemm_prefetched);
    }
    // Everything the program enqueued so far, and this product's copy, precede the
    // prefetch below; the product itself runs beside it.
    let prefetch = if config.stage_prefetch { key.and_then(|key| scratch.order.read(key)) } else { None };
    if let Some(next) = prefetch {
        prefetch_into(scratch, 1 - index, next, stream);
    }
    let status = match (sliced, slicing) {
        (Some((plan, axis, operand, decision)), Some(slicing)) => {
            let cut = (plan, axis, operand);
            if decision == Decision::Slice {
                stats::bump(&STATS.gemm_sliced);
                staging_slices::run_slices(&scratch.copies, stream, cut, placed, slicing.output, &mut product)
            } else {
                let output = (slicing.output, slicing.output_bytes, slicing.output_element);
                let (status, comparison) =
                    staging_slices::verify(&scratch.copies, stream, device, cut, placed, output, &mut product);
                if let Some(comparison) = comparison {
                    if comparison == Comparison::Differs {
                        stats::bump(&STATS.gemm_slices_differed);
                    }
                    debug!("GEMM slices of {} rows: {:?} to the whole product", plan.per, comparison);
                    scratch.verdicts.record(&slicing.shape, plan, comparison);
                }
                status
            }
        }
        _ => product(placed, None),
    };
    scratch.slots[index].record_read(stream);
    scratch.next = if slot_count == 2 { 1 - index } else { 0 };
    drop(scratches);
    stats::bump(&STATS.gemm_staged);
    STATS.gemm_staged_bytes.fetch_add(staged_bytes, Ordering::Relaxed);
    status
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

/// Copies `next` into slot `index` on the side stream, after everything enqueued on
/// `stream` so far and after the slot's last reader; nothing when it does not fit the
/// slot, is no longer T2, was allocated while the program computed (activations and KV
/// caches are written between products: an early copy of them would be stale), or a
/// step fails (the product that reads it then copies).
fn prefetch_into(scratch: &mut Scratch, index: usize, next: OperandKey, stream: Stream) {
    let (address, bytes) = next;
    let offset = address % KEPT_ALIGNMENT;
    if offset + bytes > scratch.slot_bytes
        || !registry::touches_pinned_t2(address, bytes)
        || !registry::allocated_before_computing(address, bytes)
    {
        return;
    }
    let Some(side) = scratch.copies.side_stream() else { return };
    let base = scratch.slot_base(index);
    let slot = &mut scratch.slots[index];
    if slot.copied.is_null() {
        slot.copied = cuda::event_create().unwrap_or(Event::NULL);
    }
    if slot.copied.is_null() {
        return;
    }
    // A stale prefetch in the slot is overwritten: a product that wanted it copies its
    // operand itself, and nothing reads it before this copy's event.
    slot.ahead = None;
    let ordered = cuda::event_record(slot.copied, stream) == CuResult::SUCCESS
        && cuda::stream_wait_event(side, slot.copied) == CuResult::SUCCESS
        && (slot.read_done.is_null() || cuda::stream_wait_event(side, slot.read_done) == CuResult::SUCCESS);
    if !ordered || cuda::memcpy_async(base + offset, address, bytes, side) != CuResult::SUCCESS {
        return;
    }
    if cuda::event_record(slot.copied, side) == CuResult::SUCCESS {
        slot.ahead = Some(next);
    } else {
        // No event marks the copy's end: nothing may write the slot before it ends.
        cuda::stream_synchronize(side);
    }
}

/// The context's scratch, grown to `slot_count` slots of at least `needed` bytes; `None`
/// (logged once) when VRAM for it does not fit the budget or cannot be had.
fn scratch_for(
    scratches: &mut Vec<Scratch>,
    context: Context,
    device: CuDevice,
    needed: u64,
    slot_count: u64,
) -> Option<&mut Scratch> {
    let index = match scratches.iter().position(|scratch| scratch.context == context) {
        Some(index) => index,
        None => {
            scratches.try_reserve(1).ok()?;
            scratches.push(Scratch {
                context,
                base: 0,
                charge: None,
                slot_bytes: 0,
                slots: [Slot::EMPTY, Slot::EMPTY],
                next: 0,
                copies: SideCopies::EMPTY,
                order: ReadOrder::default(),
                verdicts: Verdicts::default(),
            });
            scratches.len() - 1
        }
    };
    let scratch = scratches.get_mut(index)?;
    if scratch.slot_bytes >= needed {
        return Some(scratch);
    }
    // Grow: the growth counts against the budget like any allocation (the old buffer's
    // charge becomes the new one's).
    let slot_bytes = needed.next_power_of_two().min(config::get().stage_max / slot_count).max(needed);
    let grown = slot_bytes * slot_count;
    let size = scratch.charge.as_ref().map_or(0, VramCharge::bytes);
    let Some(growth) = budget::reserve_vram(grown.saturating_sub(size), device) else {
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
        // The old buffer goes once every product and copy that uses it has run.
        scratch.slots.iter_mut().for_each(Slot::quiesce);
        if scratch.slots.iter().all(|slot| slot.read_done.is_null()) {
            cuda::ctx_synchronize();
        }
        cuda::mem_free(scratch.base);
    }
    debug!("GEMM staging scratch: {} slot(s) of {} in VRAM", slot_count, Mib(slot_bytes));
    scratch.base = base;
    scratch.slot_bytes = slot_bytes;
    scratch.next = 0;
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
