//! CUDA driver hooks (libcuda.so.1).

use crate::cuda::{self};
use crate::ffi::*;
use crate::hooks::pfn;
use crate::state::STATS;
use crate::tiers::{self, Allocated};

/// The shared body of the driver allocation hooks. The real function answers a null
/// `dptr` or a size of 0, and any call without a current context
/// (CUDA_ERROR_INVALID_CONTEXT, as CUDA would).
///
/// # Safety
/// `dptr` is null or valid for writing.
unsafe fn allocate(dptr: *mut CuDevicePtr, size: usize, vram: impl FnOnce() -> CuResult) -> CuResult {
    if dptr.is_null() || size == 0 {
        return vram();
    }
    let driver = cuda::api();
    let Some(device) = driver.current_context().and_then(|_| driver.current_device()) else {
        return vram();
    };
    let outcome = tiers::allocate(
        size as u64,
        device,
        CUDA_ERROR_OUT_OF_MEMORY,
        || match vram() {
            // SAFETY: the real allocation wrote the pointer.
            CUDA_SUCCESS => Ok(unsafe { *dptr }),
            status => Err(status),
        },
        || true,
    );
    match outcome {
        Allocated::Vram => CUDA_SUCCESS,
        Allocated::Host(device_ptr) => {
            // SAFETY: per the contract.
            unsafe { *dptr = device_ptr };
            CUDA_SUCCESS
        }
        Allocated::Failed(status) => status,
        Allocated::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

pub unsafe fn mem_alloc(real: pfn::cuMemAlloc_v2, dptr: *mut CuDevicePtr, size: usize) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    unsafe { allocate(dptr, size, || real(dptr, size)) }
}

pub unsafe fn mem_alloc_async(real: pfn::cuMemAllocAsync, dptr: *mut CuDevicePtr, size: usize, stream: CuStream) -> CuResult {
    // SAFETY: the caller's arguments, passed on. T2 memory is usable at once, so stream
    // order holds.
    unsafe { allocate(dptr, size, || real(dptr, size, stream)) }
}

pub unsafe fn mem_alloc_async_ptsz(real: pfn::cuMemAllocAsync_ptsz, dptr: *mut CuDevicePtr, size: usize, stream: CuStream) -> CuResult {
    // SAFETY: the caller's arguments.
    unsafe { mem_alloc_async(real, dptr, size, stream) }
}

pub unsafe fn mem_alloc_from_pool_async(
    real: pfn::cuMemAllocFromPoolAsync,
    dptr: *mut CuDevicePtr,
    size: usize,
    pool: CuMemPool,
    stream: CuStream,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    unsafe { allocate(dptr, size, || real(dptr, size, pool, stream)) }
}

pub unsafe fn mem_alloc_from_pool_async_ptsz(
    real: pfn::cuMemAllocFromPoolAsync_ptsz,
    dptr: *mut CuDevicePtr,
    size: usize,
    pool: CuMemPool,
    stream: CuStream,
) -> CuResult {
    // SAFETY: the caller's arguments.
    unsafe { mem_alloc_from_pool_async(real, dptr, size, pool, stream) }
}

pub unsafe fn mem_free(real: pfn::cuMemFree_v2, dptr: CuDevicePtr) -> CuResult {
    // SAFETY: the caller's argument.
    tiers::free_with(dptr, CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, || unsafe { real(dptr) }, tiers::release_now)
}

pub unsafe fn mem_free_async(real: pfn::cuMemFreeAsync, dptr: CuDevicePtr, stream: CuStream) -> CuResult {
    // SAFETY: the caller's arguments.
    tiers::free_with(dptr, CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, || unsafe { real(dptr, stream) }, |allocation| {
        tiers::release_after(allocation, stream)
    })
}

pub unsafe fn mem_free_async_ptsz(real: pfn::cuMemFreeAsync_ptsz, dptr: CuDevicePtr, stream: CuStream) -> CuResult {
    // SAFETY: the caller's arguments.
    tiers::free_with(dptr, CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, || unsafe { real(dptr, stream) }, |allocation| {
        tiers::release_after(allocation, per_thread_default(stream))
    })
}

pub unsafe fn mem_get_info(real: pfn::cuMemGetInfo_v2, free: *mut usize, total: *mut usize) -> CuResult {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(free, total) };
    if status == CUDA_SUCCESS {
        // SAFETY: the caller's arguments, which the driver accepted.
        unsafe { tiers::report_mem_info(free, total) };
    }
    status
}

pub unsafe fn device_total_mem(real: pfn::cuDeviceTotalMem_v2, bytes: *mut usize, device: CuDevice) -> CuResult {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(bytes, device) };
    if status == CUDA_SUCCESS && !bytes.is_null() {
        // SAFETY: the driver filled it.
        let total = unsafe { *bytes } as u64;
        let (_, shown_total) = tiers::reported(total, total);
        // SAFETY: as above.
        unsafe { *bytes = shown_total as usize };
    }
    status
}

/// The properties of `requested` moved to host NUMA node `node`. Host memory is neither
/// GPUDirect-RDMA capable nor compressible: the driver refuses a host-NUMA request that
/// asks for either (CUDA_ERROR_INVALID_VALUE, seen on the H200 with PyTorch's expandable
/// segments, which set gpuDirectRDMACapable).
pub fn on_host_numa(requested: CuMemAllocationProp, node: std::ffi::c_int) -> CuMemAllocationProp {
    CuMemAllocationProp {
        location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_HOST_NUMA, id: node },
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        ..requested
    }
}

/// cuMemCreate: a device allocation that does not fit the budget, or that the driver
/// refuses for lack of VRAM, is made on the GPU's host NUMA node instead
/// (CU_MEM_LOCATION_TYPE_HOST_NUMA); the caller's cuMemMap/cuMemSetAccess work on it
/// unchanged. Without host-NUMA support the device allocation is tried as asked.
pub unsafe fn mem_create(
    real: pfn::cuMemCreate,
    handle: *mut CuMemGenericAllocationHandle,
    size: usize,
    prop: *const CuMemAllocationProp,
    flags: u64,
) -> CuResult {
    // SAFETY: read only when non-null (the caller's property struct).
    let Some(requested) = (!handle.is_null() && !prop.is_null()).then(|| unsafe { *prop }) else {
        // SAFETY: the caller's arguments.
        return unsafe { real(handle, size, prop, flags) };
    };
    if requested.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || size == 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real(handle, size, prop, flags) };
    }
    let device = requested.location.id;
    let bytes = size as u64;
    let mut after_oom = false;
    if tiers::placement(bytes, device) == crate::config::Placement::Vram {
        // SAFETY: the caller's arguments.
        let status = unsafe { real(handle, size, prop, flags) };
        if status == CUDA_SUCCESS {
            // SAFETY: the driver wrote the handle.
            tiers::note_vmm(unsafe { *handle }, bytes, device, false);
            return status;
        }
        if status != CUDA_ERROR_OUT_OF_MEMORY {
            return status;
        }
        after_oom = true;
    }
    if !tiers::take_t2_capacity(bytes) {
        return tiers::out_of_memory(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let node = cuda::api().host_numa_node(device).unwrap_or(0);
    let on_host = on_host_numa(requested, node);
    // SAFETY: the caller's arguments with the location replaced.
    let status = unsafe { real(handle, size, &on_host, flags) };
    if status == CUDA_SUCCESS {
        // SAFETY: the driver wrote the handle.
        tiers::note_vmm(unsafe { *handle }, bytes, device, true);
        if after_oom {
            STATS.t2_after_vram_oom.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        debug!("VMM {}: on host NUMA node {} for device {}", crate::log::Mib(bytes), node, device);
        return status;
    }
    tiers::give_back_t2_capacity(bytes);
    info!(
        "cuMemCreate of {} on host NUMA node {} failed (CUDA error {}; handle types {:#x}, flags {:#x}/{:#x}/{:#x})",
        crate::log::Mib(bytes),
        node,
        status,
        requested.requested_handle_types,
        requested.compression_type,
        requested.gpu_direct_rdma_capable,
        requested.usage
    );
    if after_oom {
        return tiers::out_of_memory(CUDA_ERROR_OUT_OF_MEMORY);
    }
    // Host NUMA allocations unsupported: the device allocation as asked is the fallback.
    // SAFETY: the caller's arguments.
    let status = unsafe { real(handle, size, prop, flags) };
    if status == CUDA_SUCCESS {
        // SAFETY: the driver wrote the handle.
        tiers::note_vmm(unsafe { *handle }, bytes, device, false);
    }
    status
}

pub unsafe fn mem_release(real: pfn::cuMemRelease, handle: CuMemGenericAllocationHandle) -> CuResult {
    let record = tiers::vmm_record(handle);
    if record.is_some() {
        tiers::forget_vmm(handle);
    }
    // SAFETY: the caller's argument.
    let status = unsafe { real(handle) };
    if let (Some(record), true) = (record, status != CUDA_SUCCESS) {
        tiers::restore_vmm(handle, record);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_numa_properties_drop_device_only_flags_and_keep_the_rest() {
        let requested = CuMemAllocationProp {
            type_: 1,
            requested_handle_types: 1,
            location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: 3 },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 1,
            gpu_direct_rdma_capable: 1,
            usage: 1,
            reserved: [0; 4],
        };
        let moved = on_host_numa(requested, 2);
        assert_eq!((moved.location.type_, moved.location.id), (CU_MEM_LOCATION_TYPE_HOST_NUMA, 2));
        assert_eq!((moved.compression_type, moved.gpu_direct_rdma_capable), (0, 0));
        assert_eq!((moved.type_, moved.requested_handle_types, moved.usage), (1, 1, 1));
    }
}
