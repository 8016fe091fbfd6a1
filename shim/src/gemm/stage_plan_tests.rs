//! Unit tests of the staging plan (`stage_plan`): every way a product may go, from the
//! figures the hook and the scratch would measure.

use super::*;
use crate::gemm::verdicts::Comparison;

const MIB: u64 = 1 << 20;

fn pinned(operand: Operand) -> Staged {
    Staged { operand, kind: T2Kind::Pinned }
}

fn settings(slices: u64) -> Settings {
    Settings { staging: true, min_width: 1, stage_max: 256 * MIB, slices }
}

/// A weight of `rows` rows of 8 KiB (bf16, 4096 wide) at `address`, re-read `width` times.
fn weight(address: u64, rows: i64, width: i64) -> Operand {
    Operand { address, bytes: rows as u64 * 8192, width }
}

fn slicing(rows: i64, workspace: Option<u64>) -> Slicing {
    Slicing {
        axes: [Some(SliceAxis { length: rows, operand_step: 8192, output_step: 2 }), None],
        output: 0x9000_0000,
        output_bytes: rows as u64 * 2 * 512,
        output_element: 2,
        shape: [7; 20],
        whole_algorithm_workspace: workspace,
    }
}

fn input<'a>(settings: Settings, operands: [Option<Operand>; 2], slicing: Option<&'a Slicing>) -> PlanInput<'a> {
    PlanInput {
        settings,
        operands,
        in_t2: operands.map(|operand| operand.map(|_| T2Kind::Pinned)),
        sm_copies: true,
        capturing: false,
        has_context: true,
        slicing,
        scratch_bytes: 0,
        verdicts: None,
    }
}

#[test]
fn products_read_in_place_say_why() {
    let a = Some(weight(0x1000, 4096, 512));
    let mut off = settings(1);
    off.staging = false;
    assert_eq!(plan(&input(off, [a, None], None)), StagePlan::ZeroCopy(ZeroCopy::StagingOff));
    let mut not_in_t2 = input(settings(1), [a, None], None);
    not_in_t2.in_t2 = [None, None];
    assert_eq!(plan(&not_in_t2), StagePlan::ZeroCopy(ZeroCopy::NothingToStage));
    // Narrower than GREENBOOST_STAGE_MIN_WIDTH: not worth a copy, not even looked up.
    let mut wide_only = settings(1);
    wide_only.min_width = 1024;
    assert_eq!(candidates(&wide_only, &[a, None]), [None, None]);
    assert_eq!(plan(&input(wide_only, [a, None], None)), StagePlan::ZeroCopy(ZeroCopy::NothingToStage));
    let mut capturing = input(settings(1), [a, None], None);
    capturing.capturing = true;
    assert_eq!(plan(&capturing), StagePlan::ZeroCopy(ZeroCopy::Capturing));
    let mut no_context = input(settings(1), [a, None], None);
    no_context.has_context = false;
    assert_eq!(plan(&no_context), StagePlan::ZeroCopy(ZeroCopy::NoContext));
}

#[test]
fn operands_that_fit_are_copied_whole_at_their_alignment() {
    // A at 0x40 past 256 bytes, B at 0x10: each keeps its offset, one after the other.
    let a = weight(0x1_0040, 1024, 512);
    let b = Operand { address: 0x2_0010, bytes: 1000, width: 4096 };
    let StagePlan::Whole(layout) = plan(&input(settings(1), [Some(a), Some(b)], None)) else { panic!() };
    let a_end = (0x40 + a.bytes).div_ceil(256) * 256;
    assert_eq!(layout.offsets, [Some(0x40), Some(a_end + 0x10)]);
    assert_eq!(layout.operands_bytes, (a_end + 0x10 + 1000).div_ceil(256) * 256);
    assert_eq!(layout.total_bytes, layout.operands_bytes);
    assert_eq!(layout.staged, [Some(pinned(a)), Some(pinned(b))]);
    // Only the operand in T2 is staged; the slices' workspace comes after the operands.
    let cut = slicing(1024, Some(1000));
    let mut half_in_t2 = input(settings(1), [Some(a), Some(b)], Some(&cut));
    half_in_t2.in_t2 = [None, Some(T2Kind::Pinned)];
    let StagePlan::Whole(layout) = plan(&half_in_t2) else { panic!() };
    assert_eq!(layout.staged, [None, Some(pinned(b))]);
    assert_eq!(layout.total_bytes, layout.operands_bytes + 1024);
}

#[test]
fn wide_products_are_sliced_once_their_shape_proved_identical() {
    let a = weight(0x1000, 4096, 512);
    let cut = slicing(4096, Some(0));
    let sliced = |verdicts: Option<&Verdicts>| {
        let mut request = input(settings(4), [Some(a), None], Some(&cut));
        request.verdicts = verdicts;
        plan(&request)
    };
    let slices = SlicePlan { count: 4, per: 1024 };
    let StagePlan::Sliced(_, first) = sliced(None) else { panic!() };
    assert_eq!((first.slices, first.operand, first.verify), (slices, 0, true));
    let mut verdicts = Verdicts::default();
    verdicts.record(&cut.shape, slices, Comparison::Identical);
    let StagePlan::Sliced(_, known) = sliced(Some(&verdicts)) else { panic!() };
    assert!(!known.verify);
    let mut differs = Verdicts::default();
    differs.record(&cut.shape, slices, Comparison::Differs);
    assert!(matches!(sliced(Some(&differs)), StagePlan::Whole(_)));
    // One slice, narrow products, an operand that cannot be cut, two staged: whole.
    assert!(matches!(plan(&input(settings(1), [Some(a), None], Some(&cut))), StagePlan::Whole(_)));
    let narrow = weight(0x1000, 4096, 64);
    assert!(matches!(plan(&input(settings(4), [Some(narrow), None], Some(&cut))), StagePlan::Whole(_)));
    assert!(matches!(plan(&input(settings(4), [None, Some(a)], Some(&cut))), StagePlan::Whole(_)));
    assert!(matches!(plan(&input(settings(4), [Some(a), Some(narrow)], Some(&cut))), StagePlan::Whole(_)));
}

#[test]
fn operands_too_large_are_streamed_or_read_in_place() {
    // An 8B model's output layer: 128256 rows of 8 KiB, 1002 MiB.
    let head = weight(0x1000, 128_256, 1);
    let needed = head.bytes.div_ceil(256) * 256;
    // Without a whole-product algorithm (or any description) it cannot be streamed.
    assert_eq!(plan(&input(settings(1), [Some(head), None], None)), StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed }));
    let no_algorithm = slicing(128_256, None);
    assert_eq!(
        plan(&input(settings(1), [Some(head), None], Some(&no_algorithm))),
        StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed })
    );
    // Streamed through two 64 MiB halves of a new scratch, 7936 rows a slice.
    let cut = slicing(128_256, Some(4096));
    let StagePlan::Streamed(Streamed { source, ring_bytes, workspace, cut: streamed }) =
        plan(&input(settings(1), [Some(head), None], Some(&cut)))
    else {
        panic!()
    };
    assert_eq!((source, ring_bytes, workspace), (pinned(head), 128 * MIB, 4096));
    assert_eq!((streamed.slices, streamed.verify), (SlicePlan { count: 17, per: 7936 }, true));
    // A scratch the other products grew to 32 MiB (and its workspace) is used as it is.
    let mut grown = input(settings(1), [Some(head), None], Some(&cut));
    grown.scratch_bytes = 32 * MIB + 4096;
    let StagePlan::Streamed(Streamed { ring_bytes, .. }) = plan(&grown) else { panic!() };
    assert_eq!(ring_bytes, 32 * MIB);
    // A shape whose streamed slices differed is read in place.
    let mut differs = Verdicts::default();
    differs.record(&cut.shape, SlicePlan { count: 17, per: 7936 }, Comparison::Differs);
    grown.scratch_bytes = 0;
    grown.verdicts = Some(&differs);
    assert_eq!(plan(&grown), StagePlan::ZeroCopy(ZeroCopy::SlicesDiffer));
    // Two operands that each need streaming: the larger is streamed, the other read in
    // place.
    let mut both_large = input(settings(1), [Some(head), Some(weight(0x2000, 40_000, 512))], Some(&cut));
    both_large.operands[1].as_mut().unwrap().width = 8;
    let StagePlan::Streamed(Streamed { source, .. }) = plan(&both_large) else { panic!() };
    assert_eq!(source.operand, head);
}

#[test]
fn of_two_operands_too_large_together_the_one_that_fits_and_saves_most_is_staged() {
    // 20000 rows of 8 KiB: 156 MiB each, 312 MiB together, above the 256 MiB limit.
    let read_often = weight(0x1000, 20_000, 4096);
    let read_once = weight(0x1_0000_0000, 20_000, 1);
    let StagePlan::Whole(layout) = plan(&input(settings(1), [Some(read_once), Some(read_often)], None)) else {
        panic!()
    };
    assert_eq!(layout.staged, [None, Some(pinned(read_often))]);
    assert!(layout.operands_bytes <= 256 * MIB);
    let StagePlan::Whole(layout) = plan(&input(settings(1), [Some(read_often), Some(read_once)], None)) else {
        panic!()
    };
    assert_eq!(layout.staged, [Some(pinned(read_often)), None]);
}

#[test]
fn movable_t2_is_staged_by_the_sms_where_they_can_copy() {
    let a = weight(0x1000, 4096, 512);
    let mut movable = input(settings(1), [Some(a), None], None);
    movable.in_t2 = [Some(T2Kind::Movable), None];
    let StagePlan::Whole(layout) = plan(&movable) else { panic!() };
    assert_eq!(layout.staged, [Some(Staged { operand: a, kind: T2Kind::Movable }), None]);
    // Without the copy kernels it is read in place, as pinned T2 would not be.
    movable.sm_copies = false;
    assert_eq!(plan(&movable), StagePlan::ZeroCopy(ZeroCopy::NothingToStage));
    movable.in_t2 = [Some(T2Kind::Pinned), None];
    assert!(matches!(plan(&movable), StagePlan::Whole(_)));
}

#[test]
fn only_products_that_may_be_cut_are_described() {
    let small = weight(0x1000, 1024, 512);
    let head = weight(0x1000, 128_256, 1);
    let in_t2 = |_: &Operand| true;
    assert!(!may_cut(&settings(1), &[Some(small), None], in_t2));
    assert!(may_cut(&settings(4), &[Some(small), None], in_t2));
    assert!(may_cut(&settings(1), &[Some(head), None], in_t2));
    assert!(!may_cut(&settings(1), &[Some(head), None], |_| false), "too large, but not in T2");
    let mut off = settings(4);
    off.staging = false;
    assert!(!may_cut(&off, &[Some(head), None], in_t2));
    assert!(may_be_cut(&settings(1), &small));
    assert!(may_be_cut(&settings(1), &head), "narrow, but too large: streamed");
    assert!(!may_be_cut(&settings(1), &weight(0x1000, 1024, 64)));
}
