/* What the fake driver's files (libcuda.c, libcuda_memory.c, libcuda_streams.c) share: how
 * an entry point is exported and gated, and the entry points defined outside libcuda.c that
 * its cuGetProcAddress table names. */
#ifndef LIBCUDA_ENTRY_H
#define LIBCUDA_ENTRY_H

#include "gpu/fakegpu_internal.h"

/* Built with -fvisibility=hidden: only the driver API is exported. */
#define EXPORT __attribute__((visibility("default")))

/* An entry point's first step: fg_gate refuses a call from a stream callback
 * (CUDA_ERROR_NOT_PERMITTED), from a forked child or before cuInit where `init`
 * (CUDA_ERROR_NOT_INITIALIZED), and without a current context where `ctx`
 * (CUDA_ERROR_INVALID_CONTEXT); the refusal is logged and returned. */
#define GATE(init, ctx)                                             \
    do {                                                            \
        CUresult gate_rc_ = fg_gate(__func__, init, ctx);           \
        if (gate_rc_) {                                             \
            fg_log("%s -> %d", __func__, gate_rc_);                 \
            return gate_rc_;                                        \
        }                                                           \
    } while (0)

/* libcuda_memory.c: memory, host registration, managed memory, VMM, copies. */
EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
EXPORT CUresult cuMemAlloc(unsigned int *p, unsigned int n);
EXPORT CUresult cuMemFree_v2(CUdeviceptr p);
EXPORT CUresult cuMemFree(unsigned int p);
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d);
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags);
EXPORT CUresult cuMemHostUnregister(void *p);
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags);
EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags);
EXPORT CUresult cuImportExternalMemory(CUexternalMemory *out, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc);
EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory m);
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p);
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags);
EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice device);
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc);
EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice device, CUstream s);
EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice device, CUstream s);
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s);
EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s);
EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, int attribute, CUdeviceptr p, size_t n);
EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image);
EXPORT CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra);
EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop, int option);
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop, unsigned long long flags);
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h);
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags);
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n);
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags);
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n);
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count);
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n);
EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void * src, size_t n);
EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void * src, size_t n);
EXPORT CUresult cuMemcpyDtoH_v2(void * dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void * dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void * src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void * src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyDtoHAsync_v2(void * dst, CUdeviceptr src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void * dst, CUdeviceptr src, size_t n, CUstream s);
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d);

/* libcuda_streams.c: streams and events. */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags);
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio);
EXPORT CUresult cuStreamGetPriority(CUstream s, int *prio);
EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int *prio);
EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest);
EXPORT CUresult cuStreamDestroy_v2(CUstream s);
EXPORT CUresult cuStreamSynchronize(CUstream s);
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s);
EXPORT CUresult cuStreamQuery(CUstream s);
EXPORT CUresult cuStreamQuery_ptsz(CUstream s);
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status);
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags);
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags);
EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned flags);
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data);
EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data);
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags);
EXPORT CUresult cuEventDestroy_v2(CUevent e);
EXPORT CUresult cuEventRecord(CUevent e, CUstream s);
EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s);
EXPORT CUresult cuEventQuery(CUevent e);
EXPORT CUresult cuEventSynchronize(CUevent e);

#endif
