//! The allocation engine: the one allocation and free procedure every pointer-returning
//! hook runs (`allocate`: placement, then VRAM, a split range, movable T2 or T2; room
//! made at once for the working set, `make_room`, also the staging scratch's), and live tiering's thread
//! (`tier_thread`) with the per-GPU lock it shares with the other processes under the
//! shim (`tier_lock`), the heat table it logs (`heat_table`), and the VRAM the driver kept
//! of what moved out, given back (`give_back`) or carried from room made to the next tick
//! (`room_kept`).
//!
//! May import: `sys`, `cuda`, `rules`, `memory`.

pub(crate) mod allocate;
mod give_back;
mod heat_table;
pub(crate) mod make_room;
mod room_kept;
mod tier_lock;
pub(crate) mod tier_thread;
