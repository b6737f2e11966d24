//! fateplan's planner: pure computation, no I/O; the clock is read only
//! for the MILP's time limit and the planning times it reports.
//!
//! It models one training iteration ([`Workload`]) and a machine
//! ([`Profile`]), gives every tensor a [`Fate`], schedules the transfers and
//! recomputations, predicts time and memory, and checks the result with an
//! independent [`passes::sanity`] pass.

pub mod blocks;
pub mod dag;
pub mod datasets;
mod error;
pub mod exchange;
pub mod gnn;
mod json;
pub mod optimality;
pub mod passes;
pub mod plan;
pub mod planner;
pub mod policy;
pub mod profile;
pub mod scratch;
pub mod sizing;
pub mod units;
pub mod workload;

pub use error::{Error, FitsWith, Result};
pub use plan::{Budgets, Fate, Plan};
pub use planner::{explain, plan, Explanation, PlanOptions};
pub use policy::Policy;
pub use profile::Profile;
pub use workload::{OpId, TensorId, Workload};

use serde::{Deserialize, Serialize};

/// A level of the memory hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Device memory (GPU HBM, or the CPU backend's device arena).
    Hbm,
    Host,
    Ssd,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Hbm => "hbm",
            Tier::Host => "host",
            Tier::Ssd => "ssd",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
