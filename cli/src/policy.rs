//! The POLICY flags of `run` and `demo`: one per setting of `greenboost_policy::SETTINGS`
//! that has a flag, with the name, help, default and parser that table gives, so the
//! flags cannot drift from what the shim reads.

use std::fmt;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use greenboost_policy::{
    parse_count, parse_switch, switch_name, BackendChoice, Id, Kind, PerDevice, Setting, SizeOrOff, SETTINGS,
};

use crate::size::parse_size;

/// A flag's value, parsed by the policy crate; `Display` writes what the shim reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Size(u64),
    PerDevice(PerDevice),
    SizeOrOff(SizeOrOff),
    /// The canonical name of the choice.
    Choice(&'static str),
    Switch(bool),
    Count(u64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Size(bytes) | Value::Count(bytes) => write!(f, "{bytes}"),
            Value::PerDevice(sizes) => write!(f, "{sizes}"),
            Value::SizeOrOff(size) => write!(f, "{size}"),
            Value::Choice(name) => f.write_str(name),
            Value::Switch(on) => f.write_str(switch_name(*on)),
        }
    }
}

/// Parses `text` as `setting`'s kind of value, with a sentence saying what is wrong.
pub fn parse_value(setting: &Setting, text: &str) -> Result<Value, String> {
    match setting.kind {
        Kind::Size => parse_size(text).map(Value::Size),
        Kind::PerDeviceSize => {
            PerDevice::try_parse(text.as_bytes()).map(Value::PerDevice).map_err(|e| format!("'{text}' {e}"))
        }
        Kind::SizeOrOff => {
            SizeOrOff::try_parse(text.as_bytes()).map(Value::SizeOrOff).map_err(|e| format!("'{text}' {e}; or off"))
        }
        Kind::Choice(names) => names
            .iter()
            .find(|name| name.eq_ignore_ascii_case(text.trim()))
            .map(|name| Value::Choice(name))
            .ok_or_else(|| format!("'{text}' is not one of {}", names.join(", "))),
        Kind::Switch => {
            parse_switch(text.as_bytes()).map(Value::Switch).ok_or_else(|| format!("'{text}' is not on or off"))
        }
        Kind::Count => {
            parse_count(text.as_bytes()).map(Value::Count).ok_or_else(|| format!("'{text}' is not a number"))
        }
    }
}

/// What a switch's flag sets: the opposite of its default (`--no-staging`: off).
fn switch_flag_value(setting: &Setting) -> bool {
    !parse_switch(setting.default.as_bytes()).unwrap_or(false)
}

/// The policy a command line asked for: the settings given, and the shim to preload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// The settings given, in the order of `SETTINGS`.
    values: Vec<(Id, Value)>,
    /// The shim library to preload (`--shim`; default: the installed one).
    pub shim: Option<PathBuf>,
}

impl Policy {
    pub fn get(&self, id: Id) -> Option<&Value> {
        self.values.iter().find(|(given, _)| *given == id).map(|(_, value)| value)
    }

    /// Sets (or replaces) a setting, keeping the order of `SETTINGS`.
    pub fn set(&mut self, id: Id, value: Value) {
        self.values.retain(|(given, _)| *given != id);
        let at = self.values.partition_point(|(given, _)| (*given as usize) < id as usize);
        self.values.insert(at, (id, value));
    }

    pub fn vram_budget(&self) -> Option<PerDevice> {
        match self.get(Id::VramBudget) {
            Some(Value::PerDevice(sizes)) => Some(*sizes),
            _ => None,
        }
    }

    pub fn backend(&self) -> Option<BackendChoice> {
        match self.get(Id::Backend) {
            Some(Value::Choice(name)) => BackendChoice::parse(name.as_bytes()),
            _ => None,
        }
    }

    /// The environment variables this policy sets, in the order of `SETTINGS`.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        self.values.iter().map(|(id, value)| (id.env(), value.to_string())).collect()
    }
}

/// What `--help` shows for a flag's value.
fn value_name(kind: Kind) -> &'static str {
    match kind {
        Kind::PerDeviceSize => "SIZE|GPU:SIZE,...",
        Kind::SizeOrOff => "SIZE|off",
        Kind::Count => "N",
        Kind::Size | Kind::Choice(_) | Kind::Switch => "SIZE",
    }
}

/// The flag of one setting, from its row of the table.
fn flag_arg(setting: &'static Setting, flag: &'static str) -> Arg {
    let arg = Arg::new(flag).long(flag);
    match setting.kind {
        Kind::Switch => {
            let value = switch_name(switch_flag_value(setting));
            let (help, env, default) = (setting.help, setting.env, setting.default);
            arg.action(ArgAction::SetTrue).help(format!("Turn {value} {help} ({env}={value}; default: {default})"))
        }
        Kind::Choice(names) => {
            arg.help(flag_help(setting)).value_name(flag.to_ascii_uppercase()).ignore_case(true).value_parser(
                PossibleValuesParser::new(names.iter().copied()).try_map(move |text| parse_value(setting, &text)),
            )
        }
        kind => arg
            .help(flag_help(setting))
            .value_name(value_name(kind))
            .value_parser(move |text: &str| parse_value(setting, text)),
    }
}

fn flag_help(setting: &Setting) -> String {
    format!("{} ({}; default: {})", setting.help, setting.env, setting.default)
}

impl Args for Policy {
    fn augment_args(command: Command) -> Command {
        let command = SETTINGS
            .iter()
            .filter_map(|setting| setting.flag.map(|flag| flag_arg(setting, flag)))
            .fold(command, Command::arg);
        command.arg(
            Arg::new("shim")
                .long("shim")
                .value_name("PATH")
                .value_parser(clap::value_parser!(PathBuf))
                .help("The shim library to preload (default: the installed one)"),
        )
    }

    fn augment_args_for_update(command: Command) -> Command {
        Policy::augment_args(command)
    }
}

fn matches_error(error: clap::parser::MatchesError) -> clap::Error {
    clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, error.to_string())
}

impl FromArgMatches for Policy {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut policy = Policy::default();
        policy.update_from_arg_matches(matches)?;
        Ok(policy)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for setting in SETTINGS {
            let Some(flag) = setting.flag else { continue };
            if setting.kind == Kind::Switch {
                if matches.try_get_one::<bool>(flag).map_err(matches_error)? == Some(&true) {
                    self.set(setting.id, Value::Switch(switch_flag_value(setting)));
                }
            } else if let Some(value) = matches.try_get_one::<Value>(flag).map_err(matches_error)? {
                self.set(setting.id, value.clone());
            }
        }
        if let Some(shim) = matches.try_get_one::<PathBuf>("shim").map_err(matches_error)? {
            self.shim = Some(shim.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Policy::augment_args(Command::new("greenboost-run").no_binary_name(true))
    }

    fn policy(args: &[&str]) -> Result<Policy, String> {
        let matches = command().try_get_matches_from(args).map_err(|e| e.to_string())?;
        Policy::from_arg_matches(&matches).map_err(|e| e.to_string())
    }

    #[test]
    fn policy_maps_to_shim_variables() {
        let policy = policy(&[
            "--vram-budget=8G",
            "--min-t2-size=1M",
            "--split-min=0",
            "--no-staging",
            "--stage-max=1G",
            "--report=combined",
            "--backend=userspace",
            "--log=info",
        ])
        .unwrap();
        assert_eq!(
            policy.environment(),
            vec![
                ("GREENBOOST_VRAM_BUDGET", (8u64 << 30).to_string()),
                ("GREENBOOST_MIN_T2_SIZE", (1u64 << 20).to_string()),
                ("GREENBOOST_SPLIT_MIN", "off".into()),
                ("GREENBOOST_STAGING", "off".into()),
                ("GREENBOOST_STAGE_MAX", (1u64 << 30).to_string()),
                ("GREENBOOST_REPORT", "combined".into()),
                ("GREENBOOST_BACKEND", "userspace".into()),
                ("GREENBOOST_LOG", "info".into()),
            ]
        );
        assert_eq!(policy.backend(), Some(BackendChoice::Userspace));
        assert!(Policy::default().environment().is_empty());
        assert!(self::policy(&[]).unwrap().environment().is_empty());
    }

    #[test]
    fn every_flag_of_the_table_is_offered_with_its_variable_and_default() {
        let command = command();
        for setting in SETTINGS {
            let Some(flag) = setting.flag else {
                continue;
            };
            let arg = command.get_arguments().find(|a| a.get_long() == Some(flag)).expect(flag);
            let help = arg.get_help().expect(flag).to_string();
            assert!(help.contains(setting.env) && help.contains(setting.default), "{flag}: {help}");
            assert!(help.contains(setting.help), "{flag}: {help}");
        }
        // Settings and --shim, nothing else.
        let flags = SETTINGS.iter().filter(|s| s.flag.is_some()).count();
        assert_eq!(command.get_arguments().count(), flags + 1);
    }

    #[test]
    fn new_settings_and_per_device_budgets() {
        let policy = policy(&["--vram-budget", "0:20G, 1:8G", "--vram-headroom=2G", "--host-reserve", "512M"]).unwrap();
        assert_eq!(
            policy.environment(),
            vec![
                ("GREENBOOST_VRAM_BUDGET", "0:21474836480,1:8589934592".into()),
                ("GREENBOOST_VRAM_HEADROOM", (2u64 << 30).to_string()),
                ("GREENBOOST_HOST_RESERVE", (512u64 << 20).to_string()),
            ]
        );
        assert_eq!(policy.vram_budget().and_then(|b| b.get(1)), Some(8 << 30));
        assert_eq!(policy.vram_budget().and_then(|b| b.get(2)), None);
    }

    #[test]
    fn every_kind_parses_through_the_policy_crate() {
        let policy = policy(&[
            "--vram-reserve=1.5G",
            "--t2-cap=64GiB",
            "--t2-cache=0",
            "--split-min=off",
            "--stage-min-width=128",
            "--report=Combined",
            "--log=DEBUG",
        ])
        .unwrap();
        assert_eq!(policy.get(Id::VramReserve), Some(&Value::Size(3 << 29)));
        assert_eq!(policy.get(Id::T2Cap), Some(&Value::Size(64 << 30)));
        assert_eq!(policy.get(Id::T2Cache), Some(&Value::Size(0)));
        assert_eq!(policy.get(Id::SplitMin), Some(&Value::SizeOrOff(SizeOrOff::Off)));
        assert_eq!(policy.get(Id::StageMinWidth), Some(&Value::Count(128)));
        assert_eq!(policy.get(Id::Report), Some(&Value::Choice("combined")), "any case, canonical name sent");
        assert_eq!(policy.get(Id::Log), Some(&Value::Choice("debug")));
        assert_eq!(policy.get(Id::Staging), None);
    }

    #[test]
    fn bad_values_are_refused_with_a_sentence() {
        for (args, message) in [
            (&["--vram-budget", "8X"][..], "'8X' is not a size"),
            (&["--vram-budget", "1.5"], "'1.5' is not a size"),
            (&["--vram-budget", ".5G"], "'.5G' is not a size"),
            (&["--vram-budget", "0:8G,0:4G"], "names device 0 twice"),
            (&["--vram-budget", "0:8G,,1:4G"], "has an empty item"),
            (&["--vram-headroom", "x:1G"], "device ordinal is not a number"),
            (&["--min-t2-size", "20000000T"], "larger than 2^64 bytes"),
            (&["--split-min", "half"], "'half' is not a size"),
            (&["--stage-min-width", "1K"], "'1K' is not a number"),
            (&["--report", "everything"], "possible values: physical, combined"),
            (&["--backend", "gpu"], "possible values: auto, kmod, userspace"),
            (&["--log", "1"], "possible values: warn, info, debug"),
            (&["--no-staging=yes"], "unexpected value"),
        ] {
            let error = policy(args).unwrap_err();
            assert!(error.contains(message), "{args:?}: {error}");
        }
    }

    #[test]
    fn set_keeps_table_order_and_replaces() {
        let mut policy = Policy::default();
        policy.set(Id::Log, Value::Choice("info"));
        policy.set(Id::VramBudget, Value::PerDevice(PerDevice::every(1)));
        policy.set(Id::VramBudget, Value::PerDevice(PerDevice::every(2)));
        assert_eq!(
            policy.environment(),
            vec![("GREENBOOST_VRAM_BUDGET", "2".into()), ("GREENBOOST_LOG", "info".into())]
        );
    }
}
