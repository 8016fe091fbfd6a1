/* Fake libcudart.so.12 / libcudart.so.13 (CUDART_MAJOR picks which).
 *
 * Reaches the driver the way the real runtime does: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2 (falling back to cuGetProcAddress) and nothing else; every driver
 * entry point is then fetched through cuGetProcAddress with the runtime's version. So an
 * interposer that only replaces exported driver symbols is bypassed, as with the real
 * runtime. Symbols carry the version node libcudart.so.<major> (version script), as the
 * real library's do. Driver errors map to the runtime's codes (equal numbers for the
 * ones used here); the runtime keeps a per-thread last error.
 *
 * This file: loading the driver, initialisation, the last error, devices, streams,
 * events and driver entry points. The memory calls are in libcudart_memory.c; launches,
 * capture and graphs in libcudart_launch.c (libcudart_internal.h is what they share).
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

struct cudart_driver cudart_drv; /* filled by runtime_init */

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
    if (cudart_drv.cuGetProcAddress_v2) {
        CUdriverProcAddressQueryResult st;
        return cudart_drv.cuGetProcAddress_v2(name, fn, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    }
    return cudart_drv.cuGetProcAddress(name, fn, CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
}

/* Any driver entry point, with the per-thread default stream's variant when asked. */
CUresult cudart_proc(const char *name, void **fn, int per_thread)
{
    cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (cudart_drv.cuGetProcAddress_v2) {
        CUdriverProcAddressQueryResult st;
        return cudart_drv.cuGetProcAddress_v2(name, fn, CUDART_VERSION, flags, &st);
    }
    return cudart_drv.cuGetProcAddress(name, fn, CUDART_VERSION, flags);
}

static void runtime_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        init_error = 35; /* cudaErrorInsufficientDriver */
        return;
    }
    cudart_drv.cuGetProcAddress_v2 = dlsym(h, "cuGetProcAddress_v2");
    if (!cudart_drv.cuGetProcAddress_v2)
        cudart_drv.cuGetProcAddress = dlsym(h, "cuGetProcAddress");
    if (!cudart_drv.cuGetProcAddress_v2 && !cudart_drv.cuGetProcAddress) {
        init_error = 35;
        return;
    }
    static const struct { const char *name; size_t off; } entries[] = {
#define E(n) { #n, offsetof(struct cudart_driver, n) }
        E(cuInit), E(cuDeviceGet), E(cuDeviceGetCount), E(cuDeviceGetName),
        { "cuDeviceTotalMem", offsetof(struct cudart_driver, cuDeviceTotalMem) },
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
        *(void **)((char *)&cudart_drv + entries[i].off) = fn;
    }
    CUresult rc = cudart_drv.cuInit(0);
    CUdevice d;
    if (!rc)
        rc = cudart_drv.cuDeviceGet(&d, 0);
    if (!rc)
        rc = cudart_drv.cuDeviceTotalMem(&total_mem, d);
    if (!rc)
        rc = cudart_drv.cuDevicePrimaryCtxRetain(&primary, d);
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
        CUresult rc = cudart_drv.cuCtxSetCurrent(primary);
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
    CUDART_INIT();
    return from_driver(cudart_drv.cuDeviceGetCount(n));
}

/* Whether d is a device ordinal. */
static int device_valid(int d)
{
    int n = 0;
    return cudart_drv.cuDeviceGetCount(&n) == CUDA_SUCCESS && d >= 0 && d < n && d < MAX_DEVICES;
}

/* Device d's primary context made current on this thread. */
EXPORT cudaError_t cudaSetDevice(int d)
{
    CUDART_INIT();
    if (!device_valid(d))
        return set_error(101); /* cudaErrorInvalidDevice */
    if (d == current_device)
        return cudaSuccess;
    pthread_mutex_lock(&primaries_lock);
    primaries[0] = primary;
    CUresult rc = CUDA_SUCCESS;
    CUdevice dev;
    if (!primaries[d] && !(rc = cudart_drv.cuDeviceGet(&dev, d)))
        rc = cudart_drv.cuDevicePrimaryCtxRetain(&primaries[d], dev);
    CUcontext ctx = primaries[d];
    pthread_mutex_unlock(&primaries_lock);
    if (!rc)
        rc = cudart_drv.cuCtxSetCurrent(ctx);
    if (rc)
        return from_driver(rc);
    current_device = d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
    CUDART_INIT();
    if (!d)
        return set_error(cudaErrorInvalidValue);
    *d = current_device;
    return cudaSuccess;
}

static cudaError_t device_properties(void *prop, int d)
{
    if (!prop)
        return set_error(cudaErrorInvalidValue);
    CUDART_INIT();
    if (!device_valid(d))
        return set_error(101);
    memset(prop, 0, CUDA_DEVICE_PROP_SIZE);
    CUresult rc = cudart_drv.cuDeviceGetName(prop, 256, d);
    if (rc)
        return from_driver(rc);
    /* Device 0's figure is the one cached at initialisation; other devices ask now. */
    size_t total = total_mem;
    if (d != 0 && (rc = cudart_drv.cuDeviceTotalMem(&total, d)))
        return from_driver(rc);
    memcpy((char *)prop + CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET, &total, sizeof total);
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceProperties(void *prop, int d) { return device_properties(prop, d); }
EXPORT cudaError_t cudaGetDeviceProperties_v2(void *prop, int d) { return device_properties(prop, d); }

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuCtxSynchronize());
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuStreamCreate(s, 0));
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuStreamCreate(s, flags));
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuStreamDestroy(s));
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuStreamSynchronize(s));
}
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
    CUDART_INIT();
    CUresult rc = cudart_drv.cuStreamQuery(s);
    return rc == CUDA_ERROR_NOT_READY ? rc : from_driver(rc); /* not ready is not sticky */
}
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuStreamWaitEvent(s, e, flags));
}
EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, CUhostFn fn, void *data)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuLaunchHostFunc(s, fn, data));
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuEventCreate(e, 0));
}
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuEventCreate(e, flags));
}
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuEventDestroy(e));
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuEventRecord(e, s));
}
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
    CUDART_INIT();
    CUresult rc = cudart_drv.cuEventQuery(e);
    return rc == CUDA_ERROR_NOT_READY ? rc : from_driver(rc);
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    CUDART_INIT();
    return from_driver(cudart_drv.cuEventSynchronize(e));
}

/* The runtime hands out driver entry points through the same cuGetProcAddress. */
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned version,
                                                    unsigned long long flags,
                                                    CUdriverProcAddressQueryResult *status)
{
    if (!sym || !fn)
        return set_error(cudaErrorInvalidValue);
    CUDART_INIT();
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = cudart_drv.cuGetProcAddress_v2
        ? cudart_drv.cuGetProcAddress_v2(sym, fn, (int)version, flags, &st)
        : cudart_drv.cuGetProcAddress(sym, fn, (int)version, flags);
    if (!cudart_drv.cuGetProcAddress_v2 && !rc)
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
