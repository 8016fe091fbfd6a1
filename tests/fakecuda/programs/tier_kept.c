/* gbtier swap-kept BLOCK N [STEP [HOT [RISE [BACK]]]] (FAKECUDA_MANAGED_KEEPS_VRAM=1): a swap
 * of roles on a device that keeps the VRAM managed pages leave and gives pages moving in
 * fresh VRAM unless they come back to the chunks they left, the worst case the H200
 * showed (bench/results/movable-vram-probe-2026-12-05.md: after a 1.9 GB swap free VRAM
 * fell from 1525 to 3 MiB).
 *
 * Beside another process that leaves room for N weight blocks and half a block, the
 * program loads N weight blocks (movable VRAM: the device is contested) and N working
 * blocks, which find no room and go to T2. Then one launch after another names every
 * working block at once (fk_struct, 16 pointers, no word written) and never the weights,
 * while other kernels keep verifying the weights: one tick swaps every working block
 * with a weight block. Its moves out free nothing the device shows; its moves in take
 * fresh VRAM, in groups of at most the tier thread's ARRIVAL_GROUP_BYTES (256 MiB: N
 * blocks of BLOCK bytes are more than one group, and each block, under 64 MiB, is one
 * run).
 *
 * The bound, from shim/src/engine/tier_thread.rs and shim/src/rules/tiering.rs: the plan
 * lets moves into VRAM take Room::fillable = free - (headroom + headroom / 4) of free
 * VRAM (none here: free VRAM is the headroom and half a block before the swap);
 * Arrivals::group_may_take reads free VRAM before each group, lets the next go while the
 * groups before it took no more than that, and makes it no larger than what the plan
 * still has but one run at least, so the last group takes at most one run (a block)
 * past it. Free VRAM must never fall below
 *     min(free before the swap, headroom + headroom / 4) - BLOCK,
 * and the shim must say "the rest wait" (the runner checks its log). Afterwards no tick
 * swaps while free VRAM is under the headroom (Room::driver_keeps), and the VRAM
 * the swap moved out, which the device keeps, answers the shortfall its moves in made
 * (Carried::after): nothing is demoted, what moved in stays. Every byte survives.
 *
 * With STEP, the launches name STEP more working blocks every 60 rounds (over ten ticks)
 * instead of all at once: each swap's first group goes whatever the plan, and takes
 * fresh VRAM past it. The bound holds only if the first of them is remembered (the tier
 * thread reads free VRAM once more after its last group): else every later one takes
 * one more run, the ticks between demoting weights to answer the shortfall each left,
 * and free VRAM ratchets down.
 *
 * Those two cases run with GREENBOOST_GIVE_BACK=off: they are what the tier thread falls
 * back to where giving the kept VRAM back fails. With GBTEST_EXPECT=given_back (the
 * GREENBOOST_GIVE_BACK=on), the tick gives back what its moves out left the device
 * (shim/src/engine/give_back.rs: one allocation of free VRAM and that much more, freed at
 * once), so its moves in find it free: every working block swaps in, the device keeps
 * nothing, and free VRAM ends where it began (the weights gave the room). Free VRAM is
 * not checked between: for the moment of a give-back the shim holds all of it. A
 * give-back is made only while the process keeps at least the headroom of managed memory
 * in VRAM besides, which the driver can evict for another process's allocation during
 * that moment: HOT more blocks (GREENBOOST_TIERING=on), loaded before the other process
 * starts and named with the working blocks at every round (never colder than them: they
 * stay), are that memory. */
#define _GNU_SOURCE
#include "tier_tests.h"

#define ARRIVAL_GROUP (256UL << 20) /* the tier thread's ARRIVAL_GROUP_BYTES */
#define MAX_WORKING 8

/* GBTEST_EXPECT=given_back: the shim gives back the VRAM the device keeps. */
static int expects_given_back(void)
{
    const char *expect = getenv("GBTEST_EXPECT");
    return expect && !strcmp(expect, "given_back");
}

static int in_vram_count(void **blocks, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += fakegpu_managed_where(dptr(blocks[i])) == 0;
    return k;
}

/* One round of launches naming `blocks`, waited for; *lowest keeps the lowest free VRAM
 * seen after it. */
static void name_round(CUfunction f, void **blocks, int n, size_t *lowest)
{
    name_all(f, blocks, n);
    OK(cudaDeviceSynchronize());
    size_t free_now = device_free();
    *lowest = free_now < *lowest ? free_now : *lowest;
    usleep(2000);
}

/* With RISE: once the swap has settled, the extra process holding RISE blocks exits, and
 * free VRAM rises past the headroom, though not past its slack (headroom + headroom / 4)
 * by a block. The shim knows by now that the driver keeps what moves out leave, so swaps
 * move in only what free VRAM beyond the slack holds (tiering::Room::driver_keeps): none
 * here. Free VRAM must not fall under the slack (or where it stood, if lower) while the
 * working blocks stay hot; before, swaps went on and took fresh VRAM past the plan each
 * time free VRAM came back to the headroom. */
static void check_rise(struct balloon *extra, CUfunction f, void **working, int named, size_t slack)
{
    unsigned long long swaps_before = shim_stats().swaps;
    balloon_stop(extra);
    size_t risen = device_free(), floor = risen < slack ? risen : slack, lowest = risen;
    for (int round = 0; round < 300; round++) /* over 60 ticks */
        name_round(f, working, named, &lowest);
    printf("swap-kept: the extra process left, free VRAM %zu MiB (slack %zu MiB), lowest %zu MiB after; %llu swaps "
           "after it\n", risen >> 20, slack >> 20, lowest >> 20, shim_stats().swaps - swaps_before);
    CHECK(risen >= headroom, "free VRAM rose to %zu MiB only, under the %zu MiB headroom: the test says nothing\n",
          risen >> 20, headroom >> 20);
    CHECK(lowest >= floor, "free VRAM fell to %zu MiB after it rose to %zu MiB, under %zu MiB: swaps moved in past "
          "the free VRAM beyond the headroom's slack, where the driver was known to keep what moves out leave\n",
          lowest >> 20, risen >> 20, floor >> 20);
}

/* wait_for's `done`: the shim's kept VRAM is the device's, and its record (greenboost
 * status) says so. It books a move once landed, a moment after the device shows it. */
static int kept_booked(void *unused)
{
    struct shim_published rec;
    return shim_stats().kept_vram == fakegpu_vram_kept() && shim_published(getpid(), &rec) &&
           rec.kept_vram == shim_stats().kept_vram;
}

/* With BACK: once the swap has settled, launches name only the weights and the working
 * blocks go unread. The weights the swap moved out are the hotter now: as many as there are
 * working blocks in VRAM swap back, each into the VRAM chunks it left, which the device
 * kept for it (as NVIDIA's driver does: managed_move_page in the fake), so free VRAM does
 * not fall, though it stands under the headroom and swaps were seen to take fresh VRAM
 * before (tiering::Candidate::chunks_kept). Before that rule they stayed in T2, swaps
 * moving in only into free VRAM past the slack. (The other weights stay in T2: under the
 * headroom nothing is promoted, kept chunks or not.) */
static void check_back(CUfunction f, void **weights, void **working, int n, size_t block)
{
    size_t start = device_free(), lowest = start;
    unsigned long long swaps_before = shim_stats().swaps;
    int want = in_vram_count(working, n), back = 0;
    CHECK(want > 0, "no working block in VRAM: nothing to swap back\n");
    for (int round = 0; round < 2000 && (back = in_vram_count(weights, n)) < want; round++)
        name_round(f, weights, n, &lowest);
    printf("swap-kept: the working blocks unread, %d of %d weight blocks back in VRAM after %llu swaps; free VRAM %zu "
           "MiB, lowest %zu MiB after\n", back, n, shim_stats().swaps - swaps_before, start >> 20, lowest >> 20);
    CHECK(back == want && in_vram_count(working, n) == 0, "%d weight blocks back in VRAM, %d working blocks left "
          "there, once the working blocks went unread; want %d and none: the swaps did not let the weights take back "
          "the VRAM chunks they left\n", back, in_vram_count(working, n), want);
    CHECK(lowest >= start, "free VRAM fell from %zu to %zu MiB: the weights moving back took fresh VRAM\n",
          start >> 20, lowest >> 20);
    struct shim_published rec;
    size_t unused = SIZE_MAX;
    wait_for(kept_booked, NULL, 0, &unused);
    CHECK(shim_stats().kept_vram == fakegpu_vram_kept(), "the shim counts %llu MiB kept for its parts in T2, the "
          "device keeps %zu MiB\n", shim_stats().kept_vram >> 20, fakegpu_vram_kept() >> 20);
    CHECK(shim_published(getpid(), &rec) && rec.kept_vram == shim_stats().kept_vram, "the published record says "
          "%llu MiB kept; the shim counts %llu\n", rec.kept_vram >> 20, shim_stats().kept_vram >> 20);
    for (int i = 0; i < n; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(working[i]), block, 800 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "working block %d has %llu wrong words after it swapped out\n", i, bad);
    }
}

int test_swap_kept(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: swap-kept BLOCK N [STEP [HOT [RISE [BACK]]]]\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]), step = argc > 4 ? atoi(argv[4]) : n, hot_n = argc > 5 ? atoi(argv[5]) : 0;
    int rise = argc > 6 ? atoi(argv[6]) : 0, back = argc > 7 && atoi(argv[7]);
    CHECK(hot_n >= 0 && hot_n <= MAX_WORKING, "HOT %d: 0 to %d\n", hot_n, MAX_WORKING);
    CHECK(n > 0 && n <= MAX_WORKING && (size_t)n * block > ARRIVAL_GROUP && block < (64UL << 20),
          "%d blocks of %zu MiB: want more than one arrival group in runs of one block each\n", n, block >> 20);
    CHECK(step > 0 && step <= n, "STEP %d: 1 to %d\n", step, n);
    const char *keeps = getenv("FAKECUDA_MANAGED_KEEPS_VRAM");
    CHECK(keeps && !strcmp(keeps, "1"), "needs FAKECUDA_MANAGED_KEEPS_VRAM=1\n");
    int given_back = expects_given_back();
    void *weights[MAX_WORKING], *working[MAX_WORKING], *hot[MAX_WORKING];
    /* Before the other process: VRAM for certain (GREENBOOST_TIERING=on: movable). */
    for (int i = 0; i < hot_n; i++) {
        OK(cudaMalloc(&hot[i], block));
        CHECK(fakegpu_managed_where(dptr(hot[i])) == 0, "hot block %d is %s, where %d: want movable VRAM "
              "(GREENBOOST_TIERING=on)\n", i, fakegpu_ptr_kind(dptr(hot[i])), fakegpu_managed_where(dptr(hot[i])));
    }
    struct balloon other = balloon_start(device_free() - headroom - (size_t)(n + rise) * block - block / 2);
    struct balloon extra = { 0, NULL };
    if (rise > 0)
        extra = balloon_start((size_t)rise * block);
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&weights[i], block));
        CHECK(!strcmp(fakegpu_ptr_kind(dptr(weights[i])), "managed") && fakegpu_managed_where(dptr(weights[i])) == 0,
              "weight block %d is %s, where %d: want movable memory in VRAM on a contested device\n", i,
              fakegpu_ptr_kind(dptr(weights[i])), fakegpu_managed_where(dptr(weights[i])));
        OK(fakegpu_launch_fill(dptr(weights[i]), block, 700 + (uint32_t)i, NULL));
    }
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&working[i], block));
        CHECK(shim_t2_bytes(working[i], block) == block, "working block %d found VRAM (%llu T2 bytes): the room "
              "was planned for the weights only\n", i, shim_t2_bytes(working[i], block));
        OK(fakegpu_launch_fill(dptr(working[i]), block, 800 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    cublasHandle_t h;
    OK(cublasCreate_v2(&h)); /* the program computes from here on */
    size_t before = device_free(), slack = headroom + headroom / 4;
    size_t allowed = before < slack ? before : slack;
    CHECK(allowed > block, "free VRAM %zu MiB: the bound would say nothing\n", allowed >> 20);
    size_t bound = allowed - block, lowest = before;
    CUfunction f = struct_kernel();
    struct workload w = { weights, n, block, 0, 0, 0 };
    pthread_t verifier;
    CHECK(pthread_create(&verifier, NULL, keep_verifying, &w) == 0, "pthread_create\n");
    int swapped_at = -1, named = step, round;
    /* Until 100 rounds (over 20 ticks) after the first swap with every block named: later
     * ticks must not add to it. */
    for (round = 0; round < 5000 && (swapped_at < 0 || round - swapped_at < 100); round++) {
        if (swapped_at >= 0 && named < n && round - swapped_at >= 60) {
            named = named + step < n ? named + step : n;
            swapped_at = round;
        }
        name_all(f, working, named);
        if (hot_n > 0)
            name_all(f, hot, hot_n);
        OK(cudaDeviceSynchronize());
        size_t free_now = device_free();
        if (free_now < lowest)
            lowest = free_now;
        if (swapped_at < 0 && shim_stats().swaps > 0)
            swapped_at = round;
        usleep(2000);
    }
    w.stop = 1;
    pthread_join(verifier, NULL);
    struct shim_stats st = shim_stats();
    int moved_in = in_vram_count(working, n), weights_in = in_vram_count(weights, n);
    printf("swap-kept: %d of %d working blocks in VRAM, %d weight blocks; %llu swaps, %llu demotions; free VRAM "
           "%zu MiB before, lowest %zu MiB, bound %zu MiB (headroom %zu MiB); the device keeps %zu MiB; %llu "
           "verifying rounds, %llu wrong words\n", moved_in, n, weights_in, st.swaps, st.demotions, before >> 20,
           lowest >> 20, bound >> 20, headroom >> 20, fakegpu_vram_kept() >> 20, w.rounds, w.bad);
    CHECK(swapped_at >= 0, "no swap of roles\n");
    if (given_back) {
        size_t after = device_free();
        /* What was given back first: without the give-back, how many blocks the swaps
         * moved in depends on whether a tick found the device drained (`Room::drained`). */
        CHECK(fakegpu_vram_kept() == 0 && st.given_back_bytes >= st.swaps * block, "the device keeps %zu MiB after "
              "%llu swaps of %zu MiB: %llu MiB given back\n", fakegpu_vram_kept() >> 20, st.swaps, block >> 20,
              st.given_back_bytes >> 20);
        CHECK(moved_in == n, "%d of %d working blocks moved in: the VRAM the swaps moved out was not given back to "
              "their moves in (%llu MiB given back in %llu)\n", moved_in, n, st.given_back_bytes >> 20, st.give_backs);
        CHECK(after + block / 2 >= before, "free VRAM %zu MiB after the swaps, %zu MiB before: they took more than "
              "the weights gave\n", after >> 20, before >> 20);
        CHECK(st.demotions == st.swaps, "%llu moves to T2 besides the swaps' %llu\n", st.demotions - st.swaps,
              st.swaps);
    } else {
        CHECK(fakegpu_vram_kept() >= st.swaps * block, "the device keeps %zu MiB, less than the swaps moved out: "
              "FAKECUDA_MANAGED_KEEPS_VRAM did nothing\n", fakegpu_vram_kept() >> 20);
        CHECK(lowest >= bound, "free VRAM fell to %zu MiB, under %zu MiB: the moves into VRAM took more than one "
              "run (%zu MiB) past the plan's %zu MiB\n", lowest >> 20, bound >> 20, block >> 20,
              (before - allowed) >> 20);
        CHECK(moved_in > 0, "no working block stayed in VRAM\n");
        CHECK(moved_in < n, "all %d working blocks moved in: nothing stopped the moves into VRAM\n", n);
        CHECK(st.demotions == st.swaps, "%llu moves to T2 besides the swaps' %llu: a shortfall the swap made itself "
              "was not answered by what it moved out\n", st.demotions - st.swaps, st.swaps);
    }
    CHECK(w.bad == 0, "the weights read %llu wrong words while they moved\n", w.bad);
    check_blocks(weights, n, block, "after the swap");
    for (int i = 0; i < n; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(working[i]), block, 800 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "working block %d (%s) has %llu wrong words\n", i,
              fakegpu_managed_where(dptr(working[i])) == 0 ? "VRAM" : "T2", bad);
    }
    CHECK(in_vram_count(hot, hot_n) == hot_n, "%d of %d hot blocks in VRAM: a swap took one\n",
          in_vram_count(hot, hot_n), hot_n);
    if (rise > 0)
        check_rise(&extra, f, working, named, slack);
    if (back)
        check_back(f, weights, working, n, block);
    check_blocks(weights, n, block, "at the end");
    for (int i = 0; i < n; i++) {
        OK(cudaFree(weights[i]));
        OK(cudaFree(working[i]));
    }
    for (int i = 0; i < hot_n; i++)
        OK(cudaFree(hot[i]));
    CHECK(fakegpu_vram_kept() == 0, "%zu MiB still kept after every managed allocation was freed\n",
          fakegpu_vram_kept() >> 20);
    balloon_stop(&other);
    return 0;
}

/* gbtier pressure-once BLOCK N [LEFT_EIGHTHS] (FAKECUDA_MANAGED_KEEPS_VRAM=1,
 * GREENBOOST_TIERING=on): a
 * shortfall under pressure is answered once. The program holds N blocks of movable VRAM;
 * then another process (gbballoon) takes all but an eighth of the headroom, so that free
 * VRAM is under a quarter of it (Room::pressing: the driver may be evicting for someone).
 * The device keeps the VRAM the demoted pages leave: free VRAM does not rise, and stays
 * under a quarter of the headroom throughout.
 *
 * The bound, from shim/src/rules/tiering.rs: with free VRAM under the headroom the tick's
 * shortfall is headroom - free - answered (Room::shortfall), where answered is what was
 * demoted since free VRAM last stood at the headroom (Carried, reset only once free VRAM
 * is back there: never here). `demotions` sends blocks to T2, coldest first, until they
 * make at least the shortfall, so the tick that answers it demotes less than the
 * shortfall plus one block; after it the shortfall is 0 and nothing answers it again
 * (no swaps while pressing either: nothing read any block). Over 3 s of ticks (10 ms
 * each), the demoted bytes must be at least the shortfall and under shortfall + BLOCK;
 * the other blocks stay in VRAM, every byte intact, kernels verifying them throughout.
 * The rule before 6c95954 demoted another shortfall's worth at every tick while
 * pressing, answered or not: every block went to T2 within a few ticks (on the H200, all
 * 18 GB of a model's movable VRAM, a 60x slower prefill). Nothing is given back
 * (shim/src/engine/give_back.rs): under pressure the driver may have evicted the demoted
 * pages for the other process already, so that it keeps none of their chunks.
 *
 * With LEFT_EIGHTHS (the other process leaves that many eighths of the headroom free, 1
 * by default: pressing) and GBTEST_EXPECT=given_back, not pressing: the tick that demoted
 * gives back what the device kept of it, free VRAM rises to the headroom, where the other
 * process (and nvidia-smi) sees it, and the device keeps nothing; the rest holds as
 * above. */
int test_pressure_once(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: pressure-once BLOCK N [LEFT_EIGHTHS]\n");
    size_t left_eighths = argc > 4 ? strtoull(argv[4], NULL, 0) : 1;
    CHECK(left_eighths > 0 && left_eighths < 8, "LEFT_EIGHTHS %zu: 1 to 7\n", left_eighths);
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]);
    void *blocks[16];
    CHECK(n > 2 && n <= 16, "3 to 16 blocks\n");
    const char *keeps = getenv("FAKECUDA_MANAGED_KEEPS_VRAM");
    CHECK(keeps && !strcmp(keeps, "1"), "needs FAKECUDA_MANAGED_KEEPS_VRAM=1\n");
    int given_back = expects_given_back();
    for (int i = 0; i < n; i++) {
        OK(cudaMalloc(&blocks[i], block));
        CHECK(!strcmp(fakegpu_ptr_kind(dptr(blocks[i])), "managed") && fakegpu_managed_where(dptr(blocks[i])) == 0,
              "block %d is %s, where %d: want movable memory in VRAM (GREENBOOST_TIERING=on)\n", i,
              fakegpu_ptr_kind(dptr(blocks[i])), fakegpu_managed_where(dptr(blocks[i])));
        OK(fakegpu_launch_fill(dptr(blocks[i]), block, 700 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    CHECK(device_free() >= headroom + block, "only %zu MiB free beside %d blocks: the device is too small\n",
          device_free() >> 20, n);
    struct workload w = { blocks, n, block, 0, 0, 0 };
    pthread_t verifier;
    CHECK(pthread_create(&verifier, NULL, keep_verifying, &w) == 0, "pthread_create\n");
    /* Someone else needs VRAM: free VRAM under a quarter of the headroom. */
    struct balloon other = balloon_start(device_free() - headroom * left_eighths / 8);
    /* What the other process leaves, not a reading: the tick may already have answered it
     * and be giving back, holding all free VRAM for that moment (read then, it was 0). */
    size_t pressed = headroom * left_eighths / 8, shortfall = headroom - pressed, highest = pressed, lowest = pressed;
    size_t read_free = device_free();
    CHECK(left_eighths > 1 || read_free < headroom / 4, "%zu MiB free: not under a quarter of the %zu MiB headroom\n",
          read_free >> 20,
          headroom >> 20);
    unsigned long long answered = shortfall;
    int demoted = wait_for(demoted_at_least, &answered, 0, &lowest);
    for (int ms = 0; ms < 3000; ms++) { /* 300 ticks more: nothing else should go */
        size_t free_now = device_free();
        highest = free_now > highest ? free_now : highest;
        lowest = free_now < lowest ? free_now : lowest;
        usleep(1000);
    }
    w.stop = 1;
    pthread_join(verifier, NULL);
    struct shim_stats st = shim_stats();
    int in_vram_now = in_vram_count(blocks, n);
    printf("pressure-once: %zu MiB free under a %zu MiB headroom (shortfall %zu MiB, free VRAM %zu-%zu MiB "
           "meanwhile): demoted %llu MiB in %llu moves, bound %zu MiB; %d of %d blocks in VRAM; the device keeps "
           "%zu MiB; %llu verifying rounds, %llu wrong words\n", pressed >> 20, headroom >> 20, shortfall >> 20,
           lowest >> 20, highest >> 20, st.demoted_bytes >> 20, st.demotions, (shortfall + block) >> 20, in_vram_now,
           n, fakegpu_vram_kept() >> 20, w.rounds, w.bad);
    CHECK(demoted, "nothing answered the %zu MiB shortfall in 10 s (%llu MiB demoted)\n", shortfall >> 20,
          st.demoted_bytes >> 20);
    if (given_back)
        CHECK(highest >= headroom && fakegpu_vram_kept() == 0, "free VRAM rose to %zu MiB at most, the headroom is "
              "%zu MiB; the device keeps %zu MiB of the %llu MiB demoted (%llu MiB given back)\n", highest >> 20,
              headroom >> 20, fakegpu_vram_kept() >> 20, st.demoted_bytes >> 20, st.given_back_bytes >> 20);
    else
        CHECK(highest < headroom / 4 || left_eighths > 1, "free VRAM rose to %zu MiB: the device did not keep what "
              "was demoted, the test left pressure\n", highest >> 20);
    CHECK(st.demoted_bytes < shortfall + block, "%llu MiB demoted in %llu moves over 300 ticks for a %zu MiB "
          "shortfall, at least the bound of %zu MiB (the shortfall and one block): demoted again under pressure, "
          "answered or not\n", st.demoted_bytes >> 20, st.demotions, shortfall >> 20, (shortfall + block) >> 20);
    CHECK(given_back || fakegpu_vram_kept() == st.demoted_bytes, "the device keeps %zu MiB, the shim demoted %llu "
          "MiB\n", fakegpu_vram_kept() >> 20, st.demoted_bytes >> 20);
    CHECK(in_vram_now == n - (int)(st.demoted_bytes / block) && st.promotions == 0, "%d of %d blocks in VRAM after "
          "%llu MiB demoted, %llu promotions\n", in_vram_now, n, st.demoted_bytes >> 20, st.promotions);
    CHECK(w.bad == 0 && w.rounds > 0, "kernels running during the moves saw %llu wrong words in %llu rounds\n", w.bad,
          w.rounds);
    check_blocks(blocks, n, block, "after the squeeze");
    balloon_stop(&other);
    for (int i = 0; i < n; i++)
        OK(cudaFree(blocks[i]));
    CHECK(fakegpu_vram_kept() == 0 && fakegpu_managed_live() == 0, "%zu MiB still kept, %d managed allocations "
          "left after every free\n", fakegpu_vram_kept() >> 20, fakegpu_managed_live());
    return 0;
}

/* gbtier working-set BLOCK N (FAKECUDA_MANAGED_KEEPS_VRAM=1, GREENBOOST_GIVE_BACK=off: the
 * default settings on a device that keeps the VRAM managed pages leave): a long prompt
 * beside another process. N weight blocks fill the room this process has beside the
 * other (movable VRAM: the device is contested), with an eighth of a block to spare; once
 * the program computes, it allocates N / 2 working blocks one after another and keeps
 * them. Each goes to VRAM, a weight block going to T2 to make its room. The device keeps
 * what the weights leave and gives the first working block fresh VRAM, so free VRAM falls
 * under a quarter of the headroom: yet nothing of this process's was evicted (the device
 * takes the VRAM it keeps, which holds no data, before any that does), and that VRAM is
 * this process's room still, not another process's. Then the program reads only its
 * weights (a decode after a prefill): the demoted ones, hotter now than the working
 * blocks nothing reads, swap back into VRAM, into what the device keeps, with free VRAM
 * at none (live tiering's swaps go on there, `Room::drained`). The weights and every
 * working block keep every byte. */
int test_working_set(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: working-set BLOCK N\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int n = atoi(argv[3]), working_n = n / 2;
    void *weights[16], *working[8];
    CHECK(n >= 4 && n <= 16, "4 to 16 weight blocks\n");
    struct balloon other = balloon_start(device_free() - headroom - (size_t)n * block - block / 8);
    load_weights_then_compute(weights, n, block);
    int in_t2 = 0;
    for (int i = 0; i < working_n; i++) {
        OK(cudaMalloc(&working[i], block));
        size_t t2 = shim_t2_bytes(working[i], block);
        printf("working-set: block %d %s (where %d, %zu T2 MiB); %d weight blocks in VRAM; %zu MiB free, the "
               "device keeps %zu MiB (headroom %zu MiB)\n", i, fakegpu_ptr_kind(dptr(working[i])),
               fakegpu_managed_where(dptr(working[i])), t2 >> 20, in_vram_count(weights, n), device_free() >> 20,
               fakegpu_vram_kept() >> 20, headroom >> 20);
        in_t2 += !in_vram(dptr(working[i])) || t2 > 0;
        OK(fakegpu_launch_fill(dptr(working[i]), block, 900 + (uint32_t)i, NULL));
    }
    OK(cudaDeviceSynchronize());
    CHECK(in_t2 == 0, "%d of %d working blocks went to T2 where weights could make their room\n", in_t2, working_n);
    check_blocks(weights, n, block, "after the working set came");
    CUfunction f = struct_kernel();
    for (int round = 0; round < 3000 && in_vram_count(weights, n) < n; round++) {
        for (int first = 0; first < n; first += 8) /* name_all names 8 at a time */
            name_all(f, weights + first, n - first < 8 ? n - first : 8);
        usleep(1000);
    }
    printf("working-set: reading the weights: %d of %d in VRAM, %d of %d working blocks; %llu swaps; %zu MiB free, the "
           "device keeps %zu MiB\n", in_vram_count(weights, n), n, in_vram_count(working, working_n), working_n,
           shim_stats().swaps, device_free() >> 20, fakegpu_vram_kept() >> 20);
    CHECK(in_vram_count(weights, n) == n, "%d of %d weight blocks in VRAM after 3 s of reading only them\n",
          in_vram_count(weights, n), n);
    check_blocks(weights, n, block, "after the weights came back");
    for (int i = 0; i < working_n; i++) {
        unsigned long long bad = 0;
        OK(fakegpu_launch_verify(dptr(working[i]), block, 900 + (uint32_t)i, NULL, &bad));
        OK(cudaDeviceSynchronize());
        CHECK(bad == 0, "working block %d has %llu wrong words\n", i, bad);
        OK(cudaFree(working[i]));
    }
    for (int i = 0; i < n; i++)
        OK(cudaFree(weights[i]));
    balloon_stop(&other);
    return 0;
}

/* gbtier room-churn BLOCK ROUNDS [read]: a prefill's working set comes and goes, and the
 * weights demoted for it stay in T2 until it has stopped coming. N weight blocks fill the
 * room this process has beside another, with half a block to spare; once the program
 * computes, it allocates a working block (a weight goes to T2 to make its room), uses it,
 * keeps it for five ticks and frees it, ROUNDS times. Each free leaves room that a tick
 * could promote the weight back into, for the next round to demote it again: a weight's
 * round trip a round, for nothing (engine/room_made.rs holds it back for a second). With
 * `read`, the program names every weight every 2 ms meanwhile (a prefill reads them): the
 * demoted weight, hotter than the working block kept idle, may not swap back in either
 * (tiering::Room::working_set_growing). Over the rounds at most one weight is demoted and
 * none promoted; once they end, the weight comes back (within 3 s). Every byte kept. */
int test_room_churn(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: room-churn BLOCK ROUNDS [read]\n");
    size_t block = strtoull(argv[2], NULL, 0);
    int rounds = atoi(argv[3]), n = 4, reading = argc > 4 && !strcmp(argv[4], "read");
    void *weights[4];
    CHECK(rounds > 1, "2 rounds or more\n");
    struct balloon other = balloon_start(device_free() - headroom - (size_t)n * block - block / 2);
    load_weights_then_compute(weights, n, block);
    CUfunction f = struct_kernel();
    for (int round = 0; round < rounds; round++) {
        void *working;
        OK(cudaMalloc(&working, block));
        CHECK(in_vram(dptr(working)) && shim_t2_bytes(working, block) == 0, "round %d: the working block is not "
              "in VRAM\n", round);
        OK(fakegpu_launch_fill(dptr(working), block, 900 + (uint32_t)round, NULL));
        OK(cudaDeviceSynchronize());
        for (int wait = 0; wait < 2; wait++) { /* five ticks of 10 ms kept, five after the free */
            for (int ms = 0; ms < 50; ms += 2) {
                if (reading)
                    name_all(f, weights, n);
                usleep(2000);
            }
            if (wait == 0)
                OK(cudaFree(working));
        }
    }
    struct shim_stats during = shim_stats();
    printf("room-churn: over %d rounds %llu MiB demoted in %llu moves, %llu MiB promoted in %llu\n", rounds,
           during.demoted_bytes >> 20, during.demotions, during.promoted_bytes >> 20, during.promotions);
    CHECK(during.demoted_bytes <= block && during.promotions == 0, "over %d rounds %llu MiB demoted, %llu "
          "promotions: weights went back and forth with the working set\n", rounds, during.demoted_bytes >> 20,
          during.promotions);
    for (int ms = 0; ms < 3000 && in_vram_count(weights, n) < n; ms += 10)
        usleep(10000);
    printf("room-churn: afterwards %d of %d weight blocks in VRAM\n", in_vram_count(weights, n), n);
    CHECK(in_vram_count(weights, n) == n, "%d of %d weight blocks in VRAM 3 s after the rounds\n",
          in_vram_count(weights, n), n);
    check_blocks(weights, n, block, "after the rounds");
    for (int i = 0; i < n; i++)
        OK(cudaFree(weights[i]));
    balloon_stop(&other);
    return 0;
}
