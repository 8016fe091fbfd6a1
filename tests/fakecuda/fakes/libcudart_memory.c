/* Fake libcudart (see libcudart.c): the runtime's memory calls. Allocation (cudaMalloc,
 * stream-ordered and pool allocations, cudaFree*), cudaMemGetInfo, copies and memsets,
 * host registration and external memory, each on the driver entry point libcudart.c
 * fetched at initialisation through cuGetProcAddress (cudart_drv).
 */
#include "libcudart_internal.h"

#include <stdint.h>

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    if (!p)
        return cudart_error(cudaErrorInvalidValue);
    CUDART_INIT();
    if (n == 0) {
        *p = NULL; /* the runtime answers a zero-byte request with NULL and success */
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult rc = cudart_drv.cuMemAlloc(&d, n);
    if (rc)
        return cudart_error(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void *p)
{
    CUDART_INIT();
    if (!p)
        return cudaSuccess;
    return cudart_error(cudart_drv.cuMemFree((CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    if (!p)
        return cudart_error(cudaErrorInvalidValue);
    CUDART_INIT();
    CUdeviceptr d = 0;
    CUresult rc = cudart_drv.cuMemAllocAsync(&d, n, s);
    if (rc)
        return cudart_error(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    if (!p)
        return cudart_error(cudaErrorInvalidValue);
    CUDART_INIT();
    CUdeviceptr d = 0;
    CUresult rc = cudart_drv.cuMemAllocFromPoolAsync(&d, n, pool, s);
    if (rc)
        return cudart_error(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuDeviceGetDefaultMemPool(pool, d));
}

EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s));
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuMemGetInfo(free_bytes, total));
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    CUDART_INIT();
    if (kind < 0 || kind > cudaMemcpyDefault)
        return cudart_error(21); /* cudaErrorInvalidMemcpyDirection */
    return cudart_error(cudart_drv.cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n));
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    CUDART_INIT();
    if (kind < 0 || kind > cudaMemcpyDefault)
        return cudart_error(21);
    return cudart_error(cudart_drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s));
}

EXPORT cudaError_t cudaMemset(void *p, int v, size_t n)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuMemsetD8((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n));
}

EXPORT cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuMemHostRegister(p, n, flags));
}
EXPORT cudaError_t cudaHostUnregister(void *p)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuMemHostUnregister(p));
}
EXPORT cudaError_t cudaHostGetDevicePointer(void **d, void *p, unsigned flags)
{
    if (!d)
        return cudart_error(cudaErrorInvalidValue);
    CUDART_INIT();
    CUdeviceptr dp = 0;
    CUresult rc = cudart_drv.cuMemHostGetDevicePointer(&dp, p, flags);
    if (rc)
        return cudart_error(rc);
    *d = (void *)(uintptr_t)dp;
    return cudaSuccess;
}

EXPORT cudaError_t cudaImportExternalMemory(CUexternalMemory *m, const cudaExternalMemoryHandleDesc *desc)
{
    CUDART_INIT();
    return cudart_error(cudart_drv.cuImportExternalMemory(m, desc));
}
