//! `__device__` global hooks (cuModuleGetGlobal_v2, cuLibraryGetGlobal), each observed
//! after the real call: where the driver says a global is, remembered (`launch::indirect`)
//! so that a copy or memset into it counts as a writer of everything. The runtime's
//! cudaMemcpyToSymbol, cudaGetSymbolAddress and the like find their globals this way.

use std::ffi::{c_char, c_void};

use crate::cuda::ffi::{CuDevicePtr, CuModule, CuResult};
use crate::cuda::real::pfn;
use crate::launch::indirect;

/// Runs a lookup `real(address, bytes)` with out pointers that are never null (the
/// driver ignores a null one, which the program may pass when it wants only the other:
/// the shim's own local then takes the answer), and remembers the global it found.
///
/// # Safety
/// `address` and `bytes` are the program's out pointers: each null, or valid for writes.
unsafe fn look_up(
    address: *mut CuDevicePtr,
    bytes: *mut usize,
    real: impl FnOnce(*mut CuDevicePtr, *mut usize) -> CuResult,
) -> CuResult {
    let (mut own_address, mut own_bytes) = (0, 0);
    let address = if address.is_null() { &raw mut own_address } else { address };
    let bytes = if bytes.is_null() { &raw mut own_bytes } else { bytes };
    let status = real(address, bytes);
    if status == CuResult::SUCCESS {
        // SAFETY: valid out pointers (the program's, per the contract, or locals), which
        // the driver wrote on success.
        let (address, bytes) = unsafe { (*address, *bytes) };
        indirect::global_found(address, bytes);
    }
    status
}

/// # Safety
/// The program's arguments, as cuModuleGetGlobal_v2 takes them.
pub unsafe fn module_get_global(
    real: pfn::cuModuleGetGlobal_v2,
    address: *mut CuDevicePtr,
    bytes: *mut usize,
    module: CuModule,
    name: *const c_char,
) -> CuResult {
    // SAFETY: the real call with the program's module and name, and out pointers that
    // are the program's or, where it passed null, the shim's locals.
    unsafe { look_up(address, bytes, |address, bytes| real(address, bytes, module, name)) }
}

/// # Safety
/// The program's arguments, as cuLibraryGetGlobal takes them.
pub unsafe fn library_get_global(
    real: pfn::cuLibraryGetGlobal,
    address: *mut CuDevicePtr,
    bytes: *mut usize,
    library: *mut c_void,
    name: *const c_char,
) -> CuResult {
    // SAFETY: as for `module_get_global`.
    unsafe { look_up(address, bytes, |address, bytes| real(address, bytes, library, name)) }
}
