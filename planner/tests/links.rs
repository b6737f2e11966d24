//! dp prices link time where transfers queue on a link: on a partitioned
//! workload whose inputs must stream, the plan it returns is within 10% of
//! the one the MILP found in 300 s (its optimum unproven), where pricing
//! added seconds alone left it 23% over.

use fateplan_planner::gnn::{GnnModel, GnnSpec, LayerOrder};
use fateplan_planner::{plan, Profile, Workload};

mod common;

/// 3-layer GCN, 256 hidden, over ogbn-arxiv's statistics, every layer
/// aggregating first: the workload the MILP's figure below is for.
fn arxiv(partitions: u32) -> Workload {
    let spec = GnnSpec {
        heads: 1,
        order: LayerOrder::AggregateFirst,
        ..common::gnn_spec(GnnModel::Gcn)
    };
    common::on_arxiv(spec, partitions)
}

/// dp's predicted iteration with the device budget at `percent` of the
/// retain-all plan's device peak (as `--hbm-budget 30%` sets it).
fn dp_at(workload: &Workload, profile: &Profile, percent: f64) -> f64 {
    let options = common::dp_options_at(workload, profile, percent);
    let plan = plan(workload, profile, &options).unwrap();
    assert!(plan.predicted.peak_bytes.hbm <= options.budgets.hbm_bytes);
    plan.predicted.iteration_s
}

#[test]
fn dp_prices_the_link_where_transfers_queue() {
    let profile = common::a100();
    let workload = arxiv(8);
    // `fateplan plan --dataset ogbn-arxiv --partitions 8 --layer-order
    // aggregate-first --dropout 0 --hbm-budget 30% --policy milp
    // --milp-time-limit 300`: 73.321 ms (80.068 ms in 60 s). dp pricing
    // added seconds only: 93.406 ms; pricing links, 80.054 ms, 9.2% over.
    // (Before the weight gradients' running sum, dp planned 74.128 ms
    // here, within 2% of the MILP's 60 s plan; dp's plans swing that much
    // between neighbouring budgets: 73.680 ms at 320.5 MiB then.)
    let milp_s = 73.321e-3;
    let dp_s = dp_at(&workload, &profile, 30.0);
    assert!(
        dp_s <= milp_s * 1.10,
        "dp {:.3} ms against the MILP's {:.3} ms",
        dp_s * 1e3,
        milp_s * 1e3
    );
    // At 40% the MILP found 81.6 ms and dp, pricing added seconds only,
    // 74.7 ms: the compute alone is 39.2 ms.
    let dp_s = dp_at(&workload, &profile, 40.0);
    assert!(dp_s <= 60e-3, "dp {:.3} ms at 40%", dp_s * 1e3);
}
