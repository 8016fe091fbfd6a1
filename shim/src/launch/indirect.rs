//! Writers the shim cannot name: work that writes through pointers kept in device memory,
//! which no launch parameter, copy or memset names. Each counts as a writer of everything
//! (`STATS.indirect_writers`), which look-ahead staging waits for as for a launch it
//! could not read:
//! - cuBLAS routines over device arrays of pointers (batched and grouped products,
//!   batched solvers), and cuBLASLt products whose output layout is a pointer array;
//! - copies and memsets into `__device__` globals (cudaMemcpyToSymbol and the like): a
//!   kernel may read a pointer kept in one and write through it. The runtime finds each
//!   global's address with cuModuleGetGlobal_v2 or cuLibraryGetGlobal; the ranges those
//!   answered are remembered here, read without a lock on every copy and memset.
//!
//! A global is never forgotten (the driver does not say when its module is unloaded): a
//! copy into memory later allocated where one was counts too, which only drops
//! look-ahead copies. What a kernel reads from a global is not a write, and not counted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use arc_swap::ArcSwap;

use crate::cuda::ffi::CuDevicePtr;
use crate::launch::capture;
use crate::sys::stats::{self, STATS};

/// A call that writes through pointers kept in device memory was enqueued (a cuBLAS
/// routine over pointer arrays is counted before its real call, so that it is seen by the
/// time its work is on the stream).
pub fn pointer_array_writer() {
    stats::bump(&STATS.indirect_writers);
    capture::indirect_writer_enqueued();
}

/// A copy or memset wrote a `__device__` global (a graph's node: at each launch).
pub fn global_written() {
    stats::bump(&STATS.indirect_writers);
}

/// The bytes of one `__device__` global, or of neighbours merged: [start, end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: CuDevicePtr,
    end: CuDevicePtr,
}

/// At most this many spans are kept; past it, the two nearest are merged into one span
/// covering both and the gap between (a copy into the gap then counts as well).
const MOST_SPANS: usize = 4096;

type Globals = ArcSwap<Vec<Span>>;

/// The globals' spans, sorted, disjoint and not touching.
static GLOBALS: LazyLock<Globals> = LazyLock::new(|| ArcSwap::from_pointee(Vec::new()));

/// Whether any global was found: until then a copy costs one load here.
static ANY_GLOBAL: AtomicBool = AtomicBool::new(false);

/// The driver answered that a `__device__` global of `bytes` bytes is at `address`.
pub fn global_found(address: CuDevicePtr, bytes: usize) {
    let Some(span) = span(address, bytes as u64) else { return };
    if !covered(&GLOBALS.load(), span) {
        GLOBALS.rcu(|spans| with(spans, span, MOST_SPANS));
    }
    ANY_GLOBAL.store(true, Ordering::Release);
}

/// Whether a write of `bytes` bytes from `target` touches a `__device__` global. Only the
/// bytes from the first one written are asked about: a pitched write's later rows are
/// not (the runtime's copies to a symbol are one range from inside it).
pub fn writes_global(target: CuDevicePtr, bytes: u64) -> bool {
    if !ANY_GLOBAL.load(Ordering::Acquire) {
        return false;
    }
    span(target, bytes).is_some_and(|write| overlaps(&GLOBALS.load(), write))
}

fn span(start: CuDevicePtr, bytes: u64) -> Option<Span> {
    (start != 0 && bytes != 0).then(|| Span { start, end: start.saturating_add(bytes) })
}

/// Whether `write` shares a byte with one of `spans` (sorted and disjoint).
fn overlaps(spans: &[Span], write: Span) -> bool {
    // The last span starting before the write ends is the only one that can reach it.
    let after = spans.partition_point(|span| span.start < write.end);
    after.checked_sub(1).and_then(|last| spans.get(last)).is_some_and(|span| span.end > write.start)
}

/// Whether `new` lies inside one of `spans`.
fn covered(spans: &[Span], new: Span) -> bool {
    let after = spans.partition_point(|span| span.start <= new.start);
    after.checked_sub(1).and_then(|last| spans.get(last)).is_some_and(|span| span.end >= new.end)
}

/// `spans` with `new` added, merged with those it overlaps or touches; past `most`
/// spans, the two nearest are merged.
fn with(spans: &[Span], new: Span, most: usize) -> Vec<Span> {
    let mut merged = new;
    let mut result = Vec::with_capacity(spans.len() + 1);
    for &span in spans {
        if span.end < merged.start || span.start > merged.end {
            result.push(span);
        } else {
            merged = Span { start: span.start.min(merged.start), end: span.end.max(merged.end) };
        }
    }
    let at = result.partition_point(|span| span.start < merged.start);
    result.insert(at, merged);
    while result.len() > most.max(1) {
        let nearest = (1..result.len()).min_by_key(|&i| result[i].start - result[i - 1].end).unwrap_or(1);
        result[nearest - 1].end = result[nearest].end;
        result.remove(nearest);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(start: u64, end: u64) -> Span {
        Span { start, end }
    }

    #[test]
    fn globals_merge_where_they_overlap_or_touch_and_stay_sorted() {
        let spans = with(&[], s(100, 108), 8);
        let spans = with(&spans, s(40, 48), 8);
        assert_eq!(spans, [s(40, 48), s(100, 108)]);
        assert_eq!(with(&spans, s(100, 108), 8), spans, "the same global again");
        assert_eq!(with(&spans, s(48, 100), 8), [s(40, 108)], "one filling the gap joins both");
        assert_eq!(with(&spans, s(104, 200), 8), [s(40, 48), s(100, 200)]);
    }

    #[test]
    fn past_the_most_spans_the_nearest_two_become_one() {
        let spans = [s(0, 8), s(100, 108), s(110, 118)];
        assert_eq!(with(&spans, s(300, 308), 3), [s(0, 8), s(100, 118), s(300, 308)]);
        assert_eq!(with(&spans, s(300, 308), 1), [s(0, 308)]);
    }

    #[test]
    fn a_write_counts_when_it_shares_a_byte_with_a_global() {
        let spans = [s(40, 48), s(100, 108)];
        assert!(overlaps(&spans, s(40, 41)));
        assert!(overlaps(&spans, s(44, 52)));
        assert!(overlaps(&spans, s(0, 41)), "from before it into it");
        assert!(overlaps(&spans, s(107, 300)));
        assert!(overlaps(&spans, s(0, 1000)), "over both");
        assert!(!overlaps(&spans, s(48, 100)), "between them");
        assert!(!overlaps(&spans, s(0, 40)));
        assert!(!overlaps(&spans, s(108, 200)));
        assert!(!overlaps(&[], s(0, 1000)));
        assert!(covered(&spans, s(100, 108)) && covered(&spans, s(42, 44)));
        assert!(!covered(&spans, s(100, 109)) && !covered(&spans, s(0, 8)));
        assert_eq!(span(0x1000, 0), None, "a write of no bytes");
    }
}
