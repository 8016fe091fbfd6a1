/* What the shim tells a test program about itself, through its exports (0 without the
 * shim, so that a control run fails at the checks that need it). */
#ifndef SHIMSTATS_H
#define SHIMSTATS_H
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include "testutil.h"

/* The shim's counters (`greenboost_shim_stats_sized`): ShimStats in the shim's stats.rs,
 * field by field, then room for fields appended after them. scripts/check-shim-stats.py
 * (make lint) checks the fields against the Rust struct. */
struct shim_stats {
    unsigned long long t1_used, t1_peak, t2_used, t2_peak, t1_allocs, t2_allocs, t2_after_vram_oom, oom_returned,
        vmm_host, deferred_frees;
    unsigned backend;
    int import_dmabuf_result, import_opaque_result;
    unsigned reserved;
    unsigned long long split_allocs, gemm_staged, gemm_staged_bytes, headroom_spills, unused_prefetched;
    /* Live tiering. */
    unsigned long long movable_allocs, tier_vram, promoted_bytes, demoted_bytes, promotions, demotions, promote_ns,
        demote_ns, move_issue_ns;
    /* Pipelined staging. */
    unsigned long long gemm_sliced, gemm_slices_differed;
    /* Launch observation. */
    unsigned long long launches, launches_unread, launch_namings, captured_launches, graph_launches, graphs_unread,
        memory_ops, host_funcs, swaps, gemm_ahead, gemm_ahead_dropped, launches_timed;
    /* Writers through pointers kept in device memory (batched products, globals). */
    unsigned long long indirect_writers;
    /* Kept VRAM given back (engine/give_back.rs). */
    unsigned long long given_back_bytes, give_backs;
    /* Room made at once for allocations while computing (engine/make_room.rs). */
    unsigned long long room_made_bytes, room_made_ns;
    /* Products that read a T2 operand in place (gemm/staging.rs). */
    unsigned long long gemm_in_place, gemm_in_place_bytes;
    /* VRAM the driver keeps for parts moved to T2, and its peak (memory/movable_part.rs). */
    unsigned long long kept_vram, kept_vram_peak;
    unsigned long long appended[16];
};

static inline struct shim_stats shim_stats(void)
{
    long (*get)(void *, size_t) = (long (*)(void *, size_t))dlsym(RTLD_DEFAULT, "greenboost_shim_stats_sized");
    struct shim_stats s;
    memset(&s, 0, sizeof s);
    CHECK(!get || get(&s, sizeof s) > 0, "greenboost_shim_stats_sized failed\n");
    return s;
}

/* Kernel launches, copies and memsets that named the allocation holding p
 * (`greenboost_shim_launches_naming`). */
static inline unsigned long long shim_launches_naming(const void *p)
{
    unsigned long long (*get)(CUdeviceptr) =
        (unsigned long long (*)(CUdeviceptr))dlsym(RTLD_DEFAULT, "greenboost_shim_launches_naming");
    return get ? get((CUdeviceptr)(uintptr_t)p) : 0;
}

/* Copies and memsets that wrote in the allocation holding p (`greenboost_shim_writes_naming`). */
static inline unsigned long long shim_writes_naming(const void *p)
{
    unsigned long long (*get)(CUdeviceptr) =
        (unsigned long long (*)(CUdeviceptr))dlsym(RTLD_DEFAULT, "greenboost_shim_writes_naming");
    return get ? get((CUdeviceptr)(uintptr_t)p) : 0;
}

/* T2 bytes of an allocation (`greenboost_shim_t2_bytes`). */
static inline unsigned long long shim_t2_bytes(void *p, size_t n)
{
    unsigned long long (*get)(CUdeviceptr, unsigned long long) =
        (unsigned long long (*)(CUdeviceptr, unsigned long long))dlsym(RTLD_DEFAULT, "greenboost_shim_t2_bytes");
    return get ? get((CUdeviceptr)(uintptr_t)p, n) : 0;
}
/* The record the shim publishes for `greenboost status` (policy/src/published.rs, whose
 * tests check this layout), read from /dev/shm/greenboost-shim.<pid>; 0 when there is none. */
struct shim_published {
    unsigned long long magic;
    unsigned version, size, pid, reserved;
    unsigned long long start_time, seq, t1_used, t2_used, t2_peak, movable_allocs, tier_vram, promoted_bytes,
        demoted_bytes, promotions, demotions, swaps, room_made_bytes, kept_vram;
};

static inline int shim_published(int pid, struct shim_published *out)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/greenboost-shim.%d", pid);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(out, 1, sizeof *out, f);
    fclose(f);
    return got == sizeof *out && out->magic == 0x31304d4948534247ULL /* "GBSHIM01" */ && !(out->seq & 1);
}
#endif
