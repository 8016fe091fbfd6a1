//! The hooks: the exported functions made from `real`'s one table (`table`), their
//! implementations for the CUDA runtime, the driver, NVML, cuBLAS and cuBLASLt, and the
//! routing that hands them out to `dlsym`, `cuGetProcAddress` and
//! `cudaGetDriverEntryPoint` lookups. A hook falls back to the real function on any
//! internal failure.
//!
//! May import: `sys`, `cuda`, `rules`, `memory`, `engine`, `gemm`.

pub(crate) mod cublas;
pub(crate) mod cublas_lt;
pub(crate) mod driver;
pub(crate) mod nvml;
pub(crate) mod routing;
pub(crate) mod runtime;
mod table;
