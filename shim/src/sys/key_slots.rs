//! Finding a key's slot in a fixed open-addressed table of 64-bit key words, without a
//! lock: the slot that holds the key, or an empty one (key word 0) the key takes by a
//! compare-and-swap, within a few slots of its hash. A taken slot is never given back,
//! so a key, once placed, is found where it was put. The tables keep their own values
//! beside the key words (`intern_table`'s numbers, `memory::start_counts`' counts).

use std::sync::atomic::{AtomicU64, Ordering};

/// The key word of an empty slot.
pub const EMPTY: u64 = 0;

/// Where `slot` found a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The slot already held it.
    Found(usize),
    /// The key took this empty slot just now (its values are the caller's to set).
    Taken(usize),
}

/// The slot of `key` (not `EMPTY`) in a table of `slots` slots (a power of two) whose key
/// words `key_at` gives: looked for from its hash over at most `probes` slots; `None`
/// when each of them holds another key.
pub fn slot<'a>(slots: usize, key: u64, probes: usize, key_at: impl Fn(usize) -> &'a AtomicU64) -> Option<Claim> {
    let mask = slots - 1;
    // Fibonacci hashing: keys (offsets, handles) are multiples of large powers of two.
    let mut at = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
    for _ in 0..probes {
        let word = key_at(at);
        let current = word.load(Ordering::Acquire);
        if current == key {
            return Some(Claim::Found(at));
        }
        if current == EMPTY {
            match word.compare_exchange(EMPTY, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Claim::Taken(at)),
                Err(other) if other == key => return Some(Claim::Found(at)),
                Err(_) => {}
            }
        }
        at = (at + 1) & mask;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_a_slot_once_and_is_found_there_and_a_full_reach_has_none() {
        let keys: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(EMPTY)).collect();
        let at = |i: usize| &keys[i];
        let Some(Claim::Taken(first)) = slot(8, 0x4000, 2, at) else { panic!("not taken") };
        assert_eq!(slot(8, 0x4000, 2, at), Some(Claim::Found(first)));
        // Fill the whole table: every key placed once, the next has no slot.
        let placed = (1..=20u64).filter(|k| matches!(slot(8, k << 21, 8, at), Some(Claim::Taken(_)))).count();
        assert_eq!(placed, 7, "seven more slots were empty");
        assert_eq!(slot(8, 99 << 21, 8, at), None);
        assert_eq!(slot(8, 0x4000, 8, at), Some(Claim::Found(first)), "found where it was put");
    }
}
