//! T2 memory without the module: anonymous memory, 2 MiB-aligned with transparent huge
//! pages requested, populated before registration so that a shortage shows as an error
//! here, not as a fault later.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use greenboost_abi as abi;

use greenboost_policy::default_host_reserve;

use crate::backend::t2_buffer::{errno, Backend, BackendError, HostBuffer};
use crate::rules::config;
use crate::sys::log::Mib;

/// Anonymous memory: 2 MiB-aligned, transparent huge pages requested, populated before
/// registration so that a shortage shows as an error here, not as a fault later.
pub(super) struct UserspaceBackend;

impl Backend for UserspaceBackend {
    fn name(&self) -> &'static str {
        "userspace"
    }

    fn alloc(&self, len: usize, _numa_node: Option<c_int>) -> Result<HostBuffer, BackendError> {
        let started = Instant::now();
        let reserve = host_reserve();
        if !leaves_host_reserve(len as u64, reserve) {
            return Err(BackendError::OutOfMemory(libc::ENOMEM));
        }
        let chunk = abi::GB_CHUNK_SIZE as usize;
        let Some(padded) = len.checked_add(chunk) else { return Err(BackendError::OutOfMemory(libc::ENOMEM)) };
        // SAFETY: a fresh anonymous mapping.
        let raw = unsafe {
            libc::mmap(
                ptr::null_mut(),
                padded,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(BackendError::OutOfMemory(errno()));
        }
        let start = raw as usize;
        let aligned = (start + chunk - 1) & !(chunk - 1);
        let head = aligned - start;
        let tail = padded - head - len;
        // SAFETY: trimming the unaligned head and the tail of our own mapping.
        unsafe {
            if head != 0 {
                libc::munmap(raw, head);
            }
            if tail != 0 {
                libc::munmap((aligned + len) as *mut c_void, tail);
            }
            libc::madvise(aligned as *mut c_void, len, libc::MADV_HUGEPAGE);
        }
        let mapped = Instant::now();
        let threads = populate_threads(len);
        // Checked again once the pages exist: other processes may have allocated at the
        // same time, and the reserve holds whatever their number.
        let populated = populate(aligned, len, threads).and_then(|()| match available_ram() {
            Some(available) if available < reserve => Err(libc::ENOMEM),
            _ => Ok(()),
        });
        if let Err(error) = populated {
            // SAFETY: our mapping, of `len` bytes; nothing else knows it yet.
            unsafe { libc::munmap(aligned as *mut c_void, len) };
            return Err(BackendError::OutOfMemory(error));
        }
        // The phases of a cold T2 allocation, so that a benchmark can tell where its
        // time goes (registration is timed by the caller).
        debug!(
            "userspace backend: {}: map {:.1} ms, populate {:.1} ms ({} thread{})",
            Mib(len as u64),
            millis(mapped - started),
            millis(mapped.elapsed()),
            threads,
            if threads == 1 { "" } else { "s" }
        );
        Ok(HostBuffer { address: aligned, len, id: 0 })
    }

    fn release(&self, buffer: HostBuffer) {
        // SAFETY: a mapping this backend made; nothing uses it any more.
        unsafe { libc::munmap(buffer.ptr(), buffer.len) };
    }

    fn default_cap(&self) -> u64 {
        // Three quarters of RAM for one process: the rest stays for the program and the
        // system (the host reserve protects the host across processes).
        total_ram() / 4 * 3
    }
}

/// Whether `len` more bytes of RAM leave `reserve` (`host_reserve`) available on the
/// host, as far as MemAvailable tells now (true when it cannot be read); said at `info`
/// when not.
fn leaves_host_reserve(len: u64, reserve: u64) -> bool {
    match available_ram() {
        Some(available) if available < len.saturating_add(reserve) => {
            info!(
                "{} would leave less than the host reserve of {} available ({} available)",
                Mib(len),
                Mib(reserve),
                Mib(available)
            );
            false
        }
        _ => true,
    }
}

/// RAM the host can give now and keep its reserve (`host_reserve`), as far as
/// MemAvailable tells; `None` when it cannot be read.
pub(super) fn room_above_host_reserve() -> Option<u64> {
    available_ram().map(|available| available.saturating_sub(host_reserve()))
}

/// RAM the userspace backend leaves available on the host, whatever the number of
/// processes allocating: GREENBOOST_HOST_RESERVE, else the module's default reserve
/// (1/32 of RAM, 64 MiB to 1 GiB).
pub(super) fn host_reserve() -> u64 {
    config::get().host_reserve.unwrap_or_else(|| default_host_reserve(total_ram()))
}

fn total_ram() -> u64 {
    // SAFETY: an all-zero sysinfo is a valid value for sysinfo to overwrite.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: sysinfo writes one struct to a valid local.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return 0;
    }
    (info.totalram as u64).saturating_mul(u64::from(info.mem_unit))
}

/// MemAvailable from /proc/meminfo (what the kernel can give without swapping), read
/// into a stack buffer; `None` when it cannot be read.
fn available_ram() -> Option<u64> {
    let mut buffer = [0u8; 4096];
    // SAFETY: a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(c"/proc/meminfo".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: reads at most the buffer's length into it.
    let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
    let text = buffer.get(..usize::try_from(read).ok()?)?;
    mem_available(text)
}

/// The MemAvailable line of a /proc/meminfo text, in bytes.
fn mem_available(text: &[u8]) -> Option<u64> {
    let line = text.split(|b| *b == b'\n').find(|line| line.starts_with(b"MemAvailable:"))?;
    let mut digits = line.iter().skip_while(|b| !b.is_ascii_digit()).take_while(|b| b.is_ascii_digit());
    let kib = digits.try_fold(0u64, |value, digit| value.checked_mul(10)?.checked_add(u64::from(digit - b'0')))?;
    kib.checked_mul(1024)
}

/// Milliseconds, for log lines.
pub(super) fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// At most this many threads populate one buffer: the kernel zeroes every page it faults
/// in, which is most of a cold allocation's time and scales with cores, until memory
/// bandwidth runs out.
const POPULATE_THREADS_MAX: usize = 8;
/// Each populating thread gets at least this much: below it, starting a thread costs
/// more than the zeroing it takes over.
const POPULATE_MIN_PER_THREAD: usize = 32 << 20;

/// How many threads populate `len` bytes: min(8, the cores this process may run on),
/// fewer for small buffers.
fn populate_threads(len: usize) -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    cores.min(POPULATE_THREADS_MAX).min(len / POPULATE_MIN_PER_THREAD).max(1)
}

/// Splits `len` bytes into at most `threads` slices of whole 2 MiB chunks (the last one
/// takes the remainder), as (offset, length): a slice boundary never splits a huge page,
/// so no two threads fault on the same one.
fn populate_slices(len: usize, threads: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = abi::GB_CHUNK_SIZE as usize;
    let chunks = len.div_ceil(chunk);
    let per_slice = chunks.div_ceil(threads.max(1)).max(1) * chunk;
    (0..len).step_by(per_slice).map(move |offset| (offset, per_slice.min(len - offset)))
}

/// Faults in every page of `[address, address + len)` now, with up to `threads` threads
/// each populating its own slice; the first error wins. If a thread cannot be started,
/// the calling thread populates what that thread would have.
fn populate(address: usize, len: usize, threads: usize) -> Result<(), c_int> {
    if threads <= 1 {
        return populate_range(address, len);
    }
    std::thread::scope(|scope| {
        let mut slices = populate_slices(len, threads);
        let Some((_, first_len)) = slices.next() else { return Ok(()) };
        let mut helpers = Vec::with_capacity(threads);
        let mut result = Ok(());
        for (offset, slice_len) in slices {
            let spawned = std::thread::Builder::new()
                .name("greenboost-populate".into())
                .stack_size(64 << 10)
                .spawn_scoped(scope, move || populate_range(address + offset, slice_len));
            match spawned {
                Ok(helper) => helpers.push(helper),
                Err(_) => {
                    // No thread (limits, memory): the rest is populated here.
                    result = populate_range(address + offset, len - offset);
                    break;
                }
            }
        }
        result = result.and(populate_range(address, first_len));
        for helper in helpers {
            // A helper cannot panic (panic = "abort"); a join error is still an error.
            result = result.and(helper.join().unwrap_or(Err(libc::EIO)));
        }
        result
    })
}

/// Faults in one range: MADV_POPULATE_WRITE (Linux 5.14) reports a shortage as an
/// error; older kernels get the pages touched.
fn populate_range(address: usize, len: usize) -> Result<(), c_int> {
    const MADV_POPULATE_WRITE: c_int = 23;
    // SAFETY: our mapping.
    if unsafe { libc::madvise(address as *mut c_void, len, MADV_POPULATE_WRITE) } == 0 {
        return Ok(());
    }
    let error = errno();
    if error != libc::EINVAL {
        return Err(error);
    }
    let page = 4096;
    let mut offset = 0;
    while offset < len {
        // SAFETY: inside our writable mapping.
        unsafe { ptr::write_volatile((address + offset) as *mut u8, 0) };
        offset += page;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userspace_memory_is_aligned_populated_and_writable() {
        let buffer = UserspaceBackend.alloc(6 << 20, None).expect("6 MiB of anonymous memory");
        assert_eq!(buffer.address % (2 << 20), 0);
        assert_eq!(buffer.len, 6 << 20);
        // SAFETY: the mapping is ours and writable.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buffer.ptr().cast::<u8>(), buffer.len) };
        assert!(bytes.iter().all(|b| *b == 0));
        bytes.fill(0xA5);
        assert!(bytes.iter().all(|b| *b == 0xA5));
        UserspaceBackend.release(buffer);
    }

    #[test]
    fn populate_slices_cover_the_buffer_in_whole_chunks() {
        let chunk = 2 << 20;
        for (len, threads) in
            [(1 << 30, 8), (1 << 30, 3), (6 << 20, 8), (2 << 20, 4), ((8 << 20) + 4096, 2), (64 << 20, 1)]
        {
            let slices: Vec<_> = populate_slices(len, threads).collect();
            assert!(slices.len() <= threads, "{len} in {threads}: {slices:?}");
            let mut next = 0;
            for (offset, slice_len) in &slices {
                assert_eq!(*offset, next, "{len} in {threads}: gap or overlap in {slices:?}");
                assert_eq!(offset % chunk, 0, "{len} in {threads}: slice starts inside a huge page");
                assert!(*slice_len > 0);
                next = offset + slice_len;
            }
            assert_eq!(next, len, "{len} in {threads}: {slices:?} does not end at the buffer's end");
        }
    }

    #[test]
    fn populate_threads_grow_with_size_up_to_eight() {
        assert_eq!(populate_threads(2 << 20), 1);
        assert!(populate_threads(1 << 30) <= POPULATE_THREADS_MAX);
        assert!(populate_threads(1 << 30) >= populate_threads(64 << 20));
    }

    fn anonymous(len: usize, prot: c_int) -> usize {
        // SAFETY: a fresh anonymous mapping.
        let raw = unsafe { libc::mmap(ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(raw, libc::MAP_FAILED);
        raw as usize
    }

    fn resident_bytes(address: usize, len: usize) -> usize {
        let page = 4096;
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: our mapping; `vec` has one byte per page.
        assert_eq!(unsafe { libc::mincore(address as *mut c_void, len, vec.as_mut_ptr()) }, 0);
        vec.iter().filter(|b| **b & 1 != 0).count() * page
    }

    #[test]
    fn parallel_populate_faults_in_every_page_zeroed() {
        let len = 96 << 20;
        for threads in [1, 3, 8] {
            let address = anonymous(len, libc::PROT_READ | libc::PROT_WRITE);
            assert_eq!(resident_bytes(address, len), 0);
            populate(address, len, threads).expect("populate");
            assert_eq!(resident_bytes(address, len), len, "{threads} threads left pages out");
            // SAFETY: the mapping is ours, readable and `len` long.
            let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
            assert!(bytes.iter().all(|b| *b == 0), "{threads} threads: fresh memory is not zero");
            // SAFETY: our mapping.
            unsafe { libc::munmap(address as *mut c_void, len) };
        }
    }

    #[test]
    fn populate_failure_in_any_slice_is_an_error() {
        // The last third of the range is not mapped: the thread populating it fails
        // (ENOMEM, which the backend answers as out-of-memory), the others succeed, and
        // the whole answer is the failure.
        let len = 96 << 20;
        let address = anonymous(len, libc::PROT_READ | libc::PROT_WRITE);
        let hole = len / 3 * 2;
        // SAFETY: our mapping.
        assert_eq!(unsafe { libc::munmap((address + hole) as *mut c_void, len - hole) }, 0);
        for threads in [1, 3] {
            let error = populate(address, len, threads).expect_err("an unmapped slice cannot be populated");
            assert_eq!(error, libc::ENOMEM, "{threads} threads");
        }
        // SAFETY: our mapping.
        unsafe { libc::munmap(address as *mut c_void, hole) };
    }

    #[test]
    fn userspace_refuses_impossible_sizes_cleanly() {
        assert!(matches!(UserspaceBackend.alloc(usize::MAX - 4096, None), Err(BackendError::OutOfMemory(_))));
        assert!(matches!(UserspaceBackend.alloc(1 << 50, None), Err(BackendError::OutOfMemory(_))));
    }

    #[test]
    fn userspace_default_cap_is_most_of_ram() {
        let cap = UserspaceBackend.default_cap();
        assert!(cap > 64 << 20, "{cap}");
    }

    #[test]
    fn mem_available_is_read_from_meminfo() {
        let text = b"MemTotal:       131072000 kB\nMemFree:         1000 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(mem_available(text), Some(2048 * 1024));
        assert_eq!(mem_available(b"MemTotal: 1 kB\n"), None);
        assert!(available_ram().is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn the_host_reserve_refuses_what_would_eat_into_it() {
        let available = available_ram().expect("meminfo");
        let too_much = usize::try_from(available).expect("fits") - (16 << 20);
        assert!(matches!(UserspaceBackend.alloc(too_much, None), Err(BackendError::OutOfMemory(_))));
    }
}
