/* libfakegpu.so: VRAM pages. Each device's page allocator, the FAKECUDA_DEVICE_SHARE
 * counter, memory info, which device an address is on and the live allocation starting
 * at it. Below the streams and managed memory, which take and give pages here; the
 * allocation calls are fakegpu_alloc.c's. */
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
