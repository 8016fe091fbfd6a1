//! The kernel's list of active swap areas, `/proc/swaps`:
//!
//! ```text
//! Filename                                Type            Size            Used            Priority
//! /dev/nvme0n1p3                          partition       16777212        0               -2
//! /var/lib/greenboost/t3.swap             file            8388604         1024            10
//! ```
//!
//! Sizes are KiB. The kernel escapes space, tab, newline and backslash in the name as
//! octal (`\040`), and a swap file deleted while active ends in ` (deleted)`, the one
//! unescaped space: so the last four fields are counted from the right.

use std::fs;
use std::io;

use crate::paths::SystemPaths;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaType {
    Partition,
    File,
}

impl AreaType {
    pub fn label(self) -> &'static str {
        match self {
            AreaType::Partition => "partition",
            AreaType::File => "file",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapArea {
    /// The path as the kernel prints it, unescaped.
    pub path: String,
    pub area_type: AreaType,
    pub size: u64,
    pub used: u64,
    pub priority: i64,
}

/// `\NNN` octal escapes back to their bytes (the kernel's `seq_file` escaping).
fn unescape(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_line(line: &str) -> Option<SwapArea> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name @ .., area_type, size, used, priority] = fields.as_slice() else {
        return None;
    };
    if name.is_empty() {
        return None;
    }
    let area_type = match *area_type {
        "partition" => AreaType::Partition,
        "file" => AreaType::File,
        _ => return None,
    };
    Some(SwapArea {
        path: unescape(&name.join(" ")),
        area_type,
        size: size.parse::<u64>().ok()?.checked_mul(1024)?,
        used: used.parse::<u64>().ok()?.checked_mul(1024)?,
        priority: priority.parse().ok()?,
    })
}

/// The areas in `/proc/swaps`' text; the header and lines it cannot read are skipped.
pub fn parse(text: &str) -> Vec<SwapArea> {
    text.lines().filter_map(parse_line).collect()
}

/// The active swap areas, or why `/proc/swaps` could not be read.
pub fn read(paths: &SystemPaths) -> io::Result<Vec<SwapArea>> {
    fs::read_to_string(paths.proc_path("swaps")).map(|text| parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWAPS: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
        /dev/nvme0n1p3                          partition\t16777212\t0\t\t-2\n\
        /var/lib/greenboost/t3.swap             file\t\t8388604\t\t1024\t\t10\n\
        /mnt/fast\\040disk/swap\\134file (deleted) file\t1024\t0\t-3\n";

    #[test]
    fn reads_partitions_and_files_in_bytes() {
        let areas = parse(SWAPS);
        assert_eq!(areas.len(), 3);
        assert_eq!(
            areas[0],
            SwapArea {
                path: "/dev/nvme0n1p3".into(),
                area_type: AreaType::Partition,
                size: 16777212 * 1024,
                used: 0,
                priority: -2
            }
        );
        assert_eq!(areas[1].path, "/var/lib/greenboost/t3.swap");
        assert_eq!(areas[1].area_type, AreaType::File);
        assert_eq!(areas[1].used, 1 << 20);
        assert_eq!(areas[1].priority, 10);
    }

    #[test]
    fn unescapes_names_and_keeps_the_deleted_mark() {
        let areas = parse(SWAPS);
        assert_eq!(areas[2].path, "/mnt/fast disk/swap\\file (deleted)");
        assert_eq!(areas[2].size, 1 << 20);
        assert_eq!(unescape("a\\011b\\012c\\\\d\\9"), "a\tb\nc\\\\d\\9");
    }

    #[test]
    fn no_swap_is_the_header_alone_and_garbage_is_skipped() {
        assert!(parse("Filename\tType\tSize\tUsed\tPriority\n").is_empty());
        assert!(parse("").is_empty());
        assert!(parse("/dev/sda2 partition x 0 -2\n/dev/sda3 zram 1 0 -2\npartition 1 0 -2\n").is_empty());
    }
}
