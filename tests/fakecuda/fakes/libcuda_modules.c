/* Fake libcuda.so.1 (see libcuda.c): modules, libraries and their kernels. The fake
 * device runs no code: it knows a few kernels by name (gpu/fakegpu_kernels.c: the shim's
 * own copy kernel gb_copy16, and the test kernels fk_*), carried out on their streams
 * through the device's view. An image (PTX-like text) loads when every ".entry NAME("
 * it holds is one of them; one without any, or naming another kernel, is refused
 * (CUDA_ERROR_INVALID_IMAGE: the fake cannot compile it). A name the image lacks is not
 * found. FAKECUDA_NO_MODULES=1 refuses every image (a device whose driver cannot JIT the
 * PTX).
 *
 * `__device__` globals: each line ".global [.align N] .TYPE NAME[COUNT];" of an image
 * (after an optional ".visible") is a global of COUNT (default 1) elements of TYPE's size,
 * given VRAM of its own (not initialised) when the image loads, freed when it is unloaded;
 * cuModuleGetGlobal_v2 and cuLibraryGetGlobal answer its address and size.
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
#define MAX_GLOBALS 8

struct fake_function {
    uint64_t magic;
    const struct fg_kernel *k;
};
struct fake_global {
    char name[64];
    CUdeviceptr address;
    size_t bytes;
};
/* An image's globals. */
struct fake_globals {
    int n;
    struct fake_global g[MAX_GLOBALS];
};
struct fake_module {
    uint64_t magic;
    int n;
    struct fake_function f[MAX_ENTRIES];
    struct fake_globals globals;
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
    struct fake_globals globals;
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

/* The bytes of one element of a PTX type (".u64", ".f32", ...), 0 for another word. */
static size_t type_bytes(const char *type, size_t len)
{
    if (len < 3 || type[0] != '.' || !strchr("usbf", type[1]))
        return 0;
    int bits = atoi(type + 2);
    return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? (size_t)bits / 8 : 0;
}

/* Frees the VRAM of an image's globals. */
static void free_globals(struct fake_globals *globals)
{
    for (int i = 0; i < globals->n; i++)
        fg_mem_free(globals->g[i].address);
    globals->n = 0;
}

/* Reads the ".global" lines of an image into *out, each given VRAM of its own: 0, or -1
 * (and nothing held) when one cannot be read or allocated. */
static int parse_globals(const char *ptx, struct fake_globals *out)
{
    out->n = 0;
    for (const char *line = ptx; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = line + strspn(line, " \t");
        if (!strncmp(p, ".visible ", 9))
            p += 9 + strspn(p + 9, " \t");
        if (strncmp(p, ".global ", 8))
            continue;
        p += 8;
        size_t element = 0, count = 1, len;
        /* The qualifiers, the type last of them. */
        for (p += strspn(p, " \t"); *p == '.'; p += strspn(p, " \t")) {
            len = strcspn(p, " \t;[\n");
            if (len == 6 && !strncmp(p, ".align", 6)) {
                p += len + strspn(p + len, " \t");
                p += strspn(p, "0123456789");
            } else {
                element = type_bytes(p, len);
                p += len;
            }
        }
        len = strcspn(p, " \t;[\n");
        if (*p == '[' || !len || !element || out->n == MAX_GLOBALS || len >= sizeof out->g[0].name)
            goto refused;
        struct fake_global *global = &out->g[out->n];
        memcpy(global->name, p, len);
        global->name[len] = 0;
        if (p[len] == '[')
            count = strtoul(p + len + 1, NULL, 10);
        global->bytes = element * count;
        if (!global->bytes || fg_mem_alloc(&global->address, global->bytes))
            goto refused;
        out->n++;
    }
    return 0;
refused:
    free_globals(out);
    return -1;
}

static CUresult find_global(const struct fake_globals *globals, CUdeviceptr *address, size_t *bytes,
                            const char *name)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < globals->n; i++)
        if (!strcmp(globals->g[i].name, name)) {
            if (address)
                *address = globals->g[i].address;
            if (bytes)
                *bytes = globals->g[i].bytes;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    GATE(1, 1);
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fg_kernel *ks[MAX_ENTRIES];
    int n = parse_image(image, ks);
    CUresult rc = n < 0 ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
    struct fake_module *m = rc ? NULL : calloc(1, sizeof *m);
    if (m && parse_globals(image, &m->globals)) {
        free(m);
        rc = CUDA_ERROR_INVALID_IMAGE;
    } else if (m) {
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
    free_globals(&module->globals);
    free(module);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *address, size_t *bytes, CUmodule module, const char *name)
{
    GATE(1, 1);
    if (!module || module->magic != MODULE_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    return find_global(&module->globals, address, bytes, name);
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
    struct fake_library *l = rc ? NULL : calloc(1, sizeof *l);
    if (l && parse_globals(code, &l->globals)) {
        free(l);
        rc = CUDA_ERROR_INVALID_IMAGE;
    } else if (l) {
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
    free_globals(&library->globals);
    free(library);
    return CUDA_SUCCESS;
}

/* The global of the current context (one context in the fake). */
EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *address, size_t *bytes, CUlibrary library, const char *name)
{
    GATE(1, 1);
    if (!library || library->magic != LIBRARY_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    return find_global(&library->globals, address, bytes, name);
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
