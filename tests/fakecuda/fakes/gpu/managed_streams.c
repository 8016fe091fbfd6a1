/* Managed memory's calls that go through the device's streams (part of libfakegpu.so,
 * beside managed.c, the model they act on): cuMemFree of managed memory, which waits for
 * every stream as cuMemFree of device memory does, and cuMemPrefetchAsync, whose move
 * runs when its stream reaches it. Apart from managed.c so that the model stays below
 * the streams: the fake GPU's access, which the streams' work uses, looks allocations up
 * in it. */
#define _GNU_SOURCE
#include "managed_state.h"

#include <stdlib.h>
#include <unistd.h>

/* ------------------------------------------------------------------ free */

int fg_managed_free(CUdeviceptr p, CUresult *rc)
{
    fg_lock();
    struct managed *a = managed_containing(p);
    if (!a) {
        fg_unlock();
        return 0;
    }
    *rc = CUDA_ERROR_INVALID_VALUE;
    if (a->base != p) {
        fg_unlock();
        return 1;
    }
    /* cuMemFree synchronises with the device, as for device memory; another thread may
     * have freed it meanwhile. */
    fg_wait_idle_locked();
    if (!(a = managed_unlink_locked(p))) {
        fg_unlock();
        return 1;
    }
    fg_unlock();
    managed_unmap(a);
    *rc = CUDA_SUCCESS;
    return 1;
}

/* ------------------------------------------------------------------ prefetch */

struct prefetch { uintptr_t p; size_t n; int where; };

/* The prefetch, when its stream reaches it. The memory cannot have been freed since it
 * was queued (cuMemFree waits for every stream), but a look-up costs nothing. Once the
 * device has no VRAM for a page it has none for the rest either (nothing frees VRAM
 * while the lock is held), so the rest stays where it is without a search each. */
static void run_prefetch(void *data)
{
    struct prefetch *pf = data;
    size_t first, last;
    /* FAKECUDA_PREFETCH_DELAY_US: the copy's duration, on the stream, before the move. */
    const char *delay = getenv("FAKECUDA_PREFETCH_DELAY_US");
    if (delay)
        usleep((useconds_t)strtoul(delay, NULL, 0));
    fg_lock();
    struct managed *a = managed_range_pages(pf->p, pf->n, &first, &last);
    for (size_t i = first; a && i <= last; i++)
        if (!managed_move_page(a, &a->pages[i], pf->where))
            break;
    fg_unlock();
    free(pf);
}

/* FAKECUDA_PREFETCH_HOST_CALL_US: how long a prefetch to the host takes inside the call,
 * as the real driver migrates to the host in the calling thread; the most such calls in
 * progress at once is counted as "prefetch:host_calls_at_once". */
static void host_prefetch_call_time(void)
{
    static int in_call;
    const char *delay = getenv("FAKECUDA_PREFETCH_HOST_CALL_US");
    if (!delay)
        return;
    int now = __atomic_add_fetch(&in_call, 1, __ATOMIC_SEQ_CST);
    count_most("prefetch:host_calls_at_once", (unsigned long long)now);
    usleep((useconds_t)strtoul(delay, NULL, 0));
    __atomic_sub_fetch(&in_call, 1, __ATOMIC_SEQ_CST);
}

CUresult fg_managed_prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    size_t first, last;
    fg_lock();
    int ok = managed_range_pages(p, n, &first, &last) != NULL;
    fg_unlock();
    if (!ok || flags)
        return CUDA_ERROR_INVALID_VALUE;
    int where;
    CUresult rc = managed_location(loc, &where);
    if (rc)
        return rc;
    if (!fg_stream_usable(s))
        return CUDA_ERROR_INVALID_HANDLE;
    struct prefetch *pf = malloc(sizeof *pf);
    if (!pf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pf = (struct prefetch){ p, n, where };
    /* The last prefetch location is what was asked for, whether or not it has run. */
    fg_lock();
    struct managed *a = managed_range_pages(p, n, &first, &last);
    for (size_t i = first; a && i <= last; i++)
        a->pages[i].last_prefetch = (signed char)where;
    fg_unlock();
    if (where == ON_HOST)
        host_prefetch_call_time();
    rc = fg_enqueue_work(s, run_prefetch, pf);
    if (rc)
        free(pf);
    return rc;
}
