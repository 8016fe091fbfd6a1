//! Accounting: the VRAM this process holds per device and the T2 it holds, each taken
//! in two steps — a reservation (counted at once, so that a concurrent allocation sees
//! it taken) and a charge (the memory exists) — and given back by dropping either. A
//! record that owns a charge keeps it counted; putting a record back after a refused
//! free changes no counter, so there is one way to undo.
//!
//! VRAM counts against the device's placement limit (`placement`); T2 against the T2
//! capacity. `STATS` shows what is charged (T1/T2 in use, peaks, allocation counts).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend;
use crate::cuda;
use crate::cuda::ffi::CuDevice;
use crate::rules::config;
use crate::rules::placement::{DeviceView, Phase, Rules, CHUNK_MAX};
use crate::sys::clock::monotonic_ns;
use crate::sys::log::Mib;
use crate::sys::per_device::{PerDevice, DEVICES};
use crate::sys::stats::{self, STATS};

static VRAM_IN_USE: PerDevice = PerDevice::new();
/// The part of `VRAM_IN_USE` reserved but not yet allocated by the driver.
static VRAM_IN_FLIGHT: PerDevice = PerDevice::new();

/// The last measurement of what everything else uses on each device, and when.
struct OthersSample {
    taken_ns: AtomicU64,
    bytes: AtomicU64,
}

static OTHERS: [OthersSample; DEVICES] =
    [const { OthersSample { taken_ns: AtomicU64::new(0), bytes: AtomicU64::new(0) } }; DEVICES];

/// A measurement is reused for this long: other processes change the device's state
/// far more slowly, and cuMemGetInfo costs a system call.
const OTHERS_SAMPLE_NS: u64 = 1_000_000;

/// While set, the last measurement stands whatever its age (`with_measurements_held`).
static MEASUREMENTS_HELD: AtomicBool = AtomicBool::new(false);

/// Runs `work`, during which placement measures nothing and keeps what it last measured:
/// for the moment live tiering's give-back holds all free VRAM, which no allocation
/// should read as taken by others.
pub fn with_measurements_held<T>(work: impl FnOnce() -> T) -> T {
    MEASUREMENTS_HELD.store(true, Ordering::Release);
    let done = work();
    MEASUREMENTS_HELD.store(false, Ordering::Release);
    done
}

/// `device` as placement sees it: its size and what everything but this process's
/// allocations uses on it — the driver's used memory (every process's) less what this
/// process holds and the driver already allocated. Measured with cuMemGetInfo, which
/// needs `device`'s context current (the allocating thread's); otherwise, or when the
/// driver does not answer, the last measurement stands.
fn view(device: CuDevice, physical: u64) -> DeviceView {
    let Some(sample) = usize::try_from(device).ok().and_then(|i| OTHERS.get(i)) else {
        return DeviceView::alone(device, physical);
    };
    let now = monotonic_ns();
    let taken = sample.taken_ns.load(Ordering::Acquire);
    let stale = now.saturating_sub(taken) >= OTHERS_SAMPLE_NS && !MEASUREMENTS_HELD.load(Ordering::Acquire);
    if taken == 0 || stale {
        if let Some((free, total)) = (cuda::current_device() == Some(device)).then(cuda::device_memory).flatten() {
            let ours = vram_counter(device).map_or(0, |counter| counter.load(Ordering::Relaxed));
            let in_flight = in_flight(device).map_or(0, |counter| counter.load(Ordering::Relaxed));
            let others = total.saturating_sub(free).saturating_sub(ours.saturating_sub(in_flight));
            sample.bytes.store(others, Ordering::Relaxed);
            sample.taken_ns.store(now, Ordering::Release);
        }
    }
    DeviceView { ordinal: device, physical, others: sample.bytes.load(Ordering::Relaxed) }
}

fn vram_counter(device: CuDevice) -> Option<&'static AtomicU64> {
    VRAM_IN_USE.of(device)
}

/// Set by the program's first cuBLAS handle or matrix product (see `placement`).
static COMPUTING: AtomicBool = AtomicBool::new(false);

/// The program has started computing: the VRAM reserve opens to its allocations.
pub fn note_computing() {
    if !COMPUTING.swap(true, Ordering::Relaxed) {
        debug!("the program computes (cuBLAS): the VRAM reserve is open to allocations from now on");
    }
}

pub fn computing() -> bool {
    COMPUTING.load(Ordering::Relaxed)
}

/// Set by the first allocation that pools the program's weights (`Phase::LoadingAfterPool`).
static POOLED: AtomicBool = AtomicBool::new(false);

/// Whether an allocation of `size` for `device`, not yet placed, pools the program's
/// weights (`placement::Rules::is_pool`, against what the process holds now) while it loads.
fn is_pool(size: u64, device: CuDevice) -> bool {
    if POOLED.load(Ordering::Relaxed) || computing() {
        return false;
    }
    let Some(physical) = cuda::physical_vram(device) else { return false };
    let held = vram_in_use(device).saturating_add(STATS.t2_used.load(Ordering::Relaxed));
    Rules::of(config::get()).is_pool(size, held, device, physical)
}

/// Notes that the pool `is_pool` found was placed: from now on the reserve takes the
/// buffers that follow it whole (the pool itself was placed without it).
pub fn note_pool(size: u64, device: CuDevice) {
    if !POOLED.swap(true, Ordering::Relaxed) {
        info!(
            "{} in one allocation on device {}: the program pools its weights; the VRAM reserve takes the buffers after it that fit it whole",
            Mib(size),
            device
        );
    }
}

/// Whether what the program allocates now is its working memory (KV cache, activations,
/// compute buffers), read many times over: once it computes, or after it pooled its
/// weights (`Phase::LoadingAfterPool`).
pub fn allocating_working_memory() -> bool {
    phase() != Phase::Loading
}

/// The program's phase for the placement rule.
pub fn phase() -> Phase {
    if computing() {
        Phase::Computing
    } else if POOLED.load(Ordering::Relaxed) {
        Phase::LoadingAfterPool
    } else {
        Phase::Loading
    }
}

/// The phase the placement rule applies to an allocation of `size` for `device`: the
/// program's (`phase`), or `Phase::Pooling` for the allocation that pools its weights.
pub fn phase_of(size: u64, device: CuDevice) -> Phase {
    match phase() {
        Phase::Loading if size > CHUNK_MAX && is_pool(size, device) => Phase::Pooling,
        phase => phase,
    }
}

/// VRAM this process holds on `device` through the shim (charged and reserved).
pub fn vram_in_use(device: CuDevice) -> u64 {
    vram_counter(device).map_or(0, |counter| counter.load(Ordering::Relaxed))
}

/// VRAM counted for `device` but not yet charged.
///
/// # Invariants
/// `bytes` is included in the device's counter until the reservation is dropped or
/// committed (then the charge holds it).
#[must_use]
pub struct VramReservation {
    device: CuDevice,
    bytes: u64,
}

/// VRAM the process holds: counted in the device's counter and in `STATS.t1_used` until
/// dropped.
pub struct VramCharge {
    device: CuDevice,
    bytes: u64,
}

/// Reserves `bytes` on `device` when `fits(in_use)` says the counter may grow by them
/// (checked and counted in one atomic step).
fn reserve_if(device: CuDevice, bytes: u64, fits: impl Fn(u64) -> bool) -> Option<VramReservation> {
    let counter = vram_counter(device)?;
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |in_use| fits(in_use).then(|| in_use.saturating_add(bytes)))
        .ok()?;
    Some(VramReservation::counted(device, bytes))
}

/// Reserves VRAM for an allocation of `size` if the placement rule sends it to VRAM
/// (`None`: it goes to T2, unless room is made; `note_refused` counts it). Devices whose
/// size the driver does not tell are left to the driver: its out-of-memory still spills.
pub fn reserve_vram(size: u64, device: CuDevice) -> Option<VramReservation> {
    let config = config::get();
    let Some(physical) = cuda::physical_vram(device) else {
        return Some(reserve_unchecked(size, device));
    };
    let phase = phase_of(size, device);
    let view = view(device, physical);
    reserve_if(device, size, |in_use| Rules::of(config).place(size, in_use, view, phase).is_vram())
}

/// An allocation of `size` that `reserve_vram` refused goes to T2 (or is split): counted
/// as a headroom spill when the budget had room, that is, when the device's state sent it;
/// otherwise the budget binds on `device` from now on (`budget_binds`).
pub fn note_refused(size: u64, device: CuDevice) {
    if !budget_has_room(size, device) {
        if BOUND.of(device).is_some_and(|bound| bound.swap(1, Ordering::Relaxed) == 0) {
            info!("{} does not fit the VRAM budget on device {}: the program needs more than it", Mib(size), device);
        }
        return;
    }
    stats::bump(&STATS.headroom_spills);
    if let Some(physical) = cuda::physical_vram(device) {
        debug!(
            "{} on device {} goes to T2: {} used by others, headroom {}",
            Mib(size),
            device,
            Mib(view(device, physical).others),
            Mib(Rules::of(config::get()).headroom(device, physical))
        );
    }
}

/// Devices (a word each, 1 once set) on which the budget itself refused an allocation.
static BOUND: PerDevice = PerDevice::new();

/// Whether the budget has refused this process VRAM on `device` (`note_refused`): what it
/// allocates there no longer all fits, whoever else uses the device.
pub fn budget_binds(device: CuDevice) -> bool {
    BOUND.of(device).is_some_and(|bound| bound.load(Ordering::Relaxed) != 0)
}

/// Whether other users contest `device` (`placement::Rules::contested`), as last measured.
pub fn contested(device: CuDevice) -> bool {
    cuda::physical_vram(device).is_some_and(|physical| Rules::of(config::get()).contested(view(device, physical)))
}

/// Whether the budget alone (the device as if nobody else used it) would place an
/// allocation of `size` in VRAM: when the placement rule sends it to T2 all the same,
/// the device's state did (other processes, the headroom).
pub fn budget_has_room(size: u64, device: CuDevice) -> bool {
    let Some(physical) = cuda::physical_vram(device) else { return true };
    let phase = phase_of(size, device);
    Rules::of(config::get()).place(size, vram_in_use(device), DeviceView::alone(device, physical), phase).is_vram()
}

/// The placement limit on `device` (budget and device room), with the reserve open or
/// kept; `None` when the driver does not tell the device's size.
fn placement_limit(device: CuDevice, reserve_open: bool) -> Option<u64> {
    let physical = cuda::physical_vram(device)?;
    Some(Rules::of(config::get()).vram_limit(view(device, physical), reserve_open))
}

/// VRAM the placement limit still leaves this process on `device` for live tiering's
/// promotions: of its working memory (the reserve open, as for an allocation then), and
/// of what it allocated before (`loaded`: the reserve kept free, for the working set).
pub fn promotion_room(device: CuDevice, loaded: bool) -> u64 {
    let reserve_open = allocating_working_memory() && !loaded;
    placement_limit(device, reserve_open).map_or(0, |limit| limit.saturating_sub(vram_in_use(device)))
}

/// Reserves `bytes` on `device` for a promotion if they fit under the placement limit
/// (`loaded`: as `promotion_room` says).
pub fn reserve_promotion(bytes: u64, device: CuDevice, loaded: bool) -> Option<VramReservation> {
    let limit = placement_limit(device, allocating_working_memory() && !loaded)?;
    reserve_if(device, bytes, |in_use| in_use.checked_add(bytes).is_some_and(|after| after <= limit))
}

/// Reserves the VRAM head of a split allocation of `total` bytes (whole `granularity`
/// units): what the placement rule leaves it (`placement::Rules::split_head`), in whole units, one
/// at least left to the tail. `None` when not one unit is left.
pub(super) fn reserve_vram_head(device: CuDevice, granularity: u64, total: u64) -> Option<VramReservation> {
    let (config, physical) = (config::get(), cuda::physical_vram(device)?);
    let counter = vram_counter(device)?;
    let view = view(device, physical);
    let phase = phase_of(total, device);
    let room = |in_use: u64| Rules::of(config).split_head(in_use, view, granularity, total, phase);
    let before = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |in_use| {
            let head = room(in_use);
            (head > 0).then(|| in_use + head)
        })
        .ok()?;
    Some(VramReservation::counted(device, room(before)))
}

/// Counts VRAM the driver gave whatever the placement rule says (the rule's device size
/// is unknown, or T2 failed and the memory was taken from VRAM after all).
pub fn reserve_unchecked(bytes: u64, device: CuDevice) -> VramReservation {
    if let Some(counter) = vram_counter(device) {
        counter.fetch_add(bytes, Ordering::Relaxed);
    }
    VramReservation::counted(device, bytes)
}

fn in_flight(device: CuDevice) -> Option<&'static AtomicU64> {
    VRAM_IN_FLIGHT.of(device)
}

impl VramReservation {
    /// A reservation of `bytes` already added to the device's counter; they count as in
    /// flight until committed or dropped.
    fn counted(device: CuDevice, bytes: u64) -> VramReservation {
        if let Some(counter) = in_flight(device) {
            counter.fetch_add(bytes, Ordering::Relaxed);
        }
        VramReservation { device, bytes }
    }

    fn land(&self) {
        if let Some(counter) = in_flight(self.device) {
            let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(self.bytes)));
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The memory exists: the reservation becomes a charge.
    pub fn commit(self) -> VramCharge {
        stats::bump(&STATS.t1_allocs);
        self.commit_moved()
    }

    /// Memory that moved into VRAM (live tiering) is there: a charge, not a new
    /// allocation.
    pub(super) fn commit_moved(self) -> VramCharge {
        self.land();
        let charge = VramCharge { device: self.device, bytes: self.bytes };
        std::mem::forget(self);
        stats::add_in_use(&STATS.t1_used, &STATS.t1_peak, charge.bytes);
        report_t1(charge.device);
        charge
    }
}

impl Drop for VramReservation {
    fn drop(&mut self) {
        self.land();
        uncount_vram(self.device, self.bytes);
    }
}

impl VramCharge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `bytes` of it (at most all) as a charge of their own, for memory whose parts move
    /// apart (`movable`).
    pub fn split_off(&mut self, bytes: u64) -> VramCharge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        VramCharge { device: self.device, bytes }
    }

    /// The memory grew by `reservation` (reserved on the same device): one charge
    /// holds both.
    pub fn absorb(&mut self, reservation: VramReservation) {
        reservation.land();
        self.bytes += reservation.bytes;
        stats::add_in_use(&STATS.t1_used, &STATS.t1_peak, reservation.bytes);
        std::mem::forget(reservation);
        report_t1(self.device);
    }
}

impl Drop for VramCharge {
    fn drop(&mut self) {
        uncount_vram(self.device, self.bytes);
        stats::sub_in_use(&STATS.t1_used, self.bytes);
        report_t1(self.device);
    }
}

fn uncount_vram(device: CuDevice, bytes: u64) {
    if let Some(counter) = vram_counter(device) {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(bytes)));
    }
}

/// Tells the module (kmod backend) the process's VRAM use; opens the backend at the
/// first VRAM charge so that the module's stats show T1 even before anything spills.
fn report_t1(device: CuDevice) {
    if let Some(backend) = backend::get() {
        let budget =
            cuda::physical_vram(device).map_or(0, |physical| Rules::of(config::get()).budget(device, physical));
        backend.report_t1(stats::load(&STATS.t1_used), budget, false);
    }
}

/// T2 capacity: GREENBOOST_T2_CAP, else the backend's own.
pub(super) fn t2_capacity() -> u64 {
    config::get().t2_cap.unwrap_or_else(|| backend::get().map_or(0, |backend| backend.default_cap()))
}

/// T2 counted in use (`STATS.t2_used`) but not yet charged.
///
/// # Invariants
/// `bytes` is included in `STATS.t2_used` until the reservation is dropped or committed.
#[must_use]
pub struct T2Reservation {
    bytes: u64,
}

/// T2 the process holds, counted in `STATS.t2_used` until dropped.
pub struct T2Charge {
    bytes: u64,
}

/// Reserves `bytes` of T2 if T2 in use stays within `limit`.
pub fn reserve_t2(bytes: u64, limit: u64) -> Option<T2Reservation> {
    STATS
        .t2_used
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|after| *after <= limit)
        })
        .ok()?;
    Some(T2Reservation { bytes })
}

impl T2Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The memory exists: the reservation becomes a charge.
    pub fn commit(self) -> T2Charge {
        stats::bump(&STATS.t2_allocs);
        self.commit_moved()
    }

    /// Memory that moved into T2 (live tiering) is there: a charge, not a new
    /// allocation.
    pub(super) fn commit_moved(self) -> T2Charge {
        let charge = T2Charge { bytes: self.bytes };
        std::mem::forget(self);
        STATS.t2_peak.fetch_max(stats::load(&STATS.t2_used), Ordering::Relaxed);
        charge
    }
}

impl Drop for T2Reservation {
    fn drop(&mut self) {
        stats::sub_in_use(&STATS.t2_used, self.bytes);
    }
}

impl T2Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `bytes` of it (at most all) as a charge of their own, for memory whose parts move
    /// apart (`movable`).
    pub fn split_off(&mut self, bytes: u64) -> T2Charge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        T2Charge { bytes }
    }
}

impl Drop for T2Charge {
    fn drop(&mut self) {
        stats::sub_in_use(&STATS.t2_used, self.bytes);
    }
}

/// The last T1 report to the module, sent at exit whatever the throttling.
pub fn final_report() {
    backend::flush_t1_report(Some(stats::load(&STATS.t1_used)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_count_at_once_and_undo_when_dropped() {
        let device = 63;
        let before = vram_in_use(device);
        let reservation = reserve_if(device, 100, |_| true).expect("fits");
        assert_eq!(vram_in_use(device), before + 100);
        drop(reservation);
        assert_eq!(vram_in_use(device), before);
        assert!(reserve_if(device, 100, |_| false).is_none());
        assert_eq!(vram_in_use(device), before);
        let mut charge = reserve_unchecked(50, device).commit();
        assert_eq!((vram_in_use(device), charge.bytes()), (before + 50, 50));
        charge.absorb(reserve_unchecked(30, device));
        assert_eq!((vram_in_use(device), charge.bytes()), (before + 80, 80));
        drop(charge);
        assert_eq!(vram_in_use(device), before);
    }

    #[test]
    fn t2_reservations_respect_the_limit() {
        let used = stats::load(&STATS.t2_used);
        assert!(reserve_t2(10, used + 9).is_none());
        let reservation = reserve_t2(10, used + 10).expect("fits");
        let charge = reservation.commit();
        assert!(stats::load(&STATS.t2_used) >= used + 10);
        drop(charge);
    }
}
