//! The live allocations as address ranges, read without a lock: what a kernel launch's
//! parameters name, and where a copy or memset writes and reads (`launch`), is looked up
//! here on every launch and copy, from any thread, so the lookup must cost a few
//! nanoseconds and never wait for an allocation in progress.
//!
//! The registry (`registry`) owns the allocations and keeps this index in step: it
//! inserts and removes ranges under its own lock, so writers are serialised there and
//! every write here publishes a whole new sorted snapshot (copy on write, `arc_swap`).
//! A reader holds the snapshot it loaded until it is done; a range removed meanwhile is
//! then still seen for that one launch, as if the free had come after it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::cuda::ffi::CuDevicePtr;
use crate::memory::start_counts::StartCounts;
use crate::sys::shards::{Shard, Shards, Zeroed};

/// A naming's weight when the kernel reads all of what it names (copies, memsets, and
/// kernels until sampled times say less: `launch::kernel_times`); a kernel measured to
/// read a tenth of it names with a tenth of this.
pub const WHOLE_READ: u64 = 1024;

/// What launches did to one allocation: its heat, as seen from the launches' side, and
/// its writers. Its counts are kept per thread (`sys::shards`): a model's weights are
/// named by every thread that launches its layers, and a count they all bumped would be
/// one line written from every core at every launch. A read sums the threads' counts.
#[derive(Debug, Default)]
pub struct RangeUse {
    counts: Shards<UseCounts, USE_SHARDS>,
}

/// One thread's counts of a range's use, and where the range's starts are counted: each
/// shard holds that too, so that a launch naming the range reads and writes one line of
/// it, its thread's (a second line read per allocation named cost a launch naming 8 of
/// them about 14 ns on the fake CUDA). A range whose parts move on their own (64 MiB and
/// more, with live tiering on) also adds to its `StartCounts`, which every thread shares.
#[derive(Debug)]
struct UseCounts {
    /// Kernel launches (and graph kernel nodes, at each graph launch) whose parameters
    /// named an address inside the range, and copies and memsets that read or wrote in it.
    launches: AtomicU64,
    /// What those launches fell short of reading all they named: `WHOLE_READ` less each
    /// one's weight, summed (only kernels sampled to read less add to it, so the common
    /// launch costs no second atomic).
    unread: AtomicU64,
    /// Copies and memsets that wrote in the range: what look-ahead staging must not run
    /// ahead of (a copy of the range staged before them would be stale).
    writes: AtomicU64,
    /// Where in the range they named it, for a range whose parts move on their own
    /// (`None`: it moves whole, and only the count matters); the same in every shard.
    starts: Option<Arc<StartCounts>>,
}

impl Zeroed for UseCounts {
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: UseCounts =
        UseCounts { launches: AtomicU64::new(0), unread: AtomicU64::new(0), writes: AtomicU64::new(0), starts: None };
}

/// Shards of each range's counts (a cache line each: 512 bytes an allocation); threads
/// past this many that launch share them.
const USE_SHARDS: usize = 8;

impl RangeUse {
    /// The use of a range cut into `parts` parts that move on their own: the addresses
    /// named in it are counted too.
    pub fn partitioned(parts: usize) -> RangeUse {
        let starts = Arc::new(StartCounts::for_parts(parts));
        let mut uses = RangeUse::default();
        uses.counts.each_mut().for_each(|counts| counts.starts = Some(Arc::clone(&starts)));
        uses
    }

    /// A launch of `weight` (`WHOLE_READ`: it reads all it names), or a copy or memset
    /// reading, on the thread of `shard`, named `offset` bytes into the range.
    pub fn note_launch(&self, offset: u64, weight: u64, shard: Shard) {
        let counts = self.counts.of(shard);
        counts.bump(|counts| &counts.launches);
        if weight < WHOLE_READ {
            counts.add(|counts| &counts.unread, WHOLE_READ - weight);
        }
        if let Some(starts) = &counts.fields().starts {
            starts.note(offset, weight, shard);
        }
    }

    /// The same launch, on the thread of `shard`, named the range again, `offset` bytes
    /// in: a start, not a launch.
    pub fn note_start(&self, offset: u64, weight: u64, shard: Shard) {
        if let Some(starts) = &self.counts.of(shard).fields().starts {
            starts.note(offset, weight, shard);
        }
    }

    pub fn launches(&self) -> u64 {
        self.counts.sum(|counts| &counts.launches)
    }

    /// The launches by their weights.
    pub fn weighted(&self) -> u64 {
        self.launches().saturating_mul(WHOLE_READ).saturating_sub(self.counts.sum(|counts| &counts.unread))
    }

    /// The starts named in it, if its parts move on their own.
    pub fn starts(&self) -> Option<&StartCounts> {
        self.counts.first().starts.as_deref()
    }

    /// A copy or memset on the thread of `shard` wrote in the range from `offset` on (it
    /// counts as a launch naming it too).
    pub fn note_write(&self, offset: u64, shard: Shard) {
        self.note_launch(offset, WHOLE_READ, shard);
        self.counts.of(shard).bump(|counts| &counts.writes);
    }

    pub fn writes(&self) -> u64 {
        self.counts.sum(|counts| &counts.writes)
    }
}

/// One live allocation: [`start`, `end`) and its use.
#[derive(Debug, Clone)]
pub struct Range {
    pub start: CuDevicePtr,
    pub end: CuDevicePtr,
    pub uses: Arc<RangeUse>,
}

impl Range {
    /// How far into the range `address` (inside it) lies.
    pub fn offset(&self, address: CuDevicePtr) -> u64 {
        address.saturating_sub(self.start)
    }
}

/// A copy or memset on the thread of `shard` wrote from `written` and read from `read`
/// (addresses, each with the range holding it): the written range counts a write; the
/// read one a launch, or only a start when it is the written one (an operation counts
/// once per range).
pub fn note_copy(written: Option<(&Range, CuDevicePtr)>, read: Option<(&Range, CuDevicePtr)>, shard: Shard) {
    if let Some((range, address)) = written {
        range.uses.note_write(range.offset(address), shard);
    }
    if let Some((range, address)) = read {
        if written.is_none_or(|(written, _)| written.start != range.start) {
            range.uses.note_launch(range.offset(address), WHOLE_READ, shard);
        } else {
            range.uses.note_start(range.offset(address), WHOLE_READ, shard);
        }
    }
}

/// The ranges sorted by start, disjoint (the driver never hands out overlapping
/// allocations), with the span they cover for a two-comparison reject of values that
/// are no device address (counts, sizes, floats). The starts are kept apart as well, 8
/// to a cache line: the search reads only them, and then the one range it lands on.
#[derive(Debug, Default)]
pub struct Snapshot {
    ranges: Vec<Range>,
    starts: Box<[CuDevicePtr]>,
    low: CuDevicePtr,
    high: CuDevicePtr,
}

impl Snapshot {
    pub(crate) fn from_ranges(ranges: Vec<Range>) -> Snapshot {
        let starts = ranges.iter().map(|range| range.start).collect();
        let low = ranges.first().map_or(0, |range| range.start);
        let high = ranges.iter().map(|range| range.end).max().unwrap_or(0);
        Snapshot { ranges, starts, low, high }
    }

    /// `address` with the range holding it, if any.
    pub fn locate(&self, address: Option<CuDevicePtr>) -> Option<(&Range, CuDevicePtr)> {
        let address = address?;
        Some((self.find(address)?, address))
    }

    /// [`low`, `high`): the span the ranges cover, for a reject of values that are no
    /// device address before any search.
    pub fn span(&self) -> (CuDevicePtr, CuDevicePtr) {
        (self.low, self.high)
    }

    /// The range holding `address`, if any.
    pub fn find(&self, address: CuDevicePtr) -> Option<&Range> {
        if address < self.low || address >= self.high {
            return None;
        }
        let after = self.starts.partition_point(|&start| start <= address);
        let range = self.ranges.get(after.checked_sub(1)?)?;
        (address < range.end).then_some(range)
    }
}

static INDEX: ArcSwapOption<Snapshot> = ArcSwapOption::const_empty();

/// The current snapshot (empty before the first allocation).
pub fn load() -> arc_swap::Guard<Option<Arc<Snapshot>>> {
    INDEX.load()
}

/// Adds [`start`, `start + len`), counted in `uses` (a new entry when `None`). Called by
/// the registry under its lock (the one writer).
pub(super) fn insert(start: CuDevicePtr, len: u64, uses: Option<Arc<RangeUse>>) {
    let current = INDEX.load_full();
    let mut ranges = current.as_ref().map_or_else(Vec::new, |snapshot| snapshot.ranges.clone());
    let at = ranges.partition_point(|range| range.start < start);
    let range = Range { start, end: start.saturating_add(len.max(1)), uses: uses.unwrap_or_default() };
    if ranges.get(at).is_some_and(|existing| existing.start == start) {
        // An address the registry had not removed (a free the shim did not see).
        ranges[at] = range;
    } else {
        ranges.insert(at, range);
    }
    INDEX.store(Some(Arc::new(Snapshot::from_ranges(ranges))));
}

/// Removes the range starting at `start`, if there is one. Called by the registry under
/// its lock.
pub(super) fn remove(start: CuDevicePtr) {
    let Some(current) = INDEX.load_full() else { return };
    let Ok(at) = current.ranges.binary_search_by_key(&start, |range| range.start) else { return };
    let mut ranges = current.ranges.clone();
    ranges.remove(at);
    INDEX.store(Some(Arc::new(Snapshot::from_ranges(ranges))));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(spans: &[(u64, u64)]) -> Snapshot {
        Snapshot::from_ranges(spans.iter().map(|&(start, end)| Range { start, end, uses: Arc::default() }).collect())
    }

    #[test]
    fn finds_the_range_holding_an_address_and_nothing_between_ranges() {
        let index = snapshot(&[(0x1000, 0x2000), (0x3000, 0x3800), (0x8000, 0x9000)]);
        assert_eq!(index.find(0x1000).map(|r| r.start), Some(0x1000));
        assert_eq!(index.find(0x1fff).map(|r| r.start), Some(0x1000));
        assert!(index.find(0x2000).is_none(), "end is exclusive");
        assert!(index.find(0x2800).is_none(), "a gap");
        assert_eq!(index.find(0x37ff).map(|r| r.start), Some(0x3000));
        assert_eq!(index.find(0x8abc).map(|r| r.start), Some(0x8000));
        assert!(index.find(0x9000).is_none());
        assert!(index.find(0).is_none());
        assert!(index.find(u64::MAX).is_none());
        assert!(snapshot(&[]).find(0x1000).is_none());
    }

    #[test]
    fn a_range_s_use_is_what_every_thread_counted() {
        let uses = RangeUse::partitioned(4);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    let shard = Shard::mine();
                    uses.note_launch(0, WHOLE_READ, shard);
                    uses.note_start(0x100, WHOLE_READ, shard);
                    uses.note_write(0x200, shard);
                });
            }
        });
        uses.note_launch(0x100, WHOLE_READ / 4, Shard::mine());
        assert_eq!((uses.launches(), uses.writes()), (7, 3), "a write counts as a launch too");
        assert_eq!(uses.weighted(), 7 * WHOLE_READ - 3 * WHOLE_READ / 4);
        let weights: Vec<(u64, u64)> =
            uses.starts().expect("partitioned").read(false).named.iter().map(|s| (s.offset, s.weight)).collect();
        assert_eq!(weights, [(0, 3 * WHOLE_READ), (0x100, 3 * WHOLE_READ + WHOLE_READ / 4), (0x200, 3 * WHOLE_READ)]);
        assert!(RangeUse::default().starts().is_none());
    }
}
