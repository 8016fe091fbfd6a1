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
use crate::gemm::product::KEPT_ALIGNMENT;
use crate::gemm::product::{Operand, Slice};
use crate::gemm::staging_slices::{Copier, Cut, SpanCopy};

/// The scratch's two halves a streamed operand passes through, and what copies it into
/// them.
#[derive(Clone, Copy)]
pub(super) struct Ring {
    pub(super) halves: [CuDevicePtr; 2],
    pub(super) copier: Copier,
}

/// The streams of a streamed product: the product's own, and the side stream its copies
/// run on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Streams {
    pub(super) product: Stream,
    pub(super) side: Stream,
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

/// Runs `product` slice by slice on the product's stream as each slice of the operand
/// `source` comes through `ring` on the side stream, the slices' output at `output`; the
/// other operand is the program's own. A step that fails has the rest of the product
/// computed in one call from the operand in place (zero-copy), whose status is the answer.
pub(super) fn run_streamed(
    events: &mut RingEvents,
    streams: Streams,
    cut: &Cut,
    source: &Operand,
    ring: &Ring,
    output: CuDevicePtr,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    let Cut { slices: plan, axis, operand, workspace } = *cut;
    let Streams { product: stream, side } = streams;
    let (source, span) = (source.address, source.bytes);
    let placed = [None, None];
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
            && ring
                .copier
                .copy(SpanCopy { source: source + offset, target: ring.target(index, source + offset), bytes }, side)
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

    #[test]
    fn slices_keep_their_alignment_within_their_half() {
        // A source 0x40 past 256 bytes lands 0x40 into its half.
        let ring = Ring { halves: [0, 64 << 20], copier: Copier::CopyEngine };
        assert_eq!(ring.target(3, 0x1_0040), (64 << 20) + 0x40);
        assert_eq!(ring.target(4, 0x1_0040), 0x40);
    }
}
