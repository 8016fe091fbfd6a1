/* libfakegpu.so: graphs, their nodes and executable graphs.
 *
 * A graph is a list of nodes (kernel launches, memsets, copies, host functions, the
 * work a capture adds: fakegpu_capture.c). Nodes run in the order they were added, which
 * respects every dependency (a node's dependencies exist before it). An instantiated
 * graph holds its own copy of the nodes; cuGraphLaunch queues them on the stream, counted
 * under the path "cuGraphLaunch".
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

/* Lock held. Appends a node owning op's data (capture_op_locked too). */
struct fake_graph_node *graph_add_node_locked(CUgraph gr, int type, const struct op *op)
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

/* Lock held. The node added last, or NULL. */
CUgraphNode graph_last_node_locked(CUgraph gr) { return gr->tail; }

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
    struct fake_graph_node *n = rc ? NULL : graph_add_node_locked(gr, type, &op);
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
