// SPDX-License-Identifier: GPL-2.0
//! `/dev/greenboost`: open files and the ioctl ABI (`abi/src/greenboost_abi.rs`).
//!
//! The C entry points (`gb_rs_open`, `gb_rs_release`, `gb_rs_ioctl`) are in `entry.rs`.
//! Locks are taken only through the pool, process and watchdog helpers, one at a time
//! (see "Lock order" in kmod/README.md).

use core::mem::size_of;
use core::sync::atomic::Ordering;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

use crate::abi::{self, GbAlloc, GbEventfd, GbInfo, GbProcStats, GbT1Report};
use crate::buffer::{self, Buffer};
use crate::glue_ffi as ffi;
use crate::memlock::Memlock;
use crate::pool::{self, Placement, ANY_NODE};
use crate::procs::{Holder, ProcEntry};
use crate::reserve::Claim;
use crate::state::{state, State};
use crate::{proclist, stats, util};

// SAFETY: `GbAlloc` is `#[repr(C)]` with only integer fields (u64, u32, i32) and an
// explicit `pad0`, so it has no padding bytes (its size is asserted in the ABI file)
// and every bit pattern is a valid value.
unsafe impl FromBytes for GbAlloc {}
// SAFETY: `GbAlloc` has no padding bytes (see its `FromBytes` above: integer fields
// and an explicit `pad0` only), so all of its bytes are initialised.
unsafe impl AsBytes for GbAlloc {}
// SAFETY: `GbInfo` is `#[repr(C)]` with two u32 fields followed by u64 fields, so it
// has no padding bytes and all of its bytes are initialised.
unsafe impl AsBytes for GbInfo {}
// SAFETY: `GbPoolStats` is `#[repr(C)]` with u64 fields and two u32 fields at the end
// (`pressure` and an explicit `pad0`), so it has no padding bytes.
unsafe impl AsBytes for abi::GbPoolStats {}
// SAFETY: `GbProcStats` is `#[repr(C)]` with an i32 and a u32 followed by u64 fields,
// so it has no padding bytes.
unsafe impl AsBytes for GbProcStats {}
// SAFETY: `GbT1Report` is `#[repr(C)]` with two u64 fields: no padding, and every bit
// pattern is a valid value.
unsafe impl FromBytes for GbT1Report {}
// SAFETY: `GbEventfd` is `#[repr(C)]` with an i32 and a u32: no padding, and every bit
// pattern is a valid value.
unsafe impl FromBytes for GbEventfd {}

/// Largest single allocation: 1 TiB, a structural limit (chunk list and sg table
/// sizes), far above any cap a machine can grant. Larger requests fail with E2BIG;
/// anything below it that the caps or memory cannot satisfy fails with ENOMEM.
pub(crate) const MAX_ALLOC: u64 = 1 << 40;

/// An open `/dev/greenboost` file.
///
/// # Invariants
///
/// `entry` holds the opening process's entry as a [`Holder::File`]; `id` is unique
/// among open files and keys this file's eventfd registrations.
pub(crate) struct DeviceFile {
    pub(crate) id: u64,
    /// Opened for writing: ALLOC needs it (a read-only open only reads figures).
    writable: bool,
    entry: Option<Arc<ProcEntry>>,
}

impl DeviceFile {
    fn entry(&self) -> Result<&Arc<ProcEntry>> {
        self.entry.as_ref().ok_or(EINVAL)
    }
}

/// `open`: a new file of the calling process; `writable` as its `FMODE_WRITE`.
pub(crate) fn open(state: &State, writable: bool) -> Result<KBox<DeviceFile>> {
    let entry = state.procs.acquire(Holder::File)?;
    let file = DeviceFile { id: state.next_file_id.fetch_add(1, Ordering::Relaxed), writable, entry: Some(entry) };
    // On failure `file` is dropped, which releases its entry.
    KBox::new(file, GFP_KERNEL).map_err(|_| ENOMEM)
}

impl Drop for DeviceFile {
    fn drop(&mut self) {
        let state = state();
        state.watchdog.unregister_file(self.id);
        if let Some(entry) = self.entry.take() {
            state.procs.release(entry, Holder::File);
        }
    }
}

/// `unlocked_ioctl` (and `compat_ioctl`: the ABI has one layout).
pub(crate) fn ioctl(state: &State, file: &DeviceFile, cmd: u32, arg: usize) -> Result {
    match cmd {
        abi::GB_IOC_INFO => info(state, arg),
        // As write(2) on a read-only fd, and block devices' BLKDISCARD/BLKZEROOUT.
        abi::GB_IOC_ALLOC if !file.writable => Err(EBADF),
        abi::GB_IOC_ALLOC => alloc(state, arg),
        abi::GB_IOC_POOL_STATS => pool_stats(state, arg),
        abi::GB_IOC_PROC_STATS => proc_stats(state, arg),
        abi::GB_IOC_REPORT_T1 => report_t1(file, arg),
        abi::GB_IOC_REGISTER_EVENTFD => register_eventfd(state, file, arg),
        abi::GB_IOC_LIST_PROCS => proclist::list(state, arg),
        _ => Err(ENOTTY),
    }
}

fn write_out<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(arg, size_of::<T>()).writer().write(value)
}

fn read_in<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(arg, size_of::<T>()).reader().read()
}

fn info(state: &State, arg: usize) -> Result {
    let limits = state.shared.limits();
    let info = GbInfo {
        abi_version: abi::GB_ABI_VERSION,
        features: abi::GB_INFO_MMAP | abi::GB_INFO_EVENTFD | abi::GB_INFO_PROC_LIST,
        chunk_size: abi::GB_CHUNK_SIZE,
        pool_cap: limits.cap,
        reserve: limits.reserve,
        uid_cap: limits.uid_cap,
        cache_target: limits.cache_target,
        max_alloc: MAX_ALLOC,
    };
    write_out(arg, &info)
}

fn pool_stats(state: &State, arg: usize) -> Result {
    write_out(arg, &stats::pool_snapshot(state))
}

fn proc_stats(state: &State, arg: usize) -> Result {
    let mut out = GbProcStats {
        // SAFETY: `gb_current_tgid_vnr` only reads the calling task's ids; no
        // precondition.
        pid: unsafe { ffi::gb_current_tgid_vnr() },
        // SAFETY: `gb_current_kuid` and `gb_kuid_to_caller` only read the calling task's
        // credentials and user namespace; they take no pointer and have no precondition.
        uid: unsafe { ffi::gb_kuid_to_caller(ffi::gb_current_kuid()) },
        ..GbProcStats::default()
    };
    if let Some(e) = state.procs.find_current() {
        out.t2_used = e.t2_used.load(Ordering::Relaxed);
        out.t2_peak = e.t2_peak.load(Ordering::Relaxed);
        out.buffers = e.buffers.load(Ordering::Relaxed);
        out.t1_reported = e.t1_used.load(Ordering::Relaxed);
    }
    write_out(arg, &out)
}

fn report_t1(file: &DeviceFile, arg: usize) -> Result {
    let report: GbT1Report = read_in(arg)?;
    let entry = file.entry()?;
    entry.t1_used.store(report.vram_used, Ordering::Relaxed);
    entry.t1_budget.store(report.vram_budget, Ordering::Relaxed);
    Ok(())
}

fn register_eventfd(state: &State, file: &DeviceFile, arg: usize) -> Result {
    let req: GbEventfd = read_in(arg)?;
    if req.flags != 0 {
        return Err(EINVAL);
    }
    state.watchdog.register(&state.shared, file.id, req.fd)
}

/// Validates an ALLOC request: the page-rounded size and the placement.
fn check_alloc(req: &GbAlloc) -> Result<(u64, Placement)> {
    if req.pad0 != 0 || req.flags & !abi::GB_ALLOC_FLAGS_ALL != 0 || req.size == 0 {
        return Err(EINVAL);
    }
    let strict = req.flags & abi::GB_ALLOC_NODE_STRICT != 0;
    let nid = if req.numa_node == ANY_NODE {
        if strict {
            // SAFETY: `gb_numa_node_id` only reads the current CPU's node; no
            // precondition.
            unsafe { ffi::gb_numa_node_id() }
        } else {
            ANY_NODE
        }
    } else {
        // SAFETY: `gb_node_online` range-checks its integer argument before reading the
        // online-node mask; any value is fine.
        let online = unsafe { ffi::gb_node_online(req.numa_node) };
        if !online {
            return Err(EINVAL);
        }
        req.numa_node
    };
    if req.size > MAX_ALLOC {
        return Err(E2BIG);
    }
    let page = PAGE_SIZE as u64;
    let size = req.size.div_ceil(page) * page;
    Ok((size, Placement { nid, strict }))
}

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

/// Reserves `size` against the pool cap, the per-user cap, the caller's memlock limit
/// and the RAM reserve.
fn reserve<'a>(state: &'a State, entry: &ProcEntry, size: u64) -> Result<Reservation<'a>> {
    let limits = state.shared.limits();
    let c = &state.shared.counters;
    // Pages kept alive by other holders past their buffers (see `held.rs`) are counted
    // in the caps already; beyond a quarter of the pool cap, nobody gets more until
    // some are let go.
    if c.held_bytes.load(Ordering::Relaxed) > limits.cap / 4 {
        return Err(ENOMEM);
    }
    let mut dirty_bytes = 0;
    c.t2_used
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            let cached = c.t2_cached.load(Ordering::Relaxed);
            let clean = c.t2_clean.load(Ordering::Relaxed);
            dirty_bytes = pool::dirty_claim(used, size, cached, clean, limits.cap)?;
            used.checked_add(size)
        })
        .map_err(|_| ENOMEM)?;
    let unreserve = || {
        c.t2_used.fetch_sub(size, Ordering::Relaxed);
    };
    if let Err(e) = state.procs.reserve(entry, size, limits.uid_cap) {
        unreserve();
        return Err(e);
    }
    let memlock = match Memlock::charge(size) {
        Ok(m) => m,
        Err(e) => {
            entry.t2_used.fetch_sub(size, Ordering::Relaxed);
            unreserve();
            return Err(e);
        }
    };
    // Pages the cache cannot supply come out of available RAM.
    let from_cache = c.t2_clean.load(Ordering::Relaxed).saturating_add(dirty_bytes);
    let fresh = size.saturating_sub(from_cache);
    let claim = match Claim::admit(&state.shared, limits.reserve, fresh) {
        Ok(claim) => claim,
        Err(e) => {
            entry.t2_used.fetch_sub(size, Ordering::Relaxed);
            unreserve();
            // Let the watchdog see the crossing now rather than at its next tick.
            state.watchdog.kick_for_refusal(&state.shared);
            return Err(e);
        }
    };
    Ok(Reservation { dirty_bytes, claim, memlock })
}

fn alloc(state: &State, arg: usize) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, size_of::<GbAlloc>()).reader_writer();
    let mut req: GbAlloc = reader.read()?;
    let (size, placement) = check_alloc(&req)?;
    // The buffer is accounted to the calling process (which may differ from the one
    // that opened the file, e.g. after fork).
    // Chunks that outlived their buffers and have been let go since the last watchdog
    // tick give their room back now.
    state.held.scan(&state.shared, &state.procs);
    let owner = state.procs.acquire(Holder::Buffer)?;
    let (chunks, memlock) = match reserve(state, &owner, size).and_then(|mut r| {
        match state.pool().alloc_chunks(size, placement, r.dirty_bytes, &mut r.claim) {
            Ok(chunks) => Ok((chunks, r.memlock)),
            Err(e) => {
                state.shared.counters.t2_used.fetch_sub(size, Ordering::Relaxed);
                owner.t2_used.fetch_sub(size, Ordering::Relaxed);
                Err(e)
            }
        }
    }) {
        Ok(done) => {
            // Peaks count what was really allocated, never a refused or killed ALLOC.
            let c = &state.shared.counters;
            util::raise_peak(&c.t2_peak, c.t2_used.load(Ordering::Relaxed));
            util::raise_peak(&owner.t2_peak, owner.t2_used.load(Ordering::Relaxed));
            done
        }
        Err(e) => {
            if e == ENOMEM {
                state.shared.counters.alloc_failures.fetch_add(1, Ordering::Relaxed);
                stats::log_alloc_failure(state, size);
            }
            state.procs.release(owner, Holder::Buffer);
            return Err(e);
        }
    };
    // From here on the `Buffer` undoes all of the above when dropped.
    let buf = KBox::new(Buffer::new(state, size, chunks, owner, memlock), GFP_KERNEL)?;
    let id = buf.id;
    // SAFETY: `gb_fd_reserve` has no precondition; the fd number it reserves in the
    // caller's table is installed or discarded below, on every path.
    let fd = unsafe { ffi::gb_fd_reserve() };
    if fd < 0 {
        return Err(Error::from_errno(fd));
    }
    let dmabuf = match buffer::export(buf) {
        Ok(d) => d,
        Err(e) => {
            // SAFETY: `fd` was reserved above by `gb_fd_reserve` and never installed.
            unsafe { ffi::gb_fd_discard(fd) };
            return Err(e);
        }
    };
    req.fd = fd;
    req.buffer_id = id;
    req.alloc_size = size;
    if let Err(e) = writer.write(&req) {
        // SAFETY: `dmabuf` came from a successful export and was never installed, so we
        // hold its only reference; putting it releases the buffer. `fd` was reserved
        // above and never installed.
        unsafe {
            ffi::gb_dmabuf_put(dmabuf);
            ffi::gb_fd_discard(fd);
        }
        return Err(e);
    }
    // SAFETY: `fd` is reserved and unused, `dmabuf` is live and we hold its only
    // reference, which moves into the fd table; neither is used by us afterwards.
    unsafe { ffi::gb_dmabuf_install(fd, dmabuf) };
    state.shared.counters.allocs.fetch_add(1, Ordering::Relaxed);
    state.pool().kick_refill();
    Ok(())
}
