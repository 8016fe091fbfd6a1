//! Freed T2 buffers kept mapped and registered with CUDA, so that a later T2 allocation
//! of the same (chunk-rounded) length in the same context skips what makes a cold T2
//! allocation slow: mapping, populating (the kernel zeroing every page) and
//! cuMemHostRegister (pinning). Bounded by GREENBOOST_T2_CACHE (default 1 GiB, 0: off).
//!
//! Cached bytes are pinned RAM the program no longer uses. They are not T2 in use (the
//! statistics and the capacity reports leave them out), but they do count against the
//! T2 cap, and `tiers::take_t2_capacity` empties the cache before it would refuse an
//! allocation: the cache never turns into an out-of-memory error.
//!
//! Only buffers whose device work is over enter the cache (a stream-ordered free enters
//! it once its event has completed), so a cached buffer is never in use.
//!
//! Lock: `CACHE` is taken after `tiers`' `REGISTRY` and `VMM` and is never held while
//! another lock is taken, nor across a CUDA or backend call.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::config;
use crate::lock::{const_mutex, Mutex};
use crate::tiers::HostAllocation;

/// GREENBOOST_T2_CACHE when unset: enough for a few large buffers to be freed and
/// allocated again at no cost, small next to the T2 a model needs.
const DEFAULT_LIMIT: u64 = 1 << 30;

/// The most bytes the cache holds (GREENBOOST_T2_CACHE, read once).
pub fn limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let Some(value) = config::getenv("GREENBOOST_T2_CACHE").filter(|v| !v.trim_ascii().is_empty()) else {
            return DEFAULT_LIMIT;
        };
        config::parse_size(value).unwrap_or_else(|| {
            warn!(
                "GREENBOOST_T2_CACHE=\"{}\" is not valid; using 1G (sizes look like 1G, 512M or bytes; 0 turns the cache off)",
                String::from_utf8_lossy(value)
            );
            DEFAULT_LIMIT
        })
    })
}

struct Entry<T> {
    len: u64,
    context: usize,
    item: T,
}

/// The bookkeeping, apart from what is cached (unit-tested with plain values).
struct BoundedCache<T> {
    /// Oldest first.
    entries: VecDeque<Entry<T>>,
    bytes: u64,
}

impl<T> BoundedCache<T> {
    const fn new() -> Self {
        BoundedCache { entries: VecDeque::new(), bytes: 0 }
    }

    /// Keeps `item` (`len` bytes, registered in `context`) within `limit` bytes and
    /// returns what must be released now: `item` itself when it alone passes the limit,
    /// else the oldest entries that make room for it.
    fn keep(&mut self, len: u64, context: usize, item: T, limit: u64) -> Vec<T> {
        if len > limit {
            return vec![item];
        }
        let mut evicted = Vec::new();
        while self.bytes + len > limit {
            let Some(oldest) = self.entries.pop_front() else { break };
            self.bytes -= oldest.len;
            evicted.push(oldest.item);
        }
        self.entries.push_back(Entry { len, context, item });
        self.bytes += len;
        evicted
    }

    /// The most recently kept entry of exactly `len` bytes registered in `context`.
    fn take(&mut self, len: u64, context: usize) -> Option<T> {
        let index = self.entries.iter().rposition(|entry| entry.len == len && entry.context == context)?;
        let entry = self.entries.remove(index)?;
        self.bytes -= entry.len;
        Some(entry.item)
    }

    fn drain(&mut self) -> Vec<T> {
        self.bytes = 0;
        self.entries.drain(..).map(|entry| entry.item).collect()
    }
}

static CACHE: Mutex<BoundedCache<HostAllocation>> = const_mutex(BoundedCache::new());

/// The cache's bytes, readable without its lock (T2 capacity checks).
static CACHED_BYTES: AtomicU64 = AtomicU64::new(0);

pub fn cached_bytes() -> u64 {
    CACHED_BYTES.load(Ordering::Acquire)
}

/// Caches a freed T2 allocation of `len` bytes registered in `context`; returns the
/// allocations the caller must unregister and release now (this one when the cache is
/// off or too small for it, else those evicted for it).
pub fn keep(len: u64, context: usize, allocation: HostAllocation) -> Vec<HostAllocation> {
    let mut cache = CACHE.lock();
    let evicted = cache.keep(len, context, allocation, limit());
    CACHED_BYTES.store(cache.bytes, Ordering::Release);
    evicted
}

/// A cached allocation of exactly `len` bytes registered in `context`, taken out of the
/// cache.
pub fn take(len: u64, context: usize) -> Option<HostAllocation> {
    if cached_bytes() == 0 {
        return None;
    }
    let mut cache = CACHE.lock();
    let taken = cache.take(len, context);
    CACHED_BYTES.store(cache.bytes, Ordering::Release);
    taken
}

/// Empties the cache; the caller unregisters and releases what it returns.
pub fn drain() -> Vec<HostAllocation> {
    if cached_bytes() == 0 {
        return Vec::new();
    }
    let mut cache = CACHE.lock();
    let drained = cache.drain();
    CACHED_BYTES.store(0, Ordering::Release);
    drained
}

/// pthread_atfork prepare (after `tiers`' locks): the child must not inherit the lock
/// mid-update.
pub fn before_fork() {
    std::mem::forget(CACHE.lock());
}

/// pthread_atfork parent: releases what `before_fork` took.
pub fn after_fork_in_parent() {
    // SAFETY: `before_fork` locked the mutex on this thread and forgot the guard.
    unsafe { CACHE.force_unlock() };
}

/// pthread_atfork child: the lock is reset and the cache forgotten. Its buffers are
/// registered in the parent's contexts, which the child cannot use; the mappings stay
/// as the child inherited them, like the live records (`tiers::after_fork_in_child`).
pub fn after_fork_in_child() {
    // SAFETY: this thread holds the lock (taken in `before_fork`) and is the only thread
    // of the child.
    unsafe { CACHE.raw().reset_in_child() };
    let mut cache = CACHE.lock();
    // Forgotten, not released: releasing means cuMemHostUnregister, which a child
    // cannot call.
    std::mem::forget(cache.drain());
    CACHED_BYTES.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_within_the_limit_evicting_the_oldest() {
        let mut cache = BoundedCache::new();
        assert!(cache.keep(4, 1, "a", 10).is_empty());
        assert!(cache.keep(4, 1, "b", 10).is_empty());
        assert_eq!(cache.bytes, 8);
        // 4 more bytes pass 10: the oldest goes.
        assert_eq!(cache.keep(4, 1, "c", 10), vec!["a"]);
        assert_eq!(cache.bytes, 8);
        // Larger than the limit itself: not kept, nothing evicted.
        assert_eq!(cache.keep(11, 1, "huge", 10), vec!["huge"]);
        assert_eq!(cache.bytes, 8);
        // A limit of 0 keeps nothing.
        let mut off = BoundedCache::new();
        assert_eq!(off.keep(2, 1, "x", 0), vec!["x"]);
        assert_eq!(off.bytes, 0);
    }

    #[test]
    fn takes_only_an_exact_length_in_the_same_context_newest_first() {
        let mut cache = BoundedCache::new();
        cache.keep(4, 1, "old", 100);
        cache.keep(8, 1, "eight", 100);
        cache.keep(4, 2, "other context", 100);
        cache.keep(4, 1, "new", 100);
        assert_eq!(cache.take(6, 1), None, "no splitting or best fit: exact lengths only");
        assert_eq!(cache.take(8, 2), None, "a buffer registered in another context");
        assert_eq!(cache.take(4, 1), Some("new"));
        assert_eq!(cache.take(4, 1), Some("old"));
        assert_eq!(cache.take(4, 1), None);
        assert_eq!(cache.bytes, 12);
        let mut left = cache.drain();
        left.sort();
        assert_eq!(left, vec!["eight", "other context"]);
        assert_eq!(cache.bytes, 0);
        assert_eq!(cache.take(8, 1), None);
    }
}
