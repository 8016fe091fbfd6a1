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
 * residency takes VRAM, through fg_vram_take_locked. FAKECUDA_MANAGED_KEEPS_VRAM=1 makes
 * the device keep the VRAM managed pages leave, as the real driver's managed-memory
 * allocator does: free VRAM does not rise, a later move into VRAM takes fresh VRAM, and a
 * move or an allocation that finds too little free VRAM (of any process sharing the
 * device) takes the kept VRAM (fakegpu_vram.c; a second counter in the share file).
 *
 * Files, each using only those listed before it: this one (the state, log, setup,
 * contexts), fakegpu_vram.c (VRAM pages), fakegpu_hostreg.c, fakegpu_vmm.c, managed.c
 * (the managed memory model), fakegpu_access.c (what the fake GPU reaches),
 * fakegpu_gemm.c, fakegpu_streams.c (streams, events, the work they run),
 * managed_streams.c (managed memory's free and prefetch), fakegpu_alloc.c (cuMemAlloc,
 * cuMemFree, address ranges) and fakegpu_copies.c (copies, kernels, test queries);
 * fakegpu_state.h is what they share, managed_state.h what the two managed files share.
 */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ state */
struct fg_state g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .log_fd = -1 };

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
__thread int in_host_callback;
__thread const char *fg_entry;
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

/* Maps the counters of FAKECUDA_DEVICE_SHARE (created if missing): VRAM in use, and of
 * it kept for managed memory; NULL without it. */
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
    if (st.st_size < (off_t)(2 * sizeof(uint64_t)) && ftruncate(fd, 2 * sizeof(uint64_t)) != 0)
        abort();
    void *m = mmap(NULL, 2 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
    const char *keeps = getenv("FAKECUDA_MANAGED_KEEPS_VRAM");
    g.managed_keeps_vram = keeps && *keeps && strcmp(keeps, "0") != 0;
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
 * copy of the parent's state holds nothing), and so does the VRAM kept for its managed
 * memory, as far as the device still keeps it (fakegpu_vram.c). */
__attribute__((destructor)) static void leave_share(void)
{
    if (!g.dev[0].share || !g.initialized || g.pid != getpid())
        return;
    pthread_mutex_lock(&g.lock);
    uint64_t *kept = g.dev[0].share + 1, k = __atomic_load_n(kept, __ATOMIC_SEQ_CST), mine;
    do {
        mine = g.dev[0].kept < k ? g.dev[0].kept : k;
    } while (mine && !__atomic_compare_exchange_n(kept, &k, k - mine, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    __atomic_sub_fetch(g.dev[0].share, (uint64_t)g.dev[0].vram_used + mine, __ATOMIC_SEQ_CST);
    g.dev[0].share = NULL;
    pthread_mutex_unlock(&g.lock);
}

void ensure_setup(void) { pthread_once(&setup_once, setup); }

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
    CUresult rc = fg_capture_check_call(name);
    if (rc)
        return rc;
    fg_entry = name;
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
