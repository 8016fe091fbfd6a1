//! The allocation engine: the one allocation and free procedure every pointer-returning
//! hook runs (`allocate`: placement, then VRAM, a split range, movable T2 or T2, movable
//! where `movability` says; room
//! made at once for the working set, `make_room`, also the staging scratch's), and live
//! tiering's thread (`tier_thread`), the moves it and the room made carry out
//! (`tier_moves`), with the per-GPU lock it shares with the other
//! processes under the shim (`tier_lock`), the heat table it logs (`heat_table`), the VRAM
//! the driver kept of what moved out, given back (`give_back`), and what room made tells
//! the next ticks (`room_made`: what the driver kept of it, and when it was made).
//!
//! May import: `sys`, `cuda`, `rules`, `memory`.

pub(crate) mod allocate;
mod give_back;
mod heat_table;
pub(crate) mod make_room;
mod movability;
mod room_made;
mod tier_lock;
mod tier_moves;
pub(crate) mod tier_thread;
