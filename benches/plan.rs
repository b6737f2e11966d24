//! How long planning takes: the default workload (3-layer GCN, 256 hidden,
//! ogbn-papers100M, a100-80g) and GAT on IGB-full, every policy, and how
//! plan time grows with the partition count.
//!
//! Run: `cargo bench --bench plan`.

use fateplan::planner::blocks::BlockCounts;
use fateplan::planner::datasets::dataset;
use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan::planner::{plan, PlanOptions, Policy, Workload};

fn main() {
    divan::main();
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
    };
    build_gnn(
        &spec,
        &BlockCounts::skewed(stats.nodes, stats.edges, partitions).unwrap(),
    )
    .unwrap()
}

#[divan::bench(args = ["greedy", "retain-all", "offload-host-all", "offload-ssd-all", "recompute-all"])]
fn papers100m_gcn_p32(bencher: divan::Bencher, policy: &str) {
    let profile = fateplan::profiles::builtin("a100-80g").unwrap();
    let w = workload(GnnModel::Gcn, "ogbn-papers100M", 32);
    let mut options = PlanOptions::new(Policy::parse(policy).unwrap(), &profile);
    options.budgets.hbm_bytes = u64::MAX / 4;
    options.budgets.host_bytes = u64::MAX / 4;
    options.budgets.ssd_bytes = u64::MAX / 4;
    if policy == "greedy" {
        options.budgets.hbm_bytes = profile.device.hbm_bytes;
    }
    bencher.bench(|| plan(divan::black_box(&w), &profile, &options).unwrap());
}

#[divan::bench]
fn igb_full_gat_p64_greedy(bencher: divan::Bencher) {
    let profile = fateplan::profiles::builtin("a100-80g").unwrap();
    let w = workload(GnnModel::Gat, "igb-full", 64);
    let options = PlanOptions::new(Policy::Greedy, &profile);
    bencher.bench(|| plan(divan::black_box(&w), &profile, &options));
}

/// Plan time against the number of tensors (P² blocks per layer).
#[divan::bench(args = [8, 16, 32, 64, 128])]
fn greedy_by_partitions(bencher: divan::Bencher, partitions: u32) {
    let profile = fateplan::profiles::builtin("a100-80g").unwrap();
    let w = workload(GnnModel::Gcn, "ogbn-papers100M", partitions);
    let options = PlanOptions::new(Policy::Greedy, &profile);
    bencher
        .counter(divan::counter::ItemsCount::new(w.tensors.len()))
        .bench(|| plan(divan::black_box(&w), &profile, &options));
}
