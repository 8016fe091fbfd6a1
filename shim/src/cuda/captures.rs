//! How many stream captures this process has open: counted by the capture hooks
//! (`launch::capture`), read by the shim's own work that must not run while a graph is
//! being captured, such as a `cuMemFree` (which may synchronise the device and so
//! invalidate the capture) in live tiering's give-back.

use std::sync::atomic::{AtomicUsize, Ordering};

static OPEN: AtomicUsize = AtomicUsize::new(0);

/// A capture began (the driver accepted cuStreamBeginCapture*).
pub fn opened() {
    OPEN.fetch_add(1, Ordering::AcqRel);
}

/// A capture ended; whether it was the last one open.
pub fn closed() -> bool {
    OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(1))) == Ok(1)
}

/// Whether any capture is open (by any thread, on any stream).
pub fn any_open() -> bool {
    OPEN.load(Ordering::Acquire) != 0
}
