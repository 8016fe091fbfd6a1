//! NVML hooks: the capacity ollama and monitoring tools read.

use crate::ffi::*;
use crate::real::pfn;
use crate::report;

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
        let (free, total) = report::reported(memory.free, memory.total);
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
        let (free, total) = report::reported(memory.free, memory.total);
        memory.total = total;
        memory.free = free;
        memory.used = total.saturating_sub(free).saturating_sub(memory.reserved);
    }
    status
}
