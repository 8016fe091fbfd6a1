//! The lock order: every lock of the shim in one table (`lock_order!` below), by rank.
//! A thread takes locks in increasing rank only, and never two of one rank at once; the
//! mutex type carries its rank (`Mutex<rank::Registry, _>`), and the fork handlers
//! (`lifecycle`) are built from the table's `at fork` column, in rank order.
//!
//! Checked when the shim is built with the `lock-order` feature (the fake-CUDA suite
//! builds it so; the shipped shim is built without it, and then `acquiring`/`released`
//! are empty): every acquisition, the tiering flock's included, panics if the thread
//! already holds a lock of the same or a higher rank. What a thread holds is one word in a
//! `const`-initialised thread-local without a destructor, so the check neither allocates
//! nor registers anything, before `main`, inside hooks or during thread exit. A forked
//! child starts with nothing held: each lock the prepare handler took is forgotten when
//! the child resets it (`lock::ForkLock::reset_in_child`).

/// What the pthread_atfork handlers do with a lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AtFork {
    /// Prepare takes it, the parent releases it, the child resets it: a child never
    /// inherits it mid-update.
    Held,
    /// Not taken, for the reason given: a child never needs it.
    Left(&'static str),
}

/// One row of the table. Its texts are read by the `lock-order` check's message only.
#[cfg_attr(not(feature = "lock-order"), allow(dead_code))]
pub struct LockRow {
    pub rank: Rank,
    /// Where the lock lives.
    pub name: &'static str,
    pub protects: &'static str,
    /// What its holder may do, the locks it may take beneath it included.
    pub while_held: &'static str,
    pub at_fork: AtFork,
}

/// A mutex's rank, as a type: `sys::lock::Mutex<R, T>` is ranked `R::RANK`.
pub trait Ranked {
    const RANK: Rank;
}

macro_rules! lock_order {
    ($($rank:ident = $number:literal: $name:literal,
       protects $protects:literal,
       while held $while_held:literal,
       at fork $at_fork:expr;)*) => {
        /// The ranks, lowest (taken first) first.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
        #[repr(u8)]
        pub enum Rank {
            $($rank = $number),*
        }

        /// One type per rank, for `Mutex<rank::X, T>`.
        pub mod rank {
            $(
                pub struct $rank;
                impl super::Ranked for $rank {
                    const RANK: super::Rank = super::Rank::$rank;
                }
            )*
        }

        /// The table, in rank order.
        pub const LOCK_ORDER: &[LockRow] = &[$(LockRow {
            rank: Rank::$rank,
            name: $name,
            protects: $protects,
            while_held: $while_held,
            at_fork: $at_fork,
        }),*];
    };
}

lock_order! {
    TierFlock = 0: "engine::tier_lock (an flock per GPU, shared with every process under the shim)",
        protects "the GPU's free VRAM, from a tick's measurement to the end of its moves, \
                  and while room made for an allocation moves memory and gives VRAM back (give-back on)",
        while held "CUDA calls (the measurement, prefetches, the give-back, synchronising the \
                    move stream); the tier thread, or an allocation making room (until it \
                    is in the room), takes and drops the locks below beneath it; waited \
                    for 2 s at most by a tick, 250 ms by room made",
        at fork AtFork::Left("the child closes its copy of the descriptor");
    TierMoves = 1: "engine::tier_thread::MOVING",
        protects "this process's moves of movable memory, from the free VRAM they were \
                  planned on to their end: a tick's, and room made for an allocation \
                  (`make_room`), which a tick measuring meanwhile would make again",
        while held "CUDA calls (measurements, prefetches, the give-back, synchronising \
                    the move streams) and the locks below",
        at fork AtFork::Left("a child forked after CUDA use steps aside and moves nothing");
    Scratch = 2: "gemm::staging::SCRATCH",
        protects "the per-context VRAM scratch buffers of GEMM staging",
        while held "the asynchronous enqueues of one staged product (copies, product, \
                    events) and its shape's verification, the budget's counters, once per \
                    context the SM copy kernel's loading; the registry is read before it \
                    is taken",
        at fork AtFork::Left("a child forked after CUDA use never stages");
    Registry = 3: "memory::registry::REGISTRY",
        protects "the live allocations by device pointer, double-free memory",
        while held "map operations only; no CUDA or backend call",
        at fork AtFork::Held;
    Vmm = 4: "memory::vmm::VMM",
        protects "the records of VMM handles placed on the host",
        while held "map operations only",
        at fork AtFork::Held;
    T2Cache = 5: "memory::t2::CACHE (memory::t2cache::T2Cache's lock)",
        protects "freed T2 buffers still registered with CUDA",
        while held "list operations only; buffers leave it before they are unregistered",
        at fork AtFork::Held;
    Pending = 6: "memory::release::PENDING",
        protects "frees waiting for their stream's event",
        while held "list operations only; events are queried after it is dropped",
        at fork AtFork::Held;
    Live = 7: "memory::movable::LIVE",
        protects "the list of movable allocations, for the tier thread",
        while held "list operations only",
        at fork AtFork::Held;
    MovableState = 8: "memory::movable_part::Part::state (one per part of a movable allocation)",
        protects "one part's residence and charge",
        while held "reading and setting its residence, the budget's counters; no CUDA call",
        at fork AtFork::Left("a child of a process with movable memory steps aside");
    WholeAlgorithms = 9: "gemm::lt_algo::WHOLE_ALGORITHMS",
        protects "each product shape's cuBLASLt algorithm",
        while held "map operations only; cuBLASLt is asked after it is dropped",
        at fork AtFork::Left("a child forked after CUDA use never stages");
}

#[cfg(feature = "lock-order")]
mod check {
    use std::cell::Cell;

    use super::{Rank, LOCK_ORDER};

    thread_local! {
        /// The ranks this thread holds, one bit each.
        static HELD: Cell<u32> = const { Cell::new(0) };
    }

    pub fn acquiring(rank: Rank) {
        let bit = 1u32 << rank as u32;
        let held = HELD.get();
        if held >= bit {
            let taken = &LOCK_ORDER[rank as usize];
            let highest = LOCK_ORDER.iter().rev().find(|row| held & (1 << row.rank as u32) != 0);
            panic!(
                "lock order: {} (rank {}: {}) taken while holding {} (rank {}), under which: {}",
                taken.name,
                rank as u8,
                taken.protects,
                highest.map_or("?", |row| row.name),
                highest.map_or(0, |row| row.rank as u8),
                highest.map_or("?", |row| row.while_held)
            );
        }
        HELD.set(held | bit);
    }

    pub fn released(rank: Rank) {
        HELD.set(HELD.get() & !(1u32 << rank as u32));
    }
}

/// Called before a lock of `rank` is taken: with the `lock-order` feature, panics if this
/// thread holds one of the same or a higher rank, else notes it held.
#[inline(always)]
pub fn acquiring(rank: Rank) {
    #[cfg(feature = "lock-order")]
    check::acquiring(rank);
    #[cfg(not(feature = "lock-order"))]
    let _ = rank;
}

/// Called when a lock of `rank` is given back (or forgotten in a forked child).
#[inline(always)]
pub fn released(rank: Rank) {
    #[cfg(feature = "lock-order")]
    check::released(rank);
    #[cfg(not(feature = "lock-order"))]
    let _ = rank;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_rank_order_and_fits_the_check() {
        for (index, row) in LOCK_ORDER.iter().enumerate() {
            assert_eq!(row.rank as usize, index, "{}", row.name);
        }
        assert!(LOCK_ORDER.len() <= 32, "one bit per rank in a u32");
    }
}
