/* Fake libcuda.so.1 (see libcuda.c): kernel launches and tensor maps.
 *
 * Every launch path packs the parameters into one buffer laid out as cuFuncGetParamInfo
 * says (from kernelParams, one pointer per parameter, or from `extra`'s
 * CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE buffer; both at once is CUDA_ERROR_INVALID_VALUE)
 * and queues the kernel on its stream (or its capture's graph). A CUkernel is accepted
 * in place of a CUfunction. Logged as "cuLaunchKernel NAME ..." (whichever path).
 */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <string.h>

#define MAX_THREADS_PER_BLOCK 1024
#define MAX_SHARED_BYTES (227u << 10)

CUresult fake_build_launch(const void *handle, const unsigned grid[3], const unsigned block[3], unsigned shared,
                           void **params, void **extra, struct fg_launch **out)
{
    const struct fg_kernel *k = fake_handle_kernel(handle);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
        (unsigned long long)block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK || block[2] > 64 ||
        grid[1] > 65535 || grid[2] > 65535 || shared > MAX_SHARED_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char buf[4096] = { 0 }; /* the largest kernel's (fakegpu_kernels.c) fits */
    if (extra) {
        void *ptr = NULL;
        size_t *size = NULL;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                ptr = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!ptr || !size || *size < k->argsize)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf, ptr, k->argsize);
    } else if (k->nparams) {
        if (!params)
            return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; i < k->nparams; i++) {
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(buf + k->offset[i], params[i], k->size[i]);
        }
    }
    struct fg_launch *l = fg_launch_new(k, buf);
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    l->handle = (void *)handle;
    memcpy(l->grid, grid, sizeof l->grid);
    memcpy(l->block, block, sizeof l->block);
    l->shared = shared;
    *out = l;
    return CUDA_SUCCESS;
}

static CUresult launch(const char *path, const void *f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, CUstream s, void **params, void **extra)
{
    struct fg_launch *l = NULL;
    CUresult rc = fake_build_launch(f, grid, block, shared, params, extra, &l);
    if (!rc && !fg_stream_usable(s))
        rc = CUDA_ERROR_INVALID_HANDLE;
    unsigned long long count = 0;
    if (!rc && !strcmp(l->k->name, "gb_copy16")) {
        /* The copy kernel's ranges are checked up front, as for any copy. */
        uint64_t dst, src;
        memcpy(&dst, l->args, 8);
        memcpy(&src, l->args + 8, 8);
        memcpy(&count, l->args + 16, 8);
        if (count)
            rc = fg_memcpy_check(dst, src, count * 16);
    }
    const char *name = l ? l->k->name : "?";
    if (!rc)
        rc = fg_kernel_launch(l, s);
    else
        free(l);
    fg_log("cuLaunchKernel %s count=%llu grid=%u block=%u via=%s -> %d", name, count, grid[0], block[0], path, rc);
    return rc;
}

#define DIMS(x, y, z) ((const unsigned[3]){ x, y, z })

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    GATE(1, 1);
    return launch(__func__, f, DIMS(gx, gy, gz), DIMS(bx, by, bz), shared, s, params, extra);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    GATE(1, 1);
    return launch(__func__, f, DIMS(gx, gy, gz), DIMS(bx, by, bz), shared, s ? s : CU_STREAM_PER_THREAD, params,
                  extra);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shared, CUstream s, void **params)
{
    GATE(1, 1);
    return launch(__func__, f, DIMS(gx, gy, gz), DIMS(bx, by, bz), shared, s, params, NULL);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shared, CUstream s, void **params)
{
    GATE(1, 1);
    return launch(__func__, f, DIMS(gx, gy, gz), DIMS(bx, by, bz), shared, s ? s : CU_STREAM_PER_THREAD, params,
                  NULL);
}

static CUresult launch_ex(const char *path, const CUlaunchConfig *c, CUfunction f, void **params, void **extra,
                          int ptsz)
{
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = c->hStream;
    return launch(path, f, DIMS(c->gridDimX, c->gridDimY, c->gridDimZ), DIMS(c->blockDimX, c->blockDimY, c->blockDimZ),
                  c->sharedMemBytes, ptsz && !s ? CU_STREAM_PER_THREAD : s, params, extra);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    GATE(1, 1);
    return launch_ex(__func__, config, f, params, extra, 0);
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    GATE(1, 1);
    return launch_ex(__func__, config, f, params, extra, 1);
}

/* ------------------------------------------------------------------ tensor maps */

/* The global address is never stored as a plain word: word 2 holds a key made of the
 * dimensions, word 1 the address xored with it and rotated left by 3 (fk_tma undoes it). */
EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, unsigned rank, void *global,
                                       const cuuint64_t *dims, const cuuint64_t *strides, const unsigned *box,
                                       const unsigned *element_strides, int interleave, int swizzle, int l2promotion,
                                       int oobfill)
{
    GATE(1, 0);
    uintptr_t addr = (uintptr_t)global;
    if (!map || ((uintptr_t)map & 63) || (unsigned)type > 12 || rank < 1 || rank > 5 || !global || (addr & 15) ||
        !dims || !box || !element_strides || (rank > 1 && !strides) || interleave < 0 || interleave > 2 ||
        swizzle < 0 || swizzle > 3 || l2promotion < 0 || l2promotion > 3 || oobfill < 0 || oobfill > 1)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++) {
        if (!dims[i] || dims[i] > (1ULL << 32) || !box[i] || box[i] > 256 || !element_strides[i] ||
            element_strides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < rank && ((strides[i] & 15) || strides[i] >= (1ULL << 40)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    memset(map, 0, sizeof *map);
    uint64_t key = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)dims[0] << 17) ^ ((uint64_t)type << 5) ^ rank;
    uint64_t x = (uint64_t)addr ^ key;
    map->opaque[0] = 0x1ULL | ((uint64_t)type << 8) | ((uint64_t)rank << 16) | ((uint64_t)interleave << 24) |
                     ((uint64_t)swizzle << 28) | ((uint64_t)l2promotion << 32) | ((uint64_t)oobfill << 36);
    map->opaque[1] = (x << 3) | (x >> 61);
    map->opaque[2] = key;
    for (unsigned i = 0; i < rank; i++) {
        map->opaque[3 + i] = dims[i];
        map->opaque[8 + i] = (uint64_t)box[i] | ((uint64_t)element_strides[i] << 16) |
                             (i + 1 < rank ? strides[i] << 20 : 0);
    }
    fg_log("cuTensorMapEncodeTiled rank=%u -> 0", rank);
    return CUDA_SUCCESS;
}

/* Texture objects: over linear or pitched device memory the fake knows (arrays are not
 * modelled: CUDA_ERROR_NOT_SUPPORTED). */
EXPORT CUresult cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *desc,
                                  const void *view)
{
    GATE(1, 1);
    (void)view;
    CUresult rc;
    if (!tex || !res || !desc)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (res->resType != CU_RESOURCE_TYPE_LINEAR && res->resType != CU_RESOURCE_TYPE_PITCH2D)
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (!strcmp(fakegpu_ptr_kind(res->res.linear.devPtr), "none"))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = fg_texture_create(tex, res->res.linear.devPtr);
    fg_log("cuTexObjectCreate type=%d ptr=%#llx -> %d", res ? res->resType : -1, res ? res->res.linear.devPtr : 0, rc);
    return rc;
}

EXPORT CUresult cuTexObjectDestroy(CUtexObject tex)
{
    GATE(1, 1);
    CUresult rc = fg_texture_destroy(tex);
    fg_log("cuTexObjectDestroy %llu -> %d", tex, rc);
    return rc;
}
