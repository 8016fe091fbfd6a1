//! What staging knows of a cuBLAS or cuBLASLt product, as its hook describes it: each
//! operand (where it is, the bytes it spans, the width that re-reads it), how the
//! product may be cut into slices (`Slicing`), and one slice as the hook computes it
//! (`Slice`). Plain data: the plan (`stage_plan`) decides from it, the executors
//! (`staging`, `staging_slices`, `staging_streamed`) carry the decision out.

use std::ffi::{c_int, c_void};

use crate::cuda::ffi::*;

/// Alignment a staged operand keeps (bytes): cuBLAS picks kernels by pointer alignment,
/// at most 256 bytes matters.
pub(super) const KEPT_ALIGNMENT: u64 = 256;
/// Bytes per element of a `cudaDataType_t`, for the types cuBLAS multiplies; `None`
/// for sub-byte and unknown types (never staged).
pub fn element_bytes(data_type: c_int) -> Option<u64> {
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
pub fn span_bytes(rows: i64, cols: i64, ld: i64, batch: i64, stride: i64, element: u64) -> Option<u64> {
    if rows <= 0 || cols <= 0 || batch <= 0 || ld < rows || stride < 0 {
        return None;
    }
    let matrix = ld.checked_mul(cols - 1)?.checked_add(rows)?;
    let elements = stride.checked_mul(batch - 1)?.checked_add(matrix)?;
    u64::try_from(elements).ok()?.checked_mul(element)
}

/// One operand of a product: where it is, how many bytes it spans, and the width of the
/// product that re-reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub address: CuDevicePtr,
    pub bytes: u64,
    pub width: i64,
}

impl Operand {
    /// The operand of a column-major product stored `rows` x `cols` (as the program
    /// stored it, before any transpose).
    pub fn new(address: *const c_void, stored: Option<u64>, width: i64) -> Option<Operand> {
        Some(Operand { address: address as CuDevicePtr, bytes: stored?, width })
    }
}

/// How a product may be cut along one operand: `length` rows (or columns) of the
/// output, each `operand_step` bytes apart in that operand and `output_step` bytes apart
/// in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SliceAxis {
    pub(super) length: i64,
    pub(super) operand_step: u64,
    pub(super) output_step: u64,
}

/// Everything about a call that can change which kernel cuBLAS picks for it (entry
/// point, handle and math mode, transposes, dimensions, leading dimensions, types,
/// compute type, algorithm, pointer alignments), as the hook lists it.
pub(super) type Shape = [i64; 20];

/// What a hook tells staging about slicing its product: the axis along each operand
/// (`None`: that operand cannot be cut so that each slice is contiguous), the output,
/// the bytes it spans and its element size, the call's shape, and whether its slices run
/// the whole product's own algorithm (`lt_algo`), with the VRAM workspace they need
/// (`None`: each slice is a call to cuBLAS for the slice's shape).
#[derive(Clone, Copy, Debug)]
pub struct Slicing {
    pub(super) axes: [Option<SliceAxis>; 2],
    pub output: CuDevicePtr,
    pub(super) output_bytes: u64,
    pub(super) output_element: usize,
    pub(super) shape: Shape,
    pub(super) whole_algorithm_workspace: Option<u64>,
}

/// One slice of a product, as the hook calls cuBLAS for it: `count` rows of the output
/// (operand 0 cut: `m` becomes `count`) or columns (operand 1 cut: `n` becomes `count`),
/// written at `output`; `workspace`: the VRAM its whole-product algorithm may use (the
/// slices of one product run one after the other on its stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub operand: usize,
    pub count: i64,
    pub output: CuDevicePtr,
    pub workspace: CuDevicePtr,
}

impl Slice {
    /// The call's (m, n) for this slice.
    pub fn dimensions<T: TryFrom<i64> + Copy>(&self, m: T, n: T) -> (T, T) {
        let count = T::try_from(self.count).ok();
        match (self.operand, count) {
            (0, Some(count)) => (count, n),
            (_, Some(count)) => (m, count),
            _ => (m, n),
        }
    }
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
    fn a_slice_changes_the_dimension_of_its_operand() {
        let rows = Slice { operand: 0, count: 1024, output: 0, workspace: 0 };
        let columns = Slice { operand: 1, count: 256, output: 0, workspace: 0 };
        assert_eq!(rows.dimensions(4096_i32, 512), (1024, 512));
        assert_eq!(columns.dimensions(4096_i64, 512), (4096, 256));
    }
}
