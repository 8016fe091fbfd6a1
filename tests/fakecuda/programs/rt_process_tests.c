/* Runtime tests (see rt_tests.c): processes and errors — fork, exit summaries, error
 * semantics, T2 exhausted, driver entry points, no T2, expandable segments, no error
 * left pending after a retried out-of-memory. */
#define _GNU_SOURCE
#include "rt_tests.h"

/* ---- fork after allocations, while other threads allocate ---- */
static volatile int stop_churn;
static void *background(void *arg)
{
    (void)arg;
    for (unsigned i = 0; !stop_churn; i++) {
        void *p;
        size_t n = i % 3 == 0 ? 4096 : i % 3 == 1 ? 4 * MiB : vram;
        if (cudaMalloc(&p, n) == cudaSuccess)
            cudaFree(p);
    }
    return NULL;
}

int test_fork(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *t2;
    OK(cudaMalloc(&v, 1 * MiB));
    OK(cudaMalloc(&t2, 2 * vram));
    fill_and_verify(t2, 2 * vram, 4242, 0);
    pthread_t bg[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&bg[i], NULL, background, NULL);
    for (int round = 0; round < 60; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork\n");
        if (pid == 0) {
            /* CUDA does not survive fork: the child gets errors, not a hang or a crash. */
            alarm(10);
            void *p = NULL;
            cudaError_t a = cudaMalloc(&p, 4096);
            cudaError_t b = cudaMalloc(&p, 2 * vram);
            cudaError_t c = cudaFree(v);
            cudaError_t d = cudaFree(t2);
            size_t f, tot;
            cudaError_t e = cudaMemGetInfo(&f, &tot);
            if (round == 0)
                printf("child: cudaMalloc small %d, T2-size %d, cudaFree %d %d, cudaMemGetInfo %d\n", a, b, c, d, e);
            _exit(a == 0 || b == 0 ? 3 : 0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid\n");
        CHECK(WIFEXITED(status), "child of fork round %d died: signal %d\n", round,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        CHECK(WEXITSTATUS(status) == 0, "child of fork round %d got a successful cudaMalloc; CUDA "
              "cannot work after fork (cudaErrorInitializationError)\n", round);
    }
    stop_churn = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(bg[i], NULL);
    verify(t2, 2 * vram, 4242);
    OK(cudaFree(t2));
    OK(cudaFree(v));
    void *again;
    OK(cudaMalloc(&again, 2 * vram));
    fill_and_verify(again, 2 * vram, 1, 1);
    verify(again, 2 * vram, 1);
    OK(cudaFree(again));
    return 0;
}

/* ---- one exit summary per process: a forked child that leaves through exit() (as a
 * Python worker's sys.exit does) runs the inherited atexit handlers ---- */
int test_forkexit(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *t2;
    OK(cudaMalloc(&v, 1 * MiB));
    OK(cudaMalloc(&t2, 2 * vram));
    printf("parent pid %d\n", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork\n");
    if (pid == 0)
        exit(0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child that only exited failed (status %#x)\n", status);
    OK(cudaFree(t2));
    OK(cudaFree(v));
    return 0;
}

/* ---- error semantics as the CUDA runtime defines them ---- */
int test_errors(int argc, char **argv)
{
    (void)argc; (void)argv;
    cudaError_t rc;
    OK(cudaFree(NULL));
    rc = cudaFree((void *)0x1000);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(0x1000) = %d, CUDA says cudaErrorInvalidValue\n", rc);
    char *host = malloc(1 << 20);
    rc = cudaFree(host);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(host pointer) = %d, CUDA says cudaErrorInvalidValue\n", rc);
    free(host);
    rc = cudaMalloc(NULL, 4096);
    CHECK(rc == cudaErrorInvalidValue, "cudaMalloc(NULL, 4096) = %d\n", rc);
    void *z = (void *)1;
    OK(cudaMalloc(&z, 0));
    CHECK(z == NULL, "cudaMalloc of 0 bytes gave %p, CUDA gives NULL\n", z);

    void *v, *t2;
    OK(cudaMalloc(&v, 4096));
    OK(cudaMalloc(&t2, 2 * vram));
    CHECK(strcmp(kind(t2), "vram"), "a 2x VRAM allocation in VRAM?\n");
    rc = cudaFree((char *)t2 + 4096);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree(inside a T2 allocation) = %d\n", rc);
    OK(cudaFree(v));
    OK(cudaFree(t2));
    rc = cudaFree(v);
    CHECK(rc == cudaErrorInvalidValue, "double cudaFree of a VRAM allocation = %d\n", rc);
    rc = cudaFree(t2);
    CHECK(rc == cudaErrorInvalidValue, "double cudaFree of a T2 allocation = %d\n", rc);
    rc = cudaFreeAsync((void *)0x2000, NULL);
    CHECK(rc == cudaErrorInvalidValue, "cudaFreeAsync(unknown) = %d\n", rc);
    OK(cudaMallocAsync(&t2, 2 * vram, NULL));
    OK(cudaFreeAsync(t2, NULL));
    OK(cudaDeviceSynchronize());
    rc = cudaFree(t2);
    CHECK(rc == cudaErrorInvalidValue, "cudaFree after cudaFreeAsync of a T2 allocation = %d\n", rc);
    /* Still usable afterwards. */
    OK(cudaMalloc(&t2, 2 * vram));
    fill_and_verify(t2, 2 * vram, 3, 0);
    verify(t2, 2 * vram, 3);
    OK(cudaFree(t2));
    return 0;
}

/* ---- T2 exhausted: the CUDA out-of-memory error, nothing lost ---- */
int test_t2cap(int argc, char **argv)
{
    (void)argc; (void)argv;
    size_t chunk = vram / 2;
    void *p[256];
    int n = 0;
    cudaError_t rc = cudaSuccess;
    while (n < 256 && (rc = cudaMalloc(&p[n], chunk)) == cudaSuccess) {
        fill_and_verify(p[n], chunk, 900 + n, 0);
        n++;
    }
    printf("%d allocations of %zu MiB before error %d\n", n, chunk >> 20, rc);
    CHECK(n < 256, "T2 cap never reached\n");
    CHECK(rc == cudaErrorMemoryAllocation, "exhaustion returned %d, CUDA says cudaErrorMemoryAllocation (2)\n", rc);
    CHECK(n >= 1, "nothing could be allocated\n");
    /* As after CUDA's own failed allocation: the error is the thread's last error too. */
    rc = cudaPeekAtLastError();
    CHECK(rc == cudaErrorMemoryAllocation, "after the out-of-memory answer cudaPeekAtLastError returned %d, want 2\n", rc);
    rc = cudaGetLastError();
    CHECK(rc == cudaErrorMemoryAllocation, "after the out-of-memory answer cudaGetLastError returned %d, want 2\n", rc);
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError did not clear the out-of-memory error\n");
    rc = cudaMallocAsync(&p[n], chunk, NULL);
    CHECK(rc == cudaErrorMemoryAllocation, "cudaMallocAsync at exhaustion returned %d\n", rc);
    for (int i = 0; i < n; i++)
        verify(p[i], chunk, 900 + i);
    for (int i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    int m = 0;
    while (m < n && cudaMalloc(&p[m], chunk) == cudaSuccess)
        m++;
    CHECK(m == n, "after freeing everything only %d of %d allocations fit again\n", m, n);
    for (int i = 0; i < m; i++)
        OK(cudaFree(p[i]));
    return 0;
}

/* ---- driver entry points handed out by the runtime are the hooked ones ---- */
int test_entrypoints(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUresult (*alloc)(CUdeviceptr *, size_t) = entry("cuMemAlloc");
    CUresult (*dfree)(CUdeviceptr) = entry("cuMemFree");
    CUdeviceptr d;
    CUresult rc = alloc(&d, 2 * vram);
    CHECK(rc == CUDA_SUCCESS, "cuMemAlloc from cudaGetDriverEntryPointByVersion: %zu bytes -> %d\n", 2 * vram, rc);
    OK(fakegpu_launch_fill(d, 2 * vram, 8, NULL));
    unsigned long long bad;
    OK(fakegpu_launch_verify(d, 2 * vram, 8, NULL, &bad));
    CHECK(bad == 0, "data\n");
    OK(dfree(d));
    CUdriverProcAddressQueryResult st;
    void *fn;
    OK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
    alloc = fn;
    rc = alloc(&d, 2 * vram);
    CHECK(rc == CUDA_SUCCESS, "cuMemAlloc from cudaGetDriverEntryPoint: %zu bytes -> %d\n", 2 * vram, rc);
    OK(dfree(d));
    /* Runtime and driver calls mix: memory from one is freed by the other. */
    void *rp;
    OK(cudaMalloc(&rp, 2 * vram));
    rc = dfree((CUdeviceptr)(uintptr_t)rp);
    CHECK(rc == CUDA_SUCCESS, "cuMemFree of a T2 cudaMalloc allocation -> %d\n", rc);
    OK(alloc(&d, 2 * vram));
    cudaError_t rrc = cudaFree((void *)(uintptr_t)d);
    CHECK(rrc == cudaSuccess, "cudaFree of a T2 cuMemAlloc allocation -> %d\n", rrc);
    rc = dfree(d);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuMemFree after cudaFree of the same T2 allocation -> %d\n", rc);
    fn = (void *)1;
    rc = cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &st);
    CHECK(rc == cudaSuccess && fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
          "cuMemAllocAsync for CUDA 11.0 must be VERSION_NOT_SUFFICIENT: rc %d fn %p status %d\n", rc, fn, st);
    return 0;
}

/* ---- no T2 available (GREENBOOST_BACKEND=kmod without the module): VRAM still works,
 * what does not fit gets the CUDA out-of-memory error ---- */
int test_no_t2(int argc, char **argv)
{
    (void)argc; (void)argv;
    void *v, *big;
    OK(cudaMalloc(&v, 4 * MiB));
    fill_and_verify(v, 4 * MiB, 1, 1);
    verify(v, 4 * MiB, 1);
    cudaError_t rc = cudaMalloc(&big, 2 * vram);
    CHECK(rc == cudaErrorMemoryAllocation, "2x VRAM without T2 -> %d, expected cudaErrorMemoryAllocation\n", rc);
    OK(cudaFree(v));
    return 0;
}

/* ---- PyTorch's expandable segments: VMM through cudaGetDriverEntryPoint, device
 * properties with gpuDirectRDMACapable, 20 MiB pages, grown past VRAM ---- */
int test_expandable(int argc, char **argv)
{
    (void)argc; (void)argv;
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = entry("cuMemAddressReserve");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = entry("cuMemCreate");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = entry("cuMemMap");
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = entry("cuMemSetAccess");
    CUresult (*unmap)(CUdeviceptr, size_t) = entry("cuMemUnmap");
    CUresult (*release)(CUmemGenericAllocationHandle) = entry("cuMemRelease");
    CUresult (*address_free)(CUdeviceptr, size_t) = entry("cuMemAddressFree");
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    prop.allocFlags.gpuDirectRDMACapable = 1;
    size_t page = 20 * MiB, max = 4 * vram, used = 0;
    CUdeviceptr base;
    OK(reserve(&base, max, 0, 0, 0));
    CUmemGenericAllocationHandle h[512];
    int n = 0;
    while (used + page <= 3 * vram) {
        CUresult rc = create(&h[n], page, &prop, 0);
        CHECK(rc == CUDA_SUCCESS, "cuMemCreate (entry point) of segment page %d, %zu MiB mapped, VRAM %zu MiB -> %d\n",
              n, used >> 20, vram >> 20, rc);
        OK(map(base + used, page, 0, h[n], 0));
        CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        OK(access(base + used, page, &desc, 1));
        used += page;
        n++;
    }
    printf("expandable segment: %d pages, %zu MiB, last page %s\n", n, used >> 20, kind((void *)(uintptr_t)(base + used - 1)));
    CHECK(!strcmp(kind((void *)(uintptr_t)(base + used - 1)), "vmm-host"), "segment past VRAM is not host memory\n");
    OK(fakegpu_launch_fill(base, used, 66, NULL));
    unsigned long long bad = ~0ULL;
    OK(fakegpu_launch_verify(base, used, 66, NULL, &bad));
    CHECK(bad == 0, "expandable segment: %llu wrong words\n", bad);
    OK(unmap(base, used));
    for (int i = 0; i < n; i++)
        OK(release(h[i]));
    OK(address_free(base, max));
    CHECK(fakegpu_vram_used() == 0, "VRAM used %zu after the segment was released\n", fakegpu_vram_used());
    return 0;
}


/* ---- a driver out-of-memory retried in T2 leaves no runtime error pending: PyTorch
 * checks cudaGetLastError() after its kernels and would raise "out of memory" ---- */
int test_lasterror(int argc, char **argv)
{
    (void)argc; (void)argv;
    /* The runtime's last error as CUDA keeps it: set by a failed call, returned and
     * cleared by cudaGetLastError, returned by cudaPeekAtLastError. */
    char byte = 0;
    cudaError_t rc = cudaMemcpy(&byte, &byte, 1, 99);
    CHECK(rc == 21, "cudaMemcpy with an invalid direction -> %d\n", rc);
    CHECK(cudaPeekAtLastError() == 21 && cudaPeekAtLastError() == 21, "cudaPeekAtLastError did not keep error 21\n");
    CHECK(cudaGetLastError() == 21 && cudaGetLastError() == cudaSuccess, "cudaGetLastError did not return and clear 21\n");

    /* Allocations below GREENBOOST_MIN_T2_SIZE go to VRAM first; once the device is full
     * the driver refuses them and the shim retries in T2. */
    size_t chunk = vram / 3;
    void *p[16];
    int n = 0, in_t2 = 0;
    for (int async = 0; async < 2; async++) {
        for (int tries = 0; tries < 6; tries++, n++) {
            rc = async ? cudaMallocAsync(&p[n], chunk, NULL) : cudaMalloc(&p[n], chunk);
            CHECK(rc == cudaSuccess, "%s #%d of %zu bytes -> %d\n", async ? "cudaMallocAsync" : "cudaMalloc", n, chunk, rc);
            const char *where = kind(p[n]);
            cudaError_t peeked = cudaPeekAtLastError(), pending = cudaGetLastError();
            CHECK(peeked == cudaSuccess && pending == cudaSuccess,
                  "after a successful %s (placed in %s) the runtime still holds error %d (peek %d): "
                  "PyTorch's next cudaGetLastError() check fails with it\n",
                  async ? "cudaMallocAsync" : "cudaMalloc", where, pending, peeked);
            fill_and_verify(p[n], chunk, 500 + (uint32_t)n, 0);
            if (strcmp(where, "vram")) {
                in_t2++;
                n++;
                break;
            }
        }
        CHECK(in_t2 == async + 1, "no %s went to T2 after the device filled up\n", async ? "cudaMallocAsync" : "cudaMalloc");
    }
    for (int i = 0; i < n; i++)
        verify(p[i], chunk, 500 + (uint32_t)i);
    OK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    return 0;
}
