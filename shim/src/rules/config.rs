//! The configuration: the environment read once at load, through the one definition of
//! every setting (the `greenboost-policy` crate: names, parsers, defaults), into a fixed
//! `Config` without allocating. `placement` holds the rules that use it.

use std::sync::OnceLock;

use greenboost_policy::{self as policy, Id, LogLevel, PerDevice, SizeOrOff};

use crate::sys::env;
use crate::sys::log::Level;

/// A GB of a link's rate (GB/s): 10^9 bytes.
const GB_DECIMAL: u64 = 1_000_000_000;

pub use greenboost_policy::{BackendChoice, ReportMode, TieringChoice};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub disabled: bool,
    /// VRAM the process may use, per device; devices not listed: physical.
    pub vram_budget: PerDevice,
    /// VRAM kept free under the budget for workspace and activations while the program
    /// loads; `None`: one eighth of the budget, at most 512 MiB.
    pub(super) vram_reserve: Option<u64>,
    /// VRAM kept free on each device for what the shim does not see; devices not listed:
    /// the default, at most an eighth of the device (see `placement`).
    pub(super) vram_headroom: PerDevice,
    /// Allocations smaller than this always go to VRAM.
    pub(super) min_t2_size: u64,
    /// Most T2 bytes in use at once; `None`: the backend's default.
    pub t2_cap: Option<u64>,
    /// Most bytes of freed T2 buffers kept registered for reuse (0: none).
    pub t2_cache: u64,
    /// RAM the userspace backend keeps available on the host; `None`: 1/32 of RAM,
    /// 64 MiB to 1 GiB (the module's default reserve).
    pub host_reserve: Option<u64>,
    /// Allocations at least this large that placement sends to T2 are split: VRAM that
    /// is still free under the limit holds their head, T2 the rest. `None`: never split.
    pub(super) split_min: Option<u64>,
    pub report: ReportMode,
    pub backend: BackendChoice,
    pub log: Level,
    /// Copy T2 operands of cuBLAS matrix products into VRAM first (see `staging`).
    pub staging: bool,
    /// A product is wide when the dimension that re-reads the T2 operand is at least this.
    pub stage_min_width: u64,
    /// Largest scratch buffer staging may hold in VRAM; larger operands stay zero-copy.
    pub stage_max: u64,
    /// How many slices a wide product's staged operand is copied in (1: not sliced; see
    /// `staging_slices`).
    pub stage_slices: u64,
    /// Copy the next product's T2 operand while this one runs (see `gemm::lookahead`).
    pub stage_lookahead: bool,
    /// Which T2 allocations are movable (see `tiering`).
    pub tiering: TieringChoice,
    /// Whether live tiering gives VRAM back when others need it.
    pub demote: bool,
    /// Whether live tiering gives back the VRAM the driver keeps after moves out
    /// (`engine::give_back`).
    pub give_back: bool,
    /// The live-tiering thread's period, in milliseconds (at least 1).
    pub tier_interval_ms: u64,
    /// GREENBOOST_LINK_GBPS, in bytes per second.
    pub link_bytes_per_s: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            vram_budget: PerDevice::none(),
            vram_reserve: None,
            vram_headroom: PerDevice::none(),
            min_t2_size: policy::DEFAULT_MIN_T2_SIZE,
            t2_cap: None,
            t2_cache: policy::DEFAULT_T2_CACHE,
            host_reserve: None,
            split_min: Some(policy::DEFAULT_SPLIT_MIN),
            report: ReportMode::DEFAULT,
            backend: BackendChoice::DEFAULT,
            log: Level::Warn,
            staging: policy::DEFAULT_STAGING,
            stage_min_width: policy::DEFAULT_STAGE_MIN_WIDTH,
            stage_max: policy::DEFAULT_STAGE_MAX,
            stage_slices: policy::DEFAULT_STAGE_SLICES,
            stage_lookahead: policy::DEFAULT_STAGE_LOOKAHEAD,
            tiering: TieringChoice::DEFAULT,
            demote: policy::DEFAULT_DEMOTE,
            give_back: policy::DEFAULT_GIVE_BACK,
            tier_interval_ms: policy::DEFAULT_TIER_INTERVAL_MS,
            link_bytes_per_s: policy::DEFAULT_LINK_GBPS * GB_DECIMAL,
        }
    }
}

impl Config {
    /// Whether some setting differs between devices (then reports need the device).
    pub fn varies_by_device(&self) -> bool {
        self.vram_budget.iter().next().is_some() || self.vram_headroom.iter().next().is_some()
    }
}

fn level(log: LogLevel) -> Level {
    match log {
        LogLevel::Warn => Level::Warn,
        LogLevel::Info => Level::Info,
        LogLevel::Debug => Level::Debug,
    }
}

/// Reads settings through `lookup`, reporting each bad value once to `complain` as
/// (variable, value, what is used instead).
struct Reader<L, C> {
    lookup: L,
    complain: C,
}

impl<L: Fn(&str) -> Option<&'static [u8]>, C: FnMut(&str, &[u8], &str)> Reader<L, C> {
    /// The value of `id` parsed by `parse`; `None` when unset, blank or invalid (then
    /// complained about, and the default stays).
    fn read<T>(&mut self, id: Id, parse: impl Fn(&[u8]) -> Option<T>) -> Option<T> {
        let setting = id.setting();
        let value = (self.lookup)(setting.env).filter(|value| !policy::is_unset(value))?;
        let parsed = parse(value);
        if parsed.is_none() {
            let mut instead = [0u8; 200];
            let text = describe_default(&mut instead, setting);
            (self.complain)(setting.env, value, text);
        }
        parsed
    }
}

/// "the default (X; sizes are ...)" in `buffer`, without allocating.
fn describe_default<'a>(buffer: &'a mut [u8; 200], setting: &policy::Setting) -> &'a str {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let hint = match setting.kind {
        policy::Kind::Size | policy::Kind::PerDeviceSize | policy::Kind::SizeOrOff => "; sizes look like 8G, 512M",
        _ => "",
    };
    let _ = write!(cursor, "the default ({}{})", setting.default, hint);
    let len = cursor.position() as usize;
    std::str::from_utf8(&buffer[..len]).unwrap_or("the default")
}

/// Builds the configuration from a variable lookup (the environment in the product, a
/// table in tests). `complain` receives (variable, bad value, what is used instead).
pub(super) fn from_lookup(
    lookup: impl Fn(&str) -> Option<&'static [u8]>,
    complain: impl FnMut(&str, &[u8], &str),
) -> Config {
    let mut reader = Reader { lookup, complain };
    let mut config = Config::default();
    if let Some(log) = reader.read(Id::Log, LogLevel::parse) {
        config.log = level(log);
    }
    config.disabled = reader.read(Id::Disable, policy::parse_switch).unwrap_or(false);
    if let Some(budget) = reader.read(Id::VramBudget, PerDevice::parse) {
        config.vram_budget = budget;
    }
    config.vram_reserve = reader.read(Id::VramReserve, policy::parse_size);
    if let Some(headroom) = reader.read(Id::VramHeadroom, PerDevice::parse) {
        config.vram_headroom = headroom;
    }
    if let Some(min) = reader.read(Id::MinT2Size, policy::parse_size) {
        config.min_t2_size = min;
    }
    config.t2_cap = reader.read(Id::T2Cap, policy::parse_size);
    if let Some(limit) = reader.read(Id::T2Cache, policy::parse_size) {
        config.t2_cache = limit;
    }
    config.host_reserve = reader.read(Id::HostReserve, policy::parse_size);
    if let Some(split) = reader.read(Id::SplitMin, SizeOrOff::parse) {
        config.split_min = split.size();
    }
    if let Some(lookahead) = reader.read(Id::StageLookahead, policy::parse_switch) {
        config.stage_lookahead = lookahead;
    }
    if let Some(staging) = reader.read(Id::Staging, policy::parse_switch) {
        config.staging = staging;
    }
    if let Some(width) = reader.read(Id::StageMinWidth, policy::parse_count) {
        config.stage_min_width = width.max(1);
    }
    if let Some(max) = reader.read(Id::StageMax, policy::parse_size) {
        config.stage_max = max;
    }
    if let Some(slices) = reader.read(Id::StageSlices, policy::parse_count) {
        config.stage_slices = stage_slices_bounds().clamp(slices);
    }
    if let Some(tiering) = reader.read(Id::Tiering, TieringChoice::parse) {
        config.tiering = tiering;
    }
    if let Some(demote) = reader.read(Id::Demote, policy::parse_switch) {
        config.demote = demote;
    }
    if let Some(give_back) = reader.read(Id::GiveBack, policy::parse_switch) {
        config.give_back = give_back;
    }
    if let Some(interval) = reader.read(Id::TierInterval, policy::parse_count) {
        config.tier_interval_ms = interval.max(1);
    }
    if let Some(gbps) = reader.read(Id::LinkGbps, policy::parse_count) {
        let bounds = Id::LinkGbps.setting().bounds;
        config.link_bytes_per_s = bounds.map_or(gbps, |bounds| bounds.clamp(gbps)) * GB_DECIMAL;
    }
    if let Some(report) = reader.read(Id::Report, ReportMode::parse) {
        config.report = report;
    }
    if let Some(backend) = reader.read(Id::Backend, BackendChoice::parse) {
        config.backend = backend;
    }
    config
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Parses the environment once (the load-time constructor); later calls return the
/// same configuration. `complain` receives (variable, bad value, what is used instead).
pub fn load(complain: impl FnMut(&str, &[u8], &str)) -> Config {
    *CONFIG.get_or_init(|| from_lookup(env::getenv, complain))
}

/// The values of GREENBOOST_STAGE_SLICES the shim uses (one outside is clamped).
fn stage_slices_bounds() -> policy::Bounds {
    policy::by_env("GREENBOOST_STAGE_SLICES")
        .and_then(|setting| setting.bounds)
        .unwrap_or(policy::Bounds { min: 1, max: policy::MAX_STAGE_SLICES })
}

/// Says at info level what the environment asks that the shim will not do as written:
/// `GREENBOOST_*` names that neither the shim nor the tools read (a misspelling would
/// otherwise be ignored in silence), and counts outside their bounds (clamped). Called
/// once the log level is set.
pub fn report_environment() {
    env::each_with_prefix(b"GREENBOOST_", |name, value| {
        let Ok(name) = std::str::from_utf8(name) else { return };
        match policy::by_env(name) {
            Some(setting) => {
                let count = setting.bounds.zip(policy::parse_count(value));
                if let Some((bounds, count)) = count.filter(|(bounds, count)| bounds.clamp(*count) != *count) {
                    info!(
                        "{}={} is outside {}..={}: the shim uses {}",
                        name,
                        count,
                        bounds.min,
                        bounds.max,
                        bounds.clamp(count)
                    );
                }
            }
            None if policy::TOOL_VARIABLES.iter().any(|(tool, _)| *tool == name) => {}
            None => info!("{} is not a GreenBoost variable: nothing reads it (see `greenboost run --help`)", name),
        }
    });
}

/// The defaults, for calls before `load` ran (a hook reached before the constructor).
static DEFAULTS: OnceLock<Config> = OnceLock::new();

/// The configuration: what `load` parsed, or the defaults before it ran. A reference:
/// the hot paths (every memory query) read a field or two of it.
pub fn get() -> &'static Config {
    CONFIG.get().unwrap_or_else(|| DEFAULTS.get_or_init(Config::default))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<&'static [u8]> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_bytes())
    }

    #[test]
    fn environment_sets_every_field() {
        let mut complaints = 0;
        let config = from_lookup(
            env(&[
                ("GREENBOOST_VRAM_BUDGET", "0:8G,1:4G"),
                ("GREENBOOST_VRAM_RESERVE", "1G"),
                ("GREENBOOST_VRAM_HEADROOM", "2G"),
                ("GREENBOOST_MIN_T2_SIZE", "4M"),
                ("GREENBOOST_T2_CAP", "64G"),
                ("GREENBOOST_T2_CACHE", "0"),
                ("GREENBOOST_HOST_RESERVE", "3G"),
                ("GREENBOOST_SPLIT_MIN", "1G"),
                ("GREENBOOST_REPORT", "combined"),
                ("GREENBOOST_BACKEND", "userspace"),
                ("GREENBOOST_LOG", "debug"),
                ("GREENBOOST_DISABLE", "1"),
                ("GREENBOOST_STAGING", "off"),
                ("GREENBOOST_STAGE_MIN_WIDTH", "128"),
                ("GREENBOOST_STAGE_MAX", "1G"),
                ("GREENBOOST_STAGE_SLICES", "8"),
                ("GREENBOOST_STAGE_LOOKAHEAD", "on"),
                ("GREENBOOST_TIERING", "on"),
                ("GREENBOOST_DEMOTE", "off"),
                ("GREENBOOST_GIVE_BACK", "off"),
                ("GREENBOOST_TIER_INTERVAL_MS", "0"),
                ("GREENBOOST_LINK_GBPS", "25"),
            ]),
            |_, _, _| complaints += 1,
        );
        assert_eq!(complaints, 0);
        assert_eq!(
            (config.vram_budget.get(0), config.vram_budget.get(1), config.vram_budget.get(2)),
            (Some(8 * G), Some(4 * G), None)
        );
        assert_eq!(config.vram_headroom.get(5), Some(2 * G));
        assert_eq!(
            config,
            Config {
                disabled: true,
                vram_budget: config.vram_budget,
                vram_reserve: Some(G),
                vram_headroom: PerDevice::every(2 * G),
                min_t2_size: 4 * M,
                t2_cap: Some(64 * G),
                t2_cache: 0,
                host_reserve: Some(3 * G),
                split_min: Some(G),
                report: ReportMode::Combined,
                backend: BackendChoice::Userspace,
                log: Level::Debug,
                staging: false,
                stage_min_width: 128,
                stage_max: G,
                stage_slices: 8,
                stage_lookahead: true,
                tiering: TieringChoice::On,
                demote: false,
                give_back: false,
                tier_interval_ms: 1,
                link_bytes_per_s: 25 * GB_DECIMAL,
            }
        );
    }

    #[test]
    fn bad_values_are_reported_once_each_and_defaults_kept() {
        let mut complaints = Vec::new();
        let config = from_lookup(
            env(&[
                ("GREENBOOST_VRAM_BUDGET", "lots"),
                ("GREENBOOST_VRAM_HEADROOM", "1.5"),
                ("GREENBOOST_SPLIT_MIN", "half"),
                ("GREENBOOST_REPORT", "everything"),
                ("GREENBOOST_BACKEND", "gpu"),
                ("GREENBOOST_LOG", "loud"),
                ("GREENBOOST_T2_CACHE", ".5G"),
                ("GREENBOOST_TIERING", "sometimes"),
            ]),
            |name, _, instead| complaints.push((name.to_string(), instead.to_string())),
        );
        assert_eq!(config, Config::default());
        complaints.sort();
        let names: Vec<_> = complaints.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "GREENBOOST_BACKEND",
                "GREENBOOST_LOG",
                "GREENBOOST_REPORT",
                "GREENBOOST_SPLIT_MIN",
                "GREENBOOST_T2_CACHE",
                "GREENBOOST_TIERING",
                "GREENBOOST_VRAM_BUDGET",
                "GREENBOOST_VRAM_HEADROOM"
            ]
        );
        let (_, instead) = &complaints[4];
        assert_eq!(instead, "the default (1G; sizes look like 8G, 512M)");
    }

    #[test]
    fn split_minimum_defaults_to_256_mib_and_turns_off() {
        assert_eq!(Config::default().split_min, Some(256 * M));
        for off in ["off", "0", " off "] {
            let config = from_lookup(
                move |name| (name == "GREENBOOST_SPLIT_MIN").then_some(off.as_bytes()),
                |_, _, _| panic!("{off:?} refused"),
            );
            assert_eq!(config.split_min, None, "{off:?}");
        }
    }

    #[test]
    fn blank_values_are_unset() {
        let config = from_lookup(env(&[("GREENBOOST_VRAM_BUDGET", "  "), ("GREENBOOST_LOG", "")]), |name, _, _| {
            panic!("{name} complained about a blank value")
        });
        assert_eq!(config, Config::default());
    }
}
