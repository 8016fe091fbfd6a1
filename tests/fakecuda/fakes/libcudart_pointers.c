/* The fake runtime's cudaPointerGetAttributes, built on the driver's cuPointerGetAttributes
 * reached through cuGetProcAddress, as the real runtime does (so an interposer's answer
 * is what the program sees). */
#include "libcudart_internal.h"

#include <stdint.h>

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return cudart_error(CUDA_ERROR_INVALID_VALUE);
    cudaError_t init = cudart_init();
    if (init)
        return init;
    CUresult (*get)(unsigned, int *, void **, CUdeviceptr) = NULL;
    CUresult rc = cudart_proc("cuPointerGetAttributes", (void **)&get, 0);
    if (rc || !get)
        return cudart_error(rc ? rc : CUDA_ERROR_NOT_SUPPORTED);
    unsigned memory_type = 0;
    int managed = 0, ordinal = 0;
    CUdeviceptr device_pointer = 0;
    void *host_pointer = NULL;
    int asked[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                    CU_POINTER_ATTRIBUTE_HOST_POINTER };
    void *into[] = { &memory_type, &managed, &ordinal, &device_pointer, &host_pointer };
    rc = get(5, asked, into, (CUdeviceptr)(uintptr_t)ptr);
    if (rc)
        return cudart_error(rc);
    attributes->type = managed                               ? cudaMemoryTypeManaged
                       : memory_type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
                       : memory_type == CU_MEMORYTYPE_HOST   ? cudaMemoryTypeHost
                                                             : cudaMemoryTypeUnregistered;
    attributes->device = attributes->type == cudaMemoryTypeUnregistered ? -2 : ordinal;
    attributes->devicePointer = (void *)(uintptr_t)device_pointer;
    attributes->hostPointer = host_pointer;
    return cudaSuccess;
}
