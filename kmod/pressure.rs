// SPDX-License-Identifier: GPL-2.0
//! Memory pressure: the free-RAM watchdog and the eventfds it signals on every
//! crossing.
//!
//! Lock: the eventfd lock ([`Watchdog`]) only; the pool's cache lock is taken by
//! [`Pool::drain`] before it, never inside it (see "Lock order" in kmod/README.md).

use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Mutex};

use crate::glue_ffi::{self as ffi, EventfdCtx};
use crate::pool::Pool;
use crate::shared::Shared;
use crate::util::{self, RateLimit, Size};

/// Most eventfds one open file may register.
const MAX_EVENTFDS_PER_FILE: usize = 64;

/// One eventfd to signal on pressure crossings.
///
/// # Invariants
///
/// `ctx` is a counted eventfd context reference, put in `drop`.
pub(crate) struct EventfdReg {
    file_id: u64,
    ctx: *mut EventfdCtx,
}

// SAFETY: the only non-`Send` field, `ctx`, is a counted reference to an eventfd
// context; `eventfd_signal` and `eventfd_ctx_put` may be called on it from any thread.
unsafe impl Send for EventfdReg {}

impl Drop for EventfdReg {
    fn drop(&mut self) {
        // SAFETY: the registration owns one reference to `ctx` (type invariant) and
        // gives it up here, once; nothing uses `ctx` after `drop`.
        unsafe { ffi::gb_eventfd_put(self.ctx) };
    }
}

/// The watchdog's own state: the pressure eventfd registrations and the rate limit of
/// its crossing messages.
#[pin_data]
pub(crate) struct Watchdog {
    /// Pressure eventfd registrations of all open files.
    #[pin]
    eventfds: Mutex<KVec<EventfdReg>>,
    /// Rate limit of pressure-crossing messages: their own, so that a burst of ALLOC
    /// refusals never hides the crossing that explains it.
    log_limit: RateLimit,
    /// Rate limit of the runs that refused ALLOCs ask for.
    refusal_kicks: RateLimit,
}

impl Watchdog {
    /// No registrations yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Watchdog {
            eventfds <- new_mutex!(KVec::new(), "greenboost::eventfds"),
            log_limit: RateLimit::new(5000, 5),
            refusal_kicks: RateLimit::new(100, 1),
        })
    }

    /// An ALLOC was refused because of the reserve: runs the watchdog now, so that the
    /// crossing is seen without waiting for the next tick. Not when pressure is on
    /// already (there is no crossing to see), and at most once per 100 ms, so that a
    /// burst of refusals does not keep re-running it.
    pub(crate) fn kick_for_refusal(&self, shared: &Shared) {
        if !shared.pressure.load(Ordering::Relaxed) && self.refusal_kicks.allow() {
            kick(shared, 0);
        }
    }

    /// Registers eventfd `fd` for the device file `file_id`. It is signalled at once if
    /// memory is already under pressure, then on every crossing.
    pub(crate) fn register(&self, shared: &Shared, file_id: u64, fd: i32) -> Result {
        let mut ctx = core::ptr::null_mut();
        // SAFETY: `ctx` is a local the glue writes only on success; `fd` is any integer
        // (looked up in the caller's fd table). On success we own one reference.
        let ret = unsafe { ffi::gb_eventfd_get(fd, &mut ctx) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        let reg = EventfdReg { file_id, ctx };
        let mut regs = self.eventfds.lock();
        let mine = regs.iter().filter(|r| r.file_id == file_id);
        if mine.clone().any(|r| r.ctx == ctx) {
            drop(regs);
            return Err(EEXIST);
        }
        if mine.count() >= MAX_EVENTFDS_PER_FILE {
            drop(regs);
            return Err(ENOSPC);
        }
        if shared.pressure.load(Ordering::Relaxed) {
            // SAFETY: `ctx` is a valid counted reference, owned by `reg`, which lives
            // until the end of this function at least.
            unsafe { ffi::gb_eventfd_signal(ctx) };
        }
        regs.push(reg, GFP_KERNEL).map_err(|_| ENOMEM)
    }

    /// Drops every registration of a device file that is being released.
    pub(crate) fn unregister_file(&self, file_id: u64) {
        let mut removed = KVec::new();
        let mut regs = self.eventfds.lock();
        let mut i = 0;
        while i < regs.len() {
            if regs.get(i).is_some_and(|r| r.file_id == file_id) {
                if let Some(reg) = util::vec_swap_remove(&mut regs, i) {
                    // If this push fails the registration is put right here instead.
                    let _ = removed.push(reg, GFP_KERNEL);
                }
            } else {
                i += 1;
            }
        }
        drop(regs);
        drop(removed);
    }

    fn signal_all(&self) {
        for reg in self.eventfds.lock().iter() {
            // SAFETY: `reg.ctx` is a valid counted reference owned by the registration,
            // which cannot be dropped while the lock is held.
            unsafe { ffi::gb_eventfd_signal(reg.ctx) };
        }
    }

    /// One watchdog tick: reads available RAM and handles pressure crossings. Pressure
    /// starts below the reserve and ends above the reserve plus 1/8 of it (at least
    /// 16 MiB), so that a system hovering at the line does not flap.
    fn tick(&self, pool: Pool<'_>) {
        let shared = pool.shared;
        shared.counters.watchdog_ticks.fetch_add(1, Ordering::Relaxed);
        let limits = shared.limits();
        // SAFETY: `gb_mem_available` only reads kernel counters; no precondition.
        let available = unsafe { ffi::gb_mem_available() };
        shared.counters.free_ram.store(available, Ordering::Relaxed);
        let was = shared.pressure.load(Ordering::Relaxed);
        let hysteresis = (limits.reserve / 8).max(16 << 20);
        let now = if was { available < limits.reserve.saturating_add(hysteresis) } else { available < limits.reserve };
        if now != was {
            shared.pressure.store(now, Ordering::Relaxed);
            if now {
                pool.drain();
            }
            if self.log_limit.allow() {
                if now {
                    pr_warn!(
                        "memory pressure: available {} below reserve {}; ALLOC refused, cache \
                         released (T2 used {})\n",
                        Size(available),
                        Size(limits.reserve),
                        Size(shared.counters.t2.used.load(Ordering::Relaxed)),
                    );
                } else {
                    pr_info!("memory pressure over: available {}, reserve {}\n", Size(available), Size(limits.reserve));
                }
            }
            self.signal_all();
        }
        if !now && shared.counters.t2_cached.load(Ordering::Relaxed) != limits.cache_target {
            pool.kick_refill();
        }
    }

    /// The watchdog work item: one tick, then the next one queued a period later.
    pub(crate) fn run(&self, pool: Pool<'_>) {
        self.tick(pool);
        kick(pool.shared, pool.shared.limits().watchdog_ms);
    }
}

/// Runs the watchdog after `delay_ms` (0: now) unless the module is unloading.
pub(crate) fn kick(shared: &Shared, delay_ms: u64) {
    if !shared.stopping.load(Ordering::Acquire) {
        // SAFETY: `gb_watchdog_kick` queues the glue's static delayed work item, whose
        // function calls into the published state; `drop` cancels it only after setting
        // `stopping`, so no item is queued after the state is gone.
        unsafe { ffi::gb_watchdog_kick(delay_ms.try_into().unwrap_or(0)) };
    }
}
