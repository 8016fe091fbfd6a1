//! Where the driver says a pointer's memory lives (VRAM, host memory mapped for the GPU,
//! the shim's movable T2 by its managed-memory location).

use super::*;

/// Where the driver says a pointer's memory lives.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Placement {
    /// Device memory: VRAM (tier T1).
    Vram,
    /// Host memory mapped for the GPU: the shim's T2 (pinned, or movable managed memory
    /// preferred on the host).
    Host,
    Other(u32),
}

pub(crate) fn placement(ptr: *mut c_void) -> Result<Placement, String> {
    // The shim's movable T2 (live tiering) is managed memory, which the driver calls
    // device memory wherever it lives. The shim moves it by prefetch alone (its preferred
    // location stays the host), so the last prefetch says where it went, and the
    // preferred location where it is until a first move.
    let mut managed: u32 = 0;
    // SAFETY: CU_POINTER_ATTRIBUTE_IS_MANAGED writes one unsigned int.
    let e = unsafe {
        cu::cuPointerGetAttribute(
            (&mut managed as *mut u32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            ptr as cu::CUdeviceptr,
        )
    };
    cu_check("cuPointerGetAttribute(IS_MANAGED)", e)?;
    if managed != 0 {
        let prefetched =
            managed_location(ptr, cu::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION)?;
        let location = if prefetched == CU_DEVICE_INVALID {
            managed_location(ptr, cu::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION)?
        } else {
            prefetched
        };
        return Ok(if location >= 0 { Placement::Vram } else { Placement::Host });
    }
    let mut memory_type: u32 = 0;
    // SAFETY: CU_POINTER_ATTRIBUTE_MEMORY_TYPE writes one unsigned int.
    let e = unsafe {
        cu::cuPointerGetAttribute(
            (&mut memory_type as *mut u32).cast(),
            cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as cu::CUdeviceptr,
        )
    };
    cu_check("cuPointerGetAttribute(MEMORY_TYPE)", e)?;
    Ok(match memory_type {
        x if x == cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => Placement::Vram,
        x if x == cu::CUmemorytype::CU_MEMORYTYPE_HOST as u32 => Placement::Host,
        x => Placement::Other(x),
    })
}

/// `CU_DEVICE_INVALID`: a range attribute with no location (never prefetched, say).
pub(crate) const CU_DEVICE_INVALID: i32 = -2;

/// A location attribute (preferred, last prefetch) of the managed allocation at `ptr`:
/// a device ordinal, -1 for the host, or `CU_DEVICE_INVALID`.
pub(crate) fn managed_location(ptr: *mut c_void, attribute: cu::CUmem_range_attribute) -> Result<i32, String> {
    let mut location: i32 = CU_DEVICE_INVALID;
    // SAFETY: both location attributes write one int; the range is the first byte of a
    // live managed allocation (the caller saw IS_MANAGED).
    let e = unsafe {
        cu::cuMemRangeGetAttribute((&mut location as *mut i32).cast(), 4, attribute, ptr as cu::CUdeviceptr, 1)
    };
    cu_check("cuMemRangeGetAttribute", e)?;
    Ok(location)
}
