//! ABI version, allocation sizes and the errno of every kind of bad argument.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;
use std::os::fd::AsRawFd;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

pub fn abi_version() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    note(&format!("{info:?}"));
    ensure(info.abi_version == GB_ABI_VERSION, || {
        format!("module ABI {} != userspace ABI {GB_ABI_VERSION}", info.abi_version)
    })?;
    ensure(info.features & (GB_INFO_MMAP | GB_INFO_EVENTFD) == GB_INFO_MMAP | GB_INFO_EVENTFD, || {
        format!("features {:#x} lack MMAP|EVENTFD, which ABI 1 always sets", info.features)
    })?;
    ensure(info.chunk_size == GB_CHUNK_SIZE, || format!("chunk_size {} != {GB_CHUNK_SIZE}", info.chunk_size))?;
    ensure(info.max_alloc >= page_size() && info.pool_cap > 0, || "max_alloc or pool_cap is zero".into())?;
    let pool = dev.pool()?;
    ensure(pool.t2_cap == info.pool_cap, || format!("POOL_STATS.t2_cap {} != INFO.pool_cap {}", pool.t2_cap, info.pool_cap))?;
    Ok(Outcome::Pass)
}

pub fn device_node_mode() -> TestResult {
    let md = std::fs::metadata(GB_DEVICE_PATH).map_err(|e| format!("stat {GB_DEVICE_PATH}: {e}"))?;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    ensure(md.file_type().is_char_device(), || "not a character device".into())?;
    let mode = md.permissions().mode() & 0o7777;
    ensure(mode == 0o660, || format!("mode {mode:o}, expected 660"))?;
    // An unprivileged user outside the node's group is refused by the node itself.
    let mut child = Child::spawn(|| {
        // SAFETY: dropping privileges in the forked child only.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return 3;
            }
        }
        match open_path(GB_DEVICE_PATH, libc::O_RDWR) {
            Err(libc::EACCES) => 0,
            Err(_) => 1,
            Ok(_) => 2,
        }
    });
    let st = child.wait();
    ensure(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, || match libc::WEXITSTATUS(st) {
        2 => "uid 65534 could open the 0660 root-owned node".into(),
        3 => "could not drop privileges to uid 65534".into(),
        _ => format!("uid 65534 open: not EACCES ({:?})", describe_status(st)),
    })?;
    Ok(Outcome::Pass)
}

pub fn alloc_size_zero() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    expect_errno("ALLOC(size 0)", dev.try_alloc(0), libc::EINVAL)?;
    let after = dev.pool()?;
    ensure(after.buffers == base.buffers && after.t2_used == base.t2_used, || "refused ALLOC changed the pool".into())?;
    Ok(Outcome::Pass)
}

/// Allocates `size`, checks the rounding, the stats, the fd flags and the contents.
fn alloc_and_check(dev: &Dev, size: u64, stride: usize) -> Result<(), String> {
    let base = dev.pool()?;
    let want = round_up(size, page_size());
    {
        let buf = dev.alloc(size)?;
        ensure(buf.size == want, || format!("ALLOC({size}) gave alloc_size {}, expected {want}", buf.size))?;
        ensure(buf.raw() > 2, || format!("ALLOC returned fd {}", buf.raw()))?;
        // SAFETY: F_GETFD on an fd we own.
        let fdflags = unsafe { libc::fcntl(buf.raw(), libc::F_GETFD) };
        ensure(fdflags & libc::FD_CLOEXEC != 0, || "DMA-BUF fd lacks O_CLOEXEC".into())?;
        // SAFETY: F_GETFL on an fd we own.
        let flflags = unsafe { libc::fcntl(buf.raw(), libc::F_GETFL) };
        ensure(flflags & libc::O_ACCMODE == libc::O_RDWR, || format!("DMA-BUF fd not O_RDWR (flags {flflags:#x})"))?;
        check_fdinfo(&buf)?;
        let st = dev.pool()?;
        ensure(st.t2_used == base.t2_used + want && st.buffers == base.buffers + 1, || {
            format!("pool after ALLOC: t2_used {} buffers {}; expected {} / {}", st.t2_used, st.buffers, base.t2_used + want, base.buffers + 1)
        })?;
        ensure(st.t2_peak >= st.t2_used, || "t2_peak below t2_used".into())?;
        ensure(st.allocs > base.allocs, || "allocs counter did not move".into())?;
        let map = buf.map()?;
        map.verify_zero(stride).map_err(|e| format!("fresh buffer not zeroed: {e}"))?;
        map.fill(size, stride);
        map.verify(size, stride)?;
    }
    dev.settle_to(&base, Duration::from_secs(5))
}

/// The DMA-BUF core's fdinfo names the exporter and the size.
fn check_fdinfo(buf: &Buffer) -> Result<(), String> {
    let path = format!("/proc/self/fdinfo/{}", buf.fd.as_raw_fd());
    let s = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let field = |k: &str| s.lines().find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()));
    let size = field("size:").ok_or_else(|| format!("{path} has no size: line (not a DMA-BUF?)"))?;
    ensure(size == buf.size.to_string(), || format!("fdinfo size {size}, alloc_size {}", buf.size))?;
    let exp = field("exp_name:").unwrap_or_default();
    ensure(exp.contains("greenboost"), || format!("fdinfo exp_name '{exp}' does not name greenboost"))?;
    Ok(())
}

pub fn alloc_unaligned() -> TestResult {
    let dev = Dev::open()?;
    for size in [1, 100, page_size() + 1, 3 * MIB + 5] {
        alloc_and_check(&dev, size, 1)?;
    }
    Ok(Outcome::Pass)
}

pub fn alloc_one_page() -> TestResult {
    alloc_and_check(&Dev::open()?, page_size(), 1)?;
    Ok(Outcome::Pass)
}

pub fn alloc_2mib() -> TestResult {
    alloc_and_check(&Dev::open()?, 2 * MIB, 1)?;
    Ok(Outcome::Pass)
}

/// 1 GiB in a 2 GiB guest: guest-suite.sh loads the module with a cap and reserve that
/// leave room for it, so a refusal that stays is a failure, not a skip.
pub fn alloc_1gib() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    let avail = meminfo("MemAvailable").unwrap_or(0);
    note(&format!("MemAvailable {} MiB, reserve {} MiB, cap {} MiB", avail >> 20, info.reserve >> 20, info.pool_cap >> 20));
    ensure(info.pool_cap >= GIB && info.max_alloc >= GIB, || {
        format!("module loaded with pool_cap {} / max_alloc {}: cannot hold 1 GiB (guest-suite sets pool_cap_mb)", info.pool_cap, info.max_alloc)
    })?;
    // Every word of the first and last 2 MiB, one word per page elsewhere. The module
    // must refuse it while something else holds the guest's RAM (the reserve is checked
    // before every chunk), and at boot something may briefly do so: a refusal gets one
    // retry, noted with what the module and the guest said. A refusal that stays fails.
    let mut watch = KmsgWatch::start();
    let Err(first) = alloc_and_check(&dev, GIB, page_words()) else { return Ok(Outcome::Pass) };
    let first = format!("{first}; then {}; the module logged: {}", ram_left(), module_lines(&mut watch));
    if !first.contains("ENOMEM") {
        return Err(first);
    }
    note(&format!("refused once ({first}); once more"));
    std::thread::sleep(Duration::from_secs(2));
    alloc_and_check(&dev, GIB, page_words()).map_err(|again| {
        format!("{again} twice; then {}; the module logged: {}; the first time: {first}", ram_left(), module_lines(&mut watch))
    })?;
    Ok(Outcome::Pass)
}

/// The module's kernel log lines since `watch` last looked, joined.
fn module_lines(watch: &mut KmsgWatch) -> String {
    let lines = watch.module_lines();
    if lines.is_empty() { "nothing".into() } else { lines.join(" | ") }
}

/// The module's refusal line for the ALLOC just refused names `limit` (the line is
/// rate-limited to 5 per 5 s; the tests before refuse fewer).
fn expect_refusal_by(watch: &mut KmsgWatch, what: &str, limit: &str) -> Result<(), String> {
    let lines = watch.new_lines();
    let line = lines.iter().find(|l| l.contains("refused (ENOMEM)")).ok_or_else(|| format!("{what}: no refusal line logged"))?;
    ensure(line.contains(&format!("refused (ENOMEM) by {limit}")), || format!("{what}: the refusal line '{line}' does not name {limit}"))
}

fn ram_left() -> String {
    format!("MemAvailable {} MiB, MemFree {} MiB", meminfo("MemAvailable").unwrap_or(0) >> 20, meminfo("MemFree").unwrap_or(0) >> 20)
}

pub fn alloc_over_cap() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    let base = dev.pool()?;
    let mut watch = KmsgWatch::start();
    expect_errno("ALLOC(pool_cap + 1 page)", dev.try_alloc(info.pool_cap + page_size()), libc::ENOMEM)?;
    expect_refusal_by(&mut watch, "ALLOC(pool_cap + 1 page)", "the pool cap")?;
    // Up to INFO.max_alloc a size is refused for want of room (ENOMEM); above it,
    // including sizes whose page rounding would overflow, as too big (E2BIG).
    if info.max_alloc > info.pool_cap + page_size() {
        expect_errno("ALLOC(max_alloc)", dev.try_alloc(info.max_alloc), libc::ENOMEM)?;
    }
    for size in [info.max_alloc + 1, u64::MAX, u64::MAX - page_size() + 2] {
        expect_errno(&format!("ALLOC({size:#x}) above max_alloc {:#x}", info.max_alloc), dev.try_alloc(size), libc::E2BIG)?;
    }
    let after = dev.pool()?;
    ensure(after.alloc_failures > base.alloc_failures, || {
        format!("alloc_failures stayed at {} after a refused ALLOC", after.alloc_failures)
    })?;
    dev.settle_to(&base, Duration::from_secs(1))?;
    Ok(Outcome::Pass)
}

/// More than the guest's RAM: clean ENOMEM, no OOM kill, pool intact. The main load's
/// pool cap is above RAM and its per-user cap (half of it) may be too; an ALLOC of what
/// is available, within both caps, is refused by the RAM reserve. Each refusal line names
/// the first limit the ALLOC exceeds.
pub fn alloc_over_ram() -> TestResult {
    let dev = Dev::open()?;
    let info = dev.info()?;
    let total = meminfo("MemTotal").ok_or("no MemTotal")?;
    let base = dev.pool()?;
    let size = total + 256 * MIB;
    let first_limit = |size: u64| {
        if size > info.pool_cap {
            "the pool cap"
        } else if info.uid_cap != 0 && size > info.uid_cap {
            "the per-user cap"
        } else {
            "the RAM reserve"
        }
    };
    note(&format!("MemTotal {} MiB, asking {} MiB (cap {} MiB, per-user cap {} MiB: {} refuses it)", total >> 20, size >> 20,
        info.pool_cap >> 20, info.uid_cap >> 20, first_limit(size)));
    let mut watch = KmsgWatch::start();
    expect_errno("ALLOC(MemTotal + 256 MiB)", dev.try_alloc(size), libc::ENOMEM)?;
    expect_refusal_by(&mut watch, "ALLOC(MemTotal + 256 MiB)", first_limit(size))?;
    // Within the pool cap but far above free memory minus the reserve (the per-user cap
    // refuses it first where it is under what is available).
    let avail = meminfo("MemAvailable").unwrap_or(0);
    if info.pool_cap > avail {
        let size = round_up(avail, 2 * MIB).min(info.pool_cap);
        expect_errno("ALLOC(MemAvailable)", dev.try_alloc(size), libc::ENOMEM)?;
        expect_refusal_by(&mut watch, "ALLOC(MemAvailable)", first_limit(size))?;
    }
    dev.settle_to(&base, Duration::from_secs(5))?;
    // The module still serves ordinary requests.
    alloc_and_check(&dev, 2 * MIB, 1)?;
    Ok(Outcome::Pass)
}

pub fn alloc_bad_fields() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    let ok = GbAlloc { size: page_size(), numa_node: -1, ..Default::default() };
    expect_errno("ALLOC(pad0=1)", dev.alloc_raw(GbAlloc { pad0: 1, ..ok }), libc::EINVAL)?;
    expect_errno("ALLOC(pad0=0x80000000)", dev.alloc_raw(GbAlloc { pad0: 0x8000_0000, ..ok }), libc::EINVAL)?;
    for bit in 1..32 {
        let flags = 1u32 << bit;
        if flags & GB_ALLOC_FLAGS_ALL != 0 {
            continue;
        }
        expect_errno(&format!("ALLOC(flags={flags:#x})"), dev.alloc_raw(GbAlloc { flags, ..ok }), libc::EINVAL)?;
    }
    let nodes = online_nodes();
    let offline = nodes.iter().max().copied().unwrap_or(0) + 1;
    for node in [-2, i32::MIN, offline, 1024, i32::MAX] {
        for flags in [0, GB_ALLOC_NODE_STRICT] {
            expect_errno(&format!("ALLOC(numa_node={node}, flags={flags})"), dev.alloc_raw(GbAlloc { numa_node: node, flags, ..ok }), libc::EINVAL)?;
        }
    }
    // The output fields are outputs: garbage in them must not matter.
    let b = dev.alloc_raw(GbAlloc { fd: 12345, buffer_id: u64::MAX, alloc_size: 7, ..ok })
        .map_err(|e| format!("ALLOC with garbage in output fields: {}", errname(e)))?;
    // SAFETY: closing the fd ALLOC just returned.
    unsafe { libc::close(b.fd) };
    dev.settle_to(&base, Duration::from_secs(5))?;
    let after = dev.pool()?;
    ensure(after.buffers == base.buffers, || "a refused ALLOC left a buffer behind".into())?;
    Ok(Outcome::Pass)
}

/// NULL, unmapped, kernel and partially-mapped pointers: EFAULT for every command.
pub fn bad_pointers() -> TestResult {
    let dev = Dev::open()?;
    let base = dev.pool()?;
    // Two pages: the first readable+writable, the second PROT_NONE, so a struct that
    // starts 8 bytes before the boundary is only partly accessible.
    let guard = Mapping::anonymous(2 * page_size() as usize).map_err(|e| format!("mmap: {}", errname(e)))?;
    // SAFETY: changing the protection of the second page of our own mapping.
    unsafe { libc::mprotect(guard.ptr().add(page_size() as usize) as *mut libc::c_void, page_size() as usize, libc::PROT_NONE) };
    // 4 accessible bytes: less than any ABI struct (the smallest is 8).
    let straddle = guard.ptr() as usize + page_size() as usize - 4;
    let unmapped = {
        let m = Mapping::anonymous(page_size() as usize).map_err(|e| format!("mmap: {}", errname(e)))?;
        m.ptr() as usize
    };
    let ptrs = [
        ("NULL", 0usize),
        ("0x10", 0x10),
        ("unmapped", unmapped),
        ("PROT_NONE page", guard.ptr() as usize + page_size() as usize),
        ("straddling into PROT_NONE", straddle),
        ("kernel address", 0xffff_8880_0000_0000),
        ("non-canonical", 0x8000_0000_0000_0000),
        ("-1", usize::MAX),
    ];
    for cmd in GB_IOC_ALL {
        for (what, p) in ptrs {
            expect_errno(&format!("ioctl {cmd:#x} with {what} pointer"), raw_ioctl(dev.raw(), cmd, p), libc::EFAULT)?;
        }
    }
    let after = dev.pool()?;
    ensure(after.buffers == base.buffers && after.t1_reported == base.t1_reported, || "a faulting ioctl changed the pool".into())?;
    Ok(Outcome::Pass)
}

pub fn unknown_ioctls() -> TestResult {
    let dev = Dev::open()?;
    let mut info = GbInfo::default();
    let arg = &mut info as *mut GbInfo as usize;
    let mut cmds: Vec<u32> = Vec::new();
    // Our magic with numbers ABI 1 does not define, in every direction.
    for nr in 0x07..=0xff {
        for dir in 0..4u32 {
            cmds.push((dir << 30) | (GB_IOC_MAGIC << 8) | nr | (8 << 16));
        }
    }
    // Known numbers with the wrong size or direction are other commands.
    for cmd in GB_IOC_ALL {
        let size = ioc_size(cmd) as u32;
        let base = cmd & !(0x3fff << 16) & !(3 << 30);
        for (dir, sz) in [(0, size), (ioc_dir(cmd) ^ 1, size), (ioc_dir(cmd) ^ 2, size), (ioc_dir(cmd), size + 8), (ioc_dir(cmd), size - 8), (ioc_dir(cmd), 0)] {
            let c = base | (dir << 30) | (sz << 16);
            if !GB_IOC_ALL.contains(&c) {
                cmds.push(c);
            }
        }
    }
    // Other drivers' commands and plain numbers.
    cmds.extend([0, 1, 0x5401 /* TCGETS */, 0x541b /* FIONREAD */, 0x40086200 /* DMA_BUF_IOCTL_SYNC */, 0xc0184700, u32::MAX]);
    for cmd in &cmds {
        expect_errno(&format!("ioctl {cmd:#x}"), raw_ioctl(dev.raw(), *cmd, arg), libc::ENOTTY)?;
    }
    note(&format!("{} unknown commands answered ENOTTY", cmds.len()));
    dev.info()?;
    Ok(Outcome::Pass)
}

pub fn register_eventfd_errors() -> TestResult {
    let dev = Dev::open()?;
    let efd = eventfd()?;
    expect_errno("REGISTER_EVENTFD(flags=1)", dev.register_eventfd(efd.as_raw_fd(), 1), libc::EINVAL)?;
    expect_errno("REGISTER_EVENTFD(fd=-1)", dev.register_eventfd(-1, 0), libc::EBADF)?;
    expect_errno("REGISTER_EVENTFD(fd=999999)", dev.register_eventfd(999_999, 0), libc::EBADF)?;
    let (r, _w) = pipe();
    expect_errno("REGISTER_EVENTFD(pipe fd)", dev.register_eventfd(r.as_raw_fd(), 0), libc::EINVAL)?;
    dev.register_eventfd(efd.as_raw_fd(), 0).map_err(|e| format!("REGISTER_EVENTFD(eventfd): {}", errname(e)))?;
    // Closing our eventfd and the device afterwards must be harmless (the module holds its own reference).
    drop(efd);
    dev.info()?;
    drop(dev);
    Dev::open()?.info()?;
    Ok(Outcome::Pass)
}

pub fn report_t1() -> TestResult {
    let base = Dev::open()?.pool()?;
    let dev = Dev::open()?;
    let used = 3 * GIB + 12345;
    dev.report_t1(used, 8 * GIB).map_err(|e| format!("REPORT_T1: {}", errname(e)))?;
    let ps = dev.proc_stats()?;
    ensure(ps.t1_reported == used, || format!("PROC_STATS.t1_reported {} != {used}", ps.t1_reported))?;
    let st = dev.pool()?;
    ensure(st.t1_reported == base.t1_reported + used, || format!("POOL_STATS.t1_reported {} != {} + {used}", st.t1_reported, base.t1_reported))?;
    // A newer report replaces the older one.
    dev.report_t1(used / 3, 8 * GIB).map_err(|e| format!("REPORT_T1: {}", errname(e)))?;
    let st = dev.pool()?;
    ensure(st.t1_reported == base.t1_reported + used / 3, || format!("second report: t1_reported {} != {}", st.t1_reported, base.t1_reported + used / 3))?;
    // The figure disappears with the process's last /dev/greenboost fd.
    drop(dev);
    let st = Dev::open()?.pool()?;
    ensure(st.t1_reported == base.t1_reported, || format!("t1_reported {} after closing the reporting fd, expected {}", st.t1_reported, base.t1_reported))?;
    Ok(Outcome::Pass)
}

pub fn proc_stats() -> TestResult {
    let dev = Dev::open()?;
    let before = dev.proc_stats()?;
    // SAFETY: getpid/getuid have no preconditions.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    ensure(before.pid == pid && before.uid == uid, || format!("PROC_STATS pid/uid {}/{} != {pid}/{uid}", before.pid, before.uid))?;
    ensure(before.buffers == 0 && before.t2_used == 0, || format!("fresh process has {} buffers / {} bytes", before.buffers, before.t2_used))?;
    let a = dev.alloc(4 * MIB)?;
    let b = dev.alloc(page_size())?;
    let st = dev.proc_stats()?;
    ensure(st.buffers == 2 && st.t2_used == a.size + b.size, || format!("PROC_STATS {} buffers / {} bytes, expected 2 / {}", st.buffers, st.t2_used, a.size + b.size))?;
    ensure(st.t2_peak >= st.t2_used, || "proc t2_peak below t2_used".into())?;
    // A forked child is another process: it holds nothing of its own.
    let mut child = Child::spawn(|| match Dev::open().and_then(|d| d.proc_stats()) {
        Ok(s) if s.buffers == 0 && s.t2_used == 0 => 0,
        _ => 1,
    });
    child.expect_success("child PROC_STATS shows the parent's buffers")?;
    drop(a);
    let st = dev.proc_stats()?;
    ensure(st.buffers == 1 && st.t2_used == b.size, || format!("after freeing one: {} buffers / {} bytes", st.buffers, st.t2_used))?;
    ensure(st.t2_peak >= 4 * MIB + page_size(), || format!("t2_peak {} forgot the earlier high", st.t2_peak))?;
    Ok(Outcome::Pass)
}
