//! The names `cuGetProcAddress` takes for the hooked driver functions: which of the
//! driver's symbols a name means at each requested CUDA version (its `_v2`, `_v3`... forms,
//! from cudaTypedefs.h's PFN_<name>_v<version>), and which under the per-thread default
//! stream flag (its `_ptsz`/`_ptds` form). `routing` asks this for every lookup the driver
//! answered, to hand out the hook that wraps the very function the driver returned.

use std::ffi::{c_int, c_void};

use crate::cuda::ffi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
use crate::cuda::real::{self, Api, Function};

/// How a cuGetProcAddress name maps to a hooked driver symbol.
struct DriverRoute {
    /// The name passed to cuGetProcAddress (no version suffix).
    name: &'static [u8],
    /// Lowest requested CUDA version (1000 * major + 10 * minor) this route applies to.
    since: c_int,
    /// The symbol meant at that version.
    default: Function,
    /// Another symbol the driver may return under the same name: the per-thread-stream
    /// variant, or the other cuGetProcAddress form.
    alternative: Option<Function>,
    /// Whether `alternative` is what CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM asks for.
    alternative_is_per_thread: bool,
}

const fn route(
    name: &'static [u8],
    since: c_int,
    default: Function,
    alternative: Option<Function>,
    per_thread: bool,
) -> DriverRoute {
    DriverRoute { name, since, default, alternative, alternative_is_per_thread: per_thread }
}

/// Ordered by name, then by descending version, so the first match is the newest that
/// the requested version allows. Versions from cudaTypedefs.h (PFN_<name>_v<version>).
const DRIVER_ROUTES: [DriverRoute; 76] = [
    route(b"cuMemAlloc", 3020, Function::cuMemAlloc_v2, None, false),
    route(b"cuMemFree", 3020, Function::cuMemFree_v2, None, false),
    route(b"cuMemGetInfo", 3020, Function::cuMemGetInfo_v2, None, false),
    route(b"cuDeviceTotalMem", 3020, Function::cuDeviceTotalMem_v2, None, false),
    route(b"cuMemAllocAsync", 11020, Function::cuMemAllocAsync, Some(Function::cuMemAllocAsync_ptsz), true),
    route(b"cuMemFreeAsync", 11020, Function::cuMemFreeAsync, Some(Function::cuMemFreeAsync_ptsz), true),
    route(
        b"cuMemAllocFromPoolAsync",
        11020,
        Function::cuMemAllocFromPoolAsync,
        Some(Function::cuMemAllocFromPoolAsync_ptsz),
        true,
    ),
    route(b"cuIpcGetMemHandle", 4010, Function::cuIpcGetMemHandle, None, false),
    route(b"cuModuleGetGlobal", 3020, Function::cuModuleGetGlobal_v2, None, false),
    route(b"cuLibraryGetGlobal", 12000, Function::cuLibraryGetGlobal, None, false),
    route(b"cuTexObjectCreate", 5000, Function::cuTexObjectCreate, None, false),
    route(b"cuTexObjectDestroy", 5000, Function::cuTexObjectDestroy, None, false),
    route(b"cuPointerGetAttribute", 4000, Function::cuPointerGetAttribute, None, false),
    route(b"cuPointerGetAttributes", 7000, Function::cuPointerGetAttributes, None, false),
    route(b"cuMemCreate", 10020, Function::cuMemCreate, None, false),
    route(b"cuMemRelease", 10020, Function::cuMemRelease, None, false),
    route(b"cuGetProcAddress", 12000, Function::cuGetProcAddress_v2, Some(Function::cuGetProcAddress), false),
    route(b"cuGetProcAddress", 11030, Function::cuGetProcAddress, Some(Function::cuGetProcAddress_v2), false),
    route(b"cuLaunchKernel", 4000, Function::cuLaunchKernel, Some(Function::cuLaunchKernel_ptsz), true),
    route(b"cuLaunchKernelEx", 11060, Function::cuLaunchKernelEx, Some(Function::cuLaunchKernelEx_ptsz), true),
    route(
        b"cuLaunchCooperativeKernel",
        9000,
        Function::cuLaunchCooperativeKernel,
        Some(Function::cuLaunchCooperativeKernel_ptsz),
        true,
    ),
    route(b"cuLaunchHostFunc", 10000, Function::cuLaunchHostFunc, Some(Function::cuLaunchHostFunc_ptsz), true),
    route(b"cuGraphInstantiate", 12000, Function::cuGraphInstantiateWithFlags, None, false),
    route(b"cuGraphInstantiate", 11000, Function::cuGraphInstantiate_v2, None, false),
    route(b"cuGraphInstantiateWithFlags", 11040, Function::cuGraphInstantiateWithFlags, None, false),
    route(
        b"cuGraphInstantiateWithParams",
        12000,
        Function::cuGraphInstantiateWithParams,
        Some(Function::cuGraphInstantiateWithParams_ptsz),
        true,
    ),
    route(b"cuGraphLaunch", 10000, Function::cuGraphLaunch, Some(Function::cuGraphLaunch_ptsz), true),
    route(b"cuGraphExecDestroy", 10000, Function::cuGraphExecDestroy, None, false),
    route(b"cuGraphExecKernelNodeSetParams", 12000, Function::cuGraphExecKernelNodeSetParams_v2, None, false),
    route(b"cuGraphExecKernelNodeSetParams", 10010, Function::cuGraphExecKernelNodeSetParams, None, false),
    route(b"cuGraphExecNodeSetParams", 12020, Function::cuGraphExecNodeSetParams, None, false),
    route(b"cuGraphExecUpdate", 12000, Function::cuGraphExecUpdate_v2, None, false),
    route(b"cuGraphExecUpdate", 10020, Function::cuGraphExecUpdate, None, false),
    route(
        b"cuStreamBeginCapture",
        10010,
        Function::cuStreamBeginCapture_v2,
        Some(Function::cuStreamBeginCapture_v2_ptsz),
        true,
    ),
    route(
        b"cuStreamBeginCapture",
        10000,
        Function::cuStreamBeginCapture,
        Some(Function::cuStreamBeginCapture_ptsz),
        true,
    ),
    route(
        b"cuStreamBeginCaptureToGraph",
        12030,
        Function::cuStreamBeginCaptureToGraph,
        Some(Function::cuStreamBeginCaptureToGraph_ptsz),
        true,
    ),
    route(b"cuStreamEndCapture", 10000, Function::cuStreamEndCapture, Some(Function::cuStreamEndCapture_ptsz), true),
    route(b"cuTensorMapEncodeTiled", 12000, Function::cuTensorMapEncodeTiled, None, false),
    route(b"cuTensorMapEncodeIm2col", 12000, Function::cuTensorMapEncodeIm2col, None, false),
    route(b"cuTensorMapEncodeIm2colWide", 12080, Function::cuTensorMapEncodeIm2colWide, None, false),
    route(b"cuTensorMapReplaceAddress", 12000, Function::cuTensorMapReplaceAddress, None, false),
    route(b"cuMemsetD8", 3020, Function::cuMemsetD8_v2, Some(Function::cuMemsetD8_v2_ptds), true),
    route(b"cuMemsetD8Async", 3020, Function::cuMemsetD8Async, Some(Function::cuMemsetD8Async_ptsz), true),
    route(b"cuMemsetD2D8", 3020, Function::cuMemsetD2D8_v2, Some(Function::cuMemsetD2D8_v2_ptds), true),
    route(b"cuMemsetD2D8Async", 3020, Function::cuMemsetD2D8Async, Some(Function::cuMemsetD2D8Async_ptsz), true),
    route(b"cuMemsetD16", 3020, Function::cuMemsetD16_v2, Some(Function::cuMemsetD16_v2_ptds), true),
    route(b"cuMemsetD16Async", 3020, Function::cuMemsetD16Async, Some(Function::cuMemsetD16Async_ptsz), true),
    route(b"cuMemsetD2D16", 3020, Function::cuMemsetD2D16_v2, Some(Function::cuMemsetD2D16_v2_ptds), true),
    route(b"cuMemsetD2D16Async", 3020, Function::cuMemsetD2D16Async, Some(Function::cuMemsetD2D16Async_ptsz), true),
    route(b"cuMemsetD32", 3020, Function::cuMemsetD32_v2, Some(Function::cuMemsetD32_v2_ptds), true),
    route(b"cuMemsetD32Async", 3020, Function::cuMemsetD32Async, Some(Function::cuMemsetD32Async_ptsz), true),
    route(b"cuMemsetD2D32", 3020, Function::cuMemsetD2D32_v2, Some(Function::cuMemsetD2D32_v2_ptds), true),
    route(b"cuMemsetD2D32Async", 3020, Function::cuMemsetD2D32Async, Some(Function::cuMemsetD2D32Async_ptsz), true),
    route(b"cuMemcpy", 4000, Function::cuMemcpy, Some(Function::cuMemcpy_ptds), true),
    route(b"cuMemcpyAsync", 4000, Function::cuMemcpyAsync, Some(Function::cuMemcpyAsync_ptsz), true),
    route(b"cuMemcpyHtoD", 3020, Function::cuMemcpyHtoD_v2, Some(Function::cuMemcpyHtoD_v2_ptds), true),
    route(b"cuMemcpyHtoDAsync", 3020, Function::cuMemcpyHtoDAsync_v2, Some(Function::cuMemcpyHtoDAsync_v2_ptsz), true),
    route(b"cuMemcpyDtoH", 3020, Function::cuMemcpyDtoH_v2, Some(Function::cuMemcpyDtoH_v2_ptds), true),
    route(b"cuMemcpyDtoHAsync", 3020, Function::cuMemcpyDtoHAsync_v2, Some(Function::cuMemcpyDtoHAsync_v2_ptsz), true),
    route(b"cuMemcpyDtoD", 3020, Function::cuMemcpyDtoD_v2, Some(Function::cuMemcpyDtoD_v2_ptds), true),
    route(b"cuMemcpyDtoDAsync", 3020, Function::cuMemcpyDtoDAsync_v2, Some(Function::cuMemcpyDtoDAsync_v2_ptsz), true),
    route(b"cuMemcpyAtoD", 3020, Function::cuMemcpyAtoD_v2, Some(Function::cuMemcpyAtoD_v2_ptds), true),
    route(b"cuMemcpyDtoA", 3020, Function::cuMemcpyDtoA_v2, Some(Function::cuMemcpyDtoA_v2_ptds), true),
    route(b"cuMemcpyPeer", 4000, Function::cuMemcpyPeer, Some(Function::cuMemcpyPeer_ptds), true),
    route(b"cuMemcpyPeerAsync", 4000, Function::cuMemcpyPeerAsync, Some(Function::cuMemcpyPeerAsync_ptsz), true),
    route(b"cuMemcpy2D", 3020, Function::cuMemcpy2D_v2, Some(Function::cuMemcpy2D_v2_ptds), true),
    route(
        b"cuMemcpy2DUnaligned",
        3020,
        Function::cuMemcpy2DUnaligned_v2,
        Some(Function::cuMemcpy2DUnaligned_v2_ptds),
        true,
    ),
    route(b"cuMemcpy2DAsync", 3020, Function::cuMemcpy2DAsync_v2, Some(Function::cuMemcpy2DAsync_v2_ptsz), true),
    route(b"cuMemcpy3D", 3020, Function::cuMemcpy3D_v2, Some(Function::cuMemcpy3D_v2_ptds), true),
    route(b"cuMemcpy3DAsync", 3020, Function::cuMemcpy3DAsync_v2, Some(Function::cuMemcpy3DAsync_v2_ptsz), true),
    route(b"cuMemcpy3DPeer", 4000, Function::cuMemcpy3DPeer, Some(Function::cuMemcpy3DPeer_ptds), true),
    route(b"cuMemcpy3DPeerAsync", 4000, Function::cuMemcpy3DPeerAsync, Some(Function::cuMemcpy3DPeerAsync_ptsz), true),
    route(
        b"cuMemcpyBatchAsync",
        13000,
        Function::cuMemcpyBatchAsync_v2,
        Some(Function::cuMemcpyBatchAsync_v2_ptsz),
        true,
    ),
    route(b"cuMemcpyBatchAsync", 12080, Function::cuMemcpyBatchAsync, Some(Function::cuMemcpyBatchAsync_ptsz), true),
    route(
        b"cuMemcpy3DBatchAsync",
        13000,
        Function::cuMemcpy3DBatchAsync_v2,
        Some(Function::cuMemcpy3DBatchAsync_v2_ptsz),
        true,
    ),
    route(
        b"cuMemcpy3DBatchAsync",
        12080,
        Function::cuMemcpy3DBatchAsync,
        Some(Function::cuMemcpy3DBatchAsync_ptsz),
        true,
    ),
];

/// Which hook the driver's answer `found` for (`name`, `version`, `flags`) belongs to.
/// The driver's own exported addresses decide when they match (so a driver that maps
/// versions differently from cudaTypedefs.h is still followed); otherwise the version
/// table and the per-thread flag do.
pub(super) fn driver_hook_for(name: &[u8], version: c_int, flags: u64, found: *mut c_void) -> Option<Function> {
    if !DRIVER_ROUTES.iter().any(|route| route.name == name) {
        // A hooked symbol asked for by its exact exported name (e.g. "cuMemAlloc_v2").
        return real::find_hooked(name).filter(|function| real::info(*function).api == Api::Driver);
    }
    // Older than every route: the function of that version is not one the shim hooks.
    let route = DRIVER_ROUTES.iter().find(|route| route.name == name && version >= route.since)?;
    if let Some(alternative) = route.alternative {
        if real::address(alternative) == found {
            return Some(alternative);
        }
        if real::address(route.default) != found
            && route.alternative_is_per_thread
            && flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0
        {
            return Some(alternative);
        }
    }
    Some(route.default)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Addresses no real lookup returns, so the version table decides.
    const FOREIGN: *mut c_void = 0x10 as *mut c_void;

    #[test]
    fn versions_select_the_v2_symbols() {
        assert_eq!(driver_hook_for(b"cuMemAlloc", 12000, 0, FOREIGN), Some(Function::cuMemAlloc_v2));
        assert_eq!(driver_hook_for(b"cuMemAlloc", 3020, 0, FOREIGN), Some(Function::cuMemAlloc_v2));
        assert_eq!(driver_hook_for(b"cuMemAlloc", 3010, 0, FOREIGN), None, "32-bit cuMemAlloc is not hooked");
        assert_eq!(driver_hook_for(b"cuMemGetInfo", 13000, 0, FOREIGN), Some(Function::cuMemGetInfo_v2));
        assert_eq!(driver_hook_for(b"cuDeviceTotalMem", 12080, 0, FOREIGN), Some(Function::cuDeviceTotalMem_v2));
        assert_eq!(driver_hook_for(b"cuMemCreate", 10000, 0, FOREIGN), None);
        assert_eq!(driver_hook_for(b"cuMemHostRegister", 12000, 0, FOREIGN), None);
        assert_eq!(driver_hook_for(b"cuModuleGetGlobal", 12000, 0, FOREIGN), Some(Function::cuModuleGetGlobal_v2));
        assert_eq!(driver_hook_for(b"cuModuleGetGlobal", 3000, 0, FOREIGN), None, "the 32-bit form is not hooked");
        assert_eq!(driver_hook_for(b"cuLibraryGetGlobal", 12000, 0, FOREIGN), Some(Function::cuLibraryGetGlobal));
    }

    #[test]
    fn per_thread_flag_selects_ptsz() {
        assert_eq!(driver_hook_for(b"cuMemAllocAsync", 12000, 0, FOREIGN), Some(Function::cuMemAllocAsync));
        assert_eq!(
            driver_hook_for(b"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, FOREIGN),
            Some(Function::cuMemAllocAsync_ptsz)
        );
        assert_eq!(
            driver_hook_for(b"cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, FOREIGN),
            Some(Function::cuMemFreeAsync_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemAllocAsync", 11010, 0, FOREIGN), None);
    }

    #[test]
    fn get_proc_address_form_follows_the_version() {
        assert_eq!(driver_hook_for(b"cuGetProcAddress", 12000, 0, FOREIGN), Some(Function::cuGetProcAddress_v2));
        assert_eq!(driver_hook_for(b"cuGetProcAddress", 13000, 0, FOREIGN), Some(Function::cuGetProcAddress_v2));
        assert_eq!(driver_hook_for(b"cuGetProcAddress", 11080, 0, FOREIGN), Some(Function::cuGetProcAddress));
    }

    #[test]
    fn exact_hooked_driver_names_route_to_themselves_but_others_do_not() {
        assert_eq!(driver_hook_for(b"cuMemAlloc_v2", 12000, 0, FOREIGN), Some(Function::cuMemAlloc_v2));
        assert_eq!(driver_hook_for(b"cudaMalloc", 12000, 0, FOREIGN), None);
        assert_eq!(driver_hook_for(b"nvmlDeviceGetMemoryInfo", 12000, 0, FOREIGN), None);
    }

    #[test]
    fn copies_and_memsets_get_their_v2_and_per_thread_forms() {
        let per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(driver_hook_for(b"cuMemsetD8", 13000, 0, FOREIGN), Some(Function::cuMemsetD8_v2));
        assert_eq!(driver_hook_for(b"cuMemsetD8", 12080, per_thread, FOREIGN), Some(Function::cuMemsetD8_v2_ptds));
        assert_eq!(
            driver_hook_for(b"cuMemsetD2D32Async", 12000, per_thread, FOREIGN),
            Some(Function::cuMemsetD2D32Async_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpy", 12000, 0, FOREIGN), Some(Function::cuMemcpy));
        assert_eq!(driver_hook_for(b"cuMemcpyAsync", 12000, per_thread, FOREIGN), Some(Function::cuMemcpyAsync_ptsz));
        assert_eq!(driver_hook_for(b"cuMemcpyHtoD", 3020, 0, FOREIGN), Some(Function::cuMemcpyHtoD_v2));
        assert_eq!(driver_hook_for(b"cuMemcpyHtoD", 3000, 0, FOREIGN), None, "the 32-bit form is not hooked");
        assert_eq!(
            driver_hook_for(b"cuMemcpyDtoHAsync", 12000, per_thread, FOREIGN),
            Some(Function::cuMemcpyDtoHAsync_v2_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpy3DPeerAsync", 13000, 0, FOREIGN), Some(Function::cuMemcpy3DPeerAsync));
        assert_eq!(
            driver_hook_for(b"cuMemcpy2DUnaligned", 12000, per_thread, FOREIGN),
            Some(Function::cuMemcpy2DUnaligned_v2_ptds)
        );
    }

    #[test]
    fn a_batch_of_copies_gets_the_form_of_the_version_asked() {
        let per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(driver_hook_for(b"cuMemcpyBatchAsync", 13000, 0, FOREIGN), Some(Function::cuMemcpyBatchAsync_v2));
        assert_eq!(
            driver_hook_for(b"cuMemcpyBatchAsync", 13000, per_thread, FOREIGN),
            Some(Function::cuMemcpyBatchAsync_v2_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpyBatchAsync", 12080, 0, FOREIGN), Some(Function::cuMemcpyBatchAsync));
        assert_eq!(
            driver_hook_for(b"cuMemcpyBatchAsync", 12090, per_thread, FOREIGN),
            Some(Function::cuMemcpyBatchAsync_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpyBatchAsync", 12060, 0, FOREIGN), None, "older than the function");
        assert_eq!(
            driver_hook_for(b"cuMemcpy3DBatchAsync", 13000, 0, FOREIGN),
            Some(Function::cuMemcpy3DBatchAsync_v2)
        );
        assert_eq!(
            driver_hook_for(b"cuMemcpy3DBatchAsync", 13010, per_thread, FOREIGN),
            Some(Function::cuMemcpy3DBatchAsync_v2_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpy3DBatchAsync", 12090, 0, FOREIGN), Some(Function::cuMemcpy3DBatchAsync));
        assert_eq!(
            driver_hook_for(b"cuMemcpy3DBatchAsync", 12080, per_thread, FOREIGN),
            Some(Function::cuMemcpy3DBatchAsync_ptsz)
        );
        assert_eq!(driver_hook_for(b"cuMemcpy3DBatchAsync", 12060, 0, FOREIGN), None, "older than the function");
    }

    #[test]
    fn copies_with_a_cuda_array_get_their_v2_and_per_thread_forms() {
        let per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(driver_hook_for(b"cuMemcpyAtoD", 12000, 0, FOREIGN), Some(Function::cuMemcpyAtoD_v2));
        assert_eq!(driver_hook_for(b"cuMemcpyAtoD", 13000, per_thread, FOREIGN), Some(Function::cuMemcpyAtoD_v2_ptds));
        assert_eq!(driver_hook_for(b"cuMemcpyDtoA", 3020, 0, FOREIGN), Some(Function::cuMemcpyDtoA_v2));
        assert_eq!(driver_hook_for(b"cuMemcpyDtoA", 12080, per_thread, FOREIGN), Some(Function::cuMemcpyDtoA_v2_ptds));
        assert_eq!(driver_hook_for(b"cuMemcpyDtoA", 3000, 0, FOREIGN), None, "the 32-bit form is not hooked");
    }
}
