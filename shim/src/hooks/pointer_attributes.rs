//! Pointer attribute hooks (cuPointerGetAttribute, cuPointerGetAttributes; the runtime's
//! cudaPointerGetAttributes asks the latter): what the program allocated as device memory
//! answers as device memory, whatever the shim made in its place. The driver would call
//! T2 host memory and movable memory managed (cudaMemoryTypeManaged), and code that checks
//! where a pointer lives (DLPack importers, CUDA-aware communication libraries) would then
//! take the program's tensor for something it did not allocate. Rewritten, after the
//! driver answered: the memory type (device), whether it is managed (no) and its host
//! pointer (none, as for device memory). Everything else is the driver's answer, among
//! it CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, which stays false: such memory
//! cannot be exported (see `driver::ipc_get_mem_handle`), and libraries that ask before
//! using IPC take their other path.
//!
//! Split ranges are VMM device mappings: the driver already answers device memory.

use std::ffi::{c_int, c_uint, c_void};

use crate::cuda::ffi::*;
use crate::cuda::real::pfn;
use crate::memory::registry::{self, ShimMade};

/// Whether `ptr` is memory the shim made that the driver would not call device memory.
fn answered_as_device(ptr: CuDevicePtr) -> bool {
    matches!(registry::shim_made(ptr), Some(ShimMade::T2 | ShimMade::Movable))
}

/// Sets a boolean the driver wrote to false, whether the program reads it as a one-byte
/// bool or an unsigned int (the driver sets one, leaving the int's upper bytes zero).
///
/// # Safety
/// `at` holds a boolean attribute value the driver has just written.
unsafe fn clear_boolean(at: *mut c_void) {
    const _: () = assert!(cfg!(target_endian = "little"), "the lowest byte of an int is its first");
    // SAFETY: at least one byte was written there by the driver (the contract).
    unsafe { at.cast::<u8>().write(0) };
}

/// # Safety
/// The program's arguments, as cuPointerGetAttribute takes them.
pub unsafe fn pointer_get_attribute(
    real: pfn::cuPointerGetAttribute,
    data: *mut c_void,
    attribute: c_int,
    ptr: CuDevicePtr,
) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(data, attribute, ptr) };
    if status != CuResult::SUCCESS || data.is_null() || !answered_as_device(ptr) {
        return status;
    }
    match attribute {
        // SAFETY: the driver accepted `data` for this attribute and wrote its value there:
        // the memory type, a 4-byte enum.
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE => unsafe { data.cast::<c_uint>().write(CU_MEMORYTYPE_DEVICE) },
        // SAFETY: the driver wrote a boolean there, which programs read as a bool or an
        // unsigned int: its first byte is the value's lowest on every little-endian
        // target CUDA runs on, so clearing that byte answers "no" for either width.
        CU_POINTER_ATTRIBUTE_IS_MANAGED => unsafe { clear_boolean(data) },
        // Device memory has no host pointer: the driver refuses the question.
        CU_POINTER_ATTRIBUTE_HOST_POINTER => return CuResult::INVALID_VALUE,
        _ => {}
    }
    status
}

/// # Safety
/// The program's arguments, as cuPointerGetAttributes takes them.
pub unsafe fn pointer_get_attributes(
    real: pfn::cuPointerGetAttributes,
    count: c_uint,
    attributes: *mut c_int,
    data: *mut *mut c_void,
    ptr: CuDevicePtr,
) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(count, attributes, data, ptr) };
    if status != CuResult::SUCCESS || attributes.is_null() || data.is_null() || !answered_as_device(ptr) {
        return status;
    }
    for index in 0..count as usize {
        // SAFETY: the driver read `count` attributes and as many value pointers from these
        // arrays and accepted them.
        let (attribute, value) = unsafe { (*attributes.add(index), *data.add(index)) };
        if value.is_null() {
            continue;
        }
        // SAFETY: each value pointer is where the driver wrote that attribute's value: an
        // unsigned int, an int, or a pointer (the host pointer, none for device memory,
        // which the driver answers with a null rather than an error here).
        unsafe {
            match attribute {
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE => value.cast::<c_uint>().write(CU_MEMORYTYPE_DEVICE),
                CU_POINTER_ATTRIBUTE_IS_MANAGED => clear_boolean(value),
                CU_POINTER_ATTRIBUTE_HOST_POINTER => value.cast::<*mut c_void>().write(std::ptr::null_mut()),
                _ => {}
            }
        }
    }
    status
}
