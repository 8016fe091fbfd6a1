// SPDX-License-Identifier: GPL-2.0
//! A T2 buffer's pages: its list of chunks (pinned blocks of pages) and what is built
//! from it (the page of a fault, an importer's sg table, a kernel mapping).
//!
//! Takes no lock of ours; the buffer's backing lock is held by every caller.

use kernel::bindings;
use kernel::ffi::{c_uint, c_ulong, c_void};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

use crate::glue_ffi::{self as ffi, Chunk};
use crate::pool::{chunk_exclusive, order_bytes};
use crate::util;

/// How many times [`Chunks::exclusive`] looks at the counts before it says no.
const EXCLUSIVE_LOOKS: u32 = 8;

/// The chunks of a T2 buffer.
///
/// # Invariants
///
/// `list` owns its pages (see [`Chunk`]) and covers exactly the buffer's size;
/// `orders_descend` says whether the orders never increase along the list (what
/// `Pool::alloc_chunks` builds).
pub(crate) struct Chunks {
    list: KVVec<Chunk>,
    /// The chunks come in runs of one order, highest first (checked once, here rather
    /// than trusted): [`Chunks::locate`] then skips a run at a time.
    orders_descend: bool,
}

impl Chunks {
    /// Takes ownership of a buffer's chunks.
    pub(crate) fn new(list: KVVec<Chunk>) -> Self {
        let orders_descend = list.as_slice().windows(2).all(|pair| pair[0].order >= pair[1].order);
        Chunks { list, orders_descend }
    }

    /// The chunks, in buffer order.
    pub(crate) fn as_slice(&self) -> &[Chunk] {
        self.list.as_slice()
    }

    /// The chunk holding page `index` (in pages from the start) and the index of its
    /// first page, or `None` past the end.
    ///
    /// A lookup costs one step per run of chunks of one order (at most one per order)
    /// plus a binary search, not one per chunk: a fully fragmented 1 GiB buffer has
    /// 262144 chunks, and re-faulting it page by page would otherwise walk them all for
    /// every page.
    pub(crate) fn locate(&self, index: c_ulong) -> Option<(Chunk, c_ulong)> {
        let chunks = self.list.as_slice();
        let mut first = 0;
        let mut skip = index;
        let mut start: c_ulong = 0;
        while let Some(head) = chunks.get(first) {
            let rest = chunks.get(first..).unwrap_or_default();
            // With descending orders the chunks of this order end where a lower order
            // starts; otherwise each chunk is its own run.
            let run = if self.orders_descend { rest.partition_point(|c| c.order == head.order) } else { 1 };
            let chunk_pages: c_ulong = 1 << head.order;
            let run_pages = run as c_ulong * chunk_pages;
            if skip < run_pages {
                let n = skip / chunk_pages;
                let chunk = *rest.get(n as usize)?;
                return Some((chunk, start + n * chunk_pages));
            }
            skip -= run_pages;
            start += run_pages;
            first += run;
        }
        None
    }

    /// The sg table of a new attachment (not DMA-mapped: `map_dma_buf` maps it), each
    /// chunk split into segments of at most `seg_max` bytes (a non-zero page
    /// multiple), stored in `*out`.
    ///
    /// # Safety
    ///
    /// `out` is a writable slot for the table.
    pub(crate) unsafe fn sg_table(&self, seg_max: u64, out: *mut *mut bindings::sg_table) -> Result {
        let n = c_uint::try_from(self.list.len())?;
        // SAFETY: `list` is a valid array of `n` chunks that own their pages while the
        // buffer lives (the attachment holds a dma-buf reference, and the buffer cannot
        // leave T2 while attached); `out` is writable (the function's contract).
        let ret = unsafe { ffi::gb_sgt_build(self.list.as_ptr(), n, seg_max, out) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// A kernel mapping of all `pages` pages, of any size (the page-pointer array is
    /// kvmalloc'ed, 2 MiB per GiB, and freed once mapped). ENOMEM when the kernel cannot
    /// map it.
    pub(crate) fn vmap(&self, pages: c_ulong) -> Result<*mut c_void> {
        let n = c_uint::try_from(self.list.len())?;
        // SAFETY: `list` is a valid array of `n` chunks covering `pages` pages (type
        // invariant); the glue only reads it.
        let vaddr = unsafe { ffi::gb_vmap_chunks(self.list.as_ptr(), n, pages) };
        if vaddr.is_null() {
            return Err(ENOMEM);
        }
        Ok(vaddr)
    }

    /// Whether no chunk is referenced by anyone but us (no pin, no pipe): what a move
    /// out of T2 needs, after the user mappings are zapped. A page found referenced is
    /// looked at again a few times over about a millisecond before the answer is no:
    /// physical-page scanners (compaction's, which tries a reference on every page it
    /// passes) hold one for a moment, and a move refused for that would be spurious.
    pub(crate) fn exclusive(&self) -> bool {
        for _ in 0..EXCLUSIVE_LOOKS {
            if self.list.iter().all(chunk_exclusive) {
                return true;
            }
            // SAFETY: `gb_short_sleep` sleeps; the caller holds only a mutex (the
            // backing lock).
            unsafe { ffi::gb_short_sleep() };
        }
        false
    }

    /// Moves the chunks that are still referenced elsewhere (see `held.rs`) out of a
    /// dying buffer; returns them and their bytes.
    pub(crate) fn take_referenced(&mut self) -> (KVVec<Chunk>, u64) {
        let mut held = KVVec::new();
        let mut bytes = 0;
        let mut i = 0;
        while let Some(&chunk) = self.list.as_slice().get(i) {
            // The buffer is dying, so no mapping or attachment of ours refers to the
            // chunk any more. One that does not fit the list stays; `recycle` drops our
            // reference.
            if !chunk_exclusive(&chunk) && held.push(chunk, GFP_KERNEL).is_ok() {
                let _ = util::vec_swap_remove(&mut self.list, i);
                bytes += order_bytes(chunk.order);
            } else {
                i += 1;
            }
        }
        (held, bytes)
    }
}

/// Pages of `bytes` in a chunk list's terms.
pub(crate) fn page_count(bytes: u64) -> c_ulong {
    // A buffer is at most 1 TiB (`MAX_ALLOC`), so its page count fits.
    (bytes / PAGE_SIZE as u64) as c_ulong
}
