//! cuBLAS hooks: a product's operands described for `staging` (spans, widths, the
//! handle's stream, how it may be cut into slices), and the cuBLAS handle that tells the
//! program computes. cuBLASLt's are in `cublas_lt`.

use std::ffi::{c_int, c_void};

use crate::budget;
use crate::config;
use crate::cuda;
use crate::ffi::*;
use crate::lt_algo::{self, GemmShape, WholeAlgorithm};
use crate::real::{self, pfn};
use crate::registry;
use crate::staging::{element_bytes, run_staged, span_bytes, Operand};
use crate::staging_slices::{Shape, Slice, SliceAxis, Slicing};

/// `cublasOperation_t`: N is 0; T, C and conjugate transpose are not N.
const CUBLAS_OP_N: c_int = 0;

/// The hooked entry points, as a product's shape names them.
const GEMM_EX_ENTRY: i64 = 1;
const SGEMM_ENTRY: i64 = 2;
const GEMM_STRIDED_BATCHED_ENTRY: i64 = 3;

/// A column-major operand stored `rows` x `cols` as the transpose flag says:
/// `op(X)` is `op_rows` x `op_cols`.
fn stored_span(
    transposed: bool,
    op_rows: i64,
    op_cols: i64,
    ld: i64,
    batch: i64,
    stride: i64,
    data_type: c_int,
) -> Option<u64> {
    let (rows, cols) = if transposed { (op_cols, op_rows) } else { (op_rows, op_cols) };
    span_bytes(rows, cols, ld, batch, stride, element_bytes(data_type)?)
}

/// The stream a cuBLAS handle runs on (null: the legacy default stream), through the
/// program's own cuBLAS.
fn handle_stream(handle: CublasHandle) -> Option<Stream> {
    let get_stream = real::cublasGetStream_v2()?;
    let mut stream = Stream::NULL;
    // SAFETY: the program's handle (cuBLAS validates it) and a valid local for the stream.
    (unsafe { get_stream(handle, &mut stream) } == CublasStatus::SUCCESS).then_some(stream)
}

/// A product of `m` x `k` times `k` x `n` on `handle`'s stream; A is re-read by every
/// column tile (width `n`), B by every row tile (width `m`).
fn gemm_operands(call: &GemmCall) -> [Option<Operand>; 2] {
    let ((a, a_type, lda), (b, b_type, ldb)) = (call.a, call.b);
    let (stride_a, stride_b) = call.strides;
    let a_span = stored_span(call.transa != CUBLAS_OP_N, call.m, call.k, lda, call.batch, stride_a, a_type);
    let b_span = stored_span(call.transb != CUBLAS_OP_N, call.k, call.n, ldb, call.batch, stride_b, b_type);
    [Operand::new(a, a_span, call.n), Operand::new(b, b_span, call.m)]
}

/// The math mode of a cuBLAS handle (it can change the kernel a product gets).
fn handle_math_mode(handle: CublasHandle) -> Option<c_int> {
    let get_mode = real::cublasGetMathMode()?;
    let mut mode: c_int = 0;
    // SAFETY: the program's handle (cuBLAS validates it) and a valid local for the mode.
    (unsafe { get_mode(handle, &mut mode) } == CublasStatus::SUCCESS).then_some(mode)
}

/// The pointer mode of a cuBLAS handle (host or device scalars).
fn handle_pointer_mode(handle: CublasHandle) -> Option<c_int> {
    let get_mode = real::cublasGetPointerMode_v2()?;
    let mut mode: c_int = 0;
    // SAFETY: the program's handle (cuBLAS validates it) and a valid local for the mode.
    (unsafe { get_mode(handle, &mut mode) } == CublasStatus::SUCCESS).then_some(mode)
}

/// One cuBLAS GEMM call, as the program made it (column-major, cuBLAS's names; each
/// operand as pointer, type, leading dimension; `strides` the batch strides of A and B).
struct GemmCall {
    entry: i64,
    handle: CublasHandle,
    transa: c_int,
    transb: c_int,
    m: i64,
    n: i64,
    k: i64,
    a: (*const c_void, c_int, i64),
    b: (*const c_void, c_int, i64),
    c: (*mut c_void, c_int, i64),
    compute_type: c_int,
    algo: c_int,
    strides: (i64, i64),
    batch: i64,
}

/// How a single (unbatched) GEMM may be cut: A used transposed along the output's rows
/// (each row of op(A) is one stored column), B untransposed along its columns — the
/// cuts whose slices are contiguous in the operand (a PyTorch Linear's weight is A,
/// transposed). `None` with slicing off, when the handle's math mode cannot be read (the
/// shape would not say which kernel cuBLAS picks) or the output's span is unknown.
fn gemm_slicing(call: &GemmCall) -> Option<(Slicing, Option<(WholeAlgorithm, GemmShape)>)> {
    // Off: nothing to describe, and no cuBLAS call to make for it.
    if call.batch != 1 || config::get().stage_slices <= 1 {
        return None;
    }
    let (c, c_type, ldc) = call.c;
    let output_element = element_bytes(c_type)?;
    let output_bytes = span_bytes(call.m, call.n, ldc, 1, 0, output_element)?;
    let mode = handle_math_mode(call.handle)?;
    let axis = |(_, data_type, ld): (*const c_void, c_int, i64), length: i64, output_step: u64| {
        let operand_step = u64::try_from(ld).ok()?.checked_mul(element_bytes(data_type)?)?;
        Some(SliceAxis { length, operand_step, output_step })
    };
    let rows = if call.transa != CUBLAS_OP_N { axis(call.a, call.m, output_element) } else { None };
    let columns = if call.transb == CUBLAS_OP_N {
        axis(call.b, call.n, u64::try_from(ldc).ok()?.checked_mul(output_element)?)
    } else {
        None
    };
    let alignment = |address: *const c_void| (address as u64 % 256) as i64;
    let shape: Shape = [
        call.entry,
        call.handle.0 as usize as i64,
        i64::from(mode),
        i64::from(call.transa),
        i64::from(call.transb),
        call.m,
        call.n,
        call.k,
        call.a.2,
        call.b.2,
        ldc,
        i64::from(call.a.1),
        i64::from(call.b.1),
        i64::from(c_type),
        i64::from(call.compute_type),
        i64::from(call.algo),
        alignment(call.a.0),
        alignment(call.b.0),
        alignment(c),
        0,
    ];
    let lt = lt_shape(call, mode).and_then(|lt_shape| {
        let algorithm = lt_algo::whole_algorithm(&lt_shape, cuda::current_device()?)?;
        Some((algorithm, lt_shape))
    });
    let slicing = Slicing {
        axes: [rows, columns],
        output: c as CuDevicePtr,
        output_bytes,
        output_element: usize::try_from(output_element).ok()?,
        shape,
        whole_algorithm_workspace: lt.map(|(algorithm, _)| algorithm.workspace),
    };
    Some((slicing, lt))
}

/// The call as cuBLASLt's heuristic sees it; `None` for calls that cannot be cut (only
/// those whose cut operand lies in T2 are asked about: the others are not staged).
fn lt_shape(call: &GemmCall, math_mode: c_int) -> Option<GemmShape> {
    const COMPUTE_32F: c_int = 68;
    // An operand stored with the inner dimension first (A used transposed, B as stored).
    let in_t2 = |(address, data_type, ld): (*const c_void, c_int, i64), inner_first: bool, other: i64| {
        let (rows, cols) = if inner_first { (call.k, other) } else { (other, call.k) };
        let span = span_bytes(rows, cols, ld, 1, 0, element_bytes(data_type)?)?;
        registry::touches_pinned_t2(address as CuDevicePtr, span).then_some(())
    };
    in_t2(call.a, call.transa != CUBLAS_OP_N, call.m).or_else(|| in_t2(call.b, call.transb == CUBLAS_OP_N, call.n))?;
    let alignment = |address: *const c_void| 1u64 << (address as u64).trailing_zeros().min(8);
    Some(GemmShape {
        transa: call.transa,
        transb: call.transb,
        m: call.m,
        n: call.n,
        k: call.k,
        types: [call.a.1, call.b.1, call.c.1],
        lds: [call.a.2, call.b.2, call.c.2],
        // cublasSgemm_v2 computes in fp32 (the math mode may allow TF32).
        compute_type: if call.entry == SGEMM_ENTRY { COMPUTE_32F } else { call.compute_type },
        math_mode,
        pointer_mode: handle_pointer_mode(call.handle)?,
        alignments: [alignment(call.a.0), alignment(call.b.0), alignment(call.c.0.cast_const())],
    })
}

/// A slice computed with the whole product's algorithm; `None` when there is none for
/// this call or cuBLASLt did not compute it (the slice then goes to cuBLAS itself).
fn whole_algorithm_part(
    lt: Option<(WholeAlgorithm, GemmShape)>,
    slice: Option<Slice>,
    handle: CublasHandle,
    scalars: (*const c_void, *const c_void),
    (a, b): (*const c_void, *const c_void),
) -> Option<CublasStatus> {
    let ((algorithm, shape), slice) = (lt?, slice?);
    let stream = handle_stream(handle)?;
    // SAFETY: `a` and `b` are the slice's operands (the staged copy, offset to the slice,
    // or the program's own), `slice.output` its rows (columns) of the program's output,
    // within the spans the program's arguments cover, laid out as `shape` says; the
    // scalars are the program's, in its handle's pointer mode; `slice.workspace` is the
    // scratch's workspace, `algorithm.workspace` bytes used by this product's slices
    // alone, one after the other on `stream`.
    let status = unsafe {
        lt_algo::run_part(
            &algorithm,
            &shape,
            slice.dimensions(shape.m, shape.n),
            scalars,
            (a, b, slice.output as *mut c_void),
            slice.workspace,
            stream,
        )
    }?;
    (status == CublasStatus::SUCCESS).then_some(status)
}

/// The output a slice writes (or the program's own for the whole product).
fn write_to<T>(slice: Option<Slice>, original: *mut T) -> *mut T {
    slice.map_or(original, |slice| slice.output as *mut T)
}

fn with_stream(
    handle: CublasHandle,
    operands: [Option<Operand>; 2],
    slicing: Option<Slicing>,
    mut product: impl FnMut([Option<CuDevicePtr>; 2], Option<Slice>) -> CublasStatus,
) -> CublasStatus {
    for operand in operands.iter().flatten() {
        registry::note_read(operand.address, operand.bytes);
    }
    match handle_stream(handle) {
        Some(stream) => run_staged(stream, operands, slicing, product),
        None => {
            budget::note_computing();
            product(operands.map(|operand| operand.map(|operand| operand.address)), None)
        }
    }
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
        a: (a, a_type, lda.into()),
        b: (b, b_type, ldb.into()),
        c: (c, c_type, ldc.into()),
        compute_type,
        algo,
        strides: (0, 0),
        batch: 1,
    };
    let (slicing, lt) = gemm_slicing(&call).unzip();
    with_stream(handle, gemm_operands(&call), slicing, |[staged_a, staged_b], slice| {
        let (a, b) = (read_from(staged_a, a), read_from(staged_b, b));
        if let Some(status) = whole_algorithm_part(lt.flatten(), slice, handle, (alpha.cast(), beta.cast()), (a.cast(), b.cast())) {
            return status;
        }
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
        a: (a.cast(), CUDA_R_32F, lda.into()),
        b: (b.cast(), CUDA_R_32F, ldb.into()),
        c: (c.cast(), CUDA_R_32F, ldc.into()),
        compute_type: CUDA_R_32F,
        algo: 0,
        strides: (0, 0),
        batch: 1,
    };
    let (slicing, lt) = gemm_slicing(&call).unzip();
    with_stream(handle, gemm_operands(&call), slicing, |[staged_a, staged_b], slice| {
        let (a, b) = (read_from(staged_a, a), read_from(staged_b, b));
        if let Some(status) = whole_algorithm_part(lt.flatten(), slice, handle, (alpha.cast(), beta.cast()), (a.cast(), b.cast())) {
            return status;
        }
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
                lda,
                b,
                ldb,
                beta,
                write_to(slice, c),
                ldc,
            )
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
        a: (a, a_type, lda.into()),
        b: (b, b_type, ldb.into()),
        c: (c, c_type, ldc.into()),
        compute_type,
        algo,
        strides: (stride_a, stride_b),
        batch: batch.into(),
    };
    let (slicing, lt) = gemm_slicing(&call).unzip();
    with_stream(handle, gemm_operands(&call), slicing, |[staged_a, staged_b], slice| {
        let (a, b) = (read_from(staged_a, a), read_from(staged_b, b));
        if let Some(status) = whole_algorithm_part(lt.flatten(), slice, handle, (alpha.cast(), beta.cast()), (a.cast(), b.cast())) {
            return status;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_operands_swap_stored_rows_and_columns() {
        // op(A) = A^T is 8 x 2: A is stored 2 x 8 with ld 2.
        assert_eq!(stored_span(true, 8, 2, 2, 1, 0, 14), Some(32));
        assert_eq!(stored_span(false, 8, 2, 2, 1, 0, 14), None, "ld 2 < 8 rows");
        assert_eq!(stored_span(false, 8, 2, 8, 1, 0, 33), None, "fp4 is not staged");
    }

    #[test]
    fn each_operand_is_rated_by_the_width_that_rereads_it() {
        let [a, b] = gemm_operands(&GemmCall {
            entry: 1,
            handle: CublasHandle(std::ptr::null_mut()),
            transa: 1,
            transb: 0,
            m: 4096,
            n: 512,
            k: 1024,
            a: (0x1000 as *const c_void, 14, 1024),
            b: (0x9000 as *const c_void, 14, 1024),
            c: (std::ptr::null_mut(), 14, 4096),
            compute_type: 68,
            algo: -1,
            strides: (0, 0),
            batch: 1,
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.width, a.bytes), (512, 4096 * 1024 * 2));
        assert_eq!((b.width, b.bytes), (4096, 512 * 1024 * 2));
    }
}
