/* What gbtier's tests (tier_tests.c) share with their harness (tier_harness.c): the
 * runtime and cuBLAS functions they call, the device's size and headroom, the other process
 * (gbballoon), kernels that keep verifying blocks while they move, and waits on the shim's
 * counters. */
#ifndef TIER_TESTS_H
#define TIER_TESTS_H
#include "testutil.h"
#include "shimstats.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaSetDevice(int d);
CUresult cuMemRangeGetAttribute(void *data, size_t size, int attribute, CUdeviceptr p, size_t n);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
typedef struct fake_cublas *cublasHandle_t;
int cublasCreate_v2(cublasHandle_t *h);
int cublasSgemm_v2(cublasHandle_t h, int transa, int transb, int m, int n, int k, const float *alpha, const float *a,
                   int lda, const float *b, int ldb, const float *beta, float *c, int ldc);

/* The fake device's VRAM and GREENBOOST_VRAM_HEADROOM (bytes), set by main. */
extern size_t vram, headroom;

static inline size_t device_free(void) { return vram - fakegpu_device_used(); }
static inline CUdeviceptr dptr(void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* The other process: gbballoon holding VRAM without the shim. */
struct balloon {
    pid_t pid;
    FILE *out;
};

struct balloon balloon_start(size_t hold);
void balloon_stop(struct balloon *b);

/* Kernels that keep verifying `blocks` on two streams (keep_verifying, a thread's body)
 * until `stop`, counting rounds and wrong words. */
struct workload {
    void **blocks;
    int n;
    size_t block;
    volatile int stop;
    unsigned long long rounds, bad;
};
void *keep_verifying(void *arg);
void check_blocks(void **blocks, int n, size_t block, const char *when);
int wait_for(int (*done)(void *), void *arg, size_t keep, size_t *lowest);
int tier_vram_at_least(void *want);
int demoted_at_least(void *want);
int allocate_blocks(void **blocks, int n, size_t block);
/* Loads n weight blocks, each in VRAM (fails otherwise) and filled with 700 + its index
 * (check_blocks' pattern), then starts computing (a cuBLAS handle). */
void load_weights_then_compute(void **weights, int n, size_t block);

/* The kernel `name` of a fake module's PTX text. */
CUfunction kernel_named(const char *ptx, const char *name);
/* The fake's fk_fill_u32 loaded from PTX, and launched through cuLaunchKernel (the path
 * the shim observes): `count` words of `value` from `dst` on the legacy stream. */
CUfunction fill_kernel(void);
void fill_words(CUfunction f, CUdeviceptr dst, unsigned value, unsigned long long count);
/* The fake's fk_read_u32 (from a module of its own at each call: a kernel function of
 * its own), and a launch of it through cuLaunchKernel reading `count` words from `src`,
 * taking the fake link's time for those on the host, a fiftieth of it for the rest. */
CUfunction read_kernel(void);
void read_words(CUfunction f, CUdeviceptr src, unsigned long long count);
/* The fake's fk_struct (a 256-byte struct of 8 pointers, then 8 pointer parameters),
 * and a launch of it through cuLaunchKernel naming `n` blocks (at most 8; fewer are
 * named again), writing no word: what makes them hot to the shim. */
CUfunction struct_kernel(void);
void name_all(CUfunction f, void **blocks, int n);

/* tier_swap.c: roles swapped while kernels run; IPC of movable VRAM. */
int test_swap(int argc, char **argv);
int test_ipc(int argc, char **argv);
int test_make_room(int argc, char **argv);
int test_attributes(int argc, char **argv);
int test_uncontested(int argc, char **argv);
int test_pool(int argc, char **argv);

/* tier_kept.c: a swap of roles on a device that keeps the VRAM managed pages leave
 * (FAKECUDA_MANAGED_KEEPS_VRAM); a shortfall under pressure answered once there. */
int test_swap_kept(int argc, char **argv);
int test_working_set(int argc, char **argv);
int test_room_churn(int argc, char **argv);
int test_scratch_room(int argc, char **argv);
int test_pressure_once(int argc, char **argv);

/* tier_bound.c: what the default makes movable where the budget binds. */
int test_bound_pool(int argc, char **argv);
int test_bound_load(int argc, char **argv);
int test_bound_tensors(int argc, char **argv);
/* tier_host.c: what the host's RAM bounds. */
int test_demote_host_short(int argc, char **argv);
/* tier_ranges.c: parts of one large movable allocation moving alone, weighed by sampled
 * kernel times. */
int test_ranges(int argc, char **argv);
int test_ranges_room(int argc, char **argv);
int test_kernel_times(int argc, char **argv);
int test_ranges_demote(int argc, char **argv);
/* tier_heat.c: heat that does not trade weights read once per pass for one another, and
 * that a short kernel over VRAM does not make hot. */
int test_cycle(int argc, char **argv);
int test_vram_times(int argc, char **argv);

#endif
