/* Helpers shared by the test programs: a failed check prints "FAIL: <why>" and exits 1;
 * the runner shows that line. */
#ifndef TESTUTIL_H
#define TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
