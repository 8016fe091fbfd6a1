/* Fake libcudart (see libcudart.c): kernel launches, stream capture and graphs.
 *
 * As nvcc's host stubs use the real runtime: a program registers its fat binary
 * (__cudaRegisterFatBinary: a __fatBinC_Wrapper_t whose data here is the PTX-like text)
 * and each kernel's host stub address and name (__cudaRegisterFunction); `<<<>>>` pushes
 * the launch configuration, and the stub pops it and calls cudaLaunchKernel. As CUDA 12's
 * lazy loading does, the first launch of a binary's kernel loads the image with
 * cuLibraryLoadData and takes the kernel from cuLibraryGetKernel; launches pass that
 * CUkernel to cuLaunchKernel(_ptsz)/cuLaunchKernelEx(_ptsz) as the CUfunction. Every
 * driver function comes from cuGetProcAddress (libcudart.c's cudart_proc).
 */
#define _GNU_SOURCE
#include "libcudart_internal.h"

#include <pthread.h>
#include <string.h>

#define cudaErrorInvalidDeviceFunction 98
#define cudaErrorMissingConfiguration 52

/* A driver function, fetched once (per_thread: the _ptsz variant). */
#define DRIVER(var, name, per_thread, type)                                        \
    static __typeof__(type) var;                                                   \
    if (!__atomic_load_n(&var, __ATOMIC_ACQUIRE)) {                                \
        void *fn_ = NULL;                                                          \
        if (cudart_proc(name, &fn_, per_thread) || !fn_)                           \
            return cudart_error(CUDA_ERROR_NOT_FOUND);                             \
        __atomic_store_n(&var, (__typeof__(type))fn_, __ATOMIC_RELEASE);          \
    }

#define MAX_FUNCTIONS 64
struct fatbin {
    const char *image;
    CUlibrary library; /* loaded on first use */
    int n;
    struct { const void *host; const char *name; CUkernel kernel; } fn[MAX_FUNCTIONS];
    struct fatbin *next;
};
static struct fatbin *fatbins;
static pthread_mutex_t fatbin_lock = PTHREAD_MUTEX_INITIALIZER;

EXPORT void **__cudaRegisterFatBinary(void *wrapper)
{
    const __fatBinC_Wrapper_t *w = wrapper;
    struct fatbin *f = calloc(1, sizeof *f);
    f->image = w && w->magic == FATBINC_MAGIC ? w->data : NULL;
    pthread_mutex_lock(&fatbin_lock);
    f->next = fatbins;
    fatbins = f;
    pthread_mutex_unlock(&fatbin_lock);
    return (void **)f;
}

EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

EXPORT void __cudaRegisterFunction(void **handle, const char *host, char *device_fun, const char *device_name,
                                   int thread_limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
    struct fatbin *f = (struct fatbin *)handle;
    pthread_mutex_lock(&fatbin_lock);
    if (f && f->n < MAX_FUNCTIONS)
        f->fn[f->n++].host = host, f->fn[f->n - 1].name = device_name;
    pthread_mutex_unlock(&fatbin_lock);
}

EXPORT void __cudaUnregisterFatBinary(void **handle)
{
    struct fatbin *f = (struct fatbin *)handle;
    pthread_mutex_lock(&fatbin_lock);
    struct fatbin **pp = &fatbins;
    while (*pp && *pp != f)
        pp = &(*pp)->next;
    if (*pp)
        *pp = f->next;
    pthread_mutex_unlock(&fatbin_lock);
    if (f && f->library) {
        CUresult (*unload)(CUlibrary) = NULL;
        if (!cudart_proc("cuLibraryUnload", (void **)&unload, 0) && unload)
            unload(f->library);
    }
    free(f);
}

/* The CUkernel of the kernel whose host stub is func (loading its image on first use). */
static cudaError_t kernel_of(const void *func, CUkernel *out)
{
    cudaError_t e = cudart_init();
    if (e)
        return e;
    DRIVER(load, "cuLibraryLoadData", 0,
           CUresult (*)(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned))
    DRIVER(get_kernel, "cuLibraryGetKernel", 0, CUresult (*)(CUkernel *, CUlibrary, const char *))
    CUresult rc = CUDA_SUCCESS;
    int found = 0;
    pthread_mutex_lock(&fatbin_lock);
    for (struct fatbin *f = fatbins; f && !found; f = f->next)
        for (int i = 0; i < f->n && !found; i++) {
            if (f->fn[i].host != func)
                continue;
            found = 1;
            if (!f->library)
                rc = f->image ? load(&f->library, f->image, NULL, NULL, 0, NULL, NULL, 0) : CUDA_ERROR_INVALID_IMAGE;
            if (!rc && !f->fn[i].kernel)
                rc = get_kernel(&f->fn[i].kernel, f->library, f->fn[i].name);
            if (!rc)
                *out = f->fn[i].kernel;
        }
    pthread_mutex_unlock(&fatbin_lock);
    if (!found)
        return cudart_error(cudaErrorInvalidDeviceFunction);
    return rc ? cudart_error(rc == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction : rc) : cudaSuccess;
}

/* ------------------------------------------------------------------ <<<>>> */

#define CONFIG_DEPTH 16
static __thread struct config { dim3 grid, block; size_t shared; void *stream; } configs[CONFIG_DEPTH];
static __thread int nconfigs;

EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void *stream)
{
    if (nconfigs == CONFIG_DEPTH)
        return 1;
    configs[nconfigs++] = (struct config){ grid, block, shared, stream };
    return 0;
}

EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream)
{
    if (!nconfigs)
        return cudaErrorMissingConfiguration;
    struct config c = configs[--nconfigs];
    *grid = c.grid;
    *block = c.block;
    *shared = c.shared;
    *(void **)stream = c.stream;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ launches */

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);

static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s,
                          int per_thread)
{
    CUkernel k;
    cudaError_t e = kernel_of(func, &k);
    if (e)
        return e;
    if (per_thread) {
        DRIVER(fn, "cuLaunchKernel", 1, launch_fn)
        return cudart_error(fn((CUfunction)k, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared, s,
                               args, NULL));
    }
    DRIVER(fn, "cuLaunchKernel", 0, launch_fn)
    return cudart_error(fn((CUfunction)k, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared, s, args,
                           NULL));
}

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                    cudaStream_t s)
{
    return launch(func, grid, block, args, shared, s, 0);
}

EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                         cudaStream_t s)
{
    return launch(func, grid, block, args, shared, s, 1);
}

EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                               cudaStream_t s)
{
    CUkernel k;
    cudaError_t e = kernel_of(func, &k);
    if (e)
        return e;
    DRIVER(fn, "cuLaunchCooperativeKernel", 0, coop_fn)
    return cudart_error(fn((CUfunction)k, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared, s,
                           args));
}

static cudaError_t launch_ex(const cudaLaunchConfig_t *c, const void *func, void **args, int per_thread)
{
    if (!c)
        return cudart_error(CUDA_ERROR_INVALID_VALUE);
    CUkernel k;
    cudaError_t e = kernel_of(func, &k);
    if (e)
        return e;
    CUlaunchConfig d = { c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y, c->blockDim.z,
                         (unsigned)c->dynamicSmemBytes, c->stream, c->attrs, c->numAttrs };
    if (per_thread) {
        DRIVER(fn, "cuLaunchKernelEx", 1, launch_ex_fn)
        return cudart_error(fn(&d, (CUfunction)k, args, NULL));
    }
    DRIVER(fn, "cuLaunchKernelEx", 0, launch_ex_fn)
    return cudart_error(fn(&d, (CUfunction)k, args, NULL));
}

EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return launch_ex(c, func, args, 0);
}

EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *func, void **args)
{
    return launch_ex(c, func, args, 1);
}

EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *out, const void *symbol)
{
    if (!out)
        return cudart_error(CUDA_ERROR_INVALID_VALUE);
    CUkernel k;
    cudaError_t e = kernel_of(symbol, &k);
    if (e)
        return e;
    DRIVER(fn, "cuKernelGetFunction", 0, CUresult (*)(CUfunction *, CUkernel))
    return cudart_error(fn(out, k));
}

EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size)
{
    CUkernel k;
    cudaError_t e = kernel_of(func, &k);
    if (e)
        return e;
    DRIVER(fn, "cuKernelGetParamInfo", 0, CUresult (*)(CUkernel, size_t, size_t *, size_t *))
    return cudart_error(fn(k, index, offset, size));
}

/* ------------------------------------------------------------------ capture, graphs */

#define FORWARD(rtname, drvname, per_thread, params, args, type)                   \
    EXPORT cudaError_t rtname params                                               \
    {                                                                              \
        cudaError_t e = cudart_init();                                             \
        if (e)                                                                     \
            return e;                                                              \
        DRIVER(fn, drvname, per_thread, CUresult(*) type)                          \
        return cudart_error(fn args);                                              \
    }

FORWARD(cudaStreamBeginCapture, "cuStreamBeginCapture", 0, (cudaStream_t s, int mode), (s, mode),
        (CUstream, int))
FORWARD(cudaStreamBeginCapture_ptsz, "cuStreamBeginCapture", 1, (cudaStream_t s, int mode), (s, mode),
        (CUstream, int))
FORWARD(cudaStreamEndCapture, "cuStreamEndCapture", 0, (cudaStream_t s, cudaGraph_t *graph), (s, graph),
        (CUstream, CUgraph *))
FORWARD(cudaStreamEndCapture_ptsz, "cuStreamEndCapture", 1, (cudaStream_t s, cudaGraph_t *graph), (s, graph),
        (CUstream, CUgraph *))
FORWARD(cudaStreamIsCapturing, "cuStreamIsCapturing", 0, (cudaStream_t s, int *status), (s, status),
        (CUstream, int *))
FORWARD(cudaStreamIsCapturing_ptsz, "cuStreamIsCapturing", 1, (cudaStream_t s, int *status), (s, status),
        (CUstream, int *))
FORWARD(cudaThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 0, (int *mode), (mode), (int *))
FORWARD(cudaGraphInstantiate, "cuGraphInstantiate", 0,
        (cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags), (exec, graph, flags),
        (CUgraphExec *, CUgraph, unsigned long long))
FORWARD(cudaGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0,
        (cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags), (exec, graph, flags),
        (CUgraphExec *, CUgraph, unsigned long long))
FORWARD(cudaGraphLaunch, "cuGraphLaunch", 0, (cudaGraphExec_t exec, cudaStream_t s), (exec, s),
        (CUgraphExec, CUstream))
FORWARD(cudaGraphLaunch_ptsz, "cuGraphLaunch", 1, (cudaGraphExec_t exec, cudaStream_t s), (exec, s),
        (CUgraphExec, CUstream))
FORWARD(cudaGraphUpload, "cuGraphUpload", 0, (cudaGraphExec_t exec, cudaStream_t s), (exec, s),
        (CUgraphExec, CUstream))
FORWARD(cudaGraphExecDestroy, "cuGraphExecDestroy", 0, (cudaGraphExec_t exec), (exec), (CUgraphExec))
FORWARD(cudaGraphDestroy, "cuGraphDestroy", 0, (cudaGraph_t graph), (graph), (CUgraph))
FORWARD(cudaGraphGetNodes, "cuGraphGetNodes", 0, (cudaGraph_t graph, CUgraphNode *nodes, size_t *count),
        (graph, nodes, count), (CUgraph, CUgraphNode *, size_t *))
