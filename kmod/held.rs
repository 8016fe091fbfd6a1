// SPDX-License-Identifier: GPL-2.0
//! Chunks of dead buffers that something else still references: a page reference taken
//! through a mapping that outlived the buffer's fds and mappings (a pipe after
//! `vmsplice`, io_uring fixed buffers, RDMA or CUDA registrations).
//!
//! As the in-tree exporters do, the module leaves such a chunk to the other holder
//! rather than reusing it; unlike a plain `put_page`, it keeps the chunk charged while
//! it lives: its bytes stay in `t2` (the pool cap), in the owner's `t2` and in its
//! user's `t2_used` (that user's cap only), the owner's entry stays listed, and
//! `held_bytes` shows the total. [`Held::scan`] looks at every held chunk again (on every watchdog tick and at
//! the start of every ALLOC) and frees and uncharges those whose count has dropped back
//! to our own reference.
//!
//! Lock: the held lock ([`Held`]) only, never together with another of ours (see
//! "Lock order" in kmod/README.md).

use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};

use crate::glue_ffi::{self as ffi, Chunk};
use crate::memlock::Memlock;
use crate::pool::{chunk_exclusive, free_chunk, order_bytes};
use crate::procs::{Holder, ProcEntry, Registry};
use crate::shared::Shared;
use crate::users::{self, UserShare, Users};
use crate::util;

/// The still-referenced chunks of one dead buffer.
///
/// # Invariants
///
/// `chunks` are ours (see [`Chunk`]); their bytes are committed in `Counters::t2` and
/// `owner.t2` and counted in `Counters::held_bytes`, `user.t2_used` and `memlock`;
/// `owner` holds its entry as a [`Holder::Buffer`] and `user` one hold of its share.
pub(crate) struct HeldBuffer {
    chunks: KVVec<Chunk>,
    owner: Arc<ProcEntry>,
    user: Arc<UserShare>,
    memlock: Memlock,
}

impl HeldBuffer {
    /// Frees and uncharges the chunks nobody else references any more (`all`: every
    /// chunk, dropping our reference to the others, at unload).
    fn release(&mut self, shared: &Shared, all: bool) {
        let mut freed = 0;
        let mut i = 0;
        while let Some(&chunk) = self.chunks.as_slice().get(i) {
            // Its buffer is dead, so no mapping or attachment of ours refers to it.
            if all || chunk_exclusive(&chunk) {
                let _ = util::vec_swap_remove(&mut self.chunks, i);
                free_chunk(chunk);
                freed += order_bytes(chunk.order);
            } else {
                i += 1;
            }
        }
        let c = &shared.counters;
        c.t2.release(freed);
        c.held_bytes.fetch_sub(freed, Ordering::Relaxed);
        self.owner.t2.release(freed);
        users::uncharge(&self.user.t2_used, freed);
        self.memlock.uncharge(freed);
    }
}

/// What [`Held::add`] could not keep, given back to the caller.
pub(crate) type Rejected = (KVVec<Chunk>, Arc<ProcEntry>, Arc<UserShare>, Memlock);

/// Every [`HeldBuffer`], behind the held lock.
#[pin_data]
pub(crate) struct Held {
    #[pin]
    list: Mutex<KVec<HeldBuffer>>,
}

impl Held {
    /// Nothing held.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Held {
            list <- new_mutex!(KVec::new(), "greenboost::held"),
        })
    }

    /// Keeps `chunks` (still committed in `Counters::t2` and `owner.t2`, counted in
    /// `user.t2_used` and `memlock`) charged until they are released, with the holds on
    /// `owner`'s entry and `user`'s share. Gives them back when there is no room to
    /// remember them.
    pub(crate) fn add(
        &self,
        shared: &Shared,
        chunks: KVVec<Chunk>,
        owner: Arc<ProcEntry>,
        user: Arc<UserShare>,
        memlock: Memlock,
    ) -> core::result::Result<(), Rejected> {
        let mut list = self.list.lock();
        if list.reserve(1, GFP_KERNEL).is_err() {
            return Err((chunks, owner, user, memlock));
        }
        let bytes = chunks.iter().fold(0, |sum, c| sum + order_bytes(c.order));
        let c = &shared.counters;
        c.held_bytes.fetch_add(bytes, Ordering::Relaxed);
        c.pinned_on_release.fetch_add(chunks.len() as u64, Ordering::Relaxed);
        // `reserve` made room above, so this push neither allocates nor fails.
        let _ = list.push(HeldBuffer { chunks, owner, user, memlock }, GFP_KERNEL);
        Ok(())
    }

    /// Looks at every held chunk again: frees and uncharges those referenced by us
    /// alone; a dead buffer's entry goes once all its chunks have.
    pub(crate) fn scan(&self, shared: &Shared, procs: &Registry, users: &Users) {
        self.sweep(shared, procs, users, false);
    }

    /// Unload: drops our reference to every held chunk (the other holder frees it)
    /// and every charge.
    pub(crate) fn drain(&self, shared: &Shared, procs: &Registry, users: &Users) {
        self.sweep(shared, procs, users, true);
    }

    fn sweep(&self, shared: &Shared, procs: &Registry, users: &Users, all: bool) {
        if shared.counters.held_bytes.load(Ordering::Relaxed) == 0 {
            return;
        }
        // Finished entries are released one at a time, after the held lock is dropped
        // (the registry lock is never taken inside it).
        loop {
            let finished = {
                let mut list = self.list.lock();
                let mut found = None;
                for (i, held) in list.as_mut_slice().iter_mut().enumerate() {
                    held.release(shared, all);
                    if held.chunks.is_empty() && found.is_none() {
                        found = Some(i);
                    }
                    // SAFETY: `gb_cond_resched` may sleep; only a mutex is held here.
                    unsafe { ffi::gb_cond_resched() };
                }
                found.and_then(|i| util::vec_swap_remove(&mut list, i))
            };
            match finished {
                Some(held) => {
                    procs.release(held.owner, Holder::Buffer);
                    users.release(held.user);
                }
                None => break,
            }
        }
    }
}
