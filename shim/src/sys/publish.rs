//! The record `greenboost status` reads (`greenboost_policy::Published`): made at the
//! process's first T2 allocation as `/dev/shm/greenboost-shim.<pid>`, rewritten from the
//! counters at every `update`, removed at exit. Without a writable /dev/shm the process
//! simply does not publish.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use greenboost_policy::{
    start_time_from_stat, Published, PUBLISHED_DIR, PUBLISHED_MAGIC, PUBLISHED_PREFIX, PUBLISHED_VERSION,
};

use crate::sys::shm_path::ShmPath;
use crate::sys::stats::{self, STATS};

/// The mapped record; null until made (or when it cannot be).
static RECORD: AtomicPtr<Published> = AtomicPtr::new(ptr::null_mut());
static STATE: AtomicU8 = AtomicU8::new(UNMADE);
const UNMADE: u8 = 0;
const MAKING: u8 = 1;
const MADE: u8 = 2;
const UNAVAILABLE: u8 = 3;

/// The mapping's length: one page, whatever the record's size.
const MAPPED: usize = 4096;

/// `/dev/shm/greenboost-shim.<pid>`.
fn path_of(pid: u32) -> ShmPath {
    ShmPath::new(format_args!("{PUBLISHED_PREFIX}{pid}"))
}

/// This process's start time (see `Published::start_time`); 0 if unread.
fn start_time() -> u64 {
    std::fs::read("/proc/self/stat").ok().and_then(|stat| start_time_from_stat(&stat)).unwrap_or(0)
}

/// Removes records of this user's processes that are gone (killed before `withdraw`):
/// /dev/shm is sticky, so only our own can go, and status skips the others anyway.
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(PUBLISHED_DIR) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) =
            name.to_str().and_then(|n| n.strip_prefix(PUBLISHED_PREFIX)).and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone =
            unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Makes and maps the record file; null when it cannot be had.
fn make() -> *mut Published {
    sweep_stale();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let file = path_of(pid);
    let path = file.as_ptr();
    // A file a killed process of the same pid left is replaced (O_TRUNC); one of
    // another user's cannot be opened, and then nothing is published.
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: a NUL-terminated path in a live buffer.
    let fd = unsafe { libc::open(path, flags, 0o644) };
    if fd < 0 {
        return ptr::null_mut();
    }
    // SAFETY: our own fd; the mapping outlives it (mmap keeps its own reference).
    let mapped = unsafe {
        if libc::ftruncate(fd, MAPPED as libc::off_t) != 0 {
            libc::close(fd);
            libc::unlink(path);
            return ptr::null_mut();
        }
        let at = libc::mmap(ptr::null_mut(), MAPPED, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        libc::close(fd);
        at
    };
    if mapped == libc::MAP_FAILED {
        // SAFETY: the path made above.
        unsafe { libc::unlink(path) };
        return ptr::null_mut();
    }
    let record = mapped.cast::<Published>();
    let header = Published {
        magic: PUBLISHED_MAGIC,
        version: PUBLISHED_VERSION,
        size: Published::SIZE as u32,
        pid,
        start_time: start_time(),
        ..Published::default()
    };
    // SAFETY: a fresh, page-aligned shared mapping of MAPPED bytes, larger than the
    // record; nobody else writes it.
    unsafe { record.write(header) };
    record
}

/// Rewrites the record from the counters, making it at the first T2 or movable
/// allocation (movable VRAM reaches T2 by a swap, not by an allocation).
pub fn update() {
    if stats::load(&STATS.t2_allocs) == 0 && stats::load(&STATS.movable_allocs) == 0 {
        return;
    }
    let mut record = RECORD.load(Ordering::Acquire);
    if record.is_null() {
        if STATE.compare_exchange(UNMADE, MAKING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        record = make();
        RECORD.store(record, Ordering::Release);
        STATE.store(if record.is_null() { UNAVAILABLE } else { MADE }, Ordering::Release);
        if record.is_null() {
            return;
        }
    }
    // SAFETY: `record` is the live mapping `make` made (unmapped only by `withdraw` and in a
    // forked child, both of which clear RECORD first); `seq` is an aligned u64 in it.
    let seq = unsafe { AtomicU64::from_ptr(ptr::addr_of_mut!((*record).seq)) };
    let before = seq.load(Ordering::Acquire);
    // One writer at a time: another thread writing now publishes a snapshot as fresh.
    if !before.is_multiple_of(2)
        || seq.compare_exchange(before, before + 1, Ordering::AcqRel, Ordering::Acquire).is_err()
    {
        return;
    }
    fence(Ordering::Release);
    // SAFETY: field addresses inside the live mapping (see above); nothing is read.
    let figures = unsafe {
        [
            (ptr::addr_of_mut!((*record).t1_used), &STATS.t1_used),
            (ptr::addr_of_mut!((*record).t2_used), &STATS.t2_used),
            (ptr::addr_of_mut!((*record).t2_peak), &STATS.t2_peak),
            (ptr::addr_of_mut!((*record).movable_allocs), &STATS.movable_allocs),
            (ptr::addr_of_mut!((*record).tier_vram), &STATS.tier_vram),
            (ptr::addr_of_mut!((*record).promoted_bytes), &STATS.promoted_bytes),
            (ptr::addr_of_mut!((*record).demoted_bytes), &STATS.demoted_bytes),
            (ptr::addr_of_mut!((*record).promotions), &STATS.promotions),
            (ptr::addr_of_mut!((*record).demotions), &STATS.demotions),
            (ptr::addr_of_mut!((*record).swaps), &STATS.swaps),
            (ptr::addr_of_mut!((*record).room_made_bytes), &STATS.room_made_bytes),
            (ptr::addr_of_mut!((*record).kept_vram), &STATS.kept_vram),
        ]
    };
    for (field, counter) in figures {
        // SAFETY: an aligned u64 field of the live mapping, written only under the odd seq.
        unsafe { AtomicU64::from_ptr(field) }.store(stats::load(counter), Ordering::Relaxed);
    }
    seq.store(before + 2, Ordering::Release);
}

/// At exit: the record goes (status would otherwise show a process that is gone).
pub fn withdraw() {
    let record = RECORD.swap(ptr::null_mut(), Ordering::AcqRel);
    if record.is_null() {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let path = path_of(pid);
    // SAFETY: the path of the file `make` made for this pid; the mapping is ours.
    unsafe {
        libc::unlink(path.as_ptr());
        libc::munmap(record.cast::<c_void>(), MAPPED);
    }
}

/// In the child of a fork: the parent's record is the parent's (the mapping is shared);
/// the child publishes its own if it allocates T2.
pub fn forget_in_child() {
    let record = RECORD.swap(ptr::null_mut(), Ordering::AcqRel);
    if !record.is_null() {
        // SAFETY: the mapping inherited from the parent, no longer referenced here.
        unsafe { libc::munmap(record.cast::<c_void>(), MAPPED) };
    }
    STATE.store(UNMADE, Ordering::Release);
}
