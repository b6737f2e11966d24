//! The rematerialisation setting: retain or recompute only, on random
//! training DAGs (`dag::random_node_link`) of 100 to 1,000 nodes, with the
//! device budget at 80% and 90% of the plain topological order's peak.
//! `dp` must be within 0.5% of the exact optimum wherever the MILP proves
//! one, and find a plan wherever the MILP does. How long dp takes on these
//! graphs is measured by `cargo bench --bench plan -- dp_remat`.
//!
//! Run: `cargo test --release -p fateplan-planner --test remat -- --nocapture`
//! to see the distribution.

use fateplan_planner::dag::{from_node_link, random_node_link};
use fateplan_planner::passes::cost::{Choices, FateSet};
use fateplan_planner::passes::lifetimes::Lifetimes;
use fateplan_planner::passes::{dp, milp};
use fateplan_planner::plan::Budgets;
use fateplan_planner::{plan, PlanOptions, Policy, Profile};

fn profile() -> Profile {
    let text = include_str!("../../profiles/a100-80g.json");
    Profile::from_json(text, "a100-80g.json").unwrap()
}

const REMAT: FateSet = FateSet {
    offload_host: false,
    offload_ssd: false,
    recompute: true,
};

#[test]
fn dp_remat_is_within_half_a_percent_of_the_milp() {
    let profile = profile();
    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    let mut unproven = 0;
    for forward in [50, 100, 250, 500] {
        for seed in 1..=5 {
            let w = from_node_link(&random_node_link(forward, seed), "random.json").unwrap();
            let lives = Lifetimes::compute(&w);
            let choices = Choices::build(&w, &lives, &profile, REMAT);
            let peak = *choices.base_hbm.iter().max().unwrap();
            for share in [0.8, 0.9] {
                let label = format!("{} nodes, seed {seed}, {share} of the peak", 2 * forward);
                let budgets = Budgets {
                    hbm_bytes: (peak as f64 * share) as u64,
                    host_bytes: 0,
                    ssd_bytes: 0,
                };
                let mut options = PlanOptions::new(Policy::Dp, &profile);
                options.budgets = budgets;
                options.fates = REMAT;
                let planned = plan(&w, &profile, &options);
                let bytes: Vec<u64> = w.tensors.iter().map(|t| t.bytes).collect();
                let exact = milp::solve(&choices, &bytes, &budgets, 0, 20.0).unwrap();
                let found = dp::solve(&w, &choices, &budgets, 0, &dp::Held::default());
                match (exact, found, planned) {
                    (None, Err(_), _) => {}
                    (Some(exact), Ok(found), Ok(_)) if exact.optimal => {
                        let gap = found.objective_s / exact.objective_s - 1.0;
                        if gap > 0.005 {
                            failures.push(format!(
                                "{label}: dp {:.4} s vs optimum {:.4} s ({:.2}% over)",
                                found.objective_s,
                                exact.objective_s,
                                gap * 100.0
                            ));
                        }
                        gaps.push(gap);
                    }
                    (Some(exact), Ok(_), Ok(_)) => {
                        let _ = exact;
                        unproven += 1;
                    }
                    (exact, found, planned) => failures.push(format!(
                        "{label}: MILP {:?}, dp {:?}, plan {:?}",
                        exact.map(|e| e.objective_s),
                        found.map(|f| f.objective_s),
                        planned.map(|p| p.predicted.iteration_s)
                    )),
                }
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    let max = gaps.last().copied().unwrap_or(0.0);
    eprintln!(
        "remat: {} proven optima, {unproven} unproven; dp exact on {}, max gap {:.3}%",
        gaps.len(),
        gaps.iter().filter(|&&g| g <= 1e-9).count(),
        max * 100.0
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
