//! What the memory queries report (cudaMemGetInfo, cuMemGetInfo, cuDeviceTotalMem,
//! cudaGetDeviceProperties, NVML): the driver's real figures through the report rule
//! (`placement`), with the T2 capacity in combined mode.

use crate::cuda;
use crate::cuda::ffi::CuDevice;
use crate::memory::budget;
use crate::rules::config::{self, ReportMode};
use crate::rules::placement::Rules;
use crate::sys::stats::{self, STATS};

/// (free, total) as the program should see them, from the driver's real figures.
pub fn reported(device: CuDevice, real_free: u64, real_total: u64) -> (u64, u64) {
    let config = config::get();
    let (t2_cap, t2_used) = match config.report {
        ReportMode::Physical => (0, 0),
        ReportMode::Combined => (budget::t2_capacity(), stats::load(&STATS.t2_used)),
    };
    Rules::of(config).report(device, real_free, real_total, t2_cap, t2_used)
}

/// After a successful real cuMemGetInfo/cudaMemGetInfo: the free and total figures it
/// stored become the ones the program should see.
///
/// # Safety
/// `free` and `total` are each null or valid for reads and writes.
pub unsafe fn rewrite_mem_info(free: *mut usize, total: *mut usize) {
    if free.is_null() || total.is_null() {
        return;
    }
    // SAFETY: both are valid for reads and writes (the contract), and the real call
    // filled them.
    unsafe {
        // The current device matters only when a setting differs between devices.
        let device = if config::get().varies_by_device() { cuda::current_device().unwrap_or(0) } else { 0 };
        let (shown_free, shown_total) = reported(device, *free as u64, *total as u64);
        *free = shown_free as usize;
        *total = shown_total as usize;
    }
}
