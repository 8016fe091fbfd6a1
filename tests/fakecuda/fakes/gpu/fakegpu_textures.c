/* Texture objects of the fake GPU: a handle per object (small integers from 1, as the real
 * driver's are), each over linear device memory, which the fk_tex kernel reads. */
#define _GNU_SOURCE
#include "fakegpu_state.h"

#define TEXTURES 256

static struct {
    CUtexObject handle;
    CUdeviceptr address;
} textures[TEXTURES];
static CUtexObject next_handle = 1;
static pthread_mutex_t textures_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult fg_texture_create(CUtexObject *handle, CUdeviceptr address)
{
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&textures_lock);
    for (int i = 0; i < TEXTURES; i++)
        if (!textures[i].handle) {
            textures[i].handle = next_handle++;
            textures[i].address = address;
            *handle = textures[i].handle;
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&textures_lock);
    return rc;
}

CUresult fg_texture_destroy(CUtexObject handle)
{
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&textures_lock);
    for (int i = 0; i < TEXTURES; i++)
        if (handle && textures[i].handle == handle) {
            textures[i].handle = 0;
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&textures_lock);
    return rc;
}

CUdeviceptr fg_texture_address(CUtexObject handle)
{
    CUdeviceptr address = 0;
    pthread_mutex_lock(&textures_lock);
    for (int i = 0; i < TEXTURES; i++)
        if (handle && textures[i].handle == handle)
            address = textures[i].address;
    pthread_mutex_unlock(&textures_lock);
    return address;
}
