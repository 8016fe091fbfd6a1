//! The one size syntax, counts, and "size or off".
//!
//! A size is either a whole number of bytes, `<digits>` or `<digits>B`, or a number
//! with a unit, `<digits>[.<digits>]<unit>`, where the unit is K, M, G or T, optionally
//! followed by `B` or `iB`. Every unit is a power of 1024 (`8G` = `8GiB` = `8GB` =
//! 8589934592), letters are case-insensitive, and ASCII whitespace may surround the
//! value and separate the number from its unit. A fraction needs a unit and a digit
//! before the point (`1.5G` and `0.5G`, not `1.5` or `.5G`); it is computed exactly and
//! truncated to whole bytes. Values past 2^64 - 1 bytes are refused.

use core::fmt;

/// The size syntax in one phrase, for messages that say what was expected.
pub const SIZE_SYNTAX: &str =
    "bytes (4096) or a number with K, M, G or T, optionally followed by B or iB, all powers of 1024 (8G, 512MiB, 1.5T)";

/// Why a text is not a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not in the size syntax.
    Invalid,
    /// In the syntax, but 2^64 bytes or more.
    TooLarge,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Invalid => write!(f, "is not a size: write {SIZE_SYNTAX}"),
            SizeError::TooLarge => f.write_str("is larger than 2^64 bytes"),
        }
    }
}

/// `text` without leading and trailing ASCII whitespace.
pub const fn trim(text: &[u8]) -> &[u8] {
    text.trim_ascii()
}

/// Whether a variable's value means "not set": empty or only whitespace. Every
/// setting treats such a value as absent (its default applies, nothing is reported).
pub const fn is_unset(text: &[u8]) -> bool {
    trim(text).is_empty()
}

/// Parses a size (see the module documentation); `None` when it is not one.
pub fn parse_size(text: &[u8]) -> Option<u64> {
    try_parse_size(text).ok()
}

/// Parses a size, saying why it is not one.
pub fn try_parse_size(text: &[u8]) -> Result<u64, SizeError> {
    let text = trim(text);
    let (whole, rest) = split_digits(text);
    if whole.is_empty() {
        return Err(SizeError::Invalid);
    }
    let (fraction, rest) = match rest {
        [b'.', after @ ..] => {
            let (fraction, rest) = split_digits(after);
            if fraction.is_empty() {
                return Err(SizeError::Invalid);
            }
            (fraction, rest)
        }
        _ => (&[][..], rest),
    };
    let shift = unit_shift(trim(rest)).ok_or(SizeError::Invalid)?;
    if shift == 0 && !fraction.is_empty() {
        return Err(SizeError::Invalid);
    }
    let whole = decimal(whole).ok_or(SizeError::TooLarge)?;
    whole
        .checked_mul(1 << shift)
        .and_then(|bytes| bytes.checked_add(fraction_bytes(fraction, shift)))
        .ok_or(SizeError::TooLarge)
}

/// Parses a count: decimal digits only (no unit), surrounding whitespace allowed.
pub fn parse_count(text: &[u8]) -> Option<u64> {
    let text = trim(text);
    let (digits, rest) = split_digits(text);
    if digits.is_empty() || !rest.is_empty() {
        return None;
    }
    decimal(digits)
}

/// The leading ASCII digits of `text`, and the rest.
fn split_digits(text: &[u8]) -> (&[u8], &[u8]) {
    let end = text.iter().position(|b| !b.is_ascii_digit()).unwrap_or(text.len());
    text.split_at(end)
}

/// The value of a run of decimal digits; `None` past `u64::MAX`.
fn decimal(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, digit| value.checked_mul(10)?.checked_add(u64::from(digit - b'0')))
}

/// The power of two a unit stands for: none or `B` 0, K 10, M 20, G 30, T 40, each
/// optionally followed by `B` or `iB`; any case.
fn unit_shift(unit: &[u8]) -> Option<u32> {
    let Some((first, rest)) = unit.split_first() else {
        return Some(0);
    };
    let shift = match first.to_ascii_uppercase() {
        b'B' if rest.is_empty() => return Some(0),
        b'K' => 10,
        b'M' => 20,
        b'G' => 30,
        b'T' => 40,
        _ => return None,
    };
    let suffix_ok = rest.is_empty() || rest.eq_ignore_ascii_case(b"B") || rest.eq_ignore_ascii_case(b"iB");
    suffix_ok.then_some(shift)
}

/// floor(0.<fraction> * 2^shift), exactly, for any number of digits: from the last
/// digit to the first, `acc = (digit * 2^shift + acc) / 10`. Truncating at every step
/// gives the same result as truncating once (floor((n + floor(x)) / 10) =
/// floor((n + x) / 10) for whole n), and `acc` stays below 2^shift.
fn fraction_bytes(fraction: &[u8], shift: u32) -> u64 {
    fraction.iter().rev().fold(0u64, |acc, digit| ((u64::from(digit - b'0') << shift) + acc) / 10)
}

/// A size that may be turned off: `off` (any case) or a size; a size of 0 is off too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeOrOff {
    Off,
    /// Never 0 (0 parses as `Off`).
    Size(u64),
}

impl SizeOrOff {
    pub fn parse(text: &[u8]) -> Option<SizeOrOff> {
        SizeOrOff::try_parse(text).ok()
    }

    pub fn try_parse(text: &[u8]) -> Result<SizeOrOff, SizeError> {
        if trim(text).eq_ignore_ascii_case(b"off") {
            return Ok(SizeOrOff::Off);
        }
        try_parse_size(text).map(SizeOrOff::from_size)
    }

    /// `Off` for 0, else the size.
    pub const fn from_size(size: u64) -> SizeOrOff {
        if size == 0 {
            SizeOrOff::Off
        } else {
            SizeOrOff::Size(size)
        }
    }

    /// The size, or `None` when off.
    pub const fn size(self) -> Option<u64> {
        match self {
            SizeOrOff::Off => None,
            SizeOrOff::Size(size) => Some(size),
        }
    }
}

/// `off`, or the size in bytes: a value every parser above reads back unchanged.
impl fmt::Display for SizeOrOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeOrOff::Off => f.write_str("off"),
            SizeOrOff::Size(size) => write!(f, "{size}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    const T: u64 = 1 << 40;

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"4096B"), Some(4096));
        assert_eq!(parse_size(b"4096b"), Some(4096));
        assert_eq!(parse_size(b"4096 B"), Some(4096));
        assert_eq!(parse_size(b"000123"), Some(123));
        assert_eq!(parse_size(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn every_unit_in_every_spelling_is_binary() {
        for (unit, value) in [("K", K), ("M", M), ("G", G), ("T", T)] {
            let lower = unit.to_ascii_lowercase();
            for suffix in ["", "B", "b", "iB", "ib", "IB", "Ib"] {
                for letter in [unit, lower.as_str()] {
                    let text = std::format!("8{letter}{suffix}");
                    assert_eq!(parse_size(text.as_bytes()), Some(8 * value), "{text}");
                }
            }
        }
        assert_eq!(parse_size(b"8G"), Some(8589934592));
        assert_eq!(parse_size(b"8192M"), Some(8 * G));
        assert_eq!(parse_size(b"16T"), Some(16 * T));
        assert_eq!(parse_size(b"0G"), Some(0));
    }

    #[test]
    fn whitespace_around_the_value_and_before_the_unit() {
        assert_eq!(parse_size(b" 4096 "), Some(4096));
        assert_eq!(parse_size(b"\t8G\n"), Some(8 * G));
        assert_eq!(parse_size(b" 8 GiB "), Some(8 * G));
        assert_eq!(parse_size(b"1.5 G"), Some(G + G / 2));
    }

    #[test]
    fn fractions_are_exact_and_truncated_to_whole_bytes() {
        assert_eq!(parse_size(b"1.5G"), Some(3 << 29));
        assert_eq!(parse_size(b"0.5G"), Some(G / 2));
        assert_eq!(parse_size(b"0.25M"), Some(256 * K));
        assert_eq!(parse_size(b"1.5T"), Some(3 << 39));
        assert_eq!(parse_size(b"0.1K"), Some(102)); // 102.4
        assert_eq!(parse_size(b"0.999K"), Some(1022)); // 1022.976
        assert_eq!(parse_size(b"1.0K"), Some(K));
        assert_eq!(parse_size(b"2.000000000000000000000000000000000000000000000000001K"), Some(2 * K));
        // Digits far past the point still decide the truncation when they must.
        assert_eq!(parse_size(b"0.0009765625K"), Some(1)); // exactly 1 byte
        assert_eq!(parse_size(b"0.0009765624999999999999999K"), Some(0));
        assert_eq!(parse_size(b"0.00000000000090949470177292823791503906250T"), Some(1)); // 2^-40 T
        assert_eq!(parse_size(b"0.00000000000090949470177292823791503906249T"), Some(0));
        assert_eq!(parse_size(b"16777215.9999999999999999T"), Some(u64::MAX)); // floor(2^64 - tiny)
    }

    #[test]
    fn refusals() {
        let bad: &[&[u8]] = &[
            b"", b"   ", b"G", b"B", b"iB", b"8iB", b"8X", b"8GG", b"8 GG", b"8GiBs", b"8Gi", b"8KBB", b"-1", b"-1G",
            b"+1G", b"1.5", b"1.5B", b"1.", b"1.G", b".5G", b".5", b".", b"1..5G", b"1.2.3G", b"1,5G", b"0x10", b"1e9",
            b"8 G B", b"abc", b"8\0G", b"\xff",
        ];
        for text in bad {
            assert_eq!(try_parse_size(text), Err(SizeError::Invalid), "{:?}", core::str::from_utf8(text));
        }
    }

    #[test]
    fn overflow_is_refused() {
        for text in [&b"18446744073709551616"[..], b"99999999999999999999", b"20000000T", b"16777216T", b"16777216.0T"]
        {
            assert_eq!(try_parse_size(text), Err(SizeError::TooLarge), "{:?}", core::str::from_utf8(text));
        }
        assert_eq!(parse_size(b"16777215T"), Some(16777215 * T));
    }

    #[test]
    fn errors_read_as_sentences() {
        assert_eq!(
            std::format!("'8X' {}", SizeError::Invalid),
            "'8X' is not a size: write bytes (4096) or a number with K, M, G or T, optionally followed by B or iB, all powers of 1024 (8G, 512MiB, 1.5T)"
        );
        assert_eq!(std::format!("{}", SizeError::TooLarge), "is larger than 2^64 bytes");
    }

    #[test]
    fn counts_are_plain_digits() {
        assert_eq!(parse_count(b"0"), Some(0));
        assert_eq!(parse_count(b" 128 "), Some(128));
        assert_eq!(parse_count(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b" ", b"1K", b"1.5", b"-1", b"12a", b"18446744073709551616"] {
            assert_eq!(parse_count(bad), None, "{:?}", core::str::from_utf8(bad));
        }
    }

    #[test]
    fn size_or_off() {
        assert_eq!(SizeOrOff::parse(b"off"), Some(SizeOrOff::Off));
        assert_eq!(SizeOrOff::parse(b" OFF "), Some(SizeOrOff::Off));
        assert_eq!(SizeOrOff::parse(b"0"), Some(SizeOrOff::Off));
        assert_eq!(SizeOrOff::parse(b"0M"), Some(SizeOrOff::Off));
        assert_eq!(SizeOrOff::parse(b"256M"), Some(SizeOrOff::Size(256 * M)));
        assert_eq!(SizeOrOff::parse(b"256M").and_then(SizeOrOff::size), Some(256 * M));
        assert_eq!(SizeOrOff::try_parse(b"half"), Err(SizeError::Invalid));
        assert_eq!(SizeOrOff::try_parse(b"of"), Err(SizeError::Invalid));
        assert_eq!(SizeOrOff::try_parse(b"99999999999999999999"), Err(SizeError::TooLarge));
        assert_eq!(std::format!("{}", SizeOrOff::Off), "off");
        assert_eq!(std::format!("{}", SizeOrOff::Size(G)), "1073741824");
    }

    #[test]
    fn blank_values_are_unset() {
        assert!(is_unset(b""));
        assert!(is_unset(b" \t\n"));
        assert!(!is_unset(b" 0 "));
        assert_eq!(trim(b" a b "), b"a b");
    }
}
