//! libgreenboost_cuda.so: an LD_PRELOAD library that lets an unmodified CUDA program
//! allocate past its VRAM. Allocations that fit stay in VRAM (T1); the rest are backed
//! by pinned system RAM (T2) that the GPU reads over PCIe, from the greenboost kernel
//! module or, without it, from anonymous huge pages.
//!
//! One folder per layer, declared below bottom first; each imports only the folders
//! below it, and each folder's `mod.rs` states its contract and declares its face.
//! README.md has the map (a row per folder: what it holds, what it may import; a row
//! per file), and `scripts/check-layers.py shim` checks it against the code.
//!
//! Lock order: one table, `sys::lock_order` (rank, what each lock protects, what may be
//! done while it is held, what the fork handlers do with it); every mutex's type carries
//! its rank, and the `lock-order` feature checks at every acquisition that ranks only
//! increase.

#[macro_use]
mod sys;
mod cuda;
mod rules;
mod backend;
mod memory;
mod launch;
mod engine;
mod gemm;
mod hooks;

mod exports;
mod lifecycle;
