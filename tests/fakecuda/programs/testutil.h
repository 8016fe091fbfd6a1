/* Helpers shared by the test programs: a failed check prints "FAIL: <why>" and exits 1;
 * the runner shows that line. */
#ifndef TESTUTIL_H
#define TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include "fakecuda.h"

#define MiB (1ULL << 20)

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            printf("FAIL: " __VA_ARGS__);                                  \
            printf("  [%s:%d: %s]\n", __FILE__, __LINE__, #cond);          \
            fflush(stdout);                                                \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

/* A CUDA call that must succeed. */
#define OK(call)                                                           \
    do {                                                                   \
        int ok_rc_ = (int)(call);                                          \
        CHECK(ok_rc_ == 0, "%s returned %d\n", #call, ok_rc_);             \
    } while (0)

/* Whether device memory at `p` lies in VRAM: the driver's own (kind "vram"), or managed
 * memory resident on a device (the shim's movable VRAM, where the device is contested or
 * GREENBOOST_TIERING=on). */
static inline int in_vram(CUdeviceptr p)
{
    const char *kind = fakegpu_ptr_kind(p);
    return !strcmp(kind, "vram") || (!strcmp(kind, "managed") && fakegpu_managed_where(p) >= 0);
}

CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device);
CUresult cuCtxSetCurrent(CUcontext context);

/* Device 0's primary context made current in this thread, through the driver API (the
 * programs that call the driver directly link libcuda). */
static inline void primary_context_current(void)
{
    CUdevice device;
    CUcontext context;
    OK(cuInit(0));
    OK(cuDeviceGet(&device, 0));
    OK(cuDevicePrimaryCtxRetain(&context, device));
    OK(cuCtxSetCurrent(context));
}

/* gbballoon (GBTEST_BALLOON_BIN) holding `hold` bytes of VRAM for at most `seconds`, in a
 * process of its own without the shim: its pid once it said "ready", its output in *out. */
static inline pid_t balloon_spawn(size_t hold, int seconds, FILE **out)
{
    const char *bin = getenv("GBTEST_BALLOON_BIN");
    CHECK(bin, "needs GBTEST_BALLOON_BIN\n");
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe\n");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork\n");
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        unsetenv("LD_PRELOAD");
        setenv("FAKECUDA_LOG", "/dev/null", 1);
        char size[32], limit[16];
        snprintf(size, sizeof size, "%zu", hold);
        snprintf(limit, sizeof limit, "%d", seconds);
        execl(bin, bin, size, "0", limit, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    *out = fdopen(fds[0], "r");
    char line[256] = "";
    CHECK(fgets(line, sizeof line, *out) && !strncmp(line, "ready", 5), "the balloon (%zu MiB) did not start: %s\n",
          (size_t)(hold >> 20), line);
    return pid;
}

struct named_test {
    const char *name;
    int (*fn)(int argc, char **argv);
};

/* A test program's main: runs `prepare` (if any), then the test argv[1] names, and
 * prints "ok NAME" when it passed. A test that left a fault on the fake device fails. */
static inline int run_named_test(const struct named_test *tests, size_t count, int argc, char **argv,
                                 void (*prepare)(void))
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TEST [ARGS]\n", argv[0]);
        return 2;
    }
    if (prepare)
        prepare();
    for (size_t i = 0; i < count; i++)
        if (!strcmp(tests[i].name, argv[1])) {
            int rc = tests[i].fn(argc, argv);
            CHECK(fakegpu_faults() == 0, "the fake device saw %u faults (see FAKECUDA_LOG)\n", fakegpu_faults());
            if (rc == 0)
                printf("ok %s\n", argv[1]);
            return rc;
        }
    fprintf(stderr, "unknown test %s\n", argv[1]);
    return 2;
}
#endif
