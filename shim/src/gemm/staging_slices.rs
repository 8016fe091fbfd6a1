//! Pipelined staging: a wide product's staged operand is copied in slices along the
//! dimension the output follows (a weight's rows), on a side stream, and the product is
//! computed slice by slice as each lands, so that the copy engine moves slice i + 1
//! while the SMs compute slice i. Correct by construction: every slice copy is ordered
//! after everything the program enqueued before the product (an event recorded on the
//! product's stream), and a product never writes its own operands.
//!
//! A slice is another call (fewer rows or columns): through cuBLASLt with the whole
//! product's own algorithm where cuBLASLt has one for the call (`lt_algo`), else to cuBLAS
//! for the slice's shape, for which cuBLAS may pick another kernel (another tile, a split
//! of the inner dimension) that rounds otherwise. Either way the first product of each
//! shape is computed both ways, the sliced result into a
//! copy of the output, and the two are compared bit for bit on the host; a shape is
//! sliced only once its sliced result was identical (on data that shows it: most output
//! elements nonzero), and never once it differed.

use crate::cuda;
use crate::cuda::ffi::*;
use crate::cuda::sm_copy::SmCopy;
use crate::gemm::product::{Slice, SliceAxis, Slicing};
use crate::gemm::slice_plan::{SlicePlan, MAX_SLICES};
use crate::gemm::verdicts::{compare, Comparison};
use crate::memory::budget;

/// How one product is cut, as the executor runs it: the slices, the axis, which operand,
/// and the VRAM workspace its slices may use.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cut {
    pub(super) slices: SlicePlan,
    pub(super) axis: SliceAxis,
    pub(super) operand: usize,
    pub(super) workspace: CuDevicePtr,
}

/// What makes a staging copy: the copy engine (pinned T2), or the SMs (movable T2,
/// which the copy engine reads slowly; see `cuda::sm_copy`).
#[derive(Clone, Copy)]
pub(super) enum Copier {
    CopyEngine,
    Sms(SmCopy),
}

impl Copier {
    /// Enqueues `copy` on `stream`.
    pub(super) fn copy(self, copy: SpanCopy, stream: Stream) -> CuResult {
        match self {
            Copier::CopyEngine => cuda::memcpy_async(copy.target, copy.source, copy.bytes, stream),
            Copier::Sms(kernels) => kernels.copy(copy.target, copy.source, copy.bytes, stream),
        }
    }
}

/// One copy staging makes: `bytes` from `source` to `target`.
#[derive(Clone, Copy, Debug)]
pub(super) struct SpanCopy {
    pub(super) source: CuDevicePtr,
    pub(super) target: CuDevicePtr,
    pub(super) bytes: u64,
}

/// The side stream and events of a context's sliced copies.
///
/// # Invariants
/// `side`, when not null, is a non-blocking stream of the scratch's context; `enqueued`
/// and each of `landed` are events of that context (null until first needed).
pub(super) struct SideCopies {
    pub(super) side: Stream,
    enqueued: Event,
    landed: [Event; MAX_SLICES],
}

impl SideCopies {
    pub(super) const EMPTY: SideCopies =
        SideCopies { side: Stream::NULL, enqueued: Event::NULL, landed: [Event::NULL; MAX_SLICES] };

    /// The side stream, made on first use in the current context.
    pub(super) fn side_stream(&mut self) -> Option<Stream> {
        if self.side.is_null() {
            self.side = cuda::stream_create_non_blocking().unwrap_or(Stream::NULL);
        }
        (!self.side.is_null()).then_some(self.side)
    }

    fn events(&mut self, count: usize) -> bool {
        for event in std::iter::once(&mut self.enqueued).chain(self.landed.iter_mut().take(count)) {
            if event.is_null() {
                *event = cuda::event_create().unwrap_or(Event::NULL);
            }
            if event.is_null() {
                return false;
            }
        }
        true
    }

    /// Enqueues `copy` in `cut`'s slices on the side stream by `copier`, after everything
    /// enqueued on `stream` so far; each slice's end is marked for `wait_landed`. False
    /// when a step failed: then the side stream has run everything it was given (nothing
    /// of it is still writing the target).
    pub(super) fn copy_sliced(&mut self, stream: Stream, cut: &Cut, copy: SpanCopy, copier: Copier) -> bool {
        let Some(side) = self.side_stream() else { return false };
        let count = cut.slices.count;
        if !self.events(count) {
            return false;
        }
        let ordered = cuda::event_record(self.enqueued, stream) == CuResult::SUCCESS
            && cuda::stream_wait_event(side, self.enqueued) == CuResult::SUCCESS;
        let copied = ordered
            && (0..count).all(|index| {
                let (offset, bytes) = cut.slices.copy_range(index, cut.axis.operand_step, copy.bytes);
                let slice = SpanCopy { source: copy.source + offset, target: copy.target + offset, bytes };
                copier.copy(slice, side) == CuResult::SUCCESS
                    && cuda::event_record(self.landed[index], side) == CuResult::SUCCESS
            });
        if !copied {
            cuda::stream_synchronize(side);
        }
        copied
    }

    /// Makes `stream` wait until slice `index` (and every slice before it: the side
    /// stream copies them in order) has landed; the host waits for the side stream when
    /// the wait cannot be enqueued.
    pub(super) fn wait_landed(&self, stream: Stream, index: usize) {
        if cuda::stream_wait_event(stream, self.landed[index]) != CuResult::SUCCESS {
            cuda::stream_synchronize(self.side);
        }
    }
}

/// Runs `product` once per slice of `cut` on `stream`, each after its slice landed;
/// `placed` is where each operand is read from (the sliced one in the scratch), `output`
/// where the slices write. A slice that fails has the rest of the product computed in
/// one call, whose status is the answer.
pub(super) fn run_slices(
    copies: &SideCopies,
    stream: Stream,
    cut: &Cut,
    placed: [Option<CuDevicePtr>; 2],
    output: CuDevicePtr,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    let Cut { slices: plan, axis, operand, workspace } = *cut;
    let call =
        |product: &mut dyn FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus, first: i64, count: i64| {
            let mut at = placed;
            at[operand] = at[operand].map(|base| base + first as u64 * axis.operand_step);
            product(at, Some(Slice { operand, count, output: output + first as u64 * axis.output_step, workspace }))
        };
    for index in 0..plan.count {
        let (first, count) = plan.slice(index, axis.length);
        copies.wait_landed(stream, index);
        let status = call(product, first, count);
        if status != CublasStatus::SUCCESS {
            if index == 0 {
                return status;
            }
            // The rest in one call, once every slice it reads has landed.
            copies.wait_landed(stream, plan.count - 1);
            return call(product, first, axis.length - first);
        }
    }
    CublasStatus::SUCCESS
}

/// A shape's first product: `compute(Some(copy))` computes it in slices into a copy of
/// the output (`slicing.output`), then `compute(None)` the whole product (what the
/// program gets) into the output itself, both on `stream`; the two outputs are read back
/// and compared. Answers the whole product's status and what the comparison showed: a
/// sliced computation cuBLAS refused `Differs`; `None` when nothing was compared (no VRAM
/// for the copy, a failed step): the shape is tried again.
pub(super) fn verify(
    stream: Stream,
    device: CuDevice,
    slicing: &Slicing,
    compute: &mut dyn FnMut(Option<CuDevicePtr>) -> CublasStatus,
) -> (CublasStatus, Option<Comparison>) {
    let (output, output_bytes, element) = (slicing.output, slicing.output_bytes, slicing.output_element);
    let alignment = output % 256;
    let Some(reservation) = budget::reserve_vram(output_bytes + alignment, device) else {
        return (compute(None), None);
    };
    let Ok(copy_base) = cuda::mem_alloc(reservation.bytes()) else {
        return (compute(None), None);
    };
    let copy = copy_base + alignment;
    // The copy starts as the output is (a product with beta != 0 reads it).
    let sliced =
        (cuda::memcpy_async(copy, output, output_bytes, stream) == CuResult::SUCCESS).then(|| compute(Some(copy)));
    let status = compute(None);
    let comparison = match sliced {
        Some(sliced) if sliced != CublasStatus::SUCCESS => {
            cuda::stream_synchronize(stream);
            Some(Comparison::Differs)
        }
        Some(_) if status == CublasStatus::SUCCESS => read_and_compare(stream, output, copy, output_bytes, element),
        _ => {
            cuda::stream_synchronize(stream);
            None
        }
    };
    cuda::mem_free(copy_base);
    drop(reservation);
    (status, comparison)
}

/// Waits for `stream`, reads both outputs back and compares them.
fn read_and_compare(
    stream: Stream,
    whole: CuDevicePtr,
    sliced: CuDevicePtr,
    bytes: u64,
    element: usize,
) -> Option<Comparison> {
    let synchronized = cuda::stream_synchronize(stream) == CuResult::SUCCESS;
    let len = usize::try_from(bytes).ok()?;
    let (mut whole_bytes, mut sliced_bytes) = (Vec::new(), Vec::new());
    if whole_bytes.try_reserve_exact(len).is_err() || sliced_bytes.try_reserve_exact(len).is_err() {
        return None;
    }
    whole_bytes.resize(len, 0);
    sliced_bytes.resize(len, 0);
    let read = synchronized
        && cuda::memcpy_to_host(&mut whole_bytes, whole) == CuResult::SUCCESS
        && cuda::memcpy_to_host(&mut sliced_bytes, sliced) == CuResult::SUCCESS;
    read.then(|| compare(&whole_bytes, &sliced_bytes, element))
}
