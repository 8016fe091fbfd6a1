//! The top of the shim: the exported hooks, made from the one function table
//! (`real::cuda_functions!`) and the list below that names each hooked function's
//! implementation, the table of their addresses that `routing` hands out, and the naked
//! `dlsym`/`dlopen` trampolines.
//!
//! Modes: `guarded` hooks apply policy unless the shim is not active or the call comes
//! from inside another hook on the same thread (cudaMalloc calls cuMemAlloc_v2 in the
//! runtime: the outer hook decides, the inner call goes straight to the driver);
//! `routing` hooks always route, because a runtime initialising itself from inside a
//! hook must still get our driver entry points; `indirect` hooks (cuBLAS routines over
//! device arrays of pointers) note the call as a writer of everything while the shim is
//! active and pass the arguments on unchanged, with no implementation of their own, the
//! hooks cuBLAS reaches inside the call passing straight through as nested ones do;
//! `trampoline` lines are the naked exports below; `called` lines are not hooked. A hook
//! whose real function cannot be found answers what a missing library would
//! (`ffi::Missing`).

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void};

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::*;
use crate::cuda::real::{self, cuda_functions, HookAddresses, FUNCTION_COUNT};
use crate::hooks::routing::{self, DlopenDecision, DlsymDecision};
use crate::launch::indirect;
use crate::sys::phase;

/// The implementation of every hooked function, by the function's C name.
#[allow(non_upper_case_globals)]
mod imp {
    pub use crate::hooks::cublas::{
        create as cublasCreate_v2, gemm_ex as cublasGemmEx, gemm_strided_batched_ex as cublasGemmStridedBatchedEx,
        sgemm as cublasSgemm_v2,
    };
    pub use crate::hooks::cublas_lt::{lt_create as cublasLtCreate, lt_matmul as cublasLtMatmul};
    pub use crate::hooks::device_globals::{
        library_get_global as cuLibraryGetGlobal, module_get_global as cuModuleGetGlobal_v2,
    };
    pub use crate::hooks::driver::{
        device_total_mem as cuDeviceTotalMem_v2, ipc_get_mem_handle as cuIpcGetMemHandle, mem_alloc as cuMemAlloc_v2,
        mem_alloc_async as cuMemAllocAsync, mem_alloc_async_ptsz as cuMemAllocAsync_ptsz,
        mem_alloc_from_pool_async as cuMemAllocFromPoolAsync,
        mem_alloc_from_pool_async_ptsz as cuMemAllocFromPoolAsync_ptsz, mem_create as cuMemCreate,
        mem_free as cuMemFree_v2, mem_free_async as cuMemFreeAsync, mem_free_async_ptsz as cuMemFreeAsync_ptsz,
        mem_get_info as cuMemGetInfo_v2, mem_release as cuMemRelease,
    };
    pub use crate::hooks::graphs::{
        graph_exec_destroy as cuGraphExecDestroy, graph_exec_kernel_node_set_params as cuGraphExecKernelNodeSetParams,
        graph_exec_kernel_node_set_params_v2 as cuGraphExecKernelNodeSetParams_v2,
        graph_exec_node_set_params as cuGraphExecNodeSetParams, graph_exec_update as cuGraphExecUpdate,
        graph_exec_update_v2 as cuGraphExecUpdate_v2, graph_instantiate_v2 as cuGraphInstantiate_v2,
        graph_instantiate_with_flags as cuGraphInstantiateWithFlags,
        graph_instantiate_with_params as cuGraphInstantiateWithParams,
        graph_instantiate_with_params_ptsz as cuGraphInstantiateWithParams_ptsz, graph_launch as cuGraphLaunch,
        graph_launch_ptsz as cuGraphLaunch_ptsz, stream_begin_capture as cuStreamBeginCapture,
        stream_begin_capture_ptsz as cuStreamBeginCapture_ptsz,
        stream_begin_capture_to_graph as cuStreamBeginCaptureToGraph,
        stream_begin_capture_to_graph_ptsz as cuStreamBeginCaptureToGraph_ptsz,
        stream_begin_capture_v2 as cuStreamBeginCapture_v2,
        stream_begin_capture_v2_ptsz as cuStreamBeginCapture_v2_ptsz, stream_end_capture as cuStreamEndCapture,
        stream_end_capture_ptsz as cuStreamEndCapture_ptsz,
    };
    pub use crate::hooks::launch::{
        launch_cooperative_kernel as cuLaunchCooperativeKernel,
        launch_cooperative_kernel_ptsz as cuLaunchCooperativeKernel_ptsz, launch_host_func as cuLaunchHostFunc,
        launch_host_func_ptsz as cuLaunchHostFunc_ptsz, launch_kernel as cuLaunchKernel,
        launch_kernel_ex as cuLaunchKernelEx, launch_kernel_ex_ptsz as cuLaunchKernelEx_ptsz,
        launch_kernel_ptsz as cuLaunchKernel_ptsz,
    };
    // Named as in C where they are made (`memory_op_hooks!`).
    pub use crate::hooks::memory_ops::*;
    pub use crate::hooks::nvml::{
        device_get_memory_info as nvmlDeviceGetMemoryInfo, device_get_memory_info_v2 as nvmlDeviceGetMemoryInfo_v2,
    };
    pub use crate::hooks::pointer_attributes::{
        pointer_get_attribute as cuPointerGetAttribute, pointer_get_attributes as cuPointerGetAttributes,
    };
    pub use crate::hooks::routing::{
        get_driver_entry_point as cudaGetDriverEntryPoint,
        get_driver_entry_point_by_version as cudaGetDriverEntryPointByVersion, get_proc_address as cuGetProcAddress,
        get_proc_address_v2 as cuGetProcAddress_v2,
    };
    pub use crate::hooks::runtime::{
        free as cudaFree, free_async as cudaFreeAsync, free_async_ptsz as cudaFreeAsync_ptsz,
        get_device_properties as cudaGetDeviceProperties, get_device_properties as cudaGetDeviceProperties_v2,
        malloc as cudaMalloc, malloc_async as cudaMallocAsync, malloc_async_ptsz as cudaMallocAsync_ptsz,
        mem_get_info as cudaMemGetInfo,
    };
    pub use crate::hooks::tensor_maps::{
        tensor_map_encode_im2col as cuTensorMapEncodeIm2col,
        tensor_map_encode_im2col_wide as cuTensorMapEncodeIm2colWide,
        tensor_map_encode_tiled as cuTensorMapEncodeTiled, tensor_map_replace_address as cuTensorMapReplaceAddress,
    };
    pub use crate::hooks::texture_objects::{
        tex_object_create as cuTexObjectCreate, tex_object_destroy as cuTexObjectDestroy,
    };
}

macro_rules! hook_body {
    (guarded, $name:ident, $real:ident, ($($arg:ident),*)) => {{
        if !phase::active() {
            return $real($($arg),*);
        }
        match phase::ReentryGuard::enter() {
            Some(_guard) => imp::$name($real, $($arg),*),
            None => $real($($arg),*),
        }
    }};
    (observed, $name:ident, $real:ident, ($($arg:ident),*)) => {{
        if !phase::active() {
            return $real($($arg),*);
        }
        imp::$name($real, $($arg),*)
    }};
    (indirect, $name:ident, $real:ident, ($($arg:ident),*)) => {{
        if !phase::active() {
            return $real($($arg),*);
        }
        indirect::pointer_array_writer();
        // What cuBLAS calls inside (cuBLASLt) passes straight through: its operands are
        // arrays of pointers, nothing to stage.
        let _guard = phase::ReentryGuard::enter();
        $real($($arg),*)
    }};
    (routing, $name:ident, $real:ident, ($($arg:ident),*)) => {{
        if phase::disabled() {
            return $real($($arg),*);
        }
        imp::$name(&HOOKS, $real, $($arg),*)
    }};
}

macro_rules! hook_address {
    (called, $name:ident) => {
        std::ptr::null()
    };
    (trampoline, $name:ident) => {
        $name as *const ()
    };
    ($mode:ident, $name:ident) => {
        exports::$name as *const ()
    };
}

macro_rules! hook_export {
    (called, $name:ident, ($($arg:ident: $ty:ty),*), $ret:ty) => {};
    (trampoline, $name:ident, ($($arg:ident: $ty:ty),*), $ret:ty) => {};
    ($mode:ident, $name:ident, ($($arg:ident: $ty:ty),*), $ret:ty) => {
        /// # Safety
        /// The program's arguments, as the CUDA function of this name takes them.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = real::$name() else {
                return <$ret as Missing>::missing();
            };
            // SAFETY: `real` is the library's own function of this name and signature;
            // the implementation gets the program's arguments unchanged, under the
            // contract this function has.
            unsafe { hook_body!($mode, $name, real, ($($arg),*)) }
        }
    };
}

macro_rules! hook_exports {
    ($($api:ident $mode:ident fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        #[allow(non_snake_case)]
        pub mod exports {
            use super::*;
            $(hook_export!($mode, $name, ($($arg: $ty),*), $ret);)*
        }

        /// The shim's hook for every function of the table, in table order.
        pub static HOOKS: HookAddresses = HookAddresses([$(hook_address!($mode, $name),)*]);
    };
}

cuda_functions!(hook_exports);

const _: () = assert!(HOOKS.0.len() == FUNCTION_COUNT);

extern "C" fn decide_dlsym(handle: *mut c_void, symbol: *const c_char) -> DlsymDecision {
    routing::decide_dlsym(&HOOKS, handle, symbol)
}

extern "C" fn decide_dlopen(filename: *const c_char, flags: c_int) -> DlopenDecision {
    routing::decide_dlopen(filename, flags)
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // Entry: RSP = 8 mod 16. Two pushes + 8 bytes keep the call aligned.
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "jmp rdx",
        decide = sym decide_dlsym,
    )
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {decide}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "mov esi, edx",
        "jmp rax",
        decide = sym decide_dlopen,
    )
}

/// Elsewhere: plain functions (RTLD_NEXT lookups of other interposers are then resolved
/// relative to the shim, and a dlopen by bare name uses the shim's search path).
#[cfg(not(target_arch = "x86_64"))]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let decision = decide_dlsym(handle, symbol);
    if decision.answer.is_null() {
        // SAFETY: the program's arguments to dlsym, given to glibc's dlsym unchanged.
        unsafe { (decision.real)(handle, symbol) }
    } else {
        decision.answer
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    let decision = decide_dlopen(filename, flags);
    // SAFETY: the program's arguments to dlopen, given to glibc's dlopen with at most RTLD_DEEPBIND cleared.
    unsafe { (decision.real)(filename, decision.flags as c_int) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::real::{Function, FUNCTIONS, INFO};

    #[test]
    fn every_hooked_function_has_a_distinct_hook_and_called_ones_none() {
        for (index, info) in INFO.iter().enumerate() {
            let hook = HOOKS.get(FUNCTIONS[index]);
            assert_eq!(hook.is_null(), !info.hooked, "{}", info.name);
            if info.hooked {
                assert!(HOOKS.is_ours(hook));
                for (other, other_info) in INFO.iter().enumerate().skip(index + 1) {
                    assert_ne!(hook, HOOKS.get(FUNCTIONS[other]), "{} and {}", info.name, other_info.name);
                }
            }
        }
        assert!(!HOOKS.is_ours(std::ptr::null()));
        assert!(!HOOKS.get(Function::cuMemAlloc_v2).is_null());
    }
}
