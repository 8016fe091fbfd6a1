/* gbtier cycle BLOCK N PASS_MS: weights read once per pass, in order, a pass several ticks
 * long, beside another process: none is hotter than another, and no two trade places.
 *
 * N weight blocks are loaded beside another process that leaves room for N / 2 of them
 * (and an eighth of a block): the first half go to VRAM, the rest to T2, all movable.
 * A moment after loading, the program computes: pass after pass, it names each block in
 * turn through cuLaunchKernel (PASS_MS / N apart), as a forward reads its layers. Every
 * block is read once per pass, so the swaps (shim/src/rules/tiering.rs, a T2 block read
 * SWAP_MARGIN times as often per byte as those it displaces) have nothing to do. A heat
 * that sums reads and halves at every tick (10 ms) saw the block just read 2^k times
 * hotter than one read k ticks before, and swapped them at every pass: the round trip
 * over the link an HF decode on an H100 paid (1.1 tokens/s,
 * bench/results/2026-12-05-4dd3d98c4b53-longctx-h100.md). With each part's heat taken
 * over the interval between its reads (shim/src/rules/read_rate.rs), over 30 passes
 * nothing moves and every byte stays. */
#define _GNU_SOURCE
#include "tier_tests.h"

#define MAX_BLOCKS 16

int test_cycle(int argc, char **argv)
{
    CHECK(argc >= 5, "usage: cycle BLOCK N PASS_MS\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]), pass_ms = atoi(argv[4]), passes = 30;
    CHECK(n >= 4 && n <= MAX_BLOCKS && n % 2 == 0, "4 to %d weight blocks, even\n", MAX_BLOCKS);
    CHECK(pass_ms >= 4 * 10, "PASS_MS %d: at least four ticks of 10 ms\n", pass_ms);
    void *weights[MAX_BLOCKS];
    struct balloon other = balloon_start(device_free() - headroom - (size_t)(n / 2) * block - block / 8);
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&weights[i], block));
        CHECK(!strcmp(fakegpu_ptr_kind(dptr(weights[i])), "managed"), "weight block %d is %s: want movable memory\n",
              i, fakegpu_ptr_kind(dptr(weights[i])));
        CHECK((shim_t2_bytes(weights[i], block) == 0) == (i < n / 2), "weight block %d has %llu T2 bytes: want the "
              "first %d in VRAM, the rest in T2\n", i, shim_t2_bytes(weights[i], block), n / 2);
        OK(fakegpu_launch_fill(dptr(weights[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    usleep(300000); /* loaded; the program starts a moment later */
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    CUfunction f = struct_kernel();
    for (int pass = 0; pass < passes; pass++)
        for (int i = 0; i < n; i++) {
            name_all(f, &weights[i], 1);
            usleep((useconds_t)pass_ms * 1000 / (useconds_t)n);
        }
    OK(cudaDeviceSynchronize());
    struct shim_stats st = shim_stats();
    int in_vram_now = 0;
    for (int i = 0; i < n; i++)
        in_vram_now += shim_t2_bytes(weights[i], block) == 0;
    printf("cycle: %d passes of %d ms over %d blocks, %d in VRAM: %llu swaps, %llu promotions, %llu demotions\n",
           passes, pass_ms, n, in_vram_now, st.swaps, st.promotions, st.demotions);
    CHECK(st.swaps == 0 && st.promotions == 0 && st.demotions == 0, "%llu swaps, %llu promotions, %llu demotions "
          "among weights read once per pass each\n", st.swaps, st.promotions, st.demotions);
    CHECK(in_vram_now == n / 2, "%d of %d blocks in VRAM, %d before\n", in_vram_now, n, n / 2);
    check_blocks(weights, n, block, "after the passes");
    for (int i = 0; i < n; i++)
        OK(cudaFree(weights[i]));
    balloon_stop(&other);
    return 0;
}

/* gbtier vram-times BUFFER BLOCK (issue 34's decode, issue 36 item 2): a buffer of BUFFER
 * bytes in VRAM beside another process that leaves no more room, and a block of BLOCK
 * bytes in T2. Both are named equally often, the buffer by a kernel that reads a
 * sixty-fourth of it (as a decode step's attention is given a layer's whole KV cache, or
 * a kernel a tensor at the start of one of PyTorch's cached segments), the block by one
 * that reads all of it. Counted by namings, the buffer is as hot per byte as the block,
 * which never comes in. Timed, the short kernel over VRAM read at most its time at the
 * device memory's peak rate (the fake's is fifty times its link's): the block must take
 * VRAM in place of part of the buffer, every byte kept.
 *
 * With PASS (default 2), each round is a pass of PASS launches: the buffer's read first,
 * PASS - 2 reads of a word of a small buffer, the block's read last, as an embedding's
 * lookup comes once per token among a layer's every kernel. At 256, after PASS - 1 reads
 * of the small buffer first, a thread's every 257th launch (the turns of `kernel_times`)
 * meets the buffer's read only at round 255: the block must come in by round 254, from
 * the first launches of each kernel timed. */
int test_vram_times(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: vram-times BUFFER BLOCK [PASS]\n");
    size_t sizes[2] = { strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0) };
    int pass = argc > 4 ? atoi(argv[4]) : 2, rounds = pass > 2 ? 254 : 4000;
    CHECK(pass >= 2, "PASS %d: at least the two reads\n", pass);
    void *small;
    OK(cudaMalloc(&small, 1 << 20));
    void *blocks[2];
    struct balloon other = balloon_start(device_free() - headroom - sizes[0]);
    for (int i = 0; i < 2; i++)
        OK(cudaMalloc(&blocks[i], sizes[i]));
    for (int i = 0; i < 2; i++) /* the program's first kernels: it computes from here on */
        OK(fakegpu_launch_fill(dptr(blocks[i]), sizes[i], 700 + (uint32_t)i, NULL));
    OK(cudaDeviceSynchronize());
    CHECK(shim_t2_bytes(blocks[0], sizes[0]) == 0 && shim_t2_bytes(blocks[1], sizes[1]) == sizes[1],
          "the buffer has %llu T2 bytes, the block %llu of %zu: want the buffer in VRAM, the block in T2\n",
          shim_t2_bytes(blocks[0], sizes[0]), shim_t2_bytes(blocks[1], sizes[1]), sizes[1]);
    CUfunction partial = read_kernel(), whole = read_kernel(), filler = read_kernel();
    int in = 0;
    unsigned long long launches = 0;
    for (int i = 1; i < pass; i++, launches++)
        read_words(filler, dptr(small), 1);
    for (int round = 0; round < rounds && !in; round++, launches += (unsigned long long)pass) {
        read_words(partial, dptr(blocks[0]), sizes[0] / 4 / 64);
        for (int i = 2; i < pass; i++)
            read_words(filler, dptr(small), 1);
        read_words(whole, dptr(blocks[1]), sizes[1] / 4);
        OK(cudaDeviceSynchronize());
        in = shim_t2_bytes(blocks[1], sizes[1]) == 0;
    }
    struct shim_stats st = shim_stats();
    printf("vram-times: block in VRAM %d after %llu launches; %llu timed, %llu swaps; buffer's T2 bytes %llu\n", in,
           launches, st.launches_timed, st.swaps, shim_t2_bytes(blocks[0], sizes[0]));
    CHECK(in, "the block read whole never came into VRAM: a short kernel over VRAM counted as reading all it named\n");
    for (int i = 0; i < 2; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(blocks[i]), sizes[i], 700 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "allocation %d has %llu wrong words after the moves\n", i, bad);
        OK(cudaFree(blocks[i]));
    }
    OK(cudaFree(small));
    balloon_stop(&other);
    return 0;
}
