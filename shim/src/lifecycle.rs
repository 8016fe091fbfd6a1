//! The process's life under the shim: initialisation when the library is loaded, the
//! fork handlers (built from the lock order's table, `sys::lock_order`), and the summary
//! at exit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend;
use crate::engine::tier_thread;
use crate::launch::{tensor_maps, texture_objects};
use crate::memory::budget;
use crate::memory::movable;
use crate::memory::registry;
use crate::memory::release;
use crate::memory::t2;
use crate::memory::vmm;
use crate::rules::config;
use crate::sys::lock::ForkLock;
use crate::sys::lock_order::{AtFork, Rank, LOCK_ORDER};
use crate::sys::log::{self, Mib};
use crate::sys::phase;
use crate::sys::publish;
use crate::sys::stats::{self, STATS};

/// Runs from `.init_array` when the shim is loaded, before the program's `main`.
extern "C" fn initialise() {
    let config = config::load(|name, value, instead| {
        warn!("{}={:?} is not valid; using {}", name, std::str::from_utf8(value).unwrap_or("(not UTF-8)"), instead);
    });
    log::set_level(config.log);
    config::report_environment();
    if config.disabled {
        phase::disable();
        info!("disabled by GREENBOOST_DISABLE");
        return;
    }
    // Registered once per loaded copy of the shim, whatever runs the constructor again.
    static HANDLERS_REGISTERED: AtomicBool = AtomicBool::new(false);
    if !HANDLERS_REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: plain `extern "C"` functions without captured state, valid for the
        // life of the process (the shim is never unloaded).
        unsafe {
            libc::atexit(summary_at_exit);
            libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child));
        }
    }
    phase::activate();
    if config.give_back {
        // bench/results/longctx-2026-12-05.md: an HF prefill on an H100 died with it on.
        warn!(
            "GREENBOOST_GIVE_BACK=on is experimental: one program died with an illegal memory access with it \
             (see the README); leave it off for work that matters"
        );
    }
    debug!("loaded: {:?}", config);
}

#[used]
#[link_section = ".init_array"]
static INITIALISE: extern "C" fn() = initialise;

/// The lock of `rank` that the fork handlers take, if the table says they do.
fn fork_lock(rank: Rank) -> Option<&'static dyn ForkLock> {
    match rank {
        Rank::Registry => Some(registry::fork_lock()),
        Rank::Vmm => Some(vmm::fork_lock()),
        Rank::T2Cache => Some(t2::fork_lock()),
        Rank::Pending => Some(release::fork_lock()),
        Rank::Live => Some(movable::fork_lock()),
        Rank::TierFlock | Rank::TierMoves | Rank::Scratch | Rank::MovableState | Rank::WholeAlgorithms => None,
    }
}

/// The locks the fork handlers take (`AtFork::Held` in the lock order), in rank order.
fn fork_locks() -> impl DoubleEndedIterator<Item = &'static dyn ForkLock> {
    LOCK_ORDER.iter().filter(|row| matches!(row.at_fork, AtFork::Held)).filter_map(|row| fork_lock(row.rank))
}

/// pthread_atfork prepare: every lock the table holds across a fork is taken, in rank
/// order, so that the child does not inherit one mid-update.
extern "C" fn before_fork() {
    fork_locks().for_each(|lock| lock.hold_for_fork());
}

/// pthread_atfork parent: releases what `before_fork` took, in reverse order.
extern "C" fn after_fork_in_parent() {
    for lock in fork_locks().rev() {
        // SAFETY: `before_fork` took every lock on this thread, the one that forked.
        unsafe { lock.release_in_parent() };
    }
}

/// pthread_atfork child: the locks are reset (see `lock`). A child of a process that
/// already used CUDA cannot use CUDA (the driver answers errors), so the shim steps
/// aside and lets the real functions answer; its records stay. A child forked before
/// any CUDA use keeps the shim active.
extern "C" fn after_fork_in_child() {
    for lock in fork_locks().rev() {
        // SAFETY: `before_fork` took every lock on the thread that forked, which is the
        // only thread of the child.
        unsafe { lock.reset_in_child() };
    }
    t2::forget_cache_in_child();
    release::restart_reclaimer_in_child();
    tier_thread::restart_in_child();
    publish::forget_in_child();
    tensor_maps::reset_in_child();
    texture_objects::reset_in_child();
    if stats::load(&STATS.t1_allocs) != 0 || stats::load(&STATS.t2_allocs) != 0 {
        phase::step_aside_after_fork();
    }
    stats::start_afresh_in_child();
    SUMMARY_PRINTED.store(false, Ordering::Relaxed);
}

/// Whether this process printed its summary (a forked child starts with false).
static SUMMARY_PRINTED: AtomicBool = AtomicBool::new(false);

extern "C" fn summary_at_exit() {
    publish::withdraw();
    // A child that stepped aside after fork has no VRAM of its own to report.
    if phase::active() {
        budget::final_report();
    }
    let stats = stats::snapshot(backend::summary());
    if stats.t1_allocs == 0 && stats.t2_allocs == 0 {
        return;
    }
    if SUMMARY_PRINTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    info!(
        "summary: pid {}: peak T1 {}, peak T2 {}; allocations T1 {}, T2 {} ({} after a VRAM out-of-memory, {} for the VRAM headroom, {} VMM on host), split {}; GEMMs staged {} ({}, {} in slices, {} shapes unsliced as slices differed), reading T2 in place {} ({}); out-of-memory returned {}; backend {}",
        pid,
        Mib(stats.t1_peak),
        Mib(stats.t2_peak),
        stats.t1_allocs,
        stats.t2_allocs,
        stats.t2_after_vram_oom,
        stats.headroom_spills,
        stats.vmm_host,
        stats.split_allocs,
        stats.gemm_staged,
        Mib(stats.gemm_staged_bytes),
        stats.gemm_sliced,
        stats.gemm_slices_differed,
        stats.gemm_in_place,
        Mib(stats.gemm_in_place_bytes),
        stats.oom_returned,
        backend::name(),
    );
    if stats.gemm_ahead != 0 || stats.gemm_ahead_dropped != 0 {
        info!(
            "summary: pid {}: look-ahead staging: {} products read an operand copied while the product before ran, {} such copies dropped",
            pid,
            stats.gemm_ahead,
            stats.gemm_ahead_dropped
        );
    }
    if stats.launches != 0 || stats.graph_launches != 0 || stats.memory_ops != 0 || stats.indirect_writers != 0 {
        info!(
            "summary: pid {}: kernel launches seen {} ({} not fully read; {} timed of {} sampled: {} given up at the launch, {} whose time could not be read, {} whose time bounded nothing), {} allocations named by them; graph launches {} ({} not fully read); {} launches captured into graphs; {} host functions, {} copies and memsets (direct or in graphs); {} writers through pointers kept in device memory (pointer-array products, copies into __device__ globals)",
            pid,
            stats.launches,
            stats.launches_unread,
            stats.launches_timed,
            stats::load(&STATS.samples_started),
            stats::load(&STATS.samples_given_up),
            stats::load(&STATS.samples_unmeasured),
            stats::load(&STATS.samples_silent),
            stats.launch_namings,
            stats.graph_launches,
            stats.graphs_unread,
            stats.captured_launches,
            stats.host_funcs,
            stats.memory_ops,
            stats.indirect_writers,
        );
    }
    if stats.movable_allocs != 0 {
        info!(
            "summary: pid {}: live tiering: {} movable allocations; promoted {} in {} moves ({} ms), demoted {} in {} ({} of them to make room for hotter ones; {} ms; {} ms of it issuing); {} demoted at once for allocations while computing, which waited {} ms for it; {} of the VRAM the driver kept after moves out given back in {}; {} in VRAM at exit; VRAM the driver keeps for parts moved to T2 (used as nvidia-smi counts it, given to any allocation that finds no free VRAM): {} at exit, {} at most",
            pid,
            stats.movable_allocs,
            Mib(stats.promoted_bytes),
            stats.promotions,
            stats.promote_ns / 1_000_000,
            Mib(stats.demoted_bytes),
            stats.demotions,
            stats.swaps,
            stats.demote_ns / 1_000_000,
            stats.move_issue_ns / 1_000_000,
            Mib(stats.room_made_bytes),
            stats.room_made_ns / 1_000_000,
            Mib(stats.given_back_bytes),
            stats.give_backs,
            Mib(stats.tier_vram),
            Mib(stats.kept_vram),
            Mib(stats.kept_vram_peak),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fork_handlers_take_exactly_the_locks_the_table_holds() {
        for row in LOCK_ORDER {
            assert_eq!(fork_lock(row.rank).is_some(), matches!(row.at_fork, AtFork::Held), "{}", row.name);
        }
    }
}
