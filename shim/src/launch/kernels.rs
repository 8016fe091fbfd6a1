//! Kernel launches and host functions enqueued directly on a stream: counted, and their
//! parameters named against the live allocations (each named allocation's use noted),
//! unless the stream is being captured into a graph, where they run only when the graph
//! launches (`graphs`).

use std::ffi::c_void;

use crate::cuda::ffi::{CuFunction, Stream};
use crate::launch::capture::{self, Enqueued};
use crate::launch::naming;
use crate::memory::address_index;
use crate::sys::stats::{self, STATS};

/// The driver accepted a launch of `function` on `stream` with these parameters.
///
/// # Safety
/// `params` and `extra` are the launch's, as the driver accepted them for `function`.
pub unsafe fn launched(function: CuFunction, stream: Stream, params: *mut *mut c_void, extra: *mut *mut c_void) {
    if capture::enqueued_on(stream) == Enqueued::Captured {
        stats::bump(&STATS.captured_launches);
        return;
    }
    let snapshot = address_index::load();
    // SAFETY: per this function's contract: a launch of `function` the driver accepted.
    let naming = unsafe { naming::name_launch(function, params, extra, snapshot.as_deref(), |named| named.note()) };
    stats::bump(&STATS.launches);
    if !naming.read {
        stats::bump(&STATS.launches_unread);
    }
    stats::add(&STATS.launch_namings, u64::from(naming.ranges));
}

/// The driver accepted a host function on `stream`.
pub fn host_function_enqueued(stream: Stream) {
    if capture::enqueued_on(stream) == Enqueued::Runs {
        stats::bump(&STATS.host_funcs);
    }
}
