/* Fake libcudart: the runtime's error names and strings (cudaGetErrorName,
 * cudaGetErrorString) for the codes the fake answers, as the real runtime spells them.
 * Linked into libcudart.so.12 and .13 with libcudart.c. */
#include "fakecuda.h"

#define EXPORT __attribute__((visibility("default")))

static const struct error_entry errors[] = {
    { 0, "cudaSuccess", "no error" },
    { 1, "cudaErrorInvalidValue", "invalid argument" },
    { 2, "cudaErrorMemoryAllocation", "out of memory" },
    { 3, "cudaErrorInitializationError", "initialization error" },
    { 21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy" },
    { 35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version" },
    { 101, "cudaErrorInvalidDevice", "invalid device ordinal" },
    { 201, "cudaErrorDeviceUninitialized", "invalid device context" },
    { 400, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
    { 500, "cudaErrorSymbolNotFound", "named symbol not found" },
    { 600, "cudaErrorNotReady", "device not ready" },
    { 700, "cudaErrorIllegalAddress", "an illegal memory access was encountered" },
    { 712, "cudaErrorHostMemoryAlreadyRegistered", "part or all of the requested memory range is already mapped" },
    { 713, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region" },
    { 800, "cudaErrorNotPermitted", "operation not permitted" },
    { 801, "cudaErrorNotSupported", "operation not supported" },
    { 999, "cudaErrorUnknown", "unknown error" },
};

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    const struct error_entry *found = find_error(errors, sizeof errors / sizeof *errors, e);
    return found ? found->text : "unrecognized error code";
}

EXPORT const char *cudaGetErrorName(cudaError_t e)
{
    const struct error_entry *found = find_error(errors, sizeof errors / sizeof *errors, e);
    return found ? found->name : "cudaErrorUnknown";
}
