//! The registry of live allocations the shim made or counted, by device pointer: what a
//! free must undo, and where T2 bytes lie (GEMM staging, the T2-bytes export).
//!
//! Lock: `REGISTRY` (rank in `sys::lock_order`); no CUDA call runs under it. The address
//! index (`address_index`), which launches read without a lock, is written only under it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::address_index::{self, RangeUse};
use crate::memory::budget::VramCharge;
use crate::memory::movable::{self, Movable};
use crate::memory::split::SplitAllocation;
use crate::memory::t2::T2Allocation;
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::stats::{self, STATS};

/// Memory the shim made itself (rather than counted on its way to the driver), to be
/// released when the program frees it.
pub enum Backed {
    /// T2: backend memory registered with CUDA.
    T2(T2Allocation),
    /// A VRAM head and a T2 tail under one address range.
    Split(SplitAllocation),
    /// T2 that live tiering moves to VRAM and back (`movable`); the tier thread holds
    /// the other reference.
    Movable(Arc<Movable>),
}

impl Backed {
    pub fn context(&self) -> Context {
        match self {
            Backed::T2(allocation) => allocation.context(),
            Backed::Split(split) => split.context(),
            Backed::Movable(movable) => movable.context(),
        }
    }

    /// The CUDA side of freeing, with the allocation's context current and the device
    /// past every use of the memory: a split range is unmapped and released; T2 memory
    /// needs nothing here (`finish` keeps it registered or unregisters it), nor does
    /// movable T2 (`finish` waits for a move in progress, then frees it).
    pub(super) fn detach(&self) {
        if let Backed::Split(split) = self {
            split.unmap();
        }
    }

    /// The rest of freeing, after `detach`: memory and accounting.
    pub(super) fn finish(self) {
        match self {
            Backed::T2(allocation) => allocation.release(),
            Backed::Split(split) => split.finish(),
            Backed::Movable(movable) => cuda::with_context(movable.context(), || movable.release()),
        }
    }
}

/// A live allocation.
pub enum Record {
    /// Device memory the driver made, counted against the budget.
    Vram(VramCharge),
    Backed(Backed),
}

impl Record {
    /// The bytes of the address range the program was given.
    fn len(&self) -> u64 {
        match self {
            Record::Vram(charge) => charge.bytes(),
            Record::Backed(Backed::T2(allocation)) => allocation.len(),
            Record::Backed(Backed::Split(split)) => split.tail_range().1 - split.base(),
            Record::Backed(Backed::Movable(movable)) => movable.len(),
        }
    }

    /// Its entry's use counters when something else reads them too (a movable
    /// allocation's heat); `None`: the index makes its own.
    fn uses(&self) -> Option<Arc<RangeUse>> {
        match self {
            Record::Backed(Backed::Movable(movable)) => Some(movable.uses()),
            _ => None,
        }
    }

    /// Bytes of [`start`, `end`) in this record's (at `base`) pinned T2 and movable T2
    /// (while in T2).
    fn t2_in(&self, base: CuDevicePtr, start: CuDevicePtr, end: CuDevicePtr) -> (u64, u64) {
        let overlap = |from: u64, to: u64| to.min(end).saturating_sub(from.max(start));
        match self {
            Record::Backed(Backed::T2(allocation)) => (overlap(base, base.saturating_add(allocation.len())), 0),
            Record::Backed(Backed::Split(split)) => {
                let (tail, tail_end) = split.tail_range();
                (overlap(tail, tail_end), 0)
            }
            Record::Backed(Backed::Movable(allocation)) => (0, allocation.t2_bytes_in(start, end)),
            Record::Vram(_) => (0, 0),
        }
    }
}

struct Registry {
    live: BTreeMap<CuDevicePtr, Record>,
    /// Device pointers of recently freed `Backed` memory, to answer a double free.
    freed_backed: VecDeque<CuDevicePtr>,
}

const FREED_REMEMBERED: usize = 4096;

static REGISTRY: Mutex<rank::Registry, Registry> =
    const_mutex(Registry { live: BTreeMap::new(), freed_backed: VecDeque::new() });

/// Records a live allocation at `device_ptr`.
pub fn insert(device_ptr: CuDevicePtr, record: Record) {
    let mut registry = REGISTRY.lock();
    if matches!(record, Record::Backed(_)) {
        registry.freed_backed.retain(|freed| *freed != device_ptr);
    }
    address_index::insert(device_ptr, record.len(), record.uses());
    registry.live.insert(device_ptr, record);
}

/// What a pointer passed to a free function is.
pub enum Lookup {
    Found(Record),
    /// Memory the shim made that was already freed: answer invalid-value, touch nothing.
    DoubleFree,
    /// Not the shim's: the real free function answers as CUDA does.
    Unknown,
}

/// Takes `device_ptr`'s record out of the registry, remembering freed `Backed` memory
/// to answer a double free. A record that the real free then refuses goes back with
/// `insert`, its charge untouched.
pub fn take(device_ptr: CuDevicePtr) -> Lookup {
    if device_ptr == 0 {
        return Lookup::Unknown;
    }
    let mut registry = REGISTRY.lock();
    match registry.live.remove(&device_ptr) {
        Some(record) => {
            address_index::remove(device_ptr);
            if matches!(record, Record::Backed(_)) {
                if registry.freed_backed.len() >= FREED_REMEMBERED {
                    registry.freed_backed.pop_front();
                }
                registry.freed_backed.push_back(device_ptr);
            }
            Lookup::Found(record)
        }
        None if registry.freed_backed.contains(&device_ptr) => {
            drop(registry);
            // The address may since have been given to memory the shim did not see
            // allocated (an unhooked allocation function): then it is not a double free.
            if cuda::is_allocation(device_ptr) {
                REGISTRY.lock().freed_backed.retain(|freed| *freed != device_ptr);
                Lookup::Unknown
            } else {
                Lookup::DoubleFree
            }
        }
        None => Lookup::Unknown,
    }
}

/// How many bytes of [`device_ptr`, `device_ptr + len`) lie in T2 memory (a T2
/// allocation, the host tail of a split one, or movable T2 while it is in T2).
pub fn t2_bytes(device_ptr: CuDevicePtr, len: u64) -> u64 {
    let (pinned, movable) = t2_overlaps(device_ptr, len);
    pinned + movable
}

/// What kind of T2 memory a range lies in, for GEMM staging's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum T2Kind {
    /// Pinned T2 (a T2 allocation or a split tail): the copy engine reads it at the
    /// link's rate.
    Pinned,
    /// Only movable T2 while it is in T2 (managed memory on the host): the copy engine
    /// reads it at a fraction of the link's rate (HF decode with 8.7 GB of movable
    /// weights staged by copy-engine copies: 0.96 tokens/s on the H200), kernels at the
    /// link's rate.
    Movable,
}

/// Whether any byte of [`device_ptr`, `device_ptr + len`) lies in T2, and which kind
/// (pinned wins: a range touching both is copied as pinned).
pub fn t2_kind(device_ptr: CuDevicePtr, len: u64) -> Option<T2Kind> {
    let (pinned, movable) = t2_overlaps(device_ptr, len);
    if pinned != 0 {
        Some(T2Kind::Pinned)
    } else if movable != 0 {
        Some(T2Kind::Movable)
    } else {
        None
    }
}

/// Bytes of [`device_ptr`, `device_ptr + len`) in pinned T2 and in movable T2 (while it
/// is in T2).
fn t2_overlaps(device_ptr: CuDevicePtr, len: u64) -> (u64, u64) {
    if stats::load(&STATS.t2_used) == 0 || len == 0 {
        return (0, 0);
    }
    let end = device_ptr.saturating_add(len);
    let registry = REGISTRY.lock();
    // The allocation starting at or before the range, then any that start inside it.
    let before = registry.live.range(..=device_ptr).next_back();
    let inside = registry.live.range(device_ptr.saturating_add(1)..end);
    before.into_iter().chain(inside).fold((0, 0), |(pinned, movable), (base, record)| {
        let (p, m) = record.t2_in(*base, device_ptr, end);
        (pinned + p, movable + m)
    })
}

/// The kinds of memory the shim makes in place of the driver's device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShimMade {
    /// Host memory registered and mapped for the GPU (the driver sees host memory).
    T2,
    /// A VMM range: a VRAM head and a host-NUMA tail (the driver sees device memory).
    Split,
    /// CUDA managed memory, in VRAM or T2 (the driver sees managed memory).
    Movable,
}

impl ShimMade {
    /// In words, for a message.
    pub fn describe(self) -> &'static str {
        match self {
            ShimMade::T2 => "T2 (host memory mapped for the GPU)",
            ShimMade::Split => "split between VRAM and T2 (a VMM range)",
            ShimMade::Movable => "movable by live tiering (CUDA managed memory)",
        }
    }
}

/// What memory the shim made holds `device_ptr`: `None` for the driver's own memory
/// (VRAM the shim only counted) and for addresses it does not know.
pub fn shim_made(device_ptr: CuDevicePtr) -> Option<ShimMade> {
    if device_ptr == 0 {
        return None;
    }
    let registry = REGISTRY.lock();
    let (base, record) = registry.live.range(..=device_ptr).next_back()?;
    if device_ptr >= base.saturating_add(record.len()) {
        return None;
    }
    match record {
        Record::Vram(_) => None,
        Record::Backed(Backed::T2(_)) => Some(ShimMade::T2),
        Record::Backed(Backed::Split(_)) => Some(ShimMade::Split),
        Record::Backed(Backed::Movable(_)) => Some(ShimMade::Movable),
    }
}

/// What a kernel launch naming `device_ptr` counts as reading (the allocation holding it,
/// or for a large movable one the piece from there to the next start named in it lately),
/// and how many of those bytes lie in T2 now; `None` for an address the shim does not
/// know.
pub fn named_piece(device_ptr: CuDevicePtr) -> Option<(u64, u64)> {
    let registry = REGISTRY.lock();
    let (&base, record) = registry.live.range(..=device_ptr).next_back()?;
    let end = base.saturating_add(record.len());
    if device_ptr >= end {
        return None;
    }
    Some(match record {
        Record::Backed(Backed::Movable(movable)) => movable.named_piece(device_ptr),
        _ => {
            let (pinned, movable) = record.t2_in(base, base, end);
            (end - base, pinned + movable)
        }
    })
}

/// A matrix product reads [`device_ptr`, `device_ptr + len`): the movable allocation
/// holding it gets warmer (live tiering promotes the hottest first).
pub fn note_read(device_ptr: CuDevicePtr, len: u64) {
    if !movable::any() || len == 0 {
        return;
    }
    let registry = REGISTRY.lock();
    if let Some((base, Record::Backed(Backed::Movable(movable)))) = registry.live.range(..=device_ptr).next_back() {
        if device_ptr < base.saturating_add(movable.len()) {
            movable.note_read(device_ptr, len);
        }
    }
}

/// The lock the fork handlers hold (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    &REGISTRY
}
