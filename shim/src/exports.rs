//! C functions the shim exports for tests, tools and benchmarks that `dlsym` them.

use crate::backend;
use crate::ffi::CuDevicePtr;
use crate::registry;
use crate::stats::{self, ShimStats};

/// Copies the shim's counters into `*out`. Returns 0, or -1 for a null pointer.
///
/// # Safety
/// `out` is null or valid for writing a `ShimStats`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn greenboost_shim_stats(out: *mut ShimStats) -> i32 {
    if out.is_null() {
        return -1;
    }
    // SAFETY: non-null, and valid for writing a ShimStats per the contract.
    unsafe { out.write(stats::snapshot(backend::summary())) };
    0
}

/// How many bytes of the device range [`device_ptr`, `device_ptr + len`) the shim
/// placed in T2. Unlike the pointer's memory type, this sees the host tail of a split
/// allocation (one VMM range, "device" memory to the driver).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn greenboost_shim_t2_bytes(device_ptr: CuDevicePtr, len: u64) -> u64 {
    registry::t2_bytes(device_ptr, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::STATS;

    #[test]
    fn stats_export_copies_the_counters_and_refuses_null() {
        // SAFETY: null is allowed by the contract.
        assert_eq!(unsafe { greenboost_shim_stats(std::ptr::null_mut()) }, -1);
        stats::add_in_use(&STATS.t1_used, &STATS.t1_peak, 4096);
        stats::bump(&STATS.t1_allocs);
        let mut out = ShimStats::default();
        // SAFETY: `out` is a valid ShimStats.
        assert_eq!(unsafe { greenboost_shim_stats(&mut out) }, 0);
        assert!(out.t1_allocs >= 1 && out.t1_peak >= 4096, "{out:?}");
        assert_eq!(out.import_dmabuf_result, -1, "no import attempted in unit tests");
    }

    #[test]
    fn t2_bytes_export_sees_no_t2_where_the_shim_placed_none() {
        assert_eq!(greenboost_shim_t2_bytes(0x7f00_0000_0000, 0), 0);
        assert_eq!(greenboost_shim_t2_bytes(0x7f00_0000_0000, 1 << 20), 0, "no allocation registered there");
    }
}
