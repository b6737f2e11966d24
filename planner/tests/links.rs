//! dp prices link time where transfers queue on a link: on a partitioned
//! workload whose inputs must stream, the plan it returns is within 10% of
//! the one the MILP found in 300 s (its optimum unproven), where pricing
//! added seconds alone left it 23% over.

use fateplan_planner::gnn::{GnnModel, GnnSpec, LayerOrder};
use fateplan_planner::{plan, PlanOptions, Policy, Profile, Workload};

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

/// dp's predicted iteration with a device budget of `hbm_bytes`.
fn dp_at(workload: &Workload, profile: &Profile, hbm_bytes: u64) -> f64 {
    let mut options = PlanOptions::new(Policy::Dp, profile);
    options.budgets.hbm_bytes = hbm_bytes;
    let plan = plan(workload, profile, &options).unwrap();
    assert!(plan.predicted.peak_bytes.hbm <= options.budgets.hbm_bytes);
    plan.predicted.iteration_s
}

/// The budgets of the figures below: 30% and 40% of the retain-all
/// plan's device peak before the ReLU masks lowered it (as `--hbm-budget
/// 30%` set them then).
const AT_30: u64 = 336_426_731;
const AT_40: u64 = 448_568_974;

#[test]
fn dp_prices_the_link_where_transfers_queue() {
    let profile = common::a100();
    let workload = arxiv(8);
    // `fateplan plan --dataset ogbn-arxiv --partitions 8 --layer-order
    // aggregate-first --dropout 0 --hbm-budget 336426731 --policy milp
    // --milp-time-limit 300`: 69.741 ms, unproven (with the ReLU masks;
    // 73.321 ms before them). dp pricing added seconds only planned
    // 93.406 ms before the masks; pricing links, 80.054 ms then, 60.470
    // ms now. dp's plans swing by a tenth between neighbouring budgets.
    let milp_s = 69.741e-3;
    let dp_s = dp_at(&workload, &profile, AT_30);
    assert!(
        dp_s <= milp_s * 1.10,
        "dp {:.3} ms against the MILP's {:.3} ms",
        dp_s * 1e3,
        milp_s * 1e3
    );
    // At 40% the MILP found 81.6 ms and dp, pricing added seconds only,
    // 74.7 ms (before the masks): the compute alone is 39.3 ms.
    let dp_s = dp_at(&workload, &profile, AT_40);
    assert!(dp_s <= 60e-3, "dp {:.3} ms at 40%", dp_s * 1e3);
}
