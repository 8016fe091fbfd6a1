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

CUresult fg_init(unsigned flags);
size_t fg_vram_size(void); /* device 0's */
/* FAKECUDA_DEVICES; whether d is one of them; device d's VRAM (0 if it is not). */
int fg_device_count(void);
int fg_device_valid(CUdevice d);
size_t fg_device_vram(CUdevice d);
void fg_mem_info(CUdevice d, size_t *free_bytes, size_t *total);

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
CUresult fg_mem_alloc_async(CUdeviceptr *p, size_t n, CUstream s);
CUresult fg_mem_free_async(CUdeviceptr p, CUstream s);
CUmemoryPool fg_default_pool(void);
int fg_pool_valid(CUmemoryPool pool);

CUresult fg_host_register(void *p, size_t n, unsigned flags);
CUresult fg_host_unregister(void *p);
CUresult fg_host_device_pointer(CUdeviceptr *d, void *p, unsigned flags);

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
CUresult fg_stream_create(CUstream *s, unsigned flags);
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
CUresult fg_stream_wait_event(CUstream s, CUevent e, unsigned flags);
CUresult fg_launch_host_fn(CUstream s, CUhostFn fn, void *data);
typedef void (*CUstreamCallback)(CUstream s, CUresult status, void *data);
CUresult fg_stream_add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned flags);
#endif
