//! The placement and report rules: pure functions of the configuration and of numbers
//! the caller measured (VRAM this process holds, the device's size, what everything
//! else on the device uses), unit-tested here.
//!
//! Two limits apply to VRAM. The budget is about this process: the VRAM it may hold
//! (minus the reserve while it loads). The headroom is about the device: VRAM left free
//! for everything the shim does not see — other processes, the display, the driver's
//! lazy loading of kernel modules, library handles and workspaces. An allocation that
//! would pass either goes to T2 (or is split).

use greenboost_policy::{default_vram_headroom, default_vram_reserve};

use crate::cuda::ffi::CuDevice;
use crate::rules::config::{Config, ReportMode};

/// A device as placement sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceView {
    /// The device's ordinal, for per-device settings.
    pub ordinal: CuDevice,
    /// Physical VRAM.
    pub physical: u64,
    /// VRAM in use by everything but this process's allocations through the shim
    /// (other processes, contexts, libraries), as last measured.
    pub others: u64,
}

impl DeviceView {
    /// A device nobody else uses.
    pub fn alone(ordinal: CuDevice, physical: u64) -> DeviceView {
        DeviceView { ordinal, physical, others: 0 }
    }
}

/// Where a new allocation should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Vram,
    T2,
}

impl Placement {
    pub fn is_vram(self) -> bool {
        self == Placement::Vram
    }
}

/// The largest allocation placement takes for a chunk of a framework's memory pool rather
/// than a tensor of its own: PyTorch's caching allocator carves every tensor of 1-10 MiB
/// out of 20 MiB segments (the smaller ones out of 2 MiB segments), and what a chunk's
/// weights leave free holds activations and KV-cache blocks once the program computes.
/// A chunk in T2 puts those on the link: on the H200, an 8B model's 512-token prefill
/// with 16 of its 32 chunks (each 16 MiB of weights, 4 MiB free) in T2 sent 1868 MiB of
/// its blocks there and took 273 ms (`bench/results/placement-probe-2026-12-03.md`).
pub const CHUNK_MAX: u64 = 20 << 20;

/// How far the program has come, as far as the reserve is concerned (see `Rules::place`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Loading: the reserve is kept free for what the program allocates once it computes,
    /// and allocations larger than a chunk (`CHUNK_MAX`) keep as much again free for the
    /// chunks still to come (weights are weights wherever they are read from; a chunk
    /// also holds what the program computes).
    Loading,
    /// Loading, and this allocation pools the program's weights (`Rules::is_pool`): it
    /// keeps the reserve only, as it is all the weights.
    Pooling,
    /// Loading, after one allocation took at least half the budget at once, more than the
    /// process held before it: the program keeps its weights in one pool (llama.cpp and
    /// ollama do), and what it allocates next is its working memory (KV cache, compute
    /// buffers), made before it computes and never again. Those may take the reserve
    /// when they fit it whole.
    LoadingAfterPool,
    /// Computing (its first cuBLAS handle or product): the reserve is open.
    Computing,
}

impl Phase {
    /// How many times over the reserve stays free for an allocation of `size`.
    fn reserves_kept(self, size: u64) -> u64 {
        match self {
            Phase::Loading if size > CHUNK_MAX => 2,
            Phase::Loading | Phase::Pooling => 1,
            Phase::LoadingAfterPool | Phase::Computing => 0,
        }
    }
}

/// The placement and report rules of one configuration.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    config: &'a Config,
}

impl<'a> Rules<'a> {
    pub fn of(config: &'a Config) -> Rules<'a> {
        Rules { config }
    }

    /// VRAM the process may use on device `ordinal` with `physical` bytes.
    pub fn budget(&self, ordinal: CuDevice, physical: u64) -> u64 {
        self.config.vram_budget.get(ordinal).map_or(physical, |budget| budget.min(physical))
    }

    /// VRAM kept free under the budget while the program loads.
    pub fn reserve(&self, ordinal: CuDevice, physical: u64) -> u64 {
        self.config.vram_reserve.unwrap_or_else(|| default_vram_reserve(self.budget(ordinal, physical)))
    }

    /// VRAM kept free on a device with `physical` bytes: GREENBOOST_VRAM_HEADROOM, else
    /// the default, at most an eighth of the device.
    pub fn headroom(&self, ordinal: CuDevice, physical: u64) -> u64 {
        self.config.vram_headroom.get(ordinal).unwrap_or_else(|| default_vram_headroom(physical))
    }

    /// VRAM this process may have on `device`: the budget, and never so much that less
    /// than the headroom stays free on the device.
    fn room(&self, device: DeviceView) -> u64 {
        let (ordinal, physical) = (device.ordinal, device.physical);
        let device_room = physical.saturating_sub(device.others).saturating_sub(self.headroom(ordinal, physical));
        self.budget(ordinal, physical).min(device_room)
    }

    /// VRAM in use up to which allocations still go to VRAM: the room (`room`) minus the
    /// reserve, or all of it when `reserve_open` (the program computes). On a shared device the
    /// reserve is kept inside what the device leaves, so that activations find VRAM
    /// there too.
    pub fn vram_limit(&self, device: DeviceView, reserve_open: bool) -> u64 {
        self.room_keeping(device, if reserve_open { 0 } else { 1 })
    }

    /// The room less `reserves` times the reserve.
    fn room_keeping(&self, device: DeviceView, reserves: u64) -> u64 {
        let kept = self.reserve(device.ordinal, device.physical).saturating_mul(reserves);
        self.room(device).saturating_sub(kept)
    }

    /// The placement rule: small allocations and those that fit the budget minus the
    /// reserve go to VRAM, the rest to T2. Once the program computes (its first cuBLAS
    /// handle or product), or has pooled its weights (`Phase::LoadingAfterPool`), the
    /// reserve is open too: what is allocated then is activations, workspace and KV
    /// cache, read many times per token, while the weights loaded before took their
    /// share and spilled. While it loads, allocations larger than a chunk leave the
    /// reserve free twice over, so that the pool chunks loaded after the budget's share
    /// of weights is spent still find VRAM (`CHUNK_MAX`); what the chunks leave of it
    /// opens with the reserve.
    /// Allocations below the minimum T2 size always go to VRAM, headroom or not: they
    /// are small, and the headroom is sized to absorb them.
    pub fn place(&self, size: u64, vram_in_use: u64, device: DeviceView, phase: Phase) -> Placement {
        if size < self.config.min_t2_size {
            return Placement::Vram;
        }
        let limit = self.room_keeping(device, phase.reserves_kept(size));
        match vram_in_use.checked_add(size) {
            Some(after) if after <= limit => Placement::Vram,
            _ => Placement::T2,
        }
    }

    /// Whether other users contest `device`: they hold more than twice its headroom (this
    /// process's context and library handles, which `others` counts too, take less than
    /// one headroom: that is what the default headroom is sized for). Then the room this
    /// process has is theirs to set, and what it loads first may have to give way to
    /// what it computes with (`engine::allocate` makes its VRAM movable).
    pub fn contested(&self, device: DeviceView) -> bool {
        device.others > self.headroom(device.ordinal, device.physical).saturating_mul(2)
    }

    /// Whether an allocation of `size` is worth moving between tiers: not below the
    /// minimum T2 size, which always stays in VRAM.
    pub fn worth_moving(&self, size: u64) -> bool {
        size >= self.config.min_t2_size
    }

    /// Whether an allocation of `size` made while the process holds `held` bytes (VRAM
    /// and T2) is a pool of the program's weights (see `Phase::LoadingAfterPool`): at
    /// least half of device `ordinal`'s budget, and more than everything before it.
    pub fn is_pool(&self, size: u64, held: u64, ordinal: CuDevice, physical: u64) -> bool {
        size >= self.budget(ordinal, physical) / 2 && size > held
    }

    /// Whether an allocation of `size` that the budget sends to T2 may be split between
    /// VRAM and T2 (GREENBOOST_SPLIT_MIN).
    pub fn may_split(&self, size: u64) -> bool {
        self.config.split_min.is_some_and(|min| size >= min)
    }

    /// The VRAM head a split allocation of `total` bytes (whole `granularity` units) gets
    /// in `phase` while `vram_in_use` bytes are in use: what is left under the room less
    /// the reserves a whole allocation of its size keeps in that phase, and at least the
    /// reserve whatever the phase; in whole granules, one at least left to the tail (0: no
    /// head, no split). A buffer too large for the reserve never takes it from the
    /// smaller, hotter ones made after it: llama.cpp makes a context's KV cache, then its
    /// compute buffer, for every context, also once it computes; cuBLAS's workspace and
    /// ggml's pool follow. While the program loads, a head keeps the chunks' room as a
    /// whole allocation does (`CHUNK_MAX`): PyTorch loads weights larger than
    /// GREENBOOST_SPLIT_MIN between the segments it later fills with activations.
    pub fn split_head(&self, vram_in_use: u64, device: DeviceView, granularity: u64, total: u64, phase: Phase) -> u64 {
        let granularity = granularity.max(1);
        let reserves = phase.reserves_kept(total).max(1);
        let most = total.saturating_sub(granularity);
        let room = self.room_keeping(device, reserves).saturating_sub(vram_in_use).min(most);
        room - room % granularity
    }

    /// The (free, total) a memory query reports, from the driver's real figures and the
    /// T2 state. The budget makes the device look smaller (memory used by anyone counts
    /// against it); the headroom is never reported free, so that a program sizing a pool
    /// from free memory leaves it; combined mode adds T2 capacity and free T2.
    pub fn report(&self, ordinal: CuDevice, real_free: u64, real_total: u64, t2_cap: u64, t2_used: u64) -> (u64, u64) {
        let total = self.budget(ordinal, real_total);
        let used = real_total.saturating_sub(real_free);
        let free = total.saturating_sub(used).min(real_free).saturating_sub(self.headroom(ordinal, real_total));
        match self.config.report {
            ReportMode::Physical => (free, total),
            ReportMode::Combined => (free.saturating_add(t2_cap.saturating_sub(t2_used)), total.saturating_add(t2_cap)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenboost_policy::PerDevice;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    #[test]
    fn only_allocations_of_the_split_minimum_are_split() {
        let default = Config::default();
        assert!(!Rules::of(&default).may_split(256 * M - 1));
        assert!(Rules::of(&default).may_split(256 * M));
        let off = Config { split_min: None, ..Config::default() };
        assert!(!Rules::of(&off).may_split(u64::MAX));
    }

    #[test]
    fn split_head_is_the_room_left_in_whole_granules() {
        let config = Config { vram_budget: PerDevice::every(512 * M), vram_reserve: Some(0), ..Config::default() };
        let (physical, granule) = (G, 2 * M);
        assert_eq!(
            Rules::of(&config).split_head(0, DeviceView::alone(0, physical), granule, G, Phase::Computing),
            512 * M
        );
        // Room that is not a whole granule is left over.
        assert_eq!(
            Rules::of(&config).split_head(100 * M + 1, DeviceView::alone(0, physical), granule, G, Phase::Computing),
            410 * M
        );
        // Less than one granule left, or the budget spent: no head.
        assert_eq!(
            Rules::of(&config).split_head(511 * M, DeviceView::alone(0, physical), granule, G, Phase::Computing),
            0
        );
        assert_eq!(
            Rules::of(&config).split_head(600 * M, DeviceView::alone(0, physical), granule, G, Phase::Computing),
            0
        );
        // The head never takes all of the allocation.
        assert_eq!(
            Rules::of(&config).split_head(0, DeviceView::alone(0, physical), granule, 302 * M, Phase::Computing),
            300 * M
        );
        // The reserve is left to smaller allocations.
        let reserved = Config { vram_reserve: Some(128 * M), ..config };
        for phase in [Phase::Pooling, Phase::LoadingAfterPool, Phase::Computing] {
            assert_eq!(Rules::of(&reserved).split_head(0, DeviceView::alone(0, physical), granule, G, phase), 384 * M);
        }
        // While loading, the chunks' room too, as for a whole allocation of its size.
        assert_eq!(
            Rules::of(&reserved).split_head(0, DeviceView::alone(0, physical), granule, G, Phase::Loading),
            256 * M
        );
        assert_eq!(
            Rules::of(&reserved).place(256 * M, 0, DeviceView::alone(0, physical), Phase::Loading),
            Placement::Vram
        );
        assert_eq!(
            Rules::of(&reserved).place(256 * M + 1, 0, DeviceView::alone(0, physical), Phase::Loading),
            Placement::T2
        );
    }

    #[test]
    fn a_device_is_contested_when_others_hold_more_than_twice_the_headroom() {
        let config = Config { vram_headroom: PerDevice::every(G), ..Config::default() };
        let device = |others| DeviceView { ordinal: 0, physical: 80 * G, others };
        assert!(!Rules::of(&config).contested(device(0)));
        assert!(!Rules::of(&config).contested(device(2 * G)), "this process's context and handles");
        assert!(Rules::of(&config).contested(device(2 * G + 1)));
        assert!(Rules::of(&config).worth_moving(config.min_t2_size));
        assert!(!Rules::of(&config).worth_moving(config.min_t2_size - 1));
    }

    #[test]
    fn vram_limit_is_the_budget_minus_the_reserve_until_running() {
        let config = Config { vram_budget: PerDevice::every(8 * G), vram_reserve: Some(G), ..Config::default() };
        assert_eq!(Rules::of(&config).vram_limit(DeviceView::alone(0, 80 * G), false), 7 * G);
        assert_eq!(Rules::of(&config).vram_limit(DeviceView::alone(0, 80 * G), true), 8 * G);
        let reserve_over_budget =
            Config { vram_budget: PerDevice::every(G), vram_reserve: Some(2 * G), ..Config::default() };
        assert_eq!(Rules::of(&reserve_over_budget).vram_limit(DeviceView::alone(0, 80 * G), false), 0);
    }

    #[test]
    fn placement_follows_budget_reserve_and_minimum() {
        let config = Config {
            vram_budget: PerDevice::every(8 * G),
            vram_reserve: Some(G),
            min_t2_size: 2 * M,
            ..Config::default()
        };
        let physical = 80 * G;
        assert_eq!(Rules::of(&config).place(7 * G, 0, DeviceView::alone(0, physical), Phase::Pooling), Placement::Vram);
        assert_eq!(
            Rules::of(&config).place(7 * G + 1, 0, DeviceView::alone(0, physical), Phase::Pooling),
            Placement::T2
        );
        assert_eq!(Rules::of(&config).place(G, 6 * G, DeviceView::alone(0, physical), Phase::Pooling), Placement::Vram);
        assert_eq!(
            Rules::of(&config).place(G, 6 * G + 1, DeviceView::alone(0, physical), Phase::Pooling),
            Placement::T2
        );
        // Below the minimum: VRAM even when the budget is spent.
        assert_eq!(
            Rules::of(&config).place(M, 100 * G, DeviceView::alone(0, physical), Phase::Loading),
            Placement::Vram
        );
        // The physical size caps a larger budget.
        let small_card = 4 * G;
        assert_eq!(
            Rules::of(&config).place(3 * G + 1, 0, DeviceView::alone(0, small_card), Phase::Loading),
            Placement::T2
        );
        // Overflowing sums never wrap into VRAM.
        assert_eq!(
            Rules::of(&config).place(u64::MAX, 1, DeviceView::alone(0, physical), Phase::Loading),
            Placement::T2
        );
    }

    #[test]
    fn running_programs_may_use_the_reserve() {
        let config = Config { vram_budget: PerDevice::every(8 * G), vram_reserve: Some(G), ..Config::default() };
        let physical = 80 * G;
        assert_eq!(Rules::of(&config).place(G, 7 * G, DeviceView::alone(0, physical), Phase::Loading), Placement::T2);
        assert_eq!(
            Rules::of(&config).place(G, 7 * G, DeviceView::alone(0, physical), Phase::Computing),
            Placement::Vram
        );
        assert_eq!(
            Rules::of(&config).place(G, 7 * G + 1, DeviceView::alone(0, physical), Phase::Computing),
            Placement::T2
        );
    }

    #[test]
    fn after_a_pool_the_reserve_takes_what_fits_it_whole() {
        let config = Config { vram_budget: PerDevice::every(8 * G), vram_reserve: Some(G), ..Config::default() };
        let device = DeviceView::alone(0, 80 * G);
        // llama.cpp: the weights in one allocation larger than the budget, split up to
        // 7 GiB; then the KV cache and the compute buffer.
        assert!(Rules::of(&config).is_pool(30 * G, 0, 0, 80 * G));
        assert_eq!(Rules::of(&config).place(G / 2, 7 * G, device, Phase::Loading), Placement::T2);
        assert_eq!(Rules::of(&config).place(G / 2, 7 * G, device, Phase::LoadingAfterPool), Placement::Vram);
        assert_eq!(Rules::of(&config).place(G / 2, 7 * G + G / 2, device, Phase::LoadingAfterPool), Placement::Vram);
        assert_eq!(Rules::of(&config).place(G / 2, 7 * G + G / 2 + 1, device, Phase::LoadingAfterPool), Placement::T2);
        // A buffer larger than the reserve leaves it to the smaller ones after it: no
        // head, before computing or after.
        for phase in [Phase::LoadingAfterPool, Phase::Computing] {
            assert_eq!(Rules::of(&config).split_head(7 * G, device, 2 * M, 2 * G, phase), 0);
        }
        // PyTorch's weights, one tensor at a time, are no pool: neither is a first
        // tensor below half the budget nor a large one after others.
        assert!(!Rules::of(&config).is_pool(4 * G - 1, 0, 0, 80 * G));
        assert!(!Rules::of(&config).is_pool(5 * G, 5 * G, 0, 80 * G));
        assert!(Rules::of(&config).is_pool(5 * G, 5 * G - 1, 0, 80 * G));
        // Without a budget, half the device.
        assert!(Rules::of(&Config::default()).is_pool(40 * G, 0, 0, 80 * G));
        assert!(!Rules::of(&Config::default()).is_pool(40 * G - 1, 0, 0, 80 * G));
    }

    #[test]
    fn while_loading_chunks_keep_vram_after_the_weights_share() {
        let config = Config { vram_budget: PerDevice::every(8 * G), vram_reserve: Some(G), ..Config::default() };
        let device = DeviceView::alone(0, 80 * G);
        // Tensors larger than a chunk stop at the budget less twice the reserve...
        assert_eq!(Rules::of(&config).place(G, 5 * G, device, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(G, 5 * G + 1, device, Phase::Loading), Placement::T2);
        assert_eq!(Rules::of(&config).place(CHUNK_MAX + 1, 6 * G - CHUNK_MAX, device, Phase::Loading), Placement::T2);
        // ...so that a pool's chunks after them still find VRAM, up to the reserve.
        assert_eq!(Rules::of(&config).place(CHUNK_MAX, 6 * G, device, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(CHUNK_MAX, 7 * G - CHUNK_MAX, device, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(CHUNK_MAX, 7 * G - CHUNK_MAX + 1, device, Phase::Loading), Placement::T2);
        // The weights in one pool keep the reserve once, as before; once the program
        // computes, or after a pool, the reserve and what the chunks left of it open.
        assert_eq!(Rules::of(&config).place(7 * G, 0, device, Phase::Pooling), Placement::Vram);
        assert_eq!(Rules::of(&config).place(7 * G + 1, 0, device, Phase::Pooling), Placement::T2);
        assert_eq!(Rules::of(&config).place(2 * G, 6 * G, device, Phase::Computing), Placement::Vram);
        assert_eq!(Rules::of(&config).place(2 * G, 6 * G, device, Phase::LoadingAfterPool), Placement::Vram);
        // No reserve, nothing kept for chunks either.
        let unreserved = Config { vram_reserve: Some(0), ..config };
        assert_eq!(Rules::of(&unreserved).place(G, 7 * G, device, Phase::Loading), Placement::Vram);
    }

    #[test]
    fn reserve_larger_than_budget_sends_everything_large_to_t2() {
        let config = Config { vram_budget: PerDevice::every(G), vram_reserve: Some(2 * G), ..Config::default() };
        assert_eq!(Rules::of(&config).place(2 * M, 0, DeviceView::alone(0, 8 * G), Phase::Loading), Placement::T2);
    }

    #[test]
    fn default_reserve_is_an_eighth_of_the_budget_up_to_512_mib() {
        let config = Config::default();
        assert_eq!(Rules::of(&config).reserve(0, 256 * M), 32 * M);
        assert_eq!(Rules::of(&config).reserve(0, 80 * G), 512 * M);
        let budgeted = Config { vram_budget: PerDevice::every(G), ..Config::default() };
        assert_eq!(Rules::of(&budgeted).reserve(0, 80 * G), 128 * M);
        // 256 MiB device, 32 MiB of headroom and of reserve: while loading, two of six
        // 64 MiB tensors fit under 160 MiB (the reserve kept twice over), the chunks after
        // them up to 192 MiB.
        let device = DeviceView::alone(0, 256 * M);
        assert_eq!(Rules::of(&config).place(64 * M, 64 * M, device, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(64 * M, 128 * M, device, Phase::Loading), Placement::T2);
        assert_eq!(Rules::of(&config).place(CHUNK_MAX, 128 * M, device, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(CHUNK_MAX, 192 * M - CHUNK_MAX + 1, device, Phase::Loading), Placement::T2);
    }

    #[test]
    fn physical_report_without_budget_is_the_driver_figure() {
        let config = Config { vram_headroom: PerDevice::every(0), ..Config::default() };
        assert_eq!(Rules::of(&config).report(0, 3 * G, 16 * G, 64 * G, 0), (3 * G, 16 * G));
    }

    #[test]
    fn budget_shrinks_the_reported_device() {
        let config =
            Config { vram_budget: PerDevice::every(8 * G), vram_headroom: PerDevice::every(0), ..Config::default() };
        // 80 GiB card with 10 GiB used: 8 GiB total, nothing... used 10 > 8 -> 0 free.
        assert_eq!(Rules::of(&config).report(0, 70 * G, 80 * G, 0, 0), (0, 8 * G));
        // 2 GiB used: 6 GiB free.
        assert_eq!(Rules::of(&config).report(0, 78 * G, 80 * G, 0, 0), (6 * G, 8 * G));
    }

    #[test]
    fn combined_report_adds_t2() {
        let config = Config { report: ReportMode::Combined, vram_headroom: PerDevice::every(0), ..Config::default() };
        assert_eq!(Rules::of(&config).report(0, 3 * G, 16 * G, 64 * G, 4 * G), (63 * G, 80 * G));
        // T2 over its cap (pending frees) never makes free wrap.
        assert_eq!(Rules::of(&config).report(0, 3 * G, 16 * G, 64 * G, 65 * G), (3 * G, 80 * G));
    }

    #[test]
    fn the_headroom_stays_free_whoever_uses_the_device() {
        let config = Config { vram_headroom: PerDevice::every(G), vram_reserve: Some(0), ..Config::default() };
        // Another process holds 70 of 80 GiB: 9 GiB may still be ours, not 10.
        let shared = DeviceView { ordinal: 0, physical: 80 * G, others: 70 * G };
        assert_eq!(Rules::of(&config).place(9 * G, 0, shared, Phase::Loading), Placement::Vram);
        assert_eq!(Rules::of(&config).place(9 * G + 1, 0, shared, Phase::Loading), Placement::T2);
        assert_eq!(Rules::of(&config).place(G, 8 * G + 1, shared, Phase::Computing), Placement::T2);
        // Small allocations ignore it: the headroom absorbs them.
        assert_eq!(Rules::of(&config).place(M, 9 * G, shared, Phase::Computing), Placement::Vram);
        // The device full of others: no split head either.
        let full = DeviceView { ordinal: 0, physical: 80 * G, others: 79 * G + 1 };
        assert_eq!(Rules::of(&config).split_head(0, full, 2 * M, 4 * G, Phase::Computing), 0);
        assert_eq!(Rules::of(&config).split_head(0, shared, 2 * M, 20 * G, Phase::Computing), 9 * G);
        // The budget still bounds the process when the device has room.
        let budgeted = Config { vram_budget: PerDevice::every(4 * G), ..config };
        assert_eq!(Rules::of(&budgeted).vram_limit(shared, true), 4 * G);
        // While the program loads, the reserve is kept inside what the device leaves.
        let reserved = Config { vram_reserve: Some(G), ..config };
        assert_eq!(Rules::of(&reserved).vram_limit(shared, false), 8 * G);
        assert_eq!(Rules::of(&reserved).vram_limit(shared, true), 9 * G);
    }

    #[test]
    fn the_headroom_is_never_reported_free() {
        let config = Config { vram_headroom: PerDevice::every(G), ..Config::default() };
        assert_eq!(Rules::of(&config).report(0, 3 * G, 80 * G, 0, 0), (2 * G, 80 * G));
        assert_eq!(Rules::of(&config).report(0, G / 2, 80 * G, 0, 0), (0, 80 * G));
        let combined = Config { report: ReportMode::Combined, ..config };
        assert_eq!(Rules::of(&combined).report(0, 3 * G, 80 * G, 64 * G, 4 * G), (62 * G, 144 * G));
    }

    #[test]
    fn the_default_headroom_is_at_most_an_eighth_of_the_device() {
        let config = Config::default();
        assert_eq!(Rules::of(&config).headroom(0, 80 * G), G);
        assert_eq!(Rules::of(&config).headroom(0, 128 * M), 16 * M);
    }
}
