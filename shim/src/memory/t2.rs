//! The T2 path: backend memory registered with CUDA (cuMemHostRegister DEVICEMAP |
//! PORTABLE, then cuMemHostGetDevicePointer), the process's T2 cache of freed buffers
//! that are still registered, and releasing (to the cache, or unregistered and given
//! back to the backend). Never leaves anything half-registered.

use std::time::Instant;

use crate::backend;
use crate::backend::t2_buffer::{self, BackendError, HostBuffer};
use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget::T2Charge;
use crate::memory::t2cache::T2Cache;
use crate::rules::config;
use crate::sys::lock::ForkLock;
use crate::sys::log::Mib;

/// Backend memory registered with CUDA in `context`, readable by the device at
/// `device_ptr`.
///
/// # Invariants
/// `buffer` stays mapped and registered until `unregister_and_release`.
pub struct Registered {
    buffer: HostBuffer,
    device_ptr: CuDevicePtr,
    context: Context,
}

/// A live T2 allocation: registered memory and the T2 it is charged as.
pub struct T2Allocation {
    registered: Registered,
    charge: T2Charge,
}

static CACHE: T2Cache<Registered> = T2Cache::new();

/// Why T2 could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum T2Failure {
    /// T2 is full: the cap, or the module / the kernel refused for lack of memory.
    Exhausted,
    /// Something else failed (no context, no backend, registration refused).
    Internal,
}

/// The length a T2 allocation of `size` bytes takes: whole 2 MiB chunks.
pub fn rounded_len(size: u64) -> Option<u64> {
    let size = usize::try_from(size).ok()?;
    t2_buffer::round_to_chunk(size.max(1)).map(|len| len as u64)
}

/// Bytes held by the T2 cache.
pub(super) fn cached_bytes() -> u64 {
    CACHE.bytes()
}

/// A cached registration of exactly `len` bytes in `context`, if the driver still knows
/// it (a context reset would have dropped it): no map, populate or register.
pub fn take_cached(len: u64, context: Context) -> Option<Registered> {
    let registered = CACHE.take(len, context)?;
    match cuda::host_device_pointer(registered.buffer.ptr()) {
        Ok(device_ptr) if device_ptr == registered.device_ptr => {
            debug!("T2 {:#x}: {} reused from the T2 cache", device_ptr, Mib(len));
            Some(registered)
        }
        answer => {
            info!("a cached T2 buffer is no longer registered ({:?}): released", answer.err());
            unregister_and_release(registered);
            None
        }
    }
}

/// Empties the T2 cache (its pinned RAM goes back to the backend).
pub(super) fn drain_cache() {
    CACHE.drain().into_iter().for_each(unregister_and_release);
}

/// New T2 memory of `len` bytes (chunk-rounded) for `device`, registered in `context`.
pub fn register_new(len: u64, device: CuDevice, context: Context) -> Result<Registered, T2Failure> {
    let backend = backend::get().ok_or(T2Failure::Internal)?;
    let len_bytes = usize::try_from(len).map_err(|_| T2Failure::Exhausted)?;
    let numa_node = cuda::host_numa_node(device);
    // Under pressure the cache's pinned pages go back first, before the module is asked
    // for more (and before anyone demotes a buffer to T3 for want of RAM).
    if cached_bytes() > 0 && backend.memory_pressure() {
        info!("memory pressure: the T2 cache gives back {}", Mib(cached_bytes()));
        drain_cache();
    }
    // The module or the kernel may be short of memory that the T2 cache holds: the
    // cache goes before the allocation is refused.
    let allocated = match backend.alloc(len_bytes, numa_node) {
        Err(BackendError::OutOfMemory(_)) if cached_bytes() > 0 => {
            drain_cache();
            backend.alloc(len_bytes, numa_node)
        }
        allocated => allocated,
    };
    let buffer = allocated.map_err(|error| match error {
        BackendError::OutOfMemory(errno) => {
            info!("{} backend: no memory for {} (errno {})", backend.name(), Mib(len), errno);
            T2Failure::Exhausted
        }
        BackendError::Failed(errno) => {
            warn!("{} backend failed to allocate {} (errno {})", backend.name(), Mib(len), errno);
            T2Failure::Internal
        }
    })?;
    let registering = Instant::now();
    // SAFETY: `buffer` is a live mapping of `buffer.len` bytes that stays mapped until
    // `unregister_and_release` unregisters it first.
    let status = cuda::with_context(context, || unsafe { cuda::host_register(buffer.ptr(), buffer.len) });
    if status != CuResult::SUCCESS {
        warn!("cuMemHostRegister of {} failed (CUDA error {})", Mib(buffer.len as u64), status.0);
        backend.release(buffer);
        return Err(T2Failure::Internal);
    }
    let device_ptr = match cuda::host_device_pointer(buffer.ptr()) {
        Ok(device_ptr) => device_ptr,
        Err(error) => {
            warn!("cuMemHostGetDevicePointer failed ({})", error);
            // SAFETY: registered just above; no work was given the memory.
            unsafe { cuda::host_unregister(buffer.ptr()) };
            backend.release(buffer);
            return Err(T2Failure::Internal);
        }
    };
    debug!(
        "T2 {:#x}: {} ({} backend, buffer {}) for device {}; register {:.1} ms",
        device_ptr,
        Mib(len),
        backend.name(),
        buffer.id,
        device,
        registering.elapsed().as_secs_f64() * 1e3
    );
    Ok(Registered { buffer, device_ptr, context })
}

impl Registered {
    pub fn len(&self) -> u64 {
        self.buffer.len as u64
    }

    /// The memory becomes a live allocation charged as `charge`.
    pub fn charged(self, charge: T2Charge) -> T2Allocation {
        T2Allocation { registered: self, charge }
    }
}

impl T2Allocation {
    pub fn device_ptr(&self) -> CuDevicePtr {
        self.registered.device_ptr
    }

    pub fn context(&self) -> Context {
        self.registered.context
    }

    pub fn len(&self) -> u64 {
        self.registered.len()
    }

    /// The device is done with the memory: its charge goes, and the memory to the T2
    /// cache, still registered, or (cache off or full of newer buffers) back to the
    /// backend.
    pub fn release(self) {
        let T2Allocation { registered, charge } = self;
        debug!("T2 {:#x}: {} freed", registered.device_ptr, Mib(registered.len()));
        drop(charge);
        let (len, context) = (registered.len(), registered.context);
        // Under pressure nothing is kept, and what is kept goes (asked only when the
        // cache is on: with it off the buffer goes back below anyway).
        let limit = config::get().t2_cache;
        if limit > 0 && backend::get().is_some_and(|b| b.memory_pressure()) {
            unregister_and_release(registered);
            drain_cache();
            return;
        }
        CACHE.keep(len, context, registered, limit).into_iter().for_each(unregister_and_release);
    }
}

/// Unregisters and gives the memory back to the backend.
pub fn unregister_and_release(registered: Registered) {
    let Registered { buffer, context, .. } = registered;
    // SAFETY: registered by `register_new`; released allocations and cached buffers
    // have no device work left (the free paths waited for it).
    cuda::with_context(context, || unsafe { cuda::host_unregister(buffer.ptr()) });
    if let Some(backend) = backend::get() {
        backend.release(buffer);
    }
}

/// The T2 cache's lock, for the fork handlers (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    CACHE.fork_lock()
}

/// In the child of a fork: the cache is forgotten (see `T2Cache::forget_in_child`).
pub fn forget_cache_in_child() {
    CACHE.forget_in_child();
}
