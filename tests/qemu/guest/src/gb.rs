//! Thin, checked wrappers over /dev/greenboost and its DMA-BUF fds.
//!
//! Every wrapper returns the raw errno on failure so that tests can assert the exact
//! error the module gave; `must_*` variants turn a failure into a test failure message.

use greenboost_abi::*;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

pub fn errno() -> i32 {
    // SAFETY: __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Symbolic name of an errno, for messages.
pub fn errname(e: i32) -> String {
    let name = match e {
        0 => "success",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::E2BIG => "E2BIG",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

pub fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// `ioctl(fd, cmd, arg)` through the raw syscall so that any 32-bit command and any
/// pointer value can be passed unchanged. Returns the result or the errno.
pub fn raw_ioctl(fd: RawFd, cmd: u32, arg: usize) -> Result<i64, i32> {
    // SAFETY: the kernel validates every argument; a bad pointer is answered with
    // EFAULT, and callers only pass pointers to memory the kernel may write when the
    // command writes (or addresses that are deliberately invalid).
    let r = unsafe { libc::syscall(libc::SYS_ioctl, fd as libc::c_long, cmd as libc::c_ulong, arg) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

pub fn open_path(path: &str, flags: i32) -> Result<OwnedFd, i32> {
    let c = CString::new(path).expect("path without NUL");
    // SAFETY: c is a valid NUL-terminated string.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        // SAFETY: open returned a fresh fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// An open /dev/greenboost.
pub struct Dev {
    fd: OwnedFd,
}

impl Dev {
    pub fn open() -> Result<Dev, String> {
        open_path(GB_DEVICE_PATH, libc::O_RDWR)
            .map(|fd| Dev { fd })
            .map_err(|e| format!("open {GB_DEVICE_PATH}: {}", errname(e)))
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn ioctl<T>(&self, cmd: u32, arg: &mut T) -> Result<(), i32> {
        raw_ioctl(self.raw(), cmd, arg as *mut T as usize).map(|_| ())
    }

    pub fn info(&self) -> Result<GbInfo, String> {
        let mut info = GbInfo::default();
        self.ioctl(GB_IOC_INFO, &mut info)
            .map_err(|e| format!("GB_IOC_INFO: {}", errname(e)))?;
        Ok(info)
    }

    pub fn pool(&self) -> Result<GbPoolStats, String> {
        let mut st = GbPoolStats::default();
        self.ioctl(GB_IOC_POOL_STATS, &mut st)
            .map_err(|e| format!("GB_IOC_POOL_STATS: {}", errname(e)))?;
        Ok(st)
    }

    pub fn proc_stats(&self) -> Result<GbProcStats, String> {
        let mut st = GbProcStats::default();
        self.ioctl(GB_IOC_PROC_STATS, &mut st)
            .map_err(|e| format!("GB_IOC_PROC_STATS: {}", errname(e)))?;
        Ok(st)
    }

    pub fn report_t1(&self, vram_used: u64, vram_budget: u64) -> Result<(), i32> {
        let mut r = GbT1Report { vram_used, vram_budget };
        self.ioctl(GB_IOC_REPORT_T1, &mut r)
    }

    pub fn register_eventfd(&self, fd: RawFd, flags: u32) -> Result<(), i32> {
        let mut r = GbEventfd { fd, flags };
        self.ioctl(GB_IOC_REGISTER_EVENTFD, &mut r)
    }

    /// GB_IOC_ALLOC with a fully caller-built request; returns the filled request.
    pub fn alloc_raw(&self, req: GbAlloc) -> Result<GbAlloc, i32> {
        let mut req = req;
        self.ioctl(GB_IOC_ALLOC, &mut req)?;
        Ok(req)
    }

    pub fn try_alloc_on(&self, size: u64, flags: u32, numa_node: i32) -> Result<Buffer, i32> {
        let req = GbAlloc { size, flags, numa_node, ..Default::default() };
        let out = self.alloc_raw(req)?;
        // SAFETY: a successful ALLOC returned a new DMA-BUF fd that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(out.fd) };
        Ok(Buffer { fd, id: out.buffer_id, size: out.alloc_size })
    }

    pub fn try_alloc(&self, size: u64) -> Result<Buffer, i32> {
        self.try_alloc_on(size, 0, -1)
    }

    pub fn alloc(&self, size: u64) -> Result<Buffer, String> {
        self.try_alloc(size).map_err(|e| format!("ALLOC({size}): {}", errname(e)))
    }

    /// A buffer in T3 (`GB_ALLOC_T3`).
    pub fn try_alloc_t3(&self, size: u64) -> Result<Buffer, i32> {
        self.try_alloc_on(size, GB_ALLOC_T3, -1)
    }

    /// `GB_IOC_MOVE` of the buffer behind `fd` to `tier`; returns the filled request.
    pub fn move_fd(&self, fd: RawFd, tier: u32) -> Result<GbMove, i32> {
        let mut req = GbMove { fd, tier, ..Default::default() };
        self.ioctl(GB_IOC_MOVE, &mut req)?;
        Ok(req)
    }

    pub fn t3(&self) -> Result<GbT3Stats, String> {
        let mut st = GbT3Stats::default();
        self.ioctl(GB_IOC_T3_STATS, &mut st)
            .map_err(|e| format!("GB_IOC_T3_STATS: {}", errname(e)))?;
        Ok(st)
    }

    /// Waits until the pool holds exactly what `base` held (live bytes and buffers).
    pub fn settle_to(&self, base: &GbPoolStats, timeout: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            let st = self.pool()?;
            if st.t2_used == base.t2_used && st.buffers == base.buffers && st.t3_used == base.t3_used {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                return Err(format!(
                    "pool not back to baseline after {:?}: t2_used {} t3_used {} buffers {} (baseline {} / {} / {})",
                    timeout, st.t2_used, st.t3_used, st.buffers, base.t2_used, base.t3_used, base.buffers
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A live GreenBoost buffer: its DMA-BUF fd plus what ALLOC said about it.
pub struct Buffer {
    pub fd: OwnedFd,
    pub id: u64,
    pub size: u64,
}

impl Buffer {
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Shared read-write mapping of the whole buffer.
    pub fn map(&self) -> Result<Mapping, String> {
        Mapping::of_fd(self.raw(), 0, self.size as usize, libc::PROT_READ | libc::PROT_WRITE)
            .map_err(|e| format!("mmap of buffer {} ({} bytes): {}", self.id, self.size, errname(e)))
    }
}

/// An mmap()ed region, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Mapping is plain memory; the tests coordinate access to it themselves.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared access only reads through raw volatile accesses.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn of_fd(fd: RawFd, offset: u64, len: usize, prot: i32) -> Result<Mapping, i32> {
        // SAFETY: a fresh mapping at an address of the kernel's choosing; it aliases
        // nothing the program already uses.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, offset as libc::off_t)
        };
        if p == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(Mapping { ptr: p as *mut u8, len })
        }
    }

    /// Private anonymous memory (the control case for pinning tests).
    pub fn anonymous(len: usize) -> Result<Mapping, i32> {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(Mapping { ptr: p as *mut u8, len })
        }
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn words(&self) -> usize {
        self.len / 8
    }

    pub fn read_u64(&self, word: usize) -> u64 {
        assert!(word < self.words());
        // SAFETY: in bounds of the live mapping; volatile because other processes and
        // the kernel write the same pages.
        unsafe { std::ptr::read_volatile((self.ptr as *const u64).add(word)) }
    }

    pub fn write_u64(&self, word: usize, v: u64) {
        assert!(word < self.words());
        // SAFETY: in bounds of the live, writable mapping.
        unsafe { std::ptr::write_volatile((self.ptr as *mut u64).add(word), v) }
    }

    /// Writes `pattern(seed, i)` into every `stride`-th word.
    pub fn fill(&self, seed: u64, stride: usize) {
        for i in (0..self.words()).step_by(stride) {
            self.write_u64(i, pattern(seed, i));
        }
    }

    /// Checks the words `fill(seed, stride)` wrote; returns the first mismatch.
    pub fn verify(&self, seed: u64, stride: usize) -> Result<(), String> {
        for i in (0..self.words()).step_by(stride) {
            let got = self.read_u64(i);
            let want = pattern(seed, i);
            if got != want {
                return Err(format!("word {i} (byte {}) is {got:#x}, expected {want:#x}", i * 8));
            }
        }
        Ok(())
    }

    /// Checks that every `stride`-th word is zero; returns the first non-zero one.
    pub fn verify_zero(&self, stride: usize) -> Result<(), String> {
        for i in (0..self.words()).step_by(stride) {
            let got = self.read_u64(i);
            if got != 0 {
                return Err(format!("word {i} (byte {}) is {got:#x}, expected 0", i * 8));
            }
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this object created and still owns.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A word value that differs per seed and per position (catches misplaced pages).
pub fn pattern(seed: u64, word: usize) -> u64 {
    (seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(word as u64 + 1) | 1
}

/// Words per page, for per-page sampling of large buffers.
pub fn page_words() -> usize {
    (page_size() / 8) as usize
}

/// Small deterministic PRNG (xorshift64*), so a failing run can be replayed by seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub fn eventfd() -> Result<OwnedFd, String> {
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(format!("eventfd: {}", errname(errno())));
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits up to `timeout` for the eventfd to become readable; returns its counter.
pub fn wait_eventfd(fd: RawFd, timeout: Duration) -> Result<Option<u64>, String> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: pfd is a valid pollfd array of length 1.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if r < 0 {
        return Err(format!("poll eventfd: {}", errname(errno())));
    }
    if r == 0 {
        return Ok(None);
    }
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64.
    let n = unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
    if n != 8 {
        return Err(format!("read eventfd: {}", errname(errno())));
    }
    Ok(Some(v))
}

/// A node list file of /sys/devices/system/node ("0-1,3"); `fallback` when unreadable.
fn node_list(file: &str, fallback: &str) -> Vec<i32> {
    let s = std::fs::read_to_string(format!("/sys/devices/system/node/{file}")).unwrap_or_else(|_| fallback.into());
    let mut nodes = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                nodes.extend(a..=b);
            }
            None => nodes.push(part.parse().unwrap_or(0)),
        }
    }
    nodes
}

/// Online NUMA nodes, memoryless ones included.
pub fn online_nodes() -> Vec<i32> {
    node_list("online", "0")
}

/// Online NUMA nodes that have memory (an ALLOC can be placed on these only).
pub fn memory_nodes() -> Vec<i32> {
    node_list("has_memory", "0")
}

/// CPUs of `node`, from its cpulist.
pub fn node_cpus(node: i32) -> Vec<i32> {
    node_list(&format!("node{node}/cpulist"), "")
}

/// Runs the calling thread on `cpu` only (affinity is per thread).
pub fn pin_to_cpu(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays in bounds (`cpu` is
    // an online CPU, far below CPU_SETSIZE); sched_setaffinity only reads the set.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!("pinning to CPU {cpu}: {}", errname(errno())))
    }
}

/// A /proc/meminfo field in bytes.
pub fn meminfo(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// A `key value` line of the sysfs stats file.
pub fn sysfs_counter(key: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string(GB_SYSFS_STATS).map_err(|e| format!("{GB_SYSFS_STATS}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or_else(|| format!("no '{key}' in {GB_SYSFS_STATS}"))
}

/// A `/proc/vmstat` counter.
pub fn vmstat(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/vmstat").ok()?;
    s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}
