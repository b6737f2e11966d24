//! How fast the simulator replays a plan: a 3-layer GCN (256 hidden) on
//! IGB-full, planned with `greedy` on a100-80g exactly as `fateplan plan
//! --dataset igb-full` plans it (which picks 256 partitions), and the
//! default papers100M plan for comparison. Throughput is in events
//! (simulated operators, transfer phases and completions) per second.
//!
//! Run: `cargo bench --bench simulate`.

use std::sync::OnceLock;
use std::time::Instant;

use fateplan::planner::blocks::BlockCounts;
use fateplan::planner::datasets::dataset;
use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan::planner::{plan, Plan, PlanOptions, Policy};
use fateplan::runtime::sim::{simulate, simulate_recorded, SimOptions};

fn main() {
    // One timed run first, so the figure a reader wants is printed plainly.
    for (name, plan) in [("igb-full", igb_full()), ("ogbn-papers100M", papers100m())] {
        let profile = &plan.profile;
        let start = Instant::now();
        let report = simulate(plan, profile, &SimOptions::default()).unwrap();
        let seconds = start.elapsed().as_secs_f64();
        let difference = report.difference_percent();
        println!(
            "{name}: {} ({} operators, {} schedule entries): {} events in {:.3} s, \
             {:.2} M events/s; simulated {:.1} s per iteration, predicted {:.1} s ({:+.2}%)",
            plan.workload.name,
            plan.workload.definition.ops.len(),
            plan.schedule.len(),
            report.events,
            seconds,
            report.events as f64 / seconds / 1e6,
            report.iteration_s,
            report.predicted_iteration_s,
            if difference.abs() < 0.005 {
                0.0
            } else {
                difference
            }
        );
    }
    divan::main();
}

fn planned(name: &str, partitions: u32) -> Plan {
    let stats = dataset(name).unwrap();
    let spec = GnnSpec {
        model: GnnModel::Gcn,
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
    let blocks = BlockCounts::skewed(stats.nodes, stats.edges, partitions).unwrap();
    let workload = build_gnn(&spec, &blocks).unwrap();
    let profile = fateplan::profiles::builtin("a100-80g").unwrap();
    plan(
        &workload,
        &profile,
        &PlanOptions::new(Policy::Greedy, &profile),
    )
    .unwrap()
}

fn igb_full() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| planned("igb-full", 256))
}

fn papers100m() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| planned("ogbn-papers100M", 32))
}

fn bench_plan(bencher: divan::Bencher, plan: &Plan, record: bool) {
    let options = SimOptions::default();
    let events = simulate(plan, &plan.profile, &options).unwrap().events;
    bencher
        .counter(divan::counter::ItemsCount::new(events))
        .bench(|| {
            if record {
                simulate_recorded(divan::black_box(plan), &plan.profile, &options)
                    .map(|(report, _)| report)
            } else {
                simulate(divan::black_box(plan), &plan.profile, &options)
            }
        });
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn igb_full_gcn_p256(bencher: divan::Bencher) {
    bench_plan(bencher, igb_full(), false);
}

/// The same, keeping the timeline for the trace and the memory picture.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn igb_full_gcn_p256_recorded(bencher: divan::Bencher) {
    bench_plan(bencher, igb_full(), true);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn papers100m_gcn_p32(bencher: divan::Bencher) {
    bench_plan(bencher, papers100m(), false);
}
