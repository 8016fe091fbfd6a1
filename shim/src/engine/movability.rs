//! Which allocations live tiering may move (GREENBOOST_TIERING): `on` every one, `off`
//! none, and `auto` those where moving can pay:
//! - T2 that the device's state sent there (the driver's out-of-memory, or other users and
//!   the headroom while the budget had room), since VRAM may come back;
//! - VRAM and T2 alike where others contest the device (`budget::contested`), so that
//!   what the program loaded first can give its room to what it computes with;
//! - where the budget binds (`budget::budget_binds`: the program needs more than it),
//!   the weight pool that does not fit (llama.cpp's and ollama's one buffer, moved in
//!   2 MiB parts) and what the program allocates after its pool or once it computes (KV
//!   cache, activations): what it re-reads can then take the VRAM of what it reads least.
//!   Weights loaded one tensor at a time before that stay pinned T2, which GEMM staging
//!   copies at the link's full rate (0.93 of it out of movable T2).
//!
//! Movable memory is CUDA managed memory, which CUDA IPC cannot export: that is the price,
//! and why `auto` does not make all memory movable.

use crate::cuda::ffi::CuDevice;
use crate::memory::budget;
use crate::rules::config::{self, TieringChoice};
use crate::rules::placement::{Phase, Rules};

/// Whether a T2 allocation of `size` is movable; `after_oom`: the driver refused it VRAM.
pub(super) fn movable_t2_wanted(size: u64, device: CuDevice, after_oom: bool) -> bool {
    match config::get().tiering {
        TieringChoice::Off => false,
        TieringChoice::On => true,
        TieringChoice::Auto => after_oom || budget::budget_has_room(size, device) || movable_where_bound(size, device),
    }
}

/// Whether VRAM for an allocation of `size` is made movable; never below the minimum T2
/// size (too small to be worth a move).
pub(super) fn movable_vram_wanted(size: u64, device: CuDevice) -> bool {
    let config = config::get();
    if !Rules::of(config).worth_moving(size) {
        return false;
    }
    match config.tiering {
        TieringChoice::Off => false,
        TieringChoice::On => true,
        TieringChoice::Auto => budget::contested(device) || movable_where_bound(size, device),
    }
}

/// With `auto`, where the budget binds on `device`: the pool of weights and what follows
/// it or is allocated while computing, not the tensors a program loads before.
fn movable_where_bound(size: u64, device: CuDevice) -> bool {
    budget::budget_binds(device) && budget::phase_of(size, device) != Phase::Loading
}
