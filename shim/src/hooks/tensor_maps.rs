//! Tensor map hooks: the maps the program encodes, remembered with the address each
//! describes, so that a launch passing one by value names its memory.

use std::ffi::{c_int, c_uint, c_void};

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::TENSOR_MAP_BYTES;
use crate::cuda::real::pfn;
use crate::launch::tensor_maps;

/// After an encoding that answered `status`: the map's bytes describe `global`.
///
/// # Safety
/// `map` is the program's out-pointer to a `CUtensorMap`, written when it succeeded.
unsafe fn after_encode(status: CuResult, map: *mut c_void, global: *mut c_void) -> CuResult {
    if status == CuResult::SUCCESS && !map.is_null() {
        // SAFETY: the driver filled the 128-byte map (the contract).
        tensor_maps::encoded(unsafe { &*map.cast::<[u8; TENSOR_MAP_BYTES]>() }, global as CuDevicePtr);
    }
    status
}

/// # Safety
/// The program's arguments, as cuTensorMapEncodeTiled takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn tensor_map_encode_tiled(
    real: pfn::cuTensorMapEncodeTiled,
    map: *mut c_void,
    data_type: c_int,
    rank: c_uint,
    global: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    box_dims: *const u32,
    element_strides: *const u32,
    interleave: c_int,
    swizzle: c_int,
    l2_promotion: c_int,
    oob_fill: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then the map it wrote.
    unsafe {
        let status = real(
            map,
            data_type,
            rank,
            global,
            dims,
            strides,
            box_dims,
            element_strides,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        );
        after_encode(status, map, global)
    }
}

/// # Safety
/// The program's arguments, as cuTensorMapEncodeIm2col takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn tensor_map_encode_im2col(
    real: pfn::cuTensorMapEncodeIm2col,
    map: *mut c_void,
    data_type: c_int,
    rank: c_uint,
    global: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower_corner: *const c_int,
    upper_corner: *const c_int,
    channels: c_uint,
    pixels: c_uint,
    element_strides: *const u32,
    interleave: c_int,
    swizzle: c_int,
    l2_promotion: c_int,
    oob_fill: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then the map it wrote.
    unsafe {
        let status = real(
            map,
            data_type,
            rank,
            global,
            dims,
            strides,
            lower_corner,
            upper_corner,
            channels,
            pixels,
            element_strides,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        );
        after_encode(status, map, global)
    }
}

/// # Safety
/// The program's arguments, as cuTensorMapEncodeIm2colWide takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn tensor_map_encode_im2col_wide(
    real: pfn::cuTensorMapEncodeIm2colWide,
    map: *mut c_void,
    data_type: c_int,
    rank: c_uint,
    global: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower_corner_width: c_int,
    upper_corner_width: c_int,
    channels: c_uint,
    pixels: c_uint,
    element_strides: *const u32,
    interleave: c_int,
    mode: c_int,
    swizzle: c_int,
    l2_promotion: c_int,
    oob_fill: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then the map it wrote.
    unsafe {
        let status = real(
            map,
            data_type,
            rank,
            global,
            dims,
            strides,
            lower_corner_width,
            upper_corner_width,
            channels,
            pixels,
            element_strides,
            interleave,
            mode,
            swizzle,
            l2_promotion,
            oob_fill,
        );
        after_encode(status, map, global)
    }
}

/// # Safety
/// The program's arguments, as cuTensorMapReplaceAddress takes them.
pub unsafe fn tensor_map_replace_address(
    real: pfn::cuTensorMapReplaceAddress,
    map: *mut c_void,
    global: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then the map it rewrote.
    unsafe { after_encode(real(map, global), map, global) }
}
