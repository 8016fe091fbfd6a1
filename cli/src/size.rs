//! Byte sizes as users type them (`8G`, `512MiB`, `1.5T`, `4096`) and as we print them.
//!
//! The syntax is the policy crate's, the one the shim reads (`greenboost_policy::parse_size`
//! documents it): every unit is binary, `G`, `GB` and `GiB` all mean 2^30 bytes, because
//! GPU memory is quoted that way (nvidia-smi's "MiB") and a budget of "24G" on a 24 GiB
//! card must not come out 1.6 GiB short.

/// Parses a size such as `8G`, `8 GiB`, `1.5g`, `512M`, `4096` or `4096B`, with a
/// sentence saying what is wrong otherwise.
pub fn parse_size(text: &str) -> Result<u64, String> {
    greenboost_policy::try_parse_size(text.as_bytes()).map_err(|error| format!("'{text}' {error}"))
}

/// Formats bytes with a binary unit and two decimals (`1.50 GiB`), or plain bytes below 1 KiB.
pub fn format_bytes(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut index = 0;
    while index + 1 < NAMES.len() && bytes >= 1u64 << (10 * (index + 1)) {
        index += 1;
    }
    if index == 0 {
        format!("{bytes} B")
    } else {
        format!("{:.2} {}", bytes as f64 / (1u64 << (10 * index)) as f64, NAMES[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_as_binary() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("8g").unwrap(), 8 << 30);
        assert_eq!(parse_size("8GB").unwrap(), 8 << 30);
        assert_eq!(parse_size(" 8 GiB ").unwrap(), 8 << 30);
        assert_eq!(parse_size("2T").unwrap(), 2 << 40);
        assert_eq!(parse_size("0").unwrap(), 0);
    }

    #[test]
    fn parses_fractions_exactly() {
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("0.25M").unwrap(), 256 << 10);
        assert_eq!(parse_size("0.5K").unwrap(), 512);
    }

    #[test]
    fn fractions_need_a_unit_and_a_leading_digit() {
        // The shim refuses these, so the CLI does too (it used to take them).
        for bad in ["1.5", ".5G", ".5K", "0.5", "1.G"] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains("is not a size"), "{bad}: {err}");
        }
    }

    #[test]
    fn rejects_garbage_with_a_sentence() {
        for bad in ["", "G", "8X", "8 GG", "1.2.3G", "-1G", "8iB", ".", "abc"] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains("is not a size"), "{bad}: {err}");
        }
        assert!(parse_size("20000000T").unwrap_err().contains("larger than"));
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn formats_with_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
        assert_eq!(format_bytes(24 << 30), "24.00 GiB");
        assert_eq!(format_bytes(5 << 40), "5.00 TiB");
    }
}
