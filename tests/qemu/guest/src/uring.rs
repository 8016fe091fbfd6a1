//! A minimal io_uring over raw syscalls (the suite depends on libc alone): enough to
//! register fixed buffers (a FOLL_LONGTERM pin, as cuMemHostRegister makes) and run
//! READ_FIXED / WRITE_FIXED one at a time.

use crate::gb::{errname, errno};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_FEAT_SINGLE_MMAP: u32 = 1;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_REGISTER_BUFFERS: u32 = 0;
const IORING_UNREGISTER_BUFFERS: u32 = 1;
pub const IORING_OP_READ_FIXED: u8 = 4;
pub const IORING_OP_WRITE_FIXED: u8 = 5;

#[repr(C)]
#[derive(Default)]
struct SqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqringOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqringOffsets,
    cq_off: CqringOffsets,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    rw_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    splice_fd_in: i32,
    addr3: u64,
    pad: u64,
}

#[repr(C)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<Params>() == 120);
const _: () = assert!(std::mem::size_of::<Sqe>() == 64);
const _: () = assert!(std::mem::size_of::<Cqe>() == 16);

struct RingMap {
    ptr: *mut u8,
    len: usize,
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: a mapping this object created.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

fn map_ring(fd: RawFd, len: usize, offset: i64) -> Result<RingMap, String> {
    // SAFETY: a fresh shared mapping of the ring fd at the kernel's chosen address.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE, fd, offset)
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap io_uring ring at {offset:#x}: {}", errname(errno())));
    }
    Ok(RingMap { ptr: p as *mut u8, len })
}

pub struct Uring {
    // Field order: the maps are unmapped before the fd closes.
    sq: RingMap,
    cq: Option<RingMap>,
    sqes: RingMap,
    p: Params,
    fd: OwnedFd,
}

impl Uring {
    pub fn new(entries: u32) -> Result<Uring, String> {
        let mut p = Params::default();
        // SAFETY: p is a valid io_uring_params the kernel fills.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p as *mut Params) };
        if fd < 0 {
            return Err(format!("io_uring_setup: {} (io_uring disabled?)", errname(errno())));
        }
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * std::mem::size_of::<Cqe>();
        let (sq, cq) = if p.features & IORING_FEAT_SINGLE_MMAP != 0 {
            (map_ring(fd.as_raw_fd(), sq_len.max(cq_len), IORING_OFF_SQ_RING)?, None)
        } else {
            (map_ring(fd.as_raw_fd(), sq_len, IORING_OFF_SQ_RING)?, Some(map_ring(fd.as_raw_fd(), cq_len, IORING_OFF_CQ_RING)?))
        };
        let sqes = map_ring(fd.as_raw_fd(), p.sq_entries as usize * std::mem::size_of::<Sqe>(), IORING_OFF_SQES)?;
        Ok(Uring { sq, cq, sqes, p, fd })
    }

    fn cq_base(&self) -> *mut u8 {
        self.cq.as_ref().unwrap_or(&self.sq).ptr
    }

    fn atomic(base: *mut u8, off: u32) -> &'static AtomicU32 {
        // SAFETY: the offset comes from the kernel and lies inside the ring mapping,
        // which outlives every use (all uses are within a method of Uring).
        unsafe { &*(base.add(off as usize) as *const AtomicU32) }
    }

    /// IORING_REGISTER_BUFFERS: pins the iovecs' pages long-term.
    pub fn register_buffers(&self, iovs: &[libc::iovec]) -> Result<(), i32> {
        // SAFETY: iovs is a valid array of iovec of the given length.
        let r = unsafe {
            libc::syscall(libc::SYS_io_uring_register, self.fd.as_raw_fd(), IORING_REGISTER_BUFFERS, iovs.as_ptr(), iovs.len() as u32)
        };
        if r < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    pub fn unregister_buffers(&self) -> Result<(), i32> {
        // SAFETY: no argument.
        let r = unsafe {
            libc::syscall(libc::SYS_io_uring_register, self.fd.as_raw_fd(), IORING_UNREGISTER_BUFFERS, std::ptr::null::<u8>(), 0u32)
        };
        if r < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    /// Submits one fixed-buffer read or write and waits for its completion; returns res.
    pub fn rw_fixed(&self, opcode: u8, fd: RawFd, buf_index: u16, addr: *mut u8, len: u32, offset: u64) -> Result<i32, String> {
        let sq = self.sq.ptr;
        // SAFETY: the ring_mask offset comes from the kernel and lies inside the SQ map.
        let mask = unsafe { *(sq.add(self.p.sq_off.ring_mask as usize) as *const u32) };
        let tail_a = Self::atomic(sq, self.p.sq_off.tail);
        let tail = tail_a.load(Ordering::Acquire);
        let idx = tail & mask;
        let sqe = Sqe { opcode, fd, off: offset, addr: addr as u64, len, buf_index, user_data: 0x6b, ..Default::default() };
        // SAFETY: idx < sq_entries; the sqe array and the index array are in our maps.
        unsafe {
            std::ptr::write_volatile((self.sqes.ptr as *mut Sqe).add(idx as usize), sqe);
            std::ptr::write_volatile((sq.add(self.p.sq_off.array as usize) as *mut u32).add(idx as usize), idx);
        }
        tail_a.store(tail.wrapping_add(1), Ordering::Release);
        // SAFETY: plain syscall on our ring fd.
        let r = unsafe {
            libc::syscall(libc::SYS_io_uring_enter, self.fd.as_raw_fd(), 1u32, 1u32, IORING_ENTER_GETEVENTS, std::ptr::null::<u8>(), 0usize)
        };
        if r < 0 {
            return Err(format!("io_uring_enter: {}", errname(errno())));
        }
        let cq = self.cq_base();
        let head_a = Self::atomic(cq, self.p.cq_off.head);
        let tail_c = Self::atomic(cq, self.p.cq_off.tail);
        let head = head_a.load(Ordering::Acquire);
        if tail_c.load(Ordering::Acquire) == head {
            return Err("io_uring: no completion after GETEVENTS".into());
        }
        // SAFETY: cq ring mask and cqes array are inside the cq mapping.
        let res = unsafe {
            let cmask = *(cq.add(self.p.cq_off.ring_mask as usize) as *const u32);
            let cqe = (cq.add(self.p.cq_off.cqes as usize) as *const Cqe).add((head & cmask) as usize);
            std::ptr::read_volatile(&(*cqe).res)
        };
        head_a.store(head.wrapping_add(1), Ordering::Release);
        Ok(res)
    }
}
