// SPDX-License-Identifier: GPL-2.0
//! greenboost.ko: pinned system-RAM buffers (tier T2) for GPU programs, exported as
//! DMA-BUFs through `/dev/greenboost`.
//!
//! A buffer is a list of compound pages (2 MiB, order 9, lower orders only when memory
//! is fragmented) that never come from ZONE_MOVABLE or CMA, so that a userspace mapping
//! of them can be pinned long-term (cuMemHostRegister). The pool keeps a cache of
//! pre-zeroed 2 MiB pages refilled in the background; pages come back zeroed before
//! anyone else sees them. A watchdog watches available RAM against a safety reserve.
//!
//! Layout: [`device`] (the misc device and its ioctls), [`buffer`] (DMA-BUF ops),
//! [`pool`] (pages and cache), [`procs`] (per-process accounting), [`stats`] (sysfs,
//! dmesg, watchdog, eventfds). The C glue (`glue.c`) holds only ops tables, module
//! parameters, work items and wrappers of static-inline C APIs.
//!
//! # Lock order
//!
//! The module has three locks and never holds two of them at once:
//! `State::procs` (registry of per-process entries), `State::cache` (pre-zeroed and
//! to-be-zeroed pages) and `State::eventfds` (pressure eventfd registrations). Counters
//! are atomics read without locks. Callbacks from C (dma-buf core, sysfs, workqueue)
//! may hold their own locks (the dma-buf reservation lock around vmap, the mmap lock
//! around mmap); none of ours is held when calling back into code that takes them.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

// The one ABI definition, shared with userspace; the module uses only part of it.
#[path = "../abi/src/greenboost_abi.rs"]
#[allow(dead_code, unreachable_pub)]
mod abi;
mod buffer;
mod device;
mod glue_ffi;
mod pool;
mod procs;
mod stats;
mod util;

use glue_ffi as ffi;

module! {
    type: GreenBoost,
    name: "greenboost",
    author: "GreenBoost developers",
    description: "Pinned system-RAM tier (T2) for GPU programs, exported as DMA-BUFs",
    license: "GPL",
}

const MIB: u64 = 1 << 20;

/// Module-wide counters, all lock-free.
#[derive(Default)]
pub(crate) struct Counters {
    /// T2 bytes held by live buffers (reserved before the pages are allocated).
    pub(crate) t2_used: AtomicU64,
    /// Highest `t2_used`.
    pub(crate) t2_peak: AtomicU64,
    /// Bytes held by the cache, zeroed or waiting to be zeroed.
    pub(crate) t2_cached: AtomicU64,
    /// Of `t2_cached`, the bytes already zeroed.
    pub(crate) t2_clean: AtomicU64,
    /// Live buffers.
    pub(crate) buffers: AtomicU64,
    /// Successful ALLOCs since load.
    pub(crate) allocs: AtomicU64,
    /// ALLOCs refused with ENOMEM since load.
    pub(crate) alloc_failures: AtomicU64,
    /// Buffer pages that were still referenced elsewhere (a long-term pin outliving the
    /// buffer) when the buffer died: dropped to the kernel instead of being reused.
    pub(crate) pinned_on_release: AtomicU64,
    /// MemAvailable in bytes at the last watchdog tick.
    pub(crate) free_ram: AtomicU64,
}

/// Module-wide state, shared by the device, the dma-buf callbacks, sysfs and the work
/// items.
///
/// # Invariants
///
/// Published through [`STATE`] from the end of a successful `init` until the start of
/// `drop`; `drop` unpublishes it only after every C entry point into it has stopped.
#[pin_data]
pub(crate) struct State {
    /// Set when the module starts unloading: work items stop rescheduling.
    pub(crate) stopping: AtomicBool,
    /// `pool_cap_mb` resolved at load, used when the parameter is later set to 0.
    pub(crate) auto_cap: u64,
    /// `reserve_mb` resolved at load, used when the parameter is later set below 0.
    pub(crate) auto_reserve: u64,
    /// Lock-free counters.
    pub(crate) counters: Counters,
    /// 1 while available RAM is below the reserve.
    pub(crate) pressure: AtomicBool,
    /// Next buffer id (ids start at 1 and are never reused while loaded).
    pub(crate) next_buffer_id: AtomicU64,
    /// Next device-file id, to find a file's eventfd registrations.
    pub(crate) next_file_id: AtomicU64,
    /// Rate limit of ALLOC refusal messages.
    pub(crate) refusal_log_limit: util::RateLimit,
    /// Rate limit of pressure-crossing messages: their own, so that a burst of refusals
    /// never hides the crossing that explains it.
    pub(crate) pressure_log_limit: util::RateLimit,
    /// Rate limit of on-demand reports.
    pub(crate) report_limit: util::RateLimit,
    /// Pre-zeroed cache.
    #[pin]
    pub(crate) cache: Mutex<pool::Cache>,
    /// Per-process entries.
    #[pin]
    pub(crate) procs: Mutex<KVec<Arc<procs::ProcEntry>>>,
    /// Pressure eventfd registrations.
    #[pin]
    pub(crate) eventfds: Mutex<KVec<stats::EventfdReg>>,
}

/// The published [`State`], or null outside `init`..`drop`.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

/// The module state, for C entry points.
///
/// Every C entry point (file and dma-buf ops, sysfs, work items) can only run while the
/// module is loaded and registered: files and dma-bufs hold a module reference,
/// `drop` removes sysfs and cancels the work items before unpublishing.
pub(crate) fn state() -> &'static State {
    let ptr = STATE.load(Ordering::Acquire);
    // SAFETY: see above: `ptr` was published by `init` from a pinned `KBox` that lives
    // until `drop` unpublishes it, which happens after every caller has stopped.
    unsafe { &*ptr }
}

/// Current module parameters, with the load-time defaults applied.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// Most T2 bytes in buffers plus cache.
    pub(crate) cap: u64,
    /// Available RAM below which ALLOC is refused.
    pub(crate) reserve: u64,
    /// Most T2 bytes per user, 0: none.
    pub(crate) uid_cap: u64,
    /// Cache target in bytes, a multiple of the chunk size, at most `cap`.
    pub(crate) cache_target: u64,
    /// Watchdog period.
    pub(crate) watchdog_ms: u64,
}

impl State {
    /// Reads the module parameters now (root may change them at any time).
    pub(crate) fn limits(&self) -> Limits {
        let mut p = ffi::Params::default();
        // SAFETY: `p` is a valid, writable `struct gb_params`.
        unsafe { ffi::gb_params_read(&mut p) };
        let cap = if p.pool_cap_mb == 0 {
            self.auto_cap
        } else {
            p.pool_cap_mb.saturating_mul(MIB)
        };
        let reserve = match u64::try_from(p.reserve_mb) {
            Ok(mb) => mb.saturating_mul(MIB),
            Err(_) => self.auto_reserve,
        };
        let cache = p.cache_mb.saturating_mul(MIB).min(cap);
        Limits {
            cap,
            reserve,
            uid_cap: p.uid_cap_mb.saturating_mul(MIB),
            cache_target: cache - cache % abi::GB_CHUNK_SIZE,
            watchdog_ms: p.watchdog_ms.clamp(100, 60_000),
        }
    }
}

/// The module instance.
struct GreenBoost {
    state: Pin<KBox<State>>,
}

impl kernel::Module for GreenBoost {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        // SAFETY: plain reads of kernel counters.
        let total = unsafe { ffi::gb_total_ram() };
        let auto_cap = (total / 2) / MIB * MIB;
        let auto_reserve = (total / 32).clamp(64 * MIB, 1024 * MIB);
        let mut p = ffi::Params::default();
        // SAFETY: `p` is a valid, writable `struct gb_params`.
        unsafe { ffi::gb_params_read(&mut p) };
        let cap_mb = if p.pool_cap_mb == 0 { auto_cap / MIB } else { p.pool_cap_mb };
        let reserve_mb = if p.reserve_mb < 0 {
            (auto_reserve / MIB) as i64
        } else {
            p.reserve_mb
        };
        // SAFETY: plain stores into the module's parameters; no other user yet.
        unsafe { ffi::gb_params_set_defaults(cap_mb, reserve_mb) };

        let state = KBox::pin_init(
            pin_init!(State {
                stopping: AtomicBool::new(false),
                auto_cap,
                auto_reserve,
                counters: Counters::default(),
                pressure: AtomicBool::new(false),
                next_buffer_id: AtomicU64::new(1),
                next_file_id: AtomicU64::new(1),
                refusal_log_limit: util::RateLimit::new(5000, 5),
                pressure_log_limit: util::RateLimit::new(5000, 5),
                report_limit: util::RateLimit::new(5000, 10),
                cache <- new_mutex!(pool::Cache::new(), "greenboost::cache"),
                procs <- new_mutex!(KVec::new(), "greenboost::procs"),
                eventfds <- new_mutex!(KVec::new(), "greenboost::eventfds"),
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: (for the free RAM reading) plain read of a kernel counter.
        state
            .counters
            .free_ram
            .store(unsafe { ffi::gb_mem_available() }, Ordering::Relaxed);
        STATE.store(
            (&*state as *const State).cast_mut(),
            Ordering::Release,
        );

        // SAFETY: the glue's sysfs group calls into `state()`, published above.
        let ret = unsafe { ffi::gb_sysfs_create() };
        if ret != 0 {
            STATE.store(core::ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(ret));
        }
        // SAFETY: the device's file ops call into `state()`, published above.
        let ret = unsafe { ffi::gb_misc_register() };
        if ret != 0 {
            // SAFETY: created above, nothing else removes it.
            unsafe { ffi::gb_sysfs_remove() };
            STATE.store(core::ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(ret));
        }
        let limits = state.limits();
        pr_info!(
            "loaded: /dev/greenboost (ABI {}), T2 cap {} MiB, reserve {} MiB, per-user cap {}, \
             cache {} MiB of 2 MiB pages, watchdog {} ms, RAM {} MiB, available {} MiB\n",
            abi::GB_ABI_VERSION,
            limits.cap / MIB,
            limits.reserve / MIB,
            util::MibOrNone(limits.uid_cap),
            limits.cache_target / MIB,
            limits.watchdog_ms,
            total / MIB,
            state.counters.free_ram.load(Ordering::Relaxed) / MIB,
        );
        // SAFETY: the work items call into `state()`, published above.
        unsafe {
            ffi::gb_watchdog_kick(0);
            ffi::gb_refill_kick();
        }
        Ok(GreenBoost { state })
    }
}

impl Drop for GreenBoost {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::Release);
        // SAFETY: registered in `init`. No file is open (each holds a module reference),
        // so after this no file op runs.
        unsafe { ffi::gb_misc_deregister() };
        // SAFETY: created in `init`; removal waits for running show/store calls.
        unsafe { ffi::gb_sysfs_remove() };
        // SAFETY: `stopping` is set, so the cancelled work items do not requeue.
        unsafe { ffi::gb_works_cancel() };
        // No buffer is alive either (each dma-buf holds a module reference).
        pool::drain(&self.state);
        stats::log_report(&self.state, "unloading: final");
        STATE.store(core::ptr::null_mut(), Ordering::Release);
    }
}
