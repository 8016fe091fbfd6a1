//! One cuBLAS GEMM call as the hooks see it: its operands (spans, widths) for staging,
//! the handle's stream and modes, how the product may be cut into slices, and the whole
//! product's cuBLASLt algorithm its slices run (`lt_algo`).

use std::ffi::{c_int, c_void};

use crate::cuda;
use crate::cuda::ffi::*;
use crate::cuda::real;
use crate::gemm::lt_algo::{self, GemmShape, Part, WholeAlgorithm};
use crate::gemm::product::{element_bytes, span_bytes, Operand, Shape, Slice, SliceAxis, Slicing};
use crate::gemm::stage_plan::{self, Settings};
use crate::memory::registry;
use crate::rules::config;

/// `cublasOperation_t`: N is 0; T, C and conjugate transpose are not N.
pub(super) const CUBLAS_OP_N: c_int = 0;

/// The hooked entry points, as a product's shape names them.
pub const GEMM_EX_ENTRY: i64 = 1;
pub const SGEMM_ENTRY: i64 = 2;
pub const GEMM_STRIDED_BATCHED_ENTRY: i64 = 3;

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
pub fn handle_stream(handle: CublasHandle) -> Option<Stream> {
    let get_stream = real::cublasGetStream_v2()?;
    let mut stream = Stream::NULL;
    // SAFETY: the program's handle (cuBLAS validates it) and a valid local for the stream.
    (unsafe { get_stream(handle, &mut stream) } == CublasStatus::SUCCESS).then_some(stream)
}

/// A product of `m` x `k` times `k` x `n` on `handle`'s stream; A is re-read by every
/// column tile (width `n`), B by every row tile (width `m`).
pub fn gemm_operands(call: &GemmCall) -> [Option<Operand>; 2] {
    let (a, b) = (&call.a, &call.b);
    let a_span = stored_span(call.transa != CUBLAS_OP_N, call.m, call.k, a.ld, call.batch, call.stride_a, a.data_type);
    let b_span = stored_span(call.transb != CUBLAS_OP_N, call.k, call.n, b.ld, call.batch, call.stride_b, b.data_type);
    [Operand::new(a.pointer, a_span, call.n), Operand::new(b.pointer, b_span, call.m)]
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

/// A matrix of a cuBLAS call: where it is, its `cudaDataType_t`, its leading dimension.
#[derive(Clone, Copy)]
pub struct Matrix<P> {
    pub pointer: P,
    pub data_type: c_int,
    pub ld: i64,
}

/// A product's scalars as the program passed them (in host or device memory, as its
/// handle's pointer mode says).
#[derive(Clone, Copy)]
pub struct Scalars {
    pub alpha: *const c_void,
    pub beta: *const c_void,
}

/// The operands a product reads: staged copies or the program's own.
#[derive(Clone, Copy)]
pub struct Reads {
    pub a: *const c_void,
    pub b: *const c_void,
}

/// One cuBLAS GEMM call, as the program made it (column-major, cuBLAS's names; the
/// batch strides of A and B in elements).
pub struct GemmCall {
    pub entry: i64,
    pub handle: CublasHandle,
    pub transa: c_int,
    pub transb: c_int,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a: Matrix<*const c_void>,
    pub b: Matrix<*const c_void>,
    pub c: Matrix<*mut c_void>,
    pub compute_type: c_int,
    pub algo: c_int,
    pub stride_a: i64,
    pub stride_b: i64,
    pub batch: i64,
}

/// How a single (unbatched) GEMM may be cut: A used transposed along the output's rows
/// (each row of op(A) is one stored column), B untransposed along its columns — the
/// cuts whose slices are contiguous in the operand (a PyTorch Linear's weight is A,
/// transposed). `None` when `may_cut` says no product of these operands is cut, when the
/// handle's math mode cannot be read (the shape would not say which kernel cuBLAS picks)
/// or the output's span is unknown.
pub fn gemm_slicing(
    call: &GemmCall,
    operands: &[Option<Operand>; 2],
) -> Option<(Slicing, Option<(WholeAlgorithm, GemmShape)>)> {
    // Never cut: nothing to describe, and no cuBLAS call to make for it.
    let settings = Settings::of(config::get());
    let in_t2 = |operand: &Operand| registry::t2_kind(operand.address, operand.bytes).is_some();
    if call.batch != 1 || !stage_plan::may_cut(&settings, operands, in_t2) {
        return None;
    }
    let Matrix { pointer: c, data_type: c_type, ld: ldc } = call.c;
    let output_element = element_bytes(c_type)?;
    let output_bytes = span_bytes(call.m, call.n, ldc, 1, 0, output_element)?;
    let mode = handle_math_mode(call.handle)?;
    let axis = |operand: &Matrix<*const c_void>, length: i64, output_step: u64| {
        let operand_step = u64::try_from(operand.ld).ok()?.checked_mul(element_bytes(operand.data_type)?)?;
        Some(SliceAxis { length, operand_step, output_step })
    };
    let rows = if call.transa != CUBLAS_OP_N { axis(&call.a, call.m, output_element) } else { None };
    let columns = if call.transb == CUBLAS_OP_N {
        axis(&call.b, call.n, u64::try_from(ldc).ok()?.checked_mul(output_element)?)
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
        call.a.ld,
        call.b.ld,
        ldc,
        i64::from(call.a.data_type),
        i64::from(call.b.data_type),
        i64::from(c_type),
        i64::from(call.compute_type),
        i64::from(call.algo),
        alignment(call.a.pointer),
        alignment(call.b.pointer),
        alignment(c),
        0,
    ];
    let lt = lt_shape(call, operands, &settings, mode).and_then(|lt_shape| {
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

/// The call as cuBLASLt's heuristic sees it; `None` unless an operand that can be cut
/// (A used transposed, B as stored: `gemm_operands`' spans of them are their slices'
/// rows one after the other) lies in T2 and its product is wide enough to be sliced, or
/// the operand is too large for the scratch (streamed through it) — the others are never
/// cut, so cuBLASLt is not asked.
fn lt_shape(
    call: &GemmCall,
    operands: &[Option<Operand>; 2],
    settings: &Settings,
    math_mode: c_int,
) -> Option<GemmShape> {
    const COMPUTE_32F: c_int = 68;
    let cuttable = [call.transa != CUBLAS_OP_N, call.transb == CUBLAS_OP_N];
    let cut_in_t2 = |(operand, cuttable): (&Option<Operand>, bool)| {
        operand.filter(|operand| {
            cuttable
                && stage_plan::may_be_cut(settings, operand)
                && registry::t2_kind(operand.address, operand.bytes).is_some()
        })
    };
    operands.iter().zip(cuttable).find_map(cut_in_t2)?;
    let alignment = |address: *const c_void| 1u64 << (address as u64).trailing_zeros().min(8);
    Some(GemmShape {
        transa: call.transa,
        transb: call.transb,
        m: call.m,
        n: call.n,
        k: call.k,
        types: [call.a.data_type, call.b.data_type, call.c.data_type],
        lds: [call.a.ld, call.b.ld, call.c.ld],
        // cublasSgemm_v2 computes in fp32 (the math mode may allow TF32).
        compute_type: if call.entry == SGEMM_ENTRY { COMPUTE_32F } else { call.compute_type },
        math_mode,
        pointer_mode: handle_pointer_mode(call.handle)?,
        alignments: [alignment(call.a.pointer), alignment(call.b.pointer), alignment(call.c.pointer.cast_const())],
    })
}

/// A slice computed with the whole product's algorithm; `None` when there is none for
/// this call or cuBLASLt did not compute it (the slice then goes to cuBLAS itself).
pub fn whole_algorithm_part(
    lt: Option<(WholeAlgorithm, GemmShape)>,
    slice: Option<Slice>,
    stream: Stream,
    scalars: Scalars,
    reads: Reads,
) -> Option<CublasStatus> {
    let ((algorithm, shape), slice) = (lt?, slice?);
    let (m, n) = slice.dimensions(shape.m, shape.n);
    let part = Part {
        m,
        n,
        alpha: scalars.alpha,
        beta: scalars.beta,
        a: reads.a,
        b: reads.b,
        c: slice.output as *mut c_void,
        workspace: slice.workspace,
    };
    // SAFETY: `a` and `b` are the slice's operands (the staged copy, offset to the slice,
    // or the program's own), `slice.output` its rows (columns) of the program's output,
    // within the spans the program's arguments cover, laid out as `shape` says; the
    // scalars are the program's, in its handle's pointer mode; `slice.workspace` is the
    // scratch's workspace, `algorithm.workspace` bytes used by this product's slices
    // alone, one after the other on `stream`.
    let status = unsafe { lt_algo::run_part(&algorithm, &shape, &part, stream) }?;
    (status == CublasStatus::SUCCESS).then_some(status)
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
            a: Matrix { pointer: 0x1000 as *const c_void, data_type: 14, ld: 1024 },
            b: Matrix { pointer: 0x9000 as *const c_void, data_type: 14, ld: 1024 },
            c: Matrix { pointer: std::ptr::null_mut(), data_type: 14, ld: 4096 },
            compute_type: 68,
            algo: -1,
            stride_a: 0,
            stride_b: 0,
            batch: 1,
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.width, a.bytes), (512, 4096 * 1024 * 2));
        assert_eq!((b.width, b.bytes), (4096, 512 * 1024 * 2));
    }
}
