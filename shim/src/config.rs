//! Policy settings from the environment, parsed once at load into a fixed `Config`
//! (no allocation), and the pure placement/report rules that use them.
//!
//! Every variable is listed in shim/README.md ("Environment").

use std::ffi::CStr;

use crate::log::Level;

/// What capacity the hooked memory queries report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportMode {
    /// The VRAM the program may use: physical VRAM, or the budget when it is lower.
    Physical,
    /// VRAM plus the T2 capacity, so that a program sizing its work by free memory
    /// (ollama's layer placement) puts everything "on the GPU".
    Combined,
}

/// Which T2 backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// /dev/greenboost when it opens and speaks our ABI, else userspace.
    Auto,
    /// Only the module; without it there is no T2.
    Kmod,
    /// Only anonymous huge-page memory.
    Userspace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub disabled: bool,
    /// VRAM the process may use per device; `None`: physical.
    pub vram_budget: Option<u64>,
    /// VRAM kept free under the budget for workspace and activations; `None`: one
    /// eighth of the budget, at most `DEFAULT_VRAM_RESERVE`.
    pub vram_reserve: Option<u64>,
    /// Allocations smaller than this always go to VRAM.
    pub min_t2_size: u64,
    /// Most T2 bytes in use at once; `None`: the backend's default.
    pub t2_cap: Option<u64>,
    /// Allocations at least this large that the budget sends to T2 are split: VRAM that
    /// is still free under the budget holds their head, T2 the rest. `None`: never split.
    pub split_min: Option<u64>,
    pub report: ReportMode,
    pub backend: BackendChoice,
    pub log: Level,
    /// Copy T2 operands of wide cuBLAS matrix products into VRAM first (see `staging`).
    pub staging: bool,
    /// A product is wide when the dimension that re-reads the T2 operand is at least this.
    pub stage_min_width: u64,
    /// Largest scratch buffer staging may hold in VRAM; larger operands stay zero-copy.
    pub stage_max: u64,
}

pub const DEFAULT_VRAM_RESERVE: u64 = 512 << 20;
pub const DEFAULT_MIN_T2_SIZE: u64 = 2 << 20;
/// Every product: wide ones re-read each T2 tile once per output tile, and even a
/// one-token product (decode) ran 5% faster on the H200 from a copy than zero-copy
/// (8B shape, 8.3 GB of weights in T2: 175.7 vs 184.3 ms per token, same run): the copy
/// engine streams PCIe better than the product's own loads.
pub const DEFAULT_STAGE_MIN_WIDTH: u64 = 1;
pub const DEFAULT_STAGE_MAX: u64 = 256 << 20;
pub const DEFAULT_SPLIT_MIN: u64 = 256 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            vram_budget: None,
            vram_reserve: None,
            min_t2_size: DEFAULT_MIN_T2_SIZE,
            t2_cap: None,
            split_min: Some(DEFAULT_SPLIT_MIN),
            report: ReportMode::Physical,
            backend: BackendChoice::Auto,
            log: Level::Warn,
            staging: true,
            stage_min_width: DEFAULT_STAGE_MIN_WIDTH,
            stage_max: DEFAULT_STAGE_MAX,
        }
    }
}

/// Parses a byte size: a plain number of bytes, or a number (decimals allowed) followed
/// by K, M, G or T, optionally with "iB" or "B" after it; all suffixes are powers of
/// 1024 (8G = 8GiB = 8GB = 8589934592).
pub fn parse_size(text: &[u8]) -> Option<u64> {
    let text = trim(text);
    let digits_end = text
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let shift = match trim(suffix) {
        b"" | b"B" | b"b" => 0,
        s => {
            let (unit, rest) = s.split_first()?;
            let shift = match unit.to_ascii_uppercase() {
                b'K' => 10,
                b'M' => 20,
                b'G' => 30,
                b'T' => 40,
                _ => return None,
            };
            match rest {
                b"" | b"B" | b"b" | b"iB" | b"ib" | b"IB" => shift,
                _ => return None,
            }
        }
    };
    let mut parts = number.splitn(2, |b| *b == b'.');
    let whole = parts.next().filter(|w| !w.is_empty())?;
    let fraction = parts.next().unwrap_or(b"");
    if fraction.contains(&b'.') || (shift == 0 && !fraction.is_empty()) {
        return None;
    }
    let mut value: u64 = 0;
    for digit in whole {
        value = value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    let mut bytes = value.checked_mul(1u64 << shift)?;
    // Fraction digits: each contributes digit * 2^shift / 10^position.
    let mut scale: u64 = 1;
    for digit in fraction.iter().take(9) {
        scale *= 10;
        bytes = bytes.checked_add(u64::from(digit - b'0').checked_mul(1u64 << shift)? / scale)?;
    }
    Some(bytes)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !last.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

/// Builds the configuration from a variable lookup (the environment in the product, a
/// table in tests). `complain` receives (variable, bad value, what is used instead).
pub fn from_lookup(
    lookup: impl Fn(&str) -> Option<&'static [u8]>,
    mut complain: impl FnMut(&str, &[u8], &str),
) -> Config {
    let mut config = Config::default();
    if let Some(value) = lookup("GREENBOOST_LOG") {
        match trim(value) {
            b"" | b"warn" | b"0" => {}
            b"info" | b"1" => config.log = Level::Info,
            b"debug" | b"2" => config.log = Level::Debug,
            other => complain("GREENBOOST_LOG", other, "warn (use info or debug)"),
        }
    }
    if let Some(value) = lookup("GREENBOOST_DISABLE") {
        match trim(value) {
            b"" | b"0" | b"no" | b"false" => {}
            b"1" | b"yes" | b"true" => config.disabled = true,
            other => complain("GREENBOOST_DISABLE", other, "0 (use 1 to disable)"),
        }
    }
    let size = |name: &str, complain: &mut dyn FnMut(&str, &[u8], &str)| -> Option<u64> {
        let value = lookup(name)?;
        if trim(value).is_empty() {
            return None;
        }
        let parsed = parse_size(value);
        if parsed.is_none() {
            complain(name, value, "the default (sizes look like 8G, 8GiB, 512M or bytes)");
        }
        parsed
    };
    if let Some(budget) = size("GREENBOOST_VRAM_BUDGET", &mut complain) {
        config.vram_budget = Some(budget);
    }
    if let Some(reserve) = size("GREENBOOST_VRAM_RESERVE", &mut complain) {
        config.vram_reserve = Some(reserve);
    }
    if let Some(min) = size("GREENBOOST_MIN_T2_SIZE", &mut complain) {
        config.min_t2_size = min;
    }
    if let Some(cap) = size("GREENBOOST_T2_CAP", &mut complain) {
        config.t2_cap = Some(cap);
    }
    if let Some(value) = lookup("GREENBOOST_SPLIT_MIN") {
        match trim(value) {
            b"" => {}
            b"off" | b"0" => config.split_min = None,
            _ => config.split_min = size("GREENBOOST_SPLIT_MIN", &mut complain).or(config.split_min),
        }
    }
    if let Some(value) = lookup("GREENBOOST_STAGING") {
        match trim(value) {
            b"" | b"on" | b"1" => {}
            b"off" | b"0" => config.staging = false,
            other => complain("GREENBOOST_STAGING", other, "on (use on or off)"),
        }
    }
    if let Some(width) = size("GREENBOOST_STAGE_MIN_WIDTH", &mut complain) {
        config.stage_min_width = width.max(1);
    }
    if let Some(max) = size("GREENBOOST_STAGE_MAX", &mut complain) {
        config.stage_max = max;
    }
    if let Some(value) = lookup("GREENBOOST_REPORT") {
        match trim(value) {
            b"" | b"physical" => {}
            b"combined" => config.report = ReportMode::Combined,
            other => complain("GREENBOOST_REPORT", other, "physical (use physical or combined)"),
        }
    }
    if let Some(value) = lookup("GREENBOOST_BACKEND") {
        match trim(value) {
            b"" | b"auto" => {}
            b"kmod" => config.backend = BackendChoice::Kmod,
            b"userspace" => config.backend = BackendChoice::Userspace,
            other => complain("GREENBOOST_BACKEND", other, "auto (use auto, kmod or userspace)"),
        }
    }
    config
}

/// Reads a variable with getenv: no allocation, usable in the load-time constructor.
pub fn getenv(name: &str) -> Option<&'static [u8]> {
    let mut buffer = [0u8; 64];
    let bytes = name.as_bytes();
    buffer.get_mut(..bytes.len())?.copy_from_slice(bytes);
    // SAFETY: the buffer is NUL-terminated (it is longer than every variable name);
    // getenv's result stays valid until the environment is modified, and the shim reads
    // it once at load.
    let value = unsafe { libc::getenv(buffer.as_ptr().cast()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(value) }.to_bytes())
}

/// Where a new allocation should live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Vram,
    Host,
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
    fn sizes_parse_in_every_documented_spelling() {
        assert_eq!(parse_size(b"8G"), Some(8 * G));
        assert_eq!(parse_size(b"8GiB"), Some(8 * G));
        assert_eq!(parse_size(b"8gb"), Some(8 * G));
        assert_eq!(parse_size(b"8192M"), Some(8 * G));
        assert_eq!(parse_size(b" 4096 "), Some(4096));
        assert_eq!(parse_size(b"1.5G"), Some(G + G / 2));
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"16T"), Some(16 << 40));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [&b""[..], b"G", b"8X", b"8GiBs", b"-1", b"1.5", b"1..5G", b"99999999999999999999", b"20000000T"] {
            assert_eq!(parse_size(bad), None, "{:?}", std::str::from_utf8(bad));
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<&'static [u8]> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_bytes())
    }

    #[test]
    fn environment_sets_every_field() {
        let mut complaints = 0;
        let config = from_lookup(
            env(&[
                ("GREENBOOST_VRAM_BUDGET", "8G"),
                ("GREENBOOST_VRAM_RESERVE", "1G"),
                ("GREENBOOST_MIN_T2_SIZE", "4M"),
                ("GREENBOOST_T2_CAP", "64G"),
                ("GREENBOOST_SPLIT_MIN", "1G"),
                ("GREENBOOST_REPORT", "combined"),
                ("GREENBOOST_BACKEND", "userspace"),
                ("GREENBOOST_LOG", "debug"),
                ("GREENBOOST_DISABLE", "1"),
                ("GREENBOOST_STAGING", "off"),
                ("GREENBOOST_STAGE_MIN_WIDTH", "128"),
                ("GREENBOOST_STAGE_MAX", "1G"),
            ]),
            |_, _, _| complaints += 1,
        );
        assert_eq!(complaints, 0);
        assert_eq!(
            config,
            Config {
                disabled: true,
                vram_budget: Some(8 * G),
                vram_reserve: Some(G),
                min_t2_size: 4 * M,
                t2_cap: Some(64 * G),
                split_min: Some(G),
                report: ReportMode::Combined,
                backend: BackendChoice::Userspace,
                log: Level::Debug,
                staging: false,
                stage_min_width: 128,
                stage_max: G,
            }
        );
    }

    #[test]
    fn bad_values_are_reported_once_each_and_defaults_kept() {
        let mut complaints = Vec::new();
        let config = from_lookup(
            env(&[
                ("GREENBOOST_VRAM_BUDGET", "lots"),
                ("GREENBOOST_SPLIT_MIN", "half"),
                ("GREENBOOST_REPORT", "everything"),
                ("GREENBOOST_BACKEND", "gpu"),
                ("GREENBOOST_LOG", "loud"),
            ]),
            |name, _, _| complaints.push(name.to_string()),
        );
        assert_eq!(config, Config { ..Config::default() });
        complaints.sort();
        assert_eq!(
            complaints,
            ["GREENBOOST_BACKEND", "GREENBOOST_LOG", "GREENBOOST_REPORT", "GREENBOOST_SPLIT_MIN", "GREENBOOST_VRAM_BUDGET"]
        );
    }

    #[test]
    fn split_minimum_defaults_to_256_mib_and_turns_off() {
        let default = Config::default();
        assert!(!default.may_split(256 * M - 1));
        assert!(default.may_split(256 * M));
        for off in ["off", "0", " off "] {
            let config = from_lookup(move |name| (name == "GREENBOOST_SPLIT_MIN").then_some(off.as_bytes()), |_, _, _| {
                panic!("{off:?} refused")
            });
            assert_eq!(config.split_min, None, "{off:?}");
            assert!(!config.may_split(u64::MAX));
        }
    }

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
