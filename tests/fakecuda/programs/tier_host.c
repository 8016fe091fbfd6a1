/* What the host's RAM bounds in live tiering: a move to T2 takes host pages the driver
 * allocates, which never go to swap, so it happens only where the host keeps its reserve
 * (GREENBOOST_HOST_RESERVE).
 * gbtier demote-host-short BLOCK (GREENBOOST_HOST_RESERVE larger than the host): blocks
 *   placed in VRAM beside another process (movable: the device is contested) stay there,
 *   every byte kept, when another process then wants the VRAM. */
#define _GNU_SOURCE
#include "tier_tests.h"

int test_demote_host_short(int argc, char **argv)
{
    CHECK(argc >= 3, "usage: demote-host-short BLOCK\n");
    size_t block = strtoull(argv[2], NULL, 0);
    void *blocks[2];
    /* Room for three blocks beside the headroom: both fit, movable VRAM. */
    struct balloon other = balloon_start(vram - headroom - 3 * block);
    int in_t2 = allocate_blocks(blocks, 2, block);
    struct shim_stats s0 = shim_stats();
    CHECK(in_t2 == 0 && s0.movable_allocs == 2, "%d blocks in T2 and %llu movable, want both movable in VRAM\n", in_t2,
          s0.movable_allocs);
    /* Another process takes all but half the headroom: demoting the coldest block would
     * answer it, if the host had the RAM. */
    struct balloon squeeze = balloon_start(device_free() - headroom / 2);
    usleep(500000);
    struct shim_stats s1 = shim_stats();
    printf("another process leaves %zu MiB: demoted %llu MiB in %llu moves\n", device_free() >> 20,
           s1.demoted_bytes >> 20, s1.demotions);
    CHECK(s1.demotions == 0 && s1.demoted_bytes == 0, "%llu demotions (%llu MiB) with no host RAM above the reserve\n",
          s1.demotions, s1.demoted_bytes >> 20);
    for (int i = 0; i < 2; i++)
        CHECK(fakegpu_managed_where(dptr(blocks[i])) == 0 && shim_t2_bytes(blocks[i], block) == 0,
              "block %d left VRAM: the fake has it at %d, the shim counts %llu T2 bytes\n", i,
              fakegpu_managed_where(dptr(blocks[i])), shim_t2_bytes(blocks[i], block));
    check_blocks(blocks, 2, block, "after another process wanted the VRAM");
    balloon_stop(&squeeze);
    balloon_stop(&other);
    for (int i = 0; i < 2; i++)
        OK(cudaFree(blocks[i]));
    return 0;
}
