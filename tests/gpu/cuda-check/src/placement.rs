//! Where a pointer's memory lives: the shim's answer where it is loaded (VRAM, or its T2),
//! else the driver's memory type.

use super::*;

/// Where a pointer's memory lives.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Placement {
    /// Device memory: VRAM (tier T1).
    Vram,
    /// Host memory mapped for the GPU: the shim's T2 (pinned, or movable managed memory
    /// on the host).
    Host,
    Other(u32),
}

/// `greenboost_shim_t2_bytes` of the shim's exports: how many of `len` bytes at a device
/// pointer lie in T2.
type ShimT2Bytes = unsafe extern "C" fn(cu::CUdeviceptr, u64) -> u64;

/// Where the `len` bytes at `ptr` live. Under the shim, as it counts them (at least half in
/// T2: `Host`): it answers the driver's pointer attributes as device memory for all it
/// places, as the driver would for what the program allocated. Without it, the driver's
/// memory type.
pub(crate) fn placement(ptr: *mut c_void, len: usize) -> Result<Placement, String> {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the symbol, where the shim exports it, has the type `ShimT2Bytes` names
    // (shim/src/exports.rs).
    if let Ok(t2_bytes) = unsafe { this.get::<ShimT2Bytes>(b"greenboost_shim_t2_bytes\0") } {
        // SAFETY: the shim reads its own registry for any address and length.
        let in_t2 = unsafe { t2_bytes(ptr as cu::CUdeviceptr, len as u64) };
        return Ok(if 2 * in_t2 >= len as u64 { Placement::Host } else { Placement::Vram });
    }
    driver_placement(ptr)
}

/// Where the driver says the memory at `ptr` lives (its memory type).
pub(crate) fn driver_placement(ptr: *mut c_void) -> Result<Placement, String> {
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
