// SPDX-License-Identifier: GPL-2.0
//! The module state: one [`State`] made at load, published for the C entry points
//! through [`state`] until unload.
//!
//! Holds the six module-wide locks (see "Lock order" in kmod/README.md) and takes
//! none of them itself.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Mutex};

use crate::held::Held;
use crate::pool::{Cache, Pool};
use crate::pressure::Watchdog;
use crate::procs::Registry;
use crate::shared::Shared;
use crate::tier3::Tier3;
use crate::users::Users;
use crate::util::RateLimit;

/// Module-wide state, shared by the device, the dma-buf callbacks, sysfs and the work
/// items.
///
/// # Invariants
///
/// Published through [`STATE`] from the end of a successful `init` until the start of
/// `drop`; `drop` unpublishes it only after every C entry point into it has stopped.
#[pin_data]
pub(crate) struct State {
    /// Counters, flags and limits, read without a lock.
    pub(crate) shared: Shared,
    /// Next buffer id (ids start at 1 and are never reused while loaded).
    pub(crate) next_buffer_id: AtomicU64,
    /// Next device-file id, to find a file's eventfd registrations.
    pub(crate) next_file_id: AtomicU64,
    /// Rate limit of ALLOC refusal messages.
    pub(crate) refusal_log_limit: RateLimit,
    /// Rate limit of on-demand reports.
    pub(crate) report_limit: RateLimit,
    /// Rate limit of the lines logged for moves between tiers.
    pub(crate) move_log_limit: RateLimit,
    /// Pre-zeroed cache (the cache lock).
    #[pin]
    pub(crate) cache: Mutex<Cache>,
    /// Per-process entries (the registry lock).
    #[pin]
    pub(crate) procs: Registry,
    /// Still-referenced chunks of dead buffers (the held lock).
    #[pin]
    pub(crate) held: Held,
    /// Pressure eventfd registrations (the eventfd lock) and the watchdog's log limit.
    #[pin]
    pub(crate) watchdog: Watchdog,
    /// Every live buffer's shmem file, for the T3 figures (the T3 list lock).
    #[pin]
    pub(crate) tier3: Tier3,
    /// Per-user totals for the per-user limits (the users lock).
    #[pin]
    pub(crate) users: Users,
}

impl State {
    /// A fresh state around the load-time `shared` figures.
    pub(crate) fn new(shared: Shared) -> impl PinInit<Self> {
        pin_init!(State {
            shared,
            next_buffer_id: AtomicU64::new(1),
            next_file_id: AtomicU64::new(1),
            refusal_log_limit: RateLimit::new(5000, 5),
            report_limit: RateLimit::new(5000, 10),
            move_log_limit: RateLimit::new(5000, 10),
            cache <- new_mutex!(Cache::new(), "greenboost::cache"),
            procs <- Registry::new(),
            held <- Held::new(),
            watchdog <- Watchdog::new(),
            tier3 <- Tier3::new(),
            users <- Users::new(),
        })
    }

    /// The pool, for one operation.
    pub(crate) fn pool(&self) -> Pool<'_> {
        Pool { shared: &self.shared, cache: &self.cache }
    }
}

/// The published [`State`], or null outside `init`..`drop`.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

/// Makes `state` the one [`state`] returns.
///
/// # Safety
///
/// `state` must stay pinned and alive until [`unpublish`] is called, and [`unpublish`]
/// must be called before it is dropped, after every C entry point that may call
/// [`state`] has stopped (files closed, dma-bufs released, sysfs removed, work items
/// cancelled).
pub(crate) unsafe fn publish(state: &State) {
    STATE.store((state as *const State).cast_mut(), Ordering::Release);
}

/// Withdraws the published state (see [`publish`]).
pub(crate) fn unpublish() {
    STATE.store(core::ptr::null_mut(), Ordering::Release);
}

/// The module state, for code reached from a C entry point.
///
/// Every C entry point (file and dma-buf ops, sysfs, work items) can only run while the
/// module is loaded and registered: files and dma-bufs hold a module reference, `drop`
/// removes sysfs and cancels the work items before unpublishing.
pub(crate) fn state() -> &'static State {
    let ptr = STATE.load(Ordering::Acquire);
    // SAFETY: `ptr` was stored by `publish`, whose contract keeps the pinned `State`
    // alive until `unpublish`, which runs only after every C entry point (the only
    // callers of this function) has stopped; so `ptr` is non-null and valid here.
    unsafe { &*ptr }
}
