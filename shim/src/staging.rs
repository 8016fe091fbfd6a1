//! GEMM operand staging: a cuBLAS matrix product that reads an operand from T2 and is
//! wide (the dimension that re-reads the operand is at least GREENBOOST_STAGE_MIN_WIDTH)
//! first gets that operand copied into a VRAM scratch buffer, on the product's own
//! stream, and reads it from there. A wide GEMM re-reads each tile of an operand once
//! per output tile: over PCIe that costs many times what one copy does (the copy engine
//! moves it at pinned-memcpy speed). Narrow products (decoding a token) keep reading
//! zero-copy, which reads the operand once.
//!
//! The product is the one the program asked for, bit for bit: cuBLAS gets the same
//! dimensions, types, leading dimensions, strides and scalars, and an operand pointer
//! with the same offset modulo 256 bytes (its alignment, which cuBLAS's kernel choice
//! depends on), so it picks the same kernel over the same bytes.
//!
//! Scratch buffers are per context, grow to the largest staged product (at most
//! GREENBOOST_STAGE_MAX, counted against the VRAM budget) and are never freed while the
//! process runs. Reuse is ordered: the copy and the product are enqueued on the product's
//! stream, and an event recorded after the product makes a product on another stream
//! wait before it overwrites the scratch. Products on a stream being captured into a
//! CUDA graph are not staged (a captured copy would replay into a scratch that later
//! products reuse): they run zero-copy as before.
//!
//! Lock order: `SCRATCH` is taken alone, never with the `tiers` locks; it is held across
//! the asynchronous enqueues of one staged product (copy, product, event) so that
//! threads cannot interleave uses of one scratch buffer. The fork handlers do not take
//! it: a child forked after CUDA use never stages (the shim steps aside there).

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::cuda::{self, call};
use crate::ffi::*;
use crate::libs;
use crate::lock::{const_mutex, Mutex};
use crate::log::Mib;
use crate::state::{self, STATS};
use crate::config::Placement;
use crate::tiers;

/// `cublasStatus_t`.
pub type CublasStatus = c_int;
/// `cublasOperation_t`: N is 0; T, C and conjugate transpose are not N.
const CUBLAS_OP_N: c_int = 0;

/// Alignment a staged operand keeps (bytes): cuBLAS picks kernels by pointer alignment,
/// at most 256 bytes matters.
const KEPT_ALIGNMENT: u64 = 256;

/// Bytes per element of a `cudaDataType_t`, for the types cuBLAS multiplies; `None`
/// for sub-byte and unknown types (never staged).
fn element_bytes(data_type: c_int) -> Option<u64> {
    Some(match data_type {
        // R_8I, R_8U, R_8F_E4M3, R_8F_E5M2, R_8F_UE8M0
        3 | 8 | 28 | 29 | 30 => 1,
        // R_16F, R_16BF, C_8I, C_8U, R_16I, R_16U
        2 | 14 | 7 | 9 | 20 | 22 => 2,
        // R_32F, C_16F, C_16BF, R_32I, R_32U, C_16I, C_16U
        0 | 6 | 15 | 10 | 12 | 21 | 23 => 4,
        // R_64F, C_32F, C_32I, C_32U, R_64I, R_64U
        1 | 4 | 11 | 13 | 24 | 26 => 8,
        // C_64F, C_64I, C_64U
        5 | 25 | 27 => 16,
        _ => return None,
    })
}

/// Bytes spanned by a column-major `rows` x `cols` matrix with leading dimension `ld`
/// repeated `batch` times `stride` elements apart; `None` when cuBLAS would refuse the
/// shape (it then answers the program itself) or the span does not fit 64 bits.
fn span_bytes(rows: i64, cols: i64, ld: i64, batch: i64, stride: i64, element: u64) -> Option<u64> {
    if rows <= 0 || cols <= 0 || batch <= 0 || ld < rows || stride < 0 {
        return None;
    }
    let matrix = ld.checked_mul(cols - 1)?.checked_add(rows)?;
    let elements = stride.checked_mul(batch - 1)?.checked_add(matrix)?;
    u64::try_from(elements).ok()?.checked_mul(element)
}

/// One operand of a product: where it is, how many bytes it spans, and the width of the
/// product that re-reads it.
#[derive(Clone, Copy, Debug)]
struct Operand {
    address: CuDevicePtr,
    bytes: u64,
    width: i64,
}

impl Operand {
    /// The operand of a column-major product stored `rows` x `cols` (as the program
    /// stored it, before any transpose).
    fn new(address: *const c_void, stored: Option<u64>, width: i64) -> Option<Operand> {
        Some(Operand { address: address as CuDevicePtr, bytes: stored?, width })
    }

    fn wants_staging(&self, min_width: u64) -> bool {
        self.address != 0
            && self.bytes != 0
            && u64::try_from(self.width).is_ok_and(|width| width >= min_width)
            && tiers::touches_t2(self.address, self.bytes)
    }
}

/// A context's scratch buffer.
///
/// # Invariants
/// `base` is `size` bytes of VRAM from the real cuMemAlloc in `context`, counted against
/// `device`'s budget; `done`, when not null, is an event of that context recorded after
/// the last product that read the scratch, on `last_stream`.
struct Scratch {
    context: usize,
    device: CuDevice,
    base: CuDevicePtr,
    size: u64,
    done: usize,
    last_stream: usize,
}

static SCRATCH: Mutex<Vec<Scratch>> = const_mutex(Vec::new());

/// Logged once: why staging stays off in this process.
static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

fn refuse_once(why: std::fmt::Arguments<'_>) {
    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
        info!("GEMM staging skipped: {}", why);
    }
}

/// Where each operand is read from once staged: the scratch address keeping the
/// operand's alignment, or `None` for an operand read in place.
type Placed = [Option<CuDevicePtr>; 2];

/// Runs `product` for `operands`, staging those that need it. `product` receives the
/// address each operand is to be read from.
fn run_staged(
    stream: CuStream,
    operands: [Option<Operand>; 2],
    product: impl FnOnce([Option<CuDevicePtr>; 2]) -> CublasStatus,
) -> CublasStatus {
    tiers::note_running();
    let config = state::config();
    let originals = operands.map(|operand| operand.map(|operand| operand.address));
    if !config.staging {
        return product(originals);
    }
    let wanted = operands.map(|operand| operand.filter(|operand| operand.wants_staging(config.stage_min_width)));
    if wanted.iter().all(Option::is_none) {
        return product(originals);
    }
    let driver = cuda::api();
    let mut capture_status: c_int = 0;
    if call!(driver, stream_is_capturing(stream, &mut capture_status)) != CUDA_SUCCESS || capture_status != 0 {
        return product(originals);
    }
    let Some(context) = driver.current_context() else { return product(originals) };
    let Some(device) = driver.current_device() else { return product(originals) };
    // Each staged operand at its own alignment offset, one after the other.
    let mut offsets: [Option<u64>; 2] = [None, None];
    let mut needed: u64 = 0;
    for (slot, operand) in offsets.iter_mut().zip(wanted.iter()) {
        if let Some(operand) = operand {
            let start = needed + operand.address % KEPT_ALIGNMENT;
            *slot = Some(start);
            needed = (start + operand.bytes).div_ceil(KEPT_ALIGNMENT) * KEPT_ALIGNMENT;
        }
    }
    if needed > config.stage_max {
        refuse_once(format_args!("an operand needs {} of scratch, above GREENBOOST_STAGE_MAX", Mib(needed)));
        return product(originals);
    }
    let mut scratches = SCRATCH.lock();
    let Some(scratch) = scratch_for(&mut scratches, context as usize, device, needed) else {
        drop(scratches);
        return product(originals);
    };
    if scratch.done != 0 && scratch.last_stream != stream as usize {
        // The previous product on another stream must have read the scratch first.
        if call!(driver, stream_wait_event(stream, scratch.done as CuEvent, 0)) != CUDA_SUCCESS {
            drop(scratches);
            return product(originals);
        }
    }
    let mut placed: Placed = originals;
    let mut staged_bytes = 0;
    for ((target, offset), operand) in placed.iter_mut().zip(offsets).zip(wanted) {
        let (Some(offset), Some(operand)) = (offset, operand) else { continue };
        let destination = scratch.base + offset;
        let status = call!(driver, memcpy_async(destination, operand.address, operand.bytes as usize, stream));
        if status != CUDA_SUCCESS {
            // Nothing was overwritten that a product still reads: the copies run on
            // this stream, after the wait above. The product reads in place.
            debug!("staging copy of {} failed (CUDA error {}): zero-copy", Mib(operand.bytes), status);
            drop(scratches);
            return product(originals);
        }
        *target = Some(destination);
        staged_bytes += operand.bytes;
    }
    let status = product(placed);
    if scratch.done == 0 {
        let mut event: CuEvent = ptr::null_mut();
        if call!(driver, event_create(&mut event, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS {
            scratch.done = event as usize;
        }
    }
    if scratch.done != 0 && call!(driver, event_record(scratch.done as CuEvent, stream)) == CUDA_SUCCESS {
        scratch.last_stream = stream as usize;
    } else {
        // Without an event, order the next product after this one the hard way.
        call!(driver, stream_synchronize(stream));
        scratch.last_stream = 0;
    }
    drop(scratches);
    STATS.gemm_staged.fetch_add(1, Ordering::Relaxed);
    STATS.gemm_staged_bytes.fetch_add(staged_bytes, Ordering::Relaxed);
    status
}

/// The context's scratch, grown to at least `needed` bytes; `None` (logged once) when
/// VRAM for it does not fit the budget or cannot be had.
fn scratch_for(scratches: &mut Vec<Scratch>, context: usize, device: CuDevice, needed: u64) -> Option<&mut Scratch> {
    let driver = cuda::api();
    let index = match scratches.iter().position(|scratch| scratch.context == context) {
        Some(index) => index,
        None => {
            scratches.try_reserve(1).ok()?;
            scratches.push(Scratch { context, device, base: 0, size: 0, done: 0, last_stream: 0 });
            scratches.len() - 1
        }
    };
    let scratch = scratches.get_mut(index)?;
    if scratch.size >= needed {
        return Some(scratch);
    }
    // Grow: the new size counts against the budget like any allocation.
    let grown = needed.next_power_of_two().min(state::config().stage_max).max(needed);
    if tiers::placement(grown.saturating_sub(scratch.size), device) != Placement::Vram {
        refuse_once(format_args!("{} of scratch does not fit the VRAM budget", Mib(grown)));
        return None;
    }
    let mut base: CuDevicePtr = 0;
    let status = call!(driver, mem_alloc(&mut base, grown as usize));
    if status != CUDA_SUCCESS {
        refuse_once(format_args!("no VRAM for {} of scratch (CUDA error {})", Mib(grown), status));
        return None;
    }
    if scratch.base != 0 {
        // The old buffer goes once every product that reads it has run.
        if scratch.done != 0 {
            call!(driver, event_synchronize(scratch.done as CuEvent));
        } else {
            call!(driver, ctx_synchronize());
        }
        call!(driver, mem_free(scratch.base));
        tiers::uncount_own_vram(scratch.size, scratch.device);
    }
    tiers::count_own_vram(grown, device);
    debug!("GEMM staging scratch: {} in VRAM", Mib(grown));
    scratch.base = base;
    scratch.size = grown;
    Some(scratch)
}

/// A column-major operand stored `rows` x `cols` as the transpose flag says:
/// `op(X)` is `op_rows` x `op_cols`.
fn stored_span(transposed: bool, op_rows: i64, op_cols: i64, ld: i64, batch: i64, stride: i64, data_type: c_int) -> Option<u64> {
    let (rows, cols) = if transposed { (op_cols, op_rows) } else { (op_rows, op_cols) };
    span_bytes(rows, cols, ld, batch, stride, element_bytes(data_type)?)
}

/// The stream a cuBLAS handle runs on (null: the legacy default stream), through the
/// program's own cuBLAS.
fn handle_stream(handle: *mut c_void) -> Option<CuStream> {
    type GetStream = unsafe extern "C" fn(*mut c_void, *mut CuStream) -> CublasStatus;
    static GET_STREAM: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    let found = libs::cached_function(&GET_STREAM, libs::cublas, c"cublasGetStream_v2")?;
    // SAFETY: cuBLAS's cublasGetStream_v2 has this signature.
    let get_stream = unsafe { std::mem::transmute::<*mut c_void, GetStream>(found) };
    let mut stream: CuStream = ptr::null_mut();
    // SAFETY: the program's handle and a valid out pointer.
    (unsafe { get_stream(handle, &mut stream) } == 0).then_some(stream)
}

/// A product of `m` x `k` times `k` x `n` on `handle`'s stream; A is re-read by every
/// column tile (width `n`), B by every row tile (width `m`).
#[allow(clippy::too_many_arguments)]
fn gemm_operands(
    transa: c_int, transb: c_int, m: i64, n: i64, k: i64,
    a: *const c_void, a_type: c_int, lda: i64, stride_a: i64,
    b: *const c_void, b_type: c_int, ldb: i64, stride_b: i64, batch: i64,
) -> [Option<Operand>; 2] {
    let a_span = stored_span(transa != CUBLAS_OP_N, m, k, lda, batch, stride_a, a_type);
    let b_span = stored_span(transb != CUBLAS_OP_N, k, n, ldb, batch, stride_b, b_type);
    [Operand::new(a, a_span, n), Operand::new(b, b_span, m)]
}

fn with_stream(handle: *mut c_void, operands: [Option<Operand>; 2], product: impl FnOnce([Option<CuDevicePtr>; 2]) -> CublasStatus) -> CublasStatus {
    match handle_stream(handle) {
        Some(stream) => run_staged(stream, operands, product),
        None => {
            tiers::note_running();
            product(operands.map(|operand| operand.map(|operand| operand.address)))
        }
    }
}

/// The address an operand is read from: staged, or the program's own.
fn read_from<T>(placed: Option<CuDevicePtr>, original: *const T) -> *const T {
    placed.map_or(original, |address| address as *const T)
}

/// cublasCreate_v2: a program creates its cuBLAS handle when it starts computing (and
/// allocates the handle's workspace right after), so the VRAM reserve opens here.
///
/// # Safety
/// The caller's argument, passed on to the real function.
pub unsafe fn create(real: crate::hooks::pfn::cublasCreate_v2, handle: *mut *mut c_void) -> CublasStatus {
    tiers::note_running();
    // SAFETY: the program's argument.
    unsafe { real(handle) }
}

/// cublasLtCreate: as `create`.
///
/// # Safety
/// The caller's argument, passed on to the real function.
pub unsafe fn lt_create(real: crate::hooks::pfn::cublasLtCreate, handle: *mut *mut c_void) -> CublasStatus {
    tiers::note_running();
    // SAFETY: the program's argument.
    unsafe { real(handle) }
}

/// cublasGemmEx.
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_ex(
    real: crate::hooks::pfn::cublasGemmEx, handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
    alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, b: *const c_void, b_type: c_int, ldb: c_int,
    beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, compute_type: c_int, algo: c_int,
) -> CublasStatus {
    let operands = gemm_operands(transa, transb, m.into(), n.into(), k.into(), a, a_type, lda.into(), 0, b, b_type, ldb.into(), 0, 1);
    with_stream(handle, operands, |[staged_a, staged_b]| {
        // SAFETY: the program's arguments, with an operand possibly read from its VRAM copy.
        unsafe {
            real(handle, transa, transb, m, n, k, alpha, read_from(staged_a, a), a_type, lda, read_from(staged_b, b), b_type, ldb, beta, c, c_type, ldc, compute_type, algo)
        }
    })
}

/// cublasSgemm_v2 (float32; CUDA_R_32F is type 0).
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    real: crate::hooks::pfn::cublasSgemm_v2, handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
    alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, beta: *const f32, c: *mut f32, ldc: c_int,
) -> CublasStatus {
    const CUDA_R_32F: c_int = 0;
    let operands = gemm_operands(transa, transb, m.into(), n.into(), k.into(), a.cast(), CUDA_R_32F, lda.into(), 0, b.cast(), CUDA_R_32F, ldb.into(), 0, 1);
    with_stream(handle, operands, |[staged_a, staged_b]| {
        // SAFETY: as above.
        unsafe { real(handle, transa, transb, m, n, k, alpha, read_from(staged_a, a), lda, read_from(staged_b, b), ldb, beta, c, ldc) }
    })
}

/// cublasGemmStridedBatchedEx (a stride of 0 broadcasts one matrix to the batch).
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_strided_batched_ex(
    real: crate::hooks::pfn::cublasGemmStridedBatchedEx, handle: *mut c_void, transa: c_int, transb: c_int, m: c_int, n: c_int, k: c_int,
    alpha: *const c_void, a: *const c_void, a_type: c_int, lda: c_int, stride_a: i64, b: *const c_void, b_type: c_int, ldb: c_int,
    stride_b: i64, beta: *const c_void, c: *mut c_void, c_type: c_int, ldc: c_int, stride_c: i64, batch: c_int, compute_type: c_int,
    algo: c_int,
) -> CublasStatus {
    let operands =
        gemm_operands(transa, transb, m.into(), n.into(), k.into(), a, a_type, lda.into(), stride_a, b, b_type, ldb.into(), stride_b, batch.into());
    with_stream(handle, operands, |[staged_a, staged_b]| {
        // SAFETY: as above.
        unsafe {
            real(handle, transa, transb, m, n, k, alpha, read_from(staged_a, a), a_type, lda, stride_a, read_from(staged_b, b), b_type, ldb,
                stride_b, beta, c, c_type, ldc, stride_c, batch, compute_type, algo)
        }
    })
}

/// `cublasLtMatrixLayoutAttribute_t` values and `cublasLtOrder_t` values used here.
const LT_LAYOUT_TYPE: c_int = 0;
const LT_LAYOUT_ORDER: c_int = 1;
const LT_LAYOUT_ROWS: c_int = 2;
const LT_LAYOUT_COLS: c_int = 3;
const LT_LAYOUT_LD: c_int = 4;
const LT_LAYOUT_BATCH_COUNT: c_int = 5;
const LT_LAYOUT_STRIDED_BATCH_OFFSET: c_int = 6;
const LT_ORDER_COL: i32 = 0;
const LT_ORDER_ROW: i32 = 1;

/// A cuBLASLt matrix layout, read through the program's cuBLASLt.
struct LtLayout {
    rows: i64,
    cols: i64,
    span: Option<u64>,
}

fn lt_layout(layout: *mut c_void) -> Option<LtLayout> {
    type GetAttribute = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, usize, *mut usize) -> CublasStatus;
    static GET_ATTRIBUTE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
    let found = libs::cached_function(&GET_ATTRIBUTE, libs::cublas_lt, c"cublasLtMatrixLayoutGetAttribute")?;
    // SAFETY: cuBLASLt's cublasLtMatrixLayoutGetAttribute has this signature.
    let get = unsafe { std::mem::transmute::<*mut c_void, GetAttribute>(found) };
    if layout.is_null() {
        return None;
    }
    // Each attribute has a fixed C type; all fit in 8 bytes, read little-endian.
    let read = |attribute: c_int, size: usize| -> Option<i64> {
        let mut value = [0u8; 8];
        let mut written = 0usize;
        // SAFETY: `value` has room for `size` <= 8 bytes; the layout is the program's.
        let status = unsafe { get(layout, attribute, value.as_mut_ptr().cast(), size, &mut written) };
        (status == 0 && written == size).then(|| match size {
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
    let element = element_bytes(data_type);
    let span = match i32::try_from(order).ok()? {
        LT_ORDER_COL => element.and_then(|element| span_bytes(rows, cols, ld, batch, stride, element)),
        LT_ORDER_ROW => element.and_then(|element| span_bytes(cols, rows, ld, batch, stride, element)),
        // Tiled orders (COL32, ...): not staged.
        _ => None,
    };
    Some(LtLayout { rows, cols, span })
}

/// cublasLtMatmul: D = alpha op(A) op(B) + beta C; D is m x n.
///
/// # Safety
/// The caller's arguments, passed on to the real function.
#[allow(clippy::too_many_arguments)]
pub unsafe fn lt_matmul(
    real: crate::hooks::pfn::cublasLtMatmul, handle: *mut c_void, desc: *mut c_void, alpha: *const c_void, a: *const c_void,
    a_desc: *mut c_void, b: *const c_void, b_desc: *mut c_void, beta: *const c_void, c: *const c_void, c_desc: *mut c_void,
    d: *mut c_void, d_desc: *mut c_void, algo: *const c_void, workspace: *mut c_void, workspace_size: usize, stream: CuStream,
) -> CublasStatus {
    let call_real = |[staged_a, staged_b]: [Option<CuDevicePtr>; 2]| {
        // SAFETY: the program's arguments, with an operand possibly read from its VRAM copy.
        unsafe {
            real(handle, desc, alpha, read_from(staged_a, a), a_desc, read_from(staged_b, b), b_desc, beta, c, c_desc, d, d_desc, algo,
                workspace, workspace_size, stream)
        }
    };
    let Some(output) = lt_layout(d_desc) else {
        tiers::note_running();
        return call_real([None, None]);
    };
    let operand = |address: *const c_void, layout: *mut c_void, width: i64| {
        lt_layout(layout).and_then(|layout| Operand::new(address, layout.span, width))
    };
    let operands = [operand(a, a_desc, output.cols), operand(b, b_desc, output.rows)];
    run_staged(stream, operands, call_real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_exactly_what_cublas_reads() {
        // 4 x 3 column-major, ld 4: 12 elements.
        assert_eq!(span_bytes(4, 3, 4, 1, 0, 2), Some(24));
        // ld 6: the last column ends at 6 * 2 + 4.
        assert_eq!(span_bytes(4, 3, 6, 1, 0, 2), Some(32));
        // A batch of 3, 20 elements apart; stride 0 broadcasts one matrix.
        assert_eq!(span_bytes(4, 3, 6, 3, 20, 1), Some(56));
        assert_eq!(span_bytes(4, 3, 6, 3, 0, 1), Some(16));
        // Shapes cuBLAS refuses are never staged.
        assert_eq!(span_bytes(4, 3, 3, 1, 0, 2), None);
        assert_eq!(span_bytes(0, 3, 4, 1, 0, 2), None);
        assert_eq!(span_bytes(4, 3, 4, 2, -1, 2), None);
        assert_eq!(span_bytes(i64::MAX, 3, i64::MAX, 1, 0, 2), None);
    }

    #[test]
    fn transposed_operands_swap_stored_rows_and_columns() {
        // op(A) = A^T is 8 x 2: A is stored 2 x 8 with ld 2.
        assert_eq!(stored_span(true, 8, 2, 2, 1, 0, 14), Some(32));
        assert_eq!(stored_span(false, 8, 2, 2, 1, 0, 14), None, "ld 2 < 8 rows");
        assert_eq!(stored_span(false, 8, 2, 8, 1, 0, 33), None, "fp4 is not staged");
    }

    #[test]
    fn each_operand_is_rated_by_the_width_that_rereads_it() {
        let [a, b] = gemm_operands(1, 0, 4096, 512, 1024, 0x1000 as *const c_void, 14, 1024, 0, 0x9000 as *const c_void, 14, 1024, 0, 1);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.width, a.bytes), (512, 4096 * 1024 * 2));
        assert_eq!((b.width, b.bytes), (4096, 512 * 1024 * 2));
    }
}
