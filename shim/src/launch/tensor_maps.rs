//! The tensor maps the program encoded (cuTensorMapEncode*, cuTensorMapReplaceAddress)
//! and the global address each describes. Hopper's cuBLAS and cuDNN kernels take their
//! operands as 128-byte tensor maps passed by value, in which the address is packed with
//! other fields: a launch is matched to the address through the map's exact bytes.
//!
//! A fixed table of recent maps (`sys::slot_table`), keyed by a hash of the bytes:
//! libraries encode maps per call, so the table forgets old ones instead of growing. A
//! second table holds their first words, so that a launch looking for maps among its
//! parameters' 64-byte blocks hashes only the blocks that may be one.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda::ffi::CuDevicePtr;
use crate::cuda::launch_ffi::TENSOR_MAP_BYTES;
use crate::sys::slot_table::{Key, SlotTable};

static TABLE: SlotTable<4096> = SlotTable::new();

/// The first word of each map in `TABLE` (as its key; the value unused).
static FIRST_WORDS: SlotTable<4096> = SlotTable::new();

/// Whether the program encoded a map yet: until it has, a launch need not look for one.
static ANY: AtomicBool = AtomicBool::new(false);

/// A hash of a map's bytes, as a key of the table.
fn key(map: &[u8]) -> Key {
    let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
    hasher.write(map);
    Key::clamped(hasher.finish())
}

/// Remembers that the map with these bytes describes memory at `address`.
pub fn encoded(map: &[u8; TENSOR_MAP_BYTES], address: CuDevicePtr) {
    TABLE.insert(key(map), address);
    if let Some(first) = first_word(map) {
        FIRST_WORDS.insert(Key::clamped(first), 0);
    }
    ANY.store(true, Ordering::Relaxed);
}

/// The first word of `bytes`, if it has one.
fn first_word(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// Whether `bytes` may be a map the program encoded: a few loads, where `address_of`
/// hashes all of them. A map whose first word a newer one's pushed out of its slot is not
/// found (the table forgets, as `TABLE` does).
pub fn may_be_encoded(bytes: &[u8]) -> bool {
    first_word(bytes).is_some_and(|first| FIRST_WORDS.get(Key::clamped(first)).is_some())
}

/// Whether the program encoded any map.
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// The address the map with these bytes describes, if it is remembered.
pub fn address_of(map: &[u8]) -> Option<CuDevicePtr> {
    TABLE.get(key(map))
}

/// In the child of a fork (see `SlotTable::reset_in_child`).
pub fn reset_in_child() {
    TABLE.reset_in_child();
    FIRST_WORDS.reset_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_is_found_by_its_exact_bytes_only() {
        let mut map = [7u8; TENSOR_MAP_BYTES];
        encoded(&map, 0xdead_0000);
        assert_eq!(address_of(&map), Some(0xdead_0000));
        map[100] ^= 1;
        assert_eq!(address_of(&map), None);
        map[100] ^= 1;
        encoded(&map, 0xbeef_0000);
        assert_eq!(address_of(&map), Some(0xbeef_0000), "a replaced address wins");
        assert!(may_be_encoded(&map), "its first word is known");
        map[0] ^= 1;
        assert!(!may_be_encoded(&map), "no map begins so");
    }
}
