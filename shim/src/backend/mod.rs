//! Where T2 comes from: the kernel module's DMA-BUF buffers (`kmod`) or anonymous
//! huge-page memory (`userspace`), both behind the `Backend` trait (`t2_buffer`), one of
//! them chosen once per process (`choice`, whose functions are this folder's face:
//! `backend::get`, `backend::name`, ...). A backend hands out host mappings; registering
//! them with CUDA is `memory`'s.
//!
//! May import: `sys`, `cuda`, `rules`.

pub(crate) mod kmod;
pub(crate) mod t2_buffer;
mod userspace;
mod choice;

pub(crate) use choice::*;
