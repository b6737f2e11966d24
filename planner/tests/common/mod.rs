//! Profiles and workloads more than one test file builds. Each test file
//! is its own crate and uses some of them.
#![allow(dead_code)]

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::datasets::dataset;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_planner::plan::Budgets;
use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind};
use fateplan_planner::{plan, PlanOptions, Policy};
use fateplan_planner::{Profile, Tier, Workload};

/// The built-in `a100-80g` profile.
pub fn a100() -> Profile {
    let text = include_str!("../../../profiles/a100-80g.json");
    Profile::from_json(text, "a100-80g.json").expect("the built-in profile parses")
}

/// dp's options with the device budget at `percent` of the retain-all
/// plan's device peak (as `--hbm-budget 40%` sets it).
pub fn dp_options_at(workload: &Workload, profile: &Profile, percent: f64) -> PlanOptions {
    let roomy = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    let peak = plan(workload, profile, &roomy)
        .expect("retain-all plans with no budgets")
        .predicted
        .peak_bytes
        .hbm;
    let mut options = PlanOptions::new(Policy::Dp, profile);
    options.budgets.hbm_bytes = (peak as f64 * percent / 100.0) as u64;
    options
}

/// A 3-layer `model`, 256 hidden (4 heads for GAT), 128 features, 16
/// classes.
pub fn gnn_spec(model: GnnModel) -> GnnSpec {
    GnnSpec {
        model,
        layers: 3,
        hidden: 256,
        heads: 4,
        features: 128,
        classes: 16,
        graph_name: "test".into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    }
}

/// `spec`'s model over ogbn-arxiv's statistics (its features, classes and
/// name), in `partitions` skewed partitions.
pub fn on_arxiv(spec: GnnSpec, partitions: u32) -> Workload {
    let stats = dataset("ogbn-arxiv").expect("ogbn-arxiv is built in");
    let spec = GnnSpec {
        features: stats.features,
        classes: stats.classes,
        graph_name: stats.name.into(),
        ..spec
    };
    let blocks = BlockCounts::skewed(stats.nodes, stats.edges, partitions)
        .expect("ogbn-arxiv takes the partitions");
    build_gnn(&spec, &blocks).expect("the model builds")
}

/// A forward chain of `n` operators whose activations (`bytes` each) the
/// backward reads in reverse; every operator takes `op_seconds`.
pub fn chain(n: usize, bytes: u64, op_seconds: f64) -> Workload {
    let mut w = Workload::new("chain");
    let x = w.add_tensor("x", bytes, TensorKind::Input, Some(Tier::Host));
    let mut acts = vec![x];
    for i in 0..n {
        let a = w.add_tensor(format!("a{i}"), bytes, TensorKind::Activation, None);
        w.add_op(
            format!("f{i}"),
            OpKind::Generic,
            Phase::Forward,
            vec![acts[i]],
            vec![a],
            Cost::seconds(op_seconds),
        );
        acts.push(a);
    }
    let mut grad = w.add_tensor("g_out", bytes, TensorKind::Gradient, None);
    w.add_op(
        "loss",
        OpKind::Generic,
        Phase::Forward,
        vec![acts[n]],
        vec![grad],
        Cost::seconds(op_seconds),
    );
    for i in (0..n).rev() {
        let g = w.add_tensor(format!("g{i}"), bytes, TensorKind::Gradient, None);
        w.add_op(
            format!("b{i}"),
            OpKind::Generic,
            Phase::Backward,
            vec![grad, acts[i + 1], acts[i]],
            vec![g],
            Cost::seconds(op_seconds),
        );
        grad = g;
    }
    w
}
