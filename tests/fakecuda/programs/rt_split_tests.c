/* Runtime tests (see rt_tests.c): split allocations (a VRAM head and a T2 tail in one
 * range) and the T2 cache, also under the module's memory pressure. */
#define _GNU_SOURCE
#include "rt_tests.h"

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
int test_split(int argc, char **argv)
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

/* split-pool SIZE RESERVE: llama.cpp's order of allocations under a budget with a
 * reserve (GREENBOOST_VRAM_RESERVE=RESERVE): the weights in one cudaMalloc of SIZE, split
 * with a head that leaves the reserve; then its KV cache and compute buffer, made before
 * it computes, which take the reserve when they fit it whole; one that does not fit
 * what is left of it goes to T2 and leaves that room to the next. */
int test_split_pool(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: split-pool SIZE RESERVE\n");
    size_t n = arg_size(argv[2]), reserve = arg_size(argv[3]);
    size_t vram0 = fakegpu_vram_used();
    void *weights, *kv, *compute, *too_large;
    OK(cudaMalloc(&weights, n));
    size_t head = fakegpu_vram_used() - vram0;
    CHECK(!strcmp(kind(weights), "vmm-device") && !strcmp(kind((char *)weights + n - 1), "vmm-host"),
          "the weights were not split: %s ... %s\n", kind(weights), kind((char *)weights + n - 1));
    OK(cudaMalloc(&kv, reserve / 2));
    CHECK(!strcmp(kind(kv), "vram"),
          "the KV cache after the pooled weights went to %s, not to the VRAM reserve (%zu MiB of VRAM after a head of "
          "%zu MiB)\n", kind(kv), (size_t)((fakegpu_vram_used() - vram0) / MiB), (size_t)(head / MiB));
    OK(cudaMalloc(&too_large, reserve));
    CHECK(!strcmp(kind(too_large), "hostreg"), "a buffer larger than the reserve left went to %s, not T2\n",
          kind(too_large));
    OK(cudaMalloc(&compute, reserve / 4));
    CHECK(!strcmp(kind(compute), "vram"), "the compute buffer went to %s, not to what the reserve has left\n",
          kind(compute));
    CHECK(fakegpu_vram_used() - vram0 == head + reserve / 2 + reserve / 4, "VRAM used %zu, want %zu\n",
          fakegpu_vram_used() - vram0, head + reserve / 2 + reserve / 4);
    fill_and_verify(kv, reserve / 2, 77, 0);
    fill_and_verify(compute, reserve / 4, 78, 1);
    OK(cudaFree(compute));
    OK(cudaFree(too_large));
    OK(cudaFree(kv));
    OK(cudaFree(weights));
    printf("weights split (%zu MiB head), KV cache and compute buffer in the reserve, the larger buffer in T2\n",
           (size_t)(head / MiB));
    return 0;
}

/* split-async SIZE: cudaMallocAsync of a split allocation, cudaFreeAsync while the
 * stream is held: the range stays mapped and intact for the queued kernels, and is
 * given back once the stream passes the free. */
int test_split_async(int argc, char **argv)
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

int test_t2cache_pressure(int argc, char **argv)
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

int test_t2cache(int argc, char **argv)
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
