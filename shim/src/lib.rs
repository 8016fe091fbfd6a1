//! libgreenboost_cuda.so: an LD_PRELOAD library that lets an unmodified CUDA program
//! allocate past its VRAM. Allocations that fit the VRAM budget stay in VRAM (T1); the
//! rest are backed by pinned system RAM (T2) that the GPU reads over PCIe, from the
//! greenboost kernel module or, without it, from anonymous huge pages.
//!
//! - `hooks`: the one table of intercepted functions (exports, real-function cache);
//! - `routing`: dlsym / dlopen / cuGetProcAddress / cudaGetDriverEntryPoint;
//! - `runtime`, `driver`, `nvml`: the hooks themselves;
//! - `tiers`: placement, T2 allocation and freeing, registry; `backend`: T2 memory;
//!   `split`: allocations split between a VRAM head and a T2 tail;
//! - `config`: environment variables (see README.md); `state`: init, stats, exit summary.

#[macro_use]
mod log;
mod backend;
mod config;
mod cuda;
mod driver;
mod elf;
mod ffi;
mod hooks;
mod libs;
mod lock;
mod nvml;
mod routing;
mod runtime;
mod staging;
mod split;
mod state;
mod t2cache;
mod tiers;
