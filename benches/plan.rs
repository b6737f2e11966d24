//! How long planning takes.
//!
//! - `dp_gnn`: the default policy on the speed target's workloads: 3-layer
//!   GCN and GAT, 256 hidden, on ogbn-papers100M and IGB-full, at the
//!   fewest partitions at which dp's memory model fits for a100-80g
//!   (`sizing::fewest_partitions`, where `--partitions auto` starts its
//!   walk).
//! - `sizing`: that search itself, on the same workloads.
//! - `dp_by_partitions`, `dp_random_dag`: how dp's plan time grows with the
//!   number of tensors (the counter), on papers100M GCN with more
//!   partitions and on random training DAGs (`dag::random_node_link`) with
//!   the device budget at 80% of the plain topological order's peak.
//! - `dp_remat`: the rematerialisation setting (retain or recompute only)
//!   on random training DAGs of 100 and 1,000 nodes at 80% and 90% of the
//!   peak (target: at most 100 ms per graph).
//! - `peer`: single peer policies on the default workload.
//!
//! Run: `cargo bench --bench plan`, or one group: `cargo bench --bench plan -- dp_gnn`.

use fateplan::planner::blocks::{BlockCounts, MAX_PARTITIONS};
use fateplan::planner::dag::{from_node_link, random_node_link};
use fateplan::planner::datasets::dataset;
use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan::planner::passes::cost::FateSet;
use fateplan::planner::sizing::{fewest_partitions, Sizing};
use fateplan::planner::{plan, Budgets, PlanOptions, Policy, Profile, Workload};

fn main() {
    divan::main();
}

fn profile() -> Profile {
    fateplan::profiles::builtin("a100-80g").unwrap()
}

fn workload(model: GnnModel, name: &str, partitions: u32) -> Workload {
    let stats = dataset(name).unwrap();
    let spec = GnnSpec {
        model,
        layers: 3,
        hidden: 256,
        heads: 4,
        features: stats.features,
        classes: stats.classes,
        graph_name: stats.name.into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    };
    build_gnn(
        &spec,
        &BlockCounts::skewed(stats.nodes, stats.edges, partitions).unwrap(),
    )
    .unwrap()
}

/// The speed target's workloads.
const TARGETS: [&str; 4] = [
    "papers100M-gcn",
    "papers100M-gat",
    "igb-full-gcn",
    "igb-full-gat",
];

fn target(case: &str) -> (&'static str, GnnModel) {
    match case {
        "papers100M-gcn" => ("ogbn-papers100M", GnnModel::Gcn),
        "papers100M-gat" => ("ogbn-papers100M", GnnModel::Gat),
        "igb-full-gcn" => ("igb-full", GnnModel::Gcn),
        _ => ("igb-full", GnnModel::Gat),
    }
}

/// A target workload sized as `--partitions auto` sizes it for a100-80g.
fn sized(case: &str, profile: &Profile, options: &PlanOptions) -> (Workload, Sizing) {
    let (name, model) = target(case);
    let build = |p: u32| -> fateplan::planner::Result<Workload> { Ok(workload(model, name, p)) };
    fewest_partitions(&build, MAX_PARTITIONS, profile, options).unwrap()
}

/// The speed target's workloads, with the partition counts `--partitions
/// auto` picks for them on a100-80g (printed once per case).
#[divan::bench(args = TARGETS, sample_count = 10, sample_size = 1)]
fn dp_gnn(bencher: divan::Bencher, case: &str) {
    let profile = profile();
    let options = PlanOptions::new(Policy::Dp, &profile);
    let (w, sizing) = sized(case, &profile, &options);
    eprintln!(
        "{case}: {} partitions, {} tensors",
        sizing.partitions,
        w.tensors.len()
    );
    bencher
        .counter(divan::counter::ItemsCount::new(w.tensors.len()))
        .bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}

/// `--partitions auto`'s search (workloads built and fit tested) on the
/// speed target's workloads.
#[divan::bench(args = TARGETS, sample_count = 5, sample_size = 1)]
fn sizing(bencher: divan::Bencher, case: &str) {
    let profile = profile();
    let options = PlanOptions::new(Policy::Dp, &profile);
    bencher.bench(|| sized(divan::black_box(case), &profile, &options));
}

/// dp on papers100M GCN as the partition count (and so the number of
/// tensors, about P² per layer) grows.
#[divan::bench(args = [8, 16, 32, 64, 128], sample_count = 5, sample_size = 1)]
fn dp_by_partitions(bencher: divan::Bencher, partitions: u32) {
    let profile = profile();
    let w = workload(GnnModel::Gcn, "ogbn-papers100M", partitions);
    let options = PlanOptions::new(Policy::Dp, &profile);
    bencher
        .counter(divan::counter::ItemsCount::new(w.tensors.len()))
        .bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}

/// The device peak of the plain topological order: every tensor retained.
fn retained_peak(w: &Workload, profile: &Profile) -> u64 {
    let options = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    plan(w, profile, &options).unwrap().predicted.peak_bytes.hbm
}

/// dp on random training DAGs of 1,000 to 100,000 operators, the device
/// budget at 80% of the retained peak.
#[divan::bench(args = [1_000, 10_000, 100_000], sample_count = 3, sample_size = 1)]
fn dp_random_dag(bencher: divan::Bencher, operators: usize) {
    let profile = profile();
    let w = from_node_link(&random_node_link(operators / 2, 1), "random.json").unwrap();
    let mut options = PlanOptions::new(Policy::Dp, &profile);
    options.budgets.hbm_bytes = retained_peak(&w, &profile) / 5 * 4;
    bencher
        .counter(divan::counter::ItemsCount::new(w.tensors.len()))
        .bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}

/// The rematerialisation setting (`--fates retain,recompute`) on random
/// training DAGs of 100 and 1,000 nodes, the device budget at 80% and 90%
/// of the plain topological order's peak (the retained peak).
#[divan::bench(args = [(100, 80), (100, 90), (1_000, 80), (1_000, 90)], sample_count = 10, sample_size = 1)]
fn dp_remat(bencher: divan::Bencher, (nodes, percent): (usize, u64)) {
    let profile = profile();
    let w = from_node_link(&random_node_link(nodes / 2, 1), "random.json").unwrap();
    let mut options = PlanOptions::new(Policy::Dp, &profile);
    options.budgets.hbm_bytes = retained_peak(&w, &profile) / 100 * percent;
    options.fates = FateSet {
        offload_host: false,
        offload_ssd: false,
        recompute: true,
    };
    bencher.bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}

/// Single peer policies on papers100M GCN (P = 32) at the profile's budgets.
#[divan::bench(args = ["greedy", "capacity-greedy", "offload-host-all", "offload-ssd-all"])]
fn peer(bencher: divan::Bencher, policy: &str) {
    let profile = profile();
    let w = workload(GnnModel::Gcn, "ogbn-papers100M", 32);
    let options = PlanOptions::new(Policy::parse(policy).unwrap(), &profile);
    bencher.bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}
