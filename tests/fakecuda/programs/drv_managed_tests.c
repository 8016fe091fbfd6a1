/* gbdriver (see drv_tests.c): the fake's own managed memory, a self-test without the
 * shim; with FAKECUDA_MANAGED_KEEPS_VRAM, the VRAM its pages leave (managed-kept). */
#define _GNU_SOURCE
#include "drv_tests.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the fake's managed memory (fake self-test, no shim): data at the host address
 * wherever it is resident, residency taking VRAM, prefetch a stream-ordered hint, and
 * the errors; with FAKECUDA_DEVICES=2 also a move between the devices ---- */
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAdvise(CUdeviceptr, size_t, int, CUdevice);
CUresult cuMemAdvise_v2(CUdeviceptr, size_t, int, CUmemLocation);
CUresult cuMemPrefetchAsync(CUdeviceptr, size_t, CUdevice, CUstream);
CUresult cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
CUresult cuMemRangeGetAttribute(void *, size_t, int, CUdeviceptr, size_t);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr);
CUresult cuPointerGetAttribute(void *, int, CUdeviceptr);
CUresult cuCtxGetStreamPriorityRange(int *, int *);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamGetPriority(CUstream, int *);

int test_managed_fake_model(int argc, char **argv)
{
    (void)argc; (void)argv;
#define ATTR(attribute, ptr, len, want)                                                                \
    do {                                                                                               \
        int got_ = 99;                                                                                 \
        OK(cuMemRangeGetAttribute(&got_, 4, CU_MEM_RANGE_ATTRIBUTE_##attribute, ptr, len));            \
        CHECK(got_ == (want), "range attribute " #attribute " of " #ptr ", " #len ": %d, want %d\n", got_, \
              (int)(want));                                                                            \
    } while (0)
#define MOVED(dev, host)                                                                               \
    do {                                                                                               \
        unsigned long long to_dev_ = 0, to_host_ = 0;                                                  \
        fakegpu_managed_moved(&to_dev_, &to_host_);                                                    \
        CHECK(to_dev_ == (dev) && to_host_ == (host), "moved %llu MiB to devices, %llu MiB to the host; want %llu, %llu\n", \
              to_dev_ >> 20, to_host_ >> 20, (unsigned long long)(dev) >> 20, (unsigned long long)(host) >> 20); \
    } while (0)
    const size_t page = 2 * MiB, n = 17 * MiB, held = 9 * page; /* the last page half used */
    const CUmemLocation host = { CU_MEM_LOCATION_TYPE_HOST, 0 }, dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    int v = -99, ndev = 1;
    OK(cuDeviceGetCount(&ndev));
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
    CHECK(v == 1, "managed memory attribute %d\n", v);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0));
    CHECK(v == 1, "concurrent managed access attribute %d\n", v);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0));
    CHECK(v == 0, "pageable memory access attribute %d (the fake has no HMM)\n", v);
    setenv("FAKECUDA_NO_CONCURRENT_MANAGED", "1", 1);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0));
    CHECK(v == 0, "concurrent managed access %d under FAKECUDA_NO_CONCURRENT_MANAGED=1\n", v);
    unsetenv("FAKECUDA_NO_CONCURRENT_MANAGED");

    /* Stream priorities: the H200's range, either pointer NULL, clamped. */
    int least = 99, greatest = 99, prio = 99;
    OK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK(least == 0 && greatest == -5, "priority range %d..%d, want 0..-5\n", least, greatest);
    OK(cuCtxGetStreamPriorityRange(NULL, &greatest));
    OK(cuCtxGetStreamPriorityRange(&least, NULL));
    CUstream s, low;
    OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100));
    OK(cuStreamCreateWithPriority(&low, 0, 7));
    OK(cuStreamGetPriority(s, &prio));
    CHECK(prio == -5, "priority -100 became %d, want -5\n", prio);
    OK(cuStreamGetPriority(low, &prio));
    CHECK(prio == 0, "priority 7 became %d, want 0\n", prio);

    /* Allocation: flags GLOBAL or HOST only, 2 MiB aligned, all on the host at first. */
    CUdeviceptr p = 0, q = 0, base = 0;
    size_t size = 0, free0, free1, total, used0 = fakegpu_vram_used();
    CHECK(cuMemAllocManaged(&p, n, 0) == CUDA_ERROR_INVALID_VALUE, "flags 0 accepted\n");
    CHECK(cuMemAllocManaged(&p, n, 3) == CUDA_ERROR_INVALID_VALUE, "flags 3 accepted\n");
    CHECK(cuMemAllocManaged(&p, n, 4) == CUDA_ERROR_INVALID_VALUE, "flags 4 (ATTACH_SINGLE) accepted\n");
    CHECK(cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE, "0 bytes accepted\n");
    CHECK(cuMemAllocManaged(NULL, n, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE, "NULL accepted\n");
    OK(cuMemGetInfo_v2(&free0, &total));
    OK(cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL));
    CHECK(p % page == 0, "managed memory at %#llx, not 2 MiB aligned\n", p);
    CHECK(!strcmp(fakegpu_ptr_kind(p + n - 1), "managed"), "kind %s\n", fakegpu_ptr_kind(p + n - 1));
    CHECK(fakegpu_managed_live() == 1 && fakegpu_managed_where(p) == -1 && fakegpu_managed_where(p + n - 1) == -1 &&
          fakegpu_managed_where(p + n) == -2, "live %d, where %d/%d/%d\n", fakegpu_managed_live(),
          fakegpu_managed_where(p), fakegpu_managed_where(p + n - 1), fakegpu_managed_where(p + n));
    CHECK(fakegpu_managed_on_host() == held && fakegpu_managed_on_device(0) == 0 && fakegpu_vram_used() == used0,
          "on the host %zu MiB, on device 0 %zu MiB, VRAM %zu MiB\n", fakegpu_managed_on_host() >> 20,
          fakegpu_managed_on_device(0) >> 20, fakegpu_vram_used() >> 20);
    OK(cuMemGetAddressRange_v2(&base, &size, p + 5 * MiB));
    CHECK(base == p && size == n, "address range %#llx+%zu, want %#llx+%zu\n", base, size, p, n);
    OK(cuMemAlloc_v2(&q, page));
    OK(cuMemGetAddressRange_v2(&base, &size, q + 4096));
    CHECK(base == q && size == page, "address range of VRAM %#llx+%zu, want %#llx+%zu\n", base, size, q, page);
    CHECK(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)&v) == CUDA_ERROR_NOT_FOUND, "stack\n");
    int managed = -1;
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p + 3));
    CHECK(managed == 1, "IS_MANAGED of managed memory %d\n", managed);
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, q));
    CHECK(managed == 0, "IS_MANAGED of VRAM %d\n", managed);
    /* The CPU writes, the device reads the same bytes at the same address. */
    fakegpu_pattern_fill((void *)(uintptr_t)p, n, 41);
    unsigned long long bad = ~0ULL;
    OK(fakegpu_launch_verify(p, n, 41, NULL, &bad));
    CHECK(bad == 0, "host-resident managed memory: the device saw %llu wrong words\n", bad);

    /* Advice is recorded per page and moves nothing. */
    ATTR(PREFERRED_LOCATION, p, n, CU_DEVICE_INVALID);
    ATTR(LAST_PREFETCH_LOCATION, p, n, CU_DEVICE_INVALID);
    OK(cuMemAdvise(p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
    ATTR(PREFERRED_LOCATION, p, n, 0);
    OK(cuMemAdvise_v2(p, page, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    ATTR(PREFERRED_LOCATION, p, page, CU_DEVICE_CPU);
    ATTR(PREFERRED_LOCATION_TYPE, p, 1, CU_MEM_LOCATION_TYPE_HOST);
    ATTR(PREFERRED_LOCATION, p, n, CU_DEVICE_INVALID); /* mixed */
    ATTR(PREFERRED_LOCATION, p + page, n - page, 0);
    OK(cuMemAdvise(p, n, CU_MEM_ADVISE_SET_ACCESSED_BY, 0));
    OK(cuMemAdvise(p, n, CU_MEM_ADVISE_SET_ACCESSED_BY, CU_DEVICE_CPU));
    int by[4];
    OK(cuMemRangeGetAttribute(by, sizeof by, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, p, n));
    CHECK(by[0] == 0 && by[1] == CU_DEVICE_CPU && by[2] == CU_DEVICE_INVALID && by[3] == CU_DEVICE_INVALID,
          "accessed by %d %d %d %d\n", by[0], by[1], by[2], by[3]);
    OK(cuMemAdvise(p, n, CU_MEM_ADVISE_SET_READ_MOSTLY, 12345)); /* the device is ignored */
    ATTR(READ_MOSTLY, p, n, 1);
    OK(cuMemAdvise(p, page, CU_MEM_ADVISE_UNSET_READ_MOSTLY, 0));
    ATTR(READ_MOSTLY, p, n, 0);
    CHECK(fakegpu_managed_on_device(0) == 0 && fakegpu_vram_used() == used0 + page, "advice moved memory\n");
    CHECK(cuMemAdvise(p, n + 1, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0) == CUDA_ERROR_INVALID_VALUE, "past the end\n");
    CHECK(cuMemAdvise(q, page, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0) == CUDA_ERROR_INVALID_VALUE, "VRAM advised\n");
    CHECK(cuMemAdvise(p, 0, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0) == CUDA_ERROR_INVALID_VALUE, "0 bytes\n");
    CHECK(cuMemAdvise(p, n, 9, 0) == CUDA_ERROR_INVALID_VALUE, "advice 9 accepted\n");
    CHECK(cuMemAdvise(p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 7) == CUDA_ERROR_INVALID_DEVICE, "device 7\n");
    CHECK(cuMemAdvise_v2(p, n, CU_MEM_ADVISE_SET_ACCESSED_BY, (CUmemLocation){ 9, 0 }) == CUDA_ERROR_INVALID_VALUE,
          "location type 9 accepted\n");

    /* A prefetch to the device is stream-ordered; then its pages take VRAM. */
    MOVED(0, 0);
    fakegpu_stream_hold(s);
    OK(cuMemPrefetchAsync(p, n, 0, s));
    ATTR(LAST_PREFETCH_LOCATION, p, n, 0); /* what was asked for, run or not */
    CHECK(fakegpu_managed_on_device(0) == 0, "the prefetch moved pages before its stream reached it\n");
    fakegpu_stream_release(s);
    OK(cuStreamSynchronize(s));
    OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(fakegpu_managed_on_device(0) == held && fakegpu_managed_on_host() == 0 && fakegpu_managed_where(p) == 0 &&
          fakegpu_managed_where(p + n - 1) == 0, "after the prefetch: %zu MiB on device 0, %zu MiB on the host\n",
          fakegpu_managed_on_device(0) >> 20, fakegpu_managed_on_host() >> 20);
    CHECK(free1 == free0 - page - held && fakegpu_vram_used() == used0 + page + held &&
          fakegpu_device_used() == fakegpu_vram_used(), "free %zu MiB (was %zu), VRAM %zu MiB, device %zu MiB\n",
          free1 >> 20, free0 >> 20, fakegpu_vram_used() >> 20, fakegpu_device_used() >> 20);
    MOVED(held, 0);
    /* The data stays at the host address: both sides see each other's writes. */
    OK(fakegpu_launch_verify(p, n, 41, NULL, &bad));
    CHECK(bad == 0 && fakegpu_pattern_check((void *)(uintptr_t)p, n, 41) == 0, "device-resident data changed\n");
    OK(fakegpu_launch_fill(p, n, 42, s));
    OK(cuStreamSynchronize(s));
    CHECK(fakegpu_pattern_check((void *)(uintptr_t)p, n, 42) == 0, "the CPU does not see what the device wrote\n");
    OK(cuMemPrefetchAsync_v2(p, n, dev0, 0, NULL)); /* already there: nothing moves */
    MOVED(held, 0);
    unsigned long long between = 0;
    if (ndev > 1) {
        OK(cuMemPrefetchAsync_v2(p + page + 1, page, (CUmemLocation){ CU_MEM_LOCATION_TYPE_DEVICE, 1 }, 0, s));
        OK(cuStreamSynchronize(s));
        between = 2 * page; /* a range that straddles two pages moves both */
        CHECK(fakegpu_managed_where(p) == 0 && fakegpu_managed_where(p + page) == 1 &&
              fakegpu_managed_where(p + 3 * page - 1) == 1 && fakegpu_managed_where(p + 3 * page) == 0,
              "device 1 prefetch: pages at %d %d %d %d\n", fakegpu_managed_where(p), fakegpu_managed_where(p + page),
              fakegpu_managed_where(p + 3 * page - 1), fakegpu_managed_where(p + 3 * page));
        CHECK(fakegpu_managed_on_device(1) == between && fakegpu_vram_used_on(1) == between &&
              fakegpu_managed_on_device(0) == held - between, "device 1 holds %zu MiB, VRAM %zu MiB\n",
              fakegpu_managed_on_device(1) >> 20, fakegpu_vram_used_on(1) >> 20);
        MOVED(held + between, 0);
    }
    /* Back to the host: the VRAM comes back. */
    OK(cuMemPrefetchAsync_v2(p, n, host, 0, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(fakegpu_managed_on_device(0) == 0 && fakegpu_managed_on_device(1) == 0 && fakegpu_managed_on_host() == held &&
          fakegpu_managed_where(p + n - 1) == -1 && fakegpu_vram_used_on(1) == 0, "pages left on a device\n");
    CHECK(free1 == free0 - page && fakegpu_vram_used() == used0 + page, "free %zu MiB after the prefetch back\n",
          free1 >> 20);
    MOVED(held + between, held);
    ATTR(LAST_PREFETCH_LOCATION, p, n, CU_DEVICE_CPU);
    ATTR(LAST_PREFETCH_LOCATION_TYPE, p, n, CU_MEM_LOCATION_TYPE_HOST);
    CHECK(cuMemPrefetchAsync_v2(p, n, dev0, 1, s) == CUDA_ERROR_INVALID_VALUE, "prefetch flags 1 accepted\n");
    CHECK(cuMemPrefetchAsync(p, n + page, 0, s) == CUDA_ERROR_INVALID_VALUE, "prefetch past the end\n");
    CHECK(cuMemPrefetchAsync(q, page, 0, s) == CUDA_ERROR_INVALID_VALUE, "prefetch of VRAM\n");
    CHECK(cuMemPrefetchAsync(p, n, 5, s) == CUDA_ERROR_INVALID_DEVICE, "prefetch to device 5\n");
    CHECK(cuMemPrefetchAsync(p, n, 0, (CUstream)&v) == CUDA_ERROR_INVALID_HANDLE, "prefetch on no stream\n");
    CHECK(cuMemRangeGetAttribute(&v, 8, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, p, n) == CUDA_ERROR_INVALID_VALUE,
          "range attribute of 8 bytes\n");
    CHECK(cuMemRangeGetAttribute(&v, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, q, page) == CUDA_ERROR_INVALID_VALUE,
          "range attribute of VRAM\n");
    CHECK(cuMemRangeGetAttribute(&v, 4, 99, p, n) == CUDA_ERROR_INVALID_VALUE, "range attribute 99\n");

    /* A prefetch past free VRAM is a hint: the pages that fit move, the rest stay on the
     * host, and the VRAM they took is gone for cuMemAlloc. */
    CUdeviceptr big, none;
    size_t bign = 2 * vram, free2;
    OK(cuMemAllocManaged(&big, bign, CU_MEM_ATTACH_HOST));
    fakegpu_pattern_fill((void *)(uintptr_t)big, bign, 43);
    OK(cuMemGetInfo_v2(&free1, &total));
    OK(cuMemPrefetchAsync(big, bign, 0, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemGetInfo_v2(&free2, &total));
    size_t fit = free1 / page * page;
    CHECK(fakegpu_managed_on_device(0) == fit && fakegpu_managed_where(big) == 0 &&
          fakegpu_managed_where(big + bign - 1) == -1, "%zu MiB of %zu moved, want the %zu MiB that fit\n",
          fakegpu_managed_on_device(0) >> 20, bign >> 20, fit >> 20);
    CHECK(free2 == free1 - fit && free2 < page, "free %zu MiB after filling the device, was %zu\n", free2 >> 20,
          free1 >> 20);
    CHECK(cuMemAlloc_v2(&none, page) == CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc found VRAM managed pages hold\n");
    OK(fakegpu_launch_verify(big, bign, 43, s, &bad));
    OK(cuStreamSynchronize(s));
    CHECK(bad == 0, "partly device-resident managed memory: %llu wrong words\n", bad);
    CHECK(cuMemFree_v2(big + page) == CUDA_ERROR_INVALID_VALUE, "interior cuMemFree of managed memory\n");
    OK(cuMemFree_v2(big));
    CHECK(cuMemFree_v2(big) == CUDA_ERROR_INVALID_VALUE, "second cuMemFree of managed memory\n");
    OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(fakegpu_managed_on_device(0) == 0 && fakegpu_managed_live() == 1 && free1 == free0 - page,
          "after the free: %zu MiB on device 0, %d live, free %zu MiB\n", fakegpu_managed_on_device(0) >> 20,
          fakegpu_managed_live(), free1 >> 20);

    /* cuGetProcAddress hands out each name; the _v2 calls from 12020 on. */
    static const struct { const char *name; int version, flags; const char *want; } procs[] = {
        { "cuMemAllocManaged", 13000, 0, "cuMemAllocManaged" },
        { "cuMemAdvise", 12010, 0, "cuMemAdvise" },
        { "cuMemAdvise", 12020, 0, "cuMemAdvise_v2" },
        { "cuMemPrefetchAsync", 12000, 0, "cuMemPrefetchAsync" },
        { "cuMemPrefetchAsync", 13000, 0, "cuMemPrefetchAsync_v2" },
        { "cuMemPrefetchAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemPrefetchAsync_v2_ptsz" },
        { "cuMemRangeGetAttribute", 12000, 0, "cuMemRangeGetAttribute" },
        { "cuMemGetAddressRange", 12000, 0, "cuMemGetAddressRange_v2" },
        { "cuPointerGetAttribute", 12000, 0, "cuPointerGetAttribute" },
        { "cuCtxGetStreamPriorityRange", 12000, 0, "cuCtxGetStreamPriorityRange" },
        { "cuStreamGetPriority", 12000, 0, "cuStreamGetPriority" },
    };
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib, "libcuda.so.1 not loaded\n");
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(procs[i].name, &fn, procs[i].version, procs[i].flags, &st));
        CHECK(fn && fn == dlsym(lib, procs[i].want), "cuGetProcAddress(%s, %d, flags %d) is not %s\n", procs[i].name,
              procs[i].version, procs[i].flags, procs[i].want);
    }

    OK(cuMemFree_v2(p));
    OK(cuMemFree_v2(q));
    OK(cuMemGetInfo_v2(&free1, &total));
    CHECK(fakegpu_managed_live() == 0 && fakegpu_managed_on_host() == 0 && fakegpu_vram_used() == used0 &&
          free1 == free0, "after freeing everything: %d live, %zu MiB on the host, VRAM %zu MiB, free %zu of %zu MiB\n",
          fakegpu_managed_live(), fakegpu_managed_on_host() >> 20, fakegpu_vram_used() >> 20, free1 >> 20, free0 >> 20);
    OK(cuStreamDestroy_v2(s));
    OK(cuStreamDestroy_v2(low));
#undef ATTR
#undef MOVED
    return 0;
}

/* ---- FAKECUDA_MANAGED_KEEPS_VRAM (fake self-test, no shim; a share file and
 * GBTEST_BALLOON_BIN): VRAM managed pages leave stays taken from the device, pages moving
 * back take the chunks they left, a move into VRAM of other pages takes fresh VRAM, and an
 * allocation that finds too little free VRAM takes the kept VRAM first, in this process or
 * in another (gbballoon) ---- */

/* Free VRAM as cuMemGetInfo reports it, checked against the device's VRAM in use. */
static size_t kept_free(void)
{
    size_t free_bytes = 0, total = 0;
    OK(cuMemGetInfo_v2(&free_bytes, &total));
    CHECK(free_bytes == total - fakegpu_device_used(), "cuMemGetInfo says %zu MiB free, the device %zu MiB\n",
          free_bytes >> 20, (total - fakegpu_device_used()) >> 20);
    return free_bytes;
}

/* Runs gbballoon holding `hold` bytes; returns its pid and its output in *out once ready. */
int test_managed_kept(int argc, char **argv)
{
    (void)argc; (void)argv;
    const size_t page = 2 * MiB, n = 4 * page;
    const CUmemLocation host = { CU_MEM_LOCATION_TYPE_HOST, 0 }, dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    CHECK(getenv("FAKECUDA_DEVICE_SHARE"), "needs FAKECUDA_DEVICE_SHARE\n");
    primary_context_current();
    size_t free0 = kept_free();
    CHECK(fakegpu_vram_kept() == 0, "%zu MiB kept at the start\n", fakegpu_vram_kept() >> 20);
    CUdeviceptr a, b, small, big;
    OK(cuMemAllocManaged(&a, n, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&b, n, CU_MEM_ATTACH_GLOBAL));
    OK(fakegpu_launch_fill(a, n, 51, NULL));
#define KEPT_STEP(what, want_free, want_kept)                                                                    \
    do {                                                                                                         \
        size_t f_ = kept_free(), k_ = fakegpu_vram_kept();                                                       \
        CHECK(f_ == (want_free) && k_ == (want_kept), "%s: %zu MiB free, %zu MiB kept; want %zu and %zu\n", what, \
              f_ >> 20, k_ >> 20, (size_t)(want_free) >> 20, (size_t)(want_kept) >> 20);                         \
    } while (0)
    OK(cuMemPrefetchAsync_v2(a, n, dev0, 0, NULL));
    KEPT_STEP("prefetched to the device", free0 - n, 0);
    OK(cuMemPrefetchAsync_v2(a, n, host, 0, NULL));
    KEPT_STEP("back on the host: the device keeps its VRAM", free0 - n, n);
    OK(cuMemPrefetchAsync_v2(a, n, dev0, 0, NULL));
    KEPT_STEP("to the device again: the chunks it left", free0 - n, 0);
    OK(cuMemPrefetchAsync_v2(a, n, host, 0, NULL));
    KEPT_STEP("on the host again", free0 - n, n);
    OK(cuMemPrefetchAsync_v2(b, n, dev0, 0, NULL));
    KEPT_STEP("other pages to the device: fresh VRAM", free0 - 2 * n, n);
    OK(cuMemPrefetchAsync_v2(b, n, host, 0, NULL));
    KEPT_STEP("those on the host", free0 - 2 * n, 2 * n);
    /* An allocation that fits what is free takes free VRAM. */
    OK(cuMemAlloc_v2(&small, page));
    KEPT_STEP("a page allocated", free0 - 2 * n - page, 2 * n);
    /* One larger than what is free takes the kept VRAM first, then free VRAM. */
    size_t want = free0 - 2 * n - page + 2 * page;
    OK(cuMemAlloc_v2(&big, want));
    KEPT_STEP("an allocation past free VRAM", free0 - 2 * n - page - (want - 2 * n), 0);
    OK(cuMemFree_v2(big));
    KEPT_STEP("freed", free0 - page, 0);
    /* Another process's allocation past free VRAM takes what this one's pages left. */
    OK(cuMemPrefetchAsync_v2(a, n, dev0, 0, NULL));
    OK(cuMemPrefetchAsync_v2(a, n, host, 0, NULL));
    KEPT_STEP("kept again", free0 - page - n, n);
    FILE *out;
    size_t hold = free0 - page - n + page;
    pid_t other = balloon_spawn(hold, 60, &out);
    KEPT_STEP("another process took the kept VRAM", free0 - page - n - (hold - n), 0);
    kill(other, SIGTERM);
    int status = 0;
    waitpid(other, &status, 0);
    fclose(out);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the balloon failed (status %d)\n", status);
    KEPT_STEP("the other process left", free0 - page, 0);
    /* Freeing the allocation gives back what its pages left that the device still keeps. */
    OK(cuMemPrefetchAsync_v2(a, n, dev0, 0, NULL));
    OK(cuMemPrefetchAsync_v2(a, n, host, 0, NULL));
    KEPT_STEP("kept once more", free0 - page - n, n);
    unsigned long long bad = 0;
    OK(fakegpu_launch_verify(a, n, 51, NULL, &bad));
    CHECK(bad == 0, "managed data changed by its moves: %llu wrong words\n", bad);
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
    OK(cuMemFree_v2(small));
    KEPT_STEP("everything freed", free0, 0);
#undef KEPT_STEP
    return 0;
}
