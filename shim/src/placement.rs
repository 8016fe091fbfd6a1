//! The placement and report rules: pure functions of the configuration and of numbers
//! the caller measured (VRAM in use, the device's size), unit-tested here.

use crate::config::{Config, ReportMode, DEFAULT_VRAM_RESERVE};

/// Where a new allocation should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Vram,
    Host,
}

impl Placement {
    pub fn is_vram(self) -> bool {
        self == Placement::Vram
    }
}

impl Config {
    /// VRAM the process may use on a device with `physical` bytes.
    pub fn budget(&self, physical: u64) -> u64 {
        self.vram_budget.map_or(physical, |budget| budget.min(physical))
    }

    /// VRAM kept free under the budget of a device with `physical` bytes.
    pub fn reserve(&self, physical: u64) -> u64 {
        self.vram_reserve.unwrap_or_else(|| (self.budget(physical) / 8).min(DEFAULT_VRAM_RESERVE))
    }

    /// VRAM in use up to which allocations still go to VRAM: the budget minus the
    /// reserve, or the whole budget once the program is `running` (see `place`).
    pub fn vram_limit(&self, physical: u64, running: bool) -> u64 {
        let budget = self.budget(physical);
        if running {
            budget
        } else {
            budget.saturating_sub(self.reserve(physical))
        }
    }

    /// The placement rule: small allocations and those that fit the budget minus the
    /// reserve go to VRAM, the rest to T2. Once the program is `running` (it has started
    /// computing: its first cuBLAS handle or product), the reserve is open too: what is allocated
    /// then is activations, workspace and KV cache, read many times per token, while
    /// the weights loaded before took their share and spilled.
    pub fn place(&self, size: u64, vram_in_use: u64, physical: u64, running: bool) -> Placement {
        if size < self.min_t2_size {
            return Placement::Vram;
        }
        let limit = self.vram_limit(physical, running);
        match vram_in_use.checked_add(size) {
            Some(after) if after <= limit => Placement::Vram,
            _ => Placement::Host,
        }
    }

    /// Whether an allocation of `size` that the budget sends to T2 may be split between
    /// VRAM and T2 (GREENBOOST_SPLIT_MIN).
    pub fn may_split(&self, size: u64) -> bool {
        self.split_min.is_some_and(|min| size >= min)
    }

    /// The VRAM head a split allocation gets while `vram_in_use` bytes are in use: what
    /// is left under the placement limit, at most `most`, in whole `granularity` units
    /// (0: no head, no split).
    pub fn split_head(&self, vram_in_use: u64, physical: u64, running: bool, granularity: u64, most: u64) -> u64 {
        let room = self.vram_limit(physical, running).saturating_sub(vram_in_use).min(most);
        room - room % granularity.max(1)
    }

    /// The (free, total) a memory query reports, from the driver's real figures and the
    /// T2 state. The budget makes the device look smaller (memory used by anyone counts
    /// against it); combined mode adds T2 capacity and free T2.
    pub fn report(&self, real_free: u64, real_total: u64, t2_cap: u64, t2_used: u64) -> (u64, u64) {
        let total = self.budget(real_total);
        let used = real_total.saturating_sub(real_free);
        let free = total.saturating_sub(used).min(real_free);
        match self.report {
            ReportMode::Physical => (free, total),
            ReportMode::Combined => (
                free.saturating_add(t2_cap.saturating_sub(t2_used)),
                total.saturating_add(t2_cap),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;
    #[test]
    fn split_head_is_the_room_left_in_whole_granules() {
        let config = Config { vram_budget: Some(512 * M), vram_reserve: Some(0), ..Config::default() };
        let (physical, granule) = (G, 2 * M);
        assert_eq!(config.split_head(0, physical, false, granule, G - granule), 512 * M);
        // Room that is not a whole granule is left over.
        assert_eq!(config.split_head(100 * M + 1, physical, false, granule, G), 410 * M);
        // Less than one granule left, or the budget spent: no head.
        assert_eq!(config.split_head(511 * M, physical, false, granule, G), 0);
        assert_eq!(config.split_head(600 * M, physical, false, granule, G), 0);
        // The head never takes all of the allocation.
        assert_eq!(config.split_head(0, physical, false, granule, 300 * M + 1), 300 * M);
        // The reserve counts until the program runs.
        let reserved = Config { vram_reserve: Some(128 * M), ..config };
        assert_eq!(reserved.split_head(0, physical, false, granule, G), 384 * M);
        assert_eq!(reserved.split_head(0, physical, true, granule, G), 512 * M);
    }

    #[test]
    fn vram_limit_is_the_budget_minus_the_reserve_until_running() {
        let config = Config { vram_budget: Some(8 * G), vram_reserve: Some(G), ..Config::default() };
        assert_eq!(config.vram_limit(80 * G, false), 7 * G);
        assert_eq!(config.vram_limit(80 * G, true), 8 * G);
        let reserve_over_budget = Config { vram_budget: Some(G), vram_reserve: Some(2 * G), ..Config::default() };
        assert_eq!(reserve_over_budget.vram_limit(80 * G, false), 0);
    }

    #[test]
    fn placement_follows_budget_reserve_and_minimum() {
        let config = Config { vram_budget: Some(8 * G), vram_reserve: Some(G), min_t2_size: 2 * M, ..Config::default() };
        let physical = 80 * G;
        assert_eq!(config.place(7 * G, 0, physical, false), Placement::Vram);
        assert_eq!(config.place(7 * G + 1, 0, physical, false), Placement::Host);
        assert_eq!(config.place(G, 6 * G, physical, false), Placement::Vram);
        assert_eq!(config.place(G, 6 * G + 1, physical, false), Placement::Host);
        // Below the minimum: VRAM even when the budget is spent.
        assert_eq!(config.place(M, 100 * G, physical, false), Placement::Vram);
        // The physical size caps a larger budget.
        let small_card = 4 * G;
        assert_eq!(config.place(3 * G + 1, 0, small_card, false), Placement::Host);
        // Overflowing sums never wrap into VRAM.
        assert_eq!(config.place(u64::MAX, 1, physical, false), Placement::Host);
    }

    #[test]
    fn running_programs_may_use_the_reserve() {
        let config = Config { vram_budget: Some(8 * G), vram_reserve: Some(G), ..Config::default() };
        let physical = 80 * G;
        assert_eq!(config.place(G, 7 * G, physical, false), Placement::Host);
        assert_eq!(config.place(G, 7 * G, physical, true), Placement::Vram);
        assert_eq!(config.place(G, 7 * G + 1, physical, true), Placement::Host);
    }

    #[test]
    fn reserve_larger_than_budget_sends_everything_large_to_t2() {
        let config = Config { vram_budget: Some(G), vram_reserve: Some(2 * G), ..Config::default() };
        assert_eq!(config.place(2 * M, 0, 8 * G, false), Placement::Host);
    }

    #[test]
    fn default_reserve_is_an_eighth_of_the_budget_up_to_512_mib() {
        let config = Config::default();
        assert_eq!(config.reserve(256 * M), 32 * M);
        assert_eq!(config.reserve(80 * G), 512 * M);
        let budgeted = Config { vram_budget: Some(G), ..Config::default() };
        assert_eq!(budgeted.reserve(80 * G), 128 * M);
        // 256 MiB device: three of six 64 MiB allocations fit under 224 MiB.
        assert_eq!(config.place(64 * M, 128 * M, 256 * M, false), Placement::Vram);
        assert_eq!(config.place(64 * M, 192 * M, 256 * M, false), Placement::Host);
    }

    #[test]
    fn physical_report_without_budget_is_the_driver_figure() {
        let config = Config::default();
        assert_eq!(config.report(3 * G, 16 * G, 64 * G, 0), (3 * G, 16 * G));
    }

    #[test]
    fn budget_shrinks_the_reported_device() {
        let config = Config { vram_budget: Some(8 * G), ..Config::default() };
        // 80 GiB card with 10 GiB used: 8 GiB total, nothing... used 10 > 8 -> 0 free.
        assert_eq!(config.report(70 * G, 80 * G, 0, 0), (0, 8 * G));
        // 2 GiB used: 6 GiB free.
        assert_eq!(config.report(78 * G, 80 * G, 0, 0), (6 * G, 8 * G));
    }

    #[test]
    fn combined_report_adds_t2() {
        let config = Config { report: ReportMode::Combined, ..Config::default() };
        assert_eq!(config.report(3 * G, 16 * G, 64 * G, 4 * G), (63 * G, 80 * G));
        // T2 over its cap (pending frees) never makes free wrap.
        assert_eq!(config.report(3 * G, 16 * G, 64 * G, 65 * G), (3 * G, 80 * G));
    }
}
