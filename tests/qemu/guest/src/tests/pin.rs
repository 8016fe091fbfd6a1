//! Long-term pin proxy: io_uring fixed buffers (IORING_REGISTER_BUFFERS pins with
//! FOLL_LONGTERM, as cuMemHostRegister does) over mmapped GreenBoost buffers, with
//! O_DIRECT I/O against the brd RAM disk /dev/ram0 through them.

use crate::gb::*;
use crate::harness::*;
use crate::uring::*;
use greenboost_abi::GB_CHUNK_SIZE;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

const MIB: u64 = 1 << 20;
const LEN: usize = 4 << 20;
const RAMDISK: &str = "/dev/ram0";

fn ramdisk() -> Result<OwnedFd, String> {
    open_path(RAMDISK, libc::O_RDWR | libc::O_DIRECT)
        .map_err(|e| format!("open {RAMDISK} O_DIRECT: {} (guest-suite.sh loads brd)", errname(e)))
}

fn iov(m: &Mapping) -> libc::iovec {
    libc::iovec { iov_base: m.ptr() as *mut libc::c_void, iov_len: m.len() }
}

fn expect_full(what: &str, r: Result<i32, String>) -> Result<(), String> {
    match r? {
        n if n == LEN as i32 => Ok(()),
        n if n < 0 => Err(format!("{what}: {}", errname(-n))),
        n => Err(format!("{what}: short transfer {n} of {LEN}")),
    }
}

pub fn longterm_pin_io_uring() -> TestResult {
    let disk = ramdisk()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let a_buf = dev.alloc(LEN as u64)?;
    let b_buf = dev.alloc(LEN as u64)?;
    let a = a_buf.map()?;
    let b = b_buf.map()?;
    // Control: ordinary anonymous memory must pin too (proves the harness works).
    let c = Mapping::anonymous(LEN).map_err(|e| format!("anonymous mmap: {}", errname(e)))?;
    c.fill(0, 1);
    let ring = Uring::new(8)?;
    ring.register_buffers(&[iov(&c)]).map_err(|e| format!("control: registering anonymous memory: {}", errname(e)))?;
    ring.unregister_buffers().map_err(|e| format!("unregister: {}", errname(e)))?;
    ring.register_buffers(&[iov(&a), iov(&b), iov(&c)])
        .map_err(|e| format!("IORING_REGISTER_BUFFERS (FOLL_LONGTERM pin) of GreenBoost mappings: {} — cuMemHostRegister would fail the same way", errname(e)))?;
    let fd = disk.as_raw_fd();
    // GreenBoost -> disk -> GreenBoost.
    a.fill(0x1a, 1);
    expect_full("WRITE_FIXED from buffer A", ring.rw_fixed(IORING_OP_WRITE_FIXED, fd, 0, a.ptr(), LEN as u32, 0))?;
    expect_full("READ_FIXED into buffer B", ring.rw_fixed(IORING_OP_READ_FIXED, fd, 1, b.ptr(), LEN as u32, 0))?;
    b.verify(0x1a, 1).map_err(|e| format!("data read back through the pinned buffer: {e}"))?;
    // Anonymous -> disk -> GreenBoost, at another offset.
    c.fill(0x2c, 1);
    expect_full("WRITE_FIXED from control", ring.rw_fixed(IORING_OP_WRITE_FIXED, fd, 2, c.ptr(), LEN as u32, 8 * MIB))?;
    expect_full("READ_FIXED into buffer A", ring.rw_fixed(IORING_OP_READ_FIXED, fd, 0, a.ptr(), LEN as u32, 8 * MIB))?;
    a.verify(0x2c, 1).map_err(|e| format!("A after READ_FIXED: {e}"))?;
    // Plain O_DIRECT (short-term pin) through the mapping.
    b.fill(0x3b, 1);
    // SAFETY: b is a live mapping of LEN bytes.
    let n = unsafe { libc::pwrite(fd, b.ptr() as *const libc::c_void, LEN, (16 * MIB) as i64) };
    ensure(n == LEN as isize, || format!("O_DIRECT pwrite from buffer B: {n} ({})", errname(errno())))?;
    // SAFETY: a is a live mapping of LEN bytes.
    let n = unsafe { libc::pread(fd, a.ptr() as *mut libc::c_void, LEN, (16 * MIB) as i64) };
    ensure(n == LEN as isize, || format!("O_DIRECT pread into buffer A: {n} ({})", errname(errno())))?;
    a.verify(0x3b, 1).map_err(|e| format!("A after O_DIRECT pread: {e}"))?;
    ring.unregister_buffers().map_err(|e| format!("unregister: {}", errname(e)))?;
    drop((a, b, a_buf, b_buf, ring));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// The pages of a freed buffer that io_uring still pins must not be handed to a new
/// buffer: writes through the old pin would show up in someone else's memory.
pub fn pinned_pages_not_recycled() -> TestResult {
    let disk = ramdisk()?;
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let ring = Uring::new(8)?;
    let pinned_before = sysfs_counter("pinned_on_release")?;
    let old_buf = dev.alloc(LEN as u64)?;
    let old = old_buf.map()?;
    let old_ptr = old.ptr();
    ring.register_buffers(&[iov(&old)]).map_err(|e| format!("IORING_REGISTER_BUFFERS: {}", errname(e)))?;
    // Free the buffer while the pin lives (munmap + close: the DMA-BUF is released),
    // with room in the cache (raised just before) so that the pool would keep its pages.
    let cache_mb = dev.info()?.cache_target / MIB + 2 * LEN as u64 / MIB;
    let _room = crate::tests::pressure::ParamGuard::set("cache_mb", &cache_mb.to_string())?;
    drop(old);
    drop(old_buf);
    // Let the module finish recycling (its refill worker zeroes returned pages into the
    // cache), then take more than the whole cache: freed pages that went back to the
    // cache would now be in one of these buffers. Each holds a known pattern.
    let t0 = std::time::Instant::now();
    while sysfs_counter("t2_zeroed_bytes")? != sysfs_counter("t2_cached_bytes")? && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let count = dev.info()?.cache_target / LEN as u64 + 4;
    let mut fresh = Vec::new();
    for i in 0..count {
        let b = dev.alloc(LEN as u64)?;
        let m = b.map()?;
        m.fill(0xd0 + i, 1);
        fresh.push((b, m, 0xd0 + i));
    }
    // Write through the stale pin: the RAM disk content lands in the old pages.
    let src = Mapping::anonymous(LEN).map_err(|e| format!("mmap: {}", errname(e)))?;
    src.fill(0xbad, 1);
    let fd = disk.as_raw_fd();
    // SAFETY: src is a live mapping of LEN bytes.
    let n = unsafe { libc::pwrite(fd, src.ptr() as *const libc::c_void, LEN, (32 * MIB) as i64) };
    ensure(n == LEN as isize, || format!("O_DIRECT pwrite: {}", errname(errno())))?;
    expect_full("READ_FIXED into the freed-but-pinned pages", ring.rw_fixed(IORING_OP_READ_FIXED, fd, 0, old_ptr, LEN as u32, 32 * MIB))?;
    for (b, m, seed) in &fresh {
        m.verify(*seed, 1).map_err(|e| format!("buffer {} allocated after the free changed under a stale long-term pin (pages recycled while pinned): {e}", b.id))?;
    }
    // The module saw the pin when the buffer died (its sysfs counter of chunks dropped
    // to the kernel instead of being reused), so the check above was not luck.
    let pinned_after = sysfs_counter("pinned_on_release")?;
    ensure(pinned_after >= pinned_before + LEN as u64 / GB_CHUNK_SIZE, || {
        format!("pinned_on_release went {pinned_before} -> {pinned_after}; a {LEN}-byte buffer freed under a pin should add {}", LEN as u64 / GB_CHUNK_SIZE)
    })?;
    drop(fresh);
    ring.unregister_buffers().map_err(|e| format!("unregister: {}", errname(e)))?;
    drop(ring);
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}
