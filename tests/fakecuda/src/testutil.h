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
#endif
