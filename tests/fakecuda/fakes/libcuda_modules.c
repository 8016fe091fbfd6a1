/* Fake libcuda.so.1 (see libcuda.c): modules, libraries and their kernels. The fake
 * device runs no code: it knows a few kernels by name (gpu/fakegpu_kernels.c: the shim's
 * own copy kernel gb_copy16, and the test kernels fk_*), carried out on their streams
 * through the device's view. An image (PTX-like text) loads when every ".entry NAME("
 * it holds is one of them; one without any, or naming another kernel, is refused
 * (CUDA_ERROR_INVALID_IMAGE: the fake cannot compile it). A name the image lacks is not
 * found. FAKECUDA_NO_MODULES=1 refuses every image (a device whose driver cannot JIT the
 * PTX).
 *
 * CUDA 12 libraries (cuLibraryLoadData) hold CUkernel handles, context-independent; the
 * driver accepts a CUkernel wherever a CUfunction is launched, as the real one does (the
 * runtime launches that way), and cuKernelGetFunction gives the function. Parameter
 * layouts are answered by cuFuncGetParamInfo / cuKernelGetParamInfo.
 */
#define _GNU_SOURCE
#include "libcuda_entry.h"

#include <string.h>

#define MODULE_MAGIC 0x4d4f44554c453031ULL
#define FUNCTION_MAGIC 0x46554e4354303031ULL
#define LIBRARY_MAGIC 0x4c49425241523031ULL
#define KERNEL_MAGIC 0x4b45524e454c3031ULL
#define MAX_ENTRIES 16

struct fake_function {
    uint64_t magic;
    const struct fg_kernel *k;
};
struct fake_module {
    uint64_t magic;
    int n;
    struct fake_function f[MAX_ENTRIES];
};
struct fake_kernel {
    uint64_t magic;
    const struct fg_kernel *k;
    struct fake_function f; /* its function (one context in the fake) */
};
struct fake_library {
    uint64_t magic;
    int n;
    struct fake_kernel k[MAX_ENTRIES];
};

/* The kernels an image names: their count, or -1 when it is refused. */
static int parse_image(const char *ptx, const struct fg_kernel **out)
{
    const char *env = getenv("FAKECUDA_NO_MODULES");
    if (env && *env == '1')
        return -1;
    int n = 0;
    for (const char *p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        const char *name = p + 7;
        while (*name == ' ')
            name++;
        size_t len = strcspn(name, "( \t\n");
        const struct fg_kernel *k = fg_kernel_find(name, len);
        if (!k || n == MAX_ENTRIES)
            return -1;
        out[n++] = k;
    }
    return n ? n : -1;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    GATE(1, 1);
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_kernel *ks[MAX_ENTRIES];
    int n = parse_image(image, ks);
    CUresult rc = n < 0 ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
    if (!rc) {
        struct fake_module *m = calloc(1, sizeof *m);
        m->magic = MODULE_MAGIC;
        m->n = n;
        for (int i = 0; i < n; i++)
            m->f[i] = (struct fake_function){ FUNCTION_MAGIC, ks[i] };
        *module = m;
    }
    fg_log("cuModuleLoadData -> %d", rc);
    return rc;
}

EXPORT CUresult cuModuleUnload(CUmodule module)
{
    GATE(1, 1);
    if (!module || module->magic != MODULE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    module->magic = 0;
    free(module);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name)
{
    GATE(1, 1);
    if (!function || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!module || module->magic != MODULE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < module->n; i++)
        if (!strcmp(module->f[i].k->name, name)) {
            *function = &module->f[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, void *jitOptions, void **jitOptionsValues,
                                  unsigned numJitOptions, void *libraryOptions, void **libraryOptionValues,
                                  unsigned numLibraryOptions)
{
    GATE(1, 0); /* a library belongs to no context */
    if (!library || !code || (numJitOptions && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions && (!libraryOptions || !libraryOptionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_kernel *ks[MAX_ENTRIES];
    int n = parse_image(code, ks);
    CUresult rc = n < 0 ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
    if (!rc) {
        struct fake_library *l = calloc(1, sizeof *l);
        l->magic = LIBRARY_MAGIC;
        l->n = n;
        for (int i = 0; i < n; i++)
            l->k[i] = (struct fake_kernel){ KERNEL_MAGIC, ks[i], { FUNCTION_MAGIC, ks[i] } };
        *library = l;
    }
    fg_log("cuLibraryLoadData -> %d", rc);
    return rc;
}

EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    GATE(1, 0);
    if (!library || library->magic != LIBRARY_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    library->magic = 0;
    free(library);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    GATE(1, 0);
    if (!kernel || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!library || library->magic != LIBRARY_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < library->n; i++)
        if (!strcmp(library->k[i].k->name, name)) {
            *kernel = &library->k[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuKernelGetFunction(CUfunction *function, CUkernel kernel)
{
    GATE(1, 1); /* the function of the current context */
    if (!function)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kernel || kernel->magic != KERNEL_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *function = &kernel->f;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuKernelGetName(const char **name, CUkernel kernel)
{
    GATE(1, 0);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kernel || kernel->magic != KERNEL_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = kernel->k->name;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetName(const char **name, CUfunction f)
{
    GATE(1, 0);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_kernel *k = fake_handle_kernel(f);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}

const struct fg_kernel *fake_handle_kernel(const void *handle)
{
    if (!handle)
        return NULL;
    uint64_t magic = *(const uint64_t *)handle;
    if (magic == FUNCTION_MAGIC)
        return ((const struct fake_function *)handle)->k;
    if (magic == KERNEL_MAGIC)
        return ((const struct fake_kernel *)handle)->k;
    return NULL;
}

static CUresult param_info(const void *handle, size_t index, size_t *offset, size_t *size)
{
    if (!offset)
        return CUDA_ERROR_INVALID_VALUE;
    /* FAKECUDA_NO_PARAM_INFO=1: a driver older than 12.4, which does not describe
     * parameters (launches are then not readable). */
    const char *env = getenv("FAKECUDA_NO_PARAM_INFO");
    if (env && *env == '1')
        return CUDA_ERROR_NOT_SUPPORTED;
    const struct fg_kernel *k = fake_handle_kernel(handle);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= (size_t)k->nparams)
        return CUDA_ERROR_INVALID_VALUE; /* past the last parameter, as the driver answers */
    *offset = k->offset[index];
    if (size)
        *size = k->size[index];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    GATE(1, 0);
    return param_info(f, index, offset, size);
}

EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size)
{
    GATE(1, 0);
    if (kernel && *(const uint64_t *)kernel != KERNEL_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    return param_info(kernel, index, offset, size);
}
