// SPDX-License-Identifier: GPL-2.0
//! Per-process accounting, keyed by thread group (`struct pid` of the tgid).
//!
//! An entry lives while its process has a `/dev/greenboost` file open or a buffer it
//! allocated is alive (buffers outlive the file and even the process when their fd was
//! passed on). Lock: only `State::procs`; `holders` changes only under it, so an entry
//! leaves the registry exactly when its last holder goes.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::{ffi, util, State};

/// `TASK_COMM_LEN`.
const COMM_LEN: usize = 16;

/// What holds an entry alive.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// An open `/dev/greenboost` file made by the process.
    File,
    /// A live buffer the process allocated.
    Buffer,
}

/// One process's usage.
///
/// # Invariants
///
/// `pid` is a counted reference to the process's thread-group `struct pid`, put in
/// `drop`. `holders` counts the files and buffers that hold the entry in the registry
/// and is only changed under `State::procs`; `files` counts the files among them.
pub(crate) struct ProcEntry {
    pid: *mut bindings::pid,
    /// Thread-group id in the initial pid namespace, as sysfs and dmesg show it.
    pub(crate) pid_nr: i32,
    /// Real uid (initial user namespace) as of the process's latest open or ALLOC: a
    /// process that changes its uid takes its buffers with it to the new user's cap.
    pub(crate) kuid: AtomicU32,
    /// Command name of the thread-group leader, 16 bytes packed into two words (a torn
    /// read after a rename shows a mix of two names, nothing worse).
    comm: [AtomicU64; 2],
    /// T2 bytes of its live buffers (reserved before the pages are allocated).
    pub(crate) t2_used: AtomicU64,
    /// Highest `t2_used`.
    pub(crate) t2_peak: AtomicU64,
    /// Its live buffers.
    pub(crate) buffers: AtomicU64,
    /// Last reported T1 (VRAM) usage; 0 once its last file is closed.
    pub(crate) t1_used: AtomicU64,
    /// Last reported VRAM budget.
    pub(crate) t1_budget: AtomicU64,
    files: AtomicUsize,
    holders: AtomicUsize,
}

// SAFETY: `pid` is a reference-counted kernel object usable from any thread; the rest
// is atomics.
unsafe impl Send for ProcEntry {}
// SAFETY: as above; no method hands out the raw pointer for mutation.
unsafe impl Sync for ProcEntry {}

impl Drop for ProcEntry {
    fn drop(&mut self) {
        // SAFETY: the entry owns one reference to `pid` (type invariant).
        unsafe { ffi::gb_pid_put(self.pid) };
    }
}

impl ProcEntry {
    /// The command name, up to its first NUL.
    pub(crate) fn comm(&self) -> [u8; COMM_LEN] {
        let mut out = [0u8; COMM_LEN];
        let (a, b) = out.split_at_mut(8);
        a.copy_from_slice(&self.comm[0].load(Ordering::Relaxed).to_ne_bytes());
        b.copy_from_slice(&self.comm[1].load(Ordering::Relaxed).to_ne_bytes());
        out
    }

    fn refresh_comm(&self) {
        let mut buf = [0u8; COMM_LEN];
        // SAFETY: `buf` is writable for `COMM_LEN` bytes.
        unsafe { ffi::gb_current_comm(buf.as_mut_ptr().cast(), COMM_LEN) };
        let (a, b) = buf.split_at(8);
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(s);
            u64::from_ne_bytes(w)
        };
        self.comm[0].store(word(a), Ordering::Relaxed);
        self.comm[1].store(word(b), Ordering::Relaxed);
    }

    /// Files of this process still open.
    pub(crate) fn open_files(&self) -> usize {
        self.files.load(Ordering::Relaxed)
    }
}

/// Writes a command name as text, stopping at its NUL and replacing non-printables.
pub(crate) struct Comm(pub(crate) [u8; COMM_LEN]);

impl core::fmt::Display for Comm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for &b in self.0.iter().take_while(|&&b| b != 0) {
            let c = if b.is_ascii_graphic() { b as char } else { '?' };
            core::fmt::Write::write_char(f, c)?;
        }
        Ok(())
    }
}

impl State {
    /// The calling process's entry, created if needed, held by one more `holder`.
    pub(crate) fn proc_acquire(&self, holder: Holder) -> Result<Arc<ProcEntry>> {
        // SAFETY: returns a new counted reference, owned below.
        let pid = unsafe { ffi::gb_current_tgid_get() };
        let mut procs = self.procs.lock();
        let found = procs.iter().find(|e| e.pid == pid).cloned();
        let entry = match found {
            Some(e) => {
                // SAFETY: the extra reference taken above is not needed.
                unsafe { ffi::gb_pid_put(pid) };
                e
            }
            None => {
                let entry = ProcEntry {
                    pid,
                    // SAFETY: `pid` is a valid counted reference.
                    pid_nr: unsafe { ffi::gb_pid_nr(pid) },
                    kuid: AtomicU32::new(0),
                    comm: [AtomicU64::new(0), AtomicU64::new(0)],
                    t2_used: AtomicU64::new(0),
                    t2_peak: AtomicU64::new(0),
                    buffers: AtomicU64::new(0),
                    t1_used: AtomicU64::new(0),
                    t1_budget: AtomicU64::new(0),
                    files: AtomicUsize::new(0),
                    holders: AtomicUsize::new(0),
                };
                // On failure `entry` is dropped, which puts `pid`.
                let entry = Arc::new(entry, GFP_KERNEL)?;
                procs.push(entry.clone(), GFP_KERNEL)?;
                entry
            }
        };
        entry.holders.fetch_add(1, Ordering::Relaxed);
        if holder == Holder::File {
            entry.files.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: reads the caller's credentials.
        entry.kuid.store(unsafe { ffi::gb_current_kuid() }, Ordering::Relaxed);
        drop(procs);
        entry.refresh_comm();
        Ok(entry)
    }

    /// Drops one `holder` of `entry`; the entry leaves the registry with its last.
    pub(crate) fn proc_release(&self, entry: Arc<ProcEntry>, holder: Holder) {
        let mut procs = self.procs.lock();
        if holder == Holder::File && entry.files.fetch_sub(1, Ordering::Relaxed) == 1 {
            // A T1 figure belongs to the reporting process's open files.
            entry.t1_used.store(0, Ordering::Relaxed);
            entry.t1_budget.store(0, Ordering::Relaxed);
        }
        if entry.holders.fetch_sub(1, Ordering::Relaxed) == 1 {
            if let Some(index) = procs.iter().position(|e| Arc::ptr_eq(e, &entry)) {
                // Dropped after the lock, with `entry`.
                let removed = util::vec_swap_remove(&mut procs, index);
                drop(procs);
                drop(removed);
            }
        }
    }

    /// The calling process's entry, if it has one.
    pub(crate) fn proc_find_current(&self) -> Option<Arc<ProcEntry>> {
        // SAFETY: returns a new counted reference, put below.
        let pid = unsafe { ffi::gb_current_tgid_get() };
        let found = self.procs.lock().iter().find(|e| e.pid == pid).cloned();
        // SAFETY: the reference taken above.
        unsafe { ffi::gb_pid_put(pid) };
        found
    }

    /// Reserves `size` T2 bytes for `entry`, enforcing the per-user cap (0: none).
    pub(crate) fn proc_reserve(&self, entry: &ProcEntry, size: u64, uid_cap: u64) -> Result {
        let procs = self.procs.lock();
        if uid_cap != 0 {
            let kuid = entry.kuid.load(Ordering::Relaxed);
            let user_total = procs
                .iter()
                .filter(|e| e.kuid.load(Ordering::Relaxed) == kuid)
                .fold(0u64, |sum, e| sum.saturating_add(e.t2_used.load(Ordering::Relaxed)));
            if user_total.saturating_add(size) > uid_cap {
                return Err(ENOMEM);
            }
        }
        let now = entry.t2_used.fetch_add(size, Ordering::Relaxed).saturating_add(size);
        drop(procs);
        util::raise_peak(&entry.t2_peak, now);
        Ok(())
    }

    /// Sum of the T1 figures reported by all processes.
    pub(crate) fn t1_total(&self) -> u64 {
        self.procs
            .lock()
            .iter()
            .fold(0u64, |sum, e| sum.saturating_add(e.t1_used.load(Ordering::Relaxed)))
    }
}
