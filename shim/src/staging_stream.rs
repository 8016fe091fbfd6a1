//! Streamed staging: a product whose one staged operand is larger than the scratch may
//! hold (GREENBOOST_STAGE_MAX; an 8B model's 1 GB output layer) is computed in slices
//! along the output's rows (columns), each slice's part of the operand copied into one
//! half of the scratch on the side stream while the product reads the other half. The
//! copy engine then streams the operand at the link's memcpy rate, where the whole
//! product would read it in place at the zero-copy rate (55 against 51 GB/s on the
//! H200), and the scratch stays bounded.
//!
//! Correct by construction, as pipelined slices are (`staging_slices`): the first copy
//! is ordered after everything enqueued on the product's stream before the product
//! (an event), a copy into a half after the product slice that read that half before
//! (an event per half), and a product does not write its operands. Bit for bit: a slice
//! is another call to cuBLAS, so each shape's first product is computed both ways and
//! compared (`staging_slices::verify`), the whole product reading the operand in place
//! as it would without staging; a shape is streamed only once the two were identical.

use crate::cuda;
use crate::ffi::*;
use crate::staging_slices::{Plan, SideCopies, Slice, SliceAxis};

/// The half of the scratch streamed staging aims for: copies this large run at the
/// link's full rate, and a product slice over it computes in microseconds.
pub const HALF_TARGET: u64 = 64 << 20;
/// Rows (columns) of a slice are a multiple of this: whole output tiles.
const SLICE_ALIGN: u64 = 256;
/// Room kept in each half for the slice's alignment offset (cuBLAS picks kernels by
/// pointer alignment, at most 256 bytes matters).
const KEPT_ALIGNMENT: u64 = 256;

/// How an operand streams through a scratch: the slices, and the bytes of each half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub plan: Plan,
    pub half: u64,
}

impl Ring {
    /// The slices of `length` rows (columns), `operand_step` bytes each, that fit half
    /// of a `scratch`-byte buffer: whole tiles, as many as that takes (no cap: the two
    /// halves are reused). `None` when one tile does not fit a half, or when it would
    /// all fit one.
    pub fn new(length: i64, operand_step: u64, scratch: u64) -> Option<Ring> {
        let length = u64::try_from(length).ok().filter(|length| *length > 0)?;
        let half = scratch / 2 / KEPT_ALIGNMENT * KEPT_ALIGNMENT;
        let rows = half.checked_sub(KEPT_ALIGNMENT)?.checked_div(operand_step)?;
        let per = rows / SLICE_ALIGN * SLICE_ALIGN;
        if per == 0 || per >= length {
            return None;
        }
        let count = usize::try_from(length.div_ceil(per)).ok()?;
        Some(Ring { plan: Plan { count, per: i64::try_from(per).ok()? }, half })
    }
}

/// The operand streamed (`index`: which of the two; `source`, its address; `span`, its
/// bytes) and the scratch it streams through.
#[derive(Clone, Copy, Debug)]
pub struct Streamed {
    pub index: usize,
    pub axis: SliceAxis,
    pub source: CuDevicePtr,
    pub span: u64,
    pub scratch: CuDevicePtr,
}

/// Runs `product` slice by slice on `stream`, slice i's part of the operand copied into
/// half i % 2 of the scratch on the side stream; `placed` is where each operand is read
/// from (the streamed one in place: what the rest of a failed product reads) and
/// `output` where the slices write. A step that fails has the rest of the product
/// computed in one call reading the operand in place, whose status is the answer; then
/// the side stream is waited for, so that no copy into the scratch outlives the call.
pub fn run_ring(
    copies: &mut SideCopies,
    stream: Stream,
    ring: Ring,
    streamed: Streamed,
    placed: [Option<CuDevicePtr>; 2],
    output: CuDevicePtr,
    product: &mut impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    let Streamed { index: operand, axis, source, span, scratch } = streamed;
    let plan = ring.plan;
    // Rows [first, length) in one call, from the operand in place.
    let rest = |product: &mut dyn FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus, from: usize| {
        let (first, _) = plan.slice(from, axis.length);
        let mut at = placed;
        at[operand] = Some(source + first as u64 * axis.operand_step);
        product(
            at,
            Some(Slice { operand, count: axis.length - first, output: output + first as u64 * axis.output_step }),
        )
    };
    let Some(side) = copies.side_stream() else { return rest(product, 0) };
    let ordered = copies.events(2, true)
        && cuda::event_record(copies.enqueued, stream) == CuResult::SUCCESS
        && cuda::stream_wait_event(side, copies.enqueued) == CuResult::SUCCESS;
    if !ordered {
        return rest(product, 0);
    }
    // Where slice `index` lands: its half, at the offset modulo 256 it has in place.
    let landing = |index: usize| {
        let (offset, bytes) = plan.copy_range(index, axis.operand_step, span);
        let from = source + offset;
        (scratch + (index % 2) as u64 * ring.half + from % KEPT_ALIGNMENT, from, bytes)
    };
    let enqueue_copy = |copies: &SideCopies, index: usize| {
        let (to, from, bytes) = landing(index);
        // The half's previous slice has been read (its event is recorded after it).
        (index < 2 || cuda::stream_wait_event(side, copies.read[index % 2]) == CuResult::SUCCESS)
            && cuda::memcpy_async(to, from, bytes, side) == CuResult::SUCCESS
            && cuda::event_record(copies.landed[index % 2], side) == CuResult::SUCCESS
    };
    let fail = |product: &mut dyn FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus, from: usize| {
        cuda::stream_synchronize(side);
        rest(product, from)
    };
    for index in 0..plan.count.min(2) {
        if !enqueue_copy(copies, index) {
            return fail(product, 0);
        }
    }
    for index in 0..plan.count {
        let (first, count) = plan.slice(index, axis.length);
        copies.wait_landed(stream, index % 2);
        let mut at = placed;
        at[operand] = Some(landing(index).0);
        let status = product(at, Some(Slice { operand, count, output: output + first as u64 * axis.output_step }));
        if status != CublasStatus::SUCCESS {
            return fail(product, index);
        }
        if cuda::event_record(copies.read[index % 2], stream) != CuResult::SUCCESS {
            // The next copy into this half cannot wait for the slice on the device.
            cuda::stream_synchronize(stream);
        }
        if index + 2 < plan.count && !enqueue_copy(copies, index + 2) {
            return fail(product, index + 1);
        }
    }
    CublasStatus::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn rings_fit_whole_tiles_in_each_half() {
        // An 8B model's output layer (128256 rows of 8 KiB) through a 128 MiB scratch:
        // 64 MiB halves hold 8160 rows less the alignment's room, 7936 in whole tiles.
        let ring = Ring::new(128_256, 8192, 128 * MIB).unwrap();
        assert_eq!(ring, Ring { plan: Plan { count: 17, per: 7936 }, half: 64 * MIB });
        assert_eq!(ring.plan.slice(16, 128_256), (16 * 7936, 128_256 - 16 * 7936));
        // Every slice's bytes fit its half with the alignment offset.
        let span = 128_255 * 8192 + 8192;
        for index in 0..ring.plan.count {
            let (_, bytes) = ring.plan.copy_range(index, 8192, span);
            assert!(bytes + 255 <= ring.half);
        }
        // A scratch whose half cannot hold one tile, and an operand that fits a half.
        assert_eq!(Ring::new(128_256, 8192, 2 * MIB), None);
        assert_eq!(Ring::new(4096, 8192, 128 * MIB), None);
        assert_eq!(Ring::new(0, 8192, 128 * MIB), None);
        assert_eq!(Ring::new(4096, 0, 128 * MIB), None);
    }
}
