/* libfakegpu.so: VRAM. Each device's page allocator, cuMemAlloc and cuMemFree (also
 * stream-ordered), the FAKECUDA_DEVICE_SHARE counter, memory info. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ VRAM */

/* Counts `bytes` more VRAM in use on the shared device, unless every process's VRAM
 * together would then pass its size. Caller holds the lock. */
static int share_take(struct vram_device *d, uint64_t bytes)
{
    if (!d->share)
        return 1;
    uint64_t used = __atomic_load_n(d->share, __ATOMIC_SEQ_CST);
    do {
        if (used > d->vram || bytes > d->vram - used)
            return 0;
    } while (!__atomic_compare_exchange_n(d->share, &used, used + bytes, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return 1;
}

static void share_give(struct vram_device *d, uint64_t bytes)
{
    if (d->share)
        __atomic_sub_fetch(d->share, bytes, __ATOMIC_SEQ_CST);
}

/* VRAM in use on the device: every process's (FAKECUDA_DEVICE_SHARE), else this
 * process's. Lock held. */
size_t device_used(struct vram_device *d)
{
    if (!d->share)
        return d->vram_used;
    uint64_t used = __atomic_load_n(d->share, __ATOMIC_SEQ_CST);
    return used < d->vram ? (size_t)used : d->vram;
}

/* First fit over pages; caller holds the lock. */
int vram_take(struct vram_device *d, size_t bytes, size_t *first)
{
    size_t need = (bytes + PAGE - 1) / PAGE, run = 0;
    for (size_t i = 0; i < d->npages; i++) {
        run = d->page_used[i] ? 0 : run + 1;
        if (run == need) {
            if (!share_take(d, need * PAGE))
                return 0; /* other processes hold the rest of the device */
            size_t s = i + 1 - need;
            memset(d->page_used + s, 1, need);
            d->vram_used += need * PAGE;
            *first = s;
            return 1;
        }
    }
    return 0;
}

void vram_give(struct vram_device *d, size_t first, size_t npages)
{
    memset(d->page_used + first, 0, npages);
    /* Freed VRAM is scrubbed so that stale data cannot make a test pass. */
    memset(d->vram_view + first * PAGE, 0x5a, npages * PAGE);
    d->vram_used -= npages * PAGE;
    share_give(d, npages * PAGE);
}

void fg_lock(void) { pthread_mutex_lock(&g.lock); }
void fg_unlock(void) { pthread_mutex_unlock(&g.lock); }

int fg_vram_take_locked(CUdevice device, size_t bytes, size_t *first)
{
    return fg_device_valid(device) && vram_take(&g.dev[device], bytes, first);
}

void fg_vram_give_locked(CUdevice device, size_t first, size_t bytes)
{
    vram_give(&g.dev[device], first, (bytes + PAGE - 1) / PAGE);
}

void fg_mem_info(CUdevice device, size_t *free_bytes, size_t *total)
{
    ensure_setup();
    struct vram_device *d = &g.dev[device];
    pthread_mutex_lock(&g.lock);
    if (free_bytes)
        *free_bytes = d->vram - device_used(d);
    if (total)
        *total = d->vram;
    pthread_mutex_unlock(&g.lock);
}

/* On the device of the calling thread's current context. */
static CUresult alloc_vram(CUdeviceptr *p, size_t n)
{
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vram_device *d = &g.dev[fg_current_device()];
    pthread_mutex_lock(&g.lock);
    size_t first;
    if (!vram_take(d, n, &first)) {
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

/* The device whose VRAM address range holds p, or NULL. */
struct vram_device *device_at(uintptr_t p)
{
    for (int i = 0; i < g.ndevices; i++)
        if (p >= g.dev[i].vram_va && p < g.dev[i].vram_va + g.dev[i].vram)
            return &g.dev[i];
    return NULL;
}

/* The first page of a live allocation that starts exactly at p, or -1; *dp: its device.
 * Lock held. */
long alloc_first_page(CUdeviceptr p, struct vram_device **dp)
{
    struct vram_device *d = device_at(p);
    *dp = d;
    if (!d || (p - d->vram_va) % PAGE)
        return -1;
    size_t i = (p - d->vram_va) / PAGE;
    return d->alloc_pages[i] ? (long)i : -1;
}

void release_alloc(struct vram_device *d, size_t first)
{
    size_t np = d->alloc_pages[first];
    d->alloc_pages[first] = 0;
    d->free_pending[first] = 0;
    vram_give(d, first, np);
}


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
