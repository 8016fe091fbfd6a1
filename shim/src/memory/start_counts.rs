//! The addresses launches named inside one large movable allocation, and how much: a
//! kernel is given the start of what it reads (llama.cpp passes each weight's and each
//! layer's KV cache's address inside one buffer, PyTorch each tensor's inside a cached
//! segment), so the starts named lately partition the allocation into the pieces kernels
//! read, and the weight of the namings of each start (`address_index::WHOLE_READ` for one
//! that reads all it names) says how hot its piece is (`rules::range_heat`).
//!
//! Noted on every launch from any thread, so without a lock: a fixed open-addressed table
//! of (offset, count) slots (`sys::key_slots`). A slot is taken once and never given back
//! while the allocation lives; a start that finds no slot
//! within `PROBES` is counted as naming the whole allocation (`unplaced`), which is what a
//! launch naming it counted before partitions.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::rules::range_heat::Start;
use crate::sys::key_slots::{self, Claim};

/// Slots a start may look at from its hash before it counts as unplaced.
const PROBES: usize = 16;

#[derive(Debug)]
struct Slot {
    /// The offset plus one (`key_slots`).
    key: AtomicU64,
    /// The weight of its namings since the last take.
    count: AtomicU64,
    /// The same at the last take.
    last: AtomicU64,
}

/// The starts named in one allocation.
#[derive(Debug)]
pub struct StartCounts {
    slots: Box<[Slot]>,
    /// Namings of a start that found no slot.
    unplaced: AtomicU64,
}

/// What `StartCounts::read` found: every start ever named, sorted by offset, with the
/// weight of its namings since the last take and whether it was named since the take
/// before, and the weight of the unplaced namings since the last take.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Starts {
    pub named: Vec<Start>,
    pub unplaced: u64,
}

impl StartCounts {
    /// A table for an allocation cut into `parts` parts: twice as many slots as parts (a
    /// start per part is the finest partition that changes where bytes go), at least 64,
    /// at most 16384.
    pub fn for_parts(parts: usize) -> StartCounts {
        let slots = (parts.saturating_mul(2)).clamp(64, 16384).next_power_of_two();
        let slots = (0..slots)
            .map(|_| Slot { key: AtomicU64::new(key_slots::EMPTY), count: AtomicU64::new(0), last: AtomicU64::new(0) })
            .collect();
        StartCounts { slots, unplaced: AtomicU64::new(0) }
    }

    /// A launch, copy or memset of `weight` named `offset` bytes into the allocation.
    pub fn note(&self, offset: u64, weight: u64) {
        let key = offset.wrapping_add(1);
        match key_slots::slot(self.slots.len(), key, PROBES, |at| &self.slots[at].key) {
            Some(Claim::Found(at) | Claim::Taken(at)) => self.slots[at].count.fetch_add(weight, Ordering::Relaxed),
            None => self.unplaced.fetch_add(weight, Ordering::Relaxed),
        };
    }

    /// Every start named so far with its namings' weight since the last take; `take`
    /// starts the next tick (the weights zeroed, kept as the last).
    pub fn read(&self, take: bool) -> Starts {
        let mut named: Vec<Start> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let key = slot.key.load(Ordering::Acquire);
                (key != key_slots::EMPTY).then(|| {
                    let weight =
                        if take { slot.count.swap(0, Ordering::Relaxed) } else { slot.count.load(Ordering::Relaxed) };
                    let last = if take {
                        slot.last.swap(weight, Ordering::Relaxed)
                    } else {
                        slot.last.load(Ordering::Relaxed)
                    };
                    Start { offset: key - 1, weight, recent: weight != 0 || last != 0 }
                })
            })
            .collect();
        named.sort_unstable_by_key(|start| start.offset);
        let unplaced =
            if take { self.unplaced.swap(0, Ordering::Relaxed) } else { self.unplaced.load(Ordering::Relaxed) };
        Starts { named, unplaced }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64, weight: u64, recent: bool) -> Start {
        Start { offset, weight, recent }
    }

    #[test]
    fn counts_each_start_and_keeps_the_starts_after_a_take() {
        let starts = StartCounts::for_parts(8);
        for offset in [0x40_0000, 0, 0x40_0000, 0x1234] {
            starts.note(offset, 1);
        }
        let all = vec![at(0, 1, true), at(0x1234, 1, true), at(0x40_0000, 2, true)];
        assert_eq!(starts.read(false).named, all);
        assert_eq!(starts.read(true).named, all);
        // Taken: the starts stay, the weights start again; named in the tick before is recent.
        starts.note(0x1234, 5);
        let next = vec![at(0, 0, true), at(0x1234, 5, true), at(0x40_0000, 0, true)];
        assert_eq!(starts.read(true), Starts { named: next, unplaced: 0 });
        // Two ticks without a naming: no longer recent.
        assert_eq!(starts.read(true).named, vec![at(0, 0, false), at(0x1234, 0, true), at(0x40_0000, 0, false)]);
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
        assert!(read.named.iter().all(|start| start.weight == 1 && start.recent));
    }
}
