// SPDX-License-Identifier: GPL-2.0
//! Admission of new T2 pages, for an ALLOC and for a move to T2, and of a T3 buffer's
//! pages pinned in RAM for an importer: the pool cap, the per-user cap, the caller's
//! memlock limit and the RAM reserve, then the pages; and the release of both.
//!
//! Locks: the T3 list lock (the reserve's figures) and the cache lock (the pages), one
//! after the other, never under a backing lock (see "Lock order" in kmod/README.md);
//! the per-user figures are atomics.

use core::sync::atomic::Ordering;
use kernel::prelude::*;

use crate::glue_ffi::Chunk;
use crate::memlock::Memlock;
use crate::pool::{self, Placement};
use crate::procs::ProcEntry;
use crate::refusal::{Denied, Refusal};
use crate::reserve::Claim;
use crate::state::State;
use crate::users::{self, UserShare};

/// What an admitted ALLOC holds before its pages exist.
struct Reservation<'a> {
    /// Bytes of dirty cache pages the allocation must take (and zero) to stay within
    /// the cap (see [`pool::dirty_claim`]).
    dirty_bytes: u64,
    /// The claim of its fresh pages against the RAM reserve (see `reserve.rs`).
    claim: Claim<'a>,
    /// Its RLIMIT_MEMLOCK charge (see `memlock.rs`).
    memlock: Memlock,
}

/// Where the pages of a reservation come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// New chunks (an ALLOC, a move to T2): cached pages first, then fresh ones.
    Chunks,
    /// A T3 buffer's own pages, kept in RAM for an importer: none from the cache.
    T3Pin,
}

/// Reserves `size` against the pool cap, `user`'s per-user cap, the caller's memlock
/// limit and the RAM reserve, counted in the module's, `owner`'s and `user`'s figures;
/// refused by the first of them it does not fit.
fn reserve<'a>(
    state: &'a State,
    owner: &ProcEntry,
    user: &UserShare,
    size: u64,
    source: Source,
) -> Result<Reservation<'a>, Refusal> {
    let limits = state.shared.limits();
    let c = &state.shared.counters;
    // Pages kept alive by other holders past their buffers (see `held.rs`) stay in the
    // caps of the user who allocated them, and so limit that user, nobody else.
    let mut dirty_bytes = 0;
    c.t2.used
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            if source == Source::T3Pin {
                // Cached pages make room for it below (they are never in its way).
                return used.checked_add(size).filter(|total| *total <= limits.cap);
            }
            let cached = c.t2_cached.load(Ordering::Relaxed);
            let clean = c.t2_clean.load(Ordering::Relaxed);
            dirty_bytes = pool::dirty_claim(used, size, cached, clean, limits.cap)?;
            used.checked_add(size)
        })
        .map_err(|used| Refusal::PoolCap { used, cached: c.t2_cached.load(Ordering::Relaxed), cap: limits.cap })?;
    let unreserve = || c.t2.unreserve(size);
    if users::charge(&user.t2_used, size, limits.uid_cap).is_err() {
        unreserve();
        return Err(Refusal::UserCap { used: user.t2_used.load(Ordering::Relaxed), cap: limits.uid_cap });
    }
    let unreserve = || {
        users::uncharge(&user.t2_used, size);
        unreserve();
    };
    // The glue's only failure is the limit's ENOMEM.
    let Ok(memlock) = Memlock::charge(size) else {
        unreserve();
        return Err(Refusal::Memlock);
    };
    // Pages the cache cannot supply come out of available RAM: a pinned T3 page read
    // back from swap does, and one in RAM stops being room the reserve counts on.
    let fresh = match source {
        Source::Chunks => size.saturating_sub(c.t2_clean.load(Ordering::Relaxed).saturating_add(dirty_bytes)),
        Source::T3Pin => size,
    };
    let claim = match Claim::admit(&state.shared, &state.tier3, limits.reserve, fresh) {
        Ok(claim) => claim,
        Err(refusal) => {
            unreserve();
            // Let the watchdog see the crossing now rather than at its next tick.
            state.watchdog.kick_for_refusal(&state.shared);
            return Err(refusal);
        }
    };
    owner.t2.reserve(size);
    if source == Source::T3Pin {
        state.pool().trim_to_cap(limits.cap);
    }
    Ok(Reservation { dirty_bytes, claim, memlock })
}

/// `size` bytes of new T2 pages for a buffer of `owner` and `user`: admitted (see
/// [`reserve`]) and allocated at `placement`, with their memlock charge, accounted
/// (committed, peaks raised) in `Counters::t2`, `owner.t2` and `user.t2_used`. On
/// failure nothing stays reserved.
pub(crate) fn take_t2(
    state: &State,
    owner: &ProcEntry,
    user: &UserShare,
    size: u64,
    placement: Placement,
) -> Result<(KVVec<Chunk>, Memlock), Denied> {
    let mut r = reserve(state, owner, user, size, Source::Chunks)?;
    match state.pool().alloc_chunks(size, placement, r.dirty_bytes, &mut r.claim) {
        Ok(chunks) => {
            // Peaks count what was really allocated, never a refused or killed request,
            // nor other ALLOCs' reservations.
            state.shared.counters.t2.commit(size);
            owner.t2.commit(size);
            Ok((chunks, r.memlock))
        }
        Err(e) => {
            unreserve_t2(state, owner, user, size);
            Err(e)
        }
    }
}

/// The RAM of a T3 buffer of `owner` and `user` about to be pinned for an importer or
/// a kernel mapping (`size` bytes), admitted as T2 pages are ([`reserve`], nothing
/// from the cache) and committed: pinned RAM within the same limits. The returned
/// memlock charge and the figures are given back with [`release_t2`] at unpin.
pub(crate) fn admit_t3_pin(state: &State, owner: &ProcEntry, user: &UserShare, size: u64) -> Result<Memlock, Refusal> {
    let r = reserve(state, owner, user, size, Source::T3Pin)?;
    state.shared.counters.t2.commit(size);
    owner.t2.commit(size);
    // The claim goes with `r`: from here the pinned pages count in `t3_pinned`, no
    // longer as room for T2 (`Tier3::pushable`).
    state.shared.counters.t3_pinned.fetch_add(size, Ordering::Relaxed);
    Ok(r.memlock)
}

/// Gives back what [`admit_t3_pin`] took (with its memlock charge, dropped by the
/// caller) once the pages are unpinned.
pub(crate) fn release_t3_pin(state: &State, owner: &ProcEntry, user: &UserShare, size: u64) {
    state.shared.counters.t3_pinned.fetch_sub(size, Ordering::Relaxed);
    release_t2(state, owner, user, size);
}

/// Committed T2 bytes of `owner` and `user` are gone (freed, or unpinned).
pub(crate) fn release_t2(state: &State, owner: &ProcEntry, user: &UserShare, size: u64) {
    state.shared.counters.t2.release(size);
    owner.t2.release(size);
    users::uncharge(&user.t2_used, size);
}

/// A reservation that never got its pages.
fn unreserve_t2(state: &State, owner: &ProcEntry, user: &UserShare, size: u64) {
    state.shared.counters.t2.unreserve(size);
    owner.t2.unreserve(size);
    users::uncharge(&user.t2_used, size);
}

/// Gives back pages [`take_t2`] took that never became a buffer's (a refused move):
/// unaccounted, uncharged (`memlock` dropped by the caller) and recycled (`exposed`:
/// written).
pub(crate) fn give_back_t2(
    state: &State,
    owner: &ProcEntry,
    user: &UserShare,
    size: u64,
    chunks: &[Chunk],
    exposed: bool,
) {
    release_t2(state, owner, user, size);
    state.pool().recycle(chunks, exposed);
}
