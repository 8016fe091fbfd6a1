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

#include "drv_tests.h"

size_t vram;

/* Before every test: the device's size, and its primary context made current. */
static void prepare_device(void)
{
    vram = fakegpu_vram_total();
    primary_context_current();
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


int main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "vmm", test_vmm }, { "vmm-shareable", test_vmm_shareable }, { "gpa", test_gpa }, { "driver-async", test_driver_async },
        { "hostreg", test_hostreg }, { "detectors", test_detectors },
        { "driver-split", test_driver_split }, { "devices", test_devices },
        { "managed-fake-model", test_managed_fake_model },
        { "managed-kept", test_managed_kept },
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, prepare_device);
}
