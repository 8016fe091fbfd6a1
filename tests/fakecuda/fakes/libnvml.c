/* Fake libnvidia-ml.so.1: reports the simulated device's memory (libfakegpu.so), as
 * NVML reports the driver's view of the device. v1 nvmlMemory_t has used including
 * the reserved memory; v2 reports reserved separately (FAKECUDA_NVML_RESERVED, default
 * 0) and insists on the struct version nvmlMemory_v2. Used memory is every process's
 * when they share the device (FAKECUDA_DEVICE_SHARE), as NVML's is. */
#include "gpu/fakegpu_internal.h"

#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int initialized;
static struct fake_nvml_device { int index; } device0;

EXPORT nvmlReturn_t nvmlInit_v2(void) { initialized++; fg_log("nvmlInit_v2 -> 0"); return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (!n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (!d || i != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &device0;
    return NVML_SUCCESS;
}

static size_t reserved_bytes(void)
{
    const char *r = getenv("FAKECUDA_NVML_RESERVED");
    return r ? strtoull(r, NULL, 0) : 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (d != &device0 || !m)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t free_bytes, total;
    fg_mem_info(0, &free_bytes, &total);
    size_t res = reserved_bytes();
    m->total = total;
    m->used = total - free_bytes + res;
    m->free = m->used > total ? 0 : total - m->used;
    fg_log("nvmlDeviceGetMemoryInfo -> 0 total=%llu free=%llu", m->total, m->free);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (d != &device0 || !m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    size_t free_bytes, total;
    fg_mem_info(0, &free_bytes, &total);
    size_t res = reserved_bytes();
    m->total = total;
    m->reserved = res;
    m->used = total - free_bytes;
    m->free = total - m->used > res ? total - m->used - res : 0;
    fg_log("nvmlDeviceGetMemoryInfo_v2 -> 0 total=%llu free=%llu", m->total, m->free);
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}
