/* Tests of GEMM operand staging: a program that multiplies with cuBLAS/cuBLASLt (as
 * PyTorch does) while its weights live in T2. Built into gbgemm (linked against
 * libcudart.so.13, libcublas.so.13 and libcublasLt.so.13) and libgbgemm.so (the same
 * loaded RTLD_LOCAL by gbtest-fw, as python loads torch). Entry: gbtests_main.
 *
 * The runner sets a VRAM budget whose reserve is the whole budget, so that every
 * allocation of 2 MiB or more made before the program creates its cuBLAS handle goes to
 * T2 (the weights) and smaller ones to VRAM (the activations). Each product's result is compared with
 * the same arithmetic done on the host, bit for bit; where the device read each operand
 * from is in the fake's log ("GEMM a=<kind> b=<kind>"), which the runner checks. */
#define _GNU_SOURCE
#include "testutil.h"
#include "shimstats.h"

#include <stdint.h>

typedef int cublasStatus_t;
typedef struct cublas_handle *cublasHandle_t;
typedef void *cublasLtHandle_t;
typedef struct lt_layout *cublasLtMatrixLayout_t;
typedef struct lt_desc *cublasLtMatmulDesc_t;

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);

cublasStatus_t cublasCreate_v2(cublasHandle_t *h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha,
                              const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, int transa, int transb, int m, int n, int k, const void *alpha,
                            const void *a, int a_type, int lda, const void *b, int b_type, int ldb, const void *beta,
                            void *c, int c_type, int ldc, int compute_type, int algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, int transa, int transb, int m, int n, int k,
                                          const void *alpha, const void *a, int a_type, int lda, long long stride_a,
                                          const void *b, int b_type, int ldb, long long stride_b, const void *beta,
                                          void *c, int c_type, int ldc, long long stride_c, int batch,
                                          int compute_type, int algo);
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, uint32_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr, const void *buf, size_t size);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int compute_type, int scale_type);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int attr, const void *buf, size_t size);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd, const void *beta,
                              const void *c, cublasLtMatrixLayout_t cd, void *out, cublasLtMatrixLayout_t od,
                              const void *algo, void *workspace, size_t workspace_size, cudaStream_t stream);

enum { OP_N = 0, OP_T = 1 };
enum { COMPUTE_32F = 68, ALGO_DEFAULT = -1 };

/* The weight: K x M stored column-major (lda = K) and used transposed, as a PyTorch
 * Linear's weight is; 4 MiB in float32, so it is large enough to go to T2. */
#define K 1024
#define M 1024

static const char *kind(const void *p) { return fakegpu_ptr_kind((CUdeviceptr)(uintptr_t)p); }

/* Small exact values (multiples of 1/8 up to 4): every sum is exact in float32, so the
 * host's and the device's results must agree to the bit, in any summation order. */
static float value_at(uint32_t seed, size_t i) { return (float)((i * 2654435761u + seed * 40503u) % 33) / 8.0f - 2.0f; }

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return (uint16_t)(bits >> 16);
}

/* What storing f as bfloat16 keeps (as the fake GPU stores it). The bits pass through a
 * volatile: GCC 12 at -O2 dropped the truncation of a float -> bf16 -> float round trip
 * in the loop below. */
static float truncate_to_bf16(float f)
{
    volatile uint32_t bits;
    memcpy((void *)&bits, &f, 4);
    uint32_t kept = bits & 0xffff0000u;
    memcpy(&f, &kept, 4);
    return f;
}

/* A device buffer of `count` elements of `type` (0 float32, 14 bfloat16) filled from `seed`. */
/* What the device reads a weight placed in T2 from: pinned T2 ("hostreg"), or with
 * GBGEMM_T2_KIND=managed movable T2 (GREENBOOST_TIERING=on). */
static const char *t2_kind(void)
{
    const char *kind = getenv("GBGEMM_T2_KIND");
    return kind && *kind ? kind : "hostreg";
}

static void *upload(size_t count, int type, uint32_t seed, const char *expect_kind)
{
    size_t size = type == 14 ? 2 : 4;
    unsigned char *host = malloc(count * size);
    for (size_t i = 0; i < count; i++) {
        float v = value_at(seed, i);
        if (type == 14) {
            uint16_t h = float_to_bf16(v);
            memcpy(host + i * 2, &h, 2);
        } else {
            memcpy(host + i * 4, &v, 4);
        }
    }
    void *dev = NULL;
    OK(cudaMalloc(&dev, count * size));
    OK(cudaMemcpy(dev, host, count * size, cudaMemcpyHostToDevice));
    free(host);
    if (expect_kind)
        CHECK(!strcmp(kind(dev), expect_kind), "a %zu-byte buffer is in %s, expected %s\n", count * size, kind(dev),
              expect_kind);
    return dev;
}

/* Checks C (m x n, ldc = m; batch matrices stride_c apart) against op(A) x B computed
 * here: A stored k x m (transposed use) with stride_a, B stored k x n with stride_b. */
static void check_product(const void *c_dev, int type, int m, int n, int k, uint32_t seed_a, long stride_a,
                          uint32_t seed_b, long stride_b, int batch, const char *what)
{
    size_t size = type == 14 ? 2 : 4;
    size_t count = (size_t)m * n * batch;
    unsigned char *c = malloc(count * size);
    OK(cudaMemcpy(c, c_dev, count * size, cudaMemcpyDeviceToHost));
    for (int t = 0; t < batch; t++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float sum = 0;
                for (int l = 0; l < k; l++) {
                    float a = value_at(seed_a, (size_t)t * stride_a + l + (size_t)i * k);
                    float b = value_at(seed_b, (size_t)t * stride_b + l + (size_t)j * k);
                    if (type == 14) {
                        a = truncate_to_bf16(a);
                        b = truncate_to_bf16(b);
                    }
                    sum += a * b;
                }
                size_t index = (size_t)t * m * n + i + (size_t)j * m;
                float got;
                if (type == 14) {
                    uint16_t h;
                    memcpy(&h, c + index * 2, 2);
                    got = bf16_to_float(h);
                    sum = truncate_to_bf16(sum);
                } else {
                    memcpy(&got, c + index * 4, 4);
                }
                CHECK(memcmp(&got, &sum, 4) == 0, "%s: C[%d,%d] of batch %d is %g, expected %g\n", what, i, j, t,
                      got, sum);
            }
    free(c);
}

/* Wide products of a T2 weight through every hooked entry point, then a narrow one;
 * afterwards a 4 MiB allocation goes to VRAM (the reserve opened with the handle). */
static int t_products(int argc, char **argv)
{
    const float one = 1, zero = 0;
    /* Weights before the handle: the program "loads" before it computes. */
    float *w = upload((size_t)K * M, 0, 1, t2_kind());
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    const int wide = 64, narrow = 8;
    float *x = upload((size_t)K * wide, 0, 2, "vram");
    float *y = NULL;
    OK(cudaMalloc((void **)&y, (size_t)M * wide * 4));

    /* The shim's own copies (staging's, its copy kernel's) are its work, not the
     * program's: the device runs them, the shim's counts of the program's copies and
     * launches do not move. */
    struct shim_stats before = shim_stats();
    unsigned long long device_before = fakegpu_count("memcpy") + fakegpu_count("kernel@gb_copy16");
    OK(cublasSgemm_v2(h, OP_T, OP_N, M, wide, K, &one, w, K, x, K, &zero, y, M));
    OK(cudaDeviceSynchronize());
    struct shim_stats after = shim_stats();
    printf("the shim's own copies: %llu\n", fakegpu_count("memcpy") + fakegpu_count("kernel@gb_copy16") - device_before);
    CHECK(after.memory_ops == before.memory_ops && after.launches == before.launches,
          "the shim counted its staging as the program's work: %llu copies and memsets, %llu launches\n",
          after.memory_ops - before.memory_ops, after.launches - before.launches);
    check_product(y, 0, M, wide, K, 1, 0, 2, 0, 1, "cublasSgemm_v2 (wide)");

    OK(cublasGemmEx(h, OP_T, OP_N, M, narrow, K, &one, w, 0, K, x, 0, K, &zero, y, 0, M, COMPUTE_32F, ALGO_DEFAULT));
    check_product(y, 0, M, narrow, K, 1, 0, 2, 0, 1, "cublasGemmEx (narrow)");

    OK(cublasGemmEx(h, OP_T, OP_N, M, wide, K, &one, w, 0, K, x, 0, K, &zero, y, 0, M, COMPUTE_32F, ALGO_DEFAULT));
    check_product(y, 0, M, wide, K, 1, 0, 2, 0, 1, "cublasGemmEx (wide)");

    /* One weight broadcast over a batch of 3 (stride 0), three activation matrices. */
    float *xs = upload((size_t)K * wide * 3, 0, 3, "vram");
    float *ys = NULL;
    OK(cudaMalloc((void **)&ys, (size_t)M * wide * 3 * 4));
    OK(cublasGemmStridedBatchedEx(h, OP_T, OP_N, M, wide, K, &one, w, 0, K, 0, xs, 0, K, (long long)K * wide, &zero, ys,
                                  0, M, (long long)M * wide, 3, COMPUTE_32F, ALGO_DEFAULT));
    check_product(ys, 0, M, wide, K, 1, 0, 3, (long)K * wide, 3, "cublasGemmStridedBatchedEx (broadcast weight)");

    /* cuBLASLt: D (M x wide) = W^T X, column-major layouts. */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t wl, xl, yl;
    int transposed = OP_T;
    OK(cublasLtCreate(&lt));
    OK(cublasLtMatmulDescCreate(&desc, COMPUTE_32F, 0));
    OK(cublasLtMatmulDescSetAttribute(desc, 3, &transposed, sizeof transposed));
    OK(cublasLtMatrixLayoutCreate(&wl, 0, K, M, K));
    OK(cublasLtMatrixLayoutCreate(&xl, 0, K, wide, K));
    OK(cublasLtMatrixLayoutCreate(&yl, 0, M, wide, M));
    OK(cublasLtMatmul(lt, desc, &one, w, wl, x, xl, &zero, y, yl, y, yl, NULL, NULL, 0, NULL));
    check_product(y, 0, M, wide, K, 1, 0, 2, 0, 1, "cublasLtMatmul (wide)");

    /* The program computes: what it allocates now may use the reserve. */
    void *activation = NULL;
    OK(cudaMalloc(&activation, 4 * MiB));
    CHECK(in_vram((CUdeviceptr)(uintptr_t)activation), "a 4 MiB allocation after the first product is in %s, not VRAM\n",
          kind(activation));
    OK(cudaFree(activation));
    OK(cudaFree(ys));
    OK(cudaFree(xs));
    OK(cudaFree(y));
    OK(cudaFree(x));
    OK(cudaFree(w));
    OK(cublasDestroy_v2(h));
    return 0;
}

/* bfloat16 through cublasGemmEx, with the weight at an odd offset inside its buffer:
 * the staged copy must keep the operand's alignment and its bytes. */
static int t_bf16_offset(int argc, char **argv)
{
    const float one = 1, zero = 0;
    const int wide = 48;
    /* 2 extra elements before the weight: a 4-byte offset. */
    unsigned char *buffer = upload((size_t)K * M + 2, 14, 0, t2_kind());
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    uint16_t *host = malloc((size_t)K * M * 2);
    for (size_t i = 0; i < (size_t)K * M; i++)
        host[i] = float_to_bf16(value_at(5, i));
    OK(cudaMemcpy(buffer + 4, host, (size_t)K * M * 2, cudaMemcpyHostToDevice));
    free(host);
    void *x = upload((size_t)K * wide, 14, 6, "vram");
    void *y = NULL;
    OK(cudaMalloc(&y, (size_t)M * wide * 2));
    OK(cublasGemmEx(h, OP_T, OP_N, M, wide, K, &one, buffer + 4, 14, K, x, 14, K, &zero, y, 14, M, COMPUTE_32F,
                    ALGO_DEFAULT));
    check_product(y, 14, M, wide, K, 5, 0, 6, 0, 1, "cublasGemmEx bf16 at offset 4");
    OK(cudaFree(y));
    OK(cudaFree(x));
    OK(cudaFree(buffer));
    OK(cublasDestroy_v2(h));
    return 0;
}

/* Two streams share the scratch: the first stream is held with a staged product queued;
 * the second stream's product must not overwrite the scratch before the first has read
 * it (both results are checked). */
static int t_two_streams(int argc, char **argv)
{
    const float one = 1, zero = 0;
    cudaStream_t s1, s2;
    OK(cudaStreamCreateWithFlags(&s1, 1));
    OK(cudaStreamCreateWithFlags(&s2, 1));
    const int wide = 64;
    float *w1 = upload((size_t)K * M, 0, 11, t2_kind());
    float *w2 = upload((size_t)K * M, 0, 12, t2_kind());
    cublasHandle_t h1, h2;
    OK(cublasCreate_v2(&h1));
    OK(cublasCreate_v2(&h2));
    OK(cublasSetStream_v2(h1, s1));
    OK(cublasSetStream_v2(h2, s2));
    float *x = upload((size_t)K * wide, 0, 13, "vram");
    float *y1 = NULL, *y2 = NULL;
    OK(cudaMalloc((void **)&y1, (size_t)M * wide * 4));
    OK(cudaMalloc((void **)&y2, (size_t)M * wide * 4));
    /* A first product sizes the scratch (no growth while a stream is held). */
    OK(cublasSgemm_v2(h1, OP_T, OP_N, M, wide, K, &one, w1, K, x, K, &zero, y1, M));
    OK(cudaStreamSynchronize(s1));
    fakegpu_stream_hold(s1);
    OK(cublasSgemm_v2(h1, OP_T, OP_N, M, wide, K, &one, w1, K, x, K, &zero, y1, M));
    OK(cublasSgemm_v2(h2, OP_T, OP_N, M, wide, K, &one, w2, K, x, K, &zero, y2, M));
    fakegpu_stream_release(s1);
    OK(cudaStreamSynchronize(s1));
    OK(cudaStreamSynchronize(s2));
    check_product(y1, 0, M, wide, K, 11, 0, 13, 0, 1, "stream 1");
    check_product(y2, 0, M, wide, K, 12, 0, 13, 0, 1, "stream 2");
    OK(cudaFree(y2));
    OK(cudaFree(y1));
    OK(cudaFree(x));
    OK(cudaFree(w2));
    OK(cudaFree(w1));
    OK(cublasDestroy_v2(h2));
    OK(cublasDestroy_v2(h1));
    OK(cudaStreamDestroy(s2));
    OK(cudaStreamDestroy(s1));
    return 0;
}

/* A product on a stream being captured into a graph reads the weight where it is. */
static int t_capture(int argc, char **argv)
{
    const float one = 1, zero = 0;
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, 1));
    const int wide = 64;
    float *w = upload((size_t)K * M, 0, 21, t2_kind());
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    OK(cublasSetStream_v2(h, s));
    float *x = upload((size_t)K * wide, 0, 22, "vram");
    float *y = NULL;
    OK(cudaMalloc((void **)&y, (size_t)M * wide * 4));
    fakegpu_stream_set_capturing(s, 1);
    OK(cublasSgemm_v2(h, OP_T, OP_N, M, wide, K, &one, w, K, x, K, &zero, y, M));
    fakegpu_stream_set_capturing(s, 0);
    OK(cudaStreamSynchronize(s));
    check_product(y, 0, M, wide, K, 21, 0, 22, 0, 1, "captured product");
    OK(cudaFree(y));
    OK(cudaFree(x));
    OK(cudaFree(w));
    OK(cublasDestroy_v2(h));
    OK(cudaStreamDestroy(s));
    return 0;
}

/* Pipelined staging (GREENBOOST_STAGE_SLICES): a weight of 8192 rows of 1 KiB, wide
 * enough to be copied in two slices of 4 MiB, times 128 columns. The first product
 * verifies its shape (slices into a copy of the output, the whole product into the
 * output), the next ones are computed in slices (the shim's summary counts them): a
 * plain one, one with beta = 1 (the slices must add to what the output held), and one
 * after a rewrite of the weight enqueued on the held stream before it (each slice's
 * copy is ordered after everything enqueued before the product). Every output is
 * checked against the host's arithmetic. */
#define SLICED_K 256
#define SLICED_M 8192
#define SLICED_N 128

static float *host_values(size_t count, uint32_t seed)
{
    float *v = malloc(count * sizeof *v);
    for (size_t i = 0; i < count; i++)
        v[i] = value_at(seed, i);
    return v;
}

/* C (SLICED_M x SLICED_N) must be scale * op(A) x B, A stored k x m transposed. */
static void check_sliced(const float *c_dev, uint32_t seed_a, uint32_t seed_b, float scale, const char *what)
{
    float *a = host_values((size_t)SLICED_K * SLICED_M, seed_a), *b = host_values((size_t)SLICED_K * SLICED_N, seed_b);
    float *c = malloc((size_t)SLICED_M * SLICED_N * sizeof *c);
    OK(cudaMemcpy(c, c_dev, (size_t)SLICED_M * SLICED_N * 4, cudaMemcpyDeviceToHost));
    for (int j = 0; j < SLICED_N; j++)
        for (int i = 0; i < SLICED_M; i++) {
            float sum = 0;
            for (int l = 0; l < SLICED_K; l++)
                sum += a[l + (size_t)i * SLICED_K] * b[l + (size_t)j * SLICED_K];
            float want = sum * scale, got = c[i + (size_t)j * SLICED_M];
            CHECK(memcmp(&got, &want, 4) == 0, "%s: C[%d,%d] is %g, expected %g\n", what, i, j, got, want);
        }
    free(c);
    free(b);
    free(a);
}

static int t_sliced(int argc, char **argv)
{
    const float one = 1, zero = 0;
    float *w = upload((size_t)SLICED_K * SLICED_M, 0, 51, t2_kind());
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, 1));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    OK(cublasSetStream_v2(h, s));
    float *x = upload((size_t)SLICED_K * SLICED_N, 0, 52, "vram");
    float *y = NULL;
    OK(cudaMalloc((void **)&y, (size_t)SLICED_M * SLICED_N * 4));
    for (int round = 0; round < 2; round++) {
        OK(cublasSgemm_v2(h, OP_T, OP_N, SLICED_M, SLICED_N, SLICED_K, &one, w, SLICED_K, x, SLICED_K, &zero, y,
                          SLICED_M));
        OK(cudaStreamSynchronize(s));
        check_sliced(y, 51, 52, 1, round ? "the second product" : "the first product");
    }
    OK(cublasSgemm_v2(h, OP_T, OP_N, SLICED_M, SLICED_N, SLICED_K, &one, w, SLICED_K, x, SLICED_K, &one, y, SLICED_M));
    OK(cudaStreamSynchronize(s));
    check_sliced(y, 51, 52, 2, "beta = 1 on the last output");
    float *fresh = host_values((size_t)SLICED_K * SLICED_M, 53);
    fakegpu_stream_hold(s);
    OK(cudaMemcpyAsync(w, fresh, (size_t)SLICED_K * SLICED_M * 4, cudaMemcpyHostToDevice, s));
    OK(cublasSgemm_v2(h, OP_T, OP_N, SLICED_M, SLICED_N, SLICED_K, &one, w, SLICED_K, x, SLICED_K, &zero, y,
                      SLICED_M));
    fakegpu_stream_release(s);
    OK(cudaStreamSynchronize(s));
    check_sliced(y, 53, 52, 1, "the product after the weight's rewrite");
    free(fresh);
    OK(cudaFree(y));
    OK(cudaFree(x));
    OK(cudaFree(w));
    OK(cublasDestroy_v2(h));
    OK(cudaStreamDestroy(s));
    return 0;
}

static const struct named_test tests[] = {
    { "products", t_products },
    { "bf16-offset", t_bf16_offset },
    { "two-streams", t_two_streams },
    { "capture", t_capture },
    { "sliced", t_sliced },
};

int gbtests_main(int argc, char **argv)
{
    return run_named_test(tests, sizeof tests / sizeof tests[0], argc, argv, NULL);
}
