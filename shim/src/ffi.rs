//! The few CUDA driver, runtime and NVML C types the shim touches, written out by hand
//! (from cuda.h / cuda_runtime_api.h / nvml.h of CUDA 12 and 13, which agree on all of
//! them) so that the shim needs no CUDA headers and no CUDA library at build time.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`: driver API status.
pub type CuResult = c_int;
pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_NOT_READY: CuResult = 600;

/// `cudaError_t`: runtime API status.
pub type CudaError = c_int;
pub const CUDA_RT_SUCCESS: CudaError = 0;
pub const CUDA_RT_ERROR_INVALID_VALUE: CudaError = 1;
pub const CUDA_RT_ERROR_MEMORY_ALLOCATION: CudaError = 2;

/// `nvmlReturn_t`.
pub type NvmlReturn = c_int;
pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;

pub type CuDevicePtr = u64;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuEvent = *mut c_void;
pub type CuMemPool = *mut c_void;
pub type CuMemGenericAllocationHandle = u64;
pub type CuExternalMemory = *mut c_void;
pub type NvmlDevice = *mut c_void;

/// `CU_STREAM_PER_THREAD`: the per-thread default stream handle, which a `_ptsz` entry
/// point means by stream 0.
pub const CU_STREAM_PER_THREAD: CuStream = 0x2 as CuStream;

/// The stream a `_ptsz` entry point orders its work on.
pub fn per_thread_default(stream: CuStream) -> CuStream {
    if stream.is_null() {
        CU_STREAM_PER_THREAD
    } else {
        stream
    }
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: cuGetProcAddress flag asking for the
/// `_ptsz`/`_ptds` variants.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CUdriverProcAddressQueryResult` (the fifth cuGetProcAddress_v2 argument).
pub type CuDriverProcAddressQueryResult = c_int;

/// `cudaDriverEntryPointQueryResult`.
pub type CudaDriverEntryPointQueryResult = c_int;

pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 0x02;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;

/// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID`: the host NUMA node closest to the GPU (-1: none).
pub const CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: c_int = 134;

/// `CUmemLocationType`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: c_int = 3;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`: the one `CUmemAllocationType` cuMemCreate makes.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM` (`CUmemAllocationGranularity_flags`).
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_int = 0;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE` (`CUmemAccess_flags`).
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuMemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemAllocationProp {
    pub type_: c_int,
    pub requested_handle_types: c_int,
    pub location: CuMemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}
const _: () = assert!(std::mem::size_of::<CuMemAllocationProp>() == 32);

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemAccessDesc {
    pub location: CuMemLocation,
    pub flags: c_int,
}
const _: () = assert!(std::mem::size_of::<CuMemAccessDesc>() == 12);

/// `CUexternalMemoryHandleType` values the shim tries on a DMA-BUF fd.
pub const CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD: c_int = 1;
pub const CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD: c_int = 9;

/// `CUDA_EXTERNAL_MEMORY_HANDLE_DESC`.
#[repr(C)]
pub struct CudaExternalMemoryHandleDesc {
    pub type_: c_int,
    pub pad: c_int,
    /// The union `handle`: `fd` occupies its first 4 bytes.
    pub handle: [u64; 2],
    pub size: u64,
    pub flags: c_uint,
    pub reserved: [c_uint; 16],
}
const _: () = assert!(std::mem::size_of::<CudaExternalMemoryHandleDesc>() == 104);

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// Offset of `size_t totalGlobalMem` in `cudaDeviceProp` (CUDA 12 and 13): after
/// `char name[256]; cudaUUID_t uuid; char luid[8]; unsigned int luidDeviceNodeMask;`
/// and 4 bytes of alignment padding.
pub const CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET: usize = 256 + 16 + 8 + 4 + 4;

/// The leading fields of `cudaDeviceProp`, to compute the offset above from the C layout.
#[repr(C)]
pub struct CudaDevicePropPrefix {
    pub name: [c_char; 256],
    pub uuid: [u8; 16],
    pub luid: [c_char; 8],
    pub luid_device_node_mask: c_uint,
    pub total_global_mem: usize,
}
const _: () = assert!(
    std::mem::offset_of!(CudaDevicePropPrefix, total_global_mem)
        == CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET
);
