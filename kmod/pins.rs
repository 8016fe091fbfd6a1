// SPDX-License-Identifier: GPL-2.0
//! A buffer's pages held for the kernel: an importer's mapped attachment
//! (`map_dma_buf`) and a kernel mapping (`vmap`).
//!
//! T2 pages are pinned and charged from their ALLOC on. A T3 buffer's pages are the
//! file's, swappable: a pin reads them back from swap, holds a reference to each and
//! keeps the file from reclaim (`mapping_set_unevictable`, as i915 pins shmem objects)
//! until the last pin goes. That RAM is charged as T2 pages are, once per buffer while
//! any pin lasts (`admission::admit_t3_pin`): the pool cap and the per-user cap of the
//! buffer's owner, the caller's `RLIMIT_MEMLOCK`, the RAM reserve. So an importer can
//! pin no more than an ALLOC could, and refusals are ENOMEM. When the last pin goes the
//! pages are put back on the evictable LRU (`check_move_unevictable_folios`), where
//! reclaim had parked any it met while they were pinned.
//!
//! Locks: the backing lock; the admission (T3 list and cache locks) is made before it
//! is taken, never under it (see "Lock order" in kmod/README.md).

use kernel::bindings;
use kernel::ffi::c_void;
use kernel::prelude::*;

use crate::admission;
use crate::backing::{BackingGuard, Tier};
use crate::buffer::{seg_max, Buffer};
use crate::glue_ffi as ffi;
use crate::shmem::PinnedPages;
use crate::state::state;

impl Buffer {
    /// Mapping a T3 attachment for `dev`: references to every page of the file (kept
    /// from reclaim while any pin exists, charged with the first), their sg table in
    /// `*out`. EINVAL in T2 (a T2 attachment has its table from attach), ENOMEM when
    /// the limits refuse the RAM, EINTR when the caller is killed while pages are read
    /// back.
    ///
    /// # Safety
    ///
    /// `dev` is the live device of one of this buffer's attachments; `out` is writable.
    pub(crate) unsafe fn pin(
        &self,
        dev: *mut bindings::device,
        out: *mut *mut bindings::sg_table,
    ) -> Result<PinnedPages> {
        // An attachment made in T2 has its table; the tier cannot change under it.
        let mut backing = self.lock_charged_t3()?.ok_or(EINVAL)?;
        let pages = self.pin_pages(&mut backing, true)?;
        let (array, n) = pages.raw();
        // SAFETY: `array` holds `n` referenced pages (owned by `pages`); `out` is
        // writable (the function's contract).
        let ret = unsafe { ffi::gb_sgt_build_pages(array, n, seg_max(dev), out) };
        if ret != 0 {
            self.unpinned(&mut backing, pages);
            return Err(Error::from_errno(ret));
        }
        backing.dma_pins += 1;
        Ok(pages)
    }

    /// A T3 attachment was unmapped: its page references go.
    pub(crate) fn unpin(&self, pages: PinnedPages) {
        let mut backing = self.backing();
        backing.dma_pins = backing.dma_pins.saturating_sub(1);
        self.unpinned(&mut backing, pages);
    }

    /// A kernel mapping of the whole buffer (`vmap`), of any size: the dma-buf core
    /// WARNs on every vmap an exporter refuses, so there is no size limit beyond the
    /// T3 pin charge (a buffer already pinned by a mapped attachment, as importers map
    /// before they vmap, needs none). ENOMEM when the kernel cannot map it or the limits
    /// refuse a T3 buffer's RAM.
    pub(crate) fn vmap(&self) -> Result<*mut c_void> {
        loop {
            let mut backing = self.backing();
            if let Tier::T2 { chunks, .. } = &backing.tier {
                let vaddr = chunks.vmap(self.pages())?;
                backing.vmapped = true;
                return Ok(vaddr);
            }
            drop(backing);
            // Moved to T2 while the lock was free for the admission: map that.
            let Some(mut backing) = self.lock_charged_t3()? else { continue };
            // Not killable: a refused vmap WARNs in the dma-buf core, and the work is
            // bounded by the buffer, admitted above.
            let pages = self.pin_pages(&mut backing, false)?;
            let (array, n) = pages.raw();
            // SAFETY: `array` holds `n` referenced pages, kept until `vunmap`.
            let vaddr = unsafe { ffi::gb_vmap_pages(array, n) };
            if vaddr.is_null() {
                self.unpinned(&mut backing, pages);
                return Err(ENOMEM);
            }
            backing.vmap_pages = Some(pages);
            backing.vmapped = true;
            return Ok(vaddr);
        }
    }

    /// Removes the kernel mapping made by [`Buffer::vmap`].
    ///
    /// # Safety
    ///
    /// `vaddr` was returned by [`Buffer::vmap`] of this buffer and is not used again.
    pub(crate) unsafe fn vunmap(&self, vaddr: *mut c_void) {
        let mut backing = self.backing();
        // SAFETY: a live mapping made by `vmap` (the function's contract), unmapped once.
        unsafe { ffi::gb_vunmap(vaddr) };
        backing.vmapped = false;
        if let Some(pages) = backing.vmap_pages.take() {
            self.unpinned(&mut backing, pages);
        }
    }

    /// The backing lock with the buffer in T3 and its pin charge in place (admitted
    /// first when no pin holds one: outside the lock, since admission takes other locks
    /// of ours); `None` when the buffer is in T2. ENOMEM when the limits refuse.
    fn lock_charged_t3(&self) -> Result<Option<BackingGuard<'_>>> {
        let backing = self.backing();
        if !matches!(backing.tier, Tier::T3) {
            return Ok(None);
        }
        if backing.t3_pin_charge.is_some() {
            return Ok(Some(backing));
        }
        drop(backing);
        let (owner, user) = self.charged_to()?;
        let state = state();
        let charge = admission::admit_t3_pin(state, owner, user, self.size)?;
        let mut backing = self.backing();
        if matches!(backing.tier, Tier::T3) && backing.t3_pin_charge.is_none() {
            backing.t3_pin_charge = Some(charge);
            return Ok(Some(backing));
        }
        // Another pin charged it meanwhile, or a move took it to T2: this one goes back.
        drop(backing);
        admission::release_t3_pin(state, owner, user, self.size);
        drop(charge);
        self.lock_charged_t3()
    }

    /// References to every page of the file (read back from swap as needed), after
    /// keeping the file from reclaim; `killable`: EINTR when the caller is killed.
    fn pin_pages(&self, backing: &mut BackingGuard<'_>, killable: bool) -> Result<PinnedPages> {
        if !backing.t3_pinned() {
            self.shmem.set_unevictable(true);
        }
        match self.shmem.pin(self.pages(), killable) {
            Ok(pages) => Ok(pages),
            Err((e, partial)) => {
                self.unpinned(backing, partial);
                Err(e)
            }
        }
    }

    /// `pages` are let go (a pin ended, or never completed; its count is already
    /// down): after the last pin the file is evictable again, those pages go back to
    /// the evictable LRU, and the pin charge is given back.
    fn unpinned(&self, backing: &mut BackingGuard<'_>, pages: PinnedPages) {
        if backing.t3_pinned() {
            drop(pages);
            return;
        }
        self.shmem.set_unevictable(false);
        pages.make_evictable();
        drop(pages);
        if let Some(charge) = backing.t3_pin_charge.take() {
            if let Ok((owner, user)) = self.charged_to() {
                admission::release_t3_pin(state(), owner, user, self.size);
            }
            drop(charge);
        }
    }
}
