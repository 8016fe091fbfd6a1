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

use std::collections::HashMap;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget;

/// Most slices of one product (events kept per context).
pub(super) const MAX_SLICES: usize = 8;
/// Slices start at multiples of this many rows (columns): whole output tiles each.
const SLICE_ALIGN: u64 = 256;
/// Least bytes one slice copies: a copy of a few MiB runs below the link's rate.
const MIN_SLICE_BYTES: u64 = 4 << 20;
/// Narrower products compute in microseconds: nothing to overlap their copy with. On the
/// H200 an 8B model's one-token products in 4 slices (the whole product's algorithm,
/// bit-identical) decoded no faster: the copies took 1.2 ms more per token in 4 times as
/// many pieces, and the program's CPU fell behind with 4 times the calls.
pub(super) const MIN_SLICED_WIDTH: i64 = 128;
/// Shapes whose verification saw mostly zeros are tried again this many times, then
/// left whole.
const UNDECIDED_TRIES: u8 = 3;
/// Shapes remembered per context; past it the verdicts start again.
const MAX_SHAPES: usize = 4096;

/// How a product may be cut along one operand: `length` rows (or columns) of the
/// output, each `operand_step` bytes apart in that operand and `output_step` bytes apart
/// in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SliceAxis {
    pub(super) length: i64,
    pub(super) operand_step: u64,
    pub(super) output_step: u64,
}

/// Everything about a call that can change which kernel cuBLAS picks for it (entry
/// point, handle and math mode, transposes, dimensions, leading dimensions, types,
/// compute type, algorithm, pointer alignments), as the hook lists it.
pub(super) type Shape = [i64; 20];

/// What a hook tells staging about slicing its product: the axis along each operand
/// (`None`: that operand cannot be cut so that each slice is contiguous), the output,
/// the bytes it spans and its element size, the call's shape, and whether its slices run
/// the whole product's own algorithm (`lt_algo`), with the VRAM workspace they need
/// (`None`: each slice is a call to cuBLAS for the slice's shape).
#[derive(Clone, Copy, Debug)]
pub struct Slicing {
    pub(super) axes: [Option<SliceAxis>; 2],
    pub output: CuDevicePtr,
    pub(super) output_bytes: u64,
    pub(super) output_element: usize,
    pub(super) shape: Shape,
    pub(super) whole_algorithm_workspace: Option<u64>,
}

/// One slice of a product, as the hook calls cuBLAS for it: `count` rows of the output
/// (operand 0 cut: `m` becomes `count`) or columns (operand 1 cut: `n` becomes `count`),
/// written at `output`; `workspace`: the VRAM its whole-product algorithm may use (the
/// slices of one product run one after the other on its stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub operand: usize,
    pub count: i64,
    pub output: CuDevicePtr,
    pub workspace: CuDevicePtr,
}

impl Slice {
    /// The call's (m, n) for this slice.
    pub fn dimensions<T: TryFrom<i64> + Copy>(&self, m: T, n: T) -> (T, T) {
        let count = T::try_from(self.count).ok();
        match (self.operand, count) {
            (0, Some(count)) => (count, n),
            (_, Some(count)) => (m, count),
            _ => (m, n),
        }
    }
}

/// How one product is cut: the plan, the axis, which operand, and the VRAM workspace its
/// slices may use.
pub(super) type Cut = (Plan, SliceAxis, usize, CuDevicePtr);

/// The slices of a product: `count` of them, `per` rows (columns) each, the last the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub count: usize,
    pub(super) per: i64,
}

impl Plan {
    /// Up to `wanted` slices of `length`, whole tiles and at least `MIN_SLICE_BYTES`
    /// each; `None` when fewer than two would come of it.
    pub fn new(length: i64, operand_step: u64, wanted: u64) -> Option<Plan> {
        let length = u64::try_from(length).ok().filter(|length| *length > 0)?;
        let wanted = wanted.min(MAX_SLICES as u64);
        if wanted < 2 || operand_step == 0 {
            return None;
        }
        let round = |rows: u64| rows.div_ceil(SLICE_ALIGN).checked_mul(SLICE_ALIGN);
        let per = round(length.div_ceil(wanted))?.max(round(MIN_SLICE_BYTES.div_ceil(operand_step))?);
        let count = usize::try_from(length.div_ceil(per)).ok()?;
        (count >= 2).then_some(Plan { count, per: i64::try_from(per).ok()? })
    }

    /// Slice `index`: its first row (column) and how many.
    pub fn slice(&self, index: usize, length: i64) -> (i64, i64) {
        let first = index as i64 * self.per;
        (first, self.per.min(length - first))
    }

    /// The bytes of the operand slice `index` copies: (offset, length). The slices
    /// cover `[0, span)` one after the other, the last ending at the span's end.
    pub(super) fn copy_range(&self, index: usize, operand_step: u64, span: u64) -> (u64, u64) {
        let start = index as u64 * self.per as u64 * operand_step;
        let end = if index + 1 == self.count { span } else { (index as u64 + 1) * self.per as u64 * operand_step };
        (start, end.saturating_sub(start))
    }
}

/// What comparing a shape's sliced output with its whole output showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Comparison {
    Identical,
    Differs,
    /// Equal, but mostly zeros: a kernel that rounds otherwise would not show.
    Uninformative,
}

/// Compares the whole product's output with the sliced one's, `element` bytes apiece.
pub(super) fn compare(whole: &[u8], sliced: &[u8], element: usize) -> Comparison {
    if whole != sliced {
        return Comparison::Differs;
    }
    let element = element.max(1);
    let elements = whole.len() / element;
    let nonzero = whole.chunks_exact(element).filter(|value| value.iter().any(|byte| *byte != 0)).count();
    if elements > 0 && nonzero * 2 > elements {
        Comparison::Identical
    } else {
        Comparison::Uninformative
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Identical,
    Differs,
    Undecided(u8),
}

/// What to do with a product of a known shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Slice,
    Verify,
    Whole,
}

/// What each shape's verification showed, per context.
#[derive(Default)]
pub(super) struct Verdicts {
    shapes: HashMap<(Shape, i64), Verdict>,
}

impl Verdicts {
    pub fn decide(&self, shape: &Shape, plan: Plan) -> Decision {
        match self.shapes.get(&(*shape, plan.per)) {
            Some(Verdict::Identical) => Decision::Slice,
            Some(Verdict::Differs) => Decision::Whole,
            Some(Verdict::Undecided(_)) | None => Decision::Verify,
        }
    }

    pub fn record(&mut self, shape: &Shape, plan: Plan, comparison: Comparison) {
        if self.shapes.len() >= MAX_SHAPES {
            self.shapes.clear();
        }
        let entry = self.shapes.entry((*shape, plan.per)).or_insert(Verdict::Undecided(0));
        *entry = match (comparison, *entry) {
            (Comparison::Identical, _) => Verdict::Identical,
            (Comparison::Differs, _) => Verdict::Differs,
            (Comparison::Uninformative, Verdict::Undecided(tries)) if tries + 1 < UNDECIDED_TRIES => {
                Verdict::Undecided(tries + 1)
            }
            (Comparison::Uninformative, _) => Verdict::Differs,
        };
    }
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

    /// Enqueues the copy of `span` bytes from `source` to `target` in `plan`'s slices on
    /// the side stream, after everything enqueued on `stream` so far; each slice's end is
    /// marked for `wait_landed`. False when a step failed: then the side stream has run
    /// everything it was given (nothing of it is still writing `target`).
    pub(super) fn copy_sliced(
        &mut self,
        stream: Stream,
        plan: Plan,
        axis: SliceAxis,
        (source, target, span): (CuDevicePtr, CuDevicePtr, u64),
    ) -> bool {
        let Some(side) = self.side_stream() else { return false };
        if !self.events(plan.count) {
            return false;
        }
        let ordered = cuda::event_record(self.enqueued, stream) == CuResult::SUCCESS
            && cuda::stream_wait_event(side, self.enqueued) == CuResult::SUCCESS;
        let copied = ordered
            && (0..plan.count).all(|index| {
                let (offset, bytes) = plan.copy_range(index, axis.operand_step, span);
                cuda::memcpy_async(target + offset, source + offset, bytes, side) == CuResult::SUCCESS
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

/// Runs `product` once per slice of `plan` on `stream`, each after its slice landed;
/// `placed` is where each operand is read from (the sliced one in the scratch).
/// A slice that fails has the rest of the product computed in one call, whose status is
/// the answer.
pub(super) fn run_slices(
    copies: &SideCopies,
    stream: Stream,
    (plan, axis, operand, workspace): Cut,
    placed: [Option<CuDevicePtr>; 2],
    output: CuDevicePtr,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
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
/// the output, then `compute(None)` the whole product (what the program gets) into the
/// output itself, both on `stream`; the two outputs are read back and compared. Answers
/// the whole product's status and what the comparison showed: a sliced computation
/// cuBLAS refused `Differs`; `None` when nothing was compared (no VRAM for the copy, a
/// failed step): the shape is tried again.
pub(super) fn verify(
    stream: Stream,
    device: CuDevice,
    (output, output_bytes, element): (CuDevicePtr, u64, usize),
    compute: &mut dyn FnMut(Option<CuDevicePtr>) -> CublasStatus,
) -> (CublasStatus, Option<Comparison>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn plans_cut_whole_tiles_of_at_least_a_few_mib() {
        // A 4096 x 4096 bf16 weight used transposed: each output row is 8 KiB of it.
        assert_eq!(Plan::new(4096, 8192, 4), Some(Plan { count: 4, per: 1024 }));
        // 14336 rows in 4: 3584 each.
        assert_eq!(Plan::new(14336, 8192, 4), Some(Plan { count: 4, per: 3584 }));
        // 1024 rows of 8 KiB are 8 MiB: two slices of at least 4 MiB.
        assert_eq!(Plan::new(1024, 8192, 4), Some(Plan { count: 2, per: 512 }));
        // 512 rows of 8 KiB: one slice would be all of it.
        assert_eq!(Plan::new(512, 8192, 4), None);
        // Rows of a tile: 1000 rows in 4 round up to 256 each, the last the rest.
        let plan = Plan::new(1000, 64 * 1024, 4).unwrap();
        assert_eq!(plan, Plan { count: 4, per: 256 });
        assert_eq!(plan.slice(3, 1000), (768, 232));
        // Never more than MAX_SLICES, never with one wanted.
        assert_eq!(Plan::new(1 << 20, MIB, 64).map(|plan| plan.count), Some(MAX_SLICES));
        assert_eq!(Plan::new(4096, 8192, 1), None);
        assert_eq!(Plan::new(0, 8192, 4), None);
    }

    #[test]
    fn slice_copies_cover_the_span_once() {
        let plan = Plan::new(4096, 8192, 4).unwrap();
        // The operand's span: 4095 rows apart plus the last row's 4096 elements of 2 bytes.
        let span = 4095 * 8192 + 8192;
        let mut next = 0;
        for index in 0..plan.count {
            let (offset, bytes) = plan.copy_range(index, 8192, span);
            assert_eq!(offset, next);
            next = offset + bytes;
        }
        assert_eq!(next, span);
        // A leading dimension past the rows: the last slice stops at the last row's end.
        let span = 4095 * 10_000 + 8192;
        assert_eq!(plan.copy_range(3, 10_000, span), (3 * 1024 * 10_000, span - 3 * 1024 * 10_000));
    }

    #[test]
    fn a_slice_changes_the_dimension_of_its_operand() {
        let rows = Slice { operand: 0, count: 1024, output: 0, workspace: 0 };
        let columns = Slice { operand: 1, count: 256, output: 0, workspace: 0 };
        assert_eq!(rows.dimensions(4096_i32, 512), (1024, 512));
        assert_eq!(columns.dimensions(4096_i64, 512), (4096, 256));
    }

    #[test]
    fn comparisons_need_data_that_shows_a_difference() {
        let whole = [1u8, 0, 2, 0, 3, 0, 4, 0];
        assert_eq!(compare(&whole, &whole, 2), Comparison::Identical);
        assert_eq!(compare(&whole, &[1, 0, 2, 0, 3, 0, 4, 1], 2), Comparison::Differs);
        assert_eq!(compare(&[0; 8], &[0; 8], 2), Comparison::Uninformative);
        assert_eq!(compare(&[0, 0, 0, 0, 0, 0, 9, 0], &[0, 0, 0, 0, 0, 0, 9, 0], 2), Comparison::Uninformative);
    }

    #[test]
    fn verdicts_slice_only_what_was_shown_identical() {
        let mut verdicts = Verdicts::default();
        let shape: Shape = [7; 20];
        let plan = Plan { count: 4, per: 1024 };
        assert_eq!(verdicts.decide(&shape, plan), Decision::Verify);
        verdicts.record(&shape, plan, Comparison::Identical);
        assert_eq!(verdicts.decide(&shape, plan), Decision::Slice);
        // Another slice size is another call to cuBLAS.
        assert_eq!(verdicts.decide(&shape, Plan { count: 2, per: 2048 }), Decision::Verify);
        let other: Shape = [8; 20];
        verdicts.record(&other, plan, Comparison::Differs);
        assert_eq!(verdicts.decide(&other, plan), Decision::Whole);
        // Mostly zeros: tried again, then left whole.
        let zeros: Shape = [9; 20];
        for _ in 0..UNDECIDED_TRIES - 1 {
            verdicts.record(&zeros, plan, Comparison::Uninformative);
            assert_eq!(verdicts.decide(&zeros, plan), Decision::Verify);
        }
        verdicts.record(&zeros, plan, Comparison::Uninformative);
        assert_eq!(verdicts.decide(&zeros, plan), Decision::Whole);
    }
}
