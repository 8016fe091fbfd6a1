/* gbtier ranges BLOCK: a part of one large movable allocation moves alone (issue 36 item 1).
 * gbtier ranges-room BLOCK: room made at once from parts of a large movable allocation.
 *
 * Both use a buffer of BUFFER blocks (at least 64 MiB: the shim cuts it into 2 MiB parts),
 * as llama.cpp keeps all its weights, or its KV cache, in one allocation. */
#define _GNU_SOURCE
#include "tier_tests.h"

#define BUFFER 12
#define HOT 8 /* the block kernels keep naming */
#define PART (2u << 20)

/* The buffer's blocks, each filled with its own pattern (seed 700 + i). */
static void fill_blocks(char *buffer, size_t block, void **blocks)
{
    for (int i = 0; i < BUFFER; i++) {
        blocks[i] = buffer + (size_t)i * block;
        OK(fakegpu_launch_fill(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
}

/* Bytes of [p, p + n) that the fake says are on the host, counted by 2 MiB. */
static size_t on_host(CUdeviceptr p, size_t n)
{
    size_t host = 0;
    for (size_t at = 0; at < n; at += PART)
        host += fakegpu_managed_where(p + at) == -1 ? PART : 0;
    return host;
}

/* Every block but `skip` still holds its pattern. */
static void check_buffer(void **blocks, size_t block, int skip, const char *when)
{
    for (int i = 0; i < BUFFER; i++) {
        if (i == skip)
            continue;
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "%s: block %d of the buffer has %llu wrong words\n", when, i, bad);
    }
}

struct hot {
    CUdeviceptr start;
    size_t len;
};

static int hot_in_vram(void *arg)
{
    struct hot *h = arg;
    return fakegpu_managed_where(h->start) == 0 && fakegpu_managed_where(h->start + h->len - 1) == 0;
}

/* Live tiering on (GREENBOOST_TIERING=on), the program computing, beside another process
 * that leaves room for three blocks: the buffer goes to T2 whole. Kernels name one block
 * of it over and over (and the next block's start, with nothing to fill, which bounds the
 * piece they read); that block alone must move to VRAM, at its address, while kernels
 * keep verifying the first eight blocks — the rest of the buffer stays in T2, every byte
 * kept. */
int test_ranges(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ranges BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    CHECK(block * BUFFER >= (64u << 20), "a buffer of %zu MiB is not cut into parts\n", (block * BUFFER) >> 20);
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    struct balloon other = balloon_start(device_free() - headroom - 3 * block);
    char *buffer;
    OK(cudaMalloc((void **)&buffer, BUFFER * block));
    CHECK(shim_t2_bytes(buffer, BUFFER * block) == BUFFER * block, "the buffer has %llu of %zu bytes in T2: want "
          "all of it (movable T2)\n", shim_t2_bytes(buffer, BUFFER * block), BUFFER * block);
    void *blocks[BUFFER];
    fill_blocks(buffer, block, blocks);
    CUfunction f = fill_kernel();
    struct hot hot = { dptr(blocks[HOT]), block };
    struct workload w = { blocks, HOT, block, 0, 0, 0 };
    pthread_t verifier;
    CHECK(pthread_create(&verifier, NULL, keep_verifying, &w) == 0, "pthread_create\n");
    unsigned value = 0;
    size_t lowest = vram;
    int moved = 0;
    for (int round = 0; round < 5000 && !moved; round++) {
        value = 1000 + (unsigned)round;
        fill_words(f, hot.start, value, block / 4);
        fill_words(f, dptr(blocks[HOT + 1]), 0, 0); /* the next piece's start */
        OK(cudaDeviceSynchronize());
        if (device_free() < lowest)
            lowest = device_free();
        moved = hot_in_vram(&hot);
        usleep(2000);
    }
    w.stop = 1;
    pthread_join(verifier, NULL);
    struct shim_stats st = shim_stats();
    size_t host = on_host(dptr(buffer), BUFFER * block);
    printf("ranges: hot block where %d..%d; %zu of %zu MiB of the buffer on the host; %llu promotions (%llu MiB); "
           "T2 bytes of the hot block %llu; lowest free %zu MiB (headroom %zu MiB); %llu verifying rounds, %llu "
           "wrong words\n", fakegpu_managed_where(hot.start), fakegpu_managed_where(hot.start + block - 1), host >> 20,
           (BUFFER * block) >> 20, st.promotions, st.promoted_bytes >> 20, shim_t2_bytes(blocks[HOT], block),
           lowest >> 20, headroom >> 20, w.rounds, w.bad);
    CHECK(moved, "the block kernels keep naming never reached VRAM: the buffer moves whole or not at all\n");
    CHECK(host >= (BUFFER - 3) * block, "only %zu MiB of the buffer stayed on the host: more than the room moved\n",
          host >> 20);
    CHECK(shim_t2_bytes(blocks[HOT], block) == 0 && shim_t2_bytes(buffer, block) == block, "the shim's accounts "
          "disagree with where the parts are\n");
    CHECK(w.bad == 0, "the verified blocks read %llu wrong words while parts moved\n", w.bad);
    CHECK(lowest >= headroom, "free VRAM fell to %zu MiB, under the headroom\n", lowest >> 20);
    check_buffer(blocks, block, HOT, "after the move");
    unsigned *back = malloc(block);
    CHECK(back, "malloc\n");
    OK(cudaMemcpy(back, blocks[HOT], block, 2));
    for (size_t i = 0; i < block / 4; i++)
        CHECK(back[i] == value, "hot block word %zu is %u, want the last fill %u\n", i, back[i], value);
    free(back);
    OK(cudaFree(buffer));
    balloon_stop(&other);
    return 0;
}

/* On a contested device (movable VRAM), the buffer is loaded into VRAM with a little room
 * to spare; once the program computes, a block it allocates finds no room and takes the
 * place of the buffer's coldest parts, as much as it needs and no more: the buffer is
 * far larger than twice the block, so a buffer moving whole could not make the room. */
int test_ranges_room(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ranges-room BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    struct balloon other = balloon_start(device_free() - headroom - BUFFER * block - block / 2);
    char *buffer;
    OK(cudaMalloc((void **)&buffer, BUFFER * block));
    CHECK(in_vram(dptr(buffer)) && fakegpu_managed_where(dptr(buffer)) == 0, "the buffer is %s, where %d: want "
          "movable memory in VRAM on a contested device\n", fakegpu_ptr_kind(dptr(buffer)),
          fakegpu_managed_where(dptr(buffer)));
    void *blocks[BUFFER];
    fill_blocks(buffer, block, blocks);
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    void *working;
    OK(cudaMalloc(&working, block));
    struct shim_stats st = shim_stats();
    size_t host = on_host(dptr(buffer), BUFFER * block);
    printf("ranges-room: working block %s (%llu T2 bytes); %zu MiB of the buffer on the host, %llu T2 bytes in the "
           "shim's accounts; %llu swaps; %zu MiB free (headroom %zu MiB)\n", fakegpu_ptr_kind(dptr(working)),
           shim_t2_bytes(working, block), host >> 20, shim_t2_bytes(buffer, BUFFER * block), st.swaps,
           device_free() >> 20, headroom >> 20);
    CHECK(in_vram(dptr(working)) && shim_t2_bytes(working, block) == 0, "the block allocated while computing is "
          "not in VRAM: no room was made for it\n");
    CHECK(host == block && shim_t2_bytes(buffer, BUFFER * block) == block, "%zu MiB of the buffer went to T2 for a "
          "block of %zu MiB\n", host >> 20, block >> 20);
    CHECK(device_free() >= headroom, "free VRAM %zu MiB, under the headroom\n", device_free() >> 20);
    OK(fakegpu_launch_fill(dptr(working), block, 900, NULL));
    OK(cudaDeviceSynchronize());
    check_buffer(blocks, block, -1, "after making room");
    OK(cudaFree(working));
    OK(cudaFree(buffer));
    balloon_stop(&other);
    return 0;
}

struct pieces {
    CUdeviceptr at[4];
};

/* The two pieces the whole reader names in VRAM, the partial reader's first on the host. */
static int whole_pieces_in_vram(void *arg)
{
    struct pieces *p = arg;
    return fakegpu_managed_where(p->at[1]) == 0 && fakegpu_managed_where(p->at[3]) == 0 &&
           fakegpu_managed_where(p->at[0]) == -1 && fakegpu_managed_where(p->at[2]) == -1;
}

/* gbtier kernel-times BLOCK (issue 36 item 2): a buffer of four pieces of two blocks,
 * named equally often by two kernel functions: the first and third by a kernel that
 * reads a sixteenth of its piece (as a mixture-of-experts product reads the experts a
 * token routes to), the second and fourth by one that reads all of its piece. With room
 * for two pieces, counted by namings alone the first two pieces (one of each) take VRAM
 * and stay. Timed, the partial reader's share falls, and the whole reader's pieces must
 * end in VRAM in place of the partial reader's, every byte kept. */
int test_kernel_times(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: kernel-times BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    size_t piece = 2 * block, len = 4 * piece;
    CHECK(len >= (64u << 20), "a buffer of %zu MiB is not cut into parts\n", len >> 20);
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    struct balloon other = balloon_start(device_free() - headroom - 2 * piece - headroom / 4);
    char *buffer;
    OK(cudaMalloc((void **)&buffer, len));
    CHECK(shim_t2_bytes(buffer, len) == len, "the buffer has %llu of %zu bytes in T2: want all of it\n",
          shim_t2_bytes(buffer, len), len);
    void *blocks[BUFFER];
    for (int i = 0; i < 8; i++) {
        blocks[i] = buffer + (size_t)i * block;
        OK(fakegpu_launch_fill(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    CUfunction partial = read_kernel(), whole = read_kernel();
    struct pieces p;
    for (int i = 0; i < 4; i++)
        p.at[i] = dptr(buffer) + (size_t)i * piece;
    size_t lowest = vram;
    int moved = 0;
    unsigned long long launches = 0;
    for (int round = 0; round < 3000 && !moved; round++) {
        for (int i = 0; i < 4; i++, launches++) {
            if (i % 2 == 0)
                read_words(partial, p.at[i], piece / 4 / 16);
            else
                read_words(whole, p.at[i], piece / 4);
        }
        OK(cudaDeviceSynchronize());
        if (device_free() < lowest)
            lowest = device_free();
        moved = whole_pieces_in_vram(&p);
    }
    struct shim_stats st = shim_stats();
    printf("kernel-times: pieces where %d %d %d %d after %llu launches; %llu timed, %llu swaps, %llu promotions; "
           "lowest free %zu MiB (headroom %zu MiB)\n", fakegpu_managed_where(p.at[0]), fakegpu_managed_where(p.at[1]),
           fakegpu_managed_where(p.at[2]), fakegpu_managed_where(p.at[3]), launches, st.launches_timed, st.swaps,
           st.promotions, lowest >> 20, headroom >> 20);
    CHECK(moved, "the pieces the whole reader names are not both in VRAM in place of the partial reader's: "
          "kernels weighed by namings alone\n");
    CHECK(st.launches_timed > 0, "no launch was timed\n");
    CHECK(lowest >= headroom, "free VRAM fell to %zu MiB, under the headroom\n", lowest >> 20);
    for (int i = 0; i < 8; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "block %d of the buffer has %llu wrong words after the moves\n", i, bad);
    }
    OK(cudaFree(buffer));
    balloon_stop(&other);
    return 0;
}

static int some_on_host(void *arg)
{
    void **buffer = arg;
    return on_host(dptr(*buffer), BUFFER * (vram / 16)) > 0;
}

/* gbtier ranges-demote BLOCK: live tiering on (GREENBOOST_TIERING=on), the buffer placed
 * in VRAM (movable); then another process takes all but half a block less than the
 * headroom: the shortfall is answered by demoting the buffer's parts, as many as it takes
 * (a run of them), not the whole buffer, every byte kept. */
int test_ranges_demote(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ranges-demote BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    CHECK(block == vram / 16, "the block is not a sixteenth of the device\n");
    char *buffer;
    OK(cudaMalloc((void **)&buffer, BUFFER * block));
    CHECK(in_vram(dptr(buffer)) && fakegpu_managed_where(dptr(buffer)) == 0, "the buffer is %s, where %d: want "
          "movable memory in VRAM\n", fakegpu_ptr_kind(dptr(buffer)), fakegpu_managed_where(dptr(buffer)));
    void *blocks[BUFFER];
    fill_blocks(buffer, block, blocks);
    struct balloon other = balloon_start(device_free() - (headroom - block / 2));
    size_t lowest = vram;
    int demoted = wait_for(some_on_host, &buffer, 0, &lowest);
    usleep(200 * 1000); /* twenty ticks more: nothing else should go */
    size_t host = on_host(dptr(buffer), BUFFER * block);
    struct shim_stats st = shim_stats();
    printf("ranges-demote: %zu of %zu MiB of the buffer on the host; %llu demotions (%llu MiB); %zu MiB free "
           "(headroom %zu MiB)\n", host >> 20, (BUFFER * block) >> 20, st.demotions, st.demoted_bytes >> 20,
           device_free() >> 20, headroom >> 20);
    CHECK(demoted, "nothing of the buffer was demoted for the other process\n");
    CHECK(host <= 4 * block, "%zu MiB of the buffer went to T2 for a shortfall of half a block: it moved (almost) "
          "whole\n", host >> 20);
    check_buffer(blocks, block, -1, "after the demotion");
    balloon_stop(&other);
    OK(cudaFree(buffer));
    return 0;
}
