/* Fake libcuda.so.1 (see libcuda.c): modules and kernel launches. The fake device runs no
 * code; the only kernel it knows is the shim's own copy kernel (shim/src/cuda/
 * sm_copy.rs), which it carries out as the copy it is, on its stream, reading and
 * writing through the device's view as any copy does: gb_copy16(dst, src, count) moves
 * count 16-byte vectors. An image without it is refused (CUDA_ERROR_INVALID_IMAGE),
 * another kernel name is not found, as the driver answers for a name the image lacks. FAKECUDA_NO_MODULES=1 refuses every image (a
 * device whose driver cannot JIT the PTX). Logged as "cuLaunchKernel NAME ...". */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <string.h>

struct fake_module {
    int loaded;
};
struct fake_function {
    const char *name;
    size_t element; /* bytes a count of 1 moves */
};

static struct fake_module copy_module = {1};
static struct fake_function copy_functions[] = {{"gb_copy16", 16}};

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    GATE(1, 1);
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    const char *ptx = image;
    const char *env = getenv("FAKECUDA_NO_MODULES");
    int knows = strstr(ptx, ".visible .entry gb_copy16(") != NULL;
    CUresult rc = (env && *env == '1') || !knows ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
        *module = &copy_module;
    fg_log("cuModuleLoadData -> %d", rc);
    return rc;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name)
{
    GATE(1, 1);
    if (!function || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (module != &copy_module)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < sizeof copy_functions / sizeof copy_functions[0]; i++) {
        if (strcmp(copy_functions[i].name, name) == 0) {
            *function = &copy_functions[i];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    GATE(1, 1);
    (void)shared;
    if (f != &copy_functions[0])
        return CUDA_ERROR_INVALID_HANDLE;
    if (!params || extra || !gx || !gy || !gz || !bx || !by || !bz)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr dst = *(CUdeviceptr *)params[0], src = *(CUdeviceptr *)params[1];
    unsigned long long count = *(unsigned long long *)params[2];
    CUresult rc = fg_memcpy(dst, src, count * f->element, s, 1);
    fg_log("cuLaunchKernel %s count=%llu grid=%u block=%u -> %d", f->name, count, gx, bx, rc);
    return rc;
}
