//! Which allocations live tiering may move (GREENBOOST_TIERING): `on` every one, `off`
//! none, and `auto` those where moving can pay:
//! - T2 that the device's state sent there (the driver's out-of-memory, or other users and
//!   the headroom while the budget had room), since VRAM may come back;
//! - VRAM and T2 alike where others contest the device (`budget::contested`), so that
//!   what the program loaded first can give its room to what it computes with;
//! - where the budget binds (`budget::budget_binds`: the program needs more than it),
//!   the weight pool that does not fit (llama.cpp's and ollama's one buffer, moved in
//!   2 MiB parts) if the budget holds half of it at least (`pool_moves`), and what the
//!   program allocates after its pool or once it computes (KV cache, activations): what
//!   it re-reads can then take the VRAM of what it reads least. Weights loaded one tensor
//!   at a time before that stay pinned T2, which GEMM staging copies at the link's full
//!   rate (0.93 of it out of movable T2); so does a pool mostly in T2 (split).
//!
//! Movable memory is CUDA managed memory, which CUDA IPC cannot export: that is the price,
//! and why `auto` does not make all memory movable.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cuda;
use crate::cuda::ffi::CuDevice;
use crate::memory::budget;
use crate::rules::config::{self, TieringChoice};
use crate::rules::placement::{Phase, Rules};
use crate::sys::log::Mib;

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

/// With `auto`, where the budget binds on `device`: the pool of weights if it moves
/// (`pool_moves`), and what follows it or is allocated while computing; not the tensors
/// a program loads before.
fn movable_where_bound(size: u64, device: CuDevice) -> bool {
    if !budget::budget_binds(device) {
        return false;
    }
    let moves = match budget::phase_of(size, device) {
        Phase::Loading => false,
        Phase::Pooling => cuda::physical_vram(device)
            .is_some_and(|physical| pool_moves(size, Rules::of(config::get()).budget(device, physical))),
        Phase::LoadingAfterPool | Phase::Computing => true,
    };
    if moves && !BOUND_MOVES_SAID.swap(true, Ordering::Relaxed) {
        info!(
            "the VRAM budget binds on device {}: live tiering moves what the program re-reads into VRAM in place of what it reads least ({} and later allocations are movable; GREENBOOST_TIERING=off keeps them placed once, as CUDA IPC needs)",
            device,
            Mib(size)
        );
    }
    moves
}

/// The first allocation made movable because the budget binds is explained once.
static BOUND_MOVES_SAID: AtomicBool = AtomicBool::new(false);

/// Whether a pool of weights of `size` is movable under `budget`: when the budget holds
/// half of it at least. A pool mostly in T2 stays pinned and split: most of what its
/// prompts read is then in T2, which GEMM staging copies at the link's full rate out of
/// pinned memory. llama.cpp, a 29 GiB mixture of experts under an 8 GiB budget on an
/// H100, split: 782 prompt and 23.5 generated tokens/s
/// (bench/results/llamacpp-moe-2026-12-06-75446c3254bc.md). Movable: 440 and 13.3, its
/// parts trading places while it loaded, 13.2 GB demoted
/// (bench/results/llamacpp-moe-2026-12-06-5aafd9a89e03.md); 475 and 24.3 in a build
/// where loading could not heat it (bench/results/2026-12-06-b1dc013601a6-longctx-ab-h100.md).
fn pool_moves(size: u64, budget: u64) -> bool {
    size / 2 <= budget
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn a_pool_moves_when_the_budget_holds_half_of_it() {
        assert!(pool_moves(16 * G, 14 * G), "llama.cpp's 8B weights under a 14 GiB budget");
        assert!(pool_moves(16 * G, 8 * G));
        assert!(!pool_moves(29 * G, 8 * G), "a 29 GiB mixture of experts under 8 GiB");
    }
}
