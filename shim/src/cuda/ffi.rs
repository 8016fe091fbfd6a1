//! The CUDA driver, runtime, NVML and cuBLAS C types the shim touches, written out by
//! hand (from cuda.h / cuda_runtime_api.h / nvml.h / cublas_api.h of CUDA 12 and 13,
//! which agree on all of them) so that the shim needs no CUDA headers and no CUDA
//! library at build time.
//!
//! Statuses are `#[repr(transparent)]` newtypes over the C `int` (ABI-identical to it in
//! every signature), and `CuResult::ok` turns a driver status into `Result<(), CuError>`
//! so that `?` works. Handles are newtypes too, so that a context is never mistaken for
//! a stream and nothing is stored as a bare integer.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`: driver API status.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuResult(pub c_int);

impl CuResult {
    pub const SUCCESS: CuResult = CuResult(0);
    pub const INVALID_VALUE: CuResult = CuResult(1);
    pub const OUT_OF_MEMORY: CuResult = CuResult(2);
    pub(super) const NOT_INITIALIZED: CuResult = CuResult(3);
    pub const NOT_READY: CuResult = CuResult(600);

    /// `Ok` for CUDA_SUCCESS, else the error.
    pub fn ok(self) -> Result<(), CuError> {
        if self == CuResult::SUCCESS {
            Ok(())
        } else {
            Err(CuError(self.0))
        }
    }
}

/// A driver status other than CUDA_SUCCESS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuError(pub c_int);

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA error {}", self.0)
    }
}

/// `cudaError_t`: runtime API status.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError(pub c_int);

impl CudaError {
    pub const SUCCESS: CudaError = CudaError(0);
    pub const INVALID_VALUE: CudaError = CudaError(1);
    pub const MEMORY_ALLOCATION: CudaError = CudaError(2);
    /// cudaErrorInitializationError, the answer when the runtime cannot be found.
    pub(super) const INITIALIZATION: CudaError = CudaError(3);
}

/// `nvmlReturn_t`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmlReturn(pub c_int);

impl NvmlReturn {
    pub const SUCCESS: NvmlReturn = NvmlReturn(0);
    pub(super) const UNINITIALIZED: NvmlReturn = NvmlReturn(1);
}

/// `cublasStatus_t`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CublasStatus(pub c_int);

impl CublasStatus {
    pub const SUCCESS: CublasStatus = CublasStatus(0);
    pub(super) const NOT_INITIALIZED: CublasStatus = CublasStatus(1);
}

/// The status a function of each library answers when the library cannot be found at
/// all (the shim then has no real function to call).
pub trait Missing {
    fn missing() -> Self;
}

impl Missing for CuResult {
    fn missing() -> Self {
        CuResult::NOT_INITIALIZED
    }
}

impl Missing for CudaError {
    fn missing() -> Self {
        CudaError::INITIALIZATION
    }
}

impl Missing for NvmlReturn {
    fn missing() -> Self {
        NvmlReturn::UNINITIALIZED
    }
}

impl Missing for CublasStatus {
    fn missing() -> Self {
        CublasStatus::NOT_INITIALIZED
    }
}

impl Missing for *mut c_void {
    fn missing() -> Self {
        std::ptr::null_mut()
    }
}

pub type CuDevicePtr = u64;
pub type CuDevice = c_int;
pub type CuMemGenericAllocationHandle = u64;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub *mut c_void);

        // SAFETY: a CUDA handle is an opaque token that the driver accepts from any
        // thread; the shim never dereferences it.
        unsafe impl Send for $name {}
        // SAFETY: as for Send: shared references only copy the token.
        unsafe impl Sync for $name {}
    };
}

handle!(
    /// `CUcontext`.
    Context
);
handle!(
    /// `CUstream` / `cudaStream_t` (null: the legacy default stream).
    Stream
);
handle!(
    /// `CUevent`.
    Event
);
handle!(
    /// `CUmemoryPool`.
    MemPool
);
handle!(
    /// `CUexternalMemory`.
    ExternalMemory
);
handle!(
    /// `CUmodule`.
    CuModule
);
handle!(
    /// `CUfunction`.
    CuFunction
);
handle!(
    /// `nvmlDevice_t`.
    NvmlDevice
);
handle!(
    /// `cublasHandle_t` / `cublasLtHandle_t`.
    CublasHandle
);

macro_rules! nullable {
    ($($name:ident),*) => {$(
        impl $name {
            pub const NULL: $name = $name(std::ptr::null_mut());

            pub fn is_null(self) -> bool {
                self.0.is_null()
            }
        }
    )*};
}

nullable!(Context, Stream, Event);

impl ExternalMemory {
    pub const NULL: ExternalMemory = ExternalMemory(std::ptr::null_mut());
}

impl CuModule {
    pub const NULL: CuModule = CuModule(std::ptr::null_mut());
}

impl CuFunction {
    pub const NULL: CuFunction = CuFunction(std::ptr::null_mut());
}

impl Stream {
    /// `CU_STREAM_PER_THREAD`: the per-thread default stream handle, which a `_ptsz`
    /// entry point means by stream 0.
    pub(super) const PER_THREAD: Stream = Stream(0x2 as *mut c_void);

    /// `CU_STREAM_LEGACY`: the legacy default stream's handle.
    const LEGACY: Stream = Stream(std::ptr::without_provenance_mut(0x1));

    /// Whether this is the legacy default stream: `CU_STREAM_LEGACY`, or 0 given to an
    /// entry point that is not a `_ptsz`/`_ptds` one.
    pub fn is_legacy(self) -> bool {
        self.is_null() || self == Stream::LEGACY
    }

    /// The stream a `_ptsz` entry point orders its work on.
    pub fn per_thread_default(self) -> Stream {
        if self.is_null() {
            Stream::PER_THREAD
        } else {
            self
        }
    }
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: cuGetProcAddress flag asking for the
/// `_ptsz`/`_ptds` variants.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CUdriverProcAddressQueryResult` (the fifth cuGetProcAddress_v2 argument).
pub type CuDriverProcAddressQueryResult = c_int;

/// `cudaDriverEntryPointQueryResult`.
pub type CudaDriverEntryPointQueryResult = c_int;

pub(super) const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub(super) const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 0x02;
pub(super) const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
pub(super) const CU_STREAM_NON_BLOCKING: c_uint = 0x1;

/// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID`: the host NUMA node closest to the GPU (-1: none).
pub(super) const CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: c_int = 134;

/// `CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE` (peak, kHz) and
/// `CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH` (bits): the device memory's peak rate.
pub(super) const CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: c_int = 36;
pub(super) const CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: c_int = 37;

/// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: the device and the CPU may use
/// managed memory at the same time (the driver resolves it); without it the CPU may not
/// touch managed memory while any kernel runs.
pub(super) const CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: c_int = 89;
/// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`, `_PCI_DEVICE_ID`, `_PCI_DOMAIN_ID`: where the GPU
/// sits, the same in every process whatever CUDA_VISIBLE_DEVICES numbers it.
pub(super) const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: c_int = 33;
pub(super) const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: c_int = 34;
pub(super) const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: c_int = 50;

/// `CUmemLocationType`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
pub(super) const CU_MEM_LOCATION_TYPE_HOST: c_int = 2;
pub(super) const CU_MEM_LOCATION_TYPE_HOST_NUMA: c_int = 3;

/// `CU_MEM_ATTACH_GLOBAL`: managed memory any stream may use.
pub(super) const CU_MEM_ATTACH_GLOBAL: c_uint = 0x1;
/// `CUmem_advise`: where managed memory should live, and who maps it.
pub const CU_MEM_ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
pub const CU_MEM_ADVISE_SET_ACCESSED_BY: c_int = 5;
/// `CU_DEVICE_CPU`: the host, where the v1 managed-memory calls take a device.
pub(super) const CU_DEVICE_CPU: CuDevice = -1;
/// `CUstreamCaptureMode`: this thread's calls neither join nor break other threads'
/// stream captures.
pub(super) const CU_STREAM_CAPTURE_MODE_RELAXED: c_int = 2;

/// `CU_MEM_HANDLE_TYPE_FABRIC` (`CUmemAllocationHandleType`): memory exported across
/// NVLink fabric.
pub const CU_MEM_HANDLE_TYPE_FABRIC: c_int = 0x8;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`: the one `CUmemAllocationType` cuMemCreate makes.
pub(super) const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM` (`CUmemAllocationGranularity_flags`).
pub(super) const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_int = 0;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE` (`CUmemAccess_flags`).
pub(super) const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;

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
    pub(super) win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}
const _: () = assert!(std::mem::size_of::<CuMemAllocationProp>() == 32);

impl CuMemAllocationProp {
    /// Pinned device memory on `device`, without any shareable handle type.
    pub fn device(device: CuDevice) -> CuMemAllocationProp {
        CuMemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        }
    }

    /// These properties moved to host NUMA node `node`. Host memory is neither
    /// GPUDirect-RDMA capable nor compressible: the driver refuses a host-NUMA request
    /// that asks for either (CUDA_ERROR_INVALID_VALUE, seen on the H200 with PyTorch's
    /// expandable segments, which set gpuDirectRDMACapable).
    pub fn on_host_numa(self, node: c_int) -> CuMemAllocationProp {
        CuMemAllocationProp {
            location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_HOST_NUMA, id: node },
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            ..self
        }
    }
}

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
    pub(super) pad: c_int,
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
pub(super) struct CudaDevicePropPrefix {
    pub name: [c_char; 256],
    pub(super) uuid: [u8; 16],
    pub(super) luid: [c_char; 8],
    pub(super) luid_device_node_mask: c_uint,
    pub(super) total_global_mem: usize,
}
const _: () =
    assert!(std::mem::offset_of!(CudaDevicePropPrefix, total_global_mem) == CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET);

/// cuPointerGetAttribute(s) attributes the shim answers for memory it made, and the
/// memory type it gives.
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: c_int = 4;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_numa_properties_drop_device_only_flags_and_keep_the_rest() {
        let requested = CuMemAllocationProp {
            requested_handle_types: 1,
            compression_type: 1,
            gpu_direct_rdma_capable: 1,
            usage: 1,
            ..CuMemAllocationProp::device(3)
        };
        let moved = requested.on_host_numa(2);
        assert_eq!((moved.location.type_, moved.location.id), (CU_MEM_LOCATION_TYPE_HOST_NUMA, 2));
        assert_eq!((moved.compression_type, moved.gpu_direct_rdma_capable), (0, 0));
        assert_eq!((moved.type_, moved.requested_handle_types, moved.usage), (1, 1, 1));
    }

    #[test]
    fn statuses_turn_into_results() {
        assert_eq!(CuResult::SUCCESS.ok(), Ok(()));
        assert_eq!(CuResult::OUT_OF_MEMORY.ok(), Err(CuError(2)));
        assert_eq!(Stream::NULL.per_thread_default(), Stream::PER_THREAD);
        assert!(Stream::NULL.is_legacy() && Stream::LEGACY.is_legacy());
        assert!(!Stream::PER_THREAD.is_legacy());
        let stream = Stream(0x1234 as *mut c_void);
        assert_eq!(stream.per_thread_default(), stream);
    }
}
