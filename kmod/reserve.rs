// SPDX-License-Identifier: GPL-2.0
//! The RAM reserve for fresh pages: an ALLOC claims the fresh bytes it expects to need
//! before its chunk loop starts ([`Claim::admit`]), so that concurrent ALLOCs cannot
//! each pass the check on the same free RAM; the claim shrinks as pages are actually
//! allocated (then they show in available RAM itself), and the check is repeated before
//! every fresh chunk ([`Claim::before_fresh`]), since available RAM also falls for
//! reasons of its own.
//!
//! Available RAM is `MemAvailable` plus the T3 pages in RAM that the free swap can
//! take (`Tier3::pushable`): the kernel writes those out when the fresh pages need
//! their room, and never anything else of ours (kmod/README.md, "T3 and swap").
//!
//! Takes one atomic counter (`Counters::in_flight`) and, to sum the T3 pages, the T3
//! list lock (never with another of ours).

use core::sync::atomic::Ordering;
use kernel::prelude::*;

use crate::glue_ffi as ffi;
use crate::refusal::Refusal;
use crate::shared::Shared;
use crate::tier3::Tier3;

/// Fresh bytes one ALLOC has claimed against the reserve and not allocated yet.
///
/// # Invariants
///
/// `held` bytes of `Counters::in_flight` belong to this claim; they are given back as
/// pages are allocated ([`Claim::taken`]) or when the claim is dropped.
pub(crate) struct Claim<'a> {
    shared: &'a Shared,
    tier3: &'a Tier3,
    reserve: u64,
    held: u64,
}

impl<'a> Claim<'a> {
    /// Claims `fresh` bytes: refused unless available RAM minus every claim in flight
    /// stays at or above `reserve` with them. A `reserve` of 0 disables the check.
    pub(crate) fn admit(shared: &'a Shared, tier3: &'a Tier3, reserve: u64, fresh: u64) -> Result<Self, Refusal> {
        let mut claim = Claim { shared, tier3, reserve, held: 0 };
        claim.grow(fresh)?;
        Ok(claim)
    }

    /// Called before allocating a fresh chunk of `bytes`: claims what of it this claim
    /// does not hold yet (cached pages the admission counted on may have gone to another
    /// ALLOC) and checks available RAM again with every claim in flight.
    pub(crate) fn before_fresh(&mut self, bytes: u64) -> Result<(), Refusal> {
        self.grow(bytes.saturating_sub(self.held))
    }

    /// A fresh chunk of `bytes` was allocated: it now counts in available RAM itself.
    pub(crate) fn taken(&mut self, bytes: u64) {
        let n = bytes.min(self.held);
        self.shared.counters.in_flight.fetch_sub(n, Ordering::Relaxed);
        self.held -= n;
    }

    fn grow(&mut self, more: u64) -> Result<(), Refusal> {
        if self.reserve == 0 {
            return Ok(());
        }
        // SAFETY: `gb_mem_available` only reads kernel counters; no precondition.
        let available = unsafe { ffi::gb_mem_available() };
        // T3 pages in RAM count only where RAM alone falls short: summing them asks
        // every T3 buffer's file.
        self.claim(available, more)
            .or_else(|_| self.claim(available.saturating_add(self.tier3.pushable(self.shared)), more))?;
        self.held += more;
        Ok(())
    }

    /// Adds `more` to the claims in flight if `available` covers them all above the
    /// reserve; refused otherwise, with the claims it saw.
    fn claim(&self, available: u64, more: u64) -> Result<(), Refusal> {
        let reserve = self.reserve;
        self.shared
            .counters
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                let total = f.checked_add(more)?;
                (available >= reserve.saturating_add(total)).then_some(total)
            })
            .map(|_| ())
            .map_err(|in_flight| Refusal::Reserve { available, claimed: in_flight.saturating_add(more), reserve })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.shared.counters.in_flight.fetch_sub(self.held, Ordering::Relaxed);
    }
}
