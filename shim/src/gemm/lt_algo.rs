//! A cuBLAS product's own algorithm, through cuBLASLt, so that the slices of a pipelined
//! product run the whole product's kernel.
//!
//! cublasGemmEx picks its kernel with cuBLASLt's heuristic for the shape it is given. A
//! slice passed to cublasGemmEx is another shape, for which the heuristic often picks
//! another kernel (one that splits the inner dimension for a narrow slice) that rounds
//! otherwise. cublasLtMatmul runs the algorithm it is handed on any shape that algorithm
//! supports: given the whole shape's algorithm, each slice computes its output tiles as
//! the whole product does. On the H200, the heuristic's first algorithm at a 32 MiB
//! workspace limit was cublasGemmEx's own for every product of an 8B model, one token and
//! 512, and slices computed with it were the whole product bit for bit
//! (bench/results/lt-algo-probe-2026-12-03.md). `staging_slices` still verifies each
//! shape once against the program's own product before it relies on its slices.
//!
//! Lock: `WHOLE_ALGORITHMS` is taken with no other lock held (in the hook, before
//! staging), for map operations only; no other lock is taken under it.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::cuda::ffi::*;
use crate::cuda::real;
use crate::sys::lock::{const_mutex, Mutex};
use crate::sys::lock_order::rank;

/// The workspace limit under which cublasGemmEx's own choice was the heuristic's first
/// algorithm on the H200 (PyTorch's handles); a program whose handle has another
/// workspace may get another algorithm, which the verification then catches.
const WORKSPACE_LIMIT: u64 = 32 << 20;
/// Shapes whose algorithm is remembered; past it, new shapes are cut through cuBLAS.
const MAX_SHAPES: usize = 1024;

/// `cublasComputeType_t` values.
const COMPUTE_16F: c_int = 64;
const COMPUTE_32F: c_int = 68;
const COMPUTE_32F_FAST_16F: c_int = 74;
const COMPUTE_32F_FAST_16BF: c_int = 75;
const COMPUTE_32F_FAST_TF32: c_int = 77;
const COMPUTE_64F: c_int = 70;
const COMPUTE_32I: c_int = 72;
/// `cudaDataType_t` scale types.
const R_16F: c_int = 2;
const R_32F: c_int = 0;
const R_64F: c_int = 1;
const R_32I: c_int = 10;
/// `cublasMath_t`: the mode bits, and the flag that forbids reduced-precision reductions.
const MATH_MODE_BITS: c_int = 0xf;
const MATH_DEFAULT: c_int = 0;
const MATH_TENSOR_OP: c_int = 1;
const MATH_TF32_TENSOR_OP: c_int = 3;
/// `cublasLtMatmulDescAttributes_t` and `cublasLtMatmulPreferenceAttributes_t`.
const DESC_POINTER_MODE: c_int = 2;
const DESC_TRANSA: c_int = 3;
const DESC_TRANSB: c_int = 4;
const PREF_MAX_WORKSPACE_BYTES: c_int = 1;
const PREF_MIN_ALIGNMENT: [c_int; 4] = [5, 6, 7, 8];
/// Alignment (bytes) the heuristic assumes unless told less.
const FULL_ALIGNMENT: u64 = 256;

/// `cublasLtMatmulHeuristicResult_t`.
#[repr(C)]
struct HeuristicResult {
    algo: [u64; 8],
    workspace: usize,
    state: CublasStatus,
    waves: f32,
    reserved: [c_int; 4],
}

/// A product as cuBLAS takes it (column-major; `op(A)` is m x k, `op(B)` k x n, C m x n):
/// everything that can change the algorithm cuBLASLt's heuristic picks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmShape {
    pub transa: c_int,
    pub transb: c_int,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    /// Element types of A, B, C.
    pub types: [c_int; 3],
    /// Leading dimensions of A, B, C.
    pub(super) lds: [i64; 3],
    /// The call's compute type (`cublasComputeType_t`).
    pub compute_type: c_int,
    /// The handle's math mode and pointer mode.
    pub(super) math_mode: c_int,
    pub(super) pointer_mode: c_int,
    /// Alignment of A, B, C (bytes, at most 256).
    pub(super) alignments: [u64; 3],
}

/// The whole product's algorithm, ready to run its slices.
///
/// # Invariants
/// `handle` is a cuBLASLt handle and `desc` a matmul descriptor of the shape's types,
/// transposes and pointer mode, both made here; a descriptor the map keeps (at most
/// `MAX_SHAPES`) is never destroyed, and only those are handed out; `algo` is the heuristic's algorithm for the whole shape on the device it
/// was asked for, needing `workspace` bytes.
#[derive(Clone, Copy, Debug)]
pub struct WholeAlgorithm {
    handle: CublasHandle,
    desc: *mut c_void,
    algo: [u64; 8],
    pub workspace: u64,
}

// SAFETY: the handle and descriptor are cuBLASLt objects that any thread may pass to
// cuBLASLt (neither holds a stream or thread state); they are never freed.
unsafe impl Send for WholeAlgorithm {}

/// Shape and device → the whole product's algorithm (`None`: the heuristic had none).
type Algorithms = HashMap<(GemmShape, CuDevice), Option<WholeAlgorithm>>;

static WHOLE_ALGORITHMS: Mutex<rank::WholeAlgorithms, Option<Algorithms>> = const_mutex(None);

/// Devices with a cuBLASLt handle of their own; products on others are cut through cuBLAS.
const MAX_DEVICES: usize = 64;

/// One cuBLASLt handle per device (a handle belongs to the device current when it was
/// made), made on the device's first product that asks (null until then).
static LT_HANDLES: [AtomicPtr<c_void>; MAX_DEVICES] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];

impl GemmShape {
    /// The compute and scale types cuBLASLt gets for this call, `None` for calls whose
    /// cuBLAS semantics have no one cuBLASLt equivalent here (pedantic math, forbidden
    /// reduced-precision reductions, legacy compute types): those are cut through cuBLAS.
    fn lt_types(&self) -> Option<(c_int, c_int)> {
        let mode = self.math_mode & MATH_MODE_BITS;
        if self.math_mode & !MATH_MODE_BITS != 0 || ![MATH_DEFAULT, MATH_TENSOR_OP, MATH_TF32_TENSOR_OP].contains(&mode)
        {
            return None;
        }
        Some(match self.compute_type {
            COMPUTE_32F if mode == MATH_TF32_TENSOR_OP => (COMPUTE_32F_FAST_TF32, R_32F),
            COMPUTE_16F => (COMPUTE_16F, R_16F),
            COMPUTE_32F | COMPUTE_32F_FAST_16F | COMPUTE_32F_FAST_16BF | COMPUTE_32F_FAST_TF32 => {
                (self.compute_type, R_32F)
            }
            COMPUTE_64F => (COMPUTE_64F, R_64F),
            COMPUTE_32I => (COMPUTE_32I, R_32I),
            _ => return None,
        })
    }

    /// The stored rows and columns of A, B and C for an output of `m` x `n`.
    fn stored(&self, m: i64, n: i64) -> [(i64, i64); 3] {
        let transposed = |op: c_int, rows: i64, cols: i64| if op != 0 { (cols, rows) } else { (rows, cols) };
        [transposed(self.transa, m, self.k), transposed(self.transb, self.k, n), (m, n)]
    }
}

/// Matrix layouts of one product, destroyed when dropped.
struct Layouts([*mut c_void; 3]);

impl Layouts {
    fn new(shape: &GemmShape, m: i64, n: i64) -> Option<Layouts> {
        let create = real::cublasLtMatrixLayoutCreate()?;
        let mut layouts = Layouts([std::ptr::null_mut(); 3]);
        for (index, (rows, cols)) in shape.stored(m, n).into_iter().enumerate() {
            let (Ok(rows), Ok(cols)) = (u64::try_from(rows), u64::try_from(cols)) else { return None };
            let data_type = shape.types[index];
            // SAFETY: a valid out pointer; cuBLASLt validates the dimensions and type.
            let status = unsafe { create(&mut layouts.0[index], data_type, rows, cols, shape.lds[index]) };
            if status != CublasStatus::SUCCESS {
                return None;
            }
        }
        Some(layouts)
    }
}

impl Drop for Layouts {
    fn drop(&mut self) {
        let Some(destroy) = real::cublasLtMatrixLayoutDestroy() else { return };
        for layout in self.0.into_iter().filter(|layout| !layout.is_null()) {
            // SAFETY: a layout made by cublasLtMatrixLayoutCreate in `new`, destroyed once.
            unsafe { destroy(layout) };
        }
    }
}

/// The cuBLASLt handle of `device`, the current device (made with it current).
fn lt_handle(device: CuDevice) -> Option<CublasHandle> {
    let slot = LT_HANDLES.get(usize::try_from(device).ok()?)?;
    let known = slot.load(Ordering::Acquire);
    if !known.is_null() {
        return Some(CublasHandle(known));
    }
    let create = real::cublasLtCreate()?;
    let mut made = CublasHandle(std::ptr::null_mut());
    // SAFETY: the real cublasLtCreate with a valid out pointer.
    if unsafe { create(&mut made) } != CublasStatus::SUCCESS || made.0.is_null() {
        return None;
    }
    match slot.compare_exchange(std::ptr::null_mut(), made.0, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(made),
        Err(first) => {
            // Another thread's handle won: ours goes.
            if let Some(destroy) = real::cublasLtDestroy() {
                // SAFETY: the handle made just above, never handed out.
                unsafe { destroy(made) };
            }
            Some(CublasHandle(first))
        }
    }
}

/// The whole product's algorithm for `shape` on `device` (the current device), asked of
/// cuBLASLt once per shape and device; `None` when cuBLASLt is not there, the call has
/// no cuBLASLt equivalent, the heuristic offers nothing, or `MAX_SHAPES` are known
/// already (the slices then go to cuBLAS).
pub(super) fn whole_algorithm(shape: &GemmShape, device: CuDevice) -> Option<WholeAlgorithm> {
    let key = (*shape, device);
    {
        let known = WHOLE_ALGORITHMS.lock();
        let map = known.as_ref();
        if let Some(found) = map.and_then(|map| map.get(&key)) {
            return *found;
        }
        if map.is_some_and(|map| map.len() >= MAX_SHAPES) {
            return None;
        }
    }
    // Asked without the lock (a library call); the map keeps the first answer, and every
    // descriptor it does not keep is destroyed (none is used but through the map).
    let found = ask_heuristic(shape, device);
    let mut known = WHOLE_ALGORITHMS.lock();
    let map = known.get_or_insert_with(HashMap::new);
    let kept = match map.get(&key).copied() {
        Some(first) => first,
        None if map.len() < MAX_SHAPES && map.try_reserve(1).is_ok() => {
            map.insert(key, found);
            return found;
        }
        None => None,
    };
    drop(known);
    destroy_descriptor(found);
    kept
}

fn destroy_descriptor(algorithm: Option<WholeAlgorithm>) {
    let (Some(algorithm), Some(destroy)) = (algorithm, real::cublasLtMatmulDescDestroy()) else { return };
    // SAFETY: a descriptor made by `ask_heuristic` that the map did not keep, so that
    // nothing else holds it.
    unsafe { destroy(algorithm.desc) };
}

fn ask_heuristic(shape: &GemmShape, device: CuDevice) -> Option<WholeAlgorithm> {
    let (compute, scale) = shape.lt_types()?;
    let handle = lt_handle(device)?;
    let (desc_create, desc_set) = (real::cublasLtMatmulDescCreate()?, real::cublasLtMatmulDescSetAttribute()?);
    let (pref_create, pref_set, pref_destroy) = (
        real::cublasLtMatmulPreferenceCreate()?,
        real::cublasLtMatmulPreferenceSetAttribute()?,
        real::cublasLtMatmulPreferenceDestroy()?,
    );
    let heuristic = real::cublasLtMatmulAlgoGetHeuristic()?;
    let layouts = Layouts::new(shape, shape.m, shape.n)?;
    let mut desc = std::ptr::null_mut();
    // SAFETY: a valid out pointer; cuBLASLt validates the types.
    if unsafe { desc_create(&mut desc, compute, scale) } != CublasStatus::SUCCESS {
        return None;
    }
    let desc_attributes =
        [(DESC_TRANSA, shape.transa), (DESC_TRANSB, shape.transb), (DESC_POINTER_MODE, shape.pointer_mode)];
    let described = desc_attributes.iter().all(|(attribute, value)| {
        // SAFETY: each of these attributes is an int32, read from `value` (4 bytes).
        unsafe { desc_set(desc, *attribute, (value as *const c_int).cast(), 4) == CublasStatus::SUCCESS }
    });
    let mut preference = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    let preferred = described && unsafe { pref_create(&mut preference) } == CublasStatus::SUCCESS;
    let limited = preferred && {
        let limit = WORKSPACE_LIMIT;
        // SAFETY: MAX_WORKSPACE_BYTES is a uint64, read from `limit` (8 bytes).
        let set = unsafe { pref_set(preference, PREF_MAX_WORKSPACE_BYTES, (&limit as *const u64).cast(), 8) };
        set == CublasStatus::SUCCESS
            && shape.alignments.iter().chain(std::iter::once(&shape.alignments[2])).zip(PREF_MIN_ALIGNMENT).all(
                |(alignment, attribute)| {
                    let bytes = *alignment as u32;
                    // SAFETY: each MIN_ALIGNMENT attribute is a uint32, read from `bytes`.
                    *alignment >= FULL_ALIGNMENT
                        || unsafe { pref_set(preference, attribute, (&bytes as *const u32).cast(), 4) }
                            == CublasStatus::SUCCESS
                },
            )
    };
    // SAFETY: an all-zero heuristic result is a valid (empty) value of the C struct.
    let mut result: HeuristicResult = unsafe { std::mem::zeroed() };
    let mut returned: c_int = 0;
    let [a, b, c] = layouts.0;
    // SAFETY: handle, descriptor, layouts and preference made above; room for one result.
    let asked = limited
        && unsafe {
            heuristic(
                handle,
                desc,
                a,
                b,
                c,
                c,
                preference,
                1,
                (&mut result as *mut HeuristicResult).cast(),
                &mut returned,
            )
        } == CublasStatus::SUCCESS;
    if preferred {
        // SAFETY: the preference made above, destroyed once.
        unsafe { pref_destroy(preference) };
    }
    let algorithm = WholeAlgorithm { handle, desc, algo: result.algo, workspace: result.workspace as u64 };
    if !asked || returned < 1 || result.state != CublasStatus::SUCCESS {
        destroy_descriptor(Some(algorithm));
        return None;
    }
    Some(algorithm)
}

/// One part of a product, as `run_part` computes it: `m` x `n` of the output whose
/// first element is at `c` (the whole shape's leading dimensions), from the operands at
/// `a` and `b`, with the program's scalars, `workspace` the VRAM its algorithm may use.
#[derive(Clone, Copy)]
pub(super) struct Part {
    pub(super) m: i64,
    pub(super) n: i64,
    pub(super) alpha: *const c_void,
    pub(super) beta: *const c_void,
    pub(super) a: *const c_void,
    pub(super) b: *const c_void,
    pub(super) c: *mut c_void,
    pub(super) workspace: CuDevicePtr,
}

/// Computes `part` of a product with the whole product's algorithm, on `stream`.
///
/// # Safety
/// `part.a`, `.b`, `.c` point to the operands and output of an `m` x `n` x `shape.k`
/// product laid out as `shape` says (device memory of the stream's context); `alpha` and
/// `beta` are scalars of the call's scale type where its pointer mode says; `workspace`
/// is `algorithm.workspace` bytes of VRAM that nothing else uses until the product has
/// run.
pub(super) unsafe fn run_part(
    algorithm: &WholeAlgorithm,
    shape: &GemmShape,
    part: &Part,
    stream: Stream,
) -> Option<CublasStatus> {
    let Part { m, n, alpha, beta, a, b, c, workspace } = *part;
    let matmul = real::cublasLtMatmul()?;
    let layouts = Layouts::new(shape, m, n)?;
    let [a_layout, b_layout, c_layout] = layouts.0;
    let workspace_bytes = usize::try_from(algorithm.workspace).ok()?;
    // SAFETY: the caller's operands, scalars and workspace (see # Safety); the descriptor
    // and algorithm are the whole shape's (WholeAlgorithm's invariant), the layouts this
    // part's; C and D are the same output, as cublasGemmEx writes it in place.
    Some(unsafe {
        matmul(
            algorithm.handle,
            algorithm.desc,
            alpha,
            a,
            a_layout,
            b,
            b_layout,
            beta,
            c,
            c_layout,
            c,
            c_layout,
            algorithm.algo.as_ptr().cast(),
            workspace as *mut c_void,
            workspace_bytes,
            stream,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(compute_type: c_int, math_mode: c_int) -> GemmShape {
        GemmShape {
            transa: 1,
            transb: 0,
            m: 14336,
            n: 1,
            k: 4096,
            types: [14; 3],
            lds: [4096, 4096, 14336],
            compute_type,
            math_mode,
            pointer_mode: 0,
            alignments: [256; 3],
        }
    }

    #[test]
    fn cublas_calls_map_to_cublaslt_types_or_stay_with_cublas() {
        assert_eq!(linear(COMPUTE_32F, MATH_DEFAULT).lt_types(), Some((COMPUTE_32F, R_32F)));
        assert_eq!(linear(COMPUTE_32F, MATH_TF32_TENSOR_OP).lt_types(), Some((COMPUTE_32F_FAST_TF32, R_32F)));
        assert_eq!(linear(COMPUTE_16F, MATH_DEFAULT).lt_types(), Some((COMPUTE_16F, R_16F)));
        // Forbidden reduced-precision reductions (16), pedantic math (2), pedantic compute
        // (69), legacy compute types (0): no one cuBLASLt equivalent.
        assert_eq!(linear(COMPUTE_32F, 16).lt_types(), None);
        assert_eq!(linear(COMPUTE_32F, 2).lt_types(), None);
        assert_eq!(linear(69, MATH_DEFAULT).lt_types(), None);
        assert_eq!(linear(0, MATH_DEFAULT).lt_types(), None);
    }

    #[test]
    fn a_part_keeps_the_stored_layout_of_each_operand() {
        // A used transposed: stored k x m'; B as stored: k x n; C: m' x n.
        assert_eq!(linear(COMPUTE_32F, 0).stored(1024, 1), [(4096, 1024), (4096, 1), (1024, 1)]);
        let columns = GemmShape { transa: 0, transb: 1, ..linear(COMPUTE_32F, 0) };
        assert_eq!(columns.stored(512, 256), [(512, 4096), (256, 4096), (512, 256)]);
    }
}
