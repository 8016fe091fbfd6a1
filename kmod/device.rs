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
use crate::backing::Tier;
use crate::buffer::{self, Buffer};
use crate::chunks::Chunks;
use crate::glue_ffi as ffi;
use crate::pool::{Placement, ANY_NODE};
use crate::procs::{Holder, ProcEntry};
use crate::refusal::Denied;
use crate::shmem::Shmem;
use crate::state::{state, State};
use crate::users::{self, UserShare};
use crate::{admission, mover, proclist, stats};

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
// SAFETY: `GbT3Stats` is `#[repr(C)]` with twelve u64 fields: no padding bytes.
unsafe impl AsBytes for abi::GbT3Stats {}

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
        abi::GB_IOC_MOVE if !file.writable => Err(EBADF),
        abi::GB_IOC_MOVE => mover::move_buffer(state, arg),
        abi::GB_IOC_T3_STATS => write_out(arg, &stats::t3_snapshot(state)),
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
        features: abi::GB_INFO_MMAP | abi::GB_INFO_EVENTFD | abi::GB_INFO_PROC_LIST | abi::GB_INFO_T3,
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
        out.t2_used = e.t2.used.load(Ordering::Relaxed);
        out.t2_peak = e.t2.peak.load(Ordering::Relaxed);
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

/// Undoes an ALLOC's hold and buffer count of `user` (no buffer came of it).
fn give_back_user(state: &State, user: Arc<UserShare>) {
    users::uncharge(&user.buffers, 1);
    state.users.release(user);
}

fn alloc(state: &State, arg: usize) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, size_of::<GbAlloc>()).reader_writer();
    let mut req: GbAlloc = reader.read()?;
    let (size, placement) = check_alloc(&req)?;
    // The buffer is accounted to the calling process (which may differ from the one
    // that opened the file, e.g. after fork).
    // Chunks that outlived their buffers and have been let go since the last watchdog
    // tick give their room back now.
    state.held.scan(&state.shared, &state.procs, &state.users);
    let t3 = req.flags & abi::GB_ALLOC_T3 != 0;
    // The buffer counts under the caller's user. Its count is checked first: every
    // buffer costs kernel objects (its files) before any page.
    let user = state.users.acquire()?;
    let limit = state.shared.limits().uid_buffers;
    if let Err(e) = users::charge(&user.buffers, 1, limit) {
        state.shared.counters.alloc_failures.fetch_add(1, Ordering::Relaxed);
        stats::log_buffer_limit(state, &user, limit);
        state.users.release(user);
        return Err(e);
    }
    // Made before anything else is reserved, so that they are not a failure to undo.
    let made = Shmem::new(size).and_then(|shmem| Ok((shmem, buffer::new_backing_lock()?)));
    let made = made.and_then(|(shmem, lock)| Ok((shmem, lock, state.procs.acquire(Holder::Buffer)?)));
    let (shmem, lock, owner) = match made {
        Ok(made) => made,
        Err(e) => {
            give_back_user(state, user);
            return Err(e);
        }
    };
    // A refusal (ENOMEM) is logged with the limit that made it.
    let taken = if t3 {
        state.tier3.admit(&state.shared, &owner, &user, size).map(|()| Tier::T3).inspect_err(|e| {
            if *e == ENOMEM {
                stats::log_t3_refusal(state, size);
            }
        })
    } else {
        admission::take_t2(state, &owner, &user, size, placement)
            .map(|(chunks, memlock)| Tier::T2 { chunks: Chunks::new(chunks), memlock })
            .map_err(|denied| {
                if let Denied::Refused(why) = denied {
                    stats::log_t2_refusal(state, size, why);
                }
                Error::from(denied)
            })
    };
    let tier = match taken {
        Ok(tier) => tier,
        Err(e) => {
            if e == ENOMEM {
                state.shared.counters.alloc_failures.fetch_add(1, Ordering::Relaxed);
            }
            state.procs.release(owner, Holder::Buffer);
            give_back_user(state, user);
            return Err(e);
        }
    };
    // From here on the `Buffer` undoes all of the above when dropped.
    let buf = Buffer::new(state, size, placement, shmem, lock, tier, owner, user)?;
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
