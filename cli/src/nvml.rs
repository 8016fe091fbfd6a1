//! What NVIDIA's management library says about each GPU, loaded at run time
//! (`libnvidia-ml.so.1` ships with the driver; without it the CLI still works).

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library;

type Handle = *mut c_void;
const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;

#[derive(Clone, Debug, Default)]
pub struct GpuProcess {
    pub pid: u32,
    /// VRAM in use by the process (None when the driver does not say, e.g. under MIG).
    pub used: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub memory_total: u64,
    pub memory_used: u64,
    pub memory_free: u64,
    pub pcie_generation: Option<(u32, u32)>,
    pub pcie_width: Option<(u32, u32)>,
    pub processes: Vec<GpuProcess>,
}

#[derive(Clone, Debug, Default)]
pub struct NvmlReport {
    pub driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlProcessInfo_t` as the _v2/_v3 queries fill it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// NVML's "not available" marker for usedGpuMemory.
const NVML_VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// `nvmlPciInfo_t` (v3): busIdLegacy[16], five u32, busId[32]. Only `bus_id` is read;
/// the other fields are there for the layout.
#[repr(C)]
#[allow(dead_code)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_subsystem_id: c_uint,
    bus_id: [c_char; 32],
}

fn c_text(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The library to load: `GREENBOOST_NVML_LIBRARY` (a path, for tests against a fake
/// NVML, or `none` to skip NVML) or the driver's `libnvidia-ml.so.1`.
fn library_name() -> Option<std::ffi::OsString> {
    match std::env::var_os("GREENBOOST_NVML_LIBRARY") {
        Some(name) if name == "none" => None,
        Some(name) => Some(name),
        None => Some("libnvidia-ml.so.1".into()),
    }
}

/// Opens NVML and queries every GPU. `Err` says why nothing could be read.
pub fn query() -> Result<NvmlReport, String> {
    let name = library_name().ok_or("NVML disabled by GREENBOOST_NVML_LIBRARY=none")?;
    // SAFETY: loading the driver's NVML runs its initialisers, which is what every NVML
    // client does; the library stays loaded for the lifetime of this function.
    let library = unsafe { Library::new(&name) }.map_err(|e| {
        format!(
            "NVML ({}) is not available, so GPU figures are missing: {e}. It ships with the NVIDIA driver",
            name.to_string_lossy()
        )
    })?;
    // SAFETY: the signatures below are NVML's documented C prototypes; optional entry
    // points are looked up individually and skipped when the driver lacks them.
    unsafe {
        let init = library
            .get::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2\0")
            .map_err(|e| format!("NVML has no nvmlInit_v2: {e}"))?;
        let rc = init();
        if rc != NVML_SUCCESS {
            return Err(format!("nvmlInit_v2 failed with NVML error {rc}: is the NVIDIA driver loaded (nvidia-smi)?"));
        }
        let mut report = NvmlReport::default();
        if let Ok(driver) =
            library.get::<unsafe extern "C" fn(*mut c_char, c_uint) -> c_int>(b"nvmlSystemGetDriverVersion\0")
        {
            let mut buffer = [0 as c_char; 96];
            if driver(buffer.as_mut_ptr(), buffer.len() as c_uint) == NVML_SUCCESS {
                report.driver_version = Some(c_text(&buffer));
            }
        }
        let count_fn = library
            .get::<unsafe extern "C" fn(*mut c_uint) -> c_int>(b"nvmlDeviceGetCount_v2\0")
            .map_err(|e| format!("NVML has no nvmlDeviceGetCount_v2: {e}"))?;
        let handle_fn = library
            .get::<unsafe extern "C" fn(c_uint, *mut Handle) -> c_int>(b"nvmlDeviceGetHandleByIndex_v2\0")
            .map_err(|e| format!("NVML has no nvmlDeviceGetHandleByIndex_v2: {e}"))?;
        let name_fn =
            library.get::<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_int>(b"nvmlDeviceGetName\0").ok();
        let memory_fn =
            library.get::<unsafe extern "C" fn(Handle, *mut Memory) -> c_int>(b"nvmlDeviceGetMemoryInfo\0").ok();
        let pci_fn =
            library.get::<unsafe extern "C" fn(Handle, *mut PciInfo) -> c_int>(b"nvmlDeviceGetPciInfo_v3\0").ok();
        let link = |name: &[u8]| library.get::<unsafe extern "C" fn(Handle, *mut c_uint) -> c_int>(name).ok();
        let (cur_gen, max_gen) =
            (link(b"nvmlDeviceGetCurrPcieLinkGeneration\0"), link(b"nvmlDeviceGetMaxPcieLinkGeneration\0"));
        let (cur_width, max_width) =
            (link(b"nvmlDeviceGetCurrPcieLinkWidth\0"), link(b"nvmlDeviceGetMaxPcieLinkWidth\0"));
        type ProcessesFn = unsafe extern "C" fn(Handle, *mut c_uint, *mut ProcessInfo) -> c_int;
        let processes_fn = library
            .get::<ProcessesFn>(b"nvmlDeviceGetComputeRunningProcesses_v3\0")
            .or_else(|_| library.get::<ProcessesFn>(b"nvmlDeviceGetComputeRunningProcesses_v2\0"))
            .ok();

        let mut count: c_uint = 0;
        let rc = count_fn(&mut count);
        if rc != NVML_SUCCESS {
            return Err(format!("nvmlDeviceGetCount_v2 failed with NVML error {rc}"));
        }
        for index in 0..count {
            let mut handle: Handle = std::ptr::null_mut();
            if handle_fn(index, &mut handle) != NVML_SUCCESS {
                continue;
            }
            let mut gpu = Gpu { index, ..Gpu::default() };
            if let Some(f) = &name_fn {
                let mut buffer = [0 as c_char; 96];
                if f(handle, buffer.as_mut_ptr(), buffer.len() as c_uint) == NVML_SUCCESS {
                    gpu.name = c_text(&buffer);
                }
            }
            if let Some(f) = &memory_fn {
                let mut memory = Memory::default();
                if f(handle, &mut memory) == NVML_SUCCESS {
                    (gpu.memory_total, gpu.memory_free, gpu.memory_used) = (memory.total, memory.free, memory.used);
                }
            }
            if let Some(f) = &pci_fn {
                let mut pci: PciInfo = std::mem::zeroed();
                if f(handle, &mut pci) == NVML_SUCCESS {
                    gpu.pci_bus_id = Some(c_text(&pci.bus_id));
                }
            }
            let read = |f: &Option<libloading::Symbol<unsafe extern "C" fn(Handle, *mut c_uint) -> c_int>>| {
                let mut value: c_uint = 0;
                f.as_ref().filter(|f| f(handle, &mut value) == NVML_SUCCESS).map(|_| value)
            };
            if let (Some(current), Some(max)) = (read(&cur_gen), read(&max_gen)) {
                gpu.pcie_generation = Some((current, max));
            }
            if let (Some(current), Some(max)) = (read(&cur_width), read(&max_width)) {
                gpu.pcie_width = Some((current, max));
            }
            if let Some(f) = &processes_fn {
                let mut infos = vec![ProcessInfo::default(); 64];
                let mut n = infos.len() as c_uint;
                let mut rc = f(handle, &mut n, infos.as_mut_ptr());
                if rc == NVML_ERROR_INSUFFICIENT_SIZE {
                    infos.resize(n as usize + 16, ProcessInfo::default());
                    n = infos.len() as c_uint;
                    rc = f(handle, &mut n, infos.as_mut_ptr());
                }
                if rc == NVML_SUCCESS {
                    gpu.processes = infos[..(n as usize).min(infos.len())]
                        .iter()
                        .map(|p| GpuProcess {
                            pid: p.pid,
                            used: (p.used_gpu_memory != NVML_VALUE_NOT_AVAILABLE).then_some(p.used_gpu_memory),
                        })
                        .collect();
                }
            }
            report.gpus.push(gpu);
        }
        if let Ok(shutdown) = library.get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown\0") {
            shutdown();
        }
        Ok(report)
    }
}
