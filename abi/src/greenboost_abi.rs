// SPDX-License-Identifier: GPL-2.0
//! The one definition of the `/dev/greenboost` ioctl ABI.
//!
//! Included by the kernel module (`#[path]`) and by the `greenboost-abi` crate, so it
//! must stay free of crate-level attributes and of anything but `core`.
//! Every struct is `#[repr(C)]` with explicit padding and a size that is a multiple of
//! 8, so the layout is the same for 32- and 64-bit callers. `abi/greenboost.h` is the
//! C mirror; `abi/tests/header.rs` checks that the two agree.
//!
//! Conventions: all sizes are bytes; reserved fields and padding must be zero on input
//! (EINVAL otherwise) so that they can gain a meaning later; unknown flag bits are EINVAL.

/// Bumped on any incompatible change. `GB_IOC_INFO` reports it; the shim refuses a
/// module with another major version and falls back to its userspace backend.
pub const GB_ABI_VERSION: u32 = 1;

/// ioctl type byte. Linux also gives 0xB7 to nsfs (`NS_GET_*`) and remoteproc
/// (`RPROC_*`); every full command number below (direction, size, number) differs from
/// all of theirs, which `abi/tests/magic_0xb7.rs` checks, so a command issued on the
/// wrong kind of fd answers ENOTTY and tools cannot confuse them. New commands must
/// keep it so.
pub const GB_IOC_MAGIC: u32 = 0xB7;

/// Granularity of T2 buffers: buffers are built from 2 MiB compound pages (order 9)
/// and fall back to smaller orders only when memory is fragmented.
pub const GB_CHUNK_SIZE: u64 = 2 << 20;

// Linux asm-generic ioctl number encoding (x86_64, arm64, riscv use it).
const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << IOC_DIRSHIFT) | (GB_IOC_MAGIC << IOC_TYPESHIFT) | (nr << IOC_NRSHIFT) | ((size as u32) << IOC_SIZESHIFT)
}

/// Direction bits of an ioctl command (`_IOC_DIR`).
pub const fn ioc_dir(cmd: u32) -> u32 {
    cmd >> IOC_DIRSHIFT
}
/// Argument size encoded in an ioctl command (`_IOC_SIZE`).
pub const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

/// `GB_IOC_INFO`: what this module is and how it is configured.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbInfo {
    /// `GB_ABI_VERSION` of the module.
    pub abi_version: u32,
    /// `GB_INFO_*` feature bits.
    pub features: u32,
    /// Allocation granularity: `GB_CHUNK_SIZE`.
    pub chunk_size: u64,
    /// Module parameter `pool_cap_mb` in bytes: most T2 memory in use at once.
    pub pool_cap: u64,
    /// Module parameter `reserve_mb` in bytes: free RAM below which ALLOC is refused.
    pub reserve: u64,
    /// Module parameter `uid_cap_mb` in bytes (0: no per-user cap).
    pub uid_cap: u64,
    /// Module parameter `cache_mb` in bytes: size of the pre-zeroed page cache.
    pub cache_target: u64,
    /// Largest single allocation the module accepts (bytes).
    pub max_alloc: u64,
}

/// The module's buffers may be mmapped (always set in ABI 1).
pub const GB_INFO_MMAP: u32 = 1 << 0;
/// Pressure eventfds are supported (always set in ABI 1).
pub const GB_INFO_EVENTFD: u32 = 1 << 1;
/// `GB_IOC_LIST_PROCS` exists (added within ABI 1: modules without this bit answer
/// ENOTTY, and their sysfs `stats` still lists every process).
pub const GB_INFO_PROC_LIST: u32 = 1 << 2;
/// T3 exists: `GB_ALLOC_T3`, `GB_IOC_MOVE`, `GB_IOC_T3_STATS` and `GB_PROC_LIST_T3`
/// (added within ABI 1: modules without this bit answer EINVAL to the flags and
/// ENOTTY to the commands).
pub const GB_INFO_T3: u32 = 1 << 3;

/// `GB_IOC_ALLOC`: allocate a pinned system-RAM buffer, exported as a DMA-BUF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbAlloc {
    /// In: requested size in bytes (> 0). Rounded up to the kernel page size.
    pub size: u64,
    /// In: `GB_ALLOC_*` flags.
    pub flags: u32,
    /// In: NUMA node to allocate on, or -1 for the caller's local node. With
    /// `GB_ALLOC_NODE_STRICT` the node is mandatory, otherwise preferred.
    pub numa_node: i32,
    /// Out: the DMA-BUF file descriptor (O_CLOEXEC, O_RDWR).
    pub fd: i32,
    /// Must be zero.
    pub pad0: u32,
    /// Out: the buffer's id, unique for the module's lifetime (shows in sysfs).
    pub buffer_id: u64,
    /// Out: the size actually allocated (`size` rounded up).
    pub alloc_size: u64,
}

/// Fail with ENOMEM instead of falling back to another NUMA node.
pub const GB_ALLOC_NODE_STRICT: u32 = 1 << 0;
/// The buffer starts in T3: swappable pages the kernel may write to swap under
/// pressure, allocated on first touch, never pinned (see `GB_IOC_MOVE`). The NUMA
/// fields apply to its T2 pages once it is moved there.
pub const GB_ALLOC_T3: u32 = 1 << 1;
/// All flag bits ABI 1 knows.
pub const GB_ALLOC_FLAGS_ALL: u32 = GB_ALLOC_NODE_STRICT | GB_ALLOC_T3;

/// Tier numbers of `GB_IOC_MOVE`.
pub const GB_TIER_T2: u32 = 2;
pub const GB_TIER_T3: u32 = 3;

/// `GB_IOC_MOVE`: move a buffer between T2 (pinned 2 MiB pages) and T3 (swappable
/// pages), keeping its contents, its fd and its mappings (they fault the new pages in).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbMove {
    /// In: a DMA-BUF fd of one of this module's buffers.
    pub fd: i32,
    /// In: `GB_TIER_T2` or `GB_TIER_T3`.
    pub tier: u32,
    /// In: must be zero.
    pub flags: u32,
    /// Must be zero.
    pub pad0: u32,
    /// Out: the buffer's id.
    pub buffer_id: u64,
    /// Out: bytes copied (0 when the buffer was already in `tier`).
    pub moved: u64,
}

/// `GB_IOC_T3_STATS`: the T3 tier and the swap behind it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbT3Stats {
    /// Bytes of live buffers in T3 (their full size, touched or not).
    pub t3_used: u64,
    /// Of those, bytes in RAM now.
    pub t3_resident: u64,
    /// Of those, bytes written out to swap now.
    pub t3_swapped: u64,
    /// Live buffers in T3.
    pub t3_buffers: u64,
    /// Most T3 bytes at once now: the swap not used by others, within `t3_cap_mb`.
    pub t3_cap: u64,
    /// Highest `t3_used` since load.
    pub t3_peak: u64,
    /// Free swap space, all devices (the module cannot read the total; /proc/swaps
    /// has it).
    pub swap_free: u64,
    /// Moves T2 -> T3 since load.
    pub moves_to_t3: u64,
    /// Moves T3 -> T2 since load.
    pub moves_to_t2: u64,
    /// Bytes copied by moves since load.
    pub moved_bytes: u64,
    /// Time spent copying them, nanoseconds.
    pub move_ns: u64,
    /// Moves refused since load (EBUSY, ENOMEM).
    pub move_refusals: u64,
}

/// `GbProcList::flags`: the rows are `GbProcRowT3` (needs `GB_INFO_T3`).
pub const GB_PROC_LIST_T3: u32 = 1 << 0;

/// A `GB_IOC_LIST_PROCS` row with its T3 figures (`GB_PROC_LIST_T3`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbProcRowT3 {
    /// The row as without the flag.
    pub row: GbProcRow,
    /// Bytes of the process's live T3 buffers.
    pub t3_used: u64,
    /// Of those, bytes in RAM now.
    pub t3_resident: u64,
    /// Of those, bytes in swap now.
    pub t3_swapped: u64,
    /// Its live T3 buffers.
    pub t3_buffers: u64,
}

/// `GB_IOC_POOL_STATS`: module-wide tier totals.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbPoolStats {
    /// T2 bytes held by live buffers.
    pub t2_used: u64,
    /// Pre-zeroed bytes cached for future allocations.
    pub t2_cached: u64,
    /// T2 cap (`pool_cap_mb`).
    pub t2_cap: u64,
    /// Most T2 bytes whose pages existed at once (never counting ALLOCs in flight).
    pub t2_peak: u64,
    /// Sum of the T1 (VRAM) usage reported by processes.
    pub t1_reported: u64,
    /// Bytes of live buffers in T3 (`GbT3Stats` has the rest).
    pub t3_used: u64,
    /// Live buffers.
    pub buffers: u64,
    /// ALLOC calls that succeeded since load.
    pub allocs: u64,
    /// ALLOC calls refused with ENOMEM since load (cap, reserve, uid cap, no memory).
    pub alloc_failures: u64,
    /// Free system RAM at the last watchdog tick, bytes.
    pub free_ram: u64,
    /// 1 while free RAM is below the reserve, else 0.
    pub pressure: u32,
    /// Must be zero.
    pub pad0: u32,
}

/// `GB_IOC_PROC_STATS`: the calling process's (thread group's) usage.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbProcStats {
    /// Thread group id the figures belong to.
    pub pid: i32,
    /// Real uid of the process.
    pub uid: u32,
    /// T2 bytes held by buffers this process allocated and that are still alive.
    pub t2_used: u64,
    /// Most T2 bytes whose pages existed at once (never counting ALLOCs in flight).
    pub t2_peak: u64,
    /// Live buffers this process allocated.
    pub buffers: u64,
    /// Last T1 figure this process reported.
    pub t1_reported: u64,
}

/// One row of `GB_IOC_LIST_PROCS`: a process with an open `/dev/greenboost` file or a
/// live buffer it allocated.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbProcRow {
    /// Thread group id, as the caller sees it (its pid namespace).
    pub pid: i32,
    /// Real uid as of the process's latest open or ALLOC, as the caller sees it (its
    /// user namespace; 65534 when unmapped there).
    pub uid: u32,
    /// Last T1 (VRAM) figure the process reported.
    pub t1_used: u64,
    /// Last VRAM budget the process reported.
    pub t1_budget: u64,
    /// T2 bytes held by live buffers the process allocated.
    pub t2_used: u64,
    /// Most T2 bytes whose pages existed at once (never counting ALLOCs in flight).
    pub t2_peak: u64,
    /// Live buffers the process allocated.
    pub buffers: u64,
    /// Its open `/dev/greenboost` files.
    pub files: u64,
    /// Command name of its thread-group leader, NUL-terminated.
    pub comm: [u8; 16],
}

/// `GB_IOC_LIST_PROCS`: the per-process rows the caller may see. A caller with
/// CAP_SYS_ADMIN in the initial user namespace sees every process; anyone else only
/// the processes of its own real uid. Processes outside the caller's pid namespace
/// are never listed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbProcList {
    /// In: user address of an array of `capacity` `GbProcRow`s (may be 0 when
    /// `capacity` is 0, to ask for `total` only).
    pub rows: u64,
    /// In: how many rows the array holds.
    pub capacity: u32,
    /// Out: rows written, at most `capacity`.
    pub count: u32,
    /// Out: rows the caller may see (more than `count` when the array was too small).
    pub total: u32,
    /// In: 0 or `GB_PROC_LIST_T3` (rows are then `GbProcRowT3`).
    pub flags: u32,
}

/// `GB_IOC_REPORT_T1`: a process tells the module how much VRAM it uses, so sysfs and
/// dmesg show all tiers. The figure belongs to the reporting process and disappears
/// when its last /dev/greenboost fd is closed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbT1Report {
    /// VRAM bytes in use by this process (all devices).
    pub vram_used: u64,
    /// VRAM bytes the process may use (budget), for display.
    pub vram_budget: u64,
}

/// `GB_IOC_REGISTER_EVENTFD`: signal this eventfd on every pressure crossing
/// (free RAM falls below the reserve, or recovers). The registration lives as long as
/// the /dev/greenboost file it was made on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GbEventfd {
    /// An eventfd file descriptor.
    pub fd: i32,
    /// Must be zero.
    pub flags: u32,
}

pub const GB_IOC_INFO: u32 = ioc(IOC_READ, 0x00, core::mem::size_of::<GbInfo>());
pub const GB_IOC_ALLOC: u32 = ioc(IOC_READ | IOC_WRITE, 0x01, core::mem::size_of::<GbAlloc>());
pub const GB_IOC_POOL_STATS: u32 = ioc(IOC_READ, 0x02, core::mem::size_of::<GbPoolStats>());
pub const GB_IOC_PROC_STATS: u32 = ioc(IOC_READ, 0x03, core::mem::size_of::<GbProcStats>());
pub const GB_IOC_REPORT_T1: u32 = ioc(IOC_WRITE, 0x04, core::mem::size_of::<GbT1Report>());
pub const GB_IOC_REGISTER_EVENTFD: u32 = ioc(IOC_WRITE, 0x05, core::mem::size_of::<GbEventfd>());
pub const GB_IOC_LIST_PROCS: u32 = ioc(IOC_READ | IOC_WRITE, 0x06, core::mem::size_of::<GbProcList>());
pub const GB_IOC_MOVE: u32 = ioc(IOC_READ | IOC_WRITE, 0x07, core::mem::size_of::<GbMove>());
pub const GB_IOC_T3_STATS: u32 = ioc(IOC_READ, 0x08, core::mem::size_of::<GbT3Stats>());

/// Every command of ABI 1, for tests and tools.
pub const GB_IOC_ALL: [u32; 9] = [
    GB_IOC_INFO,
    GB_IOC_ALLOC,
    GB_IOC_POOL_STATS,
    GB_IOC_PROC_STATS,
    GB_IOC_REPORT_T1,
    GB_IOC_REGISTER_EVENTFD,
    GB_IOC_LIST_PROCS,
    GB_IOC_MOVE,
    GB_IOC_T3_STATS,
];

/// Path of the device node.
pub const GB_DEVICE_PATH: &str = "/dev/greenboost";
/// Sysfs file with the module-wide totals (see kmod/README.md "Statistics"); the
/// per-process rows are only in `GB_IOC_LIST_PROCS`.
pub const GB_SYSFS_STATS: &str = "/sys/kernel/greenboost/stats";

const _: () = assert!(core::mem::size_of::<GbInfo>() == 56);
const _: () = assert!(core::mem::size_of::<GbAlloc>() == 40);
const _: () = assert!(core::mem::size_of::<GbPoolStats>() == 88);
const _: () = assert!(core::mem::size_of::<GbProcStats>() == 40);
const _: () = assert!(core::mem::size_of::<GbT1Report>() == 16);
const _: () = assert!(core::mem::size_of::<GbEventfd>() == 8);
const _: () = assert!(core::mem::size_of::<GbProcRow>() == 72);
const _: () = assert!(core::mem::size_of::<GbProcList>() == 24);
const _: () = assert!(core::mem::size_of::<GbMove>() == 32);
const _: () = assert!(core::mem::size_of::<GbT3Stats>() == 96);
const _: () = assert!(core::mem::size_of::<GbProcRowT3>() == 104);
