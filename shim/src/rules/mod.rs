//! The rules: the configuration read once from the environment (`config`) and the pure
//! functions that decide from it and from measured figures — where an allocation goes
//! and what the memory queries report (`placement`), which movable allocations live
//! tiering moves (`tiering`), how hot each part is (`read_rate`), how much of what a
//! timed kernel named it read (`read_share`), what gives its room to an allocation made
//! while computing (`room_victims`). No CUDA call, no lock, no global state besides
//! `Config`; unit-tested here.
//!
//! May import: `sys`, `cuda` (its C types only).

pub(crate) mod config;
pub(crate) mod placement;
pub(crate) mod range_heat;
pub(crate) mod read_rate;
pub(crate) mod read_share;
pub(crate) mod room_victims;
pub(crate) mod tiering;
