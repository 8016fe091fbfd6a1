/* Launch observation's cost in one process (issue 35): the same kernel launched through
 * the cuLaunchKernel a program finds (under LD_PRELOAD, the shim's hook) and through
 * libcuda's own, found in its dynamic symbol table on disk, which no dlsym answers,
 * in alternating blocks of launches. Side by side in one process, the drift between
 * processes that made bench/run.sh's launch pairs spread 0.94-1.29 is shared by both
 * paths. Without the shim both paths are libcuda's: the ratio says how quiet it is.
 *
 *   cc -O2 -o launch_ab_probe bench/probes/launch_ab_probe.c -ldl
 *   [LD_PRELOAD=libgreenboost_cuda.so] ./launch_ab_probe [ROUNDS [LAUNCHES [ALLOCATIONS]]]
 *
 * The kernel takes a 256-byte struct holding 8 pointers and the 8 pointers (the shape of
 * gbbench's launch8, JIT-compiled from PTX; the fake CUDA knows it as fk_struct), each
 * into its own 64 MiB allocation, and does nothing. With ALLOCATIONS past 8 (default 8),
 * that many allocations of 1 MiB are made and each launch names the next 8 of them in
 * turn, as a model's layers name their own weights: launches then rarely name what the
 * launch before them named. Prints one JSON line: launches per second of each path in
 * each round, and the median of the rounds' ratios (direct over the program's path: the
 * shim's cost where it is loaded). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
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
    " .param .u64 p3, .param .u64 p4, .param .u64 p5, .param .u64 p6, .param .u64 p7)\n{ ret; }\n";

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

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 21, launches = argc > 2 ? atoi(argv[2]) : 50000;
    int allocations = argc > 3 ? atoi(argv[3]) : 8;
    if (rounds < 1 || rounds > 1000 || launches < 1 || allocations < 8 || allocations > 100000) {
        fprintf(stderr, "usage: launch_ab_probe [ROUNDS (1-1000) [LAUNCHES [ALLOCATIONS (8-100000)]]]\n");
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

    CUcontext context;
    CUmodule module;
    CUfunction kernel;
    CUstream stream;
    ok(cuInit(0), "cuInit");
    ok(cuDevicePrimaryCtxRetain(&context, 0), "cuDevicePrimaryCtxRetain");
    ok(cuCtxSetCurrent(context), "cuCtxSetCurrent");
    ok(cuModuleLoadData(&module, ptx), "cuModuleLoadData");
    ok(cuModuleGetFunction(&kernel, module, "fk_struct"), "cuModuleGetFunction");
    ok(cuStreamCreate(&stream, 1), "cuStreamCreate");
    struct {
        CUdeviceptr pointers[8];
        char rest[256 - 8 * sizeof(CUdeviceptr)];
    } args;
    memset(&args, 0, sizeof args);
    CUdeviceptr named[8], *buffers = calloc((size_t)allocations, sizeof(CUdeviceptr));
    void *params[9] = { &args };
    if (!buffers)
        return 1;
    for (int i = 0; i < allocations; i++)
        ok(cuMemAlloc_v2(&buffers[i], allocations == 8 ? 64 << 20 : 1 << 20), "cuMemAlloc_v2");
    for (int i = 0; i < 8; i++) {
        named[i] = args.pointers[i] = buffers[i];
        params[i + 1] = &named[i];
    }

    double *rates[2] = { calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double)) };
    double *ratios = calloc((size_t)rounds, sizeof(double));
    if (!rates[0] || !rates[1] || !ratios)
        return 1;
    launch_fn paths[2] = { program_path, direct };
    for (int warm = 0; warm < 2; warm++)
        for (int i = 0; i < launches / 10; i++)
            ok(paths[warm](kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL), "warm-up launch");
    ok(cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* the order turns each round */
            double began = now();
            for (int i = 0; i < launches; i++) {
                if (allocations > 8) /* the next 8 allocations, on both paths alike */
                    for (int j = 0; j < 8; j++)
                        named[j] = args.pointers[j] = buffers[(8 * (size_t)i + (size_t)j) % (size_t)allocations];
                ok(paths[which](kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL), "cuLaunchKernel");
            }
            ok(cuStreamSynchronize(stream), "cuStreamSynchronize");
            rates[which][r] = launches / (now() - began);
        }
        ratios[r] = rates[1][r] / rates[0][r];
    }
    printf("{\"probe\":\"launch_ab\",\"shim\":%s,\"rounds\":%d,\"launches\":%d,\"allocations\":%d,"
           "\"program_path_per_s\":[",
           program_path == direct ? "false" : "true", rounds, launches, allocations);
    for (int r = 0; r < rounds; r++)
        printf("%s%.0f", r ? "," : "", rates[0][r]);
    printf("],\"direct_per_s\":[");
    for (int r = 0; r < rounds; r++)
        printf("%s%.0f", r ? "," : "", rates[1][r]);
    qsort(ratios, (size_t)rounds, sizeof *ratios, by_value);
    printf("],\"ratio_min\":%.4f,\"ratio_median\":%.4f,\"ratio_max\":%.4f}\n", ratios[0], ratios[rounds / 2],
           ratios[rounds - 1]);
    return 0;
}
