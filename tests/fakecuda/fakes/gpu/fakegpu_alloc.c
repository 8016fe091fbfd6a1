/* libfakegpu.so: the allocation calls. cuMemAlloc and cuMemFree (also stream-ordered),
 * the allocation holding an address, the default memory pool. Above the streams (a free
 * waits for them or is queued on one) and managed memory (cuMemFree and the address
 * range take managed pointers too), on fakegpu_vram.c's pages. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* On the device of the calling thread's current context. */
static CUresult alloc_vram(CUdeviceptr *p, size_t n)
{
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vram_device *d = &g.dev[fg_current_device()];
    pthread_mutex_lock(&g.lock);
    size_t first;
    if (!vram_take(d, n, KEPT_WHEN_SHORT, &first)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->alloc_pages[first] = (n + PAGE - 1) / PAGE;
    d->free_pending[first] = 0;
    pthread_mutex_unlock(&g.lock);
    *p = d->vram_va + first * PAGE;
    return CUDA_SUCCESS;
}

CUresult fg_mem_alloc(CUdeviceptr *p, size_t n) { return alloc_vram(p, n); }

CUresult fg_mem_free(CUdeviceptr p)
{
    if (p == 0)
        return CUDA_SUCCESS;
    CUresult managed_rc;
    if (fg_managed_free(p, &managed_rc))
        return managed_rc;
    /* cuMemFree synchronises with the device before freeing. */
    pthread_mutex_lock(&g.lock);
    struct vram_device *d;
    long first = alloc_first_page(p, &d);
    if (first < 0 || d->free_pending[first]) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    wait_all_streams_idle();
    first = alloc_first_page(p, &d);
    if (first < 0) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    release_alloc(d, first);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_mem_address_range(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
    uintptr_t b = 0;
    size_t n = 0;
    pthread_mutex_lock(&g.lock);
    int found = fg_managed_range_locked(p, &b, &n);
    struct vram_device *d = device_at(p);
    if (!found && d) {
        /* The allocation whose pages run from its first page through p's. Pages that
         * managed memory holds are used but start no allocation. */
        size_t i = (p - d->vram_va) / PAGE;
        for (size_t j = i + 1; j-- > 0 && d->page_used[j];)
            if (d->alloc_pages[j]) {
                found = j + d->alloc_pages[j] > i;
                b = d->vram_va + j * PAGE;
                n = (size_t)d->alloc_pages[j] * PAGE;
                break;
            }
    }
    for (struct vmm_mapping *m = g.mappings; m && !found; m = m->next)
        if (p >= m->va && p < m->va + m->size) {
            found = 1;
            b = m->va;
            n = m->size;
        }
    pthread_mutex_unlock(&g.lock);
    if (!found)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = b;
    if (size)
        *size = n;
    return CUDA_SUCCESS;
}

CUresult fg_mem_alloc_async(CUdeviceptr *p, size_t n, CUstream s)
{
    if (!is_default_stream(s)) {
        pthread_mutex_lock(&g.lock);
        int ok = stream_valid(s);
        pthread_mutex_unlock(&g.lock);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
    }
    return alloc_vram(p, n);
}

CUresult fg_mem_free_async(CUdeviceptr p, CUstream s)
{
    if (p == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct vram_device *d;
    long first = alloc_first_page(p, &d);
    if (first < 0 || d->free_pending[first] || (!is_default_stream(s) && !stream_valid(s))) {
        pthread_mutex_unlock(&g.lock);
        return first < 0 || d->free_pending[first] ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    d->free_pending[first] = 1;
    pthread_mutex_unlock(&g.lock);
    return enqueue(s, (struct op){ .kind = OP_FREE, .a = p });
}

CUmemoryPool fg_default_pool(void) { return &g.pool; }
int fg_pool_valid(CUmemoryPool pool) { return pool == &g.pool; }
