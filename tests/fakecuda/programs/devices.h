/* The two-device scenario (FAKECUDA_DEVICES=2), shared by the runtime tests
 * (rt_tests.c: cudaSetDevice, cudaMalloc) and the driver tests (drv_tests.c:
 * cuCtxSetCurrent between primary contexts, cuMemAlloc): the same checks through
 * either API.
 *
 *   devices BUDGET0 BUDGET1 HEADROOM0 HEADROOM1 N0 N1
 *
 * Device d is expected to have a VRAM budget BUDGETd and a headroom HEADROOMd (what
 * GREENBOOST_VRAM_BUDGET / GREENBOOST_VRAM_HEADROOM give it; without the shim: its size
 * and 0), no reserve, and nothing else on it. Nd blocks of device 0's VRAM/16 are
 * allocated on device d, switching device before every allocation (0, 1, 0, 1, ...).
 * Each must go to VRAM of device d while the device's VRAM in use stays within
 * min(BUDGETd, size - HEADROOMd), else wholly to T2 (greenboost_shim_t2_bytes); the
 * fake's VRAM in use of both devices is what this predicts after every allocation;
 * the memory reports of the current device (free and total, cuDeviceTotalMem) are
 * the shim's per-device ones; every block's data is intact; each device's blocks are
 * freed with the other device current, and each device's VRAM and reports come back. */
#ifndef DEVICES_H
#define DEVICES_H
#include <dlfcn.h>
#include <unistd.h>
#include "testutil.h"

struct devices_api {
    int (*count)(void);
    void (*select)(int device);        /* makes `device` current */
    int (*current)(void);              /* the current device */
    CUdeviceptr (*alloc)(size_t n);    /* must succeed */
    void (*release)(CUdeviceptr p);    /* must succeed */
    void (*mem_info)(size_t *free_bytes, size_t *total);
    size_t (*total_mem)(int device);   /* cuDeviceTotalMem (all the API's figures agree) */
};

#define DEVICES_MAX_BLOCKS 64

static size_t devices_sub(size_t a, size_t b) { return a > b ? a - b : 0; }
static size_t devices_min(size_t a, size_t b) { return a < b ? a : b; }

static unsigned long long devices_t2_bytes(CUdeviceptr p, size_t n)
{
    unsigned long long (*get)(CUdeviceptr, unsigned long long) =
        (unsigned long long (*)(CUdeviceptr, unsigned long long))dlsym(RTLD_DEFAULT, "greenboost_shim_t2_bytes");
    return get ? get(p, n) : 0;
}

struct devices_state {
    size_t budget[2], headroom[2], physical[2], total[2], limit[2], used[2];
};

/* The current device's reports: total min(budget, size); free what the budget and the
 * device leave, less the headroom. */
static void devices_check_report(const struct devices_api *api, const struct devices_state *st, int d,
                                 const char *when)
{
    size_t free_bytes = 0, total = 0;
    api->mem_info(&free_bytes, &total);
    size_t want_free = devices_sub(devices_min(devices_sub(st->total[d], st->used[d]), st->physical[d] - st->used[d]),
                                   st->headroom[d]);
    CHECK(total == st->total[d], "%s: device %d reports a total of %zu MiB, want %zu MiB (budget %zu MiB, "
          "device %zu MiB)\n", when, d, total >> 20, st->total[d] >> 20, st->budget[d] >> 20, st->physical[d] >> 20);
    CHECK(free_bytes == want_free, "%s: device %d reports %zu MiB free, want %zu MiB (%zu MiB used, headroom %zu "
          "MiB)\n", when, d, free_bytes >> 20, want_free >> 20, st->used[d] >> 20, st->headroom[d] >> 20);
    size_t t = api->total_mem(d);
    CHECK(t == st->total[d], "%s: cuDeviceTotalMem(%d) = %zu MiB, want %zu MiB\n", when, d, t >> 20,
          st->total[d] >> 20);
}

static void devices_select(const struct devices_api *api, int d)
{
    api->select(d);
    int now = api->current();
    CHECK(now == d, "device %d selected, current device %d\n", d, now);
}

static void devices_check_fake(const struct devices_state *st, const char *when)
{
    for (int e = 0; e < 2; e++)
        CHECK(fakegpu_vram_used_on(e) == st->used[e], "%s: device %d has %zu MiB of VRAM in use, want %zu MiB\n",
              when, e, fakegpu_vram_used_on(e) >> 20, st->used[e] >> 20);
}

static int devices_scenario(const struct devices_api *api, int argc, char **argv)
{
    CHECK(argc >= 8, "usage: devices BUDGET0 BUDGET1 HEADROOM0 HEADROOM1 N0 N1\n");
    struct devices_state st;
    memset(&st, 0, sizeof st);
    size_t n[2], block = fakegpu_vram_total_on(0) / 16, in_t2[2] = { 0, 0 };
    CUdeviceptr p[2][DEVICES_MAX_BLOCKS];
    int count = api->count();
    CHECK(count == 2, "%d devices, want 2 (FAKECUDA_DEVICES=2)\n", count);
    for (int d = 0; d < 2; d++) {
        st.budget[d] = arg_size(argv[2 + d]);
        st.headroom[d] = arg_size(argv[4 + d]);
        n[d] = arg_size(argv[6 + d]);
        st.physical[d] = fakegpu_vram_total_on(d);
        st.total[d] = devices_min(st.budget[d], st.physical[d]);
        st.limit[d] = devices_min(st.total[d], devices_sub(st.physical[d], st.headroom[d]));
        CHECK(n[d] <= DEVICES_MAX_BLOCKS, "at most %d blocks per device\n", DEVICES_MAX_BLOCKS);
        printf("device %d: %zu MiB, budget %zu MiB, headroom %zu MiB: VRAM up to %zu MiB; %zu blocks of %zu MiB\n",
               d, st.physical[d] >> 20, st.budget[d] >> 20, st.headroom[d] >> 20, st.limit[d] >> 20, n[d],
               block >> 20);
    }
    for (int d = 0; d < 2; d++) {
        devices_select(api, d);
        devices_check_report(api, &st, d, "at start");
    }
    size_t most = n[0] > n[1] ? n[0] : n[1];
    for (size_t i = 0; i < most; i++)
        for (int d = 0; d < 2; d++) {
            if (i >= n[d])
                continue;
            char when[64];
            snprintf(when, sizeof when, "after block #%zu of device %d", i, d);
            devices_select(api, d);
            int want_t2 = st.used[d] + block > st.limit[d];
            CUdeviceptr b = p[d][i] = api->alloc(block);
            unsigned long long t2 = devices_t2_bytes(b, block);
            const char *kind = fakegpu_ptr_kind(b);
            int on = fakegpu_ptr_device(b);
            printf("device %d #%zu: %s (%s, on device %d)\n", d, i, t2 ? "T2" : "VRAM", kind, on);
            if (want_t2) {
                CHECK(t2 == block && on < 0, "%s: %s on device %d with %llu of %zu bytes in T2; the device has %zu "
                      "MiB in use, VRAM up to %zu MiB: want it wholly in T2\n", when, kind, on, t2, block,
                      st.used[d] >> 20, st.limit[d] >> 20);
                in_t2[d]++;
            } else {
                CHECK(t2 == 0 && !strcmp(kind, "vram") && on == d, "%s: %s on device %d with %llu bytes in T2; the "
                      "device has %zu MiB in use, VRAM up to %zu MiB: want VRAM of device %d\n", when, kind, on, t2,
                      st.used[d] >> 20, st.limit[d] >> 20, d);
                st.used[d] += block;
            }
            devices_check_fake(&st, when);
            CHECK(st.physical[d] - st.used[d] >= st.headroom[d], "%s: %zu MiB free on device %d, headroom %zu MiB\n",
                  when, (st.physical[d] - st.used[d]) >> 20, d, st.headroom[d] >> 20);
            devices_check_report(api, &st, d, when);
            OK(fakegpu_launch_fill(b, block, 1000 * (uint32_t)d + (uint32_t)i, NULL));
        }
    for (int d = 0; d < 2; d++)
        printf("device %d: %zu of %zu in T2; device free %zu MiB\n", d, in_t2[d], n[d],
               (st.physical[d] - st.used[d]) >> 20);
    for (int d = 0; d < 2; d++) {
        devices_select(api, d);
        for (size_t i = 0; i < n[d]; i++) {
            unsigned long long bad = ~0ULL;
            OK(fakegpu_launch_verify(p[d][i], block, 1000 * (uint32_t)d + (uint32_t)i, NULL, &bad));
            CHECK(bad == 0, "block #%zu of device %d (%s): %llu wrong words\n", i, d, fakegpu_ptr_kind(p[d][i]), bad);
        }
    }
    /* Frees reach the device that holds the memory, whichever is current. */
    for (int d = 0; d < 2; d++) {
        devices_select(api, 1 - d);
        for (size_t i = 0; i < n[d]; i++)
            api->release(p[d][i]);
        st.used[d] = 0;
        char when[64];
        snprintf(when, sizeof when, "after freeing device %d's blocks", d);
        devices_check_fake(&st, when);
        devices_select(api, d);
        devices_check_report(api, &st, d, when);
    }
    size_t left = 0;
    for (int i = 0; i < 50 && (left = fakegpu_hostreg_bytes()) != 0; i++)
        usleep(100000);
    CHECK(left == 0, "%zu bytes of host memory stay registered after every block was freed\n", left);
    return 0;
}
#endif
