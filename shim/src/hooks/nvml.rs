//! NVML hooks: the capacity ollama and monitoring tools read.

use std::ffi::{c_int, c_uint};

use crate::cuda::ffi::*;
use crate::cuda::real::{self, pfn};
use crate::memory::report;
use crate::rules::config;

/// The device ordinal per-device settings use for an NVML device: its NVML index (NVML
/// counts every GPU in PCI order; CUDA ordinals agree with CUDA_DEVICE_ORDER=PCI_BUS_ID
/// and no CUDA_VISIBLE_DEVICES remapping). 0 when NVML cannot tell.
fn ordinal(device: NvmlDevice) -> CuDevice {
    if !config::get().varies_by_device() {
        return 0;
    }
    let Some(get_index) = real::nvmlDeviceGetIndex() else { return 0 };
    let mut index: c_uint = 0;
    // SAFETY: the program's device handle (NVML validates it) and a valid local.
    let status = unsafe { get_index(device, &mut index) };
    if status == NvmlReturn::SUCCESS {
        c_int::try_from(index).unwrap_or(0)
    } else {
        0
    }
}

/// # Safety
/// The program's arguments, as nvmlDeviceGetMemoryInfo takes them.
pub unsafe fn device_get_memory_info(
    real: pfn::nvmlDeviceGetMemoryInfo,
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(device, memory) };
    if status == NvmlReturn::SUCCESS && !memory.is_null() {
        // SAFETY: NVML accepted the pointer and filled the struct.
        let memory = unsafe { &mut *memory };
        let (free, total) = report::reported(ordinal(device), memory.free, memory.total);
        *memory = NvmlMemory { total, free, used: total.saturating_sub(free) };
    }
    status
}

/// # Safety
/// The program's arguments, as nvmlDeviceGetMemoryInfo_v2 takes them.
pub unsafe fn device_get_memory_info_v2(
    real: pfn::nvmlDeviceGetMemoryInfo_v2,
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    // SAFETY: the real function with the program's own arguments.
    let status = unsafe { real(device, memory) };
    if status == NvmlReturn::SUCCESS && !memory.is_null() {
        // SAFETY: NVML accepted the pointer and filled the struct.
        let memory = unsafe { &mut *memory };
        let (free, total) = report::reported(ordinal(device), memory.free, memory.total);
        memory.total = total;
        memory.free = free;
        memory.used = total.saturating_sub(free).saturating_sub(memory.reserved);
    }
    status
}
