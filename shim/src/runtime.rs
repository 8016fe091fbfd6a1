//! CUDA runtime hooks (libcudart.so.12 / .13).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cuda;
use crate::ffi::*;
use crate::hooks::{self, pfn, Hook};
use crate::libs;
use crate::tiers::{self, Allocated, Lookup};

type GetDeviceFn = unsafe extern "C" fn(*mut c_int) -> CudaError;

/// The runtime's current device (cudaGetDevice of the program's runtime).
fn current_device() -> Option<CuDevice> {
    static GET_DEVICE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut found = GET_DEVICE.load(Ordering::Acquire);
    if found.is_null() {
        let handle = libs::runtime();
        if handle.is_null() {
            return None;
        }
        found = libs::symbol(handle, c"cudaGetDevice".as_ptr());
        if found.is_null() {
            return None;
        }
        GET_DEVICE.store(found, Ordering::Release);
    }
    // SAFETY: the runtime's cudaGetDevice.
    let get_device: GetDeviceFn = unsafe { std::mem::transmute::<*mut c_void, GetDeviceFn>(found) };
    let mut device: c_int = 0;
    // SAFETY: valid out pointer.
    (unsafe { get_device(&mut device) } == CUDA_RT_SUCCESS).then_some(device)
}

/// Makes the runtime's context current on this thread, as any runtime allocation would
/// (cudaFree(NULL) is the documented way to initialise it).
fn prepare_host() -> bool {
    let driver = cuda::api();
    if driver.current_context().is_some() {
        return true;
    }
    let found = hooks::real(Hook::cudaFree);
    if !found.is_null() {
        // SAFETY: the real cudaFree; NULL only initialises the context.
        let free: pfn::cudaFree = unsafe { std::mem::transmute::<*mut c_void, pfn::cudaFree>(found) };
        // SAFETY: see above.
        unsafe { free(std::ptr::null_mut()) };
    }
    driver.current_context().is_some()
}

/// The shared body of cudaMalloc and cudaMallocAsync.
///
/// # Safety
/// `dev_ptr` is valid for writing.
unsafe fn allocate(
    dev_ptr: *mut *mut c_void,
    size: usize,
    vram: impl FnOnce() -> CudaError,
) -> CudaError {
    let Some(device) = current_device() else { return vram() };
    let outcome = tiers::allocate(
        size as u64,
        device,
        CUDA_RT_ERROR_MEMORY_ALLOCATION,
        || match vram() {
            // SAFETY: the real allocation wrote the pointer.
            CUDA_RT_SUCCESS => Ok(unsafe { *dev_ptr } as CuDevicePtr),
            status => Err(status),
        },
        prepare_host,
    );
    match outcome {
        Allocated::Vram => CUDA_RT_SUCCESS,
        Allocated::Host(device_ptr) => {
            // SAFETY: per the contract.
            unsafe { *dev_ptr = device_ptr as *mut c_void };
            CUDA_RT_SUCCESS
        }
        Allocated::Failed(status) => status,
        Allocated::OutOfMemory => CUDA_RT_ERROR_MEMORY_ALLOCATION,
    }
}

pub unsafe fn malloc(real: pfn::cudaMalloc, dev_ptr: *mut *mut c_void, size: usize) -> CudaError {
    if dev_ptr.is_null() || size == 0 {
        // SAFETY: the caller's arguments; CUDA answers these itself.
        return unsafe { real(dev_ptr, size) };
    }
    // SAFETY: dev_ptr checked; the closure passes the caller's arguments on.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size)) }
}

pub unsafe fn malloc_async(real: pfn::cudaMallocAsync, dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError {
    if dev_ptr.is_null() || size == 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real(dev_ptr, size, stream) };
    }
    // SAFETY: as in `malloc`. T2 memory is usable at once, so stream order holds.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size, stream)) }
}

pub unsafe fn malloc_async_ptsz(real: pfn::cudaMallocAsync_ptsz, dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { malloc_async(real, dev_ptr, size, stream) }
}

/// The shared body of the free hooks: T2 memory is released by `release_t2`, a double
/// free of T2 memory is answered invalid-value, anything else goes to the real free.
fn free_with(
    dev_ptr: *mut c_void,
    real: impl FnOnce() -> CudaError,
    release_t2: impl FnOnce(tiers::HostAllocation),
) -> CudaError {
    match tiers::take(dev_ptr as CuDevicePtr) {
        Lookup::Host(allocation) => {
            release_t2(allocation);
            CUDA_RT_SUCCESS
        }
        Lookup::DoubleFree => CUDA_RT_ERROR_INVALID_VALUE,
        Lookup::Vram { size, device } => {
            let status = real();
            if status != CUDA_RT_SUCCESS {
                tiers::restore_vram(dev_ptr as CuDevicePtr, size, device);
            }
            status
        }
        Lookup::Unknown => real(),
    }
}

pub unsafe fn free(real: pfn::cudaFree, dev_ptr: *mut c_void) -> CudaError {
    tiers::reclaim(false);
    // SAFETY: the caller's argument.
    free_with(dev_ptr, || unsafe { real(dev_ptr) }, tiers::release_now)
}

pub unsafe fn free_async(real: pfn::cudaFreeAsync, dev_ptr: *mut c_void, stream: CuStream) -> CudaError {
    tiers::reclaim(false);
    // SAFETY: the caller's arguments.
    free_with(dev_ptr, || unsafe { real(dev_ptr, stream) }, |allocation| tiers::release_after(allocation, stream))
}

pub unsafe fn free_async_ptsz(real: pfn::cudaFreeAsync_ptsz, dev_ptr: *mut c_void, stream: CuStream) -> CudaError {
    tiers::reclaim(false);
    let ordered_on = if stream.is_null() { CU_STREAM_PER_THREAD } else { stream };
    // SAFETY: the caller's arguments.
    free_with(dev_ptr, || unsafe { real(dev_ptr, stream) }, |allocation| tiers::release_after(allocation, ordered_on))
}

pub unsafe fn mem_get_info(real: pfn::cudaMemGetInfo, free: *mut usize, total: *mut usize) -> CudaError {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(free, total) };
    if status == CUDA_RT_SUCCESS && !free.is_null() && !total.is_null() {
        // SAFETY: the real call filled both.
        let (shown_free, shown_total) = tiers::reported(unsafe { *free } as u64, unsafe { *total } as u64);
        // SAFETY: as above.
        unsafe {
            *free = shown_free as usize;
            *total = shown_total as usize;
        }
    }
    status
}

/// cudaGetDeviceProperties and its _v2: `totalGlobalMem` shows the reported capacity.
pub unsafe fn get_device_properties(real: pfn::cudaGetDeviceProperties, prop: *mut c_void, device: c_int) -> CudaError {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(prop, device) };
    if status == CUDA_RT_SUCCESS && !prop.is_null() {
        // SAFETY: a filled cudaDeviceProp; the field is a size_t at this offset in
        // CUDA 12 and 13 (see ffi), possibly unaligned only if the caller's struct is.
        unsafe {
            let field = prop.cast::<u8>().add(CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET).cast::<usize>();
            let total = field.read_unaligned() as u64;
            let (_, shown_total) = tiers::reported(total, total);
            field.write_unaligned(shown_total as usize);
        }
    }
    status
}
