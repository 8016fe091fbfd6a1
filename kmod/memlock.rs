// SPDX-License-Identifier: GPL-2.0
//! The RLIMIT_MEMLOCK charge of a buffer's pinned pages, taken as io_uring, RDMA and
//! VFIO take theirs: on the allocating user's `locked_vm`, against the caller's
//! `RLIMIT_MEMLOCK`, skipped for a caller with `CAP_IPC_LOCK`. The charge lives with
//! the pages, not the process (a buffer outlives its allocator): the buffer holds it,
//! and chunks kept past the buffer's death (`held.rs`) keep their part.
//!
//! Takes no lock of ours.

use kernel::ffi::c_ulong;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

use kernel::bindings;

use crate::glue_ffi as ffi;

fn pages(bytes: u64) -> c_ulong {
    // A buffer is at most 1 TiB (`MAX_ALLOC`), so its page count fits.
    (bytes / PAGE_SIZE as u64) as c_ulong
}

/// Bytes charged to a user's `locked_vm`.
///
/// # Invariants
///
/// `user` is null (nothing charged: `CAP_IPC_LOCK`) or a counted `user_struct`
/// reference whose `locked_vm` holds `bytes` of ours; both are given back in `drop`.
pub(crate) struct Memlock {
    user: *mut bindings::user_struct,
    bytes: u64,
}

// SAFETY: `user` is a counted `user_struct` reference; its `locked_vm` is atomic and
// `free_uid` may run on any thread.
unsafe impl Send for Memlock {}
// SAFETY: `&Memlock` allows no access to `user` at all.
unsafe impl Sync for Memlock {}

impl Memlock {
    /// Charges `bytes` to the calling user: ENOMEM beyond `RLIMIT_MEMLOCK`.
    pub(crate) fn charge(bytes: u64) -> Result<Self> {
        let mut user = core::ptr::null_mut();
        // SAFETY: `user` is a local the glue writes (null, or a counted reference that
        // the returned value owns).
        let ret = unsafe { ffi::gb_memlock_charge(pages(bytes), &mut user) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(Memlock { user, bytes: if user.is_null() { 0 } else { bytes } })
    }

    /// Gives back `bytes` of the charge (pages that were freed).
    pub(crate) fn uncharge(&mut self, bytes: u64) {
        let bytes = bytes.min(self.bytes);
        if bytes == 0 {
            return;
        }
        // SAFETY: `user` is non-null here (`bytes` is 0 otherwise) and holds at least
        // `bytes` of our charge (type invariant).
        unsafe { ffi::gb_memlock_uncharge(self.user, pages(bytes)) };
        self.bytes -= bytes;
    }
}

impl Drop for Memlock {
    fn drop(&mut self) {
        self.uncharge(self.bytes);
        if !self.user.is_null() {
            // SAFETY: the counted reference is ours (type invariant), put once here.
            unsafe { ffi::gb_memlock_put(self.user) };
        }
    }
}
