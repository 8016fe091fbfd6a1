//! The driver calls the shim makes for its own work (contexts, events, streams, copies,
//! registration, the VMM calls of split allocations), as small typed
//! wrappers over `real`: each says once why its call is sound. They are the driver's own
//! functions, never the shim's hooks: cuMemCreate and cuMemRelease are hooked too, but the
//! shim's own VMM memory must not be counted twice, and cuLaunchKernel, cuMemcpyAsync and
//! cuMemcpyDtoH_v2 are observed, but the shim's own copies (staging, the SM copy kernel,
//! verifications) are not the program's work.
//!
//! A missing driver function answers CUDA_ERROR_NOT_INITIALIZED, as a missing driver
//! would (`driver_call!`). What the driver says of a device is in `device_facts`.

use std::ffi::{c_int, c_uint, c_void};

use crate::cuda::ffi::*;
use crate::cuda::real;

pub fn current_context() -> Option<Context> {
    let mut context = Context::NULL;
    let status = driver_call!(cuCtxGetCurrent(&mut context), "writes one handle to a valid local");
    (status == CuResult::SUCCESS && !context.is_null()).then_some(context)
}

/// The device of the current context.
pub fn current_device() -> Option<CuDevice> {
    let mut device: CuDevice = 0;
    let status = driver_call!(cuCtxGetDevice(&mut device), "writes one int to a valid local");
    (status == CuResult::SUCCESS).then_some(device)
}

/// Runs `work` with `context` current on this thread, restoring the previous one.
pub fn with_context<T>(context: Context, work: impl FnOnce() -> T) -> T {
    if context.is_null() || current_context() == Some(context) {
        return work();
    }
    let pushed = driver_call!(cuCtxPushCurrent_v2(context), "takes a context handle by value; a stale one is refused")
        == CuResult::SUCCESS;
    let result = work();
    if pushed {
        let mut popped = Context::NULL;
        driver_call!(cuCtxPopCurrent_v2(&mut popped), "writes one handle to a valid local");
    }
    result
}

pub fn ctx_synchronize() -> CuResult {
    driver_call!(cuCtxSynchronize(), "takes no arguments")
}

/// Whether `device_ptr` is the start of memory CUDA knows as allocated.
pub fn is_allocation(device_ptr: CuDevicePtr) -> bool {
    let (mut base, mut size): (CuDevicePtr, usize) = (0, 0);
    driver_call!(cuMemGetAddressRange_v2(&mut base, &mut size, device_ptr), "writes two integers to valid locals")
        == CuResult::SUCCESS
        && base == device_ptr
}

pub fn event_create() -> Result<Event, CuError> {
    let mut event = Event::NULL;
    driver_call!(cuEventCreate(&mut event, CU_EVENT_DISABLE_TIMING), "writes one handle to a valid local").ok()?;
    Ok(event)
}

/// An event that keeps the time it completed (`event_elapsed_ms`).
pub fn event_create_timed() -> Result<Event, CuError> {
    let mut event = Event::NULL;
    driver_call!(cuEventCreate(&mut event, 0), "writes one handle to a valid local").ok()?;
    Ok(event)
}

/// Milliseconds between two completed timed events.
pub fn event_elapsed_ms(start: Event, end: Event) -> Result<f32, CuError> {
    let mut ms = 0f32;
    driver_call!(cuEventElapsedTime(&mut ms, start, end), "writes one float to a valid local").ok()?;
    Ok(ms)
}

pub fn event_record(event: Event, stream: Stream) -> CuResult {
    driver_call!(cuEventRecord(event, stream), "handles by value; stale ones are refused")
}

pub fn event_query(event: Event) -> CuResult {
    driver_call!(cuEventQuery(event), "a handle by value")
}

pub fn event_synchronize(event: Event) -> CuResult {
    driver_call!(cuEventSynchronize(event), "a handle by value")
}

pub fn event_destroy(event: Event) -> CuResult {
    driver_call!(cuEventDestroy_v2(event), "a handle by value")
}

pub fn stream_synchronize(stream: Stream) -> CuResult {
    driver_call!(cuStreamSynchronize(stream), "a handle by value")
}

/// A stream of the current context that never waits for the legacy default stream.
pub fn stream_create_non_blocking() -> Result<Stream, CuError> {
    let mut stream = Stream::NULL;
    driver_call!(cuStreamCreate(&mut stream, CU_STREAM_NON_BLOCKING), "writes one handle to a valid local").ok()?;
    Ok(stream)
}

/// Destroys a stream the shim made (work on it completes first, as the driver says).
pub fn stream_destroy(stream: Stream) -> CuResult {
    driver_call!(cuStreamDestroy_v2(stream), "a handle by value")
}

pub fn stream_wait_event(stream: Stream, event: Event) -> CuResult {
    driver_call!(cuStreamWaitEvent(stream, event, 0), "handles by value")
}

/// Whether `stream` is being captured into a CUDA graph.
pub fn stream_is_capturing(stream: Stream) -> Result<bool, CuError> {
    let mut capture_status: c_int = 0;
    driver_call!(cuStreamIsCapturing(stream, &mut capture_status), "writes one int to a valid local").ok()?;
    Ok(capture_status != 0)
}

/// Enqueues a copy between two device addresses on `stream`. The host is never written:
/// device pointers are only read by the GPU.
pub fn memcpy_async(destination: CuDevicePtr, source: CuDevicePtr, len: u64, stream: Stream) -> CuResult {
    let Ok(len) = usize::try_from(len) else { return CuResult::INVALID_VALUE };
    driver_call!(cuMemcpyAsync(destination, source, len, stream), "device addresses only, checked by the driver")
}

/// Loads a module from a NUL-terminated PTX (or cubin) image into the current context.
pub fn module_load_data(image: &'static [u8]) -> Result<CuModule, CuError> {
    if image.last() != Some(&0) {
        return Err(CuError(CuResult::INVALID_VALUE.0));
    }
    let mut module = CuModule::NULL;
    let status = driver_call!(
        cuModuleLoadData(&mut module, image.as_ptr().cast()),
        "a NUL-terminated image that outlives the call (static), a valid local for the handle"
    );
    status.ok().map(|()| module)
}

/// The kernel `name` (NUL-terminated) of `module`.
pub fn module_get_function(module: CuModule, name: &'static std::ffi::CStr) -> Result<CuFunction, CuError> {
    let mut function = CuFunction::NULL;
    let status = driver_call!(
        cuModuleGetFunction(&mut function, module, name.as_ptr()),
        "a module handle the driver validates, a NUL-terminated name, a valid local for the handle"
    );
    status.ok().map(|()| function)
}

/// Launches `function` on `stream` over a one-dimensional grid of `blocks` blocks of
/// `threads` threads, with the arguments `params` points to.
///
/// # Safety
/// `params` holds one pointer per parameter of `function`, in order, each to a value of
/// that parameter's type, live until the call returns; the memory the kernel reads and
/// writes through those values is the device's, valid until the kernel has run.
pub unsafe fn launch_kernel(
    function: CuFunction,
    blocks: u32,
    threads: u32,
    stream: Stream,
    params: &mut [*mut c_void],
) -> CuResult {
    driver_call!(
        cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()),
        "the caller's parameters (see # Safety); no extra launch options"
    )
}

/// Copies `destination.len()` bytes from a device address into host memory (waits).
pub fn memcpy_to_host(destination: &mut [u8], source: CuDevicePtr) -> CuResult {
    driver_call!(
        cuMemcpyDtoH_v2(destination.as_mut_ptr().cast(), source, destination.len()),
        "the destination is a live slice of exactly len bytes"
    )
}

/// Device memory from the real allocator (the shim's own scratch; never counted by the
/// hooks).
pub fn mem_alloc(len: u64) -> Result<CuDevicePtr, CuError> {
    let Ok(len) = usize::try_from(len) else { return Err(CuError(CuResult::OUT_OF_MEMORY.0)) };
    let mut device_ptr: CuDevicePtr = 0;
    driver_call!(cuMemAlloc_v2(&mut device_ptr, len), "writes one pointer to a valid local").ok()?;
    Ok(device_ptr)
}

pub fn mem_free(device_ptr: CuDevicePtr) -> CuResult {
    driver_call!(cuMemFree_v2(device_ptr), "a device address by value")
}

/// Registers `[ptr, ptr + len)` with CUDA (pinned, mapped, portable).
///
/// # Safety
/// The range is a live mapping of this process that stays mapped until
/// `host_unregister`.
pub unsafe fn host_register(ptr: *mut c_void, len: usize) -> CuResult {
    let flags: c_uint = CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE;
    driver_call!(cuMemHostRegister_v2(ptr, len, flags), "the caller guarantees a live mapping of `len` bytes")
}

/// The device address of registered host memory at `ptr`.
pub fn host_device_pointer(ptr: *mut c_void) -> Result<CuDevicePtr, CuError> {
    let mut device_ptr: CuDevicePtr = 0;
    driver_call!(
        cuMemHostGetDevicePointer_v2(&mut device_ptr, ptr, 0),
        "reads no host memory: the driver looks the address up in its registrations"
    )
    .ok()?;
    if device_ptr == 0 {
        return Err(CuError(CuResult::INVALID_VALUE.0));
    }
    Ok(device_ptr)
}

/// # Safety
/// `ptr` was registered by `host_register` and the device no longer uses it.
pub unsafe fn host_unregister(ptr: *mut c_void) -> CuResult {
    driver_call!(cuMemHostUnregister(ptr), "the caller guarantees a registration no work uses")
}

/// The larger minimum mapping granularity of `props`, at least `floor`.
pub fn granularity(props: &[&CuMemAllocationProp], floor: u64) -> Result<u64, CuError> {
    let mut largest = floor;
    for prop in props {
        let mut granularity: usize = 0;
        let prop: *const CuMemAllocationProp = *prop;
        driver_call!(
            cuMemGetAllocationGranularity(&mut granularity, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "reads a live property struct, writes one size_t"
        )
        .ok()?;
        if !granularity.is_power_of_two() {
            return Err(CuError(CuResult::INVALID_VALUE.0));
        }
        largest = largest.max(granularity as u64);
    }
    Ok(largest)
}

pub fn address_reserve(len: u64, alignment: u64) -> Result<CuDevicePtr, CuError> {
    let mut base: CuDevicePtr = 0;
    driver_call!(
        cuMemAddressReserve(&mut base, len as usize, alignment as usize, 0, 0),
        "writes one address to a valid local"
    )
    .ok()?;
    Ok(base)
}

pub fn address_free(base: CuDevicePtr, len: u64) -> CuResult {
    driver_call!(cuMemAddressFree(base, len as usize), "a device range by value")
}

/// Physical memory with `prop`, through the real cuMemCreate (not counted by the hook).
pub fn mem_create(len: u64, prop: &CuMemAllocationProp) -> Result<CuMemGenericAllocationHandle, CuError> {
    let mut handle: CuMemGenericAllocationHandle = 0;
    driver_call!(cuMemCreate(&mut handle, len as usize, prop, 0), "reads a live property struct, writes one handle")
        .ok()?;
    Ok(handle)
}

pub fn mem_release(handle: CuMemGenericAllocationHandle) -> CuResult {
    driver_call!(cuMemRelease(handle), "a handle by value")
}

pub fn mem_map(at: CuDevicePtr, len: u64, handle: CuMemGenericAllocationHandle) -> CuResult {
    driver_call!(cuMemMap(at, len as usize, 0, handle, 0), "a device range and a handle by value")
}

pub fn mem_unmap(at: CuDevicePtr, len: u64) -> CuResult {
    driver_call!(cuMemUnmap(at, len as usize), "a device range by value")
}

/// Read and write access to `[at, at + len)` for `device`.
pub fn set_access(at: CuDevicePtr, len: u64, device: CuDevice) -> CuResult {
    let access = CuMemAccessDesc {
        location: CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    driver_call!(cuMemSetAccess(at, len as usize, &access, 1), "reads one live access descriptor")
}

/// Tries to import `fd` as external memory of `handle_type`; on success the driver owns
/// the fd and the import is destroyed at once (only the answer matters).
pub fn try_import_and_drop(fd: c_int, len: u64, handle_type: c_int) -> CuResult {
    let desc = CudaExternalMemoryHandleDesc {
        type_: handle_type,
        pad: 0,
        handle: [fd as u32 as u64, 0],
        size: len,
        flags: 0,
        reserved: [0; 16],
    };
    let mut external = ExternalMemory::NULL;
    let status = driver_call!(
        cuImportExternalMemory(&mut external, &desc),
        "reads a live descriptor, writes one handle; the fd is a valid descriptor of ours"
    );
    if status == CuResult::SUCCESS {
        driver_call!(cuDestroyExternalMemory(external), "the handle just made");
    }
    status
}

/// Managed memory of `len` bytes that every stream may use, in the current context.
pub fn mem_alloc_managed(len: u64) -> Result<CuDevicePtr, CuError> {
    let Ok(len) = usize::try_from(len) else { return Err(CuError(CuResult::OUT_OF_MEMORY.0)) };
    let mut device_ptr: CuDevicePtr = 0;
    driver_call!(cuMemAllocManaged(&mut device_ptr, len, CU_MEM_ATTACH_GLOBAL), "writes one pointer to a valid local")
        .ok()?;
    Ok(device_ptr)
}

/// Where managed memory is put or mapped: `device`, or the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    Host,
    Device(CuDevice),
}

impl Where {
    fn location(self) -> CuMemLocation {
        match self {
            Where::Host => CuMemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 },
            Where::Device(device) => CuMemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        }
    }

    /// The v1 calls' form: a device ordinal, or CU_DEVICE_CPU.
    fn ordinal(self) -> CuDevice {
        match self {
            Where::Host => CU_DEVICE_CPU,
            Where::Device(device) => device,
        }
    }
}

/// cuMemAdvise(`advice`, `to`) over a managed range; the v2 form (CUDA 12.2 and later)
/// where the driver has it.
pub fn mem_advise(at: CuDevicePtr, len: u64, advice: c_int, to: Where) -> CuResult {
    let Ok(len) = usize::try_from(len) else { return CuResult::INVALID_VALUE };
    if real::cuMemAdvise_v2().is_some() {
        driver_call!(cuMemAdvise_v2(at, len, advice, to.location()), "a device range and a location by value")
    } else {
        driver_call!(cuMemAdvise(at, len, advice, to.ordinal()), "a device range and an ordinal by value")
    }
}

/// Enqueues on `stream` the migration of a managed range to `to`.
pub fn mem_prefetch_async(at: CuDevicePtr, len: u64, to: Where, stream: Stream) -> CuResult {
    let Ok(len) = usize::try_from(len) else { return CuResult::INVALID_VALUE };
    if real::cuMemPrefetchAsync_v2().is_some() {
        driver_call!(
            cuMemPrefetchAsync_v2(at, len, to.location(), 0, stream),
            "a device range, a location and a stream by value"
        )
    } else {
        driver_call!(cuMemPrefetchAsync(at, len, to.ordinal(), stream), "a device range and handles by value")
    }
}

/// A non-blocking stream of the current context at the lowest priority, so that the
/// program's own work is scheduled first.
pub fn stream_create_low_priority() -> Result<Stream, CuError> {
    let (mut least, mut greatest): (c_int, c_int) = (0, 0);
    driver_call!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest), "writes two ints to valid locals").ok()?;
    let mut stream = Stream::NULL;
    driver_call!(
        cuStreamCreateWithPriority(&mut stream, CU_STREAM_NON_BLOCKING, least),
        "writes one handle to a valid local"
    )
    .ok()?;
    Ok(stream)
}

/// Puts this thread in relaxed stream-capture mode: its calls (prefetches on its
/// own stream, event queries) are then not refused while another thread captures a
/// graph in global mode (PyTorch's default).
pub fn relax_stream_capture_mode() -> CuResult {
    let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    driver_call!(cuThreadExchangeStreamCaptureMode(&mut mode), "reads and writes one int of a valid local")
}

/// Runs `work` with this thread in relaxed stream-capture mode, then restores the mode
/// it had: the shim's own calls inside a hook (managed allocations, prefetches on its
/// own stream) are then neither refused nor invalidate a capture another thread makes in
/// global mode. `None` when the driver refused the exchange (nothing ran).
pub fn in_relaxed_capture_mode<T>(work: impl FnOnce() -> T) -> Option<T> {
    let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    driver_call!(cuThreadExchangeStreamCaptureMode(&mut mode), "reads and writes one int of a valid local")
        .ok()
        .ok()?;
    let done = work();
    // The thread's own mode back (a driver that took the first exchange takes this one).
    let _ = driver_call!(cuThreadExchangeStreamCaptureMode(&mut mode), "reads and writes one int of a valid local");
    Some(done)
}
