/* Fake libcuda.so.1 (see libcuda.c): memsets of 8/16/32-bit elements (1D and pitched
 * 2D), 2D and 3D copies, 3D and 1D peer copies and batched copies, each in its
 * synchronous, async and per-thread-default-stream forms. (cuMemsetD8_v2, cuMemsetD8Async and the 1D
 * copies are in libcuda_memory.c.) Work on a capturing stream becomes graph nodes. */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <string.h>

/* ------------------------------------------------------------------ memsets */

static CUresult memset_call(const char *name, CUdeviceptr p, size_t pitch, unsigned v, unsigned elem, size_t w,
                            size_t h, CUstream s, int async)
{
    CUresult rc = fg_memset2d(p, pitch, v, elem, w, h, s, async);
    fg_log("%s ptr=%#llx pitch=%zu value=%#x width=%zu height=%zu -> %d", name, p, pitch, v, w, h, rc);
    return rc;
}

#define PTS(s) ((s) ? (s) : CU_STREAM_PER_THREAD)
#define MEMSET1D(name, type, elem, ptname)                                                         \
    EXPORT CUresult name(CUdeviceptr p, type v, size_t n)                                          \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, 0, v, elem, n, 1, NULL, 0);                                \
    }                                                                                              \
    EXPORT CUresult ptname(CUdeviceptr p, type v, size_t n)                                        \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, 0, v, elem, n, 1, CU_STREAM_PER_THREAD, 1);                \
    }
#define MEMSET1D_ASYNC(name, type, elem, ptname)                                                   \
    EXPORT CUresult name(CUdeviceptr p, type v, size_t n, CUstream s)                              \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, 0, v, elem, n, 1, s, 1);                                   \
    }                                                                                              \
    EXPORT CUresult ptname(CUdeviceptr p, type v, size_t n, CUstream s)                            \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, 0, v, elem, n, 1, PTS(s), 1);                              \
    }
#define MEMSET2D(name, type, elem, ptname)                                                         \
    EXPORT CUresult name(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h)                  \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, pitch, v, elem, w, h, NULL, 0);                            \
    }                                                                                              \
    EXPORT CUresult ptname(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h)                \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, pitch, v, elem, w, h, CU_STREAM_PER_THREAD, 1);            \
    }
#define MEMSET2D_ASYNC(name, type, elem, ptname)                                                   \
    EXPORT CUresult name(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h, CUstream s)      \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, pitch, v, elem, w, h, s, 1);                               \
    }                                                                                              \
    EXPORT CUresult ptname(CUdeviceptr p, size_t pitch, type v, size_t w, size_t h, CUstream s)    \
    {                                                                                              \
        GATE(1, 1);                                                                                \
        return memset_call(__func__, p, pitch, v, elem, w, h, PTS(s), 1);                          \
    }

EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr p, unsigned char v, size_t n)
{
    GATE(1, 1);
    return memset_call(__func__, p, 0, v, 1, n, 1, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
    GATE(1, 1);
    return memset_call(__func__, p, 0, v, 1, n, 1, PTS(s), 1);
}
MEMSET1D(cuMemsetD16_v2, unsigned short, 2, cuMemsetD16_v2_ptds)
MEMSET1D(cuMemsetD32_v2, unsigned int, 4, cuMemsetD32_v2_ptds)
MEMSET1D_ASYNC(cuMemsetD16Async, unsigned short, 2, cuMemsetD16Async_ptsz)
MEMSET1D_ASYNC(cuMemsetD32Async, unsigned int, 4, cuMemsetD32Async_ptsz)
MEMSET2D(cuMemsetD2D8_v2, unsigned char, 1, cuMemsetD2D8_v2_ptds)
MEMSET2D(cuMemsetD2D16_v2, unsigned short, 2, cuMemsetD2D16_v2_ptds)
MEMSET2D(cuMemsetD2D32_v2, unsigned int, 4, cuMemsetD2D32_v2_ptds)
MEMSET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, cuMemsetD2D8Async_ptsz)
MEMSET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, cuMemsetD2D16Async_ptsz)
MEMSET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, cuMemsetD2D32Async_ptsz)

/* ------------------------------------------------------------------ 2D, 3D copies */

static CUresult copy3d_call(const char *name, const CUDA_MEMCPY3D *p, CUstream s, int async)
{
    CUresult rc = fg_memcpy3d(p, s, async);
    fg_log("%s width=%zu height=%zu depth=%zu -> %d", name, p ? p->WidthInBytes : 0, p ? p->Height : 0,
           p ? p->Depth : 0, rc);
    return rc;
}

static CUresult copy2d_call(const char *name, const CUDA_MEMCPY2D *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D c = {
        .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost,
        .srcDevice = p->srcDevice, .srcArray = p->srcArray, .srcPitch = p->srcPitch,
        .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost,
        .dstDevice = p->dstDevice, .dstArray = p->dstArray, .dstPitch = p->dstPitch,
        .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1,
    };
    /* A 2D copy's pitches must hold its width, whatever its height. */
    if ((p->srcPitch && p->srcPitch < p->WidthInBytes) || (p->dstPitch && p->dstPitch < p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    return copy3d_call(name, &c, s, async);
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { GATE(1, 1); return copy2d_call(__func__, p, NULL, 0); }
EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p)
{
    GATE(1, 1);
    return copy2d_call(__func__, p, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { GATE(1, 1); return copy2d_call(__func__, p, NULL, 0); }
EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
    GATE(1, 1);
    return copy2d_call(__func__, p, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { GATE(1, 1); return copy2d_call(__func__, p, s, 1); }
EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s)
{
    GATE(1, 1);
    return copy2d_call(__func__, p, PTS(s), 1);
}
EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { GATE(1, 1); return copy3d_call(__func__, p, NULL, 0); }
EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p)
{
    GATE(1, 1);
    return copy3d_call(__func__, p, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { GATE(1, 1); return copy3d_call(__func__, p, s, 1); }
EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s)
{
    GATE(1, 1);
    return copy3d_call(__func__, p, PTS(s), 1);
}

/* A 3D copy between contexts: both must be valid (the fake's devices share one address
 * space, so the copy itself is a 3D copy). */
static CUresult copy3d_peer_call(const char *name, const CUDA_MEMCPY3D_PEER *p, CUstream s, int async)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fg_ctx_valid(p->srcContext) || !fg_ctx_valid(p->dstContext))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUDA_MEMCPY3D c;
    _Static_assert(sizeof c == sizeof *p, "CUDA_MEMCPY3D_PEER has CUDA_MEMCPY3D's layout");
    memcpy(&c, p, sizeof c);
    c.reserved0 = c.reserved1 = NULL;
    return copy3d_call(name, &c, s, async);
}

EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { GATE(1, 0); return copy3d_peer_call(__func__, p, NULL, 0); }
EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p)
{
    GATE(1, 0);
    return copy3d_peer_call(__func__, p, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    GATE(1, 0);
    return copy3d_peer_call(__func__, p, s, 1);
}
EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    GATE(1, 0);
    return copy3d_peer_call(__func__, p, PTS(s), 1);
}

/* ------------------------------------------------------------------ peer copies */

static CUresult peer_call(const char *name, CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                          size_t n, CUstream s, int async)
{
    CUresult rc = !fg_ctx_valid(dctx) || !fg_ctx_valid(sctx) ? CUDA_ERROR_INVALID_CONTEXT
                                                              : fg_memcpy(dst, src, n, s, async);
    fg_log("%s dst=%#llx src=%#llx size=%zu -> %d", name, dst, src, n, rc);
    return rc;
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    GATE(1, 0);
    return peer_call(__func__, dst, dctx, src, sctx, n, NULL, 0);
}
EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    GATE(1, 0);
    return peer_call(__func__, dst, dctx, src, sctx, n, CU_STREAM_PER_THREAD, 1);
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                  CUstream s)
{
    GATE(1, 0);
    return peer_call(__func__, dst, dctx, src, sctx, n, s, 1);
}
EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                       CUstream s)
{
    GATE(1, 0);
    return peer_call(__func__, dst, dctx, src, sctx, n, PTS(s), 1);
}

/* ------------------------------------------------------------------ batched copies */

/* CUDA 12.8's cuMemcpyBatchAsync (failIdx) and CUDA 13's _v2 (none): pointer-to-pointer
 * copies in stream order; attrs[k] applies from attrsIdxs[k] (attrsIdxs[0] == 0,
 * increasing). Not on the legacy NULL stream. *failIdx: the copy at fault, or SIZE_MAX
 * when the error is not one copy's. */
static CUresult batch(const char *name, CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s)
{
    if (fail)
        *fail = SIZE_MAX;
    CUresult rc = CUDA_SUCCESS;
    if (!count || !dsts || !srcs || !sizes || !attrs || !idxs || !nattrs || nattrs > count || idxs[0] != 0 ||
        s == NULL || s == CU_STREAM_LEGACY)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nattrs && !rc; k++)
        if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count ||
            attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
            rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count && !rc; i++)
        if ((rc = sizes[i] ? fg_memcpy_check(dsts[i], srcs[i], sizes[i]) : CUDA_SUCCESS) && fail)
            *fail = i;
    for (size_t i = 0; i < count && !rc; i++)
        if ((rc = fg_memcpy(dsts[i], srcs[i], sizes[i], s, 1)) && fail)
            *fail = i;
    fg_log("%s count=%zu -> %d", name, count, rc);
    return rc;
}

EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                   CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s)
{
    GATE(1, 1);
    return batch(__func__, dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, s);
}
EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                        CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
                                        CUstream s)
{
    GATE(1, 1);
    return batch(__func__, dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, PTS(s));
}
EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s)
{
    GATE(1, 1);
    return batch(__func__, dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s);
}
EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                           CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s)
{
    GATE(1, 1);
    return batch(__func__, dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, PTS(s));
}
