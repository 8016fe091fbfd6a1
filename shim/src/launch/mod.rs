//! Launch observation: every kernel launch the program makes (directly, through the
//! runtime, or as a node of a CUDA graph), counted and read for the allocations its
//! parameters name, and every copy and memset, counted and named by the allocations it
//! writes and reads, at a cost per launch or copy of a few lookups without a lock. What
//! it finds is each allocation's use (`memory::address_index`): the heat that placement
//! reads, and the writers that look-ahead staging must wait for; what writes through
//! pointers kept in device memory, which names nothing, is counted as a writer of
//! everything (`indirect`).
//!
//! Faces: `kernels` (a launch or host function the driver accepted), `memory_ops` (a
//! copy or memset the driver accepted), `graphs` (graph instantiation, updates,
//! launches), `capture` (stream captures begun and ended), `tensor_maps` (maps the
//! program encoded), `indirect` (writers through pointer arrays, `__device__` globals
//! found).
//!
//! May import: `sys`, `cuda`, `rules`, `memory`.

pub(crate) mod capture;
pub(crate) mod graphs;
pub(crate) mod indirect;
pub(crate) mod kernel_times;
pub(crate) mod kernels;
pub(crate) mod memory_ops;
mod naming;
mod param_layout;
pub(crate) mod tensor_maps;
pub(crate) mod texture_objects;
