//! Per-device sizes: one size for every device (`20G`), or a list by CUDA device
//! ordinal (`0:20G,1:8G`) where devices not listed get the setting's default. Stored
//! inline (at most `MAX_DEVICES` entries), so parsing allocates nothing.

use core::fmt;

use crate::size::{parse_count, trim, try_parse_size, SizeError};

/// The most entries a per-device list may have.
pub const MAX_DEVICES: usize = 16;

/// The largest device ordinal a list may name (CUDA ordinals are `int`).
pub const MAX_ORDINAL: u32 = i32::MAX as u32;

/// A per-device size; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PerDevice {
    /// The one size of the `20G` form; `None` for a list.
    every: Option<u64>,
    ordinals: [u32; MAX_DEVICES],
    sizes: [u64; MAX_DEVICES],
    len: u8,
}

/// Why a text is not a per-device size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerDeviceError {
    /// The one-size form is not a size.
    Size(SizeError),
    /// A list item is empty (`0:8G,,1:4G`, or a trailing comma).
    EmptyItem,
    /// A list item has no `ordinal:` (lists cannot mix in the one-size form).
    MissingOrdinal,
    /// An ordinal is not a number from 0 to `MAX_ORDINAL`.
    BadOrdinal,
    /// An item's size is not a size.
    ItemSize(SizeError),
    /// The ordinal appears twice.
    Duplicate(u32),
    /// More than `MAX_DEVICES` items.
    TooMany,
}

impl fmt::Display for PerDeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FORM: &str = "write one size for every GPU (20G) or sizes by device ordinal (0:20G,1:8G)";
        match self {
            PerDeviceError::Size(error) => write!(f, "{error}; or {FORM}"),
            PerDeviceError::EmptyItem => write!(f, "has an empty item: {FORM}"),
            PerDeviceError::MissingOrdinal => write!(f, "mixes a plain size into a list: {FORM}"),
            PerDeviceError::BadOrdinal => write!(f, "has an item whose device ordinal is not a number: {FORM}"),
            PerDeviceError::ItemSize(error) => write!(f, "has an item whose size {error}"),
            PerDeviceError::Duplicate(ordinal) => write!(f, "names device {ordinal} twice"),
            PerDeviceError::TooMany => write!(f, "names more than {MAX_DEVICES} devices"),
        }
    }
}

impl PerDevice {
    /// The same size for every device.
    pub const fn every(size: u64) -> PerDevice {
        PerDevice { every: Some(size), ordinals: [0; MAX_DEVICES], sizes: [0; MAX_DEVICES], len: 0 }
    }

    /// An empty list: every device gets the default.
    pub const fn none() -> PerDevice {
        PerDevice { every: None, ordinals: [0; MAX_DEVICES], sizes: [0; MAX_DEVICES], len: 0 }
    }

    pub fn parse(text: &[u8]) -> Option<PerDevice> {
        PerDevice::try_parse(text).ok()
    }

    /// Parses `20G` or `0:20G,1:8G` (whitespace allowed around items, ordinals and sizes).
    pub fn try_parse(text: &[u8]) -> Result<PerDevice, PerDeviceError> {
        let text = trim(text);
        if !text.contains(&b':') {
            return try_parse_size(text).map(PerDevice::every).map_err(PerDeviceError::Size);
        }
        let mut list = PerDevice::none();
        for item in text.split(|b| *b == b',') {
            let item = trim(item);
            if item.is_empty() {
                return Err(PerDeviceError::EmptyItem);
            }
            let colon = item.iter().position(|b| *b == b':').ok_or(PerDeviceError::MissingOrdinal)?;
            let (ordinal, size) = (&item[..colon], &item[colon + 1..]);
            let ordinal =
                parse_count(ordinal).filter(|o| *o <= u64::from(MAX_ORDINAL)).ok_or(PerDeviceError::BadOrdinal)?;
            let size = try_parse_size(size).map_err(PerDeviceError::ItemSize)?;
            list.insert(ordinal as u32, size)?;
        }
        Ok(list)
    }

    /// Adds `ordinal: size` to a list (a one-size value becomes a list of one).
    pub fn insert(&mut self, ordinal: u32, size: u64) -> Result<(), PerDeviceError> {
        self.every = None;
        if self.iter().any(|(listed, _)| listed == ordinal) {
            return Err(PerDeviceError::Duplicate(ordinal));
        }
        let index = usize::from(self.len);
        if index == MAX_DEVICES || ordinal > MAX_ORDINAL {
            return Err(if index == MAX_DEVICES { PerDeviceError::TooMany } else { PerDeviceError::BadOrdinal });
        }
        self.ordinals[index] = ordinal;
        self.sizes[index] = size;
        self.len += 1;
        Ok(())
    }

    /// The size for `device`: the one size, or its list entry; `None` when the list
    /// does not name it (or `device` is negative): the default applies.
    pub fn get(&self, device: i32) -> Option<u64> {
        if let Some(size) = self.every {
            return Some(size);
        }
        let device = u32::try_from(device).ok()?;
        self.iter().find(|(ordinal, _)| *ordinal == device).map(|(_, size)| size)
    }

    /// The size for `device`, or `default` when none is given for it.
    pub fn get_or(&self, device: i32, default: u64) -> u64 {
        self.get(device).unwrap_or(default)
    }

    /// The one size of the `20G` form; `None` for a list.
    pub const fn every_size(&self) -> Option<u64> {
        self.every
    }

    /// The entries of a list, in the order written; nothing for the one-size form.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let len = usize::from(self.len);
        self.ordinals[..len].iter().copied().zip(self.sizes[..len].iter().copied())
    }
}

/// Bytes (`21474836480`) or `ordinal:bytes` items (`0:21474836480,1:8589934592`):
/// a value `PerDevice::parse` reads back unchanged. An empty list writes nothing.
impl fmt::Display for PerDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(size) = self.every {
            return write!(f, "{size}");
        }
        for (index, (ordinal, size)) in self.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{ordinal}:{size}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const G: u64 = 1 << 30;

    #[test]
    fn one_size_for_every_device() {
        let value = PerDevice::parse(b" 20G ").unwrap();
        assert_eq!(value, PerDevice::every(20 * G));
        assert_eq!(value.get(0), Some(20 * G));
        assert_eq!(value.get(7), Some(20 * G));
        assert_eq!(value.get(-1), Some(20 * G));
        assert_eq!(value.every_size(), Some(20 * G));
        assert_eq!(value.iter().count(), 0);
        assert_eq!(PerDevice::parse(b"1.5G"), Some(PerDevice::every(G + G / 2)));
    }

    #[test]
    fn a_list_by_ordinal_leaves_the_rest_to_the_default() {
        let value = PerDevice::parse(b"0:20G,1:8G").unwrap();
        assert_eq!(value.get(0), Some(20 * G));
        assert_eq!(value.get(1), Some(8 * G));
        assert_eq!(value.get(2), None);
        assert_eq!(value.get(-1), None);
        assert_eq!(value.get_or(2, 80 * G), 80 * G);
        assert_eq!(value.get_or(1, 80 * G), 8 * G);
        assert_eq!(value.every_size(), None);
        assert_eq!(value.iter().collect::<std::vec::Vec<_>>(), [(0, 20 * G), (1, 8 * G)]);
    }

    #[test]
    fn lists_allow_whitespace_any_order_and_every_size_spelling() {
        let value = PerDevice::parse(b" 3 : 1.5 GiB , 0:512m ,12:4096").unwrap();
        assert_eq!(value.get(3), Some(G + G / 2));
        assert_eq!(value.get(0), Some(512 << 20));
        assert_eq!(value.get(12), Some(4096));
        assert_eq!(PerDevice::parse(b"5:0").unwrap().get(5), Some(0));
        assert_eq!(PerDevice::parse(b"2147483647:1G").unwrap().get(i32::MAX), Some(G));
    }

    #[test]
    fn sixteen_devices_fit_and_seventeen_do_not() {
        let mut text = std::string::String::new();
        for ordinal in 0..MAX_DEVICES {
            text.push_str(&std::format!("{ordinal}:{ordinal}G,"));
        }
        let sixteen = PerDevice::parse(text.trim_end_matches(',').as_bytes()).unwrap();
        assert_eq!(sixteen.get(15), Some(15 * G));
        text.push_str("16:1G");
        assert_eq!(PerDevice::try_parse(text.as_bytes()), Err(PerDeviceError::TooMany));
    }

    #[test]
    fn refusals() {
        use PerDeviceError::*;
        let cases: &[(&[u8], PerDeviceError)] = &[
            (b"", Size(SizeError::Invalid)),
            (b"lots", Size(SizeError::Invalid)),
            (b"1.5", Size(SizeError::Invalid)),
            (b"99999999999999999999", Size(SizeError::TooLarge)),
            (b"0:20G,,1:8G", EmptyItem),
            (b"0:20G,", EmptyItem),
            (b",0:20G", EmptyItem),
            (b"0:20G, ,1:8G", EmptyItem),
            (b"8G,1:20G", MissingOrdinal),
            (b"0:20G,8G", MissingOrdinal),
            (b":8G", BadOrdinal),
            (b"-1:8G", BadOrdinal),
            (b"a:8G", BadOrdinal),
            (b"1.0:8G", BadOrdinal),
            (b"0x1:8G", BadOrdinal),
            (b"2147483648:8G", BadOrdinal),
            (b"99999999999999999999:8G", BadOrdinal),
            (b"0:", ItemSize(SizeError::Invalid)),
            (b"0:8X", ItemSize(SizeError::Invalid)),
            (b"0:8G:1", ItemSize(SizeError::Invalid)),
            (b"0:.5G", ItemSize(SizeError::Invalid)),
            (b"0:20000000T", ItemSize(SizeError::TooLarge)),
            (b"0:20G,0:8G", Duplicate(0)),
            (b"1:1G,2:2G, 1 :3G", Duplicate(1)),
        ];
        for (text, error) in cases {
            assert_eq!(PerDevice::try_parse(text), Err(*error), "{:?}", core::str::from_utf8(text));
            assert_eq!(PerDevice::parse(text), None);
        }
    }

    #[test]
    fn display_reads_back() {
        for text in [&b"20G"[..], b"0:20G,1:8G", b"7:1", b"3:1.5G,0:0"] {
            let value = PerDevice::parse(text).unwrap();
            assert_eq!(PerDevice::parse(value.to_string().as_bytes()), Some(value));
        }
        assert_eq!(PerDevice::parse(b"0:20G,1:8G").unwrap().to_string(), "0:21474836480,1:8589934592");
        assert_eq!(PerDevice::every(G).to_string(), "1073741824");
    }

    #[test]
    fn errors_read_as_sentences() {
        let error = PerDevice::try_parse(b"0:1G,0:2G").unwrap_err();
        assert_eq!(std::format!("'0:1G,0:2G' {error}"), "'0:1G,0:2G' names device 0 twice");
        let error = PerDevice::try_parse(b"8X").unwrap_err().to_string();
        assert!(error.starts_with("is not a size: write bytes"), "{error}");
        assert!(error.ends_with("or sizes by device ordinal (0:20G,1:8G)"), "{error}");
    }

    #[test]
    fn insert_builds_lists() {
        let mut value = PerDevice::every(G);
        value.insert(2, 4 * G).unwrap();
        assert_eq!(value.get(2), Some(4 * G));
        assert_eq!(value.get(0), None, "a one-size value becomes a list");
        assert_eq!(value.insert(2, G), Err(PerDeviceError::Duplicate(2)));
        assert_eq!(value.insert(MAX_ORDINAL + 1, G), Err(PerDeviceError::BadOrdinal));
    }
}
