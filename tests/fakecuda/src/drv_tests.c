/* gbdriver: programs that use the driver API directly, as llama.cpp (linked against
 * libcuda.so.1, VMM pools) and CUDA 12/13 code fetching entry points with
 * cuGetProcAddress do. argv[1] names the test. */
#define _GNU_SOURCE
#include "testutil.h"
#include "devices.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, int);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned);
CUresult cuMemHostUnregister(void *);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned);
CUresult cuImportExternalMemory(CUexternalMemory *, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static size_t vram;

/* Before every test: the device's size, and its primary context made current. */
static void prepare_device(void)
{
    vram = fakegpu_vram_total();
    CUdevice d;
    CUcontext c;
    OK(cuInit(0));
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&c, d));
    OK(cuCtxSetCurrent(c));
}

static void device_check(CUdeviceptr p, size_t n, uint32_t seed, const char *what)
{
    OK(fakegpu_launch_fill(p, n, seed, NULL));
    unsigned long long bad = ~0ULL;
    OK(fakegpu_launch_verify(p, n, seed, NULL, &bad));
    CHECK(bad == 0, "%s: %llu wrong words\n", what, bad);
}

/* ---- llama.cpp's VMM pool: reserve VA, cuMemCreate chunks, map, set access ---- */
static int test_vmm(int argc, char **argv)
{
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    /* "vmm rdma": device properties as PyTorch's expandable segments set them (RDMA, and
     * a POSIX fd handle for IPC: such memory still moves to host NUMA). */
    if (argc > 2 && !strcmp(argv[2], "rdma")) {
        prop.allocFlags.gpuDirectRDMACapable = 1;
        prop.requestedHandleTypes = 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */;
    }
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t pool_max = 8 * vram, chunk = 16 * gran, mapped = 0;
    CUdeviceptr base;
    OK(cuMemAddressReserve(&base, pool_max, 0, 0, 0));
    CUmemGenericAllocationHandle h[256];
    int nh = 0;
    while (mapped < 3 * vram) {
        CUresult rc = cuMemCreate(&h[nh], chunk, &prop, 0);
        CHECK(rc == CUDA_SUCCESS, "cuMemCreate of chunk %d (%zu MiB, pool %zu MiB, VRAM %zu MiB) -> %d\n",
              nh, chunk >> 20, mapped >> 20, vram >> 20, rc);
        OK(cuMemMap(base + mapped, chunk, 0, h[nh], 0));
        CUmemAccessDesc access = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(cuMemSetAccess(base + mapped, chunk, &access, 1));
        mapped += chunk;
        nh++;
    }
    const char *first = fakegpu_ptr_kind(base), *last = fakegpu_ptr_kind(base + mapped - 1);
    printf("pool of %d chunks, %zu MiB: first chunk %s, last %s, VRAM used %zu MiB\n", nh, mapped >> 20,
           first, last, fakegpu_vram_used() >> 20);
    CHECK(!strcmp(last, "vmm-host"), "a pool 3x VRAM ends in %s memory, expected host-NUMA fallback\n", last);
    /* One kernel over the whole pool, across device and host chunks. */
    device_check(base, mapped, 2024, "VMM pool");
    for (int i = 0; i < nh; i++)
        OK(cuMemUnmap(base + (size_t)i * chunk, chunk));
    for (int i = 0; i < nh; i++)
        OK(cuMemRelease(h[i]));
    OK(cuMemAddressFree(base, pool_max));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after the pool was released\n", fakegpu_vram_used());
    return 0;
}

/* ---- NCCL's fabric buffers: cuMemCreate with a fabric handle type stays device memory ---- */
static int test_vmm_shareable(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                 .requestedHandleTypes = 8 /* CU_MEM_HANDLE_TYPE_FABRIC */ };
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t chunk = 16 * gran, made = 0;
    CUmemGenericAllocationHandle h[256];
    int nh = 0;
    CUresult rc = CUDA_SUCCESS;
    while (nh < 256) {
        rc = cuMemCreate(&h[nh], chunk, &prop, 0);
        if (rc != CUDA_SUCCESS)
            break;
        made += chunk;
        nh++;
    }
    printf("%d shareable chunks (%zu MiB) before cuMemCreate answered %d; VRAM used %zu MiB of %zu\n", nh,
           made >> 20, rc, fakegpu_vram_used() >> 20, vram >> 20);
    /* Never moved to host NUMA (their importers map device memory): the device fills, and
     * the driver's own out-of-memory is the answer, as without the shim. */
    CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate of a shareable chunk past VRAM -> %d, want %d\n", rc,
          CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(made == fakegpu_vram_used() && made + chunk > vram, "%zu MiB made, %zu MiB of VRAM used: not all on the device\n",
          made >> 20, fakegpu_vram_used() >> 20);
    for (int i = 0; i < nh; i++)
        OK(cuMemRelease(h[i]));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after release\n", fakegpu_vram_used());
    return 0;
}

/* ---- cuGetProcAddress in both forms returns the hooked functions ---- */
static int test_gpa(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: gpa EXPECTED_TOTAL\n");
    unsigned long long expect = arg_size(argv[2]);
    for (int form = 0; form < 2; form++) {
        for (int vi = 0; vi < 2; vi++) {
            int version = vi ? 13000 : 12000;
            for (int flags = 0; flags <= 2; flags += 2) {
                void *fa = NULL, *ff = NULL, *fi = NULL, *ft = NULL;
                CUdriverProcAddressQueryResult st = 99;
                const char *f = form ? "cuGetProcAddress_v2" : "cuGetProcAddress";
                if (form) {
                    OK(cuGetProcAddress_v2("cuMemAlloc", &fa, version, flags, &st));
                    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS, "status %d\n", st);
                    OK(cuGetProcAddress_v2("cuMemFree", &ff, version, flags, &st));
                    OK(cuGetProcAddress_v2("cuMemGetInfo", &fi, version, flags, &st));
                    OK(cuGetProcAddress_v2("cuDeviceTotalMem", &ft, version, flags, &st));
                } else {
                    OK(cuGetProcAddress("cuMemAlloc", &fa, version, flags));
                    OK(cuGetProcAddress("cuMemFree", &ff, version, flags));
                    OK(cuGetProcAddress("cuMemGetInfo", &fi, version, flags));
                    OK(cuGetProcAddress("cuDeviceTotalMem", &ft, version, flags));
                }
                CUdeviceptr d;
                CUresult rc = ((CUresult(*)(CUdeviceptr *, size_t))fa)(&d, 2 * vram);
                CHECK(rc == CUDA_SUCCESS, "%s(cuMemAlloc, %d, flags %d): 2x VRAM allocation -> %d "
                      "(the unhooked driver function)\n", f, version, flags, rc);
                device_check(d, 2 * vram, 11, "T2 allocation via cuGetProcAddress");
                OK(((CUresult(*)(CUdeviceptr))ff)(d));
                size_t fr, tot, tdev;
                OK(((CUresult(*)(size_t *, size_t *))fi)(&fr, &tot));
                OK(((CUresult(*)(size_t *, CUdevice))ft)(&tdev, 0));
                CHECK(tot == expect && tdev == expect, "%s(%d, flags %d): cuMemGetInfo total %zu, "
                      "cuDeviceTotalMem %zu, expected %llu\n", f, version, flags, tot, tdev, expect);
            }
        }
    }
    /* The per-thread-default-stream flag selects the _ptsz variant underneath. */
    void *fn;
    CUdriverProcAddressQueryResult st;
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CUdeviceptr small;
    OK(((CUresult(*)(CUdeviceptr *, size_t, CUstream))fn)(&small, 4096, NULL));
    OK(cuGetProcAddress("cuMemFreeAsync", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    OK(((CUresult(*)(CUdeviceptr, CUstream))fn)(small, NULL));
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    OK(((CUresult(*)(CUdeviceptr *, size_t, CUstream))fn)(&small, 4096, NULL));
    OK(cuMemFreeAsync(small, NULL));
    OK(cuCtxSynchronize());
    /* Old versions get the old entry points; too-old versions and unknown names fail. */
    OK(cuGetProcAddress("cuMemAlloc", &fn, 3000, 0));
    CUresult rc = ((CUresult(*)(unsigned *, unsigned))fn)((unsigned *)&small, 4096);
    CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuMemAlloc for version 3000 is not the v1 entry point (rc %d)\n", rc);
    fn = (void *)1;
    rc = cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &st);
    CHECK(rc == CUDA_ERROR_NOT_FOUND && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == NULL,
          "cuMemAllocAsync at 11000: rc %d status %d fn %p\n", rc, st, fn);
    rc = cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, &st);
    CHECK(rc == CUDA_ERROR_NOT_FOUND && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "unknown symbol: rc %d status %d\n", rc, st);
    /* cuGetProcAddress fetched through itself keeps routing to the hooks. */
    void *gpa;
    OK(cuGetProcAddress_v2("cuGetProcAddress", &gpa, 13000, 0, &st));
    OK(((CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))gpa)(
        "cuMemAlloc", &fn, 13000, 0, &st));
    CUdeviceptr d;
    rc = ((CUresult(*)(CUdeviceptr *, size_t))fn)(&d, 2 * vram);
    CHECK(rc == CUDA_SUCCESS, "cuMemAlloc via cuGetProcAddress via cuGetProcAddress -> %d\n", rc);
    OK(cuMemFree_v2(d));
    /* And the exported symbols a linked program calls. */
    OK(cuMemAlloc_v2(&d, 2 * vram));
    device_check(d, 2 * vram, 12, "T2 allocation via cuMemAlloc_v2");
    OK(cuMemFree_v2(d));
    size_t t;
    OK(cuDeviceTotalMem_v2(&t, 0));
    CHECK(t == expect, "cuDeviceTotalMem_v2 %zu, expected %llu\n", t, expect);
    return 0;
}

/* ---- driver stream-ordered allocation ---- */
static int test_driver_async(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool;
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    for (int use_pool = 0; use_pool < 2; use_pool++) {
        size_t n = 2 * vram;
        CUdeviceptr a;
        CUresult rc = use_pool ? cuMemAllocFromPoolAsync(&a, n, pool, s) : cuMemAllocAsync(&a, n, s);
        CHECK(rc == CUDA_SUCCESS, "%s of 2x VRAM -> %d\n", use_pool ? "cuMemAllocFromPoolAsync" : "cuMemAllocAsync", rc);
        const char *where = fakegpu_ptr_kind(a);
        unsigned long long bad = ~0ULL;
        fakegpu_stream_hold(s);
        OK(fakegpu_launch_fill(a, n, 3, s));
        OK(fakegpu_launch_verify(a, n, 3, s, &bad));
        OK(cuMemFreeAsync(a, s));
        CHECK(strcmp(fakegpu_ptr_kind(a), "none"), "%s memory released before the stream reached cuMemFreeAsync\n", where);
        CUdeviceptr b;
        OK(cuMemAlloc_v2(&b, n));
        CHECK(b + n <= a || a + n <= b, "pending-free memory %#llx reused by cuMemAlloc %#llx\n", a, b);
        fakegpu_stream_release(s);
        OK(cuStreamSynchronize(s));
        CHECK(bad == 0, "queued kernel saw %llu wrong words\n", bad);
        OK(cuMemFree_v2(b));
    }
    OK(cuStreamDestroy_v2(s));
    return 0;
}

/* ---- split placement through the driver API: cuMemAlloc_v2 / cuMemFree_v2 and
 * cuMemAllocAsync / cuMemFreeAsync of SIZE (argv[2]) under a budget of half the device
 * (the runtime's side is rt_tests.c's split test) ---- */
static int test_driver_split(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: driver-split SIZE\n");
    size_t n = arg_size(argv[2]);
    size_t vram0 = fakegpu_vram_used();
    struct fakegpu_vmm_counts before, after;
    fakegpu_vmm_live(&before);
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int stream_ordered = 0; stream_ordered < 2; stream_ordered++) {
        CUdeviceptr p;
        OK(stream_ordered ? cuMemAllocAsync(&p, n, s) : cuMemAlloc_v2(&p, n));
        CHECK(!strcmp(fakegpu_ptr_kind(p), "vmm-device") && !strcmp(fakegpu_ptr_kind(p + n - 1), "vmm-host"),
              "not split: %s ... %s\n", fakegpu_ptr_kind(p), fakegpu_ptr_kind(p + n - 1));
        device_check(p, n, 61 + stream_ordered, "split memory");
        CUresult rc = cuMemFree_v2(p + 2 * MiB);
        CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2 of an interior pointer -> %d\n", rc);
        OK(stream_ordered ? cuMemFreeAsync(p, s) : cuMemFree_v2(p));
        OK(cuStreamSynchronize(s));
        rc = cuMemFree_v2(p);
        CHECK(rc == CUDA_ERROR_INVALID_VALUE, "second free of split memory -> %d\n", rc);
        for (int i = 0; i < 100; i++) {
            size_t free_bytes, total;
            OK(cuMemGetInfo_v2(&free_bytes, &total)); /* a shim call: it reclaims */
            fakegpu_vmm_live(&after);
            if (after.handles == before.handles && after.mappings == before.mappings &&
                after.reservations == before.reservations && fakegpu_vram_used() == vram0)
                break;
            usleep(50000);
        }
        CHECK(after.handles == before.handles && after.mappings == before.mappings &&
              after.reservations == before.reservations,
              "VMM objects left after freeing split memory: %zu handles, %zu mappings, %zu ranges (before %zu, %zu, %zu)\n",
              after.handles, after.mappings, after.reservations, before.handles, before.mappings, before.reservations);
        CHECK(fakegpu_vram_used() == vram0, "VRAM used %zu after freeing split memory, was %zu\n", fakegpu_vram_used(),
              vram0);
    }
    OK(cuStreamDestroy_v2(s));
    return 0;
}

/* ---- the fake's own pinning, as cuMemHostRegister does it (fake self-test) ---- */
static int test_hostreg(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t n = 8 * MiB;
    unsigned char *buf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED, "mmap\n");
    OK(cuMemHostRegister_v2(buf, n, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    CUresult rc = cuMemHostRegister_v2(buf + n / 2, 4096, 0);
    CHECK(rc == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "overlapping registration -> %d\n", rc);
    CUdeviceptr d;
    OK(cuMemHostGetDevicePointer_v2(&d, buf, 0));
    CHECK(d == (CUdeviceptr)(uintptr_t)buf, "device pointer %#llx != host pointer %p\n", d, (void *)buf);
    device_check(d, n, 5, "registered host memory");
    CHECK(fakegpu_pattern_check(buf, n, 5) == 0, "host does not see what the device wrote\n");
    OK(cuMemHostUnregister(buf));
    rc = cuMemHostUnregister(buf);
    CHECK(rc == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "second unregister -> %d\n", rc);
    /* Unregistered memory is not reachable by the device any more. */
    CHECK(!strcmp(fakegpu_ptr_kind(d), "none"), "unregistered memory still reachable\n");
    rc = cuMemHostGetDevicePointer_v2(&d, buf, 0);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE, "device pointer of unregistered memory -> %d\n", rc);
    /* Memory that cannot be pinned (no access) is refused. */
    unsigned char *none = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    rc = cuMemHostRegister_v2(none, n, 0);
    CHECK(rc != CUDA_SUCCESS, "PROT_NONE memory registered\n");
    /* A DMA-BUF is refused as external memory, both ways the shim tries. */
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc = { .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD, .size = n };
    desc.handle.fd = 0;
    CUexternalMemory ext;
    CHECK(cuImportExternalMemory(&ext, &desc) == CUDA_ERROR_NOT_SUPPORTED, "DMABUF_FD import\n");
    desc.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
    CHECK(cuImportExternalMemory(&ext, &desc) == CUDA_ERROR_UNKNOWN, "OPAQUE_FD import\n");
    munmap(buf, n);
    munmap(none, n);
    return 0;
}

/* ---- the fake's detectors fire (fake self-test; run with FAKECUDA_HOLD_TIMEOUT=1) ---- */
CUresult cuLaunchHostFunc(CUstream, CUhostFn, void *);
static void callback_calls_cuda(void *result)
{
    CUdeviceptr p;
    *(CUresult *)result = cuMemAlloc_v2(&p, 4096);
}

static int test_detectors(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    CUresult in_callback = CUDA_SUCCESS;
    OK(cuLaunchHostFunc(s, callback_calls_cuda, &in_callback));
    OK(cuStreamSynchronize(s));
    CHECK(in_callback == CUDA_ERROR_NOT_PERMITTED, "CUDA call inside a host callback -> %d\n", in_callback);
    CHECK(fakegpu_faults() == 1, "callback call not counted as a fault\n");
    static char host[4096];
    OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)host, sizeof host, 1, s));
    CUresult rc = cuStreamSynchronize(s);
    CHECK(rc == CUDA_ERROR_ILLEGAL_ADDRESS, "kernel on unregistered host memory: sync -> %d\n", rc);
    CHECK(fakegpu_faults() == 2, "illegal address not counted as a fault\n");
    CUstream held;
    CUdeviceptr d;
    OK(cuStreamCreate(&held, 0));
    OK(cuMemAlloc_v2(&d, 4096));
    fakegpu_stream_hold(held);
    OK(fakegpu_launch_fill(d, 4096, 1, held));
    OK(cuStreamSynchronize(held)); /* waits on held work: released by the timeout */
    CHECK(fakegpu_faults() == 3, "waiting on a held stream not counted as a fault\n");
    printf("ok detectors\n");
    exit(0);
}

/* ---- two devices through the driver: cuCtxSetCurrent between the primary contexts,
 * cuMemAlloc (devices.h) ---- */
CUresult cuDeviceGetCount(int *);
CUresult cuCtxGetDevice(CUdevice *);
static CUcontext primaries[2];

static int drv_count(void)
{
    int n = 0;
    OK(cuDeviceGetCount(&n));
    return n;
}
static void drv_select(int d)
{
    if (!primaries[d]) {
        CUdevice dev;
        OK(cuDeviceGet(&dev, d));
        OK(cuDevicePrimaryCtxRetain(&primaries[d], dev));
        CHECK(d == 0 || primaries[d] != primaries[0], "devices 0 and %d share one primary context\n", d);
    }
    OK(cuCtxSetCurrent(primaries[d]));
}
static int drv_current(void)
{
    CUdevice d = -1;
    OK(cuCtxGetDevice(&d));
    return d;
}
static CUdeviceptr drv_alloc(size_t n)
{
    CUdeviceptr p = 0;
    OK(cuMemAlloc_v2(&p, n));
    return p;
}
static void drv_release(CUdeviceptr p) { OK(cuMemFree_v2(p)); }
static void drv_mem_info(size_t *free_bytes, size_t *total) { OK(cuMemGetInfo_v2(free_bytes, total)); }
static size_t drv_total_mem(int d)
{
    size_t t = 0;
    OK(cuDeviceTotalMem_v2(&t, d));
    return t;
}

static int test_devices(int argc, char **argv)
{
    static const struct devices_api api = { drv_count, drv_select, drv_current, drv_alloc, drv_release, drv_mem_info,
                                            drv_total_mem };
    return devices_scenario(&api, argc, argv);
}

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

static int test_managed_fake_model(int argc, char **argv)
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

int main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "vmm", test_vmm }, { "vmm-shareable", test_vmm_shareable }, { "gpa", test_gpa }, { "driver-async", test_driver_async },
        { "hostreg", test_hostreg }, { "detectors", test_detectors },
        { "driver-split", test_driver_split }, { "devices", test_devices },
        { "managed-fake-model", test_managed_fake_model },
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, prepare_device);
}
