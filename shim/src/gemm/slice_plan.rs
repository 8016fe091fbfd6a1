//! How a product is cut into slices along one operand (`SlicePlan`): in up to
//! GREENBOOST_STAGE_SLICES slices of whole tiles and a few MiB each (pipelined staging),
//! or in slices that fit a half of the scratch (streamed staging).

use crate::gemm::product::KEPT_ALIGNMENT;

/// Most slices of one product (events kept per context).
pub(super) const MAX_SLICES: usize = greenboost_policy::MAX_STAGE_SLICES as usize;
/// Slices start at multiples of this many rows (columns): whole output tiles each.
const SLICE_ALIGN: u64 = 256;
/// Least bytes one slice copies: a copy of a few MiB runs below the link's rate.
const MIN_SLICE_BYTES: u64 = 4 << 20;
/// The slices of a product: `count` of them, `per` rows (columns) each, the last the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlicePlan {
    pub(super) count: usize,
    pub(super) per: i64,
}

impl SlicePlan {
    /// Up to `wanted` slices of `length`, whole tiles and at least `MIN_SLICE_BYTES`
    /// each; `None` when fewer than two would come of it.
    pub(super) fn new(length: i64, operand_step: u64, wanted: u64) -> Option<SlicePlan> {
        let length = u64::try_from(length).ok().filter(|length| *length > 0)?;
        let wanted = wanted.min(MAX_SLICES as u64);
        if wanted < 2 || operand_step == 0 {
            return None;
        }
        let round = |rows: u64| rows.div_ceil(SLICE_ALIGN).checked_mul(SLICE_ALIGN);
        let per = round(length.div_ceil(wanted))?.max(round(MIN_SLICE_BYTES.div_ceil(operand_step))?);
        let count = usize::try_from(length.div_ceil(per)).ok()?;
        (count >= 2).then_some(SlicePlan { count, per: i64::try_from(per).ok()? })
    }

    /// The slices of an operand of `length` rows (columns) `operand_step` bytes apart
    /// streamed through halves of `half_bytes`: the most whole tiles a half holds (with
    /// a slice's alignment offset), at least two slices; `None` when a half cannot hold
    /// one tile's rows, or one slice is all of it.
    pub(super) fn through_halves(half_bytes: u64, length: i64, operand_step: u64) -> Option<SlicePlan> {
        let length = u64::try_from(length).ok().filter(|length| *length > 0)?;
        if operand_step == 0 {
            return None;
        }
        let rows = half_bytes.checked_sub(KEPT_ALIGNMENT)? / operand_step / SLICE_ALIGN * SLICE_ALIGN;
        if rows == 0 {
            return None;
        }
        let count = usize::try_from(length.div_ceil(rows)).ok()?;
        (count >= 2).then_some(SlicePlan { count, per: i64::try_from(rows).ok()? })
    }

    /// Slice `index`: its first row (column) and how many.
    pub(super) fn slice(&self, index: usize, length: i64) -> (i64, i64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn plans_cut_whole_tiles_of_at_least_a_few_mib() {
        // A 4096 x 4096 bf16 weight used transposed: each output row is 8 KiB of it.
        assert_eq!(SlicePlan::new(4096, 8192, 4), Some(SlicePlan { count: 4, per: 1024 }));
        // 14336 rows in 4: 3584 each.
        assert_eq!(SlicePlan::new(14336, 8192, 4), Some(SlicePlan { count: 4, per: 3584 }));
        // 1024 rows of 8 KiB are 8 MiB: two slices of at least 4 MiB.
        assert_eq!(SlicePlan::new(1024, 8192, 4), Some(SlicePlan { count: 2, per: 512 }));
        // 512 rows of 8 KiB: one slice would be all of it.
        assert_eq!(SlicePlan::new(512, 8192, 4), None);
        // Rows of a tile: 1000 rows in 4 round up to 256 each, the last the rest.
        let slices = SlicePlan::new(1000, 64 * 1024, 4).unwrap();
        assert_eq!(slices, SlicePlan { count: 4, per: 256 });
        assert_eq!(slices.slice(3, 1000), (768, 232));
        // Never more than MAX_SLICES, never with one wanted.
        assert_eq!(SlicePlan::new(1 << 20, MIB, 64).map(|slices| slices.count), Some(MAX_SLICES));
        assert_eq!(SlicePlan::new(4096, 8192, 1), None);
        assert_eq!(SlicePlan::new(0, 8192, 4), None);
    }

    #[test]
    fn slice_copies_cover_the_span_once() {
        let slices = SlicePlan::new(4096, 8192, 4).unwrap();
        // The operand's span: 4095 rows apart plus the last row's 4096 elements of 2 bytes.
        let span = 4095 * 8192 + 8192;
        let mut next = 0;
        for index in 0..slices.count {
            let (offset, bytes) = slices.copy_range(index, 8192, span);
            assert_eq!(offset, next);
            next = offset + bytes;
        }
        assert_eq!(next, span);
        // A leading dimension past the rows: the last slice stops at the last row's end.
        let span = 4095 * 10_000 + 8192;
        assert_eq!(slices.copy_range(3, 10_000, span), (3 * 1024 * 10_000, span - 3 * 1024 * 10_000));
    }

    #[test]
    fn a_streamed_slice_and_its_alignment_fit_a_half() {
        // An 8B model's output layer (128256 rows of 8 KiB) through two 64 MiB halves:
        // 7936 rows a slice (8192 would leave no room for the alignment offset).
        let slices = SlicePlan::through_halves(64 * MIB, 128_256, 8192).unwrap();
        assert_eq!(slices, SlicePlan { count: 17, per: 7936 });
        assert!(slices.per as u64 * 8192 + KEPT_ALIGNMENT - 1 <= 64 * MIB);
        assert_eq!(slices.slice(16, 128_256), (16 * 7936, 128_256 - 16 * 7936));
    }

    #[test]
    fn rings_too_small_or_operands_that_fit_are_not_streamed() {
        // 1 MiB halves cannot hold 256 rows of 8 KiB (2 MiB).
        assert_eq!(SlicePlan::through_halves(MIB, 128_256, 8192), None);
        // 512 rows of 1 KiB fit one half: nothing to stream.
        assert_eq!(SlicePlan::through_halves(MIB, 512, 1024), None);
        assert_eq!(SlicePlan::through_halves(MIB, 0, 1024), None);
        assert_eq!(SlicePlan::through_halves(MIB, 4096, 0), None);
        // 8192 rows of 1 KiB (8 MiB) through 1 MiB halves: 768 rows (3 tiles) a slice.
        assert_eq!(SlicePlan::through_halves(MIB, 8192, 1024), Some(SlicePlan { count: 11, per: 768 }));
    }
}
