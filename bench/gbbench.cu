// gbbench: the raw measurements behind `make bench` (bench/run.sh builds it on the
// device with nvcc and runs each subcommand in a fresh process, with or without the
// shim preloaded). Every subcommand prints exactly one JSON object on stdout; bench/
// report.py turns those lines into bench/results/.
//
//   gbbench read     --gib N    cudaMalloc N GiB (through the shim when it is preloaded,
//                               so a small GREENBOOST_VRAM_BUDGET puts it in T2), fill it
//                               with a kernel, verify a checksum, then time every
//                               streaming read kernel variant over it (GB/s, median of
//                               repetitions per variant, and the best variant).
//   gbbench hostbuf  --gib N    cudaHostAlloc N GiB (mapped): the baselines for T2 reads
//                               at that size: pinned cudaMemcpy H2D, and the same read
//                               kernel variants reading the pinned buffer zero-copy and
//                               a VRAM copy of it (HBM).
//   gbbench alloc    --kind t2|hostalloc
//                               one cold 1 GiB allocation after context creation
//                               (cudaMalloc through the shim, or cudaHostAlloc), checked
//                               usable with a kernel, freed, then one warm allocation.
//   gbbench hook     --iters N [--meminfo-iters M]
//                               median cudaMalloc+cudaFree(1 MiB) time over N calls and
//                               cudaMemGetInfo time over M calls (default 5 N; run with
//                               and without the shim).
//   gbbench launch   --threads T --iters N [--buffer-mib M]
//                               launches per second of a kernel with 8 pointer
//                               arguments into cudaMalloc'd buffers of M MiB (1) and a
//                               256-byte struct passed by value (8 more pointers in it),
//                               from T host threads, each on its own stream (run with and
//                               without the shim: the cost of launch observation; with
//                               GREENBOOST_TIERING=on and 64 MiB buffers they are movable,
//                               cut into parts, and kernel times are sampled).
//
// Linked against the shared libcudart (-cudart shared), as PyTorch is, so that an
// LD_PRELOADed library interposes cudaMalloc exactly as it would for real programs.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

static void check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) {
        // The JSON line tells report.py which measurement failed and why.
        printf("{\"error\":\"%s: %s (%d)\"}\n", what, cudaGetErrorString(err), (int)err);
        fflush(stdout);
        exit(2);
    }
}
#define CK(call) check((call), #call)

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    if (n == 0) return 0.0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char *placement_of(const void *ptr) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        cudaGetLastError();
        return "unknown";
    }
    switch (attr.type) {
        case cudaMemoryTypeDevice: return "vram";
        case cudaMemoryTypeHost: return "host";
        case cudaMemoryTypeManaged: return "managed";
        default: return "unregistered";
    }
}

// Word i of a buffer holds (uint32_t)i; the sum of all words is known in closed form,
// so a read pass proves that every word came back, without a host-side copy.
__global__ void fill_kernel(uint4 *buf, size_t n_vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        uint32_t w = (uint32_t)(i * 4);
        buf[i] = make_uint4(w, w + 1, w + 2, w + 3);
    }
}

// Streaming reads, all summing every 32-bit word into one atomic per thread, 16-byte
// loads. Reads of host memory over PCIe (zero-copy) need many requests in flight and
// gain from large, contiguous requests; the variants differ there, and every buffer
// kind (T2, pinned host memory, VRAM) is read by all of them in the same process, so
// that each comparison is between the same kernels.

// A 16-byte load that bypasses L1 and is evicted first (__ldcs: streamed once).
struct LoadStreaming {
    static __device__ __forceinline__ uint4 load(const uint4 *p) { return __ldcs(p); }
};

// A 16-byte read-only load with the L2 told to fetch the enclosing 256-byte sector
// group (PTX .L2::256B, sm_80+): for host memory, fewer and larger PCIe reads.
struct LoadL2Prefetch256 {
    static __device__ __forceinline__ uint4 load(const uint4 *p) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
        return v;
    }
};

__device__ __forceinline__ unsigned long long word_sum(uint4 v) {
    return (unsigned long long)v.x + v.y + v.z + v.w;
}

// Persistent grid-stride loop: the whole grid sweeps the buffer front to back, each
// thread with INFLIGHT independent loads (INFLIGHT grid-widths apart) per iteration.
template <int INFLIGHT, class Load>
__global__ void read_grid_stride(const uint4 *__restrict__ buf, size_t n_vec, unsigned long long *sum) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long acc = 0;
    for (; i + (INFLIGHT - 1) * stride < n_vec; i += INFLIGHT * stride) {
        uint4 v[INFLIGHT];
#pragma unroll
        for (int k = 0; k < INFLIGHT; k++) v[k] = Load::load(buf + i + k * stride);
#pragma unroll
        for (int k = 0; k < INFLIGHT; k++) acc += word_sum(v[k]);
    }
    for (; i < n_vec; i += stride) acc += word_sum(Load::load(buf + i));
    atomicAdd(sum, acc);
}

// Each block streams its own contiguous share of the buffer, INFLIGHT block-widths per
// iteration (a block's requests cover one contiguous 16 * INFLIGHT * blockDim bytes).
template <int INFLIGHT, class Load>
__global__ void read_block_chunks(const uint4 *__restrict__ buf, size_t n_vec, unsigned long long *sum) {
    size_t per_block = (n_vec + gridDim.x - 1) / gridDim.x;
    size_t begin = (size_t)blockIdx.x * per_block;
    size_t end = begin + per_block < n_vec ? begin + per_block : n_vec;
    size_t step = blockDim.x;
    size_t i = begin + threadIdx.x;
    unsigned long long acc = 0;
    for (; i + (INFLIGHT - 1) * step < end; i += INFLIGHT * step) {
        uint4 v[INFLIGHT];
#pragma unroll
        for (int k = 0; k < INFLIGHT; k++) v[k] = Load::load(buf + i + k * step);
#pragma unroll
        for (int k = 0; k < INFLIGHT; k++) acc += word_sum(v[k]);
    }
    for (; i < end; i += step) acc += word_sum(Load::load(buf + i));
    atomicAdd(sum, acc);
}

typedef void (*ReadKernel)(const uint4 *, size_t, unsigned long long *);

struct ReadVariant {
    const char *name;
    ReadKernel kernel;
};

// The first is the kernel of earlier runs (and the one that checks buffers usable).
static const ReadVariant kReadVariants[] = {
    {"stride4", read_grid_stride<4, LoadStreaming>},
    {"stride8", read_grid_stride<8, LoadStreaming>},
    {"stride8_l2_256", read_grid_stride<8, LoadL2Prefetch256>},
    {"chunks8", read_block_chunks<8, LoadStreaming>},
};
static const int kReadVariantCount = sizeof kReadVariants / sizeof *kReadVariants;

static unsigned long long expected_sum(size_t n_words) {
    // Sum over i < n_words of (uint32_t)i, modulo 2^64.
    unsigned long long full = n_words >> 32, rest = n_words & 0xffffffffull;
    unsigned long long per_wrap = (0x100000000ull * 0xffffffffull) / 2;
    unsigned long long tail = rest ? (rest * (rest - 1)) / 2 : 0;
    return full * per_wrap + tail;
}

struct Launch {
    int blocks, threads;
};

static const int kThreadsPerBlock = 256;

// A grid that fills every SM with as many resident blocks of `kernel` as its
// occupancy allows (a persistent grid: the loops stride over the rest).
static Launch launch_for(const void *kernel) {
    int dev, sms, per_sm = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreadsPerBlock, 0));
    return {sms * (per_sm > 0 ? per_sm : 1), kThreadsPerBlock};
}

static void fill(void *buf, size_t bytes) {
    Launch l = launch_for((const void *)fill_kernel);
    fill_kernel<<<l.blocks, l.threads>>>((uint4 *)buf, bytes / 16);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

// Reads the buffer with `variant` once untimed (warm-up), then `reps` timed passes;
// returns the median GB/s. Sets *ok when the checksum matched on every pass, warm-up
// included.
static double time_reads(const ReadVariant &variant, const void *buf, size_t bytes, int reps, bool *ok,
                         std::vector<double> *all) {
    Launch l = launch_for((const void *)variant.kernel);
    unsigned long long *sum;
    CK(cudaMalloc(&sum, sizeof *sum));
    cudaEvent_t start, stop;
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    unsigned long long want = expected_sum(bytes / 4);
    *ok = true;
    for (int r = -1; r < reps; r++) {
        CK(cudaMemset(sum, 0, sizeof *sum));
        CK(cudaEventRecord(start));
        variant.kernel<<<l.blocks, l.threads>>>((const uint4 *)buf, bytes / 16, sum);
        CK(cudaGetLastError());
        CK(cudaEventRecord(stop));
        CK(cudaEventSynchronize(stop));
        float ms;
        CK(cudaEventElapsedTime(&ms, start, stop));
        unsigned long long got;
        CK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
        if (got != want) *ok = false;
        if (r >= 0) all->push_back(bytes / (ms * 1e-3) / 1e9);
    }
    CK(cudaEventDestroy(start));
    CK(cudaEventDestroy(stop));
    CK(cudaFree(sum));
    return median(*all);
}

// Enough repetitions to read ~24 GiB per figure, at least 3.
static int reps_for(size_t bytes) {
    size_t target = 24ull << 30;
    return (int)std::max<size_t>(3, std::min<size_t>(20, target / bytes));
}

static std::string json_list(const std::vector<double> &v) {
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); i++) {
        snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", v[i]);
        s += buf;
    }
    return s + "]";
}

// Every read variant over one buffer: the best median, its name, and per variant
// {"GBps": median, "all": [...]} as JSON.
struct VariantReads {
    double best_GBps = 0;
    const char *best = "";
    bool ok = true;
    std::string json;
};

static VariantReads read_variants(const void *buf, size_t bytes, int reps) {
    VariantReads r;
    r.json = "{";
    for (int v = 0; v < kReadVariantCount; v++) {
        bool ok;
        std::vector<double> all;
        double gbps = time_reads(kReadVariants[v], buf, bytes, reps, &ok, &all);
        r.ok = r.ok && ok;
        if (gbps > r.best_GBps) {
            r.best_GBps = gbps;
            r.best = kReadVariants[v].name;
        }
        char head[96];
        snprintf(head, sizeof head, "%s\"%s\":{\"GBps\":%.3f,\"checksum_ok\":%s,\"all\":", v ? "," : "",
                 kReadVariants[v].name, gbps, ok ? "true" : "false");
        r.json += head + json_list(all) + "}";
    }
    r.json += "}";
    return r;
}

static int cmd_read(double gib) {
    size_t bytes = (size_t)(gib * (1ull << 30));
    CK(cudaFree(0));
    void *buf;
    double t0 = now_s();
    CK(cudaMalloc(&buf, bytes));
    double alloc_s = now_s() - t0;
    const char *where = placement_of(buf);
    fill(buf, bytes);
    VariantReads reads = read_variants(buf, bytes, reps_for(bytes));
    CK(cudaFree(buf));
    printf("{\"cmd\":\"read\",\"gib\":%g,\"placement\":\"%s\",\"alloc_s\":%.4f,\"read_GBps\":%.3f,"
           "\"read_variant\":\"%s\",\"read_variants\":%s,\"checksum_ok\":%s}\n",
           gib, where, alloc_s, reads.best_GBps, reads.best, reads.json.c_str(), reads.ok ? "true" : "false");
    return reads.ok ? 0 : 1;
}

static int cmd_hostbuf(double gib) {
    size_t bytes = (size_t)(gib * (1ull << 30));
    CK(cudaFree(0));
    void *host, *dev_view, *dev;
    double t0 = now_s();
    CK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
    double alloc_s = now_s() - t0;
    CK(cudaHostGetDevicePointer(&dev_view, host, 0));
    CK(cudaMalloc(&dev, bytes));
    fill(dev_view, bytes);

    // Pinned H2D memcpy: one copy of the whole buffer per repetition.
    cudaEvent_t start, stop;
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    std::vector<double> copies;
    int reps = reps_for(bytes);
    for (int r = -1; r < reps; r++) {
        CK(cudaEventRecord(start));
        CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, 0));
        CK(cudaEventRecord(stop));
        CK(cudaEventSynchronize(stop));
        float ms;
        CK(cudaEventElapsedTime(&ms, start, stop));
        if (r >= 0) copies.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    // The copy landed in VRAM intact: the same checksum, read from HBM.
    VariantReads hbm = read_variants(dev, bytes, reps);
    VariantReads zc = read_variants(dev_view, bytes, reps);
    CK(cudaFree(dev));
    CK(cudaFreeHost(host));
    printf("{\"cmd\":\"hostbuf\",\"gib\":%g,\"hostalloc_s\":%.4f,\"memcpy_h2d_GBps\":%.3f,"
           "\"memcpy_h2d_GBps_all\":%s,\"zero_copy_read_GBps\":%.3f,\"zero_copy_read_variant\":\"%s\","
           "\"zero_copy_read_variants\":%s,\"hbm_read_GBps\":%.3f,\"hbm_read_variant\":\"%s\","
           "\"hbm_read_variants\":%s,\"checksum_ok\":%s}\n",
           gib, alloc_s, median(copies), json_list(copies).c_str(), zc.best_GBps, zc.best, zc.json.c_str(),
           hbm.best_GBps, hbm.best, hbm.json.c_str(), hbm.ok && zc.ok ? "true" : "false");
    return hbm.ok && zc.ok ? 0 : 1;
}

static bool usable(void *buf, size_t bytes) {
    fill(buf, bytes);
    bool ok;
    std::vector<double> all;
    time_reads(kReadVariants[0], buf, bytes, 0, &ok, &all);
    return ok;
}

static int cmd_alloc(const char *kind) {
    const size_t bytes = 1ull << 30;
    bool t2 = strcmp(kind, "t2") == 0;
    double t0 = now_s();
    CK(cudaFree(0));
    double context_s = now_s() - t0;
    double times[2];
    bool ok = true;
    const char *where = "";
    for (int round = 0; round < 2; round++) {
        void *buf, *dev_view;
        t0 = now_s();
        if (t2) {
            CK(cudaMalloc(&buf, bytes));
        } else {
            CK(cudaHostAlloc(&buf, bytes, cudaHostAllocMapped));
        }
        times[round] = now_s() - t0;
        if (t2) {
            dev_view = buf;
            if (round == 0) where = placement_of(buf);
        } else {
            CK(cudaHostGetDevicePointer(&dev_view, buf, 0));
            if (round == 0) where = "host";
        }
        ok = ok && usable(dev_view, bytes);
        if (t2) {
            CK(cudaFree(buf));
        } else {
            CK(cudaFreeHost(buf));
        }
    }
    printf("{\"cmd\":\"alloc\",\"kind\":\"%s\",\"placement\":\"%s\",\"context_s\":%.4f,"
           "\"cold_ms\":%.3f,\"warm_ms\":%.3f,\"usable\":%s}\n",
           kind, where, context_s, times[0] * 1e3, times[1] * 1e3, ok ? "true" : "false");
    return ok ? 0 : 1;
}

static int cmd_hook(int iters, int meminfo_iters) {
    CK(cudaFree(0));
    const size_t bytes = 1ull << 20;
    std::vector<double> malloc_free, meminfo;
    malloc_free.reserve(iters);
    meminfo.reserve(meminfo_iters);
    const char *where = "";
    for (int i = -iters / 10; i < iters; i++) {
        void *p;
        double t0 = now_s();
        CK(cudaMalloc(&p, bytes));
        CK(cudaFree(p));
        double t1 = now_s();
        if (i == 0) {
            CK(cudaMalloc(&p, bytes));
            where = placement_of(p);
            CK(cudaFree(p));
        }
        if (i >= 0) malloc_free.push_back((t1 - t0) * 1e6);
    }
    size_t free_b = 0, total_b = 0;
    for (int i = -meminfo_iters / 10; i < meminfo_iters; i++) {
        double t0 = now_s();
        CK(cudaMemGetInfo(&free_b, &total_b));
        double t1 = now_s();
        if (i >= 0) meminfo.push_back((t1 - t0) * 1e6);
    }
    printf("{\"cmd\":\"hook\",\"iters\":%d,\"meminfo_iters\":%d,\"placement\":\"%s\",\"malloc_free_us\":%.4f,"
           "\"meminfo_us\":%.4f,\"reported_free\":%zu,\"reported_total\":%zu}\n",
           iters, meminfo_iters, where, median(malloc_free), median(meminfo), free_b, total_b);
    return 0;
}

// 256 bytes by value: 8 pointers, a count, padding (the size of a typical fused-kernel
// argument block).
struct LaunchArgs {
    float *ptrs[8];
    unsigned long long count;
    char pad[256 - 8 * sizeof(float *) - sizeof(unsigned long long)];
};
static_assert(sizeof(LaunchArgs) == 256, "LaunchArgs is 256 bytes");

// Does almost nothing on the device, so that the host's launch rate is what is timed.
__global__ void launch8(float *p0, float *p1, float *p2, float *p3, float *p4, float *p5, float *p6, float *p7,
                        LaunchArgs args) {
    if (args.count == 0xdeadbeefull && threadIdx.x == 0)
        p0[0] = p1[0] + p2[0] + p3[0] + p4[0] + p5[0] + p6[0] + p7[0] + args.ptrs[0][0];
}

static int cmd_launch(int threads, int iters, size_t buffer_mib) {
    CK(cudaFree(0));
    std::vector<float *> buffers(8);
    for (auto &b : buffers) CK(cudaMalloc(&b, buffer_mib << 20));
    LaunchArgs args{};
    for (int i = 0; i < 8; i++) args.ptrs[i] = buffers[i];
    args.count = 1;
    std::vector<cudaStream_t> streams(threads);
    for (auto &s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto burst = [&](int t, int n) {
        for (int i = 0; i < n; i++)
            launch8<<<1, 32, 0, streams[t]>>>(buffers[0], buffers[1], buffers[2], buffers[3], buffers[4], buffers[5],
                                              buffers[6], buffers[7], args);
    };
    for (int t = 0; t < threads; t++) burst(t, iters / 10);
    CK(cudaDeviceSynchronize());
    std::vector<std::thread> workers;
    double t0 = now_s();
    for (int t = 0; t < threads; t++) workers.emplace_back(burst, t, iters);
    for (auto &w : workers) w.join();
    double issued = now_s();
    CK(cudaDeviceSynchronize());
    double t1 = now_s();
    CK(cudaGetLastError());
    printf("{\"cmd\":\"launch\",\"threads\":%d,\"iters\":%d,\"buffer_mib\":%zu,\"launches_per_s\":%.1f,"
           "\"issue_us_per_launch\":%.4f,\"total_s\":%.4f}\n",
           threads, iters, buffer_mib, threads * (double)iters / (t1 - t0), (issued - t0) * 1e6 / iters,
           t1 - t0);
    for (auto &s : streams) CK(cudaStreamDestroy(s));
    for (auto &b : buffers) CK(cudaFree(b));
    return 0;
}

static const char *arg(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: gbbench read|hostbuf --gib N | alloc --kind t2|hostalloc | hook --iters N [--meminfo-iters M] | "
                "launch --threads T --iters N [--buffer-mib M]\n");
        return 64;
    }
    std::string cmd = argv[1];
    if (cmd == "read") return cmd_read(atof(arg(argc, argv, "--gib", "1")));
    if (cmd == "hostbuf") return cmd_hostbuf(atof(arg(argc, argv, "--gib", "1")));
    if (cmd == "alloc") return cmd_alloc(arg(argc, argv, "--kind", "t2"));
    if (cmd == "hook") {
        int iters = atoi(arg(argc, argv, "--iters", "20000"));
        return cmd_hook(iters, atoi(arg(argc, argv, "--meminfo-iters", std::to_string(5 * iters).c_str())));
    }
    if (cmd == "launch")
        return cmd_launch(atoi(arg(argc, argv, "--threads", "1")), atoi(arg(argc, argv, "--iters", "200000")),
                          (size_t)atoll(arg(argc, argv, "--buffer-mib", "1")));
    fprintf(stderr, "gbbench: unknown command %s\n", cmd.c_str());
    return 64;
}
