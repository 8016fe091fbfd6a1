//! The texture objects the program made over its memory (cuTexObjectCreate with a linear
//! or pitched resource: an allocation's address) and the address each stands for. A kernel
//! takes a texture object as a 64-bit handle by value — a small integer, not an address —
//! so a launch is matched to the memory through the handle. Objects over CUDA arrays
//! (and every surface object, which only arrays back) name no allocation: arrays are not
//! memory the program allocated with cudaMalloc.
//!
//! A fixed table keyed by the handle (`sys::slot_table`), emptied as objects are
//! destroyed; while no object lives, a launch never looks.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cuda::ffi::CuDevicePtr;
use crate::sys::slot_table::{Key, SlotTable};

static TABLE: SlotTable<1024> = SlotTable::new();
/// Objects made and not yet destroyed (an estimate when handles share a slot).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The object `handle` reads memory at `address`.
pub fn created(handle: u64, address: CuDevicePtr) {
    if let Some(key) = Key::exact(handle) {
        TABLE.insert(key, address);
        LIVE.fetch_add(1, Ordering::Relaxed);
    }
}

/// The object `handle` is gone: its number may come back for another.
pub fn destroyed(handle: u64) {
    if let Some(key) = Key::exact(handle) {
        if TABLE.get(key).is_some() {
            TABLE.remove(key);
            let _ = LIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        }
    }
}

/// Whether any object lives: while none does, a launch need not look its words up here.
pub fn any() -> bool {
    LIVE.load(Ordering::Relaxed) != 0
}

/// The address the live object `handle` reads, if `handle` is one.
pub fn address_of(handle: u64) -> Option<CuDevicePtr> {
    TABLE.get(Key::exact(handle)?)
}

/// In the child of a fork (see `SlotTable::reset_in_child`).
pub fn reset_in_child() {
    TABLE.reset_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_handle_stands_for_its_memory_until_destroyed() {
        assert_eq!(address_of(3), None);
        created(3, 0x7000_0000);
        assert!(any());
        assert_eq!(address_of(3), Some(0x7000_0000));
        assert_eq!(address_of(4), None);
        destroyed(3);
        assert_eq!(address_of(3), None);
        destroyed(3);
        created(0, 0x1000);
        assert_eq!(address_of(0), None, "0 is no handle");
    }
}
