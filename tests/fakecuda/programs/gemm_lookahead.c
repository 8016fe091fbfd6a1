/* gbahead WRITER: look-ahead staging (GREENBOOST_STAGE_LOOKAHEAD) is correct whatever
 * writes the operand it copied ahead.
 *
 * Two T2 weights, W1 and W2 (K x M floats, used transposed as a Linear's weight), are
 * multiplied in turn with x, four rounds; every result is compared with the host's,
 * exactly (the values are multiples of 1/8: every sum is exact in float32). From the
 * second round on, W2's copy is made while W1's product runs. In the last round, after
 * W1's product (so after W2's copy ahead was issued), WRITER sets every word of W2 to
 * 1.0: "kernel" (a kernel launch naming it), "memset", "memcpy", "graph" (a graph's
 * memset node), "unread" (a kernel launch whose parameters cannot be read:
 * FAKECUDA_NO_PARAM_INFO=1), or a writer that names W2 only through a pointer kept in
 * device memory: "batched" (cublasSgemmBatched, its C pointer array holding W2: ones
 * times ones), "ltbatched" (the same through cuBLASLt's pointer-array batch mode),
 * "symbol" (W2's address copied into a module's __device__ global found with
 * cuModuleGetGlobal_v2, then fk_fill_indirect through it), "library" (the same with a
 * library's global, cuLibraryGetGlobal fetched through cuGetProcAddress), "graphsymbol"
 * (the address copied into the global by a graph's copy node); or "none". What a writer
 * needs is made before the rounds, so that only its writing calls come between the two
 * products. W2's product must see the new words: the copy made ahead must not be used.
 * Prints the shim's look-ahead counts; the runner checks them. */
#define _GNU_SOURCE
#include "testutil.h"
#include "shimstats.h"

#include <stdint.h>

typedef struct cublas_handle *cublasHandle_t;
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cublasCreate_v2(cublasHandle_t *h);
int cublasDestroy_v2(cublasHandle_t h);
int cublasSgemm_v2(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha, const float *a,
                   int lda, const float *b, int ldb, const float *beta, float *c, int ldc);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra);
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t count);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuCtxSynchronize(void);
CUresult cuGraphCreate(CUgraph *graph, unsigned flags);
CUresult cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s);
CUresult cuGraphExecDestroy(CUgraphExec exec);
CUresult cuGraphDestroy(CUgraph graph);
CUresult cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                              const CUDA_MEMCPY3D *params, CUcontext ctx);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *address, size_t *bytes, CUmodule module, const char *name);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, void *jit_options, void **jit_values,
                           unsigned jit_count, void *library_options, void **library_values, unsigned library_count);
CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
int cublasSgemmBatched(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha,
                       const float *const a_array[], int lda, const float *const b_array[], int ldb, const float *beta,
                       float *const c_array[], int ldc, int batch_count);
typedef void *cublasLtHandle_t;
typedef struct lt_layout *cublasLtMatrixLayout_t;
typedef struct lt_desc *cublasLtMatmulDesc_t;
int cublasLtCreate(cublasLtHandle_t *h);
int cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, uint32_t type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr, const void *buf, size_t size);
int cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, int compute_type, int scale_type);
int cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                   cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd, const void *beta, const void *c,
                   cublasLtMatrixLayout_t cd, void *out, cublasLtMatrixLayout_t od, const void *algo, void *workspace,
                   size_t workspace_size, CUstream stream);

#define K 1024
#define M 1024
#define N 64
#define ONE_BITS 0x3f800000u

static const char fill_ptx[] = ".version 8.0\n.target sm_90\n"
                               ".visible .entry fk_fill_u32(.param .u64 dst, .param .u32 value, .param .u64 count)\n"
                               "{ ret; }\n";
/* A __device__ global holding where fk_fill_indirect writes. */
static const char indirect_ptx[] =
    ".version 8.0\n.target sm_90\n"
    ".visible .global .align 8 .u64 fill_target;\n"
    ".visible .entry fk_fill_indirect(.param .u64 slot, .param .u32 value, .param .u64 count)\n"
    "{ ret; }\n";
enum { COMPUTE_32F = 68, LT_LAYOUT_BATCH_MODE = 8, LT_BATCH_MODE_POINTER_ARRAY = 1 };

static float weight_at(uint32_t seed, size_t i) { return (float)((i * 7 + seed * 13) % 17) / 8.0f - 1.0f; }
static float x_at(size_t i) { return (float)(i % 5) / 8.0f; }

/* A K x M weight of `seed`'s values (or all 1.0 when seed is 0), as the host sees it. */
static float *host_weight(uint32_t seed)
{
    float *w = malloc((size_t)K * M * 4);
    CHECK(w, "malloc\n");
    for (size_t i = 0; i < (size_t)K * M; i++)
        w[i] = seed ? weight_at(seed, i) : 1.0f;
    return w;
}

/* y (M x N) against w^T x computed here. */
static void check(const float *y_dev, const float *w, const float *x, const char *what)
{
    float *y = malloc((size_t)M * N * 4);
    CHECK(y, "malloc\n");
    OK(cudaMemcpy(y, y_dev, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float sum = 0;
            for (int l = 0; l < K; l++)
                sum += w[l + (size_t)i * K] * x[l + (size_t)j * K];
            CHECK(y[i + (size_t)j * M] == sum, "%s: y[%d,%d] is %g, want %g\n", what, i, j, y[i + (size_t)j * M], sum);
        }
    free(y);
}

/* What a writer of W2 (`w`) needs, made before the rounds. */
struct writer {
    const char *name;
    CUdeviceptr w;
    const float *ones;
    CUfunction fill;         /* kernel, unread: fk_fill_u32; symbol, library, graphsymbol: fk_fill_indirect */
    CUdeviceptr slot;        /* symbol, library, graphsymbol: the __device__ global */
    const float **arrays;    /* batched, ltbatched: device arrays of one pointer each: A, B, C (W2) */
    cublasHandle_t h;        /* batched */
    cublasLtHandle_t lt;     /* ltbatched */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
};

/* A cuBLASLt layout whose batch (of one) is an array of pointers. */
static cublasLtMatrixLayout_t pointer_array_layout(uint64_t rows, uint64_t cols, int64_t ld)
{
    cublasLtMatrixLayout_t layout;
    int32_t mode = LT_BATCH_MODE_POINTER_ARRAY;
    OK(cublasLtMatrixLayoutCreate(&layout, 0, rows, cols, ld));
    OK(cublasLtMatrixLayoutSetAttribute(layout, LT_LAYOUT_BATCH_MODE, &mode, sizeof mode));
    return layout;
}

/* The __device__ global fill_target of indirect_ptx, and fk_fill_indirect, from a module
 * (library: from a library, its global through cuGetProcAddress). */
static void find_global(struct writer *wr, int library)
{
    size_t bytes = 0;
    if (library) {
        CUlibrary lib;
        CUkernel kernel;
        CUresult (*get_global)(CUdeviceptr *, size_t *, CUlibrary, const char *);
        CUdriverProcAddressQueryResult found;
        OK(cuLibraryLoadData(&lib, indirect_ptx, NULL, NULL, 0, NULL, NULL, 0));
        OK(cuGetProcAddress_v2("cuLibraryGetGlobal", (void **)&get_global, 12000, 0, &found));
        OK(get_global(&wr->slot, &bytes, lib, "fill_target"));
        OK(cuLibraryGetKernel(&kernel, lib, "fk_fill_indirect"));
        wr->fill = (CUfunction)kernel;
    } else {
        CUmodule module;
        OK(cuModuleLoadData(&module, indirect_ptx));
        OK(cuModuleGetGlobal_v2(&wr->slot, &bytes, module, "fill_target"));
        OK(cuModuleGetFunction(&wr->fill, module, "fk_fill_indirect"));
    }
    CHECK(wr->slot && bytes == 8, "fill_target: %llu bytes at %#llx\n", (unsigned long long)bytes,
          (unsigned long long)wr->slot);
}

static void prepare(struct writer *wr)
{
    const char *name = wr->name;
    if (!strcmp(name, "kernel") || !strcmp(name, "unread")) {
        CUmodule module;
        OK(cuModuleLoadData(&module, fill_ptx));
        OK(cuModuleGetFunction(&wr->fill, module, "fk_fill_u32"));
    } else if (!strcmp(name, "symbol") || !strcmp(name, "graphsymbol") || !strcmp(name, "library")) {
        find_global(wr, !strcmp(name, "library"));
    } else if (!strcmp(name, "batched") || !strcmp(name, "ltbatched")) {
        /* C (K x M, W2) = A (K x 1) B (1 x M), both of ones (K == M): all 1.0. */
        float *ones_dev;
        OK(cudaMalloc((void **)&ones_dev, (size_t)K * 4));
        OK(cudaMemcpy(ones_dev, wr->ones, (size_t)K * 4, cudaMemcpyHostToDevice));
        const float *pointers[3] = { ones_dev, ones_dev, (const float *)(uintptr_t)wr->w };
        OK(cudaMalloc((void **)&wr->arrays, sizeof pointers));
        OK(cudaMemcpy(wr->arrays, pointers, sizeof pointers, cudaMemcpyHostToDevice));
        if (!strcmp(name, "batched")) {
            OK(cublasCreate_v2(&wr->h));
        } else {
            OK(cublasLtCreate(&wr->lt));
            OK(cublasLtMatmulDescCreate(&wr->desc, COMPUTE_32F, 0));
            wr->a_layout = pointer_array_layout(K, 1, K);
            wr->b_layout = pointer_array_layout(1, M, 1);
            wr->c_layout = pointer_array_layout(K, M, K);
        }
    }
}

/* W2's address copied into the global by a graph's copy node. */
static void graph_copy(CUdeviceptr slot, const CUdeviceptr *w)
{
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CUDA_MEMCPY3D copy = { .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = w, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                           .dstDevice = slot, .WidthInBytes = sizeof *w, .Height = 1, .Depth = 1 };
    OK(cuGraphCreate(&graph, 0));
    OK(cuGraphAddMemcpyNode(&node, graph, NULL, 0, &copy, NULL));
    OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    OK(cuGraphLaunch(exec, NULL));
    OK(cuGraphExecDestroy(exec));
    OK(cuGraphDestroy(graph));
}

/* Sets every word of W2 to 1.0 as the writer says. */
static void overwrite(const struct writer *wr)
{
    const char *writer = wr->name;
    CUdeviceptr w = wr->w;
    const float *ones = wr->ones;
    const float one = 1, zero = 0;
    unsigned value = ONE_BITS;
    unsigned long long count = (size_t)K * M;
    if (!strcmp(writer, "kernel") || !strcmp(writer, "unread")) {
        void *params[] = { &w, &value, &count };
        OK(cuLaunchKernel(wr->fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    } else if (!strcmp(writer, "symbol") || !strcmp(writer, "library") || !strcmp(writer, "graphsymbol")) {
        if (!strcmp(writer, "graphsymbol"))
            graph_copy(wr->slot, &w);
        else
            OK(cuMemcpyHtoD_v2(wr->slot, &w, sizeof w));
        CUdeviceptr slot = wr->slot;
        void *params[] = { &slot, &value, &count };
        OK(cuLaunchKernel(wr->fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    } else if (!strcmp(writer, "batched")) {
        OK(cublasSgemmBatched(wr->h, 0, 0, K, M, 1, &one, wr->arrays, K, wr->arrays + 1, 1, &zero,
                              (float *const *)(wr->arrays + 2), K, 1));
    } else if (!strcmp(writer, "ltbatched")) {
        OK(cublasLtMatmul(wr->lt, wr->desc, &one, wr->arrays, wr->a_layout, wr->arrays + 1, wr->b_layout, &zero,
                          wr->arrays + 2, wr->c_layout, wr->arrays + 2, wr->c_layout, NULL, NULL, 0, NULL));
    } else if (!strcmp(writer, "memset")) {
        OK(cuMemsetD32_v2(w, ONE_BITS, (size_t)K * M));
    } else if (!strcmp(writer, "memcpy")) {
        OK(cuMemcpyHtoD_v2(w, ones, (size_t)K * M * 4));
    } else if (!strcmp(writer, "graph")) {
        CUgraph graph;
        CUgraphNode node;
        CUgraphExec exec;
        CUDA_MEMSET_NODE_PARAMS set = { .dst = w, .value = ONE_BITS, .elementSize = 4, .width = (size_t)K * M,
                                        .height = 1 };
        OK(cuGraphCreate(&graph, 0));
        OK(cuGraphAddMemsetNode(&node, graph, NULL, 0, &set, NULL));
        OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        OK(cuGraphLaunch(exec, NULL));
        OK(cuGraphExecDestroy(exec));
        OK(cuGraphDestroy(graph));
    } else {
        CHECK(!strcmp(writer, "none"), "unknown writer %s\n", writer);
    }
}

static int t_rounds(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: rounds WRITER\n");
    const char *writer = argv[2];
    float *w1 = host_weight(1), *w2 = host_weight(2), *ones = host_weight(0), *x = malloc((size_t)K * N * 4);
    CHECK(x, "malloc\n");
    for (size_t i = 0; i < (size_t)K * N; i++)
        x[i] = x_at(i);
    /* Allocated before the program computes: the weights go to T2 under the runner's budget. */
    float *w1_dev, *w2_dev, *x_dev, *y1, *y2;
    OK(cudaMalloc((void **)&w1_dev, (size_t)K * M * 4));
    OK(cudaMalloc((void **)&w2_dev, (size_t)K * M * 4));
    struct writer wr = { .name = writer, .w = (CUdeviceptr)(uintptr_t)w2_dev, .ones = ones };
    OK(cudaMemcpy(w1_dev, w1, (size_t)K * M * 4, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(w2_dev, w2, (size_t)K * M * 4, cudaMemcpyHostToDevice));
    CHECK(shim_t2_bytes(w2_dev, (size_t)K * M * 4) == (size_t)K * M * 4, "W2 is not in T2\n");
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    OK(cudaMalloc((void **)&x_dev, (size_t)K * N * 4));
    OK(cudaMalloc((void **)&y1, (size_t)M * N * 4));
    OK(cudaMalloc((void **)&y2, (size_t)M * N * 4));
    OK(cudaMemcpy(x_dev, x, (size_t)K * N * 4, cudaMemcpyHostToDevice));
    prepare(&wr);
    const float one = 1, zero = 0;
    unsigned long long ahead_before_last = 0, dropped_before_last = 0;
    for (int round = 0; round < 4; round++) {
        int last = round == 3;
        OK(cublasSgemm_v2(h, 1, 0, M, N, K, &one, w1_dev, K, x_dev, K, &zero, y1, M));
        if (last) {
            struct shim_stats s = shim_stats();
            ahead_before_last = s.gemm_ahead, dropped_before_last = s.gemm_ahead_dropped;
            overwrite(&wr);
        }
        OK(cublasSgemm_v2(h, 1, 0, M, N, K, &one, w2_dev, K, x_dev, K, &zero, y2, M));
        OK(cuCtxSynchronize());
        check(y1, w1, x, "W1's product");
        check(y2, last && strcmp(writer, "none") ? ones : w2, x, last ? "W2's product after the writer" : "W2's product");
    }
    struct shim_stats s = shim_stats();
    printf("lookahead: writer %s: %llu products read a copy made ahead (%llu in the last round), %llu copies dropped "
           "(%llu in the last round); %llu launches not fully read; %llu indirect writers\n", writer, s.gemm_ahead,
           s.gemm_ahead - ahead_before_last, s.gemm_ahead_dropped, s.gemm_ahead_dropped - dropped_before_last,
           s.launches_unread, s.indirect_writers);
    OK(cublasDestroy_v2(h));
    cudaFree(w1_dev), cudaFree(w2_dev), cudaFree(x_dev), cudaFree(y1), cudaFree(y2);
    free(w1), free(w2), free(ones), free(x);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct named_test tests[] = { { "rounds", t_rounds } };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, NULL);
}
