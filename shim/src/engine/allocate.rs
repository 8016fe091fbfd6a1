//! The allocation procedure shared by every pointer-returning allocation hook (cudaMalloc,
//! cuMemAlloc and their async and pool forms) and the free procedure shared by every
//! free hook: placement (`budget`, `placement`), then VRAM, a split range or T2, and
//! the registry.

use crate::cuda;
use crate::cuda::ffi::*;
use crate::engine::make_room;
use crate::engine::movability::{movable_t2_wanted, movable_vram_wanted};
use crate::engine::tier_thread;
use crate::memory::budget::{self, VramReservation};
use crate::memory::movable::{self, MovableFailure};
use crate::memory::registry::{self, Backed, Lookup, Record};
use crate::memory::release;
use crate::memory::split;
use crate::memory::t2::{self, T2Failure};
use crate::rules::placement::Phase;
use crate::sys::log::Mib;
use crate::sys::publish;
use crate::sys::stats::{self, STATS};

/// Where an allocation comes from, for whether live tiering may move it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// cudaMalloc, cuMemAlloc and their stream-ordered forms on the device's own pool.
    Plain,
    /// A memory pool the program names (cuMemAllocFromPoolAsync): the memory is the
    /// pool's, which the program may export to other processes (cuMemPoolExportPointer)
    /// or trim, and managed memory is neither: it is never movable.
    Pool,
}

/// How an allocation attempt ended; `R` is the hook's API's status type.
pub enum Allocated<R> {
    Vram,
    /// Memory the shim made (T2, or split between VRAM and T2) at this address.
    ShimMade(CuDevicePtr),
    /// The real allocation failed with this status (not out-of-memory): pass it on.
    Failed(R),
    OutOfMemory,
}

/// VRAM when the placement rule allows it (the real allocation, `vram`), T2 otherwise
/// or when the driver answers `oom_status`; a large allocation the rule sends to T2 is
/// split when VRAM is left under the limit; `prepare_t2` makes a context current for
/// the T2 and split paths. When T2 is exhausted the answer is out-of-memory; when T2
/// fails for another reason, an allocation the rule sent to T2 is tried in VRAM after
/// all (the real function). Memory the shim made is published for `greenboost status`.
/// Only a `Plain` allocation may be movable.
pub fn allocate<R: PartialEq + Copy>(
    size: u64,
    device: CuDevice,
    origin: Origin,
    oom_status: R,
    vram: impl FnOnce() -> Result<CuDevicePtr, R>,
    prepare_t2: impl FnOnce() -> bool,
) -> Allocated<R> {
    // A pool as the placement rule sees it (larger than a chunk), so that the phases agree.
    let pool = budget::phase_of(size, device) == Phase::Pooling;
    let allocated = place(size, device, origin, oom_status, vram, prepare_t2);
    if pool && matches!(allocated, Allocated::Vram | Allocated::ShimMade(_)) {
        budget::note_pool(size, device);
    }
    if matches!(allocated, Allocated::ShimMade(_)) {
        publish::update();
    }
    allocated
}

/// `allocate`'s placement: VRAM, movable T2, a split range or T2.
fn place<R: PartialEq + Copy>(
    size: u64,
    device: CuDevice,
    origin: Origin,
    oom_status: R,
    vram: impl FnOnce() -> Result<CuDevicePtr, R>,
    prepare_t2: impl FnOnce() -> bool,
) -> Allocated<R> {
    release::reclaim(false);
    let mut vram = Some(vram);
    // The T2 paths' preparation, made once, on first need; its answer kept.
    let (mut preparation, mut prepared) = (Some(prepare_t2), None);
    let mut t2_ready = move || *prepared.get_or_insert_with(|| preparation.take().is_some_and(|prepare| prepare()));
    let mut after_oom = false;
    let movable_vram = origin == Origin::Plain && movable_vram_wanted(size, device);
    // Held from room made (below) until this returns: live tiering waits (`make_room::RoomHeld`).
    let mut _room_made = None;
    let reserved = budget::reserve_vram(size, device).or_else(|| {
        // No room: while computing, movable VRAM loaded before may make it.
        let made = t2::rounded_len(size)
            .and_then(|len| (movable_vram && t2_ready()).then(|| make_room::make_room(len, device)).flatten());
        if made.is_none() {
            budget::note_refused(size, device);
        }
        made.map(|(reservation, moving)| {
            _room_made = Some(moving);
            reservation
        })
    });
    if let Some(reservation) = reserved {
        let reservation = if movable_vram && t2_ready() {
            match allocate_movable_in_vram(size, device, reservation) {
                Ok(device_ptr) => return Allocated::ShimMade(device_ptr),
                Err(reservation) => reservation,
            }
        } else {
            reservation
        };
        if let Some(vram) = vram.take() {
            match vram() {
                Ok(device_ptr) => {
                    registry::insert(device_ptr, Record::Vram(reservation.commit()));
                    debug!("T1 {:#x}: {} on device {}", device_ptr, Mib(size), device);
                    return Allocated::Vram;
                }
                Err(status) if status == oom_status => {
                    debug!("VRAM out of memory for {} on device {}: trying T2", Mib(size), device);
                    after_oom = true;
                }
                Err(status) => return Allocated::Failed(status),
            }
        }
    }
    let t2_ready = t2_ready();
    if t2_ready && origin == Origin::Plain && movable_t2_wanted(size, device, after_oom) {
        match allocate_movable(size, device) {
            Ok(device_ptr) => {
                if after_oom {
                    stats::bump(&STATS.t2_after_vram_oom);
                }
                return Allocated::ShimMade(device_ptr);
            }
            Err(MovableFailure::Exhausted) => return stats::out_of_memory(Allocated::OutOfMemory),
            // The backend's T2 instead: pinned, or the module's, which swap can take.
            Err(MovableFailure::Unsupported | MovableFailure::HostShort) => {}
        }
    }
    // After a driver out-of-memory the VRAM the rule promised is not there: no head.
    if t2_ready && !after_oom {
        if let Some(split) = split::create(size, device, release::reserve_driver_host_t2) {
            let device_ptr = split.base();
            registry::insert(device_ptr, Record::Backed(Backed::Split(split)));
            return Allocated::ShimMade(device_ptr);
        }
    }
    let t2 = if t2_ready { allocate_t2(size, device) } else { Err(T2Failure::Internal) };
    match t2 {
        Ok(device_ptr) => {
            if after_oom {
                stats::bump(&STATS.t2_after_vram_oom);
            }
            Allocated::ShimMade(device_ptr)
        }
        Err(T2Failure::Internal) if vram.is_some() => match vram.map(|vram| vram()) {
            Some(Ok(device_ptr)) => {
                info!("T2 unavailable: {} placed in VRAM beyond the budget", Mib(size));
                registry::insert(device_ptr, Record::Vram(budget::reserve_unchecked(size, device).commit()));
                Allocated::Vram
            }
            Some(Err(status)) if status != oom_status => Allocated::Failed(status),
            _ => stats::out_of_memory(Allocated::OutOfMemory),
        },
        Err(_) => stats::out_of_memory(Allocated::OutOfMemory),
    }
}

/// `size` bytes of movable memory in VRAM for `device` in the current context, charged
/// with `reservation`, recorded; its device pointer, or the reservation back when managed
/// memory could not be had (plain VRAM is tried then).
fn allocate_movable_in_vram(
    size: u64,
    device: CuDevice,
    reservation: VramReservation,
) -> Result<CuDevicePtr, VramReservation> {
    let Some(context) = cuda::current_context() else { return Err(reservation) };
    let Some(len) = t2::rounded_len(size) else { return Err(reservation) };
    let Ok(base) = movable::managed_in_vram(len, device) else { return Err(reservation) };
    let mut charge = reservation.commit();
    // Rounded up to whole chunks: the rest is VRAM the program holds too.
    charge.absorb(budget::reserve_unchecked(len - charge.bytes(), device));
    let allocation = movable::record_in_vram(base, len, device, context, charge);
    registry::insert(base, Record::Backed(Backed::Movable(allocation)));
    tier_thread::ensure_started();
    Ok(base)
}

/// `size` bytes of movable T2 for `device` in the current context, recorded; its device
/// pointer.
fn allocate_movable(size: u64, device: CuDevice) -> Result<CuDevicePtr, MovableFailure> {
    let context = cuda::current_context().ok_or(MovableFailure::Unsupported)?;
    let len = t2::rounded_len(size).ok_or(MovableFailure::Exhausted)?;
    let reservation = release::reserve_t2(len).ok_or(MovableFailure::Exhausted)?;
    let allocation = movable::create(len, device, context, reservation)?;
    let device_ptr = allocation.base();
    registry::insert(device_ptr, Record::Backed(Backed::Movable(allocation)));
    tier_thread::ensure_started();
    Ok(device_ptr)
}

/// `size` bytes of T2 for `device` in the current context, recorded; its device pointer.
fn allocate_t2(size: u64, device: CuDevice) -> Result<CuDevicePtr, T2Failure> {
    let context = cuda::current_context().ok_or(T2Failure::Internal)?;
    let len = t2::rounded_len(size).ok_or(T2Failure::Exhausted)?;
    // A cached registration of that length first: its room in the cap is freed as it
    // leaves the cache, before the reservation.
    let cached = t2::take_cached(len, context);
    let Some(reservation) = release::reserve_t2(len) else {
        cached.into_iter().for_each(t2::unregister_and_release);
        return Err(T2Failure::Exhausted);
    };
    let registered = match cached {
        Some(cached) => cached,
        None => t2::register_new(len, device, context)?,
    };
    let allocation = registered.charged(reservation.commit());
    let device_ptr = allocation.device_ptr();
    registry::insert(device_ptr, Record::Backed(Backed::T2(allocation)));
    Ok(device_ptr)
}

/// The shared body of the free hooks, driver and runtime alike (`success` and
/// `invalid_value` are the hook's API's codes): memory the shim made (T2, split) is
/// released by `release`, a double free of it is answered invalid-value, anything else
/// goes to the real free, and a VRAM allocation the real free refused stays recorded.
pub fn free_with<R: PartialEq>(
    device_ptr: CuDevicePtr,
    success: R,
    invalid_value: R,
    real: impl FnOnce() -> R,
    release: impl FnOnce(Backed),
) -> R {
    release::reclaim(false);
    match registry::take(device_ptr) {
        Lookup::Found(Record::Backed(allocation)) => {
            release(allocation);
            publish::update();
            success
        }
        Lookup::Found(Record::Vram(charge)) => {
            let status = real();
            if status == success {
                debug!("T1 {:#x}: {} freed", device_ptr, Mib(charge.bytes()));
            } else {
                registry::insert(device_ptr, Record::Vram(charge));
            }
            status
        }
        Lookup::DoubleFree => invalid_value,
        Lookup::Unknown => real(),
    }
}
