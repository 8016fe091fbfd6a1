//! GEMM staging: a cuBLAS product described once (`cublas_gemm`), its T2 operands copied
//! into a per-context VRAM scratch before it runs (`staging`), in slices on a side stream
//! (`staging_slices`) or streamed through the scratch's halves (`staging_streamed`), each
//! slice computed with the whole product's cuBLASLt algorithm (`lt_algo`).
//!
//! May import: `sys`, `cuda`, `rules`, `memory`.

pub(crate) mod cublas_gemm;
mod lt_algo;
pub(crate) mod staging;
pub(crate) mod staging_slices;
mod staging_streamed;
