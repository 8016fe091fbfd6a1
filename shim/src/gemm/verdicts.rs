//! What each product shape's verification showed: a shape is computed in slices only
//! once its sliced result was bit-identical to the whole product's, on data that shows a
//! difference (most output elements nonzero), and never once it differed.

use std::collections::HashMap;

use crate::gemm::product::Shape;
use crate::gemm::slice_plan::SlicePlan;

/// Shapes whose verification saw mostly zeros are tried again this many times, then
/// left whole.
const UNDECIDED_TRIES: u8 = 3;
/// Shapes remembered per context; past it the verdicts start again.
const MAX_SHAPES: usize = 4096;

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
    pub fn decide(&self, shape: &Shape, plan: SlicePlan) -> Decision {
        match self.shapes.get(&(*shape, plan.per)) {
            Some(Verdict::Identical) => Decision::Slice,
            Some(Verdict::Differs) => Decision::Whole,
            Some(Verdict::Undecided(_)) | None => Decision::Verify,
        }
    }

    pub fn record(&mut self, shape: &Shape, plan: SlicePlan, comparison: Comparison) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let plan = SlicePlan { count: 4, per: 1024 };
        assert_eq!(verdicts.decide(&shape, plan), Decision::Verify);
        verdicts.record(&shape, plan, Comparison::Identical);
        assert_eq!(verdicts.decide(&shape, plan), Decision::Slice);
        // Another slice size is another call to cuBLAS.
        assert_eq!(verdicts.decide(&shape, SlicePlan { count: 2, per: 2048 }), Decision::Verify);
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
