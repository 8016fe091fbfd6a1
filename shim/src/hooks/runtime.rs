//! CUDA runtime hooks (libcudart.so.12 / .13).

use std::ffi::{c_int, c_void};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::cuda::real::{self, pfn};
use crate::engine::allocate::{self, Allocated, Origin};
use crate::memory::registry::Backed;
use crate::memory::release;
use crate::memory::report;

/// The runtime's current device (cudaGetDevice of the program's runtime).
fn current_device() -> Option<CuDevice> {
    let get_device = real::cudaGetDevice()?;
    let mut device: c_int = 0;
    // SAFETY: the runtime's cudaGetDevice writes one int to a valid local.
    (unsafe { get_device(&mut device) } == CudaError::SUCCESS).then_some(device)
}

/// Clears the error a failed real allocation left as this thread's "last error" once
/// the shim has answered the call with success (T2 after a driver out-of-memory).
/// Out-of-memory is not sticky, so cudaGetLastError clears it; left pending, it would
/// fail the program's next cudaGetLastError check (PyTorch raises "CUDA error: out of
/// memory" after its next kernel).
fn clear_last_error(failed_with: CudaError) {
    let Some(get_last_error) = real::cudaGetLastError() else {
        info!("no cudaGetLastError in the runtime: error {} stays pending after a T2 retry", failed_with.0);
        return;
    };
    // SAFETY: cudaGetLastError takes no arguments and only reads thread state.
    let pending = unsafe { get_last_error() };
    debug!(
        "runtime error {} cleared after the T2 retry of an allocation that failed with {}",
        pending.0, failed_with.0
    );
}

/// Makes the runtime's context current on this thread, as any runtime allocation would
/// (cudaFree(NULL) is the documented way to initialise it).
fn prepare_t2() -> bool {
    if cuda::current_context().is_some() {
        return true;
    }
    if let Some(free) = real::cudaFree() {
        // SAFETY: cudaFree(NULL) frees nothing; it only initialises the context.
        unsafe { free(std::ptr::null_mut()) };
    }
    cuda::current_context().is_some()
}

/// A size no device has: asking the real runtime for it makes the runtime answer (and
/// record as the thread's last error) out-of-memory.
const IMPOSSIBLE_SIZE: usize = 1 << 62;

/// Makes the runtime record out-of-memory as this thread's last error, as its own failed
/// allocation would, through `real_allocate` (the real allocation function, called with
/// `IMPOSSIBLE_SIZE`). Used when the shim answers out-of-memory without the real
/// function having failed (the rule sent the allocation to T2 and T2 is exhausted), so
/// that a program checking cudaGetLastError/cudaPeekAtLastError sees what CUDA shows.
fn record_out_of_memory(real_allocate: impl FnOnce(*mut *mut c_void) -> CudaError) {
    let mut unused: *mut c_void = std::ptr::null_mut();
    if real_allocate(&mut unused) == CudaError::SUCCESS && !unused.is_null() {
        if let Some(free) = real::cudaFree() {
            // SAFETY: memory the real allocation just returned, freed by the same runtime.
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
    // The context first, as the runtime's own allocation would make it: placement reads
    // the device's state through it, also for the program's very first allocation.
    let context_ready = prepare_t2();
    let real_failure = std::cell::Cell::new(CudaError::SUCCESS);
    let outcome = allocate::allocate(
        size as u64,
        device,
        Origin::Plain,
        CudaError::MEMORY_ALLOCATION,
        || match vram() {
            // SAFETY: the real allocation succeeded, so it wrote the pointer.
            CudaError::SUCCESS => Ok(unsafe { *dev_ptr } as CuDevicePtr),
            status => {
                real_failure.set(status);
                Err(status)
            }
        },
        || context_ready,
    );
    match outcome {
        Allocated::Vram => CudaError::SUCCESS,
        Allocated::ShimMade(device_ptr) => {
            if real_failure.get() != CudaError::SUCCESS {
                clear_last_error(real_failure.get());
            }
            // SAFETY: `dev_ptr` is non-null and valid for writing (the contract).
            unsafe { *dev_ptr = device_ptr as *mut c_void };
            CudaError::SUCCESS
        }
        Allocated::Failed(status) => status,
        Allocated::OutOfMemory => {
            if real_failure.get() == CudaError::SUCCESS {
                record_out_of_memory(real_allocate);
            }
            CudaError::MEMORY_ALLOCATION
        }
    }
}

/// # Safety
/// The program's arguments, as cudaMalloc takes them.
pub unsafe fn malloc(real: pfn::cudaMalloc, dev_ptr: *mut *mut c_void, size: usize) -> CudaError {
    // SAFETY: `dev_ptr` is the program's, null or writable as cudaMalloc requires; the
    // real function gets exactly the program's arguments, or a local and a size.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size), |other| real(other, IMPOSSIBLE_SIZE)) }
}

/// # Safety
/// The program's arguments, as cudaMallocAsync takes them.
pub unsafe fn malloc_async(
    real: pfn::cudaMallocAsync,
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: Stream,
) -> CudaError {
    // SAFETY: as in `malloc`; T2 memory is usable at once, so stream order holds.
    unsafe { allocate(dev_ptr, size, || real(dev_ptr, size, stream), |other| real(other, IMPOSSIBLE_SIZE, stream)) }
}

/// # Safety
/// The program's arguments, as cudaMallocAsync_ptsz takes them.
pub unsafe fn malloc_async_ptsz(
    real: pfn::cudaMallocAsync_ptsz,
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: Stream,
) -> CudaError {
    // SAFETY: the same C signature and contract as cudaMallocAsync.
    unsafe { malloc_async(real, dev_ptr, size, stream) }
}

/// # Safety
/// The program's argument, as cudaFree takes it.
pub unsafe fn free(real: pfn::cudaFree, dev_ptr: *mut c_void) -> CudaError {
    let success = CudaError::SUCCESS;
    // SAFETY: the real cudaFree with the program's own pointer.
    allocate::free_with(
        dev_ptr as CuDevicePtr,
        success,
        CudaError::INVALID_VALUE,
        || unsafe { real(dev_ptr) },
        release::now,
    )
}

/// # Safety
/// The program's arguments, as cudaFreeAsync takes them.
pub unsafe fn free_async(real: pfn::cudaFreeAsync, dev_ptr: *mut c_void, stream: Stream) -> CudaError {
    let release = |allocation: Backed| release::after(allocation, stream);
    // SAFETY: the real cudaFreeAsync with the program's own arguments.
    let real_free = || unsafe { real(dev_ptr, stream) };
    allocate::free_with(dev_ptr as CuDevicePtr, CudaError::SUCCESS, CudaError::INVALID_VALUE, real_free, release)
}

/// # Safety
/// The program's arguments, as cudaFreeAsync_ptsz takes them.
pub unsafe fn free_async_ptsz(real: pfn::cudaFreeAsync_ptsz, dev_ptr: *mut c_void, stream: Stream) -> CudaError {
    let release = |allocation: Backed| release::after(allocation, stream.per_thread_default());
    // SAFETY: the real cudaFreeAsync_ptsz with the program's own arguments.
    let real_free = || unsafe { real(dev_ptr, stream) };
    allocate::free_with(dev_ptr as CuDevicePtr, CudaError::SUCCESS, CudaError::INVALID_VALUE, real_free, release)
}

/// # Safety
/// The program's arguments, as cudaMemGetInfo takes them.
pub unsafe fn mem_get_info(real: pfn::cudaMemGetInfo, free: *mut usize, total: *mut usize) -> CudaError {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(free, total) };
    if status == CudaError::SUCCESS {
        // SAFETY: the runtime accepted both pointers and wrote through them.
        unsafe { report::rewrite_mem_info(free, total) };
    }
    status
}

/// cudaGetDeviceProperties and its _v2: `totalGlobalMem` shows the reported capacity,
/// computed from the driver's real total. The runtime fills the field from a figure it
/// cached at initialisation through cuDeviceTotalMem, which may already have been our
/// hook's answer (the runtime reaches the driver through cuGetProcAddress): adding to
/// the field would count T2 twice (seen on the H200 with GREENBOOST_REPORT=combined).
///
/// # Safety
/// The program's arguments, as cudaGetDeviceProperties takes them.
pub unsafe fn get_device_properties(real: pfn::cudaGetDeviceProperties, prop: *mut c_void, device: c_int) -> CudaError {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(prop, device) };
    if status != CudaError::SUCCESS || prop.is_null() {
        return status;
    }
    // Runtime device ordinals are the driver's (both honour CUDA_VISIBLE_DEVICES).
    let Some(physical) = cuda::physical_vram(device) else {
        // No real total to start from: the runtime's own figure stands.
        return status;
    };
    let (_, shown_total) = report::reported(device, physical, physical);
    // SAFETY: the runtime filled a cudaDeviceProp at `prop`; the field is a size_t at
    // this offset in CUDA 12 and 13 (see ffi), written unaligned in case the caller's
    // struct is.
    unsafe {
        let field = prop.cast::<u8>().add(CUDA_DEVICE_PROP_TOTAL_GLOBAL_MEM_OFFSET).cast::<usize>();
        field.write_unaligned(shown_total as usize);
    }
    status
}
