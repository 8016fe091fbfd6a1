/* Fake libcuda.so.1 (see libcuda.c): stream capture and graphs, over the model in
 * gpu/fakegpu_capture.c (which says what is captured and which calls break a capture)
 * and gpu/fakegpu_graphs.c. */
#define _GNU_SOURCE
#include "libcuda_entry.h"

/* ------------------------------------------------------------------ capture */

EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    GATE(1, 1);
    CUresult rc = fg_capture_begin(s, mode);
    fg_log("cuStreamBeginCapture_v2 stream=%p mode=%d -> %d", (void *)s, mode, rc);
    return rc;
}
EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    GATE(1, 1);
    return fg_capture_begin(s ? s : CU_STREAM_PER_THREAD, mode);
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph)
{
    GATE(1, 1);
    CUresult rc = fg_capture_end(s, graph);
    fg_log("cuStreamEndCapture stream=%p -> %d", (void *)s, rc);
    return rc;
}
EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph)
{
    GATE(1, 1);
    return fg_capture_end(s ? s : CU_STREAM_PER_THREAD, graph);
}
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
    GATE(1, 0);
    return fg_stream_is_capturing(s ? s : CU_STREAM_PER_THREAD, (int *)status);
}
EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    GATE(1, 0);
    CUresult rc = fg_thread_exchange_capture_mode((int *)mode);
    fg_log("cuThreadExchangeStreamCaptureMode -> %d", rc);
    return rc;
}

/* v2 (CUDA 11.3): status, id, graph, dependencies; v3 (12.3) adds edge data (none here). */
static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const void **edges, size_t *ndeps)
{
    static __thread CUgraphNode last;
    CUresult rc = fg_capture_info(s, (int *)status, id, graph, &last);
    if (rc)
        return rc;
    if (deps)
        *deps = last ? &last : NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = last ? 1 : 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, size_t *ndeps)
{
    GATE(1, 0);
    return capture_info(s, status, id, graph, deps, NULL, ndeps);
}
EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    GATE(1, 0);
    return capture_info(s ? s : CU_STREAM_PER_THREAD, status, id, graph, deps, NULL, ndeps);
}
EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, const void **edges, size_t *ndeps)
{
    GATE(1, 0);
    return capture_info(s, status, id, graph, deps, edges, ndeps);
}
EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, const void **edges,
                                               size_t *ndeps)
{
    GATE(1, 0);
    return capture_info(s ? s : CU_STREAM_PER_THREAD, status, id, graph, deps, edges, ndeps);
}

/* ------------------------------------------------------------------ graphs */

EXPORT CUresult cuGraphCreate(CUgraph *graph, unsigned flags)
{
    GATE(1, 1);
    return fg_graph_create(graph, flags);
}
EXPORT CUresult cuGraphDestroy(CUgraph graph)
{
    GATE(1, 0);
    return fg_graph_destroy(graph);
}

/* A kernel node's launch from CUDA_KERNEL_NODE_PARAMS_v2: func, else kern. */
static CUresult node_launch(const CUDA_KERNEL_NODE_PARAMS *p, struct fg_launch **l)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const void *h = p->func ? (const void *)p->func : (const void *)p->kern;
    CUresult rc = fake_build_launch(h, (const unsigned[3]){ p->gridDimX, p->gridDimY, p->gridDimZ },
                                    (const unsigned[3]){ p->blockDimX, p->blockDimY, p->blockDimZ },
                                    p->sharedMemBytes, p->kernelParams, p->extra, l);
    return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
}

EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                        const CUDA_KERNEL_NODE_PARAMS *params)
{
    GATE(1, 1);
    struct fg_launch *l;
    CUresult rc = node_launch(params, &l);
    return rc ? rc : fg_graph_add_kernel(node, graph, deps, ndeps, l);
}
EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx)
{
    GATE(1, 1);
    return fg_graph_add_memset(node, graph, deps, ndeps, params);
}
EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                                     const CUDA_MEMCPY3D *params, CUcontext ctx)
{
    GATE(1, 1);
    return fg_graph_add_memcpy(node, graph, deps, ndeps, params);
}
EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count)
{
    GATE(1, 0);
    return fg_graph_get_nodes(graph, nodes, count);
}
EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
    GATE(1, 0);
    return fg_node_get_type(node, (int *)type);
}
EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p)
{
    GATE(1, 0);
    return fg_node_memset_params(node, p);
}
EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D *p)
{
    GATE(1, 0);
    return fg_node_memcpy_params(node, p);
}
/* The parameters point into the node's own copy, as the driver's do. */
EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS *p)
{
    GATE(1, 0);
    const struct fg_launch *l = fg_node_launch(node);
    if (!l || !p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t magic = *(const uint64_t *)l->handle;
    *p = (CUDA_KERNEL_NODE_PARAMS){
        .gridDimX = l->grid[0], .gridDimY = l->grid[1], .gridDimZ = l->grid[2],
        .blockDimX = l->block[0], .blockDimY = l->block[1], .blockDimZ = l->block[2],
        .sharedMemBytes = l->shared, .kernelParams = (void **)l->params,
    };
    if (magic == 0x4b45524e454c3031ULL) /* a CUkernel (libcuda_modules.c) */
        p->kern = l->handle;
    else
        p->func = l->handle;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *params)
{
    GATE(1, 0);
    struct fg_launch *l;
    CUresult rc = node_launch(params, &l);
    return rc ? rc : fg_node_set_launch(node, l);
}

/* ------------------------------------------------------------------ executable graphs */

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    GATE(1, 1);
    CUresult rc = fg_graph_instantiate(exec, graph, flags);
    fg_log("cuGraphInstantiateWithFlags -> %d", rc);
    return rc;
}
/* CUDA 11's cuGraphInstantiate(_v2): error node and log buffer. */
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                      size_t log_size)
{
    GATE(1, 1);
    if (error_node)
        *error_node = NULL;
    if (log && log_size)
        log[0] = 0;
    return fg_graph_instantiate(exec, graph, 0);
}
EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                  const CUDA_KERNEL_NODE_PARAMS *params)
{
    GATE(1, 0);
    struct fg_launch *l;
    CUresult rc = node_launch(params, &l);
    return rc ? rc : fg_exec_set_launch(exec, node, l);
}
EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info)
{
    GATE(1, 0);
    return fg_graph_exec_update(exec, graph, info);
}
EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
    GATE(1, 1);
    return fg_graph_upload(exec, s);
}
EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream s)
{
    GATE(1, 1);
    return fg_graph_upload(exec, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    GATE(1, 1);
    CUresult rc = fg_graph_launch(exec, s);
    fg_log("cuGraphLaunch stream=%p -> %d", (void *)s, rc);
    return rc;
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    GATE(1, 1);
    CUresult rc = fg_graph_launch(exec, s ? s : CU_STREAM_PER_THREAD);
    fg_log("cuGraphLaunch_ptsz stream=%p -> %d", (void *)s, rc);
    return rc;
}
EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    GATE(1, 0);
    return fg_graph_exec_destroy(exec);
}
