// The Unified Memory contender of the decode benchmark: a PyTorch pluggable allocator
// (torch.cuda.memory.CUDAPluggableAllocator) that places allocations by the same rule
// as GreenBoost's shim, so that the two differ only in how the spilled bytes are served:
//   - smaller than UVM_MIN_BYTES, or fitting in UVM_BUDGET_BYTES - UVM_RESERVE_BYTES of
//     VRAM: stream-ordered cudaMallocAsync from the device's default pool (cached by the
//     pool, so per-step activations cost no cudaMalloc/cudaFree round trip);
//   - otherwise: cudaMallocManaged, advised to live on the host
//     (SetPreferredLocation = CPU) and to stay mapped for the GPU (SetAccessedBy), i.e.
//     the GPU reads it over PCIe instead of migrating it.
// Managed memory is never requested beyond what the card has free (minus a margin):
// oversubscribing managed memory can hang the GPU, so such a request fails as an
// out-of-memory instead.
//
// Built on the device by bench/run.sh: nvcc -shared -Xcompiler -fPIC -o uvm_alloc.so.

#include <cuda_runtime.h>
#include <sys/types.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace {

struct Policy {
    size_t budget, reserve, min_bytes;
};

size_t env_size(const char *name, size_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, nullptr, 10) : fallback;
}

const Policy &policy() {
    static Policy p{env_size("UVM_BUDGET_BYTES", ~0ull), env_size("UVM_RESERVE_BYTES", 512ull << 20),
                    env_size("UVM_MIN_BYTES", 2ull << 20)};
    return p;
}

const size_t kManagedMargin = 4ull << 30;

std::mutex lock;
std::unordered_map<void *, size_t> managed;  // pointer -> size, for free and the summary
size_t vram_in_use = 0, managed_in_use = 0, managed_peak = 0, vram_peak = 0;
bool pool_configured = false;

void log_failure(const char *what, cudaError_t err, size_t size) {
    fprintf(stderr, "uvm_alloc: %s(%zu) failed: %s\n", what, size, cudaGetErrorString(err));
}

void *alloc_managed(size_t size, int device) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || size + kManagedMargin > free_b) {
        fprintf(stderr, "uvm_alloc: refusing %zu bytes of managed memory (card free %zu)\n", size, free_b);
        return nullptr;
    }
    void *ptr = nullptr;
    cudaError_t err = cudaMallocManaged(&ptr, size, cudaMemAttachGlobal);
    if (err != cudaSuccess) {
        log_failure("cudaMallocManaged", err, size);
        return nullptr;
    }
#if CUDART_VERSION >= 13000
    cudaMemLocation host{};
    host.type = cudaMemLocationTypeHost;
    host.id = 0;
    cudaMemLocation gpu{};
    gpu.type = cudaMemLocationTypeDevice;
    gpu.id = device;
    err = cudaMemAdvise(ptr, size, cudaMemAdviseSetPreferredLocation, host);
    if (err == cudaSuccess) err = cudaMemAdvise(ptr, size, cudaMemAdviseSetAccessedBy, gpu);
#else
    err = cudaMemAdvise(ptr, size, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId);
    if (err == cudaSuccess) err = cudaMemAdvise(ptr, size, cudaMemAdviseSetAccessedBy, device);
#endif
    if (err != cudaSuccess) {
        log_failure("cudaMemAdvise", err, size);
        cudaFree(ptr);
        return nullptr;
    }
    // Populate on the host, where it is preferred: with AccessedBy the driver maps the
    // pages for the GPU as they appear, so the GPU's first touch (PyTorch writing the
    // weights) does not go through a page-fault storm. Setup only, never timed.
    memset(ptr, 0, size);
    return ptr;
}

}  // namespace

extern "C" void *uvm_malloc(ssize_t ssize, int device, cudaStream_t stream) {
    size_t size = (size_t)ssize;
    const Policy &p = policy();
    std::lock_guard<std::mutex> guard(lock);
    if (!pool_configured) {
        // Keep freed blocks in the pool: the caching PyTorch would otherwise provide.
        cudaMemPool_t pool;
        if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
            unsigned long long keep = ~0ull;
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        }
        pool_configured = true;
    }
    size_t limit = p.budget > p.reserve ? p.budget - p.reserve : 0;
    if (size < p.min_bytes || vram_in_use + size <= limit) {
        void *ptr = nullptr;
        cudaError_t err = cudaMallocAsync(&ptr, size, stream);
        if (err != cudaSuccess) {
            log_failure("cudaMallocAsync", err, size);
            return nullptr;
        }
        vram_in_use += size;
        if (vram_in_use > vram_peak) vram_peak = vram_in_use;
        return ptr;
    }
    void *ptr = alloc_managed(size, device);
    if (ptr) {
        managed[ptr] = size;
        managed_in_use += size;
        if (managed_in_use > managed_peak) managed_peak = managed_in_use;
    }
    return ptr;
}

extern "C" void uvm_free(void *ptr, ssize_t ssize, int device, cudaStream_t stream) {
    (void)device;
    std::lock_guard<std::mutex> guard(lock);
    auto it = managed.find(ptr);
    if (it != managed.end()) {
        managed_in_use -= it->second;
        managed.erase(it);
        cudaFree(ptr);  // synchronises the device, as cudaFree of managed memory must
        return;
    }
    vram_in_use -= (size_t)ssize;
    cudaFreeAsync(ptr, stream);
}

// For the benchmark's report: peak bytes in VRAM and in managed (host-preferred) memory.
extern "C" void uvm_stats(size_t *vram_peak_out, size_t *managed_peak_out) {
    std::lock_guard<std::mutex> guard(lock);
    *vram_peak_out = vram_peak;
    *managed_peak_out = managed_peak;
}
