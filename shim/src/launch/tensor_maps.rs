//! The tensor maps the program encoded (cuTensorMapEncode*, cuTensorMapReplaceAddress)
//! and the global address each describes. Hopper's cuBLAS and cuDNN kernels take their
//! operands as 128-byte tensor maps passed by value, in which the address is packed with
//! other fields: a launch is matched to the address through the map's exact bytes.
//!
//! A fixed table of recent maps, direct-mapped by a hash of the bytes: libraries encode
//! maps per call, so the table forgets old ones instead of growing. Each slot is two
//! words: a writer takes the slot by swapping its hash word to `BUSY`, writes the
//! address, then the hash; a reader reads the hash, the address, and the hash again, so
//! that it never pairs one map's hash with another map's address.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cuda::ffi::CuDevicePtr;
use crate::cuda::launch_ffi::TENSOR_MAP_BYTES;

const SLOTS: usize = 4096;

struct Slot {
    hash: AtomicU64,
    address: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot { hash: AtomicU64::new(0), address: AtomicU64::new(0) };
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

/// A slot's hash word while a writer fills it.
const BUSY: u64 = u64::MAX;

/// A hash of a map's bytes, neither 0 (an empty slot) nor `BUSY`.
fn hash(map: &[u8]) -> u64 {
    let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
    hasher.write(map);
    hasher.finish().clamp(1, BUSY - 1)
}

/// Remembers that the map with these bytes describes memory at `address`.
pub fn encoded(map: &[u8; TENSOR_MAP_BYTES], address: CuDevicePtr) {
    let hash = hash(map);
    let slot = &TABLE[hash as usize % SLOTS];
    loop {
        let current = slot.hash.load(Ordering::Relaxed);
        if current != BUSY
            && slot.hash.compare_exchange_weak(current, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            break;
        }
        std::hint::spin_loop();
    }
    slot.address.store(address, Ordering::Release);
    slot.hash.store(hash, Ordering::Release);
}

/// The address the map with these bytes describes, if it is remembered.
pub fn address_of(map: &[u8]) -> Option<CuDevicePtr> {
    let hash = hash(map);
    let slot = &TABLE[hash as usize % SLOTS];
    if slot.hash.load(Ordering::Acquire) != hash {
        return None;
    }
    let address = slot.address.load(Ordering::Acquire);
    (slot.hash.load(Ordering::Acquire) == hash).then_some(address)
}

/// In the child of a fork: a slot that a parent's thread was filling stays `BUSY` with
/// no one to finish it; emptied, so that the child's writers do not wait for it.
pub fn reset_in_child() {
    for slot in &TABLE {
        let _ = slot.hash.compare_exchange(BUSY, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
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
