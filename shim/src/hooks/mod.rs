//! The hooks: the exported functions made from `real`'s one table (`table`), their
//! implementations for the CUDA runtime, the driver, NVML, cuBLAS and cuBLASLt, and the
//! routing that hands them out to `dlsym`, `cuGetProcAddress` and
//! `cudaGetDriverEntryPoint` lookups. A hook falls back to the real function on any
//! internal failure.
//!
//! May import: `sys`, `cuda`, `rules`, `memory`, `launch`, `engine`, `gemm`.

mod cublas;
mod cublas_lt;
mod device_globals;
mod driver;
mod driver_routes;
mod graphs;
mod launch;
mod memory_ops;
mod nvml;
mod pointer_attributes;
mod routing;
mod runtime;
mod table;
mod tensor_maps;
mod texture_objects;
