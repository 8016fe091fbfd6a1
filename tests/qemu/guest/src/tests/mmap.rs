//! mmap of the DMA-BUF fd: bounds, shared views, lifetime, VMA flags, and that no data
//! crosses from one process's freed buffer into another's fresh one.

use crate::gb::*;
use crate::harness::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;

pub fn mmap_bounds() -> TestResult {
    let dev = Dev::open()?;
    let pg = page_size();
    let buf = dev.alloc(3 * pg)?;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let fd = buf.raw();
    let bad: [(&str, u64, usize); 6] = [
        ("length beyond the buffer", 0, 4 * pg as usize),
        ("offset at the end", 3 * pg, pg as usize),
        ("offset+length beyond the end", 2 * pg, 2 * pg as usize),
        ("offset far beyond", 1 << 40, pg as usize),
        ("offset near u64 max", (i64::MAX as u64) & !(pg - 1), pg as usize),
        ("huge length", 0, 1 << 40),
    ];
    for (what, off, len) in bad {
        match Mapping::of_fd(fd, off, len, rw) {
            Ok(_) => return Err(format!("mmap with {what} (offset {off:#x}, length {len:#x}) succeeded")),
            Err(libc::EINVAL) => {}
            // The VMA layer may refuse a length no address space holds before the driver sees it.
            Err(libc::ENOMEM) if len >= 1 << 40 => {}
            Err(e) => return Err(format!("mmap with {what}: {}, expected EINVAL", errname(e))),
        }
    }
    expect_errno("mmap at an unaligned offset", Mapping::of_fd(fd, 100, pg as usize, rw), libc::EINVAL)?;
    // A private (copy-on-write) mapping of pinned shared memory makes no sense: refused.
    // SAFETY: a fresh mapping request; on success it is unmapped at once.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), pg as usize, rw, libc::MAP_PRIVATE, fd, 0) };
    if p != libc::MAP_FAILED {
        // SAFETY: unmapping what the call above mapped.
        unsafe { libc::munmap(p, pg as usize) };
        return Err("MAP_PRIVATE mapping of a buffer succeeded".into());
    }
    ensure(errno() == libc::EINVAL, || format!("MAP_PRIVATE: {}, expected EINVAL", errname(errno())))?;
    // In-bounds partial mappings see the right pages.
    let full = buf.map()?;
    full.fill(7, 1);
    let tail = Mapping::of_fd(fd, pg, 2 * pg as usize, rw).map_err(|e| format!("mmap(offset 1 page, 2 pages): {}", errname(e)))?;
    let pw = page_words();
    for w in [0, 1, pw - 1, pw, 2 * pw - 1] {
        ensure(tail.read_u64(w) == full.read_u64(pw + w), || format!("offset mapping word {w} differs from the full mapping's word {}", pw + w))?;
    }
    let last = Mapping::of_fd(fd, 2 * pg, pg as usize, libc::PROT_READ).map_err(|e| format!("mmap(last page): {}", errname(e)))?;
    ensure(last.read_u64(pw - 1) == full.read_u64(3 * pw - 1), || "last-page mapping shows the wrong page".into())?;
    // The mapping cannot grow past the buffer (VM_DONTEXPAND).
    // SAFETY: mremap of our own mapping; on success the old mapping object would be
    // stale, so success is turned into an immediate failure below.
    let grown = unsafe { libc::mremap(full.ptr() as *mut libc::c_void, full.len(), full.len() + pg as usize, libc::MREMAP_MAYMOVE) };
    ensure(grown == libc::MAP_FAILED, || "mremap grew a buffer mapping past its end".into())?;
    ensure(errno() == libc::EFAULT, || format!("mremap grow: {}, expected EFAULT (VM_DONTEXPAND)", errname(errno())))?;
    Ok(Outcome::Pass)
}

pub fn mmap_vma_flags() -> TestResult {
    let dev = Dev::open()?;
    let buf = dev.alloc(4 * MIB)?;
    let map = buf.map()?;
    let smaps = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(s) => s,
        Err(_) => return Ok(Outcome::Skip("/proc/self/smaps absent (CONFIG_PROC_PAGE_MONITOR off)".into())),
    };
    let start = format!("{:x}-", map.ptr() as usize);
    let section: Vec<&str> = smaps.lines().skip_while(|l| !l.starts_with(&start)).take_while(|l| !l.starts_with("VmFlags:")).collect();
    ensure(!section.is_empty(), || format!("mapping {start} not in smaps"))?;
    let flags_line = smaps.lines().skip_while(|l| !l.starts_with(&start)).find(|l| l.starts_with("VmFlags:")).unwrap_or("");
    let flags: Vec<&str> = flags_line.split_whitespace().skip(1).collect();
    note(&format!("VmFlags: {}", flags.join(" ")));
    for must in ["mm", "de", "sh"] {
        ensure(flags.contains(&must), || format!("mapping lacks VmFlag '{must}' (VM_MIXEDMAP/VM_DONTEXPAND/VM_SHARED): {flags_line}"))?;
    }
    for never in ["io", "pf"] {
        ensure(!flags.contains(&never), || format!("mapping has VmFlag '{never}' (VM_IO/VM_PFNMAP): cannot be pinned"))?;
    }
    Ok(Outcome::Pass)
}

pub fn mmap_shared_views() -> TestResult {
    let dev = Dev::open()?;
    let buf = dev.alloc(2 * MIB + page_size())?;
    let a = buf.map()?;
    let b = buf.map()?;
    ensure(a.ptr() != b.ptr(), || "two mmaps returned one address".into())?;
    a.fill(0xa11ce, 1);
    b.verify(0xa11ce, 1).map_err(|e| format!("second mapping does not see the first's writes: {e}"))?;
    b.fill(0xb0b, 3);
    a.verify(0xb0b, 3).map_err(|e| format!("first mapping does not see the second's writes: {e}"))?;
    // A dup()ed fd is the same buffer.
    // SAFETY: dup of an fd we own.
    let dup = unsafe { libc::dup(buf.raw()) };
    ensure(dup >= 0, || "dup failed".into())?;
    let c = Mapping::of_fd(dup, 0, buf.size as usize, libc::PROT_READ).map_err(|e| format!("mmap of dup: {}", errname(e)))?;
    // SAFETY: closing our dup.
    unsafe { libc::close(dup) };
    c.verify(0xb0b, 3).map_err(|e| format!("mapping of a dup()ed fd: {e}"))?;
    Ok(Outcome::Pass)
}

/// Buffers outlive the /dev/greenboost fd, and a mapping outlives the DMA-BUF fd.
pub fn buffer_lifetime() -> TestResult {
    let base = Dev::open()?.pool()?;
    let dev = Dev::open()?;
    let buf = dev.alloc(4 * MIB)?;
    drop(dev);
    let map = buf.map().map_err(|e| format!("after closing /dev/greenboost: {e}"))?;
    map.fill(42, 1);
    map.verify(42, 1)?;
    let size = buf.size;
    drop(buf);
    let probe = Dev::open()?;
    let st = probe.pool()?;
    ensure(st.buffers == base.buffers + 1 && st.t2_used == base.t2_used + size, || {
        format!("mapping alone should keep the buffer: pool {} buffers / {} bytes", st.buffers, st.t2_used)
    })?;
    map.verify(42, 1).map_err(|e| format!("after closing the DMA-BUF fd: {e}"))?;
    drop(map);
    probe.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// A process writes a secret into buffers and frees them; another process's fresh
/// buffers (which reuse those pages) must read as zero.
pub fn fresh_pages_zeroed() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    // Enough to cycle through the pre-zeroed cache and into recycled pages.
    let chunk = 16 * MIB;
    let total = (info.cache_target + 64 * MIB).min(256 * MIB);
    let count = (total / chunk).max(2);
    let secret = 0x005e_c2e7_u64;
    for round in 0..3 {
        let mut writer = Child::spawn(move || {
            let Ok(dev) = Dev::open() else { return 1 };
            let mut held = Vec::new();
            for _ in 0..count {
                let Ok(b) = dev.try_alloc(chunk) else { return 2 };
                let Ok(m) = b.map() else { return 3 };
                m.fill(secret, 1);
                held.push((b, m));
            }
            0
        });
        writer.expect_success(&format!("round {round}: secret writer"))?;
        let base = dev.pool()?;
        let mut reader = Child::spawn(move || {
            let Ok(dev) = Dev::open() else { return 1 };
            let mut held = Vec::new();
            for i in 0..count + 1 {
                let Ok(b) = dev.try_alloc(chunk) else { return 2 };
                let Ok(m) = b.map() else { return 3 };
                if let Err(e) = m.verify_zero(1) {
                    note(&format!("fresh buffer {i} ({} bytes): {e}", b.size));
                    return 4;
                }
                held.push((b, m));
            }
            0
        });
        reader.expect_success(&format!("round {round}: fresh buffers after another process's secret not all zero"))?;
        dev.settle_to(&base, Duration::from_secs(5))?;
    }
    note(&format!("{} x {} MiB written and re-read 3 times", count, chunk >> 20));
    Ok(Outcome::Pass)
}
