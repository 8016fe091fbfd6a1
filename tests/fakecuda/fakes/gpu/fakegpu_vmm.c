/* libfakegpu.so: VMM. cuMemCreate handles, address reservations, mappings and access. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ VMM */

size_t fg_vmm_granularity(void) { return VMM_GRANULARITY; }

/* FAKECUDA_FAIL_VMM: a comma-separated list of VMM steps made to fail (reserve,
 * create-device, create-host, map, set-access), so that tests can reach an
 * interposer's undo paths. Each injected failure is logged as INJECTED. */
static int vmm_step_fails(const char *step)
{
    const char *list = getenv("FAKECUDA_FAIL_VMM");
    size_t n = strlen(step);
    for (const char *p = list; p && (p = strstr(p, step)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) {
            fg_log("INJECTED %s failure", step);
            return 1;
        }
    return 0;
}

void fakegpu_vmm_live(struct fakegpu_vmm_counts *out)
{
    ensure_setup();
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g.lock);
    for (struct vmm_handle *h = g.handles; h; h = h->next)
        out->handles++;
    for (struct vmm_reservation *r = g.reservations; r; r = r->next)
        out->reservations++;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        out->mappings++;
    pthread_mutex_unlock(&g.lock);
}

static struct vmm_handle *handle_lookup(CUmemGenericAllocationHandle h)
{
    for (struct vmm_handle *x = g.handles; x; x = x->next)
        if ((CUmemGenericAllocationHandle)(uintptr_t)x == h && x->magic == VMM_MAGIC)
            return x;
    return NULL;
}

CUresult fg_vmm_create(CUmemGenericAllocationHandle *out, size_t n, const CUmemAllocationProp *prop,
                       unsigned long long flags)
{
    if (!out || !prop || n == 0 || n % VMM_GRANULARITY || flags ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = calloc(1, sizeof *h);
    h->magic = VMM_MAGIC;
    h->size = n;
    h->memfd = -1;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: {
        if (!fg_device_valid(prop->location.id)) {
            free(h);
            return CUDA_ERROR_INVALID_DEVICE;
        }
        if (vmm_step_fails("create-device")) {
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        size_t first;
        struct vram_device *d = &g.dev[prop->location.id];
        pthread_mutex_lock(&g.lock);
        int ok = vram_take(d, n, KEPT_WHEN_SHORT, &first);
        pthread_mutex_unlock(&g.lock);
        if (!ok) {
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        h->device = prop->location.id;
        h->vram_off = first * PAGE;
        h->view = d->vram_view + h->vram_off;
        break;
    }
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        /* Host memory is neither GPUDirect-RDMA capable nor compressible: the driver
         * refuses host requests that ask for either (seen on the H200). */
        if (prop->allocFlags.gpuDirectRDMACapable || prop->allocFlags.compressionType ||
            (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0)) {
            free(h);
            return CUDA_ERROR_INVALID_VALUE; /* the fake host has one NUMA node */
        }
        if (vmm_step_fails("create-host")) {
            free(h);
            return CUDA_ERROR_NOT_SUPPORTED; /* as a driver without host-NUMA memory */
        }
        h->host = 1;
        h->memfd = memfd_create("fakecuda-host-numa", MFD_CLOEXEC);
        if (h->memfd < 0 || ftruncate(h->memfd, n) ||
            (h->view = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, h->memfd, 0)) == MAP_FAILED) {
            if (h->memfd >= 0)
                close(h->memfd);
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        break;
    default:
        free(h);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g.lock);
    h->next = g.handles;
    g.handles = h;
    pthread_mutex_unlock(&g.lock);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* Frees a handle's memory once it is released and unmapped. Lock held. */
static void handle_maybe_free(struct vmm_handle *h)
{
    if (!h->released || h->mapcount)
        return;
    struct vmm_handle **pp = &g.handles;
    while (*pp != h)
        pp = &(*pp)->next;
    *pp = h->next;
    if (h->host) {
        munmap(h->view, h->size);
        close(h->memfd);
    } else {
        vram_give(&g.dev[h->device], h->vram_off / PAGE, h->size / PAGE);
    }
    h->magic = 0;
    free(h);
}

CUresult fg_vmm_release(CUmemGenericAllocationHandle hv)
{
    pthread_mutex_lock(&g.lock);
    struct vmm_handle *h = handle_lookup(hv);
    if (!h || h->released) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->released = 1;
    handle_maybe_free(h);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_reserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    if (!p || n == 0 || n % VMM_GRANULARITY || flags || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < VMM_GRANULARITY)
        align = VMM_GRANULARITY;
    if (vmm_step_fails("reserve"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g.lock);
    size_t off = (g.vmm_next + align - 1) & ~(align - 1);
    if (off + n > VMM_VA_SPACE) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g.vmm_next = off + n;
    struct vmm_reservation *r = calloc(1, sizeof *r);
    r->va = g.vmm_va + off;
    r->size = n;
    r->next = g.reservations;
    g.reservations = r;
    pthread_mutex_unlock(&g.lock);
    *p = r->va;
    return CUDA_SUCCESS;
}

/* Whether mapping `m` shares any byte with [p, p + n). */
static int mapping_overlaps(const struct vmm_mapping *m, CUdeviceptr p, size_t n)
{
    return m->va < p + n && p < m->va + m->size;
}

CUresult fg_vmm_address_free(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&g.lock);
    struct vmm_reservation **pp = &g.reservations, *r;
    while ((r = *pp) && !(r->va == p && r->size == n))
        pp = &r->next;
    if (!r) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n)) {
            pthread_mutex_unlock(&g.lock);
            return CUDA_ERROR_INVALID_VALUE; /* still mapped */
        }
    *pp = r->next;
    free(r);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static void va_to_none(uintptr_t va, size_t n)
{
    mmap((void *)va, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

CUresult fg_vmm_map(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle hv, unsigned long long flags)
{
    if (off || flags || n == 0 || p % VMM_GRANULARITY || n % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (vmm_step_fails("map"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g.lock);
    struct vmm_handle *h = handle_lookup(hv);
    int inside = 0;
    for (struct vmm_reservation *r = g.reservations; r; r = r->next)
        if (p >= r->va && p + n <= r->va + r->size)
            inside = 1;
    int overlap = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n))
            overlap = 1;
    if (!h || h->released || n > h->size || !inside || overlap) {
        pthread_mutex_unlock(&g.lock);
        return h && !h->released ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    if (h->host &&
        mmap((void *)p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, h->memfd, 0) == MAP_FAILED) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct vmm_mapping *m = calloc(1, sizeof *m);
    m->va = p;
    m->size = n;
    m->h = h;
    m->next = g.mappings;
    g.mappings = m;
    h->mapcount++;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_unmap(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&g.lock);
    /* The range must be exactly covered by whole mappings. */
    size_t covered = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next) {
        if (mapping_overlaps(m, p, n)) {
            if (m->va < p || m->va + m->size > p + n) {
                pthread_mutex_unlock(&g.lock);
                return CUDA_ERROR_INVALID_VALUE;
            }
            covered += m->size;
        }
    }
    if (covered != n || n == 0) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct vmm_mapping **pp = &g.mappings, *m;
    while ((m = *pp)) {
        if (m->va >= p && m->va + m->size <= p + n) {
            *pp = m->next;
            if (m->h->host)
                va_to_none(m->va, m->size);
            m->h->mapcount--;
            handle_maybe_free(m->h);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_set_access(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
    if (!d || count == 0 || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int t = d[i].location.type;
        if (t == CU_MEM_LOCATION_TYPE_DEVICE && !fg_device_valid(d[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (t != CU_MEM_LOCATION_TYPE_DEVICE && t != CU_MEM_LOCATION_TYPE_HOST &&
            t != CU_MEM_LOCATION_TYPE_HOST_NUMA && t != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (vmm_step_fails("set-access"))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    size_t covered = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n))
            covered += m->size;
    if (covered < n) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE; /* the whole range must be mapped */
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next) {
        if (!mapping_overlaps(m, p, n))
            continue;
        for (size_t i = 0; i < count; i++) {
            if (d[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
                m->dev_access = d[i].flags;
            } else if (m->h->host) {
                m->host_access = d[i].flags;
                mprotect((void *)m->va, m->size,
                         d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE :
                         d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE);
            } else {
                pthread_mutex_unlock(&g.lock);
                return CUDA_ERROR_INVALID_VALUE; /* host access to device memory */
            }
        }
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}
