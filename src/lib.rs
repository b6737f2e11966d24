//! fateplan plans and executes memory for full-graph GNN training whose
//! intermediate data do not fit in GPU memory.
//!
//! This crate is the facade: it re-exports the [`planner`], [`runtime`] and
//! [`kernels`] crates and carries the built-in hardware profiles.
//!
//! ```
//! use fateplan::planner::blocks::BlockCounts;
//! use fateplan::planner::datasets::dataset;
//! use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
//! use fateplan::planner::{plan, PlanOptions, Policy};
//!
//! // ogbn-arxiv's statistics, in 16 partitions.
//! let stats = dataset("ogbn-arxiv").unwrap();
//! // `fateplan plan`'s default model (a 3-layer GCN of 256 hidden), here of 2 layers.
//! let spec = GnnSpec {
//!     layers: 2,
//!     ..GnnSpec::new(GnnModel::Gcn, stats.features, stats.classes, stats.name)
//! };
//! let blocks = BlockCounts::skewed(stats.nodes, stats.edges, 16)?;
//! let workload = build_gnn(&spec, &blocks)?;
//!
//! // Plan it on an A100 with only 100 MiB of device memory.
//! let profile = fateplan::profiles::builtin("a100-80g").unwrap();
//! let mut options = PlanOptions::new(Policy::Greedy, &profile);
//! options.budgets.hbm_bytes = 100 << 20;
//! let plan = plan(&workload, &profile, &options)?;
//!
//! assert!(plan.predicted.peak_bytes.hbm <= 100 << 20);
//! println!("{:.3} s per iteration", plan.predicted.iteration_s);
//! # Ok::<(), fateplan::planner::Error>(())
//! ```

pub use fateplan_kernels as kernels;
pub use fateplan_planner as planner;
pub use fateplan_runtime as runtime;

pub mod profiles {
    //! The hardware profiles shipped in `profiles/`, compiled in.

    use fateplan_planner::Profile;

    const BUILTIN: &[(&str, &str)] = &[
        ("a100-80g", include_str!("../profiles/a100-80g.json")),
        ("h100-sxm", include_str!("../profiles/h100-sxm.json")),
        ("h200", include_str!("../profiles/h200.json")),
        (
            "h100-measured",
            include_str!("../profiles/h100-measured.json"),
        ),
        (
            "h200-measured",
            include_str!("../profiles/h200-measured.json"),
        ),
        ("cpu-small", include_str!("../profiles/cpu-small.json")),
    ];

    /// The built-in profile called `name`.
    pub fn builtin(name: &str) -> Option<Profile> {
        let (file, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Some(
            Profile::from_json(text, &format!("profiles/{file}.json"))
                .expect("shipped profiles are valid"),
        )
    }

    pub fn names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }
}

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
