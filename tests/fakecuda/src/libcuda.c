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
 */
#define _GNU_SOURCE
#include "fakegpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#define GATE(init, ctx)                                             \
    do {                                                            \
        CUresult gate_rc_ = fg_gate(__func__, init, ctx);           \
        if (gate_rc_) {                                             \
            fg_log("%s -> %d", __func__, gate_rc_);                 \
            return gate_rc_;                                        \
        }                                                           \
    } while (0)

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

/* ------------------------------------------------------------------ memory */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    GATE(1, 1);
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    fg_mem_info(fg_current_device(), free_bytes, total);
    fg_log("cuMemGetInfo_v2 -> 0 free=%zu total=%zu", *free_bytes, *total);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    GATE(1, 1);
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    size_t f, t;
    fg_mem_info(fg_current_device(), &f, &t);
    *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
    *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    fg_log("cuMemGetInfo(v1) -> 0");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    GATE(1, 1);
    CUresult rc = fg_mem_alloc(p, n);
    fg_log("cuMemAlloc_v2 size=%zu -> %d ptr=%#llx", n, rc, rc ? 0ULL : *p);
    return rc;
}

/* The pre-3.2 variant stored 32-bit device pointers; no fake VRAM address fits. */
EXPORT CUresult cuMemAlloc(unsigned int *p, unsigned int n)
{
    GATE(1, 1);
    (void)p;
    fg_log("cuMemAlloc(v1) size=%u -> %d", n, CUDA_ERROR_NOT_SUPPORTED);
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    GATE(1, 1);
    CUresult rc = fg_mem_free(p);
    fg_log("cuMemFree_v2 ptr=%#llx -> %d", p, rc);
    return rc;
}

EXPORT CUresult cuMemFree(unsigned int p)
{
    GATE(1, 1);
    fg_log("cuMemFree(v1) ptr=%#x -> %d", p, CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult alloc_async(const char *fn, CUdeviceptr *p, size_t n, CUstream s)
{
    CUresult rc = fg_mem_alloc_async(p, n, s);
    fg_log("%s size=%zu stream=%p -> %d ptr=%#llx", fn, n, (void *)s, rc, rc ? 0ULL : *p);
    return rc;
}

static CUresult free_async(const char *fn, CUdeviceptr p, CUstream s)
{
    CUresult rc = fg_mem_free_async(p, s);
    fg_log("%s ptr=%#llx stream=%p -> %d", fn, p, (void *)s, rc);
    return rc;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    GATE(1, 1);
    return alloc_async(__func__, p, n, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    GATE(1, 1);
    return alloc_async(__func__, p, n, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    GATE(1, 1);
    return free_async(__func__, p, s);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    GATE(1, 1);
    return free_async(__func__, p, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    GATE(1, 1);
    if (!fg_pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(__func__, p, n, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    GATE(1, 1);
    if (!fg_pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(__func__, p, n, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    GATE(1, 0);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_device_valid(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = fg_default_pool();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) { return cuDeviceGetDefaultMemPool(pool, d); }

static CUresult host_register(const char *fn, void *p, size_t n, unsigned flags)
{
    CUresult rc = fg_host_register(p, n, flags);
    fg_log("%s ptr=%p size=%zu flags=%#x -> %d", fn, p, n, flags, rc);
    return rc;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
    GATE(1, 1);
    return host_register(__func__, p, n, flags);
}
EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    GATE(1, 1);
    return host_register(__func__, p, n, flags);
}
EXPORT CUresult cuMemHostUnregister(void *p)
{
    GATE(1, 1);
    CUresult rc = fg_host_unregister(p);
    fg_log("cuMemHostUnregister ptr=%p -> %d", p, rc);
    return rc;
}
EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags)
{
    GATE(1, 1);
    CUresult rc = fg_host_device_pointer(d, p, flags);
    fg_log("cuMemHostGetDevicePointer_v2 ptr=%p -> %d", p, rc);
    return rc;
}
EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags)
{
    return cuMemHostGetDevicePointer_v2(d, p, flags);
}

/* NVIDIA's driver imports neither a DMA-BUF nor another driver's opaque fd as
 * external memory: DMABUF_FD is not supported, OPAQUE_FD fails with an unknown error. */
EXPORT CUresult cuImportExternalMemory(CUexternalMemory *out, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc)
{
    GATE(1, 1);
    CUresult rc;
    if (!out || !desc)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (desc->type == CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (desc->type == CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD)
        rc = CUDA_ERROR_UNKNOWN;
    else if (desc->type >= 2 && desc->type <= 8)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    fg_log("cuImportExternalMemory type=%d fd=%d size=%llu -> %d", desc ? desc->type : -1,
           desc ? desc->handle.fd : -1, desc ? desc->size : 0ULL, rc);
    return rc;
}
EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory m)
{
    GATE(1, 1);
    (void)m;
    return CUDA_ERROR_INVALID_HANDLE; /* none can exist */
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    GATE(1, 1);
    CUresult rc = fg_mem_address_range(p, base, size);
    fg_log("cuMemGetAddressRange_v2 ptr=%#llx -> %d base=%#llx size=%zu", p, rc, rc || !base ? 0ULL : *base,
           rc || !size ? 0 : *size);
    return rc;
}

/* Only CU_POINTER_ATTRIBUTE_IS_MANAGED: 1 for managed memory, 0 for other memory the
 * device knows, CUDA_ERROR_INVALID_VALUE for memory it does not. */
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p)
{
    GATE(1, 1);
    CUresult rc = CUDA_SUCCESS;
    if (attribute != CU_POINTER_ATTRIBUTE_IS_MANAGED)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (!data)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (fg_managed_contains(p))
        *(int *)data = 1;
    else if (strcmp(fakegpu_ptr_kind(p), "none") || fg_mem_address_range(p, NULL, NULL) == CUDA_SUCCESS)
        *(int *)data = 0;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    fg_log("cuPointerGetAttribute attr=%d ptr=%#llx -> %d", attribute, p, rc);
    return rc;
}

/* ------------------------------------------------------------------ managed memory */

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags)
{
    GATE(1, 1);
    CUresult rc = fg_managed_alloc(p, n, flags);
    fg_log("cuMemAllocManaged size=%zu flags=%u -> %d ptr=%#llx", n, flags, rc, rc ? 0ULL : *p);
    return rc;
}

/* The v1 calls' device argument as a location: CU_DEVICE_CPU is the host. */
static CUmemLocation device_location(CUdevice d)
{
    return (CUmemLocation){ d == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, d };
}

static CUresult advise(const char *fn, CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
    CUresult rc = fg_managed_advise(p, n, advice, loc);
    fg_log("%s ptr=%#llx size=%zu advice=%d loc=%d id=%d -> %d", fn, p, n, advice, loc.type, loc.id, rc);
    return rc;
}

EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice device)
{
    GATE(1, 1);
    return advise(__func__, p, n, advice, device_location(device));
}
EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
    GATE(1, 1);
    return advise(__func__, p, n, advice, loc);
}

static CUresult prefetch(const char *fn, CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    CUresult rc = fg_managed_prefetch(p, n, loc, flags, s);
    fg_log("%s ptr=%#llx size=%zu loc=%d id=%d flags=%u stream=%p -> %d", fn, p, n, loc.type, loc.id, flags,
           (void *)s, rc);
    return rc;
}

EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice device, CUstream s)
{
    GATE(1, 1);
    return prefetch(__func__, p, n, device_location(device), 0, s);
}
EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice device, CUstream s)
{
    GATE(1, 1);
    return prefetch(__func__, p, n, device_location(device), 0, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
    GATE(1, 1);
    return prefetch(__func__, p, n, loc, flags, s);
}
EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                           CUstream s)
{
    GATE(1, 1);
    return prefetch(__func__, p, n, loc, flags, s ? s : CU_STREAM_PER_THREAD);
}

EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, int attribute, CUdeviceptr p, size_t n)
{
    GATE(1, 1);
    CUresult rc = fg_managed_range_attribute(data, size, attribute, p, n);
    fg_log("cuMemRangeGetAttribute attr=%d ptr=%#llx size=%zu -> %d value=%d", attribute, p, n, rc,
           rc ? 0 : *(int *)data);
    return rc;
}

/* ------------------------------------------------------------------ VMM */

EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop, int option)
{
    GATE(1, 0);
    if (!gran || !prop || (option != 0 && option != 1))
        return CUDA_ERROR_INVALID_VALUE;
    *gran = fg_vmm_granularity();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_create(h, n, prop, flags);
    fg_log("cuMemCreate size=%zu loc=%d id=%d -> %d", n, prop ? prop->location.type : -1,
           prop ? prop->location.id : -1, rc);
    return rc;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_release(h);
    fg_log("cuMemRelease -> %d", rc);
    return rc;
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
                                    unsigned long long flags)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_reserve(p, n, align, addr, flags);
    fg_log("cuMemAddressReserve size=%zu -> %d", n, rc);
    return rc;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_address_free(p, n);
    fg_log("cuMemAddressFree -> %d", rc);
    return rc;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,
                         unsigned long long flags)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_map(p, n, off, h, flags);
    fg_log("cuMemMap ptr=%#llx size=%zu -> %d", p, n, rc);
    return rc;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_unmap(p, n);
    fg_log("cuMemUnmap ptr=%#llx size=%zu -> %d", p, n, rc);
    return rc;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
    GATE(1, 1);
    CUresult rc = fg_vmm_set_access(p, n, d, count);
    fg_log("cuMemSetAccess ptr=%#llx size=%zu -> %d", p, n, rc);
    return rc;
}

/* ------------------------------------------------------------------ copies */

#define COPY_SYNC(name, dsttype, srctype, dstarg, srcarg)                         \
    EXPORT CUresult name(dsttype dst, srctype src, size_t n)                      \
    {                                                                             \
        GATE(1, 1);                                                               \
        CUresult rc = fg_memcpy(dstarg, srcarg, n, NULL, 0);                      \
        fg_log(#name " size=%zu -> %d", n, rc);                                   \
        return rc;                                                                \
    }
#define COPY_ASYNC(name, dsttype, srctype, dstarg, srcarg, dflt)                  \
    EXPORT CUresult name(dsttype dst, srctype src, size_t n, CUstream s)          \
    {                                                                             \
        GATE(1, 1);                                                               \
        CUresult rc = fg_memcpy(dstarg, srcarg, n, s ? s : dflt, 1);              \
        fg_log(#name " size=%zu -> %d", n, rc);                                   \
        return rc;                                                                \
    }
COPY_SYNC(cuMemcpyHtoD_v2, CUdeviceptr, const void *, dst, (CUdeviceptr)(uintptr_t)src)
COPY_SYNC(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *, dst, (CUdeviceptr)(uintptr_t)src)
COPY_SYNC(cuMemcpyDtoH_v2, void *, CUdeviceptr, (CUdeviceptr)(uintptr_t)dst, src)
COPY_SYNC(cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr, (CUdeviceptr)(uintptr_t)dst, src)
COPY_SYNC(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, dst, src)
COPY_SYNC(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr, dst, src)
COPY_SYNC(cuMemcpy, CUdeviceptr, CUdeviceptr, dst, src)
COPY_SYNC(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr, dst, src)
COPY_ASYNC(cuMemcpyAsync, CUdeviceptr, CUdeviceptr, dst, src, NULL)
COPY_ASYNC(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr, dst, src, CU_STREAM_PER_THREAD)
COPY_ASYNC(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, dst, (CUdeviceptr)(uintptr_t)src, NULL)
COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *, dst, (CUdeviceptr)(uintptr_t)src, CU_STREAM_PER_THREAD)
COPY_ASYNC(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, (CUdeviceptr)(uintptr_t)dst, src, NULL)
COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr, (CUdeviceptr)(uintptr_t)dst, src, CU_STREAM_PER_THREAD)

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n)
{
    GATE(1, 1);
    return fg_memset8(p, v, n, NULL, 0);
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
    GATE(1, 1);
    return fg_memset8(p, v, n, s, 1);
}

/* ------------------------------------------------------------------ streams, events */

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_create(s, flags);
}
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
    GATE(1, 1);
    CUresult rc = fg_stream_create_with_priority(s, flags, prio);
    fg_log("cuStreamCreateWithPriority flags=%u priority=%d -> %d stream=%p", flags, prio, rc, rc ? NULL : (void *)*s);
    return rc;
}
EXPORT CUresult cuStreamGetPriority(CUstream s, int *prio)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    CUresult rc = fg_stream_get_priority(s, prio);
    fg_log("cuStreamGetPriority stream=%p -> %d priority=%d", (void *)s, rc, rc ? 0 : *prio);
    return rc;
}
EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int *prio)
{
    GATE(1, 1);
    return cuStreamGetPriority(s ? s : CU_STREAM_PER_THREAD, prio);
}
/* Either pointer may be NULL, as in CUDA. */
EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    GATE(1, 1);
    if (least)
        *least = FG_PRIORITY_LEAST;
    if (greatest)
        *greatest = FG_PRIORITY_GREATEST;
    fg_log("cuCtxGetStreamPriorityRange -> 0 least=%d greatest=%d", FG_PRIORITY_LEAST, FG_PRIORITY_GREATEST);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    return fg_stream_destroy(s);
}
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    CUresult rc = fg_stream_sync(s);
    fg_log("cuStreamSynchronize stream=%p -> %d", (void *)s, rc);
    return rc;
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    GATE(1, 1);
    return fg_stream_sync(s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuStreamQuery(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    return fg_stream_query(s);
}
EXPORT CUresult cuStreamQuery_ptsz(CUstream s)
{
    GATE(1, 1);
    return fg_stream_query(s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status)
{
    GATE(1, 0);
    return fg_stream_is_capturing(s, status);
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_wait_event(s, e, flags);
}
EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_wait_event(s ? s : CU_STREAM_PER_THREAD, e, flags);
}
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_add_callback(s, cb, data, flags);
}
EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_add_callback(s ? s : CU_STREAM_PER_THREAD, cb, data, flags);
}
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    GATE(1, 1);
    return fg_launch_host_fn(s, fn, data);
}
EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    GATE(1, 1);
    return fg_launch_host_fn(s ? s : CU_STREAM_PER_THREAD, fn, data);
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    GATE(1, 1);
    return fg_event_create(e, flags);
}
EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_destroy(e);
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    GATE(1, 1);
    return fg_event_record(e, s);
}
EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
    GATE(1, 1);
    return fg_event_record(e, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuEventQuery(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_query(e);
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_sync(e);
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
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
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
    P("cuMemsetD8", 3020, cuMemsetD8_v2),
    P("cuMemsetD8Async", 3020, cuMemsetD8Async),
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
