//! Who may do what: a read-only open of /dev/greenboost reads figures but cannot
//! allocate; per-process rows are not in the world-readable sysfs file but only in
//! GB_IOC_LIST_PROCS, where a user sees their own processes and root every one.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::io::{BufRead, Write};
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

/// GB_IOC_LIST_PROCS on `fd` with room for `capacity` rows: the rows and `total`.
pub fn list_procs(fd: i32, capacity: u32) -> Result<(Vec<GbProcRow>, u32), i32> {
    let mut rows = vec![GbProcRow::default(); capacity as usize];
    let mut req = GbProcList { rows: rows.as_mut_ptr() as u64, capacity, ..Default::default() };
    raw_ioctl(fd, GB_IOC_LIST_PROCS, &mut req as *mut GbProcList as usize)?;
    rows.truncate(req.count as usize);
    Ok((rows, req.total))
}

/// GB_IOC_LIST_PROCS with `GB_PROC_LIST_T3`: every visible row with its T3 figures.
pub fn list_procs_t3(fd: i32) -> Result<Vec<GbProcRowT3>, String> {
    let mut rows = vec![GbProcRowT3::default(); 64];
    let mut req = GbProcList { rows: rows.as_mut_ptr() as u64, capacity: 64, flags: GB_PROC_LIST_T3, ..Default::default() };
    raw_ioctl(fd, GB_IOC_LIST_PROCS, &mut req as *mut GbProcList as usize)
        .map_err(|e| format!("LIST_PROCS with GB_PROC_LIST_T3: {}", errname(e)))?;
    rows.truncate(req.count as usize);
    Ok(rows)
}

/// A row's command name as text.
pub fn comm(row: &GbProcRow) -> String {
    String::from_utf8_lossy(row.comm.split(|&b| b == 0).next().unwrap_or(&[])).into_owned()
}

const GROUP: u32 = 4243;
const USER: u32 = 4301;

/// Gives the device node back to root:root on drop.
struct NodeGroup(std::ffi::CString);

impl Drop for NodeGroup {
    fn drop(&mut self) {
        // SAFETY: chown by path.
        unsafe { libc::chown(self.0.as_ptr(), 0, 0) };
    }
}

/// What a user (not root) sees: no per-process line in sysfs, only its own processes
/// in GB_IOC_LIST_PROCS; root sees the user's process and its own.
fn user_view(me: i32, root_pid: i32) -> Result<(), String> {
    let text = std::fs::read_to_string(GB_SYSFS_STATS).map_err(|e| format!("{GB_SYSFS_STATS} as uid {USER}: {e}"))?;
    if let Some(line) = text.lines().find(|l| l.starts_with("proc ") || l.contains("pid=") || l.contains("comm=")) {
        return Err(format!("uid {USER} reads a per-process line in {GB_SYSFS_STATS}: {line}"));
    }
    let dev = Dev::open()?;
    let (rows, total) = list_procs(dev.raw(), 64).map_err(|e| format!("GB_IOC_LIST_PROCS as uid {USER}: {}", errname(e)))?;
    ensure(total as usize == rows.len(), || format!("total {total} but {} rows", rows.len()))?;
    if let Some(r) = rows.iter().find(|r| r.uid != USER || r.pid == root_pid) {
        return Err(format!("uid {USER} sees another user's process: pid {} uid {} ({})", r.pid, r.uid, comm(r)));
    }
    let own = rows.iter().find(|r| r.pid == me).ok_or_else(|| format!("uid {USER} does not see its own pid {me}: {rows:?}"))?;
    ensure(own.t2_used == 2 << 20 && own.buffers == 1 && own.files >= 1 && comm(own) == "gb-guest-tests", || format!("own row: {own:?}"))?;
    let (none, total0) = list_procs(dev.raw(), 0).map_err(|e| format!("LIST_PROCS with capacity 0: {}", errname(e)))?;
    ensure(none.is_empty() && total0 == total, || format!("capacity 0: {} rows, total {total0} (expected {total})", none.len()))?;
    let mut bad = GbProcList { flags: 2, ..Default::default() };
    expect_errno("LIST_PROCS with an unknown flag", raw_ioctl(dev.raw(), GB_IOC_LIST_PROCS, &mut bad as *mut GbProcList as usize), libc::EINVAL)?;
    Ok(())
}

pub fn proc_rows_visibility() -> TestResult {
    let dev = Dev::open()?;
    let _held = dev.alloc(4 << 20)?;
    // SAFETY: getpid has no preconditions.
    let root_pid = unsafe { libc::getpid() };
    let node = std::ffi::CString::new(GB_DEVICE_PATH).expect("path");
    // SAFETY: chown of the device node by path (the udev rule's group); restored on drop.
    ensure(unsafe { libc::chown(node.as_ptr(), 0, GROUP) } == 0, || format!("chgrp {GB_DEVICE_PATH}: {}", errname(errno())))?;
    let _restore = NodeGroup(node);
    let (mut child, r) = spawn_with_pipe(move |mut w| {
        let groups = [GROUP];
        // SAFETY: dropping privileges in the forked child.
        if unsafe { libc::setgroups(1, groups.as_ptr()) != 0 || libc::setgid(USER) != 0 || libc::setuid(USER) != 0 } {
            let _ = writeln!(w, "ERR cannot become uid {USER}");
            return 1;
        }
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let result = Dev::open().and_then(|d| d.alloc(2 << 20).map(|b| (d, b))).and_then(|held| user_view(me, root_pid).map(|()| held));
        match result {
            Ok(held) => {
                let _ = writeln!(w, "OK");
                // Alive (with its buffer) until the parent has looked as root.
                std::thread::sleep(std::time::Duration::from_secs(30));
                drop(held);
                0
            }
            Err(e) => {
                let _ = writeln!(w, "ERR {e}");
                1
            }
        }
    });
    let mut line = String::new();
    std::io::BufReader::new(r).read_line(&mut line).map_err(|e| format!("reading the child: {e}"))?;
    if let Some(e) = line.trim().strip_prefix("ERR ") {
        return Err(e.to_string());
    }
    ensure(line.trim() == "OK", || format!("child said {line:?}"))?;
    // Root sees both processes, and the rows add up to the pool's T2 total.
    let (rows, total) = list_procs(dev.raw(), 64).map_err(|e| format!("GB_IOC_LIST_PROCS as root: {}", errname(e)))?;
    ensure(total as usize == rows.len(), || format!("root: total {total} but {} rows", rows.len()))?;
    ensure(rows.iter().any(|r| r.pid == child.pid && r.uid == USER), || format!("root does not see uid {USER}'s pid {}: {rows:?}", child.pid))?;
    ensure(rows.iter().any(|r| r.pid == root_pid && r.uid == 0 && r.t2_used == 4 << 20), || format!("root does not see its own row: {rows:?}"))?;
    let pool = dev.pool()?;
    let sum: u64 = rows.iter().map(|r| r.t2_used).sum();
    ensure(sum == pool.t2_used, || format!("rows sum to T2 {sum}, POOL_STATS says {}", pool.t2_used))?;
    child.kill(libc::SIGKILL);
    child.wait();
    Ok(Outcome::Pass)
}
