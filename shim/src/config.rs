//! Policy settings from the environment, parsed once at load into a fixed `Config`
//! (no allocation), and the pure placement/report rules that use them.
//!
//! Every variable is listed in shim/README.md ("Environment").

use std::sync::OnceLock;

use crate::env;

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
    /// VRAM kept free on the device for what the shim does not see; `None`: the
    /// default, at most an eighth of the device (see `placement`).
    pub vram_headroom: Option<u64>,
    /// Allocations smaller than this always go to VRAM.
    pub min_t2_size: u64,
    /// Most T2 bytes in use at once; `None`: the backend's default.
    pub t2_cap: Option<u64>,
    /// Most bytes of freed T2 buffers kept registered for reuse (0: none).
    pub t2_cache: u64,
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
/// VRAM kept free on a device (at most an eighth of it): see shim/README.md for the
/// measurement behind it.
pub const DEFAULT_VRAM_HEADROOM: u64 = 1 << 30;
pub const DEFAULT_MIN_T2_SIZE: u64 = 2 << 20;
/// Every product: wide ones re-read each T2 tile once per output tile, and even a
/// one-token product (decode) ran 5% faster on the H200 from a copy than zero-copy
/// (8B shape, 8.3 GB of weights in T2: 175.7 vs 184.3 ms per token, same run): the copy
/// engine streams PCIe better than the product's own loads.
pub const DEFAULT_STAGE_MIN_WIDTH: u64 = 1;
pub const DEFAULT_STAGE_MAX: u64 = 256 << 20;
pub const DEFAULT_SPLIT_MIN: u64 = 256 << 20;
/// Enough for a few large buffers to be freed and allocated again at no cost, small next
/// to the T2 a model needs.
pub const DEFAULT_T2_CACHE: u64 = 1 << 30;

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            vram_budget: None,
            vram_reserve: None,
            vram_headroom: None,
            min_t2_size: DEFAULT_MIN_T2_SIZE,
            t2_cap: None,
            t2_cache: DEFAULT_T2_CACHE,
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
    if let Some(headroom) = size("GREENBOOST_VRAM_HEADROOM", &mut complain) {
        config.vram_headroom = Some(headroom);
    }
    if let Some(min) = size("GREENBOOST_MIN_T2_SIZE", &mut complain) {
        config.min_t2_size = min;
    }
    if let Some(cap) = size("GREENBOOST_T2_CAP", &mut complain) {
        config.t2_cap = Some(cap);
    }
    if let Some(limit) = size("GREENBOOST_T2_CACHE", &mut complain) {
        config.t2_cache = limit;
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

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Parses the environment once (the load-time constructor); later calls return the
/// same configuration. `complain` receives (variable, bad value, what is used instead).
pub fn load(complain: impl FnMut(&str, &[u8], &str)) -> Config {
    *CONFIG.get_or_init(|| from_lookup(env::getenv, complain))
}

/// The configuration: what `load` parsed, or the defaults before it ran.
pub fn get() -> Config {
    CONFIG.get().copied().unwrap_or_default()
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
                vram_headroom: None,
                min_t2_size: 4 * M,
                t2_cap: Some(64 * G),
                t2_cache: DEFAULT_T2_CACHE,
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
}
