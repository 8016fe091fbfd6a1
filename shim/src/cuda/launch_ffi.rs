//! The C types of kernel launches, graphs and tensor maps (cuda.h of CUDA 12 and 13),
//! written out by hand as in `ffi`: what the launch hooks receive and what reading a
//! graph's nodes returns.

use std::ffi::{c_int, c_uint, c_void};

use crate::cuda::ffi::{Context, CuFunction, Stream};

macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub *mut c_void);

        // SAFETY: a CUDA handle is an opaque token that the driver accepts from any
        // thread; the shim never dereferences it.
        unsafe impl Send for $name {}
        // SAFETY: as for Send: shared references only copy the token.
        unsafe impl Sync for $name {}
    )*};
}

handles! {
    /// `CUkernel`: a context-independent kernel (cuLibraryGetKernel), which the driver
    /// also takes where a `CUfunction` goes (the runtime launches its kernels so).
    CuKernel;
    /// `CUgraph`.
    Graph;
    /// `CUgraphNode`.
    GraphNode;
    /// `CUgraphExec`.
    GraphExec;
}

impl CuKernel {
    pub const NULL: CuKernel = CuKernel(std::ptr::null_mut());
}

impl Graph {
    pub const NULL: Graph = Graph(std::ptr::null_mut());
}

impl GraphNode {
    pub const NULL: GraphNode = GraphNode(std::ptr::null_mut());
}

/// `CUlaunchConfig` (cuLaunchKernelEx).
#[repr(C)]
#[derive(Debug)]
pub struct CuLaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_bytes: c_uint,
    pub stream: Stream,
    pub attributes: *mut c_void,
    pub attribute_count: c_uint,
}
const _: () = assert!(std::mem::offset_of!(CuLaunchConfig, stream) == 32);

/// `CUDA_KERNEL_NODE_PARAMS_v2` (cuGraphKernelNodeGetParams_v2; `_v3`, inside
/// `CUgraphNodeParams`, has the same layout). `_v1` is its prefix up to `extra`.
#[repr(C)]
#[derive(Debug)]
pub struct KernelNodeParams {
    pub function: CuFunction,
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_bytes: c_uint,
    pub params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kernel: CuKernel,
    pub context: Context,
}
const _: () = assert!(std::mem::size_of::<KernelNodeParams>() == 72);

impl KernelNodeParams {
    pub fn empty() -> KernelNodeParams {
        KernelNodeParams {
            function: CuFunction::NULL,
            grid: [0; 3],
            block: [0; 3],
            shared_bytes: 0,
            params: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
            kernel: CuKernel::NULL,
            context: Context::NULL,
        }
    }

    /// What the node launches: its function, or its context-independent kernel.
    pub fn launched(&self) -> CuFunction {
        if self.function == CuFunction::NULL {
            CuFunction(self.kernel.0)
        } else {
            self.function
        }
    }
}

/// `CUgraphNodeParams` (cuGraphExecNodeSetParams, cuGraphAddNode): a type, then a union
/// at offset 16 whose kernel member is `KernelNodeParams`.
#[repr(C)]
#[derive(Debug)]
pub struct GraphNodeParamsPrefix {
    pub node_type: c_int,
    pub reserved: [c_int; 3],
    pub kernel: KernelNodeParams,
}

/// `CUgraphNodeType`: the kinds of node a graph holds.
pub mod node_type {
    use std::ffi::c_int;
    pub const KERNEL: c_int = 0;
    pub const MEMCPY: c_int = 1;
    pub const MEMSET: c_int = 2;
    pub const HOST: c_int = 3;
    pub const GRAPH: c_int = 4;
    pub const EMPTY: c_int = 5;
    pub const WAIT_EVENT: c_int = 6;
    pub const EVENT_RECORD: c_int = 7;
    pub const EXT_SEMAS_SIGNAL: c_int = 8;
    pub const EXT_SEMAS_WAIT: c_int = 9;
    pub const MEM_ALLOC: c_int = 10;
    pub const MEM_FREE: c_int = 11;
}

/// The `extra` launch argument's keys (`CU_LAUNCH_PARAM_*`), as pointer values.
pub const CU_LAUNCH_PARAM_END: usize = 0x00;
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// `CUtensorMap`: 128 opaque bytes, 64-byte aligned, passed to kernels by value.
pub const TENSOR_MAP_BYTES: usize = 128;

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: a capture that ended broken (it is over).
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: c_int = 901;
