//! One part of a movable allocation (`movable`): the unit that is in VRAM or in T2, and
//! charged as such. A small allocation is one part; a large one is cut into 2 MiB parts,
//! the granularity of managed memory's device pages, so that what kernels re-read of
//! one buffer (llama.cpp's weights, a PyTorch cache segment) lives in VRAM while the
//! rest of it stays in T2, at the same addresses.
//!
//! Lock: each part's `state` is a leaf lock, never held across a CUDA call; no two are
//! held at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::memory::budget::{T2Charge, T2Reservation, VramCharge, VramReservation};
use crate::rules::read_rate::ReadRate;
use crate::sys::lock::Mutex;
use crate::sys::lock_order::rank;
use crate::sys::stats::{self, STATS};

/// What a part's bytes are charged as.
pub(super) enum Residence {
    T2(T2Charge),
    Vram(VramCharge),
    /// The tier thread is moving it; the move's charges are the mover's.
    Moving,
}

struct State {
    residence: Residence,
    freed: bool,
    /// Its heat, tick by tick (the tier thread's ticks take what was read since).
    reads: ReadRate,
}

/// A part: `len` bytes at `offset` in its allocation.
///
/// # Invariants
/// After `release` no move starts (`freed`); `in_vram` is true exactly while the
/// residence is `Vram`, or `Moving` for a refresh (which holds the VRAM charge: it was
/// and stays in VRAM).
pub struct Part {
    offset: u64,
    len: u64,
    /// Bytes matrix products read of it since the last tick.
    read: AtomicU64,
    in_vram: AtomicBool,
    /// In VRAM while free VRAM fell so low that the driver evicts managed pages: some of
    /// it may be on the host (the driver does not say which) until moved again.
    maybe_evicted: AtomicBool,
    /// In T2, moved there out of VRAM: the driver keeps the VRAM chunks its pages left
    /// and gives them back to these pages when they move in again, so that such a move
    /// takes no free VRAM (NVIDIA's nvidia-uvm: a block whose pages all left the GPU only
    /// marks its chunk unused, `block_clear_resident_processor` in `uvm_va_block.c`). Any
    /// other move into VRAM takes fresh VRAM while the driver has any; only an allocation
    /// that finds none takes unused chunks (`pick_root_chunk_to_evict` in
    /// `uvm_pmm_gpu.c`), so this holds until free VRAM falls that low (`forget_kept_chunks`).
    /// Chunks taken by an allocation that is freed before a tick sees free VRAM that low
    /// come back as free VRAM, which the move in then takes: no more than before.
    chunks_kept: AtomicBool,
    state: Mutex<rank::MovableState, State>,
}

/// The charge a move needs where it goes.
pub enum Reserved {
    Vram(VramReservation),
    T2(T2Reservation),
}

/// A move the tier thread has started: the charge the part will hold where it goes,
/// reserved, and the one it held where it was, kept until the move ends.
pub enum Started {
    Promotion {
        vram: VramReservation,
        t2: T2Charge,
    },
    Demotion {
        t2: T2Reservation,
        vram: VramCharge,
    },
    /// To VRAM again, where it is charged (what the driver evicted comes back).
    Refresh {
        vram: VramCharge,
    },
}

impl Part {
    /// A part charged as `residence` (its `len` bytes).
    pub(super) fn new(offset: u64, len: u64, residence: Residence) -> Part {
        let part = Part {
            offset,
            len,
            read: AtomicU64::new(0),
            in_vram: AtomicBool::new(false),
            maybe_evicted: AtomicBool::new(false),
            chunks_kept: AtomicBool::new(false),
            state: Mutex::new(State { residence, freed: false, reads: ReadRate::default() }),
        };
        let in_vram = matches!(part.state.lock().residence, Residence::Vram(_));
        part.set_in_vram(in_vram);
        part
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn in_vram(&self) -> bool {
        self.in_vram.load(Ordering::Acquire)
    }

    pub fn maybe_evicted(&self) -> bool {
        self.maybe_evicted.load(Ordering::Relaxed)
    }

    pub fn chunks_kept(&self) -> bool {
        self.chunks_kept.load(Ordering::Relaxed)
    }

    /// The driver may have evicted some of it: free VRAM fell that low while it was in
    /// VRAM.
    pub(super) fn mark_maybe_evicted(&self) {
        if self.in_vram() {
            self.maybe_evicted.store(true, Ordering::Relaxed);
        }
    }

    /// The chunks it left may be another's: free VRAM fell so low that allocations took
    /// the chunks the driver kept.
    pub(super) fn forget_kept_chunks(&self) {
        self.set_chunks_kept(false);
    }

    /// A matrix product read `bytes` of it.
    pub(super) fn note_read(&self, bytes: u64) {
        self.read.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Its reads (`ReadRate`: heat, ticks idle) with this tick's counted: what products
    /// read since the last tick and `named` (what launches, copies and memsets named
    /// since). With `take` (the tier thread's tick) the tick ends here; without, all stays
    /// in place.
    pub(super) fn reads_with(&self, named: u64, take: bool) -> ReadRate {
        let products = if take { self.read.swap(0, Ordering::Relaxed) } else { self.read.load(Ordering::Relaxed) };
        let mut state = self.state.lock();
        let reads = state.reads.after_tick(products.saturating_add(named));
        if take {
            state.reads = reads;
        }
        reads
    }

    /// Starts a move to VRAM (`promote`) or to T2 if the part is live and where the move
    /// starts from, and `reserve` gives the charge it needs there (VRAM for a promotion,
    /// T2 for a demotion); it is then `Moving` until `finish_move`.
    pub fn start_move(&self, promote: bool, reserve: impl FnOnce(u64) -> Option<Reserved>) -> Option<Started> {
        let mut state = self.state.lock();
        let at_start = matches!((&state.residence, promote), (Residence::T2(_), true) | (Residence::Vram(_), false));
        if state.freed || !at_start {
            return None;
        }
        let reserved = reserve(self.len)?;
        let started = match (std::mem::replace(&mut state.residence, Residence::Moving), reserved) {
            (Residence::T2(t2), Reserved::Vram(vram)) => Started::Promotion { vram, t2 },
            (Residence::Vram(vram), Reserved::T2(t2)) => Started::Demotion { t2, vram },
            (old, _) => {
                // A reservation for the other direction: nothing starts.
                state.residence = old;
                return None;
            }
        };
        self.set_in_vram(false);
        Some(started)
    }

    /// Starts a refresh if the part is live and in VRAM: `Moving` until `finish_move`,
    /// still charged as VRAM and counted in it.
    pub fn start_refresh(&self) -> Option<Started> {
        let mut state = self.state.lock();
        if state.freed {
            return None;
        }
        match std::mem::replace(&mut state.residence, Residence::Moving) {
            Residence::Vram(vram) => Some(Started::Refresh { vram }),
            elsewhere => {
                state.residence = elsewhere;
                None
            }
        }
    }

    /// Ends a started move: `arrived` says whether the driver moved it. It is then
    /// charged where it is, and the other charge goes back.
    pub fn finish_move(&self, started: Started, arrived: bool) {
        let (residence, _given_back) = match (started, arrived) {
            (Started::Promotion { vram, t2 }, true) => (Residence::Vram(vram.commit_moved()), Some(Residence::T2(t2))),
            (Started::Demotion { t2, vram }, true) => (Residence::T2(t2.commit_moved()), Some(Residence::Vram(vram))),
            (Started::Promotion { t2, .. }, false) => (Residence::T2(t2), None),
            (Started::Demotion { vram, .. }, false) => (Residence::Vram(vram), None),
            (Started::Refresh { vram }, _) => (Residence::Vram(vram), None),
        };
        let in_vram = matches!(residence, Residence::Vram(_));
        if arrived {
            // Wherever it arrived, all of it is where the accounts say. Out of VRAM, the
            // driver keeps the chunks it left, unless it had evicted some of it for
            // someone's allocation, which took them; in VRAM, it holds them again.
            let evicted = self.maybe_evicted.swap(false, Ordering::Relaxed);
            self.set_chunks_kept(!in_vram && !evicted);
        }
        let mut state = self.state.lock();
        state.residence = residence;
        self.set_in_vram(in_vram);
    }

    /// Keeps `in_vram` and the bytes of movable memory in VRAM (`STATS.tier_vram`)
    /// together.
    fn set_in_vram(&self, in_vram: bool) {
        if self.in_vram.swap(in_vram, Ordering::AcqRel) == in_vram {
            return;
        }
        if in_vram {
            STATS.tier_vram.fetch_add(self.len, Ordering::Relaxed);
        } else {
            stats::sub_in_use(&STATS.tier_vram, self.len);
        }
    }

    /// Keeps `chunks_kept` and the VRAM the driver keeps for moved-out parts
    /// (`STATS.kept_vram`) together.
    fn set_chunks_kept(&self, kept: bool) {
        if self.chunks_kept.swap(kept, Ordering::Relaxed) == kept {
            return;
        }
        if kept {
            stats::add_in_use(&STATS.kept_vram, &STATS.kept_vram_peak, self.len);
        } else {
            stats::sub_in_use(&STATS.kept_vram, self.len);
        }
    }

    /// Ends the part before its memory is freed: waits for a move in progress to end,
    /// then no move starts again. Returns its charge, to be dropped once the memory is
    /// gone (and the chunks the driver kept for it with it).
    pub(super) fn release(&self) -> Residence {
        loop {
            let mut state = self.state.lock();
            if !matches!(state.residence, Residence::Moving) {
                state.freed = true;
                self.set_in_vram(false);
                self.set_chunks_kept(false);
                return std::mem::replace(&mut state.residence, Residence::Moving);
            }
            drop(state);
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}
