//! The T2 backend of this process, chosen once (GREENBOOST_BACKEND): the module when it
//! opens and speaks our ABI, else (or by choice) userspace memory.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::backend::kmod::{KmodBackend, IMPORT_DMABUF_RESULT, IMPORT_OPAQUE_RESULT};
use crate::backend::t2_buffer::Backend;
use crate::backend::userspace::{self, UserspaceBackend};
use crate::rules::config::{self, BackendChoice};

enum Slot {
    Kmod(KmodBackend),
    Userspace(UserspaceBackend),
    Unavailable,
}

static BACKEND: OnceLock<Slot> = OnceLock::new();

/// The T2 backend, chosen at the first call (GREENBOOST_BACKEND); `None` when the
/// module was required and cannot be used.
pub fn get() -> Option<&'static dyn Backend> {
    let slot = BACKEND.get_or_init(|| {
        let choice = config::get().backend;
        if choice != BackendChoice::Userspace {
            match KmodBackend::open() {
                Ok(kmod) => {
                    info!("T2 backend: kmod (/dev/greenboost)");
                    return Slot::Kmod(kmod);
                }
                Err(reason) if choice == BackendChoice::Kmod => {
                    warn!("GREENBOOST_BACKEND=kmod but {reason}; no T2: allocations stay in VRAM while it lasts");
                    return Slot::Unavailable;
                }
                Err(reason) => info!("{reason}; T2 backend: userspace"),
            }
        } else {
            info!("T2 backend: userspace");
        }
        Slot::Userspace(UserspaceBackend)
    });
    match slot {
        Slot::Kmod(kmod) => Some(kmod),
        Slot::Userspace(userspace) => Some(userspace),
        Slot::Unavailable => None,
    }
}

/// Whether the host can give `len` more bytes of RAM and keep its reserve (the userspace
/// backend's, GREENBOOST_HOST_RESERVE): asked of host memory that no backend hands out
/// and that cannot go to swap, movable T2 (driver-owned managed memory). Quiet: the
/// caller asks the backend next, which says so if it refuses too.
pub fn host_has_room(len: u64) -> bool {
    host_room().is_none_or(|room| room >= len)
}

/// RAM the host can give now and keep its reserve, as `host_has_room` counts it; `None`
/// when MemAvailable cannot be read. For many moves at once: read once, taken from as
/// they go.
pub fn host_room() -> Option<u64> {
    userspace::room_above_host_reserve()
}

/// RAM the host keeps available whatever T2 takes (GREENBOOST_HOST_RESERVE, else the
/// module's default), for messages that name it.
pub fn host_reserve() -> u64 {
    userspace::host_reserve()
}

/// The backend in use, for the summary ("not used" before the first T2 question).
pub fn name() -> &'static str {
    match BACKEND.get() {
        None => "not used",
        Some(Slot::Kmod(_)) => "kmod",
        Some(Slot::Userspace(_)) => "userspace",
        Some(Slot::Unavailable) => "unavailable",
    }
}

/// (backend code, DMABUF_FD import result, OPAQUE_FD import result) for the stats.
pub fn summary() -> (u32, i32, i32) {
    let code = match BACKEND.get() {
        None => 0,
        Some(Slot::Kmod(_)) => 1,
        Some(Slot::Userspace(_)) => 2,
        Some(Slot::Unavailable) => 3,
    };
    (code, IMPORT_DMABUF_RESULT.load(Ordering::Relaxed), IMPORT_OPAQUE_RESULT.load(Ordering::Relaxed))
}

/// The module's T1 report, if the module is in use and opened already: sends a report
/// that throttling held back, or with `final_t1` the last one at exit.
pub fn flush_t1_report(final_t1: Option<u64>) {
    if let Some(Slot::Kmod(kmod)) = BACKEND.get() {
        match final_t1 {
            Some(vram_used) => kmod.final_report(vram_used),
            None => kmod.flush_t1_report(),
        }
    }
}
