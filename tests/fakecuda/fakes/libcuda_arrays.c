/* Fake libcuda.so.1 (see libcuda.c): CUDA arrays and the copies between them and memory.
 * An array is a 1D or 2D grid of elements (cuArrayCreate_v2) whose bytes the fake keeps
 * row after row in host memory; the device reaches them as it reaches host memory, so a
 * copy with an array side is a 1D or 3D copy from or to that memory (fakegpu_count
 * counts it under "memcpy"). cuMemcpyAtoD_v2/cuMemcpyDtoA_v2 (and their _ptds forms) copy
 * bytes at a byte offset, synchronously; cuMemcpy3DBatchAsync (12.8, failIdx) and its
 * 13.0 _v2 (none), with their _ptsz forms, run operations between pointers and arrays on
 * a stream other than the legacy one. */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define ARRAY_MAGIC 0x4152524159303031ULL
#define ARRAY_MAX_BYTES (1ULL << 30)

struct fake_array {
    uint64_t magic;
    size_t width, rows, elem; /* elements per row, rows (1 for a 1D array), bytes each */
    unsigned char *bytes;
    struct fake_array *next;
};

static pthread_mutex_t arrays_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_array *arrays;

/* The array a when it is live, else NULL. (The program does not destroy an array while
 * it copies with it: the fake reads its fields without the lock afterwards.) */
static struct fake_array *array_live(CUarray a)
{
    pthread_mutex_lock(&arrays_lock);
    struct fake_array *x = arrays;
    while (x && x != a)
        x = x->next;
    pthread_mutex_unlock(&arrays_lock);
    return x && x->magic == ARRAY_MAGIC ? x : NULL;
}

static size_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 0;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    GATE(1, 1);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    size_t elem = d ? format_bytes(d->Format) * d->NumChannels : 0;
    size_t rows = d && d->Height ? d->Height : 1;
    if (out && d && elem && (d->NumChannels == 1 || d->NumChannels == 2 || d->NumChannels == 4) && d->Width &&
        d->Width <= ARRAY_MAX_BYTES / rows / elem) {
        struct fake_array *a = calloc(1, sizeof *a);
        unsigned char *bytes = calloc(d->Width * rows, elem);
        if (a && bytes) {
            *a = (struct fake_array){ ARRAY_MAGIC, d->Width, rows, elem, bytes, NULL };
            pthread_mutex_lock(&arrays_lock);
            a->next = arrays;
            arrays = a;
            pthread_mutex_unlock(&arrays_lock);
            *out = a;
            rc = CUDA_SUCCESS;
        } else {
            free(a);
            free(bytes);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    fg_log("cuArrayCreate_v2 width=%zu height=%zu elem=%zu -> %d", d ? d->Width : 0, d ? d->Height : 0, elem, rc);
    return rc;
}

/* Waits for the streams first: work queued with the array may still read or write it. */
EXPORT CUresult cuArrayDestroy(CUarray a)
{
    GATE(1, 1);
    pthread_mutex_lock(&arrays_lock);
    struct fake_array **at = &arrays;
    while (*at && *at != a)
        at = &(*at)->next;
    CUresult rc = a && *at ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        *at = a->next;
    pthread_mutex_unlock(&arrays_lock);
    if (!rc) {
        fg_ctx_sync();
        a->magic = 0;
        free(a->bytes);
        free(a);
    }
    fg_log("cuArrayDestroy -> %d", rc);
    return rc;
}

/* ------------------------------------------------------------------ 1D copies */

/* Where n bytes from byte off of array a are (0 when a is not live, n is not whole
 * elements or the range leaves the array). */
static CUdeviceptr array_range(CUarray a, size_t off, size_t n)
{
    struct fake_array *x = array_live(a);
    size_t size = x ? x->width * x->rows * x->elem : 0;
    if (!x || n % x->elem || off > size || n > size - off)
        return 0;
    return (CUdeviceptr)(uintptr_t)(x->bytes + off);
}

static CUresult array_copy(const char *name, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    CUresult rc = dst && src ? fg_memcpy(dst, src, n, NULL, 0) : CUDA_ERROR_INVALID_VALUE;
    fg_log("%s dst=%#llx src=%#llx size=%zu -> %d", name, dst, src, n, rc);
    return rc;
}

EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    GATE(1, 1);
    return array_copy(__func__, dst, array_range(src, off, n), n);
}
EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    GATE(1, 1);
    return array_copy(__func__, dst, array_range(src, off, n), n);
}
EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    GATE(1, 1);
    return array_copy(__func__, array_range(dst, off, n), src, n);
}
EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    GATE(1, 1);
    return array_copy(__func__, array_range(dst, off, n), src, n);
}

/* ------------------------------------------------------------------ batches of 3D copies */

/* One side of a batch operation as a side of a CUDA_MEMCPY3D: a pointer (a unified
 * address, its rows rowLength elements or the extent's width, its layers layerHeight rows
 * or the extent's height) or an array's bytes from its offset (the extent inside it). */
static int batch_side(const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem, CUmemorytype *type,
                      const void **host, CUdeviceptr *dev, size_t *pitch, size_t *height)
{
    if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
        size_t row = o->op.ptr.rowLength, layer = o->op.ptr.layerHeight;
        if ((row && row < e->width) || (layer && layer < e->height) || row > ARRAY_MAX_BYTES)
            return 0;
        *type = CU_MEMORYTYPE_UNIFIED, *host = NULL, *dev = o->op.ptr.ptr;
        *pitch = (row ? row : e->width) * elem, *height = layer ? layer : e->height;
        return 1;
    }
    struct fake_array *a = o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? array_live(o->op.array.array) : NULL;
    const CUoffset3D *at = &o->op.array.offset;
    if (!a || at->x > a->width || e->width > a->width - at->x || at->y > a->rows || e->height > a->rows - at->y ||
        at->z || e->depth != 1)
        return 0;
    *type = CU_MEMORYTYPE_HOST, *dev = 0, *host = a->bytes + (at->y * a->width + at->x) * a->elem;
    *pitch = a->width * a->elem, *height = a->rows;
    return 1;
}

/* The element size of an operation: its arrays' (which must agree), 1 between pointers. */
static size_t batch_elem(const CUDA_MEMCPY3D_BATCH_OP *op)
{
    struct fake_array *s = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? array_live(op->src.op.array.array) : NULL;
    struct fake_array *d = op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? array_live(op->dst.op.array.array) : NULL;
    if (s && d && s->elem != d->elem)
        return 0;
    return s ? s->elem : d ? d->elem : 1;
}

/* Operation op as a 3D copy, checked: CUDA_SUCCESS, or the error the batch returns. */
static CUresult batch_copy(const CUDA_MEMCPY3D_BATCH_OP *op, CUDA_MEMCPY3D *c)
{
    const CUextent3D *e = &op->extent;
    size_t elem = batch_elem(op);
    memset(c, 0, sizeof *c);
    /* op->flags: 0 or CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE (1). Extents past a GiB
     * are refused too (no product below overflows). */
    if (!elem || !e->width || !e->height || !e->depth || op->flags > 1 || e->width > ARRAY_MAX_BYTES ||
        op->srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || op->srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY ||
        !batch_side(&op->src, e, elem, &c->srcMemoryType, &c->srcHost, &c->srcDevice, &c->srcPitch, &c->srcHeight) ||
        !batch_side(&op->dst, e, elem, &c->dstMemoryType, (const void **)&c->dstHost, &c->dstDevice, &c->dstPitch,
                    &c->dstHeight))
        return CUDA_ERROR_INVALID_VALUE;
    c->WidthInBytes = e->width * elem, c->Height = e->height, c->Depth = e->depth;
    return fg_memcpy3d_check(c);
}

/* Every operation is checked before one is queued; *failIdx: the operation at fault, or
 * SIZE_MAX when the error is not one operation's. */
static CUresult batch3d(const char *name, size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                        unsigned long long flags, CUstream s)
{
    if (fail)
        *fail = SIZE_MAX;
    CUDA_MEMCPY3D c;
    CUresult rc = !count || !ops || flags || s == NULL || s == CU_STREAM_LEGACY ? CUDA_ERROR_INVALID_VALUE
                                                                                  : CUDA_SUCCESS;
    for (size_t i = 0; i < count && !rc; i++)
        if ((rc = batch_copy(&ops[i], &c)) && fail)
            *fail = i;
    for (size_t i = 0; i < count && !rc; i++)
        if (!(rc = batch_copy(&ops[i], &c)) && (rc = fg_memcpy3d(&c, s, 1)) && fail)
            *fail = i;
    fg_log("%s count=%zu -> %d", name, count, rc);
    return rc;
}

EXPORT CUresult cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                                     unsigned long long flags, CUstream s)
{
    GATE(1, 1);
    return batch3d(__func__, count, ops, fail, flags, s);
}
EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                                          unsigned long long flags, CUstream s)
{
    GATE(1, 1);
    return batch3d(__func__, count, ops, fail, flags, s ? s : CU_STREAM_PER_THREAD);
}
EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
                                        CUstream s)
{
    GATE(1, 1);
    return batch3d(__func__, count, ops, NULL, flags, s);
}
EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
                                             CUstream s)
{
    GATE(1, 1);
    return batch3d(__func__, count, ops, NULL, flags, s ? s : CU_STREAM_PER_THREAD);
}
