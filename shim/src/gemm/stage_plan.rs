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
use crate::memory::registry::T2Kind;
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
    /// Which operands lie (partly) in T2, and in which kind; asked for `candidates` only.
    pub(super) in_t2: [Option<T2Kind>; 2],
    /// Whether the SMs can copy in this context (its copy kernels loaded): movable T2 is
    /// staged only then; asked only when a candidate is in movable T2.
    pub(super) sm_copies: bool,
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
    /// No operand in T2 is wide enough to be worth a copy (or can be copied: movable T2
    /// where the SMs cannot copy).
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

/// An operand staging copies, and from which kind of T2 (pinned: by the copy engine;
/// movable: by the SMs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Staged {
    pub(super) operand: Operand,
    pub(super) kind: T2Kind,
}

/// Where each staged operand lies in the scratch (offsets from its base, each at its
/// operand's own alignment within 256 bytes) and what the scratch must hold: the
/// operands (`operands_bytes`) and, after them, the slices' workspace (`total_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) staged: [Option<Staged>; 2],
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
    pub(super) source: Staged,
    pub(super) ring_bytes: u64,
    pub(super) workspace: u64,
    pub(super) cut: CutPlan,
}

/// The one staged operand of `staged` (and its index), if exactly one is.
fn only_one(staged: &[Option<Staged>; 2]) -> Option<(usize, Staged)> {
    match staged {
        [Some(operand), None] => Some((0, *operand)),
        [None, Some(operand)] => Some((1, *operand)),
        _ => None,
    }
}

fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT
}

/// Each staged operand at its own alignment offset, one after the other, then the
/// slices' workspace.
fn layout(staged: [Option<Staged>; 2], workspace: u64) -> Layout {
    let mut offsets = [None, None];
    let mut operands_bytes = 0;
    for (slot, staged) in offsets.iter_mut().zip(staged.iter()) {
        if let Some(Staged { operand, .. }) = staged {
            let start = operands_bytes + operand.address % KEPT_ALIGNMENT;
            *slot = Some(start);
            operands_bytes = round_up(start + operand.bytes);
        }
    }
    Layout { staged, offsets, operands_bytes, total_bytes: operands_bytes + round_up(workspace) }
}

/// What staging does with the product `input` describes.
pub(super) fn plan(input: &PlanInput<'_>) -> StagePlan {
    let settings = &input.settings;
    if !settings.staging {
        return StagePlan::ZeroCopy(ZeroCopy::StagingOff);
    }
    let mut staged = [None, None];
    for ((slot, candidate), kind) in staged.iter_mut().zip(candidates(settings, &input.operands)).zip(input.in_t2) {
        *slot = match (candidate, kind) {
            (Some(operand), Some(T2Kind::Pinned)) => Some(Staged { operand, kind: T2Kind::Pinned }),
            (Some(operand), Some(T2Kind::Movable)) if input.sm_copies => {
                Some(Staged { operand, kind: T2Kind::Movable })
            }
            _ => None,
        };
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
    let workspace = input.slicing.and_then(|slicing| slicing.whole_algorithm_workspace).unwrap_or(0);
    let all = layout(staged, workspace);
    // The operands are held to the limit; their slices' workspace (KiB) comes on top.
    if all.operands_bytes <= settings.stage_max {
        return whole_or_sliced(input, all, verdicts);
    }
    let [Some(a), Some(b)] = staged else {
        return streamed(input, &staged, verdicts)
            .unwrap_or(StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed: all.operands_bytes }));
    };
    // Two that do not fit together: the one that fits alone and spares the most reads
    // over the link (its bytes times the width that re-reads them); else one streamed,
    // the larger first.
    let alone = [[Some(a), None], [None, Some(b)]];
    let saved = |staged: &Staged| staged.operand.bytes.saturating_mul(staged.operand.width.max(0) as u64);
    let fitting = alone
        .iter()
        .map(|one| layout(*one, workspace))
        .filter(|one| one.operands_bytes <= settings.stage_max)
        .max_by_key(|one| one.staged.iter().flatten().map(saved).sum::<u64>());
    if let Some(one) = fitting {
        return whole_or_sliced(input, one, verdicts);
    }
    let larger_first = if a.operand.bytes >= b.operand.bytes { alone } else { [alone[1], alone[0]] };
    larger_first
        .iter()
        .find_map(|one| streamed(input, one, verdicts))
        .unwrap_or(StagePlan::ZeroCopy(ZeroCopy::TooLarge { needed: all.operands_bytes }))
}

/// The operands of `layout` copied into the scratch, whole or in slices.
fn whole_or_sliced(input: &PlanInput<'_>, layout: Layout, verdicts: &Verdicts) -> StagePlan {
    match sliced(input, &layout.staged, verdicts) {
        Some(cut) => StagePlan::Sliced(layout, cut),
        None => StagePlan::Whole(layout),
    }
}

/// How to slice a product whose one staged operand is wide enough (GREENBOOST_STAGE_SLICES
/// above 1); `None`: whole.
fn sliced(input: &PlanInput<'_>, staged: &[Option<Staged>; 2], verdicts: &Verdicts) -> Option<CutPlan> {
    let slicing = input.slicing?;
    let (operand, source) = only_one(staged)?;
    if source.operand.width < MIN_SLICED_WIDTH {
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
fn streamed(input: &PlanInput<'_>, staged: &[Option<Staged>; 2], verdicts: &Verdicts) -> Option<StagePlan> {
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
#[path = "stage_plan_tests.rs"]
mod tests;
