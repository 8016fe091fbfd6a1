// SPDX-License-Identifier: GPL-2.0
//! Small helpers: vector removal (6.12's `KVec` has no `pop`/`swap_remove`), a bounded
//! text writer for sysfs, a rate limiter and human-readable sizes.

use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::alloc::{Allocator, Vec};

use crate::glue_ffi as ffi;

/// Removes and returns the last element.
pub(crate) fn vec_pop<T, A: Allocator>(v: &mut Vec<T, A>) -> Option<T> {
    let last = v.len().checked_sub(1)?;
    // SAFETY: `last < len`, so the element at `last` is initialised and inside the
    // allocation. The length is shortened first, so ownership of the element moves to
    // the caller and the vector never drops it a second time.
    unsafe {
        v.set_len(last);
        Some(core::ptr::read(v.as_ptr().add(last)))
    }
}

/// Removes the element at `index`, replacing it with the last one.
pub(crate) fn vec_swap_remove<T, A: Allocator>(v: &mut Vec<T, A>, index: usize) -> Option<T> {
    let last = v.len().checked_sub(1)?;
    if index > last {
        return None;
    }
    v.as_mut_slice().swap(index, last);
    vec_pop(v)
}

/// A `fmt::Write` into a fixed byte buffer that stops (and remembers it) when full.
pub(crate) struct SliceWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// A write did not fit.
    pub(crate) full: bool,
}

impl<'a> SliceWriter<'a> {
    /// A writer filling `buf` from its start.
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        SliceWriter { buf, len: 0, full: false }
    }

    /// Bytes written.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let bytes = s.as_bytes();
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) if !self.full => {
                dst.copy_from_slice(bytes);
                self.len += bytes.len();
                Ok(())
            }
            _ => {
                self.full = true;
                Err(fmt::Error)
            }
        }
    }
}

/// Allows `burst` events per `interval_ms` window.
pub(crate) struct RateLimit {
    interval_ms: u64,
    burst: u32,
    window_start: AtomicU64,
    count: AtomicU32,
}

impl RateLimit {
    /// A limiter of `burst` events per `interval_ms`.
    pub(crate) const fn new(interval_ms: u64, burst: u32) -> Self {
        RateLimit { interval_ms, burst, window_start: AtomicU64::new(0), count: AtomicU32::new(0) }
    }

    /// Whether one more event may happen now.
    pub(crate) fn allow(&self) -> bool {
        // SAFETY: `gb_now_ms` only reads the jiffies counter; it takes no pointer and has
        // no precondition.
        let now = unsafe { ffi::gb_now_ms() };
        let start = self.window_start.load(Ordering::Relaxed);
        if now.wrapping_sub(start) >= self.interval_ms
            && self.window_start.compare_exchange(start, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.count.store(0, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed) < self.burst
    }
}

/// A byte count shown with a binary unit (B, KiB, MiB, GiB with one decimal).
pub(crate) struct Size(pub(crate) u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 30 {
            write!(f, "{}.{} GiB", b >> 30, ((b & ((1 << 30) - 1)) * 10) >> 30)
        } else if b >= 1 << 20 {
            write!(f, "{} MiB", b >> 20)
        } else if b >= 1 << 10 {
            write!(f, "{} KiB", b >> 10)
        } else {
            write!(f, "{} B", b)
        }
    }
}

/// Formats a byte count in MiB, or "none" for 0 (a disabled limit).
pub(crate) struct MibOrNone(pub(crate) u64);

impl fmt::Display for MibOrNone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            f.write_str("none")
        } else {
            write!(f, "{} MiB", self.0 >> 20)
        }
    }
}

/// Raises `peak` to at least `value`.
pub(crate) fn raise_peak(peak: &AtomicU64, value: u64) {
    peak.fetch_max(value, Ordering::Relaxed);
}

/// T2 bytes of one holder (the module, a process). `used` counts them from their
/// admission on, ALLOCs in flight included: what the caps compare. `committed` counts
/// them once their pages exist, and `peak` is the highest `committed`: a peak taken
/// from `used` would count other ALLOCs' reservations, refused or killed ones too.
#[derive(Default)]
pub(crate) struct T2Usage {
    pub(crate) used: AtomicU64,
    pub(crate) committed: AtomicU64,
    pub(crate) peak: AtomicU64,
}

impl T2Usage {
    /// `bytes` admitted (counted in `used`), their pages not there yet.
    pub(crate) fn reserve(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// An admission that never got its pages: `bytes` leave `used`.
    pub(crate) fn unreserve(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The pages of `bytes` reserved exist now: committed, the peak raised.
    pub(crate) fn commit(&self, bytes: u64) {
        let committed = self.committed.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        raise_peak(&self.peak, committed);
    }

    /// Committed pages of `bytes` are gone (freed, or no longer this holder's).
    pub(crate) fn release(&self, bytes: u64) {
        self.committed.fetch_sub(bytes, Ordering::Relaxed);
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}
