//! CUDA access: the C types (`ffi`), finding the real libraries (`libs`), the one table
//! of every function the shim hooks or calls with typed accessors of the real ones
//! (`real`; its cuBLAS routines over device arrays of pointers in
//! `pointer_array_functions`), the count of stream captures open (`captures`), and the
//! typed driver calls the shim makes for its own work (`calls`, and what the driver says
//! of a device in `device_facts`, both through `driver_call!`), whose functions are this
//! folder's face: `cuda::mem_alloc`, `cuda::event_record`, ...
//!
//! May import: `sys`.

#[macro_use]
mod driver_call;
pub(crate) mod captures;
pub(crate) mod ffi;
pub(crate) mod launch_ffi;
pub(crate) mod libs;
pub(crate) mod pointer_array_functions;
pub(crate) mod real;
mod calls;
mod device_facts;
pub(crate) mod sm_copy;

pub(crate) use calls::*;
pub(crate) use device_facts::*;
