/* What libcudart.c gives the runtime's other files (libcudart_launch.c). */
#ifndef LIBCUDART_INTERNAL_H
#define LIBCUDART_INTERNAL_H
#include "fakecuda.h"

/* Lazily initialises the runtime and makes the device's primary context current (the
 * error, also kept as the thread's last error). */
cudaError_t cudart_init(void);
/* A driver entry point through cuGetProcAddress with the runtime's version; per_thread:
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (the _ptsz variant). */
CUresult cudart_proc(const char *name, void **fn, int per_thread);
/* A driver error as the runtime's, kept as the thread's last error. */
cudaError_t cudart_error(CUresult rc);
#endif
