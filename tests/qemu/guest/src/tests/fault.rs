//! Mappings whose page tables change after mmap: MADV_DONTNEED (the fault handler maps
//! the buffer's pages back, and they can be pinned again), partial munmap, mremap to
//! another address, fork (the child uses the inherited mapping) and MADV_DONTFORK.
//! Every access that could fault runs in a forked child, so that a SIGBUS is reported
//! as such rather than killing the test.

use crate::gb::*;
use crate::harness::*;
use crate::uring::Uring;
use std::time::Duration;

const MIB: usize = 1 << 20;
const LEN: usize = 4 * MIB;
/// Words between two checked ones: a prime, so every page and offset is sampled.
const STRIDE: usize = 61;

pub fn madvise(ptr: *mut u8, len: usize, advice: i32) -> Result<(), String> {
    // SAFETY: advice on a range of a mapping the caller owns; DONTNEED on a shared
    // mapping drops page-table entries only, never the buffer's contents.
    let r = unsafe { libc::madvise(ptr as *mut libc::c_void, len, advice) };
    ensure(r == 0, || format!("madvise({advice}) of {len} bytes: {}", errname(errno())))
}

/// madvise(2) exists (kernels without CONFIG_ADVISE_SYSCALLS answer ENOSYS).
pub fn have_madvise() -> bool {
    let m = Mapping::anonymous(4096).expect("anonymous page");
    // SAFETY: advice on our own anonymous page.
    unsafe { libc::madvise(m.ptr() as *mut libc::c_void, 4096, libc::MADV_NORMAL) == 0 }
}

const NO_MADVISE: &str = "madvise(2) is ENOSYS here (CONFIG_ADVISE_SYSCALLS off); the stock guest runs it";

/// Checks in a forked child that `words` words from `ptr` hold `pattern(seed, first + i)`
/// (sampled every STRIDE words); a signal that kills the child is named.
fn child_verifies(what: &str, ptr: *mut u8, first: usize, words: usize, seed: u64) -> Result<(), String> {
    let addr = ptr as usize;
    let mut child = Child::spawn(move || {
        for i in (0..words).step_by(STRIDE) {
            // SAFETY: `addr` is a live mapping of at least `words` words in this
            // (forked) address space; a fault kills only this child.
            let got = unsafe { std::ptr::read_volatile((addr as *const u64).add(i)) };
            if got != pattern(seed, first + i) {
                println!("  # {what}: word {} is {got:#x}, expected {:#x}", first + i, pattern(seed, first + i));
                return 1;
            }
        }
        0
    });
    let st = child.wait();
    match describe_status(st) {
        None => Ok(()),
        Some(_) if libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGBUS => {
            Err(format!("{what}: SIGBUS (no fault handler maps the page back)"))
        }
        Some(d) => Err(format!("{what}: {d}")),
    }
}

fn iov(ptr: *mut u8, len: usize) -> libc::iovec {
    libc::iovec { iov_base: ptr as *mut libc::c_void, iov_len: len }
}

/// MADV_DONTNEED is accepted; afterwards the range reads the buffer's data (not SIGBUS,
/// not zeros), writes reach the buffer, and the range can be long-term pinned again.
pub fn dontneed_refaults() -> TestResult {
    if !have_madvise() {
        return Ok(Outcome::Skip(NO_MADVISE.into()));
    }
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let buf = dev.alloc(LEN as u64)?;
    let m = buf.map()?;
    let other = buf.map()?;
    m.fill(0x51, 1);
    // A range across a 2 MiB chunk boundary, not aligned to it.
    let (off, len) = (MIB + 4096 * 3, 2 * MIB);
    madvise(m.ptr().wrapping_add(off), len, libc::MADV_DONTNEED)?;
    child_verifies("reading after MADV_DONTNEED", m.ptr().wrapping_add(off), off / 8, len / 8, 0x51)?;
    m.verify(0x51, STRIDE)?;
    // Writes through the re-faulted pages reach the buffer (seen by another mapping).
    madvise(m.ptr(), LEN, libc::MADV_DONTNEED)?;
    m.fill(0x52, STRIDE);
    other.verify(0x52, STRIDE).map_err(|e| format!("after MADV_DONTNEED and a write, another mapping of the buffer: {e}"))?;
    // Pinning (what cuMemHostRegister does) faults the range in again.
    madvise(m.ptr(), LEN, libc::MADV_DONTNEED)?;
    let ring = Uring::new(4)?;
    ring.register_buffers(&[iov(m.ptr(), LEN)])
        .map_err(|e| format!("IORING_REGISTER_BUFFERS after MADV_DONTNEED: {} (cuMemHostRegister would fail too)", errname(e)))?;
    m.verify(0x52, STRIDE).map_err(|e| format!("pinned after MADV_DONTNEED: {e}"))?;
    ring.unregister_buffers().map_err(|e| format!("unregister: {}", errname(e)))?;
    drop((ring, m, other, buf));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// An address range this test maps and unmaps by hand (mremap moves it).
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping the range this object stands for; any part already unmapped
        // is ignored by munmap.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn map_region(fd: i32, offset: usize, len: usize) -> Result<Region, String> {
    let m = Mapping::of_fd(fd, offset as u64, len, libc::PROT_READ | libc::PROT_WRITE)
        .map_err(|e| format!("mmap: {}", errname(e)))?;
    let r = Region { ptr: m.ptr(), len };
    std::mem::forget(m);
    Ok(r)
}

/// Partial munmap, mremap to another address, fork and MADV_DONTFORK; after each the
/// pages are the buffer's, also once zapped and faulted back.
pub fn split_move_fork() -> TestResult {
    if !have_madvise() {
        return Ok(Outcome::Skip(NO_MADVISE.into()));
    }
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let buf = dev.alloc(LEN as u64)?;
    let whole = buf.map()?;
    whole.fill(0x61, 1);
    let fd = buf.raw();
    // Partial munmap: the middle goes, both remaining pieces keep their pages.
    let r = map_region(fd, 0, LEN)?;
    // SAFETY: unmapping the middle MiB of our own region.
    let rc = unsafe { libc::munmap(r.ptr.wrapping_add(MIB) as *mut libc::c_void, MIB) };
    ensure(rc == 0, || format!("partial munmap: {}", errname(errno())))?;
    child_verifies("head piece after partial munmap", r.ptr, 0, MIB / 8, 0x61)?;
    let tail = r.ptr.wrapping_add(2 * MIB);
    madvise(tail, 2 * MIB, libc::MADV_DONTNEED)?;
    child_verifies("tail piece after partial munmap and MADV_DONTNEED", tail, 2 * MIB / 8, 2 * MIB / 8, 0x61)?;
    drop(r);
    // mremap: the second half of the buffer moves to another address.
    let from = map_region(fd, 2 * MIB, 2 * MIB)?;
    let to = Mapping::anonymous(2 * MIB).map_err(|e| format!("mmap target: {}", errname(e)))?;
    // SAFETY: moving our own mapping onto our own placeholder (which it replaces).
    let moved = unsafe {
        libc::mremap(from.ptr as *mut libc::c_void, 2 * MIB, 2 * MIB, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, to.ptr() as *mut libc::c_void)
    };
    ensure(moved == to.ptr() as *mut libc::c_void, || format!("mremap move: {}", errname(errno())))?;
    std::mem::forget(from);
    child_verifies("moved mapping", to.ptr(), 2 * MIB / 8, 2 * MIB / 8, 0x61)?;
    madvise(to.ptr(), 2 * MIB, libc::MADV_DONTNEED)?;
    child_verifies("moved mapping after MADV_DONTNEED", to.ptr(), 2 * MIB / 8, 2 * MIB / 8, 0x61)?;
    drop(to);
    // fork: the child writes through the inherited mapping (after zapping it), the
    // parent sees the writes.
    let (addr, words) = (whole.ptr() as usize, whole.words());
    let mut child = Child::spawn(move || {
        // SAFETY: DONTNEED on the inherited shared mapping (contents stay in the buffer).
        if unsafe { libc::madvise(addr as *mut libc::c_void, LEN, libc::MADV_DONTNEED) } != 0 {
            return 2;
        }
        for i in (0..words).step_by(STRIDE) {
            // SAFETY: the inherited live mapping of `words` words.
            unsafe { std::ptr::write_volatile((addr as *mut u64).add(i), pattern(0x62, i)) };
        }
        0
    });
    let st = child.wait();
    ensure(describe_status(st).is_none(), || format!("child writing the inherited mapping: {}", describe_status(st).unwrap_or_default()))?;
    whole.verify(0x62, STRIDE).map_err(|e| format!("parent after the child wrote the inherited mapping: {e}"))?;
    // MADV_DONTFORK: the child has no such mapping (SIGSEGV), the parent keeps it.
    let kept = Mapping::of_fd(fd, 0, MIB, libc::PROT_READ).map_err(|e| format!("mmap: {}", errname(e)))?;
    madvise(kept.ptr(), MIB, libc::MADV_DONTFORK)?;
    let kept_addr = kept.ptr() as usize;
    let mut child = Child::spawn(move || {
        // SAFETY: in the child, a read of an address that must not be mapped there: it
        // kills the child, or exits 0 if the mapping wrongly came along.
        let _ = unsafe { std::ptr::read_volatile(kept_addr as *const u64) };
        0
    });
    let st = child.wait();
    ensure(libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGSEGV, || {
        format!("child read a MADV_DONTFORK mapping: {}, expected SIGSEGV", describe_status(st).unwrap_or_else(|| "exit 0".into()))
    })?;
    // (in this process: a forked checker would not have the mapping either)
    kept.verify(0x62, STRIDE).map_err(|e| format!("parent's MADV_DONTFORK mapping: {e}"))?;
    drop((kept, whole, buf));
    dev.settle_to(&base, Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}

/// MADV_COLD and MADV_PAGEOUT over part of a mapped 2 MiB chunk return, and the data
/// stays (issue 37, finding 1): with the chunk a compound page, mm's cold/pageout walk
/// split the PTE-mapped large folio and retried the PTE, and without
/// CONFIG_TRANSPARENT_HUGEPAGE (the debug kernel) that split is a stub that succeeds,
/// so the walk spun in the kernel forever, holding the mmap lock, deaf to SIGKILL. The
/// walk leaves a folio mapped by two processes alone, so the madvising child maps the
/// buffer alone (this process has unmapped it), and runs apart so that a module with
/// the defect costs one stuck child (left behind), not the suite.
pub fn madvise_cold_partial_chunk() -> TestResult {
    if !have_madvise() {
        return Ok(Outcome::Skip(NO_MADVISE.into()));
    }
    let dev = Dev::open()?;
    let buf = dev.alloc(LEN as u64)?;
    buf.map()?.fill(0xc01d, STRIDE);
    let fd = buf.raw();
    let (mut child, mut out) = spawn_with_pipe(move |mut w| {
        let run = || -> Result<(), String> {
            let m = Mapping::of_fd(fd, 0, LEN, libc::PROT_READ | libc::PROT_WRITE).map_err(|e| format!("mmap: {}", errname(e)))?;
            // Every page mapped (by this process only).
            m.verify(0xc01d, STRIDE)?;
            // From inside the first chunk to inside the second: each is covered in part.
            let (start, len) = (m.ptr() as usize + 4096 * 5, 2 * MIB);
            for (name, advice) in [("MADV_COLD", libc::MADV_COLD), ("MADV_PAGEOUT", libc::MADV_PAGEOUT)] {
                // SAFETY: advice on part of our own shared mapping; neither drops the
                // buffer's contents.
                if unsafe { libc::madvise(start as *mut libc::c_void, len, advice) } != 0 {
                    return Err(format!("{name}: {}", errname(errno())));
                }
            }
            m.verify(0xc01d, STRIDE).map_err(|e| format!("after MADV_COLD/MADV_PAGEOUT: {e}"))
        };
        match run() {
            Ok(()) => 0,
            Err(e) => {
                let _ = std::io::Write::write_all(&mut w, e.as_bytes());
                1
            }
        }
    });
    let Some(status) = child.wait_timeout(Duration::from_secs(20)) else {
        // Unkillable in the kernel: waiting for it would hang this test too.
        std::mem::forget(child);
        return Err("madvise(MADV_COLD/MADV_PAGEOUT) over part of a chunk did not return within 20 s (the child spins in the kernel, SIGKILL cannot stop it)".into());
    };
    let mut why = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut why);
    ensure(describe_status(status).is_none(), || format!("madvise over part of a chunk: {why} ({})", describe_status(status).unwrap_or_default()))?;
    Ok(Outcome::Pass)
}

/// remap_file_pages and MADV_REMOVE, which act on a mapping's file, are refused (issue
/// 37, finding 4): with the buffer's shmem file as the vma's file, remap_file_pages
/// turned the range into a plain shmem mapping whose writes never reached the buffer,
/// and MADV_REMOVE punched holes in it. The mapping stays the buffer's: writes through
/// it reach another mapping.
pub fn remap_and_remove_refused() -> TestResult {
    if !have_madvise() {
        return Ok(Outcome::Skip(NO_MADVISE.into()));
    }
    let dev = Dev::open()?;
    let buf = dev.alloc(LEN as u64)?;
    let m = buf.map()?;
    let other = buf.map()?;
    m.fill(0x4e, STRIDE);
    // The first half of the mapping onto the buffer's second half.
    let pgoff = (2 * MIB) / page_size() as usize;
    // SAFETY: remap_file_pages on a range of our own shared mapping (prot 0, flags 0);
    // if the kernel does it, the range stays mapped (to other pages).
    let r = unsafe { libc::syscall(libc::SYS_remap_file_pages, m.ptr(), 2 * MIB, 0, pgoff, 0) };
    expect_errno("remap_file_pages on a buffer mapping", if r == 0 { Ok(()) } else { Err(errno()) }, libc::ENODEV)?;
    // SAFETY: MADV_REMOVE on a range of our own shared mapping.
    let r = unsafe { libc::madvise(m.ptr() as *mut libc::c_void, MIB, libc::MADV_REMOVE) };
    expect_errno("MADV_REMOVE on a buffer mapping", if r == 0 { Ok(()) } else { Err(errno()) }, libc::EOPNOTSUPP)?;
    m.verify(0x4e, STRIDE).map_err(|e| format!("after the refusals: {e}"))?;
    m.fill(0x4f, STRIDE);
    other.verify(0x4f, STRIDE).map_err(|e| format!("a write through the mapping after the refusals, read through another: {e}"))?;
    // msync still works (the map file's fsync, as the shmem file's).
    // SAFETY: msync of our own mapping.
    let r = unsafe { libc::msync(m.ptr() as *mut libc::c_void, LEN, libc::MS_SYNC) };
    ensure(r == 0, || format!("msync(MS_SYNC): {}", errname(errno())))?;
    Ok(Outcome::Pass)
}
