//! The settings that take one of a few words, and on/off switches. Words are matched
//! without regard to case, after trimming ASCII whitespace.

use core::fmt;

use crate::size::trim;

/// Declares a choice: the enum, its canonical names (what the CLI offers and writes),
/// aliases the shim also accepts, and its default.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        $name:ident, default $default:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $text:literal $(| $alias:literal)*,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order of `NAMES`.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];
            /// The canonical spelling of every value.
            pub const NAMES: &'static [&'static str] = &[$($text,)+];
            /// What applies when the variable is not set.
            pub const DEFAULT: $name = $name::$default;

            /// The canonical spelling, which `parse` reads back.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// A canonical name or an alias, any case; `None` for anything else
            /// (an empty value included: see `is_unset`).
            pub fn parse(text: &[u8]) -> Option<$name> {
                let text = trim(text);
                $(
                    if text.eq_ignore_ascii_case($text.as_bytes()) $(|| text.eq_ignore_ascii_case($alias.as_bytes()))* {
                        return Some($name::$variant);
                    }
                )+
                None
            }
        }

        impl Default for $name {
            fn default() -> Self {
                $name::DEFAULT
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

choice! {
    /// What capacity the hooked memory queries report (GREENBOOST_REPORT).
    ReportMode, default Physical {
        /// The VRAM the program may use: physical VRAM, or the budget when it is lower.
        Physical = "physical",
        /// VRAM plus the T2 capacity, so that a program sizing its work by free memory
        /// (ollama's layer placement) puts everything "on the GPU".
        Combined = "combined",
    }
}

choice! {
    /// Where T2 memory comes from (GREENBOOST_BACKEND).
    BackendChoice, default Auto {
        /// /dev/greenboost when it opens and speaks our ABI, else userspace.
        Auto = "auto",
        /// Only the module; without it there is no T2.
        Kmod = "kmod",
        /// Only anonymous huge-page memory in the process.
        Userspace = "userspace",
    }
}

choice! {
    /// Which T2 allocations may move between T2 and VRAM while the program runs
    /// (GREENBOOST_TIERING; the shim's "Live tiering").
    TieringChoice, default Auto {
        /// Those the device's state sent to T2 (other processes, the headroom, the
        /// driver's out-of-memory) while the budget had room for them: VRAM may come back.
        Auto = "auto",
        /// Every T2 allocation of the pointer-returning allocation functions.
        On = "on",
        /// None: T2 is the module's (or userspace) pinned memory, placed once.
        Off = "off",
    }
}

choice! {
    /// How much the shim logs on stderr (GREENBOOST_LOG); `0`, `1` and `2` are aliases.
    LogLevel, default Warn {
        Warn = "warn" | "0",
        Info = "info" | "1",
        Debug = "debug" | "2",
    }
}

/// The canonical words of a switch, on first.
pub const SWITCH_NAMES: &[&str] = &["on", "off"];

/// An on/off switch: `on`, `1`, `yes`, `true` or `off`, `0`, `no`, `false`, any case.
pub fn parse_switch(text: &[u8]) -> Option<bool> {
    let text = trim(text);
    let any = |words: [&str; 4]| words.iter().any(|word| text.eq_ignore_ascii_case(word.as_bytes()));
    if any(["on", "1", "yes", "true"]) {
        Some(true)
    } else if any(["off", "0", "no", "false"]) {
        Some(false)
    } else {
        None
    }
}

/// `on` or `off`, which `parse_switch` reads back.
pub const fn switch_name(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_in_any_case() {
        for mode in ReportMode::ALL {
            assert_eq!(ReportMode::parse(mode.name().as_bytes()), Some(*mode));
        }
        for backend in BackendChoice::ALL {
            assert_eq!(BackendChoice::parse(backend.name().as_bytes()), Some(*backend));
        }
        for level in LogLevel::ALL {
            assert_eq!(LogLevel::parse(level.name().as_bytes()), Some(*level));
        }
        assert_eq!(ReportMode::parse(b" Combined "), Some(ReportMode::Combined));
        assert_eq!(BackendChoice::parse(b"USERSPACE"), Some(BackendChoice::Userspace));
        assert_eq!(LogLevel::parse(b"Debug\n"), Some(LogLevel::Debug));
    }

    #[test]
    fn names_and_defaults() {
        assert_eq!(ReportMode::NAMES, ["physical", "combined"]);
        assert_eq!(BackendChoice::NAMES, ["auto", "kmod", "userspace"]);
        assert_eq!(LogLevel::NAMES, ["warn", "info", "debug"]);
        assert_eq!(ReportMode::default(), ReportMode::Physical);
        assert_eq!(BackendChoice::default(), BackendChoice::Auto);
        assert_eq!(LogLevel::default(), LogLevel::Warn);
        assert_eq!(std::format!("{}", BackendChoice::Kmod), "kmod");
    }

    #[test]
    fn log_levels_have_numeric_aliases() {
        assert_eq!(LogLevel::parse(b"0"), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse(b"1"), Some(LogLevel::Info));
        assert_eq!(LogLevel::parse(b"2"), Some(LogLevel::Debug));
        assert_eq!(LogLevel::parse(b"3"), None);
    }

    #[test]
    fn other_words_are_refused() {
        for bad in [&b""[..], b" ", b"everything", b"physica", b"physical combined", b"0"] {
            assert_eq!(ReportMode::parse(bad), None, "{:?}", core::str::from_utf8(bad));
        }
        for bad in [&b""[..], b"gpu", b"kmod,userspace", b"1"] {
            assert_eq!(BackendChoice::parse(bad), None, "{:?}", core::str::from_utf8(bad));
        }
        for bad in [&b""[..], b"loud", b"trace", b"-1"] {
            assert_eq!(LogLevel::parse(bad), None, "{:?}", core::str::from_utf8(bad));
        }
    }

    #[test]
    fn switches() {
        for on in [&b"on"[..], b"1", b"yes", b"true", b" ON ", b"True"] {
            assert_eq!(parse_switch(on), Some(true), "{:?}", core::str::from_utf8(on));
        }
        for off in [&b"off"[..], b"0", b"no", b"false", b"Off\n", b"NO"] {
            assert_eq!(parse_switch(off), Some(false), "{:?}", core::str::from_utf8(off));
        }
        for bad in [&b""[..], b"2", b"enabled", b"onn", b"o"] {
            assert_eq!(parse_switch(bad), None, "{:?}", core::str::from_utf8(bad));
        }
        assert_eq!(parse_switch(switch_name(true).as_bytes()), Some(true));
        assert_eq!(parse_switch(switch_name(false).as_bytes()), Some(false));
        assert_eq!(SWITCH_NAMES, [switch_name(true), switch_name(false)]);
    }
}
