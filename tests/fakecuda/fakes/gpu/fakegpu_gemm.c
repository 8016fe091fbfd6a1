/* libfakegpu.so: matrix products. The fake cuBLAS's GEMMs (fp32 and bf16), computed on
 * the fake GPU's views. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ matrix products */

static float element_get(const unsigned char *base, int type, size_t index)
{
    if (type == FAKEGPU_R_16BF) {
        uint16_t half;
        memcpy(&half, base + index * 2, 2);
        uint32_t bits = (uint32_t)half << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    float f;
    memcpy(&f, base + index * 4, 4);
    return f;
}

static void element_set(unsigned char *base, int type, size_t index, float f)
{
    if (type == FAKEGPU_R_16BF) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint16_t half = (uint16_t)(bits >> 16); /* truncation: deterministic is enough */
        memcpy(base + index * 2, &half, 2);
        return;
    }
    memcpy(base + index * 4, &f, 4);
}

static size_t element_size(int type) { return type == FAKEGPU_R_16BF ? 2 : 4; }

/* Bytes a column-major rows x cols matrix (ld) spans, over the batch. */
static size_t gemm_span(long rows, long cols, long ld, long stride, int batch, int type)
{
    return ((size_t)stride * (size_t)(batch - 1) + (size_t)ld * (size_t)(cols - 1) + (size_t)rows) * element_size(type);
}

/* What the device sees at p, for the log ("none" when nothing). Lock not held. */
static const char *kind_at(uintptr_t p)
{
    size_t c;
    const char *k = "none";
    pthread_mutex_lock(&g.lock);
    if (!device_view(p, &c, &k))
        k = "none";
    pthread_mutex_unlock(&g.lock);
    return k;
}

/* A product through pointer arrays: each of the batch's matrix addresses read from the
 * arrays through the device's view as the product runs, each product computed alone. */
static CUresult run_gemm_pointer_arrays(struct fake_stream *s, const struct fakegpu_gemm *m)
{
    for (int i = 0; i < m->batch; i++) {
        struct fakegpu_gemm one = *m;
        one.batch = 1;
        one.pointer_arrays = 0;
        one.stride_a = one.stride_b = one.stride_c = 0;
        size_t at = (size_t)i * sizeof(CUdeviceptr);
        if (!copy_range((uintptr_t)&one.a, m->a + at, sizeof one.a))
            return fault(s, "gemm A array", m->a, at + sizeof one.a);
        if (!copy_range((uintptr_t)&one.b, m->b + at, sizeof one.b))
            return fault(s, "gemm B array", m->b, at + sizeof one.b);
        if (!copy_range((uintptr_t)&one.c, m->c + at, sizeof one.c))
            return fault(s, "gemm C array", m->c, at + sizeof one.c);
        CUresult rc = run_gemm(s, &one);
        if (rc)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* C = alpha op(A) op(B) + beta C, column-major, read and written through the device's
 * view as a kernel would: operands are gathered into host buffers first. */
CUresult run_gemm(struct fake_stream *s, const struct fakegpu_gemm *m)
{
    if (m->pointer_arrays)
        return run_gemm_pointer_arrays(s, m);
    long a_rows = m->transa ? m->k : m->m, a_cols = m->transa ? m->m : m->k;
    long b_rows = m->transb ? m->n : m->k, b_cols = m->transb ? m->k : m->n;
    size_t a_span = gemm_span(a_rows, a_cols, m->lda, m->stride_a, m->batch, m->type);
    size_t b_span = gemm_span(b_rows, b_cols, m->ldb, m->stride_b, m->batch, m->type);
    size_t c_span = gemm_span(m->m, m->n, m->ldc, m->stride_c, m->batch, m->type);
    fg_log("GEMM a=%s b=%s m=%d n=%d k=%d batch=%d", kind_at(m->a), kind_at(m->b), m->m, m->n, m->k, m->batch);
    unsigned char *a = malloc(a_span), *b = malloc(b_span), *c = malloc(c_span);
    CUresult rc = CUDA_SUCCESS;
    if (!a || !b || !c) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!copy_range((uintptr_t)a, m->a, a_span)) {
        rc = fault(s, "gemm A", m->a, a_span);
    } else if (!copy_range((uintptr_t)b, m->b, b_span)) {
        rc = fault(s, "gemm B", m->b, b_span);
    } else if (!copy_range((uintptr_t)c, m->c, c_span)) {
        rc = fault(s, "gemm C", m->c, c_span);
    } else {
        for (int batch = 0; batch < m->batch; batch++) {
            size_t ao = (size_t)batch * m->stride_a, bo = (size_t)batch * m->stride_b, co = (size_t)batch * m->stride_c;
            for (long j = 0; j < m->n; j++)
                for (long i = 0; i < m->m; i++) {
                    float sum = 0;
                    for (long l = 0; l < m->k; l++) {
                        size_t ai = m->transa ? (size_t)(l + i * m->lda) : (size_t)(i + l * m->lda);
                        size_t bi = m->transb ? (size_t)(j + l * m->ldb) : (size_t)(l + j * m->ldb);
                        sum += element_get(a, m->type, ao + ai) * element_get(b, m->type, bo + bi);
                    }
                    size_t ci = co + (size_t)(i + j * m->ldc);
                    float old = m->beta != 0 ? element_get(c, m->type, ci) : 0;
                    element_set(c, m->type, ci, m->alpha * sum + m->beta * old);
                }
        }
        if (!copy_range(m->c, (uintptr_t)c, c_span))
            rc = fault(s, "gemm C", m->c, c_span);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}
