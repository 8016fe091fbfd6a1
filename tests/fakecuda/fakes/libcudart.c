/* Fake libcudart.so.12 / libcudart.so.13 (CUDART_MAJOR picks which).
 *
 * Reaches the driver the way the real runtime does: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2 (falling back to cuGetProcAddress) and nothing else; every driver
 * entry point is then fetched through cuGetProcAddress with the runtime's version. So an
 * interposer that only replaces exported driver symbols is bypassed, as with the real
 * runtime. Symbols carry the version node libcudart.so.<major> (version script), as the
 * real library's do. Driver errors map to the runtime's codes (equal numbers for the
 * ones used here); the runtime keeps a per-thread last error.
 */
#define _GNU_SOURCE
#include "fakecuda.h"
#include "libcudart_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CUDART_MAJOR == 12
#define CUDART_VERSION 12080
#else
#define CUDART_VERSION 13000
#endif

#define EXPORT __attribute__((visibility("default")))

static struct {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
    CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
    CUresult (*cuMemHostUnregister)(void *);
    CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*cuImportExternalMemory)(CUexternalMemory *, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *);
    CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t);
} drv;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_error;
static CUcontext primary;
/* The device's total memory, read once at initialisation through the entry point
 * cuGetProcAddress gave, as the real runtime does: cudaGetDeviceProperties reports this
 * cached figure (so an interposer's cuDeviceTotalMem answer is already in it). */
static size_t total_mem;
static __thread int ctx_current;
static __thread cudaError_t last_error;
/* cudaSetDevice: the thread's device, and each device's primary context once retained
 * (device 0's is `primary`). */
#define MAX_DEVICES 8
static __thread int current_device;
static CUcontext primaries[MAX_DEVICES];
static pthread_mutex_t primaries_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult get_proc(const char *name, void **fn)
{
    if (drv.cuGetProcAddress_v2) {
        CUdriverProcAddressQueryResult st;
        return drv.cuGetProcAddress_v2(name, fn, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    }
    return drv.cuGetProcAddress(name, fn, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
}

/* Any driver entry point, with the per-thread default stream's variant when asked. */
CUresult cudart_proc(const char *name, void **fn, int per_thread)
{
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (drv.cuGetProcAddress_v2) {
        CUdriverProcAddressQueryResult st;
        return drv.cuGetProcAddress_v2(name, fn, CUDART_VERSION, flags, &st);
    }
    return drv.cuGetProcAddress(name, fn, CUDART_VERSION, flags);
}

static void runtime_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        init_error = 35; /* cudaErrorInsufficientDriver */
        return;
    }
    drv.cuGetProcAddress_v2 = dlsym(h, "cuGetProcAddress_v2");
    if (!drv.cuGetProcAddress_v2)
        drv.cuGetProcAddress = dlsym(h, "cuGetProcAddress");
    if (!drv.cuGetProcAddress_v2 && !drv.cuGetProcAddress) {
        init_error = 35;
        return;
    }
    static const struct { const char *name; size_t off; } entries[] = {
#define E(n) { #n, offsetof(__typeof__(drv), n) }
        E(cuInit), E(cuDeviceGet), E(cuDeviceGetCount), E(cuDeviceGetName),
        { "cuDeviceTotalMem", offsetof(__typeof__(drv), cuDeviceTotalMem) },
        E(cuDevicePrimaryCtxRetain), E(cuCtxSetCurrent), E(cuCtxSynchronize),
        E(cuMemAlloc), E(cuMemFree), E(cuMemAllocAsync), E(cuMemFreeAsync),
        E(cuMemAllocFromPoolAsync), E(cuDeviceGetDefaultMemPool), E(cuMemGetInfo),
        E(cuMemcpy), E(cuMemcpyAsync), E(cuMemsetD8), E(cuStreamCreate), E(cuStreamDestroy),
        E(cuStreamSynchronize), E(cuStreamQuery), E(cuStreamWaitEvent), E(cuLaunchHostFunc),
        E(cuEventCreate), E(cuEventDestroy), E(cuEventRecord), E(cuEventQuery),
        E(cuEventSynchronize), E(cuMemHostRegister), E(cuMemHostUnregister),
        E(cuMemHostGetDevicePointer), E(cuImportExternalMemory),
#undef E
    };
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++) {
        void *fn = NULL;
        if (get_proc(entries[i].name, &fn) || !fn) {
            fprintf(stderr, "fake cudart: driver entry point %s not found\n", entries[i].name);
            init_error = 35;
            return;
        }
        *(void **)((char *)&drv + entries[i].off) = fn;
    }
    CUresult rc = drv.cuInit(0);
    CUdevice d;
    if (!rc)
        rc = drv.cuDeviceGet(&d, 0);
    if (!rc)
        rc = drv.cuDeviceTotalMem(&total_mem, d);
    if (!rc)
        rc = drv.cuDevicePrimaryCtxRetain(&primary, d);
    if (rc)
        init_error = rc == CUDA_ERROR_NOT_INITIALIZED ? cudaErrorInitializationError : rc;
}

static cudaError_t set_error(cudaError_t e)
{
    if (e)
        last_error = e;
    return e;
}

/* Lazily initialises the runtime and makes the primary context current. */
static cudaError_t lazy_init(void)
{
    pthread_once(&init_once, runtime_init);
    if (init_error)
        return set_error(init_error);
    if (!ctx_current) {
        CUresult rc = drv.cuCtxSetCurrent(primary);
        if (rc)
            return set_error(rc == CUDA_ERROR_NOT_INITIALIZED ? cudaErrorInitializationError : rc);
        ctx_current = 1;
    }
    return cudaSuccess;
}

static cudaError_t from_driver(CUresult rc)
{
    /* The runtime's codes for these driver errors have the same numbers
     * (cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1, ...) except
     * initialisation: CUDA_ERROR_NOT_INITIALIZED = cudaErrorInitializationError = 3. */
    return set_error(rc);
}

cudaError_t cudart_init(void) { return lazy_init(); }
cudaError_t cudart_error(CUresult rc) { return from_driver(rc); }

#define INIT()                          \
    do {                                \
        cudaError_t init_rc_ = lazy_init(); \
        if (init_rc_)                   \
            return init_rc_;            \
    } while (0)

EXPORT cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return set_error(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return set_error(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    INIT();
    return from_driver(drv.cuDeviceGetCount(n));
}

/* Whether d is a device ordinal. */
static int device_valid(int d)
{
    int n = 0;
    return drv.cuDeviceGetCount(&n) == CUDA_SUCCESS && d >= 0 && d < n && d < MAX_DEVICES;
}

/* Device d's primary context made current on this thread. */
EXPORT cudaError_t cudaSetDevice(int d)
{
    INIT();
    if (!device_valid(d))
        return set_error(101); /* cudaErrorInvalidDevice */
    if (d == current_device)
        return cudaSuccess;
    pthread_mutex_lock(&primaries_lock);
    primaries[0] = primary;
    CUresult rc = CUDA_SUCCESS;
    CUdevice dev;
    if (!primaries[d] && !(rc = drv.cuDeviceGet(&dev, d)))
        rc = drv.cuDevicePrimaryCtxRetain(&primaries[d], dev);
    CUcontext ctx = primaries[d];
    pthread_mutex_unlock(&primaries_lock);
    if (!rc)
        rc = drv.cuCtxSetCurrent(ctx);
    if (rc)
        return from_driver(rc);
    current_device = d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
    INIT();
    if (!d)
        return set_error(cudaErrorInvalidValue);
    *d = current_device;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    if (!p)
        return set_error(cudaErrorInvalidValue);
    INIT();
    if (n == 0) {
        *p = NULL; /* the runtime answers a zero-byte request with NULL and success */
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult rc = drv.cuMemAlloc(&d, n);
    if (rc)
        return from_driver(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void *p)
{
    INIT();
    if (!p)
        return cudaSuccess;
    return from_driver(drv.cuMemFree((CUdeviceptr)(uintptr_t)p));
}

EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    if (!p)
        return set_error(cudaErrorInvalidValue);
    INIT();
    CUdeviceptr d = 0;
    CUresult rc = drv.cuMemAllocAsync(&d, n, s);
    if (rc)
        return from_driver(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
    if (!p)
        return set_error(cudaErrorInvalidValue);
    INIT();
    CUdeviceptr d = 0;
    CUresult rc = drv.cuMemAllocFromPoolAsync(&d, n, pool, s);
    if (rc)
        return from_driver(rc);
    *p = (void *)(uintptr_t)d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d)
{
    INIT();
    return from_driver(drv.cuDeviceGetDefaultMemPool(pool, d));
}

EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    INIT();
    return from_driver(drv.cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s));
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    INIT();
    return from_driver(drv.cuMemGetInfo(free_bytes, total));
}

static cudaError_t device_properties(void *prop, int d)
{
    if (!prop)
        return set_error(cudaErrorInvalidValue);
    INIT();
    if (!device_valid(d))
        return set_error(101);
    memset(prop, 0, CUDA_DEVICE_PROP_SIZE);
    CUresult rc = drv.cuDeviceGetName(prop, 256, d);
    if (rc)
        return from_driver(rc);
    /* Device 0's figure is the one cached at initialisation; other devices ask now. */
    size_t total = total_mem;
    if (d != 0 && (rc = drv.cuDeviceTotalMem(&total, d)))
        return from_driver(rc);
    memcpy((char *)prop + CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET, &total, sizeof total);
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceProperties(void *prop, int d) { return device_properties(prop, d); }
EXPORT cudaError_t cudaGetDeviceProperties_v2(void *prop, int d) { return device_properties(prop, d); }

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    INIT();
    if (kind < 0 || kind > cudaMemcpyDefault)
        return set_error(21); /* cudaErrorInvalidMemcpyDirection */
    return from_driver(drv.cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n));
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s)
{
    INIT();
    if (kind < 0 || kind > cudaMemcpyDefault)
        return set_error(21);
    return from_driver(drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s));
}

EXPORT cudaError_t cudaMemset(void *p, int v, size_t n)
{
    INIT();
    return from_driver(drv.cuMemsetD8((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n));
}

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    INIT();
    return from_driver(drv.cuCtxSynchronize());
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    INIT();
    return from_driver(drv.cuStreamCreate(s, 0));
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    INIT();
    return from_driver(drv.cuStreamCreate(s, flags));
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    INIT();
    return from_driver(drv.cuStreamDestroy(s));
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    INIT();
    return from_driver(drv.cuStreamSynchronize(s));
}
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
    INIT();
    CUresult rc = drv.cuStreamQuery(s);
    return rc == CUDA_ERROR_NOT_READY ? rc : from_driver(rc); /* not ready is not sticky */
}
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    INIT();
    return from_driver(drv.cuStreamWaitEvent(s, e, flags));
}
EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, CUhostFn fn, void *data)
{
    INIT();
    return from_driver(drv.cuLaunchHostFunc(s, fn, data));
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    INIT();
    return from_driver(drv.cuEventCreate(e, 0));
}
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    INIT();
    return from_driver(drv.cuEventCreate(e, flags));
}
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    INIT();
    return from_driver(drv.cuEventDestroy(e));
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    INIT();
    return from_driver(drv.cuEventRecord(e, s));
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
    INIT();
    CUresult rc = drv.cuEventQuery(e);
    return rc == CUDA_ERROR_NOT_READY ? rc : from_driver(rc);
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    INIT();
    return from_driver(drv.cuEventSynchronize(e));
}

EXPORT cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags)
{
    INIT();
    return from_driver(drv.cuMemHostRegister(p, n, flags));
}
EXPORT cudaError_t cudaHostUnregister(void *p)
{
    INIT();
    return from_driver(drv.cuMemHostUnregister(p));
}
EXPORT cudaError_t cudaHostGetDevicePointer(void **d, void *p, unsigned flags)
{
    if (!d)
        return set_error(cudaErrorInvalidValue);
    INIT();
    CUdeviceptr dp = 0;
    CUresult rc = drv.cuMemHostGetDevicePointer(&dp, p, flags);
    if (rc)
        return from_driver(rc);
    *d = (void *)(uintptr_t)dp;
    return cudaSuccess;
}

EXPORT cudaError_t cudaImportExternalMemory(CUexternalMemory *m, const cudaExternalMemoryHandleDesc *desc)
{
    INIT();
    return from_driver(drv.cuImportExternalMemory(m, desc));
}

/* The runtime hands out driver entry points through the same cuGetProcAddress. */
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned version,
                                                    unsigned long long flags,
                                                    CUdriverProcAddressQueryResult *status)
{
    if (!sym || !fn)
        return set_error(cudaErrorInvalidValue);
    INIT();
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = drv.cuGetProcAddress_v2
        ? drv.cuGetProcAddress_v2(sym, fn, (int)version, flags, &st)
        : drv.cuGetProcAddress(sym, fn, (int)version, flags);
    if (!drv.cuGetProcAddress_v2 && !rc)
        st = CU_GET_PROC_ADDRESS_SUCCESS;
    if (status)
        *status = st;
    if (rc == CUDA_ERROR_NOT_FOUND) {
        *fn = NULL;
        return status ? cudaSuccess : set_error(500); /* cudaErrorSymbolNotFound */
    }
    return from_driver(rc);
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                           CUdriverProcAddressQueryResult *status)
{
    return cudaGetDriverEntryPointByVersion(sym, fn, CUDART_VERSION, flags, status);
}

EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }
