/* gbtier's harness (tier_tests.h): the other process, the verifying workload, waits. */
#define _GNU_SOURCE
#include "tier_tests.h"

size_t vram, headroom;

/* ---- the other process ---- */

/* Starts gbballoon holding `hold` bytes; returns once it holds them. */
struct balloon balloon_start(size_t hold)
{
    CHECK(hold < vram, "a balloon of %zu bytes on a device of %zu: the device was fuller than planned\n", hold, vram);
    CHECK(getenv("FAKECUDA_DEVICE_SHARE"), "needs FAKECUDA_DEVICE_SHARE\n");
    struct balloon b;
    b.pid = balloon_spawn(hold, 120, &b.out);
    /* The shim reuses its measurement of the device for 1 ms: the next allocation must
     * see the balloon. */
    usleep(5000);
    return b;
}

void balloon_stop(struct balloon *b)
{
    kill(b->pid, SIGTERM);
    int status = 0;
    waitpid(b->pid, &status, 0);
    fclose(b->out);
    CHECK(WIFEXITED(status), "the balloon did not exit cleanly\n");
}

/* ---- kernels that keep running on two streams while memory moves ---- */

void *keep_verifying(void *arg)
{
    struct workload *w = arg;
    cudaStream_t s[2];
    OK(cudaStreamCreateWithFlags(&s[0], 1));
    OK(cudaStreamCreateWithFlags(&s[1], 1));
    while (!w->stop) {
        for (int i = 0; i < w->n; i++) {
            unsigned long long bad = 0;
            OK(fakegpu_launch_verify(dptr(w->blocks[i]), w->block, 700 + (uint32_t)i, s[i & 1], &bad));
            OK(cudaStreamSynchronize(s[i & 1]));
            w->bad += bad;
        }
        w->rounds++;
    }
    return NULL;
}

/* Verifies every block's pattern now (the workload's seeds), failing on a wrong word. */
void check_blocks(void **blocks, int n, size_t block, const char *when)
{
    for (int i = 0; i < n; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "%s: block %d (%s) has %llu wrong words\n", when, i, fakegpu_ptr_kind(dptr(blocks[i])), bad);
    }
}

/* Waits up to 10 s for `done`, watching that the device keeps `keep` bytes free. */
int wait_for(int (*done)(void *), void *arg, size_t keep, size_t *lowest)
{
    for (int ms = 0; ms < 10000; ms++) {
        size_t free_now = device_free();
        if (free_now < *lowest)
            *lowest = free_now;
        CHECK(free_now >= keep, "the device has %zu MiB free, less than %zu MiB\n", free_now >> 20, keep >> 20);
        if (done(arg))
            return 1;
        usleep(1000);
    }
    return 0;
}

/* `done` predicates of wait_for: the shim's counters reached `want` bytes. */
int tier_vram_at_least(void *want) { return shim_stats().tier_vram >= *(unsigned long long *)want; }
int demoted_at_least(void *want) { return shim_stats().demoted_bytes >= *(unsigned long long *)want; }

/* Allocates n blocks and fills them; returns how many are movable T2 (kind "managed", all
 * of it in T2): beside another process, those that did not fit above the headroom (those
 * that did are managed memory too where the device is contested, in VRAM). */
int allocate_blocks(void **blocks, int n, size_t block)
{
    int movable = 0;
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&blocks[i], block));
        int managed = !strcmp(fakegpu_ptr_kind(dptr(blocks[i])), "managed");
        unsigned long long t2 = shim_t2_bytes(blocks[i], block);
        CHECK(t2 == 0 || t2 == block, "block %d is %s with %llu T2 bytes\n", i, fakegpu_ptr_kind(dptr(blocks[i])), t2);
        movable += managed && t2 == block;
        OK(fakegpu_launch_fill(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    return movable;
}

/* ---- kernels the shim sees launched ---- */

CUfunction kernel_named(const char *ptx, const char *name)
{
    CUmodule module;
    CUfunction f;
    OK(cuModuleLoadData(&module, ptx));
    OK(cuModuleGetFunction(&f, module, name));
    return f;
}

CUfunction fill_kernel(void)
{
    return kernel_named(".version 8.0\n.target sm_90\n"
                        ".visible .entry fk_fill_u32(.param .u64 dst, .param .u32 value, .param .u64 count)\n"
                        "{ ret; }\n",
                        "fk_fill_u32");
}

void fill_words(CUfunction f, CUdeviceptr dst, unsigned value, unsigned long long count)
{
    void *params[] = { &dst, &value, &count };
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
}

CUfunction read_kernel(void)
{
    return kernel_named(".version 8.0\n.target sm_90\n"
                        ".visible .entry fk_read_u32(.param .u64 src, .param .u64 count)\n{ ret; }\n",
                        "fk_read_u32");
}

void read_words(CUfunction f, CUdeviceptr src, unsigned long long count)
{
    void *params[] = { &src, &count };
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
}

void load_weights_then_compute(void **weights, int n, size_t block)
{
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&weights[i], block));
        CHECK(in_vram(dptr(weights[i])), "weight block %d is %s, not in VRAM\n", i, fakegpu_ptr_kind(dptr(weights[i])));
        OK(fakegpu_launch_fill(dptr(weights[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
}

void name_all(CUfunction f, void **blocks, int n)
{
    struct fk_args args = { .count = 0 };
    CUdeviceptr p[8];
    for (int i = 0; i < 8; i++) {
        args.ptrs[i] = blocks[i % n];
        p[i] = dptr(blocks[(i + 1) % n]);
    }
    void *params[9] = { &args, &p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7] };
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
}

CUfunction struct_kernel(void)
{
    return kernel_named(".version 8.0\n.target sm_90\n"
                        ".visible .entry fk_struct(.param .align 8 .b8 s[256], .param .u64 p0, .param .u64 p1,"
                        " .param .u64 p2, .param .u64 p3, .param .u64 p4, .param .u64 p5, .param .u64 p6,"
                        " .param .u64 p7)\n{ ret; }\n",
                        "fk_struct");
}
