//! Freeing memory the shim made, with CUDA's synchronisation semantics: `now` (cudaFree:
//! after the device has finished all work) or `after` a stream passes the free
//! (cudaFreeAsync: an event, polled by a background thread and by later shim calls,
//! never a CUDA call from a host callback).
//!
//! Lock: `PENDING` is never held with another lock nor across a CUDA call.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::backend;
use crate::cuda;
use crate::cuda::ffi::*;
use crate::memory::budget::{self, T2Reservation};
use crate::memory::registry::Backed;
use crate::memory::t2;
use crate::sys::lock::{const_mutex, ForkLock, Mutex};
use crate::sys::lock_order::rank;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

struct PendingFree {
    event: Event,
    allocation: Backed,
}

/// Stream-ordered frees waiting for their event.
static PENDING: Mutex<rank::Pending, Vec<PendingFree>> = const_mutex(Vec::new());
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Frees `allocation` as cudaFree/cuMemFree free device memory: after the device has
/// finished all work (cudaFree synchronises).
pub fn now(allocation: Backed) {
    cuda::with_context(allocation.context(), || {
        cuda::ctx_synchronize();
        allocation.detach();
    });
    allocation.finish();
}

/// Frees `allocation` when `stream` reaches this point: an event is recorded on the
/// stream and the memory is released by a later `reclaim` once the event has completed.
/// Without an event, the stream is synchronised now.
pub fn after(allocation: Backed, stream: Stream) {
    let event = cuda::with_context(allocation.context(), || {
        let event = cuda::event_create().ok()?;
        if cuda::event_record(event, stream) != CuResult::SUCCESS {
            cuda::event_destroy(event);
            return None;
        }
        Some(event)
    });
    match event {
        Some(event) => {
            stats::bump(&STATS.deferred_frees);
            PENDING.lock().push(PendingFree { event, allocation });
            PENDING_COUNT.fetch_add(1, Ordering::Release);
            start_reclaimer();
        }
        None => {
            cuda::with_context(allocation.context(), || {
                cuda::stream_synchronize(stream);
                allocation.detach();
            });
            allocation.finish();
        }
    }
}

/// T2 capacity for `bytes`, waiting for pending stream-ordered frees and emptying the
/// T2 cache first if that is what it takes. Cached buffers are pinned RAM too: they
/// count against the cap until an allocation needs their room.
pub fn reserve_t2(bytes: u64) -> Option<T2Reservation> {
    if let Some(reservation) = reserve_t2_now(bytes) {
        return Some(reservation);
    }
    reclaim(true);
    t2::drain_cache();
    let reservation = reserve_t2_now(bytes);
    if reservation.is_none() {
        info!("T2 cap of {} reached ({} in use)", Mib(budget::t2_capacity()), Mib(stats::load(&STATS.t2_used)));
    }
    reservation
}

/// T2 capacity for `bytes` of host memory the driver allocates, not the backend (a split
/// allocation's tail): besides the cap, only where the host can give it and keep its
/// reserve, as the backend would (it never goes to swap); `None` otherwise, and the
/// backend's T2 is asked instead.
pub fn reserve_driver_host_t2(bytes: u64) -> Option<T2Reservation> {
    if !backend::host_has_room(bytes) {
        return None;
    }
    reserve_t2(bytes)
}

/// The host RAM many moves to T2 at once may still take (a tick's), read at the first of
/// them, not once per part: managed memory moved to the host takes pages the driver
/// allocates, which never go to swap, and a host short of RAM kills processes instead of
/// refusing them. A move the host cannot take keeps its part in VRAM; a process that
/// wanted that VRAM gets the out-of-memory error it would get without the shim.
#[derive(Default)]
pub struct DriverHostRoom {
    read: bool,
    /// `None`: MemAvailable could not be read, and the host decides, as for the backend.
    left: Option<u64>,
    /// Bytes refused for want of it.
    pub refused: u64,
}

impl DriverHostRoom {
    /// Whether `len` more bytes may go to the host (taken from what is left if so).
    pub fn take(&mut self, len: u64) -> bool {
        if !self.read {
            self.left = backend::host_room();
            self.read = true;
        }
        match &mut self.left {
            None => true,
            Some(left) if *left >= len => {
                *left -= len;
                true
            }
            Some(_) => {
                self.refused += len;
                false
            }
        }
    }

    /// Gives back `len` bytes taken for a move that did not start.
    pub fn give_back(&mut self, len: u64) {
        if let Some(left) = &mut self.left {
            *left += len;
        }
    }
}

/// The RAM the host keeps available whatever T2 takes, for messages that name it.
pub fn host_reserve() -> u64 {
    backend::host_reserve()
}

/// T2 capacity for `bytes` as it is now, without waiting for pending frees (the tier
/// thread's: its moves in progress a pending free would wait for).
pub fn reserve_t2_now(bytes: u64) -> Option<T2Reservation> {
    budget::reserve_t2(bytes, budget::t2_capacity().saturating_sub(t2::cached_bytes()))
}

static RECLAIMER_STARTED: AtomicBool = AtomicBool::new(false);

/// Starts (once per process) the thread that releases stream-ordered frees when their
/// stream passes them, so that pinned memory goes back even if the program makes no
/// further CUDA call. It polls with cuEventQuery through `reclaim`; without it, later
/// shim calls still reclaim.
fn start_reclaimer() {
    if RECLAIMER_STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new().name("greenboost-reclaim".into()).spawn(|| loop {
        if PENDING_COUNT.load(Ordering::Acquire) == 0 {
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
/// all of them (when T2 is short). Also sends a T1 report to the module that throttling
/// held back.
pub fn reclaim(wait: bool) {
    backend::flush_t1_report(None);
    if PENDING_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    // Events are queried outside the lock: no CUDA call runs under it (a fork's prepare
    // handler takes it after the driver's own handlers have taken the driver's locks).
    let pending = std::mem::take(&mut *PENDING.lock());
    // Queried in the allocation's context (the reclaim thread has none of its own); an
    // error other than "not ready" means the stream's work is dead, so the memory can go.
    let (ready, waiting): (Vec<_>, Vec<_>) = pending.into_iter().partition(|pending| {
        wait || cuda::with_context(pending.allocation.context(), || cuda::event_query(pending.event))
            != CuResult::NOT_READY
    });
    {
        let mut queue = PENDING.lock();
        queue.extend(waiting);
        PENDING_COUNT.store(queue.len(), Ordering::Release);
    }
    for PendingFree { event, allocation } in ready {
        cuda::with_context(allocation.context(), || {
            if wait {
                cuda::event_synchronize(event);
            }
            cuda::event_destroy(event);
            allocation.detach();
        });
        allocation.finish();
    }
}

/// The lock the fork handlers hold (see `lifecycle`).
pub fn fork_lock() -> &'static dyn ForkLock {
    &PENDING
}

/// In the child of a fork: the reclaim thread stayed in the parent; it is started again
/// when needed.
pub fn restart_reclaimer_in_child() {
    RECLAIMER_STARTED.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_to_the_host_take_what_it_has_above_its_reserve_and_no_more() {
        let mut room = DriverHostRoom { read: true, left: Some(5 << 20), refused: 0 };
        assert!(room.take(2 << 20) && room.take(2 << 20));
        assert!(!room.take(2 << 20), "1 MiB left");
        room.give_back(2 << 20);
        assert!(room.take(2 << 20), "a move that did not start gave its room back");
        assert_eq!(room.refused, 2 << 20);
        let mut unknown = DriverHostRoom { read: true, left: None, refused: 0 };
        assert!(unknown.take(u64::MAX), "MemAvailable unreadable: the host decides");
    }
}
