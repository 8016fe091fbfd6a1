//! Handing out hooks where programs look functions up at run time: `dlsym` (ollama
//! dlopens libcuda and dlsyms cuDeviceTotalMem_v2), `cuGetProcAddress(_v2)` (the CUDA
//! runtime and PyTorch reach the driver this way) and `cudaGetDriverEntryPoint(ByVersion)`.
//! Each asks the real function first, records the real address it returned for the hook
//! (which hook a driver name means at a version: `driver_routes`), and returns the hook
//! instead; names the table does not hook pass through untouched.
//!
//! `dlsym` and `dlopen` are naked trampolines on x86_64: glibc uses the caller's return
//! address to resolve `RTLD_NEXT` and to pick the RPATH/RUNPATH and namespace of a
//! `dlopen`, so the shim must not appear as the caller. The trampoline asks a Rust
//! function what to do and then either returns its answer or jumps (not calls) into the
//! real function with the caller's arguments.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr;

use crate::cuda::ffi::*;
use crate::cuda::libs;
use crate::cuda::real::{self, pfn, Api, HookAddresses};
use crate::hooks::driver_routes::driver_hook_for;
use crate::sys::phase;

/// What the `dlsym` trampoline does: return `answer` if non-null, else tail-call
/// `real` with the caller's arguments. Returned in RAX:RDX.
#[repr(C)]
pub struct DlsymDecision {
    pub answer: *mut c_void,
    pub real: libs::DlsymFn,
}

/// What the `dlopen` trampoline does: tail-call `real` with `flags`. Returned in RAX:RDX.
#[repr(C)]
pub struct DlopenDecision {
    pub real: libs::DlopenFn,
    pub flags: usize,
}

unsafe extern "C" fn no_dlsym(_: *mut c_void, _: *const c_char) -> *mut c_void {
    ptr::null_mut()
}

unsafe extern "C" fn no_dlopen(_: *const c_char, _: c_int) -> *mut c_void {
    ptr::null_mut()
}

/// What the `dlsym` trampoline does for (`handle`, `symbol`).
pub fn decide_dlsym(hooks: &HookAddresses, handle: *mut c_void, symbol: *const c_char) -> DlsymDecision {
    let real = libs::real_dlsym().unwrap_or(no_dlsym);
    DlsymDecision { answer: route_dlsym(hooks, handle, symbol), real }
}

/// Our hook for `symbol` when the table has one and `handle` really defines it.
/// Allocation-free: it may run before the shim's constructor.
fn route_dlsym(hooks: &HookAddresses, handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    if symbol.is_null() || phase::disabled() {
        return ptr::null_mut();
    }
    // SAFETY: dlsym's contract: `symbol` is a NUL-terminated name (checked non-null).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(function) = real::find_hooked(name) else { return ptr::null_mut() };
    if real::info(function).api == Api::Libc {
        return ptr::null_mut();
    }
    let found = libs::symbol(handle, symbol);
    if found.is_null() || hooks.is_ours(found) {
        return ptr::null_mut();
    }
    real::record(function, found);
    debug!("dlsym {}: hooked", std::str::from_utf8(name).unwrap_or("?"));
    hooks.get(function)
}

/// What the `dlopen` trampoline does for (`filename`, `flags`).
pub fn decide_dlopen(filename: *const c_char, flags: c_int) -> DlopenDecision {
    let real = libs::real_dlopen().unwrap_or(no_dlopen);
    DlopenDecision { real, flags: route_dlopen_flags(filename, flags) as c_uint as usize }
}

/// Names of libraries that must not be loaded RTLD_DEEPBIND, nor libraries that link
/// them directly (DT_NEEDED): deep binding makes a library resolve CUDA functions inside
/// its own dependencies first, past the shim.
const CUDA_LIBRARY_MARKERS: [&[u8]; 7] =
    [b"libcuda", b"libnvidia-ml", b"libcublas", b"libcudnn", b"libnccl", b"ggml-cuda", b"libggml-cuda"];

fn route_dlopen_flags(filename: *const c_char, flags: c_int) -> c_int {
    if flags & libc::RTLD_DEEPBIND == 0 || filename.is_null() || phase::disabled() {
        return flags;
    }
    // SAFETY: dlopen's contract: `filename` is a NUL-terminated name (checked non-null).
    let path = unsafe { CStr::from_ptr(filename) };
    let name = path.to_bytes();
    if !is_cuda_library(name) && !crate::sys::elf::needs(path, is_cuda_library) {
        return flags;
    }
    info!(
        "dlopen {}: RTLD_DEEPBIND dropped so that the shim still sees CUDA calls",
        std::str::from_utf8(name).unwrap_or("?")
    );
    flags & !libc::RTLD_DEEPBIND
}

pub fn is_cuda_library(path: &[u8]) -> bool {
    let file = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    CUDA_LIBRARY_MARKERS.iter().any(|marker| file.windows(marker.len()).any(|window| window == *marker))
}

/// After a real lookup that answered `result`: if that is `success`, the lookup stored
/// `*pfn`; record it and hand out our hook. Returns `result`, the caller's answer.
///
/// # Safety
/// When `result` is `success`, `symbol` is a C string and `pfn` is valid for reads and
/// writes (the real function accepted them).
unsafe fn route_driver_lookup<R: PartialEq>(
    hooks: &HookAddresses,
    result: R,
    success: R,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> R {
    if result != success || symbol.is_null() || pfn.is_null() {
        return result;
    }
    // SAFETY: per the function contract: the real lookup accepted a C string and wrote
    // through `pfn`.
    let (name, found) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn) };
    if found.is_null() || hooks.is_ours(found) {
        return result;
    }
    let Some(hook) = driver_hook_for(name, version, flags, found) else { return result };
    real::record(hook, found);
    debug!(
        "driver entry point {} (version {}, flags {}): hooked as {:?}",
        std::str::from_utf8(name).unwrap_or("?"),
        version,
        flags,
        hook
    );
    // SAFETY: per the function contract: `pfn` is valid for writes.
    unsafe { *pfn = hooks.get(hook) };
    result
}

/// # Safety
/// The program's arguments, as cuGetProcAddress takes them.
pub unsafe fn get_proc_address(
    hooks: &HookAddresses,
    real: pfn::cuGetProcAddress,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CuResult {
    // SAFETY: the real lookup with the program's own arguments; its answer is routed
    // only if the driver accepted them.
    unsafe {
        route_driver_lookup(
            hooks,
            real(symbol, pfn, cuda_version, flags),
            CuResult::SUCCESS,
            symbol,
            pfn,
            cuda_version,
            flags,
        )
    }
}

/// # Safety
/// The program's arguments, as cuGetProcAddress_v2 takes them.
pub unsafe fn get_proc_address_v2(
    hooks: &HookAddresses,
    real: pfn::cuGetProcAddress_v2,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut CuDriverProcAddressQueryResult,
) -> CuResult {
    // SAFETY: the real lookup with the program's own arguments; routed only on success.
    unsafe {
        route_driver_lookup(
            hooks,
            real(symbol, pfn, cuda_version, flags, status),
            CuResult::SUCCESS,
            symbol,
            pfn,
            cuda_version,
            flags,
        )
    }
}

/// The runtime resolves with its own CUDA version, which the shim does not know: the
/// driver's returned address decides, else the newest version's symbol.
///
/// # Safety
/// The program's arguments, as cudaGetDriverEntryPoint takes them.
pub unsafe fn get_driver_entry_point(
    hooks: &HookAddresses,
    real: pfn::cudaGetDriverEntryPoint,
    symbol: *const c_char,
    func: *mut *mut c_void,
    flags: u64,
    status: *mut CudaDriverEntryPointQueryResult,
) -> CudaError {
    // SAFETY: the real lookup with the program's own arguments; routed only on success.
    unsafe {
        route_driver_lookup(
            hooks,
            real(symbol, func, flags, status),
            CudaError::SUCCESS,
            symbol,
            func,
            c_int::MAX,
            flags,
        )
    }
}

/// # Safety
/// The program's arguments, as cudaGetDriverEntryPointByVersion takes them.
pub unsafe fn get_driver_entry_point_by_version(
    hooks: &HookAddresses,
    real: pfn::cudaGetDriverEntryPointByVersion,
    symbol: *const c_char,
    func: *mut *mut c_void,
    cuda_version: c_uint,
    flags: u64,
    status: *mut CudaDriverEntryPointQueryResult,
) -> CudaError {
    let version = c_int::try_from(cuda_version).unwrap_or(c_int::MAX);
    // SAFETY: the real lookup with the program's own arguments; routed only on success.
    unsafe {
        route_driver_lookup(
            hooks,
            real(symbol, func, cuda_version, flags, status),
            CudaError::SUCCESS,
            symbol,
            func,
            version,
            flags,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NO_HOOKS: HookAddresses = HookAddresses([std::ptr::null(); real::FUNCTION_COUNT]);

    #[test]
    fn deepbind_is_dropped_only_for_cuda_libraries() {
        let deep = libc::RTLD_NOW | libc::RTLD_DEEPBIND;
        assert_eq!(route_dlopen_flags(c"libcuda.so.1".as_ptr(), deep), libc::RTLD_NOW);
        assert_eq!(route_dlopen_flags(c"/opt/ollama/lib/libggml-cuda.so".as_ptr(), deep), libc::RTLD_NOW);
        assert_eq!(route_dlopen_flags(c"/usr/lib/libcudart.so.12".as_ptr(), deep), libc::RTLD_NOW);
        assert_eq!(route_dlopen_flags(c"libz.so.1".as_ptr(), deep), deep);
        assert_eq!(route_dlopen_flags(c"/opt/cuda/libz.so".as_ptr(), deep), deep, "the directory does not count");
        assert_eq!(route_dlopen_flags(ptr::null(), deep), deep);
    }

    #[test]
    fn dlsym_routes_only_hooked_names() {
        // Not hooked: pass through (null answer).
        assert!(route_dlsym(&NO_HOOKS, libc::RTLD_DEFAULT, c"getpid".as_ptr()).is_null());
        // libc entries are never answered by the router.
        assert!(route_dlsym(&NO_HOOKS, libc::RTLD_DEFAULT, c"dlsym".as_ptr()).is_null());
        // Functioned, but not defined behind the handle: pass through so dlerror is right.
        assert!(route_dlsym(&NO_HOOKS, libc::RTLD_DEFAULT, c"cuMemAlloc_v2".as_ptr()).is_null());
    }
}
