// SPDX-License-Identifier: GPL-2.0
//! Where a buffer's contents are ([`Backing`]: T2 chunks or the T3 file, and what is
//! attached, pinned and mapped in the kernel), behind the buffer's backing lock.
//!
//! The backing lock is a kernel `struct mutex` driven through the glue rather than a
//! `kernel::sync::Mutex`, which in 6.12 can only be taken uninterruptibly: a move holds
//! the lock across its whole copy (seconds for a large buffer read back from swap), and
//! a fault must neither wait for it with the mmap lock held nor where SIGKILL cannot end
//! the wait. [`BackingLock::try_lock`] lets the fault handler see a move and wait for it
//! as the kernel waits for a locked folio (without the mmap lock, killably, then retry),
//! and [`BackingLock::lock_killable`] lets a second mover give up with EINTR.
//!
//! Lock: the backing lock (`greenboost::backing`, one per buffer; see "Lock order" in
//! kmod/README.md).

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use kernel::bindings;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::chunks::Chunks;
use crate::glue_ffi as ffi;
use crate::memlock::Memlock;
use crate::shmem::PinnedPages;

/// Where a buffer's contents are.
pub(crate) enum Tier {
    /// Pinned 2 MiB pages (RAM the GPU can read), charged in `memlock`.
    T2 { chunks: Chunks, memlock: Memlock },
    /// The pages of the buffer's shmem file, which the kernel may write to swap.
    T3,
}

/// A buffer's backing, behind its backing lock.
///
/// # Invariants
///
/// `attachments` counts the buffer's dma-buf attachments, `dma_pins` those of them
/// mapped while in T3 (each holding page references, see `Buffer::pin`);
/// `vmap_pages` holds the pages of a T3 kernel mapping, `vmapped` says whether a
/// kernel mapping exists. The tier never changes while any of them is non-zero/set.
/// The shmem file's pages are kept from reclaim exactly while `dma_pins` or
/// `vmap_pages` hold T3 pages, and `t3_pin_charge` holds the memlock charge of their
/// RAM (its other figures are the buffer's size in the pin admission's counters) from
/// before the first such pin until the last is gone (`pins.rs`).
pub(crate) struct Backing {
    pub(crate) tier: Tier,
    pub(crate) attachments: u32,
    pub(crate) dma_pins: u32,
    pub(crate) vmapped: bool,
    pub(crate) vmap_pages: Option<PinnedPages>,
    pub(crate) t3_pin_charge: Option<Memlock>,
}

impl Backing {
    /// A backing in `tier` with nothing attached.
    pub(crate) fn new(tier: Tier) -> Self {
        Backing { tier, attachments: 0, dma_pins: 0, vmapped: false, vmap_pages: None, t3_pin_charge: None }
    }

    /// Whether an importer or a kernel mapping uses the buffer's pages (a move must
    /// wait until they are gone: EBUSY).
    pub(crate) fn in_use(&self) -> bool {
        self.attachments > 0 || self.vmapped
    }

    /// Whether T3 pages are referenced for an importer or a kernel mapping.
    pub(crate) fn t3_pinned(&self) -> bool {
        self.dma_pins > 0 || self.vmap_pages.is_some()
    }
}

/// A [`Backing`] behind a kernel mutex (the backing lock).
///
/// # Invariants
///
/// `mutex` was initialised by `gb_backing_lock_init` and is never moved (the value is
/// pinned); `backing` is only accessed through a [`BackingGuard`], which exists only
/// while `mutex` is held.
#[pin_data]
pub(crate) struct BackingLock {
    #[pin]
    mutex: Opaque<bindings::mutex>,
    backing: UnsafeCell<Backing>,
}

// SAFETY: the backing may be handed to another thread with the lock (its chunks, memlock
// charge and page references are `Send`); the kernel mutex may be used from any thread.
unsafe impl Send for BackingLock {}
// SAFETY: shared access reaches `backing` only through a guard, so only one thread at a
// time (the one holding `mutex`) touches it.
unsafe impl Sync for BackingLock {}

impl BackingLock {
    /// A backing lock around `backing`, in the `greenboost::backing` lockdep class.
    pub(crate) fn new(backing: Backing) -> impl PinInit<Self> {
        pin_init!(BackingLock {
            // SAFETY: `slot` is the mutex's own, not yet initialised memory, valid for
            // the call and pinned from here on; it is initialised exactly once.
            mutex <- Opaque::ffi_init(|slot| unsafe { ffi::gb_backing_lock_init(slot) }),
            backing: UnsafeCell::new(backing),
        })
    }

    /// Takes the lock, waiting as long as it takes (uninterruptibly).
    pub(crate) fn lock(&self) -> BackingGuard<'_> {
        // SAFETY: the mutex is initialised and pinned (type invariant).
        unsafe { ffi::gb_backing_lock(self.mutex.get()) };
        BackingGuard { lock: self, _not_send: PhantomData }
    }

    /// Takes the lock, or EINTR when the caller is killed while waiting.
    pub(crate) fn lock_killable(&self) -> Result<BackingGuard<'_>> {
        // SAFETY: the mutex is initialised and pinned (type invariant).
        if unsafe { ffi::gb_backing_lock_killable(self.mutex.get()) } != 0 {
            return Err(EINTR);
        }
        Ok(BackingGuard { lock: self, _not_send: PhantomData })
    }

    /// Takes the lock if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<BackingGuard<'_>> {
        // SAFETY: the mutex is initialised and pinned (type invariant).
        if unsafe { ffi::gb_backing_trylock(self.mutex.get()) } {
            Some(BackingGuard { lock: self, _not_send: PhantomData })
        } else {
            // No guard: one would unlock a mutex held by somebody else when dropped.
            None
        }
    }
}

/// The backing lock held: access to the [`Backing`]; unlocks when dropped.
///
/// # Invariants
///
/// The current task holds `lock.mutex`; a mutex is released by the task that took it,
/// so the guard stays on that task (not `Send`).
pub(crate) struct BackingGuard<'a> {
    lock: &'a BackingLock,
    _not_send: PhantomData<*mut ()>,
}

impl Deref for BackingGuard<'_> {
    type Target = Backing;

    fn deref(&self) -> &Backing {
        // SAFETY: the mutex is held (type invariant), so nobody else accesses `backing`.
        unsafe { &*self.lock.backing.get() }
    }
}

impl DerefMut for BackingGuard<'_> {
    fn deref_mut(&mut self) -> &mut Backing {
        // SAFETY: the mutex is held (type invariant), so nobody else accesses `backing`,
        // and this guard is borrowed mutably.
        unsafe { &mut *self.lock.backing.get() }
    }
}

impl Drop for BackingGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the current task holds the mutex (type invariant) and gives it up once.
        unsafe { ffi::gb_backing_unlock(self.lock.mutex.get()) };
    }
}
