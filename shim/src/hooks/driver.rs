//! CUDA driver hooks (libcuda.so.1).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::cuda::real::pfn;
use crate::engine::allocate::{self, Allocated, Origin};
use crate::memory::registry::{self, Backed};
use crate::memory::release;
use crate::memory::report;
use crate::memory::vmm;

/// The shared body of the driver allocation hooks. The real function answers a null
/// `dptr` or a size of 0, and any call without a current context
/// (CUDA_ERROR_INVALID_CONTEXT, as CUDA would).
///
/// # Safety
/// `dptr` is null or valid for writing.
unsafe fn allocate(dptr: *mut CuDevicePtr, size: usize, origin: Origin, vram: impl FnOnce() -> CuResult) -> CuResult {
    if dptr.is_null() || size == 0 {
        return vram();
    }
    let Some(device) = cuda::current_context().and_then(|_| cuda::current_device()) else {
        return vram();
    };
    let outcome = allocate::allocate(
        size as u64,
        device,
        origin,
        CuResult::OUT_OF_MEMORY,
        || match vram() {
            // SAFETY: the real allocation succeeded, so it wrote the pointer.
            CuResult::SUCCESS => Ok(unsafe { *dptr }),
            status => Err(status),
        },
        || true,
    );
    match outcome {
        Allocated::Vram => CuResult::SUCCESS,
        Allocated::ShimMade(device_ptr) => {
            // SAFETY: `dptr` is non-null and valid for writing (the contract).
            unsafe { *dptr = device_ptr };
            CuResult::SUCCESS
        }
        Allocated::Failed(status) => status,
        Allocated::OutOfMemory => CuResult::OUT_OF_MEMORY,
    }
}

/// # Safety
/// The program's arguments, as cuMemAlloc_v2 takes them.
pub unsafe fn mem_alloc(real: pfn::cuMemAlloc_v2, dptr: *mut CuDevicePtr, size: usize) -> CuResult {
    // SAFETY: `dptr` is the program's, null or writable as cuMemAlloc requires.
    unsafe { allocate(dptr, size, Origin::Plain, || real(dptr, size)) }
}

/// # Safety
/// The program's arguments, as cuMemAllocAsync takes them.
pub unsafe fn mem_alloc_async(
    real: pfn::cuMemAllocAsync,
    dptr: *mut CuDevicePtr,
    size: usize,
    stream: Stream,
) -> CuResult {
    // SAFETY: as in `mem_alloc`. T2 memory is usable at once, so stream order holds.
    unsafe { allocate(dptr, size, Origin::Plain, || real(dptr, size, stream)) }
}

/// # Safety
/// The program's arguments, as cuMemAllocAsync_ptsz takes them.
pub unsafe fn mem_alloc_async_ptsz(
    real: pfn::cuMemAllocAsync_ptsz,
    dptr: *mut CuDevicePtr,
    size: usize,
    stream: Stream,
) -> CuResult {
    // SAFETY: the same C signature and contract as cuMemAllocAsync.
    unsafe { mem_alloc_async(real, dptr, size, stream) }
}

/// # Safety
/// The program's arguments, as cuMemAllocFromPoolAsync takes them.
pub unsafe fn mem_alloc_from_pool_async(
    real: pfn::cuMemAllocFromPoolAsync,
    dptr: *mut CuDevicePtr,
    size: usize,
    pool: MemPool,
    stream: Stream,
) -> CuResult {
    // SAFETY: as in `mem_alloc`; the pool handle goes to the real function unchanged.
    unsafe { allocate(dptr, size, Origin::Pool, || real(dptr, size, pool, stream)) }
}

/// # Safety
/// The program's arguments, as cuMemAllocFromPoolAsync_ptsz takes them.
pub unsafe fn mem_alloc_from_pool_async_ptsz(
    real: pfn::cuMemAllocFromPoolAsync_ptsz,
    dptr: *mut CuDevicePtr,
    size: usize,
    pool: MemPool,
    stream: Stream,
) -> CuResult {
    // SAFETY: the same C signature and contract as cuMemAllocFromPoolAsync.
    unsafe { mem_alloc_from_pool_async(real, dptr, size, pool, stream) }
}

/// # Safety
/// The program's argument, as cuMemFree_v2 takes it.
pub unsafe fn mem_free(real: pfn::cuMemFree_v2, dptr: CuDevicePtr) -> CuResult {
    // SAFETY: the real cuMemFree with the program's own pointer.
    allocate::free_with(dptr, CuResult::SUCCESS, CuResult::INVALID_VALUE, || unsafe { real(dptr) }, release::now)
}

/// # Safety
/// The program's arguments, as cuMemFreeAsync takes them.
pub unsafe fn mem_free_async(real: pfn::cuMemFreeAsync, dptr: CuDevicePtr, stream: Stream) -> CuResult {
    let release = |allocation: Backed| release::after(allocation, stream);
    // SAFETY: the real cuMemFreeAsync with the program's own arguments.
    allocate::free_with(dptr, CuResult::SUCCESS, CuResult::INVALID_VALUE, || unsafe { real(dptr, stream) }, release)
}

/// # Safety
/// The program's arguments, as cuMemFreeAsync_ptsz takes them.
pub unsafe fn mem_free_async_ptsz(real: pfn::cuMemFreeAsync_ptsz, dptr: CuDevicePtr, stream: Stream) -> CuResult {
    let release = |allocation: Backed| release::after(allocation, stream.per_thread_default());
    // SAFETY: the real cuMemFreeAsync_ptsz with the program's own arguments.
    allocate::free_with(dptr, CuResult::SUCCESS, CuResult::INVALID_VALUE, || unsafe { real(dptr, stream) }, release)
}

/// # Safety
/// The program's arguments, as cuMemGetInfo_v2 takes them.
pub unsafe fn mem_get_info(real: pfn::cuMemGetInfo_v2, free: *mut usize, total: *mut usize) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(free, total) };
    if status == CuResult::SUCCESS {
        // SAFETY: the driver accepted both pointers and wrote through them.
        unsafe { report::rewrite_mem_info(free, total) };
    }
    status
}

/// # Safety
/// The program's arguments, as cuDeviceTotalMem_v2 takes them.
pub unsafe fn device_total_mem(real: pfn::cuDeviceTotalMem_v2, bytes: *mut usize, device: CuDevice) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(bytes, device) };
    if status == CuResult::SUCCESS && !bytes.is_null() {
        // SAFETY: the driver accepted the pointer and filled it.
        let total = unsafe { *bytes } as u64;
        let (_, shown_total) = report::reported(device, total, total);
        // SAFETY: `bytes` is non-null and the driver has just written a size through it, so
        // it points to a writable usize of the program's.
        unsafe { *bytes = shown_total as usize };
    }
    status
}

/// cuIpcGetMemHandle: the driver exports only memory it allocated itself, and refuses
/// (CUDA_ERROR_INVALID_VALUE) memory the shim made in its place — T2, split ranges, and
/// movable memory, which where others contest the device, or once the budget binds,
/// includes what was placed in VRAM. The program gets the driver's answer; the shim says why, once, and what to do.
///
/// # Safety
/// The program's arguments, as cuIpcGetMemHandle takes them.
pub unsafe fn ipc_get_mem_handle(real: pfn::cuIpcGetMemHandle, handle: *mut c_void, dptr: CuDevicePtr) -> CuResult {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(handle, dptr) };
    if status != CuResult::SUCCESS {
        if let Some(what) = registry::shim_made(dptr) {
            if !IPC_REFUSAL_SAID.swap(true, Ordering::Relaxed) {
                warn!(
                    "CUDA IPC cannot export {:#x}: the shim made it {} (CUDA error {}); to share device memory between processes, run with GREENBOOST_TIERING=off (what is placed in VRAM then stays the driver's own memory; T2 is never exportable)",
                    dptr,
                    what.describe(),
                    status.0
                );
            }
        }
    }
    status
}

/// The IPC refusal is explained once per process.
static IPC_REFUSAL_SAID: AtomicBool = AtomicBool::new(false);

/// cuMemCreate: device memory goes through the VMM placement (`vmm`); anything else
/// (host memory asked for by the program, a size of 0, null arguments) to the driver.
///
/// # Safety
/// The program's arguments, as cuMemCreate takes them.
pub unsafe fn mem_create(
    real: pfn::cuMemCreate,
    handle: *mut CuMemGenericAllocationHandle,
    size: usize,
    prop: *const CuMemAllocationProp,
    flags: u64,
) -> CuResult {
    // SAFETY: read only when non-null: the program's property struct, which cuMemCreate
    // reads too.
    let requested = (!handle.is_null() && !prop.is_null()).then(|| unsafe { *prop });
    let Some(requested) = requested.filter(|prop| prop.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE && size != 0)
    else {
        // SAFETY: the real function with the program's own arguments.
        return unsafe { real(handle, size, prop, flags) };
    };
    vmm::create(size as u64, requested, |placed| {
        // SAFETY: the program's handle pointer (non-null, writable) and size, with a
        // property struct that lives for the call.
        match unsafe { real(handle, size, placed, flags) } {
            // SAFETY: the driver succeeded, so it wrote the handle.
            CuResult::SUCCESS => Ok(unsafe { *handle }),
            status => Err(status),
        }
    })
}

/// # Safety
/// The program's argument, as cuMemRelease takes it.
pub unsafe fn mem_release(real: pfn::cuMemRelease, handle: CuMemGenericAllocationHandle) -> CuResult {
    // SAFETY: the real function with the program's own handle.
    vmm::release(handle, || unsafe { real(handle) })
}
