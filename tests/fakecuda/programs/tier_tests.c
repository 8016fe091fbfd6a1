/* gbtier: live tiering (shim/src/rules/tiering.rs, shim/src/engine/tier_thread.rs) on the fake device beside
 * another process: T2 allocations the device's state sent to T2 are movable; they move
 * to VRAM when it frees up and back when the other process needs it, at the same
 * address, data intact, kernels running on two streams meanwhile.
 *
 *   gbtier promote-demote BLOCK N   (GBTEST_EXPECT=nodemote: GREENBOOST_DEMOTE=off)
 *   gbtier budget BLOCK N           (GREENBOOST_TIERING=on under a budget)
 *   gbtier cap BLOCK                (GREENBOOST_T2_CAP of two blocks)
 *   gbtier free-moving BLOCK ROUNDS
 *   gbtier order BLOCK              (the hottest block is promoted first)
 *   gbtier second-device BLOCK      (FAKECUDA_DEVICES=2, GREENBOOST_TIERING=on, a budget
 *                                    of 2 blocks on device 1: moves stay on device 1)
 *   gbtier refresh BLOCK            (GREENBOOST_DEMOTE=off: what the driver evicted comes
 *                                    back once there is room)
 *   gbtier pair BLOCK               (FAKECUDA_PREFETCH_DELAY_US: two processes under the
 *                                    shim never promote into the same free VRAM)
 *   gbtier swap-kept BLOCK N        (FAKECUDA_MANAGED_KEEPS_VRAM=1: moves into VRAM take
 *                                    fresh VRAM; tier_kept.c)
 *   gbtier pressure-once BLOCK N    (the same device: a shortfall under pressure
 *                                    demoted once; tier_kept.c)
 *   gbtier working-set BLOCK N      (the same device: a working set allocated while
 *                                    computing gets VRAM; tier_kept.c)
 *
 * The other process is gbballoon (GBTEST_BALLOON_BIN), started and stopped here on the
 * device share file the runner names (FAKECUDA_DEVICE_SHARE), without the shim. The
 * runner sets FAKECUDA_VRAM, GREENBOOST_VRAM_HEADROOM (bytes) and
 * GREENBOOST_TIER_INTERVAL_MS. */
#define _GNU_SOURCE
#include "tier_tests.h"

static int test_promote_demote(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: promote-demote BLOCK N\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]);
    int demote = !getenv("GBTEST_EXPECT") || strcmp(getenv("GBTEST_EXPECT"), "nodemote");
    void *blocks[32];
    CHECK(n > 0 && n <= 32, "1 to 32 blocks\n");
    /* Room for half of the blocks beside the headroom. */
    struct balloon other = balloon_start(vram - headroom - (size_t)(n / 2) * block);
    int movable = allocate_blocks(blocks, n, block);
    struct shim_stats s0 = shim_stats();
    printf("%d of %d blocks movable in T2, %zu MiB free\n", movable, n, device_free() >> 20);
    /* The device is contested (the other process holds more than twice the headroom):
     * the blocks placed in VRAM are movable memory too. */
    CHECK(movable == n - n / 2 && s0.movable_allocs == (unsigned long long)n,
          "%d blocks movable in T2 (the shim counts %llu movable in all), want %d of %d\n", movable,
          s0.movable_allocs, n - n / 2, n);
    /* A forked child that only exits: the parent's tiering goes on (fork handlers). */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);

    struct workload w = { blocks, n, block, 0, 0, 0 };
    pthread_t worker;
    pthread_create(&worker, NULL, keep_verifying, &w);
    balloon_stop(&other);
    unsigned long long want = (unsigned long long)movable * block, in_vram = s0.tier_vram + want;
    size_t lowest = device_free();
    CHECK(wait_for(tier_vram_at_least, &in_vram, headroom, &lowest), "the other process left, yet only %llu of %llu "
          "movable bytes were promoted in 10 s (%llu promotions)\n", shim_stats().tier_vram - s0.tier_vram, want,
          shim_stats().promotions);
    for (int i = n / 2; i < n; i++) {
        CHECK(fakegpu_managed_where(dptr(blocks[i])) == 0 && shim_t2_bytes(blocks[i], block) == 0,
              "block %d promoted, yet the fake has it at %d and the shim counts %llu T2 bytes\n", i,
              fakegpu_managed_where(dptr(blocks[i])), shim_t2_bytes(blocks[i], block));
        /* Moved by prefetch alone: pages the driver evicts go to the host, where the
         * device reads them over the link, instead of faulting back to the device. */
        int preferred = 0;
        OK(cuMemRangeGetAttribute(&preferred, sizeof preferred, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                  dptr(blocks[i]), block));
        CHECK(preferred == CU_DEVICE_CPU, "block %d promoted with its preferred location moved to %d\n", i, preferred);
    }
    struct shim_stats s1 = shim_stats();
    printf("promoted %llu MiB in %llu moves; lowest free %zu MiB\n", s1.promoted_bytes >> 20, s1.promotions,
           lowest >> 20);
    CHECK(s1.promoted_bytes == want && s1.promotions == (unsigned long long)movable, "promoted %llu bytes in %llu "
          "moves, want %llu in %d\n", s1.promoted_bytes, s1.promotions, want, movable);
    check_blocks(blocks, n, block, "after promotion");
    /* What `greenboost status` reads: the process's own record, after the moves. */
    struct shim_published rec;
    CHECK(shim_published(getpid(), &rec) && rec.pid == (unsigned)getpid(), "no record of this process in /dev/shm\n");
    CHECK(rec.promoted_bytes == s1.promoted_bytes && rec.tier_vram == s1.tier_vram && rec.t2_used == s1.t2_used,
          "the published record says promoted %llu, in VRAM %llu, T2 %llu; the shim counts %llu, %llu, %llu\n",
          rec.promoted_bytes, rec.tier_vram, rec.t2_used, s1.promoted_bytes, s1.tier_vram, s1.t2_used);
    printf("published /dev/shm/greenboost-shim.%d\n", getpid());

    /* Another process takes all but half the headroom: the coldest block goes back. */
    struct balloon squeeze = balloon_start(device_free() - headroom / 2);
    unsigned long long one = block;
    size_t unused = vram;
    int demoted = wait_for(demoted_at_least, &one, 0, &unused);
    usleep(200000);
    struct shim_stats s2 = shim_stats();
    printf("another process leaves %zu MiB: demoted %llu MiB in %llu moves\n", device_free() >> 20,
           s2.demoted_bytes >> 20, s2.demotions);
    if (demote) {
        CHECK(demoted && s2.demotions == 1, "free VRAM below the headroom: %llu demotions, want 1\n", s2.demotions);
        CHECK(fakegpu_managed_where(dptr(blocks[n - 1])) == -1 && shim_t2_bytes(blocks[n - 1], block) == block,
              "the newest block (the coldest: no product read any) is not back in T2\n");
        CHECK(s2.promotions == s1.promotions, "a block was promoted again after the demotion\n");
    } else {
        CHECK(!demoted && s2.demotions == 0, "GREENBOOST_DEMOTE=off, yet %llu demotions\n", s2.demotions);
    }
    w.stop = 1;
    pthread_join(worker, NULL);
    CHECK(w.bad == 0 && w.rounds > 0, "kernels running during the moves saw %llu wrong words in %llu rounds\n", w.bad,
          w.rounds);
    check_blocks(blocks, n, block, "at the end");
    balloon_stop(&squeeze);
    for (int i = 0; i < n; i++)
        OK(cudaFree(blocks[i]));
    CHECK(fakegpu_managed_live() == 0 && fakegpu_vram_used() == 0, "%d managed allocations and %zu bytes of VRAM "
          "left after every free\n", fakegpu_managed_live(), fakegpu_vram_used());
    CHECK(shim_stats().t2_used == 0 && shim_stats().tier_vram == 0, "the shim still counts %llu T2 bytes, %llu "
          "movable in VRAM\n", shim_stats().t2_used, shim_stats().tier_vram);
    return 0;
}

static int test_budget(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: budget BLOCK N\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]);
    size_t budget = strtoull(getenv("GREENBOOST_VRAM_BUDGET"), NULL, 0);
    void *blocks[32];
    CHECK(n > 2 && n <= 32, "3 to 32 blocks\n");
    int movable = allocate_blocks(blocks, n, block);
    CHECK(movable > 0, "nothing went to T2 under a budget of %zu MiB\n", budget >> 20);
    usleep(300000);
    struct shim_stats s = shim_stats();
    CHECK(s.t1_used <= budget && s.promotions == 0, "the budget was full, yet %llu promotions (%llu bytes in VRAM)\n",
          s.promotions, s.t1_used);
    /* A VRAM block freed: one movable block fits the budget again, and only one. With
     * GREENBOOST_TIERING=on the blocks in VRAM are movable memory too. */
    int first_vram = -1;
    for (int i = 0; i < n && first_vram < 0; i++)
        if (shim_t2_bytes(blocks[i], block) == 0)
            first_vram = i;
    CHECK(first_vram >= 0, "no block in VRAM\n");
    OK(cudaFree(blocks[first_vram]));
    unsigned long long one = shim_stats().tier_vram + block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &one, 0, &lowest), "a block of the budget was freed, yet nothing was "
          "promoted\n");
    usleep(300000);
    s = shim_stats();
    printf("budget %zu MiB: %llu MiB in VRAM, %llu promotions\n", budget >> 20, s.t1_used >> 20, s.promotions);
    CHECK(s.t1_used <= budget && s.promotions == 1, "%llu promotions, %llu bytes in VRAM under a budget of %zu\n",
          s.promotions, s.t1_used, budget);
    for (int i = 0; i < n; i++)
        if (i != first_vram) {
            unsigned long long bad = 0;
            OK(fakegpu_launch_verify(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL, &bad));
            OK(cudaDeviceSynchronize());
            CHECK(bad == 0, "block %d: %llu wrong words\n", i, bad);
            OK(cudaFree(blocks[i]));
        }
    return 0;
}

static int test_cap(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: cap BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    /* Nothing fits beside the other process: every block goes to T2, whose cap is two. */
    struct balloon other = balloon_start(vram - headroom);
    void *blocks[3];
    for (int i = 0; i < 2; i++) {
        OK(cudaMalloc(&blocks[i], block));
        OK(fakegpu_launch_fill(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL));
    }
    cudaError_t rc = cudaMalloc(&blocks[2], block);
    CHECK(rc == cudaErrorMemoryAllocation, "a third block past the T2 cap -> %d, want %d\n", rc,
          cudaErrorMemoryAllocation);
    balloon_stop(&other);
    unsigned long long both = 2 * block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &both, headroom, &lowest), "the two blocks were not promoted\n");
    /* T2 is empty now: two more movable blocks fill its cap. */
    other = balloon_start(device_free() - headroom);
    void *more[2];
    for (int i = 0; i < 2; i++)
        OK(cudaMalloc(&more[i], block));
    /* The other process squeezes: demotion needs T2 room there is not. */
    struct balloon squeeze = balloon_start(device_free() - headroom / 2);
    usleep(300000);
    struct shim_stats s = shim_stats();
    printf("T2 at its cap: %llu demotions, %llu T2 bytes\n", s.demotions, s.t2_used);
    CHECK(s.demotions == 0 && s.t2_used <= 2 * block, "%llu demotions past the T2 cap (%llu T2 bytes)\n", s.demotions,
          s.t2_used);
    check_blocks(blocks, 2, block, "beside a full T2");
    balloon_stop(&squeeze);
    balloon_stop(&other);
    for (int i = 0; i < 2; i++) {
        OK(cudaFree(blocks[i]));
        OK(cudaFree(more[i]));
    }
    CHECK(fakegpu_managed_live() == 0, "%d managed allocations left\n", fakegpu_managed_live());
    return 0;
}

static int test_free_moving(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: free-moving BLOCK ROUNDS\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int rounds = atoi(argv[3]);
    cudaStream_t stream;
    OK(cudaStreamCreateWithFlags(&stream, 1));
    srand(7);
    for (int r = 0; r < rounds; r++) {
        struct balloon other = balloon_start(vram - headroom);
        void *blocks[4];
        for (int i = 0; i < 4; i++)
            OK(cudaMalloc(&blocks[i], block));
        balloon_stop(&other);
        /* Promotion starts within a tick; the frees race it, half of them stream-ordered
         * behind a kernel still reading the block. */
        usleep((useconds_t)(rand() % 30000));
        for (int i = 0; i < 4; i++) {
            if (i & 1) {
                unsigned long long bad = 0;
                OK(fakegpu_launch_verify(dptr(blocks[i]), block, 0, stream, &bad));
                OK(cudaFreeAsync(blocks[i], stream));
            } else {
                OK(cudaFree(blocks[i]));
            }
        }
        OK(cudaStreamSynchronize(stream));
        for (int ms = 0; ms < 2000 && fakegpu_managed_live() != 0; ms++)
            usleep(1000); /* stream-ordered frees are released once their stream passed them */
        CHECK(fakegpu_managed_live() == 0 && fakegpu_vram_used() == 0, "round %d: %d managed allocations and %zu "
              "bytes of VRAM left after the frees\n", r, fakegpu_managed_live(), fakegpu_vram_used());
    }
    /* The reclaim thread gives a stream-ordered free's charges back just after the
     * memory itself: wait for it. */
    struct shim_stats s = shim_stats();
    for (int ms = 0; ms < 2000 && (s.t1_used || s.t2_used || s.tier_vram); ms++) {
        usleep(1000);
        s = shim_stats();
    }
    printf("%d rounds: %llu promotions raced the frees\n", rounds, s.promotions);
    CHECK(s.t2_used == 0 && s.t1_used == 0 && s.tier_vram == 0, "the shim still counts T1 %llu, T2 %llu, movable in "
          "VRAM %llu\n", s.t1_used, s.t2_used, s.tier_vram);
    return 0;
}

/* Three movable blocks, products reading the middle one; then room for one block only:
 * that one moves first. Three other processes make the room: one holds the rest of the
 * device, one is stopped to open room, one takes back all but one block's worth first. */
static int test_order(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: order BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    size_t opened = block + headroom + headroom / 4 + block / 2; /* fits one block, not two */
    struct balloon rest = balloon_start(vram - headroom - opened);
    struct balloon opener = balloon_start(opened);
    void *blocks[3];
    CHECK(allocate_blocks(blocks, 3, block) == 3, "the three blocks are not all movable\n");
    /* Products whose weights are block 1: K x M floats, read by a 4-wide product. */
    int m = 1024, k = (int)(block / 4 / 1024), n = 4;
    float *x, *y, one = 1, zero = 0;
    OK(cudaMalloc((void **)&x, (size_t)k * n * 4));
    OK(cudaMalloc((void **)&y, (size_t)m * n * 4));
    OK(fakegpu_launch_fill(dptr(x), (size_t)k * n * 4, 5, NULL));
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    for (int i = 0; i < 3; i++)
        OK(cublasSgemm_v2(h, 1, 0, m, n, k, &one, blocks[1], k, x, k, &zero, y, m));
    OK(cudaDeviceSynchronize());
    /* All but a little of the room is taken first, then the opener leaves: room for one. */
    struct balloon taker = balloon_start(device_free() - headroom / 8);
    balloon_stop(&opener);
    unsigned long long want = block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &want, 0, &lowest), "room for one block opened, yet nothing was promoted\n");
    usleep(300000);
    struct shim_stats s = shim_stats();
    printf("room for one block: promoted %llu MiB in %llu moves; where: %d %d %d\n", s.promoted_bytes >> 20,
           s.promotions, fakegpu_managed_where(dptr(blocks[0])), fakegpu_managed_where(dptr(blocks[1])),
           fakegpu_managed_where(dptr(blocks[2])));
    CHECK(s.promotions == 1 && fakegpu_managed_where(dptr(blocks[1])) == 0,
          "the block the products read was not the one promoted (%llu promotions)\n", s.promotions);
    check_blocks(blocks, 3, block, "after promotion");
    balloon_stop(&taker);
    balloon_stop(&rest);
    OK(cudaFree(x));
    OK(cudaFree(y));
    for (int i = 0; i < 3; i++)
        OK(cudaFree(blocks[i]));
    return 0;
}

/* On device 1, with a budget of two blocks there: four blocks, two movable; one VRAM
 * block freed: one movable block moves into device 1's VRAM, none to device 0's. */
static int test_second_device(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: second-device BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    OK(cudaSetDevice(1));
    void *blocks[4];
    CHECK(allocate_blocks(blocks, 4, block) == 2, "two of four blocks should be movable on device 1\n");
    size_t device0 = fakegpu_vram_used_on(0);
    int first_vram = !strcmp(fakegpu_ptr_kind(dptr(blocks[0])), "managed") ? 1 : 0;
    OK(cudaFree(blocks[first_vram]));
    unsigned long long one = block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &one, 0, &lowest), "a block of device 1's budget was freed, yet nothing "
          "was promoted\n");
    int on_one = 0;
    for (int i = 0; i < 4; i++)
        if (i != first_vram && !strcmp(fakegpu_ptr_kind(dptr(blocks[i])), "managed"))
            on_one += fakegpu_managed_where(dptr(blocks[i])) == 1;
    printf("device 1: %d movable block(s) promoted there; device 0 VRAM %zu -> %zu\n", on_one, device0,
           fakegpu_vram_used_on(0));
    CHECK(on_one == 1 && fakegpu_managed_on_device(0) == 0, "promoted %d block(s) to device 1, %zu bytes to device "
          "0\n", on_one, fakegpu_managed_on_device(0));
    for (int i = 0; i < 4; i++)
        if (i != first_vram)
            OK(cudaFree(blocks[i]));
    return 0;
}

static int block_on_device(void *block) { return fakegpu_managed_where(dptr(block)) == 0; }

/* The driver evicts what was promoted for another process, unannounced (the fake's
 * eviction control); once the device has room again the shim moves it back. Run with
 * GREENBOOST_DEMOTE=off: the shim itself moves nothing out. */
static int test_refresh(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: refresh BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    void *blocks[2];
    struct balloon other = balloon_start(vram - headroom);
    int movable = allocate_blocks(blocks, 2, block);
    CHECK(movable == 2, "%d of 2 blocks movable beside the other process\n", movable);
    balloon_stop(&other);
    unsigned long long both = 2 * block;
    size_t lowest = vram;
    CHECK(wait_for(tier_vram_at_least, &both, 0, &lowest), "the blocks were not promoted\n");
    /* Another process needs VRAM: the driver takes block 0's, the process leaves under a
     * quarter of the headroom free. */
    CHECK(fakegpu_managed_evict(dptr(blocks[0])), "block 0 is not managed memory\n");
    struct balloon squeeze = balloon_start(device_free() - headroom / 8);
    usleep(100000); /* ten ticks under pressure */
    CHECK(fakegpu_managed_where(dptr(blocks[0])) == -1 && shim_stats().demotions == 0,
          "under pressure with demotion off: block 0 at %d, %llu demotions\n", fakegpu_managed_where(dptr(blocks[0])),
          shim_stats().demotions);
    balloon_stop(&squeeze);
    size_t unused = vram;
    int back = wait_for(block_on_device, blocks[0], 0, &unused);
    struct shim_stats s = shim_stats();
    printf("evicted block back on the device: %s; %llu promotions, %llu demotions, %llu MiB counted in VRAM\n",
           back ? "yes" : "no", s.promotions, s.demotions, s.tier_vram >> 20);
    CHECK(back, "the evicted block stayed on the host after the other process left (the shim counts it in VRAM)\n");
    CHECK(fakegpu_managed_where(dptr(blocks[1])) == 0 && s.promotions == 2 && s.tier_vram == both,
          "block 1 at %d, %llu promotions, %llu bytes in VRAM: the refresh is no move in the counters\n",
          fakegpu_managed_where(dptr(blocks[1])), s.promotions, s.tier_vram);
    check_blocks(blocks, 2, block, "after the refresh");
    for (int i = 0; i < 2; i++)
        OK(cudaFree(blocks[i]));
    return 0;
}

/* ---- two processes under the shim on one device ---- */

/* The other process of `pair`: the same program under the shim, started by the test.
 * Allocates 2 movable blocks beside the balloons, says "ready", then after its stdin
 * says "check" verifies them and says what it promoted; exits at end of input. */
static int test_pair_child(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: pair-child BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    void *blocks[2];
    int movable = allocate_blocks(blocks, 2, block);
    printf("ready %d\n", movable);
    char line[64];
    while (fgets(line, sizeof line, stdin) && strncmp(line, "check", 5))
        ;
    check_blocks(blocks, 2, block, "the other process");
    printf("promoted %llu\n", shim_stats().promoted_bytes);
    while (fgets(line, sizeof line, stdin))
        ;
    for (int i = 0; i < 2; i++)
        OK(cudaFree(blocks[i]));
    return 0;
}

struct watch { volatile int stop; size_t lowest; };

static void *watch_free(void *arg)
{
    struct watch *w = arg;
    while (!w->stop) {
        size_t free_now = device_free();
        if (free_now < w->lowest)
            w->lowest = free_now;
        usleep(100);
    }
    return NULL;
}

/* Two processes under the shim, each with 2 movable blocks; room opens for 2 blocks
 * beyond the headroom and its slack. Each alone would promote both of its blocks; at
 * once (FAKECUDA_PREFETCH_DELAY_US makes moves take time) they would promote 4 into
 * the room for 2 unless one measures after the other's moves landed (the host-wide
 * tiering lock): free VRAM must never fall below the headroom. */
static int test_pair(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: pair BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    size_t room = headroom / 4 + block * 5 / 2;
    struct balloon stays = balloon_start(vram - headroom - room);
    struct balloon leaves = balloon_start(room);
    int to_child[2], from_child[2];
    CHECK(pipe(to_child) == 0 && pipe(from_child) == 0, "pipe\n");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork\n");
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[1]);
        close(from_child[0]);
        execl("/proc/self/exe", "gbtier", "pair-child", argv[2], (char *)NULL);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    FILE *child_out = fdopen(from_child[0], "r");
    char line[128] = "";
    CHECK(fgets(line, sizeof line, child_out) && !strcmp(line, "ready 2\n"), "the other process: %s", line);
    void *blocks[2];
    int movable = allocate_blocks(blocks, 2, block);
    CHECK(movable == 2, "%d of 2 blocks movable here\n", movable);

    struct watch w = { 0, vram };
    pthread_t watcher;
    pthread_create(&watcher, NULL, watch_free, &w);
    balloon_stop(&leaves);
    usleep(1500000);
    w.stop = 1;
    pthread_join(watcher, NULL);
    CHECK(write(to_child[1], "check\n", 6) == 6, "write\n");
    CHECK(fgets(line, sizeof line, child_out) && !strncmp(line, "promoted ", 9), "the other process: %s", line);
    unsigned long long theirs = strtoull(line + 9, NULL, 0), ours = shim_stats().promoted_bytes;
    printf("room for %zu MiB beyond the headroom: promoted %llu MiB here, %llu MiB there; lowest free %zu MiB "
           "(headroom %zu MiB)\n", room >> 20, ours >> 20, theirs >> 20, w.lowest >> 20, headroom >> 20);
    CHECK(w.lowest >= headroom, "free VRAM fell to %zu MiB, under the %zu MiB headroom: both processes promoted "
          "into the same room\n", w.lowest >> 20, headroom >> 20);
    CHECK(ours + theirs == 2 * block, "%llu bytes promoted in all, want the 2 blocks the room holds\n", ours + theirs);
    check_blocks(blocks, 2, block, "here");
    close(to_child[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(child_out);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other process failed (status %d)\n", status);
    balloon_stop(&stays);
    for (int i = 0; i < 2; i++)
        OK(cudaFree(blocks[i]));
    return 0;
}

int main(int argc, char **argv)
{
    static const struct named_test tests[] = {
        { "promote-demote", test_promote_demote },
        { "budget", test_budget },
        { "cap", test_cap },
        { "free-moving", test_free_moving },
        { "order", test_order },
        { "second-device", test_second_device },
        { "refresh", test_refresh },
        { "pair", test_pair },
        { "pair-child", test_pair_child },
        { "swap", test_swap },
        { "swap-kept", test_swap_kept },
        { "pressure-once", test_pressure_once },
        { "working-set", test_working_set },
        { "room-churn", test_room_churn },
        { "ipc", test_ipc },
        { "make-room", test_make_room },
        { "scratch-room", test_scratch_room },
        { "attributes", test_attributes },
        { "uncontested", test_uncontested },
        { "pool", test_pool },
        { "bound-pool", test_bound_pool },
        { "bound-load", test_bound_load },
        { "bound-tensors", test_bound_tensors },
        { "demote-host-short", test_demote_host_short },
        { "ranges", test_ranges },
        { "ranges-room", test_ranges_room },
        { "kernel-times", test_kernel_times },
        { "vram-times", test_vram_times },
        { "ranges-demote", test_ranges_demote },
        { "cycle", test_cycle },
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    vram = fakegpu_vram_total();
    /* The runner sets the headroom in bytes, as the shim reads it. */
    const char *h = getenv("GREENBOOST_VRAM_HEADROOM");
    headroom = h ? strtoull(h, NULL, 0) : 0;
    CHECK(headroom > 0, "GREENBOOST_VRAM_HEADROOM must be set (bytes)\n");
    return run_named_test(tests, sizeof tests / sizeof *tests, argc, argv, NULL);
}
