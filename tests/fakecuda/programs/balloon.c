/* gbballoon: another process on the device, for the headroom tests. Run without the
 * shim, with FAKECUDA_DEVICE_SHARE naming the same file as the program under test.
 *
 *   gbballoon HOLD [GROW [LIFETIME_S]]
 *
 * cuMemAllocs HOLD bytes (0: none) and prints "ready held=HOLD device_used=N". Then,
 * on each SIGUSR1, allocates GROW bytes more and prints "grown held=...". On SIGTERM or
 * SIGINT it frees everything and prints "ok balloon device_used=N" (the device's VRAM
 * in use once it let go: 0 when the others gave everything back too). After LIFETIME_S
 * seconds (default 600) it gives up as if stopped, with a FAIL line: a runner that
 * died does not leave it behind. Signals are taken with sigwait, so nothing runs in a
 * handler. */
#define _GNU_SOURCE
#include "testutil.h"

#include <signal.h>
#include <unistd.h>

CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);

#define MAX_BLOCKS 64

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s HOLD [GROW [LIFETIME_S]]\n", argv[0]);
        return 2;
    }
    size_t hold = arg_size(argv[1]), grow = argc > 2 ? arg_size(argv[2]) : 0;
    unsigned lifetime = argc > 3 ? (unsigned)atoi(argv[3]) : 600;

    /* Blocked before the driver starts any thread, so that sigwait sees them all. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    primary_context_current();
    CUdeviceptr blocks[MAX_BLOCKS];
    int nblocks = 0;
    size_t held = 0;
    if (hold) {
        CUresult rc = cuMemAlloc_v2(&blocks[nblocks], hold);
        CHECK(rc == CUDA_SUCCESS, "balloon: cuMemAlloc_v2 of %zu bytes -> %d (device used %zu of %zu)\n", hold, rc,
              fakegpu_device_used(), fakegpu_vram_total());
        nblocks++;
        held += hold;
    }
    printf("ready held=%zu device_used=%zu\n", held, fakegpu_device_used());
    alarm(lifetime);

    int failed = 0;
    for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig == SIGUSR1 && grow && nblocks < MAX_BLOCKS) {
            CUresult rc = cuMemAlloc_v2(&blocks[nblocks], grow);
            if (rc == CUDA_SUCCESS) {
                nblocks++;
                held += grow;
                printf("grown held=%zu device_used=%zu\n", held, fakegpu_device_used());
            } else {
                printf("FAIL: balloon: growing by %zu bytes -> %d (device used %zu)\n", grow, rc,
                       fakegpu_device_used());
                failed = 1;
            }
        } else if (sig == SIGALRM) {
            printf("FAIL: balloon: never stopped within %u s\n", lifetime);
            failed = 1;
            break;
        } else if (sig == SIGTERM || sig == SIGINT) {
            break;
        }
    }
    for (int i = 0; i < nblocks; i++)
        OK(cuMemFree_v2(blocks[i]));
    if (failed)
        return 1;
    printf("ok balloon device_used=%zu\n", fakegpu_device_used());
    return 0;
}
