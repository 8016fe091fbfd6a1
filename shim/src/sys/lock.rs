//! The shim's mutex: a futex mutex (lock_api front end) that a forked child can reset,
//! ranked by its type (`Mutex<rank::Registry, _>`, see `lock_order`).
//!
//! parking_lot's mutex cannot be made fork-safe from outside: unlocking it in the child
//! of a fork may hand it to a thread that was parked on it in the parent and does not
//! exist in the child. This one keeps its whole state in one atomic word (0 unlocked,
//! 1 locked, 2 locked with waiters), so the child's atfork handler can reset it.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::lock_order::{self, Ranked};

pub struct ForkSafeRawMutex<R: Ranked> {
    state: AtomicU32,
    // A function pointer type: the rank marker is a type only, so Send and Sync hold.
    rank: PhantomData<fn() -> R>,
}

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

impl<R: Ranked> ForkSafeRawMutex<R> {
    fn futex(&self, op: libc::c_int, value: u32) {
        // SAFETY: a futex operation on our own aligned atomic word; no timeout.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.state.as_ptr(),
                op | libc::FUTEX_PRIVATE_FLAG,
                value,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }

    /// In the child of a fork, whose only thread held this lock in `prepare`: unlocked,
    /// with no waiters (they stayed in the parent).
    pub fn reset_in_child(&self) {
        self.state.store(UNLOCKED, Ordering::Release);
        lock_order::released(R::RANK);
    }

    fn try_acquire(&self) -> bool {
        self.state.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }
}

// SAFETY: `lock` returns only after moving the state from UNLOCKED to LOCKED or
// CONTENDED with acquire ordering; `unlock` releases it; so one holder at a time.
unsafe impl<R: Ranked> lock_api::RawMutex for ForkSafeRawMutex<R> {
    const INIT: ForkSafeRawMutex<R> = ForkSafeRawMutex { state: AtomicU32::new(UNLOCKED), rank: PhantomData };
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        lock_order::acquiring(R::RANK);
        if self.try_acquire() {
            return;
        }
        // Spin briefly: the critical sections are a few map operations.
        for _ in 0..64 {
            std::hint::spin_loop();
            if self.state.load(Ordering::Relaxed) == UNLOCKED && self.try_acquire() {
                return;
            }
        }
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            self.futex(libc::FUTEX_WAIT, CONTENDED);
        }
    }

    fn try_lock(&self) -> bool {
        let taken = self.try_acquire();
        if taken {
            lock_order::acquiring(R::RANK);
        }
        taken
    }

    unsafe fn unlock(&self) {
        lock_order::released(R::RANK);
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            self.futex(libc::FUTEX_WAKE, 1);
        }
    }
}

/// A mutex of rank `R::RANK` (`lock_order`).
pub type Mutex<R, T> = lock_api::Mutex<ForkSafeRawMutex<R>, T>;

/// A held `Mutex<R, T>` of static storage.
pub type StaticGuard<R, T> = lock_api::MutexGuard<'static, ForkSafeRawMutex<R>, T>;

pub const fn const_mutex<R: Ranked, T>(value: T) -> Mutex<R, T> {
    lock_api::Mutex::const_new(<ForkSafeRawMutex<R> as lock_api::RawMutex>::INIT, value)
}

/// What the pthread_atfork handlers (`lifecycle`) do with each of the shim's locks, so
/// that a child never inherits one mid-update.
pub trait ForkLock: Sync {
    /// prepare: takes the lock and keeps it held across the fork.
    fn hold_for_fork(&self);

    /// parent: releases what `hold_for_fork` took.
    ///
    /// # Safety
    /// This thread took the lock with `hold_for_fork` and has not released it.
    unsafe fn release_in_parent(&self);

    /// child: unlocked, with no waiters (they stayed in the parent).
    ///
    /// # Safety
    /// This thread took the lock with `hold_for_fork` before the fork and is the only
    /// thread of the child.
    unsafe fn reset_in_child(&self);
}

impl<R: Ranked, T: Send> ForkLock for Mutex<R, T> {
    fn hold_for_fork(&self) {
        std::mem::forget(self.lock());
    }

    unsafe fn release_in_parent(&self) {
        // SAFETY: per the contract, this thread holds the lock through a forgotten guard.
        unsafe { self.force_unlock() };
    }

    unsafe fn reset_in_child(&self) {
        // SAFETY: per the contract, nobody else can hold or wait for the lock.
        unsafe { self.raw() }.reset_in_child();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::lock_order::rank;

    #[test]
    fn sixteen_threads_count_exactly() {
        static COUNTER: Mutex<rank::Registry, u64> = const_mutex(0);
        let threads: Vec<_> = (0..16)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..20_000 {
                        *COUNTER.lock() += 1;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert_eq!(*COUNTER.lock(), 16 * 20_000);
    }

    #[test]
    fn reset_frees_a_lock_held_at_fork() {
        static HELD: Mutex<rank::Registry, u32> = const_mutex(7);
        std::mem::forget(HELD.lock());
        assert!(HELD.try_lock().is_none());
        // SAFETY: what the atfork child handler does with a lock its thread holds.
        unsafe { HELD.raw() }.reset_in_child();
        assert_eq!(*HELD.lock(), 7);
    }

    #[cfg(feature = "lock-order")]
    #[test]
    #[should_panic(expected = "taken while holding memory::vmm::VMM (rank 4)")]
    fn a_lower_rank_under_a_higher_one_panics() {
        let vmm: Mutex<rank::Vmm, ()> = const_mutex(());
        let registry: Mutex<rank::Registry, ()> = const_mutex(());
        let _vmm = vmm.lock();
        let _registry = registry.lock();
    }

    #[cfg(feature = "lock-order")]
    #[test]
    #[should_panic(expected = "lock order: memory::movable_part::Part::state")]
    fn two_locks_of_one_rank_never_nest() {
        let first: Mutex<rank::MovableState, ()> = const_mutex(());
        let second: Mutex<rank::MovableState, ()> = const_mutex(());
        let _first = first.lock();
        let _second = second.lock();
    }

    #[cfg(feature = "lock-order")]
    #[test]
    fn increasing_ranks_and_released_locks_pass() {
        let registry: Mutex<rank::Registry, ()> = const_mutex(());
        let live: Mutex<rank::Live, ()> = const_mutex(());
        {
            let _registry = registry.lock();
            let _live = live.lock();
        }
        let _live = live.lock();
        drop(_live);
        let _registry = registry.lock();
    }
}
