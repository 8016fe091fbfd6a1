//! Streamed staging: an operand larger than GREENBOOST_STAGE_MAX (an 8B model's 1 GB
//! output layer) is copied through the scratch's two halves slice by slice, each half
//! refilled once the product slice that read it has run, and the product computed slice
//! by slice with the whole product's cuBLASLt algorithm (`lt_algo`) — at the copy
//! engine's rate instead of the product's own zero-copy loads (on the H200 55 against
//! 51 GB/s). Without it such an operand is read zero-copy.
//!
//! Order, all of it enqueued, nothing waited for on the host: the first copy follows
//! everything the program enqueued before the product (an event on its stream); copy
//! i + 2 into a half follows product slice i, which read that half (`freed`); product
//! slice i follows copy i (`landed`). The slices' results are those of the whole product
//! only where `staging_slices::verify` showed it for the shape.

use crate::cuda;
use crate::cuda::ffi::*;
use crate::gemm::staging_slices::{Cut, Plan, Slice};

/// Alignment a slice's copy keeps within its half (bytes), as staging keeps it.
const KEPT_ALIGNMENT: u64 = 256;
/// Slices start at multiples of this many rows (columns): whole output tiles each.
const SLICE_ALIGN: u64 = 256;

/// The scratch's two halves a streamed operand passes through.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ring {
    pub(super) halves: [CuDevicePtr; 2],
}

/// The plan for an operand of `length` rows (columns) `operand_step` bytes apart through
/// halves of `half_bytes`: the most whole tiles a half holds (with a slice's alignment
/// offset), at least two slices; `None` when a half cannot hold one tile's rows, or one
/// slice is all of it.
pub fn plan(half_bytes: u64, length: i64, operand_step: u64) -> Option<Plan> {
    let length = u64::try_from(length).ok().filter(|length| *length > 0)?;
    if operand_step == 0 {
        return None;
    }
    let rows = half_bytes.checked_sub(KEPT_ALIGNMENT)? / operand_step / SLICE_ALIGN * SLICE_ALIGN;
    if rows == 0 {
        return None;
    }
    let count = usize::try_from(length.div_ceil(rows)).ok()?;
    (count >= 2).then_some(Plan { count, per: i64::try_from(rows).ok()? })
}

impl Ring {
    /// Where slice `index`, which starts at `source`, is copied: its half, at the
    /// source's alignment within 256 bytes (cuBLAS picks kernels by it).
    fn target(&self, index: usize, source: CuDevicePtr) -> CuDevicePtr {
        self.halves[index % 2] + source % KEPT_ALIGNMENT
    }
}

/// The events of a context's streamed products.
///
/// # Invariants
/// Each event, when not null, is an event of the scratch's context.
pub(super) struct RingEvents {
    enqueued: Event,
    landed: [Event; 2],
    freed: [Event; 2],
}

impl RingEvents {
    pub(super) const EMPTY: RingEvents =
        RingEvents { enqueued: Event::NULL, landed: [Event::NULL; 2], freed: [Event::NULL; 2] };

    fn made(&mut self) -> bool {
        let mut events = std::iter::once(&mut self.enqueued).chain(self.landed.iter_mut()).chain(self.freed.iter_mut());
        events.all(|event| {
            if event.is_null() {
                *event = cuda::event_create().unwrap_or(Event::NULL);
            }
            !event.is_null()
        })
    }
}

/// Runs `product` slice by slice on `stream` as each slice of the operand `source`
/// (`span` bytes) comes through `ring` on the side stream `side`, the slices' output
/// at `output`. A step that fails has the rest of the product computed in one call
/// from the operand in place (zero-copy), whose status is the answer.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_streamed(
    events: &mut RingEvents,
    (stream, side): (Stream, Stream),
    (plan, axis, operand, workspace): Cut,
    (source, span): (CuDevicePtr, u64),
    ring: &Ring,
    placed: [Option<CuDevicePtr>; 2],
    output: CuDevicePtr,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    let slice_of = |first: i64, count: i64, from: CuDevicePtr| {
        let mut at = placed;
        at[operand] = Some(from);
        (at, Slice { operand, count, output: output + first as u64 * axis.output_step, workspace })
    };
    // The rest of the product from `index` on, read in place.
    let rest_in_place = |product: &mut dyn FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
                         index: usize| {
        cuda::stream_synchronize(side);
        let (first, _) = plan.slice(index, axis.length);
        let (at, slice) = slice_of(first, axis.length - first, source + first as u64 * axis.operand_step);
        product(at, Some(slice))
    };
    if !events.made() {
        return rest_in_place(product, 0);
    }
    let copy = |events: &RingEvents, index: usize| {
        let (offset, bytes) = plan.copy_range(index, axis.operand_step, span);
        let half = index % 2;
        (index < 2 || cuda::stream_wait_event(side, events.freed[half]) == CuResult::SUCCESS)
            && cuda::memcpy_async(ring.target(index, source + offset), source + offset, bytes, side)
                == CuResult::SUCCESS
            && cuda::event_record(events.landed[half], side) == CuResult::SUCCESS
    };
    let ordered = cuda::event_record(events.enqueued, stream) == CuResult::SUCCESS
        && cuda::stream_wait_event(side, events.enqueued) == CuResult::SUCCESS;
    if !ordered || !(0..plan.count.min(2)).all(|index| copy(events, index)) {
        return rest_in_place(product, 0);
    }
    for index in 0..plan.count {
        let half = index % 2;
        let (first, count) = plan.slice(index, axis.length);
        let from = source + first as u64 * axis.operand_step;
        if cuda::stream_wait_event(stream, events.landed[half]) != CuResult::SUCCESS {
            return rest_in_place(product, index);
        }
        let (at, slice) = slice_of(first, count, ring.target(index, from));
        let status = product(at, Some(slice));
        if status != CublasStatus::SUCCESS {
            return if index == 0 { status } else { rest_in_place(product, index) };
        }
        let refilled = index + 2 >= plan.count
            || (cuda::event_record(events.freed[half], stream) == CuResult::SUCCESS && copy(events, index + 2));
        if !refilled {
            // Slices up to `index` are computed; the rest in place, once the side stream
            // has stopped writing the halves.
            return rest_in_place(product, index + 1);
        }
    }
    CublasStatus::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_slice_and_its_alignment_fit_a_half() {
        // An 8B model's output layer (128256 rows of 8 KiB) through two 64 MiB halves:
        // 7936 rows a slice (8192 would leave no room for the alignment offset).
        let ring = Ring { halves: [0, 64 * MIB] };
        let plan = plan(64 * MIB, 128_256, 8192).unwrap();
        assert_eq!(plan, Plan { count: 17, per: 7936 });
        assert!(plan.per as u64 * 8192 + KEPT_ALIGNMENT - 1 <= 64 * MIB);
        assert_eq!(plan.slice(16, 128_256), (16 * 7936, 128_256 - 16 * 7936));
        // Alignment kept: a source 0x40 past 256 bytes lands 0x40 into its half.
        assert_eq!(ring.target(3, 0x1_0040), 64 * MIB + 0x40);
        assert_eq!(ring.target(4, 0x1_0040), 0x40);
    }

    #[test]
    fn rings_too_small_or_operands_that_fit_are_not_streamed() {
        // 1 MiB halves cannot hold 256 rows of 8 KiB (2 MiB).
        assert_eq!(plan(MIB, 128_256, 8192), None);
        // 512 rows of 1 KiB fit one half: nothing to stream.
        assert_eq!(plan(MIB, 512, 1024), None);
        assert_eq!(plan(MIB, 0, 1024), None);
        assert_eq!(plan(MIB, 4096, 0), None);
        // 8192 rows of 1 KiB (8 MiB) through 1 MiB halves: 768 rows (3 tiles) a slice.
        assert_eq!(plan(MIB, 8192, 1024), Some(Plan { count: 11, per: 768 }));
    }
}
