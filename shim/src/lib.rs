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
//! Lock order — the shim's only locks, each taken for a few map operations, none held
//! across a CUDA or backend call, none held while a lock earlier in the list is taken:
//! `registry::REGISTRY`, then `vmm::VMM`, then the T2 cache's (`host::CACHE`), then
//! `release::PENDING`. `staging::SCRATCH` is held across the asynchronous enqueues of
//! one staged product and is taken while no other lock is held; under it only
//! the budget's counters are touched (a sliced product's verification reserves VRAM),
//! none of the list's locks, so SCRATCH comes before the whole list. `lt_algo::WHOLE_ALGORITHMS`
//! (the whole products' cuBLASLt algorithms) is a leaf, taken in the hook before staging
//! with no other lock held. `movable::LIVE` (the movable allocations, for
//! the tier thread) is held with no other lock and comes last; each movable
//! allocation's own `state` lock is a leaf, never held across a CUDA call. The fork
//! handlers (`lifecycle`) take the five of the list in this order, not SCRATCH: a child
//! forked after CUDA use never stages. `tier_lock`'s flock (per GPU), shared with the
//! other processes under the shim, is the one lock held across CUDA calls (a tick's
//! measurement and moves), by the tier thread only and before any of the others, which
//! it takes and drops beneath it; it waits for it 2 s at most, so no process's lock can
//! stall another's program, and the fork handlers leave it (the child closes its copy).

#[macro_use]
mod sys;
mod cuda;
mod rules;
mod backend;
mod memory;
mod engine;
mod gemm;
mod hooks;

mod exports;
mod lifecycle;
