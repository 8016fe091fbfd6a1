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
use kernel::sync::{new_mutex, Mutex};

use crate::glue_ffi as ffi;
use crate::procs::ProcEntry;
use crate::shared::Shared;
use crate::util;

/// One live buffer's shmem file.
///
/// # Invariants
///
/// `file` is the buffer's shmem file and `owner` its owner's entry; both stay valid
/// while the entry is in the list (the buffer removes it before letting either go).
struct T3File {
    id: u64,
    file: *mut bindings::file,
    owner: *const ProcEntry,
}

// SAFETY: two pointers only read (statistics of the file, the owner's address for
// comparison) under the list lock, valid while listed (type invariant).
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

/// The list of live buffers' shmem files.
#[pin_data]
pub(crate) struct Tier3 {
    #[pin]
    files: Mutex<KVec<T3File>>,
}

impl Tier3 {
    /// An empty list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Tier3 { files <- new_mutex!(KVec::new(), "greenboost::tier3") })
    }

    /// Lists buffer `id`'s shmem file.
    ///
    /// # Safety
    ///
    /// `file` and `owner` stay valid until [`Tier3::remove`] is called with `id`.
    pub(crate) unsafe fn add(&self, id: u64, file: *mut bindings::file, owner: *const ProcEntry) -> Result {
        self.files.lock().push(T3File { id, file, owner }, GFP_KERNEL)?;
        Ok(())
    }

    /// Forgets buffer `id` (a no-op if it was never listed).
    pub(crate) fn remove(&self, id: u64) {
        let mut files = self.files.lock();
        if let Some(index) = files.iter().position(|f| f.id == id) {
            let _ = util::vec_swap_remove(&mut files, index);
        }
    }

    /// Resident and swapped bytes over all buffers.
    pub(crate) fn totals(&self) -> Residency {
        let mut sum = Residency::default();
        for f in self.files.lock().iter() {
            sum.add(residency(f.file));
        }
        sum
    }

    /// Resident and swapped bytes of `owner`'s buffers.
    pub(crate) fn of_owner(&self, owner: *const ProcEntry) -> Residency {
        let mut sum = Residency::default();
        for f in self.files.lock().iter().filter(|f| f.owner == owner) {
            sum.add(residency(f.file));
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
        self.totals().resident.min(swap_free())
    }

    /// Reserves `size` T3 bytes for `owner` (a T3 ALLOC or a move to T3): ENOMEM when
    /// T3 would exceed [`Tier3::limit`].
    pub(crate) fn admit(&self, shared: &Shared, owner: &ProcEntry, size: u64) -> Result {
        let limit = Self::limit(shared, self.totals().swapped);
        let c = &shared.counters;
        c.t3_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(size).filter(|total| *total <= limit)
            })
            .map_err(|_| ENOMEM)?;
        util::raise_peak(&c.t3_peak, c.t3_used.load(Ordering::Relaxed));
        owner.t3_used.fetch_add(size, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back what [`Tier3::admit`] reserved.
    pub(crate) fn unadmit(shared: &Shared, owner: &ProcEntry, size: u64) {
        shared.counters.t3_used.fetch_sub(size, Ordering::Relaxed);
        owner.t3_used.fetch_sub(size, Ordering::Relaxed);
    }
}
