// SPDX-License-Identifier: GPL-2.0
//! A T2 buffer and its DMA-BUF exporter callbacks.
//!
//! The dma-buf owns the [`Buffer`] (its `priv`) from a successful export until the
//! dma-buf's release callback, which runs when the last reference goes (every fd
//! closed, every mapping gone, every importer detached): it returns the pages to the
//! pool. Each dma-buf also holds a reference on this module.
//!
//! The C entry points of the callbacks are in `entry.rs`; this file holds what they do.
//! No lock of ours is taken here except through `Pool::recycle` and
//! `Registry::release` in `drop` (see "Lock order" in kmod/README.md).

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::ffi::{c_uint, c_ulong, c_void};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::glue_ffi::{self as ffi, Chunk};
use crate::memlock::Memlock;
use crate::pool::order_bytes;
use crate::procs::{Holder, ProcEntry};
use crate::state::{state, State};
use crate::util;

/// A pinned system-RAM buffer.
///
/// # Invariants
///
/// `chunks` own their pages (see [`Chunk`]) and cover exactly `size` bytes, a multiple
/// of the page size; `orders_descend` says whether their orders never increase along
/// the list (what `Pool::alloc_chunks` builds); `size` has been added to `Counters::t2_used`, to `owner.t2_used`
/// and one to both buffer counts, and is charged in `memlock`; `owner` holds its entry
/// as a [`Holder::Buffer`].
/// Once exported, the dma-buf's `priv` points to it (see [`export`]).
pub(crate) struct Buffer {
    /// Unique id, shown to userspace instead of any address.
    pub(crate) id: u64,
    /// Size in bytes.
    pub(crate) size: u64,
    chunks: KVVec<Chunk>,
    /// The chunks come in runs of one order, highest first (checked once, here rather
    /// than trusted): [`Buffer::page`] then skips a run at a time.
    orders_descend: bool,
    owner: Option<Arc<ProcEntry>>,
    memlock: Option<Memlock>,
}

impl Buffer {
    /// Wraps freshly allocated chunks whose `size` bytes are already accounted.
    pub(crate) fn new(state: &State, size: u64, chunks: KVVec<Chunk>, owner: Arc<ProcEntry>, memlock: Memlock) -> Self {
        let c = &state.shared.counters;
        c.buffers.fetch_add(1, Ordering::Relaxed);
        owner.buffers.fetch_add(1, Ordering::Relaxed);
        let orders_descend = chunks.as_slice().windows(2).all(|pair| pair[0].order >= pair[1].order);
        Buffer {
            id: state.next_buffer_id.fetch_add(1, Ordering::Relaxed),
            size,
            orders_descend,
            chunks,
            owner: Some(owner),
            memlock: Some(memlock),
        }
    }

    fn pages(&self) -> c_ulong {
        // `size` fits a `size_t` (checked at export), so the page count fits too.
        (self.size / PAGE_SIZE as u64) as c_ulong
    }

    /// Maps the buffer into `vma` with real pages; `vm_pgoff` selects the first page.
    ///
    /// # Safety
    ///
    /// `vma` is the VMA that an mmap of this buffer's dma-buf is setting up (the
    /// dma-buf core's `mmap` callback), with its mmap lock held for writing.
    pub(crate) unsafe fn mmap(&self, vma: *mut bindings::vm_area_struct) -> Result {
        let (mut start, mut npages, mut pgoff, mut shared): (c_ulong, c_ulong, c_ulong, bool) = (0, 0, 0, false);
        // SAFETY: `vma` is valid (the function's contract); the four outputs are locals
        // that the glue only writes.
        unsafe { ffi::gb_vma_info(vma, &mut start, &mut npages, &mut pgoff, &mut shared) };
        // A private mapping would copy on write and never reach the buffer.
        if !shared {
            return Err(EINVAL);
        }
        let end = pgoff.checked_add(npages).ok_or(EINVAL)?;
        if npages == 0 || end > self.pages() {
            return Err(EINVAL);
        }
        // SAFETY: `vma` is valid and its mmap lock is held for writing (the function's
        // contract), as `vm_flags_set` requires.
        unsafe { ffi::gb_vma_prepare(vma) };
        let mut skip = pgoff;
        let mut left = npages;
        let mut addr = start;
        for chunk in self.chunks.iter() {
            if left == 0 {
                break;
            }
            let chunk_pages: c_ulong = 1 << chunk.order;
            if skip >= chunk_pages {
                skip -= chunk_pages;
                continue;
            }
            let count = (chunk_pages - skip).min(left);
            // SAFETY: `[skip, skip + count)` lies inside the chunk's block of pages, which
            // stays allocated while the mapping exists (it holds a reference to the
            // dma-buf file); `[addr, addr + count pages)` lies inside the vma.
            let ret = unsafe { ffi::gb_vma_insert(vma, addr, chunk.page, skip, count) };
            if ret != 0 {
                return Err(Error::from_errno(ret));
            }
            addr += count * PAGE_SIZE as c_ulong;
            left -= count;
            skip = 0;
        }
        Ok(())
    }

    /// The page at `index` (in pages from the start), or null past the end; for the
    /// fault handler, which maps a zapped page back (e.g. after `MADV_DONTNEED`).
    ///
    /// A fault costs one step per run of chunks of one order (at most one per order)
    /// plus a binary search, not one per chunk: a fully fragmented 1 GiB buffer has
    /// 262144 chunks, and re-faulting it page by page would otherwise walk them all for
    /// every page.
    pub(crate) fn page(&self, index: c_ulong) -> *mut bindings::page {
        let chunks = self.chunks.as_slice();
        let mut first = 0;
        let mut skip = index;
        while let Some(head) = chunks.get(first) {
            let rest = chunks.get(first..).unwrap_or_default();
            // With descending orders the chunks of this order end where a lower order
            // starts; otherwise each chunk is its own run.
            let run = if self.orders_descend { rest.partition_point(|c| c.order == head.order) } else { 1 };
            let chunk_pages: c_ulong = 1 << head.order;
            let run_pages = run as c_ulong * chunk_pages;
            if skip < run_pages {
                let Some(chunk) = rest.get((skip / chunk_pages) as usize) else { break };
                // SAFETY: `skip % chunk_pages` lies inside this chunk's block of
                // `2^order` pages (every chunk of the run has `head`'s order), which the
                // buffer owns (type invariant), so the `struct page` it names exists.
                return unsafe { ffi::gb_nth_page(chunk.page, skip % chunk_pages) };
            }
            skip -= run_pages;
            first += run;
        }
        core::ptr::null_mut()
    }

    /// The sg table of a new attachment for `dev`, stored in `*out` (not DMA-mapped:
    /// `map_dma_buf` maps it). Each chunk is split into segments no longer than the
    /// device accepts in one piece (`dma_get_max_seg_size`, and `dma_max_mapping_size`,
    /// which swiotlb bouncing limits to 256 KiB), rounded down to whole pages.
    ///
    /// # Safety
    ///
    /// `dev` and `out` are what the dma-buf core passes to `attach` for an attachment
    /// to this buffer's dma-buf: the importer's device and a writable slot.
    pub(crate) unsafe fn attach(&self, dev: *mut bindings::device, out: *mut *mut bindings::sg_table) -> Result {
        let n = c_uint::try_from(self.chunks.len())?;
        // SAFETY: `dev` is the importer's live device (the function's contract); the
        // glue only reads its DMA parameters.
        let limit = unsafe { ffi::gb_dma_seg_limit(dev) };
        let page = PAGE_SIZE as u64;
        let seg_max = (limit / page * page).max(page);
        // SAFETY: `chunks` is a valid array of `n` chunks that own their pages for as
        // long as the buffer lives (the attachment holds a dma-buf reference); `out` is
        // writable (the function's contract); `seg_max` is a non-zero page multiple.
        let ret = unsafe { ffi::gb_sgt_build(self.chunks.as_ptr(), n, seg_max, out) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// A kernel mapping of the whole buffer (`vmap`), of any size: the dma-buf core
    /// WARNs on every vmap an exporter refuses, so there is no size limit here (the
    /// page-pointer array is kvmalloc'ed, 2 MiB per GiB, and freed once mapped).
    /// ENOMEM when the kernel cannot map it.
    pub(crate) fn vmap(&self) -> Result<*mut c_void> {
        let n = c_uint::try_from(self.chunks.len())?;
        let pages = self.pages();
        // SAFETY: `chunks` is a valid array of `n` chunks covering `pages` pages (type
        // invariant: they cover exactly `size` bytes); the glue only reads it.
        let vaddr = unsafe { ffi::gb_vmap_chunks(self.chunks.as_ptr(), n, pages) };
        if vaddr.is_null() {
            return Err(ENOMEM);
        }
        Ok(vaddr)
    }

    /// Moves the chunks that are still referenced elsewhere (see `held.rs`) out of the
    /// dying buffer; returns them and their bytes.
    fn take_referenced(&mut self) -> (KVVec<Chunk>, u64) {
        let mut held = KVVec::new();
        let mut bytes = 0;
        let mut i = 0;
        while let Some(&chunk) = self.chunks.as_slice().get(i) {
            // SAFETY: the chunk is ours (type invariant); the buffer is dying, so no
            // mapping or attachment of ours refers to it any more.
            let exclusive = unsafe { ffi::gb_chunk_exclusive(chunk.page) };
            // A chunk that does not fit the list stays; `recycle` drops our reference.
            if !exclusive && held.push(chunk, GFP_KERNEL).is_ok() {
                let _ = util::vec_swap_remove(&mut self.chunks, i);
                bytes += order_bytes(chunk.order);
            } else {
                i += 1;
            }
        }
        (held, bytes)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let state = state();
        let c = &state.shared.counters;
        let (held, held_bytes) = self.take_referenced();
        let freed = self.size - held_bytes;
        // Unaccount first, so that the cache may take the pages within the cap.
        c.t2_used.fetch_sub(freed, Ordering::Relaxed);
        state.pool().recycle(&self.chunks, true);
        c.buffers.fetch_sub(1, Ordering::Relaxed);
        let (Some(owner), Some(mut memlock)) = (self.owner.take(), self.memlock.take()) else {
            return;
        };
        owner.t2_used.fetch_sub(freed, Ordering::Relaxed);
        owner.buffers.fetch_sub(1, Ordering::Relaxed);
        memlock.uncharge(freed);
        if held.is_empty() {
            state.procs.release(owner, Holder::Buffer);
            return;
        }
        // The held chunks stay charged to the pool, the owner and its user's memlock
        // until released.
        if let Err((held, owner, _memlock)) = state.held.add(&state.shared, held, owner, memlock) {
            // No room to remember them: drop our references and the charge.
            c.t2_used.fetch_sub(held_bytes, Ordering::Relaxed);
            owner.t2_used.fetch_sub(held_bytes, Ordering::Relaxed);
            state.pool().recycle(&held, true);
            state.procs.release(owner, Holder::Buffer);
        }
    }
}

/// Exports `buf` as a dma-buf; on failure `buf` is dropped (pages back to the pool).
pub(crate) fn export(buf: KBox<Buffer>) -> Result<*mut ffi::DmaBuf> {
    let size = usize::try_from(buf.size)?;
    let raw = KBox::into_raw(buf);
    let mut dmabuf = core::ptr::null_mut();
    // SAFETY: `raw` is a valid `Buffer` and `dmabuf` a local the glue writes only on
    // success. On success the dma-buf owns `raw` as its `priv` until its release
    // callback (`gb_rs_buffer_release` in entry.rs turns it back into the `KBox`); on
    // failure ownership stays with us.
    let ret = unsafe { ffi::gb_dmabuf_export(raw.cast(), size, &mut dmabuf) };
    if ret != 0 {
        // SAFETY: the export failed, so `raw` (from `KBox::into_raw`) is still ours.
        drop(unsafe { KBox::from_raw(raw) });
        return Err(Error::from_errno(ret));
    }
    Ok(dmabuf)
}
