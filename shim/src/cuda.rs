//! Driver functions the shim calls for its own work (registration, events, contexts,
//! the VMM calls of split allocations), resolved once from the program's libcuda. They
//! are the driver's own functions, never the shim's hooks (cuMemCreate and cuMemRelease
//! are hooked too, but the shim's own VMM memory must not be counted twice).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::ffi::*;
use crate::hooks::{self, Hook};
use crate::libs;

macro_rules! driver_api {
    ($($field:ident = $symbol:literal: fn($($ty:ty),*);)*) => {
        /// The driver functions, each `None` when the driver lacks it.
        pub struct DriverApi {
            $(pub $field: Option<unsafe extern "C" fn($($ty),*) -> CuResult>,)*
        }

        impl DriverApi {
            fn load() -> DriverApi {
                let handle = libs::driver();
                DriverApi {
                    $($field: {
                        let found = if handle.is_null() {
                            std::ptr::null_mut()
                        } else {
                            libs::symbol(handle, concat!($symbol, "\0").as_ptr().cast())
                        };
                        // SAFETY: the driver's function of this name has this C signature.
                        (!found.is_null()).then(|| unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> CuResult>(found)
                        })
                    },)*
                }
            }
        }
    };
}

driver_api! {
    ctx_get_current = "cuCtxGetCurrent": fn(*mut CuContext);
    ctx_get_device = "cuCtxGetDevice": fn(*mut CuDevice);
    ctx_synchronize = "cuCtxSynchronize": fn();
    ctx_push_current = "cuCtxPushCurrent_v2": fn(CuContext);
    ctx_pop_current = "cuCtxPopCurrent_v2": fn(*mut CuContext);
    mem_host_register = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint);
    mem_host_get_device_pointer = "cuMemHostGetDevicePointer_v2": fn(*mut CuDevicePtr, *mut c_void, c_uint);
    mem_host_unregister = "cuMemHostUnregister": fn(*mut c_void);
    event_create = "cuEventCreate": fn(*mut CuEvent, c_uint);
    event_record = "cuEventRecord": fn(CuEvent, CuStream);
    event_query = "cuEventQuery": fn(CuEvent);
    event_synchronize = "cuEventSynchronize": fn(CuEvent);
    event_destroy = "cuEventDestroy_v2": fn(CuEvent);
    stream_synchronize = "cuStreamSynchronize": fn(CuStream);
    stream_wait_event = "cuStreamWaitEvent": fn(CuStream, CuEvent, c_uint);
    stream_is_capturing = "cuStreamIsCapturing": fn(CuStream, *mut c_int);
    memcpy_async = "cuMemcpyAsync": fn(CuDevicePtr, CuDevicePtr, usize, CuStream);
    mem_alloc = "cuMemAlloc_v2": fn(*mut CuDevicePtr, usize);
    mem_free = "cuMemFree_v2": fn(CuDevicePtr);
    mem_get_address_range = "cuMemGetAddressRange_v2": fn(*mut CuDevicePtr, *mut usize, CuDevicePtr);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CuDevice);
    mem_get_allocation_granularity = "cuMemGetAllocationGranularity": fn(*mut usize, *const CuMemAllocationProp, c_int);
    mem_address_reserve = "cuMemAddressReserve": fn(*mut CuDevicePtr, usize, usize, CuDevicePtr, u64);
    mem_address_free = "cuMemAddressFree": fn(CuDevicePtr, usize);
    mem_create = "cuMemCreate": fn(*mut CuMemGenericAllocationHandle, usize, *const CuMemAllocationProp, u64);
    mem_release = "cuMemRelease": fn(CuMemGenericAllocationHandle);
    mem_map = "cuMemMap": fn(CuDevicePtr, usize, usize, CuMemGenericAllocationHandle, u64);
    mem_unmap = "cuMemUnmap": fn(CuDevicePtr, usize);
    mem_set_access = "cuMemSetAccess": fn(CuDevicePtr, usize, *const CuMemAccessDesc, usize);
    import_external_memory = "cuImportExternalMemory": fn(*mut CuExternalMemory, *const CudaExternalMemoryHandleDesc);
    destroy_external_memory = "cuDestroyExternalMemory": fn(CuExternalMemory);
}

static DRIVER: OnceLock<DriverApi> = OnceLock::new();

/// The driver functions (resolved at the first call that needs them; a hook that needs
/// them runs in a program that uses the driver).
pub fn api() -> &'static DriverApi {
    DRIVER.get_or_init(DriverApi::load)
}

/// Calls an optional driver function, answering CUDA_ERROR_NOT_INITIALIZED if absent.
macro_rules! call {
    ($api:expr, $field:ident($($arg:expr),*)) => {
        match $api.$field {
            // SAFETY: the arguments follow the driver function's contract at each call site.
            Some(function) => unsafe { function($($arg),*) },
            None => $crate::ffi::CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}
pub(crate) use call;

impl DriverApi {
    pub fn current_context(&self) -> Option<CuContext> {
        let mut context: CuContext = std::ptr::null_mut();
        (call!(self, ctx_get_current(&mut context)) == CUDA_SUCCESS && !context.is_null()).then_some(context)
    }

    pub fn current_device(&self) -> Option<CuDevice> {
        let mut device: CuDevice = 0;
        (call!(self, ctx_get_device(&mut device)) == CUDA_SUCCESS).then_some(device)
    }

    /// Whether `device_ptr` is the start of memory CUDA knows as allocated.
    pub fn is_allocation(&self, device_ptr: CuDevicePtr) -> bool {
        let (mut base, mut size): (CuDevicePtr, usize) = (0, 0);
        call!(self, mem_get_address_range(&mut base, &mut size, device_ptr)) == CUDA_SUCCESS && base == device_ptr
    }

    /// The host NUMA node nearest to `device`, if the driver knows one.
    pub fn host_numa_node(&self, device: CuDevice) -> Option<c_int> {
        let mut node: c_int = -1;
        (call!(self, device_get_attribute(&mut node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device)) == CUDA_SUCCESS
            && node >= 0)
            .then_some(node)
    }

    /// Runs `work` with `context` current on this thread, restoring the previous one.
    pub fn with_context<T>(&self, context: CuContext, work: impl FnOnce() -> T) -> T {
        if self.current_context() == Some(context) || context.is_null() {
            return work();
        }
        let pushed = call!(self, ctx_push_current(context)) == CUDA_SUCCESS;
        let result = work();
        if pushed {
            let mut popped: CuContext = std::ptr::null_mut();
            call!(self, ctx_pop_current(&mut popped));
        }
        result
    }
}

/// The device's physical VRAM through the real cuDeviceTotalMem_v2, cached per device.
pub fn physical_vram(device: CuDevice) -> Option<u64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const CACHED_DEVICES: usize = 64;
    static TOTALS: [AtomicU64; CACHED_DEVICES] = [const { AtomicU64::new(0) }; CACHED_DEVICES];
    let cache = usize::try_from(device).ok().and_then(|index| TOTALS.get(index));
    if let Some(known) = cache.map(|slot| slot.load(Ordering::Relaxed)).filter(|total| *total != 0) {
        return Some(known);
    }
    let found = hooks::real(Hook::cuDeviceTotalMem_v2);
    if found.is_null() {
        return None;
    }
    // SAFETY: the real cuDeviceTotalMem_v2.
    let real: hooks::pfn::cuDeviceTotalMem_v2 = unsafe { std::mem::transmute(found) };
    let mut bytes: usize = 0;
    // SAFETY: valid out pointer.
    if unsafe { real(&mut bytes, device) } != CUDA_SUCCESS || bytes == 0 {
        return None;
    }
    if let Some(slot) = cache {
        slot.store(bytes as u64, Ordering::Relaxed);
    }
    Some(bytes as u64)
}
