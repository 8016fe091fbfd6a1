/* Runtime tests (see rt_tests.c): the VRAM headroom beside other processes on the
 * device, and two devices through the runtime. */
#define _GNU_SOURCE
#include "rt_tests.h"
#include "devices.h"

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
int test_headroom(int argc, char **argv)
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
        CHECK(t2_here == !in_vram((CUdeviceptr)(uintptr_t)p[i]), "allocation #%zu is %s but the shim counts %llu T2 bytes\n",
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

int test_headroom_report(int argc, char **argv)
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

int test_devices(int argc, char **argv)
{
    static const struct devices_api api = { rt_count, rt_select, rt_current, rt_alloc, rt_release, rt_mem_info,
                                            rt_total_mem };
    return devices_scenario(&api, argc, argv);
}
