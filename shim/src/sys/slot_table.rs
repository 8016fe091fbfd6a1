//! A fixed table of key → value words, direct-mapped by the key, read and written without
//! a lock from any thread: for tables a launch reads on every call (the tensor maps and
//! texture objects a program made), where a lookup must cost a few loads and a new entry
//! may push out an old one sharing its slot (the table forgets rather than grows).
//!
//! Each slot is two words: a writer takes the slot by swapping its key word to `BUSY`,
//! writes the value, then the key; a reader reads the key, the value, and the key again,
//! so that it never pairs one entry's key with another's value. Keys are never 0 (an empty
//! slot) nor `BUSY`: callers map theirs into that range (`Key`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A slot's key word while a writer fills it.
const BUSY: u64 = u64::MAX;

/// A key a table can hold: neither 0 nor `BUSY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(u64);

impl Key {
    /// `raw` if a table can hold it.
    pub fn exact(raw: u64) -> Option<Key> {
        (raw != 0 && raw != BUSY).then_some(Key(raw))
    }

    /// `raw` moved into the range a table holds (for hashes, where a rare collision of two
    /// keys is acceptable).
    pub fn clamped(raw: u64) -> Key {
        Key(raw.clamp(1, BUSY - 1))
    }
}

struct Slot {
    key: AtomicU64,
    value: AtomicU64,
}

/// `N` slots of key → value.
pub struct SlotTable<const N: usize> {
    slots: [Slot; N],
}

impl<const N: usize> SlotTable<N> {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot { key: AtomicU64::new(0), value: AtomicU64::new(0) };

    pub const fn new() -> SlotTable<N> {
        SlotTable { slots: [Self::EMPTY; N] }
    }

    fn slot(&self, key: Key) -> &Slot {
        &self.slots[(key.0 % N as u64) as usize]
    }

    /// Remembers `value` under `key` (replacing what held its slot).
    pub fn insert(&self, key: Key, value: u64) {
        let slot = self.slot(key);
        loop {
            let current = slot.key.load(Ordering::Relaxed);
            if current != BUSY
                && slot.key.compare_exchange_weak(current, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                break;
            }
            std::hint::spin_loop();
        }
        slot.value.store(value, Ordering::Release);
        slot.key.store(key.0, Ordering::Release);
    }

    /// The value under `key`, if it is remembered.
    pub fn get(&self, key: Key) -> Option<u64> {
        let slot = self.slot(key);
        if slot.key.load(Ordering::Acquire) != key.0 {
            return None;
        }
        let value = slot.value.load(Ordering::Acquire);
        (slot.key.load(Ordering::Acquire) == key.0).then_some(value)
    }

    /// Forgets `key` if its slot still holds it.
    pub fn remove(&self, key: Key) {
        let _ = self.slot(key).key.compare_exchange(key.0, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// In the child of a fork: a slot that a parent's thread was filling stays `BUSY` with
    /// no one to finish it; emptied, so that the child's writers do not wait for it.
    pub fn reset_in_child(&self) {
        for slot in &self.slots {
            let _ = slot.key.compare_exchange(BUSY, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_found_by_its_key_only_and_a_shared_slot_keeps_the_newest() {
        static TABLE: SlotTable<8> = SlotTable::new();
        let (one, nine) = (Key::exact(1).expect("key"), Key::exact(9).expect("key"));
        TABLE.insert(one, 100);
        assert_eq!(TABLE.get(one), Some(100));
        assert_eq!(TABLE.get(nine), None, "same slot, another key");
        TABLE.insert(nine, 900);
        assert_eq!((TABLE.get(one), TABLE.get(nine)), (None, Some(900)), "the newest holds the slot");
        TABLE.remove(one);
        assert_eq!(TABLE.get(nine), Some(900), "removing a key the slot no longer holds changes nothing");
        TABLE.remove(nine);
        assert_eq!(TABLE.get(nine), None);
        assert_eq!((Key::exact(0), Key::exact(u64::MAX)), (None, None));
        assert_eq!(Key::clamped(0), Key::exact(1).expect("key"));
    }
}
