/* libfakegpu.so: the test kernels the fake GPU runs, and the counts of what it ran.
 *
 * A kernel reads and writes device memory through the device's view, as copies do: an
 * address the device cannot reach is an illegal address (a fault, sticky on the stream).
 * Parameters come as one packed buffer laid out as the real ABI lays it out (each at its
 * natural alignment, a CUtensorMap 64-aligned), which cuFuncGetParamInfo reports.
 *   gb_copy16(dst, src, count)          count 16-byte vectors (the shim's copy kernel)
 *   fk_fill_u32(dst, value, count)      writes count u32
 *   fk_fill_indirect(slot, value, count) writes count u32 at the address stored at slot in
 *                                       device memory (a `__device__` global's pointer)
 *   fk_read_u32(src, count)             reads count u32 and takes a GPU's time for it: what
 *                                       lies in host memory as the device sees it costs
 *                                       FAKECUDA_LINK_NS_PER_KIB ns per KiB (default 500,
 *                                       ~2 GB/s), device memory a fiftieth of that
 *   fk_add_f32(out, a, b, n)            out[i] = a[i] + b[i]
 *   fk_struct(struct fk_args s, p0..p7) adds 1.0f to s.count floats at s.ptrs[0..7] and p0..p7
 *   fk_gather(out, ptr_array, count, n) out[j] = sum of n floats at ptr_array[j] (device memory)
 *   fk_tma(CUtensorMap map, out, n)     copies n floats from the map's global address
 *   fk_tma_struct(struct fk_tma_args s) the same with out, n and the map inside one 256-byte
 *                                       struct, the map at 64 (as CUTLASS's Hopper kernels
 *                                       take theirs)
 *   fk_tex(CUtexObject tex, out, n)     copies n floats from the texture object's memory
 *   fk_elementwise(n, struct f)         nothing: the shape of PyTorch's elementwise kernels,
 *                                       a u32 and a 640-byte lambda holding three pointers
 *                                       and an offset calculator (launch cost probes)
 */
#define _GNU_SOURCE
#include "fakegpu_state.h"

static const struct fg_kernel kernels[] = {
    { "gb_copy16", 3, { 0, 8, 16 }, { 8, 8, 8 }, 24 },
    { "fk_fill_u32", 3, { 0, 8, 16 }, { 8, 4, 8 }, 24 },
    { "fk_fill_indirect", 3, { 0, 8, 16 }, { 8, 4, 8 }, 24 },
    { "fk_read_u32", 2, { 0, 8 }, { 8, 8 }, 16 },
    { "fk_add_f32", 4, { 0, 8, 16, 24 }, { 8, 8, 8, 8 }, 32 },
    { "fk_struct", 9, { 0, 256, 264, 272, 280, 288, 296, 304, 312 }, { 256, 8, 8, 8, 8, 8, 8, 8, 8 }, 320 },
    { "fk_gather", 4, { 0, 8, 16, 24 }, { 8, 8, 8, 8 }, 32 },
    { "fk_tma", 3, { 0, 128, 136 }, { 128, 8, 8 }, 144 },
    { "fk_tma_struct", 1, { 0 }, { 256 }, 256 },
    { "fk_tex", 3, { 0, 8, 16 }, { 8, 8, 8 }, 24 },
    { "fk_elementwise", 2, { 0, 8 }, { 4, 640 }, 648 },
};
#define NKERNELS (sizeof kernels / sizeof *kernels)

const struct fg_kernel *fg_kernel_find(const char *name, size_t len)
{
    if (!len)
        len = strlen(name);
    for (size_t i = 0; i < NKERNELS; i++)
        if (strlen(kernels[i].name) == len && !memcmp(kernels[i].name, name, len))
            return &kernels[i];
    return NULL;
}

struct fg_launch *fg_launch_new(const struct fg_kernel *k, const void *args)
{
    struct fg_launch *l = calloc(1, sizeof *l + k->argsize);
    if (!l)
        return NULL;
    l->k = k;
    memcpy(l->args, args, k->argsize);
    for (int i = 0; i < k->nparams; i++)
        l->params[i] = l->args + k->offset[i];
    return l;
}

struct fg_launch *fg_launch_dup(const struct fg_launch *l)
{
    struct fg_launch *d = fg_launch_new(l->k, l->args);
    if (d) {
        d->handle = l->handle;
        memcpy(d->grid, l->grid, sizeof d->grid);
        memcpy(d->block, l->block, sizeof d->block);
        d->shared = l->shared;
    }
    return d;
}

CUresult fg_kernel_launch(struct fg_launch *l, CUstream s)
{
    return enqueue(s, (struct op){ .kind = OP_KERNEL, .data = l });
}

/* ---- device memory as a kernel reaches it: through the device's view only ---- */

/* Copies n bytes between host buffer h and device address p (to_device: h -> p). */
static int dev_io(uintptr_t p, void *h, size_t n, int to_device)
{
    size_t off = 0;
    while (off < n) {
        size_t c = n - off;
        const char *kind;
        pthread_mutex_lock(&g.lock);
        unsigned char *v = device_view(p + off, &c, &kind);
        pthread_mutex_unlock(&g.lock);
        if (!v)
            return 0;
        if (c > n - off)
            c = n - off;
        if (to_device)
            memcpy(v, (char *)h + off, c);
        else
            memcpy((char *)h + off, v, c);
        off += c;
    }
    return 1;
}

static uint64_t arg64(const unsigned char *a, size_t off)
{
    uint64_t v;
    memcpy(&v, a + off, 8);
    return v;
}

/* Writes count copies of the word v from dst. */
static int fill_u32(uintptr_t dst, uint32_t v, uint64_t count)
{
    uint32_t buf[4096];
    for (int j = 0; j < 4096; j++)
        buf[j] = v;
    for (uint64_t i = 0; i < count; i += 4096) {
        size_t c = count - i < 4096 ? (size_t)(count - i) : 4096;
        if (!dev_io(dst + i * 4, buf, c * 4, 1))
            return 0;
    }
    return 1;
}

/* Adds 1.0f to n floats at p. */
static int add_one(uintptr_t p, uint64_t n)
{
    float buf[4096];
    for (uint64_t i = 0; i < n; i += 4096) {
        size_t c = n - i < 4096 ? (size_t)(n - i) : 4096;
        if (!dev_io(p + i * 4, buf, c * 4, 0))
            return 0;
        for (size_t j = 0; j < c; j++)
            buf[j] += 1.0f;
        if (!dev_io(p + i * 4, buf, c * 4, 1))
            return 0;
    }
    return 1;
}

/* The tensor map's global address (cuTensorMapEncodeTiled stores it rotated and xored
 * across words 1 and 2, never as a plain word). */
static uint64_t tma_address(const unsigned char *map)
{
    uint64_t w1 = arg64(map, 8), w2 = arg64(map, 16);
    uint64_t rot = (w1 >> 3) | (w1 << 61);
    return rot ^ w2;
}

/* ---- fk_read_u32: a read timed as a GPU's, for tests that measure kernels by events ---- */

/* The device's view of [p, p + *n), *n cut to where it stays one kind: *on_host when the
 * device reads it over the host link (managed pages resident on the host, registered host
 * memory, VMM host memory), else it is the device's own. NULL where it cannot reach p.
 * Lock held. */
static const unsigned char *read_view_locked(uintptr_t p, size_t *n, int *on_host)
{
    size_t c;
    const char *kind;
    const unsigned char *v = device_view(p, &c, &kind);
    if (!v)
        return NULL;
    if (!strcmp(kind, "managed")) {
        size_t left;
        *on_host = fg_managed_where_locked(p, &left) < 0;
        if (c > left)
            c = left;
    } else {
        *on_host = !strcmp(kind, "hostreg") || !strcmp(kind, "vmm-host");
    }
    if (c < *n)
        *n = c;
    return v;
}

/* Reads n bytes at src, then sleeps on the stream until the modeled time has passed
 * since it started (the real reading counted in it), so that events recorded around the
 * launch measure the model, not the host's memory speed. */
uint64_t fg_link_ns_per_kib(void)
{
    const char *e = getenv("FAKECUDA_LINK_NS_PER_KIB");
    uint64_t ns = e && *e ? strtoull(e, NULL, 10) : 500;
    return ns ? ns : 1;
}

static int read_timed(uintptr_t src, uint64_t n)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    uint32_t sum = 0;
    uint64_t host = 0;
    for (uint64_t off = 0; off < n;) {
        size_t c = n - off;
        int on_host = 0;
        pthread_mutex_lock(&g.lock);
        const unsigned char *v = read_view_locked(src + off, &c, &on_host);
        pthread_mutex_unlock(&g.lock);
        if (!v)
            return 0;
        for (size_t i = 0; i + 4 <= c; i += 4) {
            uint32_t w;
            memcpy(&w, v + i, 4);
            sum += w;
        }
        if (on_host)
            host += c;
        off += c;
    }
    volatile uint32_t sink = sum; /* the words are read, not optimised away */
    (void)sink;
    uint64_t ns_per_kib = fg_link_ns_per_kib();
    uint64_t ns = (host * ns_per_kib + (n - host) * ns_per_kib / 50) / 1024;
    fg_log("KERNEL_TIME fk_read_u32 src=%#lx host=%llu device=%llu ns=%llu", (unsigned long)src,
           (unsigned long long)host, (unsigned long long)(n - host), (unsigned long long)ns);
    until.tv_sec += (time_t)(ns / 1000000000);
    until.tv_nsec += (long)(ns % 1000000000);
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
    return 1;
}

CUresult run_kernel(struct fake_stream *s, struct fg_launch *l)
{
    const unsigned char *a = l->args;
    const char *name = l->k->name;
    if (!strcmp(name, "gb_copy16")) {
        uint64_t n = arg64(a, 16) * 16;
        if (!copy_range(arg64(a, 0), arg64(a, 8), n))
            return fault(s, name, arg64(a, 0), n);
    } else if (!strcmp(name, "fk_fill_u32") || !strcmp(name, "fk_fill_indirect")) {
        uint32_t v;
        memcpy(&v, a + 8, 4);
        uint64_t count = arg64(a, 16), dst = arg64(a, 0);
        if (!strcmp(name, "fk_fill_indirect") && !dev_io(arg64(a, 0), &dst, 8, 0))
            return fault(s, name, arg64(a, 0), 8);
        if (!fill_u32(dst, v, count))
            return fault(s, name, dst, count * 4);
    } else if (!strcmp(name, "fk_read_u32")) {
        uint64_t src = arg64(a, 0), count = arg64(a, 8);
        if (count > UINT64_MAX / 4 || !read_timed(src, count * 4))
            return fault(s, name, src, count * 4);
    } else if (!strcmp(name, "fk_add_f32")) {
        float x[2048], y[2048];
        uint64_t out = arg64(a, 0), pa = arg64(a, 8), pb = arg64(a, 16), n = arg64(a, 24);
        for (uint64_t i = 0; i < n; i += 2048) {
            size_t c = n - i < 2048 ? (size_t)(n - i) : 2048;
            if (!dev_io(pa + i * 4, x, c * 4, 0) || !dev_io(pb + i * 4, y, c * 4, 0))
                return fault(s, name, pa, n * 4);
            for (size_t j = 0; j < c; j++)
                x[j] += y[j];
            if (!dev_io(out + i * 4, x, c * 4, 1))
                return fault(s, name, out, n * 4);
        }
    } else if (!strcmp(name, "fk_struct")) {
        uint64_t count = arg64(a, 64);
        for (int i = 0; i < 16; i++) {
            uint64_t p = i < 8 ? arg64(a, 8 * i) : arg64(a, 256 + 8 * (i - 8));
            if (!add_one(p, count))
                return fault(s, name, p, count * 4);
        }
    } else if (!strcmp(name, "fk_gather")) {
        uint64_t out = arg64(a, 0), arr = arg64(a, 8), count = arg64(a, 16), n = arg64(a, 24);
        for (uint64_t j = 0; j < count; j++) {
            uint64_t p;
            if (!dev_io(arr + j * 8, &p, 8, 0))
                return fault(s, name, arr, count * 8);
            float sum = 0, buf[1024];
            for (uint64_t i = 0; i < n; i += 1024) {
                size_t c = n - i < 1024 ? (size_t)(n - i) : 1024;
                if (!dev_io(p + i * 4, buf, c * 4, 0))
                    return fault(s, name, p, n * 4);
                for (size_t k = 0; k < c; k++)
                    sum += buf[k];
            }
            if (!dev_io(out + j * 4, &sum, 4, 1))
                return fault(s, name, out, count * 4);
        }
    } else if (!strcmp(name, "fk_tma") || !strcmp(name, "fk_tex") || !strcmp(name, "fk_tma_struct")) {
        int tex = !strcmp(name, "fk_tex"), in_struct = !strcmp(name, "fk_tma_struct");
        uint64_t src = tex ? fg_texture_address(arg64(a, 0)) : tma_address(in_struct ? a + 64 : a);
        uint64_t out = arg64(a, in_struct ? 0 : tex ? 8 : 128), n = arg64(a, in_struct ? 8 : tex ? 16 : 136);
        float buf[4096];
        for (uint64_t i = 0; i < n; i += 4096) {
            size_t c = n - i < 4096 ? (size_t)(n - i) : 4096;
            if (!dev_io(src + i * 4, buf, c * 4, 0))
                return fault(s, name, src, n * 4);
            if (!dev_io(out + i * 4, buf, c * 4, 1))
                return fault(s, name, out, n * 4);
        }
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ ownership of op data */

struct op op_dup(const struct op *op)
{
    struct op d = *op;
    d.next = NULL;
    if (op->kind == OP_KERNEL) {
        d.data = fg_launch_dup(op->data);
    } else if (op->kind == OP_GEMM) {
        d.data = malloc(sizeof(struct fakegpu_gemm));
        memcpy(d.data, op->data, sizeof(struct fakegpu_gemm));
    } else if (op->kind == OP_COPY3D) {
        d.data = malloc(sizeof(CUDA_MEMCPY3D));
        memcpy(d.data, op->data, sizeof(CUDA_MEMCPY3D));
    }
    return d;
}

void op_free_data(struct op *op)
{
    if (op->kind == OP_KERNEL || op->kind == OP_GEMM || op->kind == OP_COPY3D) {
        free(op->data);
        op->data = NULL;
    }
}

/* ------------------------------------------------------------------ counts */

#define MAX_COUNTS 512
static struct {
    char key[96];
    unsigned long long n;
} counts[MAX_COUNTS];
static int ncounts;
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;

/* The count `key` (counts_lock held), made at 0 on first use; NULL once the table is full. */
static unsigned long long *count_of(const char *key)
{
    for (int i = 0; i < ncounts; i++)
        if (!strcmp(counts[i].key, key))
            return &counts[i].n;
    if (ncounts == MAX_COUNTS)
        return NULL;
    snprintf(counts[ncounts].key, sizeof counts[ncounts].key, "%s", key);
    counts[ncounts].n = 0;
    return &counts[ncounts++].n;
}

static void bump(const char *key)
{
    unsigned long long *n = count_of(key);
    if (n)
        (*n)++;
}

void count_most(const char *key, unsigned long long n)
{
    pthread_mutex_lock(&counts_lock);
    unsigned long long *most = count_of(key);
    if (most && n > *most)
        *most = n;
    pthread_mutex_unlock(&counts_lock);
}

void count_op(const struct op *op)
{
    const char *cls;
    switch (op->kind) {
    case OP_KERNEL: case OP_FILL: case OP_VERIFY: case OP_GEMM: cls = "kernel"; break;
    case OP_SET: case OP_SET2D: cls = "memset"; break;
    case OP_COPY: case OP_COPY3D: cls = "memcpy"; break;
    case OP_HOSTFN: case OP_CALLBACK: cls = "hostfn"; break;
    default: return;
    }
    char key[96];
    pthread_mutex_lock(&counts_lock);
    bump(cls);
    snprintf(key, sizeof key, "%s:%s", cls, op->path ? op->path : "?");
    bump(key);
    if (op->kind == OP_KERNEL) {
        snprintf(key, sizeof key, "kernel@%s", ((struct fg_launch *)op->data)->k->name);
        bump(key);
    }
    pthread_mutex_unlock(&counts_lock);
}

unsigned long long fakegpu_count(const char *what)
{
    unsigned long long n = 0;
    pthread_mutex_lock(&counts_lock);
    for (int i = 0; i < ncounts; i++)
        if (what && !strcmp(counts[i].key, what))
            n = counts[i].n;
    pthread_mutex_unlock(&counts_lock);
    return n;
}

void fakegpu_count_reset(void)
{
    pthread_mutex_lock(&counts_lock);
    ncounts = 0;
    pthread_mutex_unlock(&counts_lock);
}
