//! Launch observation: every kernel launch the program makes (directly, through the
//! runtime, or as a node of a CUDA graph), counted and read for the allocations its
//! parameters name, at a cost per launch of a few lookups without a lock. What it finds
//! is each allocation's use (`memory::address_index`), the heat that placement reads.
//!
//! Faces: `kernels` (a launch or host function the driver accepted), `graphs` (graph
//! instantiation, updates, launches), `capture` (stream captures begun and ended),
//! `tensor_maps` (maps the program encoded).
//!
//! May import: `sys`, `cuda`, `memory`.

pub(crate) mod capture;
pub(crate) mod graphs;
pub(crate) mod kernels;
mod naming;
mod param_layout;
pub(crate) mod tensor_maps;
