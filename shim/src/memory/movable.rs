//! Movable T2 (live tiering; the policy is `tiering`, the mover `tier_thread`): T2
//! memory that moves to VRAM and back at the same device address while kernels use it.
//! It is CUDA managed memory, preferred on the host and mapped by the device, so the GPU
//! reads it over PCIe as it reads pinned T2 (measured at the same rate on the H200) until
//! it is promoted: a prefetch to the device on a low-priority stream, which the driver
//! carries out in batches on the copy engines while it resolves concurrent access by
//! running kernels; demotion is a prefetch to the host. The preferred location stays the
//! host throughout (why: `tier_thread`). Module pages
//! cannot back it (CUDA refuses foreign DMA-BUFs): while in T2 its bytes are
//! driver-owned host memory, charged to the T2 cap all the same.
//!
//! Movable memory also starts in VRAM (`managed_in_vram`, `record_in_vram`) where the device is contested
//! (`allocate`): the weights a program loads first can then make room for the working
//! set it computes with, and come back when that cools (`tiering`'s swaps). It is what
//! the program holds in VRAM, charged as such; managed memory is not exportable by IPC
//! (cuIpcGetMemHandle refuses it), which is why VRAM is made movable only where the
//! device is contested and GREENBOOST_TIERING is not off.
//!
//! Locks: `LIVE` is held only to add, remove or copy entries; each allocation's `state`
//! is a leaf lock, never held across a CUDA call.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::cuda::ffi::*;
use crate::cuda::{self, Where};
use crate::memory::address_index::RangeUse;
use crate::memory::budget::{self, T2Charge, T2Reservation, VramCharge, VramReservation};
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// What a movable allocation's bytes are charged as.
enum Residence {
    T2(T2Charge),
    Vram(VramCharge),
    /// The tier thread is moving it; the move's charges are the mover's.
    Moving,
}

struct State {
    residence: Residence,
    freed: bool,
}

/// A live movable allocation.
///
/// # Invariants
/// `[base, base + len)` is managed memory of `context` until `release` frees it, after
/// which no move starts (`freed`); a move in progress (`Moving`) ends before `release`
/// frees the memory. `in_vram` is true exactly while the residence is `Vram`, or
/// `Moving` for a refresh (which holds the VRAM charge: it was and stays in VRAM).
pub struct Movable {
    base: CuDevicePtr,
    len: u64,
    device: CuDevice,
    context: Context,
    sequence: u64,
    after_computing: bool,
    /// Bytes matrix products and kernel launches read from it, decayed by the tier
    /// thread.
    heat: AtomicU64,
    /// What launches did to it (the address index's entry for it).
    uses: Arc<RangeUse>,
    /// `uses`' launch count when the heat was last taken.
    launches_seen: AtomicU64,
    in_vram: AtomicBool,
    /// In VRAM while free VRAM fell so low that the driver evicts managed pages: part
    /// of it may be on the host (the driver does not say which) until moved again.
    maybe_evicted: AtomicBool,
    state: Mutex<rank::MovableState, State>,
}

/// Every live movable allocation, for the tier thread.
static LIVE: Mutex<rank::Live, Vec<Arc<Movable>>> = const_mutex(Vec::new());
static LIVE_COUNT: AtomicUsize = AtomicUsize::new(0);
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Why no movable memory could be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovableFailure {
    /// The T2 cap, or the host refused the memory.
    Exhausted,
    /// Managed memory is not usable here (no concurrent managed access, a driver error).
    Unsupported,
}

/// `len` bytes (whole 2 MiB chunks) of movable T2 for `device` in `context`, charged
/// with `reservation`.
pub fn create(
    len: u64,
    device: CuDevice,
    context: Context,
    reservation: T2Reservation,
) -> Result<Arc<Movable>, MovableFailure> {
    let base = managed(len, device)?;
    let movable = record(base, len, device, context, Residence::T2(reservation.commit()));
    debug!("T2 {:#x}: {} movable (managed memory, on the host)", base, Mib(len));
    Ok(movable)
}

/// `len` bytes (whole 2 MiB chunks) of managed memory for `device`, in VRAM before the
/// program sees it: migrated (empty) to the device on a stream of its own and waited
/// for, so that every stream of the program finds it there. The calls run in relaxed
/// capture mode, so that a graph another thread captures is not disturbed. Recorded with
/// `record_in_vram` once it is charged.
pub fn managed_in_vram(len: u64, device: CuDevice) -> Result<CuDevicePtr, MovableFailure> {
    let placed = cuda::in_relaxed_capture_mode(|| {
        let base = managed(len, device)?;
        if let Err(status) = place_on_device(base, len, device) {
            info!("placing managed memory in VRAM failed (CUDA error {}): plain VRAM instead", status.0);
            cuda::mem_free(base);
            return Err(MovableFailure::Unsupported);
        }
        Ok(base)
    });
    placed.unwrap_or(Err(MovableFailure::Unsupported))
}

/// Movable memory in VRAM (`managed_in_vram` made it at `base`) for `device` in
/// `context`, charged with `charge`: VRAM that live tiering may send to T2 later, at the
/// same address, when something hotter needs the room.
pub fn record_in_vram(
    base: CuDevicePtr,
    len: u64,
    device: CuDevice,
    context: Context,
    charge: VramCharge,
) -> Arc<Movable> {
    let movable = record(base, len, device, context, Residence::Vram(charge));
    movable.set_in_vram(true);
    debug!("T1 {:#x}: {} movable (managed memory, in VRAM)", base, Mib(len));
    movable
}

/// Managed memory of `len` bytes preferred on the host and mapped by `device` (why the
/// host stays preferred: `tier_thread`).
fn managed(len: u64, device: CuDevice) -> Result<CuDevicePtr, MovableFailure> {
    if !cuda::concurrent_managed_access(device) {
        return Err(MovableFailure::Unsupported);
    }
    let base = cuda::mem_alloc_managed(len).map_err(|error| {
        if error.0 == CuResult::OUT_OF_MEMORY.0 {
            MovableFailure::Exhausted
        } else {
            info!("cuMemAllocManaged of {} failed (CUDA error {}): no movable memory", Mib(len), error.0);
            MovableFailure::Unsupported
        }
    })?;
    for (advice, to) in
        [(CU_MEM_ADVISE_SET_PREFERRED_LOCATION, Where::Host), (CU_MEM_ADVISE_SET_ACCESSED_BY, Where::Device(device))]
    {
        let status = cuda::mem_advise(base, len, advice, to);
        if status != CuResult::SUCCESS {
            info!("cuMemAdvise({}) on managed memory failed (CUDA error {}): no movable memory", advice, status.0);
            cuda::mem_free(base);
            return Err(MovableFailure::Unsupported);
        }
    }
    Ok(base)
}

/// Migrates the managed range to `device` on a stream made for it, and waits.
fn place_on_device(base: CuDevicePtr, len: u64, device: CuDevice) -> Result<(), CuResult> {
    let stream = cuda::stream_create_non_blocking().map_err(|error| CuResult(error.0))?;
    let mut status = cuda::mem_prefetch_async(base, len, Where::Device(device), stream);
    if status == CuResult::SUCCESS {
        status = cuda::stream_synchronize(stream);
    }
    cuda::stream_destroy(stream);
    status.ok().map_err(|error| CuResult(error.0))
}

/// The record of a new movable allocation, added to the live list.
fn record(base: CuDevicePtr, len: u64, device: CuDevice, context: Context, residence: Residence) -> Arc<Movable> {
    let movable = Arc::new(Movable {
        base,
        len,
        device,
        context,
        sequence: SEQUENCE.fetch_add(1, Ordering::Relaxed),
        after_computing: budget::computing(),
        heat: AtomicU64::new(0),
        uses: Arc::default(),
        launches_seen: AtomicU64::new(0),
        in_vram: AtomicBool::new(false),
        maybe_evicted: AtomicBool::new(false),
        state: Mutex::new(State { residence, freed: false }),
    });
    stats::bump(&STATS.movable_allocs);
    LIVE.lock().push(Arc::clone(&movable));
    LIVE_COUNT.fetch_add(1, Ordering::Release);
    movable
}

/// Whether any movable allocation lives (cheap: the hot paths ask).
pub fn any() -> bool {
    LIVE_COUNT.load(Ordering::Acquire) != 0
}

/// The live movable allocations, copied out of the list.
pub fn live() -> Vec<Arc<Movable>> {
    LIVE.lock().clone()
}

/// The charge a move needs where it goes.
pub enum Reserved {
    Vram(VramReservation),
    T2(T2Reservation),
}

/// A move the tier thread has started: the charge the allocation will hold where it
/// goes, reserved, and the one it held where it was, kept until the move ends.
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

impl Movable {
    pub fn base(&self) -> CuDevicePtr {
        self.base
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn device(&self) -> CuDevice {
        self.device
    }

    pub fn context(&self) -> Context {
        self.context
    }

    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    pub fn after_computing(&self) -> bool {
        self.after_computing
    }

    pub fn in_vram(&self) -> bool {
        self.in_vram.load(Ordering::Acquire)
    }

    /// Bytes of it in T2 now (all of it, unless it is in VRAM).
    pub(super) fn t2_len(&self) -> u64 {
        if self.in_vram() {
            0
        } else {
            self.len
        }
    }

    /// A matrix product read `bytes` of it.
    pub fn note_read(&self, bytes: u64) {
        self.heat.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The driver may have evicted part of it: free VRAM fell that low while it was in
    /// VRAM.
    pub fn mark_maybe_evicted(&self) {
        if self.in_vram() {
            self.maybe_evicted.store(true, Ordering::Relaxed);
        }
    }

    pub fn maybe_evicted(&self) -> bool {
        self.maybe_evicted.load(Ordering::Relaxed)
    }

    /// The heat `take_heat` would take now, left in place.
    pub fn heat_now(&self) -> u64 {
        self.heat_since(self.uses.launches(), self.launches_seen.load(Ordering::Relaxed))
    }

    /// The heat with the launches named between `seen` and `launches` counted in.
    fn heat_since(&self, launches: u64, seen: u64) -> u64 {
        let named = launches.saturating_sub(seen);
        self.heat.load(Ordering::Relaxed).saturating_add(named.saturating_mul(self.len))
    }

    /// Its entry in the address index, counted by the launches, copies and memsets
    /// that name it.
    pub fn uses(&self) -> Arc<RangeUse> {
        Arc::clone(&self.uses)
    }

    /// The heat: what products read since the last tick, and for each launch, copy or
    /// memset that named it since, its length (a launch's parameters say where it reads,
    /// not how much: a kernel reading all of it is the case that costs most in T2);
    /// halved for the next tick.
    pub fn take_heat(&self) -> u64 {
        let launches = self.uses.launches();
        let heat = self.heat_since(launches, self.launches_seen.swap(launches, Ordering::Relaxed));
        self.heat.store(heat / 2, Ordering::Relaxed);
        heat
    }

    /// Starts a move to VRAM (`promote`) or to T2 if the allocation is live and where
    /// the move starts from, and `reserve` gives the charge it needs there (VRAM for a
    /// promotion, T2 for a demotion); it is then `Moving` until `finish_move`.
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

    /// Starts a refresh if the allocation is live and in VRAM: `Moving` until
    /// `finish_move`, still charged as VRAM and counted in it.
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
        if arrived {
            // Wherever it arrived, all of it is where the accounts say.
            self.maybe_evicted.store(false, Ordering::Relaxed);
        }
        let in_vram = matches!(residence, Residence::Vram(_));
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

    /// Frees it (the device is past every use of it and its context is current): waits
    /// for a move in progress to end, then gives the memory and its charge back.
    pub fn release(&self) {
        let residence = loop {
            let mut state = self.state.lock();
            if !matches!(state.residence, Residence::Moving) {
                state.freed = true;
                self.set_in_vram(false);
                break std::mem::replace(&mut state.residence, Residence::Moving);
            }
            drop(state);
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        let status = cuda::mem_free(self.base);
        if status != CuResult::SUCCESS {
            warn!("cuMemFree of movable T2 {:#x} failed (CUDA error {})", self.base, status.0);
        }
        drop(residence);
        let mut live = LIVE.lock();
        live.retain(|entry| !std::ptr::eq(Arc::as_ptr(entry), self));
        LIVE_COUNT.store(live.len(), Ordering::Release);
        debug!("T2 {:#x}: {} movable, freed", self.base, Mib(self.len));
    }
}

/// The lock the fork handlers hold (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    &LIVE
}
