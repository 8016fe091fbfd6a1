// SPDX-License-Identifier: GPL-2.0
//! `GB_IOC_MOVE`: a buffer moves between T2 (pinned 2 MiB pages) and T3 (its shmem
//! file's swappable pages), keeping its contents, its fd, its id and its mappings.
//!
//! A move takes the buffer's backing lock (killably: a second move waiting for the
//! first gives up with EINTR), so that no fault, attachment or kernel mapping sees it
//! halfway (a fault waits for it without the mmap lock, see `backing.rs`); zaps every user mapping (they fault the new pages in
//! afterwards); copies a chunk (2 MiB, or the chunk's size when fragmented) at a time;
//! and only then switches the backing. Any failure before the switch leaves the buffer
//! where it was, with its contents. Refused with EBUSY while an importer is attached,
//! a kernel mapping exists, or a page is pinned by someone else through a mapping
//! (cuMemHostRegister, io_uring, a pipe for T2 pages): the pinner would keep using the
//! old pages.
//!
//! New T2 pages are admitted as an ALLOC's are (`admission.rs`), before the lock is
//! taken; T3 room is admitted against swap (`tier3.rs`). Locks: the backing lock, and
//! outside it the cache, registry and T3 list locks, one at a time (see "Lock order"
//! in kmod/README.md).

use core::mem::size_of;
use core::sync::atomic::Ordering;
use kernel::ffi::{c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

use crate::abi::{self, GbMove};
use crate::admission;
use crate::backing::Tier;
use crate::buffer::Buffer;
use crate::chunks::Chunks;
use crate::glue_ffi::{self as ffi, Chunk};
use crate::state::State;
use crate::tier3::Tier3;
use crate::util::Size;

// SAFETY: `GbMove` is `#[repr(C)]` with an i32, three u32 and two u64 fields: no
// padding bytes (size asserted in the ABI file), and every bit pattern is valid.
unsafe impl FromBytes for GbMove {}
// SAFETY: as above, all of its bytes are initialised.
unsafe impl AsBytes for GbMove {}

/// A dma-buf of ours looked up by fd, with a reference held until dropped.
///
/// # Invariants
///
/// `dmabuf` is a counted reference to one of our dma-bufs and `buf` its `priv`.
struct Found {
    dmabuf: *mut ffi::DmaBuf,
    buf: *mut c_void,
}

impl Found {
    /// EBADF when `fd` is not open, EINVAL when it is not one of our buffers.
    fn lookup(fd: i32) -> Result<Self> {
        let (mut buf, mut dmabuf) = (core::ptr::null_mut(), core::ptr::null_mut());
        // SAFETY: the two outputs are locals the glue writes only on success, where it
        // hands us a counted reference.
        let ret = unsafe { ffi::gb_dmabuf_lookup(fd, &mut buf, &mut dmabuf) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(Found { dmabuf, buf })
    }

    fn buffer(&self) -> &Buffer {
        // SAFETY: `buf` is the `priv` of a dma-buf we hold a reference to (type
        // invariant), so the `Buffer` lives at least as long as `self`.
        unsafe { &*self.buf.cast::<Buffer>() }
    }
}

impl Drop for Found {
    fn drop(&mut self) {
        // SAFETY: our counted reference (type invariant), put once.
        unsafe { ffi::gb_dmabuf_put(self.dmabuf) };
    }
}

/// The ioctl.
pub(crate) fn move_buffer(state: &State, arg: usize) -> Result {
    let (mut reader, mut writer) = UserSlice::new(arg, size_of::<GbMove>()).reader_writer();
    let mut req: GbMove = reader.read()?;
    if req.flags != 0 || req.pad0 != 0 {
        return Err(EINVAL);
    }
    let to_t3 = match req.tier {
        abi::GB_TIER_T2 => false,
        abi::GB_TIER_T3 => true,
        _ => return Err(EINVAL),
    };
    let found = Found::lookup(req.fd)?;
    let buf = found.buffer();
    // SAFETY: `gb_now_ns` only reads the monotonic clock.
    let start = unsafe { ffi::gb_now_ns() };
    let moved = if to_t3 { demote(state, buf) } else { promote(state, buf) };
    let c = &state.shared.counters;
    let moved = match moved {
        Ok(moved) => moved,
        Err(e) => {
            if e == EBUSY || e == ENOMEM {
                c.move_refusals.fetch_add(1, Ordering::Relaxed);
                log_refusal(state, buf, to_t3, e);
            }
            return Err(e);
        }
    };
    if moved > 0 {
        // SAFETY: `gb_now_ns` only reads the monotonic clock; no precondition.
        let ns = unsafe { ffi::gb_now_ns() }.saturating_sub(start);
        let count = if to_t3 { &c.moves_to_t3 } else { &c.moves_to_t2 };
        count.fetch_add(1, Ordering::Relaxed);
        c.moved_bytes.fetch_add(moved, Ordering::Relaxed);
        c.move_ns.fetch_add(ns, Ordering::Relaxed);
        if state.move_log_limit.allow() {
            let (from, to) = if to_t3 { ("T2", "T3") } else { ("T3", "T2") };
            pr_info!(
                "moved buffer {} ({}) {} -> {} in {} us ({} MB/s)\n",
                buf.id,
                Size(moved),
                from,
                to,
                ns / 1000,
                moved.saturating_mul(1000) / ns.max(1),
            );
        }
    }
    req.buffer_id = buf.id;
    req.moved = moved;
    writer.write(&req)
}

fn log_refusal(state: &State, buf: &Buffer, to_t3: bool, e: Error) {
    if state.refusal_log_limit.allow() {
        let why = if e == EBUSY {
            "attached, kernel-mapped or pinned through a mapping"
        } else if to_t3 {
            "no room in swap for T3"
        } else {
            "T2 cap, per-user cap, memlock limit or RAM reserve"
        };
        pr_info!(
            "move of buffer {} ({}) to {} refused ({}): {}\n",
            buf.id,
            Size(buf.size),
            if to_t3 { "T3" } else { "T2" },
            if e == EBUSY { "EBUSY" } else { "ENOMEM" },
            why,
        );
    }
}

/// Runs `copy` on every chunk with the page index it starts at, one chunk (one batch)
/// at a time; EINTR before the next chunk when the caller was killed.
fn each_chunk(chunks: &Chunks, mut copy: impl FnMut(c_ulong, &Chunk) -> Result) -> Result {
    let mut index: c_ulong = 0;
    for chunk in chunks.as_slice() {
        // SAFETY: `gb_fatal_signal_pending` only reads the current task's signals.
        if unsafe { ffi::gb_fatal_signal_pending() } {
            return Err(EINTR);
        }
        copy(index, chunk)?;
        index += 1 << chunk.order;
    }
    Ok(())
}

/// T2 -> T3; returns the bytes copied (0: it was in T3 already).
fn demote(state: &State, buf: &Buffer) -> Result<u64> {
    let (owner, user) = buf.charged_to()?;
    state.tier3.admit(&state.shared, owner, user, buf.size)?;
    let mut backing = match buf.backing_killable() {
        Ok(backing) => backing,
        Err(e) => {
            Tier3::unadmit(&state.shared, owner, user, buf.size);
            return Err(e);
        }
    };
    let copied = (|| -> Result<bool> {
        let Tier::T2 { chunks, .. } = &backing.tier else { return Ok(false) };
        if backing.in_use() {
            return Err(EBUSY);
        }
        buf.shmem.unmap_users();
        // Mappings hold no reference now; anyone else who does keeps using the pages.
        if !chunks.exclusive() {
            return Err(EBUSY);
        }
        each_chunk(chunks, |index, chunk| buf.shmem.store(index, chunk))?;
        Ok(true)
    })();
    match copied {
        Ok(true) => {
            let old = core::mem::replace(&mut backing.tier, Tier::T3);
            drop(backing);
            let c = &state.shared.counters;
            c.t3_buffers.fetch_add(1, Ordering::Relaxed);
            owner.t3_buffers.fetch_add(1, Ordering::Relaxed);
            if let Tier::T2 { chunks, memlock } = old {
                // Written by userspace: to the dirty list, zeroed before reuse.
                admission::give_back_t2(state, owner, user, buf.size, chunks.as_slice(), true);
                drop(memlock);
            }
            Ok(buf.size)
        }
        Ok(false) => {
            drop(backing);
            Tier3::unadmit(&state.shared, owner, user, buf.size);
            Ok(0)
        }
        Err(e) => {
            // What was copied goes; the buffer stays in T2 with its contents.
            buf.shmem.truncate();
            drop(backing);
            Tier3::unadmit(&state.shared, owner, user, buf.size);
            Err(e)
        }
    }
}

/// T3 -> T2; returns the bytes copied (0: it was in T2 already).
fn promote(state: &State, buf: &Buffer) -> Result<u64> {
    let (owner, user) = buf.charged_to()?;
    if matches!(buf.backing_killable()?.tier, Tier::T2 { .. }) {
        return Ok(0);
    }
    let (list, memlock) = admission::take_t2(state, owner, user, buf.size, buf.placement)?;
    let chunks = Chunks::new(list);
    let mut backing = match buf.backing_killable() {
        Ok(backing) => backing,
        Err(e) => {
            admission::give_back_t2(state, owner, user, buf.size, chunks.as_slice(), false);
            return Err(e);
        }
    };
    let copied = (|| -> Result<bool> {
        if matches!(backing.tier, Tier::T2 { .. }) {
            return Ok(false);
        }
        if backing.in_use() {
            return Err(EBUSY);
        }
        buf.shmem.unmap_users();
        each_chunk(&chunks, |index, chunk| buf.shmem.load(index, chunk))?;
        Ok(true)
    })();
    match copied {
        Ok(true) => {
            backing.tier = Tier::T2 { chunks, memlock };
            // Nothing maps the file's pages now; they and their swap slots go.
            buf.shmem.truncate();
            drop(backing);
            let c = &state.shared.counters;
            c.t3_buffers.fetch_sub(1, Ordering::Relaxed);
            owner.t3_buffers.fetch_sub(1, Ordering::Relaxed);
            Tier3::unadmit(&state.shared, owner, user, buf.size);
            Ok(buf.size)
        }
        other => {
            drop(backing);
            // A refused copy may have written some of them.
            admission::give_back_t2(state, owner, user, buf.size, chunks.as_slice(), other.is_err());
            drop(memlock);
            other.map(|_| 0)
        }
    }
}
