//! Kernel launches and host functions enqueued directly on a stream: counted, and their
//! parameters named against the live allocations (each named allocation's use noted),
//! unless the stream is being captured into a graph, where they run only when the graph
//! launches (`graphs`).

use std::ffi::c_void;

use crate::cuda::ffi::{CuDevicePtr, CuFunction, Stream};
use crate::launch::capture::{self, Enqueued};
use crate::launch::kernel_times::{self, Timing};
use crate::launch::naming::{self, Named};
use crate::memory::{address_index, recent_ranges};
use crate::sys::shards::Shard;
use crate::sys::stats;

/// The driver accepted a launch of `function` on `stream` with these parameters; it names
/// with `timing`'s weight, and was timed if `timing` says so (`kernel_times`).
///
/// # Safety
/// `params` and `extra` are the launch's, as the driver accepted them for `function`.
pub unsafe fn launched(
    function: CuFunction,
    stream: Stream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    timing: Timing,
) {
    let Timing { weight, sampling } = timing;
    let shard = Shard::mine();
    let counts = stats::launch_counts(shard);
    if capture::enqueued_on(stream) == Enqueued::Captured {
        counts.bump(|counts| &counts.captured_launches);
        if let Some(sampling) = sampling {
            kernel_times::after_launch(sampling, false, stream, &[]);
        }
        return;
    }
    let snapshot = address_index::load();
    // The first address of each allocation named, as many as a timed launch keeps.
    let mut named: [CuDevicePtr; kernel_times::NAMED_KEPT] = [0; kernel_times::NAMED_KEPT];
    let mut count = 0;
    let visit = |found: Named<'_>| {
        found.note(weight, shard);
        if found.first && count < kernel_times::NAMED_KEPT {
            named[count] = found.address;
            count += 1;
        }
    };
    let naming = match snapshot.as_ref() {
        // SAFETY: per this function's contract: a launch of `function` the driver accepted.
        Some(snapshot) => recent_ranges::with_finder(snapshot, |finder| unsafe {
            naming::name_launch(function, params, extra, Some(finder), visit)
        }),
        // SAFETY: as above; no allocation lives, so the launch is only read.
        None => unsafe { naming::name_launch(function, params, extra, None, visit) },
    };
    if let Some(sampling) = sampling {
        kernel_times::after_launch(sampling, true, stream, &named[..count]);
    }
    counts.bump(|counts| &counts.launches);
    if !naming.read {
        counts.bump(|counts| &counts.launches_unread);
    }
    counts.add(|counts| &counts.launch_namings, u64::from(naming.ranges));
}

/// The driver accepted a host function on `stream`.
pub fn host_function_enqueued(stream: Stream) {
    if capture::enqueued_on(stream) == Enqueued::Runs {
        stats::launch_counts(Shard::mine()).bump(|counts| &counts.host_funcs);
    }
}
