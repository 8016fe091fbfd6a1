// SPDX-License-Identifier: GPL-2.0
//! Per-process accounting, keyed by thread group (`struct pid` of the tgid).
//!
//! An entry lives while its process has a `/dev/greenboost` file open or a buffer it
//! allocated is alive (buffers outlive the file and even the process when their fd was
//! passed on). The registry keeps each entry in a [`Slot`] together with its holder
//! counts; a slot exists only inside the registry's mutex, so the counts can only be
//! read or changed with the lock held, and an entry leaves the registry exactly when
//! its last holder goes.
//!
//! Lock: the registry lock ([`Registry`]) only (see "Lock order" in kmod/README.md).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

use crate::glue_ffi as ffi;
use crate::util::{self, T2Usage};

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
/// `drop`. What holds the entry is counted in its registry [`Slot`].
pub(crate) struct ProcEntry {
    pid: *mut bindings::pid,
    /// Thread-group id in the initial pid namespace, as sysfs and dmesg show it.
    pub(crate) pid_nr: i32,
    /// Real uid (initial user namespace) as of the process's latest open or ALLOC, as
    /// listings show it (each buffer counts under its allocating user, `users.rs`).
    pub(crate) kuid: AtomicU32,
    /// Command name of the thread-group leader, 16 bytes packed into two words (a torn
    /// read after a rename shows a mix of two names, nothing worse).
    comm: [AtomicU64; 2],
    /// T2 bytes of its live buffers (reserved before the pages are allocated) and held
    /// chunks, with their peak.
    pub(crate) t2: T2Usage,
    /// Its live buffers.
    pub(crate) buffers: AtomicU64,
    /// Last reported T1 (VRAM) usage; 0 once its last file is closed.
    pub(crate) t1_used: AtomicU64,
    /// Last reported VRAM budget.
    pub(crate) t1_budget: AtomicU64,
    /// Bytes of its live buffers in T3.
    pub(crate) t3_used: AtomicU64,
    /// Its live buffers in T3.
    pub(crate) t3_buffers: AtomicU64,
}

// SAFETY: the only non-`Send` field is `pid`, a counted reference to a `struct pid`;
// `struct pid` is reference counted with atomics and may be put (`put_pid`) from any
// thread. All other fields are atomics or plain integers.
unsafe impl Send for ProcEntry {}
// SAFETY: shared access never mutates through `pid` (it is only compared, read with
// `pid_nr` and put in `drop`, which has exclusive access); every other field is an
// atomic or immutable after construction.
unsafe impl Sync for ProcEntry {}

impl Drop for ProcEntry {
    fn drop(&mut self) {
        // SAFETY: the entry owns one reference to `pid` (type invariant) and gives it up
        // here, once; nothing uses `pid` after `drop`.
        unsafe { ffi::gb_pid_put(self.pid) };
    }
}

impl ProcEntry {
    /// The thread-group id as the caller's pid namespace numbers it; 0 when the
    /// process is not visible there.
    pub(crate) fn pid_for_caller(&self) -> i32 {
        // SAFETY: `pid` is a valid counted reference (type invariant); `pid_vnr` only
        // reads it and the caller's pid namespace.
        unsafe { ffi::gb_pid_vnr(self.pid) }
    }

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
        // SAFETY: `buf` is a local array, writable for the `COMM_LEN` bytes passed as
        // the length; `__get_task_comm` writes at most that many.
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

/// An entry in the registry with what holds it.
///
/// # Invariants
///
/// `holders` is the number of files and buffers holding `entry` (at least 1 while the
/// slot is in the registry); `files` counts the files among them. Slots only exist
/// inside [`Registry::slots`], so both counts are read and written under its lock.
pub(crate) struct Slot {
    entry: Arc<ProcEntry>,
    holders: usize,
    files: usize,
}

impl Slot {
    /// The process's figures.
    pub(crate) fn entry(&self) -> &ProcEntry {
        &self.entry
    }

    /// A reference to the process's figures that outlives the registry lock.
    pub(crate) fn entry_arc(&self) -> Arc<ProcEntry> {
        self.entry.clone()
    }

    /// Files of this process still open.
    pub(crate) fn open_files(&self) -> usize {
        self.files
    }
}

/// The registry of per-process entries.
#[pin_data]
pub(crate) struct Registry {
    /// One slot per process with an open file or a live buffer.
    #[pin]
    slots: Mutex<KVec<Slot>>,
}

impl Registry {
    /// An empty registry.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Registry {
            slots <- new_mutex!(KVec::new(), "greenboost::procs"),
        })
    }

    /// The calling process's entry, created if needed, held by one more `holder`.
    pub(crate) fn acquire(&self, holder: Holder) -> Result<Arc<ProcEntry>> {
        // SAFETY: `gb_current_tgid_get` has no precondition; it returns a new counted
        // reference to the caller's thread-group pid, which is put or owned below.
        let pid = unsafe { ffi::gb_current_tgid_get() };
        let mut slots = self.slots.lock();
        let index = match slots.iter().position(|s| s.entry.pid == pid) {
            Some(index) => {
                // SAFETY: `pid` is the counted reference taken above, not needed since
                // the existing entry holds its own; it is put once and not used again.
                unsafe { ffi::gb_pid_put(pid) };
                index
            }
            None => {
                let entry = ProcEntry {
                    pid,
                    // SAFETY: `pid` is a valid counted reference (taken above).
                    pid_nr: unsafe { ffi::gb_pid_nr(pid) },
                    kuid: AtomicU32::new(0),
                    comm: [AtomicU64::new(0), AtomicU64::new(0)],
                    t2: T2Usage::default(),
                    buffers: AtomicU64::new(0),
                    t1_used: AtomicU64::new(0),
                    t1_budget: AtomicU64::new(0),
                    t3_used: AtomicU64::new(0),
                    t3_buffers: AtomicU64::new(0),
                };
                // On failure `entry` is dropped, which puts `pid`.
                let entry = Arc::new(entry, GFP_KERNEL)?;
                slots.push(Slot { entry, holders: 0, files: 0 }, GFP_KERNEL)?;
                slots.len() - 1
            }
        };
        // `index` is in range: found above or just pushed.
        let slot = slots.get_mut(index).ok_or(EINVAL)?;
        slot.holders = slot.holders.wrapping_add(1);
        if holder == Holder::File {
            slot.files = slot.files.wrapping_add(1);
        }
        let entry = slot.entry.clone();
        // SAFETY: `gb_current_kuid` only reads the caller's credentials; no precondition.
        entry.kuid.store(unsafe { ffi::gb_current_kuid() }, Ordering::Relaxed);
        drop(slots);
        entry.refresh_comm();
        Ok(entry)
    }

    /// Drops one `holder` of `entry`; the entry leaves the registry with its last.
    pub(crate) fn release(&self, entry: Arc<ProcEntry>, holder: Holder) {
        let mut slots = self.slots.lock();
        let Some(index) = slots.iter().position(|s| Arc::ptr_eq(&s.entry, &entry)) else {
            return;
        };
        let Some(slot) = slots.get_mut(index) else {
            return;
        };
        if holder == Holder::File {
            let files = slot.files;
            slot.files = files.wrapping_sub(1);
            if files == 1 {
                // A T1 figure belongs to the reporting process's open files.
                entry.t1_used.store(0, Ordering::Relaxed);
                entry.t1_budget.store(0, Ordering::Relaxed);
            }
        }
        let holders = slot.holders;
        slot.holders = holders.wrapping_sub(1);
        if holders == 1 {
            // Dropped after the lock, with `entry`.
            let removed = util::vec_swap_remove(&mut slots, index);
            drop(slots);
            drop(removed);
        }
    }

    /// The calling process's entry, if it has one.
    pub(crate) fn find_current(&self) -> Option<Arc<ProcEntry>> {
        // SAFETY: `gb_current_tgid_get` has no precondition; it returns a new counted
        // reference, put below.
        let pid = unsafe { ffi::gb_current_tgid_get() };
        let found = self.slots.lock().iter().find(|s| s.entry.pid == pid).map(|s| s.entry.clone());
        // SAFETY: `pid` is the counted reference taken above, put once and not used again.
        unsafe { ffi::gb_pid_put(pid) };
        found
    }

    /// Sum of the T1 figures reported by all processes.
    pub(crate) fn t1_total(&self) -> u64 {
        self.slots.lock().iter().fold(0u64, |sum, s| sum.saturating_add(s.entry.t1_used.load(Ordering::Relaxed)))
    }

    /// Runs `f` on the slots, under the registry lock (for listings).
    pub(crate) fn with_slots<R>(&self, f: impl FnOnce(&[Slot]) -> R) -> R {
        f(&self.slots.lock())
    }
}
