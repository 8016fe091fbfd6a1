/* libfakegpu.so: copies, kernels and the test queries. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

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
