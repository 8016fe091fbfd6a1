/* Types, constants and prototypes shared by the fake CUDA libraries and the test
 * programs. Values are those of CUDA 12/13's cuda.h, cuda_runtime_api.h and nvml.h;
 * only what the fakes implement is declared. */
#ifndef FAKECUDA_H
#define FAKECUDA_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef int cudaError_t;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct fake_ctx *CUcontext;
typedef struct fake_stream *CUstream;
typedef struct fake_stream *cudaStream_t;
typedef struct fake_event *CUevent;
typedef struct fake_event *cudaEvent_t;
typedef struct fake_pool *CUmemoryPool;
typedef struct fake_pool *cudaMemPool_t;
typedef struct fake_extmem *CUexternalMemory;
typedef struct fake_module *CUmodule;
typedef struct fake_function *CUfunction;
typedef struct fake_library *CUlibrary;
typedef struct fake_kernel *CUkernel;
typedef struct fake_graph *CUgraph;
typedef struct fake_graph_node *CUgraphNode;
typedef struct fake_graph_exec *CUgraphExec;
typedef struct fake_graph *cudaGraph_t;
typedef struct fake_graph_exec *cudaGraphExec_t;
typedef struct fake_function *cudaFunction_t;
typedef void (*CUhostFn)(void *userData);

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910,
    CUDA_ERROR_UNKNOWN = 999,
};
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
};

/* cuGetProcAddress */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
typedef enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;
#define cudaEnableDefault 0
#define cudaEnableLegacyStream 1
#define cudaEnablePerThreadDefaultStream 2

/* streams */
#define CU_STREAM_DEFAULT 0
#define CU_STREAM_NON_BLOCKING 1
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* events */
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_BLOCKING_SYNC 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4

/* host registration */
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08

/* external memory */
#define CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD 1
#define CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD 9
typedef struct {
    int type;
    union {
        int fd;
        struct { void *handle; const void *name; } win32;
        const void *nvSciBufObject;
    } handle;
    unsigned long long size;
    unsigned int flags;
    unsigned int reserved[16];
} CUDA_EXTERNAL_MEMORY_HANDLE_DESC;
typedef CUDA_EXTERNAL_MEMORY_HANDLE_DESC cudaExternalMemoryHandleDesc;

/* VMM */
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST 2
#define CU_MEM_LOCATION_TYPE_HOST_NUMA 3
#define CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT 4
#define CU_MEM_ACCESS_FLAGS_PROT_NONE 0
#define CU_MEM_ACCESS_FLAGS_PROT_READ 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;

/* managed (unified) memory */
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_MEM_ATTACH_HOST 0x2
#define CU_DEVICE_CPU (-1)
#define CU_DEVICE_INVALID (-2)
#define CU_MEM_LOCATION_TYPE_INVALID 0
#define CU_MEM_ADVISE_SET_READ_MOSTLY 1
#define CU_MEM_ADVISE_UNSET_READ_MOSTLY 2
#define CU_MEM_ADVISE_SET_PREFERRED_LOCATION 3
#define CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION 4
#define CU_MEM_ADVISE_SET_ACCESSED_BY 5
#define CU_MEM_ADVISE_UNSET_ACCESSED_BY 6
#define CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY 1
#define CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION 2
#define CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY 3
#define CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION 4
#define CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE 5
#define CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID 6
#define CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE 7
#define CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID 8
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_POINTER 3
#define CU_POINTER_ATTRIBUTE_HOST_POINTER 4
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY 83
#define CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS 88
#define CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS 89

/* cudaPointerGetAttributes (CUDA 11 and later) */
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr p);
CUresult cuPointerGetAttributes(unsigned count, int *attributes, void **data, CUdeviceptr p);

/* runtime memcpy kinds */
enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
#define cudaHostRegisterDefault 0
#define cudaHostRegisterPortable 1
#define cudaHostRegisterMapped 2

/* cudaDeviceProp: only the offset the shim patches matters; the struct is opaque
 * here and the fakes write a buffer of the real size. */
#define CUDA_DEVICE_PROP_TOTALGLOBALMEM_OFFSET 288
#define CUDA_DEVICE_PROP_SIZE 1008

/* NVML */
typedef int nvmlReturn_t;
typedef struct fake_nvml_device *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | (ver << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

/* ---- Modules, kernels and launches (cuda.h, CUDA 12/13) ---- */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
/* CUlaunchAttribute: an id, padding to 8, a 64-byte value union. */
typedef struct {
    int id;
    char pad[4];
    union { char pad[64]; int cooperative; unsigned int priority; } value;
} CUlaunchAttribute;
typedef CUlaunchAttribute cudaLaunchAttribute;
#define CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define CU_LAUNCH_ATTRIBUTE_PRIORITY 8
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
/* CUtensorMap: 128 opaque bytes, 64-byte aligned. */
typedef struct { _Alignas(64) cuuint64_t opaque[16]; } CUtensorMap;
/* Texture objects over linear or pitched device memory (the resource types whose memory is
 * an allocation; arrays are not). */
typedef unsigned long long CUtexObject;
enum { CU_RESOURCE_TYPE_ARRAY = 0, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY = 1, CU_RESOURCE_TYPE_LINEAR = 2,
       CU_RESOURCE_TYPE_PITCH2D = 3 };
typedef struct {
    int resType;
    union {
        struct { CUdeviceptr devPtr; int format; unsigned numChannels; size_t sizeInBytes; } linear;
        struct { CUdeviceptr devPtr; int format; unsigned numChannels; size_t width, height, pitchInBytes; } pitch2D;
        struct { int reserved[32]; } reserved;
    } res;
    unsigned flags;
} CUDA_RESOURCE_DESC;
typedef struct { int reserved[32]; } CUDA_TEXTURE_DESC;
CUresult cuTexObjectCreate(CUtexObject *tex, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *desc,
                           const void *view);
CUresult cuTexObjectDestroy(CUtexObject tex);
/* An IPC handle of device memory (cuIpcGetMemHandle), 64 opaque bytes. */
typedef struct { char reserved[64]; } CUipcMemHandle;
CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr p);
typedef enum { CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16, CU_TENSOR_MAP_DATA_TYPE_UINT32,
               CU_TENSOR_MAP_DATA_TYPE_INT32, CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_INT64,
               CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 } CUtensorMapDataType;

/* The fake's test kernels (fakes/gpu/fakegpu_kernels.c), named in a PTX-like image by
 * ".visible .entry NAME(": fk_fill_u32, fk_fill_indirect, fk_add_f32, fk_struct,
 * fk_gather, fk_tma, fk_tma_struct (and the shim's gb_copy16). An image's `__device__` globals are its
 * lines ".global [.align N] .TYPE NAME[COUNT];" (cuModuleGetGlobal_v2,
 * cuLibraryGetGlobal). fk_struct's by-value argument: */
struct fk_args {
    void *ptrs[8];
    uint64_t count;
    unsigned char pad[256 - 8 * sizeof(void *) - sizeof(uint64_t)];
};

/* Runtime launches: dim3, cudaLaunchConfig_t, a fake fat binary (__fatBinC_Wrapper_t whose
 * data is the PTX-like text). */
typedef struct { unsigned int x, y, z; } dim3;
typedef struct {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;
#define FATBINC_MAGIC 0x466243b1
typedef struct { int magic; int version; const void *data; void *filename_or_fatbins; } __fatBinC_Wrapper_t;

/* ---- Copies and memsets ---- */
typedef enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3,
               CU_MEMORYTYPE_UNIFIED = 4 } CUmemorytype;
typedef struct {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;
typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;
/* cuMemcpy3DPeer*: CUDA_MEMCPY3D's layout, each side's context in its reserved slot. */
typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    CUcontext srcContext;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    CUcontext dstContext;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D_PEER;
typedef enum { CU_MEMCPY_SRC_ACCESS_ORDER_INVALID = 0, CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1,
               CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL = 2, CU_MEMCPY_SRC_ACCESS_ORDER_ANY = 3 } CUmemcpySrcAccessOrder;
typedef struct {
    CUmemcpySrcAccessOrder srcAccessOrder;
    CUmemLocation srcLocHint, dstLocHint;
    unsigned int flags;
} CUmemcpyAttributes;
/* CUDA arrays and batches of 3D copies between them and memory. */
#include "fakecuda_arrays.h"

/* ---- Stream capture and graphs ---- */
typedef enum { CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
               CU_STREAM_CAPTURE_MODE_RELAXED = 2 } CUstreamCaptureMode;
typedef enum { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
               CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2 } CUstreamCaptureStatus;
typedef enum { CU_GRAPH_NODE_TYPE_KERNEL = 0, CU_GRAPH_NODE_TYPE_MEMCPY = 1, CU_GRAPH_NODE_TYPE_MEMSET = 2,
               CU_GRAPH_NODE_TYPE_HOST = 3, CU_GRAPH_NODE_TYPE_GRAPH = 4, CU_GRAPH_NODE_TYPE_EMPTY = 5,
               CU_GRAPH_NODE_TYPE_WAIT_EVENT = 6, CU_GRAPH_NODE_TYPE_EVENT_RECORD = 7,
               CU_GRAPH_NODE_TYPE_MEM_FREE = 11 } CUgraphNodeType;
typedef struct {
    CUfunction func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value, elementSize;
    size_t width, height;
} CUDA_MEMSET_NODE_PARAMS;
typedef enum { CU_GRAPH_EXEC_UPDATE_SUCCESS = 0, CU_GRAPH_EXEC_UPDATE_ERROR = 1,
               CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 2, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 3,
               CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED = 4,
               CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED = 5 } CUgraphExecUpdateResult;
typedef struct {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode, errorFromNode;
} CUgraphExecUpdateResultInfo;

/* ---- Test-only entry points of libfakegpu.so (not part of any CUDA API). ---- */
/* Stream-ordered "kernels": the fake GPU writes/checks a pattern through the device
 * pointer, as a kernel would. An address the device cannot reach is an illegal
 * address: the stream's next synchronisation returns CUDA_ERROR_ILLEGAL_ADDRESS. */
CUresult fakegpu_launch_fill(CUdeviceptr p, size_t n, uint32_t seed, CUstream s);
/* Writes the number of mismatching 32-bit words to *mismatches (host memory). */
CUresult fakegpu_launch_verify(CUdeviceptr p, size_t n, uint32_t seed, CUstream s,
                               unsigned long long *mismatches);
/* While held, a stream's queued work stays pending (auto-released after
 * FAKECUDA_HOLD_TIMEOUT seconds, default 20, logged as HOLD_TIMEOUT). */
void fakegpu_stream_hold(CUstream s);
void fakegpu_stream_release(CUstream s);
/* A matrix product as cuBLAS defines it (column-major, C = alpha op(A) op(B) + beta C,
 * batched with element strides, or through pointer arrays: pointer_arrays set, a, b and
 * c are device arrays of `batch` matrix addresses, which the device reads when the
 * product runs), run by the fake GPU on the stream and logged as "GEMM a=<kind> b=<kind>
 * ..." with what the device read each operand from. Types: CUDA_R_32F (0) and
 * CUDA_R_16BF (14). The fake cuBLAS libraries call it. */
#define FAKEGPU_R_32F 0
#define FAKEGPU_R_16BF 14
struct fakegpu_gemm {
    int transa, transb, m, n, k, type, batch;
    float alpha, beta;
    CUdeviceptr a, b, c;
    long lda, ldb, ldc, stride_a, stride_b, stride_c;
    int pointer_arrays;
};
CUresult fakegpu_launch_gemm(const struct fakegpu_gemm *gemm, CUstream s);
/* Marks a created stream as being captured into a graph (cuStreamIsCapturing). */
void fakegpu_stream_set_capturing(CUstream s, int capturing);
/* What the device sees at p: "vram", "hostreg", "vmm-device", "vmm-host", "managed", or
 * "none". */
const char *fakegpu_ptr_kind(CUdeviceptr p);
/* Bytes of fake VRAM in use (cuMemAlloc, async allocations, device cuMemCreate, managed
 * pages resident on the device), and the VRAM there is: device 0's. */
size_t fakegpu_vram_used(void);
size_t fakegpu_vram_total(void);
/* The same for device `device` (FAKECUDA_DEVICES=2: 0 or 1; 0 for no such device). */
size_t fakegpu_vram_used_on(int device);
size_t fakegpu_vram_total_on(int device);
/* The device whose memory is at p (VRAM, or device memory of a VMM mapping); -1 for
 * anything else (managed memory too: its data is at the host address wherever it is
 * resident; fakegpu_managed_where says where). */
int fakegpu_ptr_device(CUdeviceptr p);
/* Bytes of VRAM in use on the device by every process that shares it
 * (FAKECUDA_DEVICE_SHARE), this one included; without a share, fakegpu_vram_used(). */
size_t fakegpu_device_used(void);
/* FAKECUDA_MANAGED_KEEPS_VRAM: of that, the VRAM managed pages left that the device keeps
 * (every process's with a share file); 0 without the setting. */
size_t fakegpu_vram_kept(void);
/* Live VMM objects: handles not yet freed (released and unmapped), reserved address
 * ranges, mappings. A program that gave everything back has the counts it started with. */
struct fakegpu_vmm_counts { size_t handles, reservations, mappings; };
void fakegpu_vmm_live(struct fakegpu_vmm_counts *out);
/* Managed memory (cuMemAllocManaged): each 2 MiB page of an allocation is resident on
 * the host or on one device, where it takes 2 MiB of that device's VRAM (counted in
 * fakegpu_vram_used* and fakegpu_device_used). These read this process's figures: the
 * bytes resident on `device` (0 for no such device) and on the host; the bytes that
 * prefetches moved to devices and to the host so far (either pointer may be NULL); the
 * live allocations; where the page holding p is (-1 host, a device, -2 not managed). */
size_t fakegpu_managed_on_device(int device);
size_t fakegpu_managed_on_host(void);
void fakegpu_managed_moved(unsigned long long *to_device, unsigned long long *to_host);
int fakegpu_managed_live(void);
int fakegpu_managed_where(CUdeviceptr p);
/* Moves every page of the managed allocation holding p to the host, as the driver's
 * eviction for another process does, unannounced; 0 when p is not managed memory. */
int fakegpu_managed_evict(CUdeviceptr p);
/* Bytes currently registered with cuMemHostRegister. */
size_t fakegpu_hostreg_bytes(void);
/* Count of device faults (illegal addresses) and of forbidden calls seen so far. */
unsigned fakegpu_faults(void);
/* Work the fake GPU carried out (run, not queued or captured), as a profiler counts it.
 * `what`: a class, "kernel", "memset", "memcpy" or "hostfn", counting every path; or
 * "CLASS:ENTRY", the driver entry point that queued it (e.g. "kernel:cuLaunchKernelEx",
 * "kernel:cuLaunchKernel_ptsz", "memset:cuMemsetD2D32Async", "memcpy:cuMemcpy3D_v2",
 * "hostfn:cuLaunchHostFunc", and "CLASS:cuGraphLaunch" for a graph's nodes); or
 * "kernel@NAME", one kernel's runs. fakegpu_count_reset sets every count to 0. */
unsigned long long fakegpu_count(const char *what);
void fakegpu_count_reset(void);
/* Host-side pattern helpers shared with the fake kernels. */
void fakegpu_pattern_fill(void *p, size_t n, uint32_t seed);
unsigned long long fakegpu_pattern_check(const void *p, size_t n, uint32_t seed);

/* ---- One row of a fake library's error table, and its lookup by code (NULL when the
 * code is not in the table). ---- */
struct error_entry {
    int code;
    const char *name, *text;
};

static inline const struct error_entry *find_error(const struct error_entry *table, size_t count, int code)
{
    for (size_t i = 0; i < count; i++)
        if (table[i].code == code)
            return &table[i];
    return NULL;
}

/* ---- Sizes as FAKECUDA_VRAM and the test programs' arguments write them: a number,
 * then an optional k, m or g. ---- */
static inline unsigned long long arg_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    }
    return v;
}

/* The size in environment variable `name`; `dflt` when it is unset or empty. */
static inline unsigned long long env_size(const char *name, unsigned long long dflt)
{
    const char *v = getenv(name);
    return v && *v ? arg_size(v) : dflt;
}

#endif
