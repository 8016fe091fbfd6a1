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
//! Movable memory also starts in VRAM (`managed_in_vram`, `record_in_vram`) where
//! `engine::movability` says (a contested device, a budget that binds): the weights a
//! program loads first can then make room for the working set it computes with, and come
//! back when that cools (`tiering`'s swaps). It is what the program holds in VRAM,
//! charged as such; managed memory is not exportable by IPC (cuIpcGetMemHandle refuses
//! it), which is why not all VRAM is made movable.
//!
//! An allocation of at least `PARTITION_MIN` is cut into 2 MiB parts (`movable_part`)
//! that move on their own, each weighed by the starts launches named in the allocation
//! (`rules::range_heat`); the tier thread moves runs of neighbouring parts alike in place
//! and heat (`Run`) as one.
//!
//! Locks: `LIVE` is held only to add, remove or copy entries; each part's `state` is a
//! leaf lock, never held across a CUDA call.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend;
use crate::cuda::ffi::*;
use crate::cuda::{self, Where};
use crate::memory::address_index::{RangeUse, WHOLE_READ};
use crate::memory::budget::{self, T2Reservation, VramCharge};
use crate::memory::movable_part::{Part, Residence};
use crate::rules::range_heat;
use crate::rules::read_rate::ReadRate;
use crate::rules::tiering;
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// The parts of a partitioned allocation: managed memory's device page.
pub const PART_BYTES: u64 = 2 << 20;

/// The smallest allocation cut into parts: below it, a buffer is one tensor or a few,
/// and moves whole.
pub const PARTITION_MIN: u64 = 64 << 20;

/// The most bytes in one run the tier thread weighs (`Run`): promotions fill the room left
/// to within it, and a hot piece of a large buffer can swap with a small victim.
pub const RUN_MOST: u64 = 64 << 20;

/// The fewest bytes a run the tier thread weighs may be cut to (when little room is
/// left): the policy weighs each run against every other, so a 30 GB buffer stays under
/// two thousand of them.
pub const RUN_LEAST: u64 = 16 << 20;

/// A live movable allocation.
///
/// # Invariants
/// `[base, base + len)` is managed memory of `context` until `release` frees it; `parts`
/// cover it in order, without gaps; a part's move in progress ends before `release`
/// frees the memory.
pub struct Movable {
    base: CuDevicePtr,
    len: u64,
    device: CuDevice,
    context: Context,
    sequence: u64,
    /// Made as the program's working memory (`budget::allocating_working_memory`).
    working_memory: bool,
    /// What launches did to it (the address index's entry for it); for a partitioned
    /// allocation, the starts they named too.
    uses: Arc<RangeUse>,
    /// `uses`' weighted launches when the heat was last taken (an allocation of one part).
    weighted_seen: AtomicU64,
    parts: Box<[Part]>,
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
    /// The host cannot give the RAM and keep its reserve; the backend's T2 may still (the
    /// module can move its buffers to swap).
    HostShort,
}

/// `len` bytes (whole 2 MiB chunks) of movable T2 for `device` in `context`, charged
/// with `reservation`. Its host pages are the driver's, which never go to swap: when the
/// host cannot give them and keep its reserve, `HostShort`.
pub fn create(
    len: u64,
    device: CuDevice,
    context: Context,
    reservation: T2Reservation,
) -> Result<Arc<Movable>, MovableFailure> {
    if !backend::host_has_room(len) {
        debug!("{} of movable T2 would leave the host less than its reserve: the backend's T2 instead", Mib(len));
        return Err(MovableFailure::HostShort);
    }
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

/// The parts of an allocation of `len` bytes charged as `residence`: one, or 2 MiB parts
/// from `PARTITION_MIN` on, each with its share of the charge (the last with what is left).
fn parts_of(len: u64, residence: Residence) -> Box<[Part]> {
    let part = if len >= PARTITION_MIN { PART_BYTES } else { len.max(1) };
    let mut residence = residence;
    let mut parts = Vec::with_capacity(len.div_ceil(part) as usize);
    let mut offset = 0;
    while offset < len {
        let bytes = part.min(len - offset);
        let share = match &mut residence {
            _ if offset + bytes == len => std::mem::replace(&mut residence, Residence::Moving),
            Residence::T2(charge) => Residence::T2(charge.split_off(bytes)),
            Residence::Vram(charge) => Residence::Vram(charge.split_off(bytes)),
            Residence::Moving => Residence::Moving,
        };
        parts.push(Part::new(offset, bytes, share));
        offset += bytes;
    }
    parts.into_boxed_slice()
}

/// The record of a new movable allocation, added to the live list.
fn record(base: CuDevicePtr, len: u64, device: CuDevice, context: Context, residence: Residence) -> Arc<Movable> {
    let parts = parts_of(len, residence);
    let uses = if parts.len() > 1 { RangeUse::partitioned(parts.len()) } else { RangeUse::default() };
    let movable = Arc::new(Movable {
        base,
        len,
        device,
        context,
        sequence: SEQUENCE.fetch_add(1, Ordering::Relaxed),
        working_memory: budget::allocating_working_memory(),
        uses: Arc::new(uses),
        weighted_seen: AtomicU64::new(0),
        parts,
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

/// Bytes of movable memory of `device` in VRAM and not perhaps evicted: managed pages the
/// driver may evict for another process's allocation.
pub fn vram_bytes(device: CuDevice) -> u64 {
    LIVE.lock()
        .iter()
        .filter(|movable| movable.device == device)
        .flat_map(|movable| movable.parts.iter())
        .filter(|part| part.in_vram() && !part.maybe_evicted())
        .map(Part::len)
        .sum()
}

/// Neighbouring parts of one allocation, alike in where they are and in heat per byte:
/// what the policy weighs and the tier thread moves as one.
#[derive(Clone)]
pub struct Run<'a> {
    pub allocation: &'a Movable,
    /// Indices into the allocation's parts.
    pub parts: Range<usize>,
    pub bytes: u64,
    pub heat: u64,
    /// Ticks since any of its parts was last read.
    pub idle_ticks: u32,
    pub in_vram: bool,
    pub maybe_evicted: bool,
    /// In T2 with the VRAM chunks it left kept for it (`Part::chunks_kept`).
    pub chunks_kept: bool,
}

impl Run<'_> {
    /// Its first byte.
    pub fn address(&self) -> CuDevicePtr {
        self.allocation.base + self.allocation.parts[self.parts.start].offset()
    }

    pub fn parts(&self) -> &[Part] {
        &self.allocation.parts[self.parts.clone()]
    }
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

    pub fn working_memory(&self) -> bool {
        self.working_memory
    }

    /// The parts overlapping [`start`, `end`) (addresses).
    fn parts_in(&self, start: CuDevicePtr, end: CuDevicePtr) -> impl Iterator<Item = (&Part, u64)> {
        let (from, to) = (start.saturating_sub(self.base), end.saturating_sub(self.base).min(self.len));
        let first = self.parts.partition_point(|part| part.offset() + part.len() <= from);
        self.parts[first..].iter().take_while(move |part| part.offset() < to).map(move |part| {
            let overlap = to.min(part.offset() + part.len()) - from.max(part.offset());
            (part, overlap)
        })
    }

    /// Bytes of [`start`, `end`) that lie in its parts in T2 now.
    pub(super) fn t2_bytes_in(&self, start: CuDevicePtr, end: CuDevicePtr) -> u64 {
        self.parts_in(start, end).filter(|(part, _)| !part.in_vram()).map(|(_, overlap)| overlap).sum()
    }

    /// What a launch naming `address` (inside it) counts as read: the piece from that
    /// start to the next named lately of a partitioned allocation, else all of it; and
    /// the bytes of that in T2 now.
    pub(super) fn named_piece(&self, address: CuDevicePtr) -> (u64, u64) {
        let (start, end) = match self.uses.starts() {
            Some(starts) => {
                let offset = address.saturating_sub(self.base);
                let end = range_heat::piece_end(&starts.read(false).named, offset, self.len);
                (address, self.base + end)
            }
            None => (self.base, self.base + self.len),
        };
        (end.saturating_sub(start), self.t2_bytes_in(start, end))
    }

    /// A matrix product read [`address`, `address + bytes`).
    pub fn note_read(&self, address: CuDevicePtr, bytes: u64) {
        self.parts_in(address, address.saturating_add(bytes)).for_each(|(part, overlap)| part.note_read(overlap));
    }

    /// Free VRAM fell so low that allocations may have taken the chunks its parts in T2
    /// left (`Part::forget_kept_chunks`) and, where `evicting` (the driver may be evicting
    /// for someone), some of its parts in VRAM (`Part::mark_maybe_evicted`). One walk of
    /// its parts for both.
    pub fn note_shortage(&self, evicting: bool) {
        for part in &self.parts {
            if evicting {
                part.mark_maybe_evicted();
            }
            part.forget_kept_chunks();
        }
    }

    /// Its entry in the address index, counted by the launches, copies and memsets
    /// that name it.
    pub fn uses(&self) -> Arc<RangeUse> {
        Arc::clone(&self.uses)
    }

    /// The reads of each part (`read_rate`: its heat, bytes read a tick, and its ticks
    /// idle) with what products read since the last tick and what launches, copies and
    /// memsets named since — for a partitioned allocation, each start's piece
    /// (`range_heat`), else its whole length for each, by the naming's weight (a launch's
    /// parameters say where it reads, not how much: all of it until the kernel's sampled
    /// times say less, `launch::kernel_times`). With `take` (the tier thread's tick) the
    /// namings are taken and the tick ends for each part; without, all stays in place.
    pub fn reads(&self, take: bool) -> Vec<ReadRate> {
        let named = match self.uses.starts() {
            Some(starts) => {
                let starts = starts.read(take);
                range_heat::part_heat(&starts.named, starts.unplaced, WHOLE_READ, self.len, PART_BYTES)
            }
            None => {
                let weighted = self.uses.weighted();
                let seen = if take {
                    self.weighted_seen.swap(weighted, Ordering::Relaxed)
                } else {
                    self.weighted_seen.load(Ordering::Relaxed)
                };
                let named = u128::from(weighted.saturating_sub(seen)) * u128::from(self.len) / u128::from(WHOLE_READ);
                vec![u64::try_from(named).unwrap_or(u64::MAX)]
            }
        };
        self.parts.iter().zip(named).map(|(part, named)| part.reads_with(named, take)).collect()
    }

    /// Its parts (with their `reads`) in runs of neighbours alike in place, possible
    /// eviction, kept chunks and heat per byte, each at most `most` bytes (one part at
    /// least).
    pub fn runs(&self, reads: &[ReadRate], most: u64) -> Vec<Run<'_>> {
        let mut runs: Vec<Run<'_>> = Vec::new();
        for (index, (part, read)) in self.parts.iter().zip(reads).enumerate() {
            let (heat, idle_ticks) = (read.heat(), read.idle_ticks());
            let (in_vram, maybe_evicted, chunks_kept) = (part.in_vram(), part.maybe_evicted(), part.chunks_kept());
            if let Some(run) = runs.last_mut().filter(|run| {
                run.in_vram == in_vram
                    && run.maybe_evicted == maybe_evicted
                    && run.chunks_kept == chunks_kept
                    && run.bytes + part.len() <= most
                    && tiering::per_byte((run.heat, run.bytes), (heat, part.len())).is_eq()
            }) {
                run.parts.end = index + 1;
                run.bytes += part.len();
                run.heat = run.heat.saturating_add(heat);
                run.idle_ticks = run.idle_ticks.min(idle_ticks);
                continue;
            }
            runs.push(Run {
                allocation: self,
                parts: index..index + 1,
                bytes: part.len(),
                heat,
                idle_ticks,
                in_vram,
                maybe_evicted,
                chunks_kept,
            });
        }
        runs
    }

    /// Frees it (the device is past every use of it and its context is current): waits
    /// for moves in progress to end, then gives the memory and its charges back.
    pub fn release(&self) {
        let charges: Vec<Residence> = self.parts.iter().map(Part::release).collect();
        let status = cuda::mem_free(self.base);
        if status != CuResult::SUCCESS {
            warn!("cuMemFree of movable memory {:#x} failed (CUDA error {})", self.base, status.0);
        }
        drop(charges);
        let mut live = LIVE.lock();
        live.retain(|entry| !std::ptr::eq(Arc::as_ptr(entry), self));
        LIVE_COUNT.store(live.len(), Ordering::Release);
        debug!("{:#x}: {} movable, freed", self.base, Mib(self.len));
    }
}

/// The lock the fork handlers hold (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    &LIVE
}
