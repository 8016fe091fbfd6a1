/* libfakegpu.so: stream capture.
 *
 * A capturing stream's work (launches, memsets, copies, host functions) becomes nodes of
 * the capture's graph (fakegpu_graphs.c) instead of running (enqueue hands it here).
 *
 * Capture modes as the driver has them: a thread in GLOBAL mode (the default) may not
 * make a potentially unsafe call while its own non-relaxed capture, or any other thread's
 * GLOBAL capture, is in progress; THREAD_LOCAL only minds its own; RELAXED never. Such a
 * call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture: later
 * work on the stream and cuStreamEndCapture return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
 * The unsafe calls are those that synchronise implicitly: synchronous allocation, free,
 * copy and memset, cuCtxSynchronize, cuEventQuery/Synchronize, and synchronising or
 * querying the capturing stream itself.
 */
#define _GNU_SOURCE
#include "fakegpu_state.h"

struct fg_capture {
    CUstream s;
    int mode;
    pthread_t thread;
    int invalidated;
    CUgraph graph;
    unsigned long long id;
    struct fg_capture *next;
};

static struct fg_capture *captures; /* g.lock */
static int ncaptures;               /* read without the lock as a fast path */
static unsigned long long next_capture_id = 1;
static __thread int thread_mode; /* CU_STREAM_CAPTURE_MODE_GLOBAL */

CUresult fg_capture_begin(CUstream s, int mode)
{
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_default_stream(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    CUgraph gr;
    CUresult rc = fg_graph_create(&gr, 0);
    if (rc)
        return rc;
    pthread_mutex_lock(&g.lock);
    rc = !stream_valid(s) ? CUDA_ERROR_INVALID_HANDLE : s->capture ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
    if (!rc) {
        struct fg_capture *c = calloc(1, sizeof *c);
        c->s = s;
        c->mode = mode;
        c->thread = pthread_self();
        c->graph = gr;
        c->id = next_capture_id++;
        c->next = captures;
        captures = c;
        s->capture = c;
        __atomic_add_fetch(&ncaptures, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&g.lock);
    if (rc)
        fg_graph_destroy(gr);
    return rc;
}

CUresult fg_capture_end(CUstream s, CUgraph *graph)
{
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct fg_capture *c = !is_default_stream(s) && stream_valid(s) ? s->capture : NULL;
    if (!c) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self())) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    s->capture = NULL;
    struct fg_capture **pp = &captures;
    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    __atomic_sub_fetch(&ncaptures, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&g.lock);
    CUresult rc = CUDA_SUCCESS;
    if (c->invalidated) {
        fg_graph_destroy(c->graph);
        *graph = NULL;
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        *graph = c->graph;
    }
    free(c);
    return rc;
}

CUresult fg_capture_info(CUstream s, int *status, unsigned long long *id, CUgraph *graph, CUgraphNode *last)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_default_stream(s)) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g.lock);
    if (!stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    struct fg_capture *c = s->capture;
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
            : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id && c)
        *id = c->id;
    if (graph)
        *graph = c ? c->graph : NULL;
    if (last)
        *last = c ? graph_last_node_locked(c->graph) : NULL;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_thread_exchange_capture_mode(int *mode)
{
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult capture_op_locked(struct fake_stream *s, struct op *op)
{
    struct fg_capture *c = s->capture;
    if (c->invalidated) {
        op_free_data(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    int type;
    switch (op->kind) {
    case OP_KERNEL: case OP_FILL: case OP_VERIFY: case OP_GEMM: type = CU_GRAPH_NODE_TYPE_KERNEL; break;
    case OP_COPY: case OP_COPY3D: type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
    case OP_SET: case OP_SET2D: type = CU_GRAPH_NODE_TYPE_MEMSET; break;
    case OP_HOSTFN: type = CU_GRAPH_NODE_TYPE_HOST; break;
    case OP_FREE: type = CU_GRAPH_NODE_TYPE_MEM_FREE; break;
    case OP_EVENT:
        /* Captured records complete now (nothing waits on the graph's copy). */
        pthread_mutex_unlock(&g.lock);
        run_op(NULL, op);
        pthread_mutex_lock(&g.lock);
        op->kind = OP_NOP;
        type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
        break;
    case OP_WAIT_EVENT: op->kind = OP_NOP; type = CU_GRAPH_NODE_TYPE_WAIT_EVENT; break;
    default: /* stream callbacks, prefetches: not capturable */
        c->invalidated = 1;
        fg_log("CAPTURE_INVALIDATED by uncapturable work on stream %p", (void *)s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    op->path = NULL;
    if (!graph_add_node_locked(c->graph, type, op)) {
        op_free_data(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void capture_invalidate_locked(struct fake_stream *s)
{
    s->capture->invalidated = 1;
    fg_log("CAPTURE_INVALIDATED by synchronising the capturing stream %p", (void *)s);
}

static int unsafe_call(const char *name)
{
    static const char *const unsafe[] = {
        "cuMemAlloc_v2", "cuMemAlloc", "cuMemFree_v2", "cuMemFree", "cuMemAllocManaged", "cuCtxSynchronize",
        "cuEventQuery", "cuEventSynchronize", "cuMemcpy", "cuMemcpy_ptds", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds",
        "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", "cuMemcpy2D_v2",
        "cuMemcpy2D_v2_ptds", "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds", "cuMemcpyPeer", "cuMemcpyPeer_ptds",
        "cuMemsetD8_v2", "cuMemsetD8_v2_ptds", "cuMemsetD16_v2", "cuMemsetD16_v2_ptds", "cuMemsetD32_v2",
        "cuMemsetD32_v2_ptds", "cuMemsetD2D8_v2", "cuMemsetD2D8_v2_ptds", "cuMemsetD2D16_v2",
        "cuMemsetD2D16_v2_ptds", "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds", "cuMemcpyAtoD_v2",
        "cuMemcpyAtoD_v2_ptds", "cuMemcpyDtoA_v2", "cuMemcpyDtoA_v2_ptds",
    };
    for (size_t i = 0; i < sizeof unsafe / sizeof *unsafe; i++)
        if (!strcmp(unsafe[i], name))
            return 1;
    return 0;
}

CUresult fg_capture_check_call(const char *name)
{
    if (!__atomic_load_n(&ncaptures, __ATOMIC_SEQ_CST) || thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED ||
        !unsafe_call(name))
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    for (struct fg_capture *c = captures; c; c = c->next) {
        int mine = pthread_equal(c->thread, pthread_self());
        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&g.lock);
    if (rc)
        fg_log("CAPTURE_INVALIDATED by %s (thread mode %d)", name, thread_mode);
    return rc;
}
