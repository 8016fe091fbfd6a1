//! Copies and memsets the program enqueues itself (a graph's are its nodes, counted at
//! each launch of the graph by `graphs`): each one the driver accepted is counted, unless
//! its stream is being captured (it then became a node of the graph captured), and the
//! allocations it writes and reads are named in the address index: the one it writes as
//! written (`RangeUse::note_write`, what look-ahead staging must wait for), the one it
//! reads as used. A side that is no allocation of the index (host memory, a CUDA array, a
//! unified address of host memory) names nothing.
//!
//! One that writes a `__device__` global counts as a writer of everything (`indirect`): a
//! kernel may read a pointer kept there and write through it.
//!
//! These run on cudaMemcpy's path, often for a few bytes, so an operation costs an atomic
//! load (are captures open), one snapshot load, one index lookup per side, one atomic
//! load (were globals found; then a search of their spans) and a few relaxed atomic adds,
//! on the calling thread's own lines (`sys::shards`): nothing is allocated and no lock
//! is taken.

use std::ffi::c_void;

use crate::cuda::ffi::{CuDevicePtr, Stream};
use crate::cuda::launch_ffi::{Memcpy2D, Memcpy3D, Memcpy3DBatchOp};
use crate::launch::capture::{self, Enqueued};
use crate::launch::indirect;
use crate::memory::address_index::{self, Snapshot};
use crate::sys::shards::Shard;
use crate::sys::stats;

/// A copy or memset the driver accepted, as its hook received it.
#[derive(Clone, Copy, Debug)]
pub enum MemoryOp {
    /// A memset of `bytes` bytes (a 2D memset's rows together), writing from `target`.
    Set { target: CuDevicePtr, bytes: u64 },
    /// A copy of `bytes` bytes from `source` to `target`, either of which may be a host
    /// address, or none: a CUDA array (cuMemcpyAtoD*, cuMemcpyDtoA*).
    Copy { target: Option<CuDevicePtr>, source: Option<CuDevicePtr>, bytes: u64 },
    /// cuMemcpy2D*: the program's descriptor.
    Copy2D(*const Memcpy2D),
    /// cuMemcpy3D* and cuMemcpy3DPeer* (one layout): the program's descriptor.
    Copy3D(*const Memcpy3D),
    /// cuMemcpyBatchAsync*: `count` copies, the i-th of `sizes[i]` bytes from `sources[i]`
    /// to `targets[i]`.
    Batch { targets: *const CuDevicePtr, sources: *const CuDevicePtr, sizes: *const usize, count: usize },
    /// cuMemcpy3DBatchAsync*: `count` operations, each between two pointers or arrays.
    Batch3D { ops: *const Memcpy3DBatchOp, count: usize },
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
        MemoryOp::Copy { target: Some(target), source: Some(source), bytes: len as u64 }
    }

    /// A copy of `len` bytes from a CUDA array to `target`.
    pub fn from_array(target: CuDevicePtr, len: usize) -> MemoryOp {
        MemoryOp::Copy { target: Some(target), source: None, bytes: len as u64 }
    }

    /// A copy of `len` bytes from `source` to a CUDA array.
    pub fn to_array(source: CuDevicePtr, len: usize) -> MemoryOp {
        MemoryOp::Copy { target: None, source: Some(source), bytes: len as u64 }
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
    let shard = Shard::mine();
    // `one` (below) with this operation's snapshot and thread.
    let one = |target, source, size| one(snapshot, shard, target, source, size);
    let ran = match op {
        MemoryOp::Set { target, bytes } => one(Some(target), None, bytes),
        MemoryOp::Copy { target, source, bytes } => one(target, source, bytes),
        MemoryOp::Copy2D(copy) => {
            // SAFETY: the accepted descriptor (the contract); null is refused by the driver.
            unsafe { copy.as_ref() }.map_or(0, |copy| one(copy.target_start(), copy.source_start(), copy.bytes()))
        }
        MemoryOp::Copy3D(copy) => {
            // SAFETY: as for `Copy2D`.
            unsafe { copy.as_ref() }.map_or(0, |copy| one(copy.target_start(), copy.source_start(), copy.bytes()))
        }
        MemoryOp::Batch { targets, sources, sizes, count } => {
            // SAFETY: the accepted batch: three arrays of `count` entries (the contract).
            unsafe { batch(snapshot, shard, targets, sources, sizes, count) }
        }
        // SAFETY: the accepted batch: an array of `count` operations (the contract).
        MemoryOp::Batch3D { ops, count } => unsafe { batch_3d(snapshot, shard, ops, count) },
    };
    stats::launch_counts(shard).add(|counts| &counts.memory_ops, ran);
}

/// One copy or memset of `size` bytes (a 3D batch's operation: elements) writing from
/// `target` and reading from `source` (`None`: no address, a CUDA array or a memset's
/// value), on the thread of `shard`: names the allocations holding them, each once, or
/// counts it as a writer of everything when it writes a `__device__` global. Returns the
/// operations it counts: 1, or 0 for one of size zero, which the device does not run.
fn one(
    snapshot: Option<&Snapshot>,
    shard: Shard,
    target: Option<CuDevicePtr>,
    source: Option<CuDevicePtr>,
    size: u64,
) -> u64 {
    if size == 0 {
        return 0;
    }
    if let Some(snapshot) = snapshot {
        address_index::note_copy(snapshot.locate(target), snapshot.locate(source), shard);
    }
    if target.is_some_and(|target| indirect::writes_global(target, size)) {
        indirect::global_written();
    }
    1
}

/// # Safety
/// `targets`, `sources` and `sizes` are null or arrays of `count` entries, valid for
/// reads.
unsafe fn batch(
    snapshot: Option<&Snapshot>,
    shard: Shard,
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
    copies.map(|((target, source), size)| one(snapshot, shard, Some(*target), Some(*source), *size as u64)).sum()
}

/// A batch of 3D copies: each operation of a non-zero extent counts, naming its pointer
/// operands (an array names nothing).
///
/// # Safety
/// `ops` is null or an array of `count` operations, valid for reads.
unsafe fn batch_3d(snapshot: Option<&Snapshot>, shard: Shard, ops: *const Memcpy3DBatchOp, count: usize) -> u64 {
    if ops.is_null() {
        return 0;
    }
    // SAFETY: a non-null array of `count` operations (the contract): the program's, which
    // the driver read as such in this same call.
    let ops = unsafe { std::slice::from_raw_parts(ops, count) };
    ops.iter().map(|op| one(snapshot, shard, op.dst.pointer(), op.src.pointer(), op.elements())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_of_zero_bytes_is_not_counted() {
        assert_eq!(one(None, Shard::mine(), Some(0x1000), Some(0x2000), 0), 0);
        assert_eq!(one(None, Shard::mine(), Some(0x1000), None, 1), 1);
        let MemoryOp::Set { bytes, .. } = MemoryOp::set(0x1000, 64, 4, 0) else { unreachable!() };
        assert_eq!(bytes, 0, "a 2D memset of no rows");
        let MemoryOp::Set { bytes, .. } = MemoryOp::set(0x1000, 64, 2, 3) else { unreachable!() };
        assert_eq!(bytes, 384);
    }

    #[test]
    fn a_copy_with_a_cuda_array_has_no_address_on_the_array_side() {
        let MemoryOp::Copy { target, source, bytes } = MemoryOp::from_array(0x1000, 64) else { unreachable!() };
        assert_eq!((target, source, bytes), (Some(0x1000), None, 64));
        let MemoryOp::Copy { target, source, bytes } = MemoryOp::to_array(0x2000, 32) else { unreachable!() };
        assert_eq!((target, source, bytes), (None, Some(0x2000), 32));
    }

    #[test]
    fn a_3d_batch_counts_its_operations_of_a_non_zero_extent() {
        use crate::cuda::launch_ffi::{Memcpy3DArray, Memcpy3DOperand, Memcpy3DOperandUnion};
        let array = Memcpy3DArray { array: 0x5000 as *mut c_void, offset: [0; 3] };
        // 2: CU_MEMCPY_OPERAND_TYPE_ARRAY.
        let array = Memcpy3DOperand { operand_type: 2, op: Memcpy3DOperandUnion { array } };
        let op = Memcpy3DBatchOp { src: array, dst: array, extent: [4, 2, 1], src_access_order: 1, flags: 0 };
        let mut empty = op;
        empty.extent[2] = 0;
        let ops = [op, empty, op];
        // SAFETY: an array of 3 operations.
        assert_eq!(unsafe { batch_3d(None, Shard::mine(), ops.as_ptr(), ops.len()) }, 2);
        // SAFETY: null, which names and counts nothing.
        assert_eq!(unsafe { batch_3d(None, Shard::mine(), std::ptr::null(), 2) }, 0);
    }
}
