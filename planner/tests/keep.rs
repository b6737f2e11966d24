//! The keep pass (`passes::keep`): dp's plans bring no tensor to the
//! device twice where the first copy could have stayed, within the budget.

use fateplan_planner::gnn::GnnModel;
use fateplan_planner::passes::keep::keep_copies;
use fateplan_planner::passes::memory::{copy_lives, Occupancy};
use fateplan_planner::passes::timeline::Timeline;
use fateplan_planner::plan::{Action, Plan};
use fateplan_planner::{plan, PlanOptions, Policy, Workload};

mod common;

/// What the keep pass would still drop from `plan`'s schedule.
fn droppable(workload: &Workload, plan: &Plan) -> usize {
    let mut entries = plan.schedule.clone();
    let mut fates: Vec<_> = plan.tensors.iter().map(|t| t.fate).collect();
    let timeline = Timeline::new(workload.ops.len(), &entries);
    let lives = copy_lives(
        workload,
        &fates,
        &entries,
        &timeline,
        plan.ssd_staging_bytes,
    );
    let mut occupancy = Occupancy::from_lives(&lives, &timeline);
    occupancy.add_scratch(workload, &entries, &timeline);
    keep_copies(
        workload,
        &mut entries,
        &mut fates,
        &timeline,
        &lives,
        &occupancy,
        plan.budgets.hbm_bytes,
    )
}

fn copies_in(plan: &Plan) -> usize {
    plan.schedule
        .iter()
        .filter(|e| matches!(e.action, Action::Load | Action::Reload))
        .count()
}

#[test]
fn dp_keeps_every_copy_it_has_room_for_and_a_peer_does_not() {
    let profile = common::a100();
    let mut peers_droppable = 0;
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let workload = common::on_arxiv(common::gnn_spec(model), 4);
        for percent in [30.0, 45.0, 60.0] {
            let options = common::dp_options_at(&workload, &profile, percent);
            let dp = plan(&workload, &profile, &options).unwrap();
            assert_eq!(droppable(&workload, &dp), 0, "{model:?} at {percent}%");
            // A peer's schedule is left as that system runs it: the pass
            // would drop some of its copies in.
            let greedy = PlanOptions {
                policy: Policy::Greedy,
                ..options.clone()
            };
            if let Ok(peer) = plan(&workload, &profile, &greedy) {
                let dropped = droppable(&workload, &peer);
                assert!(dropped <= copies_in(&peer));
                peers_droppable += dropped;
            }
        }
    }
    assert!(peers_droppable > 0);
}
