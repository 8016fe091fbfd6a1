/* ollama-style discovery: no CUDA library linked; dlopen libcuda.so.1 and
 * libnvidia-ml.so.1 and dlsym the memory queries. Checks every total against
 * argv[1] and that the free figures agree. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dlfcn.h>

/* ctypes-style use of the runtime: dlopen(libcudart) RTLD_LOCAL and dlsym the
 * allocator; a 2x VRAM allocation only works if dlsym handed out the hook. */
static int runtime_by_dlsym(const char *soname)
{
    void *rt = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    CHECK(rt, "dlopen %s: %s\n", soname, dlerror());
    cudaError_t (*malloc_)(void **, size_t) = dlsym(rt, "cudaMalloc");
    cudaError_t (*free_)(void *) = dlsym(rt, "cudaFree");
    CHECK(malloc_ && free_, "runtime symbols missing\n");
    size_t n = 2 * fakegpu_vram_total();
    void *p;
    cudaError_t rc = malloc_(&p, n);
    CHECK(rc == cudaSuccess, "cudaMalloc from dlsym(%s): %zu bytes -> %d\n", soname, n, rc);
    OK(fakegpu_launch_fill((CUdeviceptr)(uintptr_t)p, n, 17, NULL));
    unsigned long long bad = ~0ULL;
    OK(fakegpu_launch_verify((CUdeviceptr)(uintptr_t)p, n, 17, NULL, &bad));
    CHECK(bad == 0, "%llu wrong words\n", bad);
    OK(free_(p));
    printf("ok runtime-dlsym\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "runtime"))
        return runtime_by_dlsym(argv[2]);
    CHECK(argc >= 2, "usage: discover EXPECTED_TOTAL\n");
    unsigned long long expect = arg_size(argv[1]);
    void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    CHECK(cuda, "dlopen libcuda.so.1: %s\n", dlerror());
    CUresult (*init)(unsigned) = dlsym(cuda, "cuInit");
    CUresult (*get)(CUdevice *, int) = dlsym(cuda, "cuDeviceGet");
    CUresult (*total)(size_t *, CUdevice) = dlsym(cuda, "cuDeviceTotalMem_v2");
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) = dlsym(cuda, "cuCtxCreate_v2");
    CUresult (*meminfo)(size_t *, size_t *) = dlsym(cuda, "cuMemGetInfo_v2");
    CUresult (*ctx_destroy)(CUcontext) = dlsym(cuda, "cuCtxDestroy_v2");
    CHECK(init && get && total && ctx_create && meminfo && ctx_destroy, "driver symbols missing\n");
    CUdevice dev;
    CUcontext ctx;
    size_t t_dev, f_ctx, t_ctx;
    OK(init(0));
    OK(get(&dev, 0));
    OK(total(&t_dev, dev));
    OK(ctx_create(&ctx, 0, dev));
    OK(meminfo(&f_ctx, &t_ctx));
    OK(ctx_destroy(ctx));

    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    CHECK(nvml, "dlopen libnvidia-ml.so.1: %s\n", dlerror());
    nvmlReturn_t (*ninit)(void) = dlsym(nvml, "nvmlInit_v2");
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *) = dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *) = dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    nvmlReturn_t (*mem2)(nvmlDevice_t, nvmlMemory_v2_t *) = dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2");
    nvmlReturn_t (*shutdown)(void) = dlsym(nvml, "nvmlShutdown");
    CHECK(ninit && handle && mem && mem2 && shutdown, "NVML symbols missing\n");
    nvmlDevice_t d;
    nvmlMemory_t m;
    nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
    OK(ninit());
    OK(handle(0, &d));
    OK(mem(d, &m));
    OK(mem2(d, &m2));
    OK(shutdown());
    printf("cuDeviceTotalMem_v2=%zu cuMemGetInfo_v2 total=%zu free=%zu nvml total=%llu free=%llu "
           "nvml_v2 total=%llu free=%llu expected=%llu\n", t_dev, t_ctx, f_ctx, m.total, m.free,
           m2.total, m2.free, expect);
    CHECK(t_dev == expect, "cuDeviceTotalMem_v2 %zu != %llu\n", t_dev, expect);
    CHECK(t_ctx == expect, "cuMemGetInfo_v2 total %zu != %llu\n", t_ctx, expect);
    CHECK(m.total == expect, "nvmlDeviceGetMemoryInfo total %llu != %llu\n", m.total, expect);
    CHECK(m2.total == expect, "nvmlDeviceGetMemoryInfo_v2 total %llu != %llu\n", m2.total, expect);
    CHECK(m.free == f_ctx && m2.free == f_ctx, "NVML free %llu / %llu != cuMemGetInfo free %zu\n",
          m.free, m2.free, f_ctx);
    printf("ok discover\n");
    return 0;
}
