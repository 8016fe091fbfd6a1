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

type LinkFn = unsafe extern "C" fn(Handle, *mut c_uint) -> c_int;
type ProcessesFn = unsafe extern "C" fn(Handle, *mut c_uint, *mut ProcessInfo) -> c_int;

/// An initialised NVML and the entry points the query uses (plain function pointers,
/// valid while `library` is loaded); the optional ones are `None` where the driver
/// lacks them.
struct Nvml {
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    handle: unsafe extern "C" fn(c_uint, *mut Handle) -> c_int,
    name: Option<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_int>,
    memory: Option<unsafe extern "C" fn(Handle, *mut Memory) -> c_int>,
    pci: Option<unsafe extern "C" fn(Handle, *mut PciInfo) -> c_int>,
    /// Current and maximum PCIe link generation, then current and maximum width.
    links: [Option<LinkFn>; 4],
    processes: Option<ProcessesFn>,
    library: Library,
}

/// Loads `GREENBOOST_NVML_LIBRARY` or the driver's NVML.
fn load() -> Result<Library, String> {
    let name = library_name().ok_or("NVML disabled by GREENBOOST_NVML_LIBRARY=none")?;
    // SAFETY: loading the driver's NVML runs its initialisers, which is what every NVML
    // client does; the library stays loaded as long as the `Nvml` that holds it.
    unsafe { Library::new(&name) }.map_err(|e| {
        format!(
            "NVML ({}) is not available, so GPU figures are missing: {e}. It ships with the NVIDIA driver",
            name.to_string_lossy()
        )
    })
}

impl Nvml {
    /// `nvmlInit_v2`, then the entry points.
    fn init(library: Library) -> Result<Nvml, String> {
        // SAFETY: every symbol is looked up with NVML's documented C prototype (nvml.h);
        // the pointers are copied out while `library` is loaded and stored beside it.
        unsafe {
            let init = library
                .get::<unsafe extern "C" fn() -> c_int>(b"nvmlInit_v2\0")
                .map_err(|e| format!("NVML has no nvmlInit_v2: {e}"))?;
            let rc = init();
            if rc != NVML_SUCCESS {
                return Err(format!(
                    "nvmlInit_v2 failed with NVML error {rc}: is the NVIDIA driver loaded (nvidia-smi)?"
                ));
            }
            let required = |name: &str| format!("NVML has no {name}");
            let link = |name: &[u8]| library.get::<LinkFn>(name).ok().map(|f| *f);
            Ok(Nvml {
                count: *library
                    .get(b"nvmlDeviceGetCount_v2\0")
                    .map_err(|e| format!("{}: {e}", required("nvmlDeviceGetCount_v2")))?,
                handle: *library
                    .get(b"nvmlDeviceGetHandleByIndex_v2\0")
                    .map_err(|e| format!("{}: {e}", required("nvmlDeviceGetHandleByIndex_v2")))?,
                name: library.get(b"nvmlDeviceGetName\0").ok().map(|f| *f),
                memory: library.get(b"nvmlDeviceGetMemoryInfo\0").ok().map(|f| *f),
                pci: library.get(b"nvmlDeviceGetPciInfo_v3\0").ok().map(|f| *f),
                links: [
                    link(b"nvmlDeviceGetCurrPcieLinkGeneration\0"),
                    link(b"nvmlDeviceGetMaxPcieLinkGeneration\0"),
                    link(b"nvmlDeviceGetCurrPcieLinkWidth\0"),
                    link(b"nvmlDeviceGetMaxPcieLinkWidth\0"),
                ],
                processes: library
                    .get::<ProcessesFn>(b"nvmlDeviceGetComputeRunningProcesses_v3\0")
                    .or_else(|_| library.get::<ProcessesFn>(b"nvmlDeviceGetComputeRunningProcesses_v2\0"))
                    .ok()
                    .map(|f| *f),
                library,
            })
        }
    }

    fn driver_version(&self) -> Option<String> {
        let mut buffer = [0 as c_char; 96];
        // SAFETY: NVML's prototype; the buffer's length is passed with it.
        unsafe {
            let driver = self
                .library
                .get::<unsafe extern "C" fn(*mut c_char, c_uint) -> c_int>(b"nvmlSystemGetDriverVersion\0")
                .ok()?;
            (driver(buffer.as_mut_ptr(), buffer.len() as c_uint) == NVML_SUCCESS).then(|| c_text(&buffer))
        }
    }

    fn gpus(&self) -> Result<Vec<Gpu>, String> {
        let mut count: c_uint = 0;
        // SAFETY: `count` is a valid out-pointer.
        let rc = unsafe { (self.count)(&mut count) };
        if rc != NVML_SUCCESS {
            return Err(format!("nvmlDeviceGetCount_v2 failed with NVML error {rc}"));
        }
        Ok((0..count).filter_map(|index| self.gpu(index)).collect())
    }

    /// What NVML says about GPU `index`; `None` when it gives no handle for it.
    fn gpu(&self, index: c_uint) -> Option<Gpu> {
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer.
        if unsafe { (self.handle)(index, &mut handle) } != NVML_SUCCESS {
            return None;
        }
        let mut gpu = Gpu { index, ..Gpu::default() };
        // SAFETY: in every call below, `handle` came from NVML, the out-pointers are valid
        // locals of the prototype's types, and buffers are passed with their lengths.
        unsafe {
            if let Some(f) = self.name {
                let mut buffer = [0 as c_char; 96];
                if f(handle, buffer.as_mut_ptr(), buffer.len() as c_uint) == NVML_SUCCESS {
                    gpu.name = c_text(&buffer);
                }
            }
            if let Some(f) = self.memory {
                let mut memory = Memory::default();
                if f(handle, &mut memory) == NVML_SUCCESS {
                    (gpu.memory_total, gpu.memory_free, gpu.memory_used) = (memory.total, memory.free, memory.used);
                }
            }
            if let Some(f) = self.pci {
                let mut pci: PciInfo = std::mem::zeroed();
                if f(handle, &mut pci) == NVML_SUCCESS {
                    gpu.pci_bus_id = Some(c_text(&pci.bus_id));
                }
            }
        }
        let [current_generation, max_generation, current_width, max_width] = self.links.map(|f| link(f, handle));
        gpu.pcie_generation = current_generation.zip(max_generation);
        gpu.pcie_width = current_width.zip(max_width);
        gpu.processes = self.processes.and_then(|f| processes(f, handle)).unwrap_or_default();
        Some(gpu)
    }

    fn shutdown(&self) {
        // SAFETY: NVML's prototype; called once, after the last query.
        unsafe {
            if let Ok(shutdown) = self.library.get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown\0") {
                shutdown();
            }
        }
    }
}

/// One PCIe link figure of a GPU.
fn link(f: Option<LinkFn>, handle: Handle) -> Option<c_uint> {
    let mut value: c_uint = 0;
    // SAFETY: `handle` came from NVML and `value` is a valid out-pointer.
    f.filter(|f| unsafe { f(handle, &mut value) } == NVML_SUCCESS).map(|_| value)
}

/// The compute processes on a GPU, asking again with room for more when 64 were not
/// enough.
fn processes(f: ProcessesFn, handle: Handle) -> Option<Vec<GpuProcess>> {
    let mut infos = vec![ProcessInfo::default(); 64];
    let mut n = infos.len() as c_uint;
    // SAFETY: `infos` has room for the `n` entries announced; `handle` came from NVML.
    let mut rc = unsafe { f(handle, &mut n, infos.as_mut_ptr()) };
    if rc == NVML_ERROR_INSUFFICIENT_SIZE {
        infos.resize(n as usize + 16, ProcessInfo::default());
        n = infos.len() as c_uint;
        // SAFETY: the resized `infos` has room for the `n` entries announced.
        rc = unsafe { f(handle, &mut n, infos.as_mut_ptr()) };
    }
    (rc == NVML_SUCCESS).then(|| {
        infos[..(n as usize).min(infos.len())]
            .iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used: (p.used_gpu_memory != NVML_VALUE_NOT_AVAILABLE).then_some(p.used_gpu_memory),
            })
            .collect()
    })
}

/// Opens NVML and queries every GPU. `Err` says why nothing could be read.
pub fn query() -> Result<NvmlReport, String> {
    let nvml = Nvml::init(load()?)?;
    let report = NvmlReport { driver_version: nvml.driver_version(), gpus: nvml.gpus()? };
    nvml.shutdown();
    Ok(report)
}
