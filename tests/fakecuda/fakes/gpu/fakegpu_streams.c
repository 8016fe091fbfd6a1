/* libfakegpu.so: streams and events. The operations a stream runs, the worker threads
 * that run them in order, holds, waits, event records, host functions and callbacks. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* Whether the record `seq` of `e` is still queued. Lock held. */
int event_outstanding(const struct fake_event *e, uint64_t seq)
{
    for (int i = 0; i < e->noutstanding; i++)
        if (e->outstanding[i] == seq)
            return 1;
    return 0;
}

static CUresult run_op_kind(struct fake_stream *s, struct op *op);

/* Runs one operation and counts it (fakegpu_count). Returns the error a synchronous
 * caller sees. */
CUresult run_op(struct fake_stream *s, struct op *op)
{
    CUresult rc = run_op_kind(s, op);
    count_op(op);
    op_free_data(op);
    return rc;
}

static CUresult run_op_kind(struct fake_stream *s, struct op *op)
{
    switch (op->kind) {
    case OP_FILL:
        if (!for_each_device_chunk(op->a, op->n, chunk_fill, op))
            return fault(s, "fill", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_VERIFY:
        *op->result = 0;
        if (!for_each_device_chunk(op->a, op->n, chunk_verify, op)) {
            *op->result = ~0ULL;
            return fault(s, "verify", op->a, op->n);
        }
        return CUDA_SUCCESS;
    case OP_SET:
        if (!for_each_device_chunk(op->a, op->n, chunk_set, op))
            return fault(s, "memset", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_COPY:
        if (!copy_range(op->a, op->b, op->n))
            return fault(s, "memcpy", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_GEMM:
        return run_gemm(s, op->data);
    case OP_KERNEL:
        return run_kernel(s, op->data);
    case OP_SET2D:
        return run_set2d(s, op);
    case OP_COPY3D:
        return run_copy3d(s, op->data);
    case OP_NOP:
        return CUDA_SUCCESS;
    case OP_FREE: {
        pthread_mutex_lock(&g.lock);
        struct vram_device *d;
        long first = alloc_first_page(op->a, &d);
        if (first >= 0)
            release_alloc(d, first);
        pthread_mutex_unlock(&g.lock);
        fg_log("STREAM_FREE ptr=%#llx", op->a);
        return CUDA_SUCCESS;
    }
    case OP_EVENT: {
        /* The time the record completed, taken on the stream, after the work before it. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        pthread_mutex_lock(&g.lock);
        if (op->ev->seq == op->ev_seq)
            op->ev->pending = 0;
        if (op->ev_seq > op->ev->done_seq) {
            op->ev->done_seq = op->ev_seq;
            op->ev->done_at = now;
        }
        for (int i = 0; i < op->ev->noutstanding; i++)
            if (op->ev->outstanding[i] == op->ev_seq) {
                op->ev->outstanding[i] = op->ev->outstanding[--op->ev->noutstanding];
                break;
            }
        if (op->ev->destroyed && !op->ev->pending && op->ev->noutstanding == 0) {
            op->ev->magic = 0;
            free(op->ev);
        }
        pthread_cond_broadcast(&g.cv);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    }
    case OP_WAIT_EVENT:
        pthread_mutex_lock(&g.lock);
        while (op->ev->magic == EVENT_MAGIC && event_outstanding(op->ev, op->ev_seq))
            pthread_cond_wait(&g.cv, &g.lock);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    case OP_HOSTFN:
        in_host_callback = 1;
        op->fn(op->data);
        in_host_callback = 0;
        return CUDA_SUCCESS;
    case OP_CALLBACK:
        in_host_callback = 1;
        op->cb(s, CUDA_SUCCESS, op->data);
        in_host_callback = 0;
        return CUDA_SUCCESS;
    case OP_WORK:
        op->fn(op->data);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_UNKNOWN;
}

/* ------------------------------------------------------------------ streams */

int stream_valid(CUstream s)
{
    for (struct fake_stream *x = g.streams; x; x = x->next)
        if (x == s && !x->destroyed)
            return 1;
    return 0;
}

static int stream_idle(struct fake_stream *s) { return !s->head && !s->running; }

static void *stream_worker(void *arg)
{
    struct fake_stream *s = arg;
    pthread_mutex_lock(&g.lock);
    for (;;) {
        if (s->held && s->head) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            if (now.tv_sec > s->hold_deadline.tv_sec ||
                (now.tv_sec == s->hold_deadline.tv_sec && now.tv_nsec >= s->hold_deadline.tv_nsec)) {
                s->held = 0;
                pthread_mutex_unlock(&g.lock);
                fg_note_fault("HOLD_TIMEOUT: a stream held by the test was never released "
                              "(something waited on held work)");
                pthread_mutex_lock(&g.lock);
                continue;
            }
            pthread_cond_timedwait(&g.cv, &g.lock, &s->hold_deadline);
            continue;
        }
        if (!s->head) {
            if (s->destroyed)
                break;
            pthread_cond_wait(&g.cv, &g.lock);
            continue;
        }
        struct op *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&g.lock);
        run_op(s, op);
        free(op);
        pthread_mutex_lock(&g.lock);
        s->running = 0;
        pthread_cond_broadcast(&g.cv);
    }
    struct fake_stream **pp = &g.streams;
    while (*pp != s)
        pp = &(*pp)->next;
    *pp = s->next;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    s->magic = 0;
    free(s);
    return NULL;
}

CUresult fg_stream_create(CUstream *out, unsigned flags) { return fg_stream_create_with_priority(out, flags, 0); }

/* The priority is clamped to the device's range, as the driver does; the fake's streams
 * all run at once, so it is only recorded. */
CUresult fg_stream_create_with_priority(CUstream *out, unsigned flags, int priority)
{
    if (!out || (flags & ~1u))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_stream *s = calloc(1, sizeof *s);
    s->magic = STREAM_MAGIC;
    s->flags = flags;
    s->priority = priority > FG_PRIORITY_LEAST ? FG_PRIORITY_LEAST
                : priority < FG_PRIORITY_GREATEST ? FG_PRIORITY_GREATEST : priority;
    pthread_mutex_lock(&g.lock);
    if (pthread_create(&s->worker, NULL, stream_worker, s)) {
        pthread_mutex_unlock(&g.lock);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_detach(s->worker);
    s->next = g.streams;
    g.streams = s;
    pthread_mutex_unlock(&g.lock);
    *out = s;
    return CUDA_SUCCESS;
}

CUresult fg_stream_get_priority(CUstream s, int *priority)
{
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_default_stream(s)) {
        *priority = FG_PRIORITY_LEAST;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g.lock);
    int ok = stream_valid(s);
    if (ok)
        *priority = s->priority;
    pthread_mutex_unlock(&g.lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

int fg_stream_usable(CUstream s)
{
    if (is_default_stream(s))
        return 1;
    pthread_mutex_lock(&g.lock);
    int ok = stream_valid(s);
    pthread_mutex_unlock(&g.lock);
    return ok;
}

CUresult fg_stream_destroy(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (is_default_stream(s) || !stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* Pending work still completes; the worker frees the stream afterwards. */
    s->destroyed = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

/* Work on a default stream runs now, in the caller; other streams queue it. */
/* Runs `work` now on a default stream, else queues a copy of it on `s`. */
/* On a capturing stream the work becomes a node of the capture's graph instead. The op
 * owns its data (freed once run, captured or refused). */
CUresult enqueue(CUstream s, struct op work)
{
    if (!work.path)
        work.path = fg_entry;
    if (is_default_stream(s))
        return run_op(NULL, &work);
    struct op *op = malloc(sizeof *op);
    if (!op) {
        op_free_data(&work);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *op = work;
    pthread_mutex_lock(&g.lock);
    if (!stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        op_free_data(op);
        free(op);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s->capture) {
        CUresult rc = capture_op_locked(s, op);
        pthread_mutex_unlock(&g.lock);
        free(op);
        return rc;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_enqueue_work(CUstream s, void (*fn)(void *data), void *data)
{
    return enqueue(s, (struct op){ .kind = OP_WORK, .fn = fn, .data = data });
}

void fg_wait_idle_locked(void) { wait_all_streams_idle(); }

/* Lock held. */
void wait_all_streams_idle(void)
{
    for (;;) {
        int busy = 0;
        for (struct fake_stream *x = g.streams; x; x = x->next)
            if (!stream_idle(x))
                busy = 1;
        if (!busy)
            return;
        pthread_cond_wait(&g.cv, &g.lock);
    }
}

CUresult fg_stream_sync(CUstream s)
{
    if (is_default_stream(s))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    if (!stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s->capture) { /* synchronising a capturing stream is not permitted: it breaks the capture */
        capture_invalidate_locked(s);
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    while (!stream_idle(s))
        pthread_cond_wait(&g.cv, &g.lock);
    CUresult rc = s->err;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_stream_query(CUstream s)
{
    if (is_default_stream(s))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    CUresult rc = !stream_valid(s) ? CUDA_ERROR_INVALID_HANDLE
                : s->err ? s->err : stream_idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_ctx_sync(void)
{
    pthread_mutex_lock(&g.lock);
    wait_all_streams_idle();
    CUresult rc = CUDA_SUCCESS;
    for (struct fake_stream *x = g.streams; x; x = x->next)
        if (x->err)
            rc = x->err;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

void fakegpu_stream_hold(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!is_default_stream(s) && stream_valid(s)) {
        s->held = 1;
        clock_gettime(CLOCK_REALTIME, &s->hold_deadline);
        s->hold_deadline.tv_sec += g.hold_timeout_s;
    }
    pthread_mutex_unlock(&g.lock);
}

void fakegpu_stream_release(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!is_default_stream(s) && stream_valid(s))
        s->held = 0;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
}

/* ------------------------------------------------------------------ events */

CUresult fg_event_create(CUevent *out, unsigned flags)
{
    if (!out || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = EVENT_MAGIC;
    e->flags = flags;
    *out = e;
    return CUDA_SUCCESS;
}

static int event_valid(CUevent e) { return e && e->magic == EVENT_MAGIC && !e->destroyed; }

CUresult fg_event_destroy(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    e->destroyed = 1;
    if (!e->pending && e->noutstanding == 0) {
        e->magic = 0;
        free(e);
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_event_record(CUevent e, CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (e->noutstanding == EVENT_OUTSTANDING_MAX) {
        pthread_mutex_unlock(&g.lock);
        fg_note_fault("EVENT_OUTSTANDING: more queued records of one event than the fake tracks");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    e->seq++;
    e->pending = 1;
    uint64_t seq = e->seq;
    e->outstanding[e->noutstanding++] = seq;
    pthread_mutex_unlock(&g.lock);
    return enqueue(s, (struct op){ .kind = OP_EVENT, .ev = e, .ev_seq = seq });
}

CUresult fg_event_query(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    CUresult rc = !event_valid(e) ? CUDA_ERROR_INVALID_HANDLE : e->pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_event_sync(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    while (e->pending)
        pthread_cond_wait(&g.cv, &g.lock);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

/* As the driver answers: a handle that is not a live event, one created with
 * CU_EVENT_DISABLE_TIMING or never recorded is an invalid handle; a record still queued
 * is not ready. The time is between the two latest completed records (negative when end
 * completed first). */
CUresult fg_event_elapsed(float *ms, CUevent start, CUevent end)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    CUresult rc = CUDA_SUCCESS;
    if (!event_valid(start) || !event_valid(end) || ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) ||
        !start->seq || !end->seq)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (start->pending || end->pending)
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((double)(end->done_at.tv_sec - start->done_at.tv_sec) * 1e3 +
                      (double)(end->done_at.tv_nsec - start->done_at.tv_nsec) / 1e6);
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* The wait is for the record current now (none: nothing to wait for). */
    uint64_t seq = e->pending ? e->seq : 0;
    pthread_mutex_unlock(&g.lock);
    if (is_default_stream(s)) {
        /* The default stream waits in the caller. */
        pthread_mutex_lock(&g.lock);
        while (seq && event_outstanding(e, seq))
            pthread_cond_wait(&g.cv, &g.lock);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    }
    return enqueue(s, (struct op){ .kind = OP_WAIT_EVENT, .ev = e, .ev_seq = seq });
}

CUresult fg_launch_host_fn(CUstream s, CUhostFn fn, void *data)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_HOSTFN, .fn = fn, .data = data });
}

CUresult fg_stream_add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_CALLBACK, .cb = cb, .data = data });
}
