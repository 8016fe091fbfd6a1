//! `report`: capacities as every API reports them (runtime, driver, NVML), versions, the
//! device's name.

use super::*;

pub(crate) fn init_runtime() -> Result<(), String> {
    // SAFETY: plain runtime calls; cudaFree(NULL) creates the primary context.
    rt_check("cudaSetDevice(0)", unsafe { rt::cudaSetDevice(0) })?;
    rt_check("cudaFree(NULL)", unsafe { rt::cudaFree(std::ptr::null_mut()) })
}

pub(crate) fn mem_get_info() -> Result<(usize, usize), String> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: two out-parameters.
    rt_check("cudaMemGetInfo", unsafe { rt::cudaMemGetInfo(&mut free, &mut total) })?;
    Ok((free, total))
}

/// cudaGetDeviceProperties under the name libcudart exports (`_v2` since CUDA 12).
pub(crate) fn device_properties() -> Result<rt::cudaDeviceProp, String> {
    type GetProps = unsafe extern "C" fn(*mut rt::cudaDeviceProp, i32) -> rt::cudaError_t;
    // SAFETY: the library is libcudart, loaded by cudarc; both names have this signature.
    let lib = unsafe { rt::culib() };
    let get: libloading::Symbol<GetProps> =
        unsafe { lib.get(b"cudaGetDeviceProperties_v2\0").or_else(|_| lib.get(b"cudaGetDeviceProperties\0")) }
            .map_err(|e| format!("cudaGetDeviceProperties not found: {e}"))?;
    let mut props = std::mem::MaybeUninit::<rt::cudaDeviceProp>::zeroed();
    // SAFETY: props is large enough for the CUDA 13 struct the runtime writes.
    rt_check("cudaGetDeviceProperties", unsafe { get(props.as_mut_ptr(), 0) })?;
    // SAFETY: written by the runtime (and zeroed before).
    Ok(unsafe { props.assume_init() })
}

/// NVML's view of device 0's memory, looked up with dlopen + dlsym as ollama does.
pub(crate) fn nvml_memory() -> Result<Vec<(String, u64)>, String> {
    #[repr(C)]
    struct NvmlMemory {
        total: u64,
        free: u64,
        used: u64,
    }
    #[repr(C)]
    struct NvmlMemoryV2 {
        version: u32,
        total: u64,
        reserved: u64,
        free: u64,
        used: u64,
    }
    // SAFETY: loading the driver's NVML; its initialisers have no preconditions.
    let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
        .map_err(|e| format!("dlopen libnvidia-ml.so.1: {e}"))?;
    type Init = unsafe extern "C" fn() -> i32;
    type Handle = unsafe extern "C" fn(u32, *mut *mut c_void) -> i32;
    type Memory = unsafe extern "C" fn(*mut c_void, *mut NvmlMemory) -> i32;
    type MemoryV2 = unsafe extern "C" fn(*mut c_void, *mut NvmlMemoryV2) -> i32;
    let mut out = Vec::new();
    // SAFETY: the signatures are NVML's; every out-parameter is a live local.
    unsafe {
        let init: libloading::Symbol<Init> = lib.get(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
        let rc = init();
        if rc != 0 {
            return Err(format!("nvmlInit_v2 returned {rc}"));
        }
        let handle_by_index: libloading::Symbol<Handle> =
            lib.get(b"nvmlDeviceGetHandleByIndex_v2\0").map_err(|e| e.to_string())?;
        let mut device: *mut c_void = std::ptr::null_mut();
        let rc = handle_by_index(0, &mut device);
        if rc != 0 {
            return Err(format!("nvmlDeviceGetHandleByIndex_v2 returned {rc}"));
        }
        let memory: libloading::Symbol<Memory> = lib.get(b"nvmlDeviceGetMemoryInfo\0").map_err(|e| e.to_string())?;
        let mut m = NvmlMemory { total: 0, free: 0, used: 0 };
        let rc = memory(device, &mut m);
        if rc != 0 {
            return Err(format!("nvmlDeviceGetMemoryInfo returned {rc}"));
        }
        out.extend([
            ("nvml.total".to_string(), m.total),
            ("nvml.free".to_string(), m.free),
            ("nvml.used".to_string(), m.used),
        ]);
        if let Ok(memory_v2) = lib.get::<MemoryV2>(b"nvmlDeviceGetMemoryInfo_v2\0") {
            // nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2): size | 2 << 24.
            let mut m = NvmlMemoryV2 {
                version: std::mem::size_of::<NvmlMemoryV2>() as u32 | 2 << 24,
                total: 0,
                reserved: 0,
                free: 0,
                used: 0,
            };
            let rc = memory_v2(device, &mut m);
            if rc == 0 {
                out.extend([
                    ("nvml_v2.total".to_string(), m.total),
                    ("nvml_v2.free".to_string(), m.free),
                    ("nvml_v2.used".to_string(), m.used),
                ]);
            } else {
                out.push(("nvml_v2.error".to_string(), rc as u64));
            }
        }
    }
    Ok(out)
}

pub(crate) fn report(tally: &mut Tally) -> Result<(), String> {
    init_runtime()?;
    let mut version = 0i32;
    // SAFETY: out-parameters.
    rt_check("cudaDriverGetVersion", unsafe { rt::cudaDriverGetVersion(&mut version) })?;
    kv("cuda.driver_version", version);
    rt_check("cudaRuntimeGetVersion", unsafe { rt::cudaRuntimeGetVersion(&mut version) })?;
    kv("cuda.runtime_version", version);
    let props = device_properties()?;
    // SAFETY: name is NUL-terminated within its 256 bytes (zeroed before the call).
    let name = unsafe { CStr::from_ptr(props.name.as_ptr()) }.to_string_lossy().into_owned();
    kv("device.name", name.replace(' ', "_"));
    kv("device.cc", format!("{}.{}", props.major, props.minor));
    kv("props.total", props.totalGlobalMem);
    let (free, total) = mem_get_info()?;
    kv("cudaMemGetInfo.free", free);
    kv("cudaMemGetInfo.total", total);
    let mut device: cu::CUdevice = 0;
    let mut bytes = 0usize;
    // SAFETY: out-parameters.
    cu_check("cuDeviceGet", unsafe { cu::cuDeviceGet(&mut device, 0) })?;
    cu_check("cuDeviceTotalMem_v2", unsafe { cu::cuDeviceTotalMem_v2(&mut bytes, device) })?;
    kv("cuDeviceTotalMem.total", bytes);
    let (mut free, mut total) = (0usize, 0usize);
    cu_check("cuMemGetInfo_v2", unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) })?;
    kv("cuMemGetInfo.free", free);
    kv("cuMemGetInfo.total", total);
    match nvml_memory() {
        Ok(values) => values.into_iter().for_each(|(k, v)| kv(&k, v)),
        Err(e) => tally.record("report.nvml", false, e),
    }
    tally.record("report.queries", true, format!("{name}: every capacity query answered"));
    Ok(())
}
