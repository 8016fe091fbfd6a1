/* What managed.c (the managed memory model) and managed_streams.c (its calls that go
 * through the streams) share, inside libfakegpu.so. Everything here wants the device
 * lock (fg_lock) held, except managed_unmap. */
#ifndef MANAGED_STATE_H
#define MANAGED_STATE_H
#include "fakegpu_internal.h"

#define MANAGED_PAGE (2UL << 20)
#define ON_HOST CU_DEVICE_CPU  /* -1: a location that is the host */
#define NOWHERE CU_DEVICE_INVALID /* -2: no location (no advice, no prefetch, mixed) */
#define ACCESSED_BY_HOST 0x80  /* accessed_by bit of the host; bit d: device d */

struct mpage {
    signed char where;         /* ON_HOST or the device whose VRAM holds the page */
    signed char preferred;     /* SET_PREFERRED_LOCATION: NOWHERE, ON_HOST or a device */
    signed char last_prefetch; /* the last prefetch asked for (not whether it ran) */
    unsigned char read_mostly;
    unsigned char accessed_by;
    signed char kept_on;       /* the device that keeps the chunk it left, or NOWHERE */
    size_t vram_first;         /* on a device: its first 4 KiB page of that VRAM */
};

struct managed {
    uintptr_t base; /* 2 MiB aligned; the host address and the device address */
    size_t size;    /* as allocated */
    size_t npages;  /* size in 2 MiB pages, rounded up: the mapping's length */
    unsigned flags;
    struct mpage *pages;
    size_t kept[FG_MAX_DEVICES]; /* VRAM its pages left that the device keeps (FAKECUDA_MANAGED_KEEPS_VRAM) */
    struct managed *next;
};

/* Defined in managed.c for managed_streams.c (each says what it does where it is
 * defined); the library's own, as fakegpu_state.h's: hidden from programs and
 * interposers. */
#pragma GCC visibility push(hidden)
struct managed *managed_containing(uintptr_t p);
struct managed *managed_range_pages(uintptr_t p, size_t n, size_t *first, size_t *last);
CUresult managed_location(CUmemLocation loc, int *where);
int managed_move_page(struct managed *a, struct mpage *pg, int where);
struct managed *managed_unlink_locked(uintptr_t base);
void managed_unmap(struct managed *a);
#pragma GCC visibility pop

#endif
