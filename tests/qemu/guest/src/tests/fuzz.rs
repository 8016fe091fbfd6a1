//! Random ioctls: random commands (valid GreenBoost numbers, our magic with random
//! number/size/direction, anything), random argument contents and random or invalid
//! pointers, on /dev/greenboost and on DMA-BUF fds. Every answer must be one the ABI
//! allows for that command and pointer, the kernel must log nothing (checked by the
//! runner around every test and explicitly here), and the module must work afterwards.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::time::Duration;

const ITERATIONS: u64 = 12_000;
const DMA_BUF_IOCTL_SYNC: u32 = 0x4008_6200;

fn seed() -> u64 {
    std::env::var("GB_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x6b_2026)
}

enum Ptr {
    Good(usize),
    Bad(&'static str, usize),
}

fn random_cmd(rng: &mut Rng) -> u32 {
    match rng.below(10) {
        0..=4 => GB_IOC_ALL[rng.below(GB_IOC_ALL.len() as u64) as usize],
        5..=7 => {
            let dir = rng.below(4) as u32;
            let size = if rng.chance(50) { rng.below(128) as u32 } else { rng.below(1 << 14) as u32 };
            let nr = if rng.chance(60) { rng.below(8) as u32 } else { rng.below(256) as u32 };
            (dir << 30) | (size << 16) | (GB_IOC_MAGIC << 8) | nr
        }
        _ => rng.next() as u32,
    }
}

/// Fills the scratch area with random bytes, sometimes shaped like a plausible request.
fn randomize(rng: &mut Rng, scratch: &Mapping, cmd: u32, eventfd: i32) {
    for w in 0..16 {
        scratch.write_u64(w, rng.next());
    }
    if cmd == GB_IOC_ALLOC && rng.chance(40) {
        // A well-formed ALLOC with a small size sometimes succeeds: exercise that path.
        let size = match rng.below(4) {
            0 => 1 + rng.below(8 << 20),
            1 => rng.below(1 << 12),
            2 => 1u64 << rng.below(64),
            _ => rng.next(),
        };
        let req = GbAlloc { size, flags: (rng.below(4) as u32) & GB_ALLOC_FLAGS_ALL, numa_node: rng.below(4) as i32 - 2, ..Default::default() };
        // SAFETY: scratch holds 16 words; GbAlloc is 40 bytes at its start.
        unsafe { std::ptr::write_unaligned(scratch.ptr() as *mut GbAlloc, req) };
    }
    if cmd == GB_IOC_LIST_PROCS && rng.chance(50) {
        // Rows into the scratch page, after the request: a listing that succeeds.
        let rows = scratch.ptr() as u64 + 256;
        let req = GbProcList { rows, capacity: rng.below(8) as u32, flags: if rng.chance(80) { 0 } else { rng.next() as u32 }, ..Default::default() };
        // SAFETY: in bounds of scratch (24 bytes at its start).
        unsafe { std::ptr::write_unaligned(scratch.ptr() as *mut GbProcList, req) };
    }
    if cmd == GB_IOC_MOVE && rng.chance(60) {
        // A small fd (often one of the buffers earlier ALLOCs returned) and a real tier.
        let req = GbMove { fd: rng.below(64) as i32, tier: 2 + rng.below(2) as u32, ..Default::default() };
        // SAFETY: in bounds of scratch (32 bytes at its start).
        unsafe { std::ptr::write_unaligned(scratch.ptr() as *mut GbMove, req) };
    }
    if cmd == GB_IOC_REGISTER_EVENTFD && rng.chance(50) {
        let fd = match rng.below(3) {
            0 => eventfd,
            1 => rng.below(64) as i32,
            _ => rng.next() as i32,
        };
        // SAFETY: in bounds of scratch.
        unsafe { std::ptr::write_unaligned(scratch.ptr() as *mut GbEventfd, GbEventfd { fd, flags: if rng.chance(80) { 0 } else { rng.next() as u32 } }) };
    }
}

/// The errnos the ABI allows for a valid command whose argument is readable and writable.
fn allowed(cmd: u32) -> &'static [i32] {
    match cmd {
        GB_IOC_INFO | GB_IOC_POOL_STATS | GB_IOC_PROC_STATS | GB_IOC_T3_STATS => &[],
        // E2BIG: above INFO.max_alloc (1 TiB), the module's structural limit.
        GB_IOC_ALLOC => &[libc::EINVAL, libc::ENOMEM, libc::E2BIG],
        GB_IOC_REPORT_T1 => &[libc::EINVAL],
        // EEXIST: this eventfd is already registered on this file; ENOSPC: 64 per file.
        GB_IOC_REGISTER_EVENTFD => &[libc::EINVAL, libc::EBADF, libc::ENOSPC, libc::EEXIST],
        // EFAULT: the row array (a pointer inside the request) is not writable.
        GB_IOC_LIST_PROCS => &[libc::EINVAL, libc::EFAULT],
        // EBADF: no such fd; EINVAL: not a buffer of ours or a bad field; EBUSY:
        // attached or pinned; ENOMEM: no room in the tier asked for.
        GB_IOC_MOVE => &[libc::EINVAL, libc::EBADF, libc::EBUSY, libc::ENOMEM],
        _ => &[],
    }
}

pub fn random_ioctls() -> TestResult {
    let mut rng = Rng::new(seed());
    note(&format!("seed {} (GB_FUZZ_SEED replays it), {ITERATIONS} ioctls", seed()));
    let mut watch = KmsgWatch::start();
    ensure(watch.available(), || "/dev/kmsg unreadable: cannot watch for kernel complaints".into())?;
    let base = Dev::open()?.pool()?;
    let pg = page_size() as usize;
    // Scratch page followed by a PROT_NONE page (for structs that straddle the boundary).
    let scratch = Mapping::anonymous(2 * pg).map_err(|e| format!("mmap: {}", errname(e)))?;
    // SAFETY: re-protecting the second page of our own mapping.
    unsafe { libc::mprotect(scratch.ptr().add(pg) as *mut libc::c_void, pg, libc::PROT_NONE) };
    let efd = eventfd()?;
    let mut dev = Dev::open()?;
    let mut results: BTreeMap<String, u64> = BTreeMap::new();
    let mut successes_alloc = 0u64;
    let mut unexpected: Vec<String> = Vec::new();
    let mut dmabuf: Option<Buffer> = None;
    for i in 0..ITERATIONS {
        if i % 1000 == 999 {
            // A fresh file: drops eventfd registrations and the T1 report.
            dev = Dev::open()?;
        }
        let cmd = random_cmd(&mut rng);
        randomize(&mut rng, &scratch, cmd, efd.as_raw_fd());
        let ptr = match rng.below(12) {
            0 => Ptr::Bad("NULL", 0),
            1 => Ptr::Bad("low", rng.below(0x10000) as usize),
            2 => Ptr::Bad("kernel", 0xffff_8000_0000_0000 | (rng.next() as usize & 0x7fff_ffff_fff8)),
            3 => Ptr::Bad("guard page", scratch.ptr() as usize + pg + rng.below(pg as u64) as usize),
            // At most 7 readable bytes before the guard: shorter than any ABI struct.
            4 => Ptr::Bad("straddling", scratch.ptr() as usize + pg - 4 - rng.below(4) as usize),
            5 => Ptr::Bad("random", rng.next() as usize | (1 << 63)),
            _ => Ptr::Good(scratch.ptr() as usize + 8 * rng.below(4) as usize),
        };
        let on_dmabuf = rng.chance(8);
        let (fd, what) = match (&dmabuf, on_dmabuf) {
            (Some(b), true) => (b.raw(), "dmabuf"),
            _ => (dev.raw(), "dev"),
        };
        let cmd = if on_dmabuf && rng.chance(50) { DMA_BUF_IOCTL_SYNC } else { cmd };
        if cmd == DMA_BUF_IOCTL_SYNC {
            scratch.write_u64(0, if rng.chance(50) { rng.below(8) } else { rng.next() });
        }
        let (addr, bad) = match ptr {
            Ptr::Good(a) => (a, None),
            Ptr::Bad(w, a) => (a, Some(w)),
        };
        let r = raw_ioctl(fd, cmd, addr);
        *results.entry(match r {
            Ok(_) => "ok".to_string(),
            Err(e) => errname(e),
        }).or_default() += 1;
        if what == "dev" {
            let known = GB_IOC_ALL.contains(&cmd);
            let ok = match (known, bad, r) {
                (false, _, Err(libc::ENOTTY)) => true,
                (false, _, _) => false,
                // The argument is read or written (or both) and cannot be.
                (true, Some(_), r) => matches!(r, Err(libc::EFAULT)),
                (true, None, Ok(_)) => true,
                (true, None, Err(e)) => allowed(cmd).contains(&e),
            };
            if !ok && unexpected.len() < 10 {
                unexpected.push(format!("iteration {i}: ioctl({cmd:#x}, {} pointer) -> {}", bad.unwrap_or("good"), r.map_or_else(errname, |v| format!("{v}"))));
            }
            if cmd == GB_IOC_ALLOC && bad.is_none() && r.is_ok() {
                successes_alloc += 1;
                // SAFETY: ALLOC succeeded, so scratch holds the filled request.
                let out = unsafe { std::ptr::read_unaligned(addr as *const GbAlloc) };
                // SAFETY: we own the returned fd.
                let b = Buffer { fd: unsafe { std::os::fd::FromRawFd::from_raw_fd(out.fd) }, id: out.buffer_id, size: out.alloc_size };
                if rng.chance(30) {
                    if let Ok(m) = b.map() {
                        m.write_u64(0, 1);
                    }
                }
                dmabuf = Some(b);
            }
        }
        if i % 500 == 0 {
            if let Some(c) = watch.complaint() {
                return Err(format!("kernel complained by iteration {i}: {c}"));
            }
        }
    }
    note(&format!("results: {results:?}; {successes_alloc} ALLOCs succeeded"));
    drop(dmabuf);
    drop(dev);
    std::thread::sleep(Duration::from_millis(200));
    if let Some(c) = watch.complaint() {
        return Err(format!("kernel complained: {c}"));
    }
    ensure(unexpected.is_empty(), || format!("answers outside the ABI: {}", unexpected.join("; ")))?;
    ensure(successes_alloc > 0, || "no random ALLOC ever succeeded: the fuzzer never reached the success path".into())?;
    // The module still works, and holds nothing for us.
    let dev = Dev::open()?;
    dev.settle_to(&base, Duration::from_secs(5))?;
    let b = dev.alloc(2 << 20)?;
    let m = b.map()?;
    m.fill(3, 1);
    m.verify(3, 1)?;
    Ok(Outcome::Pass)
}

/// DMA_BUF_IOCTL_SYNC reaches the module's begin/end_cpu_access: valid flags succeed,
/// invalid ones are refused by the DMA-BUF core.
pub fn dmabuf_sync() -> TestResult {
    let dev = Dev::open()?;
    let b = dev.alloc(2 << 20)?;
    let (start, end, read, write) = (0u64, 4u64, 1u64, 2u64);
    for flags in [start | read, start | write, start | read | write, end | read, end | write, end | read | write] {
        let mut f = flags;
        raw_ioctl(b.raw(), DMA_BUF_IOCTL_SYNC, &mut f as *mut u64 as usize)
            .map_err(|e| format!("DMA_BUF_IOCTL_SYNC({flags:#x}): {}", errname(e)))?;
    }
    for flags in [0u64, start, 8, 1 << 40] {
        let mut f = flags;
        expect_errno(&format!("DMA_BUF_IOCTL_SYNC({flags:#x})"), raw_ioctl(b.raw(), DMA_BUF_IOCTL_SYNC, &mut f as *mut u64 as usize), libc::EINVAL)?;
    }
    Ok(Outcome::Pass)
}
