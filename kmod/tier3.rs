// SPDX-License-Identifier: GPL-2.0
//! T3 accounting: the shmem file of every live buffer in one list, the figures the
//! kernel changes on its own (pages written to swap and read back), and the room T3
//! has.
//!
//! The rule (kmod/README.md, "T3 and swap"): every byte of a T3 buffer must fit in
//! swap that nobody else uses, `t3_used <= free swap + T3 bytes already in swap`
//! (within `t3_cap_mb`), so that RAM can always be given back by writing T3 out. No
//! swap: no T3. And T3 pages still in RAM are room for T2 when RAM runs short, as far
//! as the free swap can take them (`pushable`).
//!
//! Lock: the T3 list lock ([`Tier3::files`]) only (see "Lock order" in kmod/README.md).

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{new_mutex, Mutex};

use crate::glue_ffi as ffi;
use crate::procs::ProcEntry;
use crate::shared::Shared;
use crate::users::{self, UserShare};
use crate::util;

/// Where a listed file sits: its owner's entry (its address, only ever compared) and
/// its buffer's id, so that one owner's files are next to each other.
type Key = (usize, u64);

/// One live buffer's shmem file.
///
/// # Invariants
///
/// `file` is the buffer's shmem file and stays valid while listed (the buffer removes
/// it before letting it go); so does the owner's entry named by its key.
struct T3File {
    file: *mut bindings::file,
}

// SAFETY: a pointer only read (statistics of the file) under the list lock, valid
// while listed (type invariant).
unsafe impl Send for T3File {}

/// Bytes of T3 pages in RAM and in swap.
#[derive(Clone, Copy, Default)]
pub(crate) struct Residency {
    pub(crate) resident: u64,
    pub(crate) swapped: u64,
}

impl Residency {
    fn add(&mut self, other: Residency) {
        self.resident = self.resident.saturating_add(other.resident);
        self.swapped = self.swapped.saturating_add(other.swapped);
    }
}

fn residency(file: *mut bindings::file) -> Residency {
    let (mut resident, mut swapped) = (0u64, 0u64);
    // SAFETY: `file` is a listed, live shmem file (`T3File` invariant); the glue only
    // reads two of its counters into the locals.
    unsafe { ffi::gb_shmem_counts(file, &mut resident, &mut swapped) };
    let page = kernel::page::PAGE_SIZE as u64;
    Residency { resident: resident.saturating_mul(page), swapped: swapped.saturating_mul(page) }
}

/// Free swap space in bytes.
pub(crate) fn swap_free() -> u64 {
    // SAFETY: reads a kernel counter; no precondition.
    unsafe { ffi::gb_swap_free() }
}

/// The live buffers' shmem files, indexed by owner and buffer id: a buffer leaves in
/// O(log n), an owner's files are found without looking at the others'.
#[pin_data]
pub(crate) struct Tier3 {
    #[pin]
    files: Mutex<RBTree<Key, T3File>>,
}

impl Tier3 {
    /// An empty list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Tier3 { files <- new_mutex!(RBTree::new(), "greenboost::tier3") })
    }

    /// Lists buffer `id`'s shmem file under `owner`.
    ///
    /// # Safety
    ///
    /// `file` and `owner` stay valid until [`Tier3::remove`] is called with `owner`
    /// and `id`.
    pub(crate) unsafe fn add(&self, owner: *const ProcEntry, id: u64, file: *mut bindings::file) -> Result {
        self.files.lock().try_create_and_insert((owner as usize, id), T3File { file }, GFP_KERNEL)?;
        Ok(())
    }

    /// Forgets buffer `id` of `owner` (a no-op if it was never listed).
    pub(crate) fn remove(&self, owner: *const ProcEntry, id: u64) {
        self.files.lock().remove(&(owner as usize, id));
    }

    /// Resident and swapped bytes over all buffers (the kernel changes them on its own,
    /// so each file is asked).
    pub(crate) fn totals(&self) -> Residency {
        let mut sum = Residency::default();
        for f in self.files.lock().values() {
            sum.add(residency(f.file));
        }
        sum
    }

    /// Resident and swapped bytes of `owner`'s buffers.
    pub(crate) fn of_owner(&self, owner: *const ProcEntry) -> Residency {
        let mut sum = Residency::default();
        let mut files = self.files.lock();
        let mut cursor = files.cursor_lower_bound(&(owner as usize, 0));
        while let Some(at) = cursor {
            let (key, f) = at.current();
            if key.0 != owner as usize {
                break;
            }
            sum.add(residency(f.file));
            cursor = at.move_next();
        }
        sum
    }

    /// The most T3 bytes there may be now: what the swap can take (its free space
    /// plus `swapped`, what T3 already has there: `totals().swapped`), within
    /// `t3_cap_mb`.
    pub(crate) fn limit(shared: &Shared, swapped: u64) -> u64 {
        let room = swap_free().saturating_add(swapped);
        match shared.limits().t3_cap {
            Some(cap) => cap.min(room),
            None => room,
        }
    }

    /// RAM that writing T3 pages out would give back now: those in RAM, as far as the
    /// free swap takes them. Asked before every fresh T2 chunk, so the list is walked
    /// only while some bytes are in T3 (admitted before a demote copies, so a buffer
    /// being demoted counts).
    pub(crate) fn pushable(&self, shared: &Shared) -> u64 {
        if shared.counters.t3_used.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Pages pinned for an importer or a kernel mapping cannot be written out.
        let pinned = shared.counters.t3_pinned.load(Ordering::Relaxed);
        self.totals().resident.saturating_sub(pinned).min(swap_free())
    }

    /// Reserves `size` T3 bytes for a buffer of `owner` and `user` (a T3 ALLOC or a move
    /// to T3): ENOMEM when T3 would exceed [`Tier3::limit`], or the user's T3 bytes
    /// `uid_t3_cap_mb` (by default half of that limit).
    pub(crate) fn admit(&self, shared: &Shared, owner: &ProcEntry, user: &UserShare, size: u64) -> Result {
        // The free swap alone (no T3 bytes counted in swap) is a lower bound of the
        // limit that needs no walk of the files: only an ALLOC it refuses asks them.
        Self::admit_within(shared, user, size, Self::limit(shared, 0))
            .or_else(|_| Self::admit_within(shared, user, size, Self::limit(shared, self.totals().swapped)))?;
        let c = &shared.counters;
        util::raise_peak(&c.t3_peak, c.t3_used.load(Ordering::Relaxed));
        owner.t3_used.fetch_add(size, Ordering::Relaxed);
        Ok(())
    }

    /// Adds `size` to the module's and `user`'s T3 bytes if they stay within `limit`
    /// and the user's share of it (`uid_t3_cap_mb`, by default half): ENOMEM.
    fn admit_within(shared: &Shared, user: &UserShare, size: u64, limit: u64) -> Result {
        let c = &shared.counters;
        c.t3_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(size).filter(|total| *total <= limit)
            })
            .map_err(|_| ENOMEM)?;
        // `Some(0)`: no per-user T3 cap, which `users::charge` reads as no limit.
        let user_cap = shared.limits().uid_t3_cap.unwrap_or(limit / 2);
        if let Err(e) = users::charge(&user.t3_used, size, user_cap) {
            c.t3_used.fetch_sub(size, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    /// Gives back what [`Tier3::admit`] reserved.
    pub(crate) fn unadmit(shared: &Shared, owner: &ProcEntry, user: &UserShare, size: u64) {
        shared.counters.t3_used.fetch_sub(size, Ordering::Relaxed);
        users::uncharge(&user.t3_used, size);
        owner.t3_used.fetch_sub(size, Ordering::Relaxed);
    }
}
