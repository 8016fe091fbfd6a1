// gbbench: the raw measurements behind `make bench` (bench/run.sh builds it on the
// device with nvcc and runs each subcommand in a fresh process, with or without the
// shim preloaded). Every subcommand prints exactly one JSON object on stdout; bench/
// report.py turns those lines into bench/results/.
//
//   gbbench read     --gib N    cudaMalloc N GiB (through the shim when it is preloaded,
//                               so a small GREENBOOST_VRAM_BUDGET puts it in T2), fill it
//                               with a kernel, verify a checksum, then time a streaming
//                               read kernel over it (GB/s, median of repetitions).
//   gbbench hostbuf  --gib N    cudaHostAlloc N GiB (mapped): the two baselines for T2
//                               reads at that size: pinned cudaMemcpy H2D, and the same
//                               read kernel reading the pinned buffer zero-copy.
//   gbbench alloc    --kind t2|hostalloc
//                               one cold 1 GiB allocation after context creation
//                               (cudaMalloc through the shim, or cudaHostAlloc), checked
//                               usable with a kernel, freed, then one warm allocation.
//   gbbench hook     --iters N  median cudaMalloc+cudaFree(1 MiB) and cudaMemGetInfo
//                               call times (run with and without the shim).
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

// Streaming read: 16-byte loads, four independent loads in flight per thread per
// iteration (PCIe reads need many outstanding requests), one atomic per thread.
__global__ void read_kernel(const uint4 *__restrict__ buf, size_t n_vec, unsigned long long *sum) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long acc = 0;
    for (; i + 3 * stride < n_vec; i += 4 * stride) {
        uint4 a = __ldcs(buf + i);
        uint4 b = __ldcs(buf + i + stride);
        uint4 c = __ldcs(buf + i + 2 * stride);
        uint4 d = __ldcs(buf + i + 3 * stride);
        acc += (unsigned long long)a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
        acc += (unsigned long long)c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < n_vec; i += stride) {
        uint4 a = __ldcs(buf + i);
        acc += (unsigned long long)a.x + a.y + a.z + a.w;
    }
    atomicAdd(sum, acc);
}

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

static Launch read_launch() {
    int dev, sms;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return {sms * 8, 256};
}

static void fill(void *buf, size_t bytes) {
    Launch l = read_launch();
    fill_kernel<<<l.blocks, l.threads>>>((uint4 *)buf, bytes / 16);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

// Reads the buffer once, unchecked and untimed (warm-up and verification), then
// `reps` timed passes; returns the median GB/s. Sets *ok when the checksum matched on
// every pass.
static double time_reads(const void *buf, size_t bytes, int reps, bool *ok, std::vector<double> *all) {
    Launch l = read_launch();
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
        read_kernel<<<l.blocks, l.threads>>>((const uint4 *)buf, bytes / 16, sum);
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

static int cmd_read(double gib) {
    size_t bytes = (size_t)(gib * (1ull << 30));
    CK(cudaFree(0));
    void *buf;
    double t0 = now_s();
    CK(cudaMalloc(&buf, bytes));
    double alloc_s = now_s() - t0;
    const char *where = placement_of(buf);
    fill(buf, bytes);
    bool ok;
    std::vector<double> all;
    double gbps = time_reads(buf, bytes, reps_for(bytes), &ok, &all);
    CK(cudaFree(buf));
    printf("{\"cmd\":\"read\",\"gib\":%g,\"placement\":\"%s\",\"alloc_s\":%.4f,\"read_GBps\":%.3f,"
           "\"read_GBps_all\":%s,\"checksum_ok\":%s}\n",
           gib, where, alloc_s, gbps, json_list(all).c_str(), ok ? "true" : "false");
    return ok ? 0 : 1;
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
    bool copy_ok, zc_ok;
    std::vector<double> hbm_all, zc_all;
    double hbm = time_reads(dev, bytes, reps_for(bytes), &copy_ok, &hbm_all);
    double zc = time_reads(dev_view, bytes, reps, &zc_ok, &zc_all);
    CK(cudaFree(dev));
    CK(cudaFreeHost(host));
    printf("{\"cmd\":\"hostbuf\",\"gib\":%g,\"hostalloc_s\":%.4f,\"memcpy_h2d_GBps\":%.3f,"
           "\"memcpy_h2d_GBps_all\":%s,\"zero_copy_read_GBps\":%.3f,\"zero_copy_read_GBps_all\":%s,"
           "\"hbm_read_GBps\":%.3f,\"checksum_ok\":%s}\n",
           gib, alloc_s, median(copies), json_list(copies).c_str(), zc, json_list(zc_all).c_str(), hbm,
           copy_ok && zc_ok ? "true" : "false");
    return copy_ok && zc_ok ? 0 : 1;
}

static bool usable(void *buf, size_t bytes) {
    fill(buf, bytes);
    bool ok;
    std::vector<double> all;
    time_reads(buf, bytes, 0, &ok, &all);
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

static int cmd_hook(int iters) {
    CK(cudaFree(0));
    const size_t bytes = 1ull << 20;
    std::vector<double> malloc_free, meminfo;
    malloc_free.reserve(iters);
    meminfo.reserve(iters);
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
    for (int i = -iters / 10; i < iters; i++) {
        double t0 = now_s();
        CK(cudaMemGetInfo(&free_b, &total_b));
        double t1 = now_s();
        if (i >= 0) meminfo.push_back((t1 - t0) * 1e6);
    }
    printf("{\"cmd\":\"hook\",\"iters\":%d,\"placement\":\"%s\",\"malloc_free_us\":%.4f,"
           "\"meminfo_us\":%.4f,\"reported_free\":%zu,\"reported_total\":%zu}\n",
           iters, where, median(malloc_free), median(meminfo), free_b, total_b);
    return 0;
}

static const char *arg(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: gbbench read|hostbuf --gib N | alloc --kind t2|hostalloc | hook --iters N\n");
        return 64;
    }
    std::string cmd = argv[1];
    if (cmd == "read") return cmd_read(atof(arg(argc, argv, "--gib", "1")));
    if (cmd == "hostbuf") return cmd_hostbuf(atof(arg(argc, argv, "--gib", "1")));
    if (cmd == "alloc") return cmd_alloc(arg(argc, argv, "--kind", "t2"));
    if (cmd == "hook") return cmd_hook(atoi(arg(argc, argv, "--iters", "20000")));
    fprintf(stderr, "gbbench: unknown command %s\n", cmd.c_str());
    return 64;
}
