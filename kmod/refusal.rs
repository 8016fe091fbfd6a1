// SPDX-License-Identifier: GPL-2.0
//! Why new pages were refused: the limit that refused them and the figures it compared,
//! named in the ALLOC refusal line of the kernel log (`stats::log_t2_refusal`). To
//! the caller every refusal is ENOMEM, as before; the line says which limit to raise.

use core::fmt;
use kernel::prelude::*;

use crate::util::Size;

/// The limit that refused new pages, with what it saw then (a later reading of the same
/// figures may differ: the refused request has given back what it had taken).
#[derive(Clone, Copy)]
pub(crate) enum Refusal {
    /// T2 in use, cached pages and the request above `pool_cap_mb`.
    PoolCap { used: u64, cached: u64, cap: u64 },
    /// The user's T2 and the request above `uid_cap_mb`.
    UserCap { used: u64, cap: u64 },
    /// The caller's RLIMIT_MEMLOCK (it lacks CAP_IPC_LOCK).
    Memlock,
    /// Available RAM less every claim of fresh pages in flight (`claimed`, this one's
    /// included) below `reserve_mb` (see `reserve.rs`).
    Reserve { available: u64, claimed: u64, reserve: u64 },
    /// The kernel gave no page, not even a single one (or the caller's memory cgroup is
    /// at its limit), or no room for the chunk list.
    NoPages,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::PoolCap { used, cached, cap } => {
                write!(f, "the pool cap: T2 used {}, {} cached, cap {}", Size(used), Size(cached), Size(cap))
            }
            Refusal::UserCap { used, cap } => write!(f, "the per-user cap: T2 used {} of {}", Size(used), Size(cap)),
            Refusal::Memlock => f.write_str("the caller's RLIMIT_MEMLOCK"),
            Refusal::Reserve { available, claimed, reserve } => write!(
                f,
                "the RAM reserve: available {}, {} of it claimed by ALLOCs in flight, reserve {}",
                Size(available),
                Size(claimed),
                Size(reserve)
            ),
            Refusal::NoPages => f.write_str("the kernel: no page to give (nor the caller's memory cgroup)"),
        }
    }
}

/// Why new pages were not had: a limit refused them, or the request failed otherwise
/// (a fatal signal's EINTR).
#[derive(Clone, Copy)]
pub(crate) enum Denied {
    Refused(Refusal),
    Failed(Error),
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Self {
        Denied::Refused(refusal)
    }
}

impl From<Refusal> for Error {
    fn from(_: Refusal) -> Self {
        ENOMEM
    }
}

impl From<Denied> for Error {
    fn from(denied: Denied) -> Self {
        match denied {
            Denied::Refused(_) => ENOMEM,
            Denied::Failed(e) => e,
        }
    }
}
