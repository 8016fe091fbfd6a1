//! What GEMM staging does with one product, decided by one pure function of what the
//! hook and the context's scratch measured: `plan(&PlanInput) -> StagePlan` — read its
//! operands in place (zero-copy, with the reason), copy them whole into the scratch,
//! copy the one wide operand in slices and compute the product slice by slice, or stream
//! an operand too large for the scratch through its two halves. The executor (`staging`)
//! carries the plan out and reads in place only when a CUDA call fails.
//!
//! Also here: which operands a product may be cut along (`may_cut`, `may_be_cut`), which
//! the hooks ask before describing a product's slices.

use crate::gemm::product::{Operand, SliceAxis, Slicing, KEPT_ALIGNMENT};
use crate::gemm::slice_plan::SlicePlan;
use crate::gemm::verdicts::{Decision, Verdicts};
use crate::rules::config::Config;

/// Each half of a scratch grown for a streamed operand holds this much: on the H200 copies
/// of 64 MiB run at the link's rate, and an 8B model's other staged products already grow
/// the scratch to 128 MiB. A scratch already holding two halves of `MIN_STREAM_HALF` is
/// used as it is.
const STREAM_HALF: u64 = 64 << 20;
const MIN_STREAM_HALF: u64 = 8 << 20;
/// Narrower products compute in microseconds: nothing to overlap their copy with. On the
/// H200 an 8B model's one-token products in 4 slices (the whole product's algorithm,
/// bit-identical) decoded no faster: the copies took 1.2 ms more per token in 4 times as
/// many pieces, and the program's CPU fell behind with 4 times the calls.
const MIN_SLICED_WIDTH: i64 = 128;

/// The settings staging follows (GREENBOOST_STAGING, _STAGE_MIN_WIDTH, _STAGE_MAX,
/// _STAGE_SLICES).
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub(super) staging: bool,
    pub(super) min_width: u64,
    pub(super) stage_max: u64,
    pub(super) slices: u64,
}

impl Settings {
    pub(super) fn of(config: &Config) -> Settings {
        Settings {
            staging: config.staging,
            min_width: config.stage_min_width,
            stage_max: config.stage_max,
            slices: config.stage_slices,
        }
    }
}

/// The operands that staging would copy if they lie in T2: known, nonempty, and re-read
/// by a product at least GREENBOOST_STAGE_MIN_WIDTH wide. Only these are looked up in
/// the registry.
pub(super) fn candidates(settings: &Settings, operands: &[Option<Operand>; 2]) -> [Option<Operand>; 2] {
    operands.map(|operand| {
        operand.filter(|operand| {
            settings.staging
                && operand.address != 0
                && operand.bytes != 0
                && u64::try_from(operand.width).is_ok_and(|width| width >= settings.min_width)
        })
    })
}

/// Whether an operand in T2 that can be cut (its slices contiguous) may be: its product
/// is wide enough to be sliced, or it is too large for the scratch (streamed through it).
pub(super) fn may_be_cut(settings: &Settings, operand: &Operand) -> bool {
    operand.width >= MIN_SLICED_WIDTH || operand.bytes > settings.stage_max
}

/// Whether a product of `operands` may be computed in slices, so that its hook describes
/// its slices (a cuBLAS query and a cuBLASLt lookup): with pipelined staging asked for,
/// or when a candidate larger than GREENBOOST_STAGE_MAX lies in T2 (`in_t2`, asked of
/// those alone) — streamed through the scratch, as the alternative is reading it
/// zero-copy.
pub(super) fn may_cut(settings: &Settings, operands: &[Option<Operand>; 2], in_t2: impl Fn(&Operand) -> bool) -> bool {
    let too_large = |operand: &&Operand| operand.bytes > settings.stage_max;
    settings.staging
        && (settings.slices > 1 || candidates(settings, operands).iter().flatten().filter(too_large).any(in_t2))
}

/// What the plan is made from.
pub(super) struct PlanInput<'a> {
    pub(super) settings: Settings,
    /// The product's operands, as its hook described them.
    pub(super) operands: [Option<Operand>; 2],
    /// Which operands lie (partly) in pinned T2; asked for `candidates` only.
    pub(super) in_t2: [bool; 2],
    /// Whether the product's stream is being captured into a graph; asked only when an
    /// operand would be staged.
    pub(super) capturing: bool,
    /// Whether there is a current context and device; asked only when the stream is not
    /// being captured.
    pub(super) has_context: bool,
    pub(super) slicing: Option<&'a Slicing>,
    /// The context's scratch as it is: its bytes (0: none yet) and what its verifications
    /// showed (`None`: nothing yet).
    pub(super) scratch_bytes: u64,
    pub(super) verdicts: Option<&'a Verdicts>,
}

/// Why a product reads its operands in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ZeroCopy {
    /// GREENBOOST_STAGING=off.
    StagingOff,
    /// No operand in T2 is wide enough to be worth a copy.
    NothingToStage,
    /// A captured copy would replay into a scratch that later products reuse.
    Capturing,
    NoContext,
    /// The staged operands need `needed` bytes of scratch, above GREENBOOST_STAGE_MAX, and
    /// cannot be streamed.
    TooLarge {
        needed: u64,
    },
    /// Streaming it would compute this shape in slices, and its slices differed.
    SlicesDiffer,
}

/// Where each staged operand lies in the scratch (offsets from its base, each at its
/// operand's own alignment within 256 bytes) and what the scratch must hold: the
/// operands (`operands_bytes`) and, after them, the slices' workspace (`total_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) staged: [Option<Operand>; 2],
    pub(super) offsets: [Option<u64>; 2],
    pub(super) operands_bytes: u64,
    pub(super) total_bytes: u64,
}

/// How a product is cut: the slices, the axis, which operand, and whether its shape is
/// computed both ways and compared first (`verify`) or was shown identical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CutPlan {
    pub(super) slices: SlicePlan,
    pub(super) axis: SliceAxis,
    pub(super) operand: usize,
    pub(super) verify: bool,
}

/// What staging does with one product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StagePlan {
    ZeroCopy(ZeroCopy),
    /// Each staged operand copied whole on the product's stream, then the product.
    Whole(Layout),
    /// The one staged operand copied in slices on the side stream, the product computed
    /// slice by slice as each lands (its slices' workspace after the operands).
    Sliced(Layout, CutPlan),
    /// The one staged operand, too large for the scratch, streamed through two halves.
    Streamed(Streamed),
}

/// A streamed operand: `source` through two halves of `ring_bytes` in all, the slices'
/// workspace (`workspace` bytes) after them, in `cut`'s slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Streamed {
    pub(super) source: Operand,
    pub(super) ring_bytes: u64,
    pub(super) workspace: u64,
    pub(super) cut: CutPlan,
}

/// The one staged operand of `staged` (and its index), if exactly one is.
fn only_one(staged: &[Option<Operand>; 2]) -> Option<(usize, Operand)> {
    match staged {
        [Some(operand), None] => Some((0, *operand)),
        [None, Some(operand)] => Some((1, *operand)),
        _ => None,
    }
}

fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT
}

/// What staging does with the product `input` describes.
pub(super) fn plan(input: &PlanInput<'_>) -> StagePlan {
    let settings = &input.settings;
    if !settings.staging {
        return StagePlan::ZeroCopy(ZeroCopy::StagingOff);
    }
    let mut staged = candidates(settings, &input.operands);
    for (operand, in_t2) in staged.iter_mut().zip(input.in_t2) {
        if !in_t2 {
            *operand = None;
        }
    }
    if staged.iter().all(Option::is_none) {
        return StagePlan::ZeroCopy(ZeroCopy::NothingToStage);
    }
    if input.capturing {
        return StagePlan::ZeroCopy(ZeroCopy::Capturing);
    }
    if !input.has_context {
        return StagePlan::ZeroCopy(ZeroCopy::NoContext);
    }
    let empty = Verdicts::default();
    let verdicts = input.verdicts.unwrap_or(&empty);
    // Each staged operand at its own alignment offset, one after the other.
    let mut offsets = [None, None];
    let mut operands_bytes = 0;
    for (slot, operand) in offsets.iter_mut().zip(staged.iter()) {
        if let Some(operand) = operand {
            let start = operands_bytes + operand.address % KEPT_ALIGNMENT;
            *slot = Some(start);
            operands_bytes = round_up(start + operand.bytes);
        }
    }
    // The operands are held to the limit; their slices' workspace (KiB) comes on top.
    if operands_bytes > settings.stage_max {
        return streamed(input, &staged, verdicts)
            .unwrap_or(StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed: operands_bytes }));
    }
    let workspace = input.slicing.and_then(|slicing| slicing.whole_algorithm_workspace).unwrap_or(0);
    let layout = Layout { staged, offsets, operands_bytes, total_bytes: operands_bytes + round_up(workspace) };
    match sliced(input, &staged, verdicts) {
        Some(cut) => StagePlan::Sliced(layout, cut),
        None => StagePlan::Whole(layout),
    }
}

/// How to slice a product whose one staged operand is wide enough (GREENBOOST_STAGE_SLICES
/// above 1); `None`: whole.
fn sliced(input: &PlanInput<'_>, staged: &[Option<Operand>; 2], verdicts: &Verdicts) -> Option<CutPlan> {
    let slicing = input.slicing?;
    let (operand, source) = only_one(staged)?;
    if source.width < MIN_SLICED_WIDTH {
        return None;
    }
    let axis = slicing.axes[operand]?;
    let slices = SlicePlan::new(axis.length, axis.operand_step, input.settings.slices)?;
    match verdicts.decide(&slicing.shape, slices) {
        Decision::Whole => None,
        decision => Some(CutPlan { slices, axis, operand, verify: decision == Decision::Verify }),
    }
}

/// Streaming of a product's one operand too large for the scratch, with the whole
/// product's algorithm at hand: through the scratch as it is when it holds two halves
/// of `MIN_STREAM_HALF` (other staged products grew it: streaming takes no more VRAM),
/// else through one grown to two halves of GREENBOOST_STAGE_MAX / 2 or `STREAM_HALF`,
/// whichever is less. `None` when it does not apply.
fn streamed(input: &PlanInput<'_>, staged: &[Option<Operand>; 2], verdicts: &Verdicts) -> Option<StagePlan> {
    let slicing = input.slicing?;
    let workspace = round_up(slicing.whole_algorithm_workspace?);
    let (operand, source) = only_one(staged)?;
    let axis = slicing.axes[operand]?;
    let ring_bytes = match input.scratch_bytes.checked_sub(workspace) {
        Some(room) if room >= 2 * MIN_STREAM_HALF => room,
        _ => input.settings.stage_max.min(2 * STREAM_HALF),
    } / (2 * KEPT_ALIGNMENT)
        * (2 * KEPT_ALIGNMENT);
    let slices = SlicePlan::through_halves(ring_bytes / 2, axis.length, axis.operand_step)?;
    let verify = match verdicts.decide(&slicing.shape, slices) {
        Decision::Whole => return Some(StagePlan::ZeroCopy(ZeroCopy::SlicesDiffer)),
        decision => decision == Decision::Verify,
    };
    let cut = CutPlan { slices, axis, operand, verify };
    Some(StagePlan::Streamed(Streamed { source, ring_bytes, workspace, cut }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::verdicts::Comparison;

    const MIB: u64 = 1 << 20;

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
            in_t2: operands.map(|operand| operand.is_some()),
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
        not_in_t2.in_t2 = [false, false];
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
        assert_eq!(layout.staged, [Some(a), Some(b)]);
        // Only the operand in T2 is staged; the slices' workspace comes after the operands.
        let cut = slicing(1024, Some(1000));
        let mut half_in_t2 = input(settings(1), [Some(a), Some(b)], Some(&cut));
        half_in_t2.in_t2 = [false, true];
        let StagePlan::Whole(layout) = plan(&half_in_t2) else { panic!() };
        assert_eq!(layout.staged, [None, Some(b)]);
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
        assert_eq!(
            plan(&input(settings(1), [Some(head), None], None)),
            StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed })
        );
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
        assert_eq!((source, ring_bytes, workspace), (head, 128 * MIB, 4096));
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
        // Two operands together above the limit: neither is staged (one stream at a time).
        let half = weight(0x1000, 20_000, 512);
        let both = plan(&input(settings(1), [Some(half), Some(half)], Some(&cut)));
        assert!(matches!(both, StagePlan::ZeroCopy(ZeroCopy::TooLarge { .. })));
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
}
