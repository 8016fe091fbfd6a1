//! What `run` checks in the program's `GREENBOOST_*` environment before starting it:
//! names neither the shim nor the tools read (the shim would ignore a misspelling
//! silently), and counts the shim clamps (`--stage-slices 99` runs with 8).

use std::ffi::OsString;

use greenboost_policy::{by_env, parse_count, Bounds, SETTINGS, TOOL_VARIABLES};

use crate::policy::{Policy, Value};

const PREFIX: &str = "GREENBOOST_";

/// The warnings for `policy` and the `inherited` environment it is added to.
pub fn warnings(policy: &Policy, inherited: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, value) in inherited {
        let (Some(name), value) = (name.to_str(), value.to_string_lossy()) else { continue };
        if !name.to_ascii_uppercase().starts_with(PREFIX) {
            continue;
        }
        match by_env(name) {
            // A flag given replaces the variable.
            Some(setting) if policy.get(setting.id).is_some() => {}
            Some(setting) => {
                let count = setting.bounds.zip(parse_count(value.as_bytes()));
                warnings.extend(count.and_then(|(bounds, count)| clamped(&format!("{name}={value}"), count, bounds)));
            }
            None if TOOL_VARIABLES.iter().any(|(tool, _)| *tool == name) => {}
            None => warnings.push(unknown(name)),
        }
    }
    for setting in SETTINGS {
        if let (Some(flag), Some(bounds), Some(Value::Count(count))) =
            (setting.flag, setting.bounds, policy.get(setting.id))
        {
            warnings.extend(clamped(&format!("--{flag} {count}"), *count, bounds));
        }
    }
    warnings
}

/// `given` (as the user wrote it) when the shim uses another value than `count`.
fn clamped(given: &str, count: u64, bounds: Bounds) -> Option<String> {
    let used = bounds.clamp(count);
    match count {
        _ if used == count => None,
        _ if count > bounds.max => {
            Some(format!("{given} is more than the shim uses (at most {}): it runs with {used}", bounds.max))
        }
        _ => Some(format!("{given} is less than the shim uses (at least {}): it runs with {used}", bounds.min)),
    }
}

/// A name nobody reads, with the nearest known one.
fn unknown(name: &str) -> String {
    let known = SETTINGS.iter().map(|setting| setting.env).chain(TOOL_VARIABLES.iter().map(|(tool, _)| *tool));
    let upper = name.to_ascii_uppercase();
    let nearest = known.map(|candidate| (strsim::damerau_levenshtein(&upper, candidate), candidate)).min();
    let hint = match nearest {
        Some((distance, candidate)) if distance <= 3 => format!(" (did you mean {candidate}?)"),
        _ => String::new(),
    };
    format!(
        "{name} is not a GreenBoost variable, so nothing reads it{hint}; `greenboost run --help` lists the settings"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenboost_policy::Id;

    fn environment(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(name, value)| (name.into(), value.into())).collect()
    }

    #[test]
    fn misspelled_names_are_named_with_the_nearest() {
        let inherited = environment(&[
            ("GREENBOOST_STAGE_SLICE", "4"),
            ("greenboost_log", "info"),
            ("GREENBOOST_LOG", "info"),
            ("GREENBOOST_SHIM", "/opt/libgreenboost_cuda.so"),
            ("GREENBOOST_WHATEVER_ELSE_ENTIRELY", "1"),
            ("PATH", "/usr/bin"),
        ]);
        assert_eq!(
            warnings(&Policy::default(), inherited),
            vec![
                "GREENBOOST_STAGE_SLICE is not a GreenBoost variable, so nothing reads it (did you mean GREENBOOST_STAGE_SLICES?); `greenboost run --help` lists the settings",
                "greenboost_log is not a GreenBoost variable, so nothing reads it (did you mean GREENBOOST_LOG?); `greenboost run --help` lists the settings",
                "GREENBOOST_WHATEVER_ELSE_ENTIRELY is not a GreenBoost variable, so nothing reads it; `greenboost run --help` lists the settings",
            ]
        );
    }

    #[test]
    fn clamped_counts_say_what_the_shim_uses() {
        let mut policy = Policy::default();
        policy.set(Id::StageSlices, Value::Count(99));
        policy.set(Id::TierInterval, Value::Count(0));
        policy.set(Id::StageMinWidth, Value::Count(64));
        let inherited = environment(&[("GREENBOOST_STAGE_SLICES", "2"), ("GREENBOOST_TIER_INTERVAL_MS", "5")]);
        assert_eq!(
            warnings(&policy, inherited),
            vec![
                "--stage-slices 99 is more than the shim uses (at most 8): it runs with 8",
                "--tier-interval-ms 0 is less than the shim uses (at least 1): it runs with 1",
            ],
            "the flags replace the variables, whose values are not checked"
        );
        let inherited = environment(&[("GREENBOOST_STAGE_SLICES", "12"), ("GREENBOOST_STAGE_MIN_WIDTH", "x")]);
        assert_eq!(
            warnings(&Policy::default(), inherited),
            vec!["GREENBOOST_STAGE_SLICES=12 is more than the shim uses (at most 8): it runs with 8"],
            "a value that is not a count is the shim's to report"
        );
    }
}
