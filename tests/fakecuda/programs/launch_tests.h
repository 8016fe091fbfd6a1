/* What gblaunch's files share (launch_tests.c: the driver's launch paths;
 * launch_graphs.c: capture, graphs and the runtime; launch_memory_ops.c: copies and
 * memsets; launch_timing.c: kernel times). */
#ifndef LAUNCH_TESTS_H
#define LAUNCH_TESTS_H
#include "testutil.h"

/* The driver functions gblaunch calls (as cuda.h declares them). */
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuDriverGetVersion(int *v);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult *status);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
CUresult cuModuleUnload(CUmodule module);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, void *jitOptions, void **jitOptionsValues, unsigned numJitOptions, void *libraryOptions, void **libraryOptionValues, unsigned numLibraryOptions);
CUresult cuLibraryUnload(CUlibrary library);
CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *function, CUkernel kernel);
CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size);
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream s, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream s, void **params);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, unsigned rank, void *global, const cuuint64_t *dims, const cuuint64_t *strides, const unsigned *box, const unsigned *element_strides, int interleave, int swizzle, int l2promotion, int oobfill);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult cuArrayDestroy(CUarray array);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void * src, size_t n);
CUresult cuMemcpyDtoH_v2(void * dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n);
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t count);
CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t count, CUstream s);
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t count, CUstream s);
CUresult cuMemsetD2D32_v2(CUdeviceptr p, size_t pitch, unsigned int v, size_t w, size_t h);
CUresult cuMemsetD2D8Async(CUdeviceptr p, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s);
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p);
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s);
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p);
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s);
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s);
CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data);
CUresult cuStreamIsCapturing(CUstream s, int *status);
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *graph);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps, const void **edges, size_t *ndeps);
CUresult cuGraphCreate(CUgraph *graph, unsigned flags);
CUresult cuGraphDestroy(CUgraph graph);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx);
CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMCPY3D *params, CUcontext ctx);
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count);
CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type);
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p);
CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info);
CUresult cuGraphUpload(CUgraphExec exec, CUstream s);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec exec);

/* The PTX-like image naming the fake's test kernels. */
extern const char launch_ptx[];
int test_graphs(int argc, char **argv);
int test_runtime(int argc, char **argv);
int test_capture(int argc, char **argv);
int test_memory_ops(int argc, char **argv);
/* launch_timing.c: kernel times measured by events (fk_read_u32, cuEventElapsedTime). */
int test_timing(int argc, char **argv);
/* ---- What the shim observed, against what the fake device ran (a profiler's count).
 * observed_reset() starts both counts; observed_check() fails when, since then, the
 * shim counted other kernel launches, host functions, or copies and memsets than the
 * device ran, or another number of launches it could not fully read. Without the shim
 * (control runs) only the fake's counts are reset. ---- */
#include "shimstats.h"
static struct shim_stats observed_base;
static inline int shim_observes(void)
{
    return dlsym(RTLD_DEFAULT, "greenboost_shim_launches_naming") != NULL;
}
static inline void observed_reset(void)
{
    fakegpu_count_reset();
    observed_base = shim_stats();
}
static inline void observed_check(const char *what, unsigned long long unread)
{
    if (!shim_observes())
        return;
    struct shim_stats now = shim_stats();
    unsigned long long launches = now.launches - observed_base.launches, kernels = fakegpu_count("kernel");
    unsigned long long hostfns = now.host_funcs - observed_base.host_funcs;
    printf("observed %s: %llu launches (%llu unread), %llu allocations named, %llu graph launches, %llu captured, "
           "%llu copies and memsets\n",
           what, launches, now.launches_unread - observed_base.launches_unread,
           now.launch_namings - observed_base.launch_namings, now.graph_launches - observed_base.graph_launches,
           now.captured_launches - observed_base.captured_launches, now.memory_ops - observed_base.memory_ops);
    CHECK(launches == kernels, "%s: the shim saw %llu kernel launches, the device ran %llu\n", what, launches, kernels);
    CHECK(hostfns == fakegpu_count("hostfn"), "%s: the shim saw %llu host functions, the device ran %llu\n", what,
          hostfns, fakegpu_count("hostfn"));
    unsigned long long memory_ops = now.memory_ops - observed_base.memory_ops;
    unsigned long long device_ops = fakegpu_count("memset") + fakegpu_count("memcpy");
    CHECK(memory_ops == device_ops, "%s: the shim saw %llu copies and memsets, the device ran %llu\n", what, memory_ops,
          device_ops);
    CHECK(now.launches_unread - observed_base.launches_unread == unread, "%s: %llu launches not fully read, want %llu\n",
          what, now.launches_unread - observed_base.launches_unread, unread);
}
/* Launches the shim saw naming the allocation holding p (0 without the shim). */
static inline unsigned long long named(CUdeviceptr p)
{
    return shim_launches_naming((const void *)(uintptr_t)p);
}
#endif
