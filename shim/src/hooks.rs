//! The hook table: the one list of every function the shim intercepts.
//!
//! `hook_table!` turns each line into
//! - the exported C function (for `guarded` and `routing` lines),
//! - a slot caching the real function, resolved once from the library of the line's API
//!   (or recorded when the program obtains the real function through `dlsym`,
//!   `cuGetProcAddress` or `cudaGetDriverEntryPoint`, see `routing`),
//! - an entry in `HOOKS` (name, API, address of our hook) that `routing` searches.
//!
//! Modes: `guarded` hooks apply policy unless the shim is disabled or the call comes from
//! inside another hook on the same thread (cudaMalloc calls cuMemAlloc_v2 in the
//! runtime: the outer hook decides, the inner call goes straight to the driver);
//! `routing` hooks always route, because a runtime initialising itself from inside a
//! hook must still get our driver entry points; `trampoline` lines are the naked
//! `dlsym`/`dlopen` exports defined in `routing`.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::ffi::*;
use crate::staging::{self, CublasStatus};
use crate::{driver, libs, nvml, routing, runtime, state};

/// The library a hooked function lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Runtime,
    Driver,
    Nvml,
    Cublas,
    CublasLt,
    Libc,
}

pub struct HookEntry {
    /// NUL-terminated symbol name.
    pub name: &'static str,
    pub api: Api,
    /// Address of the shim's function for this symbol.
    pub hook: *const (),
}

// SAFETY: entries are immutable; `hook` is a code address.
unsafe impl Sync for HookEntry {}

impl HookEntry {
    /// The name without its NUL.
    pub fn symbol(&self) -> &'static [u8] {
        let bytes = self.name.as_bytes();
        bytes.split_last().map_or(bytes, |(_, name)| name)
    }
}

/// The value a hook returns when the real function cannot be found at all.
pub trait Missing {
    fn missing(api: Api) -> Self;
}

impl Missing for c_int {
    fn missing(api: Api) -> Self {
        match api {
            Api::Nvml => NVML_ERROR_UNINITIALIZED,
            // CUBLAS_STATUS_NOT_INITIALIZED.
            Api::Cublas | Api::CublasLt => 1,
            // cudaErrorInitializationError and CUDA_ERROR_NOT_INITIALIZED are both 3.
            Api::Runtime | Api::Driver | Api::Libc => CUDA_ERROR_NOT_INITIALIZED,
        }
    }
}

macro_rules! hook_body {
    (guarded, $real:ident, $imp:path, ($($arg:ident),*)) => {{
        if !state::active() {
            return $real($($arg),*);
        }
        match state::ReentryGuard::enter() {
            Some(_guard) => $imp($real, $($arg),*),
            None => $real($($arg),*),
        }
    }};
    (routing, $real:ident, $imp:path, ($($arg:ident),*)) => {{
        if state::disabled() {
            return $real($($arg),*);
        }
        $imp($real, $($arg),*)
    }};
}

macro_rules! hook_address {
    (trampoline, $name:ident, $imp:path) => {
        $imp as *const ()
    };
    ($mode:ident, $name:ident, $imp:path) => {
        exports::$name as *const ()
    };
}

macro_rules! hook_export {
    (trampoline, $api:ident, $name:ident, ($($arg:ident: $ty:ty),*), $ret:ty, $imp:path) => {};
    ($mode:ident, $api:ident, $name:ident, ($($arg:ident: $ty:ty),*), $ret:ty, $imp:path) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let found = real(Hook::$name);
            if found.is_null() {
                return <$ret as Missing>::missing(Api::$api);
            }
            // SAFETY: the slot holds the real function of this very symbol, whose C
            // signature is the one in the table.
            let real: pfn::$name = unsafe { std::mem::transmute::<*mut c_void, pfn::$name>(found) };
            // SAFETY: the arguments are the caller's, passed on unchanged.
            unsafe { hook_body!($mode, real, $imp, ($($arg),*)) }
        }
    };
}

macro_rules! hook_table {
    ($($api:ident $mode:ident fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty => $imp:path;)*) => {
        /// One variant per hooked symbol, in table order.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Hook { $($name,)* }

        pub const HOOK_COUNT: usize = [$(Hook::$name),*].len();

        /// The C type of each hooked function.
        #[allow(non_camel_case_types, dead_code)]
        pub mod pfn {
            use super::*;
            $(pub type $name = unsafe extern "C" fn($($ty),*) -> $ret;)*
        }

        pub static HOOKS: [HookEntry; HOOK_COUNT] = [$(HookEntry {
            name: concat!(stringify!($name), "\0"),
            api: Api::$api,
            hook: hook_address!($mode, $name, $imp),
        },)*];

        #[allow(non_snake_case)]
        pub mod exports {
            use super::*;
            $(hook_export!($mode, $api, $name, ($($arg: $ty),*), $ret, $imp);)*
        }
    };
}

hook_table! {
    // CUDA runtime (libcudart.so.12 / .13).
    Runtime guarded fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> CudaError => runtime::malloc;
    Runtime guarded fn cudaFree(dev_ptr: *mut c_void) -> CudaError => runtime::free;
    Runtime guarded fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError => runtime::malloc_async;
    Runtime guarded fn cudaMallocAsync_ptsz(dev_ptr: *mut *mut c_void, size: usize, stream: CuStream) -> CudaError => runtime::malloc_async_ptsz;
    Runtime guarded fn cudaFreeAsync(dev_ptr: *mut c_void, stream: CuStream) -> CudaError => runtime::free_async;
    Runtime guarded fn cudaFreeAsync_ptsz(dev_ptr: *mut c_void, stream: CuStream) -> CudaError => runtime::free_async_ptsz;
    Runtime guarded fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> CudaError => runtime::mem_get_info;
    Runtime guarded fn cudaGetDeviceProperties(prop: *mut c_void, device: c_int) -> CudaError => runtime::get_device_properties;
    Runtime guarded fn cudaGetDeviceProperties_v2(prop: *mut c_void, device: c_int) -> CudaError => runtime::get_device_properties;
    Runtime routing fn cudaGetDriverEntryPoint(symbol: *const c_char, func: *mut *mut c_void, flags: u64, status: *mut CudaDriverEntryPointQueryResult) -> CudaError => routing::get_driver_entry_point;
    Runtime routing fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, func: *mut *mut c_void, cuda_version: c_uint, flags: u64, status: *mut CudaDriverEntryPointQueryResult) -> CudaError => routing::get_driver_entry_point_by_version;
    // CUDA driver (libcuda.so.1).
    Driver guarded fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, size: usize) -> CuResult => driver::mem_alloc;
    Driver guarded fn cuMemFree_v2(dptr: CuDevicePtr) -> CuResult => driver::mem_free;
    Driver guarded fn cuMemAllocAsync(dptr: *mut CuDevicePtr, size: usize, stream: CuStream) -> CuResult => driver::mem_alloc_async;
    Driver guarded fn cuMemAllocAsync_ptsz(dptr: *mut CuDevicePtr, size: usize, stream: CuStream) -> CuResult => driver::mem_alloc_async_ptsz;
    Driver guarded fn cuMemFreeAsync(dptr: CuDevicePtr, stream: CuStream) -> CuResult => driver::mem_free_async;
    Driver guarded fn cuMemFreeAsync_ptsz(dptr: CuDevicePtr, stream: CuStream) -> CuResult => driver::mem_free_async_ptsz;
    Driver guarded fn cuMemAllocFromPoolAsync(dptr: *mut CuDevicePtr, size: usize, pool: CuMemPool, stream: CuStream) -> CuResult => driver::mem_alloc_from_pool_async;
    Driver guarded fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CuDevicePtr, size: usize, pool: CuMemPool, stream: CuStream) -> CuResult => driver::mem_alloc_from_pool_async_ptsz;
    Driver guarded fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult => driver::mem_get_info;
    Driver guarded fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CuDevice) -> CuResult => driver::device_total_mem;
    Driver guarded fn cuMemCreate(handle: *mut CuMemGenericAllocationHandle, size: usize, prop: *const CuMemAllocationProp, flags: u64) -> CuResult => driver::mem_create;
    Driver guarded fn cuMemRelease(handle: CuMemGenericAllocationHandle) -> CuResult => driver::mem_release;
    Driver routing fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CuResult => routing::get_proc_address;
    Driver routing fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut CuDriverProcAddressQueryResult) -> CuResult => routing::get_proc_address_v2;
    // NVML (libnvidia-ml.so.1).
    Nvml guarded fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut NvmlMemory) -> NvmlReturn => nvml::device_get_memory_info;
    Nvml guarded fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, memory: *mut NvmlMemoryV2) -> NvmlReturn => nvml::device_get_memory_info_v2;
    // cuBLAS / cuBLASLt (libcublas.so.12/.13, libcublasLt): GEMM operand staging.
    Cublas guarded fn cublasCreate_v2(handle: *mut *mut c_void) -> CublasStatus => staging::create;
    CublasLt guarded fn cublasLtCreate(handle: *mut *mut c_void) -> CublasStatus => staging::lt_create;
    Cublas guarded fn cublasGemmEx(handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, b: *const c_void, b_type: c_int, ldb: c_int, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, compute_type: c_int, algo: c_int) -> CublasStatus => staging::gemm_ex;
    Cublas guarded fn cublasSgemm_v2(handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, beta: *const f32, c: *mut f32, ldc: c_int) -> CublasStatus => staging::sgemm;
    Cublas guarded fn cublasGemmStridedBatchedEx(handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int, alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, stride_a: i64, b: *const c_void, b_type: c_int, ldb: c_int, stride_b: i64, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, stride_c: i64, batch: c_int, compute_type: c_int, algo: c_int) -> CublasStatus => staging::gemm_strided_batched_ex;
    CublasLt guarded fn cublasLtMatmul(handle: *mut c_void, desc: *mut c_void, alpha: *const c_void, a: *const c_void, a_desc: *mut c_void, b: *const c_void, b_desc: *mut c_void, beta: *const c_void, c: *const c_void, c_desc: *mut c_void, d: *mut c_void, d_desc: *mut c_void, algo: *const c_void, workspace: *mut c_void, workspace_size: usize, stream: CuStream) -> CublasStatus => staging::lt_matmul;
    // libc: naked trampolines that keep the caller's return address (see `routing`).
    Libc trampoline fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void => routing::dlsym;
    Libc trampoline fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void => routing::dlopen;
}

static REAL: [AtomicPtr<c_void>; HOOK_COUNT] = [const { AtomicPtr::new(ptr::null_mut()) }; HOOK_COUNT];

pub fn entry(hook: Hook) -> Option<&'static HookEntry> {
    HOOKS.get(hook as usize)
}

fn slot(hook: Hook) -> Option<&'static AtomicPtr<c_void>> {
    REAL.get(hook as usize)
}

/// The hook for a symbol name, if the table has one.
pub fn find(name: &[u8]) -> Option<Hook> {
    let index = HOOKS.iter().position(|entry| entry.symbol() == name)?;
    ALL.get(index).copied()
}

const ALL: [Hook; HOOK_COUNT] = {
    let mut all = [Hook::cudaMalloc; HOOK_COUNT];
    let mut index = 0;
    while index < HOOK_COUNT {
        // SAFETY: `Hook` is a fieldless repr(usize) enum whose discriminants are
        // 0..HOOK_COUNT in order.
        all[index] = unsafe { std::mem::transmute::<usize, Hook>(index) };
        index += 1;
    }
    all
};

/// Whether `address` is one of the shim's own hooks (never to be cached as "real").
pub fn is_ours(address: *const c_void) -> bool {
    HOOKS.iter().any(|entry| entry.hook.cast::<c_void>() == address)
}

/// The real function for a hook: cached, else looked up in its API's library.
pub fn real(hook: Hook) -> *mut c_void {
    let (Some(slot), Some(entry)) = (slot(hook), entry(hook)) else {
        return ptr::null_mut();
    };
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return known;
    }
    let handle = match entry.api {
        Api::Runtime => libs::runtime(),
        Api::Driver => libs::driver(),
        Api::Nvml => libs::nvml(),
        Api::Cublas => libs::cublas(),
        Api::CublasLt => libs::cublas_lt(),
        Api::Libc => {
            let Ok(name) = std::ffi::CStr::from_bytes_with_nul(entry.name.as_bytes()) else {
                return ptr::null_mut();
            };
            let found = libs::libc_next(name);
            record(hook, found);
            return slot.load(Ordering::Acquire);
        }
    };
    if handle.is_null() {
        return ptr::null_mut();
    }
    let found = libs::symbol(handle, entry.name.as_ptr().cast());
    record(hook, found);
    slot.load(Ordering::Acquire)
}

/// Remembers the real function the program obtained for a hooked symbol. The first one
/// wins: all of them are the same library's implementation of one C function.
pub fn record(hook: Hook, found: *mut c_void) {
    if found.is_null() || is_ours(found) {
        return;
    }
    let Some(slot) = slot(hook) else { return };
    if let Err(existing) = slot.compare_exchange(ptr::null_mut(), found, Ordering::AcqRel, Ordering::Acquire) {
        if existing != found {
            debug!(
                "{:?}: the program obtained a second real address ({:p}, keeping {:p})",
                hook, found, existing
            );
        }
    }
}

/// The address of the shim's function for a hook.
pub fn hook_address(hook: Hook) -> *mut c_void {
    entry(hook).map_or(ptr::null_mut(), |entry| entry.hook.cast_mut().cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_listed_once_and_found_by_name() {
        for (index, entry) in HOOKS.iter().enumerate() {
            assert!(entry.name.ends_with('\0'));
            assert_eq!(find(entry.symbol()).map(|hook| hook as usize), Some(index), "{}", entry.name);
        }
        assert_eq!(find(b"cudaMallocHost"), None);
        assert_eq!(find(b"cuMemAlloc"), None, "the unversioned name is the 32-bit API");
    }

    #[test]
    fn hook_addresses_are_distinct_and_recognised() {
        for (index, entry) in HOOKS.iter().enumerate() {
            assert!(is_ours(entry.hook.cast()));
            for other in HOOKS.iter().skip(index + 1) {
                assert_ne!(entry.hook, other.hook, "{} and {}", entry.name, other.name);
            }
        }
        assert!(!is_ours(ptr::null()));
    }

    #[test]
    fn recording_ignores_our_own_hooks_and_keeps_the_first_real() {
        let first = 0x1000 as *mut c_void;
        record(Hook::cuMemRelease, hook_address(Hook::cuMemRelease));
        assert!(REAL[Hook::cuMemRelease as usize].load(Ordering::Relaxed).is_null());
        record(Hook::cuMemRelease, first);
        record(Hook::cuMemRelease, 0x2000 as *mut c_void);
        assert_eq!(REAL[Hook::cuMemRelease as usize].load(Ordering::Relaxed), first);
    }

    #[test]
    fn the_required_symbols_are_hooked() {
        for name in [
            "cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMemGetInfo",
            "cudaGetDeviceProperties", "cudaGetDeviceProperties_v2", "cudaGetDriverEntryPoint",
            "cudaGetDriverEntryPointByVersion", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync",
            "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuMemGetInfo_v2", "cuDeviceTotalMem_v2",
            "cuMemCreate", "cuMemRelease", "cuGetProcAddress", "cuGetProcAddress_v2",
            "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "dlsym", "dlopen",
        ] {
            assert!(find(name.as_bytes()).is_some(), "{name}");
        }
    }
}
