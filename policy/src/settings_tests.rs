//! The settings table's own tests: names, flags, defaults and bounds as the table says.

use super::*;
use crate::{parse_count, parse_size, parse_switch, SizeOrOff};

#[test]
fn names_and_flags_are_unique_and_spelled_alike() {
    for (i, a) in SETTINGS.iter().enumerate() {
        assert!(a.env.starts_with("GREENBOOST_"), "{}", a.env);
        assert!(a.env.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'), "{}", a.env);
        assert!(a.env.len() < 64, "the shim's getenv buffer holds 64 bytes: {}", a.env);
        if let Some(flag) = a.flag {
            assert!(flag.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'), "{flag}");
            // The flag is the variable's name in lower case, `--no-X` for switches
            // that are on by default (the flag sets the opposite of the default).
            let stem = a.env.trim_start_matches("GREENBOOST_").to_ascii_lowercase().replace('_', "-");
            let turns_off = a.kind == Kind::Switch && a.default == "on";
            let expected = if turns_off { std::format!("no-{stem}") } else { stem };
            assert_eq!(flag, expected);
        }
        for b in &SETTINGS[i + 1..] {
            assert_ne!(a.env, b.env);
            assert!(a.flag.is_none() || a.flag != b.flag, "{:?}", a.flag);
        }
        assert_eq!(a.id.setting(), a);
        assert_eq!(by_env(a.env), Some(a));
        if let Some(flag) = a.flag {
            assert_eq!(by_flag(flag), Some(a));
        }
        assert!(!a.help.is_empty() && !a.help.ends_with('.'), "{}", a.help);
    }
    assert_eq!(by_env("GREENBOOST_NOTHING"), None);
    assert_eq!(by_flag("shim"), None);
    assert_eq!(Id::Disable.setting().flag, None);
}

/// The default a user reads is the default the constants give.
#[test]
fn defaults_shown_are_the_defaults_used() {
    let size = |id: Id| parse_size(id.setting().default.as_bytes());
    let headroom = Id::VramHeadroom.setting().default;
    assert_eq!(headroom.split(',').next().and_then(|first| parse_size(first.as_bytes())), Some(DEFAULT_VRAM_HEADROOM));
    assert!(headroom.ends_with("at most 1/8 of the GPU"), "{headroom}");
    assert_eq!(default_vram_headroom(8 << 30), 1 << 30);
    assert_eq!(default_vram_headroom(128 << 20), 16 << 20);
    assert_eq!(size(Id::MinT2Size), Some(DEFAULT_MIN_T2_SIZE));
    assert_eq!(size(Id::T2Cache), Some(DEFAULT_T2_CACHE));
    assert_eq!(size(Id::StageMax), Some(DEFAULT_STAGE_MAX));
    assert_eq!(SizeOrOff::parse(Id::SplitMin.setting().default.as_bytes()), Some(SizeOrOff::Size(DEFAULT_SPLIT_MIN)));

    assert_eq!(parse_switch(Id::Staging.setting().default.as_bytes()), Some(DEFAULT_STAGING));
    assert_eq!(parse_switch(Id::Disable.setting().default.as_bytes()), Some(false));
    assert_eq!(parse_count(Id::StageMinWidth.setting().default.as_bytes()), Some(DEFAULT_STAGE_MIN_WIDTH));
    assert_eq!(parse_count(Id::StageSlices.setting().default.as_bytes()), Some(DEFAULT_STAGE_SLICES));
    assert_eq!(parse_switch(Id::StageLookahead.setting().default.as_bytes()), Some(DEFAULT_STAGE_LOOKAHEAD));
    assert_eq!(parse_switch(Id::Demote.setting().default.as_bytes()), Some(DEFAULT_DEMOTE));
    assert_eq!(parse_switch(Id::GiveBack.setting().default.as_bytes()), Some(DEFAULT_GIVE_BACK));
    assert_eq!(parse_count(Id::TierInterval.setting().default.as_bytes()), Some(DEFAULT_TIER_INTERVAL_MS));
    assert_eq!(parse_count(Id::LinkGbps.setting().default.as_bytes()), Some(DEFAULT_LINK_GBPS));
    assert_eq!(Id::Tiering.setting().default, "auto");
    assert_eq!(Id::Report.setting().default, "physical");
    assert_eq!(Id::Backend.setting().default, "auto");
    assert_eq!(Id::Log.setting().default, "warn");
    assert!(Id::VramReserve.setting().default.contains("512M"));
    assert_eq!(parse_size(b"512M"), Some(DEFAULT_VRAM_RESERVE));
    assert!(Id::HostReserve.setting().default.contains("64M to 1G"));
    assert_eq!((parse_size(b"64M"), parse_size(b"1G")), (Some(HOST_RESERVE_MIN), Some(HOST_RESERVE_MAX)));
}

#[test]
fn switch_helps_read_after_turn_on_or_off() {
    for setting in SETTINGS.iter().filter(|setting| setting.kind == Kind::Switch && setting.flag.is_some()) {
        let first = setting.help.split([' ', ',']).next().unwrap();
        let acronym = first.bytes().all(|b| b.is_ascii_uppercase());
        assert!(acronym || first.starts_with(|c: char| c.is_ascii_lowercase()), "{}: {}", setting.env, setting.help);
    }
}

#[test]
fn counts_say_their_bounds_and_default_inside_them() {
    for setting in SETTINGS {
        if let Some(bounds) = setting.bounds {
            assert_eq!(setting.kind, Kind::Count, "{}", setting.env);
            let default = parse_count(setting.default.as_bytes()).unwrap();
            assert_eq!(bounds.clamp(default), default, "{}", setting.env);
        }
    }
    let slices = Id::StageSlices.setting();
    assert!(slices.help.contains(&std::format!("(at most {MAX_STAGE_SLICES})")), "{}", slices.help);
    let bounds = slices.bounds.unwrap();
    assert_eq!((bounds.clamp(0), bounds.clamp(3), bounds.clamp(99)), (1, 3, MAX_STAGE_SLICES));
}

#[test]
fn choices_name_their_enums() {
    assert_eq!(Id::Report.setting().kind, Kind::Choice(&["physical", "combined"]));
    assert_eq!(Id::Backend.setting().kind, Kind::Choice(&["auto", "kmod", "userspace"]));
    assert_eq!(Id::Log.setting().kind, Kind::Choice(&["warn", "info", "debug"]));
    assert_eq!(Id::Tiering.setting().kind, Kind::Choice(&["auto", "on", "off"]));
}

#[test]
fn computed_defaults() {
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    assert_eq!(default_vram_reserve(256 * M), 32 * M);
    assert_eq!(default_vram_reserve(4 * G), 512 * M);
    assert_eq!(default_vram_reserve(80 * G), 512 * M);
    assert_eq!(default_host_reserve(G), 64 * M);
    assert_eq!(default_host_reserve(4 * G), 128 * M);
    assert_eq!(default_host_reserve(16 * G), 512 * M);
    assert_eq!(default_host_reserve(2048 * G), G);
}
