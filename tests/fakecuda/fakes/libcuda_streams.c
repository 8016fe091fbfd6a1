/* Fake libcuda.so.1 (see libcuda.c): streams, stream callbacks and events over the
 * simulated device. */
#define _GNU_SOURCE
#include "libcuda_entry.h"

/* ------------------------------------------------------------------ streams, events */

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_create(s, flags);
}
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
    GATE(1, 1);
    CUresult rc = fg_stream_create_with_priority(s, flags, prio);
    fg_log("cuStreamCreateWithPriority flags=%u priority=%d -> %d stream=%p", flags, prio, rc, rc ? NULL : (void *)*s);
    return rc;
}
EXPORT CUresult cuStreamGetPriority(CUstream s, int *prio)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    CUresult rc = fg_stream_get_priority(s, prio);
    fg_log("cuStreamGetPriority stream=%p -> %d priority=%d", (void *)s, rc, rc ? 0 : *prio);
    return rc;
}
EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int *prio)
{
    GATE(1, 1);
    return cuStreamGetPriority(s ? s : CU_STREAM_PER_THREAD, prio);
}
/* Either pointer may be NULL, as in CUDA. */
EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    GATE(1, 1);
    if (least)
        *least = FG_PRIORITY_LEAST;
    if (greatest)
        *greatest = FG_PRIORITY_GREATEST;
    fg_log("cuCtxGetStreamPriorityRange -> 0 least=%d greatest=%d", FG_PRIORITY_LEAST, FG_PRIORITY_GREATEST);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    return fg_stream_destroy(s);
}
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    CUresult rc = fg_stream_sync(s);
    fg_log("cuStreamSynchronize stream=%p -> %d", (void *)s, rc);
    return rc;
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
    GATE(1, 1);
    return fg_stream_sync(s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuStreamQuery(CUstream s)
{
    GATE(1, is_default_stream(s)); /* a created stream carries its context */
    return fg_stream_query(s);
}
EXPORT CUresult cuStreamQuery_ptsz(CUstream s)
{
    GATE(1, 1);
    return fg_stream_query(s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status)
{
    GATE(1, 0);
    return fg_stream_is_capturing(s, status);
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_wait_event(s, e, flags);
}
EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_wait_event(s ? s : CU_STREAM_PER_THREAD, e, flags);
}
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_add_callback(s, cb, data, flags);
}
EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    GATE(1, 1);
    return fg_stream_add_callback(s ? s : CU_STREAM_PER_THREAD, cb, data, flags);
}
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    GATE(1, 1);
    return fg_launch_host_fn(s, fn, data);
}
EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
    GATE(1, 1);
    return fg_launch_host_fn(s ? s : CU_STREAM_PER_THREAD, fn, data);
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    GATE(1, 1);
    return fg_event_create(e, flags);
}
EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_destroy(e);
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    GATE(1, 1);
    return fg_event_record(e, s);
}
EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
    GATE(1, 1);
    return fg_event_record(e, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuEventQuery(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_query(e);
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    GATE(1, 0); /* the event carries its context */
    return fg_event_sync(e);
}
/* CUDA 12.8 added _v2 with the same signature (cuGetProcAddress gives it from 12.8 on);
 * the fake's timing is the same for both. */
static CUresult event_elapsed(const char *name, float *ms, CUevent start, CUevent end)
{
    CUresult rc = fg_event_elapsed(ms, start, end);
    fg_log("%s start=%p end=%p -> %d ms=%.3f", name, (void *)start, (void *)end, rc, rc ? 0.0 : (double)*ms);
    return rc;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    GATE(1, 0); /* the events carry their context */
    return event_elapsed(__func__, ms, start, end);
}
EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    GATE(1, 0); /* the events carry their context */
    return event_elapsed(__func__, ms, start, end);
}
