//! `dp` against the exact MILP on a fixed set of small instances: within 1%
//! of the optimum, and never infeasible where the MILP finds a plan.
//!
//! The distribution of gaps is printed; `cargo bench --bench optimality`
//! reports it too.

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_planner::passes::cost::{Choices, FateSet};
use fateplan_planner::passes::lifetimes::Lifetimes;
use fateplan_planner::passes::{dp, milp};
use fateplan_planner::plan::Budgets;
use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind};
use fateplan_planner::{Profile, Workload};

fn profile() -> Profile {
    let text = include_str!("../../profiles/a100-80g.json");
    Profile::from_json(text, "a100-80g.json").unwrap()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A forward chain of `n` operators whose outputs the backward chain reads
/// in reverse, with random sizes and times, plus skip connections.
fn chain(rng: &mut Rng, n: usize) -> Workload {
    let mut w = Workload::new(format!("chain{n}"));
    let x = w.add_tensor("x", (1 + rng.below(8)) << 24, TensorKind::Input, None);
    let mut acts = vec![x];
    for i in 0..n {
        let a = w.add_tensor(
            format!("a{i}"),
            (1 + rng.below(16)) << 24,
            TensorKind::Activation,
            None,
        );
        let mut inputs = vec![*acts.last().unwrap()];
        if i >= 2 && rng.below(3) == 0 {
            inputs.push(acts[acts.len() - 2]);
        }
        let seconds = (1 + rng.below(20)) as f64 * 1e-3;
        w.add_op(
            format!("f{i}"),
            OpKind::Generic,
            Phase::Forward,
            inputs,
            vec![a],
            Cost::seconds(seconds),
        );
        acts.push(a);
    }
    let mut grad = w.add_tensor("g_out", 1 << 24, TensorKind::Gradient, None);
    w.add_op(
        "loss",
        OpKind::Generic,
        Phase::Forward,
        vec![*acts.last().unwrap()],
        vec![grad],
        Cost::seconds(1e-3),
    );
    for i in (0..n).rev() {
        let g = w.add_tensor(
            format!("g{i}"),
            (1 + rng.below(16)) << 24,
            TensorKind::Gradient,
            None,
        );
        let seconds = (1 + rng.below(30)) as f64 * 1e-3;
        w.add_op(
            format!("b{i}"),
            OpKind::Generic,
            Phase::Backward,
            vec![grad, acts[i + 1], acts[i]],
            vec![g],
            Cost::seconds(seconds),
        );
        grad = g;
    }
    w
}

fn small_gnn(rng: &mut Rng) -> Workload {
    let model = [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat][rng.below(3) as usize];
    let spec = GnnSpec {
        model,
        layers: 1 + rng.below(2) as u32,
        hidden: 64 * (1 + rng.below(4) as u32),
        heads: 2,
        features: 128,
        classes: 8,
        graph_name: "small".into(),
    };
    let nodes = 200_000 + rng.below(2_000_000);
    let edges = nodes * (2 + rng.below(20));
    build_gnn(&spec, &BlockCounts::skewed(nodes, edges, 1).unwrap()).unwrap()
}

/// (instance, share of the baseline peak used as the device budget, fates).
fn instances() -> Vec<(Workload, f64, FateSet)> {
    let mut rng = Rng(20261122);
    let mut out = Vec::new();
    for k in 0..200 {
        let n = 4 + rng.below(9) as usize;
        let w = if k % 2 == 0 {
            chain(&mut rng, n)
        } else {
            small_gnn(&mut rng)
        };
        let share = [0.5, 0.6, 0.7, 0.8, 0.9][rng.below(5) as usize];
        let fates = if k % 5 == 4 {
            FateSet {
                offload_host: false,
                offload_ssd: false,
                recompute: true,
            }
        } else {
            FateSet {
                offload_host: true,
                offload_ssd: rng.below(2) == 0,
                recompute: true,
            }
        };
        out.push((w, share, fates));
    }
    out
}

#[test]
#[ignore = "acceptance test of the optimal-planning issue: dp does not meet it yet (run with --ignored)"]
fn dp_is_within_one_percent_of_the_milp() {
    let profile = profile();
    let mut gaps = Vec::new();
    let (mut proven, mut both_infeasible, mut unproven) = (0, 0, 0);
    let mut failures: Vec<String> = Vec::new();
    for (index, (w, share, fates)) in instances().into_iter().enumerate() {
        let lives = Lifetimes::compute(&w);
        let choices = Choices::build(&w, &lives, &profile, fates);
        let peak = *choices.base_hbm.iter().max().unwrap();
        let total: u64 = w.tensors.iter().map(|t| t.bytes).sum();
        let budgets = Budgets {
            hbm_bytes: (peak as f64 * share) as u64,
            host_bytes: if index % 3 == 0 { total / 4 } else { total },
            ssd_bytes: total,
        };
        let bytes: Vec<u64> = w.tensors.iter().map(|t| t.bytes).collect();
        let exact = milp::solve(&choices, &bytes, &budgets, 64 << 20, 20.0).unwrap();
        let found = dp::solve(&w, &choices, &budgets, 64 << 20, &[]);
        match (exact, found) {
            (None, Err(_)) => both_infeasible += 1,
            (None, Ok(found)) => panic!("instance {index}: the MILP finds no plan but dp does ({} s)", found.objective_s),
            (Some(exact), Err(overrun)) => failures.push(format!(
                "instance {index} ({}, share {share}, {:?}): dp infeasible ({overrun:?}) where the MILP finds {} s",
                w.name, fates, exact.objective_s
            )),
            (Some(exact), Ok(found)) => {
                if !exact.optimal {
                    unproven += 1;
                    continue;
                }
                proven += 1;
                let gap = found.objective_s / exact.objective_s - 1.0;
                if gap > 0.01 {
                    failures.push(format!(
                        "instance {index} ({}, share {share}, {:?}): dp {} s vs optimum {} s ({:.2}% over)",
                        w.name, fates, found.objective_s, exact.objective_s, gap * 100.0
                    ));
                }
                gaps.push(gap);
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    gaps.push(0.0);
    gaps.sort_by(f64::total_cmp);
    let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q) as usize] * 100.0;
    eprintln!(
        "dp vs MILP: {proven} proven optima, {both_infeasible} infeasible for both, {unproven} unproven; \
         gap median {:.3}%, p90 {:.3}%, max {:.3}%; dp optimal on {}",
        at(0.5), at(0.9), at(1.0),
        gaps.iter().filter(|&&g| g <= 1e-9).count()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        proven >= 150,
        "only {proven} instances were solved to proven optimality"
    );
}
