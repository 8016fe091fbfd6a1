// SPDX-License-Identifier: GPL-2.0
//! Per-user running totals, what the per-user limits compare: T2 bytes (`uid_cap_mb`),
//! T3 bytes (`uid_t3_cap_mb`) and live buffers (`uid_buffers`) of each user (real uid
//! in the initial user namespace). They are sums kept up to date by every charge and
//! release, never recomputed by walking processes or buffers.
//!
//! A buffer counts under the user that allocated it (its real uid at the ALLOC) for its
//! whole life, wherever its fd goes, as its `RLIMIT_MEMLOCK` charge does; chunks kept
//! past its death (`held.rs`) and its T3 pages pinned for an importer count there too.
//!
//! Lock: the users lock ([`Users`], `greenboost::users`) only, to find, create or drop a
//! user's share, never together with another of ours (see "Lock order" in
//! kmod/README.md); the figures are atomics.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{new_mutex, Arc, Mutex};

use crate::glue_ffi as ffi;

/// One user's totals.
pub(crate) struct UserShare {
    /// Real uid in the initial user namespace.
    pub(crate) kuid: u32,
    /// T2 bytes of its buffers (reserved before the pages exist), of its held chunks and
    /// of its T3 buffers while pinned for an importer or a kernel mapping.
    pub(crate) t2_used: AtomicU64,
    /// T3 bytes of its buffers (reserved before the buffer exists or moves).
    pub(crate) t3_used: AtomicU64,
    /// Its live buffers.
    pub(crate) buffers: AtomicU64,
}

/// Adds `amount` to `figure` unless the total would pass `limit` (0: no limit): ENOMEM.
pub(crate) fn charge(figure: &AtomicU64, amount: u64, limit: u64) -> Result {
    figure
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            now.checked_add(amount).filter(|total| limit == 0 || *total <= limit)
        })
        .map(|_| ())
        .map_err(|_| ENOMEM)
}

/// Takes back what [`charge`] added.
pub(crate) fn uncharge(figure: &AtomicU64, amount: u64) {
    figure.fetch_sub(amount, Ordering::Relaxed);
}

/// A user's share with the number of buffers (live, or dead with held chunks) that
/// hold it.
///
/// # Invariants
///
/// `holders` is at least 1 while the slot is in [`Users::shares`]; it is read and
/// written under the users lock only.
struct UserSlot {
    share: Arc<UserShare>,
    holders: usize,
}

/// Every user with a live buffer (or held chunks), by kuid.
#[pin_data]
pub(crate) struct Users {
    #[pin]
    shares: Mutex<RBTree<u32, UserSlot>>,
}

impl Users {
    /// No user yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Users {
            shares <- new_mutex!(RBTree::new(), "greenboost::users"),
        })
    }

    /// The calling user's share, held once more (once per buffer, given back with
    /// [`Users::release`]).
    pub(crate) fn acquire(&self) -> Result<Arc<UserShare>> {
        // SAFETY: `gb_current_kuid` only reads the caller's credentials; no precondition.
        let kuid = unsafe { ffi::gb_current_kuid() };
        let mut shares = self.shares.lock();
        if let Some(slot) = shares.get_mut(&kuid) {
            slot.holders += 1;
            return Ok(slot.share.clone());
        }
        let share = Arc::new(
            UserShare { kuid, t2_used: AtomicU64::new(0), t3_used: AtomicU64::new(0), buffers: AtomicU64::new(0) },
            GFP_KERNEL,
        )?;
        shares.try_create_and_insert(kuid, UserSlot { share: share.clone(), holders: 1 }, GFP_KERNEL)?;
        Ok(share)
    }

    /// Drops one hold of `share`; the user leaves the tree with its last.
    pub(crate) fn release(&self, share: Arc<UserShare>) {
        let mut shares = self.shares.lock();
        let Some(slot) = shares.get_mut(&share.kuid) else {
            return;
        };
        slot.holders -= 1;
        if slot.holders == 0 {
            let removed = shares.remove(&share.kuid);
            drop(shares);
            drop(removed);
        }
    }
}
