// SPDX-License-Identifier: GPL-2.0
//! Statistics: the module-wide snapshot (ioctl, sysfs, dmesg), the sysfs `stats` text
//! (totals only, see `proclist.rs` for the per-process rows) and the dmesg reports.
//!
//! Lock: the registry lock while listing processes, nothing else (see "Lock order" in
//! kmod/README.md).

use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

use crate::abi::{self, GbPoolStats};
use crate::glue_ffi as ffi;
use crate::procs::Comm;
use crate::state::State;
use crate::util::{Size, SliceWriter};

/// Most per-process lines in a dmesg report.
const MAX_REPORT_PROCS: usize = 32;

/// Module-wide figures, as ioctl, sysfs and dmesg report them.
pub(crate) fn pool_snapshot(state: &State) -> GbPoolStats {
    let c = &state.shared.counters;
    GbPoolStats {
        t2_used: c.t2_used.load(Ordering::Relaxed),
        t2_cached: c.t2_cached.load(Ordering::Relaxed),
        t2_cap: state.shared.limits().cap,
        t2_peak: c.t2_peak.load(Ordering::Relaxed),
        t1_reported: state.procs.t1_total(),
        t3_used: 0,
        buffers: c.buffers.load(Ordering::Relaxed),
        allocs: c.allocs.load(Ordering::Relaxed),
        alloc_failures: c.alloc_failures.load(Ordering::Relaxed),
        free_ram: c.free_ram.load(Ordering::Relaxed),
        pressure: u32::from(state.shared.pressure.load(Ordering::Relaxed)),
        pad0: 0,
    }
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
            // SAFETY: `gb_mem_available` only reads kernel counters; no precondition.
            Size(unsafe { ffi::gb_mem_available() }),
            if s.pressure != 0 { "on" } else { "off" },
        );
    }
}

/// Logs the tier totals and the per-process lines, prefixed by `why`.
pub(crate) fn log_report(state: &State, why: &str) {
    let s = pool_snapshot(state);
    let limits = state.shared.limits();
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
    state.procs.with_slots(|slots| {
        for e in slots.iter().take(MAX_REPORT_PROCS).map(|s| s.entry()) {
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
        if slots.len() > MAX_REPORT_PROCS {
            pr_info!("  ... and {} more processes\n", slots.len() - MAX_REPORT_PROCS);
        }
    });
}

/// The sysfs `report` store: logs the stats to dmesg (rate-limited: 10 per 5 s).
pub(crate) fn report(state: &State) {
    if state.report_limit.allow() {
        log_report(state, "report:");
    }
}

/// The sysfs `stats` show: fills `page` and returns the bytes written.
pub(crate) fn show(state: &State, page: &mut [u8]) -> usize {
    let mut out = SliceWriter::new(page);
    // A full page ends the text early; everything written so far is valid.
    let _ = format_stats(state, &mut out);
    out.len()
}

/// Writes the sysfs `stats` text (format in kmod/README.md) into `out`.
fn format_stats(state: &State, out: &mut SliceWriter<'_>) -> core::fmt::Result {
    let s = pool_snapshot(state);
    let limits = state.shared.limits();
    let c = &state.shared.counters;
    writeln!(out, "abi_version {}", abi::GB_ABI_VERSION)?;
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
    writeln!(out, "chunks_allocated {}", c.chunks_allocated.load(Ordering::Relaxed))?;
    writeln!(out, "held_bytes {}", c.held_bytes.load(Ordering::Relaxed))?;
    writeln!(out, "watchdog_ticks {}", c.watchdog_ticks.load(Ordering::Relaxed))?;
    writeln!(out, "free_ram_bytes {}", s.free_ram)?;
    writeln!(out, "reserve_bytes {}", limits.reserve)?;
    writeln!(out, "uid_cap_bytes {}", limits.uid_cap)?;
    writeln!(out, "cache_target_bytes {}", limits.cache_target)?;
    writeln!(out, "pressure {}", s.pressure)?;
    // Totals only: the file is world-readable, so who uses the module (pid, uid,
    // command, usage) is listed through the device (`proclist.rs`), never here.
    let processes = state.procs.with_slots(|slots| slots.len());
    writeln!(out, "processes {}", processes)
}
