// SPDX-License-Identifier: GPL-2.0
//! The page pool: building a buffer's chunks and the pre-zeroed 2 MiB page cache.
//!
//! Fresh pages are allocated zeroed (`__GFP_ZERO`); cached 2 MiB pages were zeroed by
//! the refill worker; pages coming back from a buffer go to the `dirty` list and are
//! zeroed by the worker before they can reach the `clean` list again. So no data ever
//! crosses from one buffer to another, and ALLOC does not zero in the caller's path
//! while the cache has pages.
//!
//! The one exception: dirty pages count against the pool cap like any cached page, so
//! right after a free at a full cap the only room is in pages the worker has not zeroed
//! yet. An ALLOC that fits the cap only by taking them ([`dirty_claim`]) takes them off
//! the `dirty` list and zeroes them itself, rather than failing until the worker is
//! done.
//!
//! Lock: the cache lock ([`Pool::cache`]) only, never while zeroing (see "Lock order"
//! in kmod/README.md).

use core::sync::atomic::Ordering;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::glue_ffi::{self as ffi, Chunk};
use crate::refusal::{Denied, Refusal};
use crate::reserve::Claim;
use crate::shared::{Limits, Shared};
use crate::{abi, util};

/// Flags of a buffer's chunk list: a huge, fully fragmented request could ask for a
/// list beyond what kvmalloc accepts, which is an ENOMEM for the caller, not a warning
/// in the log.
fn list_gfp() -> kernel::alloc::Flags {
    GFP_KERNEL | __GFP_NOWARN
}

/// Flags of list space allocated under the cache lock: never direct reclaim, which may
/// call the cache's shrinker, which takes the cache lock. A failure just frees the
/// page instead of caching it.
fn under_lock_gfp() -> kernel::alloc::Flags {
    GFP_NOWAIT | __GFP_NOWARN
}

/// How long the cache stays below its target after kernel reclaim took pages from it,
/// so that the refill worker does not take them straight back.
const SHRINK_BACKOFF_MS: u64 = 5000;

/// Order of a full-size chunk: 2 MiB with 4 KiB pages.
pub(crate) const CHUNK_ORDER: u32 = 9;
const _: () = assert!((PAGE_SIZE as u64) << CHUNK_ORDER == abi::GB_CHUNK_SIZE);

/// `NUMA_NO_NODE`.
pub(crate) const ANY_NODE: i32 = -1;

/// Bytes covered by a chunk of `order`.
pub(crate) const fn order_bytes(order: u32) -> u64 {
    (PAGE_SIZE as u64) << order
}

/// Where a buffer's pages should come from.
#[derive(Clone, Copy)]
pub(crate) struct Placement {
    /// NUMA node, or [`ANY_NODE`].
    pub(crate) nid: i32,
    /// Fail rather than use another node.
    pub(crate) strict: bool,
}

/// The cache lists.
///
/// # Invariants
///
/// Every chunk has order [`CHUNK_ORDER`] and is exclusively ours (see [`Chunk`]);
/// `clean` chunks are all zero. `Counters::t2_cached` is the size of both lists plus
/// the chunk the refill worker is zeroing, `Counters::t2_clean` the size of `clean`.
pub(crate) struct Cache {
    clean: KVec<Chunk>,
    dirty: KVec<Chunk>,
}

impl Cache {
    /// Empty lists.
    pub(crate) const fn new() -> Self {
        Cache { clean: KVec::new(), dirty: KVec::new() }
    }
}

/// The pool as one operation sees it: the lock-free figures and the cache lists.
#[derive(Clone, Copy)]
pub(crate) struct Pool<'a> {
    /// Counters, flags and limits.
    pub(crate) shared: &'a Shared,
    /// The cache lists, behind the cache lock.
    pub(crate) cache: &'a Mutex<Cache>,
}

/// Drops our reference to a chunk's pages (freeing those nobody else holds).
pub(crate) fn free_chunk(chunk: Chunk) {
    // SAFETY: by the `Chunk` invariant we own one reference to each page of this block
    // of `2^order` pages; they are given up here and the chunk is not used again.
    unsafe { ffi::gb_chunk_free(chunk.page, chunk.order) };
}

/// Whether nobody but us references any page of `chunk` (no mapping, pin or pipe).
pub(crate) fn chunk_exclusive(chunk: &Chunk) -> bool {
    // SAFETY: the chunk's block of `2^order` pages is ours (`Chunk` invariant); the glue
    // only reads their reference counts.
    unsafe { ffi::gb_chunk_exclusive(chunk.page, chunk.order) }
}

/// Allocates one zeroed chunk of `order`, or of a lower order if memory is too
/// fragmented (down to `min_order`); `account`: charged to the current task's memory
/// cgroup.
fn fresh_chunk(order: u32, min_order: u32, placement: Placement, account: bool) -> Option<Chunk> {
    let mut o = order;
    loop {
        // SAFETY: plain page allocation; the result is owned by the returned chunk.
        let page = unsafe { ffi::gb_chunk_alloc(placement.nid, o, true, placement.strict, o > 0, account) };
        if !page.is_null() {
            return Some(Chunk { page, order: o, pad: 0 });
        }
        if o <= min_order {
            return None;
        }
        o -= 1;
    }
}

/// How many bytes of dirty cache pages (freed, not yet zeroed) an ALLOC of `size` must
/// take for `used` plus `size` plus the rest of the cache to stay within `cap`; `None`
/// when even taking every cached page it can does not make room.
///
/// Cached pages count against the cap; the ones an allocation takes move from the cache
/// into its buffer. It takes clean pages first and dirty ones only as far as the cap
/// needs them, since those it has to zero itself.
pub(crate) fn dirty_claim(used: u64, size: u64, cached: u64, clean: u64, cap: u64) -> Option<u64> {
    let clean = clean.min(cached);
    let from_clean = clean.min(size);
    let dirty_usable = (cached - clean).min(size - from_clean);
    let total = used.checked_add(size)?.checked_add(cached - from_clean)?;
    let excess = total.saturating_sub(cap);
    (excess <= dirty_usable).then_some(excess)
}

impl Pool<'_> {
    /// Takes a 2 MiB chunk from the cache's `clean` list (or `dirty` list), on the wanted
    /// node if there is one. A dirty chunk is returned as it is: the caller must zero it.
    fn take_cached(self, placement: Placement, dirty: bool) -> Option<Chunk> {
        let mut cache = self.cache.lock();
        let list = if dirty { &mut cache.dirty } else { &mut cache.clean };
        let index = if placement.nid == ANY_NODE {
            list.len().checked_sub(1)?
        } else {
            list.iter().rposition(|c| {
                // SAFETY: the chunk's page is ours and valid (`Cache` invariant).
                let nid = unsafe { ffi::gb_page_nid(c.page) };
                nid == placement.nid
            })?
        };
        let chunk = util::vec_swap_remove(list, index)?;
        let bytes = order_bytes(chunk.order);
        if !dirty {
            self.shared.counters.t2_clean.fetch_sub(bytes, Ordering::Relaxed);
        }
        self.shared.counters.t2_cached.fetch_sub(bytes, Ordering::Relaxed);
        Some(chunk)
    }

    /// Builds the chunks of a `size`-byte buffer (a multiple of the page size): cached
    /// 2 MiB pages first, then up to `dirty_bytes` of dirty cached pages (zeroed here, see
    /// [`dirty_claim`]), then fresh ones within `claim` (see `reserve.rs`), falling back
    /// to lower orders when fragmented. The caller has already reserved `size` against
    /// the caps. On failure every chunk taken so far is given back; a caller killed
    /// meanwhile gets EINTR at the next chunk.
    pub(crate) fn alloc_chunks(
        self,
        size: u64,
        placement: Placement,
        dirty_bytes: u64,
        claim: &mut Claim<'_>,
    ) -> Result<KVVec<Chunk>, Denied> {
        let estimate = usize::try_from(size.div_ceil(abi::GB_CHUNK_SIZE)).map_err(|e| Denied::Failed(e.into()))?;
        let mut chunks = KVVec::with_capacity(estimate.saturating_add(8), list_gfp()).map_err(|_| Refusal::NoPages)?;
        match self.fill(&mut chunks, size, placement, dirty_bytes, claim) {
            Ok(()) => Ok(chunks),
            Err(e) => {
                self.recycle(&chunks, false);
                Err(e)
            }
        }
    }

    /// The chunk loop of [`Pool::alloc_chunks`]; on error, `chunks` holds what it got.
    fn fill(
        self,
        chunks: &mut KVVec<Chunk>,
        size: u64,
        placement: Placement,
        mut dirty_bytes: u64,
        claim: &mut Claim<'_>,
    ) -> Result<(), Denied> {
        // Fresh pages are charged to the caller's memory cgroup. Cached pages were not
        // (the worker allocated them), so a caller outside the root cgroup, whose
        // pages must all be charged to it, gives each cached page it takes back to the
        // kernel and gets a charged fresh one instead: the cap and the reserve see the
        // same totals as if it had used the cache.
        // SAFETY: `gb_current_memcg_charged` only reads the current task's cgroup.
        let charged = unsafe { ffi::gb_current_memcg_charged() };
        let cap = self.shared.limits().cap;
        let mut remaining = size;
        // Once 2 MiB blocks run out, lower orders are used for the rest of this buffer
        // rather than failing again at every chunk.
        let mut max_order = CHUNK_ORDER;
        while remaining > 0 {
            // A killed caller's exit waits for this loop: stop here, not after the
            // whole buffer.
            // SAFETY: `gb_fatal_signal_pending` only reads the current task's signals.
            if unsafe { ffi::gb_fatal_signal_pending() } {
                return Err(Denied::Failed(EINTR));
            }
            // SAFETY: `gb_cond_resched` may sleep; no lock or atomic section is held here.
            unsafe { ffi::gb_cond_resched() };
            let mut order = max_order;
            while order > 0 && order_bytes(order) > remaining {
                order -= 1;
            }
            let cached = if order != CHUNK_ORDER {
                None
            } else if let Some(chunk) = self.take_cached(placement, false) {
                Some(chunk)
            } else if dirty_bytes > 0 {
                let chunk = self.take_cached(placement, true);
                if let Some(c) = &chunk {
                    dirty_bytes = dirty_bytes.saturating_sub(order_bytes(c.order));
                    if !charged {
                        // SAFETY: the chunk is ours and unreferenced elsewhere (it passed
                        // the exclusivity check in `recycle`), and it left the cache, so
                        // nobody else touches it. Zeroed outside the cache lock.
                        unsafe { ffi::gb_chunk_zero(c.page, c.order) };
                    }
                }
                chunk
            } else {
                None
            };
            let cached = match cached {
                Some(c) if charged => {
                    free_chunk(c);
                    None
                }
                other => other,
            };
            let chunk = match cached {
                Some(chunk) => chunk,
                None => {
                    self.trim_to_cap(cap);
                    claim.before_fresh(order_bytes(order))?;
                    let chunk = fresh_chunk(order, 0, placement, true).ok_or(Refusal::NoPages)?;
                    claim.taken(order_bytes(chunk.order));
                    chunk
                }
            };
            max_order = max_order.min(chunk.order);
            if chunks.push(chunk, list_gfp()).is_err() {
                free_chunk(chunk);
                return Err(Refusal::NoPages.into());
            }
            self.shared.counters.chunks_allocated.fetch_add(1, Ordering::Relaxed);
            remaining = remaining.saturating_sub(order_bytes(chunk.order));
        }
        Ok(())
    }

    /// Gives a buffer's chunks back: full-size ones that nobody else references go to the
    /// cache while it has room (to the dirty list if userspace may have written them),
    /// the rest to the kernel. A chunk still referenced elsewhere (a long-term pin that
    /// outlived the buffer) is never reused: a dying buffer hands those to `held.rs`
    /// first; any left here (no room to hold them) lose our reference only.
    pub(crate) fn recycle(self, chunks: &[Chunk], exposed: bool) {
        if chunks.is_empty() {
            return;
        }
        let limits = self.shared.limits();
        let mut queued_dirty = false;
        let mut cache = self.cache.lock();
        for &chunk in chunks {
            // A huge buffer has thousands of chunks; the cache lock is a mutex.
            // SAFETY: `gb_cond_resched` may sleep; only a mutex is held here.
            unsafe { ffi::gb_cond_resched() };
            // The chunk is not mapped any more: another reference is someone else's.
            if !chunk_exclusive(&chunk) {
                self.shared.counters.pinned_on_release.fetch_add(1, Ordering::Relaxed);
                free_chunk(chunk);
                continue;
            }
            let bytes = order_bytes(chunk.order);
            // A page charged to a cgroup goes back to the kernel, which uncharges it: in
            // the cache it would stay charged to that cgroup while serving another.
            // SAFETY: the chunk is ours (`Chunk` invariant).
            let charged = unsafe { ffi::gb_chunk_charged(chunk.page) };
            let keep = chunk.order == CHUNK_ORDER
                && !charged
                && !self.shared.pressure.load(Ordering::Relaxed)
                && !self.shared.stopping.load(Ordering::Relaxed)
                && self.shared.counters.t2_cached.load(Ordering::Relaxed) + bytes <= self.cache_room(&limits);
            let list = if exposed { &mut cache.dirty } else { &mut cache.clean };
            if keep && list.push(chunk, under_lock_gfp()).is_ok() {
                self.shared.counters.t2_cached.fetch_add(bytes, Ordering::Relaxed);
                if exposed {
                    queued_dirty = true;
                } else {
                    self.shared.counters.t2_clean.fetch_add(bytes, Ordering::Relaxed);
                }
            } else {
                free_chunk(chunk);
            }
        }
        drop(cache);
        if queued_dirty {
            self.kick_refill();
        }
    }

    /// Queues the refill worker unless the module is unloading.
    pub(crate) fn kick_refill(self) {
        if !self.shared.stopping.load(Ordering::Acquire) {
            // SAFETY: queues the glue's work item, cancelled in `drop` after `stopping`.
            unsafe { ffi::gb_refill_kick() };
        }
    }

    /// How big the cache may be now: its target, within what the cap leaves beside the
    /// buffers, nothing under pressure.
    fn cache_room(self, limits: &Limits) -> u64 {
        if self.shared.pressure.load(Ordering::Relaxed) {
            return 0;
        }
        let used = self.shared.counters.t2.used.load(Ordering::Relaxed);
        limits.cache_target.min(limits.cap.saturating_sub(used))
    }

    /// Whether the cache should grow by one chunk now.
    fn may_grow(self, limits: &Limits) -> bool {
        let shrunk_at = self.shared.counters.shrunk_at_ms.load(Ordering::Relaxed);
        // SAFETY: `gb_now_ms` only reads the jiffies counter.
        if shrunk_at != 0 && unsafe { ffi::gb_now_ms() }.saturating_sub(shrunk_at) < SHRINK_BACKOFF_MS {
            return false;
        }
        let cached = self.shared.counters.t2_cached.load(Ordering::Relaxed);
        // SAFETY: plain read of a kernel counter.
        let available = unsafe { ffi::gb_mem_available() };
        !self.shared.stopping.load(Ordering::Relaxed)
            && cached + abi::GB_CHUNK_SIZE <= self.cache_room(limits)
            && available >= limits.reserve.saturating_add(2 * abi::GB_CHUNK_SIZE)
    }

    /// The refill worker: zeroes returned pages, grows the cache to its target, trims it
    /// when the target shrank or memory is under pressure.
    pub(crate) fn refill(self) {
        // Zero returned pages outside the lock, one at a time.
        loop {
            let Some(chunk) = util::vec_pop(&mut self.cache.lock().dirty) else {
                break;
            };
            // SAFETY: the chunk is ours and unreferenced elsewhere (it passed the
            // exclusivity check in `recycle`).
            unsafe { ffi::gb_chunk_zero(chunk.page, chunk.order) };
            let bytes = order_bytes(chunk.order);
            let mut cache = self.cache.lock();
            if !self.shared.pressure.load(Ordering::Relaxed) && cache.clean.push(chunk, under_lock_gfp()).is_ok() {
                self.shared.counters.t2_clean.fetch_add(bytes, Ordering::Relaxed);
            } else {
                self.shared.counters.t2_cached.fetch_sub(bytes, Ordering::Relaxed);
                drop(cache);
                free_chunk(chunk);
            }
        }
        let limits = self.shared.limits();
        while self.may_grow(&limits) {
            // SAFETY: `gb_cond_resched` may sleep; no lock is held here.
            unsafe { ffi::gb_cond_resched() };
            let placement = Placement { nid: ANY_NODE, strict: false };
            // The worker's pages belong to nobody's cgroup (see "Limits" in the README).
            let Some(chunk) = fresh_chunk(CHUNK_ORDER, CHUNK_ORDER, placement, false) else {
                break;
            };
            let bytes = order_bytes(chunk.order);
            let mut cache = self.cache.lock();
            if cache.clean.push(chunk, under_lock_gfp()).is_err() {
                drop(cache);
                free_chunk(chunk);
                break;
            }
            self.shared.counters.t2_cached.fetch_add(bytes, Ordering::Relaxed);
            self.shared.counters.t2_clean.fetch_add(bytes, Ordering::Relaxed);
        }
        // Trim to the room left (the parameters may have been lowered).
        while self.shared.counters.t2_cached.load(Ordering::Relaxed) > self.cache_room(&limits) {
            if !self.trim_one() {
                break;
            }
        }
    }

    /// Frees cached chunks while the buffers (admitted ALLOCs included) and the cache
    /// together exceed `cap`. Admission ([`dirty_claim`]) counts on an ALLOC taking
    /// cached pages; where it takes a fresh chunk instead (the cached pages are on
    /// another node than a placed ALLOC wants, or this part of the buffer is below
    /// 2 MiB), and where a T3 buffer's pages are pinned (they never come from the
    /// cache), the cache makes the room first, so that the pool never holds more pages
    /// than its cap (give or take the chunk being added).
    pub(crate) fn trim_to_cap(self, cap: u64) {
        let c = &self.shared.counters;
        while c.t2.used.load(Ordering::Relaxed).saturating_add(c.t2_cached.load(Ordering::Relaxed)) > cap
            && self.trim_one()
        {}
    }

    /// Frees one cached chunk (clean first). Returns false when the cache is empty.
    fn trim_one(self) -> bool {
        let mut cache = self.cache.lock();
        let (chunk, clean) = match util::vec_pop(&mut cache.clean) {
            Some(c) => (c, true),
            None => match util::vec_pop(&mut cache.dirty) {
                Some(c) => (c, false),
                None => return false,
            },
        };
        let bytes = order_bytes(chunk.order);
        self.shared.counters.t2_cached.fetch_sub(bytes, Ordering::Relaxed);
        if clean {
            self.shared.counters.t2_clean.fetch_sub(bytes, Ordering::Relaxed);
        }
        drop(cache);
        free_chunk(chunk);
        true
    }

    /// The shrinker's count: pages of the cache that kernel reclaim may take back.
    pub(crate) fn shrink_count(self) -> u64 {
        if self.shared.stopping.load(Ordering::Relaxed) {
            return 0;
        }
        self.shared.counters.t2_cached.load(Ordering::Relaxed) / PAGE_SIZE as u64
    }

    /// The shrinker's scan: frees cached chunks covering at least `pages` pages (or the
    /// whole cache) and keeps the worker from refilling for [`SHRINK_BACKOFF_MS`].
    /// Returns the pages freed.
    pub(crate) fn shrink(self, pages: u64) -> u64 {
        // SAFETY: `gb_now_ms` only reads the jiffies counter.
        self.shared.counters.shrunk_at_ms.store(unsafe { ffi::gb_now_ms() }.max(1), Ordering::Relaxed);
        let mut freed = 0;
        while freed < pages && self.trim_one() {
            freed += 1 << CHUNK_ORDER;
        }
        freed
    }

    /// Gives every cached page back to the kernel (pressure, unload).
    pub(crate) fn drain(self) {
        while self.trim_one() {
            // SAFETY: `gb_cond_resched` may sleep; no lock is held here.
            unsafe { ffi::gb_cond_resched() };
        }
    }
}
