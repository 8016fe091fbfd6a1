// SPDX-License-Identifier: GPL-2.0
//! `/dev/greenboost`: open files and the ioctl ABI (`abi/src/greenboost_abi.rs`).
//!
//! Locks are taken only through the pool, process and eventfd helpers, one at a time.

use core::mem::size_of;
use core::sync::atomic::Ordering;
use kernel::ffi::{c_int, c_long, c_uint, c_ulong, c_void};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

use crate::abi::{self, GbAlloc, GbEventfd, GbInfo, GbPoolStats, GbProcStats, GbT1Report};
use crate::buffer::{self, Buffer};
use crate::pool::{self, Placement, ANY_NODE};
use crate::procs::{Holder, ProcEntry};
use crate::{ffi, state, stats, util, State};

// SAFETY: the ABI structs are `#[repr(C)]` integers with explicit padding fields (no
// implicit padding, see the size asserts in the ABI file); every bit pattern is valid.
unsafe impl FromBytes for GbAlloc {}
// SAFETY: as above.
unsafe impl AsBytes for GbAlloc {}
// SAFETY: as above.
unsafe impl AsBytes for GbInfo {}
// SAFETY: as above.
unsafe impl AsBytes for GbPoolStats {}
// SAFETY: as above.
unsafe impl AsBytes for GbProcStats {}
// SAFETY: as above.
unsafe impl FromBytes for GbT1Report {}
// SAFETY: as above.
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
    entry: Option<Arc<ProcEntry>>,
}

impl DeviceFile {
    fn entry(&self) -> Result<&Arc<ProcEntry>> {
        self.entry.as_ref().ok_or(EINVAL)
    }
}

/// `open`: stores a new [`DeviceFile`] in `*file_priv`.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_open(file_priv: *mut *mut c_void) -> c_int {
    let state = state();
    let entry = match state.proc_acquire(Holder::File) {
        Ok(e) => e,
        Err(e) => return e.to_errno(),
    };
    let file = DeviceFile {
        id: state.next_file_id.fetch_add(1, Ordering::Relaxed),
        entry: Some(entry),
    };
    match KBox::new(file, GFP_KERNEL) {
        Ok(b) => {
            // SAFETY: `file_priv` is `&file->private_data` of the file being opened.
            unsafe { *file_priv = KBox::into_raw(b).cast() };
            0
        }
        // `file` was dropped, which released its entry.
        Err(_) => ENOMEM.to_errno(),
    }
}

impl Drop for DeviceFile {
    fn drop(&mut self) {
        let state = state();
        stats::eventfd_unregister_file(state, self.id);
        if let Some(entry) = self.entry.take() {
            state.proc_release(entry, Holder::File);
        }
    }
}

/// `release`: the last reference to the file is gone.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_release(file_priv: *mut c_void) {
    // SAFETY: set by `gb_rs_open` from `KBox::into_raw`; release runs once.
    drop(unsafe { KBox::from_raw(file_priv.cast::<DeviceFile>()) });
}

/// `unlocked_ioctl` (and `compat_ioctl`: the ABI has one layout).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_ioctl(
    file_priv: *mut c_void,
    cmd: c_uint,
    arg: c_ulong,
) -> c_long {
    // SAFETY: set by `gb_rs_open`; the file is open while its ioctl runs.
    let file = unsafe { &*file_priv.cast::<DeviceFile>() };
    let arg = arg as usize;
    let ret = match cmd {
        abi::GB_IOC_INFO => info(state(), arg),
        abi::GB_IOC_ALLOC => alloc(state(), arg),
        abi::GB_IOC_POOL_STATS => pool_stats(state(), arg),
        abi::GB_IOC_PROC_STATS => proc_stats(state(), arg),
        abi::GB_IOC_REPORT_T1 => report_t1(file, arg),
        abi::GB_IOC_REGISTER_EVENTFD => register_eventfd(state(), file, arg),
        _ => Err(ENOTTY),
    };
    match ret {
        Ok(()) => 0,
        Err(e) => e.to_errno() as c_long,
    }
}

fn write_out<T: AsBytes>(arg: usize, value: &T) -> Result {
    UserSlice::new(arg, size_of::<T>()).writer().write(value)
}

fn read_in<T: FromBytes>(arg: usize) -> Result<T> {
    UserSlice::new(arg, size_of::<T>()).reader().read()
}

fn info(state: &State, arg: usize) -> Result {
    let limits = state.limits();
    let info = GbInfo {
        abi_version: abi::GB_ABI_VERSION,
        features: abi::GB_INFO_MMAP | abi::GB_INFO_EVENTFD,
        chunk_size: abi::GB_CHUNK_SIZE,
        pool_cap: limits.cap,
        reserve: limits.reserve,
        uid_cap: limits.uid_cap,
        cache_target: limits.cache_target,
        max_alloc: MAX_ALLOC,
    };
    write_out(arg, &info)
}

/// Module-wide figures, as ioctl, sysfs and dmesg report them.
pub(crate) fn pool_snapshot(state: &State) -> GbPoolStats {
    let c = &state.counters;
    GbPoolStats {
        t2_used: c.t2_used.load(Ordering::Relaxed),
        t2_cached: c.t2_cached.load(Ordering::Relaxed),
        t2_cap: state.limits().cap,
        t2_peak: c.t2_peak.load(Ordering::Relaxed),
        t1_reported: state.t1_total(),
        t3_used: 0,
        buffers: c.buffers.load(Ordering::Relaxed),
        allocs: c.allocs.load(Ordering::Relaxed),
        alloc_failures: c.alloc_failures.load(Ordering::Relaxed),
        free_ram: c.free_ram.load(Ordering::Relaxed),
        pressure: u32::from(state.pressure.load(Ordering::Relaxed)),
        pad0: 0,
    }
}

fn pool_stats(state: &State, arg: usize) -> Result {
    write_out(arg, &pool_snapshot(state))
}

fn proc_stats(state: &State, arg: usize) -> Result {
    let mut out = GbProcStats {
        // SAFETY: reads the caller's own ids.
        pid: unsafe { ffi::gb_current_tgid_vnr() },
        // SAFETY: as above.
        uid: unsafe { ffi::gb_kuid_to_caller(ffi::gb_current_kuid()) },
        ..GbProcStats::default()
    };
    if let Some(e) = state.proc_find_current() {
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
    stats::eventfd_register(state, file.id, req.fd)
}

/// Validates an ALLOC request: the page-rounded size and the placement.
fn check_alloc(req: &GbAlloc) -> Result<(u64, Placement)> {
    if req.pad0 != 0 || req.flags & !abi::GB_ALLOC_FLAGS_ALL != 0 || req.size == 0 {
        return Err(EINVAL);
    }
    let strict = req.flags & abi::GB_ALLOC_NODE_STRICT != 0;
    let nid = if req.numa_node == ANY_NODE {
        if strict {
            // SAFETY: reads the current CPU's node.
            unsafe { ffi::gb_numa_node_id() }
        } else {
            ANY_NODE
        }
    } else {
        // SAFETY: a range and online-mask check of any integer.
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

/// Reserves `size` against the pool cap, the per-user cap and the RAM reserve. Returns
/// how many bytes of dirty cache pages the allocation must take (and zero) to stay
/// within the cap (see [`pool::dirty_claim`]).
fn reserve(state: &State, entry: &ProcEntry, size: u64) -> Result<u64> {
    let limits = state.limits();
    let c = &state.counters;
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
    if let Err(e) = state.proc_reserve(entry, size, limits.uid_cap) {
        unreserve();
        return Err(e);
    }
    // Pages the cache cannot supply come out of available RAM.
    let from_cache = c.t2_clean.load(Ordering::Relaxed).saturating_add(dirty_bytes);
    let fresh = size.saturating_sub(from_cache);
    // SAFETY: plain read of a kernel counter.
    let available = unsafe { ffi::gb_mem_available() };
    if available < limits.reserve.saturating_add(fresh) {
        entry.t2_used.fetch_sub(size, Ordering::Relaxed);
        unreserve();
        // Let the watchdog see the crossing now rather than at its next tick.
        stats::kick_watchdog(state, 0);
        return Err(ENOMEM);
    }
    util::raise_peak(&c.t2_peak, c.t2_used.load(Ordering::Relaxed));
    Ok(dirty_bytes)
}

fn alloc(state: &State, arg: usize) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, size_of::<GbAlloc>()).reader_writer();
    let mut req: GbAlloc = reader.read()?;
    let (size, placement) = check_alloc(&req)?;
    // The buffer is accounted to the calling process (which may differ from the one
    // that opened the file, e.g. after fork).
    let owner = state.proc_acquire(Holder::Buffer)?;
    let chunks = match reserve(state, &owner, size)
        .and_then(|dirty_bytes| pool::alloc_chunks(state, size, placement, dirty_bytes).inspect_err(|_| {
            state.counters.t2_used.fetch_sub(size, Ordering::Relaxed);
            owner.t2_used.fetch_sub(size, Ordering::Relaxed);
        })) {
        Ok(chunks) => chunks,
        Err(e) => {
            if e == ENOMEM {
                state.counters.alloc_failures.fetch_add(1, Ordering::Relaxed);
                stats::log_alloc_failure(state, size);
            }
            state.proc_release(owner, Holder::Buffer);
            return Err(e);
        }
    };
    // From here on the `Buffer` undoes all of the above when dropped.
    let buf = KBox::new(Buffer::new(state, size, chunks, owner), GFP_KERNEL)?;
    let id = buf.id;
    // SAFETY: reserves an fd number in the caller's table; installed or discarded below.
    let fd = unsafe { ffi::gb_fd_reserve() };
    if fd < 0 {
        return Err(Error::from_errno(fd));
    }
    let dmabuf = match buffer::export(buf) {
        Ok(d) => d,
        Err(e) => {
            // SAFETY: reserved above and not installed.
            unsafe { ffi::gb_fd_discard(fd) };
            return Err(e);
        }
    };
    req.fd = fd;
    req.buffer_id = id;
    req.alloc_size = size;
    if let Err(e) = writer.write(&req) {
        // SAFETY: the dma-buf was never installed; putting it releases the buffer.
        unsafe {
            ffi::gb_dmabuf_put(dmabuf);
            ffi::gb_fd_discard(fd);
        }
        return Err(e);
    }
    // SAFETY: `fd` is reserved and unused; the file reference moves into the fd table.
    unsafe { ffi::gb_dmabuf_install(fd, dmabuf) };
    state.counters.allocs.fetch_add(1, Ordering::Relaxed);
    pool::kick_refill(state);
    Ok(())
}
