/* gbtier swap BLOCK: roles swapped while kernels run (issue 36 item 3, issue 34 item 2).
 * gbtier make-room BLOCK: room made at once for an allocation made while computing.
 * gbtier ipc BLOCK: what IPC can export of movable VRAM (below).
 * gbtier attributes BLOCK: the pointer attributes of memory the shim made (below).
 * gbtier uncontested BLOCK: VRAM stays the driver's own where nobody contests it (below).
 *
 * Beside another process that leaves room for three blocks, the program loads three
 * "weight" blocks (VRAM, movable because the device is contested) and a fourth block,
 * which finds no room and goes to T2, then starts computing (a cuBLAS handle). Kernels
 * then name the fourth block, its working set, over and over (fk_fill_u32 launched through
 * cuLaunchKernel, the path the shim observes) and never the weights, while other
 * kernels keep verifying the weights as they move. Live tiering must move the working
 * set into VRAM by sending a weight block to T2 — inside the room this process holds,
 * free VRAM never under the headroom — and every byte must survive: the weights'
 * patterns and the working set's last fill. */
#define _GNU_SOURCE
#include "tier_tests.h"

#define WEIGHTS 3

struct swapped {
    void *working;
};

static int working_set_in_vram(void *arg)
{
    struct swapped *s = arg;
    return fakegpu_managed_where(dptr(s->working)) == 0 && shim_stats().swaps > 0;
}

int test_swap(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: swap BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    size_t room = WEIGHTS * block + block / 2; /* three blocks, not four */
    struct balloon other = balloon_start(device_free() - headroom - room);
    void *weights[WEIGHTS];
    for (int i = 0; i < WEIGHTS; i++) {
        OK(cudaMalloc(&weights[i], block));
        CHECK(!strcmp(fakegpu_ptr_kind(dptr(weights[i])), "managed") && fakegpu_managed_where(dptr(weights[i])) == 0,
              "weight block %d is %s, where %d: want movable memory in VRAM on a contested device\n", i,
              fakegpu_ptr_kind(dptr(weights[i])), fakegpu_managed_where(dptr(weights[i])));
        OK(fakegpu_launch_fill(dptr(weights[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    struct swapped s = { NULL };
    OK(cudaMalloc(&s.working, block));
    CHECK(shim_t2_bytes(s.working, block) == block, "the working set found VRAM (%llu T2 bytes): the room was "
          "planned for the weights only\n", shim_t2_bytes(s.working, block));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    CUfunction fill = fill_kernel();
    struct workload w = { weights, WEIGHTS, block, 0, 0, 0 };
    pthread_t verifier;
    CHECK(pthread_create(&verifier, NULL, keep_verifying, &w) == 0, "pthread_create\n");
    CUdeviceptr target = dptr(s.working);
    unsigned long long count = block / 4;
    unsigned value = 0;
    size_t lowest = vram;
    int moved = 0;
    for (int round = 0; round < 5000 && !moved; round++) {
        value = 1000 + (unsigned)round;
        fill_words(fill, target, value, count);
        OK(cudaDeviceSynchronize());
        size_t free_now = device_free();
        if (free_now < lowest)
            lowest = free_now;
        moved = working_set_in_vram(&s);
        usleep(2000);
    }
    w.stop = 1;
    pthread_join(verifier, NULL);
    struct shim_stats st = shim_stats();
    printf("swap: working set where %d, weights where %d %d %d; %llu swaps, %llu demotions, %llu promotions; "
           "lowest free %zu MiB (headroom %zu MiB); %llu verifying rounds, %llu wrong words\n",
           fakegpu_managed_where(target), fakegpu_managed_where(dptr(weights[0])),
           fakegpu_managed_where(dptr(weights[1])), fakegpu_managed_where(dptr(weights[2])), st.swaps, st.demotions,
           st.promotions, lowest >> 20, headroom >> 20, w.rounds, w.bad);
    CHECK(moved, "the working set, named by every launch, never reached VRAM: no swap of roles\n");
    CHECK(w.bad == 0, "the weights read %llu wrong words while they moved\n", w.bad);
    CHECK(lowest >= headroom, "free VRAM fell to %zu MiB, under the headroom: the swap took VRAM that was not "
          "this process's\n", lowest >> 20);
    check_blocks(weights, WEIGHTS, block, "after the swap");
    unsigned *back = malloc(block);
    CHECK(back, "malloc\n");
    OK(cudaMemcpy(back, s.working, block, 2));
    for (size_t i = 0; i < block / 4; i++)
        CHECK(back[i] == value, "working set word %zu is %u, want the last fill %u\n", i, back[i], value);
    free(back);
    for (int i = 0; i < WEIGHTS; i++)
        OK(cudaFree(weights[i]));
    OK(cudaFree(s.working));
    balloon_stop(&other);
    return 0;
}

/* gbtier ipc BLOCK: on a contested device, VRAM the shim made movable cannot be exported
 * by CUDA IPC: the program gets the driver's answer (CUDA_ERROR_INVALID_VALUE) and the
 * shim says why (the runner checks its message). With GBTEST_EXPECT=exported
 * (GREENBOOST_TIERING=off) the same allocation is the driver's own and exports. */
int test_ipc(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: ipc BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int exported = getenv("GBTEST_EXPECT") && !strcmp(getenv("GBTEST_EXPECT"), "exported");
    struct balloon other = balloon_start(device_free() - headroom - 4 * block);
    void *p;
    OK(cudaMalloc(&p, block));
    CHECK(in_vram(dptr(p)), "the allocation is %s, not in VRAM\n", fakegpu_ptr_kind(dptr(p)));
    CUipcMemHandle handle;
    CUresult rc = cuIpcGetMemHandle(&handle, dptr(p));
    printf("ipc: %s memory, cuIpcGetMemHandle -> %d\n", fakegpu_ptr_kind(dptr(p)), rc);
    if (exported)
        CHECK(rc == CUDA_SUCCESS, "live tiering off: the driver's own VRAM was not exported (%d)\n", rc);
    else
        CHECK(rc == CUDA_ERROR_INVALID_VALUE, "movable VRAM: want the driver's CUDA_ERROR_INVALID_VALUE, got %d\n", rc);
    /* A null handle: the driver's own answer, whatever the memory. */
    CHECK(cuIpcGetMemHandle(NULL, dptr(p)) == CUDA_ERROR_INVALID_VALUE, "a null handle was accepted\n");
    OK(cudaFree(p));
    balloon_stop(&other);
    return 0;
}

/* gbtier make-room BLOCK: three weight blocks fill the room this process has beside
 * another (movable VRAM: the device is contested); once the program computes, a block it
 * allocates goes to VRAM at once, a weight block going to T2 to make its room, every
 * byte kept and free VRAM never under the headroom; an allocation too small to be worth
 * a weight block's round trip goes to T2 instead.
 *
 * With WORKING (bytes, default BLOCK), the block allocated while computing has that size:
 * as many weight blocks as it takes make its room. A block and a quarter: one weight
 * block leaves a quarter wanted, and the next is more than twice that, yet it must go.
 *
 * It prints the most prefetches to the host in progress at once (with
 * FAKECUDA_PREFETCH_HOST_CALL_US, each takes that long inside the call).
 *
 * GBTEST_EXPECT=kept (FAKECUDA_MANAGED_KEEPS_VRAM=1, GREENBOOST_GIVE_BACK=off): the device
 * keeps the demoted weight's VRAM and the block takes fresh VRAM, under the headroom by
 * at most the block; what the driver keeps answers that drop (engine/room_kept.rs): over
 * 30 ticks no other weight block goes to T2. */
int test_make_room(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: make-room BLOCK [WORKING]\n");
    size_t block = strtoull(argv[2], NULL, 0);
    size_t size = argc >= 4 ? strtoull(argv[3], NULL, 0) : block;
    int victims = (int)((size + block - 1) / block);
    int kept = getenv("GBTEST_EXPECT") && !strcmp(getenv("GBTEST_EXPECT"), "kept");
    struct balloon other = balloon_start(device_free() - headroom - WEIGHTS * block - block / 2);
    void *weights[WEIGHTS];
    load_weights_then_compute(weights, WEIGHTS, block);
    void *working;
    OK(cudaMalloc(&working, size));
    struct shim_stats st = shim_stats();
    int demoted = 0;
    for (int i = 0; i < WEIGHTS; i++)
        demoted += fakegpu_managed_where(dptr(weights[i])) == -1;
    printf("make-room: working block %s (where %d, %llu T2 bytes); %d weight blocks in T2; %llu swaps; %zu MiB free "
           "(headroom %zu MiB); host prefetch calls at once %llu\n", fakegpu_ptr_kind(dptr(working)),
           fakegpu_managed_where(dptr(working)), shim_t2_bytes(working, size), demoted, st.swaps, device_free() >> 20,
           headroom >> 20, fakegpu_count("prefetch:host_calls_at_once"));
    CHECK(in_vram(dptr(working)) && shim_t2_bytes(working, size) == 0, "the block allocated while computing is "
          "not in VRAM: no room was made for it\n");
    CHECK(demoted == victims && st.swaps == (unsigned long long)victims, "%d weight blocks went to T2 (%llu swaps), "
          "want %d\n", demoted, st.swaps, victims);
    /* What `greenboost status` reads: the room made, as the shim counts it. */
    struct shim_published rec;
    CHECK(shim_published(getpid(), &rec) && rec.room_made_bytes == st.room_made_bytes && rec.room_made_bytes >= size,
          "the published record says %llu bytes of room made; the shim counts %llu\n", rec.room_made_bytes,
          st.room_made_bytes);
    if (kept) {
        CHECK(device_free() + block >= headroom, "free VRAM %zu MiB, more than a block under the headroom\n",
              device_free() >> 20);
        usleep(300000); /* 30 ticks of 10 ms */
        demoted = 0;
        for (int i = 0; i < WEIGHTS; i++)
            demoted += fakegpu_managed_where(dptr(weights[i])) == -1;
        printf("make-room: after 30 ticks %d weight blocks in T2, %llu demotions, %zu MiB free\n", demoted,
               shim_stats().demotions, device_free() >> 20);
        CHECK(demoted == 1, "%d weight blocks in T2 after 30 ticks: a tick demoted again for the drop the room "
              "made\n", demoted);
    } else {
        CHECK(device_free() >= headroom, "free VRAM %zu MiB, under the headroom\n", device_free() >> 20);
    }
    OK(fakegpu_launch_fill(dptr(working), size, 900, NULL));
    OK(cudaDeviceSynchronize());
    check_blocks(weights, WEIGHTS, block, "after making room");
    unsigned long long bad = 0;
    OK(fakegpu_launch_verify(dptr(working), size, 900, NULL, &bad));
    OK(cudaDeviceSynchronize());
    CHECK(bad == 0, "the working block has %llu wrong words\n", bad);
    /* Half a block fills what the room has left; then a quarter block finds none, and a
     * weight block is more than twice its size: it goes to T2. (With the device keeping
     * VRAM the room left is the device's to judge, and with another WORKING the room
     * left is another: not checked.) */
    if (!kept && size == block) {
        void *filler, *small;
        OK(cudaMalloc(&filler, block / 2));
        CHECK(shim_t2_bytes(filler, block / 2) == 0, "half a block did not fit the room left\n");
        OK(cudaMalloc(&small, block / 4));
        CHECK(shim_t2_bytes(small, block / 4) == block / 4 && shim_stats().swaps == 1, "a quarter block made "
              "room (%llu T2 bytes, %llu swaps): a weight's round trip for it\n", shim_t2_bytes(small, block / 4),
              shim_stats().swaps);
        OK(cudaFree(small));
        OK(cudaFree(filler));
    }
    OK(cudaFree(working));
    for (int i = 0; i < WEIGHTS; i++)
        OK(cudaFree(weights[i]));
    balloon_stop(&other);
    return 0;
}

/* Fails unless `p` answers as device memory the program allocated: the runtime's type
 * device on device 0 with no host pointer, the driver's memory type device, not managed,
 * no host pointer (refused alone, null among several). */
static void check_device_view(void *p, const char *what)
{
    struct cudaPointerAttributes a;
    memset(&a, 0x5a, sizeof a);
    OK(cudaPointerGetAttributes(&a, p));
    printf("attributes: %s (%s): type %d device %d devicePointer %p hostPointer %p\n", what,
           fakegpu_ptr_kind(dptr(p)), a.type, a.device, a.devicePointer, a.hostPointer);
    CHECK(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == p && !a.hostPointer,
          "%s: cudaPointerGetAttributes says type %d, device %d, host pointer %p: not the device memory the program "
          "allocated\n", what, a.type, a.device, a.hostPointer);
    unsigned managed = 0xaaaaaaaau, type = 0;
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dptr(p)));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(p)));
    void *host = NULL;
    CUresult host_rc = cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, dptr(p));
    CHECK(managed == 0 && type == CU_MEMORYTYPE_DEVICE && host_rc == CUDA_ERROR_INVALID_VALUE, "%s: the driver's "
          "view: managed %u, type %u, host pointer -> %d\n", what, managed, type, host_rc);
    int asked[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER };
    unsigned many_type = 0, many_managed = 1;
    void *many_host = (void *)1;
    CUdeviceptr many_device = 0;
    void *into[] = { &many_type, &many_managed, &many_host, &many_device };
    OK(cuPointerGetAttributes(4, asked, into, dptr(p)));
    CHECK(many_type == CU_MEMORYTYPE_DEVICE && many_managed == 0 && !many_host && many_device == dptr(p),
          "%s: cuPointerGetAttributes: type %u managed %u host %p device %#llx\n", what, many_type, many_managed,
          many_host, many_device);
}

/* gbtier attributes BLOCK: beside another process that leaves room for one block, two
 * blocks: the first in VRAM, the second in T2 (movable both, the device being contested;
 * with live tiering off, the driver's VRAM and pinned T2). Each answers every pointer
 * attribute query as device memory, as it would without the shim; host memory the device
 * does not know stays unregistered. */
int test_attributes(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: attributes BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    struct balloon other = balloon_start(device_free() - headroom - block - block / 2);
    void *in_vram_block, *in_t2_block;
    OK(cudaMalloc(&in_vram_block, block));
    OK(cudaMalloc(&in_t2_block, block));
    CHECK(shim_t2_bytes(in_vram_block, block) == 0 && shim_t2_bytes(in_t2_block, block) == block,
          "the blocks are not one in VRAM, one in T2 (%llu, %llu T2 bytes)\n", shim_t2_bytes(in_vram_block, block),
          shim_t2_bytes(in_t2_block, block));
    check_device_view(in_vram_block, "the block in VRAM");
    check_device_view(in_t2_block, "the block in T2");
    /* An interior pointer: the same answers. */
    check_device_view((char *)in_t2_block + 4096, "inside the block in T2");
    static char host_bytes[4096];
    struct cudaPointerAttributes a;
    OK(cudaPointerGetAttributes(&a, host_bytes));
    CHECK(a.type == cudaMemoryTypeUnregistered, "host memory the device does not know says type %d\n", a.type);
    OK(cudaFree(in_t2_block));
    OK(cudaFree(in_vram_block));
    balloon_stop(&other);
    return 0;
}

/* gbtier uncontested BLOCK: beside another process holding less than twice the headroom,
 * and on a device nobody else uses, what the program allocates in VRAM is the driver's own
 * memory (cudaMalloc's, IPC-exportable): movable VRAM is only for a contested device. */
int test_uncontested(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: uncontested BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    void *alone, *beside;
    OK(cudaMalloc(&alone, block));
    CHECK(!strcmp(fakegpu_ptr_kind(dptr(alone)), "vram"), "on a device nobody else uses, VRAM is %s\n",
          fakegpu_ptr_kind(dptr(alone)));
    struct balloon small = balloon_start(headroom + headroom / 2);
    OK(cudaMalloc(&beside, block));
    CHECK(!strcmp(fakegpu_ptr_kind(dptr(beside)), "vram"), "beside a process holding 1.5 headrooms, VRAM is %s\n",
          fakegpu_ptr_kind(dptr(beside)));
    CHECK(shim_stats().movable_allocs == 0, "%llu movable allocations on an uncontested device\n",
          shim_stats().movable_allocs);
    OK(cudaFree(beside));
    OK(cudaFree(alone));
    balloon_stop(&small);
    return 0;
}

/* gbtier pool BLOCK: on a contested device, what a program allocates from a memory pool it
 * names (cuMemAllocFromPoolAsync) stays the pool's memory, the driver's VRAM, where a
 * plain allocation of the same size becomes movable: a pool's memory may be exported to
 * other processes, and managed memory cannot be. */
int test_pool(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: pool BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    struct balloon other = balloon_start(device_free() - headroom - 4 * block);
    void *plain;
    OK(cudaMalloc(&plain, block)); /* the runtime makes the primary context current */
    CUmemoryPool pool;
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    CUstream s;
    OK(cuStreamCreate(&s, 1));
    CUdeviceptr from_pool = 0;
    OK(cuMemAllocFromPoolAsync(&from_pool, block, pool, s));
    OK(cuStreamSynchronize(s));
    printf("pool: from the pool %s, plain %s; %llu movable allocations\n", fakegpu_ptr_kind(from_pool),
           fakegpu_ptr_kind(dptr(plain)), shim_stats().movable_allocs);
    CHECK(!strcmp(fakegpu_ptr_kind(dptr(plain)), "managed"), "the plain allocation is %s: the device is not "
          "contested as planned\n", fakegpu_ptr_kind(dptr(plain)));
    CHECK(!strcmp(fakegpu_ptr_kind(from_pool), "vram"), "the pool's allocation is %s, not the driver's VRAM\n",
          fakegpu_ptr_kind(from_pool));
    OK(cuMemFreeAsync(from_pool, s));
    OK(cuStreamSynchronize(s));
    OK(cudaFree(plain));
    OK(cuStreamDestroy_v2(s));
    balloon_stop(&other);
    return 0;
}

/* gbtier scratch-room BLOCK: the staging scratch is working memory, and gets VRAM before
 * weights. A product's small operands, then WEIGHTS weight blocks, fill the room this
 * process has beside another (movable VRAM: the device is contested), and one more weight
 * block goes to T2. Once the program computes, products read that weight (A: 256 rows,
 * BLOCK / 1 KiB columns, every element 1; B: 32 columns of 2). The first finds no room
 * in the budget for its scratch and reads the weight in place; the next makes that room
 * (a weight block in VRAM goes to T2) and is staged: the device reads A from VRAM, and
 * every product's result is right (each element 2 * k). No room is made after that: over
 * 8 products at most the operand's bytes and 4 MiB are demoted (before 2026-12-05 every
 * product made a 2 MiB chunk of room more, for nothing wanted, where weights of 64 MiB
 * or more, cut into 2 MiB parts, gave it). */
int test_scratch_room(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: scratch-room BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int m = 256, n = 32, k = (int)(block / sizeof(float) / (size_t)m), products = 8;
    size_t b_bytes = (size_t)k * n * sizeof(float), c_bytes = (size_t)m * n * sizeof(float);
    float *host = malloc(block), *b, *c, *weights[WEIGHTS + 1];
    CHECK(host != NULL, "malloc\n");
    OK(cudaMalloc((void **)&b, b_bytes));
    OK(cudaMalloc((void **)&c, c_bytes));
    for (size_t i = 0; i < b_bytes / sizeof(float); i++)
        host[i] = 2.0f;
    OK(cudaMemcpy(b, host, b_bytes, 1 /* host to device */));
    struct balloon other = balloon_start(device_free() - headroom - WEIGHTS * block - block / 2);
    for (size_t i = 0; i < block / sizeof(float); i++)
        host[i] = 1.0f;
    for (int i = 0; i <= WEIGHTS; i++) {
        OK(cudaMalloc((void **)&weights[i], block));
        OK(cudaMemcpy(weights[i], host, block, 1));
    }
    float *a = weights[WEIGHTS];
    CHECK(shim_t2_bytes(a, block) == block, "the last weight block is not in T2 (%llu T2 bytes)\n",
          shim_t2_bytes(a, block));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    const float one = 1.0f, zero = 0.0f;
    for (int p = 0; p < products; p++) {
        OK(cublasSgemm_v2(h, 0, 0, m, n, k, &one, a, m, b, k, &zero, c, m));
        OK(cudaMemcpy(host, c, c_bytes, 2 /* device to host */));
        for (int i = 0; i < m * n; i++)
            CHECK(host[i] == 2.0f * (float)k, "product %d: element %d is %g, want %g\n", p, i, host[i],
                  2.0f * (float)k);
    }
    struct shim_stats st = shim_stats();
    int demoted = 0;
    for (int i = 0; i < WEIGHTS; i++)
        demoted += fakegpu_managed_where(dptr(weights[i])) == -1;
    printf("scratch-room: %llu of %d products staged; %d weight blocks went to T2 (%llu swaps); %zu MiB free "
           "(headroom %zu MiB)\n", st.gemm_staged, products, demoted, st.swaps, device_free() >> 20, headroom >> 20);
    CHECK(st.gemm_staged >= (unsigned long long)products - 1, "%llu of %d products staged: no room was made for "
          "the scratch\n", st.gemm_staged, products);
    CHECK(demoted > 0, "no weight block went to T2, yet the scratch got VRAM\n");
    CHECK(st.demoted_bytes <= block + (4UL << 20), "%llu MiB demoted in %llu moves for a scratch of one %zu MiB "
          "operand: room was made again after it had grown\n", st.demoted_bytes >> 20, st.demotions, block >> 20);
    for (int i = 0; i <= WEIGHTS; i++)
        OK(cudaFree(weights[i]));
    OK(cudaFree(b));
    OK(cudaFree(c));
    balloon_stop(&other);
    free(host);
    return 0;
}
