/* Fake cuBLAS (libcublas.so.13) and cuBLASLt (libcublasLt.so.13, built with
 * -DFAKE_CUBLASLT): handles, streams, matrix layouts and the matrix products PyTorch,
 * llama.cpp and JAX call, run by the fake GPU (fakegpu_launch_gemm) on the handle's or
 * the call's stream; products through device arrays of pointers too (cublasSgemmBatched,
 * cuBLASLt's pointer-array batch mode), whose pointers the device reads as the product
 * runs. Float32 and bfloat16 operands, host pointer mode; status codes as cuBLAS answers
 * them. As in the real libraries, libcublas links libcublasLt. */
#include "fakecuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int cublasStatus_t;
enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

/* FAKECUDA_GEMM_NARROW_BELOW=M: a kernel chosen for fewer than M rows is "another
 * kernel" that rounds otherwise (alpha scaled by 1 + 1/64), as real cuBLAS may pick a
 * kernel that splits the inner dimension for a smaller shape: the shim must notice that
 * a product computed in slices would not be the whole product, bit for bit. cuBLAS
 * chooses the kernel for the call's own rows; cuBLASLt runs the algorithm it is handed,
 * chosen for the rows its heuristic was asked about (see cublasLtMatmulAlgoGetHeuristic). */
static void narrow_kernel_rounding(struct fakegpu_gemm *gemm, long kernel_rows)
{
    const char *below = getenv("FAKECUDA_GEMM_NARROW_BELOW");
    if (below && kernel_rows < atol(below))
        gemm->alpha *= 1.0f + 1.0f / 64;
}

static cublasStatus_t launch(struct fakegpu_gemm *gemm, long kernel_rows, CUstream stream)
{
    if (gemm->m < 0 || gemm->n < 0 || gemm->k < 0 || gemm->batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (gemm->m == 0 || gemm->n == 0 || gemm->k == 0 || gemm->batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    long a_rows = gemm->transa ? gemm->k : gemm->m;
    long b_rows = gemm->transb ? gemm->n : gemm->k;
    if (gemm->lda < a_rows || gemm->ldb < b_rows || gemm->ldc < gemm->m)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (gemm->type != FAKEGPU_R_32F && gemm->type != FAKEGPU_R_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    narrow_kernel_rounding(gemm, kernel_rows);
    return fakegpu_launch_gemm(gemm, stream) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

#ifndef FAKE_CUBLASLT

struct cublas_handle { uint64_t magic; CUstream stream; int math_mode; };
#define HANDLE_MAGIC 0x43424c4153484e44ULL
typedef struct cublas_handle *cublasHandle_t;

static int handle_ok(cublasHandle_t h) { return h && h->magic == HANDLE_MAGIC; }

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasHandle_t h = calloc(1, sizeof *h);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = HANDLE_MAGIC;
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, CUstream s)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, CUstream *s)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, int mode)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* Host pointer mode only (the fake reads alpha and beta on the host). */
EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, int *mode)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = 0;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, int *mode)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm_on(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha,
                              const void *a, int type, long lda, long stride_a, const void *b, long ldb, long stride_b,
                              const float *beta, void *c, long ldc, long stride_c, int batch)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct fakegpu_gemm gemm = {
        .transa = transa != 0, .transb = transb != 0, .m = m, .n = n, .k = k, .type = type, .batch = batch,
        .alpha = *alpha, .beta = *beta,
        .a = (CUdeviceptr)(uintptr_t)a, .b = (CUdeviceptr)(uintptr_t)b, .c = (CUdeviceptr)(uintptr_t)c,
        .lda = lda, .ldb = ldb, .ldc = ldc, .stride_a = stride_a, .stride_b = stride_b, .stride_c = stride_c,
    };
    return launch(&gemm, m, h->stream);
}

EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha,
                                     const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc)
{
    return gemm_on(h, transa, transb, m, n, k, alpha, a, FAKEGPU_R_32F, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

/* computeType and algo are accepted as given: the fake computes in float32. */
EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, int transa, int transb, int m, int n, int k, const void *alpha,
                                   const void *a, int a_type, int lda, const void *b, int b_type, int ldb,
                                   const void *beta, void *c, int c_type, int ldc, int compute_type, int algo)
{
    if (a_type != b_type || a_type != c_type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_on(h, transa, transb, m, n, k, alpha, a, a_type, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

/* Aarray, Barray and Carray: device arrays of batch_count matrix addresses. */
EXPORT cublasStatus_t cublasSgemmBatched(cublasHandle_t h, int transa, int transb, int m, int n, int k,
                                         const float *alpha, const float *const a_array[], int lda,
                                         const float *const b_array[], int ldb, const float *beta,
                                         float *const c_array[], int ldc, int batch_count)
{
    if (!handle_ok(h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || !a_array || !b_array || !c_array)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct fakegpu_gemm gemm = {
        .transa = transa != 0, .transb = transb != 0, .m = m, .n = n, .k = k, .type = FAKEGPU_R_32F,
        .batch = batch_count, .alpha = *alpha, .beta = *beta, .a = (CUdeviceptr)(uintptr_t)a_array,
        .b = (CUdeviceptr)(uintptr_t)b_array, .c = (CUdeviceptr)(uintptr_t)c_array, .lda = lda, .ldb = ldb,
        .ldc = ldc, .pointer_arrays = 1,
    };
    return launch(&gemm, m, h->stream);
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int transa, int transb, int m, int n, int k,
                                                 const void *alpha, const void *a, int a_type, int lda, long long stride_a,
                                                 const void *b, int b_type, int ldb, long long stride_b, const void *beta,
                                                 void *c, int c_type, int ldc, long long stride_c, int batch,
                                                 int compute_type, int algo)
{
    if (a_type != b_type || a_type != c_type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_on(h, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                   stride_c, batch);
}

#else /* FAKE_CUBLASLT */

/* cublasLtMatrixLayoutAttribute_t; FAKECUDA_LT_NO_BATCH_MODE=1: a cuBLASLt older than
 * 12.9, which refuses LAYOUT_BATCH_MODE (its batches are strided). */
enum { LAYOUT_TYPE = 0, LAYOUT_ORDER = 1, LAYOUT_ROWS = 2, LAYOUT_COLS = 3, LAYOUT_LD = 4,
       LAYOUT_BATCH_COUNT = 5, LAYOUT_STRIDED_BATCH_OFFSET = 6, LAYOUT_BATCH_MODE = 8 };
/* cublasLtBatchMode_t */
enum { BATCH_MODE_STRIDED = 0, BATCH_MODE_POINTER_ARRAY = 1 };
/* cublasLtMatmulDescAttributes_t */
enum { DESC_TRANSA = 3, DESC_TRANSB = 4 };
enum { ORDER_COL = 0, ORDER_ROW = 1 };

struct lt_layout {
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
    int32_t batch_mode;
};
struct lt_desc { int32_t transa, transb; };
typedef struct lt_layout *cublasLtMatrixLayout_t;
typedef struct lt_desc *cublasLtMatmulDesc_t;
typedef void *cublasLtHandle_t;

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    *h = malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, uint32_t type, uint64_t rows,
                                                 uint64_t cols, int64_t ld)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct lt_layout *l = calloc(1, sizeof *l);
    if (!l)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *l = (struct lt_layout){ .type = type, .order = ORDER_COL, .rows = rows, .cols = cols, .ld = ld, .batch = 1 };
    *out = l;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

/* The attribute's storage in the layout and its C size. */
static void *layout_field(struct lt_layout *l, int attr, size_t *size)
{
    switch (attr) {
    case LAYOUT_TYPE: *size = 4; return &l->type;
    case LAYOUT_ORDER: *size = 4; return &l->order;
    case LAYOUT_ROWS: *size = 8; return &l->rows;
    case LAYOUT_COLS: *size = 8; return &l->cols;
    case LAYOUT_LD: *size = 8; return &l->ld;
    case LAYOUT_BATCH_COUNT: *size = 4; return &l->batch;
    case LAYOUT_STRIDED_BATCH_OFFSET: *size = 8; return &l->stride;
    case LAYOUT_BATCH_MODE: {
        const char *old = getenv("FAKECUDA_LT_NO_BATCH_MODE");
        *size = 4;
        return old && *old == '1' ? NULL : &l->batch_mode;
    }
    default: return NULL;
    }
}

EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr, const void *buf, size_t size)
{
    size_t want;
    void *field = l ? layout_field(l, attr, &want) : NULL;
    if (!field || !buf || size != want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, int attr, void *buf, size_t size,
                                                       size_t *written)
{
    size_t want;
    void *field = l ? layout_field(l, attr, &want) : NULL;
    if (!field || !written)
        return CUBLAS_STATUS_INVALID_VALUE;
    *written = want;
    if (size == 0 && !buf)
        return CUBLAS_STATUS_SUCCESS; /* a size query */
    if (!buf || size < want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, field, want);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, int compute_type, int scale_type)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    *out = calloc(1, sizeof **out);
    return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int attr, const void *buf, size_t size)
{
    if (!d || !buf || size != 4)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == DESC_TRANSA)
        memcpy(&d->transa, buf, 4);
    else if (attr == DESC_TRANSB)
        memcpy(&d->transb, buf, 4);
    return CUBLAS_STATUS_SUCCESS;
}

/* An algorithm as the fake heuristic hands it out: the rows of the shape it was chosen
 * for (which decide how its kernel rounds), marked as the fake's. */
struct lt_algo { uint64_t magic, rows, unused[6]; };
#define ALGO_MAGIC 0x4c54414c474f4b4eULL
struct lt_heuristic_result { struct lt_algo algo; size_t workspace; int state; float waves; int reserved[4]; };
typedef void *cublasLtMatmulPreference_t;

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    *out = malloc(1);
    return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, int attr, const void *buf,
                                                           size_t size)
{
    return p && buf && size ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* One algorithm, the one cuBLAS's own GEMM would run for the shape (chosen for its rows);
 * FAKECUDA_LT_HEURISTIC_OTHER=1: another one, chosen as for a narrow shape, so that its
 * result differs from cuBLAS's own where FAKECUDA_GEMM_NARROW_BELOW makes kernels differ. */
EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t ad, cublasLtMatrixLayout_t bd,
                                                     cublasLtMatrixLayout_t cd, cublasLtMatrixLayout_t od,
                                                     cublasLtMatmulPreference_t p, int requested,
                                                     struct lt_heuristic_result *results, int *returned)
{
    if (!h || !d || !ad || !bd || !cd || !od || !p || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    const char *other = getenv("FAKECUDA_LT_HEURISTIC_OTHER");
    memset(results, 0, sizeof *results);
    results->algo = (struct lt_algo){ .magic = ALGO_MAGIC, .rows = other && *other == '1' ? 1 : od->rows };
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* D = alpha op(A) op(B) + beta C; the fake supports column-major layouts and C == D,
 * every layout strided or every one a pointer array. */
EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                                     cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd,
                                     const void *beta, const void *c, cublasLtMatrixLayout_t cd, void *out,
                                     cublasLtMatrixLayout_t od, const void *algo, void *workspace,
                                     size_t workspace_size, CUstream stream)
{
    if (!h || !d || !alpha || !beta || !ad || !bd || !cd || !od)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (ad->order != ORDER_COL || bd->order != ORDER_COL || od->order != ORDER_COL || c != out)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ad->type != bd->type || ad->type != od->type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ad->batch_mode != od->batch_mode || bd->batch_mode != od->batch_mode || cd->batch_mode != od->batch_mode)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    long k = d->transa ? (long)ad->rows : (long)ad->cols;
    struct fakegpu_gemm gemm = {
        .transa = d->transa != 0, .transb = d->transb != 0, .m = (int)od->rows, .n = (int)od->cols, .k = (int)k,
        .type = (int)ad->type, .batch = od->batch,
        .alpha = *(const float *)alpha, .beta = *(const float *)beta,
        .a = (CUdeviceptr)(uintptr_t)a, .b = (CUdeviceptr)(uintptr_t)b, .c = (CUdeviceptr)(uintptr_t)out,
        .lda = ad->ld, .ldb = bd->ld, .ldc = od->ld,
        .stride_a = ad->stride, .stride_b = bd->stride, .stride_c = od->stride,
        .pointer_arrays = od->batch_mode == BATCH_MODE_POINTER_ARRAY,
    };
    const struct lt_algo *chosen = algo;
    long kernel_rows = chosen && chosen->magic == ALGO_MAGIC ? (long)chosen->rows : gemm.m;
    return launch(&gemm, kernel_rows, stream);
}

#endif
