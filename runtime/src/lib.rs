//! fateplan's runtime: everything that touches files and hardware.
//!
//! For now this is graph input (PyG-named `.npy` folders and edge-list text
//! files), which the planner's GNN builder needs for real block sizes. The
//! executor and its backends build on it.

mod error;
pub mod graph;
pub mod npy;

pub use error::{Error, Result};
