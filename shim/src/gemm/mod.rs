//! GEMM staging: a cuBLAS or cuBLASLt product described once (`cublas_gemm`, `product`),
//! what is done with it decided by one pure function (`stage_plan`: read in place, its
//! T2 operands copied whole into a per-context VRAM scratch, copied in slices, or
//! streamed through the scratch's halves) and carried out by the executor (`staging`,
//! with `staging_slices` and `staging_streamed`); each slice computed with the whole
//! product's cuBLASLt algorithm (`lt_algo`) once its shape proved bit-identical
//! (`verdicts`).
//!
//! Face: `run_staged`, the product's description (`Operand`, `Slice`, `element_bytes`,
//! `span_bytes`) and the cuBLAS call's (`cublas_gemm`).
//!
//! May import: `sys`, `cuda`, `rules`, `memory`, `engine` (room made for the scratch).

pub(crate) mod cublas_gemm;
mod lookahead;
mod lt_algo;
mod product;
mod slice_plan;
mod stage_plan;
mod staging;
mod staging_slices;
mod staging_streamed;
mod verdicts;
mod vram_buffer;

pub(crate) use product::{element_bytes, span_bytes, Operand, Slice};
pub(crate) use staging::run_staged;
