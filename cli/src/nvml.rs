//! What NVIDIA's management library says about each GPU, through nvml-wrapper, which
//! loads `libnvidia-ml.so.1` (it ships with the driver) at run time: without it the
//! CLI still works, and `GREENBOOST_NVML_LIBRARY` points it at a stand-in for tests.

use std::ffi::OsString;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::{Device, Nvml};

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

/// The library to load: `GREENBOOST_NVML_LIBRARY` (a path, for tests against a fake
/// NVML, or `none` to skip NVML) or the driver's `libnvidia-ml.so.1`.
fn library_name() -> Option<OsString> {
    match std::env::var_os("GREENBOOST_NVML_LIBRARY") {
        Some(name) if name == "none" => None,
        Some(name) => Some(name),
        None => Some("libnvidia-ml.so.1".into()),
    }
}

/// What NVML says about GPU `device` (its figures, each left out where NVML has none).
fn gpu(index: u32, device: &Device) -> Gpu {
    let both = |current: Option<u32>, max: Option<u32>| current.zip(max);
    let memory = device.memory_info().ok();
    Gpu {
        index,
        name: device.name().unwrap_or_default(),
        pci_bus_id: device.pci_info().ok().map(|pci| pci.bus_id),
        memory_total: memory.as_ref().map_or(0, |m| m.total),
        // Everything not free, the driver's reservation included, as the total and the
        // free figure add up (nvidia-smi shows the reservation apart).
        memory_used: memory.as_ref().map_or(0, |m| m.total.saturating_sub(m.free)),
        memory_free: memory.as_ref().map_or(0, |m| m.free),
        pcie_generation: both(device.current_pcie_link_gen().ok(), device.max_pcie_link_gen().ok()),
        pcie_width: both(device.current_pcie_link_width().ok(), device.max_pcie_link_width().ok()),
        processes: device
            .running_compute_processes()
            .map(|processes| {
                processes
                    .into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        used: match p.used_gpu_memory {
                            UsedGpuMemory::Used(bytes) => Some(bytes),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Opens NVML and queries every GPU. `Err` says why nothing could be read.
pub fn query() -> Result<NvmlReport, String> {
    let name = library_name().ok_or("NVML disabled by GREENBOOST_NVML_LIBRARY=none")?;
    let nvml = Nvml::builder().lib_path(&name).init().map_err(|e| {
        format!(
            "NVML ({}) is not available, so GPU figures are missing: {e}. It ships with the NVIDIA driver: is it loaded (nvidia-smi)?",
            name.to_string_lossy()
        )
    })?;
    let count = nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount failed: {e}"))?;
    let gpus =
        (0..count).filter_map(|index| nvml.device_by_index(index).ok().map(|device| gpu(index, &device))).collect();
    Ok(NvmlReport { driver_version: nvml.sys_driver_version().ok(), gpus })
}
