/* libfakegpu.so: the fake GPU's access to memory. Device pointers resolved to the views
 * kernels and copies read and write, the test pattern, faults for everything else. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ fake GPU access */

/* What the device sees at address p: its view of the memory and how many bytes are
 * contiguous there; NULL when p is not device-accessible. Lock held. */
unsigned char *device_view(uintptr_t p, size_t *contiguous, const char **kind)
{
    struct vram_device *d = device_at(p);
    if (d) {
        size_t i = (p - d->vram_va) / PAGE;
        if (!d->page_used[i])
            return NULL;
        size_t end = i;
        while (end < d->npages && d->page_used[end])
            end++;
        *contiguous = d->vram_va + end * PAGE - p;
        *kind = "vram";
        return d->vram_view + (p - d->vram_va);
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (p >= m->va && p < m->va + m->size) {
            if (!m->dev_access)
                return NULL; /* mapped but no cuMemSetAccess for the device */
            *contiguous = m->va + m->size - p;
            *kind = m->h->host ? "vmm-host" : "vmm-device";
            return m->h->view + (p - m->va);
        }
    /* Managed memory: its data is always at the host address, wherever it is resident. */
    uintptr_t mbase;
    size_t msize;
    if (fg_managed_range_locked(p, &mbase, &msize)) {
        *contiguous = mbase + msize - p;
        *kind = "managed";
        return (unsigned char *)p;
    }
    struct hostreg *r = reg_containing(p);
    if (r) {
        *contiguous = r->base + r->size - p;
        *kind = "hostreg";
        return (unsigned char *)p;
    }
    return NULL;
}

/* Checks that [p, p+n) is all device-accessible. Lock held. */
int device_range_ok(uintptr_t p, size_t n)
{
    while (n) {
        size_t c;
        const char *k;
        if (!device_view(p, &c, &k))
            return 0;
        if (c > n)
            c = n;
        p += c;
        n -= c;
    }
    return 1;
}

const char *fakegpu_ptr_kind(CUdeviceptr p)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t c;
    const char *k = "none";
    if (!device_view(p, &c, &k))
        k = "none";
    pthread_mutex_unlock(&g.lock);
    return k;
}

static inline uint64_t pattern_word(uint32_t seed, uint64_t idx)
{
    uint64_t x = idx * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)seed << 32 | seed) * 0xD1B54A32D192ED03ULL;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 29);
}

/* Pattern of the bytes [off, off+n) of a buffer filled with `seed`. */
static void pattern_fill_at(unsigned char *p, uint64_t off, size_t n, uint32_t seed)
{
    while (n) {
        if ((off & 7) == 0 && n >= 8 && ((uintptr_t)p & 7) == 0) {
            *(uint64_t *)p = pattern_word(seed, off >> 3);
            p += 8; off += 8; n -= 8;
        } else {
            *p++ = (unsigned char)(pattern_word(seed, off >> 3) >> ((off & 7) * 8));
            off++; n--;
        }
    }
}

static unsigned long long pattern_check_at(const unsigned char *p, uint64_t off, size_t n, uint32_t seed)
{
    unsigned long long bad = 0;
    while (n) {
        if ((off & 7) == 0 && n >= 8 && ((uintptr_t)p & 7) == 0) {
            bad += *(const uint64_t *)p != pattern_word(seed, off >> 3);
            p += 8; off += 8; n -= 8;
        } else {
            bad += *p++ != (unsigned char)(pattern_word(seed, off >> 3) >> ((off & 7) * 8));
            off++; n--;
        }
    }
    return bad;
}

void fakegpu_pattern_fill(void *p, size_t n, uint32_t seed) { pattern_fill_at(p, 0, n, seed); }
unsigned long long fakegpu_pattern_check(const void *p, size_t n, uint32_t seed)
{
    return pattern_check_at(p, 0, n, seed);
}

/* Resolves [p, p+n) as a device range; NULL if any part is not device-accessible.
 * For host (non-device) pointers of a memcpy, `host_ok` lets plain host memory through. */

int for_each_device_chunk(uintptr_t p, size_t n, chunk_fn fn, struct op *op)
{
    pthread_mutex_lock(&g.lock);
    int ok = device_range_ok(p, n);
    pthread_mutex_unlock(&g.lock);
    if (!ok)
        return 0;
    uint64_t off = 0;
    while (off < n) {
        size_t c;
        const char *k;
        pthread_mutex_lock(&g.lock);
        unsigned char *v = device_view(p + off, &c, &k);
        pthread_mutex_unlock(&g.lock);
        if (!v)
            return 0;
        if (c > n - off)
            c = n - off;
        fn(v, off, c, op);
        off += c;
    }
    return 1;
}

void chunk_fill(unsigned char *v, uint64_t off, size_t n, struct op *op) { pattern_fill_at(v, off, n, op->seed); }
void chunk_verify(unsigned char *v, uint64_t off, size_t n, struct op *op)
{
    op->n = op->n; /* unchanged */
    *op->result += pattern_check_at(v, off, n, op->seed);
}
void chunk_set(unsigned char *v, uint64_t off, size_t n, struct op *op) { (void)off; memset(v, (int)op->seed, n); }

/* A pointer in the device's address ranges (VRAM, VMM) must be device-accessible;
 * anything else is host memory, which a copy engine reaches directly. Lock held. */
int is_device_address(uintptr_t p)
{
    if (device_at(p))
        return 1;
    return p >= g.vmm_va && p < g.vmm_va + VMM_VA_SPACE;
}

int copy_range(uintptr_t dst, uintptr_t src, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t cd = n - off, cs = n - off, c;
        const char *k;
        unsigned char *vd, *vs;
        pthread_mutex_lock(&g.lock);
        if (is_device_address(dst + off)) {
            vd = device_view(dst + off, &cd, &k);
        } else {
            vd = (unsigned char *)(dst + off);
        }
        if (is_device_address(src + off)) {
            vs = device_view(src + off, &cs, &k);
        } else {
            vs = (unsigned char *)(src + off);
        }
        pthread_mutex_unlock(&g.lock);
        if (!vd || !vs)
            return 0;
        c = n - off;
        if (cd < c) c = cd;
        if (cs < c) c = cs;
        memmove(vd, vs, c);
        off += c;
    }
    return 1;
}

/* Records an illegal access (sticky on a created stream, as the driver's are) and
 * returns the error a synchronous caller sees. */
CUresult fault(struct fake_stream *s, const char *what, uintptr_t p, size_t n)
{
    char msg[160];
    snprintf(msg, sizeof msg, "ILLEGAL_ADDRESS %s ptr=%#lx size=%zu", what, (unsigned long)p, n);
    fg_note_fault(msg);
    if (s) {
        pthread_mutex_lock(&g.lock);
        s->err = CUDA_ERROR_ILLEGAL_ADDRESS;
        pthread_mutex_unlock(&g.lock);
    }
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}
