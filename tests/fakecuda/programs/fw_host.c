#define _GNU_SOURCE
/* gbtest-fw: like python importing torch. The runtime tests live in a "framework"
 * library linked against libcudart.so.13 and loaded with dlopen(RTLD_LOCAL), so neither
 * it nor libcudart is in the global scope: dlsym(RTLD_NEXT/RTLD_DEFAULT, "cudaMalloc")
 * from a preloaded library finds nothing. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    /* GBTEST_DEEPBIND=1: as some frameworks load their CUDA libraries, with
     * RTLD_DEEPBIND, which puts the library's own dependencies before the
     * preloaded shim when its symbols are bound. */
    int deep = getenv("GBTEST_DEEPBIND") && atoi(getenv("GBTEST_DEEPBIND"));
    /* GBTEST_FRAMEWORK: another test library (libgbgemm.so: cuBLAS loaded locally too). */
    const char *name = getenv("GBTEST_FRAMEWORK") ? getenv("GBTEST_FRAMEWORK") : "libgbframework.so";
    void *fw = dlopen(name, RTLD_NOW | RTLD_LOCAL | (deep ? RTLD_DEEPBIND : 0));
    if (!fw) {
        printf("FAIL: dlopen %s: %s\n", name, dlerror());
        return 1;
    }
    /* Checked without the shim (which exports cudaMalloc itself). */
    if (!getenv("LD_PRELOAD") && dlsym(RTLD_DEFAULT, "cudaMalloc")) {
        printf("FAIL: cudaMalloc visible in the global scope: the test would not model RTLD_LOCAL\n");
        return 1;
    }
    int (*run)(int, char **) = (int (*)(int, char **))dlsym(fw, "gbtests_main");
    if (!run) {
        printf("FAIL: gbtests_main missing\n");
        return 1;
    }
    return run(argc, argv);
}
