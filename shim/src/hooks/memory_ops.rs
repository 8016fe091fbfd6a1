//! Copy and memset hooks: every driver form of a memset, and of a copy between device
//! memory and device or host memory or a CUDA array (the batches of 3D copies: between
//! any two of them), each in its legacy-stream and its per-thread form
//! (`_ptds`/`_ptsz`, where stream 0 is the calling thread's default stream). Each calls
//! the real function first, unchanged, and tells `launch::memory_ops` what the driver
//! accepted. The runtime's cudaMemcpy*/cudaMemset* reach these through cuGetProcAddress;
//! the shim's own copies (`cuda::memcpy_async`, `cuda::memcpy_to_host`) call the real
//! functions through `real` and never pass here, so they are not counted as the
//! program's.
//!
//! The implementations are named as in C (the table's `imp` takes them by name), made by
//! `memory_op_hooks!`, two to a line: the legacy form, then the per-thread form.

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};

use crate::cuda::ffi::{Context, CuDevicePtr, CuResult, Stream};
use crate::cuda::launch_ffi::{Memcpy2D, Memcpy3D, Memcpy3DBatchOp};
use crate::cuda::real::pfn;
use crate::launch::memory_ops::{self, host_address, MemoryOp};

/// One hook: the real call, then, if the driver accepted it, `$op` on `$stream`.
macro_rules! memory_op_hook {
    ($name:ident ($($arg:ident: $ty:ty),*) on $stream:expr => $op:expr) => {
        /// # Safety
        /// The program's arguments, as the driver function of this name takes them.
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub unsafe fn $name(real: pfn::$name, $($arg: $ty),*) -> CuResult {
            // SAFETY: the real function with the program's arguments, unchanged.
            let status = unsafe { real($($arg),*) };
            if status == CuResult::SUCCESS {
                // SAFETY: the operation the driver just accepted, described by the
                // program's own arguments, which its call keeps valid.
                unsafe { memory_ops::accepted($stream, $op) };
            }
            status
        }
    };
}

/// Each line: the legacy and the per-thread name, the arguments, the stream the legacy
/// form orders its work on (`Stream::NULL` for the synchronous forms: the legacy stream)
/// and the operation.
macro_rules! memory_op_hooks {
    ($($legacy:ident, $per_thread:ident ($($arg:ident: $ty:ty),*) on $stream:expr => $op:expr;)*) => {$(
        memory_op_hook!($legacy ($($arg: $ty),*) on $stream => $op);
        memory_op_hook!($per_thread ($($arg: $ty),*) on $stream.per_thread_default() => $op);
    )*};
}

// Memsets: 8, 16 and 32-bit elements, 1D and pitched 2D (`width` elements per row).
memory_op_hooks! {
    cuMemsetD8_v2, cuMemsetD8_v2_ptds (dst: CuDevicePtr, value: c_uchar, count: usize)
        on Stream::NULL => MemoryOp::set(dst, count, 1, 1);
    cuMemsetD16_v2, cuMemsetD16_v2_ptds (dst: CuDevicePtr, value: c_ushort, count: usize)
        on Stream::NULL => MemoryOp::set(dst, count, 2, 1);
    cuMemsetD32_v2, cuMemsetD32_v2_ptds (dst: CuDevicePtr, value: c_uint, count: usize)
        on Stream::NULL => MemoryOp::set(dst, count, 4, 1);
    cuMemsetD8Async, cuMemsetD8Async_ptsz (dst: CuDevicePtr, value: c_uchar, count: usize, stream: Stream)
        on stream => MemoryOp::set(dst, count, 1, 1);
    cuMemsetD16Async, cuMemsetD16Async_ptsz (dst: CuDevicePtr, value: c_ushort, count: usize, stream: Stream)
        on stream => MemoryOp::set(dst, count, 2, 1);
    cuMemsetD32Async, cuMemsetD32Async_ptsz (dst: CuDevicePtr, value: c_uint, count: usize, stream: Stream)
        on stream => MemoryOp::set(dst, count, 4, 1);
    cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds (dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize)
        on Stream::NULL => MemoryOp::set(dst, width, 1, height);
    cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds
        (dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize)
        on Stream::NULL => MemoryOp::set(dst, width, 2, height);
    cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds (dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize)
        on Stream::NULL => MemoryOp::set(dst, width, 4, height);
    cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz
        (dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize, stream: Stream)
        on stream => MemoryOp::set(dst, width, 1, height);
    cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz
        (dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: Stream)
        on stream => MemoryOp::set(dst, width, 2, height);
    cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz
        (dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Stream)
        on stream => MemoryOp::set(dst, width, 4, height);
}

// Copies of one range: device and unified addresses, or a host pointer or a CUDA array (at
// a byte offset, no address) on one side.
memory_op_hooks! {
    cuMemcpy, cuMemcpy_ptds (dst: CuDevicePtr, src: CuDevicePtr, len: usize)
        on Stream::NULL => MemoryOp::copy(dst, src, len);
    cuMemcpyAsync, cuMemcpyAsync_ptsz (dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream)
        on stream => MemoryOp::copy(dst, src, len);
    cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds (dst: CuDevicePtr, src: *const c_void, len: usize)
        on Stream::NULL => MemoryOp::copy(dst, host_address(src), len);
    cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz (dst: CuDevicePtr, src: *const c_void, len: usize, stream: Stream)
        on stream => MemoryOp::copy(dst, host_address(src), len);
    cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds (dst: *mut c_void, src: CuDevicePtr, len: usize)
        on Stream::NULL => MemoryOp::copy(host_address(dst), src, len);
    cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz (dst: *mut c_void, src: CuDevicePtr, len: usize, stream: Stream)
        on stream => MemoryOp::copy(host_address(dst), src, len);
    cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds (dst: CuDevicePtr, src: CuDevicePtr, len: usize)
        on Stream::NULL => MemoryOp::copy(dst, src, len);
    cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz (dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream)
        on stream => MemoryOp::copy(dst, src, len);
    cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds (dst: CuDevicePtr, src_array: *mut c_void, src_offset: usize, len: usize)
        on Stream::NULL => MemoryOp::from_array(dst, len);
    cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds (dst_array: *mut c_void, dst_offset: usize, src: CuDevicePtr, len: usize)
        on Stream::NULL => MemoryOp::to_array(src, len);
    cuMemcpyPeer, cuMemcpyPeer_ptds
        (dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize)
        on Stream::NULL => MemoryOp::copy(dst, src, len);
    cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz
        (dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize, stream: Stream)
        on stream => MemoryOp::copy(dst, src, len);
}

// Copies described by a descriptor (2D, 3D, 3D between contexts) and batches of copies.
memory_op_hooks! {
    cuMemcpy2D_v2, cuMemcpy2D_v2_ptds (copy: *const Memcpy2D)
        on Stream::NULL => MemoryOp::Copy2D(copy);
    cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds (copy: *const Memcpy2D)
        on Stream::NULL => MemoryOp::Copy2D(copy);
    cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz (copy: *const Memcpy2D, stream: Stream)
        on stream => MemoryOp::Copy2D(copy);
    cuMemcpy3D_v2, cuMemcpy3D_v2_ptds (copy: *const Memcpy3D)
        on Stream::NULL => MemoryOp::Copy3D(copy);
    cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz (copy: *const Memcpy3D, stream: Stream)
        on stream => MemoryOp::Copy3D(copy);
    cuMemcpy3DPeer, cuMemcpy3DPeer_ptds (copy: *const Memcpy3D)
        on Stream::NULL => MemoryOp::Copy3D(copy);
    cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz (copy: *const Memcpy3D, stream: Stream)
        on stream => MemoryOp::Copy3D(copy);
    cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz
        (dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void,
        attribute_indices: *mut usize, attribute_count: usize, fail_index: *mut usize, stream: Stream)
        on stream => MemoryOp::Batch { targets: dsts, sources: srcs, sizes, count };
    cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz
        (dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void,
        attribute_indices: *mut usize, attribute_count: usize, stream: Stream)
        on stream => MemoryOp::Batch { targets: dsts, sources: srcs, sizes, count };
    cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz
        (count: usize, ops: *mut Memcpy3DBatchOp, fail_index: *mut usize, flags: u64, stream: Stream)
        on stream => MemoryOp::Batch3D { ops, count };
    cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz
        (count: usize, ops: *mut Memcpy3DBatchOp, flags: u64, stream: Stream)
        on stream => MemoryOp::Batch3D { ops, count };
}
