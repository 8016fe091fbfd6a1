/* Interface between libfakegpu.so (the simulated device) and the fake libcuda.so.1 /
 * libnvidia-ml.so.1 built on it. Not visible to programs. */
#ifndef FAKEGPU_INTERNAL_H
#define FAKEGPU_INTERNAL_H
#include "fakecuda.h"

void fg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Called at the top of every driver entry point: 0 or the error the driver would
 * return (not initialised, forked child, call from a host callback). */
CUresult fg_gate(const char *name, int needs_init, int needs_ctx);
void fg_note_fault(const char *what);
/* Raises the count `key` to `n` if it is lower (fakegpu_count reads it). */
void count_most(const char *key, unsigned long long n);

#define FG_MAX_DEVICES 2
typedef void (*CUstreamCallback)(CUstream s, CUresult status, void *data);

CUresult fg_init(unsigned flags);
size_t fg_vram_size(void); /* device 0's */
/* FAKECUDA_DEVICES; whether d is one of them; device d's VRAM (0 if it is not). */
int fg_device_count(void);
int fg_device_valid(CUdevice d);
size_t fg_device_vram(CUdevice d);
void fg_mem_info(CUdevice d, size_t *free_bytes, size_t *total);
/* What fk_read_u32 takes per KiB of host memory the device reads, in ns
 * (FAKECUDA_LINK_NS_PER_KIB, default 500); its own memory costs a fiftieth of that. */
uint64_t fg_link_ns_per_kib(void);

CUresult fg_ctx_primary(CUdevice d, CUcontext *ctx);
void fg_ctx_set_current(CUcontext ctx);
CUcontext fg_ctx_current(void);
/* The device of the current context (0 without one). */
CUdevice fg_current_device(void);
CUcontext fg_ctx_create(CUdevice d);
int fg_ctx_valid(CUcontext ctx);
void fg_ctx_destroy(CUcontext ctx);

CUresult fg_mem_alloc(CUdeviceptr *p, size_t n);
CUresult fg_mem_free(CUdeviceptr p);
/* The live allocation holding p (VRAM, managed memory, a VMM mapping): its start and
 * length, CUDA_ERROR_NOT_FOUND when there is none. Either pointer may be NULL. */
CUresult fg_mem_address_range(CUdeviceptr p, CUdeviceptr *base, size_t *size);
CUresult fg_mem_alloc_async(CUdeviceptr *p, size_t n, CUstream s);
CUresult fg_mem_free_async(CUdeviceptr p, CUstream s);
CUmemoryPool fg_default_pool(void);
int fg_pool_valid(CUmemoryPool pool);

CUresult fg_host_register(void *p, size_t n, unsigned flags);
CUresult fg_host_unregister(void *p);
CUresult fg_host_device_pointer(CUdeviceptr *d, void *p, unsigned flags);

/* fg_memcpy's up-front check: both pointers set, device ranges inside allocations. */
CUresult fg_memcpy_check(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult fg_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);
CUresult fg_memset8(CUdeviceptr dst, unsigned char v, size_t n, CUstream s, int async);

CUresult fg_vmm_create(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                       unsigned long long flags);
CUresult fg_vmm_release(CUmemGenericAllocationHandle h);
CUresult fg_vmm_reserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult fg_vmm_address_free(CUdeviceptr p, size_t n);
CUresult fg_vmm_map(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult fg_vmm_unmap(CUdeviceptr p, size_t n);
CUresult fg_vmm_set_access(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count);
size_t fg_vmm_granularity(void);

/* NULL, the legacy and the per-thread stream: not created, so they carry no context. */
static inline int is_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}
/* Stream priorities as an H200 has them: 0 (least) to -5 (greatest). */
#define FG_PRIORITY_LEAST 0
#define FG_PRIORITY_GREATEST (-5)
CUresult fg_stream_create(CUstream *s, unsigned flags);
CUresult fg_stream_create_with_priority(CUstream *s, unsigned flags, int priority);
CUresult fg_stream_get_priority(CUstream s, int *priority);
/* Whether work can be queued on s: a default stream or a live created one. */
int fg_stream_usable(CUstream s);
CUresult fg_stream_destroy(CUstream s);
CUresult fg_stream_sync(CUstream s);
CUresult fg_stream_query(CUstream s);
CUresult fg_stream_is_capturing(CUstream s, int *status);
CUresult fg_ctx_sync(void);
CUresult fg_event_create(CUevent *e, unsigned flags);
CUresult fg_event_destroy(CUevent e);
CUresult fg_event_record(CUevent e, CUstream s);
CUresult fg_event_query(CUevent e);
CUresult fg_event_sync(CUevent e);
/* cuEventElapsedTime: milliseconds between the completed records of start and end. */
CUresult fg_event_elapsed(float *ms, CUevent start, CUevent end);
CUresult fg_stream_wait_event(CUstream s, CUevent e, unsigned flags);
CUresult fg_launch_host_fn(CUstream s, CUhostFn fn, void *data);
CUresult fg_stream_add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags);

/* ---- Test kernels (fakegpu_kernels.c) ---- */
#define FG_MAX_PARAMS 17
/* A kernel the fake GPU runs: its parameters' offsets and sizes in the packed buffer
 * (the real ABI: natural alignment, CUtensorMap 64-aligned) and the buffer's size. */
struct fg_kernel {
    const char *name;
    int nparams;
    size_t offset[FG_MAX_PARAMS], size[FG_MAX_PARAMS];
    size_t argsize;
};
/* The kernel called name (len bytes, or up to NUL with len 0), or NULL. */
const struct fg_kernel *fg_kernel_find(const char *name, size_t len);
/* One launch: the kernel, the handle it was launched through (CUfunction or CUkernel),
 * its geometry, and a copy of its packed parameters; params[i] points at parameter i. */
struct fg_launch {
    const struct fg_kernel *k;
    void *handle;
    unsigned grid[3], block[3], shared;
    void *params[FG_MAX_PARAMS];
    unsigned char args[];
};
/* A new launch record holding a copy of the packed buffer args (k->argsize bytes). */
struct fg_launch *fg_launch_new(const struct fg_kernel *k, const void *args);
struct fg_launch *fg_launch_dup(const struct fg_launch *l);
/* Queues the launch on s (or captures it); takes ownership of l. */
CUresult fg_kernel_launch(struct fg_launch *l, CUstream s);

/* ---- Memsets and copies beyond fg_memcpy/fg_memset8 (fakegpu_copies.c) ---- */
/* A pitched memset: height rows of width elements of elem (1, 2, 4) bytes, value's low
 * bytes; now on the legacy stream when !async. */
CUresult fg_memset2d(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height,
                     CUstream s, int async);
/* A 3D (and 2D: Depth 1) copy between host and device memory; CUDA_ERROR_INVALID_VALUE
 * for arrays or a range outside its allocation. fg_memcpy3d_check: its checks alone
 * (nothing queued), for a batch that checks every copy before it runs one. */
CUresult fg_memcpy3d(const CUDA_MEMCPY3D *p, CUstream s, int async);
CUresult fg_memcpy3d_check(const CUDA_MEMCPY3D *p);

/* ---- Stream capture (fakegpu_capture.c) and graphs (fakegpu_graphs.c) ---- */
CUresult fg_capture_begin(CUstream s, int mode);
CUresult fg_capture_end(CUstream s, CUgraph *graph);
/* status (CUstreamCaptureStatus), id, graph and the last node captured (or NULL). */
CUresult fg_capture_info(CUstream s, int *status, unsigned long long *id, CUgraph *graph, CUgraphNode *last);
CUresult fg_thread_exchange_capture_mode(int *mode);
/* fg_gate: a call that is "potentially unsafe" during a capture: CUDA_ERROR_STREAM_CAPTURE_
 * UNSUPPORTED, and the capture that forbids it invalidated; else 0. */
CUresult fg_capture_check_call(const char *name);
CUresult fg_graph_create(CUgraph *graph, unsigned flags);
CUresult fg_graph_destroy(CUgraph graph);
CUresult fg_graph_add_kernel(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                             struct fg_launch *l);
CUresult fg_graph_add_memset(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                             const CUDA_MEMSET_NODE_PARAMS *p);
CUresult fg_graph_add_memcpy(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                             const CUDA_MEMCPY3D *p);
CUresult fg_graph_get_nodes(CUgraph graph, CUgraphNode *nodes, size_t *count);
CUresult fg_node_get_type(CUgraphNode node, int *type);
/* A kernel node's launch (still the node's), or NULL. */
const struct fg_launch *fg_node_launch(CUgraphNode node);
CUresult fg_node_memset_params(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS *p);
CUresult fg_node_memcpy_params(CUgraphNode node, CUDA_MEMCPY3D *p);
/* Replaces a kernel node's launch (takes l). */
CUresult fg_node_set_launch(CUgraphNode node, struct fg_launch *l);
CUresult fg_exec_set_launch(CUgraphExec exec, CUgraphNode node, struct fg_launch *l);
CUresult fg_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult fg_graph_exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info);
CUresult fg_graph_upload(CUgraphExec exec, CUstream s);
CUresult fg_graph_launch(CUgraphExec exec, CUstream s);
CUresult fg_graph_exec_destroy(CUgraphExec exec);

/* ---- What managed.c (managed memory) uses of the device, and what it gives it. ---- */
/* The one device lock; the *_locked functions want it held. */
void fg_lock(void);
void fg_unlock(void);
/* Takes `bytes` of device d's VRAM as cuMemAlloc does (its page allocator and the
 * FAKECUDA_DEVICE_SHARE counter), fresh while there is any, else VRAM the device keeps
 * (FAKECUDA_MANAGED_KEEPS_VRAM): 1 and the first
 * 4 KiB page in *first, or 0 when it has not that much. fg_vram_give_locked gives it
 * back (scrubbed). fg_vram_leave_locked gives back what a managed page leaves, or with
 * FAKECUDA_MANAGED_KEEPS_VRAM keeps it (1): the device's free VRAM stays as it was.
 * fg_vram_drop_kept_locked gives back up to `bytes` of the device's kept VRAM.
 * fg_vram_retake_kept_locked takes `bytes` of the kept VRAM or nothing (0): a managed page
 * moving back into the chunk it left, which free VRAM does not fall for. */
int fg_vram_take_locked(CUdevice d, size_t bytes, size_t *first);
int fg_vram_retake_kept_locked(CUdevice d, size_t bytes, size_t *first);
void fg_vram_give_locked(CUdevice d, size_t first, size_t bytes);
int fg_vram_leave_locked(CUdevice d, size_t first, size_t bytes);
void fg_vram_drop_kept_locked(CUdevice d, size_t bytes);
/* Waits (lock held, released while waiting) until every created stream is idle. */
void fg_wait_idle_locked(void);
/* Runs fn(data) as stream-ordered device work on s (now, on a default stream). */
CUresult fg_enqueue_work(CUstream s, void (*fn)(void *data), void *data);

CUresult fg_managed_alloc(CUdeviceptr *p, size_t n, unsigned flags);
/* 0 when p is in no managed allocation; else 1, and *rc is cuMemFree's answer. */
int fg_managed_free(CUdeviceptr p, CUresult *rc);
CUresult fg_managed_advise(CUdeviceptr p, size_t n, int advice, CUmemLocation loc);
CUresult fg_managed_prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s);
CUresult fg_managed_range_attribute(void *data, size_t size, int attribute, CUdeviceptr p, size_t n);
/* Whether p is inside a live managed allocation. */
int fg_managed_contains(CUdeviceptr p);
/* Texture objects (fakegpu_textures.c): created over linear device memory, resolved by
 * the fk_tex kernel; 0 for a handle that is not live. */
CUresult fg_texture_create(CUtexObject *handle, CUdeviceptr address);
CUresult fg_texture_destroy(CUtexObject handle);
CUdeviceptr fg_texture_address(CUtexObject handle);
/* Lock held. The managed allocation holding p: 1, its start and length (either pointer
 * may be NULL), else 0. */
int fg_managed_range_locked(uintptr_t p, uintptr_t *base, size_t *size);
/* Lock held. Where the managed page holding p is resident (CU_DEVICE_CPU: the host, a
 * device, CU_DEVICE_INVALID: not managed) and, when it is, the bytes from p to the page's
 * end in *page_left (may be NULL). */
int fg_managed_where_locked(uintptr_t p, size_t *page_left);
#endif
