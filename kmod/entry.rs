// SPDX-License-Identifier: GPL-2.0
//! Every C -> Rust entry point (`gb_rs_*`, declared in `glue.h`, called by the ops
//! tables and work items of `glue.c`).
//!
//! Each one turns the pointers C hands over back into Rust references, states in its
//! `# Safety` section what the C caller guarantees, and calls into the module. This is
//! the only file that trusts pointers coming from C and the only one with
//! `#[no_mangle]` functions. It takes no lock itself (see "Lock order" in
//! kmod/README.md).

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};
use kernel::prelude::*;

use crate::buffer::Buffer;
use crate::device::{self, DeviceFile};
use crate::shmem::PinnedPages;
use crate::state::state;
use crate::stats;

/// `open` of `/dev/greenboost`: stores a new [`DeviceFile`] in `*file_priv`;
/// `writable`: the file was opened for writing (`FMODE_WRITE`).
///
/// # Safety
///
/// `file_priv` is `&file->private_data` of the file being opened, writable and not yet
/// holding a [`DeviceFile`]; the module state is published (the device is registered
/// only while it is).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_open(file_priv: *mut *mut c_void, writable: bool) -> c_int {
    match device::open(state(), writable) {
        Ok(file) => {
            // SAFETY: `file_priv` is valid for writes (the function's contract). The
            // `KBox` is turned back by `gb_rs_release`.
            unsafe { *file_priv = KBox::into_raw(file).cast() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `release` of a `/dev/greenboost` file: the last reference to it is gone.
///
/// # Safety
///
/// `file_priv` is the `private_data` that a successful [`gb_rs_open`] stored, and this
/// is the file's one release: no other entry point runs on it any more.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_release(file_priv: *mut c_void) {
    // SAFETY: `file_priv` came from `KBox::into_raw` of a `DeviceFile` in `gb_rs_open`
    // and is turned back once, here, after its last use (the function's contract).
    drop(unsafe { KBox::from_raw(file_priv.cast::<DeviceFile>()) });
}

/// `unlocked_ioctl` (and `compat_ioctl`: the ABI has one layout).
///
/// # Safety
///
/// `file_priv` is the `private_data` that a successful [`gb_rs_open`] stored, of a file
/// that stays open during the call; `arg` is the caller's untrusted argument (only
/// ever used as a user pointer through `UserSlice`).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_ioctl(file_priv: *mut c_void, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `file_priv` points to the open file's `DeviceFile` (the function's
    // contract), which `gb_rs_release` frees only after the last ioctl has returned.
    let file = unsafe { &*file_priv.cast::<DeviceFile>() };
    match device::ioctl(state(), file, cmd, arg) {
        Ok(()) => 0,
        Err(e) => e.to_errno() as c_long,
    }
}

/// Turns a dma-buf's `priv` back into its [`Buffer`].
///
/// # Safety
///
/// `buf` is the `priv` of one of our dma-bufs that has not been released yet, and the
/// returned reference is not used after its release.
unsafe fn buffer<'a>(buf: *mut c_void) -> &'a Buffer {
    // SAFETY: `buf` was made by `buffer::export` from a `KBox<Buffer>` and stays valid
    // until the dma-buf's release (the function's contract).
    unsafe { &*buf.cast::<Buffer>() }
}

/// dma-buf `release`: the last reference to the dma-buf is gone.
///
/// # Safety
///
/// `buf` is the `priv` of one of our dma-bufs, and this is its release callback, which
/// the dma-buf core calls once, after every other callback on it.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_release(buf: *mut c_void) {
    // SAFETY: `buf` came from `KBox::into_raw` in `buffer::export`; it is turned back
    // once, here, after its last use (the function's contract).
    drop(unsafe { KBox::from_raw(buf.cast::<Buffer>()) });
}

/// dma-buf `mmap`.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs and `vma` the VMA being set up by
/// an mmap of it, with the mmap lock held for writing (the dma-buf core's `mmap`).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_mmap(buf: *mut c_void, vma: *mut bindings::vm_area_struct) -> c_int {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: `vma` is the VMA of this mmap with its mmap lock held for writing (the
    // function's contract), as `Buffer::mmap` requires.
    match unsafe { b.mmap(vma) } {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `fault` of a mapping made by [`gb_rs_buffer_mmap`] at `addr` (page `index` of the
/// buffer): 0 when the page is mapped, or a negative errno (the glue answers SIGBUS,
/// or OOM for ENOMEM). Unless `wait`, -EAGAIN when a move holds the buffer (the glue
/// then waits with [`gb_rs_buffer_wait`] and retries the fault).
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs (the mapping holds a reference to
/// it) and `vma` that mapping, in a fault at `addr` with its mmap or vma lock held.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_fault(
    buf: *mut c_void,
    vma: *mut bindings::vm_area_struct,
    addr: c_ulong,
    index: c_ulong,
    wait: bool,
) -> c_int {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: `vma` is a live mapping of this buffer in its fault at `addr` (the
    // function's contract), as `Buffer::fault` requires.
    match unsafe { b.fault(vma, addr, index, wait) } {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// A fault found the buffer held by a move: waits until the move is done (killably
/// when `killable`), with no lock of the faulting task held; the fault is retried.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs, kept alive by a reference the
/// caller holds across the call.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_wait(buf: *mut c_void, killable: bool) {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    unsafe { buffer(buf) }.wait_for_backing(killable);
}

/// dma-buf `attach`: the sg table of the new attachment, with segments within `dev`'s
/// limits (mapped later by the glue's `map_dma_buf`).
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs; `dev` is the device of the new
/// attachment and `out` a writable slot for the table, as the dma-buf core's `attach`
/// provides them.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_attach(
    buf: *mut c_void,
    dev: *mut bindings::device,
    out: *mut *mut bindings::sg_table,
) -> c_int {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: `dev` and `out` come from the dma-buf core's `attach` for this buffer
    // (the function's contract), as `Buffer::attach` requires.
    match unsafe { b.attach(dev, out) } {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// dma-buf `detach`: an attachment made by [`gb_rs_buffer_attach`] is gone.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_detach(buf: *mut c_void) {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    unsafe { buffer(buf) }.detach();
}

/// `map_dma_buf` of an attachment without a table (the buffer is in T3): references to
/// every page in `*pages` (`*npages` of them), their sg table in `*out`.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs, `dev` the device of one of its
/// attachments; `pages`, `npages` and `out` are writable (the attachment's fields).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_pin(
    buf: *mut c_void,
    dev: *mut bindings::device,
    pages: *mut *mut *mut bindings::page,
    npages: *mut c_ulong,
    out: *mut *mut bindings::sg_table,
) -> c_int {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: `dev` is an attachment's device and `out` writable (the function's
    // contract), as `Buffer::pin` requires.
    match unsafe { b.pin(dev, out) } {
        Ok(pinned) => {
            let (array, n) = pinned.into_raw();
            // SAFETY: `pages` and `npages` are writable (the function's contract); the
            // references move to the attachment until `gb_rs_buffer_unpin`.
            unsafe {
                *pages = array;
                *npages = n;
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `unmap_dma_buf` of an attachment pinned by [`gb_rs_buffer_pin`]: its references go.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs; `pages` and `npages` are what
/// [`gb_rs_buffer_pin`] stored for it, not used afterwards.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_unpin(buf: *mut c_void, pages: *mut *mut bindings::page, npages: c_ulong) {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: the array and its references came from one `into_raw` in
    // `gb_rs_buffer_pin` and are given back once (the function's contract).
    b.unpin(unsafe { PinnedPages::from_raw(pages, npages) });
}

/// dma-buf `vmap` (the core counts nested vmaps and calls this once): the mapping in
/// `*out`, or a negative errno.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs; `out` is writable.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_vmap(buf: *mut c_void, out: *mut *mut c_void) -> c_int {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    match b.vmap() {
        Ok(vaddr) => {
            // SAFETY: `out` is writable (the function's contract).
            unsafe { *out = vaddr };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// dma-buf `vunmap`.
///
/// # Safety
///
/// `buf` is the `priv` of one of our live dma-bufs; `vaddr` was returned by
/// [`gb_rs_buffer_vmap`] for it and is not used afterwards (the dma-buf core's
/// `vunmap`, once per successful `vmap`).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_buffer_vunmap(buf: *mut c_void, vaddr: *mut c_void) {
    // SAFETY: `buf` is a live dma-buf's `priv` (the function's contract).
    let b = unsafe { buffer(buf) };
    // SAFETY: `vaddr` is this buffer's live kernel mapping, unmapped once (the
    // function's contract).
    unsafe { b.vunmap(vaddr) };
}

/// The watchdog work item.
///
/// # Safety
///
/// Called only by the glue's delayed work item, which runs only while the module state
/// is published (`drop` cancels it before unpublishing).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_watchdog() {
    let state = state();
    state.held.scan(&state.shared, &state.procs, &state.users);
    state.watchdog.run(state.pool());
}

/// The refill work item.
///
/// # Safety
///
/// Called only by the glue's work item, which runs only while the module state is
/// published (`drop` cancels it before unpublishing).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_refill() {
    state().pool().refill();
}

/// sysfs `stats` show: fills `buf` (`len` bytes) and returns the bytes written.
///
/// # Safety
///
/// `buf` is writable for `len` bytes and not otherwise accessed during the call (the
/// page sysfs hands to `show`); the sysfs files exist only while the module state is
/// published.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_stats_show(buf: *mut c_char, len: usize) -> usize {
    // SAFETY: `buf` is valid for writes of `len` bytes and ours alone during the call
    // (the function's contract); `u8` and `c_char` have the same layout.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    stats::show(state(), page)
}

/// sysfs `report` store: logs the stats to dmesg (rate-limited: 10 per 5 s).
///
/// # Safety
///
/// Called only by the sysfs `report` store, which exists only while the module state
/// is published.
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_report() {
    stats::report(state());
}

/// Shrinker count: the pages of the pre-zeroed cache that kernel reclaim may take.
///
/// # Safety
///
/// Called only by the glue's shrinker, which is registered only while the module state
/// is published (`drop` frees it, waiting for running calls, before unpublishing).
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_shrink_count() -> c_ulong {
    state().pool().shrink_count().try_into().unwrap_or(c_ulong::MAX)
}

/// Shrinker scan: frees cached pages, at least `nr`; returns how many.
///
/// # Safety
///
/// As [`gb_rs_shrink_count`].
#[no_mangle]
pub(crate) unsafe extern "C" fn gb_rs_shrink_scan(nr: c_ulong) -> c_ulong {
    state().pool().shrink(u64::try_from(nr).unwrap_or(u64::MAX)).try_into().unwrap_or(c_ulong::MAX)
}
