/* libfakegpu.so: VRAM pages. Each device's page allocator, the FAKECUDA_DEVICE_SHARE
 * counter, the VRAM the driver keeps for managed memory (FAKECUDA_MANAGED_KEEPS_VRAM),
 * memory info, which device an address is on and the live allocation starting at it.
 * Below the streams and managed memory, which take and give pages here; the allocation
 * calls are fakegpu_alloc.c's. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ VRAM */

/* Kept VRAM (FAKECUDA_MANAGED_KEEPS_VRAM): what managed pages left on a device, still
 * counted in use there (free VRAM does not rise) though no page holds it, until an
 * allocation that finds too little free VRAM takes it, or the allocation it was left by
 * is freed, or the process exits. Without a share file d->kept is the device's kept
 * VRAM; with one, share[1] is every process's (inside share[0]) and d->kept what this
 * process left there and did not drop (another process may have taken some of it). */

/* Takes up to `want` bytes of the device's kept VRAM for an allocation; returns how
 * much (already counted in use: the allocation counts only the rest). Lock held. */
static uint64_t kept_claim(struct vram_device *d, uint64_t want)
{
    if (!d->share) {
        uint64_t c = want < d->kept ? want : d->kept;
        d->kept -= c;
        return c;
    }
    uint64_t k = __atomic_load_n(d->share + 1, __ATOMIC_SEQ_CST), c;
    do {
        c = want < k ? want : k;
    } while (c && !__atomic_compare_exchange_n(d->share + 1, &k, k - c, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return c;
}

/* FAKECUDA_KEPT_CLAIM_US: how long an allocation that takes kept VRAM waits for it (the
 * driver evicting the chunks), lock held: every call of this process waits too. */
static void kept_claim_wait(void)
{
    static long us = -1;
    if (us < 0) {
        const char *v = getenv("FAKECUDA_KEPT_CLAIM_US");
        us = v ? atol(v) : 0;
    }
    if (us > 0)
        usleep((useconds_t)us);
}

static void kept_unclaim(struct vram_device *d, uint64_t c)
{
    if (!d->share)
        d->kept += c;
    else if (c)
        __atomic_add_fetch(d->share + 1, c, __ATOMIC_SEQ_CST);
}

/* Counts `bytes` more VRAM in use on the device, `reused` of them kept VRAM taken by
 * kept_claim (counted already), unless every process's VRAM together would then pass its
 * size. Caller holds the lock. */
static int share_take(struct vram_device *d, uint64_t bytes, uint64_t reused)
{
    if (!d->share)
        return d->vram_used + d->kept + bytes <= d->vram; /* d->kept less what was reused */
    bytes -= reused;
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
 * process's; kept VRAM included. Lock held. */
size_t device_used(struct vram_device *d)
{
    if (!d->share)
        return d->vram_used + d->kept;
    uint64_t used = __atomic_load_n(d->share, __ATOMIC_SEQ_CST);
    return used < d->vram ? (size_t)used : d->vram;
}

/* First fit over pages; caller holds the lock. With KEPT_WHEN_SHORT, kept VRAM goes first
 * when the device has too little free: the driver gives what managed memory left it to
 * whoever asks, an allocation or a managed page moving in. With KEPT_ONLY the pages are
 * kept VRAM or nothing: a managed page moving back into the chunk it left. */
int vram_take(struct vram_device *d, size_t bytes, int reuse_kept, size_t *first)
{
    size_t need = (bytes + PAGE - 1) / PAGE, run = 0;
    for (size_t i = 0; i < d->npages; i++) {
        run = d->page_used[i] ? 0 : run + 1;
        if (run == need) {
            uint64_t reused = 0;
            if (reuse_kept == KEPT_ONLY) {
                reused = kept_claim(d, need * PAGE);
                if (reused < need * PAGE) {
                    kept_unclaim(d, reused);
                    return 0; /* another allocation took that chunk */
                }
                if (d->share)
                    d->kept -= reused < d->kept ? reused : d->kept; /* this process's own */
            } else if (d->vram - device_used(d) < need * PAGE) {
                reused = kept_claim(d, need * PAGE);
            }
            if (!share_take(d, need * PAGE, reused)) {
                kept_unclaim(d, reused);
                return 0; /* other processes hold the rest of the device */
            }
            if (reused)
                kept_claim_wait();
            size_t s = i + 1 - need;
            memset(d->page_used + s, 1, need);
            d->vram_used += need * PAGE;
            *first = s;
            return 1;
        }
    }
    return 0;
}

/* Frees pages of this process's allocator (scrubbed), not the device's count. */
static void pages_free(struct vram_device *d, size_t first, size_t npages)
{
    memset(d->page_used + first, 0, npages);
    /* Freed VRAM is scrubbed so that stale data cannot make a test pass. */
    memset(d->vram_view + first * PAGE, 0x5a, npages * PAGE);
    d->vram_used -= npages * PAGE;
}

void vram_give(struct vram_device *d, size_t first, size_t npages)
{
    pages_free(d, first, npages);
    share_give(d, npages * PAGE);
}

void fg_lock(void) { pthread_mutex_lock(&g.lock); }
void fg_unlock(void) { pthread_mutex_unlock(&g.lock); }

int fg_vram_take_locked(CUdevice device, size_t bytes, size_t *first)
{
    return fg_device_valid(device) && vram_take(&g.dev[device], bytes, KEPT_WHEN_SHORT, first);
}

int fg_vram_retake_kept_locked(CUdevice device, size_t bytes, size_t *first)
{
    return fg_device_valid(device) && g.managed_keeps_vram && vram_take(&g.dev[device], bytes, KEPT_ONLY, first);
}

void fg_vram_give_locked(CUdevice device, size_t first, size_t bytes)
{
    vram_give(&g.dev[device], first, (bytes + PAGE - 1) / PAGE);
}

int fg_vram_leave_locked(CUdevice device, size_t first, size_t bytes)
{
    struct vram_device *d = &g.dev[device];
    size_t npages = (bytes + PAGE - 1) / PAGE;
    if (!g.managed_keeps_vram) {
        vram_give(d, first, npages);
        return 0;
    }
    pages_free(d, first, npages);
    d->kept += npages * PAGE;
    if (d->share)
        __atomic_add_fetch(d->share + 1, (uint64_t)npages * PAGE, __ATOMIC_SEQ_CST);
    return 1;
}

void fg_vram_drop_kept_locked(CUdevice device, size_t bytes)
{
    struct vram_device *d = &g.dev[device];
    d->kept -= bytes < d->kept ? bytes : d->kept;
    if (!d->share || !bytes)
        return;
    /* No more than the device still keeps: another process may have taken some. */
    uint64_t k = __atomic_load_n(d->share + 1, __ATOMIC_SEQ_CST), x;
    do {
        x = bytes < k ? bytes : k;
    } while (x && !__atomic_compare_exchange_n(d->share + 1, &k, k - x, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    share_give(d, x);
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
