//! What the driver says of a device: its VRAM (physical, and free now), the host NUMA
//! node and PCI address it sits at, the peak rate of its memory, and whether it migrates
//! managed memory under running kernels. Asked through `real`, as `calls` asks.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::cuda::ffi::*;
use crate::cuda::real;
use crate::sys::per_device::PerDevice;

/// The host NUMA node nearest to `device`, if the driver knows one.
pub fn host_numa_node(device: CuDevice) -> Option<c_int> {
    let mut node: c_int = -1;
    let status = driver_call!(
        cuDeviceGetAttribute(&mut node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device),
        "writes one int to a valid local"
    );
    (status == CuResult::SUCCESS && node >= 0).then_some(node)
}

/// The device's physical VRAM through the real cuDeviceTotalMem_v2, cached per device.
pub fn physical_vram(device: CuDevice) -> Option<u64> {
    static TOTALS: PerDevice = PerDevice::new();
    let cache = TOTALS.of(device);
    if let Some(known) = cache.map(|slot| slot.load(Ordering::Relaxed)).filter(|total| *total != 0) {
        return Some(known);
    }
    let mut bytes: usize = 0;
    let status = driver_call!(cuDeviceTotalMem_v2(&mut bytes, device), "writes one size_t to a valid local");
    if status != CuResult::SUCCESS || bytes == 0 {
        return None;
    }
    if let Some(slot) = cache {
        slot.store(bytes as u64, Ordering::Relaxed);
    }
    Some(bytes as u64)
}

/// The peak rate of `device`'s own memory in bytes per second (twice its memory clock,
/// for double data rate, times its bus width), asked once per device; `None` when the
/// driver does not say.
pub fn vram_peak_bytes_per_s(device: CuDevice) -> Option<u64> {
    /// A device asked whose driver did not say.
    const UNKNOWN: u64 = u64::MAX;
    static RATES: PerDevice = PerDevice::new();
    let cache = RATES.of(device);
    match cache.map(|slot| slot.load(Ordering::Relaxed)) {
        Some(UNKNOWN) => return None,
        Some(0) | None => {}
        Some(known) => return Some(known),
    }
    let (mut clock_khz, mut bus_bits): (c_int, c_int) = (0, 0);
    let clock = driver_call!(
        cuDeviceGetAttribute(&mut clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, device),
        "writes one int to a valid local"
    );
    let bus = driver_call!(
        cuDeviceGetAttribute(&mut bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device),
        "writes one int to a valid local"
    );
    let rate = (clock == CuResult::SUCCESS && bus == CuResult::SUCCESS && clock_khz > 0 && bus_bits > 0)
        .then(|| 2 * clock_khz as u64 * 1000 * bus_bits as u64 / 8);
    if let Some(slot) = cache {
        slot.store(rate.unwrap_or(UNKNOWN), Ordering::Relaxed);
    }
    rate
}

/// (free, total) bytes of the current context's device, as the driver sees them: every
/// process's use counts.
pub fn device_memory() -> Option<(u64, u64)> {
    let (mut free, mut total): (usize, usize) = (0, 0);
    let status = driver_call!(cuMemGetInfo_v2(&mut free, &mut total), "writes two size_t to valid locals");
    (status == CuResult::SUCCESS && total != 0).then_some((free as u64, total as u64))
}

/// Whether `device` lets the CPU and the GPU use managed memory at once (the driver
/// migrating pages under running kernels): what movable T2 needs.
pub fn concurrent_managed_access(device: CuDevice) -> bool {
    let mut value: c_int = 0;
    let status = driver_call!(
        cuDeviceGetAttribute(&mut value, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device),
        "writes one int to a valid local"
    );
    status == CuResult::SUCCESS && value == 1
}

/// The GPU's PCI address (domain, bus, device), the same in every process; `None` when
/// the driver does not say.
pub fn pci_address(device: CuDevice) -> Option<(u32, u32, u32)> {
    let mut parts = [0u32; 3];
    let attributes =
        [CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
    for (part, attribute) in parts.iter_mut().zip(attributes) {
        let mut value: c_int = 0;
        let status =
            driver_call!(cuDeviceGetAttribute(&mut value, attribute, device), "writes one int to a valid local");
        *part = u32::try_from(value).ok().filter(|_| status == CuResult::SUCCESS)?;
    }
    Some((parts[0], parts[1], parts[2]))
}
