/* libfakegpu.so: stream capture and graphs.
 *
 * A capturing stream's work (launches, memsets, copies, host functions) becomes nodes of
 * the capture's graph instead of running (enqueue hands it here). Nodes run in the order
 * they were added, which respects every dependency (a node's dependencies exist before
 * it). An instantiated graph holds its own copy of the nodes; cuGraphLaunch queues them
 * on the stream, counted under the path "cuGraphLaunch".
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

#define GRAPH_MAGIC 0x4752415048303031ULL
#define NODE_MAGIC 0x4e4f444530303031ULL
#define EXEC_MAGIC 0x4558454330303031ULL

struct fake_graph_node {
    uint64_t magic;
    int type;
    struct op op;
    struct fake_graph *graph;
    size_t index;
    struct fake_graph_node *next;
};
struct fake_graph {
    uint64_t magic;
    struct fake_graph_node *head, *tail;
    size_t count;
};
struct fake_graph_exec {
    uint64_t magic;
    size_t count;
    int *types;
    struct op *ops;
    struct fake_graph *from;
};
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

static int graph_valid(CUgraph gr) { return gr && gr->magic == GRAPH_MAGIC; }
static int node_valid(CUgraphNode n) { return n && n->magic == NODE_MAGIC; }
static int exec_valid(CUgraphExec e) { return e && e->magic == EXEC_MAGIC; }

/* ------------------------------------------------------------------ graphs */

CUresult fg_graph_create(CUgraph *graph, unsigned flags)
{
    if (!graph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_graph *gr = calloc(1, sizeof *gr);
    if (!gr)
        return CUDA_ERROR_OUT_OF_MEMORY;
    gr->magic = GRAPH_MAGIC;
    *graph = gr;
    return CUDA_SUCCESS;
}

CUresult fg_graph_destroy(CUgraph gr)
{
    pthread_mutex_lock(&g.lock);
    if (!graph_valid(gr)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (struct fake_graph_node *n = gr->head, *next; n; n = next) {
        next = n->next;
        op_free_data(&n->op);
        n->magic = 0;
        free(n);
    }
    gr->magic = 0;
    pthread_mutex_unlock(&g.lock);
    free(gr);
    return CUDA_SUCCESS;
}

/* Lock held. Appends a node owning op's data. */
static struct fake_graph_node *add_node_locked(CUgraph gr, int type, const struct op *op)
{
    struct fake_graph_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->magic = NODE_MAGIC;
    n->type = type;
    n->op = *op;
    n->op.next = NULL;
    n->graph = gr;
    n->index = gr->count++;
    if (gr->tail)
        gr->tail->next = n;
    else
        gr->head = n;
    gr->tail = n;
    return n;
}

static CUresult add_node(CUgraphNode *node, CUgraph gr, const CUgraphNode *deps, size_t ndeps, int type, struct op op)
{
    if (!node || (ndeps && !deps)) {
        op_free_data(&op);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g.lock);
    CUresult rc = graph_valid(gr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps && !rc; i++)
        if (!node_valid(deps[i]) || deps[i]->graph != gr)
            rc = CUDA_ERROR_INVALID_VALUE;
    struct fake_graph_node *n = rc ? NULL : add_node_locked(gr, type, &op);
    pthread_mutex_unlock(&g.lock);
    if (!n) {
        op_free_data(&op);
        return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    }
    *node = n;
    return CUDA_SUCCESS;
}

CUresult fg_graph_add_kernel(CUgraphNode *node, CUgraph gr, const CUgraphNode *deps, size_t ndeps, struct fg_launch *l)
{
    return add_node(node, gr, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL, (struct op){ .kind = OP_KERNEL, .data = l });
}

CUresult fg_graph_add_memset(CUgraphNode *node, CUgraph gr, const CUgraphNode *deps, size_t ndeps,
                             const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->width || !p->height ||
        (p->height > 1 && p->pitch < p->width * p->elementSize))
        return CUDA_ERROR_INVALID_VALUE;
    struct op op = { .kind = OP_SET2D, .a = p->dst, .pitch = p->height > 1 ? p->pitch : p->width * p->elementSize,
                     .width = p->width, .height = p->height, .elem = p->elementSize, .seed = p->value };
    return add_node(node, gr, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMSET, op);
}

CUresult fg_graph_add_memcpy(CUgraphNode *node, CUgraph gr, const CUgraphNode *deps, size_t ndeps,
                             const CUDA_MEMCPY3D *p)
{
    if (!p || !p->WidthInBytes || !p->Height || !p->Depth)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D *c = malloc(sizeof *c);
    *c = *p;
    if (!c->srcPitch) c->srcPitch = c->WidthInBytes;
    if (!c->dstPitch) c->dstPitch = c->WidthInBytes;
    if (!c->srcHeight) c->srcHeight = c->Height;
    if (!c->dstHeight) c->dstHeight = c->Height;
    return add_node(node, gr, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMCPY, (struct op){ .kind = OP_COPY3D, .data = c });
}

CUresult fg_graph_get_nodes(CUgraph gr, CUgraphNode *nodes, size_t *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!graph_valid(gr)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (nodes) {
        size_t i = 0;
        for (struct fake_graph_node *n = gr->head; n && i < *count; n = n->next)
            nodes[i++] = n;
        *count = i;
    } else {
        *count = gr->count;
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_node_get_type(CUgraphNode node, int *type)
{
    if (!node_valid(node) || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
}

const struct fg_launch *fg_node_launch(CUgraphNode node)
{
    return node_valid(node) && node->op.kind == OP_KERNEL ? node->op.data : NULL;
}

/* A memset node's parameters and a copy node's descriptor, as the driver gives them back
 * (the copy's pitches and heights filled in as the node keeps them). */
CUresult fg_node_memset_params(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!p || !node_valid(node) || node->op.kind != OP_SET2D)
        return CUDA_ERROR_INVALID_VALUE;
    *p = (CUDA_MEMSET_NODE_PARAMS){ .dst = node->op.a, .pitch = node->op.pitch, .value = node->op.seed,
                                    .elementSize = node->op.elem, .width = node->op.width, .height = node->op.height };
    return CUDA_SUCCESS;
}

CUresult fg_node_memcpy_params(CUgraphNode node, CUDA_MEMCPY3D *p)
{
    if (!p || !node_valid(node) || node->op.kind != OP_COPY3D)
        return CUDA_ERROR_INVALID_VALUE;
    *p = *(const CUDA_MEMCPY3D *)node->op.data;
    return CUDA_SUCCESS;
}

CUresult fg_node_set_launch(CUgraphNode node, struct fg_launch *l)
{
    if (!fg_node_launch(node)) {
        free(l);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g.lock);
    free(node->op.data);
    node->op.data = l;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ executable graphs */

CUresult fg_graph_instantiate(CUgraphExec *exec, CUgraph gr, unsigned long long flags)
{
    if (!exec || (flags & ~0xfULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!graph_valid(gr)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fake_graph_exec *e = calloc(1, sizeof *e);
    e->magic = EXEC_MAGIC;
    e->from = gr;
    e->count = gr->count;
    e->ops = calloc(gr->count + 1, sizeof *e->ops);
    e->types = calloc(gr->count + 1, sizeof *e->types);
    size_t i = 0;
    for (struct fake_graph_node *n = gr->head; n; n = n->next, i++) {
        e->ops[i] = op_dup(&n->op);
        e->types[i] = n->type;
    }
    pthread_mutex_unlock(&g.lock);
    *exec = e;
    return CUDA_SUCCESS;
}

CUresult fg_exec_set_launch(CUgraphExec e, CUgraphNode node, struct fg_launch *l)
{
    pthread_mutex_lock(&g.lock);
    CUresult rc = CUDA_SUCCESS;
    if (!exec_valid(e) || !node_valid(node) || node->graph != e->from || node->index >= e->count ||
        e->ops[node->index].kind != OP_KERNEL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (((struct fg_launch *)e->ops[node->index].data)->k != l->k)
        rc = CUDA_ERROR_INVALID_VALUE; /* another function: the driver refuses that change */
    if (!rc) {
        free(e->ops[node->index].data);
        e->ops[node->index].data = l;
    }
    pthread_mutex_unlock(&g.lock);
    if (rc)
        free(l);
    return rc;
}

/* The same topology (node count and types, one kernel per kernel node): the parameters
 * are taken over; otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the reason. */
CUresult fg_graph_exec_update(CUgraphExec e, CUgraph gr, CUgraphExecUpdateResultInfo *info)
{
    if (!info)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!exec_valid(e) || !graph_valid(gr)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    info->errorNode = info->errorFromNode = NULL;
    if (gr->count != e->count)
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    size_t i = 0;
    for (struct fake_graph_node *n = gr->head; n && !info->result; n = n->next, i++) {
        if (n->type != e->types[i] || n->op.kind != e->ops[i].kind)
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        else if (n->op.kind == OP_KERNEL &&
                 ((struct fg_launch *)n->op.data)->k != ((struct fg_launch *)e->ops[i].data)->k)
            info->result = CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED;
        if (info->result)
            info->errorNode = n;
    }
    if (!info->result) {
        i = 0;
        for (struct fake_graph_node *n = gr->head; n; n = n->next, i++) {
            op_free_data(&e->ops[i]);
            e->ops[i] = op_dup(&n->op);
        }
        e->from = gr;
    }
    pthread_mutex_unlock(&g.lock);
    return info->result ? CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE : CUDA_SUCCESS;
}

CUresult fg_graph_upload(CUgraphExec e, CUstream s)
{
    if (!exec_valid(e))
        return CUDA_ERROR_INVALID_VALUE;
    return fg_stream_usable(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fg_graph_launch(CUgraphExec e, CUstream s)
{
    pthread_mutex_lock(&g.lock);
    int ok = exec_valid(e);
    size_t count = ok ? e->count : 0;
    struct op *ops = count ? malloc(count * sizeof *ops) : NULL;
    for (size_t i = 0; i < count; i++) {
        ops[i] = op_dup(&e->ops[i]);
        ops[i].path = "cuGraphLaunch";
    }
    pthread_mutex_unlock(&g.lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_stream_usable(s)) {
        for (size_t i = 0; i < count; i++)
            op_free_data(&ops[i]);
        free(ops);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < count; i++) {
        CUresult r = rc ? (op_free_data(&ops[i]), rc) : enqueue(s, ops[i]);
        if (!rc)
            rc = r;
    }
    free(ops);
    return rc;
}

CUresult fg_graph_exec_destroy(CUgraphExec e)
{
    pthread_mutex_lock(&g.lock);
    if (!exec_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    e->magic = 0;
    pthread_mutex_unlock(&g.lock);
    for (size_t i = 0; i < e->count; i++)
        op_free_data(&e->ops[i]);
    free(e->ops);
    free(e->types);
    free(e);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ capture */

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
        *last = c ? c->graph->tail : NULL;
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
    if (!add_node_locked(c->graph, type, op)) {
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
