/* What the fake driver's files (libcuda.c, libcuda_memory.c, libcuda_streams.c, ...) share: how
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
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
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
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);
EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end);

/* libcuda_modules.c: modules, libraries, kernels. fake_handle_kernel: the kernel a
 * CUfunction or CUkernel handle names, NULL for anything else. */
const struct fg_kernel *fake_handle_kernel(const void *handle);
EXPORT CUresult cuModuleUnload(CUmodule module);
EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *address, size_t *bytes, CUmodule module, const char *name);
EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *address, size_t *bytes, CUlibrary library, const char *name);
EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, void *jitOptions, void **jitOptionsValues,
                                  unsigned numJitOptions, void *libraryOptions, void **libraryOptionValues,
                                  unsigned numLibraryOptions);
EXPORT CUresult cuLibraryUnload(CUlibrary library);
EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name);
EXPORT CUresult cuKernelGetFunction(CUfunction *function, CUkernel kernel);
EXPORT CUresult cuKernelGetName(const char **name, CUkernel kernel);
EXPORT CUresult cuFuncGetName(const char **name, CUfunction f);
EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size);
EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size);

/* libcuda_launch.c: launches, tensor maps. fake_build_launch: a launch record from a
 * launch's arguments (the checks every launch path makes), for launches and graph nodes. */
CUresult fake_build_launch(const void *handle, const unsigned grid[3], const unsigned block[3], unsigned shared,
                           void **params, void **extra, struct fg_launch **out);
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shared, CUstream s, void **params, void **extra);
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, CUstream s, void **params);
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shared, CUstream s, void **params);
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, unsigned rank, void *global,
                                       const cuuint64_t *dims, const cuuint64_t *strides, const unsigned *box,
                                       const unsigned *element_strides, int interleave, int swizzle, int l2promotion,
                                       int oobfill);

/* libcuda_copies.c: memsets, 2D/3D, peer and batched copies. */
#define MEMSET_DECL(n, t) EXPORT CUresult n(CUdeviceptr p, t v, size_t count);
#define MEMSET_ASYNC_DECL(n, t) EXPORT CUresult n(CUdeviceptr p, t v, size_t count, CUstream s);
#define MEMSET2D_DECL(n, t) EXPORT CUresult n(CUdeviceptr p, size_t pitch, t v, size_t w, size_t h);
#define MEMSET2D_ASYNC_DECL(n, t) EXPORT CUresult n(CUdeviceptr p, size_t pitch, t v, size_t w, size_t h, CUstream s);
MEMSET_DECL(cuMemsetD8_v2_ptds, unsigned char)
MEMSET_DECL(cuMemsetD16_v2, unsigned short)
MEMSET_DECL(cuMemsetD16_v2_ptds, unsigned short)
MEMSET_DECL(cuMemsetD32_v2, unsigned int)
MEMSET_DECL(cuMemsetD32_v2_ptds, unsigned int)
MEMSET_ASYNC_DECL(cuMemsetD8Async_ptsz, unsigned char)
MEMSET_ASYNC_DECL(cuMemsetD16Async, unsigned short)
MEMSET_ASYNC_DECL(cuMemsetD16Async_ptsz, unsigned short)
MEMSET_ASYNC_DECL(cuMemsetD32Async, unsigned int)
MEMSET_ASYNC_DECL(cuMemsetD32Async_ptsz, unsigned int)
MEMSET2D_DECL(cuMemsetD2D8_v2, unsigned char)
MEMSET2D_DECL(cuMemsetD2D8_v2_ptds, unsigned char)
MEMSET2D_DECL(cuMemsetD2D16_v2, unsigned short)
MEMSET2D_DECL(cuMemsetD2D16_v2_ptds, unsigned short)
MEMSET2D_DECL(cuMemsetD2D32_v2, unsigned int)
MEMSET2D_DECL(cuMemsetD2D32_v2_ptds, unsigned int)
MEMSET2D_ASYNC_DECL(cuMemsetD2D8Async, unsigned char)
MEMSET2D_ASYNC_DECL(cuMemsetD2D8Async_ptsz, unsigned char)
MEMSET2D_ASYNC_DECL(cuMemsetD2D16Async, unsigned short)
MEMSET2D_ASYNC_DECL(cuMemsetD2D16Async_ptsz, unsigned short)
MEMSET2D_ASYNC_DECL(cuMemsetD2D32Async, unsigned int)
MEMSET2D_ASYNC_DECL(cuMemsetD2D32Async_ptsz, unsigned int)
EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p);
EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p);
EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p);
EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p);
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s);
EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s);
EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p);
EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p);
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s);
EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s);
EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p);
EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p);
EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s);
EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s);
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n);
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                  CUstream s);
EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                       CUstream s);
EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                   CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s);
EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                        CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
                                        CUstream s);
EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s);
EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                           CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s);

/* libcuda_arrays.c: CUDA arrays, copies between them and device memory, batches of 3D
 * copies. */
EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d);
EXPORT CUresult cuArrayDestroy(CUarray a);
EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n);
EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n);
EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n);
EXPORT CUresult cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                                     unsigned long long flags, CUstream s);
EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                                          unsigned long long flags, CUstream s);
EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
                                        CUstream s);
EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
                                             CUstream s);

/* libcuda_graphs.c: stream capture and graphs. */
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode);
EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode);
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph);
EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph);
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status);
EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, size_t *ndeps);
EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, size_t *ndeps);
EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, const void **edges, size_t *ndeps);
EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, const void **edges,
                                               size_t *ndeps);
EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned flags);
EXPORT CUresult cuGraphDestroy(CUgraph graph);
EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                        const CUDA_KERNEL_NODE_PARAMS *params);
EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx);
EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMCPY3D *params, CUcontext ctx);
EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count);
EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type);
EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p);
EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p);
EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *p);
EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params);
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                      size_t log_size);
EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS *params);
EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info);
EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s);
EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s);
EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s);
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s);
EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec);

#endif
