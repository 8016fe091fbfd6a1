//! The memory the shim holds and its accounting: the budget (VRAM and T2 as reservations
//! and charges, the device's measured state), the T2 path (backend memory registered
//! with CUDA, `t2`, with its cache `t2cache`), split and movable allocations, VMM
//! placement, the registry of live allocations by device pointer (and its lock-free
//! address index, which kernel launches are named against through each thread's memo,
//! `recent_ranges`), freeing now or after
//! a stream (`release`), and what the memory queries report (`report`). No hook and no
//! policy decision lives here: `engine` decides and calls in.
//!
//! May import: `sys`, `cuda`, `rules`, `backend`.

pub(crate) mod address_index;
pub(crate) mod budget;
pub(crate) mod t2;
pub(crate) mod movable;
pub(crate) mod movable_part;
pub(crate) mod recent_ranges;
pub(crate) mod registry;
pub(crate) mod start_counts;
pub(crate) mod release;
pub(crate) mod report;
pub(crate) mod split;
mod t2cache;
pub(crate) mod vmm;
