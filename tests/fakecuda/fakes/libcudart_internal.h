/* What libcudart.c gives the runtime's other files (libcudart_memory.c, libcudart_launch.c, ...). */
#ifndef LIBCUDART_INTERNAL_H
#define LIBCUDART_INTERNAL_H
#include "fakecuda.h"

/* A runtime call the library exports (built -fvisibility=hidden). */
#define EXPORT __attribute__((visibility("default")))

/* Lazily initialises the runtime and makes the device's primary context current (the
 * error, also kept as the thread's last error). */
cudaError_t cudart_init(void);
/* A driver entry point through cuGetProcAddress with the runtime's version; per_thread:
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (the _ptsz variant). */
CUresult cudart_proc(const char *name, void **fn, int per_thread);
/* A driver error as the runtime's (a runtime code passes unchanged), kept as the
 * thread's last error. */
cudaError_t cudart_error(CUresult rc);
/* cudart_init's error returned from the calling function, if any. */
#define CUDART_INIT()                          \
    do {                                       \
        cudaError_t init_rc_ = cudart_init(); \
        if (init_rc_)                          \
            return init_rc_;                   \
    } while (0)

/* The driver entry points the runtime calls most, fetched once at initialisation through
 * cuGetProcAddress (libcudart.c); the others come from cudart_proc when first used. */
struct cudart_driver {
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
};
extern struct cudart_driver cudart_drv;
#endif
