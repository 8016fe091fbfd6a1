/* Fake libcuda.so.1 (see libcuda.c): device memory, host registration, external memory,
 * managed memory, VMM, copies and memset over the simulated device. */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <string.h>

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
/* The fake has one memory pool, the one cuDeviceGetDefaultMemPool answers: any other
 * handle is refused. */
static CUresult alloc_from_pool(const char *fn, CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    if (!fg_pool_valid(pool))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(fn, p, n, s);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    GATE(1, 1);
    return alloc_from_pool(__func__, p, n, pool, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    GATE(1, 1);
    return alloc_from_pool(__func__, p, n, pool, s ? s : CU_STREAM_PER_THREAD);
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

/* The pointer attributes programs ask most, as the driver answers them for the memory the
 * fake knows: device memory (cuMemAlloc, VMM) is DEVICE memory with no host pointer;
 * managed memory is DEVICE memory, managed, whose host pointer is itself; registered host
 * memory is HOST memory. Memory the fake does not know: CUDA_ERROR_INVALID_VALUE. Other
 * attributes: CUDA_ERROR_NOT_SUPPORTED. */
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p)
{
    GATE(1, 1);
    const char *kind = fakegpu_ptr_kind(p);
    int managed = fg_managed_contains(p), host = !strcmp(kind, "hostreg");
    CUdeviceptr base = 0;
    size_t size = 0;
    int known = managed || strcmp(kind, "none") || fg_mem_address_range(p, &base, &size) == CUDA_SUCCESS;
    if (known && !base)
        fg_mem_address_range(p, &base, &size);
    CUresult rc = CUDA_SUCCESS;
    if (!data)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!known)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        switch (attribute) {
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = managed; break;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = p; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            if (managed || host)
                *(void **)data = (void *)(uintptr_t)p;
            else
                rc = CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
            int d = fakegpu_ptr_device(p);
            *(int *)data = d < 0 ? 0 : d;
            break;
        }
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base ? base : p; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; break;
        default: rc = CUDA_ERROR_NOT_SUPPORTED;
        }
    fg_log("cuPointerGetAttribute attr=%d ptr=%#llx -> %d", attribute, p, rc);
    return rc;
}

/* Several attributes at once: as the driver, never an error for an unknown pointer or an
 * attribute without a value there (its slot is zeroed), CUDA_ERROR_INVALID_VALUE for bad
 * arguments. */
EXPORT CUresult cuPointerGetAttributes(unsigned count, int *attributes, void **data, CUdeviceptr p)
{
    GATE(1, 1);
    if (!count || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
        size_t width = attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attributes[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED
                               || attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
                           ? 4
                           : 8;
        if (cuPointerGetAttribute(data[i], attributes[i], p) != CUDA_SUCCESS)
            memset(data[i], 0, width);
    }
    return CUDA_SUCCESS;
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

/* CUDA IPC exports memory the driver allocated (cuMemAlloc, cudaMalloc) only: managed
 * and host memory are refused with CUDA_ERROR_INVALID_VALUE, as the driver does. The
 * handle carries the pointer (no other process imports it here). */
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr p)
{
    GATE(1, 1);
    CUresult rc = CUDA_SUCCESS;
    if (!handle || strcmp(fakegpu_ptr_kind(p), "vram"))
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        memset(handle, 0, sizeof *handle);
        memcpy(handle->reserved, &p, sizeof p);
    }
    fg_log("cuIpcGetMemHandle ptr=%#llx kind=%s -> %d", p, fakegpu_ptr_kind(p), rc);
    return rc;
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
COPY_ASYNC(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, dst, src, NULL)
COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr, dst, src, CU_STREAM_PER_THREAD)

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
