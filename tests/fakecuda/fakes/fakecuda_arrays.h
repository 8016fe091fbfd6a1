/* Types of fakecuda.h (which includes this after the copies' types): CUDA arrays and the
 * operations of cuMemcpy3DBatchAsync, as CUDA 12.8/13's cuda.h has them. */
#ifndef FAKECUDA_ARRAYS_H
#define FAKECUDA_ARRAYS_H

/* CUDA arrays (cuArrayCreate_v2): Width elements (Height 0: one row) of NumChannels (1,
 * 2, 4) values of Format; the fake keeps their bytes row after row in host memory. */
typedef struct fake_array *CUarray;
typedef enum { CU_AD_FORMAT_UNSIGNED_INT8 = 0x01, CU_AD_FORMAT_UNSIGNED_INT16 = 0x02, CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
               CU_AD_FORMAT_SIGNED_INT8 = 0x08, CU_AD_FORMAT_SIGNED_INT16 = 0x09, CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
               CU_AD_FORMAT_HALF = 0x10, CU_AD_FORMAT_FLOAT = 0x20 } CUarray_format;
typedef struct { size_t Width, Height; CUarray_format Format; unsigned int NumChannels; } CUDA_ARRAY_DESCRIPTOR;
/* cuMemcpy3DBatchAsync (12.8; _v2 at 13.0): operations between two operands, each a
 * pointer (rowLength, layerHeight in elements, 0: the extent's) or an array at an offset
 * (elements); the extent in elements (bytes between two pointers, else the array's). */
typedef struct { size_t x, y, z; } CUoffset3D;
typedef struct { size_t width, height, depth; } CUextent3D;
typedef enum { CU_MEMCPY_OPERAND_TYPE_POINTER = 1, CU_MEMCPY_OPERAND_TYPE_ARRAY = 2 } CUmemcpy3DOperandType;
typedef struct {
    CUmemcpy3DOperandType type;
    union {
        struct { CUdeviceptr ptr; size_t rowLength, layerHeight; CUmemLocation locHint; } ptr;
        struct { CUarray array; CUoffset3D offset; } array;
    } op;
} CUmemcpy3DOperand;
typedef struct {
    CUmemcpy3DOperand src, dst;
    CUextent3D extent;
    CUmemcpySrcAccessOrder srcAccessOrder;
    unsigned int flags;
} CUDA_MEMCPY3D_BATCH_OP;
_Static_assert(sizeof(CUmemcpy3DOperand) == 40, "CUmemcpy3DOperand is cuda.h's");
_Static_assert(sizeof(CUDA_MEMCPY3D_BATCH_OP) == 112, "CUDA_MEMCPY3D_BATCH_OP is cuda.h's");

#endif
