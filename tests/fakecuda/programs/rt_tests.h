/* What the runtime tests (rt_tests.c and the rt_*_tests.c beside it) share: the runtime
 * functions they call, the device size, the helpers that fill, verify and inspect
 * memory, and each test's entry (the table is in rt_tests.c). */
#ifndef RT_TESTS_H
#define RT_TESTS_H
#include "testutil.h"
#include "shimstats.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The largest allocation the shim's placement takes for a pool's chunk (its CHUNK_MAX,
 * shim/src/rules/placement.rs): PyTorch's caching allocator's 20 MiB segments. */
#define CHUNK_MAX (20 * MiB)

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
/* The fake device's VRAM (FAKECUDA_VRAM), read at start. */
extern size_t vram;

/* NVML as a monitoring tool reaches it: dlopen'ed, device 0, both memory queries. */
struct nvml_device {
    nvmlDevice_t dev;
    nvmlReturn_t (*mem1)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*mem2)(nvmlDevice_t, nvmlMemory_v2_t *);
};

/* A driver function as the runtime hands it out (cudaGetDriverEntryPointByVersion). */
void *entry(const char *name);
/* What the fake says a pointer is (vram, hostreg, ...). */
const char *kind(void *p);
/* Fills with the fake GPU (or a copy from the host); checks with both. */
void fill_and_verify(void *p, size_t n, uint32_t seed, int by_memcpy);
void verify(void *p, size_t n, uint32_t seed);
/* After every free: no host memory stays pinned (unless GBTEST_ALLOW_T2_CACHE=1). */
void check_host_released(const char *what);
void open_nvml(struct nvml_device *out);

int test_caps(int argc, char **argv);
int test_alloc4x(int argc, char **argv);
int test_placement(int argc, char **argv);
int test_async(int argc, char **argv);
int test_threads(int argc, char **argv);
int test_fork(int argc, char **argv);
int test_forkexit(int argc, char **argv);
int test_errors(int argc, char **argv);
int test_t2cap(int argc, char **argv);
int test_entrypoints(int argc, char **argv);
int test_no_t2(int argc, char **argv);
int test_expandable(int argc, char **argv);
int test_split(int argc, char **argv);
int test_split_async(int argc, char **argv);
int test_split_pool(int argc, char **argv);
int test_lasterror(int argc, char **argv);
int test_t2cache_pressure(int argc, char **argv);
int test_t2cache(int argc, char **argv);
int test_headroom(int argc, char **argv);
int test_headroom_report(int argc, char **argv);
int test_devices(int argc, char **argv);

#endif
