// SPDX-License-Identifier: GPL-2.0
//! A buffer (in T2 or T3) and what its DMA-BUF exporter callbacks do (the pins of
//! `map_dma_buf` and `vmap` are in `pins.rs`).
//!
//! The dma-buf owns the [`Buffer`] (its `priv`) from a successful export until the
//! dma-buf's release callback, which runs when the last reference goes (every fd
//! closed, every mapping gone, every importer detached): it gives its pages back. Each
//! dma-buf also holds a reference on this module.
//!
//! Where the contents live is the buffer's [`Backing`], behind its backing lock: every
//! fault, attachment, pin and kernel mapping looks at it under the lock, and a move
//! (`mover.rs`) changes it under the lock, so none of them sees a buffer halfway
//! between tiers. The C entry points of the callbacks are in `entry.rs`.
//!
//! Locks: the backing lock; within it the kernel's (mmap, page cache, reclaim, which
//! may call the cache's shrinker and so the cache lock). `drop` takes the T3 list,
//! cache, held, registry and users locks one after the other, none within another (see
//! "Lock order" in kmod/README.md).

use core::pin::Pin;
use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::ffi::c_ulong;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::admission;
use crate::backing::{Backing, BackingGuard, BackingLock, Tier};
use crate::chunks::{page_count, Chunks};
use crate::glue_ffi as ffi;
use crate::memlock::Memlock;
use crate::pool::Placement;
use crate::procs::{Holder, ProcEntry};
use crate::shmem::Shmem;
use crate::state::{state, State};
use crate::tier3::Tier3;
use crate::users::{self, UserShare};

/// A buffer.
///
/// # Invariants
///
/// `size` is a multiple of the page size; `shmem` has that size and every user mapping
/// of the buffer belongs to it. In T2 `size` is committed in `Counters::t2` and
/// `owner.t2` and charged in `user.t2_used`, and the chunks cover it; in T3 it is in
/// `Counters::t3_used`, `owner.t3_used` and `user.t3_used`, and one in both T3 buffer
/// counts. One in the three buffer counts either way. `owner` holds its entry as a
/// [`Holder::Buffer`] and `user` one hold of its share; the shmem file is in the T3
/// list under `owner` and `id` from [`Buffer::new`] until `drop`.
/// Once exported, the dma-buf's `priv` points to it (see [`export`]).
pub(crate) struct Buffer {
    /// Unique id, shown to userspace instead of any address.
    pub(crate) id: u64,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Where its T2 pages come from (the ALLOC's placement, again at every promote).
    pub(crate) placement: Placement,
    pub(crate) shmem: Shmem,
    backing: Pin<KBox<BackingLock>>,
    owner: Option<Arc<ProcEntry>>,
    user: Option<Arc<UserShare>>,
}

/// A backing lock, before the buffer exists (so that its allocation is not a failure
/// after the pages are reserved).
pub(crate) fn new_backing_lock() -> Result<Pin<KBox<BackingLock>>> {
    KBox::pin_init(BackingLock::new(Backing::new(Tier::T3)), GFP_KERNEL)
}

impl Buffer {
    /// Wraps a buffer whose `size` bytes are already accounted in `tier`, and counted
    /// in `user.buffers`, for `owner` and `user` (see the type invariant), listing its
    /// shmem file; on failure it is dropped, which undoes it all.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        state: &State,
        size: u64,
        placement: Placement,
        shmem: Shmem,
        lock: Pin<KBox<BackingLock>>,
        tier: Tier,
        owner: Arc<ProcEntry>,
        user: Arc<UserShare>,
    ) -> Result<KBox<Self>> {
        let c = &state.shared.counters;
        c.buffers.fetch_add(1, Ordering::Relaxed);
        owner.buffers.fetch_add(1, Ordering::Relaxed);
        if matches!(tier, Tier::T3) {
            c.t3_buffers.fetch_add(1, Ordering::Relaxed);
            owner.t3_buffers.fetch_add(1, Ordering::Relaxed);
        }
        lock.lock().tier = tier;
        // On failure the value is dropped, and `drop` undoes the above.
        let buf = KBox::new(
            Buffer {
                id: state.next_buffer_id.fetch_add(1, Ordering::Relaxed),
                size,
                placement,
                shmem,
                backing: lock,
                owner: Some(owner),
                user: Some(user),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: the file and the owner's entry live as long as the buffer, which
        // removes it from the list first thing in `drop`.
        unsafe { state.tier3.add(buf.owner_ptr(), buf.id, buf.shmem.as_ptr())? };
        Ok(buf)
    }

    fn owner_ptr(&self) -> *const ProcEntry {
        self.owner.as_ref().map_or(core::ptr::null(), |o| &**o as *const ProcEntry)
    }

    /// Who its pages are charged to: the allocating process's entry and its user's
    /// share (accounting of moves and pins). EINVAL once the buffer is being dropped.
    pub(crate) fn charged_to(&self) -> Result<(&ProcEntry, &UserShare)> {
        match (&self.owner, &self.user) {
            (Some(owner), Some(user)) => Ok((owner, user)),
            _ => Err(EINVAL),
        }
    }

    /// The backing lock.
    pub(crate) fn backing(&self) -> BackingGuard<'_> {
        self.backing.lock()
    }

    /// The backing lock, or EINTR when the caller is killed while waiting (a move
    /// waiting for another one).
    pub(crate) fn backing_killable(&self) -> Result<BackingGuard<'_>> {
        self.backing.lock_killable()
    }

    /// Waits until the backing lock is free (a move in progress has finished), killably
    /// when `killable`: a fault that found the lock taken waits here without the mmap
    /// lock and is then retried.
    pub(crate) fn wait_for_backing(&self, killable: bool) {
        if killable {
            // Killed: the fault is retried, and the retry sees the fatal signal.
            let _ = self.backing.lock_killable();
        } else {
            drop(self.backing.lock());
        }
    }

    /// Size in pages.
    pub(crate) fn pages(&self) -> c_ulong {
        page_count(self.size)
    }

    /// Sets `vma` up as a mapping of the buffer: checks, flags, and the buffer's shmem
    /// file as its file. No page is inserted here: faults fill it (see `gb_vm_fault`).
    ///
    /// # Safety
    ///
    /// `vma` is the VMA that an mmap of this buffer's dma-buf is setting up (the
    /// dma-buf core's `mmap` callback), with its mmap lock held for writing.
    pub(crate) unsafe fn mmap(&self, vma: *mut bindings::vm_area_struct) -> Result {
        let (_, npages, pgoff, shared) = vma_info(vma);
        // A private mapping would copy on write and never reach the buffer.
        if !shared {
            return Err(EINVAL);
        }
        let end = pgoff.checked_add(npages).ok_or(EINVAL)?;
        if npages == 0 || end > self.pages() {
            return Err(EINVAL);
        }
        // SAFETY: `vma` is valid and its mmap lock is held for writing (the function's
        // contract), as `vm_flags_set` and `vma_set_file` require.
        unsafe {
            ffi::gb_vma_prepare(vma);
            self.shmem.adopt(vma);
        }
        Ok(())
    }

    /// Handles a fault at `addr` (page `index` of the buffer) in `vma`: in T2 maps the
    /// whole chunk holding the page (as far as the vma reaches), in T3 the file's page.
    /// EFAULT past the end, ENOSPC when a T3 page cannot be had (both SIGBUS). Unless
    /// `wait`, EAGAIN when the backing lock is taken (a move is copying): the caller
    /// waits for it with [`Buffer::wait_for_backing`], without the mmap lock.
    ///
    /// # Safety
    ///
    /// `vma` is a live mapping of this buffer (made by [`Buffer::mmap`]) whose fault at
    /// `addr` is being handled, with its mmap or vma lock held.
    pub(crate) unsafe fn fault(
        &self,
        vma: *mut bindings::vm_area_struct,
        addr: c_ulong,
        index: c_ulong,
        wait: bool,
    ) -> Result {
        let backing = if wait { self.backing() } else { self.backing.try_lock().ok_or(EAGAIN)? };
        match &backing.tier {
            Tier::T2 { chunks, .. } => {
                let (chunk, first) = chunks.locate(index).ok_or(EFAULT)?;
                let (start, npages, pgoff, _) = vma_info(vma);
                let from = first.max(pgoff);
                let to = (first + (1 << chunk.order)).min(pgoff + npages);
                let at = start + (from - pgoff) * PAGE_SIZE as c_ulong;
                // SAFETY: pages `[from - first, to - first)` of the chunk lie inside its
                // block (it covers `[first, first + 2^order)`) and `[at, at + (to -
                // from) pages)` inside the vma; the chunk stays ours while mapped (the
                // mapping holds the dma-buf, and a move zaps it under this lock first).
                let ret = unsafe { ffi::gb_vma_fill(vma, at, chunk.page, from - first, to - from) };
                if ret != 0 {
                    return Err(Error::from_errno(ret));
                }
                Ok(())
            }
            Tier::T3 => {
                if index >= self.pages() {
                    return Err(EFAULT);
                }
                // SAFETY: `vma` is a live mapping of the shmem file (made by `mmap`)
                // in its fault, `addr` the address of `index`; the backing lock is held
                // with the buffer in T3.
                unsafe { self.shmem.fault(vma, addr, index) }
            }
        }
    }

    /// A new attachment for `dev`: in T2 its sg table in `*out` (not DMA-mapped:
    /// `map_dma_buf` maps it), in T3 none (built and pinned at map, [`Buffer::pin`]).
    /// Segments are no longer than the device accepts in one piece
    /// (`dma_get_max_seg_size`, and `dma_max_mapping_size`, which swiotlb bouncing
    /// limits to 256 KiB), rounded down to whole pages.
    ///
    /// # Safety
    ///
    /// `dev` and `out` are what the dma-buf core passes to `attach` for an attachment
    /// to this buffer's dma-buf: the importer's device and a writable slot.
    pub(crate) unsafe fn attach(&self, dev: *mut bindings::device, out: *mut *mut bindings::sg_table) -> Result {
        let mut backing = self.backing();
        if let Tier::T2 { chunks, .. } = &backing.tier {
            // SAFETY: `out` is writable (the function's contract).
            unsafe { chunks.sg_table(seg_max(dev), out)? };
        } else {
            // SAFETY: `out` is writable (the function's contract).
            unsafe { *out = core::ptr::null_mut() };
        }
        backing.attachments += 1;
        Ok(())
    }

    /// An attachment is gone.
    pub(crate) fn detach(&self) {
        let mut backing = self.backing();
        backing.attachments = backing.attachments.saturating_sub(1);
    }
}

/// The largest segment `dev` takes, in whole pages.
pub(crate) fn seg_max(dev: *mut bindings::device) -> u64 {
    // SAFETY: `dev` is an importer's live device (callers' contracts); the glue only
    // reads its DMA parameters.
    let limit = unsafe { ffi::gb_dma_seg_limit(dev) };
    let page = PAGE_SIZE as u64;
    (limit / page * page).max(page)
}

/// A vma's start, pages, page offset and whether it is shared.
fn vma_info(vma: *mut bindings::vm_area_struct) -> (c_ulong, c_ulong, c_ulong, bool) {
    let (mut start, mut npages, mut pgoff, mut shared): (c_ulong, c_ulong, c_ulong, bool) = (0, 0, 0, false);
    // SAFETY: callers pass a vma being set up or faulted under its lock; the four
    // outputs are locals that the glue only writes.
    unsafe { ffi::gb_vma_info(vma, &mut start, &mut npages, &mut pgoff, &mut shared) };
    (start, npages, pgoff, shared)
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let state = state();
        state.tier3.remove(self.owner_ptr(), self.id);
        let c = &state.shared.counters;
        c.buffers.fetch_sub(1, Ordering::Relaxed);
        let (Some(owner), Some(user)) = (self.owner.take(), self.user.take()) else { return };
        owner.buffers.fetch_sub(1, Ordering::Relaxed);
        users::uncharge(&user.buffers, 1);
        let mut backing = self.backing();
        let tier = core::mem::replace(&mut backing.tier, Tier::T3);
        // Every pin holds the dma-buf, so none is left; a charge would be a leak.
        let pin_charge = backing.t3_pin_charge.take();
        drop(backing);
        if let Some(charge) = pin_charge {
            admission::release_t3_pin(state, &owner, &user, self.size);
            drop(charge);
        }
        match tier {
            Tier::T3 => {
                c.t3_buffers.fetch_sub(1, Ordering::Relaxed);
                owner.t3_buffers.fetch_sub(1, Ordering::Relaxed);
                Tier3::unadmit(&state.shared, &owner, &user, self.size);
                state.procs.release(owner, Holder::Buffer);
                state.users.release(user);
            }
            Tier::T2 { chunks, memlock } => release_t2(state, self.size, chunks, memlock, owner, user),
        }
        // The shmem file (pages, swap slots) goes with `self.shmem`.
    }
}

/// Gives a dying T2 buffer's pages back: the chunks still referenced elsewhere stay
/// charged to the pool, the owner, its user and its memlock until released (`held.rs`).
fn release_t2(
    state: &State,
    size: u64,
    mut chunks: Chunks,
    mut memlock: Memlock,
    owner: Arc<ProcEntry>,
    user: Arc<UserShare>,
) {
    let (held, held_bytes) = chunks.take_referenced();
    let freed = size - held_bytes;
    // Unaccount first, so that the cache may take the pages within the cap.
    admission::release_t2(state, &owner, &user, freed);
    state.pool().recycle(chunks.as_slice(), true);
    memlock.uncharge(freed);
    if held.is_empty() {
        state.procs.release(owner, Holder::Buffer);
        state.users.release(user);
        return;
    }
    if let Err((held, owner, user, _memlock)) = state.held.add(&state.shared, held, owner, user, memlock) {
        // No room to remember them: drop our references and the charge.
        admission::release_t2(state, &owner, &user, held_bytes);
        state.pool().recycle(&held, true);
        state.procs.release(owner, Holder::Buffer);
        state.users.release(user);
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
