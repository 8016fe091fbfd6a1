//! The C types of kernel launches, copies, graphs and tensor maps (cuda.h of CUDA 12 and
//! 13), written out by hand as in `ffi`: what the launch and copy hooks receive and what
//! reading a graph's nodes returns.

use std::ffi::{c_int, c_uint, c_void};

use crate::cuda::ffi::{Context, CuDevicePtr, CuFunction, CuMemLocation, Stream};

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

/// `CUmemorytype`: what one side of a 2D or 3D copy is.
pub mod memory_type {
    use std::ffi::c_uint;
    /// `srcHost`/`dstHost`: a host pointer.
    pub const HOST: c_uint = 1;
    /// `srcDevice`/`dstDevice`: a device pointer.
    pub const DEVICE: c_uint = 2;
    // 3, `CU_MEMORYTYPE_ARRAY`: `srcArray`/`dstArray`, a CUDA array, has no address.
    /// `srcDevice`/`dstDevice`: a unified address, host or device.
    pub const UNIFIED: c_uint = 4;
}

/// `CUDA_MEMCPY2D` (cuMemcpy2D*): each side's origin (`x` bytes into row `y`), what it
/// is (`memory_type`) and its pitch; then the width in bytes and the rows copied.
#[repr(C)]
#[derive(Debug)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CuDevicePtr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CuDevicePtr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}
const _: () = assert!(std::mem::size_of::<Memcpy2D>() == 128);
const _: () = assert!(std::mem::offset_of!(Memcpy2D, dst_device) == 88);

impl Memcpy2D {
    /// The first byte the copy reads (`None`: a CUDA array).
    pub fn source_start(&self) -> Option<CuDevicePtr> {
        side_start(
            self.src_memory_type,
            self.src_host,
            self.src_device,
            self.src_x_in_bytes,
            self.src_y,
            self.src_pitch,
        )
    }

    /// The first byte the copy writes (`None`: a CUDA array).
    pub fn target_start(&self) -> Option<CuDevicePtr> {
        side_start(
            self.dst_memory_type,
            self.dst_host,
            self.dst_device,
            self.dst_x_in_bytes,
            self.dst_y,
            self.dst_pitch,
        )
    }

    pub fn bytes(&self) -> u64 {
        self.width_in_bytes.saturating_mul(self.height) as u64
    }
}

/// `CUDA_MEMCPY3D` (cuMemcpy3D*), and `CUDA_MEMCPY3D_PEER` (cuMemcpy3DPeer*), whose
/// layout is the same with each side's context where `CUDA_MEMCPY3D` has a reserved
/// pointer: each side's origin (`x` bytes into row `y` of layer `z`), what it is, its
/// pitch and its rows per layer; then the extent.
#[repr(C)]
#[derive(Debug)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CuDevicePtr,
    pub src_array: *mut c_void,
    pub src_context: Context,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CuDevicePtr,
    pub dst_array: *mut c_void,
    pub dst_context: Context,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}
const _: () = assert!(std::mem::size_of::<Memcpy3D>() == 200);
const _: () = assert!(std::mem::offset_of!(Memcpy3D, dst_device) == 136);

impl Memcpy3D {
    /// A descriptor of zeros, for the driver to fill.
    pub fn zeroed() -> Memcpy3D {
        // SAFETY: every field is an integer or a raw pointer, for which all-zero bytes
        // are a valid value (null pointers, type 0).
        unsafe { std::mem::zeroed() }
    }

    /// The first byte the copy reads (`None`: a CUDA array): row `y` of layer `z`, a
    /// layer being `src_height` rows.
    pub fn source_start(&self) -> Option<CuDevicePtr> {
        let row = self.src_z.wrapping_mul(self.src_height).wrapping_add(self.src_y);
        side_start(self.src_memory_type, self.src_host, self.src_device, self.src_x_in_bytes, row, self.src_pitch)
    }

    /// The first byte the copy writes (`None`: a CUDA array).
    pub fn target_start(&self) -> Option<CuDevicePtr> {
        let row = self.dst_z.wrapping_mul(self.dst_height).wrapping_add(self.dst_y);
        side_start(self.dst_memory_type, self.dst_host, self.dst_device, self.dst_x_in_bytes, row, self.dst_pitch)
    }

    pub fn bytes(&self) -> u64 {
        self.width_in_bytes.saturating_mul(self.height).saturating_mul(self.depth) as u64
    }
}

/// `CUmemcpy3DOperandType`: what one operand of a 3D batch's operation is.
pub mod operand_type {
    use std::ffi::c_uint;
    /// `op.ptr`: a pointer (device, host or unified address).
    pub const POINTER: c_uint = 1;
    // 2, `CU_MEMCPY_OPERAND_TYPE_ARRAY`: `op.array`, a CUDA array, has no address.
}

/// `op.ptr` of a `CUmemcpy3DOperand`: the operand's first element, its row length and
/// layer height in elements (0: those of the extent), and where to expect the memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy3DPointer {
    pub ptr: CuDevicePtr,
    pub row_length: usize,
    pub layer_height: usize,
    pub location_hint: CuMemLocation,
}

/// `op.array` of a `CUmemcpy3DOperand`: the array and the element (x, y, z) it starts at.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy3DArray {
    pub array: *mut c_void,
    pub offset: [usize; 3],
}

/// The union `op` of a `CUmemcpy3DOperand`: which member holds is its `operand_type`'s.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Memcpy3DOperandUnion {
    pub ptr: Memcpy3DPointer,
    pub array: Memcpy3DArray,
}

/// `CUmemcpy3DOperand` (CUDA 12.8): one side of an operation of cuMemcpy3DBatchAsync*.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DOperand {
    pub operand_type: c_uint,
    pub op: Memcpy3DOperandUnion,
}
const _: () = assert!(std::mem::size_of::<Memcpy3DPointer>() == 32);
const _: () = assert!(std::mem::size_of::<Memcpy3DArray>() == 32);
const _: () = assert!(std::mem::size_of::<Memcpy3DOperand>() == 40);
const _: () = assert!(std::mem::offset_of!(Memcpy3DOperand, op) == 8);

impl Memcpy3DOperand {
    /// The address of the operand's first element; `None` for a CUDA array (or a type
    /// cuda.h does not have).
    pub fn pointer(&self) -> Option<CuDevicePtr> {
        if self.operand_type != operand_type::POINTER {
            return None;
        }
        // SAFETY: a pointer operand's union holds `ptr` (cuda.h); every field of it is
        // an integer, valid whatever its bytes.
        Some(unsafe { self.op.ptr.ptr })
    }
}

/// `CUDA_MEMCPY3D_BATCH_OP` (cuMemcpy3DBatchAsync*): a copy of `extent` elements (width,
/// height, depth) from `src` to `dst`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3DBatchOp {
    pub src: Memcpy3DOperand,
    pub dst: Memcpy3DOperand,
    pub extent: [usize; 3],
    pub src_access_order: c_uint,
    pub flags: c_uint,
}
const _: () = assert!(std::mem::size_of::<Memcpy3DBatchOp>() == 112);
const _: () = assert!(std::mem::offset_of!(Memcpy3DBatchOp, dst) == 40);
const _: () = assert!(std::mem::offset_of!(Memcpy3DBatchOp, extent) == 80);
const _: () = assert!(std::mem::offset_of!(Memcpy3DBatchOp, src_access_order) == 104);
const _: () = assert!(std::mem::offset_of!(Memcpy3DBatchOp, flags) == 108);

impl Memcpy3DBatchOp {
    /// The elements the operation copies (0: none; an element is a byte between two
    /// pointers, an array's element otherwise).
    pub fn elements(&self) -> u64 {
        let [width, height, depth] = self.extent;
        width.saturating_mul(height).saturating_mul(depth) as u64
    }
}

/// Where one side of a 2D or 3D copy starts: `x` bytes into row `row` of the memory its
/// `kind` names (the host pointer, or the device or unified address); `None` for a CUDA
/// array, which has no address (or a kind cuda.h does not have).
fn side_start(
    kind: c_uint,
    host: *const c_void,
    device: CuDevicePtr,
    x: usize,
    row: usize,
    pitch: usize,
) -> Option<CuDevicePtr> {
    let base = match kind {
        memory_type::HOST => host as CuDevicePtr,
        memory_type::DEVICE | memory_type::UNIFIED => device,
        _ => return None,
    };
    Some(base.wrapping_add(x as u64).wrapping_add((row as u64).wrapping_mul(pitch as u64)))
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

/// CUDA_RESOURCE_DESC as far as a texture object's memory goes: the resource type, and the
/// device pointer that a linear and a pitched resource both hold first in the union (which
/// a `CUdeviceptr` aligns to 8). The rest of the 144-byte struct is never read here.
#[repr(C)]
pub struct ResourceDesc {
    pub res_type: c_int,
    pub device_ptr: CuDevicePtr,
}

/// Resource types whose memory is an allocation's (arrays are not).
pub const CU_RESOURCE_TYPE_LINEAR: c_int = 2;
pub const CU_RESOURCE_TYPE_PITCH2D: c_int = 3;

/// CUDA_MEMSET_NODE_PARAMS: a graph memset node's destination and shape.
#[repr(C)]
#[derive(Debug, Default)]
pub struct MemsetNodeParams {
    pub dst: CuDevicePtr,
    pub pitch: usize,
    pub value: c_uint,
    pub element_size: c_uint,
    pub width: usize,
    pub height: usize,
}
const _: () = assert!(std::mem::size_of::<MemsetNodeParams>() == 40);

impl MemsetNodeParams {
    /// The bytes the memset writes (its rows together).
    pub fn bytes(&self) -> u64 {
        let row = self.width.saturating_mul(self.element_size as usize);
        row.saturating_mul(self.height) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_side_starts_at_its_origin_in_the_memory_its_kind_names() {
        let host = 0x7000 as *const c_void;
        assert_eq!(side_start(memory_type::DEVICE, host, 0x10_0000, 16, 2, 256), Some(0x10_0000 + 16 + 512));
        assert_eq!(side_start(memory_type::UNIFIED, host, 0x10_0000, 0, 0, 0), Some(0x10_0000));
        assert_eq!(side_start(memory_type::HOST, host, 0x10_0000, 8, 1, 64), Some(0x7000 + 8 + 64));
        assert_eq!(side_start(3, host, 0x10_0000, 0, 0, 0), None, "a CUDA array");
        assert_eq!(side_start(0, host, 0x10_0000, 0, 0, 0), None);
    }

    #[test]
    fn a_3d_copy_starts_in_the_layer_its_z_names_and_moves_its_extent() {
        // SAFETY: all-zero is a valid `Memcpy3D`: integers, null pointers and handles.
        let mut copy: Memcpy3D = unsafe { std::mem::zeroed() };
        (copy.src_memory_type, copy.src_device) = (memory_type::DEVICE, 0x1_0000);
        (copy.dst_memory_type, copy.dst_host) = (memory_type::HOST, 0x9_0000 as *mut c_void);
        (copy.dst_z, copy.dst_height, copy.dst_y, copy.dst_pitch, copy.dst_x_in_bytes) = (2, 8, 3, 256, 4);
        (copy.width_in_bytes, copy.height, copy.depth) = (64, 4, 2);
        assert_eq!(copy.source_start(), Some(0x1_0000));
        assert_eq!(copy.target_start(), Some(0x9_0000 + (2 * 8 + 3) * 256 + 4));
        assert_eq!(copy.bytes(), 512);
        copy.depth = 0;
        assert_eq!(copy.bytes(), 0, "an empty extent");
    }

    #[test]
    fn a_3d_batch_operand_has_an_address_when_it_is_a_pointer() {
        let location_hint = CuMemLocation::default();
        let ptr = Memcpy3DPointer { ptr: 0x10_0000, row_length: 0, layer_height: 0, location_hint };
        let pointer = Memcpy3DOperand { operand_type: operand_type::POINTER, op: Memcpy3DOperandUnion { ptr } };
        let array = Memcpy3DArray { array: 0x5000 as *mut c_void, offset: [1, 2, 0] };
        // 2: CU_MEMCPY_OPERAND_TYPE_ARRAY.
        let array = Memcpy3DOperand { operand_type: 2, op: Memcpy3DOperandUnion { array } };
        assert_eq!(pointer.pointer(), Some(0x10_0000));
        assert_eq!(array.pointer(), None, "a CUDA array");
        let mut op = Memcpy3DBatchOp { src: array, dst: pointer, extent: [64, 4, 2], src_access_order: 1, flags: 0 };
        assert_eq!(op.elements(), 512);
        op.extent[1] = 0;
        assert_eq!(op.elements(), 0, "an empty extent");
    }
}
