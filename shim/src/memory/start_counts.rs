//! The addresses launches named inside one large movable allocation, and how much: a
//! kernel is given the start of what it reads (llama.cpp passes each weight's and each
//! layer's KV cache's address inside one buffer, PyTorch each tensor's inside a cached
//! segment), so the starts named lately partition the allocation into the pieces kernels
//! read, and the weight of the namings of each start (`address_index::WHOLE_READ` for one
//! that reads all it names) says how hot its piece is (`rules::range_heat`).
//!
//! Noted on every launch from any thread, so without a lock: a fixed open-addressed table
//! of (offset, weights) slots (`sys::key_slots`). A slot is taken once and never given
//! back while the allocation lives; a start that finds no slot
//! within `PROBES` is counted as naming the whole allocation (`unplaced`), which is what a
//! launch naming it counted before partitions. The weights only grow: the thread that
//! noted first adds to its own without a locked instruction (`sys::shards::FirstWriter`;
//! a locked add per start was most of the shim's time per launch into movable memory),
//! the others beside it with one; the tier thread, the one taker, keeps the sum it saw
//! at its last take and the weight of the tick before.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::rules::range_heat::Start;
use crate::sys::key_slots::{self, Claim};
use crate::sys::shards::{self, FirstWriter, Shard};

/// Slots a start may look at from its hash before it counts as unplaced.
const PROBES: usize = 16;

/// A weight that grows, and what the taker last saw of it.
#[derive(Debug, Default)]
struct Weight {
    /// Added by the first writer only.
    first: AtomicU64,
    /// Added by every other thread.
    others: AtomicU64,
    /// The sum at the last take (written by the taker only).
    taken: AtomicU64,
    /// The weight of the tick before the last take (written by the taker only).
    before: AtomicU64,
}

impl Weight {
    fn add(&self, weight: u64, alone: bool) {
        if alone {
            shards::add_alone(&self.first, weight);
        } else {
            self.others.fetch_add(weight, Ordering::Relaxed);
        }
    }

    /// The weight since the last take, and the tick's before it; `take` starts the next
    /// tick.
    fn read(&self, take: bool) -> (u64, u64) {
        let sum = self.first.load(Ordering::Relaxed).wrapping_add(self.others.load(Ordering::Relaxed));
        let since = sum.wrapping_sub(self.taken.load(Ordering::Relaxed));
        if take {
            self.taken.store(sum, Ordering::Relaxed);
            (since, self.before.swap(since, Ordering::Relaxed))
        } else {
            (since, self.before.load(Ordering::Relaxed))
        }
    }
}

#[derive(Debug)]
struct Slot {
    /// The offset plus one (`key_slots`).
    key: AtomicU64,
    weight: Weight,
}

/// The starts named in one allocation.
#[derive(Debug)]
pub struct StartCounts {
    slots: Box<[Slot]>,
    /// Namings of a start that found no slot.
    unplaced: Weight,
    writer: FirstWriter,
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
        let slots =
            (0..slots).map(|_| Slot { key: AtomicU64::new(key_slots::EMPTY), weight: Weight::default() }).collect();
        StartCounts { slots, unplaced: Weight::default(), writer: FirstWriter::new() }
    }

    /// A launch, copy or memset of `weight` on the thread of `shard` named `offset` bytes
    /// into the allocation.
    pub fn note(&self, offset: u64, weight: u64, shard: Shard) {
        let alone = self.writer.is(shard);
        let key = offset.wrapping_add(1);
        match key_slots::slot(self.slots.len(), key, PROBES, |at| &self.slots[at].key) {
            Some(Claim::Found(at) | Claim::Taken(at)) => self.slots[at].weight.add(weight, alone),
            None => self.unplaced.add(weight, alone),
        }
    }

    /// Every start named so far with its namings' weight since the last take; `take`
    /// starts the next tick (only the tier thread takes).
    pub fn read(&self, take: bool) -> Starts {
        let mut named: Vec<Start> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let key = slot.key.load(Ordering::Acquire);
                (key != key_slots::EMPTY).then(|| {
                    let (weight, before) = slot.weight.read(take);
                    Start { offset: key - 1, weight, recent: weight != 0 || before != 0 }
                })
            })
            .collect();
        named.sort_unstable_by_key(|start| start.offset);
        Starts { named, unplaced: self.unplaced.read(take).0 }
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
            starts.note(offset, 1, Shard::mine());
        }
        let all = vec![at(0, 1, true), at(0x1234, 1, true), at(0x40_0000, 2, true)];
        assert_eq!(starts.read(false).named, all);
        assert_eq!(starts.read(true).named, all);
        // Taken: the starts stay, the weights start again; named in the tick before is recent.
        starts.note(0x1234, 5, Shard::mine());
        let next = vec![at(0, 0, true), at(0x1234, 5, true), at(0x40_0000, 0, true)];
        assert_eq!(starts.read(true), Starts { named: next, unplaced: 0 });
        // Two ticks without a naming: no longer recent.
        assert_eq!(starts.read(true).named, vec![at(0, 0, false), at(0x1234, 0, true), at(0x40_0000, 0, false)]);
    }

    #[test]
    fn threads_naming_one_start_at_once_lose_none_of_its_weight() {
        let starts = StartCounts::for_parts(8);
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    start.wait();
                    for _ in 0..100_000 {
                        starts.note(0x1000, 1, Shard::mine());
                    }
                });
            }
        });
        assert_eq!(starts.read(true).named, vec![at(0x1000, 400_000, true)]);
    }

    #[test]
    fn a_full_table_counts_what_it_cannot_place_as_unplaced() {
        let starts = StartCounts::for_parts(1);
        let slots = starts.slots.len() as u64;
        for offset in 0..slots + 10 {
            starts.note(offset << 21, 1, Shard::mine());
        }
        let read = starts.read(true);
        assert_eq!(read.named.len() as u64 + read.unplaced, slots + 10, "every naming counted once");
        assert!(read.unplaced >= 10);
        assert!(read.named.iter().all(|start| start.weight == 1 && start.recent));
    }
}
