// SPDX-License-Identifier: GPL-2.0
//! A buffer's shmem file: the address space of all of its user mappings, and in T3
//! the pages that hold its contents (swappable: the kernel writes them to swap under
//! pressure and reads them back on access).
//!
//! Every mapping of a buffer belongs to this file's page cache (see `Buffer::mmap`), so
//! that a move between tiers can zap all of them at once and reclaim's reverse map
//! finds the mappings of a T3 page. Their `vm_file` is a second file on the same inode
//! without operations of its own, so that nothing reaches the shmem file through a
//! mapping (remap_file_pages, MADV_REMOVE). Callers that change what the file holds (store, load,
//! truncate, fault) hold the buffer's backing lock. Takes no lock of ours.

use kernel::bindings;
use kernel::ffi::c_ulong;
use kernel::prelude::*;

use crate::glue_ffi::{self as ffi, Chunk};

/// An owned reference to a shmem file of `size` bytes, and to the file its mappings
/// have as `vm_file`.
///
/// # Invariants
///
/// `file` is a counted reference to a shmem file made by `gb_shmem_create`, `map_file`
/// one to the map file `gb_map_file_create` made for it (the same inode and page cache,
/// none of the shmem file's operations); both are put in `drop`.
pub(crate) struct Shmem {
    file: *mut bindings::file,
    map_file: *mut bindings::file,
}

// SAFETY: a `struct file` reference may be used and put from any thread; what changes
// the file's pages is serialised by the buffer's backing lock (see the module comment).
unsafe impl Send for Shmem {}
// SAFETY: as for `Send`; shared access only calls the glue's file and page-cache
// wrappers, which do their own locking.
unsafe impl Sync for Shmem {}

impl Shmem {
    /// A new, empty shmem file of `size` bytes (no page is allocated until touched).
    /// ENOMEM when the kernel cannot make it: shmem answers a failed inode allocation
    /// with ENOSPC (a full tmpfs), which for an ALLOC is a lack of memory.
    pub(crate) fn new(size: u64) -> Result<Self> {
        let mut file = core::ptr::null_mut();
        // SAFETY: `file` is a local the glue writes only on success.
        let ret = unsafe { ffi::gb_shmem_create(size, &mut file) };
        match ret {
            0 => {}
            e if e == ENOSPC.to_errno() => return Err(ENOMEM),
            e => return Err(Error::from_errno(e)),
        }
        let mut map_file = core::ptr::null_mut();
        // SAFETY: `file` is the live shmem file made above; `map_file` is a local the
        // glue writes only on success.
        let ret = unsafe { ffi::gb_map_file_create(file, &mut map_file) };
        if ret != 0 {
            // SAFETY: our only reference to the file made above, put once.
            unsafe { ffi::gb_file_put(file) };
            return Err(Error::from_errno(ret));
        }
        Ok(Shmem { file, map_file })
    }

    /// The file, for the T3 list's statistics (valid while `self` lives).
    pub(crate) fn as_ptr(&self) -> *mut bindings::file {
        self.file
    }

    /// Makes `vma` (being set up by an mmap of the buffer) a mapping of this file's
    /// pages, through the map file: remap_file_pages and MADV_REMOVE, which act on a
    /// vma's file, find no mmap or fallocate there.
    ///
    /// # Safety
    ///
    /// `vma` is the VMA an mmap of the buffer's dma-buf is setting up, with its mmap
    /// lock held for writing.
    pub(crate) unsafe fn adopt(&self, vma: *mut bindings::vm_area_struct) {
        // SAFETY: `vma` is being set up under its mmap lock (the function's contract);
        // the map file is live (type invariant) and the glue takes its own reference.
        unsafe { ffi::gb_vma_use_file(vma, self.map_file) };
    }

    /// Removes every user mapping's page-table entries (the mappings stay and fault
    /// the buffer's pages in again).
    pub(crate) fn unmap_users(&self) {
        // SAFETY: the file is live (type invariant); zapping takes the kernel's own
        // locks, none of ours.
        unsafe { ffi::gb_user_unmap(self.file) };
    }

    /// Maps page `index` of the file at `addr` in `vma`, reading it back from swap
    /// or allocating it first if needed. ENOSPC when no page can be had (the fault
    /// answers SIGBUS, as tmpfs does when full).
    ///
    /// # Safety
    ///
    /// `vma` is a live mapping of this file (made by [`Shmem::adopt`]) whose fault is
    /// being handled, `addr` the address of `index` in it; the caller holds the
    /// buffer's backing lock with the buffer in T3.
    pub(crate) unsafe fn fault(&self, vma: *mut bindings::vm_area_struct, addr: c_ulong, index: c_ulong) -> Result {
        // SAFETY: the contract above: a live vma of this file during its fault.
        let ret = unsafe { ffi::gb_shmem_fault(self.file, vma, addr, index) };
        match ret {
            0 => Ok(()),
            e if e == ENOMEM.to_errno() => Err(ENOSPC),
            e => Err(Error::from_errno(e)),
        }
    }

    /// Copies `chunk` into the file at page `index` (pages dirty: they go to swap,
    /// never dropped). ENOMEM when no page can be had even after reclaim.
    pub(crate) fn store(&self, index: c_ulong, chunk: &Chunk) -> Result {
        // SAFETY: the chunk's block of `2^order` pages is owned by the caller's buffer
        // (`Chunk` invariant) and only read; the file is live (type invariant).
        errno(unsafe { ffi::gb_shmem_store(self.file, index, chunk.page, chunk.order) })
    }

    /// Copies the file's pages at `index` into `chunk`. EBUSY when one of them is
    /// pinned for DMA through a mapping (its pinner would keep using the old page).
    pub(crate) fn load(&self, index: c_ulong, chunk: &Chunk) -> Result {
        // SAFETY: the chunk's pages are owned by the caller and not yet visible to
        // anyone else (`Chunk` invariant); the file is live (type invariant).
        errno(unsafe { ffi::gb_shmem_load(self.file, index, chunk.page, chunk.order) })
    }

    /// Frees every page of the file and its swap slots.
    pub(crate) fn truncate(&self) {
        // SAFETY: the file is live (type invariant); its mappings have been zapped by
        // the caller, which holds the backing lock, so no page is mapped through us.
        unsafe { ffi::gb_shmem_truncate(self.file) };
    }

    /// Keeps the file's pages from reclaim (`true`) while a device or a kernel mapping
    /// uses them, or lets reclaim have them again (`false`).
    pub(crate) fn set_unevictable(&self, unevictable: bool) {
        // SAFETY: the file is live (type invariant); a flag on its address space.
        unsafe { ffi::gb_shmem_set_unevictable(self.file, unevictable) };
    }

    /// A reference to each of the file's first `npages` pages (read back from swap or
    /// allocated as needed), held until the returned value is dropped. On failure
    /// (ENOMEM, an I/O error, EINTR when `killable` and the caller is killed) the
    /// error comes with the pages referenced so far, for the caller to let go.
    pub(crate) fn pin(
        &self,
        npages: c_ulong,
        killable: bool,
    ) -> core::result::Result<PinnedPages, (Error, PinnedPages)> {
        let (mut pages, mut pinned) = (core::ptr::null_mut(), 0);
        // SAFETY: the file is live (type invariant); the two outputs are locals the glue
        // writes, and the array and its `pinned` references are owned by the value
        // returned either way.
        let ret = unsafe { ffi::gb_shmem_pin(self.file, npages, killable, &mut pages, &mut pinned) };
        let held = PinnedPages { pages, npages: pinned };
        if ret != 0 {
            return Err((Error::from_errno(ret), held));
        }
        Ok(held)
    }
}

impl Drop for Shmem {
    fn drop(&mut self) {
        // SAFETY: our counted references (type invariant), each put once; mappings
        // hold their own.
        unsafe {
            ffi::gb_file_put(self.map_file);
            ffi::gb_file_put(self.file);
        }
    }
}

/// Page references taken by [`Shmem::pin`].
///
/// # Invariants
///
/// `pages` is null with `npages` 0, or a kvmalloc'ed array whose first `npages` page
/// pointers (made by `gb_shmem_pin`) each hold one reference; all are given back by
/// `gb_shmem_unpin`.
pub(crate) struct PinnedPages {
    pages: *mut *mut bindings::page,
    npages: c_ulong,
}

// SAFETY: page references may be dropped from any thread; the array is owned.
unsafe impl Send for PinnedPages {}

impl PinnedPages {
    /// The array and its length, for an sg table or a vmap.
    pub(crate) fn raw(&self) -> (*mut *mut bindings::page, c_ulong) {
        (self.pages, self.npages)
    }

    /// Hands the references to C (an attachment keeps them while mapped).
    pub(crate) fn into_raw(self) -> (*mut *mut bindings::page, c_ulong) {
        let raw = self.raw();
        core::mem::forget(self);
        raw
    }

    /// After the last pin (the file evictable again): puts the pages back on the
    /// evictable LRU lists, where reclaim parked any it met while they were pinned.
    pub(crate) fn make_evictable(&self) {
        // SAFETY: the array and its referenced pages are ours (type invariant); the glue
        // only moves the pages between LRU lists.
        unsafe { ffi::gb_shmem_make_evictable(self.pages, self.npages) };
    }

    /// Takes back references handed out by [`PinnedPages::into_raw`].
    ///
    /// # Safety
    ///
    /// `pages` and `npages` come from one `into_raw` and are not used afterwards.
    pub(crate) unsafe fn from_raw(pages: *mut *mut bindings::page, npages: c_ulong) -> Self {
        PinnedPages { pages, npages }
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        // SAFETY: the array and its references are ours (type invariant), given back
        // once here; the pages are marked dirty, since a device may have written them.
        unsafe { ffi::gb_shmem_unpin(self.pages, self.npages) };
    }
}

fn errno(ret: kernel::ffi::c_int) -> Result {
    if ret == 0 {
        Ok(())
    } else {
        Err(Error::from_errno(ret))
    }
}
