// SPDX-License-Identifier: GPL-2.0
//! A T2 buffer and its DMA-BUF exporter callbacks.
//!
//! The dma-buf owns the [`Buffer`] (its `priv`) from a successful export until the
//! dma-buf's release callback, which runs when the last reference goes (every fd
//! closed, every mapping gone, every importer detached): it returns the pages to the
//! pool. Each dma-buf also holds a reference on this module.
//!
//! No lock of ours is taken here except through [`pool::recycle`] and
//! [`State::proc_release`] in `drop`.

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::ffi::{c_int, c_uint, c_ulong, c_void};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::ffi::{self, Chunk};
use crate::procs::{Holder, ProcEntry};
use crate::{pool, state, State};

/// A pinned system-RAM buffer.
///
/// # Invariants
///
/// `chunks` own their pages (see [`Chunk`]) and cover exactly `size` bytes, a multiple
/// of the page size; `size` has been added to `Counters::t2_used`, to `owner.t2_used`
/// and one to both buffer counts; `owner` holds its entry as a [`Holder::Buffer`].
pub(crate) struct Buffer {
    /// Unique id, shown to userspace instead of any address.
    pub(crate) id: u64,
    /// Size in bytes.
    pub(crate) size: u64,
    chunks: KVVec<Chunk>,
    owner: Option<Arc<ProcEntry>>,
}

impl Buffer {
    /// Wraps freshly allocated chunks whose `size` bytes are already accounted.
    pub(crate) fn new(
        state: &State,
        size: u64,
        chunks: KVVec<Chunk>,
        owner: Arc<ProcEntry>,
    ) -> Self {
        let c = &state.counters;
        c.buffers.fetch_add(1, Ordering::Relaxed);
        owner.buffers.fetch_add(1, Ordering::Relaxed);
        Buffer {
            id: state.next_buffer_id.fetch_add(1, Ordering::Relaxed),
            size,
            chunks,
            owner: Some(owner),
        }
    }

    fn pages(&self) -> c_ulong {
        // `size` fits a `size_t` (checked at export), so the page count fits too.
        (self.size / PAGE_SIZE as u64) as c_ulong
    }

    /// Maps the buffer into `vma` with real pages; `vm_pgoff` selects the first page.
    fn mmap(&self, vma: *mut bindings::vm_area_struct) -> Result {
        let (mut start, mut npages, mut pgoff, mut shared): (c_ulong, c_ulong, c_ulong, bool) =
            (0, 0, 0, false);
        // SAFETY: `vma` is valid during the mmap callback; the outputs are locals.
        unsafe { ffi::gb_vma_info(vma, &mut start, &mut npages, &mut pgoff, &mut shared) };
        // A private mapping would copy on write and never reach the buffer.
        if !shared {
            return Err(EINVAL);
        }
        let end = pgoff.checked_add(npages).ok_or(EINVAL)?;
        if npages == 0 || end > self.pages() {
            return Err(EINVAL);
        }
        // SAFETY: `vma` is valid and its mmap lock is held for writing by our caller.
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
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let state = state();
        let c = &state.counters;
        // Unaccount first, so that the cache may take the pages within the cap.
        c.t2_used.fetch_sub(self.size, Ordering::Relaxed);
        pool::recycle(state, &self.chunks, true);
        c.buffers.fetch_sub(1, Ordering::Relaxed);
        if let Some(owner) = self.owner.take() {
            owner.t2_used.fetch_sub(self.size, Ordering::Relaxed);
            owner.buffers.fetch_sub(1, Ordering::Relaxed);
            state.proc_release(owner, Holder::Buffer);
        }
    }
}

/// Exports `buf` as a dma-buf; on failure `buf` is dropped (pages back to the pool).
pub(crate) fn export(buf: KBox<Buffer>) -> Result<*mut ffi::DmaBuf> {
    let size = usize::try_from(buf.size)?;
    let raw = KBox::into_raw(buf);
    let mut dmabuf = core::ptr::null_mut();
    // SAFETY: `raw` is a valid `Buffer`; on success the dma-buf owns it until its
    // release callback, on failure ownership stays with us.
    let ret = unsafe { ffi::gb_dmabuf_export(raw.cast(), size, &mut dmabuf) };
    if ret != 0 {
        // SAFETY: the export failed, so `raw` (from `KBox::into_raw`) is still ours.
        drop(unsafe { KBox::from_raw(raw) });
        return Err(Error::from_errno(ret));
    }
    Ok(dmabuf)
}

/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs.
unsafe fn buffer<'a>(buf: *mut c_void) -> &'a Buffer {
    // SAFETY: per the function's contract `buf` points to a live `Buffer`.
    unsafe { &*buf.cast::<Buffer>() }
}

/// dma-buf `release`: the last reference is gone.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_release(buf: *mut c_void) {
    // SAFETY: `buf` came from `KBox::into_raw` in `export`; the dma-buf core calls
    // release once, after every other callback.
    drop(unsafe { KBox::from_raw(buf.cast::<Buffer>()) });
}

/// dma-buf `mmap`.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_mmap(
    buf: *mut c_void,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: called by the dma-buf core on one of our dma-bufs.
    let b = unsafe { buffer(buf) };
    match b.mmap(vma) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// dma-buf `map_dma_buf`: an sg table with one entry per chunk, DMA-mapped for `dev`.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_map(
    buf: *mut c_void,
    dev: *mut bindings::device,
    dir: bindings::dma_data_direction,
    out: *mut *mut bindings::sg_table,
) -> c_int {
    // SAFETY: called by the dma-buf core on one of our dma-bufs.
    let b = unsafe { buffer(buf) };
    let Ok(n) = c_uint::try_from(b.chunks.len()) else {
        return ENOMEM.to_errno();
    };
    // SAFETY: `chunks` is a valid array of `n` chunks; `dev` and `out` come from the
    // dma-buf core.
    unsafe { ffi::gb_sgt_create(b.chunks.as_ptr(), n, dev, dir, out) }
}

/// dma-buf `unmap_dma_buf`.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_unmap(
    _buf: *mut c_void,
    dev: *mut bindings::device,
    sgt: *mut bindings::sg_table,
    dir: bindings::dma_data_direction,
) {
    // SAFETY: `sgt` was made by `gb_rs_buffer_map` for the same device and direction.
    unsafe { ffi::gb_sgt_destroy(dev, sgt, dir) };
}

/// dma-buf `vmap` (the core counts nested vmaps and calls this once).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_vmap(buf: *mut c_void) -> *mut c_void {
    // SAFETY: called by the dma-buf core on one of our dma-bufs.
    let b = unsafe { buffer(buf) };
    let Ok(n) = c_uint::try_from(b.chunks.len()) else {
        return core::ptr::null_mut();
    };
    let pages = b.pages();
    // SAFETY: `chunks` is a valid array of `n` chunks covering `pages` pages.
    unsafe { ffi::gb_vmap_chunks(b.chunks.as_ptr(), n, pages) }
}

/// dma-buf `vunmap`.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_vunmap(_buf: *mut c_void, vaddr: *mut c_void) {
    // SAFETY: `vaddr` was returned by `gb_rs_buffer_vmap`.
    unsafe { ffi::gb_vunmap(vaddr) };
}

/// dma-buf `begin_cpu_access`/`end_cpu_access`.
///
/// The pages are ordinary cached RAM, mapped cached everywhere (user mappings and
/// vmap); on the cache-coherent architectures this module supports (x86_64, arm64
/// servers with coherent PCIe) there is nothing to flush or invalidate.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_cpu_access(
    _buf: *mut c_void,
    _dir: bindings::dma_data_direction,
    _begin: bool,
) -> c_int {
    0
}
