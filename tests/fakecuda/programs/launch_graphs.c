/* gblaunch (see launch_tests.c): stream capture, graphs and the runtime's launches. */
#define _GNU_SOURCE
#include "launch_tests.h"

#include <pthread.h>
#include <unistd.h>

/* The runtime calls used here (libcudart, linked directly as PyTorch is). */
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
void **__cudaRegisterFatBinary(void *wrapper);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *host, char *device_fun, const char *device_name,
                            int thread_limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize);
void __cudaUnregisterFatBinary(void **handle);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t s);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                  cudaStream_t s);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args);
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                        cudaStream_t s);
cudaError_t cudaGetFuncBySymbol(cudaFunction_t *out, const void *symbol);
cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

#define N 4096

static void fillf(CUdeviceptr d, float v, size_t n)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    OK(cuMemsetD32_v2(d, bits, n));
}
static void expect_all(CUdeviceptr d, size_t n, float want, const char *what)
{
    static float h[N];
    OK(cuMemcpyDtoH_v2(h, d, n * 4));
    for (size_t i = 0; i < n; i++)
        CHECK(h[i] == want, "%s: element %zu is %g, want %g\n", what, i, h[i], want);
}
static void host_fn(void *data) { (*(int *)data)++; }

/* ------------------------------------------------------------------ graphs */

struct other { CUresult rc; int mode; };
static void *alloc_elsewhere(void *arg)
{
    struct other *o = arg;
    CUcontext c;
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&c, d));
    OK(cuCtxSetCurrent(c));
    int mode = o->mode;
    OK(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)&mode));
    CUdeviceptr p = 0;
    o->rc = cuMemAlloc_v2(&p, 4096);
    if (!o->rc)
        OK(cuMemFree_v2(p));
    return NULL;
}
static CUresult alloc_in_thread(int mode)
{
    struct other o = { .mode = mode };
    pthread_t t;
    pthread_create(&t, NULL, alloc_elsewhere, &o);
    pthread_join(t, NULL);
    return o.rc;
}

int test_graphs(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUmodule m;
    CUfunction add, fill;
    OK(cuModuleLoadData(&m, launch_ptx));
    OK(cuModuleGetFunction(&add, m, "fk_add_f32"));
    OK(cuModuleGetFunction(&fill, m, "fk_fill_u32"));
    CUdeviceptr a, b, out;
    OK(cuMemAlloc_v2(&a, N * 4));
    OK(cuMemAlloc_v2(&b, N * 4));
    OK(cuMemAlloc_v2(&out, N * 4));
    fillf(a, 1.0f, N);
    fillf(b, 2.0f, N);
    fillf(out, 0.0f, N);
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    observed_reset();
    uint64_t n = N;
    int calls = 0;
    void *ap[] = { &out, &out, &b, &n }; /* out += b */

    /* Capture: work becomes nodes, nothing runs. */
    CHECK(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
          "the legacy stream was captured\n");
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_ILLEGAL_STATE, "captured twice\n");
    CUstreamCaptureStatus st;
    OK(cuStreamIsCapturing(s, (int *)&st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capture status %d\n", st);
    OK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, ap, NULL));
    OK(cuMemsetD32Async(a, 0x40400000 /* 3.0f */, N, s));
    OK(cuMemcpyAsync(b, a, N * 4, s));
    OK(cuLaunchHostFunc(s, host_fn, &calls));
    OK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, ap, NULL));
    cuuint64_t id;
    CUgraph cg;
    const CUgraphNode *deps;
    size_t ndeps;
    OK(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &ndeps));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && ndeps == 1, "capture info: status %d, %zu deps\n", st, ndeps);
    CUgraph graph;
    OK(cuStreamEndCapture(s, &graph));
    CHECK(fakegpu_count("kernel") == 0 && calls == 0, "captured work ran\n");
    expect_all(out, N, 0.0f, "before the graph ran");
    size_t count = 0;
    OK(cuGraphGetNodes(graph, NULL, &count));
    CHECK(count == 5, "captured graph has %zu nodes, want 5\n", count);
    CUgraphNode nodes[5];
    OK(cuGraphGetNodes(graph, nodes, &count));
    int want[5] = { CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY,
                    CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_KERNEL };
    for (int i = 0; i < 5; i++) {
        CUgraphNodeType t;
        OK(cuGraphNodeGetType(nodes[i], &t));
        CHECK((int)t == want[i], "node %d type %d, want %d\n", i, t, want[i]);
    }
    CUDA_KERNEL_NODE_PARAMS kp;
    OK(cuGraphKernelNodeGetParams_v2(nodes[0], &kp));
    CHECK(kp.func == add && kp.gridDimX == 4 && *(CUdeviceptr *)kp.kernelParams[0] == out,
          "kernel node params do not match the launch\n");
    CHECK(cuGraphKernelNodeGetParams_v2(nodes[1], &kp) == CUDA_ERROR_INVALID_VALUE, "memset node gave kernel params\n");
    CUgraphExec exec;
    OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    OK(cuGraphUpload(exec, s));
    OK(cuGraphLaunch(exec, s)); /* out = 0 + 2, a = 3, b = 3, out = 5 */
    OK(cuStreamSynchronize(s));
    expect_all(out, N, 5.0f, "graph launch");
    CHECK(calls == 1, "the host node ran %d times\n", calls);
    /* cuGraphInstantiate at 12.x is cuGraphInstantiateWithFlags; _ptsz launch. */
    CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*launch_ptsz)(CUgraphExec, CUstream);
    CUdriverProcAddressQueryResult q;
    OK(cuGetProcAddress_v2("cuGraphInstantiate", (void **)&inst, 12080, 0, &q));
    CHECK((void *)inst == (void *)cuGraphInstantiateWithFlags, "cuGraphInstantiate at 12080\n");
    OK(cuGetProcAddress_v2("cuGraphLaunch", (void **)&launch_ptsz, 12080, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    OK(launch_ptsz(exec, NULL)); /* out = 5 + 3 + 3 = 11 */
    expect_all(out, N, 11.0f, "graph launch (_ptsz, per-thread stream)");
    CHECK(fakegpu_count("kernel:cuGraphLaunch") == 4 && fakegpu_count("memset:cuGraphLaunch") == 2 &&
              fakegpu_count("memcpy:cuGraphLaunch") == 2 && fakegpu_count("hostfn:cuGraphLaunch") == 2,
          "graph node counts: kernel %llu memset %llu memcpy %llu hostfn %llu\n", fakegpu_count("kernel:cuGraphLaunch"),
          fakegpu_count("memset:cuGraphLaunch"), fakegpu_count("memcpy:cuGraphLaunch"),
          fakegpu_count("hostfn:cuGraphLaunch"));

    /* A graph built by hand; kernel node parameters changed in the graph and the exec. */
    CUgraph hg;
    OK(cuGraphCreate(&hg, 0));
    CUDA_MEMSET_NODE_PARAMS ms = { .dst = out, .value = 0, .elementSize = 4, .width = N, .height = 1 };
    CUgraphNode nset, nk, ncp;
    OK(cuGraphAddMemsetNode(&nset, hg, NULL, 0, &ms, NULL));
    uint32_t v = 5;
    void *fp[] = { &out, &v, &n };
    CUDA_KERNEL_NODE_PARAMS p = { .func = fill, .gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                                  .blockDimY = 1, .blockDimZ = 1, .kernelParams = fp };
    OK(cuGraphAddKernelNode_v2(&nk, hg, &nset, 1, &p));
    CUDA_MEMCPY3D cp = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = out, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                         .dstDevice = a, .WidthInBytes = N * 4, .Height = 1, .Depth = 1 };
    OK(cuGraphAddMemcpyNode(&ncp, hg, &nk, 1, &cp, NULL));
    v = 6;
    OK(cuGraphKernelNodeSetParams_v2(nk, &p)); /* the node copies 6 */
    CUgraphExec he;
    OK(cuGraphInstantiateWithFlags(&he, hg, 0));
    v = 7;
    OK(cuGraphExecKernelNodeSetParams_v2(he, nk, &p)); /* the exec runs 7, the graph keeps 6 */
    unsigned long long out_writes = shim_writes_naming((void *)(uintptr_t)out),
                       a_writes = shim_writes_naming((void *)(uintptr_t)a), a_named = named(a);
    OK(cuGraphLaunch(he, s));
    OK(cuStreamSynchronize(s));
    /* The memset node writes out (the kernel node too, but launches are not writes), the
     * copy node reads out and writes a. */
    CHECK(!shim_observes() || (shim_writes_naming((void *)(uintptr_t)out) == out_writes + 1 &&
                               shim_writes_naming((void *)(uintptr_t)a) == a_writes + 1 && named(a) == a_named + 1),
          "graph copy and memset nodes: writes of out %llu (want %llu), of a %llu (want %llu)\n",
          shim_writes_naming((void *)(uintptr_t)out), out_writes + 1, shim_writes_naming((void *)(uintptr_t)a),
          a_writes + 1);
    uint32_t h[N];
    OK(cuMemcpyDtoH_v2(h, a, sizeof h));
    CHECK(h[0] == 7 && h[N - 1] == 7, "exec kernel node params not applied: %u\n", h[0]);
    CUgraphExecUpdateResultInfo info;
    OK(cuGraphExecUpdate_v2(he, hg, &info)); /* back to 6 */
    OK(cuGraphLaunch(he, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH_v2(h, a, sizeof h));
    CHECK(h[0] == 6, "cuGraphExecUpdate_v2 did not take the graph's params: %u\n", h[0]);
    CHECK(cuGraphExecUpdate_v2(he, graph, &info) == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE &&
              info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, "an update to another topology passed\n");

    /* Global mode: another thread's cuMemAlloc invalidates the capture; relaxed and
     * thread-local captures are not disturbed, nor is a relaxed thread. */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, ap, NULL));
    CHECK(alloc_in_thread(CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS, "a relaxed thread's cuMemAlloc failed\n");
    CHECK(alloc_in_thread(CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
          "cuMemAlloc from another global-mode thread during a global capture did not fail\n");
    OK(cuStreamIsCapturing(s, (int *)&st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "capture status %d after an unsafe call\n", st);
    CHECK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, ap, NULL) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
          "launch into an invalidated capture\n");
    CUgraph none = (CUgraph)1;
    CHECK(cuStreamEndCapture(s, &none) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && none == NULL,
          "cuStreamEndCapture of an invalidated capture\n");
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(alloc_in_thread(CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS, "a thread-local capture blocked another thread\n");
    CUdeviceptr tmp;
    CHECK(cuMemAlloc_v2(&tmp, 4096) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "own thread-local capture allowed cuMemAlloc\n");
    CHECK(cuStreamEndCapture(s, &none) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "thread-local capture not invalidated\n");
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    OK(cuMemAlloc_v2(&tmp, 4096));
    OK(cuMemFree_v2(tmp));
    CUgraph rg;
    OK(cuStreamEndCapture(s, &rg));
    OK(cuGraphDestroy(rg));
    /* Synchronising the capturing stream is refused and breaks the capture, in any mode. */
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a capturing stream synchronised\n");
    CHECK(cuStreamEndCapture(s, &none) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "capture survived a synchronise\n");

    observed_check("graphs", 0);
    OK(cuGraphExecDestroy(he));
    OK(cuGraphDestroy(hg));
    OK(cuGraphExecDestroy(exec));
    OK(cuGraphDestroy(graph));
    OK(cuStreamDestroy_v2(s));
    OK(cuModuleUnload(m));
    return 0;
}

/* ------------------------------------------------------------------ runtime */

/* What nvcc emits for `__global__ void fk_add_f32(float*, const float*, const float*,
 * uint64_t)`: a host stub that pops the <<<>>> configuration and calls cudaLaunchKernel. */
static void fk_add_f32(float *out, const float *a, const float *b, uint64_t n)
{
    void *args[] = { &out, &a, &b, &n };
    dim3 grid, block;
    size_t shared;
    cudaStream_t s;
    if (__cudaPopCallConfiguration(&grid, &block, &shared, &s) == 0)
        cudaLaunchKernel((const void *)fk_add_f32, grid, block, args, shared, s);
}
static void fk_fill_u32(uint32_t *dst, uint32_t v, uint64_t n) { (void)dst; (void)v; (void)n; }

int test_runtime(int argc, char **argv)
{
    (void)argc; (void)argv;
    static __fatBinC_Wrapper_t wrapper = { FATBINC_MAGIC, 1, launch_ptx, NULL };
    void **h = __cudaRegisterFatBinary(&wrapper);
    __cudaRegisterFunction(h, (const char *)fk_add_f32, "fk_add_f32", "fk_add_f32", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(h, (const char *)fk_fill_u32, "fk_fill_u32", "fk_fill_u32", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);
    float *a, *b, *out;
    OK(cudaMalloc((void **)&a, N * 4));
    OK(cudaMalloc((void **)&b, N * 4));
    OK(cudaMalloc((void **)&out, N * 4));
    fillf((CUdeviceptr)a, 1.0f, N);
    fillf((CUdeviceptr)b, 2.0f, N);
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, 1));
    observed_reset();
    /* fk_add_f32<<<4, 256, 0, s>>>(out, a, b, N) */
    CHECK(__cudaPushCallConfiguration((dim3){ 4, 1, 1 }, (dim3){ 256, 1, 1 }, 0, s) == 0, "push refused\n");
    fk_add_f32(out, a, b, N);
    OK(cudaStreamSynchronize(s));
    expect_all((CUdeviceptr)out, N, 3.0f, "<<<>>> launch");
    uint64_t n = N;
    void *args[] = { &out, &out, &b, &n };
    OK(cudaLaunchKernel_ptsz((const void *)fk_add_f32, (dim3){ 4, 1, 1 }, (dim3){ 256, 1, 1 }, args, 0, NULL));
    cudaLaunchConfig_t cfg = { { 4, 1, 1 }, { 256, 1, 1 }, 0, s, NULL, 0 };
    OK(cudaLaunchKernelExC(&cfg, (const void *)fk_add_f32, args));
    OK(cudaLaunchCooperativeKernel((const void *)fk_add_f32, (dim3){ 4, 1, 1 }, (dim3){ 256, 1, 1 }, args, 0, s));
    OK(cudaStreamSynchronize(s));
    expect_all((CUdeviceptr)out, N, 9.0f, "runtime launches");
    CHECK(cudaLaunchKernel((const void *)test_runtime, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 }, args, 0, s) == 98,
          "an unregistered function launched\n");
    cudaFunction_t f;
    OK(cudaGetFuncBySymbol(&f, (const void *)fk_add_f32));
    size_t off, size;
    OK(cudaFuncGetParamInfo((const void *)fk_fill_u32, 1, &off, &size));
    CHECK(off == 8 && size == 4, "cudaFuncGetParamInfo: %zu %zu\n", off, size);
    /* The runtime's capture and graphs. */
    OK(cudaStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    OK(cudaLaunchKernel((const void *)fk_add_f32, (dim3){ 4, 1, 1 }, (dim3){ 256, 1, 1 }, args, 0, s));
    cudaGraph_t graph;
    OK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    expect_all((CUdeviceptr)out, N, 13.0f, "runtime graph");
    CHECK(fakegpu_count("kernel:cuLaunchKernel") == 1 && fakegpu_count("kernel:cuLaunchKernel_ptsz") == 1 &&
              fakegpu_count("kernel:cuLaunchKernelEx") == 1 && fakegpu_count("kernel:cuGraphLaunch") == 2,
          "the runtime's launches took other driver paths\n");
    observed_check("runtime", 0);
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(graph));
    OK(cudaStreamDestroy(s));
    OK(cudaFree(a));
    OK(cudaFree(b));
    OK(cudaFree(out));
    __cudaUnregisterFatBinary(h);
    return 0;
}

/* ------------------------------------------------------------------ capture under load */

/* A global-mode capture held open for argv[2] ms (default 300) while the process's
 * memory is in use: nothing else in the process (the shim's threads included) may make
 * an unsafe call meanwhile, or the capture is invalidated. */
int test_capture(int argc, char **argv)
{
    int ms = argc > 2 ? atoi(argv[2]) : 300;
    CUmodule m;
    CUfunction add;
    OK(cuModuleLoadData(&m, launch_ptx));
    OK(cuModuleGetFunction(&add, m, "fk_add_f32"));
    enum { BLOCKS = 8 };
    CUdeviceptr buf[BLOCKS];
    size_t block = 8 * MiB;
    for (int i = 0; i < BLOCKS; i++) {
        OK(cuMemAlloc_v2(&buf[i], block));
        fillf(buf[i], (float)i, N);
    }
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t n = N;
    OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *args[BLOCKS][4];
    for (int i = 0; i + 1 < BLOCKS; i++) {
        args[i][0] = &buf[i + 1], args[i][1] = &buf[i + 1], args[i][2] = &buf[i], args[i][3] = &n;
        OK(cuLaunchKernel(add, 4, 1, 1, 256, 1, 1, 0, s, args[i], NULL));
        usleep(ms * 1000 / BLOCKS);
    }
    CUstreamCaptureStatus st;
    OK(cuStreamIsCapturing(s, (int *)&st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "the global capture was invalidated while it was open\n");
    CUgraph graph;
    CUresult rc = cuStreamEndCapture(s, &graph);
    CHECK(rc == CUDA_SUCCESS, "cuStreamEndCapture -> %d: something in the process broke the global capture\n", rc);
    CUgraphExec exec;
    OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    OK(cuGraphLaunch(exec, s));
    OK(cuStreamSynchronize(s));
    /* buf[i] = i + (i-1) + ... + 0 after the chain. */
    for (int i = 0; i < BLOCKS; i++)
        expect_all(buf[i], N, (float)(i * (i + 1) / 2), "captured chain");
    OK(cuGraphExecDestroy(exec));
    OK(cuGraphDestroy(graph));
    OK(cuStreamDestroy_v2(s));
    for (int i = 0; i < BLOCKS; i++)
        OK(cuMemFree_v2(buf[i]));
    OK(cuModuleUnload(m));
    return 0;
}
