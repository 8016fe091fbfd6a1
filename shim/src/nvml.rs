//! NVML hooks: the capacity ollama and monitoring tools read.

use crate::ffi::*;
use crate::hooks::pfn;
use crate::tiers;

pub unsafe fn device_get_memory_info(real: pfn::nvmlDeviceGetMemoryInfo, device: NvmlDevice, memory: *mut NvmlMemory) -> NvmlReturn {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(device, memory) };
    if status == NVML_SUCCESS && !memory.is_null() {
        // SAFETY: NVML filled the struct.
        let memory = unsafe { &mut *memory };
        let (free, total) = tiers::reported(memory.free, memory.total);
        *memory = NvmlMemory { total, free, used: total.saturating_sub(free) };
    }
    status
}

pub unsafe fn device_get_memory_info_v2(real: pfn::nvmlDeviceGetMemoryInfo_v2, device: NvmlDevice, memory: *mut NvmlMemoryV2) -> NvmlReturn {
    // SAFETY: the caller's arguments.
    let status = unsafe { real(device, memory) };
    if status == NVML_SUCCESS && !memory.is_null() {
        // SAFETY: NVML filled the struct.
        let memory = unsafe { &mut *memory };
        let (free, total) = tiers::reported(memory.free, memory.total);
        memory.total = total;
        memory.free = free;
        memory.used = total.saturating_sub(free).saturating_sub(memory.reserved);
    }
    status
}
