/* Launch observation's cost in one process (issue 35): the same kernel launched through
 * the cuLaunchKernel a program finds (under LD_PRELOAD, the shim's hook) and through
 * libcuda's own, found in its dynamic symbol table on disk, which no dlsym answers,
 * in alternating blocks of launches. Side by side in one process, the drift between
 * processes that made bench/run.sh's launch pairs spread 0.94-1.29 is shared by both
 * paths. Without the shim both paths are libcuda's: the ratio says how quiet it is.
 *
 *   cc -O2 -o launch_ab_probe bench/probes/launch_ab_probe.c -ldl -lpthread
 *   [LD_PRELOAD=libgreenboost_cuda.so] ./launch_ab_probe [ROUNDS [LAUNCHES [ALLOCATIONS [THREADS
 *                                                         [FUNCTIONS [SHAPE]]]]]]
 *
 * SHAPE `pointers` (the default): the kernel takes a 256-byte struct holding 8 pointers and
 * the 8 pointers (the shape of gbbench's launch8, JIT-compiled from PTX; the fake CUDA
 * knows it as fk_struct), each into its own 64 MiB allocation, and does nothing. SHAPE
 * `elementwise`: the shape of PyTorch's elementwise kernels, a u32 and a 640-byte lambda
 * holding 3 pointers and an offset calculator (sizes as dividers, strides), mostly small
 * numbers; one tensor map is encoded first where the driver has cuTensorMapEncodeTiled,
 * as a Hopper program that ran a cuBLAS product has (the shim then looks for maps in
 * every struct). With ALLOCATIONS past 8 (default 8), that many allocations of 1 MiB are
 * made and each launch names the next 8 (3) of them in turn, as a model's layers name
 * their own weights: launches then rarely name what the launch before them named. With
 * THREADS past 1 (default 1), that many threads launch at once, each LAUNCHES per block
 * on a stream of its own, all on the same path in each block (the shim's shared cache
 * lines then bounce between cores). With FUNCTIONS past 1 (default 1), the module is
 * loaded that many times and launches go to each of its functions in turn, as a model's
 * step launches a few dozen kernels. Prints one JSON line:
 * launches per second of each path in each round (all threads together), the median of
 * the rounds' ratios (direct over the program's path: the shim's cost where it is
 * loaded), and the launching threads' CPU time per launch on each path, whose median
 * difference is the shim's CPU time per launch (`shim_cpu_ns_median`; the stream
 * threads of the driver are not counted). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry fk_struct(.param .align 8 .b8 s[256], .param .u64 p0, .param .u64 p1, .param .u64 p2,"
    " .param .u64 p3, .param .u64 p4, .param .u64 p5, .param .u64 p6, .param .u64 p7)\n{ ret; }\n"
    ".visible .entry fk_elementwise(.param .u32 n, .param .align 8 .b8 f[640])\n{ ret; }\n";

/* PyTorch's elementwise lambda with OffsetCalculator<3> (25 dimensions at most). */
struct divider {
    unsigned divisor, magic, shift;
};
struct elementwise_lambda {
    CUdeviceptr data[3];
    int dims;
    struct divider sizes[25];
    unsigned strides[25][3];
    char rest[640 - 3 * 8 - 4 - 25 * 12 - 25 * 3 * 4];
};

static void *must(void *p, const char *what)
{
    if (!p) {
        fprintf(stderr, "launch_ab_probe: %s: %s\n", what, dlerror());
        exit(1);
    }
    return p;
}

static void ok(CUresult status, const char *what)
{
    if (status != 0) {
        fprintf(stderr, "launch_ab_probe: %s returned %d\n", what, status);
        exit(1);
    }
}

/* Where libcuda.so.1 is loaded: its path and load bias. */
struct loaded {
    const char *path;
    ElfW(Addr) bias;
};

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct loaded *found = data;
    const char *slash = strrchr(info->dlpi_name, '/');
    if (strcmp(slash ? slash + 1 : info->dlpi_name, "libcuda.so.1") != 0)
        return 0;
    found->path = info->dlpi_name;
    found->bias = info->dlpi_addr;
    return 1;
}

/* libcuda's own `name`, from the .dynsym of its file on disk. */
static void *own_symbol(const char *name)
{
    struct loaded lib = { NULL, 0 };
    dl_iterate_phdr(find_libcuda, &lib);
    if (!lib.path || !*lib.path) {
        fprintf(stderr, "launch_ab_probe: libcuda.so.1 is not loaded under its soname\n");
        exit(1);
    }
    int fd = open(lib.path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "launch_ab_probe: cannot read %s\n", lib.path);
        exit(1);
    }
    const unsigned char *file = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (file == MAP_FAILED) {
        fprintf(stderr, "launch_ab_probe: cannot map %s\n", lib.path);
        exit(1);
    }
    const ElfW(Ehdr) *eh = (const void *)file;
    const ElfW(Shdr) *sections = (const void *)(file + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sections[i].sh_type != SHT_DYNSYM)
            continue;
        const ElfW(Sym) *symbols = (const void *)(file + sections[i].sh_offset);
        const char *names = (const char *)(file + sections[sections[i].sh_link].sh_offset);
        size_t count = sections[i].sh_size / sizeof *symbols;
        for (size_t j = 0; j < count; j++)
            if (symbols[j].st_value && !strcmp(names + symbols[j].st_name, name))
                return (void *)(lib.bias + symbols[j].st_value);
    }
    fprintf(stderr, "launch_ab_probe: %s has no %s\n", lib.path, name);
    exit(1);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The calling thread's CPU time, in seconds. */
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One launching thread: its stream, its parameters, the CPU time of its last block. */
struct worker {
    pthread_t thread;
    CUstream stream;
    struct {
        CUdeviceptr pointers[8];
        char rest[256 - 8 * sizeof(CUdeviceptr)];
    } args;
    CUdeviceptr named[8];
    void *params[9];
    unsigned elements;
    struct elementwise_lambda lambda;
    void *elementwise_params[2];
    double cpu;
};

/* What every thread shares: set by the main thread before the start barrier of a block. */
static struct {
    int allocations;
    CUdeviceptr *buffers;
    CUcontext context;
    int functions, elementwise;
    CUfunction *kernels;
    launch_fn paths[2];
    CUresult (*set_current)(CUcontext);
    CUresult (*synchronize)(CUstream);
    pthread_barrier_t start, end;
    int which, count, stop; /* the block's path and launches per thread; whether to end */
} run;

/* `count` launches through path `which`, then the stream synchronised. */
static void block(struct worker *w, int which, int count)
{
    launch_fn path = run.paths[which];
    double began = thread_cpu();
    for (int i = 0; i < count; i++) {
        if (run.allocations > 8) /* the next 8 allocations, on both paths alike */
            for (int j = 0; j < 8; j++) {
                w->named[j] = w->args.pointers[j] = run.buffers[(8 * (size_t)i + (size_t)j) % (size_t)run.allocations];
                if (j < 3)
                    w->lambda.data[j] = w->named[j];
            }
        CUfunction kernel = run.kernels[i % run.functions];
        ok(path(kernel, 1, 1, 1, 32, 1, 1, 0, w->stream, run.elementwise ? w->elementwise_params : w->params, NULL),
           "cuLaunchKernel");
    }
    w->cpu = thread_cpu() - began;
    ok(run.synchronize(w->stream), "cuStreamSynchronize");
}

static void *work(void *arg)
{
    struct worker *w = arg;
    ok(run.set_current(run.context), "cuCtxSetCurrent");
    for (;;) {
        pthread_barrier_wait(&run.start);
        if (run.stop)
            return NULL;
        block(w, run.which, run.count);
        pthread_barrier_wait(&run.end);
    }
}

/* One block on every thread (the main thread is worker 0): its wall time, in seconds. */
static double all_block(struct worker *workers, int which, int count)
{
    run.which = which;
    run.count = count;
    pthread_barrier_wait(&run.start);
    double began = now();
    block(&workers[0], which, count);
    pthread_barrier_wait(&run.end);
    return now() - began;
}

/* A [4096, 32] float tensor's lambda, transposed (non-contiguous: the offset calculator
 * path), its three operands at `data`; the unused dimensions as PyTorch leaves them. */
static void fill_lambda(struct elementwise_lambda *f, const CUdeviceptr *data)
{
    memset(f, 0, sizeof *f);
    for (int j = 0; j < 3; j++)
        f->data[j] = data[j];
    f->dims = 2;
    f->sizes[0] = (struct divider){ 32, 1, 5 };
    f->sizes[1] = (struct divider){ 4096, 1, 12 };
    for (int d = 2; d < 25; d++)
        f->sizes[d] = (struct divider){ 1, 1, 0 };
    for (int j = 0; j < 3; j++) {
        f->strides[0][j] = 4 * 4096;
        f->strides[1][j] = 4;
    }
}

/* One tensor map over `global` (a 2D float tensor of 1024 x 1024, 64 x 64 tiles), where the
 * driver can encode one; its bytes are not used. */
static void encode_one_map(void *cuda, CUdeviceptr global)
{
    typedef CUresult (*encode_fn)(void *, int, unsigned, void *, const unsigned long long *,
                                  const unsigned long long *, const unsigned *, const unsigned *, int, int, int, int);
    encode_fn encode = (encode_fn)dlsym(cuda, "cuTensorMapEncodeTiled");
    if (!encode)
        return;
    static _Alignas(64) unsigned char map[128];
    unsigned long long dims[2] = { 1024, 1024 }, strides[1] = { 4096 };
    unsigned box[2] = { 64, 64 }, element_strides[2] = { 1, 1 };
    /* FLOAT32 = 7; no interleave, no swizzle, no L2 promotion, zero fill. */
    ok(encode(map, 7, 2, (void *)global, dims, strides, box, element_strides, 0, 0, 0, 0), "cuTensorMapEncodeTiled");
}

static double median(double *values, int count)
{
    qsort(values, (size_t)count, sizeof *values, by_value);
    return values[count / 2];
}

static void print_list(const char *name, const double *values, int count, const char *format)
{
    printf(",\"%s\":[", name);
    for (int r = 0; r < count; r++) {
        printf("%s", r ? "," : "");
        printf(format, values[r]);
    }
    printf("]");
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 21, launches = argc > 2 ? atoi(argv[2]) : 50000;
    int allocations = argc > 3 ? atoi(argv[3]) : 8, threads = argc > 4 ? atoi(argv[4]) : 1;
    int functions = argc > 5 ? atoi(argv[5]) : 1;
    const char *shape = argc > 6 ? argv[6] : "pointers";
    int elementwise = !strcmp(shape, "elementwise");
    if (rounds < 1 || rounds > 1000 || launches < 1 || allocations < 8 || allocations > 100000 || threads < 1 ||
        threads > 64 || functions < 1 || functions > 256 || (!elementwise && strcmp(shape, "pointers"))) {
        fprintf(stderr, "usage: launch_ab_probe [ROUNDS (1-1000) [LAUNCHES [ALLOCATIONS (8-100000) "
                        "[THREADS (1-64) [FUNCTIONS (1-256) [SHAPE (pointers|elementwise)]]]]]]\n");
        return 2;
    }
    void *cuda = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), "dlopen libcuda.so.1");
#define DRIVER(name, ...)                                                                                  \
    __typeof__(CUresult(*)(__VA_ARGS__)) name = (__typeof__(CUresult(*)(__VA_ARGS__)))must(dlsym(cuda, #name), #name)
    DRIVER(cuInit, unsigned);
    DRIVER(cuDevicePrimaryCtxRetain, CUcontext *, int);
    DRIVER(cuCtxSetCurrent, CUcontext);
    DRIVER(cuModuleLoadData, CUmodule *, const void *);
    DRIVER(cuModuleGetFunction, CUfunction *, CUmodule, const char *);
    DRIVER(cuMemAlloc_v2, CUdeviceptr *, size_t);
    DRIVER(cuStreamCreate, CUstream *, unsigned);
    DRIVER(cuStreamSynchronize, CUstream);
#undef DRIVER
    /* The program's path: what dlsym answers (the shim's hook under LD_PRELOAD). */
    launch_fn program_path = (launch_fn)must(dlsym(cuda, "cuLaunchKernel"), "cuLaunchKernel");
    launch_fn direct = (launch_fn)own_symbol("cuLaunchKernel");

    ok(cuInit(0), "cuInit");
    ok(cuDevicePrimaryCtxRetain(&run.context, 0), "cuDevicePrimaryCtxRetain");
    ok(cuCtxSetCurrent(run.context), "cuCtxSetCurrent");
    run.functions = functions;
    run.elementwise = elementwise;
    run.kernels = calloc((size_t)functions, sizeof(CUfunction));
    if (!run.kernels)
        return 1;
    for (int k = 0; k < functions; k++) { /* each load's functions are handles of their own */
        CUmodule module;
        ok(cuModuleLoadData(&module, ptx), "cuModuleLoadData");
        ok(cuModuleGetFunction(&run.kernels[k], module, elementwise ? "fk_elementwise" : "fk_struct"),
           "cuModuleGetFunction");
    }
    run.allocations = allocations;
    run.paths[0] = program_path;
    run.paths[1] = direct;
    run.set_current = cuCtxSetCurrent;
    run.synchronize = cuStreamSynchronize;
    run.buffers = calloc((size_t)allocations, sizeof(CUdeviceptr));
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    if (!run.buffers || !workers)
        return 1;
    for (int i = 0; i < allocations; i++)
        ok(cuMemAlloc_v2(&run.buffers[i], allocations == 8 ? 64 << 20 : 1 << 20), "cuMemAlloc_v2");
    if (elementwise)
        encode_one_map(cuda, run.buffers[0]);
    for (int t = 0; t < threads; t++) {
        struct worker *w = &workers[t];
        ok(cuStreamCreate(&w->stream, 1), "cuStreamCreate");
        w->params[0] = &w->args;
        for (int i = 0; i < 8; i++) {
            w->named[i] = w->args.pointers[i] = run.buffers[i];
            w->params[i + 1] = &w->named[i];
        }
        fill_lambda(&w->lambda, w->named);
        w->elements = 4096 * 32;
        w->elementwise_params[0] = &w->elements;
        w->elementwise_params[1] = &w->lambda;
    }
    pthread_barrier_init(&run.start, NULL, (unsigned)threads);
    pthread_barrier_init(&run.end, NULL, (unsigned)threads);
    for (int t = 1; t < threads; t++)
        if (pthread_create(&workers[t].thread, NULL, work, &workers[t])) {
            fprintf(stderr, "launch_ab_probe: pthread_create failed\n");
            return 1;
        }

    double *rates[2] = { calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double)) };
    double *cpu_ns[2] = { calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double)) };
    double *ratios = calloc((size_t)rounds, sizeof(double)), *shim_ns = calloc((size_t)rounds, sizeof(double));
    if (!rates[0] || !rates[1] || !cpu_ns[0] || !cpu_ns[1] || !ratios || !shim_ns)
        return 1;
    for (int warm = 0; warm < 2; warm++)
        all_block(workers, warm, launches / 10 ? launches / 10 : 1);
    double total = (double)launches * threads;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* the order turns each round */
            rates[which][r] = total / all_block(workers, which, launches);
            double cpu = 0;
            for (int t = 0; t < threads; t++)
                cpu += workers[t].cpu;
            cpu_ns[which][r] = cpu * 1e9 / total;
        }
        ratios[r] = rates[1][r] / rates[0][r];
        shim_ns[r] = cpu_ns[0][r] - cpu_ns[1][r];
    }
    run.stop = 1;
    pthread_barrier_wait(&run.start);
    for (int t = 1; t < threads; t++)
        pthread_join(workers[t].thread, NULL);

    printf("{\"probe\":\"launch_ab\",\"shim\":%s,\"rounds\":%d,\"launches\":%d,\"allocations\":%d,\"threads\":%d,"
           "\"functions\":%d,\"shape\":\"%s\"",
           program_path == direct ? "false" : "true", rounds, launches, allocations, threads, functions, shape);
    print_list("program_path_per_s", rates[0], rounds, "%.0f");
    print_list("direct_per_s", rates[1], rounds, "%.0f");
    print_list("program_cpu_ns", cpu_ns[0], rounds, "%.1f");
    print_list("direct_cpu_ns", cpu_ns[1], rounds, "%.1f");
    double shim_median = median(shim_ns, rounds);
    qsort(ratios, (size_t)rounds, sizeof *ratios, by_value);
    printf(",\"ratio_min\":%.4f,\"ratio_median\":%.4f,\"ratio_max\":%.4f,\"shim_cpu_ns_median\":%.1f}\n",
           ratios[0], ratios[rounds / 2], ratios[rounds - 1], shim_median);
    return 0;
}
