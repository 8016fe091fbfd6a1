//! A fixed table that gives each key it is shown a small number of its own, in the order
//! keys come, read and written without a lock from any thread: for what a launch asks on
//! every call (which number its kernel function has), where a lookup must cost a few
//! loads. Unlike `slot_table` it never forgets a key (a number handed out stays that
//! key's), and when it is full it has no number for a new one.
//!
//! A key takes a slot (`key_slots`), then takes the next number and publishes it in the
//! slot's number word; a reader that finds the key before its number is published waits
//! for it (a few instructions later).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::key_slots::{self, Claim};

/// Slots a key may look at from its hash.
const PROBES: usize = 32;

struct Slot {
    key: AtomicU64,
    number: AtomicU64,
}

/// `N` slots (a power of two); numbers 1 ..= `most`.
pub struct InternTable<const N: usize> {
    slots: [Slot; N],
    next: AtomicU64,
    most: u64,
}

impl<const N: usize> InternTable<N> {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot { key: AtomicU64::new(0), number: AtomicU64::new(0) };

    /// A table handing out at most `most` numbers.
    pub const fn new(most: u64) -> InternTable<N> {
        assert!(N.is_power_of_two());
        InternTable { slots: [Self::EMPTY; N], next: AtomicU64::new(1), most }
    }

    /// `key`'s number (`key` not 0), given it on first sight; `None` when the table has no
    /// room or no number left for it.
    pub fn number(&self, key: u64) -> Option<u64> {
        if key == key_slots::EMPTY {
            return None;
        }
        let slot = match key_slots::slot(N, key, PROBES, |at| &self.slots[at].key)? {
            Claim::Taken(at) => {
                let slot = &self.slots[at];
                let number = self.next.fetch_add(1, Ordering::Relaxed);
                // Past `most`, the slot keeps the key and says "no number" (u64::MAX).
                slot.number.store(if number <= self.most { number } else { u64::MAX }, Ordering::Release);
                slot
            }
            Claim::Found(at) => &self.slots[at],
        };
        loop {
            match slot.number.load(Ordering::Acquire) {
                0 => std::hint::spin_loop(),
                u64::MAX => return None,
                number => return Some(number),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_keeps_the_number_it_was_given_first() {
        static TABLE: InternTable<64> = InternTable::new(1000);
        assert_eq!(TABLE.number(0x7000), Some(1));
        assert_eq!(TABLE.number(0x9000), Some(2));
        assert_eq!(TABLE.number(0x7000), Some(1));
        assert_eq!(TABLE.number(0), None, "0 is no key");
    }

    #[test]
    fn past_its_numbers_or_its_room_a_new_key_has_none_and_old_ones_keep_theirs() {
        static FEW: InternTable<64> = InternTable::new(2);
        assert_eq!((FEW.number(10), FEW.number(20), FEW.number(30)), (Some(1), Some(2), None));
        assert_eq!(FEW.number(10), Some(1));
        static SMALL: InternTable<32> = InternTable::new(u64::MAX);
        let numbered = (1..=100u64).filter(|&key| SMALL.number(key << 12).is_some()).count();
        assert_eq!(numbered, 32, "every slot used, then none");
    }
}
