//! C functions the shim exports for tests, tools and benchmarks that `dlsym` them.

use std::ffi::c_void;
use std::mem::{offset_of, size_of};

use crate::backend;
use crate::cuda::ffi::CuDevicePtr;
use crate::memory::{address_index, registry};
use crate::sys::stats::{self, ShimStats};

/// Bytes of `ShimStats` that `greenboost_shim_stats` writes: the fields it had when
/// `greenboost_shim_stats_sized` came. Fields appended since reach callers only through
/// the sized call, so that a caller built against the shorter struct is never overrun.
const UNSIZED_STATS_BYTES: usize = offset_of!(ShimStats, headroom_spills) + size_of::<u64>();

/// Copies the first `bytes` bytes (at most the whole struct) of a snapshot of the
/// shim's counters to `out`.
///
/// # Safety
/// `out` is valid for writing `bytes.min(size_of::<ShimStats>())` bytes.
unsafe fn write_stats(out: *mut u8, bytes: usize) {
    let snapshot = stats::snapshot(backend::summary());
    // SAFETY: the snapshot is a plain `repr(C)` struct of integers, so any prefix of its
    // bytes is initialised; `out` is valid for this many bytes (the contract) and cannot
    // overlap a local.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&snapshot as *const ShimStats).cast::<u8>(),
            out,
            bytes.min(size_of::<ShimStats>()),
        )
    };
}

/// Copies the shim's counters into `*out`, as far as the struct reached when the sized
/// call came (up to `headroom_spills`). Returns 0, or -1 for a null pointer.
///
/// # Safety
/// `out` is null or valid for writing that much of a `ShimStats`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn greenboost_shim_stats(out: *mut ShimStats) -> i32 {
    if out.is_null() {
        return -1;
    }
    // SAFETY: non-null, and valid for the unsized prefix per the contract.
    unsafe { write_stats(out.cast(), UNSIZED_STATS_BYTES) };
    0
}

/// Copies the first `size` bytes of the shim's counters (`ShimStats`, no more than this
/// shim's struct has) to `out`. Returns the size of this shim's `ShimStats`, so that a
/// caller can tell which fields it got, or -1 for a null `out`.
///
/// # Safety
/// `out` is null or valid for writing `size` bytes.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn greenboost_shim_stats_sized(out: *mut c_void, size: usize) -> isize {
    if out.is_null() {
        return -1;
    }
    // SAFETY: non-null, and valid for `size` bytes per the contract.
    unsafe { write_stats(out.cast(), size) };
    size_of::<ShimStats>() as isize
}

/// How many bytes of the device range [`device_ptr`, `device_ptr + len`) the shim
/// placed in T2. Unlike the pointer's memory type, this sees the host tail of a split
/// allocation (one VMM range, "device" memory to the driver).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn greenboost_shim_t2_bytes(device_ptr: CuDevicePtr, len: u64) -> u64 {
    registry::t2_bytes(device_ptr, len)
}

/// How many kernel launches (graph kernel nodes included), copies and memsets named an
/// address inside the live allocation holding `device_ptr`; 0 when no allocation holds it.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn greenboost_shim_launches_naming(device_ptr: CuDevicePtr) -> u64 {
    let snapshot = address_index::load();
    snapshot.as_deref().and_then(|snapshot| snapshot.find(device_ptr)).map_or(0, |range| range.uses.launches())
}

/// How many copies and memsets (outside graphs) wrote in the live allocation holding
/// `device_ptr`; 0 when no allocation holds it.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn greenboost_shim_writes_naming(device_ptr: CuDevicePtr) -> u64 {
    let snapshot = address_index::load();
    snapshot.as_deref().and_then(|snapshot| snapshot.find(device_ptr)).map_or(0, |range| range.uses.writes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::stats::STATS;

    #[test]
    fn no_launch_or_write_names_an_address_outside_every_allocation() {
        assert_eq!(greenboost_shim_launches_naming(0), 0);
        assert_eq!(greenboost_shim_launches_naming(u64::MAX), 0);
        assert_eq!(greenboost_shim_writes_naming(0), 0);
        assert_eq!(greenboost_shim_writes_naming(u64::MAX), 0);
    }

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
    fn stats_exports_never_write_past_what_the_caller_has() {
        const GUARD: u8 = 0xa5;
        let full = size_of::<ShimStats>();
        let mut buffer = vec![GUARD; full + 16];
        // SAFETY: the buffer has room for the unsized prefix.
        assert_eq!(unsafe { greenboost_shim_stats(buffer.as_mut_ptr().cast()) }, 0);
        assert!(buffer[UNSIZED_STATS_BYTES..].iter().all(|&b| b == GUARD), "the unsized call wrote past its prefix");
        for size in [0, 8, UNSIZED_STATS_BYTES, full, full + 16] {
            let mut buffer = vec![GUARD; full + 16];
            // SAFETY: the buffer has `size` bytes.
            let answer = unsafe { greenboost_shim_stats_sized(buffer.as_mut_ptr().cast(), size) };
            assert_eq!(answer, full as isize);
            assert!(buffer[size.min(full)..].iter().all(|&b| b == GUARD), "sized({size}) wrote past {size} bytes");
        }
        // SAFETY: null is allowed by the contract.
        assert_eq!(unsafe { greenboost_shim_stats_sized(std::ptr::null_mut(), 8) }, -1);
    }

    #[test]
    fn t2_bytes_export_sees_no_t2_where_the_shim_placed_none() {
        assert_eq!(greenboost_shim_t2_bytes(0x7f00_0000_0000, 0), 0);
        assert_eq!(greenboost_shim_t2_bytes(0x7f00_0000_0000, 1 << 20), 0, "no allocation registered there");
    }
}
