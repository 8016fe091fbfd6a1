/* Tests of programs that use the CUDA runtime, as PyTorch does: linked against
 * libcudart (12 or 13), driver functions only through cudaGetDriverEntryPoint*.
 * Built, with rt_process_tests.c, rt_split_tests.c and rt_headroom_tests.c, into
 * gbtest-rt13, gbtest-rt12 and libgbframework.so (loaded RTLD_LOCAL by gbtest-fw).
 * Entry: gbtests_main(argc, argv); argv[1] names the test. Here: the shared helpers,
 * capacity, allocation, placement, stream-ordered frees and threads; rt_tests.h lists
 * every test.
 *
 * Sizes come from the environment the runner sets: FAKECUDA_VRAM (device size).
 */
#define _GNU_SOURCE
#include "rt_tests.h"

size_t vram;

void *entry(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &st));
    CHECK(fn && st == CU_GET_PROC_ADDRESS_SUCCESS, "no driver entry point %s\n", name);
    return fn;
}

const char *kind(void *p) { return fakegpu_ptr_kind((CUdeviceptr)(uintptr_t)p); }

/* Fills with the fake GPU, checks with the fake GPU and with a copy to the host. */
void fill_and_verify(void *p, size_t n, uint32_t seed, int by_memcpy)
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

void verify(void *p, size_t n, uint32_t seed)
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
void check_host_released(const char *what)
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

void open_nvml(struct nvml_device *out)
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

int test_caps(int argc, char **argv)
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
int test_alloc4x(int argc, char **argv)
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
int test_placement(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t budget = env_size("GREENBOOST_VRAM_BUDGET", vram);
    size_t reserve = env_size("GREENBOOST_VRAM_RESERVE", 0);
    size_t min_t2 = env_size("GREENBOOST_MIN_T2_SIZE", 2 * MiB);
    size_t big_size = budget / 4;
    /* While the program loads, allocations larger than a pool's chunk leave the reserve
     * free twice over, for the chunks that follow (shim/src/rules/placement.rs, CHUNK_MAX). */
    size_t kept = big_size > CHUNK_MAX ? 2 * reserve : reserve;
    size_t limit = budget > kept ? budget - kept : 0; /* what large allocations may take of VRAM */
    /* Small allocations stay in VRAM even past the budget. */
    void *small[64];
    size_t nsmall = 0, used = 0;
    void *big[64];
    size_t nbig = 0;
    /* Fill the budget with budget/4 chunks: the ones that fit land in VRAM. */
    for (; nbig < 6; nbig++) {
        OK(cudaMalloc(&big[nbig], big_size));
        fill_and_verify(big[nbig], big_size, 7 + (uint32_t)nbig, 0);
    }
    int vram_count = 0;
    for (size_t i = 0; i < nbig; i++)
        vram_count += !strcmp(kind(big[i]), "vram");
    printf("budget %zu MiB, reserve %zu MiB: %d of %zu quarter-budget allocations in VRAM, VRAM used %zu MiB\n",
           budget >> 20, reserve >> 20, vram_count, nbig, fakegpu_vram_used() >> 20);
    CHECK(fakegpu_vram_used() <= limit, "VRAM use %zu exceeds budget %zu minus %zu kept (reserve %zu)\n",
          fakegpu_vram_used(), budget, kept, reserve);
    CHECK((size_t)vram_count == limit / big_size, "%d quarter-budget allocations in VRAM; %zu fit "
          "under budget minus %zu MiB kept\n", vram_count, limit / big_size, kept >> 20);
    /* Chunks after them take what the large ones had to leave, up to the reserve. */
    void *chunk[8];
    size_t nchunk = 0, chunk_size = CHUNK_MAX < budget / 8 ? CHUNK_MAX : budget / 8;
    size_t chunk_room = budget - reserve - (size_t)vram_count * big_size;
    size_t want_chunks = big_size > CHUNK_MAX && chunk_size >= min_t2 ? chunk_room / chunk_size + 1 : 0;
    for (; nchunk < want_chunks && nchunk < 8; nchunk++) {
        OK(cudaMalloc(&chunk[nchunk], chunk_size));
        fill_and_verify(chunk[nchunk], chunk_size, 50 + (uint32_t)nchunk, 0);
        int in_vram = !strcmp(kind(chunk[nchunk]), "vram");
        CHECK(in_vram == (nchunk < chunk_room / chunk_size), "chunk %zu of %zu MiB in %s; %zu fit beside the "
              "large allocations under budget minus reserve\n", nchunk, chunk_size >> 20, kind(chunk[nchunk]),
              chunk_room / chunk_size);
    }
    if (nchunk)
        printf("%zu chunks of %zu MiB after them: %zu in VRAM\n", nchunk, chunk_size >> 20, chunk_room / chunk_size);
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
        verify(big[i], big_size, 7 + (uint32_t)i);
    for (size_t i = 0; i < nchunk; i++) {
        verify(chunk[i], chunk_size, 50 + (uint32_t)i);
        OK(cudaFree(chunk[i]));
    }
    for (size_t i = 0; i < nsmall; i++)
        OK(cudaFree(small[i]));
    for (size_t i = 0; i < nbig; i++)
        OK(cudaFree(big[i]));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after freeing everything\n", fakegpu_vram_used());
    return 0;
}

/* ---- stream-ordered alloc/free: memory stays until the stream reaches the free ---- */
int test_async(int argc, char **argv)
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

int test_threads(int argc, char **argv)
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

int gbtests_main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "caps", test_caps }, { "alloc4x", test_alloc4x }, { "placement", test_placement },
        { "async", test_async }, { "threads", test_threads }, { "fork", test_fork },
        { "errors", test_errors }, { "t2cap", test_t2cap }, { "entrypoints", test_entrypoints },
        { "no-t2", test_no_t2 }, { "expandable", test_expandable }, { "lasterror", test_lasterror },
        { "forkexit", test_forkexit },
        { "split", test_split }, { "split-async", test_split_async }, { "split-pool", test_split_pool }, { "t2cache", test_t2cache },
        { "t2cache-pressure", test_t2cache_pressure },
        { "headroom", test_headroom }, { "headroom-report", test_headroom_report },
        { "devices", test_devices },
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    vram = fakegpu_vram_total();
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, NULL);
}
