// SPDX-License-Identifier: GPL-2.0
//! greenboost.ko: pinned system-RAM buffers (tier T2) for GPU programs, exported as
//! DMA-BUFs through `/dev/greenboost`.
//!
//! A buffer is a list of physically contiguous 2 MiB blocks of pages (lower orders only
//! when memory is fragmented) that never come from ZONE_MOVABLE or CMA, so that a mapping
//! of them can be pinned long-term (cuMemHostRegister). The pool keeps a cache of
//! pre-zeroed 2 MiB pages refilled in the background; pages come back zeroed before
//! anyone else sees them. A watchdog watches available RAM against a safety reserve.
//!
//! Files: see the map at the top of kmod/README.md (what each holds, what it may
//! import; `scripts/check-layers.py kmod` checks it). This root only declares the
//! modules, the `module!` entry and load/unload; the module state is in [`state`].
//! Locks: see "Lock order" in kmod/README.md, the one place it is written down.

use core::sync::atomic::Ordering;
use kernel::prelude::*;

// The one ABI definition, shared with userspace; the module uses only part of it.
#[path = "../abi/src/greenboost_abi.rs"]
#[allow(dead_code, unreachable_pub)]
mod abi;
mod admission;
mod backing;
mod buffer;
mod chunks;
mod device;
mod entry;
mod glue_ffi;
mod held;
mod memlock;
mod mover;
mod pins;
mod pool;
mod pressure;
mod proclist;
mod procs;
mod refusal;
mod reserve;
mod shared;
mod shmem;
mod state;
mod stats;
mod tier3;
mod users;
mod util;

use crate::glue_ffi as ffi;
use crate::shared::{Shared, MIB};
use crate::state::State;

module! {
    type: GreenBoost,
    name: "greenboost",
    author: "GreenBoost developers",
    description: "Pinned system-RAM tier (T2) for GPU programs, exported as DMA-BUFs",
    license: "GPL",
}

/// The module instance.
struct GreenBoost {
    state: Pin<KBox<State>>,
}

impl kernel::Module for GreenBoost {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let (shared, total) = Shared::at_load();
        let state = KBox::pin_init(State::new(shared), GFP_KERNEL)?;
        // SAFETY: `gb_mem_available` only reads kernel counters; no precondition.
        state.shared.counters.free_ram.store(unsafe { ffi::gb_mem_available() }, Ordering::Relaxed);
        // SAFETY: `state` is pinned in a `KBox` owned by the returned module instance
        // (or dropped on the error paths below, each after `unpublish`); `drop`
        // unpublishes it after stopping every C entry point.
        unsafe { state::publish(&state) };

        // SAFETY: `gb_sysfs_create` has no precondition; the sysfs files it creates call
        // into `state()`, published above.
        let ret = unsafe { ffi::gb_sysfs_create() };
        if ret != 0 {
            state::unpublish();
            return Err(Error::from_errno(ret));
        }
        // SAFETY: `gb_shrinker_register` has no precondition; the shrinker calls into
        // `state()`, published above.
        let ret = unsafe { ffi::gb_shrinker_register() };
        if ret != 0 {
            // SAFETY: the sysfs files were created above and nothing else removes them;
            // removal waits for running show/store calls.
            unsafe { ffi::gb_sysfs_remove() };
            state::unpublish();
            return Err(Error::from_errno(ret));
        }
        // SAFETY: `gb_misc_register` has no precondition; the device's file ops call
        // into `state()`, published above.
        let ret = unsafe { ffi::gb_misc_register() };
        if ret != 0 {
            // SAFETY: the shrinker and the sysfs files were registered above and nothing
            // else removes them; both removals wait for running calls.
            unsafe {
                ffi::gb_shrinker_unregister();
                ffi::gb_sysfs_remove();
            }
            state::unpublish();
            return Err(Error::from_errno(ret));
        }
        let limits = state.shared.limits();
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
            state.shared.counters.free_ram.load(Ordering::Relaxed) / MIB,
        );
        // SAFETY: `gb_watchdog_kick` queues the glue's static delayed work item, which
        // calls into `state()`, published above; `drop` cancels it before unpublishing.
        unsafe { ffi::gb_watchdog_kick(0) };
        // SAFETY: `gb_refill_kick` queues the glue's static work item, which calls into
        // `state()`, published above; `drop` cancels it before unpublishing.
        unsafe { ffi::gb_refill_kick() };
        Ok(GreenBoost { state })
    }
}

impl Drop for GreenBoost {
    fn drop(&mut self) {
        self.state.shared.stopping.store(true, Ordering::Release);
        // SAFETY: the device was registered in `init`. No file is open (each holds a
        // module reference), so after this no file op runs.
        unsafe { ffi::gb_misc_deregister() };
        // SAFETY: the sysfs files were created in `init`; removal waits for running
        // show/store calls, and none starts afterwards.
        unsafe { ffi::gb_sysfs_remove() };
        // SAFETY: the shrinker was registered in `init`; freeing it waits for running
        // scans, and none starts afterwards.
        unsafe { ffi::gb_shrinker_unregister() };
        // SAFETY: `gb_works_cancel` has no precondition; since `stopping` is set, the
        // cancelled work items do not requeue themselves or each other.
        unsafe { ffi::gb_works_cancel() };
        // No buffer is alive either (each dma-buf holds a module reference); chunks that
        // outlived theirs are left to their other holders.
        self.state.held.drain(&self.state.shared, &self.state.procs, &self.state.users);
        self.state.pool().drain();
        stats::log_report(&self.state, "unloading: final");
        state::unpublish();
    }
}
