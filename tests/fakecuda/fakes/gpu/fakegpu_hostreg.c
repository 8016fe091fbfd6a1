/* libfakegpu.so: host registration. cuMemHostRegister (pinning as the driver does,
 * refusing I/O and PFN-mapped ranges) and the device pointers of registered ranges. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

/* ------------------------------------------------------------------ host registration */

struct hostreg *reg_containing(uintptr_t p)
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
