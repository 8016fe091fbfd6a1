//! Stream captures in progress. A launch on a capturing stream runs nothing: it becomes a
//! node of the graph being captured, and runs (and is counted) when the graph launches.
//! Asking the driver whether a stream captures costs a call, so it is asked only while a
//! capture this process began has not ended.
//!
//! A writer through pointers kept in device memory (`indirect`) enqueued while a capture
//! is open may have become a node of its graph, whose kernel nodes say nothing of what
//! it writes: every graph captured by a capture open then is marked, and each executable
//! graph made from one is not fully read (`graphs`). Which capture its stream belonged to
//! is not asked (that would cost a call per writer, and the stream of a cuBLAS routine
//! is its handle's): a capture that did not hold it is marked too, which only drops
//! look-ahead copies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cuda;
use crate::cuda::captures;
use crate::cuda::ffi::{CuResult, Stream};
use crate::cuda::launch_ffi::{Graph, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED};
use crate::sys::cow_map::CowMap;

/// An indirect writer was enqueued while a capture was open, and not every capture open
/// then has ended since.
static INDIRECT_CAPTURED: AtomicBool = AtomicBool::new(false);

/// The graphs captured while `INDIRECT_CAPTURED` was set, by handle. Never forgotten: a
/// handle the driver hands out again for another graph is then marked too (which only
/// drops look-ahead copies), and a program captures few graphs.
static GRAPHS_WITH_INDIRECT: CowMap<()> = CowMap::new();

/// A capture began (the driver accepted cuStreamBeginCapture*).
pub fn began() {
    captures::opened();
}

/// cuStreamEndCapture answered `status` and `graph` (null when it gave none): a capture
/// ended when the graph came back or the capture had been invalidated (it is over either
/// way); other errors ended nothing.
pub fn ended(status: CuResult, graph: Graph) {
    if status != CuResult::SUCCESS && status.0 != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
        return;
    }
    if INDIRECT_CAPTURED.load(Ordering::Acquire) && !graph.0.is_null() {
        GRAPHS_WITH_INDIRECT.set(graph.0 as usize, Some(Arc::new(())));
    }
    if captures::closed() {
        // Every capture open when the writer came has ended (a writer racing with this
        // sets the flag again, which only marks the next capture too).
        INDIRECT_CAPTURED.store(false, Ordering::Release);
    }
}

/// An indirect writer was enqueued: if a capture is open, its graph may hold it.
pub fn indirect_writer_enqueued() {
    if captures::any_open() {
        INDIRECT_CAPTURED.store(true, Ordering::Release);
    }
}

/// Whether `graph` was captured while an indirect writer may have been enqueued into it.
pub fn may_hold_indirect_writer(graph: Graph) -> bool {
    GRAPHS_WITH_INDIRECT.get(graph.0 as usize).is_some()
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
    if !captures::any_open() || stream.is_legacy() {
        return Enqueued::Runs;
    }
    match cuda::stream_is_capturing(stream) {
        Ok(true) => Enqueued::Captured,
        _ => Enqueued::Runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_enqueued_while_captures_are_open_marks_the_graphs_they_end_with() {
        let graph = |address: usize| Graph(address as *mut std::ffi::c_void);
        // No capture open: nothing to mark.
        indirect_writer_enqueued();
        began();
        ended(CuResult::SUCCESS, graph(0x1000));
        assert!(!may_hold_indirect_writer(graph(0x1000)));
        // Two captures open when the writer comes: both graphs marked, even the one that
        // first failed to end (an error other than invalidation ends nothing).
        began();
        began();
        indirect_writer_enqueued();
        ended(CuResult::SUCCESS, graph(0x2000));
        ended(CuResult(1), Graph::NULL);
        ended(CuResult::SUCCESS, graph(0x3000));
        assert!(may_hold_indirect_writer(graph(0x2000)) && may_hold_indirect_writer(graph(0x3000)));
        // Every capture open then has ended: a later one is not marked.
        began();
        ended(CuResult::SUCCESS, graph(0x4000));
        assert!(!may_hold_indirect_writer(graph(0x4000)));
        assert!(!captures::any_open());
    }
}
