//! One launch's lookups in the address index, through each thread's memo of the
//! allocations its launches found there lately.
//!
//! A launch often names what the launch before it on the same thread named (the same
//! buffers again, tensors of the same allocator segments), in the same order. So a word
//! is first matched against the few allocations the thread found last, held in lines
//! of its own, starting where the last match left off; only a word none of them holds
//! is searched for in the shared snapshot, whose lines the driver's launch path may
//! have evicted since.
//!
//! The memo answers only for the snapshot it was filled from, which it holds: a launch
//! that loads another one (an allocation was made or freed since) empties it first.
//! An answer from the memo is therefore the one the snapshot's own search would give,
//! and a freed allocation, or a new one at its address, is never answered for by a
//! stale entry. Holding the snapshot keeps it, and the uses of allocations freed since,
//! until the thread's next launch or its exit.

use std::cell::Cell;
use std::sync::Arc;

use crate::cuda::ffi::CuDevicePtr;
use crate::memory::address_index::{Range, RangeUse, Snapshot};

/// Allocations a thread's memo keeps (a launch names a handful; one that names more
/// finds the rest through the search). At most 32: a launch marks the slots it named in
/// a `u32`.
const SLOTS: usize = 8;

/// The most distinct allocations one launch's count is kept exact for, memo slots
/// included; past it a range named twice is counted twice (launches name a handful).
const DISTINCT_TRACKED: usize = 32;

/// Allocations found, each as [`start`, `start + len`) and its use, in separate arrays
/// so that matching a word reads the spans alone.
struct Spans<const N: usize> {
    starts: [CuDevicePtr; N],
    /// 0 where nothing was found (no address matches).
    lens: [u64; N],
    uses: [*const RangeUse; N],
}

impl<const N: usize> Spans<N> {
    const EMPTY: Spans<N> = Spans { starts: [0; N], lens: [0; N], uses: [std::ptr::null(); N] };

    fn holds(&self, at: usize, address: CuDevicePtr) -> bool {
        address.wrapping_sub(self.starts[at]) < self.lens[at]
    }

    /// The first of the first `count` spans holding `address`.
    fn position(&self, address: CuDevicePtr, count: usize) -> Option<usize> {
        (0..count.min(N)).find(|&at| self.holds(at, address))
    }

    fn set(&mut self, at: usize, range: &Range) {
        self.starts[at] = range.start;
        self.lens[at] = range.end - range.start;
        self.uses[at] = Arc::as_ptr(&range.uses);
    }

    /// The allocation of span `at`.
    ///
    /// # Safety
    /// Span `at` was set from a range of a snapshot that lives for `'a`.
    unsafe fn found<'a>(&self, at: usize, first: bool) -> Found<'a> {
        // SAFETY: the use is held by its range, in a snapshot living for 'a (the contract).
        Found { start: self.starts[at], uses: unsafe { &*self.uses[at] }, first }
    }
}

/// A thread's memo, and the allocations its launch in progress named past the memo's
/// slots (kept here too: the stack would have to clear them at every launch).
/// Aligned to its cache lines, which no other allocation then shares.
#[repr(align(64))]
struct Memo {
    /// The snapshot every slot's use lies in, held so that its address is no other
    /// snapshot's while the memo answers for it (`None` in a memo of one call, which
    /// the snapshot it is used with outlives).
    snapshot: Option<Arc<Snapshot>>,
    slots: Spans<SLOTS>,
    /// The slot filled next, unless the launch in progress named it (oldest first).
    next: usize,
    /// Valid below the launch's `Finder::named_others` only.
    others: Spans<{ DISTINCT_TRACKED - SLOTS }>,
}

impl Memo {
    fn new() -> Box<Memo> {
        Box::new(Memo { snapshot: None, slots: Spans::EMPTY, next: 0, others: Spans::EMPTY })
    }

    /// Makes the memo answer for `snapshot`: emptied unless it holds that one already.
    fn renew(&mut self, snapshot: &Arc<Snapshot>) {
        if !self.snapshot.as_ref().is_some_and(|held| Arc::ptr_eq(held, snapshot)) {
            self.snapshot = Some(Arc::clone(snapshot));
            self.slots = Spans::EMPTY;
            self.next = 0;
        }
    }
}

thread_local! {
    /// Taken for a launch and put back after it (`None` meanwhile, so that a nested
    /// lookup would use a memo of its own).
    static MEMO: Cell<Option<Box<Memo>>> = const { Cell::new(None) };
}

/// An allocation a word named.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    /// Where the allocation starts.
    pub start: CuDevicePtr,
    pub uses: &'a RangeUse,
    /// Whether this is the first word of the launch to name it.
    pub first: bool,
}

/// One launch's lookups in one snapshot, through a memo, each allocation counted once.
pub struct Finder<'a> {
    snapshot: &'a Snapshot,
    /// The snapshot's span, for the two-comparison reject of values that are no device
    /// address (`address - low >= span`: counts, sizes, floats, null).
    low: CuDevicePtr,
    span: u64,
    memo: &'a mut Memo,
    /// The memo slots this launch named.
    named: u32,
    /// The allocations this launch named that no memo slot holds (its slots were all
    /// named by the launch already); the first of them are in `memo.others`.
    named_others: usize,
    /// The slot a word is matched against first: the one after the last slot matched.
    hint: usize,
}

impl<'a> Finder<'a> {
    fn new(snapshot: &'a Snapshot, memo: &'a mut Memo) -> Finder<'a> {
        let (low, high) = snapshot.span();
        Finder { snapshot, low, span: high.saturating_sub(low), memo, named: 0, named_others: 0, hint: 0 }
    }

    /// The lookups that follow are another launch's (a graph's next kernel node): each
    /// allocation they name is a first again, and the memo's slots this launch named may
    /// be refilled.
    pub fn next_launch(&mut self) {
        self.named = 0;
        self.named_others = 0;
    }

    /// Distinct allocations named so far.
    pub fn distinct(&self) -> usize {
        self.named.count_ones() as usize + self.named_others
    }

    /// The allocation `address` names, if any. Most words of a launch's parameters are
    /// no address: only the span's reject is inlined into the caller's loop.
    #[inline]
    pub fn find(&mut self, address: CuDevicePtr) -> Option<Found<'a>> {
        if address.wrapping_sub(self.low) >= self.span {
            return None;
        }
        self.find_in_span(address)
    }

    /// `address`, inside the snapshot's span: matched against the memo's slots, the one
    /// after the last match first, else searched for.
    #[inline(never)]
    fn find_in_span(&mut self, address: CuDevicePtr) -> Option<Found<'a>> {
        let slots = &self.memo.slots;
        let slot = if slots.holds(self.hint, address) { Some(self.hint) } else { slots.position(address, SLOTS) };
        let Some(slot) = slot else { return self.search(address) };
        let first = self.named & (1 << slot) == 0;
        self.named |= 1 << slot;
        self.hint = (slot + 1) % SLOTS;
        // SAFETY: a filled slot was set from the memo's snapshot, which is this finder's
        // (`Memo::renew`) and lives for 'a; an empty one holds no address.
        Some(unsafe { self.memo.slots.found(slot, first) })
    }

    /// `address`, inside the snapshot's span, in no memo slot: among this launch's
    /// others, else searched for and remembered.
    #[inline(never)]
    fn search(&mut self, address: CuDevicePtr) -> Option<Found<'a>> {
        let memo = &mut *self.memo;
        if let Some(other) = memo.others.position(address, self.named_others) {
            // SAFETY: set by this launch (below `named_others`), from its snapshot.
            return Some(unsafe { memo.others.found(other, false) });
        }
        let range = self.snapshot.find(address)?;
        // The oldest slot this launch has not named: a slot it named stays, so that a
        // later word naming the allocation again is not counted as a first.
        let free = (0..SLOTS).map(|k| (memo.next + k) % SLOTS).find(|&slot| self.named & (1 << slot) == 0);
        match free {
            Some(slot) => {
                memo.slots.set(slot, range);
                memo.next = (slot + 1) % SLOTS;
                self.named |= 1 << slot;
                self.hint = memo.next;
            }
            None => {
                if self.named_others < DISTINCT_TRACKED - SLOTS {
                    memo.others.set(self.named_others, range);
                }
                self.named_others += 1;
            }
        }
        Some(Found { start: range.start, uses: &range.uses, first: true })
    }
}

/// Calls `f` with a finder over `snapshot`, through this thread's memo.
pub fn with_finder<R>(snapshot: &Arc<Snapshot>, f: impl FnOnce(&mut Finder<'_>) -> R) -> R {
    // A memo of its own where the thread's is in use (a nested call) or gone (exiting).
    let mut memo = MEMO.try_with(Cell::take).ok().flatten().unwrap_or_else(Memo::new);
    memo.renew(snapshot);
    let answer = f(&mut Finder::new(snapshot, &mut memo));
    let _ = MEMO.try_with(|slot| slot.set(Some(memo)));
    answer
}

/// Calls `f` with a finder over `snapshot` through a memo of this call only: for
/// lookups off the launch path (a graph's nodes read at instantiation).
pub fn with_local_finder<R>(snapshot: &Snapshot, f: impl FnOnce(&mut Finder<'_>) -> R) -> R {
    f(&mut Finder::new(snapshot, &mut Memo::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot of ranges [`start`, `end`), each with the use given.
    fn snapshot(ranges: &[(u64, u64, &Arc<RangeUse>)]) -> Arc<Snapshot> {
        let ranges = ranges.iter().map(|&(start, end, uses)| Range { start, end, uses: Arc::clone(uses) });
        Arc::new(Snapshot::from_ranges(ranges.collect()))
    }

    /// The use `address` names through this thread's memo, as a launch would find it.
    fn use_of(snapshot: &Arc<Snapshot>, address: u64) -> Option<*const RangeUse> {
        with_finder(snapshot, |finder| finder.find(address).map(|found| std::ptr::from_ref(found.uses)))
    }

    #[test]
    fn a_freed_allocation_is_not_answered_for_once_its_address_is_reused_or_left_empty() {
        let (freed, kept, reused, low) = (Arc::default(), Arc::default(), Arc::default(), Arc::default());
        let before = snapshot(&[(0x1000, 0x2000, &freed), (0x8000, 0x9000, &kept)]);
        assert_eq!(use_of(&before, 0x1800), Some(Arc::as_ptr(&freed)));
        assert_eq!(use_of(&before, 0x1800), Some(Arc::as_ptr(&freed)), "from the memo");
        // Freed, and a larger allocation made at its address.
        let after = snapshot(&[(0x1000, 0x3000, &reused), (0x8000, 0x9000, &kept)]);
        assert_eq!(use_of(&after, 0x1800), Some(Arc::as_ptr(&reused)), "the memo answered for the freed allocation");
        assert_eq!(use_of(&after, 0x2800), Some(Arc::as_ptr(&reused)));
        assert_eq!(use_of(&after, 0x8000), Some(Arc::as_ptr(&kept)));
        // Freed too, with nothing at its address, which still lies inside the span.
        let emptied = snapshot(&[(0x0800, 0x0900, &low), (0x8000, 0x9000, &kept)]);
        assert_eq!(use_of(&emptied, 0x1800), None, "the memo answered for a freed allocation");
        assert_eq!(use_of(&emptied, 0x0800), Some(Arc::as_ptr(&low)));
    }

    #[test]
    fn the_next_launch_of_a_finder_counts_each_allocation_again() {
        let (uses, other) = (Arc::default(), Arc::default());
        let index = snapshot(&[(0x1000, 0x2000, &uses), (0x3000, 0x3800, &other)]);
        with_finder(&index, |finder| {
            assert!(finder.find(0x1000).is_some_and(|found| found.first));
            assert!(finder.find(0x1800).is_some_and(|found| !found.first));
            finder.next_launch();
            assert_eq!(finder.distinct(), 0);
            assert!(finder.find(0x1800).is_some_and(|found| found.first), "a graph's next node names it again");
            assert!(finder.find(0x3000).is_some_and(|found| found.first));
            assert_eq!(finder.distinct(), 2);
        });
    }

    #[test]
    fn values_that_name_no_allocation_are_not_found() {
        let uses = Arc::default();
        let index = snapshot(&[(0x1000, 0x2000, &uses), (0x3000, 0x3800, &uses)]);
        for address in [0, 0xfff, 0x2000, 0x2800, 0x3800, u64::MAX] {
            assert_eq!(use_of(&index, address), None, "{address:#x}");
        }
        assert_eq!(use_of(&snapshot(&[]), 0x1000), None);
    }

    #[test]
    fn a_launch_counts_each_allocation_once_whether_the_memo_holds_it_or_not() {
        let uses: Vec<Arc<RangeUse>> = (0..40).map(|_| Arc::default()).collect();
        let spans: Vec<(u64, u64, &Arc<RangeUse>)> = uses
            .iter()
            .enumerate()
            .map(|(n, uses)| (0x10000 * (n as u64 + 1), 0x10000 * (n as u64 + 1) + 0x100, uses))
            .collect();
        let index = snapshot(&spans);
        // Launches naming 3, then 12 (past the memo's slots), then 36 (past the count
        // kept exact) allocations, then 4 others (in slots the launches before filled),
        // each named twice, in turn and then in reverse.
        for (from, named) in [(0, 3), (0, 12), (0, DISTINCT_TRACKED + 4), (20, 4), (0, 3)] {
            with_finder(&index, |finder| {
                let order = (from..from + named).chain((from..from + named).rev());
                let firsts: Vec<usize> = order
                    .filter_map(|n| finder.find(spans[n].0 + 8).map(|found| (n, found)))
                    .inspect(|(n, found)| assert_eq!(std::ptr::from_ref(found.uses), Arc::as_ptr(spans[*n].2)))
                    .filter(|(_, found)| found.first)
                    .map(|(n, _)| n)
                    .collect();
                if named <= DISTINCT_TRACKED {
                    assert_eq!(firsts, (from..from + named).collect::<Vec<_>>(), "{named} allocations from {from}");
                    assert_eq!(finder.distinct(), named);
                } else {
                    assert!(firsts.len() > named, "past the count kept exact, some twice");
                    assert_eq!(finder.distinct(), firsts.len());
                }
            });
        }
    }
}
