//! The tensor maps the program encoded (cuTensorMapEncode*, cuTensorMapReplaceAddress)
//! and the global address each describes. Hopper's cuBLAS and cuDNN kernels take their
//! operands as 128-byte tensor maps passed by value, in which the address is packed with
//! other fields: a launch is matched to the address through the map's exact bytes.
//!
//! A fixed table of recent maps (`sys::slot_table`), keyed by a hash of the bytes:
//! libraries encode maps per call, so the table forgets old ones instead of growing.

use std::hash::{BuildHasher, Hasher};

use crate::cuda::ffi::CuDevicePtr;
use crate::cuda::launch_ffi::TENSOR_MAP_BYTES;
use crate::sys::slot_table::{Key, SlotTable};

static TABLE: SlotTable<4096> = SlotTable::new();

/// A hash of a map's bytes, as a key of the table.
fn key(map: &[u8]) -> Key {
    let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
    hasher.write(map);
    Key::clamped(hasher.finish())
}

/// Remembers that the map with these bytes describes memory at `address`.
pub fn encoded(map: &[u8; TENSOR_MAP_BYTES], address: CuDevicePtr) {
    TABLE.insert(key(map), address);
}

/// The address the map with these bytes describes, if it is remembered.
pub fn address_of(map: &[u8]) -> Option<CuDevicePtr> {
    TABLE.get(key(map))
}

/// In the child of a fork (see `SlotTable::reset_in_child`).
pub fn reset_in_child() {
    TABLE.reset_in_child();
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
    }
}
