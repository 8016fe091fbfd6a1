/* Tests of programs that use the CUDA runtime, as PyTorch does: linked against
 * libcudart (12 or 13), driver functions only through cudaGetDriverEntryPoint*.
 * Built into gbtest-rt13, gbtest-rt12 and libgbframework.so (loaded RTLD_LOCAL by
 * gbtest-fw). Entry: gbtests_main(argc, argv); argv[1] names the test.
 *
 * Sizes come from the environment the runner sets: FAKECUDA_VRAM (device size).
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "devices.h"
#include "shimstats.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaGetDeviceProperties(void *prop, int d);
cudaError_t cudaGetDeviceProperties_v2(void *prop, int d);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                    CUdriverProcAddressQueryResult *status);
cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned version,
                                             unsigned long long flags, CUdriverProcAddressQueryResult *status);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

static size_t vram;

static void *entry(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &st));
    CHECK(fn && st == CU_GET_PROC_ADDRESS_SUCCESS, "no driver entry point %s\n", name);
    return fn;
}

static const char *kind(void *p) { return fakegpu_ptr_kind((CUdeviceptr)(uintptr_t)p); }

/* Fills with the fake GPU, checks with the fake GPU and with a copy to the host. */
static void fill_and_verify(void *p, size_t n, uint32_t seed, int by_memcpy)
{
    if (by_memcpy) {
        unsigned char *host = malloc(n);
        fakegpu_pattern_fill(host, n, seed);
        OK(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice));
        free(host);
    } else {
        OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)p, n, seed, NULL));
    }
}

static void verify(void *p, size_t n, uint32_t seed)
{
    unsigned long long bad = 0;
    OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)p, n, seed, NULL, &bad));
    CHECK(bad == 0, "device read of %p (%s, %zu bytes) found %llu wrong words\n", p, kind(p), n, bad);
    unsigned char *host = malloc(n);
    OK(cudaMemcpy(host, p, n, cudaMemcpyDeviceToHost));
    bad = fakegpu_pattern_check(host, n, seed);
    free(host);
    CHECK(bad == 0, "copy back of %p (%s, %zu bytes) found %llu wrong bytes\n", p, kind(p), n, bad);
}

/* Pinned host memory is what T2 costs the user: after everything is freed none may
 * stay registered (GBTEST_ALLOW_T2_CACHE=1 accepts a shim that keeps a cache). */
static void check_host_released(const char *what)
{
    size_t left = 0;
    for (int i = 0; i < 50; i++) {
        left = fakegpu_hostreg_bytes();
        if (left == 0)
            break;
        usleep(100000);
    }
    printf("%s: %zu bytes still registered after all frees\n", what, left);
    if (!getenv("GBTEST_ALLOW_T2_CACHE"))
        CHECK(left == 0, "%zu bytes of host memory stay pinned after every allocation was freed\n", left);
}

/* ---- capacity: every API reports the same total; free figures agree ---- */
/* NVML as a monitoring tool reaches it: dlopen'ed, device 0, both memory queries. */
struct nvml_device {
    nvmlDevice_t dev;
    nvmlReturn_t (*mem1)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*mem2)(nvmlDevice_t, nvmlMemory_v2_t *);
};

static void open_nvml(struct nvml_device *out)
{
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(nvml, "dlopen libnvidia-ml.so.1: %s\n", dlerror());
    nvmlReturn_t (*init)(void) = dlsym(nvml, "nvmlInit_v2");
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *) = dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    out->mem1 = dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    out->mem2 = dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2");
    CHECK(init && handle && out->mem1 && out->mem2, "NVML symbols missing\n");
    OK(init());
    OK(handle(0, &out->dev));
}

static int test_caps(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: caps EXPECTED_TOTAL [combined]\n");
    unsigned long long expect = arg_size(argv[2]);
    int combined = argc > 3 && !strcmp(argv[3], "combined");

    /* PyTorch's first runtime call (torch.cuda.device_count) is not hooked: the runtime
     * initialises outside any hook and caches the total that cuDeviceTotalMem (hooked,
     * through cuGetProcAddress) gave it. */
    int count = 0;
    OK(cudaGetDeviceCount(&count));
    size_t free_rt, total_rt;
    OK(cudaMemGetInfo(&free_rt, &total_rt));
    unsigned char prop[CUDA_DEVICE_PROP_SIZE + 64];
    memset(prop, 0xab, sizeof prop);
    OK(cudaGetDeviceProperties(prop, 0));
    size_t total_prop;
    memcpy(&total_prop, prop + CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET, sizeof total_prop);
    for (size_t i = CUDA_DEVICE_PROP_SIZE; i < sizeof prop; i++)
        CHECK(prop[i] == 0xab, "cudaGetDeviceProperties wrote past the struct (byte %zu)\n", i);
    memset(prop, 0, sizeof prop);
    OK(cudaGetDeviceProperties_v2(prop, 0));
    size_t total_prop2;
    memcpy(&total_prop2, prop + CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET, sizeof total_prop2);

    CUresult (*getinfo)(size_t *, size_t *) = entry("cuMemGetInfo");
    CUresult (*totalmem)(size_t *, CUdevice) = entry("cuDeviceTotalMem");
    size_t free_drv, total_drv, total_dev;
    OK(getinfo(&free_drv, &total_drv));
    OK(totalmem(&total_dev, 0));

    struct nvml_device nvml;
    open_nvml(&nvml);
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
    OK(nvml.mem1(nvml.dev, &m1));
    OK(nvml.mem2(nvml.dev, &m2));
    nvmlMemory_v2_t bad = { .version = 1 };
    CHECK(nvml.mem2(nvml.dev, &bad) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
          "nvmlDeviceGetMemoryInfo_v2 accepted a wrong struct version\n");

    printf("totals: cudaMemGetInfo=%zu props=%zu props_v2=%zu cuMemGetInfo=%zu cuDeviceTotalMem=%zu "
           "nvml=%llu nvml_v2=%llu expected=%llu\n", total_rt, total_prop, total_prop2, total_drv,
           total_dev, m1.total, m2.total, expect);
    printf("free: cudaMemGetInfo=%zu cuMemGetInfo=%zu nvml=%llu nvml_v2=%llu\n", free_rt, free_drv,
           m1.free, m2.free);
    CHECK(total_rt == expect, "cudaMemGetInfo total %zu != %llu\n", total_rt, expect);
    CHECK(total_prop == expect, "cudaGetDeviceProperties totalGlobalMem %zu != %llu\n", total_prop, expect);
    CHECK(total_prop2 == expect, "cudaGetDeviceProperties_v2 totalGlobalMem %zu != %llu\n", total_prop2, expect);
    CHECK(total_drv == expect, "cuMemGetInfo_v2 total %zu != %llu\n", total_drv, expect);
    CHECK(total_dev == expect, "cuDeviceTotalMem_v2 %zu != %llu\n", total_dev, expect);
    CHECK(m1.total == expect, "nvmlDeviceGetMemoryInfo total %llu != %llu\n", m1.total, expect);
    CHECK(m2.total == expect, "nvmlDeviceGetMemoryInfo_v2 total %llu != %llu\n", m2.total, expect);
    CHECK(free_rt <= total_rt && free_rt == free_drv, "free: runtime %zu, driver %zu\n", free_rt, free_drv);
    CHECK(m1.free == free_rt && m1.used == m1.total - m1.free,
          "NVML v1 free %llu used %llu disagree with cudaMemGetInfo free %zu\n", m1.free, m1.used, free_rt);
    CHECK(m2.free == free_rt && m2.used + m2.reserved + m2.free == m2.total,
          "NVML v2 free %llu used %llu reserved %llu inconsistent (cudaMemGetInfo free %zu)\n",
          m2.free, m2.used, m2.reserved, free_rt);

    /* An allocation past the budget changes the combined report by its size and the
     * physical one only by the VRAM it holds (the head of a split allocation). */
    size_t big = 2 * vram, vram_before = fakegpu_vram_used();
    void *p;
    OK(cudaMalloc(&p, big));
    size_t in_vram = fakegpu_vram_used() - vram_before;
    size_t free_after, total_after;
    OK(cudaMemGetInfo(&free_after, &total_after));
    OK(nvml.mem1(nvml.dev, &m1));
    printf("after %zu-byte allocation (%s): free %zu -> %zu, nvml free %llu\n", big, kind(p), free_rt,
           free_after, m1.free);
    CHECK(total_after == expect, "total changed after allocation: %zu\n", total_after);
    if (combined) {
        CHECK(free_rt - free_after >= big && free_rt - free_after <= big + 4 * MiB,
              "combined free fell by %zu for a %zu-byte T2 allocation\n", free_rt - free_after, big);
    } else {
        CHECK(free_rt - free_after == in_vram,
              "physical free changed from %zu to %zu for an allocation with %zu bytes in VRAM\n", free_rt,
              free_after, in_vram);
    }
    CHECK(m1.free == free_after, "NVML free %llu != cudaMemGetInfo free %zu after allocation\n",
          m1.free, free_after);
    OK(cudaFree(p));
    OK(cudaMemGetInfo(&free_after, &total_after));
    CHECK(free_after == free_rt, "free did not come back after cudaFree: %zu != %zu\n", free_after, free_rt);
    return 0;
}

/* ---- 4x VRAM in allocations, data intact; VRAM used up to the budget too ---- */
static int test_alloc4x(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t chunk = vram / 4, n = 16;
    void *p[16];
    size_t free0, total0;
    OK(cudaMemGetInfo(&free0, &total0));
    size_t used0 = fakegpu_vram_used();
    int in_vram = 0, in_t2 = 0;
    for (size_t i = 0; i < n; i++) {
        cudaError_t rc = cudaMalloc(&p[i], chunk);
        CHECK(rc == cudaSuccess, "cudaMalloc #%zu of %zu bytes (%zu MiB allocated so far, VRAM %zu MiB) "
              "failed with error %d (%s)\n", i, chunk, i * chunk >> 20, vram >> 20, rc, cudaGetErrorString(rc));
        const char *k = kind(p[i]);
        CHECK(strcmp(k, "none"), "allocation %p is not reachable by the device\n", p[i]);
        if (!strcmp(k, "vram"))
            in_vram++;
        else
            in_t2++;
        fill_and_verify(p[i], chunk, 1000 + (uint32_t)i, i & 1);
    }
    for (size_t i = 0; i < n; i++)
        verify(p[i], chunk, 1000 + (uint32_t)i);
    /* Device-to-device copies between the tiers. */
    OK(cudaMemcpy(p[n - 1], p[0], chunk, cudaMemcpyDeviceToDevice));
    verify(p[n - 1], chunk, 1000);
    OK(cudaMemcpy(p[1], p[n - 2], chunk, cudaMemcpyDefault));
    verify(p[1], chunk, 1000 + (uint32_t)(n - 2));
    printf("%d allocations in VRAM, %d in T2, VRAM used %zu MiB of %zu\n", in_vram, in_t2,
           fakegpu_vram_used() >> 20, vram >> 20);
    CHECK(in_t2 >= 12, "only %d of 16 allocations outside VRAM; 4x VRAM cannot fit\n", in_t2);
    const char *want_vram = getenv("GBTEST_EXPECT_VRAM_ALLOCS");
    if (want_vram)
        CHECK(in_vram >= atoi(want_vram), "only %d allocations in VRAM, expected at least %s\n", in_vram, want_vram);
    for (size_t i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    size_t free1, total1;
    OK(cudaMemGetInfo(&free1, &total1));
    CHECK(fakegpu_vram_used() == used0, "VRAM used %zu after freeing everything, was %zu\n",
          fakegpu_vram_used(), used0);
    CHECK(free1 == free0, "reported free %zu after freeing everything, was %zu\n", free1, free0);
    check_host_released("alloc4x");
    return 0;
}

/* ---- placement by budget and minimum size ---- */
static int test_placement(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t budget = env_size("GREENBOOST_VRAM_BUDGET", vram);
    size_t reserve = env_size("GREENBOOST_VRAM_RESERVE", 0);
    size_t min_t2 = env_size("GREENBOOST_MIN_T2_SIZE", 2 * MiB);
    size_t limit = budget - reserve; /* what large allocations may take of VRAM */
    /* Small allocations stay in VRAM even past the budget. */
    void *small[64];
    size_t nsmall = 0, used = 0;
    void *big[64];
    size_t nbig = 0;
    /* Fill the budget with budget/4 chunks: the ones that fit land in VRAM. */
    for (; nbig < 6; nbig++) {
        OK(cudaMalloc(&big[nbig], budget / 4));
        fill_and_verify(big[nbig], budget / 4, 7 + (uint32_t)nbig, 0);
    }
    int vram_count = 0;
    for (size_t i = 0; i < nbig; i++)
        vram_count += !strcmp(kind(big[i]), "vram");
    printf("budget %zu MiB, reserve %zu MiB: %d of %zu quarter-budget allocations in VRAM, VRAM used %zu MiB\n",
           budget >> 20, reserve >> 20, vram_count, nbig, fakegpu_vram_used() >> 20);
    CHECK(fakegpu_vram_used() <= limit, "VRAM use %zu exceeds budget %zu minus reserve %zu\n",
          fakegpu_vram_used(), budget, reserve);
    CHECK((size_t)vram_count == limit / (budget / 4), "%d quarter-budget allocations in VRAM; %zu fit "
          "under budget minus reserve\n", vram_count, limit / (budget / 4));
    /* As many as physically fit beside the large ones (past that the driver's own
     * out-of-memory sends them to T2, rightly). */
    size_t sz = min_t2 / 2 + 4096, room = (vram - fakegpu_vram_used()) / (sz + 4096);
    size_t want_small = room > 17 ? 16 : room - 1;
    for (; nsmall < want_small; nsmall++) {
        OK(cudaMalloc(&small[nsmall], sz));
        used += sz;
        CHECK(!strcmp(kind(small[nsmall]), "vram"), "%zu-byte allocation (below the T2 minimum %zu) went to %s\n",
              sz, min_t2, kind(small[nsmall]));
        fill_and_verify(small[nsmall], sz, 77 + (uint32_t)nsmall, 1);
    }
    for (size_t i = 0; i < nbig; i++)
        verify(big[i], budget / 4, 7 + (uint32_t)i);
    for (size_t i = 0; i < nsmall; i++)
        OK(cudaFree(small[i]));
    for (size_t i = 0; i < nbig; i++)
        OK(cudaFree(big[i]));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after freeing everything\n", fakegpu_vram_used());
    return 0;
}

/* ---- stream-ordered alloc/free: memory stays until the stream reaches the free ---- */
static int test_async(int argc, char **argv)
{
    (void)argc; (void)argv;
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, CU_STREAM_NON_BLOCKING));
    size_t sizes[] = { 1 * MiB, vram / 8, 2 * vram };
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        void *a;
        OK(cudaMallocAsync(&a, n, s));
        const char *where = kind(a);
        unsigned long long bad = ~0ULL;
        fakegpu_stream_hold(s);
        OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)a, n, 31 + (uint32_t)k, s));
        OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)a, n, 31 + (uint32_t)k, s, &bad));
        OK(cudaFreeAsync(a, s));
        /* The stream has not reached the free: the device must still reach the memory,
         * and a synchronous allocation must not be handed the same memory. */
        CHECK(strcmp(kind(a), "none"), "%zu-byte %s allocation released before its stream reached the free\n",
              n, where);
        void *b;
        OK(cudaMalloc(&b, n));
        CHECK((uintptr_t)b + n <= (uintptr_t)a || (uintptr_t)a + n <= (uintptr_t)b,
              "memory of a pending stream-ordered free (%p, %s) reused by cudaMalloc (%p)\n", a, where, b);
        OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)b, n, 99, NULL));
        fakegpu_stream_release(s);
        cudaError_t rc = cudaStreamSynchronize(s);
        CHECK(rc == cudaSuccess, "stream work on a freed-async %s allocation failed: %d\n", where, rc);
        CHECK(bad == 0, "queued kernel saw %llu wrong words in a %s allocation freed async\n", bad, where);
        verify(b, n, 99);
        OK(cudaFree(b));
        printf("%zu bytes: %s, stream-ordered free honoured\n", n, where);
    }
    /* 4x VRAM through the stream-ordered allocator, then everything freed in order. */
    void *p[8];
    for (int i = 0; i < 8; i++) {
        cudaError_t rc = cudaMallocAsync(&p[i], vram / 2, s);
        CHECK(rc == cudaSuccess, "cudaMallocAsync #%d of %zu bytes failed: %d\n", i, vram / 2, rc);
        OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)p[i], vram / 2, 500 + i, s));
    }
    unsigned long long bad[8];
    for (int i = 0; i < 8; i++) {
        OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)p[i], vram / 2, 500 + i, s, &bad[i]));
        OK(cudaFreeAsync(p[i], s));
    }
    OK(cudaStreamSynchronize(s));
    for (int i = 0; i < 8; i++)
        CHECK(bad[i] == 0, "async allocation %d: %llu wrong words\n", i, bad[i]);
    /* The default and per-thread streams too. */
    void *d;
    OK(cudaMallocAsync(&d, 2 * vram, NULL));
    fill_and_verify(d, 2 * vram, 5, 0);
    verify(d, 2 * vram, 5);
    OK(cudaFreeAsync(d, NULL));
    OK(cudaMallocAsync(&d, 2 * vram, CU_STREAM_PER_THREAD));
    OK(cudaFreeAsync(d, CU_STREAM_PER_THREAD));
    OK(cudaDeviceSynchronize());
    OK(cudaStreamDestroy(s));
    /* Everything released once the device is idle (allow the shim a moment to reap). */
    size_t free1 = 0, total1;
    for (int i = 0; i < 50; i++) {
        OK(cudaMemGetInfo(&free1, &total1));
        if (fakegpu_vram_used() == 0)
            break;
        usleep(100000);
    }
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after all stream-ordered frees completed\n", fakegpu_vram_used());
    check_host_released("async");
    return 0;
}

/* ---- 16 threads allocating, using and freeing at once ---- */
static int thread_failures;
static void *churn(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, CU_STREAM_NON_BLOCKING))
        return (void *)1;
    unsigned seed = (unsigned)id * 7919u + 1;
    void *live[4] = { 0 };
    size_t live_n[4] = { 0 };
    uint32_t live_seed[4] = { 0 };
    for (int it = 0; it < 60; it++) {
        seed = seed * 1103515245u + 12345u;
        int slot = (seed >> 8) & 3;
        if (live[slot]) {
            unsigned long long bad = ~0ULL;
            if (fakegpu_launch_verify((CUdeviceptr)(uintptr_t)live[slot], live_n[slot], live_seed[slot], s, &bad) ||
                cudaStreamSynchronize(s) || bad) {
                printf("thread %lu: allocation %p (%s) corrupted: %llu wrong words\n", (unsigned long)id,
                       live[slot], kind(live[slot]), bad);
                __atomic_add_fetch(&thread_failures, 1, __ATOMIC_SEQ_CST);
            }
            cudaError_t rc = (seed & 0x10000) ? cudaFreeAsync(live[slot], s) : cudaFree(live[slot]);
            if (rc) {
                printf("thread %lu: free failed: %d\n", (unsigned long)id, rc);
                __atomic_add_fetch(&thread_failures, 1, __ATOMIC_SEQ_CST);
            }
            live[slot] = NULL;
            continue;
        }
        /* 4 KiB .. 32 MiB: both sides of the T2 minimum. */
        size_t n = (size_t)4096 << ((seed >> 12) % 14);
        void *p;
        cudaError_t rc = (seed & 0x20000) ? cudaMallocAsync(&p, n, s) : cudaMalloc(&p, n);
        if (rc == cudaErrorMemoryAllocation)
            continue;
        if (rc) {
            printf("thread %lu: allocation of %zu failed: %d\n", (unsigned long)id, n, rc);
            __atomic_add_fetch(&thread_failures, 1, __ATOMIC_SEQ_CST);
            continue;
        }
        live[slot] = p;
        live_n[slot] = n;
        live_seed[slot] = seed;
        fakegpu_launch_fill((CUdeviceptr)(uintptr_t)p, n, seed, s);
    }
    for (int i = 0; i < 4; i++)
        if (live[i] && cudaFree(live[i]))
            __atomic_add_fetch(&thread_failures, 1, __ATOMIC_SEQ_CST);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    return NULL;
}

static int test_threads(int argc, char **argv)
{
    (void)argc; (void)argv;
    pthread_t t[16];
    for (uintptr_t i = 0; i < 16; i++)
        CHECK(pthread_create(&t[i], NULL, churn, (void *)i) == 0, "pthread_create\n");
    for (int i = 0; i < 16; i++) {
        void *r;
        pthread_join(t[i], &r);
        CHECK(r == NULL, "thread %d could not start\n", i);
    }
    OK(cudaDeviceSynchronize());
    CHECK(thread_failures == 0, "%d failures across threads\n", thread_failures);
    for (int i = 0; i < 50 && fakegpu_vram_used(); i++)
        usleep(100000);
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after all threads freed everything\n", fakegpu_vram_used());
    check_host_released("threads");
    return 0;
}

/* ---- fork after allocations, while other threads allocate ---- */
static volatile int stop_churn;
static void *background(void *arg)
{
    (void)arg;
    for (unsigned i = 0; !stop_churn; i++) {
        void *p;
        size_t n = i % 3 == 0 ? 4096 : i % 3 == 1 ? 4 * MiB : vram;
        if (cudaMalloc(&p, n) == cudaSuccess)
            cudaFree(p);
    }
    return NULL;
}

static int test_fork(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *t2;
    OK(cudaMalloc(&v, 1 * MiB));
    OK(cudaMalloc(&t2, 2 * vram));
    fill_and_verify(t2, 2 * vram, 4242, 0);
    pthread_t bg[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&bg[i], NULL, background, NULL);
    for (int round = 0; round < 60; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork\n");
        if (pid == 0) {
            /* CUDA does not survive fork: the child gets errors, not a hang or a crash. */
            alarm(10);
            void *p = NULL;
            cudaError_t a = cudaMalloc(&p, 4096);
            cudaError_t b = cudaMalloc(&p, 2 * vram);
            cudaError_t c = cudaFree(v);
            cudaError_t d = cudaFree(t2);
            size_t f, tot;
            cudaError_t e = cudaMemGetInfo(&f, &tot);
            if (round == 0)
                printf("child: cudaMalloc small %d, T2-size %d, cudaFree %d %d, cudaMemGetInfo %d\n", a, b, c, d, e);
            _exit(a == 0 || b == 0 ? 3 : 0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid\n");
        CHECK(WIFEXITED(status), "child of fork round %d died: signal %d\n", round,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        CHECK(WEXITSTATUS(status) == 0, "child of fork round %d got a successful cudaMalloc; CUDA "
              "cannot work after fork (cudaErrorInitializationError)\n", round);
    }
    stop_churn = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(bg[i], NULL);
    verify(t2, 2 * vram, 4242);
    OK(cudaFree(t2));
    OK(cudaFree(v));
    void *again;
    OK(cudaMalloc(&again, 2 * vram));
    fill_and_verify(again, 2 * vram, 1, 1);
    verify(again, 2 * vram, 1);
    OK(cudaFree(again));
    return 0;
}

/* ---- one exit summary per process: a forked child that leaves through exit() (as a
 * Python worker's sys.exit does) runs the inherited atexit handlers ---- */
static int test_forkexit(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *t2;
    OK(cudaMalloc(&v, 1 * MiB));
    OK(cudaMalloc(&t2, 2 * vram));
    printf("parent pid %d\n", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork\n");
    if (pid == 0)
        exit(0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child that only exited failed (status %#x)\n", status);
    OK(cudaFree(t2));
    OK(cudaFree(v));
    return 0;
}

/* ---- error semantics as the CUDA runtime defines them ---- */
static int test_errors(int argc, char **argv)
{
    (void)argc; (void)argv;
    cudaError_t rc;
    OK(cudaFree(NULL));
    rc = cudaFree((void *)0x1000);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(0x1000) = %d, CUDA says cudaErrorInvalidValue\n", rc);
    char *host = malloc(1 << 20);
    rc = cudaFree(host);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(host pointer) = %d, CUDA says cudaErrorInvalidValue\n", rc);
    free(host);
    rc = cudaMalloc(NULL, 4096);
    CHECK(rc == cudaErrorInvalidValue, "cudaMalloc(NULL, 4096) = %d\n", rc);
    void *z = (void *)1;
    OK(cudaMalloc(&z, 0));
    CHECK(z == NULL, "cudaMalloc of 0 bytes gave %p, CUDA gives NULL\n", z);

    void *v, *t2;
    OK(cudaMalloc(&v, 4096));
    OK(cudaMalloc(&t2, 2 * vram));
    CHECK(strcmp(kind(t2), "vram"), "a 2x VRAM allocation in VRAM?\n");
    rc = cudaFree((char *)t2 + 4096);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(inside a T2 allocation) = %d\n", rc);
    OK(cudaFree(v));
    OK(cudaFree(t2));
    rc = cudaFree(v);
    CHECK(rc == cudaErrorInvalidValue, "double cudaFree of a VRAM allocation = %d\n", rc);
    rc = cudaFree(t2);
    CHECK(rc == cudaErrorInvalidValue, "double cudaFree of a T2 allocation = %d\n", rc);
    rc = cudaFreeAsync((void *)0x2000, NULL);
    CHECK(rc == cudaErrorInvalidValue, "cudaFreeAsync(unknown) = %d\n", rc);
    OK(cudaMallocAsync(&t2, 2 * vram, NULL));
    OK(cudaFreeAsync(t2, NULL));
    OK(cudaDeviceSynchronize());
    rc = cudaFree(t2);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree after cudaFreeAsync of a T2 allocation = %d\n", rc);
    /* Still usable afterwards. */
    OK(cudaMalloc(&t2, 2 * vram));
    fill_and_verify(t2, 2 * vram, 3, 0);
    verify(t2, 2 * vram, 3);
    OK(cudaFree(t2));
    return 0;
}

/* ---- T2 exhausted: the CUDA out-of-memory error, nothing lost ---- */
static int test_t2cap(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t chunk = vram / 2;
    void *p[256];
    int n = 0;
    cudaError_t rc = cudaSuccess;
    while (n < 256 && (rc = cudaMalloc(&p[n], chunk)) == cudaSuccess) {
        fill_and_verify(p[n], chunk, 900 + n, 0);
        n++;
    }
    printf("%d allocations of %zu MiB before error %d\n", n, chunk >> 20, rc);
    CHECK(n < 256, "T2 cap never reached\n");
    CHECK(rc == cudaErrorMemoryAllocation, "exhaustion returned %d, CUDA says cudaErrorMemoryAllocation (2)\n", rc);
    CHECK(n >= 1, "nothing could be allocated\n");
    /* As after CUDA's own failed allocation: the error is the thread's last error too. */
    rc = cudaPeekAtLastError();
    CHECK(rc == cudaErrorMemoryAllocation, "after the out-of-memory answer cudaPeekAtLastError returned %d, want 2\n", rc);
    rc = cudaGetLastError();
    CHECK(rc == cudaErrorMemoryAllocation, "after the out-of-memory answer cudaGetLastError returned %d, want 2\n", rc);
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError did not clear the out-of-memory error\n");
    rc = cudaMallocAsync(&p[n], chunk, NULL);
    CHECK(rc == cudaErrorMemoryAllocation, "cudaMallocAsync at exhaustion returned %d\n", rc);
    for (int i = 0; i < n; i++)
        verify(p[i], chunk, 900 + i);
    for (int i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    int m = 0;
    while (m < n && cudaMalloc(&p[m], chunk) == cudaSuccess)
        m++;
    CHECK(m == n, "after freeing everything only %d of %d allocations fit again\n", m, n);
    for (int i = 0; i < m; i++)
        OK(cudaFree(p[i]));
    return 0;
}

/* ---- driver entry points handed out by the runtime are the hooked ones ---- */
static int test_entrypoints(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUresult (*alloc)(CUdeviceptr *, size_t) = entry("cuMemAlloc");
    CUresult (*dfree)(CUdeviceptr) = entry("cuMemFree");
    CUdeviceptr d;
    CUresult rc = alloc(&d, 2 * vram);
    CHECK(rc == CUDA_SUCCESS, "cuMemAlloc from cudaGetDriverEntryPointByVersion: %zu bytes -> %d\n", 2 * vram, rc);
    OK(fakegpu_launch_fill(d, 2 * vram, 8, NULL));
    unsigned long long bad;
    OK(fakegpu_launch_verify(d, 2 * vram, 8, NULL, &bad));
    CHECK(bad == 0, "data\n");
    OK(dfree(d));
    CUdriverProcAddressQueryResult st;
    void *fn;
    OK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
    alloc = fn;
    rc = alloc(&d, 2 * vram);
    CHECK(rc == CUDA_SUCCESS, "cuMemAlloc from cudaGetDriverEntryPoint: %zu bytes -> %d\n", 2 * vram, rc);
    OK(dfree(d));
    /* Runtime and driver calls mix: memory from one is freed by the other. */
    void *rp;
    OK(cudaMalloc(&rp, 2 * vram));
    rc = dfree((CUdeviceptr)(uintptr_t)rp);
    CHECK(rc == CUDA_SUCCESS, "cuMemFree of a T2 cudaMalloc allocation -> %d\n", rc);
    OK(alloc(&d, 2 * vram));
    cudaError_t rrc = cudaFree((void *)(uintptr_t)d);
    CHECK(rrc == cudaSuccess, "cudaFree of a T2 cuMemAlloc allocation -> %d\n", rrc);
    rc = dfree(d);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuMemFree after cudaFree of the same T2 allocation -> %d\n", rc);
    fn = (void *)1;
    rc = cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &st);
    CHECK(rc == cudaSuccess && fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
          "cuMemAllocAsync for CUDA 11.0 must be VERSION_NOT_SUFFICIENT: rc %d fn %p status %d\n", rc, fn, st);
    return 0;
}

/* ---- no T2 available (GREENBOOST_BACKEND=kmod without the module): VRAM still works,
 * what does not fit gets the CUDA out-of-memory error ---- */
static int test_no_t2(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *big;
    OK(cudaMalloc(&v, 4 * MiB));
    fill_and_verify(v, 4 * MiB, 1, 1);
    verify(v, 4 * MiB, 1);
    cudaError_t rc = cudaMalloc(&big, 2 * vram);
    CHECK(rc == cudaErrorMemoryAllocation, "2x VRAM without T2 -> %d, expected cudaErrorMemoryAllocation\n", rc);
    OK(cudaFree(v));
    return 0;
}

/* ---- PyTorch's expandable segments: VMM through cudaGetDriverEntryPoint, device
 * properties with gpuDirectRDMACapable, 20 MiB pages, grown past VRAM ---- */
static int test_expandable(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = entry("cuMemAddressReserve");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = entry("cuMemCreate");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = entry("cuMemMap");
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = entry("cuMemSetAccess");
    CUresult (*unmap)(CUdeviceptr, size_t) = entry("cuMemUnmap");
    CUresult (*release)(CUmemGenericAllocationHandle) = entry("cuMemRelease");
    CUresult (*address_free)(CUdeviceptr, size_t) = entry("cuMemAddressFree");
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    prop.allocFlags.gpuDirectRDMACapable = 1;
    size_t page = 20 * MiB, max = 4 * vram, used = 0;
    CUdeviceptr base;
    OK(reserve(&base, max, 0, 0, 0));
    CUmemGenericAllocationHandle h[512];
    int n = 0;
    while (used + page <= 3 * vram) {
        CUresult rc = create(&h[n], page, &prop, 0);
        CHECK(rc == CUDA_SUCCESS, "cuMemCreate (entry point) of segment page %d, %zu MiB mapped, VRAM %zu MiB -> %d\n",
              n, used >> 20, vram >> 20, rc);
        OK(map(base + used, page, 0, h[n], 0));
        CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(access(base + used, page, &desc, 1));
        used += page;
        n++;
    }
    printf("expandable segment: %d pages, %zu MiB, last page %s\n", n, used >> 20, kind((void *)(uintptr_t)(base + used - 1)));
    CHECK(!strcmp(kind((void *)(uintptr_t)(base + used - 1)), "vmm-host"), "segment past VRAM is not host memory\n");
    OK(fakegpu_launch_fill(base, used, 66, NULL));
    unsigned long long bad = ~0ULL;
    OK(fakegpu_launch_verify(base, used, 66, NULL, &bad));
    CHECK(bad == 0, "expandable segment: %llu wrong words\n", bad);
    OK(unmap(base, used));
    for (int i = 0; i < n; i++)
        OK(release(h[i]));
    OK(address_free(base, max));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after the segment was released\n", fakegpu_vram_used());
    return 0;
}

/* ---- split placement: one allocation larger than the VRAM left under the budget gets
 * a VRAM head and a host tail in one address range (GREENBOOST_SPLIT_MIN) ---- */

static struct fakegpu_vmm_counts vmm_live(void)
{
    struct fakegpu_vmm_counts c;
    fakegpu_vmm_live(&c);
    return c;
}

static int same_vmm(struct fakegpu_vmm_counts a, struct fakegpu_vmm_counts b)
{
    return a.handles == b.handles && a.reservations == b.reservations && a.mappings == b.mappings;
}

/* Everything the allocation held is back: VRAM, the shim's T1/T2 counts, and every VMM
 * handle, mapping and address range (waits a moment for stream-ordered frees). */
static void check_all_back(const char *what, size_t vram_before, struct shim_stats before,
                           struct fakegpu_vmm_counts vmm_before)
{
    /* The reclaim thread gives the memory back to the driver first and then uncounts
     * it: wait for both (the order placement needs: never room that is not free yet). */
    for (int i = 0; i < 100; i++) {
        size_t free_bytes, total;
        OK(cudaMemGetInfo(&free_bytes, &total)); /* a shim call: it reclaims */
        struct shim_stats counted = shim_stats();
        if (fakegpu_vram_used() == vram_before && same_vmm(vmm_live(), vmm_before) &&
            counted.t1_used == before.t1_used && counted.t2_used == before.t2_used)
            break;
        usleep(50000);
    }
    struct fakegpu_vmm_counts now = vmm_live();
    CHECK(same_vmm(now, vmm_before), "%s: VMM objects leaked: %zu handles, %zu ranges, %zu mappings live "
          "(before: %zu, %zu, %zu)\n", what, now.handles, now.reservations, now.mappings,
          vmm_before.handles, vmm_before.reservations, vmm_before.mappings);
    CHECK(fakegpu_vram_used() == vram_before, "%s: VRAM used %zu, was %zu\n", what, fakegpu_vram_used(), vram_before);
    struct shim_stats after = shim_stats();
    CHECK(after.t1_used == before.t1_used && after.t2_used == before.t2_used,
          "%s: the shim counts T1 %llu / T2 %llu in use, was %llu / %llu\n", what, after.t1_used, after.t2_used,
          before.t1_used, before.t2_used);
}

/* Fills [p, p+n) by kernel, rewrites a window around `seam` by memcpy, and checks the
 * whole range through the device and by copies back: a split's two halves must read as
 * one allocation. */
static void check_data_across(void *p, size_t n, size_t seam)
{
    fill_and_verify(p, n, 4242, 0);
    verify(p, n, 4242);
    size_t window = 2 * MiB;
    CHECK(seam >= window / 2 && seam + window / 2 <= n, "seam %zu outside the allocation\n", seam);
    unsigned char *at = (unsigned char *)p + seam - window / 2;
    fill_and_verify(at, window, 4343, 1);
    verify(at, window, 4343);
    verify(p, seam - window / 2, 4242);
}

/* split SIZE EXPECT [HEAD]: cudaMalloc(SIZE) with EXPECT "split" (a VRAM head of HEAD
 * bytes, the rest host-NUMA VMM memory), "t2" (wholly T2, nothing left of a split
 * attempt) or "oom" (cudaErrorMemoryAllocation, nothing held). */
static int test_split(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: split SIZE split|t2|oom [HEAD]\n");
    size_t n = arg_size(argv[2]);
    const char *expect = argv[3];
    size_t want_head = argc > 4 ? arg_size(argv[4]) : 0;
    int combined = getenv("GREENBOOST_REPORT") && !strcmp(getenv("GREENBOOST_REPORT"), "combined");

    size_t free0, total0;
    OK(cudaMemGetInfo(&free0, &total0));
    size_t vram0 = fakegpu_vram_used();
    struct shim_stats s0 = shim_stats();
    struct fakegpu_vmm_counts vmm0 = vmm_live();

    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, n);
    if (!strcmp(expect, "oom")) {
        CHECK(rc == cudaErrorMemoryAllocation, "cudaMalloc(%zu) returned %d (%s), want out-of-memory (2)\n", n, rc,
              rc == cudaSuccess ? kind(p) : "-");
        cudaGetLastError();
        check_all_back("after the refused allocation", vram0, s0, vmm0);
        CHECK(shim_stats().split_allocs == s0.split_allocs, "a refused allocation was counted as split\n");
        printf("%zu bytes: out-of-memory, nothing held\n", n);
        return 0;
    }
    CHECK(rc == cudaSuccess, "cudaMalloc(%zu) returned %d\n", n, rc);
    struct shim_stats s1 = shim_stats();
    size_t head = fakegpu_vram_used() - vram0, seam;
    if (!strcmp(expect, "split")) {
        CHECK(!strcmp(kind(p), "vmm-device"), "not split: the start of %p is %s, want vmm-device\n", p, kind(p));
        CHECK(!strcmp(kind((char *)p + n - 1), "vmm-host"), "not split: the end of %p is %s, want vmm-host\n", p,
              kind((char *)p + n - 1));
        CHECK(((uintptr_t)p & (2 * MiB - 1)) == 0, "%p is not aligned to 2 MiB as cudaMalloc's large allocations are\n",
              p);
        CHECK(head > 0 && head < n && head % (2 * MiB) == 0, "VRAM head of %zu bytes\n", head);
        CHECK(!want_head || head == want_head, "VRAM head of %zu bytes, want %zu (what the budget leaves)\n", head,
              want_head);
        CHECK(!strcmp(kind((char *)p + head - 1), "vmm-device") && !strcmp(kind((char *)p + head), "vmm-host"),
              "the seam is not at the head's end (%zu)\n", head);
        CHECK(s1.split_allocs == s0.split_allocs + 1, "split counter %llu, was %llu\n", s1.split_allocs, s0.split_allocs);
        size_t tail = ((n + 2 * MiB - 1) & ~(2 * MiB - 1)) - head;
        CHECK(s1.t1_used == s0.t1_used + head && s1.t2_used == s0.t2_used + tail,
              "the shim counts T1 +%llu / T2 +%llu, want +%zu / +%zu\n", s1.t1_used - s0.t1_used,
              s1.t2_used - s0.t2_used, head, tail);
        struct fakegpu_vmm_counts live = vmm_live();
        CHECK(live.handles == vmm0.handles + 2 && live.mappings == vmm0.mappings + 2 &&
              live.reservations == vmm0.reservations + 1,
              "a split holds %zu handles, %zu mappings, %zu ranges more, want 2, 2, 1\n", live.handles - vmm0.handles,
              live.mappings - vmm0.mappings, live.reservations - vmm0.reservations);
        if (combined) {
            size_t free1, total1;
            OK(cudaMemGetInfo(&free1, &total1));
            CHECK(free0 - free1 == head + tail, "combined report: free fell by %zu, want %zu (VRAM head + T2 tail)\n",
                  free0 - free1, head + tail);
        }
        /* Tools ask the shim which bytes are in T2: the pointer type says "device" for all. */
        unsigned long long (*t2_bytes)(unsigned long long, unsigned long long) =
            (unsigned long long (*)(unsigned long long, unsigned long long))dlsym(RTLD_DEFAULT, "greenboost_shim_t2_bytes");
        CHECK(t2_bytes, "the shim exports no greenboost_shim_t2_bytes\n");
        unsigned long long base = (unsigned long long)(uintptr_t)p;
        CHECK(t2_bytes(base, n) == n - head && t2_bytes(base, head) == 0 && t2_bytes(base + head - 4096, 8192) == 4096,
              "greenboost_shim_t2_bytes: whole %llu (want %zu), head %llu (want 0), across the seam %llu (want 4096)\n",
              t2_bytes(base, n), n - head, t2_bytes(base, head), t2_bytes(base + head - 4096, 8192));
        /* The head used up the budget: the next large allocation goes to T2. */
        void *q;
        OK(cudaMalloc(&q, 64 * MiB));
        CHECK(!strcmp(kind(q), "hostreg"), "after a split took the budget's VRAM, 64 MiB went to %s, not T2\n", kind(q));
        CHECK(t2_bytes((unsigned long long)(uintptr_t)q + MiB, 2 * MiB) == 2 * MiB,
              "greenboost_shim_t2_bytes of 2 MiB inside a T2 allocation: %llu\n",
              t2_bytes((unsigned long long)(uintptr_t)q + MiB, 2 * MiB));
        OK(cudaFree(q));
        seam = head;
    } else {
        CHECK(!strcmp(kind(p), "hostreg") && !strcmp(kind((char *)p + n - 1), "hostreg"),
              "want wholly T2: start %s, end %s\n", kind(p), kind((char *)p + n - 1));
        CHECK(head == 0, "%zu bytes of VRAM taken by an allocation wholly in T2\n", head);
        CHECK(s1.split_allocs == s0.split_allocs, "counted as split\n");
        CHECK(same_vmm(vmm_live(), vmm0), "a failed split left VMM objects behind\n");
        seam = n / 2;
    }
    check_data_across(p, n, seam);

    /* Interior pointer: refused, nothing touched. */
    rc = cudaFree((char *)p + 4096);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree of an interior pointer returned %d, want cudaErrorInvalidValue\n", rc);
    cudaGetLastError();
    verify((char *)p + seam - MiB, 2 * MiB, 4343);

    OK(cudaFree(p));
    check_all_back("after cudaFree", vram0, s0, vmm0);
    rc = cudaFree(p);
    CHECK(rc == cudaErrorInvalidValue, "second cudaFree returned %d, want cudaErrorInvalidValue\n", rc);
    cudaGetLastError();

    /* The room came back: the same allocation is placed the same way again. */
    OK(cudaMalloc(&p, n));
    CHECK(fakegpu_vram_used() - vram0 == head, "again: VRAM head %zu, first time %zu\n", fakegpu_vram_used() - vram0,
          head);
    OK(cudaFree(p));
    check_all_back("after the second cudaFree", vram0, s0, vmm0);
    printf("%zu bytes: %zu in VRAM, %zu on the host; freed and given back\n", n, head, n - head);
    return 0;
}

/* split-async SIZE: cudaMallocAsync of a split allocation, cudaFreeAsync while the
 * stream is held: the range stays mapped and intact for the queued kernels, and is
 * given back once the stream passes the free. */
static int test_split_async(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: split-async SIZE\n");
    size_t n = arg_size(argv[2]);
    size_t vram0 = fakegpu_vram_used();
    struct shim_stats s0 = shim_stats();
    struct fakegpu_vmm_counts vmm0 = vmm_live();
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, CU_STREAM_NON_BLOCKING));
    void *p;
    OK(cudaMallocAsync(&p, n, s));
    CHECK(!strcmp(kind(p), "vmm-device") && !strcmp(kind((char *)p + n - 1), "vmm-host"),
          "not split: %s ... %s\n", kind(p), kind((char *)p + n - 1));
    unsigned long long bad = ~0ULL;
    fakegpu_stream_hold(s);
    OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)p, n, 77, s));
    OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)p, n, 77, s, &bad));
    OK(cudaFreeAsync(p, s));
    usleep(200000); /* time for a reclaim thread that would free too early */
    struct fakegpu_vmm_counts held = vmm_live();
    CHECK(!strcmp(kind(p), "vmm-device") && !strcmp(kind((char *)p + n - 1), "vmm-host") &&
          held.mappings == vmm0.mappings + 2,
          "split memory unmapped before its stream reached the free (%s ... %s)\n", kind(p), kind((char *)p + n - 1));
    fakegpu_stream_release(s);
    OK(cudaStreamSynchronize(s));
    CHECK(bad == 0, "the queued kernel saw %llu wrong words in split memory freed async\n", bad);
    check_all_back("after the stream passed cudaFreeAsync", vram0, s0, vmm0);
    CHECK(shim_stats().deferred_frees == s0.deferred_frees + 1, "the free was not deferred to the stream\n");
    OK(cudaStreamDestroy(s));
    return 0;
}

/* ---- a driver out-of-memory retried in T2 leaves no runtime error pending: PyTorch
 * checks cudaGetLastError() after its kernels and would raise "out of memory" ---- */
static int test_lasterror(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* The runtime's last error as CUDA keeps it: set by a failed call, returned and
     * cleared by cudaGetLastError, returned by cudaPeekAtLastError. */
    char byte = 0;
    cudaError_t rc = cudaMemcpy(&byte, &byte, 1, 99);
    CHECK(rc == 21, "cudaMemcpy with an invalid direction -> %d\n", rc);
    CHECK(cudaPeekAtLastError() == 21 && cudaPeekAtLastError() == 21, "cudaPeekAtLastError did not keep error 21\n");
    CHECK(cudaGetLastError() == 21 && cudaGetLastError() == cudaSuccess, "cudaGetLastError did not return and clear 21\n");

    /* Allocations below GREENBOOST_MIN_T2_SIZE go to VRAM first; once the device is full
     * the driver refuses them and the shim retries in T2. */
    size_t chunk = vram / 3;
    void *p[16];
    int n = 0, in_t2 = 0;
    for (int async = 0; async < 2; async++) {
        for (int tries = 0; tries < 6; tries++, n++) {
            rc = async ? cudaMallocAsync(&p[n], chunk, NULL) : cudaMalloc(&p[n], chunk);
            CHECK(rc == cudaSuccess, "%s #%d of %zu bytes -> %d\n", async ? "cudaMallocAsync" : "cudaMalloc", n, chunk, rc);
            const char *where = kind(p[n]);
            cudaError_t peeked = cudaPeekAtLastError(), pending = cudaGetLastError();
            CHECK(peeked == cudaSuccess && pending == cudaSuccess,
                  "after a successful %s (placed in %s) the runtime still holds error %d (peek %d): "
                  "PyTorch's next cudaGetLastError() check fails with it\n",
                  async ? "cudaMallocAsync" : "cudaMalloc", where, pending, peeked);
            fill_and_verify(p[n], chunk, 500 + (uint32_t)n, 0);
            if (strcmp(where, "vram")) {
                in_t2++;
                n++;
                break;
            }
        }
        CHECK(in_t2 == async + 1, "no %s went to T2 after the device filled up\n", async ? "cudaMallocAsync" : "cudaMalloc");
    }
    for (int i = 0; i < n; i++)
        verify(p[i], chunk, 500 + (uint32_t)i);
    OK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    return 0;
}

/* ---- the T2 cache: a freed T2 buffer stays registered and is handed out again to an
 * allocation of the same length; the cache stays within its bound; memory of a pending
 * stream-ordered free is never handed out. Run with GREENBOOST_VRAM_BUDGET=VRAM/8 and
 * GREENBOOST_T2_CACHE=VRAM (argv[2]), GREENBOOST_T2_CAP=2*VRAM (argv[3]). ---- */
static void *t2_alloc(size_t n)
{
    void *p;
    OK(cudaMalloc(&p, n));
    CHECK(!strcmp(kind(p), "hostreg"), "%zu-byte allocation landed in %s, not T2\n", n, kind(p));
    return p;
}

/* ---- under memory pressure the T2 cache keeps nothing: a buffer freed while the
 * module reports pressure goes back to the module at once, and the cache's other
 * buffers with it (the kmod backend only; the test raises the module's reserve above
 * RAM to cause pressure, then restores it). Run as t2cache, with the module's watchdog
 * at 200 ms as the guests load it. ---- */
#define GB_PARAM_RESERVE "/sys/module/greenboost/parameters/reserve_mb"
#define GB_SYSFS_STATS "/sys/kernel/greenboost/stats"

static long read_long(const char *path, const char *key)
{
    char line[128];
    long value = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        size_t k = key ? strlen(key) : 0;
        if (!key || (!strncmp(line, key, k) && line[k] == ' ')) {
            value = strtol(line + k, NULL, 10);
            break;
        }
    }
    fclose(f);
    return value;
}

static int write_reserve(long mb)
{
    FILE *f = fopen(GB_PARAM_RESERVE, "w");
    if (!f)
        return -1;
    int ok = fprintf(f, "%ld\n", mb) > 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Waits up to 5 s for the module's `pressure` line to read `want`. */
static int wait_pressure(long want)
{
    for (int i = 0; i < 250; i++) {
        if (read_long(GB_SYSFS_STATS, "pressure") == want)
            return 0;
        usleep(20000);
    }
    return -1;
}

static int test_t2cache_pressure(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    size_t n = vram / 2;
    long reserve = read_long(GB_PARAM_RESERVE, NULL);
    CHECK(reserve >= 0, "cannot read %s: this test needs the module\n", GB_PARAM_RESERVE);
    void *a = t2_alloc(n), *b = t2_alloc(n);
    fill_and_verify(a, n, 91, 0);
    OK(cudaFree(a));
    CHECK(fakegpu_hostreg_bytes() == 2 * n, "without pressure a freed T2 buffer stays cached: %zu bytes registered, "
          "want %zu\n", fakegpu_hostreg_bytes(), 2 * n);
    CHECK(write_reserve(1000000) == 0 && wait_pressure(1) == 0, "the module did not enter pressure\n");
    OK(cudaFree(b));
    size_t left = fakegpu_hostreg_bytes();
    int restored = write_reserve(reserve) == 0 && wait_pressure(0) == 0;
    CHECK(left == 0, "freed under pressure, %zu bytes stay registered in the T2 cache\n", left);
    CHECK(restored, "could not restore reserve_mb=%ld\n", reserve);
    return 0;
}

static int test_t2cache(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: t2cache CACHE_BYTES T2_CAP_BYTES\n");
    size_t limit = arg_size(argv[2]), cap = arg_size(argv[3]), n = vram / 2;
    CHECK(limit >= 2 * n, "the cache must hold two %zu-byte buffers\n", n);
    CHECK(fakegpu_hostreg_bytes() == 0, "host memory registered before the test\n");

    void *a = t2_alloc(n);
    fill_and_verify(a, n, 71, 0);
    OK(cudaFree(a));
    CHECK(fakegpu_hostreg_bytes() == n, "a freed %zu-byte T2 buffer was not kept registered (%zu bytes are)\n",
          n, fakegpu_hostreg_bytes());
    void *b = t2_alloc(n);
    CHECK(b == a && fakegpu_hostreg_bytes() == n,
          "the cached buffer was not reused: %p after %p, %zu bytes registered\n", b, a, fakegpu_hostreg_bytes());
    fill_and_verify(b, n, 72, 1);
    verify(b, n, 72);

    /* Another length does not take it (no splitting); both freed, both cached. */
    void *c = t2_alloc(n / 2);
    CHECK(fakegpu_hostreg_bytes() == n + n / 2, "%zu bytes registered, want %zu\n", fakegpu_hostreg_bytes(), n + n / 2);
    OK(cudaFree(c));
    OK(cudaFree(b));
    CHECK(fakegpu_hostreg_bytes() == n + n / 2, "two freed buffers: %zu bytes registered, want %zu\n",
          fakegpu_hostreg_bytes(), n + n / 2);

    /* Two buffers of n freed with n/2 cached pass the bound: the oldest (c) goes. */
    void *d1 = t2_alloc(n), *d2 = t2_alloc(n);
    fill_and_verify(d1, n, 73, 0);
    fill_and_verify(d2, n, 74, 0);
    OK(cudaFree(d1));
    OK(cudaFree(d2));
    CHECK(fakegpu_hostreg_bytes() <= limit, "%zu bytes stay registered, past the cache's %zu\n",
          fakegpu_hostreg_bytes(), limit);
    CHECK(fakegpu_hostreg_bytes() == 2 * n, "%zu bytes stay registered, want the two newest buffers (%zu)\n",
          fakegpu_hostreg_bytes(), 2 * n);

    /* A stream-ordered free whose stream has not reached it: its memory is not handed
     * out, though the cache holds buffers of that length. */
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, CU_STREAM_NON_BLOCKING));
    void *e;
    OK(cudaMallocAsync(&e, n, s));
    unsigned long long bad = ~0ULL;
    fakegpu_stream_hold(s);
    OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)e, n, 75, s));
    OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)e, n, 75, s, &bad));
    OK(cudaFreeAsync(e, s));
    void *f[3];
    for (int i = 0; i < 3; i++) {
        f[i] = t2_alloc(n);
        CHECK((uintptr_t)f[i] + n <= (uintptr_t)e || (uintptr_t)e + n <= (uintptr_t)f[i],
              "memory of a pending stream-ordered free (%p) handed out again (%p)\n", e, f[i]);
        OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)f[i], n, 80 + i, NULL));
    }
    fakegpu_stream_release(s);
    OK(cudaStreamSynchronize(s));
    CHECK(bad == 0, "queued kernel saw %llu wrong words in a T2 buffer freed async\n", bad);
    for (int i = 0; i < 3; i++) {
        verify(f[i], n, 80 + i);
        OK(cudaFree(f[i]));
    }
    OK(cudaStreamDestroy(s));
    CHECK(fakegpu_hostreg_bytes() <= limit, "%zu bytes stay registered, past the cache's %zu\n",
          fakegpu_hostreg_bytes(), limit);

    /* The cache counts against the T2 cap but gives its room back: allocations of a
     * length it does not hold fill the whole cap. */
    void *g[64];
    int in_t2 = 0, m = 0;
    while (m < 64 && cudaMalloc(&g[m], n / 2) == cudaSuccess) {
        if (!strcmp(kind(g[m]), "hostreg"))
            in_t2++;
        m++;
    }
    cudaGetLastError();
    CHECK(m < 64, "the T2 cap of %zu bytes was never reached\n", cap);
    CHECK(in_t2 * (n / 2) == cap, "%d allocations of %zu bytes in T2 before out-of-memory: the cache kept "
          "room the %zu-byte cap needed\n", in_t2, n / 2, cap);
    for (int i = 0; i < m; i++)
        OK(cudaFree(g[i]));
    check_host_released("t2cache");
    return 0;
}

/* ---- the VRAM headroom (GREENBOOST_VRAM_HEADROOM): VRAM kept free on the device
 * whoever uses it. Other processes share the fake device through FAKECUDA_DEVICE_SHARE
 * (the runner's gbballoon, or a second program under the shim). ---- */

static size_t device_free(void) { return vram - fakegpu_device_used(); }
static size_t minus(size_t a, size_t b) { return a > b ? a - b : 0; }

/* GBTEST_BARRIER=file: programs that run at once (GBTEST_BARRIER_N of them, default 2)
 * meet there: a counter in the file, one step per program and phase. A program that
 * fails breaks the barrier (atexit), so that the others fail at once, not at a timeout. */
static uint64_t *barrier_count;
static int barrier_phases_done, barrier_phases_total;
#define BARRIER_BROKEN (1ULL << 40)

static void barrier_break(void)
{
    if (barrier_count && barrier_phases_done < barrier_phases_total)
        __atomic_add_fetch(barrier_count, BARRIER_BROKEN, __ATOMIC_SEQ_CST);
}

static void barrier_open(int phases)
{
    const char *path = getenv("GBTEST_BARRIER");
    if (!path)
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, sizeof(uint64_t)) == 0, "GBTEST_BARRIER=%s: cannot open\n", path);
    barrier_count = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(barrier_count != MAP_FAILED, "GBTEST_BARRIER=%s: cannot map\n", path);
    barrier_phases_total = phases;
    atexit(barrier_break);
}

static void barrier_wait(const char *what)
{
    if (!barrier_count)
        return;
    uint64_t n = env_size("GBTEST_BARRIER_N", 2), want = n * (uint64_t)(barrier_phases_done + 1);
    __atomic_add_fetch(barrier_count, 1, __ATOMIC_SEQ_CST);
    for (int ms = 0;; ms++) {
        uint64_t now = __atomic_load_n(barrier_count, __ATOMIC_SEQ_CST);
        CHECK(now < BARRIER_BROKEN, "another program failed before '%s' (see its output)\n", what);
        if (now >= want)
            break;
        CHECK(ms < 120000, "the other programs never reached '%s' (%llu of %llu)\n", what,
              (unsigned long long)now, (unsigned long long)want);
        usleep(1000);
    }
    barrier_phases_done++;
}

/* GBTEST_BALLOON_PID: makes the balloon grow by GBTEST_BALLOON_GROW bytes (SIGUSR1)
 * and waits until the device shows it; then long enough that the shim's measurement of
 * the others (at most 1 ms old) is a new one. */
static void grow_balloon(void)
{
    const char *pid = getenv("GBTEST_BALLOON_PID");
    size_t grow = env_size("GBTEST_BALLOON_GROW", 0);
    CHECK(pid && grow, "growing the balloon needs GBTEST_BALLOON_PID and GBTEST_BALLOON_GROW\n");
    size_t before = fakegpu_device_used();
    CHECK(kill((pid_t)atoi(pid), SIGUSR1) == 0, "cannot signal the balloon (pid %s)\n", pid);
    for (int ms = 0; fakegpu_device_used() < before + grow; ms++) {
        CHECK(ms < 60000, "the balloon did not grow by %zu bytes (device used %zu, was %zu)\n", grow,
              fakegpu_device_used(), before);
        usleep(1000);
    }
    usleep(20000);
    printf("the balloon grew by %zu MiB: device used %zu MiB\n", grow >> 20, fakegpu_device_used() >> 20);
}

/* cudaMemGetInfo's free memory: the device's free memory less the headroom. */
static void check_report(size_t headroom, const char *when)
{
    size_t free_bytes, total, real = device_free();
    OK(cudaMemGetInfo(&free_bytes, &total));
    CHECK(total == vram, "%s: cudaMemGetInfo total %zu, the device has %zu\n", when, total, vram);
    CHECK(free_bytes == minus(real, headroom), "%s: cudaMemGetInfo free %zu MiB (%zu), want the device's free "
          "%zu less the headroom %zu = %zu\n", when, free_bytes >> 20, free_bytes, real, headroom, minus(real, headroom));
}

/* headroom HEADROOM N SIZE [GROW_AT]: N allocations of SIZE, each into VRAM only if the
 * device keeps HEADROOM free after it (the device's state measured by the fake before
 * each one), else wholly into T2; never a driver out-of-memory; after each, at least
 * HEADROOM free on the device; data intact; cudaMemGetInfo's free memory is the
 * device's less HEADROOM. Before allocation GROW_AT the balloon grows.
 * With GBTEST_BARRIER (programs allocating at once), placement is not foretold (the
 * other program changes the device meanwhile) and the device keeps at least
 * HEADROOM - SIZE free (the other's latest allocation may be newer than the shim's
 * measurement, at most 1 ms old). */
static int test_headroom(int argc, char **argv)
{
    CHECK(argc >= 5, "usage: headroom HEADROOM N SIZE [GROW_AT]\n");
    size_t headroom = arg_size(argv[2]), n = arg_size(argv[3]), size = arg_size(argv[4]);
    long grow_at = argc > 5 ? atol(argv[5]) : -1;
    CHECK(n <= 64 && size > 0, "at most 64 allocations\n");
    barrier_open(2);
    int alone = !barrier_count;
    size_t keep = alone ? headroom : minus(headroom, size);
    void *p[64];
    int in_t2 = 0;
    size_t ours0 = fakegpu_vram_used(), used0 = fakegpu_device_used();
    printf("device %zu MiB, %zu MiB used by others, headroom %zu MiB: %zu allocations of %zu MiB\n", vram >> 20,
           (used0 - ours0) >> 20, headroom >> 20, n, size >> 20);
    struct shim_stats before = shim_stats();
    barrier_wait("allocating");
    for (size_t i = 0; i < n; i++) {
        if ((long)i == grow_at)
            grow_balloon();
        size_t free_before = device_free();
        cudaError_t rc = cudaMalloc(&p[i], size);
        CHECK(rc == cudaSuccess, "cudaMalloc #%zu of %zu MiB (device free %zu MiB) -> %d\n", i, size >> 20,
              free_before >> 20, rc);
        size_t free_after = device_free();
        unsigned long long t2 = shim_t2_bytes(p[i], size);
        int t2_here = t2 == size;
        printf("#%zu: device free %zu MiB -> %s (%s), %zu MiB free after\n", i, free_before >> 20,
               t2_here ? "T2" : "VRAM", kind(p[i]), free_after >> 20);
        CHECK(t2 == 0 || t2_here, "allocation #%zu has %llu of %zu bytes in T2: split\n", i, t2, size);
        CHECK(t2_here == !!strcmp(kind(p[i]), "vram"), "allocation #%zu is %s but the shim counts %llu T2 bytes\n",
              i, kind(p[i]), t2);
        if (alone) {
            int fits = free_before >= size + headroom;
            CHECK(t2_here == !fits, "allocation #%zu of %zu MiB went to %s with %zu MiB free on the device and a "
                  "headroom of %zu MiB\n", i, size >> 20, t2_here ? "T2" : "VRAM", free_before >> 20, headroom >> 20);
        }
        CHECK(free_after >= keep, "after allocation #%zu (%s) the device has %zu MiB free, less than %zu MiB\n", i,
              t2_here ? "T2" : "VRAM", free_after >> 20, keep >> 20);
        in_t2 += t2_here;
        fill_and_verify(p[i], size, 500 + (uint32_t)i, i & 1);
        verify(p[i], size, 500 + (uint32_t)i);
    }
    barrier_wait("everything allocated");
    CHECK(device_free() >= keep, "with everything allocated the device has %zu MiB free, less than %zu MiB\n",
          device_free() >> 20, keep >> 20);
    for (size_t i = 0; i < n; i++)
        verify(p[i], size, 500 + (uint32_t)i);
    if (alone)
        check_report(headroom, "with everything allocated");
    struct shim_stats after = shim_stats();
    printf("%d of %zu in T2, %llu headroom spills, %llu T2 after a driver out-of-memory; device free %zu MiB\n",
           in_t2, n, after.headroom_spills - before.headroom_spills,
           after.t2_after_vram_oom - before.t2_after_vram_oom, device_free() >> 20);
    CHECK(after.t2_after_vram_oom == before.t2_after_vram_oom && after.oom_returned == before.oom_returned,
          "the driver ran out of memory %llu times: the device was full\n",
          after.t2_after_vram_oom - before.t2_after_vram_oom);
    CHECK(after.headroom_spills - before.headroom_spills == (unsigned long long)in_t2,
          "%llu headroom spills counted (greenboost_shim_stats) for %d allocations in T2\n",
          after.headroom_spills - before.headroom_spills, in_t2);
    for (size_t i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    CHECK(fakegpu_vram_used() == ours0, "VRAM used %zu after freeing everything, was %zu\n", fakegpu_vram_used(),
          ours0);
    if (alone && grow_at < 0) {
        CHECK(fakegpu_device_used() == used0, "device used %zu after freeing everything, was %zu\n",
              fakegpu_device_used(), used0);
        check_report(headroom, "after freeing");
    }
    check_host_released("headroom");
    return 0;
}

/* headroom-report HEADROOM OTHERS: with OTHERS bytes held by another process, every
 * report (cudaMemGetInfo, cuMemGetInfo, NVML v1/v2) has free = the device's free less
 * HEADROOM, and 0 once small allocations (always VRAM) leave less than that. */
static void check_reports(size_t headroom, const struct nvml_device *nvml, const char *when)
{
    CUresult (*getinfo)(size_t *, size_t *) = entry("cuMemGetInfo");
    size_t real = device_free(), want = minus(real, headroom), free_rt, total_rt, free_drv, total_drv;
    OK(cudaMemGetInfo(&free_rt, &total_rt));
    OK(getinfo(&free_drv, &total_drv));
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
    OK(nvml->mem1(nvml->dev, &m1));
    OK(nvml->mem2(nvml->dev, &m2));
    printf("%s: device free %zu MiB; reported free: cudaMemGetInfo %zu cuMemGetInfo %zu nvml %llu nvml_v2 %llu "
           "(want %zu)\n", when, real >> 20, free_rt, free_drv, m1.free, m2.free, want);
    CHECK(total_rt == vram && total_drv == vram && m1.total == vram && m2.total == vram,
          "%s: totals %zu %zu %llu %llu, the device has %zu\n", when, total_rt, total_drv, m1.total, m2.total, vram);
    CHECK(free_rt == want, "%s: cudaMemGetInfo free %zu, want device free %zu less headroom %zu = %zu\n", when,
          free_rt, real, headroom, want);
    CHECK(free_drv == want, "%s: cuMemGetInfo free %zu, want %zu\n", when, free_drv, want);
    CHECK(m1.free == want && m2.free == want, "%s: NVML free %llu / v2 %llu, want %zu\n", when, m1.free, m2.free,
          want);
}

static int test_headroom_report(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: headroom-report HEADROOM OTHERS\n");
    size_t headroom = arg_size(argv[2]), others = arg_size(argv[3]);
    struct nvml_device nvml;
    open_nvml(&nvml);
    size_t free0, total0;
    OK(cudaMemGetInfo(&free0, &total0));
    CHECK(fakegpu_device_used() - fakegpu_vram_used() == others, "the fake shows %zu bytes used by others, the "
          "balloon holds %zu\n", fakegpu_device_used() - fakegpu_vram_used(), others);
    CHECK(free0 == minus(vram - others - fakegpu_vram_used(), headroom), "cudaMemGetInfo free %zu with %zu held by "
          "another process: want %zu - %zu - %zu (ours) - %zu (headroom)\n", free0, others, vram, others,
          fakegpu_vram_used(), headroom);
    check_reports(headroom, &nvml, "at start");
    CHECK(device_free() > headroom + MiB, "the device has %zu free, not more than the headroom %zu\n", device_free(),
          headroom);
    /* Below GREENBOOST_MIN_T2_SIZE allocations go to VRAM, headroom or not: they eat
     * into it, and the report reaches 0. */
    void *small[128];
    int n = 0, zero_seen = 0;
    while (n < 128 && device_free() >= 2 * MiB && zero_seen < 2) {
        OK(cudaMalloc(&small[n], MiB));
        CHECK(!strcmp(kind(small[n]), "vram"), "a 1 MiB allocation went to %s\n", kind(small[n]));
        n++;
        check_reports(headroom, &nvml, "after a small allocation");
        zero_seen += device_free() < headroom;
    }
    CHECK(zero_seen, "never less than the headroom free after %d small allocations (%zu free)\n", n, device_free());
    for (int i = 0; i < n; i++)
        OK(cudaFree(small[i]));
    check_reports(headroom, &nvml, "after freeing");
    size_t free1, total1;
    OK(cudaMemGetInfo(&free1, &total1));
    CHECK(free1 == free0, "free %zu after freeing everything, was %zu\n", free1, free0);
    return 0;
}

/* ---- two devices through the runtime: cudaSetDevice, cudaMalloc (devices.h) ---- */
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);

static int rt_count(void)
{
    int n = 0;
    OK(cudaGetDeviceCount(&n));
    return n;
}
static void rt_select(int d) { OK(cudaSetDevice(d)); }
static int rt_current(void)
{
    int d = -1;
    OK(cudaGetDevice(&d));
    return d;
}
static CUdeviceptr rt_alloc(size_t n)
{
    void *p = NULL;
    OK(cudaMalloc(&p, n));
    return (CUdeviceptr)(uintptr_t)p;
}
static void rt_release(CUdeviceptr p) { OK(cudaFree((void *)(uintptr_t)p)); }
static void rt_mem_info(size_t *free_bytes, size_t *total) { OK(cudaMemGetInfo(free_bytes, total)); }
/* cuDeviceTotalMem (as the runtime's own entry point gives it) and cudaGetDeviceProperties. */
static size_t rt_total_mem(int d)
{
    CUresult (*totalmem)(size_t *, CUdevice) = entry("cuDeviceTotalMem");
    size_t t = 0, prop_total;
    OK(totalmem(&t, d));
    unsigned char prop[CUDA_DEVICE_PROP_SIZE];
    OK(cudaGetDeviceProperties(prop, d));
    memcpy(&prop_total, prop + CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET, sizeof prop_total);
    CHECK(prop_total == t, "device %d: cudaGetDeviceProperties totalGlobalMem %zu, cuDeviceTotalMem %zu\n", d,
          prop_total, t);
    return t;
}

static int test_devices(int argc, char **argv)
{
    static const struct devices_api api = { rt_count, rt_select, rt_current, rt_alloc, rt_release, rt_mem_info,
                                            rt_total_mem };
    return devices_scenario(&api, argc, argv);
}

int gbtests_main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "caps", test_caps }, { "alloc4x", test_alloc4x }, { "placement", test_placement },
        { "async", test_async }, { "threads", test_threads }, { "fork", test_fork },
        { "errors", test_errors }, { "t2cap", test_t2cap }, { "entrypoints", test_entrypoints },
        { "no-t2", test_no_t2 }, { "expandable", test_expandable }, { "lasterror", test_lasterror },
        { "forkexit", test_forkexit },
        { "split", test_split }, { "split-async", test_split_async }, { "t2cache", test_t2cache },
        { "t2cache-pressure", test_t2cache_pressure },
        { "headroom", test_headroom }, { "headroom-report", test_headroom_report },
        { "devices", test_devices },
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    vram = fakegpu_vram_total();
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, NULL);
}
