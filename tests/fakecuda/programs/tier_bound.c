/* What live tiering at its default (GREENBOOST_TIERING=auto) makes movable where the
 * budget, not another process, binds (GREENBOOST_VRAM_BUDGET; the device alone):
 * gbtier bound-pool BLOCK: llama.cpp's order. Its one weight buffer larger than the budget
 *   is movable (in 2 MiB parts) and promoted into the budget while the program loads; its
 *   KV cache, allocated before it computes, gets VRAM from those weights at once; the
 *   block of the buffer its kernels keep writing moves to VRAM, every byte kept.
 * gbtier bound-load BLOCK: the same buffer loaded by copies, block by block, while live
 *   tiering runs, no kernel launched yet: the blocks promoted into the budget stay there,
 *   none traded for one written later (the GPU has read nothing), every byte kept.
 * gbtier bound-tensors BLOCK: PyTorch's order. Weights loaded one tensor at a time stay
 *   the driver's VRAM, and pinned T2 past the budget (GEMM staging copies it at the link's
 *   full rate); once the program computes, what it allocates is movable. */
#define _GNU_SOURCE
#include "tier_tests.h"

#define BUFFER 12 /* blocks of the weight buffer; the budget holds 6 */
#define HOT 9     /* the block kernels keep naming */

static int is_kind(void *p, const char *kind) { return !strcmp(fakegpu_ptr_kind(dptr(p)), kind); }

/* Block `i` of `buffer` holds its pattern (seed 900 + i). */
static void check_block(char *buffer, size_t block, int i, const char *when)
{
    unsigned long long bad = 0;
    OK(fakegpu_launch_verify(dptr(buffer + (size_t)i * block), block, 900 + (uint32_t)i, NULL, &bad));
    OK(cudaDeviceSynchronize());
    CHECK(bad == 0, "%s: block %d of the weights has %llu wrong words\n", when, i, bad);
}

int test_bound_pool(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: bound-pool BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0), n = BUFFER * block;
    char *weights;
    void *kv;
    OK(cudaMalloc((void **)&weights, n));
    CHECK(is_kind(weights, "managed") && shim_t2_bytes(weights, n) == n, "the weight buffer larger than the budget "
          "is %s with %llu of %zu bytes in T2, not movable T2\n", fakegpu_ptr_kind(dptr(weights)),
          shim_t2_bytes(weights, n), n);
    for (int i = 0; i < BUFFER; i++)
        OK(fakegpu_launch_fill(dptr(weights + (size_t)i * block), block, 900 + (uint32_t)i, NULL));
    OK(cudaDeviceSynchronize());
    /* Live tiering promotes the loaded weights into all of the budget. */
    unsigned long long budget = 6 * block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &budget, 0, &lowest), "the weights were not promoted into the budget (%llu MiB "
          "in VRAM)\n", shim_stats().tier_vram >> 20);
    OK(cudaMalloc(&kv, block));
    CHECK(is_kind(kv, "managed") && fakegpu_managed_where(dptr(kv)) == 0, "the KV cache after the weights is %s "
          "(where %d), not movable VRAM in room the weights made\n", fakegpu_ptr_kind(dptr(kv)),
          fakegpu_managed_where(dptr(kv)));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    CUfunction f = fill_kernel();
    CUdeviceptr hot = dptr(weights + HOT * block);
    unsigned value = 0;
    int moved = 0;
    for (int round = 0; round < 5000 && !moved; round++) {
        value = 1000 + (unsigned)round;
        fill_words(f, hot, value, block / 4);
        fill_words(f, hot + block, 0, 0); /* the next block's start: it bounds the piece read */
        OK(cudaDeviceSynchronize());
        moved = fakegpu_managed_where(hot) == 0 && fakegpu_managed_where(hot + block - 1) == 0;
        usleep(2000);
    }
    struct shim_stats st = shim_stats();
    printf("bound-pool: hot block where %d..%d; %llu promotions (%llu MiB); peak T1 %llu MiB\n",
           fakegpu_managed_where(hot), fakegpu_managed_where(hot + block - 1), st.promotions, st.promoted_bytes >> 20,
           st.t1_peak >> 20);
    CHECK(moved, "the block kernels keep naming never reached VRAM\n");
    for (int i = 0; i < BUFFER; i++)
        if (i != HOT)
            check_block(weights, block, i, "after the moves");
    unsigned *back = malloc(block);
    CHECK(back, "malloc\n");
    OK(cudaMemcpy(back, (void *)(uintptr_t)hot, block, 2 /* device to host */));
    for (size_t i = 0; i < block / 4; i++)
        CHECK(back[i] == value, "hot block word %zu is %u, want the last fill %u\n", i, back[i], value);
    free(back);
    OK(cudaFree(kv));
    OK(cudaFree(weights));
    return 0;
}

int test_bound_load(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: bound-load BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0), n = BUFFER * block;
    char *weights;
    OK(cudaMalloc((void **)&weights, n));
    CHECK(is_kind(weights, "managed"), "the weight buffer larger than the budget is %s, not movable\n",
          fakegpu_ptr_kind(dptr(weights)));
    unsigned *host = malloc(block);
    CHECK(host, "malloc\n");
    for (int i = 0; i < BUFFER; i++) {
        for (size_t w = 0; w < block / 4; w++)
            host[w] = 900u * (unsigned)i + (unsigned)w;
        OK(cudaMemcpy(weights + (size_t)i * block, host, block, 1 /* host to device */));
        usleep(50000); /* five ticks of the tier thread between tensors */
    }
    unsigned long long budget = 6 * block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &budget, 0, &lowest), "the weights were not promoted into the budget (%llu MiB "
          "in VRAM)\n", shim_stats().tier_vram >> 20);
    usleep(100000);
    struct shim_stats st = shim_stats();
    printf("bound-load: %llu promotions (%llu MiB), %llu swaps, %llu demotions (%llu MiB)\n", st.promotions,
           st.promoted_bytes >> 20, st.swaps, st.demotions, st.demoted_bytes >> 20);
    CHECK(st.demotions == 0 && st.swaps == 0, "%llu MiB of the loaded weights went back to T2 in %llu moves while "
          "it loaded: blocks written later were taken for hotter before the GPU read any\n", st.demoted_bytes >> 20, st.demotions);
    for (int i = 0; i < BUFFER; i++) {
        OK(cudaMemcpy(host, weights + (size_t)i * block, block, 2 /* device to host */));
        for (size_t w = 0; w < block / 4; w++)
            CHECK(host[w] == 900u * (unsigned)i + (unsigned)w, "block %d word %zu is %u after the moves\n", i, w,
                  host[w]);
    }
    free(host);
    OK(cudaFree(weights));
    return 0;
}

int test_bound_tensors(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: bound-tensors BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    void *tensors[5], *activations;
    for (int i = 0; i < 5; i++)
        OK(cudaMalloc(&tensors[i], block));
    for (int i = 0; i < 4; i++)
        CHECK(is_kind(tensors[i], "vram"), "weight tensor %d within the budget is %s, not the driver's VRAM\n", i,
              fakegpu_ptr_kind(dptr(tensors[i])));
    CHECK(is_kind(tensors[4], "hostreg"), "the weight tensor past the budget is %s, not pinned T2\n",
          fakegpu_ptr_kind(dptr(tensors[4])));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    OK(cudaMalloc(&activations, block));
    CHECK(is_kind(activations, "managed"), "memory allocated while computing past the budget is %s, not movable\n",
          fakegpu_ptr_kind(dptr(activations)));
    printf("bound-tensors: 4 tensors in VRAM, the fifth pinned T2; activations %s; %llu movable allocations\n",
           fakegpu_ptr_kind(dptr(activations)), shim_stats().movable_allocs);
    OK(cudaFree(activations));
    for (int i = 0; i < 5; i++)
        OK(cudaFree(tensors[i]));
    return 0;
}
