//! fateplan's runtime: everything that touches files and hardware.
//!
//! For now this is graph input (PyG-named `.npy` folders and edge-list text
//! files), which the planner's GNN builder needs for real block sizes, and
//! the discrete-event simulator ([`sim`]) that replays a plan on a modelled
//! machine. The executor and its backends build on them.

mod error;
pub mod graph;
pub mod npy;
pub mod sim;
pub mod spill;

pub use error::{Error, Result};
