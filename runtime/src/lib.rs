//! fateplan's runtime: everything that touches files and hardware.
//!
//! - Graph input: PyG-named `.npy` folders ([`dataset`], [`graph`]),
//!   generators ([`generate`]), the CSR and its binary cache ([`csr`]), and
//!   the normalised per-block CSR the kernels read ([`blockcsr`]).
//! - The executor ([`exec`]): runs a plan's schedule over a backend with
//!   tier arenas and transfer lanes; the CPU backend ([`cpu`]), the CUDA
//!   backend ([`cuda`]) and training ([`train`]) on top of it, sharing
//!   the model's semantics ([`gnn`]).
//! - The discrete-event simulator ([`sim`]) that replays a plan on a
//!   modelled machine, and the comparison of a measured iteration with
//!   its replay ([`compare`]).
//! - The measurement of this machine as a hardware profile ([`measure`]),
//!   and the memory this process can still take ([`memory`]).

pub mod blockcsr;
pub mod cleanup;
pub mod collective;

pub mod compare;
pub mod cpu;
pub mod csr;
pub mod cuda;
pub mod dataset;
pub mod edges;
mod error;
pub mod exec;
pub mod generate;
pub mod gnn;
pub mod graph;
pub mod measure;
pub mod memory;
pub mod npy;
pub mod partition;
pub mod peers;

pub mod share;
pub mod sim;

pub mod spill;
pub mod train;

pub use error::{Error, Result};
