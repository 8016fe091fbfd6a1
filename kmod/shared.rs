// SPDX-License-Identifier: GPL-2.0
//! What every layer reads without a lock: the module-wide counters, the `stopping` and
//! `pressure` flags, and the module parameters turned into current [`Limits`].
//!
//! Takes no lock (see "Lock order" in kmod/README.md).

use core::sync::atomic::{AtomicBool, AtomicU64};

use crate::abi;
use crate::glue_ffi as ffi;
use crate::util::T2Usage;

/// One MiB, the unit of the module parameters.
pub(crate) const MIB: u64 = 1 << 20;

/// Module-wide counters, all lock-free.
#[derive(Default)]
pub(crate) struct Counters {
    /// T2 bytes of live buffers (reserved before the pages are allocated) and of dead
    /// buffers' chunks still referenced elsewhere (`held_bytes`), with their peak.
    pub(crate) t2: T2Usage,
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
    /// Chunks put into buffers since load (from the cache or fresh): lets a test count
    /// what an ALLOC did after its caller was killed.
    pub(crate) chunks_allocated: AtomicU64,
    /// Buffer pages that were still referenced elsewhere (a long-term pin outliving the
    /// buffer) when the buffer died: dropped to the kernel instead of being reused.
    pub(crate) pinned_on_release: AtomicU64,
    /// Fresh bytes that ALLOCs in progress have claimed against the RAM reserve and not
    /// allocated yet (see `reserve.rs`).
    pub(crate) in_flight: AtomicU64,
    /// Bytes of dead buffers' chunks still referenced elsewhere, kept charged (see
    /// `held.rs`); part of `t2`.
    pub(crate) held_bytes: AtomicU64,
    /// When kernel reclaim last took pages from the cache (`gb_now_ms`, 0: never);
    /// the refill worker waits a while after it.
    pub(crate) shrunk_at_ms: AtomicU64,
    /// Watchdog ticks since load (periodic and kicked).
    pub(crate) watchdog_ticks: AtomicU64,
    /// MemAvailable in bytes at the last watchdog tick.
    pub(crate) free_ram: AtomicU64,
    /// Bytes of live buffers in T3 (reserved before the buffer exists or moves).
    pub(crate) t3_used: AtomicU64,
    /// Highest `t3_used`.
    pub(crate) t3_peak: AtomicU64,
    /// Live buffers in T3.
    pub(crate) t3_buffers: AtomicU64,
    /// Bytes of T3 buffers whose pages are pinned in RAM for an importer or a kernel
    /// mapping (part of `t2`: pinned RAM, within the same limits).
    pub(crate) t3_pinned: AtomicU64,
    /// Moves T2 -> T3 and T3 -> T2 since load.
    pub(crate) moves_to_t3: AtomicU64,
    pub(crate) moves_to_t2: AtomicU64,
    /// Bytes those moves copied, and the time the copies took (ns).
    pub(crate) moved_bytes: AtomicU64,
    pub(crate) move_ns: AtomicU64,
    /// Moves refused (EBUSY, ENOMEM) since load.
    pub(crate) move_refusals: AtomicU64,
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
    /// Most T3 bytes (`t3_cap_mb`), `None`: as much as the swap holds.
    pub(crate) t3_cap: Option<u64>,
    /// Most T3 bytes per user (`uid_t3_cap_mb`), `None`: half of what T3 may hold now;
    /// `Some(0)`: no per-user T3 cap.
    pub(crate) uid_t3_cap: Option<u64>,
    /// Most live buffers per user (`uid_buffers`), 0: no limit.
    pub(crate) uid_buffers: u64,
}

/// The lock-free part of the module state.
pub(crate) struct Shared {
    /// Set when the module starts unloading: work items stop rescheduling.
    pub(crate) stopping: AtomicBool,
    /// 1 while available RAM is below the reserve.
    pub(crate) pressure: AtomicBool,
    /// `pool_cap_mb` resolved at load, used when the parameter is later set to 0.
    pub(crate) auto_cap: u64,
    /// `reserve_mb` resolved at load, used when the parameter is later set below 0.
    pub(crate) auto_reserve: u64,
    /// `uid_cap_mb` resolved at load, used when the parameter is later set below 0.
    pub(crate) auto_uid_cap: u64,
    /// Lock-free counters.
    pub(crate) counters: Counters,
}

/// A snapshot of the module parameters.
fn read_params() -> ffi::Params {
    let mut p = ffi::Params::default();
    // SAFETY: `p` is a valid, writable `struct gb_params` (same layout, `#[repr(C)]`)
    // that lives across the call; the glue only stores into its fields.
    unsafe { ffi::gb_params_read(&mut p) };
    p
}

impl Shared {
    /// Resolves the load-time defaults (half of RAM for the cap, RAM/32 clamped to
    /// 64..1024 MiB for the reserve, half of the cap per user), writes them into the
    /// parameters left at their "automatic" values, and returns the state with the
    /// total RAM in bytes.
    pub(crate) fn at_load() -> (Self, u64) {
        // SAFETY: `gb_total_ram` only reads a kernel counter; no precondition.
        let total = unsafe { ffi::gb_total_ram() };
        let auto_cap = (total / 2) / MIB * MIB;
        let auto_reserve = (total / 32).clamp(64 * MIB, 1024 * MIB);
        let p = read_params();
        let cap_mb = if p.pool_cap_mb == 0 { auto_cap / MIB } else { p.pool_cap_mb };
        let reserve_mb = if p.reserve_mb < 0 { (auto_reserve / MIB) as i64 } else { p.reserve_mb };
        // One user gets half of the pool by default, so that one user cannot take
        // every other user's share.
        let auto_uid_cap = cap_mb / 2 * MIB;
        let uid_cap_mb = if p.uid_cap_mb < 0 { (auto_uid_cap / MIB) as i64 } else { p.uid_cap_mb };
        // SAFETY: plain `WRITE_ONCE` stores into three module parameters; they are
        // plain integers, so a concurrent write by root through sysfs races harmlessly.
        unsafe { ffi::gb_params_set_defaults(cap_mb, reserve_mb, uid_cap_mb) };
        let shared = Shared {
            stopping: AtomicBool::new(false),
            pressure: AtomicBool::new(false),
            auto_cap,
            auto_reserve,
            auto_uid_cap,
            counters: Counters::default(),
        };
        (shared, total)
    }

    /// Reads the module parameters now (root may change them at any time).
    pub(crate) fn limits(&self) -> Limits {
        let p = read_params();
        let cap = if p.pool_cap_mb == 0 { self.auto_cap } else { p.pool_cap_mb.saturating_mul(MIB) };
        let reserve = match u64::try_from(p.reserve_mb) {
            Ok(mb) => mb.saturating_mul(MIB),
            Err(_) => self.auto_reserve,
        };
        let cache = p.cache_mb.saturating_mul(MIB).min(cap);
        Limits {
            cap,
            reserve,
            uid_cap: match u64::try_from(p.uid_cap_mb) {
                Ok(mb) => mb.saturating_mul(MIB),
                Err(_) => self.auto_uid_cap,
            },
            cache_target: cache - cache % abi::GB_CHUNK_SIZE,
            watchdog_ms: p.watchdog_ms.clamp(100, 60_000),
            t3_cap: u64::try_from(p.t3_cap_mb).ok().map(|mb| mb.saturating_mul(MIB)),
            uid_t3_cap: u64::try_from(p.uid_t3_cap_mb).ok().map(|mb| mb.saturating_mul(MIB)),
            uid_buffers: p.uid_buffers,
        }
    }
}
