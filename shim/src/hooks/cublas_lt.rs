//! cuBLASLt hooks: a product's operands read from its matrix layouts for `staging`, and
//! the cuBLASLt handle that tells the program computes. A product whose layouts keep the
//! matrices' addresses in device memory (a batch mode other than strided: pointer arrays,
//! grouped) is not staged (its operands are arrays of pointers, not matrices), and when
//! its output is so, it counts as a writer of everything (`launch::indirect`).

use std::ffi::{c_int, c_void};

use crate::cuda::ffi::*;
use crate::cuda::real::{self, pfn};
use crate::gemm::{element_bytes, run_staged, span_bytes, Operand, Slice};
use crate::hooks::cublas::read_from;
use crate::launch::indirect;
use crate::memory::budget;

/// cublasLtCreate: a program creates its handle when it starts computing, so the VRAM
/// reserve opens here (as for cublasCreate_v2).
///
/// # Safety
/// The caller's argument, passed on to the real function.
pub unsafe fn lt_create(real: pfn::cublasLtCreate, handle: *mut CublasHandle) -> CublasStatus {
    budget::note_computing();
    // SAFETY: the real cublasLtCreate with the program's own out pointer.
    unsafe { real(handle) }
}

/// `cublasLtMatrixLayoutAttribute_t` values and `cublasLtOrder_t` values used here.
const LT_LAYOUT_TYPE: c_int = 0;
const LT_LAYOUT_ORDER: c_int = 1;
const LT_LAYOUT_ROWS: c_int = 2;
const LT_LAYOUT_COLS: c_int = 3;
const LT_LAYOUT_LD: c_int = 4;
const LT_LAYOUT_BATCH_COUNT: c_int = 5;
const LT_LAYOUT_STRIDED_BATCH_OFFSET: c_int = 6;
/// `CUBLASLT_MATRIX_LAYOUT_BATCH_MODE` (cuBLAS 12.9 and later), a `cublasLtBatchMode_t`
/// (32 bits), of which `CUBLASLT_BATCH_MODE_STRIDED` is the default; an older cuBLASLt
/// refuses the attribute, and its batches are strided.
const LT_LAYOUT_BATCH_MODE: c_int = 8;
const LT_BATCH_MODE_STRIDED: i64 = 0;
const LT_ORDER_COL: i32 = 0;
const LT_ORDER_ROW: i32 = 1;

/// A cuBLASLt matrix layout, read through the program's cuBLASLt: its shape, the bytes its
/// matrices span (`None`: not staged), and whether their addresses are kept in device
/// memory (a batch mode other than strided).
struct LtLayout {
    rows: i64,
    cols: i64,
    span: Option<u64>,
    through_pointers: bool,
}

fn lt_layout(layout: *mut c_void) -> Option<LtLayout> {
    let get = real::cublasLtMatrixLayoutGetAttribute()?;
    if layout.is_null() {
        return None;
    }
    // Each attribute has a fixed C type; all fit in 8 bytes, read little-endian.
    let read = |attribute: c_int, size: usize| -> Option<i64> {
        let mut value = [0u8; 8];
        let mut written = 0usize;
        // SAFETY: `value` has room for `size` <= 8 bytes; the layout is the program's.
        let status = unsafe { get(layout, attribute, value.as_mut_ptr().cast(), size, &mut written) };
        (status == CublasStatus::SUCCESS && written == size).then(|| match size {
            4 => i64::from(i32::from_le_bytes([value[0], value[1], value[2], value[3]])),
            _ => i64::from_le_bytes(value),
        })
    };
    let data_type = c_int::try_from(read(LT_LAYOUT_TYPE, 4)?).ok()?;
    let order = read(LT_LAYOUT_ORDER, 4)?;
    let rows = read(LT_LAYOUT_ROWS, 8)?;
    let cols = read(LT_LAYOUT_COLS, 8)?;
    let ld = read(LT_LAYOUT_LD, 8)?;
    let batch = read(LT_LAYOUT_BATCH_COUNT, 4)?;
    let stride = read(LT_LAYOUT_STRIDED_BATCH_OFFSET, 8)?;
    let through_pointers = read(LT_LAYOUT_BATCH_MODE, 4).is_some_and(|mode| mode != LT_BATCH_MODE_STRIDED);
    let element = element_bytes(data_type).filter(|_| !through_pointers);
    let span = match i32::try_from(order).ok()? {
        LT_ORDER_COL => element.and_then(|element| span_bytes(rows, cols, ld, batch, stride, element)),
        LT_ORDER_ROW => element.and_then(|element| span_bytes(cols, rows, ld, batch, stride, element)),
        // Tiled orders (COL32, ...): not staged.
        _ => None,
    };
    Some(LtLayout { rows, cols, span, through_pointers })
}

/// cublasLtMatmul: D = alpha op(A) op(B) + beta C; D is m x n.
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn lt_matmul(
    real: pfn::cublasLtMatmul,
    handle: CublasHandle,
    desc: *mut c_void,
    alpha: *const c_void,
    a: *const c_void,
    a_desc: *mut c_void,
    b: *const c_void,
    b_desc: *mut c_void,
    beta: *const c_void,
    c: *const c_void,
    c_desc: *mut c_void,
    d: *mut c_void,
    d_desc: *mut c_void,
    algo: *const c_void,
    workspace: *mut c_void,
    workspace_size: usize,
    stream: Stream,
) -> CublasStatus {
    // cuBLASLt products are not cut (a slice would need layouts of its own, and an
    // epilogue's bias or auxiliary pointers offset with it): `slice` is always `None`.
    let call_real = |[staged_a, staged_b]: [Option<CuDevicePtr>; 2], _slice: Option<Slice>| {
        // SAFETY: the program's arguments; a staged operand points into VRAM scratch
        // holding a copy of the same bytes, enqueued before the product on its stream.
        unsafe {
            real(
                handle,
                desc,
                alpha,
                read_from(staged_a, a),
                a_desc,
                read_from(staged_b, b),
                b_desc,
                beta,
                c,
                c_desc,
                d,
                d_desc,
                algo,
                workspace,
                workspace_size,
                stream,
            )
        }
    };
    let Some(output) = lt_layout(d_desc) else {
        // An output layout that cannot be read may be one of pointers.
        indirect::pointer_array_writer();
        budget::note_computing();
        return call_real([None, None], None);
    };
    if output.through_pointers {
        indirect::pointer_array_writer();
    }
    let operand = |address: *const c_void, layout: *mut c_void, width: i64| {
        lt_layout(layout).and_then(|layout| Operand::new(address, layout.span, width))
    };
    let operands = [operand(a, a_desc, output.cols), operand(b, b_desc, output.rows)];
    run_staged(stream, operands, None, call_real)
}
