//! GreenBoost's policy surface, defined once: every `GREENBOOST_*` setting with its
//! variable, `greenboost run` flag, parser, default and help (`SETTINGS`), the one size
//! syntax (`parse_size`), per-device sizes (`PerDevice`), the choices
//! (`ReportMode`, `BackendChoice`, `LogLevel`, `parse_switch`) and the default values;
//! and the record a process under the shim publishes for `greenboost status`
//! (`Published`).
//!
//! The shim parses its environment in a load-time constructor, before `main`, where
//! allocating is forbidden: so this crate is `no_std`, has no dependencies and never
//! allocates. Parsers take bytes (what `getenv` gives) and return `Option` (or a
//! `Result` saying why, for messages); values print with `Display` in a form the
//! parsers read back.
//!
//! Every parser trims ASCII whitespace first, and refuses an empty value: a caller
//! treats a blank variable as unset (`is_unset`).

#![no_std]

#[cfg(test)]
extern crate std;

mod choice;
mod per_device;
mod published;
mod settings;
mod size;
mod tools;

pub use choice::{parse_switch, switch_name, BackendChoice, LogLevel, ReportMode, TieringChoice, SWITCH_NAMES};
pub use per_device::{PerDevice, PerDeviceError, MAX_DEVICES, MAX_ORDINAL};
pub use published::{
    start_time_from_stat, Published, PUBLISHED_DIR, PUBLISHED_MAGIC, PUBLISHED_PREFIX, PUBLISHED_VERSION,
};
pub use settings::{
    by_env, by_flag, default_host_reserve, default_vram_headroom, default_vram_reserve, Bounds, Id, Kind, Setting,
    DEFAULT_DEMOTE, DEFAULT_GIVE_BACK, DEFAULT_LINK_GBPS, DEFAULT_MIN_T2_SIZE, DEFAULT_SPLIT_MIN,
    DEFAULT_STAGE_LOOKAHEAD, DEFAULT_STAGE_MAX, DEFAULT_STAGE_MIN_WIDTH, DEFAULT_STAGE_SLICES, DEFAULT_STAGING,
    DEFAULT_T2_CACHE, DEFAULT_TIER_INTERVAL_MS, DEFAULT_VRAM_HEADROOM, DEFAULT_VRAM_RESERVE, HOST_RESERVE_MAX,
    HOST_RESERVE_MIN, MAX_STAGE_SLICES, SETTINGS,
};
pub use size::{is_unset, parse_count, parse_size, trim, try_parse_size, SizeError, SizeOrOff, SIZE_SYNTAX};
pub use tools::TOOL_VARIABLES;
