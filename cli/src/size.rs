//! Byte sizes as users type them (`8G`, `512MiB`, `1.5T`, `4096`) and as we print them.
//!
//! Every unit is binary: `G`, `GB` and `GiB` all mean 2^30 bytes, because GPU memory is
//! quoted that way (nvidia-smi's "MiB") and a budget of "24G" on a 24 GiB card must not
//! come out 1.6 GiB short.

const UNITS: [(&str, u32); 5] = [("", 0), ("K", 10), ("M", 20), ("G", 30), ("T", 40)];

/// Parses a size such as `8G`, `8 GiB`, `1.5g`, `512M`, `4096` or `4096B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim();
    let invalid = || {
        format!(
            "'{text}' is not a size: write a number with an optional unit K, M, G or T (binary, e.g. 8G, 512MiB, 1.5T) or plain bytes"
        )
    };
    if number.is_empty() {
        return Err(invalid());
    }
    let upper = unit.to_ascii_uppercase();
    let prefix = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let shift = UNITS
        .iter()
        .find(|(name, _)| *name == prefix)
        .map(|(_, shift)| *shift)
        .ok_or_else(invalid)?;
    if upper == "IB" {
        return Err(invalid());
    }
    let too_large = || format!("'{text}' is larger than 2^64 bytes");
    match number.split_once('.') {
        None => {
            let whole: u64 = number.parse().map_err(|_| invalid())?;
            whole.checked_mul(1u64 << shift).ok_or_else(too_large)
        }
        Some((whole, fraction)) => {
            if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
                return Err(invalid());
            }
            let whole: u64 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| invalid())?
            };
            // Exact decimal arithmetic: fraction digits / 10^n, scaled by the unit.
            let digits = fraction.len().min(18) as u32;
            let fraction_value: u128 =
                fraction[..digits as usize].parse().map_err(|_| invalid())?;
            let scaled_fraction = (fraction_value << shift) / 10u128.pow(digits);
            let total = (u128::from(whole) << shift) + scaled_fraction;
            u64::try_from(total).map_err(|_| too_large())
        }
    }
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
        format!(
            "{:.2} {}",
            bytes as f64 / (1u64 << (10 * index)) as f64,
            NAMES[index]
        )
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
        assert_eq!(parse_size(".5K").unwrap(), 512);
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
