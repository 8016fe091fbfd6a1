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

static inline unsigned long long arg_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    }
    return v;
}

static inline unsigned long long env_size(const char *name, unsigned long long dflt)
{
    const char *v = getenv(name);
    return v && *v ? arg_size(v) : dflt;
}
#endif
