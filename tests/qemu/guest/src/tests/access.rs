//! Who may do what: a read-only open of /dev/greenboost reads figures but cannot
//! allocate.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::os::fd::AsRawFd;

/// ALLOC on an O_RDONLY file fails with EBADF (as write(2) would) and leaves nothing
/// behind; the read-only ioctls still answer on it.
pub fn readonly_open_cannot_alloc() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let ro = open_path(GB_DEVICE_PATH, libc::O_RDONLY).map_err(|e| format!("open O_RDONLY: {}", errname(e)))?;
    let mut req = GbAlloc { size: 2 << 20, numa_node: -1, ..Default::default() };
    let r = raw_ioctl(ro.as_raw_fd(), GB_IOC_ALLOC, &mut req as *mut GbAlloc as usize);
    if r.is_ok() {
        // SAFETY: the ALLOC succeeded, so req.fd is a fresh DMA-BUF fd of ours.
        unsafe { libc::close(req.fd) };
    }
    expect_errno("ALLOC on an O_RDONLY /dev/greenboost", r, libc::EBADF)?;
    let after = dev.pool()?;
    ensure(after.buffers == base.buffers && after.t2_used == base.t2_used && after.allocs == base.allocs, || {
        format!("refused ALLOC changed the pool: buffers {} -> {}, t2_used {} -> {}", base.buffers, after.buffers, base.t2_used, after.t2_used)
    })?;
    let mut info = GbInfo::default();
    raw_ioctl(ro.as_raw_fd(), GB_IOC_INFO, &mut info as *mut GbInfo as usize).map_err(|e| format!("INFO on O_RDONLY: {}", errname(e)))?;
    let mut st = GbPoolStats::default();
    raw_ioctl(ro.as_raw_fd(), GB_IOC_POOL_STATS, &mut st as *mut GbPoolStats as usize)
        .map_err(|e| format!("POOL_STATS on O_RDONLY: {}", errname(e)))?;
    // A read-write open still allocates.
    drop(dev.alloc(2 << 20)?);
    Ok(Outcome::Pass)
}
