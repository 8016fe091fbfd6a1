/* Fake libcuda.so.1: the CUDA driver API over the simulated device in libfakegpu.so.
 *
 * Like the real driver: symbols are unversioned; entry points need cuInit (else
 * CUDA_ERROR_NOT_INITIALIZED) and memory calls need a current context (else
 * CUDA_ERROR_INVALID_CONTEXT); a forked child gets CUDA_ERROR_NOT_INITIALIZED; a call
 * from inside a stream callback gets CUDA_ERROR_NOT_PERMITTED; cuGetProcAddress picks
 * the newest variant whose version is <= the requested one and the _ptsz/_ptds variant
 * for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. Built with -Bsymbolic so that
 * the library's own references never go through an interposer.
 *
 * Every call is appended to FAKECUDA_LOG as "<pid> <name> <args> -> <result>".
 *
 * This file: init, devices, contexts, errors and cuGetProcAddress; memory is in
 * libcuda_memory.c, streams and events in libcuda_streams.c.
 */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ init, device */

EXPORT CUresult cuInit(unsigned flags)
{
    GATE(0, 0);
    CUresult rc = fg_init(flags);
    fg_log("cuInit flags=%u -> %d", flags, rc);
    return rc;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    const char *e = getenv("FAKECUDA_DRIVER_VERSION");
    *v = e ? atoi(e) : 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    GATE(1, 0);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = fg_device_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    GATE(1, 0);
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    GATE(1, 0);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, len, "FakeCUDA Device (%zu MiB)", fg_device_vram(d) >> 20);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    GATE(1, 0);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fg_device_vram(d);
    fg_log("cuDeviceTotalMem_v2 -> 0 total=%zu", *bytes);
    return CUDA_SUCCESS;
}

/* The pre-3.2 entry point with 32-bit sizes (what cuGetProcAddress returns for an
 * old requested version). */
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d)
{
    GATE(1, 0);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    size_t t = fg_device_vram(d);
    *bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    fg_log("cuDeviceTotalMem(v1) -> 0");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
    GATE(1, 0);
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case 75: *v = 9; break;   /* compute capability major */
    case 76: *v = 0; break;   /* minor */
    case 16: *v = 132; break; /* multiprocessors */
    case 18: *v = 0; break;   /* integrated */
    case 19: *v = 1; break;   /* can map host memory */
    case 41: *v = 1; break;   /* unified addressing */
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: *v = 0; break; /* no HMM */
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: {
        /* FAKECUDA_NO_CONCURRENT_MANAGED=1: a device without it (pre-Pascal, Windows). */
        const char *no = getenv("FAKECUDA_NO_CONCURRENT_MANAGED");
        *v = !(no && !strcmp(no, "1"));
        break;
    }
    case 91: *v = 1; break;   /* can use host pointer for registered mem */
    case 102: *v = 1; break;  /* virtual memory management */
    case 103: *v = 1; break;  /* POSIX fd handles */
    case 115: *v = 1; break;  /* memory pools */
    /* Memory clock (kHz, double data rate) and bus width (bits): the peak rate of the
     * device's own memory as fk_read_u32 reads it, 50 KiB per link ns per KiB. */
    case 36: *v = (int)(50ull * 1024 * 1000000 / (2 * 640 * fg_link_ns_per_kib())); break;
    case 37: *v = 5120; break;
    case 33: *v = 0x1b + d; break; /* PCI bus: one per device */
    case 34: *v = 0; break;   /* PCI device */
    case 50: *v = 0; break;   /* PCI domain */
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ contexts */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d)
{
    GATE(1, 0);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    return fg_ctx_primary(d, ctx);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    GATE(1, 0);
    return fg_device_valid(d) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice d)
{
    GATE(1, 0);
    (void)flags;
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = fg_ctx_create(d);
    fg_ctx_set_current(*ctx);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    GATE(1, 0);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    fg_ctx_destroy(ctx);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    GATE(1, 0);
    fg_ctx_set_current(ctx);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    GATE(1, 0);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = fg_ctx_current();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    GATE(1, 0);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    fg_ctx_set_current(ctx); /* a one-deep stack is all the fake keeps */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    GATE(1, 1);
    if (ctx)
        *ctx = fg_ctx_current();
    fg_ctx_set_current(NULL);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    GATE(1, 1);
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    *d = fg_current_device();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    GATE(1, 1);
    CUresult rc = fg_ctx_sync();
    fg_log("cuCtxSynchronize -> %d", rc);
    return rc;
}

/* ------------------------------------------------------------------ errors */

static const struct error_entry errors[] = {
    { 0, "CUDA_SUCCESS", "no error" },
    { 1, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
    { 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
    { 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
    { 101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
    { 201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
    { 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
    { 500, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
    { 600, "CUDA_ERROR_NOT_READY", "device not ready" },
    { 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered" },
    { 712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped" },
    { 713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region" },
    { 800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
    { 801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
    { 401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state" },
    { 900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing" },
    { 901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture" },
    { 908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread" },
    { 910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update" },
    { 999, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    const struct error_entry *found = find_error(errors, sizeof errors / sizeof *errors, e);
    *s = found ? found->text : NULL;
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    const struct error_entry *found = find_error(errors, sizeof errors / sizeof *errors, e);
    *s = found ? found->name : NULL;
    return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ cuGetProcAddress */

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);

/* One row per (base name, variant): the variant serves requests for `version` or newer
 * (until a newer row takes over); `ptds` is the per-thread-default-stream variant. */
static const struct proc {
    const char *name;
    int version;
    void *fn, *ptds;
} procs[] = {
#define P(name, ver, fn) { name, ver, (void *)fn, NULL }
#define PT(name, ver, fn, ptds) { name, ver, (void *)fn, (void *)ptds }
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    P("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuMemGetInfo", 2000, cuMemGetInfo),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    P("cuMemAlloc", 2000, cuMemAlloc),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 2000, cuMemFree),
    P("cuMemFree", 3020, cuMemFree_v2),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    P("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuModuleLoadData", 2000, cuModuleLoadData),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction),
    P("cuModuleUnload", 2000, cuModuleUnload),
    P("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2),
    PT("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    PT("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P("cuLibraryLoadData", 12000, cuLibraryLoadData),
    P("cuLibraryUnload", 12000, cuLibraryUnload),
    P("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    P("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    P("cuKernelGetFunction", 12000, cuKernelGetFunction),
    P("cuKernelGetName", 12030, cuKernelGetName),
    P("cuFuncGetName", 12030, cuFuncGetName),
    P("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    P("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    P("cuTensorMapEncodeTiled", 12000, cuTensorMapEncodeTiled),
    P("cuTexObjectCreate", 5000, cuTexObjectCreate),
    P("cuTexObjectDestroy", 5000, cuTexObjectDestroy),
    PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    PT("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    PT("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    PT("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    PT("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    PT("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    PT("cuMemsetD2D8", 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds),
    PT("cuMemsetD2D16", 3020, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds),
    PT("cuMemsetD2D32", 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds),
    PT("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz),
    PT("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz),
    PT("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz),
    PT("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
    PT("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds),
    PT("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
    PT("cuMemcpy3D", 3020, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds),
    PT("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz),
    PT("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
    PT("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
    PT("cuMemcpy3DPeer", 4000, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds),
    PT("cuMemcpy3DPeerAsync", 4000, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz),
    PT("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz),
    PT("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz),
    PT("cuMemcpy3DBatchAsync", 12080, cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz),
    PT("cuMemcpy3DBatchAsync", 13000, cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz),
    P("cuArrayCreate", 3020, cuArrayCreate_v2),
    P("cuArrayDestroy", 2000, cuArrayDestroy),
    PT("cuMemcpyAtoD", 3020, cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds),
    PT("cuMemcpyDtoA", 3020, cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds),
    PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    PT("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    PT("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    P("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    P("cuGraphCreate", 10000, cuGraphCreate),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
    P("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2),
    P("cuGraphAddMemsetNode", 10000, cuGraphAddMemsetNode),
    P("cuGraphAddMemcpyNode", 10000, cuGraphAddMemcpyNode),
    P("cuGraphGetNodes", 10000, cuGraphGetNodes),
    P("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    P("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    P("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    P("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    P("cuGraphKernelNodeSetParams", 12000, cuGraphKernelNodeSetParams_v2),
    P("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    P("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2),
    P("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),
    PT("cuGraphUpload", 11010, cuGraphUpload, cuGraphUpload_ptsz),
    PT("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuMemAdvise", 8000, cuMemAdvise),
    P("cuMemAdvise", 12020, cuMemAdvise_v2),
    PT("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz),
    PT("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    P("cuMemRangeGetAttribute", 8000, cuMemRangeGetAttribute),
    P("cuMemHostRegister", 4000, cuMemHostRegister),
    P("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    P("cuMemHostUnregister", 4000, cuMemHostUnregister),
    P("cuMemHostGetDevicePointer", 2020, cuMemHostGetDevicePointer),
    P("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    P("cuImportExternalMemory", 10000, cuImportExternalMemory),
    P("cuDestroyExternalMemory", 10000, cuDestroyExternalMemory),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    PT("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    PT("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    PT("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    PT("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    PT("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    PT("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    P("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    PT("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    PT("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, cuEventElapsedTime),
    P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
#undef P
#undef PT
};

static CUresult lookup_proc(const char *sym, void **pfn, int version, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!sym || !pfn || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct proc *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        if (strcmp(procs[i].name, sym))
            continue;
        known = 1;
        if (procs[i].version <= version && (!best || procs[i].version > best->version))
            best = &procs[i];
    }
    if (!best) {
        if (known && status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best->ptds) ? best->ptds : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags)
{
    CUresult rc = lookup_proc(sym, pfn, version, flags, NULL);
    fg_log("cuGetProcAddress sym=%s ver=%d flags=%llu -> %d", sym ? sym : "(null)", version, flags, rc);
    return rc;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    CUresult rc = lookup_proc(sym, pfn, version, flags, status);
    fg_log("cuGetProcAddress_v2 sym=%s ver=%d flags=%llu -> %d", sym ? sym : "(null)", version, flags, rc);
    return rc;
}
