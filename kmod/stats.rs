// SPDX-License-Identifier: GPL-2.0
//! Statistics: the module-wide snapshot (ioctl, sysfs, dmesg), the sysfs `stats` text
//! (totals only, see `proclist.rs` for the per-process rows) and the dmesg reports.
//!
//! Locks: the registry lock while listing processes, the T3 list lock for the T3
//! figures, one after the other (see "Lock order" in kmod/README.md).

use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::abi::{self, GbPoolStats, GbT3Stats};
use crate::glue_ffi as ffi;
use crate::procs::{Comm, ProcEntry};
use crate::refusal::Refusal;
use crate::state::State;
use crate::tier3::{self, Tier3};
use crate::users::UserShare;
use crate::util::{Size, SliceWriter};

/// Most per-process lines in a dmesg report.
const MAX_REPORT_PROCS: usize = 32;

/// Module-wide figures, as ioctl, sysfs and dmesg report them.
pub(crate) fn pool_snapshot(state: &State) -> GbPoolStats {
    let c = &state.shared.counters;
    GbPoolStats {
        t2_used: c.t2.used.load(Ordering::Relaxed),
        t2_cached: c.t2_cached.load(Ordering::Relaxed),
        t2_cap: state.shared.limits().cap,
        t2_peak: c.t2.peak.load(Ordering::Relaxed),
        t1_reported: state.procs.t1_total(),
        t3_used: c.t3_used.load(Ordering::Relaxed),
        buffers: c.buffers.load(Ordering::Relaxed),
        allocs: c.allocs.load(Ordering::Relaxed),
        alloc_failures: c.alloc_failures.load(Ordering::Relaxed),
        free_ram: c.free_ram.load(Ordering::Relaxed),
        pressure: u32::from(state.shared.pressure.load(Ordering::Relaxed)),
        pad0: 0,
    }
}

/// The T3 figures (ioctl, sysfs, dmesg).
pub(crate) fn t3_snapshot(state: &State) -> GbT3Stats {
    let c = &state.shared.counters;
    let residency = state.tier3.totals();
    GbT3Stats {
        t3_used: c.t3_used.load(Ordering::Relaxed),
        t3_resident: residency.resident,
        t3_swapped: residency.swapped,
        t3_buffers: c.t3_buffers.load(Ordering::Relaxed),
        t3_cap: Tier3::limit(&state.shared, residency.swapped),
        t3_peak: c.t3_peak.load(Ordering::Relaxed),
        swap_free: tier3::swap_free(),
        moves_to_t3: c.moves_to_t3.load(Ordering::Relaxed),
        moves_to_t2: c.moves_to_t2.load(Ordering::Relaxed),
        moved_bytes: c.moved_bytes.load(Ordering::Relaxed),
        move_ns: c.move_ns.load(Ordering::Relaxed),
        move_refusals: c.move_refusals.load(Ordering::Relaxed),
    }
}

/// Logs an ALLOC refused for `user`'s buffer count (rate-limited).
pub(crate) fn log_buffer_limit(state: &State, user: &UserShare, limit: u64) {
    if state.refusal_log_limit.allow() {
        pr_info!(
            "ALLOC refused (ENOMEM): uid {} has {} live buffers (uid_buffers {})\n",
            user.kuid,
            user.buffers.load(Ordering::Relaxed),
            limit,
        );
    }
}

/// Logs a T3 ALLOC refused by the T3 limits (rate-limited).
pub(crate) fn log_t3_refusal(state: &State, size: u64) {
    if state.refusal_log_limit.allow() {
        let t = t3_snapshot(state);
        pr_info!(
            "T3 ALLOC of {} refused (ENOMEM): T3 used {} of {} (free swap {}; T3 needs swap)\n",
            Size(size),
            Size(t.t3_used),
            Size(t.t3_cap),
            Size(t.swap_free),
        );
    }
}

/// Logs an ALLOC refused by `why` (rate-limited), with the pool as it is now.
pub(crate) fn log_t2_refusal(state: &State, size: u64, why: Refusal) {
    if state.refusal_log_limit.allow() {
        let s = pool_snapshot(state);
        pr_info!(
            "ALLOC of {} refused (ENOMEM) by {} (now: T2 used {} of cap {}, available {}, pressure {})\n",
            Size(size),
            why,
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
    let t = t3_snapshot(state);
    let limits = state.shared.limits();
    pr_info!(
        "{} stats: T1 {} reported | T2 {} used (peak {}), {} cached, cap {} | T3 {} used \
         ({} in RAM, {} in swap), cap {} | available {}, reserve {}, pressure {} | {} \
         buffers, {} allocs, {} refused\n",
        why,
        Size(s.t1_reported),
        Size(s.t2_used),
        Size(s.t2_peak),
        Size(s.t2_cached),
        Size(s.t2_cap),
        Size(t.t3_used),
        Size(t.t3_resident),
        Size(t.t3_swapped),
        Size(t.t3_cap),
        Size(s.free_ram),
        Size(limits.reserve),
        if s.pressure != 0 { "on" } else { "off" },
        s.buffers,
        s.allocs,
        s.alloc_failures,
    );
    // The entries are taken under the registry lock and printed after it, since their
    // T3 figures need the T3 list lock (never two of ours at once).
    let mut entries: KVec<Arc<ProcEntry>> = KVec::new();
    let total = state.procs.with_slots(|slots| {
        for slot in slots.iter().take(MAX_REPORT_PROCS) {
            // On no memory for the list the report has fewer lines, nothing worse.
            let _ = entries.push(slot.entry_arc(), GFP_KERNEL);
        }
        slots.len()
    });
    for e in entries.iter() {
        let t3 = state.tier3.of_owner(&**e as *const ProcEntry);
        pr_info!(
            "  pid {} ({}) uid {}: T1 {}, T2 {} (peak {}), T3 {} ({} in RAM, {} in swap) in {} buffers\n",
            e.pid_nr,
            Comm(e.comm()),
            e.kuid.load(Ordering::Relaxed),
            Size(e.t1_used.load(Ordering::Relaxed)),
            Size(e.t2.used.load(Ordering::Relaxed)),
            Size(e.t2.peak.load(Ordering::Relaxed)),
            Size(e.t3_used.load(Ordering::Relaxed)),
            Size(t3.resident),
            Size(t3.swapped),
            e.buffers.load(Ordering::Relaxed),
        );
    }
    if total > entries.len() {
        pr_info!("  ... and {} more processes\n", total - entries.len());
    }
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
    let t = t3_snapshot(state);
    writeln!(out, "t3_used_bytes {}", t.t3_used)?;
    writeln!(out, "t3_resident_bytes {}", t.t3_resident)?;
    writeln!(out, "t3_swapped_bytes {}", t.t3_swapped)?;
    writeln!(out, "t3_buffers {}", t.t3_buffers)?;
    writeln!(out, "t3_cap_bytes {}", t.t3_cap)?;
    writeln!(out, "t3_peak_bytes {}", t.t3_peak)?;
    writeln!(out, "swap_free_bytes {}", t.swap_free)?;
    writeln!(out, "t3_moves_to_t3 {}", t.moves_to_t3)?;
    writeln!(out, "t3_moves_to_t2 {}", t.moves_to_t2)?;
    writeln!(out, "t3_moved_bytes {}", t.moved_bytes)?;
    writeln!(out, "t3_move_ns {}", t.move_ns)?;
    writeln!(out, "t3_move_refusals {}", t.move_refusals)?;
    writeln!(out, "buffers {}", s.buffers)?;
    writeln!(out, "allocs {}", s.allocs)?;
    writeln!(out, "alloc_failures {}", s.alloc_failures)?;
    writeln!(out, "pinned_on_release {}", c.pinned_on_release.load(Ordering::Relaxed))?;
    writeln!(out, "chunks_allocated {}", c.chunks_allocated.load(Ordering::Relaxed))?;
    writeln!(out, "held_bytes {}", c.held_bytes.load(Ordering::Relaxed))?;
    writeln!(out, "t3_pinned_bytes {}", c.t3_pinned.load(Ordering::Relaxed))?;
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
