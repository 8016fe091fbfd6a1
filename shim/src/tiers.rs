//! The allocation engine shared by the runtime and driver hooks: placement, the T2 path
//! (backend memory registered with CUDA), split allocations (`split`: a VRAM head and a
//! host tail in one range), the registry of live allocations, freeing with CUDA's
//! synchronisation semantics, and stream-ordered frees.
//!
//! Lock order: `REGISTRY` before `VMM` before the T2 cache's (`t2cache`); no lock is held
//! across any CUDA call or backend call (the atfork prepare handler takes all three).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::lock::{const_mutex, Mutex};

use crate::backend::{self, Backend, BackendError, HostBuffer, KmodBackend, UserspaceBackend};
use crate::config::{BackendChoice, Placement, ReportMode};
use crate::cuda::{self, call};
use crate::ffi::*;
use crate::log::Mib;
use crate::split::{self, SplitAllocation};
use crate::state::{self, STATS};
use crate::t2cache;

/// A live allocation the shim made or saw.
enum Record {
    Vram { size: u64, device: CuDevice },
    Host(HostAllocation),
    Split(SplitAllocation),
}

/// Memory the shim made itself (rather than counted on its way to the driver), handed
/// to `release_now`/`release_after` when the program frees it.
pub enum Backed {
    /// T2: backend memory registered with CUDA.
    Host(HostAllocation),
    /// A VRAM head and a T2 tail under one address range.
    Split(SplitAllocation),
}

impl Backed {
    fn context(&self) -> CuContext {
        match self {
            Backed::Host(allocation) => allocation.context as CuContext,
            Backed::Split(split) => split.context(),
        }
    }

    /// The CUDA side of freeing, with the allocation's context current and the device
    /// past every use of the memory: a split range is unmapped and released; T2 memory
    /// needs nothing here (`finish_release` keeps it registered or unregisters it).
    fn detach(&self, driver: &cuda::DriverApi) {
        if let Backed::Split(split) = self {
            split.unmap(driver);
        }
    }

    /// The rest of freeing, after `detach`: memory and accounting.
    fn finish(self) {
        match self {
            Backed::Host(allocation) => finish_release(allocation),
            Backed::Split(split) => split.finish(),
        }
    }
}

/// A T2 allocation: backend memory registered with CUDA.
pub struct HostAllocation {
    buffer: HostBuffer,
    device_ptr: CuDevicePtr,
    /// The context the memory was registered in (as an address: contexts are opaque).
    context: usize,
}

struct PendingFree {
    event: usize,
    allocation: Backed,
}

struct Registry {
    live: BTreeMap<CuDevicePtr, Record>,
    /// Device pointers of recently freed `Backed` memory, to answer a double free.
    freed_host: VecDeque<CuDevicePtr>,
    /// Stream-ordered frees waiting for their event.
    pending: Vec<PendingFree>,
}

const FREED_HOST_REMEMBERED: usize = 4096;

impl Registry {
    /// `allocation`, just taken out of `live`, is being freed: its address is remembered
    /// to answer a double free.
    fn freed(&mut self, allocation: Backed, device_ptr: CuDevicePtr) -> Lookup {
        if self.freed_host.len() >= FREED_HOST_REMEMBERED {
            self.freed_host.pop_front();
        }
        self.freed_host.push_back(device_ptr);
        Lookup::Backed(allocation)
    }
}

static REGISTRY: Mutex<Registry> =
    const_mutex(Registry { live: BTreeMap::new(), freed_host: VecDeque::new(), pending: Vec::new() });

/// VMM allocations by handle: (size, device, on host).
static VMM: Mutex<BTreeMap<CuMemGenericAllocationHandle, (u64, CuDevice, bool)>> = const_mutex(BTreeMap::new());

static PENDING: AtomicUsize = AtomicUsize::new(0);

const TRACKED_DEVICES: usize = 64;
static VRAM_IN_USE: [AtomicU64; TRACKED_DEVICES] = [const { AtomicU64::new(0) }; TRACKED_DEVICES];

fn vram_counter(device: CuDevice) -> Option<&'static AtomicU64> {
    usize::try_from(device).ok().and_then(|index| VRAM_IN_USE.get(index))
}

/// Set by the program's first cuBLAS handle or matrix product (see `Config::place`).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The program has started computing: the VRAM reserve opens to its allocations.
pub fn note_running() {
    if !RUNNING.load(Ordering::Relaxed) {
        RUNNING.store(true, Ordering::Relaxed);
        debug!("the program computes (cuBLAS): the VRAM reserve is open to allocations from now on");
    }
}

/// Where an allocation of `size` on `device` goes now.
pub fn placement(size: u64, device: CuDevice) -> Placement {
    let Some(physical) = cuda::physical_vram(device) else {
        // Unknown device size: let the driver decide; its out-of-memory still spills.
        return Placement::Vram;
    };
    let in_use = vram_counter(device).map_or(0, |counter| counter.load(Ordering::Relaxed));
    state::config().place(size, in_use, physical, RUNNING.load(Ordering::Relaxed))
}

/// Counts VRAM the shim itself holds (staging scratch) against the device's budget.
pub fn count_own_vram(size: u64, device: CuDevice) {
    if let Some(counter) = vram_counter(device) {
        counter.fetch_add(size, Ordering::Relaxed);
    }
    STATS.add_t1(size);
}

/// Gives back what `count_own_vram` counted.
pub fn uncount_own_vram(size: u64, device: CuDevice) {
    forget_vram(size, device);
}

/// How many bytes of [`device_ptr`, `device_ptr + len`) lie in T2 memory (a T2
/// allocation, or the host tail of a split one).
pub fn t2_bytes(device_ptr: CuDevicePtr, len: u64) -> u64 {
    if STATS.t2_used.load(Ordering::Relaxed) == 0 || len == 0 {
        return 0;
    }
    let end = device_ptr.saturating_add(len);
    let overlap = |start: u64, stop: u64| stop.min(end).saturating_sub(start.max(device_ptr));
    let registry = REGISTRY.lock();
    // The allocation starting at or before the range, then any that start inside it.
    let before = registry.live.range(..=device_ptr).next_back();
    let inside = registry.live.range(device_ptr.saturating_add(1)..end);
    before
        .into_iter()
        .chain(inside)
        .map(|(base, record)| match record {
            Record::Host(allocation) => overlap(*base, base.saturating_add(allocation.buffer.len as u64)),
            Record::Split(split) => {
                let (tail, tail_end) = split.tail_range();
                overlap(tail, tail_end)
            }
            Record::Vram { .. } => 0,
        })
        .sum()
}

/// Whether any byte of [`device_ptr`, `device_ptr + len`) lies in T2 memory.
pub fn touches_t2(device_ptr: CuDevicePtr, len: u64) -> bool {
    t2_bytes(device_ptr, len) != 0
}

/// For tools and benchmarks that `dlsym` it: how many bytes of the device range
/// [`device_ptr`, `device_ptr + len`) the shim placed in T2. Unlike the pointer's memory
/// type, this sees the host tail of a split allocation (one VMM range, "device" memory
/// to the driver).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn greenboost_shim_t2_bytes(device_ptr: CuDevicePtr, len: u64) -> u64 {
    t2_bytes(device_ptr, len)
}

/// Records a successful VRAM allocation.
pub fn note_vram(device_ptr: CuDevicePtr, size: u64, device: CuDevice) {
    if let Some(counter) = vram_counter(device) {
        counter.fetch_add(size, Ordering::Relaxed);
    }
    STATS.add_t1(size);
    REGISTRY.lock().live.insert(device_ptr, Record::Vram { size, device });
    report_vram(device);
    debug!("T1 {:#x}: {} on device {}", device_ptr, Mib(size), device);
}

/// Reserves VRAM for the head of a split allocation: as much as is left under the
/// placement limit, in whole `granularity` units, at most `most` bytes. It is counted in
/// the device's VRAM counter at once, so that a concurrent allocation sees it taken.
/// `None` when not one unit is left.
pub fn reserve_vram_head(device: CuDevice, granularity: u64, most: u64) -> Option<u64> {
    let (config, physical) = (state::config(), cuda::physical_vram(device)?);
    let running = RUNNING.load(Ordering::Relaxed);
    let counter = vram_counter(device)?;
    let room = |in_use: u64| config.split_head(in_use, physical, running, granularity, most);
    let before = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |in_use| {
            let head = room(in_use);
            (head > 0).then(|| in_use + head)
        })
        .ok()?;
    Some(room(before))
}

/// Gives back VRAM that `reserve_vram_head` reserved for a split that was not made.
pub fn unreserve_vram(device: CuDevice, size: u64) {
    if let Some(counter) = vram_counter(device) {
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(size)));
    }
}

/// Counts the head reserved by `reserve_vram_head` as T1 in use, once the split is made.
pub fn count_vram_head(size: u64, device: CuDevice) {
    STATS.add_t1(size);
    report_vram(device);
}

/// VRAM counted in use (a VRAM allocation, a split head, staging scratch) is free again.
pub fn forget_vram(size: u64, device: CuDevice) {
    unreserve_vram(device, size);
    STATS.sub_t1(size);
    report_vram(device);
}

/// Tells the module (kmod backend) the process's VRAM use; opens the backend at the
/// first allocation so that the module's stats show T1 even before anything spills.
fn report_vram(device: CuDevice) {
    if let Some(backend) = backend() {
        let budget = cuda::physical_vram(device).map_or(0, |physical| state::config().budget(physical));
        backend.report_t1(STATS.t1_used.load(Ordering::Relaxed), budget, false);
    }
}

/// The last T1 report, sent at exit whatever the throttling.
pub fn final_report() {
    if let Some(BackendSlot::Kmod(kmod)) = BACKEND.get() {
        kmod.final_report(STATS.t1_used.load(Ordering::Relaxed));
    }
}

enum BackendSlot {
    Kmod(KmodBackend),
    Userspace(UserspaceBackend),
    Unavailable,
}

static BACKEND: OnceLock<BackendSlot> = OnceLock::new();

fn backend() -> Option<&'static dyn Backend> {
    let slot = BACKEND.get_or_init(|| {
        let choice = state::config().backend;
        if choice != BackendChoice::Userspace {
            match KmodBackend::open() {
                Ok(kmod) => {
                    info!("T2 backend: kmod (/dev/greenboost)");
                    return BackendSlot::Kmod(kmod);
                }
                Err(reason) if choice == BackendChoice::Kmod => {
                    warn!("GREENBOOST_BACKEND=kmod but {reason}; no T2: allocations stay in VRAM while it lasts");
                    return BackendSlot::Unavailable;
                }
                Err(reason) => info!("{reason}; T2 backend: userspace"),
            }
        } else {
            info!("T2 backend: userspace");
        }
        BackendSlot::Userspace(UserspaceBackend)
    });
    match slot {
        BackendSlot::Kmod(kmod) => Some(kmod),
        BackendSlot::Userspace(userspace) => Some(userspace),
        BackendSlot::Unavailable => None,
    }
}

pub fn backend_name() -> &'static str {
    match BACKEND.get() {
        None => "not used",
        Some(BackendSlot::Kmod(_)) => "kmod",
        Some(BackendSlot::Userspace(_)) => "userspace",
        Some(BackendSlot::Unavailable) => "unavailable",
    }
}

/// (backend code, DMABUF_FD import result, OPAQUE_FD import result) for the stats.
pub fn backend_summary() -> (u32, i32, i32) {
    let code = match BACKEND.get() {
        None => 0,
        Some(BackendSlot::Kmod(_)) => 1,
        Some(BackendSlot::Userspace(_)) => 2,
        Some(BackendSlot::Unavailable) => 3,
    };
    (
        code,
        backend::IMPORT_DMABUF_RESULT.load(Ordering::Relaxed),
        backend::IMPORT_OPAQUE_RESULT.load(Ordering::Relaxed),
    )
}

/// T2 capacity: GREENBOOST_T2_CAP, else the backend's own.
pub fn t2_capacity() -> u64 {
    state::config().t2_cap.unwrap_or_else(|| backend().map_or(0, |backend| backend.default_cap()))
}

/// Reserves `bytes` of T2 capacity; false when the cap would be passed.
fn reserve_t2(bytes: u64, cap: u64) -> bool {
    STATS
        .t2_used
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|after| *after <= cap))
        .is_ok()
}

/// Takes T2 capacity for `bytes`, waiting for pending stream-ordered frees if that is
/// what it takes. Counts the allocation on success.
pub fn take_t2_capacity(bytes: u64) -> bool {
    let cap = t2_capacity();
    // Cached buffers are pinned RAM too: they count against the cap, until an
    // allocation needs their room (the cache goes before anything is refused).
    if !reserve_t2(bytes, cap.saturating_sub(t2cache::cached_bytes())) {
        reclaim(true);
        t2cache::drain().into_iter().for_each(unregister_and_release);
        if !reserve_t2(bytes, cap.saturating_sub(t2cache::cached_bytes())) {
            info!("T2 cap of {} reached ({} in use)", Mib(cap), Mib(STATS.t2_used.load(Ordering::Relaxed)));
            return false;
        }
    }
    let now = STATS.t2_used.load(Ordering::Relaxed);
    STATS.t2_peak.fetch_max(now, Ordering::Relaxed);
    STATS.t2_allocs.fetch_add(1, Ordering::Relaxed);
    true
}

/// Undoes `take_t2_capacity` for an allocation that was not made after all.
pub fn give_back_t2_capacity(bytes: u64) {
    STATS.sub_t2(bytes);
    STATS.t2_allocs.fetch_sub(1, Ordering::Relaxed);
}

/// Why T2 could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFailure {
    /// T2 is full: the cap, or the module / the kernel refused for lack of memory.
    Exhausted,
    /// Something else failed (no context, no backend, registration refused).
    Internal,
}

/// Allocates `size` bytes of T2 for `device` in the current context and returns the
/// device pointer. Never panics, never leaves anything half-registered.
pub fn alloc_host(size: u64, device: CuDevice) -> Result<CuDevicePtr, HostFailure> {
    reclaim(false);
    let driver = cuda::api();
    let context = driver.current_context().ok_or(HostFailure::Internal)?;
    let backend = backend().ok_or(HostFailure::Internal)?;
    let len = usize::try_from(size).ok().and_then(|size| backend::round_to_chunk(size.max(1))).ok_or(HostFailure::Exhausted)?;
    if let Some(device_ptr) = reuse_cached(len, context) {
        return Ok(device_ptr);
    }
    if !take_t2_capacity(len as u64) {
        return Err(HostFailure::Exhausted);
    }
    let give_back_capacity = || give_back_t2_capacity(len as u64);
    let numa_node = driver.host_numa_node(device);
    // The module or the kernel may be short of memory that the T2 cache holds: the
    // cache goes before the allocation is refused.
    let allocated = match backend.alloc(len, numa_node, driver) {
        Err(BackendError::OutOfMemory(_)) if t2cache::cached_bytes() > 0 => {
            t2cache::drain().into_iter().for_each(unregister_and_release);
            backend.alloc(len, numa_node, driver)
        }
        allocated => allocated,
    };
    let buffer = match allocated {
        Ok(buffer) => buffer,
        Err(error) => {
            give_back_capacity();
            return Err(match error {
                BackendError::OutOfMemory(errno) => {
                    info!("{} backend: no memory for {} (errno {})", backend.name(), Mib(len as u64), errno);
                    HostFailure::Exhausted
                }
                BackendError::Failed(errno) => {
                    warn!("{} backend failed to allocate {} (errno {})", backend.name(), Mib(len as u64), errno);
                    HostFailure::Internal
                }
            });
        }
    };
    let registering = std::time::Instant::now();
    let status = call!(driver, mem_host_register(buffer.ptr(), buffer.len, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    if status != CUDA_SUCCESS {
        warn!("cuMemHostRegister of {} failed (CUDA error {})", Mib(buffer.len as u64), status);
        backend.release(buffer);
        give_back_capacity();
        return Err(HostFailure::Internal);
    }
    let mut device_ptr: CuDevicePtr = 0;
    let status = call!(driver, mem_host_get_device_pointer(&mut device_ptr, buffer.ptr(), 0));
    if status != CUDA_SUCCESS || device_ptr == 0 {
        warn!("cuMemHostGetDevicePointer failed (CUDA error {})", status);
        call!(driver, mem_host_unregister(buffer.ptr()));
        backend.release(buffer);
        give_back_capacity();
        return Err(HostFailure::Internal);
    }
    debug!(
        "T2 {:#x}: {} ({} backend, buffer {}) for device {}; register {:.1} ms",
        device_ptr,
        Mib(size),
        backend.name(),
        buffer.id,
        device,
        backend::millis(registering.elapsed())
    );
    Ok(note_host(HostAllocation { buffer, device_ptr, context: context as usize }))
}

/// Records a live T2 allocation and returns its device pointer.
fn note_host(allocation: HostAllocation) -> CuDevicePtr {
    let device_ptr = allocation.device_ptr;
    let mut registry = REGISTRY.lock();
    registry.freed_host.retain(|freed| *freed != device_ptr);
    registry.live.insert(device_ptr, Record::Host(allocation));
    device_ptr
}

/// A T2 allocation of `len` bytes from the T2 cache (t2cache.rs), when it holds one of
/// that length registered in `context` and the driver still knows the registration (a
/// context reset would have dropped it): no map, populate or register.
fn reuse_cached(len: usize, context: CuContext) -> Option<CuDevicePtr> {
    let allocation = t2cache::take(len as u64, context as usize)?;
    let driver = cuda::api();
    let mut device_ptr: CuDevicePtr = 0;
    let status = call!(driver, mem_host_get_device_pointer(&mut device_ptr, allocation.buffer.ptr(), 0));
    if status != CUDA_SUCCESS || device_ptr != allocation.device_ptr {
        info!("a cached T2 buffer is no longer registered (CUDA error {}): released", status);
        unregister_and_release(allocation);
        return None;
    }
    if !take_t2_capacity(len as u64) {
        unregister_and_release(allocation);
        return None;
    }
    debug!("T2 {:#x}: {} reused from the T2 cache", device_ptr, Mib(len as u64));
    Some(note_host(allocation))
}

/// Records a split allocation and returns its device pointer.
fn note_split(split: SplitAllocation) -> CuDevicePtr {
    let device_ptr = split.base();
    let mut registry = REGISTRY.lock();
    registry.freed_host.retain(|freed| *freed != device_ptr);
    registry.live.insert(device_ptr, Record::Split(split));
    device_ptr
}

/// What a pointer passed to a free function is.
enum Lookup {
    Backed(Backed),
    Vram { size: u64, device: CuDevice },
    /// Memory the shim made that was already freed: answer invalid-value, touch nothing.
    DoubleFree,
    /// Not the shim's: the real free function answers as CUDA does.
    Unknown,
}

/// Removes `device_ptr` from the registry (VRAM accounting is updated here; memory the
/// shim made is returned for `release_now`/`release_after`).
fn take(device_ptr: CuDevicePtr) -> Lookup {
    if device_ptr == 0 {
        return Lookup::Unknown;
    }
    let mut registry = REGISTRY.lock();
    match registry.live.remove(&device_ptr) {
        Some(Record::Host(allocation)) => registry.freed(Backed::Host(allocation), device_ptr),
        Some(Record::Split(split)) => registry.freed(Backed::Split(split), device_ptr),
        Some(Record::Vram { size, device }) => {
            drop(registry);
            forget_vram(size, device);
            Lookup::Vram { size, device }
        }
        None if registry.freed_host.contains(&device_ptr) => {
            drop(registry);
            // The address may since have been given to memory the shim did not see
            // allocated (an unhooked allocation function): then it is not a double free.
            if cuda::api().is_allocation(device_ptr) {
                REGISTRY.lock().freed_host.retain(|freed| *freed != device_ptr);
                Lookup::Unknown
            } else {
                Lookup::DoubleFree
            }
        }
        None => Lookup::Unknown,
    }
}

/// Puts a VRAM record back after the real free refused it (the memory is still live).
fn restore_vram(device_ptr: CuDevicePtr, size: u64, device: CuDevice) {
    note_vram(device_ptr, size, device);
    STATS.t1_allocs.fetch_sub(1, Ordering::Relaxed);
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
    reclaim(false);
    match take(device_ptr) {
        Lookup::Backed(allocation) => {
            release(allocation);
            success
        }
        Lookup::DoubleFree => invalid_value,
        Lookup::Vram { size, device } => {
            let status = real();
            if status != success {
                restore_vram(device_ptr, size, device);
            }
            status
        }
        Lookup::Unknown => real(),
    }
}

/// Frees memory the shim made as cudaFree/cuMemFree free device memory: after the
/// device has finished all work (cudaFree synchronises).
pub fn release_now(allocation: Backed) {
    let driver = cuda::api();
    driver.with_context(allocation.context(), || {
        call!(driver, ctx_synchronize());
        allocation.detach(driver);
    });
    allocation.finish();
}

/// The device is done with `allocation`: it goes to the T2 cache, still registered, or
/// (cache off or full of newer buffers) is unregistered and given back to the backend.
fn finish_release(allocation: HostAllocation) {
    let len = allocation.buffer.len as u64;
    debug!("T2 {:#x}: {} freed", allocation.device_ptr, Mib(len));
    STATS.sub_t2(len);
    let context = allocation.context;
    t2cache::keep(len, context, allocation).into_iter().for_each(unregister_and_release);
}

fn unregister_and_release(allocation: HostAllocation) {
    let driver = cuda::api();
    driver.with_context(allocation.context as CuContext, || {
        call!(driver, mem_host_unregister(allocation.buffer.ptr()));
    });
    if let Some(backend) = backend() {
        backend.release(allocation.buffer);
    }
}

/// Frees memory the shim made when `stream` reaches this point: an event is recorded on
/// the stream and the memory is released by a later shim call once the event has
/// completed (no CUDA call from a host callback). Without an event, the stream is
/// synchronised now.
pub fn release_after(allocation: Backed, stream: CuStream) {
    let driver = cuda::api();
    let event = driver.with_context(allocation.context(), || {
        let mut event: CuEvent = ptr::null_mut();
        if call!(driver, event_create(&mut event, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS {
            return None;
        }
        if call!(driver, event_record(event, stream)) != CUDA_SUCCESS {
            call!(driver, event_destroy(event));
            return None;
        }
        Some(event)
    });
    match event {
        Some(event) => {
            STATS.deferred_frees.fetch_add(1, Ordering::Relaxed);
            REGISTRY.lock().pending.push(PendingFree { event: event as usize, allocation });
            PENDING.fetch_add(1, Ordering::Release);
            start_reclaimer();
        }
        None => {
            driver.with_context(allocation.context(), || {
                call!(driver, stream_synchronize(stream));
                allocation.detach(driver);
            });
            allocation.finish();
        }
    }
}

static RECLAIMER_STARTED: AtomicBool = AtomicBool::new(false);

/// Starts (once per process) the thread that releases stream-ordered frees when their
/// stream passes them, so that pinned memory goes back even if the program makes no
/// further CUDA call. It polls with cuEventQuery through `reclaim` (never a CUDA call
/// from a host callback); without it, later shim calls still reclaim.
fn start_reclaimer() {
    if RECLAIMER_STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("greenboost-reclaim".into()).spawn(|| loop {
        if PENDING.load(Ordering::Acquire) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        } else {
            reclaim(false);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    if let Err(error) = spawned {
        info!("no reclaim thread ({error}); stream-ordered frees are released by later CUDA calls");
    }
}

/// Releases stream-ordered frees whose stream has passed them; with `wait`, waits for
/// all of them (when T2 is short).
pub fn reclaim(wait: bool) {
    if let Some(BackendSlot::Kmod(kmod)) = BACKEND.get() {
        kmod.flush_t1_report();
    }
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let driver = cuda::api();
    // Events are queried outside the lock: no CUDA call runs under it (a fork's prepare
    // handler takes it after the driver's own handlers have taken the driver's locks).
    let pending = std::mem::take(&mut REGISTRY.lock().pending);
    // Queried in the allocation's context (the reclaim thread has none of its own); an
    // error other than "not ready" means the stream's work is dead, so the memory can go.
    let (ready, waiting): (Vec<_>, Vec<_>) = pending.into_iter().partition(|pending| {
        wait || driver.with_context(pending.allocation.context(), || {
            call!(driver, event_query(pending.event as CuEvent)) != CUDA_ERROR_NOT_READY
        })
    });
    {
        let mut registry = REGISTRY.lock();
        registry.pending.extend(waiting);
        PENDING.store(registry.pending.len(), Ordering::Release);
    }
    for pending in ready {
        driver.with_context(pending.allocation.context(), || {
            if wait {
                call!(driver, event_synchronize(pending.event as CuEvent));
            }
            call!(driver, event_destroy(pending.event as CuEvent));
            pending.allocation.detach(driver);
        });
        pending.allocation.finish();
    }
}

/// Records a VMM allocation for accounting.
pub fn note_vmm(handle: CuMemGenericAllocationHandle, size: u64, device: CuDevice, on_host: bool) {
    if on_host {
        STATS.vmm_host.fetch_add(1, Ordering::Relaxed);
    } else {
        if let Some(counter) = vram_counter(device) {
            counter.fetch_add(size, Ordering::Relaxed);
        }
        STATS.add_t1(size);
    }
    VMM.lock().insert(handle, (size, device, on_host));
    if !on_host {
        report_vram(device);
    }
}

/// Forgets a VMM allocation released by the program.
pub fn forget_vmm(handle: CuMemGenericAllocationHandle) {
    let Some((size, device, on_host)) = VMM.lock().remove(&handle) else { return };
    if on_host {
        STATS.sub_t2(size);
    } else {
        forget_vram(size, device);
    }
}

/// Puts a VMM record back after the real cuMemRelease refused the handle.
pub fn restore_vmm(handle: CuMemGenericAllocationHandle, record: (u64, CuDevice, bool)) {
    let (size, device, on_host) = record;
    if on_host {
        let _ = reserve_t2(size, u64::MAX);
    } else if let Some(counter) = vram_counter(device) {
        counter.fetch_add(size, Ordering::Relaxed);
        STATS.t1_used.fetch_add(size, Ordering::Relaxed);
    }
    VMM.lock().insert(handle, record);
}

pub fn vmm_record(handle: CuMemGenericAllocationHandle) -> Option<(u64, CuDevice, bool)> {
    VMM.lock().get(&handle).copied()
}

/// pthread_atfork prepare: hold the locks so that the child does not inherit them
/// mid-update.
pub extern "C" fn before_fork() {
    std::mem::forget(REGISTRY.lock());
    std::mem::forget(VMM.lock());
    t2cache::before_fork();
}

/// pthread_atfork parent: release what `before_fork` took.
pub extern "C" fn after_fork_in_parent() {
    t2cache::after_fork_in_parent();
    // SAFETY: `before_fork` locked both mutexes on this thread and forgot the guards.
    unsafe {
        VMM.force_unlock();
        REGISTRY.force_unlock();
    }
}

/// pthread_atfork child: the locks are reset (see `lock`).
/// A child of a process that already used CUDA cannot use CUDA (the driver answers
/// errors), so the shim steps aside and lets the real functions answer; its records
/// stay (kmod T2 mappings are MAP_SHARED and remain valid in the child). A child forked
/// before any CUDA use keeps the shim active.
pub extern "C" fn after_fork_in_child() {
    // SAFETY: this thread holds both locks (taken in `before_fork`) and is the only
    // thread of the child.
    unsafe {
        VMM.raw().reset_in_child();
        REGISTRY.raw().reset_in_child();
    }
    t2cache::after_fork_in_child();
    // The reclaim thread stayed in the parent.
    RECLAIMER_STARTED.store(false, Ordering::Release);
    if STATS.t1_allocs.load(Ordering::Relaxed) != 0 || STATS.t2_allocs.load(Ordering::Relaxed) != 0 {
        state::step_aside_after_fork();
    }
    state::counters_start_afresh_in_child();
}

/// Answers with the out-of-memory counter bumped.
pub fn out_of_memory<T>(answer: T) -> T {
    STATS.oom_returned.fetch_add(1, Ordering::Relaxed);
    answer
}

/// (free, total) as the program should see them, from the driver's real figures.
pub fn reported(real_free: u64, real_total: u64) -> (u64, u64) {
    let config = state::config();
    let (t2_cap, t2_used) = match config.report {
        ReportMode::Physical => (0, 0),
        ReportMode::Combined => (t2_capacity(), STATS.t2_used.load(Ordering::Relaxed)),
    };
    config.report(real_free, real_total, t2_cap, t2_used)
}

/// After a successful real cuMemGetInfo/cudaMemGetInfo: the free and total figures it
/// stored become the ones the program should see.
///
/// # Safety
/// `free` and `total` are each null or valid for reads and writes.
pub unsafe fn report_mem_info(free: *mut usize, total: *mut usize) {
    if free.is_null() || total.is_null() {
        return;
    }
    // SAFETY: per the function contract; the real call filled both.
    unsafe {
        let (shown_free, shown_total) = reported(*free as u64, *total as u64);
        *free = shown_free as usize;
        *total = shown_total as usize;
    }
}

/// How an allocation attempt ended.
pub enum Allocated {
    Vram,
    /// Memory the shim made (T2, or split between VRAM and T2) at this address.
    Host(CuDevicePtr),
    /// The real allocation failed with this status (not out-of-memory): pass it on.
    Failed(c_int),
    OutOfMemory,
}

/// The placement procedure shared by every allocation hook: VRAM when it fits the
/// budget (the real allocation, `vram`), T2 otherwise or when the driver answers
/// `oom_status`; a large allocation the budget sends to T2 is split when VRAM is left
/// under the budget (`split`); `prepare_host` makes a context current for the T2 and
/// split paths. When T2 is
/// exhausted the answer is out-of-memory; when T2 fails for another reason, an
/// allocation the budget sent to T2 is tried in VRAM after all (the real function).
pub fn allocate(
    size: u64,
    device: CuDevice,
    oom_status: c_int,
    vram: impl FnOnce() -> Result<CuDevicePtr, c_int>,
    prepare_host: impl FnOnce() -> bool,
) -> Allocated {
    reclaim(false);
    let mut vram = Some(vram);
    let mut after_oom = false;
    if placement(size, device) == Placement::Vram {
        if let Some(vram) = vram.take() {
            match vram() {
                Ok(device_ptr) => {
                    note_vram(device_ptr, size, device);
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
    let host_ready = prepare_host();
    // After a driver out-of-memory the VRAM the budget promised is not there: no head.
    if host_ready && !after_oom {
        if let Some(split) = split::create(size, device) {
            return Allocated::Host(note_split(split));
        }
    }
    let failure = if host_ready { alloc_host(size, device) } else { Err(HostFailure::Internal) };
    match failure {
        Ok(device_ptr) => {
            if after_oom {
                STATS.t2_after_vram_oom.fetch_add(1, Ordering::Relaxed);
            }
            Allocated::Host(device_ptr)
        }
        Err(HostFailure::Internal) if vram.is_some() => match vram.map(|vram| vram()) {
            Some(Ok(device_ptr)) => {
                info!("T2 unavailable: {} placed in VRAM beyond the budget", Mib(size));
                note_vram(device_ptr, size, device);
                Allocated::Vram
            }
            Some(Err(status)) if status != oom_status => Allocated::Failed(status),
            _ => out_of_memory(Allocated::OutOfMemory),
        },
        Err(_) => out_of_memory(Allocated::OutOfMemory),
    }
}
