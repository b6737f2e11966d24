//! The fixed set of small instances on which `dp` is checked against the
//! exact MILP (`planner/tests/optimality.rs` asserts it, `cargo bench
//! --bench optimality` prints the distribution of gaps and the times).
//!
//! Candidates are drawn from a fixed seed: random forward/backward chains
//! with skip connections, and 1–2 layer GCN, GraphSAGE and GAT workloads
//! on one partition of a skewed random graph; device budgets at 50–90% of
//! the retained peak; every fifth one recompute-only, every third one
//! short of host memory. Those the MILP proves infeasible are skipped (dp
//! must find no plan there either), until the set holds the asked number
//! of instances the MILP can solve.

use std::time::Instant;

use crate::blocks::BlockCounts;
use crate::gnn::{build_gnn, GnnModel, GnnSpec};
use crate::passes::cost::{Choices, FateSet};
use crate::passes::lifetimes::Lifetimes;
use crate::passes::{dp, milp};
use crate::plan::Budgets;
use crate::workload::{Cost, OpKind, Phase, TensorKind, Workload};
use crate::{Profile, Result, Tier};

/// The seed of the candidate stream.
pub const SEED: u64 = 20261122;

/// Staging bytes reserved on the host when a plan uses the SSD.
const STAGING_BYTES: u64 = 64 << 20;

/// Seconds the MILP may take per instance.
const MILP_LIMIT_S: f64 = 20.0;

/// A linear congruential stream (Knuth's MMIX constants): the same seed
/// gives the same instances on every platform.
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
    let x = w.add_tensor(
        "x",
        (1 + rng.below(8)) << 24,
        TensorKind::Input,
        Some(Tier::Host),
    );
    let mut acts = vec![x];
    for i in 0..n {
        let a = w.add_tensor(
            format!("a{i}"),
            (1 + rng.below(16)) << 24,
            TensorKind::Activation,
            None,
        );
        let mut inputs = vec![acts[i]];
        if i >= 2 && rng.below(3) == 0 {
            inputs.push(acts[i - 1]);
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
        vec![acts[n]],
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

fn small_gnn(rng: &mut Rng) -> Result<Workload> {
    let model = [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat][rng.below(3) as usize];
    let spec = GnnSpec {
        model,
        layers: 1 + rng.below(2) as u32,
        hidden: 64 * (1 + rng.below(4) as u32),
        heads: 2,
        features: 128,
        classes: 8,
        graph_name: "small".into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    };
    let nodes = 200_000 + rng.below(2_000_000);
    let edges = nodes * (2 + rng.below(20));
    build_gnn(&spec, &BlockCounts::skewed(nodes, edges, 1)?)
}

/// One candidate: a workload, the device budget as a share of its
/// retained peak, the fates allowed, and whether host memory is short.
pub struct Candidate {
    pub index: usize,
    pub workload: Workload,
    pub share: f64,
    pub fates: FateSet,
    pub host_short: bool,
}

/// The `index`-th candidate onwards, in a fixed order.
pub fn candidates() -> impl Iterator<Item = Result<Candidate>> {
    let mut rng = Rng(SEED);
    (0..).map(move |index| {
        let n = 4 + rng.below(9) as usize;
        let workload = if index % 2 == 0 {
            chain(&mut rng, n)
        } else {
            small_gnn(&mut rng)?
        };
        let share = [0.5, 0.6, 0.7, 0.8, 0.9][rng.below(5) as usize];
        let fates = if index % 5 == 4 {
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
        Ok(Candidate {
            index,
            workload,
            share,
            fates,
            host_short: index % 3 == 0,
        })
    })
}

/// One instance solved both ways.
pub struct Solved {
    pub index: usize,
    pub name: String,
    pub share: f64,
    pub fates: FateSet,
    pub milp_s: f64,
    /// Whether the MILP proved its plan optimal within its time limit.
    pub proven: bool,
    /// `None`: dp found no plan.
    pub dp_s: Option<f64>,
    pub milp_seconds: f64,
    pub dp_seconds: f64,
}

impl Solved {
    /// dp's objective over the MILP's, minus one; `None` if dp found no plan.
    pub fn gap(&self) -> Option<f64> {
        self.dp_s.map(|dp| dp / self.milp_s - 1.0)
    }
}

/// What comparing dp with the MILP found.
pub struct Comparison {
    pub solved: Vec<Solved>,
    /// Candidates both found infeasible.
    pub infeasible: usize,
    /// Candidates the MILP found infeasible but dp planned: a model
    /// mismatch (dp's plan would break a budget the MILP enforces).
    pub mismatches: Vec<String>,
    /// Candidates skipped because the MILP solver failed (numerically).
    pub solver_errors: Vec<String>,
}

/// Solves candidates in order until `count` have a MILP plan (or
/// `max_candidates` were tried).
pub fn compare(profile: &Profile, count: usize, max_candidates: usize) -> Result<Comparison> {
    let mut out = Comparison {
        solved: Vec::new(),
        infeasible: 0,
        mismatches: Vec::new(),
        solver_errors: Vec::new(),
    };
    for candidate in candidates().take(max_candidates) {
        if out.solved.len() == count {
            break;
        }
        let c = candidate?;
        let w = &c.workload;
        let lives = Lifetimes::compute(w);
        let choices = Choices::build(w, &lives, profile, c.fates);
        let peak = choices.base_hbm.iter().copied().max().unwrap_or(0);
        let total: u64 = w.tensors.iter().map(|t| t.bytes).sum();
        let budgets = Budgets {
            hbm_bytes: (peak as f64 * c.share) as u64,
            host_bytes: if c.host_short { total / 4 } else { total },
            ssd_bytes: total,
        };
        let bytes: Vec<u64> = w.tensors.iter().map(|t| t.bytes).collect();
        let started = Instant::now();
        let exact = match milp::solve(&choices, &bytes, &budgets, STAGING_BYTES, MILP_LIMIT_S) {
            Ok(exact) => exact,
            Err(error) => {
                out.solver_errors
                    .push(format!("candidate {} ({}): {error}", c.index, w.name));
                continue;
            }
        };
        let milp_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let found = dp::solve(w, &choices, &budgets, STAGING_BYTES, &dp::Held::default());
        let dp_seconds = started.elapsed().as_secs_f64();
        match exact {
            None => match found {
                Err(_) => out.infeasible += 1,
                Ok(found) => out.mismatches.push(format!(
                    "candidate {} ({}): the MILP finds no plan but dp does ({} s)",
                    c.index, w.name, found.objective_s
                )),
            },
            Some(exact) => out.solved.push(Solved {
                index: c.index,
                name: w.name.clone(),
                share: c.share,
                fates: c.fates,
                milp_s: exact.objective_s,
                proven: exact.optimal,
                dp_s: found.ok().map(|f| f.objective_s),
                milp_seconds,
                dp_seconds,
            }),
        }
    }
    Ok(out)
}
