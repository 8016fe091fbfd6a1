//! The lock live tiering holds for a GPU across every process under the shim on this
//! host, from measuring the GPU's free VRAM to the end of the moves planned from that
//! figure: an flock on `/dev/shm/greenboost-tier.<domain>:<bus>:<device>.lock` (the GPU's
//! PCI address, the same in every process whatever CUDA_VISIBLE_DEVICES numbers it;
//! `/dev/shm/greenboost-tier.lock`, one for the host, when the driver does not say),
//! beside the records `greenboost status` reads. Two of ours promoting at once would
//! each see the same free VRAM and together fill past it; managed memory resident beyond
//! what is free makes the driver evict one process's pages for the other's, and the
//! pressure rule then demotes in both, tick after tick. Held, the second process
//! measures after the first one's moves landed.
//!
//! Room made at once for an allocation (`make_room`) with the give-back on takes it too,
//! for as long as it moves memory and gives VRAM back: a tick of another process
//! measuring then would see the moment of the give-back, when all free VRAM is this
//! process's.
//!
//! Opened read-only (flock needs no write access, so a file another user made serves),
//! made when missing (mode 0644, whatever the umask), opened anew at every tick: a
//! child forked meanwhile closes its copy (`close_in_child`), so no process keeps a lock
//! alive that it does not use. A tick waits at most `WAIT` for it, then skips its turn:
//! a stopped process (a debugger) holding it must not stall everyone's tiering. No file
//! (no /dev/shm): tiering goes on unlocked.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::sys::lock_order::{self, rank, Ranked};
use crate::sys::shm_path::ShmPath;

/// How long a tick waits for the lock.
pub(super) const WAIT: Duration = Duration::from_secs(2);

/// The lock of the GPU at PCI address `pci`, or the host's.
pub(super) fn lock_path(pci: Option<(u32, u32, u32)>) -> ShmPath {
    match pci {
        Some((domain, bus, device)) => {
            ShmPath::new(format_args!("greenboost-tier.{domain:04x}:{bus:02x}:{device:02x}.lock"))
        }
        None => ShmPath::new(format_args!("greenboost-tier.lock")),
    }
}

/// The descriptor held now (-1: none), for `close_in_child`: a tick's or room made's, one at a
/// time (two open files of one lock exclude each other, in one process too).
static HELD: AtomicI32 = AtomicI32::new(-1);

/// What `acquire` got.
pub(super) enum Turn {
    /// This process's turn; the lock goes when this is dropped.
    Held(Held),
    /// Another process held it for all of `WAIT`: skip this tick.
    Busy,
    /// No lock file can be had here: go on without.
    Unlocked,
}

/// The lock, held.
///
/// # Invariants
/// `fd` is an open descriptor of the lock file, flocked exclusively, owned here.
pub(super) struct Held {
    fd: i32,
}

/// Waits up to `wait` for the tiering lock at `path`.
pub(super) fn acquire(path: &ShmPath, wait: Duration) -> Turn {
    let Some(fd) = open_lock(path) else { return Turn::Unlocked };
    // The first rank: taken holding nothing.
    lock_order::acquiring(rank::TierFlock::RANK);
    let began = Instant::now();
    loop {
        // SAFETY: `fd` is open and ours; flock takes it and constant flags only.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            HELD.store(fd, Ordering::Release);
            return Turn::Held(Held { fd });
        }
        let error = std::io::Error::last_os_error().raw_os_error();
        if error != Some(libc::EWOULDBLOCK) && error != Some(libc::EINTR) {
            lock_order::released(rank::TierFlock::RANK);
            close(fd);
            return Turn::Unlocked;
        }
        if began.elapsed() >= wait {
            lock_order::released(rank::TierFlock::RANK);
            close(fd);
            return Turn::Busy;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.store(-1, Ordering::Release);
        // Unlocked before it is closed: a child forked during the tick has a copy of the
        // descriptor, and the lock belongs to the open file both copies share.
        // SAFETY: `fd` is open and ours (invariant), closed right after.
        unsafe { libc::flock(self.fd, libc::LOCK_UN) };
        close(self.fd);
        lock_order::released(rank::TierFlock::RANK);
    }
}

/// In the child of a fork (the tier thread stayed in the parent): closes the child's
/// copy of a descriptor a tick held at the fork, so that the lock, which the parent
/// gives back, is not kept alive by the child if the parent dies first.
pub(super) fn close_in_child() {
    let fd = HELD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        close(fd);
    }
}

/// The lock file, opened read-only; made when missing. `None` if neither can be done.
fn open_lock(path: &ShmPath) -> Option<i32> {
    if path.is_empty() {
        return None;
    }
    for _ in 0..2 {
        // SAFETY: the path is NUL-terminated (`ShmPath`); the flags ask for a new descriptor.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            return Some(fd);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
            return None;
        }
        // O_EXCL: with fs.protected_regular, an O_CREAT open of another user's file in
        // a sticky directory is refused, so only a missing file is made here.
        let mode: libc::c_uint = 0o644;
        // SAFETY: as above, with the mode open reads for O_CREAT.
        let fd =
            unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, mode) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened; fchmod sets the mode the umask may have cut.
            unsafe { libc::fchmod(fd, 0o644) };
            return Some(fd);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return None;
        }
    }
    None
}

fn close(fd: i32) {
    // SAFETY: callers pass a descriptor they own and do not use again.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lock_per_gpu_by_its_pci_address() {
        assert_eq!(lock_path(Some((0, 0x1b, 0))).as_str(), "/dev/shm/greenboost-tier.0000:1b:00.lock");
        assert_eq!(lock_path(None).as_str(), "/dev/shm/greenboost-tier.lock");
        let widest = lock_path(Some((u32::MAX, u32::MAX, u32::MAX)));
        assert_eq!(widest.as_str(), "/dev/shm/greenboost-tier.ffffffff:ffffffff:ffffffff.lock");
    }
}
