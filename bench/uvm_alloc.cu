// The Unified Memory contenders of the decode benchmark: a PyTorch pluggable allocator
// (torch.cuda.memory.CUDAPluggableAllocator) in one of two modes (UVM_MODE):
//   managed (default; the `uvm` configuration, issue 4's definition): every allocation
//     is cudaMallocManaged, advised to live on the host (SetPreferredLocation = CPU)
//     and to stay mapped for the GPU (SetAccessedBy), i.e. the GPU reads and writes it
//     over PCIe instead of migrating it. Freed blocks are kept per (rounded size,
//     stream) and handed out again, as PyTorch's caching allocator would (sizes rounded
//     up to 512 bytes, from 1 MiB up to 2 MiB), so that a decode step does not pay a
//     cudaMallocManaged/cudaFree (which synchronises) per activation, nor one per
//     KV-cache tensor that grows by a token.
//   split (the `uvm_split` configuration): GreenBoost's placement rule, so that the two
//     differ only in how the spilled bytes are served:
//     - smaller than UVM_MIN_BYTES, or fitting in UVM_BUDGET_BYTES - UVM_RESERVE_BYTES
//       of VRAM: stream-ordered cudaMallocAsync from the device's default pool (cached
//       by the pool);
//     - otherwise: managed memory as above.
// Managed memory in use (cached blocks included) never exceeds what the card had free
// at the first managed allocation, minus a margin: the device is shared, and
// oversubscribing managed memory can hang the GPU, so such a request fails as an
// out-of-memory instead (PyTorch raises it).
//
// Built on the device by bench/run.sh: nvcc -shared -Xcompiler -fPIC -o uvm_alloc.so.

#include <cuda_runtime.h>
#include <sys/types.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace {

struct Policy {
    size_t budget, reserve, min_bytes;
    bool split;
};

size_t env_size(const char *name, size_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, nullptr, 10) : fallback;
}

const Policy &policy() {
    static Policy p{env_size("UVM_BUDGET_BYTES", ~0ull), env_size("UVM_RESERVE_BYTES", 512ull << 20),
                    env_size("UVM_MIN_BYTES", 2ull << 20),
                    getenv("UVM_MODE") && strcmp(getenv("UVM_MODE"), "split") == 0};
    return p;
}

const size_t kManagedMargin = 4ull << 30;

std::mutex lock;
std::unordered_map<void *, size_t> managed;  // live managed pointer -> size
// Freed managed blocks by (size, stream), for reuse (managed mode).
std::multimap<std::pair<size_t, cudaStream_t>, void *> free_blocks;
// Managed bytes held (live and cached), and the most ever held; VRAM bytes (split mode).
size_t vram_in_use = 0, managed_held = 0, managed_peak = 0, vram_peak = 0;
// The most managed memory this allocator will hold: the card's free memory at the
// first managed allocation, minus kManagedMargin.
size_t managed_limit = 0;
bool pool_configured = false, limit_known = false;

void log_failure(const char *what, cudaError_t err, size_t size) {
    fprintf(stderr, "uvm_alloc: %s(%zu) failed: %s\n", what, size, cudaGetErrorString(err));
}

void *alloc_managed(size_t size, int device) {
    if (!limit_known) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            fprintf(stderr, "uvm_alloc: cudaMemGetInfo failed: no managed memory without knowing the card's free memory\n");
            return nullptr;
        }
        managed_limit = free_b > kManagedMargin ? free_b - kManagedMargin : 0;
        limit_known = true;
    }
    if (managed_held + size > managed_limit) {
        fprintf(stderr, "uvm_alloc: refusing %zu bytes of managed memory: %zu held, limit %zu (card free at start - 4 GiB)\n",
                size, managed_held, managed_limit);
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
        cudaGetLastError();  // PyTorch sees the out-of-memory (null), not this error later
        return nullptr;
    }
    // Populate on the host, where it is preferred: with AccessedBy the driver maps the
    // pages for the GPU as they appear, so the GPU's first touch (PyTorch writing the
    // weights) does not go through a page-fault storm. Setup only, never timed.
    memset(ptr, 0, size);
    return ptr;
}

// The block size a request of `size` bytes gets (PyTorch's caching allocator rounds
// similarly), so that requests of nearby sizes share freed blocks.
size_t block_size(size_t size) {
    const size_t small = 512, large = 2ull << 20;
    size_t unit = size < (1ull << 20) ? small : large;
    return (size + unit - 1) / unit * unit;
}

// A managed block for `size` bytes on `stream`: a freed one of its block size last
// used on the same stream (stream order makes it safe to reuse), else a new one.
void *managed_block(size_t size, int device, cudaStream_t stream) {
    size = block_size(size);
    auto cached = free_blocks.find({size, stream});
    if (cached != free_blocks.end()) {
        void *ptr = cached->second;
        free_blocks.erase(cached);
        managed[ptr] = size;
        return ptr;
    }
    void *ptr = alloc_managed(size, device);
    if (!ptr && !free_blocks.empty()) {
        // At the limit: the cached blocks go back before the request is refused.
        for (auto &block : free_blocks) {
            cudaFree(block.second);  // synchronises the device, as freeing managed memory must
            managed_held -= block.first.first;
        }
        free_blocks.clear();
        ptr = alloc_managed(size, device);
    }
    if (ptr) {
        managed[ptr] = size;
        managed_held += size;
        if (managed_held > managed_peak) managed_peak = managed_held;
    }
    return ptr;
}

}  // namespace

extern "C" void *uvm_malloc(ssize_t ssize, int device, cudaStream_t stream) {
    size_t size = (size_t)ssize;
    // An empty tensor needs no memory (PyTorch takes a null pointer); cudaMemAdvise of an
    // empty range would fail and leave its error for PyTorch's next check.
    if (size == 0) return nullptr;
    const Policy &p = policy();
    std::lock_guard<std::mutex> guard(lock);
    if (!p.split) return managed_block(size, device, stream);
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
    return managed_block(size, device, stream);
}

extern "C" void uvm_free(void *ptr, ssize_t ssize, int device, cudaStream_t stream) {
    (void)device;
    if (!ptr) return;  // an empty tensor's (see uvm_malloc)
    std::lock_guard<std::mutex> guard(lock);
    auto it = managed.find(ptr);
    if (it != managed.end()) {
        // Kept for the next request of this size on this stream; the stream's order
        // guarantees the GPU is done with it before the next user's work runs.
        free_blocks.insert({{it->second, stream}, ptr});
        managed.erase(it);
        return;
    }
    vram_in_use -= (size_t)ssize;
    cudaFreeAsync(ptr, stream);
}

// For the benchmark's report: peak bytes in VRAM and in managed (host-preferred) memory
// (live and cached blocks).
extern "C" void uvm_stats(size_t *vram_peak_out, size_t *managed_peak_out) {
    std::lock_guard<std::mutex> guard(lock);
    *vram_peak_out = vram_peak;
    *managed_peak_out = managed_peak;
}
