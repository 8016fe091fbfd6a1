/* gblaunch: the fake's launch model through every path (launch-tests.sh). argv[1]:
 *   driver    kernels (cuModuleLoadData, cuLibraryLoadData), param layouts, every launch
 *             form, host functions, memsets, 2D/3D/peer/batched copies, tensor maps
 *   graphs    stream capture (modes, invalidation) and the graph API
 *   runtime   fat binary registration, <<<>>> configuration, the runtime's launches,
 *             capture and graphs
 *   capture   a global-mode capture held open while the process (and the shim) works
 *   memops    every form of a memset and a copy, direct and through the runtime, and
 *             what the shim observes of each (launch_memory_ops.c)
 *   timing    fk_read_u32's modeled time from host memory and from the device's, as
 *             events measure it, and cuEventElapsedTime's errors (launch_timing.c)
 * Each checks the data the kernels wrote and the fake's counts (fakegpu_count). */
#define _GNU_SOURCE
#include "testutil.h"

#include "launch_tests.h"

#include <stddef.h>
#include <time.h>

const char launch_ptx[] =
    ".version 8.0\n.target sm_90\n"
    ".visible .entry fk_fill_u32(.param .u64 dst, .param .u32 value, .param .u64 count)\n{ ret; }\n"
    ".visible .entry fk_add_f32(.param .u64 out, .param .u64 a, .param .u64 b, .param .u64 n)\n{ ret; }\n"
    ".visible .entry fk_struct(.param .align 8 .b8 s[256], .param .u64 p0, .param .u64 p1, .param .u64 p2,"
    " .param .u64 p3, .param .u64 p4, .param .u64 p5, .param .u64 p6, .param .u64 p7)\n{ ret; }\n"
    ".visible .entry fk_gather(.param .u64 out, .param .u64 ptrs, .param .u64 count, .param .u64 n)\n{ ret; }\n"
    ".visible .entry fk_tma(.param .align 64 .b8 map[128], .param .u64 out, .param .u64 n)\n{ ret; }\n"
    ".visible .entry fk_tma_struct(.param .align 64 .b8 s[256])\n{ ret; }\n"
    ".visible .entry fk_tex(.param .u64 tex, .param .u64 out, .param .u64 n)\n{ ret; }\n"
    ".visible .entry fk_elementwise(.param .u32 n, .param .align 8 .b8 f[640])\n{ ret; }\n";

#define N 4096
static size_t budget_blocks = 4 * MiB; /* buffer size: large enough to go to T2 under a small budget */

static CUdeviceptr dalloc(void)
{
    CUdeviceptr p;
    OK(cuMemAlloc_v2(&p, budget_blocks));
    return p;
}
static void get(float *h, CUdeviceptr d, size_t n) { OK(cuMemcpyDtoH_v2(h, d, n * 4)); }
static void expect_all(CUdeviceptr d, size_t n, float want, const char *what)
{
    static float h[N];
    get(h, d, n);
    for (size_t i = 0; i < n; i++)
        CHECK(h[i] == want, "%s: element %zu is %g, want %g\n", what, i, h[i], want);
}
static void expect_u32(CUdeviceptr d, size_t n, uint32_t want, const char *what)
{
    static uint32_t h[N];
    OK(cuMemcpyDtoH_v2(h, d, n * 4));
    for (size_t i = 0; i < n; i++)
        CHECK(h[i] == want, "%s: word %zu is %#x, want %#x\n", what, i, h[i], want);
}
static void fillf(CUdeviceptr d, float v, size_t n)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    OK(cuMemsetD32_v2(d, bits, n));
}


static void host_fn(void *data) { (*(int *)data)++; }

/* ------------------------------------------------------------------ driver */

static int test_driver(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUmodule m;
    CUfunction fill, add, st, gather, tma, tma_struct, tex;
    OK(cuModuleLoadData(&m, launch_ptx));
    OK(cuModuleGetFunction(&fill, m, "fk_fill_u32"));
    OK(cuModuleGetFunction(&add, m, "fk_add_f32"));
    OK(cuModuleGetFunction(&st, m, "fk_struct"));
    OK(cuModuleGetFunction(&gather, m, "fk_gather"));
    OK(cuModuleGetFunction(&tma, m, "fk_tma"));
    OK(cuModuleGetFunction(&tma_struct, m, "fk_tma_struct"));
    OK(cuModuleGetFunction(&tex, m, "fk_tex"));
    CHECK(cuModuleGetFunction(&fill, m, "gb_copy16") == CUDA_ERROR_NOT_FOUND, "a name the image lacks was found\n");
    CUmodule bad;
    CHECK(cuModuleLoadData(&bad, ".visible .entry other_kernel(\n") == CUDA_ERROR_INVALID_IMAGE,
          "an image naming an unknown kernel loaded\n");
    /* Parameter layouts, as the ABI puts them. */
    size_t off, size;
    OK(cuFuncGetParamInfo(fill, 1, &off, &size));
    CHECK(off == 8 && size == 4, "fk_fill_u32 param 1 at %zu size %zu\n", off, size);
    OK(cuFuncGetParamInfo(fill, 2, &off, NULL));
    CHECK(off == 16, "fk_fill_u32 param 2 at %zu\n", off);
    CHECK(cuFuncGetParamInfo(fill, 3, &off, &size) == CUDA_ERROR_INVALID_VALUE, "index past the last param\n");
    OK(cuFuncGetParamInfo(st, 0, &off, &size));
    CHECK(off == 0 && size == 256, "fk_struct's struct at %zu size %zu\n", off, size);
    OK(cuFuncGetParamInfo(st, 8, &off, &size));
    CHECK(off == 312 && size == 8, "fk_struct p7 at %zu size %zu\n", off, size);
    OK(cuFuncGetParamInfo(tma, 1, &off, &size));
    CHECK(off == 128 && size == 8, "fk_tma out at %zu\n", off);

    CUdeviceptr a = dalloc(), b = dalloc(), out = dalloc();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    observed_reset();

    /* cuLaunchKernel, kernelParams. */
    uint32_t v = 0xabcd1234;
    uint64_t n = N;
    void *fp[] = { &a, &v, &n };
    OK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, s, fp, NULL));
    OK(cuStreamSynchronize(s));
    expect_u32(a, N, v, "cuLaunchKernel fk_fill_u32");
    /* The extra form: one packed buffer. */
    struct { CUdeviceptr out, a, b; uint64_t n; } packed;
    fillf(a, 1.5f, N);
    fillf(b, 2.0f, N);
    packed.out = out, packed.a = a, packed.b = b, packed.n = N;
    size_t psize = sizeof packed;
    void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END };
    unsigned long long out_named = named(out);
    OK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, NULL, extra));
    OK(cuStreamSynchronize(s));
    /* Before the copy that reads `out` back names it too. */
    CHECK(!shim_observes() || named(out) == out_named + 1, "the extra form's packed pointers were not named\n");
    expect_all(out, N, 3.5f, "extra-form fk_add_f32");
    void *ap[] = { &out, &a, &b, &n };
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, ap, extra) == CUDA_ERROR_INVALID_VALUE,
          "kernelParams and extra together were accepted\n");
    CHECK(cuLaunchKernel(add, 1, 1, 1, 2048, 1, 1, 0, s, ap, NULL) == CUDA_ERROR_INVALID_VALUE,
          "2048 threads per block were accepted\n");
    /* cuLaunchKernelEx with attributes, cooperative, and the _ptsz forms via cuGetProcAddress. */
    CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_PRIORITY };
    CUlaunchConfig cfg = { 4, 1, 1, 256, 1, 1, 0, s, &attr, 1 };
    OK(cuLaunchKernelEx(&cfg, add, ap, NULL)); /* out = a + b = 3.5 */
    void *ap2[] = { &out, &out, &b, &n };
    OK(cuLaunchCooperativeKernel(add, 4, 1, 1, 256, 1, 1, 0, s, ap2)); /* out = 5.5 */
    CUresult (*lk_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
    CUresult (*ex_ptsz)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUdriverProcAddressQueryResult q;
    OK(cuGetProcAddress_v2("cuLaunchKernel", (void **)&lk_ptsz, 12080, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    OK(cuGetProcAddress_v2("cuLaunchKernelEx", (void **)&ex_ptsz, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    CHECK((void *)lk_ptsz != (void *)cuLaunchKernel, "the per-thread flag gave cuLaunchKernel, not _ptsz\n");
    OK(cuStreamSynchronize(s));
    OK(lk_ptsz(add, 4, 1, 1, 256, 1, 1, 0, NULL, ap2, NULL)); /* 7.5, per-thread stream */
    cfg.hStream = NULL;
    OK(ex_ptsz(&cfg, add, ap2, NULL)); /* 9.5 */
    expect_all(out, N, 9.5f, "Ex/cooperative/_ptsz fk_add_f32");
    /* Host functions run in stream order. */
    int calls = 0;
    fakegpu_stream_hold(s);
    OK(cuLaunchHostFunc(s, host_fn, &calls));
    CHECK(calls == 0, "a host function ran before its stream reached it\n");
    fakegpu_stream_release(s);
    OK(cuStreamSynchronize(s));
    CHECK(calls == 1, "the host function ran %d times\n", calls);

    /* A library's CUkernel, launched as a CUfunction (as the runtime does). */
    CUlibrary lib;
    CUkernel kfill;
    OK(cuLibraryLoadData(&lib, launch_ptx, NULL, NULL, 0, NULL, NULL, 0));
    OK(cuLibraryGetKernel(&kfill, lib, "fk_fill_u32"));
    OK(cuKernelGetParamInfo(kfill, 2, &off, &size));
    CHECK(off == 16 && size == 8, "cuKernelGetParamInfo: %zu %zu\n", off, size);
    CHECK(cuKernelGetParamInfo(kfill, 3, &off, &size) == CUDA_ERROR_INVALID_VALUE, "kernel index past the end\n");
    uint32_t v2 = 7;
    void *fp2[] = { &b, &v2, &n };
    OK(cuLaunchKernel((CUfunction)kfill, 4, 1, 1, 256, 1, 1, 0, s, fp2, NULL));
    CUfunction kf;
    OK(cuKernelGetFunction(&kf, kfill));
    OK(cuStreamSynchronize(s));
    expect_u32(b, N, 7, "CUkernel launch");

    /* fk_struct: 8 pointers in a by-value struct and 8 pointer parameters. */
    CUdeviceptr bufs[16];
    for (int i = 0; i < 16; i++) {
        OK(cuMemAlloc_v2(&bufs[i], 64 * 4));
        fillf(bufs[i], (float)i, 64);
    }
    struct fk_args sa = { .count = 64 };
    for (int i = 0; i < 8; i++)
        sa.ptrs[i] = (void *)(uintptr_t)bufs[i];
    void *sp[9] = { &sa };
    for (int i = 0; i < 8; i++)
        sp[1 + i] = &bufs[8 + i];
    /* Each buffer was named once by its memset; the launch must name each once more. */
    OK(cuLaunchKernel(st, 1, 1, 1, 64, 1, 1, 0, s, sp, NULL));
    OK(cuStreamSynchronize(s));
    for (int i = 0; i < 16; i++) {
        CHECK(!shim_observes() || named(bufs[i]) == 2, "fk_struct's pointer %d (%s) named %llu times, want 2\n", i,
              i < 8 ? "in the by-value struct" : "a parameter", named(bufs[i]));
        expect_all(bufs[i], 64, (float)i + 1, "fk_struct");
    }
    /* fk_elementwise: PyTorch's elementwise shape, a u32 and a 640-byte lambda of small
     * numbers holding three pointers at its start and one inside an allocation at its end:
     * each of the four named once more, the others not at all. */
    CUfunction ew;
    OK(cuModuleGetFunction(&ew, m, "fk_elementwise"));
    uint64_t lambda[80] = { 0 };
    for (int i = 0; i < 80; i++)
        lambda[i] = (uint64_t)i * 3 + 1; /* sizes, strides, dividers: no address */
    for (int i = 0; i < 3; i++)
        lambda[i] = bufs[8 + i];
    lambda[79] = bufs[11] + 4;
    unsigned elements = 64;
    void *ep[] = { &elements, lambda };
    unsigned long long before[16];
    for (int i = 0; i < 16; i++)
        before[i] = named(bufs[i]);
    OK(cuLaunchKernel(ew, 1, 1, 1, 64, 1, 1, 0, s, ep, NULL));
    OK(cuStreamSynchronize(s));
    for (int i = 0; i < 16; i++) {
        unsigned long long want = before[i] + (i >= 8 && i < 12);
        CHECK(!shim_observes() || named(bufs[i]) == want, "fk_elementwise: buffer %d named %llu times, want %llu\n", i,
              named(bufs[i]), want);
    }
    /* The first buffer freed and another made at its address (the fake's first fit hands
     * it out again), then filled by a kernel naming it alone: the launch names the new
     * allocation, not the one this thread's launches found there before (the shim keeps
     * the allocations a thread's launches found lately, memory/recent_ranges.rs). The
     * fill is 1.0f, what fk_struct left there, for fk_gather below. */
    CUdeviceptr freed = bufs[0];
    OK(cuMemFree_v2(bufs[0]));
    OK(cuMemAlloc_v2(&bufs[0], 64 * 4));
    CHECK(bufs[0] == freed, "the freed address was not handed out again: %#llx, then %#llx\n", freed, bufs[0]);
    uint32_t one = 0x3f800000;
    uint64_t count64 = 64;
    void *refill[] = { &bufs[0], &one, &count64 };
    OK(cuLaunchKernel((CUfunction)kfill, 1, 1, 1, 64, 1, 1, 0, s, refill, NULL));
    OK(cuStreamSynchronize(s));
    CHECK(!shim_observes() || named(bufs[0]) == 1,
          "the allocation made at a freed one's address was named %llu times by the one launch naming it\n",
          named(bufs[0]));
    expect_all(bufs[0], 64, 1.0f, "fk_fill_u32 at a freed allocation's address");
    /* fk_gather: pointers stored in device memory. */
    CUdeviceptr ptrs;
    OK(cuMemAlloc_v2(&ptrs, 16 * 8));
    OK(cuMemcpyHtoD_v2(ptrs, bufs, sizeof bufs));
    uint64_t count = 16, gn = 64;
    void *gp[] = { &out, &ptrs, &count, &gn };
    OK(cuLaunchKernel(gather, 1, 1, 1, 16, 1, 1, 0, s, gp, NULL));
    OK(cuStreamSynchronize(s));
    float sums[16];
    get(sums, out, 16);
    for (int i = 0; i < 16; i++)
        CHECK(sums[i] == 64.0f * (float)(i + 1), "fk_gather sum %d: %g\n", i, sums[i]);
    /* fk_tma: the tensor map's address is encoded, not a plain word. */
    CUtensorMap map;
    cuuint64_t dims[1] = { N };
    unsigned box[1] = { 256 }, es[1] = { 1 };
    fillf(a, 4.25f, N);
    OK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, (void *)(uintptr_t)a, dims, NULL, box, es, 0,
                              0, 0, 0));
    for (int i = 0; i < 16; i++)
        CHECK(map.opaque[i] != a, "the tensor map stores the address as plain word %d\n", i);
    CHECK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, (void *)(uintptr_t)(a + 4), dims, NULL, box,
                                 es, 0, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE, "a misaligned address was encoded\n");
    OK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, (void *)(uintptr_t)a, dims, NULL, box, es, 0,
                              0, 0, 0));
    void *tp[] = { &map, &out, &n };
    unsigned long long a_named = named(a);
    OK(cuLaunchKernel(tma, 4, 1, 1, 256, 1, 1, 0, s, tp, NULL));
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 4.25f, "fk_tma");
    CHECK(!shim_observes() || named(a) == a_named + 1, "the memory behind the tensor map was not named\n");
    /* fk_tma_struct: the same map inside a by-value struct, as CUTLASS's Hopper kernels
     * take theirs: the memory behind it is named too. */
    struct {
        uint64_t out, n, pad[6];
        CUtensorMap map;
        uint64_t rest[8];
    } ts = { .out = out, .n = n, .map = map };
    _Static_assert(sizeof ts == 256 && offsetof(__typeof__(ts), map) == 64, "fk_tma_struct's layout");
    fillf(out, 0.0f, N);
    void *tsp[] = { &ts };
    a_named = named(a);
    OK(cuLaunchKernel(tma_struct, 4, 1, 1, 256, 1, 1, 0, s, tsp, NULL));
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 4.25f, "fk_tma_struct");
    CHECK(!shim_observes() || named(a) == a_named + 1, "the memory behind a tensor map inside a struct was not named\n");
    /* fk_tex: a texture object's handle (a small integer) stands for its memory. */
    CUDA_RESOURCE_DESC res = { .resType = CU_RESOURCE_TYPE_LINEAR };
    res.res.linear.devPtr = a;
    res.res.linear.sizeInBytes = N * 4;
    CUDA_TEXTURE_DESC texture_desc = { { 0 } };
    CUtexObject texture = 0;
    OK(cuTexObjectCreate(&texture, &res, &texture_desc, NULL));
    CHECK(texture != 0 && texture < 1024, "texture handle %llu: want a small integer, as the driver's\n", texture);
    fillf(a, 5.5f, N);
    void *xp[] = { &texture, &out, &n };
    a_named = named(a);
    OK(cuLaunchKernel(tex, 4, 1, 1, 256, 1, 1, 0, s, xp, NULL));
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 5.5f, "fk_tex");
    CHECK(!shim_observes() || named(a) == a_named + 1, "the memory behind the texture object was not named\n");
    OK(cuTexObjectDestroy(texture));
    /* A destroyed object names nothing: its handle is a plain number again. */
    a_named = named(a);
    OK(cuLaunchKernel(tex, 0 + 1, 1, 1, 1, 1, 1, 0, s, (void *[]){ &texture, &out, &(uint64_t){ 0 } }, NULL));
    OK(cuStreamSynchronize(s));
    CHECK(!shim_observes() || named(a) == a_named, "a destroyed texture object still named its memory\n");

    /* Memsets. */
    OK(cuMemsetD8_v2(a, 0x11, N * 4));
    expect_u32(a, N, 0x11111111, "cuMemsetD8_v2");
    OK(cuMemsetD16Async(a, 0x2233, N * 2, s));
    OK(cuStreamSynchronize(s));
    expect_u32(a, N, 0x22332233, "cuMemsetD16Async");
    OK(cuMemsetD32Async(a, 0x44556677, N, s));
    OK(cuStreamSynchronize(s));
    expect_u32(a, N, 0x44556677, "cuMemsetD32Async");
    OK(cuMemsetD2D32_v2(a, 64 * 4, 9, 32, 64)); /* left half of each 64-word row */
    uint32_t h[N];
    OK(cuMemcpyDtoH_v2(h, a, sizeof h));
    CHECK(h[0] == 9 && h[31] == 9 && h[32] == 0x44556677 && h[64] == 9, "cuMemsetD2D32_v2 rows wrong\n");
    OK(cuMemsetD2D8Async(a, 256, 0, 256, 16, s));
    OK(cuStreamSynchronize(s));
    expect_u32(a, 1024, 0, "cuMemsetD2D8Async");
    CHECK(cuMemsetD32_v2(a + 1, 0, 4) == CUDA_ERROR_INVALID_VALUE, "a misaligned 32-bit memset was accepted\n");

    /* 2D/3D copies: host <-> device and device <-> device. */
    float src[64 * 8];
    for (int i = 0; i < 64 * 8; i++)
        src[i] = (float)i;
    CUDA_MEMCPY2D c2 = { .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = src, .srcPitch = 64 * 4,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 128 * 4,
                         .WidthInBytes = 64 * 4, .Height = 8 };
    OK(cuMemcpy2D_v2(&c2));
    CUDA_MEMCPY3D c3 = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = b, .srcPitch = 128 * 4, .srcHeight = 4,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = out, .dstPitch = 64 * 4,
                         .dstHeight = 4, .WidthInBytes = 64 * 4, .Height = 4, .Depth = 2 };
    OK(cuMemcpy3DAsync_v2(&c3, s));
    OK(cuStreamSynchronize(s));
    float back[64 * 8];
    CUDA_MEMCPY3D c3h = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = out, .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = back, .WidthInBytes = 64 * 8 * 4, .Height = 1, .Depth = 1 };
    OK(cuMemcpy3D_v2(&c3h));
    CHECK(!memcmp(back, src, sizeof src), "2D/3D copies changed the data\n");
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE, c2.srcDevice = b, c2.srcPitch = 128 * 4;
    c2.dstMemoryType = CU_MEMORYTYPE_HOST, c2.dstHost = back, c2.dstPitch = 64 * 4;
    memset(back, 0, sizeof back);
    OK(cuMemcpy2DAsync_v2(&c2, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(back, src, sizeof src), "cuMemcpy2DAsync_v2 device->host changed the data\n");
    /* Peer (one context both sides) and batched copies. */
    CUcontext ctx;
    OK(cuCtxGetCurrent(&ctx));
    fillf(a, 6.0f, N);
    OK(cuMemcpyPeer(out, ctx, a, ctx, N * 4));
    expect_all(out, N, 6.0f, "cuMemcpyPeer");
    fillf(a, 8.0f, N);
    OK(cuMemcpyPeerAsync(out, ctx, a, ctx, N * 4, s));
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 8.0f, "cuMemcpyPeerAsync");
    int ver;
    OK(cuDriverGetVersion(&ver));
    CUdeviceptr dsts[2] = { out, out + N * 2 }, srcs[2] = { b, b + N * 2 };
    size_t sizes[2] = { N * 2, N * 2 }, idx = 0, fail = 0;
    CUmemcpyAttributes at = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
    fillf(b, 3.0f, N);
    void *batch;
    OK(cuGetProcAddress_v2("cuMemcpyBatchAsync", &batch, ver, 0, &q));
    if (ver >= 13000) {
        CUresult (*b13)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t,
                        CUstream) = batch;
        CHECK(b13(dsts, srcs, sizes, 2, &at, &idx, 1, NULL) == CUDA_ERROR_INVALID_VALUE, "batch on legacy stream\n");
        OK(b13(dsts, srcs, sizes, 2, &at, &idx, 1, s));
    } else {
        OK(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &at, &idx, 1, &fail, s));
    }
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 3.0f, "cuMemcpyBatchAsync");

    printf("counts: kernel %llu memset %llu memcpy %llu hostfn %llu\n", fakegpu_count("kernel"),
           fakegpu_count("memset"), fakegpu_count("memcpy"), fakegpu_count("hostfn"));
    CHECK(fakegpu_count("kernel:cuLaunchKernel") == 11, "cuLaunchKernel ran %llu kernels\n",
          fakegpu_count("kernel:cuLaunchKernel"));
    CHECK(fakegpu_count("kernel:cuLaunchKernelEx") == 1 && fakegpu_count("kernel:cuLaunchKernelEx_ptsz") == 1 &&
              fakegpu_count("kernel:cuLaunchKernel_ptsz") == 1 && fakegpu_count("kernel:cuLaunchCooperativeKernel") == 1,
          "per-path kernel counts wrong\n");
    CHECK(fakegpu_count("kernel@fk_add_f32") == 5 && fakegpu_count("kernel@fk_tma") == 1 &&
              fakegpu_count("kernel@fk_tma_struct") == 1 &&
              fakegpu_count("kernel@fk_tex") == 2,
          "per-kernel counts wrong\n");
    CHECK(fakegpu_count("hostfn:cuLaunchHostFunc") == 1, "host function count wrong\n");
    CHECK(fakegpu_count("memset:cuMemsetD2D32_v2") == 1 && fakegpu_count("memcpy:cuMemcpy3DAsync_v2") == 1,
          "memset/memcpy path counts wrong\n");
    observed_check("driver", 0);
    OK(cuLibraryUnload(lib));
    OK(cuModuleUnload(m));
    OK(cuStreamDestroy_v2(s));
    return 0;
}


/* cost [N]: N launches (default 10000) of fk_struct (16 pointers, 8 of them in a by-value
 * struct) on one stream; prints the mean wall time per launch call and per kernel run,
 * for comparing the shim's observation against the bare driver. No pass/fail figure. */
static int test_cost(int argc, char **argv)
{
    int iters = argc > 2 ? atoi(argv[2]) : 10000;
    CUmodule m;
    CUfunction st;
    OK(cuModuleLoadData(&m, launch_ptx));
    OK(cuModuleGetFunction(&st, m, "fk_struct"));
    CUdeviceptr bufs[16];
    for (int i = 0; i < 16; i++)
        bufs[i] = dalloc();
    struct fk_args sa = { .count = 1 };
    for (int i = 0; i < 8; i++)
        sa.ptrs[i] = (void *)(uintptr_t)bufs[i];
    void *sp[9] = { &sa };
    for (int i = 0; i < 8; i++)
        sp[1 + i] = &bufs[8 + i];
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++)
        OK(cuLaunchKernel(st, 1, 1, 1, 32, 1, 1, 0, s, sp, NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    OK(cuStreamSynchronize(s));
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double call = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters;
    double run = ((t2.tv_sec - t0.tv_sec) * 1e9 + (t2.tv_nsec - t0.tv_nsec)) / iters;
    printf("launch cost: %d fk_struct launches, %.0f ns per call, %.0f ns per kernel run\n", iters, call, run);
    expect_all(bufs[0], 1, (float)iters, "fk_struct after the loop");
    OK(cuStreamDestroy_v2(s));
    OK(cuModuleUnload(m));
    return 0;
}

int main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "driver", test_driver },
        { "graphs", test_graphs },
        { "runtime", test_runtime },
        { "capture", test_capture },
        { "memops", test_memory_ops },
        { "timing", test_timing },
        { "cost", test_cost },
    };
    if (getenv("GBTEST_LAUNCH_SMALL"))
        budget_blocks = 64 * 1024;
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, primary_context_current);
}
