//! Copies and memsets the program enqueues itself (a graph's are its nodes, counted at
//! each launch of the graph by `graphs`): each one the driver accepted is counted, unless
//! its stream is being captured (it then became a node of the graph captured), and the
//! allocations it writes and reads are named in the address index: the one it writes as
//! written (`RangeUse::note_write`, what look-ahead staging must wait for), the one it
//! reads as used. A side that is no allocation of the index (host memory, a CUDA array, a
//! unified address of host memory) names nothing.
//!
//! These run on cudaMemcpy's path, often for a few bytes, so an operation costs an atomic
//! load (are captures open), one snapshot load, one index lookup per side and a few
//! relaxed atomic adds: nothing is allocated and no lock is taken.

use std::ffi::c_void;

use crate::cuda::ffi::{CuDevicePtr, Stream};
use crate::cuda::launch_ffi::{Memcpy2D, Memcpy3D};
use crate::launch::capture::{self, Enqueued};
use crate::memory::address_index::{self, Snapshot};
use crate::sys::stats::{self, STATS};

/// A copy or memset the driver accepted, as its hook received it.
#[derive(Clone, Copy, Debug)]
pub enum MemoryOp {
    /// A memset of `bytes` bytes (a 2D memset's rows together), writing from `target`.
    Set { target: CuDevicePtr, bytes: u64 },
    /// A copy of `bytes` bytes from `source` to `target`, either of which may be a host
    /// address.
    Copy { target: CuDevicePtr, source: CuDevicePtr, bytes: u64 },
    /// cuMemcpy2D*: the program's descriptor.
    Copy2D(*const Memcpy2D),
    /// cuMemcpy3D* and cuMemcpy3DPeer* (one layout): the program's descriptor.
    Copy3D(*const Memcpy3D),
    /// cuMemcpyBatchAsync*: `count` copies, the i-th of `sizes[i]` bytes from `sources[i]`
    /// to `targets[i]`.
    Batch { targets: *const CuDevicePtr, sources: *const CuDevicePtr, sizes: *const usize, count: usize },
}

impl MemoryOp {
    /// A memset of `rows` rows of `elements` elements of `element_bytes` bytes each (a 1D
    /// memset is one row).
    pub fn set(target: CuDevicePtr, elements: usize, element_bytes: usize, rows: usize) -> MemoryOp {
        let bytes = elements.saturating_mul(element_bytes).saturating_mul(rows);
        MemoryOp::Set { target, bytes: bytes as u64 }
    }

    /// A copy of `len` bytes.
    pub fn copy(target: CuDevicePtr, source: CuDevicePtr, len: usize) -> MemoryOp {
        MemoryOp::Copy { target, source, bytes: len as u64 }
    }
}

/// The address of a host pointer, as the index would hold it (registered host memory
/// has the same address on the device, under unified addressing).
pub fn host_address(pointer: *const c_void) -> CuDevicePtr {
    pointer as CuDevicePtr
}

/// The driver accepted `op` on `stream` (a synchronous form's: the legacy stream, or the
/// calling thread's default stream for its `_ptds` form).
///
/// # Safety
/// `op` is the operation the driver just accepted: a descriptor or arrays it points to
/// are the program's, valid for reads while its call lasts.
pub unsafe fn accepted(stream: Stream, op: MemoryOp) {
    if capture::enqueued_on(stream) == Enqueued::Captured {
        return;
    }
    let snapshot = address_index::load();
    let snapshot = snapshot.as_deref();
    let ran = match op {
        MemoryOp::Set { target, bytes } => one(snapshot, Some(target), None, bytes),
        MemoryOp::Copy { target, source, bytes } => one(snapshot, Some(target), Some(source), bytes),
        // SAFETY: the accepted descriptor (the contract); null is refused by the driver.
        MemoryOp::Copy2D(copy) => unsafe { copy.as_ref() }
            .map_or(0, |copy| one(snapshot, copy.target_start(), copy.source_start(), copy.bytes())),
        // SAFETY: as for `Copy2D`.
        MemoryOp::Copy3D(copy) => unsafe { copy.as_ref() }
            .map_or(0, |copy| one(snapshot, copy.target_start(), copy.source_start(), copy.bytes())),
        MemoryOp::Batch { targets, sources, sizes, count } => {
            // SAFETY: the accepted batch: three arrays of `count` entries (the contract).
            unsafe { batch(snapshot, targets, sources, sizes, count) }
        }
    };
    stats::add(&STATS.memory_ops, ran);
}

/// One copy or memset of `bytes` bytes writing from `target` and reading from `source`
/// (`None`: no address, a CUDA array or a memset's value): names the allocations holding
/// them, each once. Returns the operations it counts: 1, or 0 for one of zero bytes,
/// which the device does not run.
fn one(snapshot: Option<&Snapshot>, target: Option<CuDevicePtr>, source: Option<CuDevicePtr>, bytes: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    if let Some(snapshot) = snapshot {
        address_index::note_copy(snapshot.locate(target), snapshot.locate(source));
    }
    1
}

/// # Safety
/// `targets`, `sources` and `sizes` are null or arrays of `count` entries, valid for
/// reads.
unsafe fn batch(
    snapshot: Option<&Snapshot>,
    targets: *const CuDevicePtr,
    sources: *const CuDevicePtr,
    sizes: *const usize,
    count: usize,
) -> u64 {
    if targets.is_null() || sources.is_null() || sizes.is_null() {
        return 0;
    }
    // SAFETY: non-null arrays of `count` entries (the contract): the program's, which
    // the driver read as such in this same call.
    let (targets, sources, sizes) = unsafe {
        (
            std::slice::from_raw_parts(targets, count),
            std::slice::from_raw_parts(sources, count),
            std::slice::from_raw_parts(sizes, count),
        )
    };
    let copies = targets.iter().zip(sources).zip(sizes);
    copies.map(|((target, source), size)| one(snapshot, Some(*target), Some(*source), *size as u64)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_of_zero_bytes_is_not_counted() {
        assert_eq!(one(None, Some(0x1000), Some(0x2000), 0), 0);
        assert_eq!(one(None, Some(0x1000), None, 1), 1);
        let MemoryOp::Set { bytes, .. } = MemoryOp::set(0x1000, 64, 4, 0) else { unreachable!() };
        assert_eq!(bytes, 0, "a 2D memset of no rows");
        let MemoryOp::Set { bytes, .. } = MemoryOp::set(0x1000, 64, 2, 3) else { unreachable!() };
        assert_eq!(bytes, 384);
    }
}
