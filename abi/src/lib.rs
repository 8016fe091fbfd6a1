//! The `/dev/greenboost` ioctl ABI for userspace (shim, CLI, tests).
//!
//! The definitions live in `greenboost_abi.rs`, which the kernel module includes with
//! `#[path]` so both sides compile the very same items.
#![no_std]

mod greenboost_abi;
pub use greenboost_abi::*;
