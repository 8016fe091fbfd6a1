//! cuBLAS hooks: each product described (`cublas_gemm`) and run through `staging`, and
//! the cuBLAS handle that tells the program computes. cuBLASLt's are in `cublas_lt`.

use std::ffi::{c_int, c_void};

use crate::cuda::ffi::*;
use crate::cuda::real::pfn;
use crate::gemm::cublas_gemm::{
    gemm_operands, gemm_slicing, handle_stream, whole_algorithm_part, GemmCall, Matrix, Reads, Scalars, GEMM_EX_ENTRY,
    GEMM_STRIDED_BATCHED_ENTRY, SGEMM_ENTRY,
};
use crate::gemm::{run_staged, Slice};
use crate::memory::budget;
use crate::memory::registry;

/// The output a slice writes (or the program's own for the whole product).
fn write_to<T>(slice: Option<Slice>, original: *mut T) -> *mut T {
    slice.map_or(original, |slice| slice.output as *mut T)
}

/// Runs the program's product `call` through staging: its operands noted for live
/// tiering's heat, staged on the handle's stream, and cut into slices where staging
/// decides to. `real_product` calls cuBLAS itself with the operands to read (staged or
/// the program's own) and the slice (`None`: the whole product); a slice with the whole
/// product's cuBLASLt algorithm at hand is computed with it instead.
fn run_gemm(
    call: &GemmCall,
    scalars: Scalars,
    mut real_product: impl FnMut(Reads, Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    let operands = gemm_operands(call);
    for operand in operands.iter().flatten() {
        registry::note_read(operand.address, operand.bytes);
    }
    let read = |[staged_a, staged_b]: [Option<CuDevicePtr>; 2]| Reads {
        a: read_from(staged_a, call.a.pointer),
        b: read_from(staged_b, call.b.pointer),
    };
    let Some(stream) = handle_stream(call.handle) else {
        budget::note_computing();
        return real_product(read([None, None]), None);
    };
    let (slicing, lt) = gemm_slicing(call, &operands).unzip();
    run_staged(stream, operands, slicing, |placed, slice| {
        let operands = read(placed);
        whole_algorithm_part(lt.flatten(), slice, stream, scalars, operands)
            .unwrap_or_else(|| real_product(operands, slice))
    })
}

/// The address an operand is read from: staged, or the program's own.
pub fn read_from<T>(placed: Option<CuDevicePtr>, original: *const T) -> *const T {
    placed.map_or(original, |address| address as *const T)
}

/// cublasCreate_v2: a program creates its cuBLAS handle when it starts computing (and
/// allocates the handle's workspace right after), so the VRAM reserve opens here.
///
/// # Safety
/// The caller's argument, passed on to the real function.
pub unsafe fn create(real: pfn::cublasCreate_v2, handle: *mut CublasHandle) -> CublasStatus {
    budget::note_computing();
    // SAFETY: the real cublasCreate_v2 with the program's own out pointer.
    unsafe { real(handle) }
}

/// cublasGemmEx.
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_ex(
    real: pfn::cublasGemmEx,
    handle: CublasHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    compute_type: c_int,
    algo: c_int,
) -> CublasStatus {
    let call = GemmCall {
        entry: GEMM_EX_ENTRY,
        handle,
        transa,
        transb,
        m: m.into(),
        n: n.into(),
        k: k.into(),
        a: Matrix { pointer: a, data_type: a_type, ld: lda.into() },
        b: Matrix { pointer: b, data_type: b_type, ld: ldb.into() },
        c: Matrix { pointer: c, data_type: c_type, ld: ldc.into() },
        compute_type,
        algo,
        stride_a: 0,
        stride_b: 0,
        batch: 1,
    };
    run_gemm(&call, Scalars { alpha: alpha.cast(), beta: beta.cast() }, |Reads { a, b }, slice| {
        let (m, n) = slice.map_or((m, n), |slice| slice.dimensions(m, n));
        // SAFETY: the program's arguments; a staged operand points into VRAM scratch
        // holding a copy of the same bytes, enqueued before the product on its stream;
        // a slice computes rows (columns) of the program's output from the matching
        // part of that copy, within the spans the program's arguments cover.
        unsafe {
            real(
                handle,
                transa,
                transb,
                m,
                n,
                k,
                alpha,
                a,
                a_type,
                lda,
                b,
                b_type,
                ldb,
                beta,
                write_to(slice, c),
                c_type,
                ldc,
                compute_type,
                algo,
            )
        }
    })
}

/// cublasSgemm_v2 (float32; CUDA_R_32F is type 0).
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    real: pfn::cublasSgemm_v2,
    handle: CublasHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> CublasStatus {
    const CUDA_R_32F: c_int = 0;
    let call = GemmCall {
        entry: SGEMM_ENTRY,
        handle,
        transa,
        transb,
        m: m.into(),
        n: n.into(),
        k: k.into(),
        a: Matrix { pointer: a.cast(), data_type: CUDA_R_32F, ld: lda.into() },
        b: Matrix { pointer: b.cast(), data_type: CUDA_R_32F, ld: ldb.into() },
        c: Matrix { pointer: c.cast(), data_type: CUDA_R_32F, ld: ldc.into() },
        compute_type: CUDA_R_32F,
        algo: 0,
        stride_a: 0,
        stride_b: 0,
        batch: 1,
    };
    run_gemm(&call, Scalars { alpha: alpha.cast(), beta: beta.cast() }, |Reads { a, b }, slice| {
        let (m, n) = slice.map_or((m, n), |slice| slice.dimensions(m, n));
        // SAFETY: the program's arguments; a staged operand points into VRAM scratch
        // holding a copy of the same bytes, enqueued before the product on its stream;
        // a slice computes rows (columns) of the program's output from the matching
        // part of that copy, within the spans the program's arguments cover.
        unsafe {
            real(handle, transa, transb, m, n, k, alpha, a.cast(), lda, b.cast(), ldb, beta, write_to(slice, c), ldc)
        }
    })
}

/// cublasGemmStridedBatchedEx (a stride of 0 broadcasts one matrix to the batch).
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_strided_batched_ex(
    real: pfn::cublasGemmStridedBatchedEx,
    handle: CublasHandle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    stride_a: i64,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    stride_b: i64,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    stride_c: i64,
    batch: c_int,
    compute_type: c_int,
    algo: c_int,
) -> CublasStatus {
    // A batch of one is cut as a single product; larger batches stay whole.
    let call = GemmCall {
        entry: GEMM_STRIDED_BATCHED_ENTRY,
        handle,
        transa,
        transb,
        m: m.into(),
        n: n.into(),
        k: k.into(),
        a: Matrix { pointer: a, data_type: a_type, ld: lda.into() },
        b: Matrix { pointer: b, data_type: b_type, ld: ldb.into() },
        c: Matrix { pointer: c, data_type: c_type, ld: ldc.into() },
        compute_type,
        algo,
        stride_a,
        stride_b,
        batch: batch.into(),
    };
    run_gemm(&call, Scalars { alpha: alpha.cast(), beta: beta.cast() }, |Reads { a, b }, slice| {
        let (m, n) = slice.map_or((m, n), |slice| slice.dimensions(m, n));
        // SAFETY: the program's arguments; a staged operand points into VRAM scratch
        // holding a copy of the same bytes, enqueued before the product on its stream;
        // a slice (batch of one only) computes rows (columns) of the program's output
        // from the matching part of that copy, within the spans the arguments cover.
        unsafe {
            real(
                handle,
                transa,
                transb,
                m,
                n,
                k,
                alpha,
                a,
                a_type,
                lda,
                stride_a,
                b,
                b_type,
                ldb,
                stride_b,
                beta,
                write_to(slice, c),
                c_type,
                ldc,
                stride_c,
                batch,
                compute_type,
                algo,
            )
        }
    })
}
