//! Texture object hooks: an object over memory the program allocated (a linear or pitched
//! resource) remembered with the address it reads, so that a launch passing its handle
//! names that memory; forgotten when destroyed. Each calls the real function first,
//! unchanged.

use std::ffi::c_void;

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::{ResourceDesc, CU_RESOURCE_TYPE_LINEAR, CU_RESOURCE_TYPE_PITCH2D};
use crate::cuda::real::pfn;
use crate::launch::texture_objects;

/// # Safety
/// The program's arguments, as cuTexObjectCreate takes them.
pub unsafe fn tex_object_create(
    real: pfn::cuTexObjectCreate,
    texture: *mut u64,
    resource: *const ResourceDesc,
    texture_desc: *const c_void,
    view_desc: *const c_void,
) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(texture, resource, texture_desc, view_desc) };
    if status == CuResult::SUCCESS && !texture.is_null() && !resource.is_null() {
        // SAFETY: the driver read the resource description and wrote the handle (it
        // succeeded); both are the program's, valid for the call.
        let (handle, resource) = unsafe { (*texture, &*resource) };
        if matches!(resource.res_type, CU_RESOURCE_TYPE_LINEAR | CU_RESOURCE_TYPE_PITCH2D) {
            texture_objects::created(handle, resource.device_ptr);
        }
    }
    status
}

/// # Safety
/// The program's argument, as cuTexObjectDestroy takes it.
pub unsafe fn tex_object_destroy(real: pfn::cuTexObjectDestroy, texture: u64) -> CuResult {
    // SAFETY: the real function with the program's own handle.
    let status = unsafe { real(texture) };
    if status == CuResult::SUCCESS {
        texture_objects::destroyed(texture);
    }
    status
}
