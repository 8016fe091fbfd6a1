/* What the files of libfakegpu.so (the simulated device; fakegpu.c says how it works)
 * share: the device state and its types, and the functions one file defines for
 * another. Private to the library: fakegpu_internal.h is what the fakes use. */
#ifndef FAKEGPU_STATE_H
#define FAKEGPU_STATE_H
#include "fakegpu_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define VMM_GRANULARITY (2UL << 20)
#define VMM_VA_SPACE (256UL << 30)
#define IOURING_MAX_BUFFER (1UL << 30) /* the kernel refuses larger fixed buffers */


struct hostreg {
    uintptr_t base, size;  /* as registered */
    unsigned flags;
    int ring_fd;           /* io_uring holding the long-term pin, or -1 (mlock) */
    struct hostreg *next;
};

struct vmm_handle {
    uint64_t magic;
    size_t size;
    int host;              /* 1: host-NUMA memory (memfd), 0: VRAM pages */
    int device;            /* device: which one */
    size_t vram_off;       /* device: offset in its VRAM */
    int memfd;             /* host: backing file */
    unsigned char *view;   /* what the fake GPU reads/writes */
    int mapcount, released;
    struct vmm_handle *next;
};
#define VMM_MAGIC 0x564d4d48414e444cULL

struct vmm_reservation { uintptr_t va; size_t size; struct vmm_reservation *next; };
struct vmm_mapping {
    uintptr_t va; size_t size;
    struct vmm_handle *h;
    int dev_access, host_access;
    struct vmm_mapping *next;
};

/* OP_WORK: device work of another file (fn(data)), not a host callback. OP_KERNEL: a
 * test kernel (data: struct fg_launch, owned); OP_SET2D: a pitched memset of 1/2/4-byte
 * elements; OP_COPY3D: a 3D copy (data: CUDA_MEMCPY3D, owned). OP_NOP: a captured event
 * record or wait, nothing to do when its graph runs. */
enum op_kind { OP_FILL, OP_VERIFY, OP_COPY, OP_SET, OP_FREE, OP_EVENT, OP_WAIT_EVENT, OP_HOSTFN, OP_CALLBACK, OP_GEMM,
               OP_WORK, OP_KERNEL, OP_SET2D, OP_COPY3D, OP_NOP };
struct op {
    enum op_kind kind;
    CUdeviceptr a, b;
    size_t n;
    uint32_t seed;
    unsigned long long *result;
    CUevent ev;
    uint64_t ev_seq;
    CUhostFn fn;
    CUstreamCallback cb;
    void *data;
    size_t pitch, width, height; /* OP_SET2D (width in elements of `elem` bytes) */
    unsigned elem;
    const char *path;            /* the entry point that queued it (fakegpu_count) */
    struct op *next;
};

#define STREAM_MAGIC 0x53545245414d3031ULL
struct fake_stream {
    uint64_t magic;
    unsigned flags;
    int priority;
    struct op *head, *tail;
    int running, held, destroyed;
    int capturing; /* set by the test: the stream "is being captured" into a graph */
    struct fg_capture *capture; /* cuStreamBeginCapture: work goes to its graph */
    struct timespec hold_deadline;
    CUresult err; /* sticky error reported by the next synchronisation */
    pthread_t worker;
    struct fake_stream *next;
};

#define EVENT_MAGIC 0x4556454e54303031ULL
/* `pending`: the latest record has not completed (query/synchronise). `outstanding`:
 * the sequence numbers of every record still queued, since a wait is for the record
 * current when it was issued, even after the event is recorded again elsewhere.
 * `done_seq`/`done_at`: the newest record that completed and when (CLOCK_MONOTONIC), what
 * cuEventElapsedTime measures; records may complete out of order on different streams. */
#define EVENT_OUTSTANDING_MAX 64
struct fake_event {
    uint64_t magic;
    unsigned flags; /* cuEventCreate's (CU_EVENT_DISABLE_TIMING: no elapsed time) */
    int pending;
    uint64_t seq;
    int destroyed;
    uint64_t outstanding[EVENT_OUTSTANDING_MAX];
    int noutstanding;
    uint64_t done_seq;
    struct timespec done_at;
};
struct fake_ctx { int primary; int refs; int device; };
struct fake_pool { int dummy; };

/* One device's VRAM and primary context. */
#define MAX_DEVICES FG_MAX_DEVICES
struct vram_device {
    size_t vram;
    int vram_fd;
    unsigned char *vram_view;   /* GPU's view */
    uintptr_t vram_va;          /* device addresses */
    size_t npages;
    uint8_t *page_used;         /* per page: allocated */
    uint32_t *alloc_pages;      /* at an allocation's first page: its length in pages */
    uint8_t *free_pending;      /* at an allocation's first page: stream-ordered free queued */
    size_t vram_used;           /* this process's pages */
    size_t kept;                /* FAKECUDA_MANAGED_KEEPS_VRAM: VRAM managed pages left (fakegpu_vram.c) */
    uint64_t *share;            /* FAKECUDA_DEVICE_SHARE (device 0 only): [0] VRAM used by every process,
                                 * [1] of it kept for managed memory; or NULL */
    struct fake_ctx primary;
};

/* The device: one mutex (lock) protects all of it; cv is broadcast on every change a
 * waiter may need. Defined in fakegpu.c. */
struct fg_state {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pid_t pid;               /* the process that initialised the device */
    int initialized;
    int ndevices;               /* FAKECUDA_DEVICES */
    int managed_keeps_vram;     /* FAKECUDA_MANAGED_KEEPS_VRAM */
    struct vram_device dev[MAX_DEVICES];
    struct hostreg *regs;
    size_t hostreg_bytes;
    uintptr_t vmm_va; size_t vmm_next;
    struct vmm_handle *handles;
    struct vmm_reservation *reservations;
    struct vmm_mapping *mappings;
    struct fake_stream *streams;
    unsigned faults;
    int log_fd;
    int hold_timeout_s;
    struct fake_pool pool;
};
/* Everything below is the library's own: hidden, so that no program or preloaded library
 * sees (or interposes) names as plain as `fault` or `enqueue`. */
#pragma GCC visibility push(hidden)
extern struct fg_state g;
/* Set while a host function or callback runs on a stream worker (fakegpu.c). */
extern __thread int in_host_callback;

/* What for_each_device_chunk applies to each contiguous piece of a device range. */
typedef void (*chunk_fn)(unsigned char *view, uint64_t off, size_t n, struct op *op);

/* ---- defined in one file, used in another ---- */
void ensure_setup(void);
size_t device_used(struct vram_device *d);
enum { KEPT_WHEN_SHORT, KEPT_ONLY }; /* vram_take's reuse_kept */
int vram_take(struct vram_device *d, size_t bytes, int reuse_kept, size_t *first);
void vram_give(struct vram_device *d, size_t first, size_t npages);
struct vram_device *device_at(uintptr_t p);
long alloc_first_page(CUdeviceptr p, struct vram_device **dp);
void release_alloc(struct vram_device *d, size_t first);
struct hostreg *reg_containing(uintptr_t p);
unsigned char *device_view(uintptr_t p, size_t *contiguous, const char **kind);
int device_range_ok(uintptr_t p, size_t n);
int for_each_device_chunk(uintptr_t p, size_t n, chunk_fn fn, struct op *op);
void chunk_fill(unsigned char *v, uint64_t off, size_t n, struct op *op);
void chunk_verify(unsigned char *v, uint64_t off, size_t n, struct op *op);
void chunk_set(unsigned char *v, uint64_t off, size_t n, struct op *op);
int is_device_address(uintptr_t p);
int copy_range(uintptr_t dst, uintptr_t src, size_t n);
CUresult fault(struct fake_stream *s, const char *what, uintptr_t p, size_t n);
int event_outstanding(const struct fake_event *e, uint64_t seq);
CUresult run_op(struct fake_stream *s, struct op *op);
int stream_valid(CUstream s);
CUresult enqueue(CUstream s, struct op work);
void wait_all_streams_idle(void);
CUresult run_gemm(struct fake_stream *s, const struct fakegpu_gemm *m);
/* fakegpu_kernels.c: runs a test kernel; counts an operation that ran. */
CUresult run_kernel(struct fake_stream *s, struct fg_launch *l);
void count_op(const struct op *op);
/* fakegpu_copies.c: runs a pitched memset or a 3D copy. */
CUresult run_set2d(struct fake_stream *s, const struct op *op);
CUresult run_copy3d(struct fake_stream *s, const CUDA_MEMCPY3D *p);
/* fakegpu_capture.c: lock held; s has a capture: op goes to its graph (or is refused). */
CUresult capture_op_locked(struct fake_stream *s, struct op *op);
void capture_invalidate_locked(struct fake_stream *s);
/* fakegpu_graphs.c, for a capture's graph: lock held; appends a node that takes op's data
 * (NULL when out of memory); the node added last (NULL: none). */
struct fake_graph_node *graph_add_node_locked(CUgraph gr, int type, const struct op *op);
CUgraphNode graph_last_node_locked(CUgraph gr);
/* A copy of op that owns copies of its data (graph nodes, launches). */
struct op op_dup(const struct op *op);
void op_free_data(struct op *op);
/* The entry point that passed fg_gate last on this thread. */
extern __thread const char *fg_entry;
#pragma GCC visibility pop

#endif
