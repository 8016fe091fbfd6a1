//! Foundations: what every other folder may use and that itself uses neither CUDA nor
//! the configuration — logging, the clock, the environment, the fork-safe mutex, the
//! process phase and re-entry guard, a map read without a lock, a word per device, the counters and the record `greenboost status`
//! reads, and reading a library's ELF header. Nothing here allocates before `main` or
//! takes a lock another folder holds.
//!
//! May import: nothing in the crate.

#[macro_use]
pub(crate) mod log;
pub(crate) mod clock;
pub(crate) mod cow_map;
pub(crate) mod elf;
pub(crate) mod env;
pub(crate) mod intern_table;
pub(crate) mod key_slots;
pub(crate) mod lock;
pub(crate) mod lock_order;
pub(crate) mod per_device;
pub(crate) mod phase;
pub(crate) mod publish;
pub(crate) mod shards;
pub(crate) mod shm_path;
pub(crate) mod slot_table;
pub(crate) mod stats;
