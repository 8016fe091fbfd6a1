// SPDX-License-Identifier: GPL-2.0
//! Statistics (sysfs `stats`, dmesg reports), the free-RAM watchdog and the pressure
//! eventfds.
//!
//! Locks: `State::procs` while listing processes, `State::eventfds` while signalling;
//! never both, and no other lock of ours inside either.

use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::ffi::c_char;
use kernel::prelude::*;

use crate::device::pool_snapshot;
use crate::ffi::{self, EventfdCtx};
use crate::procs::Comm;
use crate::util::{self, SliceWriter};
use crate::{pool, state, State};

/// Most eventfds one open file may register.
const MAX_EVENTFDS_PER_FILE: usize = 64;

/// Most per-process lines in a dmesg report.
const MAX_REPORT_PROCS: usize = 32;

/// A byte count shown with a binary unit (B, KiB, MiB, GiB with one decimal).
struct Size(u64);

impl core::fmt::Display for Size {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.0;
        if b >= 1 << 30 {
            write!(f, "{}.{} GiB", b >> 30, ((b & ((1 << 30) - 1)) * 10) >> 30)
        } else if b >= 1 << 20 {
            write!(f, "{} MiB", b >> 20)
        } else if b >= 1 << 10 {
            write!(f, "{} KiB", b >> 10)
        } else {
            write!(f, "{} B", b)
        }
    }
}

/// One eventfd to signal on pressure crossings.
///
/// # Invariants
///
/// `ctx` is a counted eventfd context reference, put in `drop`.
pub(crate) struct EventfdReg {
    file_id: u64,
    ctx: *mut EventfdCtx,
}

// SAFETY: an eventfd context may be signalled and put from any thread.
unsafe impl Send for EventfdReg {}

impl Drop for EventfdReg {
    fn drop(&mut self) {
        // SAFETY: we own one reference (type invariant).
        unsafe { ffi::gb_eventfd_put(self.ctx) };
    }
}

/// Registers eventfd `fd` for the device file `file_id`. It is signalled at once if
/// memory is already under pressure, then on every crossing.
pub(crate) fn eventfd_register(state: &State, file_id: u64, fd: i32) -> Result {
    let mut ctx = core::ptr::null_mut();
    // SAFETY: looks `fd` up in the caller's table; on success we own a reference.
    let ret = unsafe { ffi::gb_eventfd_get(fd, &mut ctx) };
    if ret != 0 {
        return Err(Error::from_errno(ret));
    }
    let reg = EventfdReg { file_id, ctx };
    let mut regs = state.eventfds.lock();
    let mine = regs.iter().filter(|r| r.file_id == file_id);
    if mine.clone().any(|r| r.ctx == ctx) {
        drop(regs);
        return Err(EEXIST);
    }
    if mine.count() >= MAX_EVENTFDS_PER_FILE {
        drop(regs);
        return Err(ENOSPC);
    }
    if state.pressure.load(Ordering::Relaxed) {
        // SAFETY: `ctx` is a valid reference owned by `reg`.
        unsafe { ffi::gb_eventfd_signal(ctx) };
    }
    regs.push(reg, GFP_KERNEL).map_err(|_| ENOMEM)
}

/// Drops every registration of a device file that is being released.
pub(crate) fn eventfd_unregister_file(state: &State, file_id: u64) {
    let mut removed = KVec::new();
    let mut regs = state.eventfds.lock();
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

fn eventfd_signal_all(state: &State) {
    for reg in state.eventfds.lock().iter() {
        // SAFETY: `reg.ctx` is a valid reference owned by the registration.
        unsafe { ffi::gb_eventfd_signal(reg.ctx) };
    }
}

/// Runs the watchdog after `delay_ms` (0: now) unless the module is unloading.
pub(crate) fn kick_watchdog(state: &State, delay_ms: u64) {
    if !state.stopping.load(Ordering::Acquire) {
        // SAFETY: queues the glue's work item, cancelled in `drop` after `stopping`.
        unsafe { ffi::gb_watchdog_kick(delay_ms.try_into().unwrap_or(0)) };
    }
}

/// One watchdog tick: reads available RAM and handles pressure crossings. Pressure
/// starts below the reserve and ends above the reserve plus 1/8 of it (at least
/// 16 MiB), so that a system hovering at the line does not flap.
fn watchdog_tick(state: &State) {
    let limits = state.limits();
    // SAFETY: plain read of a kernel counter.
    let available = unsafe { ffi::gb_mem_available() };
    state.counters.free_ram.store(available, Ordering::Relaxed);
    let was = state.pressure.load(Ordering::Relaxed);
    let hysteresis = (limits.reserve / 8).max(16 << 20);
    let now = if was {
        available < limits.reserve.saturating_add(hysteresis)
    } else {
        available < limits.reserve
    };
    if now != was {
        state.pressure.store(now, Ordering::Relaxed);
        if now {
            pool::drain(state);
        }
        if state.pressure_log_limit.allow() {
            if now {
                pr_warn!(
                    "memory pressure: available {} below reserve {}; ALLOC refused, cache \
                     released (T2 used {})\n",
                    Size(available),
                    Size(limits.reserve),
                    Size(state.counters.t2_used.load(Ordering::Relaxed)),
                );
            } else {
                pr_info!(
                    "memory pressure over: available {}, reserve {}\n",
                    Size(available),
                    Size(limits.reserve),
                );
            }
        }
        eventfd_signal_all(state);
    }
    if !now && state.counters.t2_cached.load(Ordering::Relaxed) != limits.cache_target {
        pool::kick_refill(state);
    }
}

/// The watchdog work item.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_watchdog() {
    let state = state();
    watchdog_tick(state);
    kick_watchdog(state, state.limits().watchdog_ms);
}

/// The refill work item.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_refill() {
    pool::refill(state());
}

/// Logs an ALLOC refusal (rate-limited).
pub(crate) fn log_alloc_failure(state: &State, size: u64) {
    if state.refusal_log_limit.allow() {
        let s = pool_snapshot(state);
        pr_info!(
            "ALLOC of {} refused (ENOMEM): T2 used {} of cap {}, available {}, pressure {}\n",
            Size(size),
            Size(s.t2_used),
            Size(s.t2_cap),
            // SAFETY: plain read of a kernel counter.
            Size(unsafe { ffi::gb_mem_available() }),
            if s.pressure != 0 { "on" } else { "off" },
        );
    }
}

/// Logs the tier totals and the per-process lines, prefixed by `why`.
pub(crate) fn log_report(state: &State, why: &str) {
    let s = pool_snapshot(state);
    let limits = state.limits();
    pr_info!(
        "{} stats: T1 {} reported | T2 {} used (peak {}), {} cached, cap {} | T3 {} | \
         available {}, reserve {}, pressure {} | {} buffers, {} allocs, {} refused\n",
        why,
        Size(s.t1_reported),
        Size(s.t2_used),
        Size(s.t2_peak),
        Size(s.t2_cached),
        Size(s.t2_cap),
        Size(s.t3_used),
        Size(s.free_ram),
        Size(limits.reserve),
        if s.pressure != 0 { "on" } else { "off" },
        s.buffers,
        s.allocs,
        s.alloc_failures,
    );
    let procs = state.procs.lock();
    for e in procs.iter().take(MAX_REPORT_PROCS) {
        pr_info!(
            "  pid {} ({}) uid {}: T1 {}, T2 {} (peak {}) in {} buffers\n",
            e.pid_nr,
            Comm(e.comm()),
            e.kuid.load(Ordering::Relaxed),
            Size(e.t1_used.load(Ordering::Relaxed)),
            Size(e.t2_used.load(Ordering::Relaxed)),
            Size(e.t2_peak.load(Ordering::Relaxed)),
            e.buffers.load(Ordering::Relaxed),
        );
    }
    if procs.len() > MAX_REPORT_PROCS {
        pr_info!("  ... and {} more processes\n", procs.len() - MAX_REPORT_PROCS);
    }
}

/// Writes the sysfs `stats` text (format in kmod/README.md) into `out`.
fn format_stats(state: &State, out: &mut SliceWriter<'_>) -> core::fmt::Result {
    let s = pool_snapshot(state);
    let limits = state.limits();
    let c = &state.counters;
    writeln!(out, "abi_version {}", crate::abi::GB_ABI_VERSION)?;
    writeln!(out, "t1_reported_bytes {}", s.t1_reported)?;
    writeln!(out, "t2_used_bytes {}", s.t2_used)?;
    writeln!(out, "t2_cached_bytes {}", s.t2_cached)?;
    writeln!(out, "t2_zeroed_bytes {}", c.t2_clean.load(Ordering::Relaxed))?;
    writeln!(out, "t2_cap_bytes {}", s.t2_cap)?;
    writeln!(out, "t2_peak_bytes {}", s.t2_peak)?;
    writeln!(out, "t3_used_bytes {}", s.t3_used)?;
    writeln!(out, "buffers {}", s.buffers)?;
    writeln!(out, "allocs {}", s.allocs)?;
    writeln!(out, "alloc_failures {}", s.alloc_failures)?;
    writeln!(out, "pinned_on_release {}", c.pinned_on_release.load(Ordering::Relaxed))?;
    writeln!(out, "free_ram_bytes {}", s.free_ram)?;
    writeln!(out, "reserve_bytes {}", limits.reserve)?;
    writeln!(out, "uid_cap_bytes {}", limits.uid_cap)?;
    writeln!(out, "cache_target_bytes {}", limits.cache_target)?;
    writeln!(out, "pressure {}", s.pressure)?;
    let procs = state.procs.lock();
    writeln!(out, "processes {}", procs.len())?;
    // Keep room for the final "procs_omitted" line.
    const TAIL: usize = 32;
    for (i, e) in procs.iter().enumerate() {
        let mut line = [0u8; 256];
        let mut w = SliceWriter::new(&mut line);
        let _ = writeln!(
            w,
            "proc pid={} uid={} t1={} t1_budget={} t2={} t2_peak={} buffers={} files={} comm={}",
            e.pid_nr,
            e.kuid.load(Ordering::Relaxed),
            e.t1_used.load(Ordering::Relaxed),
            e.t1_budget.load(Ordering::Relaxed),
            e.t2_used.load(Ordering::Relaxed),
            e.t2_peak.load(Ordering::Relaxed),
            e.buffers.load(Ordering::Relaxed),
            e.open_files(),
            Comm(e.comm()),
        );
        let len = w.len();
        if w.full || len + TAIL > out.room() {
            return writeln!(out, "procs_omitted {}", procs.len() - i);
        }
        let text = line.get(..len).and_then(|b| core::str::from_utf8(b).ok()).unwrap_or("");
        out.write_str(text)?;
    }
    Ok(())
}

/// sysfs `stats` show: fills `buf` (`len` bytes) and returns the bytes written.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_stats_show(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: sysfs hands us a writable page of `len` bytes, ours during the call.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    let mut out = SliceWriter::new(page);
    // A full page ends the text early; everything written so far is valid.
    let _ = format_stats(state(), &mut out);
    out.len()
}

/// sysfs `report` store: logs the stats to dmesg (rate-limited: 10 per 5 s).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_report() {
    let state = state();
    if state.report_limit.allow() {
        log_report(state, "report:");
    }
}

