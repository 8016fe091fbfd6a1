//! The addresses launches named inside one large movable allocation, and how much: a
//! kernel is given the start of what it reads (llama.cpp passes each weight's and each
//! layer's KV cache's address inside one buffer, PyTorch each tensor's inside a cached
//! segment), so the starts seen partition the allocation into the pieces kernels read,
//! and the launches naming each start, by their weights (`address_index::WHOLE_READ` for
//! one that reads all it names), say how hot its piece is (`rules::range_heat`).
//!
//! Noted on every launch from any thread, so without a lock: a fixed open-addressed table
//! of (offset, count) slots. A slot is taken once, by swapping its key from empty to the
//! offset, and never given back while the allocation lives (the partition only grows
//! finer); a start that finds no slot within `PROBES` is counted as naming the whole
//! allocation (`unplaced`), which is what a launch naming it counted before partitions.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots a start may look at from its hash before it counts as unplaced.
const PROBES: usize = 16;

/// A slot's key word while empty; a taken one holds the offset plus one.
const EMPTY: u64 = 0;

#[derive(Debug)]
struct Slot {
    key: AtomicU64,
    count: AtomicU64,
}

/// The starts named in one allocation.
#[derive(Debug)]
pub struct StartCounts {
    slots: Box<[Slot]>,
    /// Namings of a start that found no slot.
    unplaced: AtomicU64,
}

/// What `StartCounts::read` found: every start ever named, sorted by offset, with the
/// weight of its namings since the last take, and of the unplaced namings since then.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Starts {
    pub named: Vec<(u64, u64)>,
    pub unplaced: u64,
}

impl StartCounts {
    /// A table for an allocation of `len` bytes cut into `parts` parts: twice as many slots
    /// as parts (a start per part is the finest partition that changes where bytes go),
    /// at least 64, at most 16384.
    pub fn for_parts(parts: usize) -> StartCounts {
        let slots = (parts.saturating_mul(2)).clamp(64, 16384).next_power_of_two();
        let slots = (0..slots).map(|_| Slot { key: AtomicU64::new(EMPTY), count: AtomicU64::new(0) }).collect();
        StartCounts { slots, unplaced: AtomicU64::new(0) }
    }

    /// A launch, copy or memset of `weight` named `offset` bytes into the allocation.
    pub fn note(&self, offset: u64, weight: u64) {
        let key = offset.wrapping_add(1);
        let mask = self.slots.len() - 1;
        // Fibonacci hashing: starts are multiples of large powers of two.
        let mut at = (offset.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
        for _ in 0..PROBES {
            let slot = &self.slots[at];
            let current = slot.key.load(Ordering::Acquire);
            let taken = current == key
                || (current == EMPTY
                    && match slot.key.compare_exchange(EMPTY, key, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => true,
                        Err(other) => other == key,
                    });
            if taken {
                slot.count.fetch_add(weight, Ordering::Relaxed);
                return;
            }
            at = (at + 1) & mask;
        }
        self.unplaced.fetch_add(weight, Ordering::Relaxed);
    }

    /// Every start named so far with its namings' weight since the last take; `take`
    /// zeroes those.
    pub fn read(&self, take: bool) -> Starts {
        let count = |counter: &AtomicU64| {
            if take {
                counter.swap(0, Ordering::Relaxed)
            } else {
                counter.load(Ordering::Relaxed)
            }
        };
        let mut named: Vec<(u64, u64)> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let key = slot.key.load(Ordering::Acquire);
                (key != EMPTY).then(|| (key - 1, count(&slot.count)))
            })
            .collect();
        named.sort_unstable();
        Starts { named, unplaced: count(&self.unplaced) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_start_and_keeps_the_starts_after_a_take() {
        let starts = StartCounts::for_parts(8);
        for offset in [0x40_0000, 0, 0x40_0000, 0x1234] {
            starts.note(offset, 1);
        }
        assert_eq!(starts.read(false).named, vec![(0, 1), (0x1234, 1), (0x40_0000, 2)]);
        assert_eq!(starts.read(true).named, vec![(0, 1), (0x1234, 1), (0x40_0000, 2)]);
        // Taken: the partition stays, the counts start again.
        starts.note(0x1234, 5);
        assert_eq!(starts.read(true), Starts { named: vec![(0, 0), (0x1234, 5), (0x40_0000, 0)], unplaced: 0 });
    }

    #[test]
    fn a_full_table_counts_what_it_cannot_place_as_unplaced() {
        let starts = StartCounts::for_parts(1);
        let slots = starts.slots.len() as u64;
        for offset in 0..slots + 10 {
            starts.note(offset << 21, 1);
        }
        let read = starts.read(true);
        assert_eq!(read.named.len() as u64 + read.unplaced, slots + 10, "every naming counted once");
        assert!(read.unplaced >= 10);
        assert!(read.named.iter().all(|&(_, count)| count == 1));
    }
}
