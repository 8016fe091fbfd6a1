//! Stream captures in progress. A launch on a capturing stream runs nothing: it becomes a
//! node of the graph being captured, and runs (and is counted) when the graph launches.
//! Asking the driver whether a stream captures costs a call, so it is asked only while a
//! capture this process began has not ended.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cuda;
use crate::cuda::ffi::{CuResult, Stream};
use crate::cuda::launch_ffi::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;

/// Captures begun and not yet ended (by any thread, on any stream).
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// A capture began (the driver accepted cuStreamBeginCapture*).
pub fn began() {
    CAPTURES.fetch_add(1, Ordering::Relaxed);
}

/// cuStreamEndCapture answered `status`: a capture ended when the graph came back or the
/// capture had been invalidated (it is over either way); other errors ended nothing.
pub fn ended(status: CuResult) {
    if status == CuResult::SUCCESS || status.0 == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
        let _ = CAPTURES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    }
}

/// What work enqueued on `stream` does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// It runs on the device.
    Runs,
    /// It is recorded into a graph being captured.
    Captured,
}

/// Whether work enqueued on `stream` runs or is captured. A stream the driver cannot
/// answer for is taken as running (the launch the driver accepted on it ran). The legacy
/// stream is not asked: the driver never captures it (it refuses a capture on it, and
/// work on it that a capture in progress would have to wait for), so what it accepted
/// there runs; synchronous copies and memsets, on cudaMemcpy's path, are enqueued there.
pub fn enqueued_on(stream: Stream) -> Enqueued {
    if CAPTURES.load(Ordering::Relaxed) == 0 || stream.is_legacy() {
        return Enqueued::Runs;
    }
    match cuda::stream_is_capturing(stream) {
        Ok(true) => Enqueued::Captured,
        _ => Enqueued::Runs,
    }
}
