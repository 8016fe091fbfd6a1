/* libfakegpu.so: the simulated device behind the fake libcuda.so.1 and
 * libnvidia-ml.so.1.
 *
 * Device memory ("VRAM", FAKECUDA_VRAM bytes, default 256 MiB) is one memfd. The
 * device address of VRAM is a PROT_NONE reservation, so a device pointer is a real,
 * distinguishable address that faults if the host dereferences it, as on a GPU without
 * HMM; the fake GPU reaches the memory through a private read-write view of the memfd.
 * The fake GPU reaches host memory only through cuMemHostRegister'ed ranges (device
 * pointer = host pointer, as under UVA), host-NUMA cuMemCreate allocations mapped with
 * device access and managed memory. Anything else is an illegal address.
 *
 * FAKECUDA_DEVICES=2 (default 1) adds a second device: FAKECUDA_VRAM1 bytes (default
 * FAKECUDA_VRAM) of VRAM of its own (its own memfd, pages and device address range) and
 * a primary context of its own. Memory is allocated on the device of the calling
 * thread's current context, freed on the device whose address range holds it; the fake
 * GPU reaches every device's memory (peer access, as NVLink gives). The VMM address
 * space, host registrations, streams and events are shared by the devices.
 *
 * Streams other than the legacy/per-thread default ones run their work on a worker
 * thread, in order; a stream can be held by a test so that its work stays pending.
 * Work on the default streams runs synchronously in the calling thread.
 *
 * One mutex protects all device state; one condition variable is broadcast on every
 * change that a waiter may need (stream progress, events).
 *
 * Other processes on the device (FAKECUDA_DEVICE_SHARE=file): every fake process that
 * names the same file adds the VRAM it takes to one 64-bit counter in it (mapped
 * shared, updated with atomics), allocations fail with out-of-memory once that total
 * would pass FAKECUDA_VRAM, and the device's free memory is FAKECUDA_VRAM less the
 * total. Each process still has VRAM of its own to put the data in; only the amount is
 * shared. A process that exits gives its VRAM back, as the driver does (one killed by a
 * signal does not: the test's file is its own).
 *
 * Managed memory (cuMemAllocManaged, advice, prefetches) is managed.c's: its data is
 * host memory at the device address, which device_view lets the fake GPU reach; only its
 * residency takes VRAM, through fg_vram_take_locked.
 */
#define _GNU_SOURCE
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

/* ------------------------------------------------------------------ state */

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

/* OP_WORK: device work of another file (fn(data)), not a host callback. */
enum op_kind { OP_FILL, OP_VERIFY, OP_COPY, OP_SET, OP_FREE, OP_EVENT, OP_WAIT_EVENT, OP_HOSTFN, OP_CALLBACK, OP_GEMM, OP_WORK };
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
    struct timespec hold_deadline;
    CUresult err; /* sticky error reported by the next synchronisation */
    pthread_t worker;
    struct fake_stream *next;
};

#define EVENT_MAGIC 0x4556454e54303031ULL
/* `pending`: the latest record has not completed (query/synchronise). `outstanding`:
 * the sequence numbers of every record still queued, since a wait is for the record
 * current when it was issued, even after the event is recorded again elsewhere. */
#define EVENT_OUTSTANDING_MAX 64
struct fake_event {
    uint64_t magic;
    int pending;
    uint64_t seq;
    int destroyed;
    uint64_t outstanding[EVENT_OUTSTANDING_MAX];
    int noutstanding;
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
    size_t vram_used;
    uint64_t *share;            /* FAKECUDA_DEVICE_SHARE (device 0 only): VRAM used by every process, or NULL */
    struct fake_ctx primary;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pid_t pid;               /* the process that initialised the device */
    int initialized;
    int ndevices;               /* FAKECUDA_DEVICES */
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
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .log_fd = -1 };

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static __thread int in_host_callback;
static __thread CUcontext current_ctx;

/* ------------------------------------------------------------------ log */

static void open_log(void)
{
    const char *path = getenv("FAKECUDA_LOG");
    if (path && *path)
        g.log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

void fg_log(const char *fmt, ...)
{
    if (g.log_fd < 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%d ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    (void)!write(g.log_fd, line, n);
}

void fg_note_fault(const char *what)
{
    __atomic_add_fetch(&g.faults, 1, __ATOMIC_SEQ_CST);
    fg_log("FAULT %s", what);
}

/* ------------------------------------------------------------------ setup */

/* Maps the counter of FAKECUDA_DEVICE_SHARE (created if missing): NULL without it. */
static uint64_t *open_share(void)
{
    const char *path = getenv("FAKECUDA_DEVICE_SHARE");
    if (!path || !*path)
        return NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "fakegpu: FAKECUDA_DEVICE_SHARE=%s: %s\n", path, strerror(errno));
        abort();
    }
    /* Growing a file never changes bytes already there, so processes may race here. */
    if (st.st_size < (off_t)sizeof(uint64_t) && ftruncate(fd, sizeof(uint64_t)) != 0)
        abort();
    void *m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        abort();
    return m;
}

/* Device `index`: `size` bytes of VRAM (whole granules, at least one). */
static void setup_device(int index, size_t size, const char *memfd_name)
{
    struct vram_device *d = &g.dev[index];
    d->vram = size & ~(VMM_GRANULARITY - 1);
    if (d->vram < VMM_GRANULARITY)
        d->vram = VMM_GRANULARITY;
    d->npages = d->vram / PAGE;
    d->vram_fd = memfd_create(memfd_name, MFD_CLOEXEC);
    if (d->vram_fd < 0 || ftruncate(d->vram_fd, d->vram) != 0)
        abort();
    d->vram_view = mmap(NULL, d->vram, PROT_READ | PROT_WRITE, MAP_SHARED, d->vram_fd, 0);
    void *va = mmap(NULL, d->vram, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d->vram_view == MAP_FAILED || va == MAP_FAILED)
        abort();
    d->vram_va = (uintptr_t)va;
    d->page_used = calloc(d->npages, 1);
    d->alloc_pages = calloc(d->npages, sizeof *d->alloc_pages);
    d->free_pending = calloc(d->npages, 1);
    if (!d->page_used || !d->alloc_pages || !d->free_pending)
        abort();
    d->primary.primary = 1;
    d->primary.device = index;
}

static void setup(void)
{
    open_log();
    const char *n = getenv("FAKECUDA_DEVICES");
    g.ndevices = n && *n ? atoi(n) : 1;
    if (g.ndevices < 1 || g.ndevices > MAX_DEVICES) {
        fprintf(stderr, "fakegpu: FAKECUDA_DEVICES=%s: 1 or %d devices\n", n, MAX_DEVICES);
        abort();
    }
    size_t vram = env_size("FAKECUDA_VRAM", 256UL << 20);
    const char *t = getenv("FAKECUDA_HOLD_TIMEOUT");
    g.hold_timeout_s = t ? atoi(t) : 20;
    setup_device(0, vram, "fakecuda-vram");
    /* One granule of slack: the kernel aligns large anonymous mappings to 2 MiB only
     * where it has transparent huge pages, and VMM addresses must be granule-aligned. */
    void *vmm = mmap(NULL, VMM_VA_SPACE + VMM_GRANULARITY, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (vmm == MAP_FAILED)
        abort();
    g.vmm_va = ((uintptr_t)vmm + VMM_GRANULARITY - 1) & ~(uintptr_t)(VMM_GRANULARITY - 1);
    g.dev[0].share = open_share();
    if (g.ndevices > 1)
        setup_device(1, env_size("FAKECUDA_VRAM1", vram), "fakecuda-vram1");
}

/* A process's VRAM goes back to the device when it exits (not a forked child's: its
 * copy of the parent's state holds nothing). */
__attribute__((destructor)) static void leave_share(void)
{
    if (!g.dev[0].share || !g.initialized || g.pid != getpid())
        return;
    pthread_mutex_lock(&g.lock);
    __atomic_sub_fetch(g.dev[0].share, (uint64_t)g.dev[0].vram_used, __ATOMIC_SEQ_CST);
    g.dev[0].share = NULL;
    pthread_mutex_unlock(&g.lock);
}

static void ensure_setup(void) { pthread_once(&setup_once, setup); }

size_t fg_vram_size(void) { ensure_setup(); return g.dev[0].vram; }
int fg_device_count(void) { ensure_setup(); return g.ndevices; }
int fg_device_valid(CUdevice d) { return d >= 0 && d < fg_device_count(); }
size_t fg_device_vram(CUdevice d) { return fg_device_valid(d) ? g.dev[d].vram : 0; }

CUresult fg_gate(const char *name, int needs_init, int needs_ctx)
{
    ensure_setup();
    if (in_host_callback) {
        char what[128];
        snprintf(what, sizeof what, "CALL_FROM_CALLBACK %s", name);
        fg_note_fault(what);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if (g.initialized && g.pid != getpid())
        return CUDA_ERROR_NOT_INITIALIZED; /* CUDA does not survive fork */
    if (needs_init && !g.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (needs_ctx && !current_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

CUresult fg_init(unsigned flags)
{
    ensure_setup();
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!g.initialized) {
        g.initialized = 1;
        g.pid = getpid();
    }
    pthread_mutex_unlock(&g.lock);
    return g.pid == getpid() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/* ------------------------------------------------------------------ contexts */

CUresult fg_ctx_primary(CUdevice device, CUcontext *ctx)
{
    pthread_mutex_lock(&g.lock);
    g.dev[device].primary.refs++;
    pthread_mutex_unlock(&g.lock);
    *ctx = &g.dev[device].primary;
    return CUDA_SUCCESS;
}
void fg_ctx_set_current(CUcontext ctx) { current_ctx = ctx; }
CUcontext fg_ctx_current(void) { return current_ctx; }
/* With one device, never read from the context (a destroyed one may still be current). */
CUdevice fg_current_device(void) { return g.ndevices > 1 && current_ctx ? current_ctx->device : 0; }
CUcontext fg_ctx_create(CUdevice device)
{
    struct fake_ctx *c = calloc(1, sizeof *c);
    c->device = device;
    return c;
}
int fg_ctx_valid(CUcontext ctx) { return ctx != NULL; }
void fg_ctx_destroy(CUcontext ctx)
{
    if (current_ctx == ctx)
        current_ctx = NULL;
    if (ctx && !ctx->primary)
        free(ctx);
}

/* ------------------------------------------------------------------ VRAM */

/* Counts `bytes` more VRAM in use on the shared device, unless every process's VRAM
 * together would then pass its size. Caller holds the lock. */
static int share_take(struct vram_device *d, uint64_t bytes)
{
    if (!d->share)
        return 1;
    uint64_t used = __atomic_load_n(d->share, __ATOMIC_SEQ_CST);
    do {
        if (used > d->vram || bytes > d->vram - used)
            return 0;
    } while (!__atomic_compare_exchange_n(d->share, &used, used + bytes, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return 1;
}

static void share_give(struct vram_device *d, uint64_t bytes)
{
    if (d->share)
        __atomic_sub_fetch(d->share, bytes, __ATOMIC_SEQ_CST);
}

/* VRAM in use on the device: every process's (FAKECUDA_DEVICE_SHARE), else this
 * process's. Lock held. */
static size_t device_used(struct vram_device *d)
{
    if (!d->share)
        return d->vram_used;
    uint64_t used = __atomic_load_n(d->share, __ATOMIC_SEQ_CST);
    return used < d->vram ? (size_t)used : d->vram;
}

/* First fit over pages; caller holds the lock. */
static int vram_take(struct vram_device *d, size_t bytes, size_t *first)
{
    size_t need = (bytes + PAGE - 1) / PAGE, run = 0;
    for (size_t i = 0; i < d->npages; i++) {
        run = d->page_used[i] ? 0 : run + 1;
        if (run == need) {
            if (!share_take(d, need * PAGE))
                return 0; /* other processes hold the rest of the device */
            size_t s = i + 1 - need;
            memset(d->page_used + s, 1, need);
            d->vram_used += need * PAGE;
            *first = s;
            return 1;
        }
    }
    return 0;
}

static void vram_give(struct vram_device *d, size_t first, size_t npages)
{
    memset(d->page_used + first, 0, npages);
    /* Freed VRAM is scrubbed so that stale data cannot make a test pass. */
    memset(d->vram_view + first * PAGE, 0x5a, npages * PAGE);
    d->vram_used -= npages * PAGE;
    share_give(d, npages * PAGE);
}

void fg_lock(void) { pthread_mutex_lock(&g.lock); }
void fg_unlock(void) { pthread_mutex_unlock(&g.lock); }

int fg_vram_take_locked(CUdevice device, size_t bytes, size_t *first)
{
    return fg_device_valid(device) && vram_take(&g.dev[device], bytes, first);
}

void fg_vram_give_locked(CUdevice device, size_t first, size_t bytes)
{
    vram_give(&g.dev[device], first, (bytes + PAGE - 1) / PAGE);
}

void fg_mem_info(CUdevice device, size_t *free_bytes, size_t *total)
{
    ensure_setup();
    struct vram_device *d = &g.dev[device];
    pthread_mutex_lock(&g.lock);
    if (free_bytes)
        *free_bytes = d->vram - device_used(d);
    if (total)
        *total = d->vram;
    pthread_mutex_unlock(&g.lock);
}

/* On the device of the calling thread's current context. */
static CUresult alloc_vram(CUdeviceptr *p, size_t n)
{
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vram_device *d = &g.dev[fg_current_device()];
    pthread_mutex_lock(&g.lock);
    size_t first;
    if (!vram_take(d, n, &first)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->alloc_pages[first] = (n + PAGE - 1) / PAGE;
    d->free_pending[first] = 0;
    pthread_mutex_unlock(&g.lock);
    *p = d->vram_va + first * PAGE;
    return CUDA_SUCCESS;
}

CUresult fg_mem_alloc(CUdeviceptr *p, size_t n) { return alloc_vram(p, n); }

/* The device whose VRAM address range holds p, or NULL. */
static struct vram_device *device_at(uintptr_t p)
{
    for (int i = 0; i < g.ndevices; i++)
        if (p >= g.dev[i].vram_va && p < g.dev[i].vram_va + g.dev[i].vram)
            return &g.dev[i];
    return NULL;
}

/* The first page of a live allocation that starts exactly at p, or -1; *dp: its device.
 * Lock held. */
static long alloc_first_page(CUdeviceptr p, struct vram_device **dp)
{
    struct vram_device *d = device_at(p);
    *dp = d;
    if (!d || (p - d->vram_va) % PAGE)
        return -1;
    size_t i = (p - d->vram_va) / PAGE;
    return d->alloc_pages[i] ? (long)i : -1;
}

static void release_alloc(struct vram_device *d, size_t first)
{
    size_t np = d->alloc_pages[first];
    d->alloc_pages[first] = 0;
    d->free_pending[first] = 0;
    vram_give(d, first, np);
}

static void wait_all_streams_idle(void);

CUresult fg_mem_free(CUdeviceptr p)
{
    if (p == 0)
        return CUDA_SUCCESS;
    CUresult managed_rc;
    if (fg_managed_free(p, &managed_rc))
        return managed_rc;
    /* cuMemFree synchronises with the device before freeing. */
    pthread_mutex_lock(&g.lock);
    struct vram_device *d;
    long first = alloc_first_page(p, &d);
    if (first < 0 || d->free_pending[first]) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    wait_all_streams_idle();
    first = alloc_first_page(p, &d);
    if (first < 0) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    release_alloc(d, first);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static int stream_valid(CUstream s);
static CUresult enqueue(CUstream s, struct op op);

CUresult fg_mem_address_range(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
    uintptr_t b = 0;
    size_t n = 0;
    pthread_mutex_lock(&g.lock);
    int found = fg_managed_range_locked(p, &b, &n);
    struct vram_device *d = device_at(p);
    if (!found && d) {
        /* The allocation whose pages run from its first page through p's. Pages that
         * managed memory holds are used but start no allocation. */
        size_t i = (p - d->vram_va) / PAGE;
        for (size_t j = i + 1; j-- > 0 && d->page_used[j];)
            if (d->alloc_pages[j]) {
                found = j + d->alloc_pages[j] > i;
                b = d->vram_va + j * PAGE;
                n = (size_t)d->alloc_pages[j] * PAGE;
                break;
            }
    }
    for (struct vmm_mapping *m = g.mappings; m && !found; m = m->next)
        if (p >= m->va && p < m->va + m->size) {
            found = 1;
            b = m->va;
            n = m->size;
        }
    pthread_mutex_unlock(&g.lock);
    if (!found)
        return CUDA_ERROR_NOT_FOUND;
    if (base)
        *base = b;
    if (size)
        *size = n;
    return CUDA_SUCCESS;
}

CUresult fg_mem_alloc_async(CUdeviceptr *p, size_t n, CUstream s)
{
    if (!is_default_stream(s)) {
        pthread_mutex_lock(&g.lock);
        int ok = stream_valid(s);
        pthread_mutex_unlock(&g.lock);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
    }
    return alloc_vram(p, n);
}

CUresult fg_mem_free_async(CUdeviceptr p, CUstream s)
{
    if (p == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct vram_device *d;
    long first = alloc_first_page(p, &d);
    if (first < 0 || d->free_pending[first] || (!is_default_stream(s) && !stream_valid(s))) {
        pthread_mutex_unlock(&g.lock);
        return first < 0 || d->free_pending[first] ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    d->free_pending[first] = 1;
    pthread_mutex_unlock(&g.lock);
    return enqueue(s, (struct op){ .kind = OP_FREE, .a = p });
}

CUmemoryPool fg_default_pool(void) { return &g.pool; }
int fg_pool_valid(CUmemoryPool pool) { return pool == &g.pool; }

/* ------------------------------------------------------------------ host registration */

static struct hostreg *reg_containing(uintptr_t p)
{
    for (struct hostreg *r = g.regs; r; r = r->next)
        if (p >= r->base && p < r->base + r->size)
            return r;
    return NULL;
}

/* A range the kernel maps with VM_IO or VM_PFNMAP cannot be pinned; mlock would
 * silently skip it, so the mlock fallback checks the flags itself. */
static int range_has_io_or_pfnmap(uintptr_t start, uintptr_t end)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return 0;
    char line[512];
    uintptr_t lo = 0, hi = 0;
    int bad = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            lo = a; hi = b;
        } else if (!strncmp(line, "VmFlags:", 8) && lo < end && hi > start) {
            if (strstr(line, " io") || strstr(line, " pf"))
                bad = 1;
        }
    }
    fclose(f);
    return bad;
}

static int pin_iouring(uintptr_t start, uintptr_t end, int *ring_fd)
{
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    int fd = (int)syscall(__NR_io_uring_setup, 1, &params);
    if (fd < 0)
        return -errno;
    size_t n = (end - start + IOURING_MAX_BUFFER - 1) / IOURING_MAX_BUFFER;
    struct iovec *iov = calloc(n, sizeof *iov);
    if (!iov) {
        close(fd);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        iov[i].iov_base = (void *)(start + i * IOURING_MAX_BUFFER);
        size_t left = end - start - i * IOURING_MAX_BUFFER;
        iov[i].iov_len = left < IOURING_MAX_BUFFER ? left : IOURING_MAX_BUFFER;
    }
    int rc = (int)syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS, iov, (unsigned)n);
    int err = errno;
    free(iov);
    if (rc < 0) {
        close(fd);
        return -err;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    *ring_fd = fd;
    return 0;
}

static CUresult pin_error(int err)
{
    return err == ENOMEM || err == EAGAIN || err == EMFILE || err == ENFILE
        ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

CUresult fg_host_register(void *ptr, size_t n, unsigned flags)
{
    uintptr_t p = (uintptr_t)ptr;
    if (!ptr || n == 0 || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g.lock);
    for (struct hostreg *r = g.regs; r; r = r->next)
        if (p < r->base + r->size && r->base < p + n) {
            pthread_mutex_unlock(&g.lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    pthread_mutex_unlock(&g.lock);

    uintptr_t start = p & ~(PAGE - 1), end = (p + n + PAGE - 1) & ~(PAGE - 1);
    int ring = -1;
    const char *how = getenv("FAKECUDA_PIN");
    int rc = (how && !strcmp(how, "mlock")) ? -ENOSYS : pin_iouring(start, end, &ring);
    const char *pinned_by = "io_uring";
    if (rc == -ENOSYS || rc == -EPERM) {
        /* No io_uring here (or disabled): pin with mlock, as far as it can. */
        pinned_by = "mlock";
        if (range_has_io_or_pfnmap(start, end))
            rc = -EFAULT;
        else
            rc = mlock((void *)start, end - start) ? -errno : 0;
    }
    if (rc < 0) {
        fg_log("PIN_FAILED by=%s ptr=%#lx size=%zu errno=%d", pinned_by, (unsigned long)p, n, -rc);
        return pin_error(-rc);
    }
    struct hostreg *r = calloc(1, sizeof *r);
    r->base = p;
    r->size = n;
    r->flags = flags;
    r->ring_fd = ring;
    pthread_mutex_lock(&g.lock);
    /* Re-check: another thread may have registered an overlapping range meanwhile. */
    for (struct hostreg *o = g.regs; o; o = o->next)
        if (p < o->base + o->size && o->base < p + n) {
            pthread_mutex_unlock(&g.lock);
            if (ring >= 0)
                close(ring);
            free(r);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    r->next = g.regs;
    g.regs = r;
    g.hostreg_bytes += n;
    pthread_mutex_unlock(&g.lock);
    fg_log("PINNED by=%s ptr=%#lx size=%zu", pinned_by, (unsigned long)p, n);
    return CUDA_SUCCESS;
}

CUresult fg_host_unregister(void *ptr)
{
    pthread_mutex_lock(&g.lock);
    struct hostreg **pp = &g.regs, *r;
    while ((r = *pp) && r->base != (uintptr_t)ptr)
        pp = &r->next;
    if (!r) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    *pp = r->next;
    g.hostreg_bytes -= r->size;
    pthread_mutex_unlock(&g.lock);
    if (r->ring_fd >= 0)
        close(r->ring_fd);
    else
        munlock((void *)(r->base & ~(PAGE - 1)),
                ((r->base + r->size + PAGE - 1) & ~(PAGE - 1)) - (r->base & ~(PAGE - 1)));
    free(r);
    return CUDA_SUCCESS;
}

CUresult fg_host_device_pointer(CUdeviceptr *d, void *p, unsigned flags)
{
    if (!d || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    struct hostreg *r = reg_containing((uintptr_t)p);
    pthread_mutex_unlock(&g.lock);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ VMM */

size_t fg_vmm_granularity(void) { return VMM_GRANULARITY; }

/* FAKECUDA_FAIL_VMM: a comma-separated list of VMM steps made to fail (reserve,
 * create-device, create-host, map, set-access), so that tests can reach an
 * interposer's undo paths. Each injected failure is logged as INJECTED. */
static int vmm_step_fails(const char *step)
{
    const char *list = getenv("FAKECUDA_FAIL_VMM");
    size_t n = strlen(step);
    for (const char *p = list; p && (p = strstr(p, step)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) {
            fg_log("INJECTED %s failure", step);
            return 1;
        }
    return 0;
}

void fakegpu_vmm_live(struct fakegpu_vmm_counts *out)
{
    ensure_setup();
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g.lock);
    for (struct vmm_handle *h = g.handles; h; h = h->next)
        out->handles++;
    for (struct vmm_reservation *r = g.reservations; r; r = r->next)
        out->reservations++;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        out->mappings++;
    pthread_mutex_unlock(&g.lock);
}

static struct vmm_handle *handle_lookup(CUmemGenericAllocationHandle h)
{
    for (struct vmm_handle *x = g.handles; x; x = x->next)
        if ((CUmemGenericAllocationHandle)(uintptr_t)x == h && x->magic == VMM_MAGIC)
            return x;
    return NULL;
}

CUresult fg_vmm_create(CUmemGenericAllocationHandle *out, size_t n, const CUmemAllocationProp *prop,
                       unsigned long long flags)
{
    if (!out || !prop || n == 0 || n % VMM_GRANULARITY || flags ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *h = calloc(1, sizeof *h);
    h->magic = VMM_MAGIC;
    h->size = n;
    h->memfd = -1;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: {
        if (!fg_device_valid(prop->location.id)) {
            free(h);
            return CUDA_ERROR_INVALID_DEVICE;
        }
        if (vmm_step_fails("create-device")) {
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        size_t first;
        struct vram_device *d = &g.dev[prop->location.id];
        pthread_mutex_lock(&g.lock);
        int ok = vram_take(d, n, &first);
        pthread_mutex_unlock(&g.lock);
        if (!ok) {
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        h->device = prop->location.id;
        h->vram_off = first * PAGE;
        h->view = d->vram_view + h->vram_off;
        break;
    }
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        /* Host memory is neither GPUDirect-RDMA capable nor compressible: the driver
         * refuses host requests that ask for either (seen on the H200). */
        if (prop->allocFlags.gpuDirectRDMACapable || prop->allocFlags.compressionType ||
            (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0)) {
            free(h);
            return CUDA_ERROR_INVALID_VALUE; /* the fake host has one NUMA node */
        }
        if (vmm_step_fails("create-host")) {
            free(h);
            return CUDA_ERROR_NOT_SUPPORTED; /* as a driver without host-NUMA memory */
        }
        h->host = 1;
        h->memfd = memfd_create("fakecuda-host-numa", MFD_CLOEXEC);
        if (h->memfd < 0 || ftruncate(h->memfd, n) ||
            (h->view = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, h->memfd, 0)) == MAP_FAILED) {
            if (h->memfd >= 0)
                close(h->memfd);
            free(h);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        break;
    default:
        free(h);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g.lock);
    h->next = g.handles;
    g.handles = h;
    pthread_mutex_unlock(&g.lock);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* Frees a handle's memory once it is released and unmapped. Lock held. */
static void handle_maybe_free(struct vmm_handle *h)
{
    if (!h->released || h->mapcount)
        return;
    struct vmm_handle **pp = &g.handles;
    while (*pp != h)
        pp = &(*pp)->next;
    *pp = h->next;
    if (h->host) {
        munmap(h->view, h->size);
        close(h->memfd);
    } else {
        vram_give(&g.dev[h->device], h->vram_off / PAGE, h->size / PAGE);
    }
    h->magic = 0;
    free(h);
}

CUresult fg_vmm_release(CUmemGenericAllocationHandle hv)
{
    pthread_mutex_lock(&g.lock);
    struct vmm_handle *h = handle_lookup(hv);
    if (!h || h->released) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->released = 1;
    handle_maybe_free(h);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_reserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags)
{
    (void)addr; /* a hint only */
    if (!p || n == 0 || n % VMM_GRANULARITY || flags || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < VMM_GRANULARITY)
        align = VMM_GRANULARITY;
    if (vmm_step_fails("reserve"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g.lock);
    size_t off = (g.vmm_next + align - 1) & ~(align - 1);
    if (off + n > VMM_VA_SPACE) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g.vmm_next = off + n;
    struct vmm_reservation *r = calloc(1, sizeof *r);
    r->va = g.vmm_va + off;
    r->size = n;
    r->next = g.reservations;
    g.reservations = r;
    pthread_mutex_unlock(&g.lock);
    *p = r->va;
    return CUDA_SUCCESS;
}

/* Whether mapping `m` shares any byte with [p, p + n). */
static int mapping_overlaps(const struct vmm_mapping *m, CUdeviceptr p, size_t n)
{
    return m->va < p + n && p < m->va + m->size;
}

CUresult fg_vmm_address_free(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&g.lock);
    struct vmm_reservation **pp = &g.reservations, *r;
    while ((r = *pp) && !(r->va == p && r->size == n))
        pp = &r->next;
    if (!r) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n)) {
            pthread_mutex_unlock(&g.lock);
            return CUDA_ERROR_INVALID_VALUE; /* still mapped */
        }
    *pp = r->next;
    free(r);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

static void va_to_none(uintptr_t va, size_t n)
{
    mmap((void *)va, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

CUresult fg_vmm_map(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle hv, unsigned long long flags)
{
    if (off || flags || n == 0 || p % VMM_GRANULARITY || n % VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (vmm_step_fails("map"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g.lock);
    struct vmm_handle *h = handle_lookup(hv);
    int inside = 0;
    for (struct vmm_reservation *r = g.reservations; r; r = r->next)
        if (p >= r->va && p + n <= r->va + r->size)
            inside = 1;
    int overlap = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n))
            overlap = 1;
    if (!h || h->released || n > h->size || !inside || overlap) {
        pthread_mutex_unlock(&g.lock);
        return h && !h->released ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    if (h->host &&
        mmap((void *)p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, h->memfd, 0) == MAP_FAILED) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct vmm_mapping *m = calloc(1, sizeof *m);
    m->va = p;
    m->size = n;
    m->h = h;
    m->next = g.mappings;
    g.mappings = m;
    h->mapcount++;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_unmap(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&g.lock);
    /* The range must be exactly covered by whole mappings. */
    size_t covered = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next) {
        if (mapping_overlaps(m, p, n)) {
            if (m->va < p || m->va + m->size > p + n) {
                pthread_mutex_unlock(&g.lock);
                return CUDA_ERROR_INVALID_VALUE;
            }
            covered += m->size;
        }
    }
    if (covered != n || n == 0) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct vmm_mapping **pp = &g.mappings, *m;
    while ((m = *pp)) {
        if (m->va >= p && m->va + m->size <= p + n) {
            *pp = m->next;
            if (m->h->host)
                va_to_none(m->va, m->size);
            m->h->mapcount--;
            handle_maybe_free(m->h);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_vmm_set_access(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
    if (!d || count == 0 || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int t = d[i].location.type;
        if (t == CU_MEM_LOCATION_TYPE_DEVICE && !fg_device_valid(d[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (t != CU_MEM_LOCATION_TYPE_DEVICE && t != CU_MEM_LOCATION_TYPE_HOST &&
            t != CU_MEM_LOCATION_TYPE_HOST_NUMA && t != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (vmm_step_fails("set-access"))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    size_t covered = 0;
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (mapping_overlaps(m, p, n))
            covered += m->size;
    if (covered < n) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_VALUE; /* the whole range must be mapped */
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next) {
        if (!mapping_overlaps(m, p, n))
            continue;
        for (size_t i = 0; i < count; i++) {
            if (d[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
                m->dev_access = d[i].flags;
            } else if (m->h->host) {
                m->host_access = d[i].flags;
                mprotect((void *)m->va, m->size,
                         d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE :
                         d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE);
            } else {
                pthread_mutex_unlock(&g.lock);
                return CUDA_ERROR_INVALID_VALUE; /* host access to device memory */
            }
        }
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ fake GPU access */

/* What the device sees at address p: its view of the memory and how many bytes are
 * contiguous there; NULL when p is not device-accessible. Lock held. */
static unsigned char *device_view(uintptr_t p, size_t *contiguous, const char **kind)
{
    struct vram_device *d = device_at(p);
    if (d) {
        size_t i = (p - d->vram_va) / PAGE;
        if (!d->page_used[i])
            return NULL;
        size_t end = i;
        while (end < d->npages && d->page_used[end])
            end++;
        *contiguous = d->vram_va + end * PAGE - p;
        *kind = "vram";
        return d->vram_view + (p - d->vram_va);
    }
    for (struct vmm_mapping *m = g.mappings; m; m = m->next)
        if (p >= m->va && p < m->va + m->size) {
            if (!m->dev_access)
                return NULL; /* mapped but no cuMemSetAccess for the device */
            *contiguous = m->va + m->size - p;
            *kind = m->h->host ? "vmm-host" : "vmm-device";
            return m->h->view + (p - m->va);
        }
    /* Managed memory: its data is always at the host address, wherever it is resident. */
    uintptr_t mbase;
    size_t msize;
    if (fg_managed_range_locked(p, &mbase, &msize)) {
        *contiguous = mbase + msize - p;
        *kind = "managed";
        return (unsigned char *)p;
    }
    struct hostreg *r = reg_containing(p);
    if (r) {
        *contiguous = r->base + r->size - p;
        *kind = "hostreg";
        return (unsigned char *)p;
    }
    return NULL;
}

/* Checks that [p, p+n) is all device-accessible. Lock held. */
static int device_range_ok(uintptr_t p, size_t n)
{
    while (n) {
        size_t c;
        const char *k;
        if (!device_view(p, &c, &k))
            return 0;
        if (c > n)
            c = n;
        p += c;
        n -= c;
    }
    return 1;
}

const char *fakegpu_ptr_kind(CUdeviceptr p)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t c;
    const char *k = "none";
    if (!device_view(p, &c, &k))
        k = "none";
    pthread_mutex_unlock(&g.lock);
    return k;
}

static inline uint64_t pattern_word(uint32_t seed, uint64_t idx)
{
    uint64_t x = idx * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)seed << 32 | seed) * 0xD1B54A32D192ED03ULL;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 29);
}

/* Pattern of the bytes [off, off+n) of a buffer filled with `seed`. */
static void pattern_fill_at(unsigned char *p, uint64_t off, size_t n, uint32_t seed)
{
    while (n) {
        if ((off & 7) == 0 && n >= 8 && ((uintptr_t)p & 7) == 0) {
            *(uint64_t *)p = pattern_word(seed, off >> 3);
            p += 8; off += 8; n -= 8;
        } else {
            *p++ = (unsigned char)(pattern_word(seed, off >> 3) >> ((off & 7) * 8));
            off++; n--;
        }
    }
}

static unsigned long long pattern_check_at(const unsigned char *p, uint64_t off, size_t n, uint32_t seed)
{
    unsigned long long bad = 0;
    while (n) {
        if ((off & 7) == 0 && n >= 8 && ((uintptr_t)p & 7) == 0) {
            bad += *(const uint64_t *)p != pattern_word(seed, off >> 3);
            p += 8; off += 8; n -= 8;
        } else {
            bad += *p++ != (unsigned char)(pattern_word(seed, off >> 3) >> ((off & 7) * 8));
            off++; n--;
        }
    }
    return bad;
}

void fakegpu_pattern_fill(void *p, size_t n, uint32_t seed) { pattern_fill_at(p, 0, n, seed); }
unsigned long long fakegpu_pattern_check(const void *p, size_t n, uint32_t seed)
{
    return pattern_check_at(p, 0, n, seed);
}

/* Resolves [p, p+n) as a device range; NULL if any part is not device-accessible.
 * For host (non-device) pointers of a memcpy, `host_ok` lets plain host memory through. */
typedef void (*chunk_fn)(unsigned char *view, uint64_t off, size_t n, struct op *op);

static int for_each_device_chunk(uintptr_t p, size_t n, chunk_fn fn, struct op *op)
{
    pthread_mutex_lock(&g.lock);
    int ok = device_range_ok(p, n);
    pthread_mutex_unlock(&g.lock);
    if (!ok)
        return 0;
    uint64_t off = 0;
    while (off < n) {
        size_t c;
        const char *k;
        pthread_mutex_lock(&g.lock);
        unsigned char *v = device_view(p + off, &c, &k);
        pthread_mutex_unlock(&g.lock);
        if (!v)
            return 0;
        if (c > n - off)
            c = n - off;
        fn(v, off, c, op);
        off += c;
    }
    return 1;
}

static void chunk_fill(unsigned char *v, uint64_t off, size_t n, struct op *op) { pattern_fill_at(v, off, n, op->seed); }
static void chunk_verify(unsigned char *v, uint64_t off, size_t n, struct op *op)
{
    op->n = op->n; /* unchanged */
    *op->result += pattern_check_at(v, off, n, op->seed);
}
static void chunk_set(unsigned char *v, uint64_t off, size_t n, struct op *op) { (void)off; memset(v, (int)op->seed, n); }

/* A pointer in the device's address ranges (VRAM, VMM) must be device-accessible;
 * anything else is host memory, which a copy engine reaches directly. Lock held. */
static int is_device_address(uintptr_t p)
{
    if (device_at(p))
        return 1;
    return p >= g.vmm_va && p < g.vmm_va + VMM_VA_SPACE;
}

static int copy_range(uintptr_t dst, uintptr_t src, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t cd = n - off, cs = n - off, c;
        const char *k;
        unsigned char *vd, *vs;
        pthread_mutex_lock(&g.lock);
        if (is_device_address(dst + off)) {
            vd = device_view(dst + off, &cd, &k);
        } else {
            vd = (unsigned char *)(dst + off);
        }
        if (is_device_address(src + off)) {
            vs = device_view(src + off, &cs, &k);
        } else {
            vs = (unsigned char *)(src + off);
        }
        pthread_mutex_unlock(&g.lock);
        if (!vd || !vs)
            return 0;
        c = n - off;
        if (cd < c) c = cd;
        if (cs < c) c = cs;
        memmove(vd, vs, c);
        off += c;
    }
    return 1;
}

/* Records an illegal access (sticky on a created stream, as the driver's are) and
 * returns the error a synchronous caller sees. */
static CUresult fault(struct fake_stream *s, const char *what, uintptr_t p, size_t n)
{
    char msg[160];
    snprintf(msg, sizeof msg, "ILLEGAL_ADDRESS %s ptr=%#lx size=%zu", what, (unsigned long)p, n);
    fg_note_fault(msg);
    if (s) {
        pthread_mutex_lock(&g.lock);
        s->err = CUDA_ERROR_ILLEGAL_ADDRESS;
        pthread_mutex_unlock(&g.lock);
    }
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* ------------------------------------------------------------------ matrix products */

static float element_get(const unsigned char *base, int type, size_t index)
{
    if (type == FAKEGPU_R_16BF) {
        uint16_t half;
        memcpy(&half, base + index * 2, 2);
        uint32_t bits = (uint32_t)half << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    float f;
    memcpy(&f, base + index * 4, 4);
    return f;
}

static void element_set(unsigned char *base, int type, size_t index, float f)
{
    if (type == FAKEGPU_R_16BF) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint16_t half = (uint16_t)(bits >> 16); /* truncation: deterministic is enough */
        memcpy(base + index * 2, &half, 2);
        return;
    }
    memcpy(base + index * 4, &f, 4);
}

static size_t element_size(int type) { return type == FAKEGPU_R_16BF ? 2 : 4; }

/* Bytes a column-major rows x cols matrix (ld) spans, over the batch. */
static size_t gemm_span(long rows, long cols, long ld, long stride, int batch, int type)
{
    return ((size_t)stride * (size_t)(batch - 1) + (size_t)ld * (size_t)(cols - 1) + (size_t)rows) * element_size(type);
}

/* What the device sees at p, for the log ("none" when nothing). Lock not held. */
static const char *kind_at(uintptr_t p)
{
    size_t c;
    const char *k = "none";
    pthread_mutex_lock(&g.lock);
    if (!device_view(p, &c, &k))
        k = "none";
    pthread_mutex_unlock(&g.lock);
    return k;
}

/* C = alpha op(A) op(B) + beta C, column-major, read and written through the device's
 * view as a kernel would: operands are gathered into host buffers first. */
static CUresult run_gemm(struct fake_stream *s, const struct fakegpu_gemm *m)
{
    long a_rows = m->transa ? m->k : m->m, a_cols = m->transa ? m->m : m->k;
    long b_rows = m->transb ? m->n : m->k, b_cols = m->transb ? m->k : m->n;
    size_t a_span = gemm_span(a_rows, a_cols, m->lda, m->stride_a, m->batch, m->type);
    size_t b_span = gemm_span(b_rows, b_cols, m->ldb, m->stride_b, m->batch, m->type);
    size_t c_span = gemm_span(m->m, m->n, m->ldc, m->stride_c, m->batch, m->type);
    fg_log("GEMM a=%s b=%s m=%d n=%d k=%d batch=%d", kind_at(m->a), kind_at(m->b), m->m, m->n, m->k, m->batch);
    unsigned char *a = malloc(a_span), *b = malloc(b_span), *c = malloc(c_span);
    CUresult rc = CUDA_SUCCESS;
    if (!a || !b || !c) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!copy_range((uintptr_t)a, m->a, a_span)) {
        rc = fault(s, "gemm A", m->a, a_span);
    } else if (!copy_range((uintptr_t)b, m->b, b_span)) {
        rc = fault(s, "gemm B", m->b, b_span);
    } else if (!copy_range((uintptr_t)c, m->c, c_span)) {
        rc = fault(s, "gemm C", m->c, c_span);
    } else {
        for (int batch = 0; batch < m->batch; batch++) {
            size_t ao = (size_t)batch * m->stride_a, bo = (size_t)batch * m->stride_b, co = (size_t)batch * m->stride_c;
            for (long j = 0; j < m->n; j++)
                for (long i = 0; i < m->m; i++) {
                    float sum = 0;
                    for (long l = 0; l < m->k; l++) {
                        size_t ai = m->transa ? (size_t)(l + i * m->lda) : (size_t)(i + l * m->lda);
                        size_t bi = m->transb ? (size_t)(j + l * m->ldb) : (size_t)(l + j * m->ldb);
                        sum += element_get(a, m->type, ao + ai) * element_get(b, m->type, bo + bi);
                    }
                    size_t ci = co + (size_t)(i + j * m->ldc);
                    float old = m->beta != 0 ? element_get(c, m->type, ci) : 0;
                    element_set(c, m->type, ci, m->alpha * sum + m->beta * old);
                }
        }
        if (!copy_range(m->c, (uintptr_t)c, c_span))
            rc = fault(s, "gemm C", m->c, c_span);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}

/* Whether the record `seq` of `e` is still queued. Lock held. */
static int event_outstanding(const struct fake_event *e, uint64_t seq)
{
    for (int i = 0; i < e->noutstanding; i++)
        if (e->outstanding[i] == seq)
            return 1;
    return 0;
}

/* Runs one operation. Returns the error a synchronous caller sees. */
static CUresult run_op(struct fake_stream *s, struct op *op)
{
    switch (op->kind) {
    case OP_FILL:
        if (!for_each_device_chunk(op->a, op->n, chunk_fill, op))
            return fault(s, "fill", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_VERIFY:
        *op->result = 0;
        if (!for_each_device_chunk(op->a, op->n, chunk_verify, op)) {
            *op->result = ~0ULL;
            return fault(s, "verify", op->a, op->n);
        }
        return CUDA_SUCCESS;
    case OP_SET:
        if (!for_each_device_chunk(op->a, op->n, chunk_set, op))
            return fault(s, "memset", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_COPY:
        if (!copy_range(op->a, op->b, op->n))
            return fault(s, "memcpy", op->a, op->n);
        return CUDA_SUCCESS;
    case OP_GEMM: {
        struct fakegpu_gemm *gemm = op->data;
        CUresult rc = run_gemm(s, gemm);
        free(gemm);
        return rc;
    }
    case OP_FREE: {
        pthread_mutex_lock(&g.lock);
        struct vram_device *d;
        long first = alloc_first_page(op->a, &d);
        if (first >= 0)
            release_alloc(d, first);
        pthread_mutex_unlock(&g.lock);
        fg_log("STREAM_FREE ptr=%#llx", op->a);
        return CUDA_SUCCESS;
    }
    case OP_EVENT:
        pthread_mutex_lock(&g.lock);
        if (op->ev->seq == op->ev_seq)
            op->ev->pending = 0;
        for (int i = 0; i < op->ev->noutstanding; i++)
            if (op->ev->outstanding[i] == op->ev_seq) {
                op->ev->outstanding[i] = op->ev->outstanding[--op->ev->noutstanding];
                break;
            }
        if (op->ev->destroyed && !op->ev->pending && op->ev->noutstanding == 0) {
            op->ev->magic = 0;
            free(op->ev);
        }
        pthread_cond_broadcast(&g.cv);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    case OP_WAIT_EVENT:
        pthread_mutex_lock(&g.lock);
        while (op->ev->magic == EVENT_MAGIC && event_outstanding(op->ev, op->ev_seq))
            pthread_cond_wait(&g.cv, &g.lock);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    case OP_HOSTFN:
        in_host_callback = 1;
        op->fn(op->data);
        in_host_callback = 0;
        return CUDA_SUCCESS;
    case OP_CALLBACK:
        in_host_callback = 1;
        op->cb(s, CUDA_SUCCESS, op->data);
        in_host_callback = 0;
        return CUDA_SUCCESS;
    case OP_WORK:
        op->fn(op->data);
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_UNKNOWN;
}

/* ------------------------------------------------------------------ streams */

static int stream_valid(CUstream s)
{
    for (struct fake_stream *x = g.streams; x; x = x->next)
        if (x == s && !x->destroyed)
            return 1;
    return 0;
}

static int stream_idle(struct fake_stream *s) { return !s->head && !s->running; }

static void *stream_worker(void *arg)
{
    struct fake_stream *s = arg;
    pthread_mutex_lock(&g.lock);
    for (;;) {
        if (s->held && s->head) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            if (now.tv_sec > s->hold_deadline.tv_sec ||
                (now.tv_sec == s->hold_deadline.tv_sec && now.tv_nsec >= s->hold_deadline.tv_nsec)) {
                s->held = 0;
                pthread_mutex_unlock(&g.lock);
                fg_note_fault("HOLD_TIMEOUT: a stream held by the test was never released "
                              "(something waited on held work)");
                pthread_mutex_lock(&g.lock);
                continue;
            }
            pthread_cond_timedwait(&g.cv, &g.lock, &s->hold_deadline);
            continue;
        }
        if (!s->head) {
            if (s->destroyed)
                break;
            pthread_cond_wait(&g.cv, &g.lock);
            continue;
        }
        struct op *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&g.lock);
        run_op(s, op);
        free(op);
        pthread_mutex_lock(&g.lock);
        s->running = 0;
        pthread_cond_broadcast(&g.cv);
    }
    struct fake_stream **pp = &g.streams;
    while (*pp != s)
        pp = &(*pp)->next;
    *pp = s->next;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    s->magic = 0;
    free(s);
    return NULL;
}

CUresult fg_stream_create(CUstream *out, unsigned flags) { return fg_stream_create_with_priority(out, flags, 0); }

/* The priority is clamped to the device's range, as the driver does; the fake's streams
 * all run at once, so it is only recorded. */
CUresult fg_stream_create_with_priority(CUstream *out, unsigned flags, int priority)
{
    if (!out || (flags & ~1u))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_stream *s = calloc(1, sizeof *s);
    s->magic = STREAM_MAGIC;
    s->flags = flags;
    s->priority = priority > FG_PRIORITY_LEAST ? FG_PRIORITY_LEAST
                : priority < FG_PRIORITY_GREATEST ? FG_PRIORITY_GREATEST : priority;
    pthread_mutex_lock(&g.lock);
    if (pthread_create(&s->worker, NULL, stream_worker, s)) {
        pthread_mutex_unlock(&g.lock);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_detach(s->worker);
    s->next = g.streams;
    g.streams = s;
    pthread_mutex_unlock(&g.lock);
    *out = s;
    return CUDA_SUCCESS;
}

CUresult fg_stream_get_priority(CUstream s, int *priority)
{
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_default_stream(s)) {
        *priority = FG_PRIORITY_LEAST;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&g.lock);
    int ok = stream_valid(s);
    if (ok)
        *priority = s->priority;
    pthread_mutex_unlock(&g.lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

int fg_stream_usable(CUstream s)
{
    if (is_default_stream(s))
        return 1;
    pthread_mutex_lock(&g.lock);
    int ok = stream_valid(s);
    pthread_mutex_unlock(&g.lock);
    return ok;
}

CUresult fg_stream_destroy(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (is_default_stream(s) || !stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* Pending work still completes; the worker frees the stream afterwards. */
    s->destroyed = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

/* Work on a default stream runs now, in the caller; other streams queue it. */
/* Runs `work` now on a default stream, else queues a copy of it on `s`. */
static CUresult enqueue(CUstream s, struct op work)
{
    if (is_default_stream(s))
        return run_op(NULL, &work);
    struct op *op = malloc(sizeof *op);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *op = work;
    pthread_mutex_lock(&g.lock);
    if (!stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        free(op);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_enqueue_work(CUstream s, void (*fn)(void *data), void *data)
{
    return enqueue(s, (struct op){ .kind = OP_WORK, .fn = fn, .data = data });
}

void fg_wait_idle_locked(void) { wait_all_streams_idle(); }

/* Lock held. */
static void wait_all_streams_idle(void)
{
    for (;;) {
        int busy = 0;
        for (struct fake_stream *x = g.streams; x; x = x->next)
            if (!stream_idle(x))
                busy = 1;
        if (!busy)
            return;
        pthread_cond_wait(&g.cv, &g.lock);
    }
}

CUresult fg_stream_sync(CUstream s)
{
    if (is_default_stream(s))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    if (!stream_valid(s)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    while (!stream_idle(s))
        pthread_cond_wait(&g.cv, &g.lock);
    CUresult rc = s->err;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_stream_query(CUstream s)
{
    if (is_default_stream(s))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g.lock);
    CUresult rc = !stream_valid(s) ? CUDA_ERROR_INVALID_HANDLE
                : s->err ? s->err : stream_idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_ctx_sync(void)
{
    pthread_mutex_lock(&g.lock);
    wait_all_streams_idle();
    CUresult rc = CUDA_SUCCESS;
    for (struct fake_stream *x = g.streams; x; x = x->next)
        if (x->err)
            rc = x->err;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

void fakegpu_stream_hold(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!is_default_stream(s) && stream_valid(s)) {
        s->held = 1;
        clock_gettime(CLOCK_REALTIME, &s->hold_deadline);
        s->hold_deadline.tv_sec += g.hold_timeout_s;
    }
    pthread_mutex_unlock(&g.lock);
}

void fakegpu_stream_release(CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!is_default_stream(s) && stream_valid(s))
        s->held = 0;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
}

/* ------------------------------------------------------------------ events */

CUresult fg_event_create(CUevent *out, unsigned flags)
{
    if (!out || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_event *e = calloc(1, sizeof *e);
    e->magic = EVENT_MAGIC;
    *out = e;
    return CUDA_SUCCESS;
}

static int event_valid(CUevent e) { return e && e->magic == EVENT_MAGIC && !e->destroyed; }

CUresult fg_event_destroy(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    e->destroyed = 1;
    if (!e->pending && e->noutstanding == 0) {
        e->magic = 0;
        free(e);
    }
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_event_record(CUevent e, CUstream s)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (e->noutstanding == EVENT_OUTSTANDING_MAX) {
        pthread_mutex_unlock(&g.lock);
        fg_note_fault("EVENT_OUTSTANDING: more queued records of one event than the fake tracks");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    e->seq++;
    e->pending = 1;
    uint64_t seq = e->seq;
    e->outstanding[e->noutstanding++] = seq;
    pthread_mutex_unlock(&g.lock);
    return enqueue(s, (struct op){ .kind = OP_EVENT, .ev = e, .ev_seq = seq });
}

CUresult fg_event_query(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    CUresult rc = !event_valid(e) ? CUDA_ERROR_INVALID_HANDLE : e->pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    pthread_mutex_unlock(&g.lock);
    return rc;
}

CUresult fg_event_sync(CUevent e)
{
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    while (e->pending)
        pthread_cond_wait(&g.cv, &g.lock);
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fg_stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    if (!event_valid(e)) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* The wait is for the record current now (none: nothing to wait for). */
    uint64_t seq = e->pending ? e->seq : 0;
    pthread_mutex_unlock(&g.lock);
    if (is_default_stream(s)) {
        /* The default stream waits in the caller. */
        pthread_mutex_lock(&g.lock);
        while (seq && event_outstanding(e, seq))
            pthread_cond_wait(&g.cv, &g.lock);
        pthread_mutex_unlock(&g.lock);
        return CUDA_SUCCESS;
    }
    return enqueue(s, (struct op){ .kind = OP_WAIT_EVENT, .ev = e, .ev_seq = seq });
}

CUresult fg_launch_host_fn(CUstream s, CUhostFn fn, void *data)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_HOSTFN, .fn = fn, .data = data });
}

CUresult fg_stream_add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags)
{
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_CALLBACK, .cb = cb, .data = data });
}

/* ------------------------------------------------------------------ copies, kernels */

CUresult fg_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    int bad = (is_device_address(dst) && !device_range_ok(dst, n)) ||
              (is_device_address(src) && !device_range_ok(src, n));
    pthread_mutex_unlock(&g.lock);
    if (bad)
        return CUDA_ERROR_INVALID_VALUE; /* the driver validates copy ranges up front */
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_COPY, .a = dst, .b = src, .n = n });
}

CUresult fg_memset8(CUdeviceptr dst, unsigned char v, size_t n, CUstream s, int async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    return enqueue(async ? s : NULL, (struct op){ .kind = OP_SET, .a = dst, .n = n, .seed = v });
}

CUresult fakegpu_launch_gemm(const struct fakegpu_gemm *gemm, CUstream s)
{
    CUresult rc = fg_gate("fakegpu_launch_gemm", 1, 1);
    if (rc)
        return rc;
    if (!gemm || gemm->m <= 0 || gemm->n <= 0 || gemm->k <= 0 || gemm->batch <= 0 ||
        (gemm->type != FAKEGPU_R_32F && gemm->type != FAKEGPU_R_16BF))
        return CUDA_ERROR_INVALID_VALUE;
    struct fakegpu_gemm *copy = malloc(sizeof *copy);
    if (!copy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *copy = *gemm;
    return enqueue(s, (struct op){ .kind = OP_GEMM, .data = copy });
}

void fakegpu_stream_set_capturing(CUstream s, int capturing)
{
    pthread_mutex_lock(&g.lock);
    if (stream_valid(s))
        s->capturing = capturing;
    pthread_mutex_unlock(&g.lock);
}

CUresult fg_stream_is_capturing(CUstream s, int *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g.lock);
    *status = !is_default_stream(s) && stream_valid(s) ? s->capturing : 0;
    pthread_mutex_unlock(&g.lock);
    return CUDA_SUCCESS;
}

CUresult fakegpu_launch_fill(CUdeviceptr p, size_t n, uint32_t seed, CUstream s)
{
    CUresult rc = fg_gate("fakegpu_launch_fill", 1, 1);
    if (rc)
        return rc;
    return enqueue(s, (struct op){ .kind = OP_FILL, .a = p, .n = n, .seed = seed });
}

CUresult fakegpu_launch_verify(CUdeviceptr p, size_t n, uint32_t seed, CUstream s,
                               unsigned long long *mismatches)
{
    CUresult rc = fg_gate("fakegpu_launch_verify", 1, 1);
    if (rc)
        return rc;
    if (!mismatches)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(s, (struct op){ .kind = OP_VERIFY, .a = p, .n = n, .seed = seed, .result = mismatches });
}

/* ------------------------------------------------------------------ test queries */

size_t fakegpu_vram_used(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t u = g.dev[0].vram_used;
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_vram_total(void) { return fg_vram_size(); }
size_t fakegpu_vram_used_on(int device)
{
    if (!fg_device_valid(device))
        return 0;
    pthread_mutex_lock(&g.lock);
    size_t u = g.dev[device].vram_used;
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_vram_total_on(int device) { return fg_device_vram(device); }
int fakegpu_ptr_device(CUdeviceptr p)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    struct vram_device *d = device_at(p);
    int device = d ? (int)(d - g.dev) : -1;
    for (struct vmm_mapping *m = g.mappings; m && device < 0; m = m->next)
        if (p >= m->va && p < m->va + m->size && !m->h->host)
            device = m->h->device;
    pthread_mutex_unlock(&g.lock);
    return device;
}
size_t fakegpu_device_used(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t u = device_used(&g.dev[0]);
    pthread_mutex_unlock(&g.lock);
    return u;
}
size_t fakegpu_hostreg_bytes(void)
{
    ensure_setup();
    pthread_mutex_lock(&g.lock);
    size_t b = g.hostreg_bytes;
    pthread_mutex_unlock(&g.lock);
    return b;
}
unsigned fakegpu_faults(void) { return __atomic_load_n(&g.faults, __ATOMIC_SEQ_CST); }
