/* Managed (unified) memory of the simulated device: cuMemAllocManaged, cuMemAdvise,
 * cuMemPrefetchAsync, cuMemRangeGetAttribute (part of libfakegpu.so, beside fakegpu.c).
 *
 * The fake device has concurrentManagedAccess: the CPU may read and write managed memory
 * at any time, also while it is "on" a device. So the data always lives at one place,
 * host memory at the allocation's address (device pointer = host pointer, as under UVA),
 * and the fake GPU reaches it there (device_view). Residency is accounting only: each
 * 2 MiB page is resident on the host or on one device, and a page on a device takes
 * 2 MiB of that device's VRAM exactly as cuMemAlloc does (its page allocator and the
 * FAKECUDA_DEVICE_SHARE counter), so the device's free memory falls by it and other
 * allocations, of this process or another, can fail for lack of it. That is the part of
 * managed memory an interposer placing T2 memory sees.
 *
 * Only prefetches move pages; advice is recorded and moves nothing. A prefetch is
 * stream-ordered and a hint: a page that cannot get VRAM on the destination stays where
 * it is, and the prefetch still succeeds. Nothing is evicted: neither device work nor
 * other processes' allocations take a device's pages back to the host. The fake has no
 * copy timing model, so a prefetch takes no simulated time.
 *
 * FAKECUDA_MANAGED_KEEPS_VRAM=1: the VRAM a page leaves stays taken from the device (the
 * real driver's managed-memory allocator keeps the chunks), a page moving back takes the
 * chunk it left, any other move into VRAM takes fresh VRAM all the same while there is
 * any, and a move or an allocation that finds too little free VRAM takes the kept VRAM
 * (fakegpu_vram.c), as the driver evicts chunks that hold no data first
 * (managed_move_page). Freeing the allocation gives back what it left.
 *
 * All state here is under the device lock (fg_lock).
 *
 * This file is the model: the allocations and their pages, look-ups (which the fake
 * GPU's access uses), allocation, advice, page moves, range attributes and test
 * queries; it uses the device's VRAM pages only. The calls that go through the
 * device's streams (cuMemFree, which waits for them, and the stream-ordered prefetch)
 * are managed_streams.c's, above the streams; managed_state.h is what both share.
 */
#define _GNU_SOURCE
#include "managed_state.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static struct {
    struct managed *list;
    int live;
    size_t on_device[FG_MAX_DEVICES], on_host; /* bytes resident */
    unsigned long long moved_to_device, moved_to_host;
} m;

/* ------------------------------------------------------------------ lookup */

/* The live allocation holding p, or NULL. */
struct managed *managed_containing(uintptr_t p)
{
    for (struct managed *a = m.list; a; a = a->next)
        if (p >= a->base && p - a->base < a->size)
            return a;
    return NULL;
}

int fg_managed_range_locked(uintptr_t p, uintptr_t *base, size_t *size)
{
    struct managed *a = managed_containing(p);
    if (a && base)
        *base = a->base;
    if (a && size)
        *size = a->size;
    return a != NULL;
}

int fg_managed_contains(CUdeviceptr p)
{
    fg_lock();
    int found = managed_containing(p) != NULL;
    fg_unlock();
    return found;
}

/* The allocation that holds all of [p, p + n), n > 0, and the pages it spans; NULL when
 * no single live one does (CUDA_ERROR_INVALID_VALUE). */
struct managed *managed_range_pages(uintptr_t p, size_t n, size_t *first, size_t *last)
{
    struct managed *a = n ? managed_containing(p) : NULL;
    if (!a || n > a->size - (p - a->base))
        return NULL;
    *first = (p - a->base) / MANAGED_PAGE;
    *last = (p - a->base + n - 1) / MANAGED_PAGE;
    return a;
}

/* A CUmemLocation as the calls take it: *where ON_HOST or a device. The fake host has
 * one NUMA node, 0. */
CUresult managed_location(CUmemLocation loc, int *where)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!fg_device_valid(loc.id))
            return CUDA_ERROR_INVALID_DEVICE;
        *where = loc.id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (loc.id != 0)
            return CUDA_ERROR_INVALID_VALUE;
        /* fall through */
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *where = ON_HOST;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ allocate, unlink */

CUresult fg_managed_alloc(CUdeviceptr *p, size_t n, unsigned flags)
{
    if (!p || n == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    size_t len = (n + MANAGED_PAGE - 1) & ~(MANAGED_PAGE - 1);
    if (len < n || len + MANAGED_PAGE < len)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* One page of slack to align the start: the kernel aligns anonymous mappings to
     * 2 MiB only where it has transparent huge pages. */
    unsigned char *raw = mmap(NULL, len + MANAGED_PAGE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ((uintptr_t)raw + MANAGED_PAGE - 1) & ~(uintptr_t)(MANAGED_PAGE - 1);
    if (base > (uintptr_t)raw)
        munmap(raw, base - (uintptr_t)raw);
    if ((uintptr_t)raw + MANAGED_PAGE > base)
        munmap((void *)(base + len), (uintptr_t)raw + MANAGED_PAGE - base);
    struct managed *a = calloc(1, sizeof *a);
    struct mpage *pages = a ? calloc(len / MANAGED_PAGE, sizeof *pages) : NULL;
    if (!pages) {
        free(a);
        munmap((void *)base, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = base;
    a->size = n;
    a->npages = len / MANAGED_PAGE;
    a->flags = flags;
    a->pages = pages;
    for (size_t i = 0; i < a->npages; i++) {
        pages[i].where = ON_HOST;
        pages[i].preferred = pages[i].last_prefetch = pages[i].kept_on = NOWHERE;
    }
    fg_lock();
    a->next = m.list;
    m.list = a;
    m.live++;
    m.on_host += len;
    fg_unlock();
    *p = base;
    return CUDA_SUCCESS;
}

/* Lock held. Takes the allocation starting at base out of the list and gives back
 * its pages (VRAM or host) in the counts, and the VRAM its pages left that the devices
 * still keep; NULL when there is none (freed meanwhile).
 * managed_unmap then releases its memory, without the lock. */
struct managed *managed_unlink_locked(uintptr_t base)
{
    struct managed **pp = &m.list;
    while (*pp && (*pp)->base != base)
        pp = &(*pp)->next;
    struct managed *a = *pp;
    if (!a)
        return NULL;
    *pp = a->next;
    m.live--;
    for (size_t i = 0; i < a->npages; i++) {
        struct mpage *pg = &a->pages[i];
        if (pg->where >= 0) {
            fg_vram_give_locked(pg->where, pg->vram_first, MANAGED_PAGE);
            m.on_device[pg->where] -= MANAGED_PAGE;
        } else {
            m.on_host -= MANAGED_PAGE;
        }
    }
    for (int d = 0; d < fg_device_count(); d++)
        fg_vram_drop_kept_locked(d, a->kept[d]);
    return a;
}

void managed_unmap(struct managed *a)
{
    munmap((void *)a->base, a->npages * MANAGED_PAGE);
    free(a->pages);
    free(a);
}

/* ------------------------------------------------------------------ advice */

CUresult fg_managed_advise(CUdeviceptr p, size_t n, int advice, CUmemLocation loc)
{
    int where = NOWHERE;
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    size_t first, last;
    int ok = managed_range_pages(p, n, &first, &last) != NULL;
    fg_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    /* Read-mostly advice and unsetting the preferred location ignore the location. */
    if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
        advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
        CUresult rc = managed_location(loc, &where);
        if (rc)
            return rc;
    }
    unsigned char bit = where == ON_HOST ? ACCESSED_BY_HOST : (unsigned char)(1u << (where & 7));
    fg_lock();
    struct managed *a = managed_range_pages(p, n, &first, &last);
    for (size_t i = first; a && i <= last; i++) {
        struct mpage *pg = &a->pages[i];
        switch (advice) {
        case CU_MEM_ADVISE_SET_READ_MOSTLY: pg->read_mostly = 1; break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY: pg->read_mostly = 0; break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: pg->preferred = (signed char)where; break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: pg->preferred = NOWHERE; break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY: pg->accessed_by |= bit; break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY: pg->accessed_by &= (unsigned char)~bit; break;
        }
    }
    fg_unlock();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ page moves */

/* Moves one page of `a` to `where` (lock held): to a device it takes VRAM there, and a
 * page that cannot get it stays where it is (0); the VRAM it leaves goes back, or with
 * FAKECUDA_MANAGED_KEEPS_VRAM the device keeps it, counted against `a` until it is freed.
 * A page moving back to the device that keeps the chunk it left takes that chunk (free
 * VRAM does not fall), unless an allocation took it meanwhile; any other page takes fresh
 * VRAM, what the device keeps only once none is free. That is NVIDIA's nvidia-uvm: a
 * va_block whose pages all left a GPU keeps its root chunk, only marked unused
 * (block_clear_resident_processor in uvm_va_block.c), and reuses it when its pages come
 * back; other allocations take memory from the driver's allocator while it has any, and
 * only then evict unused chunks (pick_root_chunk_to_evict in uvm_pmm_gpu.c). The fake
 * keeps one pool of kept VRAM per device, so the chunk a page takes back may be another
 * page's. The data stays at the host address either way: the VRAM only stands for it. */
int managed_move_page(struct managed *a, struct mpage *pg, int where)
{
    if (pg->where == where)
        return 1;
    size_t vram_first = 0;
    if (where >= 0 && pg->kept_on == where && a->kept[where] >= MANAGED_PAGE &&
        fg_vram_retake_kept_locked(where, MANAGED_PAGE, &vram_first)) {
        a->kept[where] -= MANAGED_PAGE;
    } else if (where >= 0 && !fg_vram_take_locked(where, MANAGED_PAGE, &vram_first)) {
        return 0;
    }
    if (where >= 0)
        pg->kept_on = NOWHERE;
    if (pg->where >= 0) {
        if (fg_vram_leave_locked(pg->where, pg->vram_first, MANAGED_PAGE)) {
            a->kept[pg->where] += MANAGED_PAGE;
            pg->kept_on = pg->where;
        }
        m.on_device[pg->where] -= MANAGED_PAGE;
    } else {
        m.on_host -= MANAGED_PAGE;
    }
    if (where >= 0) {
        m.on_device[where] += MANAGED_PAGE;
        m.moved_to_device += MANAGED_PAGE;
    } else {
        m.on_host += MANAGED_PAGE;
        m.moved_to_host += MANAGED_PAGE;
    }
    pg->where = (signed char)where;
    pg->vram_first = vram_first;
    return 1;
}

/* ------------------------------------------------------------------ range attributes */

enum { PREFERRED, PREFETCHED };

/* The preferred or last prefetch location every page of [first, last] has, else
 * NOWHERE (also when they differ). */
static int common_location(const struct managed *a, size_t first, size_t last, int which)
{
    int v = NOWHERE;
    for (size_t i = first; i <= last; i++) {
        int here = which == PREFERRED ? a->pages[i].preferred : a->pages[i].last_prefetch;
        if (i > first && here != v)
            return NOWHERE;
        v = here;
    }
    return v;
}

static int location_type(int where)
{
    return where == NOWHERE ? CU_MEM_LOCATION_TYPE_INVALID
         : where == ON_HOST ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
}

CUresult fg_managed_range_attribute(void *data, size_t size, int attribute, CUdeviceptr p, size_t n)
{
    if (!data || size == 0 || size % 4 || (attribute != CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY && size != 4))
        return CUDA_ERROR_INVALID_VALUE;
    int *out = data;
    size_t first, last;
    CUresult rc = CUDA_SUCCESS;
    fg_lock();
    struct managed *a = managed_range_pages(p, n, &first, &last);
    if (!a) {
        fg_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        *out = 1;
        for (size_t i = first; i <= last; i++)
            *out &= a->pages[i].read_mostly;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
        *out = common_location(a, first, last, PREFERRED);
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        *out = common_location(a, first, last, PREFETCHED);
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
        *out = location_type(common_location(a, first, last, PREFERRED));
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        *out = location_type(common_location(a, first, last, PREFETCHED));
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        *out = common_location(a, first, last, PREFERRED); /* meaningful for a device only */
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        *out = common_location(a, first, last, PREFETCHED);
        break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        /* The devices (then the host) with the advice over the whole range; the rest of
         * the array CU_DEVICE_INVALID. */
        unsigned char all = 0xff;
        for (size_t i = first; i <= last; i++)
            all &= a->pages[i].accessed_by;
        size_t k = 0, slots = size / 4;
        for (int d = 0; d < fg_device_count() && k < slots; d++)
            if (all & (1u << d))
                out[k++] = d;
        if ((all & ACCESSED_BY_HOST) && k < slots)
            out[k++] = CU_DEVICE_CPU;
        while (k < slots)
            out[k++] = CU_DEVICE_INVALID;
        break;
    }
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    fg_unlock();
    return rc;
}

/* ------------------------------------------------------------------ test queries */

size_t fakegpu_managed_on_device(int device)
{
    if (!fg_device_valid(device))
        return 0;
    fg_lock();
    size_t b = m.on_device[device];
    fg_unlock();
    return b;
}

size_t fakegpu_managed_on_host(void)
{
    fg_lock();
    size_t b = m.on_host;
    fg_unlock();
    return b;
}

void fakegpu_managed_moved(unsigned long long *to_device, unsigned long long *to_host)
{
    fg_lock();
    if (to_device)
        *to_device = m.moved_to_device;
    if (to_host)
        *to_host = m.moved_to_host;
    fg_unlock();
}

int fakegpu_managed_live(void)
{
    fg_lock();
    int n = m.live;
    fg_unlock();
    return n;
}

int fg_managed_where_locked(uintptr_t p, size_t *page_left)
{
    struct managed *a = managed_containing(p);
    if (!a)
        return NOWHERE;
    size_t off = p - a->base;
    if (page_left)
        *page_left = MANAGED_PAGE - off % MANAGED_PAGE;
    return a->pages[off / MANAGED_PAGE].where;
}

int fakegpu_managed_where(CUdeviceptr p)
{
    fg_lock();
    int where = fg_managed_where_locked(p, NULL);
    fg_unlock();
    return where;
}

/* What the real driver does when another process needs the VRAM: every page of the
 * allocation holding p goes to the host, whatever its preferred location, and nothing
 * tells the owner (its last prefetch location stays). 0 when p is not managed memory. */
int fakegpu_managed_evict(CUdeviceptr p)
{
    fg_lock();
    struct managed *a = managed_containing(p);
    for (size_t i = 0; a && i < a->npages; i++)
        managed_move_page(a, &a->pages[i], ON_HOST);
    fg_unlock();
    return a != NULL;
}
