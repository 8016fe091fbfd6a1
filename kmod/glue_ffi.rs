// SPDX-License-Identifier: GPL-2.0
//! Declarations of the C glue (`kmod/glue.c`, `kmod/glue_dmabuf.c`, `kmod/glue_mm.c`,
//! `kmod/glue_shmem.c`), mirroring the
//! Rust -> C half of `kmod/glue.h` (the C -> Rust half is `entry.rs`);
//! `scripts/check-kmod-glue.py` checks that the two agree.
//!
//! The glue holds only ops tables, module parameters, work items and wrappers of
//! static-inline C APIs; what each function does is in `glue.c`/`glue_mm.c`, and every
//! call site states in its `SAFETY:` comment why the call is sound.

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// Opaque `struct dma_buf`: only ever handled by pointer.
#[repr(C)]
pub(crate) struct DmaBuf {
    _opaque: [u8; 0],
}

/// Opaque `struct eventfd_ctx`: only ever handled by pointer.
#[repr(C)]
pub(crate) struct EventfdCtx {
    _opaque: [u8; 0],
}

/// `struct gb_chunk`: one physically contiguous piece of a buffer.
///
/// # Invariants
///
/// When owned by the pool or a buffer, `page` is the first of a block of `2^order`
/// order-0 pages (split, never compound) allocated by `gb_chunk_alloc` with that order,
/// and we hold one reference to each of them.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Chunk {
    pub(crate) page: *mut bindings::page,
    pub(crate) order: c_uint,
    pub(crate) pad: c_uint,
}

// SAFETY: a chunk is an owned block of pages; struct pages may be handed between
// threads, and the owner (pool lock or buffer) serialises their use.
unsafe impl Send for Chunk {}

/// `struct gb_params`: a snapshot of the module parameters.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Params {
    pub(crate) pool_cap_mb: u64,
    pub(crate) reserve_mb: i64,
    pub(crate) uid_cap_mb: i64,
    pub(crate) cache_mb: u64,
    pub(crate) watchdog_ms: u64,
    pub(crate) t3_cap_mb: i64,
    pub(crate) uid_t3_cap_mb: i64,
    pub(crate) uid_buffers: u64,
}

// `bindings` structs contain zero-sized lockdep fields; the kernel's own bindings
// silence the same lint.
#[allow(improper_ctypes)]
extern "C" {
    // glue.c
    pub(crate) fn gb_misc_register() -> c_int;
    pub(crate) fn gb_misc_deregister();
    pub(crate) fn gb_sysfs_create() -> c_int;
    pub(crate) fn gb_sysfs_remove();

    pub(crate) fn gb_params_read(out: *mut Params);
    pub(crate) fn gb_params_set_defaults(pool_cap_mb: u64, reserve_mb: i64, uid_cap_mb: i64);

    pub(crate) fn gb_watchdog_kick(delay_ms: c_ulong);
    pub(crate) fn gb_refill_kick();
    pub(crate) fn gb_works_cancel();
    pub(crate) fn gb_shrinker_register() -> c_int;
    pub(crate) fn gb_shrinker_unregister();
    pub(crate) fn gb_now_ms() -> u64;
    pub(crate) fn gb_now_ns() -> u64;
    pub(crate) fn gb_backing_lock_init(lock: *mut bindings::mutex);
    pub(crate) fn gb_backing_lock(lock: *mut bindings::mutex);
    pub(crate) fn gb_backing_lock_killable(lock: *mut bindings::mutex) -> c_int;
    pub(crate) fn gb_backing_trylock(lock: *mut bindings::mutex) -> bool;
    pub(crate) fn gb_backing_unlock(lock: *mut bindings::mutex);

    pub(crate) fn gb_fd_reserve() -> c_int;
    pub(crate) fn gb_fd_discard(fd: c_int);
    pub(crate) fn gb_dmabuf_export(buf: *mut c_void, size: usize, out: *mut *mut DmaBuf) -> c_int;
    pub(crate) fn gb_dmabuf_install(fd: c_int, dmabuf: *mut DmaBuf);
    pub(crate) fn gb_dmabuf_put(dmabuf: *mut DmaBuf);
    pub(crate) fn gb_dmabuf_lookup(fd: c_int, buf: *mut *mut c_void, out: *mut *mut DmaBuf) -> c_int;

    pub(crate) fn gb_eventfd_get(fd: c_int, out: *mut *mut EventfdCtx) -> c_int;
    pub(crate) fn gb_eventfd_signal(ctx: *mut EventfdCtx);
    pub(crate) fn gb_eventfd_put(ctx: *mut EventfdCtx);

    pub(crate) fn gb_current_tgid_get() -> *mut bindings::pid;
    pub(crate) fn gb_pid_put(pid: *mut bindings::pid);
    pub(crate) fn gb_pid_nr(pid: *mut bindings::pid) -> c_int;
    pub(crate) fn gb_pid_vnr(pid: *mut bindings::pid) -> c_int;
    pub(crate) fn gb_capable_admin() -> bool;
    pub(crate) fn gb_current_tgid_vnr() -> c_int;
    pub(crate) fn gb_current_kuid() -> u32;
    pub(crate) fn gb_kuid_to_caller(kuid: u32) -> u32;
    pub(crate) fn gb_current_comm(buf: *mut c_char, len: usize);

    // glue_mm.c
    pub(crate) fn gb_chunk_alloc(
        nid: c_int,
        order: c_uint,
        zero: bool,
        strict: bool,
        cheap: bool,
        account: bool,
    ) -> *mut bindings::page;
    pub(crate) fn gb_chunk_free(page: *mut bindings::page, order: c_uint);
    pub(crate) fn gb_chunk_zero(page: *mut bindings::page, order: c_uint);
    pub(crate) fn gb_chunk_charged(page: *mut bindings::page) -> bool;
    pub(crate) fn gb_current_memcg_charged() -> bool;
    pub(crate) fn gb_chunk_exclusive(page: *mut bindings::page, order: c_uint) -> bool;
    pub(crate) fn gb_page_nid(page: *mut bindings::page) -> c_int;
    pub(crate) fn gb_node_online(nid: c_int) -> bool;
    pub(crate) fn gb_numa_node_id() -> c_int;
    pub(crate) fn gb_mem_available() -> u64;
    pub(crate) fn gb_total_ram() -> u64;
    pub(crate) fn gb_fatal_signal_pending() -> bool;
    pub(crate) fn gb_cond_resched();
    pub(crate) fn gb_short_sleep();
    pub(crate) fn gb_memlock_charge(npages: c_ulong, out: *mut *mut bindings::user_struct) -> c_int;
    pub(crate) fn gb_memlock_uncharge(user: *mut bindings::user_struct, npages: c_ulong);
    pub(crate) fn gb_memlock_put(user: *mut bindings::user_struct);

    pub(crate) fn gb_vma_info(
        vma: *mut bindings::vm_area_struct,
        start: *mut c_ulong,
        pages: *mut c_ulong,
        pgoff: *mut c_ulong,
        shared: *mut bool,
    );
    pub(crate) fn gb_vma_prepare(vma: *mut bindings::vm_area_struct);
    pub(crate) fn gb_vma_fill(
        vma: *mut bindings::vm_area_struct,
        addr: c_ulong,
        head: *mut bindings::page,
        first: c_ulong,
        npages: c_ulong,
    ) -> c_int;

    pub(crate) fn gb_dma_seg_limit(dev: *mut bindings::device) -> u64;
    pub(crate) fn gb_sgt_build(
        chunks: *const Chunk,
        nchunks: c_uint,
        seg_max: u64,
        out: *mut *mut bindings::sg_table,
    ) -> c_int;
    pub(crate) fn gb_vmap_chunks(chunks: *const Chunk, nchunks: c_uint, npages: c_ulong) -> *mut c_void;
    pub(crate) fn gb_vunmap(vaddr: *mut c_void);

    // glue_shmem.c
    pub(crate) fn gb_shmem_create(size: u64, out: *mut *mut bindings::file) -> c_int;
    pub(crate) fn gb_file_put(file: *mut bindings::file);
    pub(crate) fn gb_map_file_create(shm: *mut bindings::file, out: *mut *mut bindings::file) -> c_int;
    pub(crate) fn gb_shmem_counts(shm: *mut bindings::file, resident: *mut u64, swapped: *mut u64);
    pub(crate) fn gb_swap_free() -> u64;
    pub(crate) fn gb_vma_use_file(vma: *mut bindings::vm_area_struct, map_file: *mut bindings::file);
    pub(crate) fn gb_user_unmap(shm: *mut bindings::file);
    pub(crate) fn gb_shmem_fault(
        shm: *mut bindings::file,
        vma: *mut bindings::vm_area_struct,
        addr: c_ulong,
        index: c_ulong,
    ) -> c_int;
    pub(crate) fn gb_shmem_store(
        shm: *mut bindings::file,
        index: c_ulong,
        head: *mut bindings::page,
        order: c_uint,
    ) -> c_int;
    pub(crate) fn gb_shmem_load(
        shm: *mut bindings::file,
        index: c_ulong,
        head: *mut bindings::page,
        order: c_uint,
    ) -> c_int;
    pub(crate) fn gb_shmem_truncate(shm: *mut bindings::file);
    pub(crate) fn gb_shmem_pin(
        shm: *mut bindings::file,
        npages: c_ulong,
        killable: bool,
        out: *mut *mut *mut bindings::page,
        pinned: *mut c_ulong,
    ) -> c_int;
    pub(crate) fn gb_shmem_unpin(pages: *mut *mut bindings::page, npages: c_ulong);
    pub(crate) fn gb_shmem_make_evictable(pages: *mut *mut bindings::page, npages: c_ulong);
    pub(crate) fn gb_shmem_set_unevictable(shm: *mut bindings::file, unevictable: bool);
    pub(crate) fn gb_sgt_build_pages(
        pages: *mut *mut bindings::page,
        npages: c_ulong,
        seg_max: u64,
        out: *mut *mut bindings::sg_table,
    ) -> c_int;
    pub(crate) fn gb_vmap_pages(pages: *mut *mut bindings::page, npages: c_ulong) -> *mut c_void;
}
