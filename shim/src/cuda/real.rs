//! Every CUDA (and libc) function the shim hooks or calls, in one table: its library,
//! whether and how it is hooked, and its C signature — the one place each signature is
//! written — and one typed accessor per function for the real implementation.
//!
//! `cuda_functions!` holds the table and hands it to a macro: here `real_functions!`
//! makes, for every line, the function-pointer type `pfn::NAME`, a slot caching the real
//! address, and the accessor `real::NAME() -> Option<pfn::NAME>`; `hooks` (the top of the
//! shim) makes the exported hooks from the same table. The only transmutes from an
//! address to a function in the shim are in `real_functions!`.
//!
//! A slot is filled once: by the program's own lookup of a hooked function (`record`,
//! from `dlsym`/`cuGetProcAddress`/`cudaGetDriverEntryPoint` routing), or on first use
//! from the line's library (`libs`). Modes: `guarded`, `observed`, `routing` and
//! `indirect` lines are hooked (see `hooks`), `trampoline` lines are the naked
//! `dlsym`/`dlopen` exports, `called` lines are functions the shim only calls. The cuBLAS
//! routines over device arrays of pointers (`indirect`) are appended from
//! `pointer_array_functions`.

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::*;
use crate::cuda::libs;

/// The library a function lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Runtime,
    Driver,
    Nvml,
    Cublas,
    CublasLt,
    Libc,
}

/// Calls `$callback!` with the table. Each line: API, mode, C signature.
macro_rules! cuda_functions {
    ($callback:ident) => {
        $crate::cuda::pointer_array_functions::with_pointer_array_functions! { $callback,
            // CUDA runtime (libcudart.so.12 / .13).
            Runtime guarded fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> CudaError;
            Runtime guarded fn cudaFree(dev_ptr: *mut c_void) -> CudaError;
            Runtime guarded fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: Stream) -> CudaError;
            Runtime guarded fn cudaMallocAsync_ptsz(dev_ptr: *mut *mut c_void, size: usize, stream: Stream) -> CudaError;
            Runtime guarded fn cudaFreeAsync(dev_ptr: *mut c_void, stream: Stream) -> CudaError;
            Runtime guarded fn cudaFreeAsync_ptsz(dev_ptr: *mut c_void, stream: Stream) -> CudaError;
            Runtime guarded fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> CudaError;
            Runtime guarded fn cudaGetDeviceProperties(prop: *mut c_void, device: c_int) -> CudaError;
            Runtime guarded fn cudaGetDeviceProperties_v2(prop: *mut c_void, device: c_int) -> CudaError;
            Runtime routing fn cudaGetDriverEntryPoint(symbol: *const c_char, func: *mut *mut c_void, flags: u64, status: *mut CudaDriverEntryPointQueryResult) -> CudaError;
            Runtime routing fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, func: *mut *mut c_void, cuda_version: c_uint, flags: u64, status: *mut CudaDriverEntryPointQueryResult) -> CudaError;
            Runtime called fn cudaGetDevice(device: *mut c_int) -> CudaError;
            Runtime called fn cudaGetLastError() -> CudaError;
            // CUDA driver (libcuda.so.1).
            Driver guarded fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, size: usize) -> CuResult;
            Driver guarded fn cuMemFree_v2(dptr: CuDevicePtr) -> CuResult;
            Driver guarded fn cuMemAllocAsync(dptr: *mut CuDevicePtr, size: usize, stream: Stream) -> CuResult;
            Driver guarded fn cuMemAllocAsync_ptsz(dptr: *mut CuDevicePtr, size: usize, stream: Stream) -> CuResult;
            Driver guarded fn cuMemFreeAsync(dptr: CuDevicePtr, stream: Stream) -> CuResult;
            Driver guarded fn cuMemFreeAsync_ptsz(dptr: CuDevicePtr, stream: Stream) -> CuResult;
            Driver guarded fn cuMemAllocFromPoolAsync(dptr: *mut CuDevicePtr, size: usize, pool: MemPool, stream: Stream) -> CuResult;
            Driver guarded fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CuDevicePtr, size: usize, pool: MemPool, stream: Stream) -> CuResult;
            Driver guarded fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult;
            Driver guarded fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CuDevice) -> CuResult;
            Driver guarded fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: CuDevicePtr) -> CuResult;
            Driver guarded fn cuPointerGetAttributes(count: c_uint, attributes: *mut c_int, data: *mut *mut c_void, ptr: CuDevicePtr) -> CuResult;
            Driver guarded fn cuIpcGetMemHandle(handle: *mut c_void, dptr: CuDevicePtr) -> CuResult;
            Driver guarded fn cuMemCreate(handle: *mut CuMemGenericAllocationHandle, size: usize, prop: *const CuMemAllocationProp, flags: u64) -> CuResult;
            Driver guarded fn cuMemRelease(handle: CuMemGenericAllocationHandle) -> CuResult;
            Driver routing fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CuResult;
            Driver routing fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut CuDriverProcAddressQueryResult) -> CuResult;
            Driver called fn cuCtxGetCurrent(context: *mut Context) -> CuResult;
            Driver called fn cuCtxGetDevice(device: *mut CuDevice) -> CuResult;
            Driver called fn cuCtxSynchronize() -> CuResult;
            Driver called fn cuCtxPushCurrent_v2(context: Context) -> CuResult;
            Driver called fn cuCtxPopCurrent_v2(context: *mut Context) -> CuResult;
            Driver called fn cuMemHostRegister_v2(ptr: *mut c_void, len: usize, flags: c_uint) -> CuResult;
            Driver called fn cuMemHostGetDevicePointer_v2(dptr: *mut CuDevicePtr, ptr: *mut c_void, flags: c_uint) -> CuResult;
            Driver called fn cuMemHostUnregister(ptr: *mut c_void) -> CuResult;
            Driver called fn cuEventCreate(event: *mut Event, flags: c_uint) -> CuResult;
            Driver called fn cuEventRecord(event: Event, stream: Stream) -> CuResult;
            Driver called fn cuEventQuery(event: Event) -> CuResult;
            Driver called fn cuEventSynchronize(event: Event) -> CuResult;
            Driver called fn cuEventDestroy_v2(event: Event) -> CuResult;
            Driver called fn cuEventElapsedTime(ms: *mut f32, start: Event, end: Event) -> CuResult;
            Driver called fn cuStreamSynchronize(stream: Stream) -> CuResult;
            Driver called fn cuStreamCreate(stream: *mut Stream, flags: c_uint) -> CuResult;
            Driver called fn cuStreamDestroy_v2(stream: Stream) -> CuResult;
            Driver called fn cuStreamWaitEvent(stream: Stream, event: Event, flags: c_uint) -> CuResult;
            Driver called fn cuStreamIsCapturing(stream: Stream, status: *mut c_int) -> CuResult;
            Driver called fn cuMemGetAddressRange_v2(base: *mut CuDevicePtr, size: *mut usize, dptr: CuDevicePtr) -> CuResult;
            Driver called fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: CuDevice) -> CuResult;
            Driver called fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CuMemAllocationProp, option: c_int) -> CuResult;
            Driver called fn cuMemAddressReserve(ptr: *mut CuDevicePtr, size: usize, alignment: usize, addr: CuDevicePtr, flags: u64) -> CuResult;
            Driver called fn cuMemAddressFree(ptr: CuDevicePtr, size: usize) -> CuResult;
            Driver called fn cuMemMap(ptr: CuDevicePtr, size: usize, offset: usize, handle: CuMemGenericAllocationHandle, flags: u64) -> CuResult;
            Driver called fn cuMemUnmap(ptr: CuDevicePtr, size: usize) -> CuResult;
            Driver called fn cuMemSetAccess(ptr: CuDevicePtr, size: usize, desc: *const CuMemAccessDesc, count: usize) -> CuResult;
            Driver called fn cuMemAllocManaged(dptr: *mut CuDevicePtr, size: usize, flags: c_uint) -> CuResult;
            Driver called fn cuMemAdvise_v2(dptr: CuDevicePtr, count: usize, advice: c_int, location: CuMemLocation) -> CuResult;
            Driver called fn cuMemAdvise(dptr: CuDevicePtr, count: usize, advice: c_int, device: CuDevice) -> CuResult;
            Driver called fn cuMemPrefetchAsync_v2(dptr: CuDevicePtr, count: usize, location: CuMemLocation, flags: c_uint, stream: Stream) -> CuResult;
            Driver called fn cuMemPrefetchAsync(dptr: CuDevicePtr, count: usize, device: CuDevice, stream: Stream) -> CuResult;
            Driver called fn cuStreamCreateWithPriority(stream: *mut Stream, flags: c_uint, priority: c_int) -> CuResult;
            Driver called fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CuResult;
            Driver called fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> CuResult;
            Driver called fn cuImportExternalMemory(external: *mut ExternalMemory, desc: *const CudaExternalMemoryHandleDesc) -> CuResult;
            Driver called fn cuDestroyExternalMemory(external: ExternalMemory) -> CuResult;
            Driver called fn cuModuleLoadData(module: *mut CuModule, image: *const c_void) -> CuResult;
            Driver called fn cuModuleGetFunction(function: *mut CuFunction, module: CuModule, name: *const c_char) -> CuResult;
            // Where `__device__` globals are (the runtime's cudaMemcpyToSymbol finds them so): observed (`launch::indirect`).
            Driver observed fn cuModuleGetGlobal_v2(address: *mut CuDevicePtr, bytes: *mut usize, module: CuModule, name: *const c_char) -> CuResult;
            Driver observed fn cuLibraryGetGlobal(address: *mut CuDevicePtr, bytes: *mut usize, library: *mut c_void, name: *const c_char) -> CuResult;
            // Kernel launches, graphs, stream captures and tensor maps: observed (`launch`).
            Driver observed fn cuLaunchKernel(function: CuFunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_bytes: c_uint, stream: Stream, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchKernel_ptsz(function: CuFunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_bytes: c_uint, stream: Stream, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchKernelEx(config: *const CuLaunchConfig, function: CuFunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchKernelEx_ptsz(config: *const CuLaunchConfig, function: CuFunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchCooperativeKernel(function: CuFunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_bytes: c_uint, stream: Stream, params: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchCooperativeKernel_ptsz(function: CuFunction, grid_x: c_uint, grid_y: c_uint, grid_z: c_uint, block_x: c_uint, block_y: c_uint, block_z: c_uint, shared_bytes: c_uint, stream: Stream, params: *mut *mut c_void) -> CuResult;
            Driver observed fn cuLaunchHostFunc(stream: Stream, function: *mut c_void, user_data: *mut c_void) -> CuResult;
            Driver observed fn cuLaunchHostFunc_ptsz(stream: Stream, function: *mut c_void, user_data: *mut c_void) -> CuResult;
            Driver observed fn cuGraphInstantiateWithFlags(exec: *mut GraphExec, graph: Graph, flags: u64) -> CuResult;
            Driver observed fn cuGraphInstantiate_v2(exec: *mut GraphExec, graph: Graph, error_node: *mut GraphNode, log: *mut c_char, log_size: usize) -> CuResult;
            Driver observed fn cuGraphInstantiateWithParams(exec: *mut GraphExec, graph: Graph, params: *mut c_void) -> CuResult;
            Driver observed fn cuGraphInstantiateWithParams_ptsz(exec: *mut GraphExec, graph: Graph, params: *mut c_void) -> CuResult;
            Driver observed fn cuGraphLaunch(exec: GraphExec, stream: Stream) -> CuResult;
            Driver observed fn cuGraphLaunch_ptsz(exec: GraphExec, stream: Stream) -> CuResult;
            Driver observed fn cuGraphExecDestroy(exec: GraphExec) -> CuResult;
            Driver observed fn cuGraphExecKernelNodeSetParams_v2(exec: GraphExec, node: GraphNode, params: *const KernelNodeParams) -> CuResult;
            Driver observed fn cuGraphExecKernelNodeSetParams(exec: GraphExec, node: GraphNode, params: *const KernelNodeParams) -> CuResult;
            Driver observed fn cuGraphExecNodeSetParams(exec: GraphExec, node: GraphNode, params: *mut GraphNodeParamsPrefix) -> CuResult;
            Driver observed fn cuGraphExecUpdate_v2(exec: GraphExec, graph: Graph, result_info: *mut c_void) -> CuResult;
            Driver observed fn cuGraphExecUpdate(exec: GraphExec, graph: Graph, error_node: *mut GraphNode, result: *mut c_int) -> CuResult;
            Driver observed fn cuTexObjectCreate(texture: *mut u64, resource: *const ResourceDesc, texture_desc: *const c_void, view_desc: *const c_void) -> CuResult;
            Driver observed fn cuTexObjectDestroy(texture: u64) -> CuResult;
            Driver observed fn cuStreamBeginCapture(stream: Stream) -> CuResult;
            Driver observed fn cuStreamBeginCapture_ptsz(stream: Stream) -> CuResult;
            Driver observed fn cuStreamBeginCapture_v2(stream: Stream, mode: c_int) -> CuResult;
            Driver observed fn cuStreamBeginCapture_v2_ptsz(stream: Stream, mode: c_int) -> CuResult;
            Driver observed fn cuStreamBeginCaptureToGraph(stream: Stream, graph: Graph, dependencies: *const GraphNode, edge_data: *const c_void, count: usize, mode: c_int) -> CuResult;
            Driver observed fn cuStreamBeginCaptureToGraph_ptsz(stream: Stream, graph: Graph, dependencies: *const GraphNode, edge_data: *const c_void, count: usize, mode: c_int) -> CuResult;
            Driver observed fn cuStreamEndCapture(stream: Stream, graph: *mut Graph) -> CuResult;
            Driver observed fn cuStreamEndCapture_ptsz(stream: Stream, graph: *mut Graph) -> CuResult;
            Driver observed fn cuTensorMapEncodeTiled(map: *mut c_void, data_type: c_int, rank: c_uint, global: *mut c_void, dims: *const u64, strides: *const u64, box_dims: *const u32, element_strides: *const u32, interleave: c_int, swizzle: c_int, l2_promotion: c_int, oob_fill: c_int) -> CuResult;
            Driver observed fn cuTensorMapEncodeIm2col(map: *mut c_void, data_type: c_int, rank: c_uint, global: *mut c_void, dims: *const u64, strides: *const u64, lower_corner: *const c_int, upper_corner: *const c_int, channels: c_uint, pixels: c_uint, element_strides: *const u32, interleave: c_int, swizzle: c_int, l2_promotion: c_int, oob_fill: c_int) -> CuResult;
            Driver observed fn cuTensorMapEncodeIm2colWide(map: *mut c_void, data_type: c_int, rank: c_uint, global: *mut c_void, dims: *const u64, strides: *const u64, lower_corner_width: c_int, upper_corner_width: c_int, channels: c_uint, pixels: c_uint, element_strides: *const u32, interleave: c_int, mode: c_int, swizzle: c_int, l2_promotion: c_int, oob_fill: c_int) -> CuResult;
            Driver observed fn cuTensorMapReplaceAddress(map: *mut c_void, global: *mut c_void) -> CuResult;
            Driver called fn cuFuncGetParamInfo(function: CuFunction, index: usize, offset: *mut usize, size: *mut usize) -> CuResult;
            Driver called fn cuKernelGetParamInfo(kernel: CuKernel, index: usize, offset: *mut usize, size: *mut usize) -> CuResult;
            Driver called fn cuGraphGetNodes(graph: Graph, nodes: *mut GraphNode, count: *mut usize) -> CuResult;
            Driver called fn cuGraphNodeGetType(node: GraphNode, node_type: *mut c_int) -> CuResult;
            Driver called fn cuGraphKernelNodeGetParams_v2(node: GraphNode, params: *mut KernelNodeParams) -> CuResult;
            Driver called fn cuGraphKernelNodeGetParams(node: GraphNode, params: *mut KernelNodeParams) -> CuResult;
            Driver called fn cuGraphMemsetNodeGetParams(node: GraphNode, params: *mut MemsetNodeParams) -> CuResult;
            Driver called fn cuGraphMemcpyNodeGetParams(node: GraphNode, params: *mut Memcpy3D) -> CuResult;
            Driver called fn cuGraphChildGraphNodeGetGraph(node: GraphNode, graph: *mut Graph) -> CuResult;
            // Copies and memsets, each with its per-thread-default-stream form: observed
            // (`launch::memory_ops`). The shim's own copies (`calls`) call the real ones.
            Driver observed fn cuMemsetD8_v2(dst: CuDevicePtr, value: c_uchar, count: usize) -> CuResult;
            Driver observed fn cuMemsetD8_v2_ptds(dst: CuDevicePtr, value: c_uchar, count: usize) -> CuResult;
            Driver observed fn cuMemsetD8Async(dst: CuDevicePtr, value: c_uchar, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD8Async_ptsz(dst: CuDevicePtr, value: c_uchar, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD16_v2(dst: CuDevicePtr, value: c_ushort, count: usize) -> CuResult;
            Driver observed fn cuMemsetD16_v2_ptds(dst: CuDevicePtr, value: c_ushort, count: usize) -> CuResult;
            Driver observed fn cuMemsetD16Async(dst: CuDevicePtr, value: c_ushort, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD16Async_ptsz(dst: CuDevicePtr, value: c_ushort, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD32_v2(dst: CuDevicePtr, value: c_uint, count: usize) -> CuResult;
            Driver observed fn cuMemsetD32_v2_ptds(dst: CuDevicePtr, value: c_uint, count: usize) -> CuResult;
            Driver observed fn cuMemsetD32Async(dst: CuDevicePtr, value: c_uint, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD32Async_ptsz(dst: CuDevicePtr, value: c_uint, count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D8_v2(dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D8_v2_ptds(dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D8Async(dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D8Async_ptsz(dst: CuDevicePtr, pitch: usize, value: c_uchar, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D16_v2(dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D16_v2_ptds(dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D16Async(dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D16Async_ptsz(dst: CuDevicePtr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D32_v2(dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D32_v2_ptds(dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize) -> CuResult;
            Driver observed fn cuMemsetD2D32Async(dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemsetD2D32Async_ptsz(dst: CuDevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy(dst: CuDevicePtr, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpy_ptds(dst: CuDevicePtr, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyAsync(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyAsync_ptsz(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyHtoD_v2(dst: CuDevicePtr, src: *const c_void, len: usize) -> CuResult;
            Driver observed fn cuMemcpyHtoD_v2_ptds(dst: CuDevicePtr, src: *const c_void, len: usize) -> CuResult;
            Driver observed fn cuMemcpyHtoDAsync_v2(dst: CuDevicePtr, src: *const c_void, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyHtoDAsync_v2_ptsz(dst: CuDevicePtr, src: *const c_void, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyDtoD_v2(dst: CuDevicePtr, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoD_v2_ptds(dst: CuDevicePtr, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoDAsync_v2(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyDtoDAsync_v2_ptsz(dst: CuDevicePtr, src: CuDevicePtr, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyPeer(dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize) -> CuResult;
            Driver observed fn cuMemcpyPeer_ptds(dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize) -> CuResult;
            Driver observed fn cuMemcpyPeerAsync(dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyPeerAsync_ptsz(dst: CuDevicePtr, dst_context: Context, src: CuDevicePtr, src_context: Context, len: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy2D_v2(copy: *const Memcpy2D) -> CuResult;
            Driver observed fn cuMemcpy2D_v2_ptds(copy: *const Memcpy2D) -> CuResult;
            Driver observed fn cuMemcpy2DUnaligned_v2(copy: *const Memcpy2D) -> CuResult;
            Driver observed fn cuMemcpy2DUnaligned_v2_ptds(copy: *const Memcpy2D) -> CuResult;
            Driver observed fn cuMemcpy2DAsync_v2(copy: *const Memcpy2D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy2DAsync_v2_ptsz(copy: *const Memcpy2D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3D_v2(copy: *const Memcpy3D) -> CuResult;
            Driver observed fn cuMemcpy3D_v2_ptds(copy: *const Memcpy3D) -> CuResult;
            Driver observed fn cuMemcpy3DAsync_v2(copy: *const Memcpy3D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DAsync_v2_ptsz(copy: *const Memcpy3D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DPeer(copy: *const Memcpy3D) -> CuResult;
            Driver observed fn cuMemcpy3DPeer_ptds(copy: *const Memcpy3D) -> CuResult;
            Driver observed fn cuMemcpy3DPeerAsync(copy: *const Memcpy3D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DPeerAsync_ptsz(copy: *const Memcpy3D, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyBatchAsync(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void, attribute_indices: *mut usize, attribute_count: usize, fail_index: *mut usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyBatchAsync_ptsz(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void, attribute_indices: *mut usize, attribute_count: usize, fail_index: *mut usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyBatchAsync_v2(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void, attribute_indices: *mut usize, attribute_count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyBatchAsync_v2_ptsz(dsts: *mut CuDevicePtr, srcs: *mut CuDevicePtr, sizes: *mut usize, count: usize, attributes: *mut c_void, attribute_indices: *mut usize, attribute_count: usize, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DBatchAsync(count: usize, ops: *mut Memcpy3DBatchOp, fail_index: *mut usize, flags: u64, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DBatchAsync_ptsz(count: usize, ops: *mut Memcpy3DBatchOp, fail_index: *mut usize, flags: u64, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DBatchAsync_v2(count: usize, ops: *mut Memcpy3DBatchOp, flags: u64, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpy3DBatchAsync_v2_ptsz(count: usize, ops: *mut Memcpy3DBatchOp, flags: u64, stream: Stream) -> CuResult;
            Driver observed fn cuMemcpyAtoD_v2(dst: CuDevicePtr, src_array: *mut c_void, src_offset: usize, len: usize) -> CuResult;
            Driver observed fn cuMemcpyAtoD_v2_ptds(dst: CuDevicePtr, src_array: *mut c_void, src_offset: usize, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoA_v2(dst_array: *mut c_void, dst_offset: usize, src: CuDevicePtr, len: usize) -> CuResult;
            Driver observed fn cuMemcpyDtoA_v2_ptds(dst_array: *mut c_void, dst_offset: usize, src: CuDevicePtr, len: usize) -> CuResult;
            // NVML (libnvidia-ml.so.1).
            Nvml guarded fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut NvmlMemory) -> NvmlReturn;
            Nvml guarded fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, memory: *mut NvmlMemoryV2) -> NvmlReturn;
            Nvml called fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn;
            // cuBLAS / cuBLASLt (libcublas.so.12/.13, libcublasLt): GEMM operand staging.
            Cublas guarded fn cublasCreate_v2(handle: *mut CublasHandle) -> CublasStatus;
            CublasLt guarded fn cublasLtCreate(handle: *mut CublasHandle) -> CublasStatus;
            Cublas guarded fn cublasGemmEx(handle: CublasHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, b: *const c_void, b_type: c_int, ldb: c_int, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, compute_type: c_int, algo: c_int) -> CublasStatus;
            Cublas guarded fn cublasSgemm_v2(handle: CublasHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, beta: *const f32, c: *mut f32, ldc: c_int) -> CublasStatus;
            Cublas guarded fn cublasGemmStridedBatchedEx(handle: CublasHandle, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, stride_a: i64, b: *const c_void, b_type: c_int, ldb: c_int, stride_b: i64, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, stride_c: i64, batch: c_int, compute_type: c_int, algo: c_int) -> CublasStatus;
            CublasLt guarded fn cublasLtMatmul(handle: CublasHandle, desc: *mut c_void, alpha: *const c_void, a: *const c_void, a_desc: *mut c_void, b: *const c_void, b_desc: *mut c_void, beta: *const c_void, c: *const c_void, c_desc: *mut c_void, d: *mut c_void, d_desc: *mut c_void, algo: *const c_void, workspace: *mut c_void, workspace_size: usize, stream: Stream) -> CublasStatus;
            Cublas called fn cublasGetStream_v2(handle: CublasHandle, stream: *mut Stream) -> CublasStatus;
            Cublas called fn cublasGetMathMode(handle: CublasHandle, mode: *mut c_int) -> CublasStatus;
            CublasLt called fn cublasLtMatrixLayoutGetAttribute(layout: *mut c_void, attribute: c_int, buffer: *mut c_void, size: usize, written: *mut usize) -> CublasStatus;
            Cublas called fn cublasGetPointerMode_v2(handle: CublasHandle, mode: *mut c_int) -> CublasStatus;
            CublasLt called fn cublasLtDestroy(handle: CublasHandle) -> CublasStatus;
            CublasLt called fn cublasLtMatrixLayoutCreate(layout: *mut *mut c_void, data_type: c_int, rows: u64, cols: u64, ld: i64) -> CublasStatus;
            CublasLt called fn cublasLtMatrixLayoutDestroy(layout: *mut c_void) -> CublasStatus;
            CublasLt called fn cublasLtMatmulDescCreate(desc: *mut *mut c_void, compute_type: c_int, scale_type: c_int) -> CublasStatus;
            CublasLt called fn cublasLtMatmulDescDestroy(desc: *mut c_void) -> CublasStatus;
            CublasLt called fn cublasLtMatmulDescSetAttribute(desc: *mut c_void, attribute: c_int, buffer: *const c_void, size: usize) -> CublasStatus;
            CublasLt called fn cublasLtMatmulPreferenceCreate(preference: *mut *mut c_void) -> CublasStatus;
            CublasLt called fn cublasLtMatmulPreferenceDestroy(preference: *mut c_void) -> CublasStatus;
            CublasLt called fn cublasLtMatmulPreferenceSetAttribute(preference: *mut c_void, attribute: c_int, buffer: *const c_void, size: usize) -> CublasStatus;
            CublasLt called fn cublasLtMatmulAlgoGetHeuristic(handle: CublasHandle, desc: *mut c_void, a: *mut c_void, b: *mut c_void, c: *mut c_void, d: *mut c_void, preference: *mut c_void, requested: c_int, results: *mut c_void, returned: *mut c_int) -> CublasStatus;
            // libc: naked trampolines that keep the caller's return address (see `hooks`).
            Libc trampoline fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
            Libc trampoline fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
        }
    };
}
pub(crate) use cuda_functions;

/// What a line of the table says about one function.
pub struct FunctionInfo {
    /// NUL-terminated symbol name.
    pub name: &'static str,
    pub api: Api,
    /// Whether the shim exports a hook for it (every mode but `called`).
    pub hooked: bool,
}

impl FunctionInfo {
    /// The name without its NUL.
    pub fn symbol(&self) -> &'static [u8] {
        let bytes = self.name.as_bytes();
        bytes.split_last().map_or(bytes, |(_, name)| name)
    }
}

macro_rules! is_hooked {
    (called) => {
        false
    };
    ($mode:ident) => {
        true
    };
}

macro_rules! real_functions {
    ($($api:ident $mode:ident fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        /// One variant per function of the table, in table order, named as in C (so
        /// `cuModuleGetFunction` ends with the enum's name).
        #[allow(non_camel_case_types, clippy::enum_variant_names)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Function { $($name,)* }

        pub const FUNCTION_COUNT: usize = [$(Function::$name),*].len();

        /// Every function in table order, to turn an index back into a `Function`.
        pub const FUNCTIONS: [Function; FUNCTION_COUNT] = [$(Function::$name),*];

        /// The C type of each function.
        #[allow(non_camel_case_types)]
        pub mod pfn {
            use super::*;
            $(pub type $name = unsafe extern "C" fn($($ty),*) -> $ret;)*
        }

        pub static INFO: [FunctionInfo; FUNCTION_COUNT] = [$(FunctionInfo {
            name: concat!(stringify!($name), "\0"),
            api: Api::$api,
            hooked: is_hooked!($mode),
        },)*];

        $(
            /// The real function, resolved once; `None` while its library or symbol is
            /// missing.
            #[allow(non_snake_case, dead_code)]
            pub fn $name() -> Option<pfn::$name> {
                let found = address(Function::$name);
                // SAFETY: `address` returns null or an address resolved for exactly this
                // symbol name in the line's library (or handed to the program for that
                // name by the library itself), whose C signature is the one in the table.
                (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, pfn::$name>(found) })
            }
        )*
    };
}

cuda_functions!(real_functions);

static SLOTS: [AtomicPtr<c_void>; FUNCTION_COUNT] = [const { AtomicPtr::new(ptr::null_mut()) }; FUNCTION_COUNT];

pub fn info(function: Function) -> &'static FunctionInfo {
    &INFO[function as usize]
}

/// The address of the shim's own hook for each hooked function (null for `called`
/// lines), filled in by `hooks`, which makes the hooks: `routing` hands these out.
pub struct HookAddresses(pub [*const (); FUNCTION_COUNT]);

// SAFETY: the addresses are code addresses, immutable after construction.
unsafe impl Sync for HookAddresses {}

impl HookAddresses {
    /// The shim's hook for `function` (null: not hooked).
    pub fn get(&self, function: Function) -> *mut c_void {
        self.0.get(function as usize).map_or(ptr::null_mut(), |address| address.cast_mut().cast())
    }

    /// Whether `address` is one of the shim's own hooks (never to be recorded as real).
    pub fn is_ours(&self, address: *const c_void) -> bool {
        !address.is_null() && self.0.iter().any(|hook| hook.cast::<c_void>() == address)
    }
}

/// The hooked function of this name, if the table has one.
pub fn find_hooked(name: &[u8]) -> Option<Function> {
    let index = INFO.iter().position(|info| info.hooked && info.symbol() == name)?;
    FUNCTIONS.get(index).copied()
}

/// The real function's address: cached, else looked up in its library (null: missing).
pub fn address(function: Function) -> *mut c_void {
    let Some(slot) = SLOTS.get(function as usize) else { return ptr::null_mut() };
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let info = info(function);
    let found = match info.api {
        Api::Libc => match std::ffi::CStr::from_bytes_with_nul(info.name.as_bytes()) {
            Ok(name) => libs::libc_next(name),
            Err(_) => ptr::null_mut(),
        },
        Api::Runtime => in_library(libs::runtime(), info),
        Api::Driver => in_library(libs::driver(), info),
        Api::Nvml => in_library(libs::nvml(), info),
        Api::Cublas => in_library(libs::cublas(), info),
        Api::CublasLt => in_library(libs::cublas_lt(), info),
    };
    record(function, found);
    slot.load(Ordering::Acquire)
}

/// `info`'s symbol in the library behind `handle` (null: no library, or no symbol).
fn in_library(handle: *mut c_void, info: &FunctionInfo) -> *mut c_void {
    if handle.is_null() {
        return ptr::null_mut();
    }
    libs::symbol(handle, info.name.as_ptr().cast())
}

/// Remembers the real address of a function (the program's own lookup, or ours). The
/// first one wins: all of them are the same library's implementation of one C function.
/// The caller never passes one of the shim's own hooks (see `hooks::is_ours`).
pub fn record(function: Function, found: *mut c_void) {
    let Some(slot) = SLOTS.get(function as usize) else { return };
    if found.is_null() {
        return;
    }
    if let Err(existing) = slot.compare_exchange(ptr::null_mut(), found, Ordering::AcqRel, Ordering::Acquire) {
        if existing != found {
            debug!("{:?}: the program obtained a second real address ({:p}, keeping {:p})", function, found, existing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_listed_once_and_found_by_name() {
        for (index, info) in INFO.iter().enumerate() {
            assert!(info.name.ends_with('\0'));
            assert_eq!(FUNCTIONS[index] as usize, index);
            let first = INFO.iter().position(|other| other.symbol() == info.symbol());
            assert_eq!(first, Some(index), "{} is listed twice", info.name);
            if info.hooked {
                assert_eq!(find_hooked(info.symbol()).map(|f| f as usize), Some(index), "{}", info.name);
            } else {
                assert_eq!(find_hooked(info.symbol()), None, "{} is only called", info.name);
            }
        }
        assert_eq!(find_hooked(b"cudaMallocHost"), None);
        assert_eq!(find_hooked(b"cuMemAlloc"), None, "the unversioned name is the 32-bit API");
    }

    #[test]
    fn recording_keeps_the_first_real_address() {
        let first = 0x1000 as *mut c_void;
        record(Function::cuMemRelease, first);
        record(Function::cuMemRelease, 0x2000 as *mut c_void);
        assert_eq!(SLOTS[Function::cuMemRelease as usize].load(Ordering::Relaxed), first);
        assert_eq!(address(Function::cuMemRelease), first);
    }

    #[test]
    fn the_required_symbols_are_hooked() {
        for name in [
            "cudaMalloc",
            "cudaFree",
            "cudaMallocAsync",
            "cudaFreeAsync",
            "cudaMemGetInfo",
            "cudaGetDeviceProperties",
            "cudaGetDeviceProperties_v2",
            "cudaGetDriverEntryPoint",
            "cudaGetDriverEntryPointByVersion",
            "cuMemAlloc_v2",
            "cuMemFree_v2",
            "cuMemAllocAsync",
            "cuMemFreeAsync",
            "cuMemAllocFromPoolAsync",
            "cuMemGetInfo_v2",
            "cuDeviceTotalMem_v2",
            "cuMemCreate",
            "cuMemRelease",
            "cuGetProcAddress",
            "cuGetProcAddress_v2",
            "cuMemsetD8_v2",
            "cuMemsetD32Async_ptsz",
            "cuMemcpy",
            "cuMemcpyAsync",
            "cuMemcpyHtoD_v2",
            "cuMemcpyDtoH_v2",
            "cuMemcpy2DAsync_v2",
            "cuMemcpy3DPeer_ptds",
            "cuMemcpyBatchAsync_v2",
            "cuMemcpy3DBatchAsync_v2_ptsz",
            "cuMemcpyAtoD_v2",
            "cuMemcpyDtoA_v2_ptds",
            "cuModuleGetGlobal_v2",
            "cuLibraryGetGlobal",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetMemoryInfo_v2",
            "cublasSgemmBatched",
            "cublasGemmBatchedEx_64",
            "cublasGemmGroupedBatchedEx",
            "cublasZtrsmBatched_64",
            "dlsym",
            "dlopen",
        ] {
            assert!(find_hooked(name.as_bytes()).is_some(), "{name}");
        }
    }
}
