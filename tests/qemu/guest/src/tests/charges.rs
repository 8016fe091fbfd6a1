//! Who pays for a buffer besides the module's own caps (issue 11, finding 2): the
//! allocating task's memory cgroup, and an unprivileged user's RLIMIT_MEMLOCK.

use crate::gb::*;
use crate::harness::*;
use std::ffi::CString;
use std::io::{Read, Write};

const MIB: u64 = 1 << 20;
const CGROOT: &str = "/sys/fs/cgroup";

/// A child that runs `f` (given its device, after `setup`) and reports its result as a
/// list of one byte per step: 0 or the errno; 200 if the device would not open.
fn child_steps(setup: impl FnOnce() -> bool, f: impl FnOnce(&Dev) -> Vec<u8>) -> Result<Vec<u8>, String> {
    let (mut child, mut r) = spawn_with_pipe(move |mut w| {
        if !setup() {
            return 11;
        }
        let out = match Dev::open() {
            Ok(dev) => f(&dev),
            Err(_) => vec![200],
        };
        let _ = w.write_all(&out);
        0
    });
    let mut out = Vec::new();
    let _ = r.read_to_end(&mut out);
    child.expect_success("child")?;
    Ok(out)
}

fn code(r: Result<Buffer, i32>, keep: &mut Vec<Buffer>) -> u8 {
    match r {
        Ok(b) => {
            keep.push(b);
            0
        }
        Err(e) => e as u8,
    }
}

/// A task in a cgroup with memory.max=64M cannot get more than that through the module:
/// an ALLOC of 96 MiB fails with ENOMEM (no OOM kill), one of 32 MiB succeeds and shows
/// in the cgroup's memory.current. Needs cgroup v2 with the memory controller (the
/// stock guest's kernel; skipped on the minimal test kernel).
pub fn memcg_limit() -> TestResult {
    if !std::path::Path::new(&format!("{CGROOT}/cgroup.controllers")).exists() {
        let _ = std::fs::create_dir_all(CGROOT);
        let (src, dir, fs) = (CString::new("none").unwrap(), CString::new(CGROOT).unwrap(), CString::new("cgroup2").unwrap());
        // SAFETY: valid NUL-terminated strings; no mount data.
        let r = unsafe { libc::mount(src.as_ptr(), dir.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
        if r != 0 {
            return Ok(Outcome::Skip(format!("no cgroup v2 ({})", errname(errno()))));
        }
    }
    let controllers = std::fs::read_to_string(format!("{CGROOT}/cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Ok(Outcome::Skip("kernel without the memory controller (CONFIG_MEMCG)".into()));
    }
    std::fs::write(format!("{CGROOT}/cgroup.subtree_control"), "+memory").map_err(|e| format!("enable memory controller: {e}"))?;
    let cg = format!("{CGROOT}/gb-memcg-test");
    let _ = std::fs::remove_dir(&cg);
    std::fs::create_dir(&cg).map_err(|e| format!("mkdir {cg}: {e}"))?;
    struct Rmdir(String);
    impl Drop for Rmdir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _rm = Rmdir(cg.clone());
    std::fs::write(format!("{cg}/memory.max"), "64M").map_err(|e| format!("memory.max: {e}"))?;
    let _ = std::fs::write(format!("{cg}/memory.swap.max"), "0");
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let procs = format!("{cg}/cgroup.procs");
    let current = format!("{cg}/memory.current");
    let steps = child_steps(
        move || std::fs::write(&procs, "0").is_ok(),
        move |dev| {
            let mut keep = Vec::new();
            let big = code(dev.try_alloc(96 * MIB), &mut keep);
            keep.clear();
            let small = code(dev.try_alloc(32 * MIB), &mut keep);
            let charged = std::fs::read_to_string(&current).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0);
            vec![big, small, u8::from(charged >= 32 * MIB)]
        },
    )?;
    ensure(steps.len() == 3, || format!("child reported {steps:?}"))?;
    ensure(steps[0] == libc::ENOMEM as u8, || {
        format!("ALLOC of 96 MiB in a cgroup with memory.max=64M: {}, expected ENOMEM (the cgroup must pay)", errname(steps[0] as i32))
    })?;
    ensure(steps[1] == 0, || format!("ALLOC of 32 MiB within memory.max: {}", errname(steps[1] as i32)))?;
    ensure(steps[2] == 1, || "the cgroup's memory.current does not show the 32 MiB buffer".to_string())?;
    dev.settle_to(&base, std::time::Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// An unprivileged user (no CAP_IPC_LOCK) with RLIMIT_MEMLOCK of 16 MiB: 8 MiB
/// succeeds, 16 MiB more fails with ENOMEM, and after the first buffer is freed 16 MiB
/// fit. Root (CAP_IPC_LOCK) is not limited (every other test allocates far more).
pub fn memlock_unprivileged() -> TestResult {
    const GROUP: u32 = 4243;
    const UID: u32 = 1002;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let node = CString::new(greenboost_abi::GB_DEVICE_PATH).unwrap();
    // SAFETY: chown of the device node by path; restored below.
    ensure(unsafe { libc::chown(node.as_ptr(), 0, GROUP) } == 0, || format!("chgrp: {}", errname(errno())))?;
    struct Restore(CString);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: chown by path.
            unsafe { libc::chown(self.0.as_ptr(), 0, 0) };
        }
    }
    let _restore = Restore(node);
    let steps = child_steps(
        || {
            let lim = libc::rlimit { rlim_cur: 16 * MIB, rlim_max: 16 * MIB };
            let groups = [GROUP];
            // SAFETY: setting our own limit and dropping privileges in the forked child.
            unsafe {
                libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) == 0
                    && libc::setgroups(1, groups.as_ptr()) == 0
                    && libc::setgid(UID) == 0
                    && libc::setuid(UID) == 0
            }
        },
        |dev| {
            let mut keep = Vec::new();
            let a = code(dev.try_alloc(8 * MIB), &mut keep);
            let mut more = Vec::new();
            let b = code(dev.try_alloc(16 * MIB), &mut more);
            keep.clear();
            more.clear();
            let c = code(dev.try_alloc(16 * MIB), &mut keep);
            vec![a, b, c]
        },
    )?;
    ensure(steps.len() == 3, || format!("child reported {steps:?} (200: could not open the node through its group)"))?;
    ensure(steps[0] == 0, || format!("8 MiB under a 16 MiB RLIMIT_MEMLOCK: {}", errname(steps[0] as i32)))?;
    ensure(steps[1] == libc::ENOMEM as u8, || {
        format!("16 MiB more (24 > 16 MiB RLIMIT_MEMLOCK) as uid {UID}: {}, expected ENOMEM", errname(steps[1] as i32))
    })?;
    ensure(steps[2] == 0, || format!("16 MiB after freeing the first buffer: {}", errname(steps[2] as i32)))?;
    dev.settle_to(&base, std::time::Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}
