/* The fake runtime's cudaEventElapsedTime, built on the driver's cuEventElapsedTime reached
 * through cuGetProcAddress, as the real runtime does (so an interposer's answer is what
 * the program sees). */
#include "libcudart_internal.h"

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t init = cudart_init();
    if (init)
        return init;
    CUresult (*elapsed)(float *, CUevent, CUevent) = NULL;
    CUresult rc = cudart_proc("cuEventElapsedTime", (void **)&elapsed, 0);
    if (rc || !elapsed)
        return cudart_error(rc ? rc : CUDA_ERROR_NOT_SUPPORTED);
    rc = elapsed(ms, start, end);
    /* Not ready is not sticky, as for cudaEventQuery; the other codes have the driver's
     * numbers (cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600). */
    return rc == CUDA_ERROR_NOT_READY ? rc : cudart_error(rc);
}
