/* libfakegpu.so: copies, kernels and the test queries. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ copies, kernels */

CUresult fg_memcpy_check(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    int bad = (is_device_address(dst) && !device_range_ok(dst, n)) ||
              (is_device_address(src) && !device_range_ok(src, n));
    pthread_mutex_unlock(&g.lock);
    return bad ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; /* the driver validates copy ranges up front */
}

CUresult fg_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    CUresult rc = fg_memcpy_check(dst, src, n);
    if (rc)
        return rc;
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_COPY, .a = dst, .b = src, .n = n });
}

CUresult fg_memset8(CUdeviceptr dst, unsigned char v, size_t n, CUstream s, int async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_SET, .a = dst, .n = n, .seed = v });
}

CUresult fg_memset2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                     CUstream s, int async)
{
    if (elem != 1 && elem != 2 && elem != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (height > 1 && pitch < width * elem)
        return CUDA_ERROR_INVALID_VALUE;
    if (!width || !height)
        return CUDA_SUCCESS;
    if (!dst || (dst % elem) || (height > 1 && pitch % elem))
        return CUDA_ERROR_INVALID_VALUE; /* the driver wants aligned 16/32-bit memsets */
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_SET2D, .a = dst, .pitch = height > 1 ? pitch : width * elem,
                                                  .width = width, .height = height, .elem = elem, .seed = value });
}

static void chunk_set2d(unsigned char *v, uint64_t off, size_t n, struct op *op)
{
    /* off: bytes into the row, which starts elem-aligned. */
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned)((off + i) % op->elem);
        v[i] = (unsigned char)(op->seed >> (8 * b));
    }
}

CUresult run_set2d(struct fake_stream *s, const struct op *op)
{
    struct op row = *op;
    for (size_t y = 0; y < op->height; y++) {
        uintptr_t p = op->a + y * op->pitch;
        if (!for_each_device_chunk(p, op->width * op->elem, chunk_set2d, &row))
            return fault(s, "memset2d", p, op->width * op->elem);
    }
    return CUDA_SUCCESS;
}

/* The address of (x, y, z) on one side of a 3D copy. */
static uintptr_t copy3d_at(int type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
                           size_t height)
{
    uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
    return base + x + (z * height + y) * pitch;
}

static int copy3d_side_ok(int type, const void *host, CUdeviceptr dev, const CUDA_MEMCPY3D *p, size_t x, size_t y,
                          size_t z, size_t pitch, size_t height)
{
    if (type == CU_MEMORYTYPE_HOST)
        return host != NULL;
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return 0; /* CUDA arrays: the fake has none */
    if (!dev)
        return 0;
    uintptr_t first = copy3d_at(type, host, dev, x, y, z, pitch, height);
    uintptr_t last = copy3d_at(type, host, dev, x, y + p->Height - 1, z + p->Depth - 1, pitch, height) + p->WidthInBytes;
    pthread_mutex_lock(&g.lock);
    int ok = !is_device_address(first) || device_range_ok(first, last - first);
    pthread_mutex_unlock(&g.lock);
    return ok;
}

/* The checks of a non-empty 3D copy; *c: p with its pitches and layer heights set. */
static CUresult copy3d_prepare(const CUDA_MEMCPY3D *p, CUDA_MEMCPY3D *c)
{
    size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    size_t sh = p->srcHeight ? p->srcHeight : p->Height, dh = p->dstHeight ? p->dstHeight : p->Height;
    if ((p->Height > 1 || p->Depth > 1) && (sp < p->WidthInBytes || dp < p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    if ((p->Depth > 1) && (sh < p->Height || dh < p->Height))
        return CUDA_ERROR_INVALID_VALUE;
    if (!copy3d_side_ok(p->srcMemoryType, p->srcHost, p->srcDevice, p, p->srcXInBytes, p->srcY, p->srcZ, sp, sh) ||
        !copy3d_side_ok(p->dstMemoryType, p->dstHost, p->dstDevice, p, p->dstXInBytes, p->dstY, p->dstZ, dp, dh))
        return CUDA_ERROR_INVALID_VALUE;
    *c = *p;
    c->srcPitch = sp;
    c->dstPitch = dp;
    c->srcHeight = sh;
    c->dstHeight = dh;
    return CUDA_SUCCESS;
}

CUresult fg_memcpy3d_check(const CUDA_MEMCPY3D *p)
{
    CUDA_MEMCPY3D c;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return !p->WidthInBytes || !p->Height || !p->Depth ? CUDA_SUCCESS : copy3d_prepare(p, &c);
}

CUresult fg_memcpy3d(const CUDA_MEMCPY3D *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!p->WidthInBytes || !p->Height || !p->Depth)
        return CUDA_SUCCESS;
    CUDA_MEMCPY3D prepared;
    CUresult rc = copy3d_prepare(p, &prepared);
    if (rc)
        return rc;
    CUDA_MEMCPY3D *c = malloc(sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = prepared;
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_COPY3D, .data = c });
}

CUresult run_copy3d(struct fake_stream *s, const CUDA_MEMCPY3D *p)
{
    for (size_t z = 0; z < p->Depth; z++)
        for (size_t y = 0; y < p->Height; y++) {
            uintptr_t dst = copy3d_at(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY + y,
                                      p->dstZ + z, p->dstPitch, p->dstHeight);
            uintptr_t src = copy3d_at(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY + y,
                                      p->srcZ + z, p->srcPitch, p->srcHeight);
            if (!copy_range(dst, src, p->WidthInBytes))
                return fault(s, "memcpy3d", dst, p->WidthInBytes);
        }
    return CUDA_SUCCESS;
}

CUresult fakegpu_launch_gemm(const struct fakegpu_gemm *gemm, CUstream s)
{
    CUresult rc = fg_gate("fakegpu_launch_gemm", 1, 1);
    if (rc)
        return rc;
    if (!gemm || gemm->m <= 0 || gemm->n <= 0 || gemm->k <= 0 || gemm->batch <= 0 ||
        (gemm->type != FAKEGPU_R_32F && gemm->type != FAKEGPU_R_16BF))
        return CUDA_ERROR_INVALID_VALUE;
    struct fakegpu_gemm *copy = malloc(sizeof *copy);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *copy = *gemm;
    return enqueue(s, (struct op){ .kind = OP_GEMM, .data = copy });
}

void fakegpu_stream_set_capturing(CUstream s, int capturing)
{
    pthread_mutex_lock(&g.lock);
    if (stream_valid(s))
        s->capturing = capturing;
    pthread_mutex_unlock(&g.lock);
}

/* CUstreamCaptureStatus: a real capture's (fg_capture_info), else the test's flag. */
CUresult fg_stream_is_capturing(CUstream s, int *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fg_capture_info(s, status, NULL, NULL, NULL);
    if (rc || *status)
        return rc;
    pthread_mutex_lock(&g.lock);
    *status = !is_default_stream(s) && stream_valid(s) ? s->capturing : 0;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fakegpu_launch_fill(CUdeviceptr p, size_t n, uint32_t seed, CUstream s)
{
    CUresult rc = fg_gate("fakegpu_launch_fill", 1, 1);
    if (rc)
        return rc;
    return enqueue(s, (struct op){ .kind = OP_FILL, .a = p, .n = n, .seed = seed });
}

CUresult fakegpu_launch_verify(CUdeviceptr p, size_t n, uint32_t seed, CUstream s,
                               unsigned long long *mismatches)
{
    CUresult rc = fg_gate("fakegpu_launch_verify", 1, 1);
    if (rc)
        return rc;
    if (!mismatches)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_VERIFY, .a = p, .n = n, .seed = seed, .result = mismatches });
}

/* ------------------------------------------------------------------ test queries */

size_t fakegpu_vram_used(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t u = g.dev[0].vram_used;
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_vram_total(void) { return fg_vram_size(); }
size_t fakegpu_vram_used_on(int device)
{
    if (!fg_device_valid(device))
        return 0;
    pthread_mutex_lock(&g.lock);
    size_t u = g.dev[device].vram_used;
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_vram_total_on(int device) { return fg_device_vram(device); }
int fakegpu_ptr_device(CUdeviceptr p)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    struct vram_device *d = device_at(p);
    int device = d ? (int)(d - g.dev) : -1;
    for (struct vmm_mapping *m = g.mappings; m && device < 0; m = m->next)
        if (p >= m->va && p < m->va + m->size && !m->h->host)
            device = m->h->device;
    pthread_mutex_unlock(&g.lock);
    return device;
}
size_t fakegpu_device_used(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t u = device_used(&g.dev[0]);
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_vram_kept(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    struct vram_device *d = &g.dev[0];
    size_t k = d->share ? (size_t)__atomic_load_n(d->share + 1, __ATOMIC_SEQ_CST) : d->kept;
    pthread_mutex_unlock(&g.lock);
    return k;
}
size_t fakegpu_hostreg_bytes(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t b = g.hostreg_bytes;
    pthread_mutex_unlock(&g.lock);
    return b;
}
unsigned fakegpu_faults(void) { return __atomic_load_n(&g.faults, __ATOMIC_SEQ_CST); }
