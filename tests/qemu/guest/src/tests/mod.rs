//! The test groups; `main.rs` lists which run under which subcommand.
pub mod access;
pub mod alloc;
pub mod attach;
pub mod fault;
pub mod cache;
pub mod charges;
pub mod fuzz;
pub mod held;
pub mod importer;
pub mod killable;
pub mod lifecycle;
pub mod mmap;
pub mod numa;
pub mod pin;
pub mod pressure;
pub mod stats;
pub mod stress;
