//! CUDA runtime hooks (libcudart.so.12 / .13).

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicPtr;

use crate::cuda;
use crate::ffi::*;
use crate::hooks::{self, pfn, Hook};
use crate::libs;
use crate::tiers::{self, Allocated};

type GetDeviceFn = unsafe extern "C" fn(*mut c_int) -> CudaError;
type GetLastErrorFn = unsafe extern "C" fn() -> CudaError;

/// The runtime's current device (cudaGetDevice of the program's runtime).
fn current_device() -> Option<CuDevice> {
    static GET_DEVICE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let found = libs::cached_function(&GET_DEVICE, libs::runtime, c"cudaGetDevice")?;
    // SAFETY: the runtime's cudaGetDevice.
    let get_device: GetDeviceFn = unsafe { std::mem::transmute::<*mut c_void, GetDeviceFn>(found) };
    let mut device: c_int = 0;
    // SAFETY: valid out pointer.
    (unsafe { get_device(&mut device) } == CUDA_RT_SUCCESS).then_some(device)
}

/// Clears the error a failed real allocation left as this thread's "last error" once
/// the shim has answered the call with success (T2 after a driver out-of-memory).
/// Out-of-memory is not sticky, so cudaGetLastError clears it; left pending, it would
/// fail the program's next cudaGetLastError check (PyTorch raises "CUDA error: out of
/// memory" after its next kernel).
fn clear_last_error(failed_with: CudaError) {
    static GET_LAST_ERROR: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let Some(found) = libs::cached_function(&GET_LAST_ERROR, libs::runtime, c"cudaGetLastError") else {
        info!("no cudaGetLastError in the runtime: error {} stays pending after a T2 retry", failed_with);
        return;
    };
    // SAFETY: the runtime's cudaGetLastError (no arguments).
    let get_last_error: GetLastErrorFn = unsafe { std::mem::transmute::<*mut c_void, GetLastErrorFn>(found) };
    // SAFETY: see above.
    let pending = unsafe { get_last_error() };
    debug!("runtime error {} cleared after the T2 retry of an allocation that failed with {}", pending, failed_with);
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

/// A size no device has: asking the real runtime for it makes the runtime answer (and
/// record as the thread's last error) out-of-memory.
const IMPOSSIBLE_SIZE: usize = 1 << 62;

/// Makes the runtime record out-of-memory as this thread's last error, as its own failed
/// allocation would, through `real_allocate` (the real allocation function, called with
/// `IMPOSSIBLE_SIZE`). Used when the shim answers out-of-memory without the real
/// function having failed (the budget sent the allocation to T2 and T2 is exhausted), so
/// that a program checking cudaGetLastError/cudaPeekAtLastError sees what CUDA shows.
fn record_out_of_memory(real_allocate: impl FnOnce(*mut *mut c_void) -> CudaError) {
    let mut unused: *mut c_void = std::ptr::null_mut();
    if real_allocate(&mut unused) == CUDA_RT_SUCCESS && !unused.is_null() {
        let found = hooks::real(Hook::cudaFree);
        if !found.is_null() {
            // SAFETY: the real cudaFree, on memory the real allocation just returned.
            let free: pfn::cudaFree = unsafe { std::mem::transmute::<*mut c_void, pfn::cudaFree>(found) };
            // SAFETY: see above.
            unsafe { free(unused) };
        }
    }
}

/// The shared body of cudaMalloc and cudaMallocAsync. The real function answers a null
/// `dev_ptr` or a size of 0 (CUDA answers these itself). `real_allocate` is the real
/// function for another pointer and size (see `record_out_of_memory`).
///
/// # Safety
/// `dev_ptr` is null or valid for writing.
unsafe fn allocate(
    dev_ptr: *mut *mut c_void,
    size: usize,
    vram: impl FnOnce() -> CudaError,
    real_allocate: impl FnOnce(*mut *mut c_void) -> CudaError,
) -> CudaError {
    if dev_ptr.is_null() || size == 0 {
        return vram();
    }
    let Some(device) = current_device() else { return vram() };
    let real_failure = std::cell::Cell::new(CUDA_RT_SUCCESS);
    let outcome = tiers::allocate(
        size as u64,
        device,
        CUDA_RT_ERROR_MEMORY_ALLOCATION,
        || match vram() {
            // SAFETY: the real allocation wrote the pointer.
            CUDA_RT_SUCCESS => Ok(unsafe { *dev_ptr } as CuDevicePtr),
            status => {
                real_failure.set(status);
                Err(status)
            }
        },
        prepare_host,
    );
    match outcome {
        Allocated::Vram => CUDA_RT_SUCCESS,
        Allocated::Host(device_ptr) => {
            if real_failure.get() != CUDA_RT_SUCCESS {
                clear_last_error(real_failure.get());
            }
            // SAFETY: per the contract.
            unsafe { *dev_ptr = device_ptr as *mut c_void };
            CUDA_RT_SUCCESS
        }
        Allocated::Failed(status) => status,
        Allocated::OutOfMemory => {
            if real_failure.get() == CUDA_RT_SUCCESS {
                record_out_of_memory(real_allocate);
            }
            CUDA_RT_ERROR_MEMORY_ALLOCATION
        }
    }
}

pub unsafe fn malloc(real: pfn::cudaMalloc, dev_ptr: *mut *mut c_void, size: usize) -> CudaError {
    // SAFETY: the caller's arguments, passed on.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size), |other| real(other, IMPOSSIBLE_SIZE)) }
}

pub unsafe fn malloc_async(real: pfn::cudaMallocAsync, dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError {
    // SAFETY: as in `malloc`. T2 memory is usable at once, so stream order holds.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size, stream), |other| real(other, IMPOSSIBLE_SIZE, stream)) }
}

pub unsafe fn malloc_async_ptsz(real: pfn::cudaMallocAsync_ptsz, dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { malloc_async(real, dev_ptr, size, stream) }
}

pub unsafe fn free(real: pfn::cudaFree, dev_ptr: *mut c_void) -> CudaError {
    // SAFETY: the caller's argument.
    tiers::free_with(dev_ptr as CuDevicePtr, CUDA_RT_SUCCESS, CUDA_RT_ERROR_INVALID_VALUE, || unsafe { real(dev_ptr) }, tiers::release_now)
}

pub unsafe fn free_async(real: pfn::cudaFreeAsync, dev_ptr: *mut c_void, stream: CuStream) -> CudaError {
    // SAFETY: the caller's arguments.
    tiers::free_with(dev_ptr as CuDevicePtr, CUDA_RT_SUCCESS, CUDA_RT_ERROR_INVALID_VALUE, || unsafe { real(dev_ptr, stream) }, |allocation| {
        tiers::release_after(allocation, stream)
    })
}

pub unsafe fn free_async_ptsz(real: pfn::cudaFreeAsync_ptsz, dev_ptr: *mut c_void, stream: CuStream) -> CudaError {
    // SAFETY: the caller's arguments.
    tiers::free_with(dev_ptr as CuDevicePtr, CUDA_RT_SUCCESS, CUDA_RT_ERROR_INVALID_VALUE, || unsafe { real(dev_ptr, stream) }, |allocation| {
        tiers::release_after(allocation, per_thread_default(stream))
    })
}

pub unsafe fn mem_get_info(real: pfn::cudaMemGetInfo, free: *mut usize, total: *mut usize) -> CudaError {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(free, total) };
    if status == CUDA_RT_SUCCESS {
        // SAFETY: the caller's arguments, which the runtime accepted.
        unsafe { tiers::report_mem_info(free, total) };
    }
    status
}

/// cudaGetDeviceProperties and its _v2: `totalGlobalMem` shows the reported capacity,
/// computed from the driver's real total. The runtime fills the field from a figure it
/// cached at initialisation through cuDeviceTotalMem, which may already have been our
/// hook's answer (the runtime reaches the driver through cuGetProcAddress): adding to
/// the field would count T2 twice (seen on the H200 with GREENBOOST_REPORT=combined).
pub unsafe fn get_device_properties(real: pfn::cudaGetDeviceProperties, prop: *mut c_void, device: c_int) -> CudaError {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(prop, device) };
    if status != CUDA_RT_SUCCESS || prop.is_null() {
        return status;
    }
    // Runtime device ordinals are the driver's (both honour CUDA_VISIBLE_DEVICES).
    let Some(physical) = cuda::physical_vram(device) else {
        // No real total to start from: the runtime's own figure stands.
        return status;
    };
    let (_, shown_total) = tiers::reported(physical, physical);
    // SAFETY: a filled cudaDeviceProp; the field is a size_t at this offset in CUDA 12
    // and 13 (see ffi), possibly unaligned only if the caller's struct is.
    unsafe {
        let field = prop.cast::<u8>().add(CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET).cast::<usize>();
        field.write_unaligned(shown_total as usize);
    }
    status
}
