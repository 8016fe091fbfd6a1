//! A bounded cache of freed T2 buffers, still mapped and registered with CUDA, so that a
//! later T2 allocation of the same (chunk-rounded) length in the same context skips what
//! makes a cold T2 allocation slow: mapping, populating (the kernel zeroing every page)
//! and cuMemHostRegister (pinning). Bounded by GREENBOOST_T2_CACHE (default 1 GiB, 0:
//! off). `t2` holds the one cache of the process and decides what enters it.
//!
//! Cached bytes are pinned RAM the program no longer uses: not T2 in use (the
//! statistics and the capacity reports leave them out), but they do count against the
//! T2 cap, and the allocation path empties the cache before it would refuse an
//! allocation: the cache never turns into an out-of-memory error.
//!
//! Lock: the cache's own, taken after the registry's and the VMM records' (see the lock
//! order in lib.rs), never held while another lock is taken nor across a CUDA call.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cuda::ffi::Context;
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;

struct Entry<T> {
    len: u64,
    context: Context,
    item: T,
}

/// The bookkeeping, apart from the lock (unit-tested with plain values).
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
    fn keep(&mut self, len: u64, context: Context, item: T, limit: u64) -> Vec<T> {
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
    fn take(&mut self, len: u64, context: Context) -> Option<T> {
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

/// The cache with its lock and a lock-free count of its bytes.
pub struct T2Cache<T> {
    cache: Mutex<rank::T2Cache, BoundedCache<T>>,
    /// The cache's bytes, readable without its lock (T2 capacity checks).
    bytes: AtomicU64,
}

impl<T> T2Cache<T> {
    pub const fn new() -> Self {
        T2Cache { cache: const_mutex(BoundedCache::new()), bytes: AtomicU64::new(0) }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Caches `item` of `len` bytes registered in `context` within `limit`; returns what
    /// the caller must unregister and release now (this one when the cache is off or too
    /// small for it, else those evicted for it).
    pub fn keep(&self, len: u64, context: Context, item: T, limit: u64) -> Vec<T> {
        let mut cache = self.cache.lock();
        let evicted = cache.keep(len, context, item, limit);
        self.bytes.store(cache.bytes, Ordering::Release);
        evicted
    }

    /// A cached item of exactly `len` bytes registered in `context`, taken out.
    pub fn take(&self, len: u64, context: Context) -> Option<T> {
        if self.bytes() == 0 {
            return None;
        }
        let mut cache = self.cache.lock();
        let taken = cache.take(len, context);
        self.bytes.store(cache.bytes, Ordering::Release);
        taken
    }

    /// Empties the cache; the caller unregisters and releases what it returns.
    pub(super) fn drain(&self) -> Vec<T> {
        if self.bytes() == 0 {
            return Vec::new();
        }
        let mut cache = self.cache.lock();
        let drained = cache.drain();
        self.bytes.store(0, Ordering::Release);
        drained
    }

    /// The cache's lock, for the fork handlers.
    pub fn fork_lock(&self) -> &dyn ForkLock
    where
        T: Send,
    {
        &self.cache
    }

    /// In the child of a fork (its lock already reset): the cache is forgotten. Its
    /// buffers are registered in the parent's contexts, which the child cannot use;
    /// releasing them would mean cuMemHostUnregister, which a child cannot call, so they
    /// stay mapped as the child inherited them (like the live records).
    pub fn forget_in_child(&self) {
        std::mem::forget(self.cache.lock().drain());
        self.bytes.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(id: usize) -> Context {
        Context(id as *mut std::ffi::c_void)
    }

    #[test]
    fn keeps_within_the_limit_evicting_the_oldest() {
        let mut cache = BoundedCache::new();
        assert!(cache.keep(4, context(1), "a", 10).is_empty());
        assert!(cache.keep(4, context(1), "b", 10).is_empty());
        assert_eq!(cache.bytes, 8);
        // 4 more bytes pass 10: the oldest goes.
        assert_eq!(cache.keep(4, context(1), "c", 10), vec!["a"]);
        assert_eq!(cache.bytes, 8);
        // Larger than the limit itself: not kept, nothing evicted.
        assert_eq!(cache.keep(11, context(1), "huge", 10), vec!["huge"]);
        assert_eq!(cache.bytes, 8);
        // A limit of 0 keeps nothing.
        let mut off = BoundedCache::new();
        assert_eq!(off.keep(2, context(1), "x", 0), vec!["x"]);
        assert_eq!(off.bytes, 0);
    }

    #[test]
    fn takes_only_an_exact_length_in_the_same_context_newest_first() {
        let mut cache = BoundedCache::new();
        cache.keep(4, context(1), "old", 100);
        cache.keep(8, context(1), "eight", 100);
        cache.keep(4, context(2), "other context", 100);
        cache.keep(4, context(1), "new", 100);
        assert_eq!(cache.take(6, context(1)), None, "no splitting or best fit: exact lengths only");
        assert_eq!(cache.take(8, context(2)), None, "a buffer registered in another context");
        assert_eq!(cache.take(4, context(1)), Some("new"));
        assert_eq!(cache.take(4, context(1)), Some("old"));
        assert_eq!(cache.take(4, context(1)), None);
        assert_eq!(cache.bytes, 12);
        let mut left = cache.drain();
        left.sort();
        assert_eq!(left, vec!["eight", "other context"]);
        assert_eq!(cache.bytes, 0);
        assert_eq!(cache.take(8, context(1)), None);
    }
}
