//! The CUDA backend: the executor's operators on an NVIDIA GPU through
//! cudarc, with the same plans, operators and dropout masks as the CPU
//! backend.
//!
//! - [`nvrtc`]: compiles `kernels/cuda/*.cu` with NVRTC at first use (for
//!   the device's exact architecture, so that a newer NVRTC than the
//!   driver still loads), with an optional folder cache; the libraries
//!   are loaded at run time and checked before any call, so a machine
//!   without CUDA builds, runs the CPU backend, and gets a clear error
//!   from this one.
//! - [`device`]: the context, its compute, host-to-device and
//!   device-to-host streams, cuBLAS, the device pool under the budget,
//!   pinned host buffers, and the executor's [`crate::exec::Mover`].
//! - [`gnn`]: [`CudaGnn`], the backend.
//! - `keep`: buffers kept for reuse by kind and size (the pinned ones).
//!
//! Architecture invariant: nothing outside this module names cudarc.

pub mod device;
pub mod gnn;
mod keep;
pub mod nvrtc;

pub use device::{copy_rates, probe, CopyRates, CudaOptions, DeviceInfo};
pub use gnn::CudaGnn;
