//! `--partitions auto`: the fewest partitions at which dp fits, found by
//! `sizing::fewest_partitions`.

mod common;
use common::{a100, gnn_spec};

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel};
use fateplan_planner::planner::fits;
use fateplan_planner::sizing::{fewest_partitions, largest_step_bytes};
use fateplan_planner::{plan, Error, PlanOptions, Policy, Profile, Workload};

const NODES: u64 = 4_000_000;
const EDGES: u64 = 60_000_000;

fn build(p: u32) -> fateplan_planner::Result<Workload> {
    build_gnn(
        &gnn_spec(GnnModel::Gcn),
        &BlockCounts::skewed(NODES, EDGES, p)?,
    )
}

fn options(hbm: u64) -> (Profile, PlanOptions) {
    let profile = a100();
    let mut options = PlanOptions::new(Policy::Dp, &profile);
    options.budgets.hbm_bytes = hbm;
    (profile, options)
}

#[test]
fn the_count_fits_and_one_fewer_does_not() {
    // A device budget a tenth of one partition's whole workload: several
    // partitions are needed.
    let (profile, options) = options(2 << 30);
    let (workload, sizing) = fewest_partitions(&build, 256, &profile, &options).unwrap();
    let p = sizing.partitions;
    assert!(!sizing.none_fit);
    assert!(p > 1, "2 GiB should need more than one partition, got {p}");
    assert!(
        workload.name.ends_with(&format!("-p{p}")),
        "{}",
        workload.name
    );
    assert!(fits(&workload, &profile, &options).unwrap());
    let fewer = build(p - 1).unwrap();
    assert!(
        !fits(&fewer, &profile, &options).unwrap(),
        "{} partitions fit too",
        p - 1
    );
    // What was tried ends with a count that fit, and the answer is it.
    assert!(sizing.tried.contains(&(p, true)), "{:?}", sizing.tried);
    // dp then makes the whole plan at that count.
    plan(&workload, &profile, &options).unwrap();
}

#[test]
fn a_roomy_device_takes_one_partition_without_asking_more() {
    let (profile, options) = options(80 << 30);
    let (workload, sizing) = fewest_partitions(&build, 256, &profile, &options).unwrap();
    assert_eq!(sizing.partitions, 1);
    assert_eq!(sizing.tried, vec![(1, true)]);
    assert!(largest_step_bytes(&workload) <= 80 << 30);
}

#[test]
fn when_nothing_fits_it_says_so_with_the_most_partitions() {
    let (profile, options) = options(1 << 20);
    let (workload, sizing) = fewest_partitions(&build, 64, &profile, &options).unwrap();
    assert!(sizing.none_fit);
    assert_eq!(sizing.partitions, 64);
    assert!(workload.name.ends_with("-p64"), "{}", workload.name);
    // The plan then reports what budget would do.
    let error = plan(&workload, &profile, &options).unwrap_err();
    assert!(matches!(error, Error::Infeasible { .. }), "{error}");
}

#[test]
fn a_build_error_passes_through() {
    let (profile, options) = options(2 << 30);
    let failing = |p: u32| -> fateplan_planner::Result<Workload> {
        if p > 2 {
            Err(Error::InvalidInput {
                context: "partitions".into(),
                message: format!("{p}: refused"),
            })
        } else {
            build(p)
        }
    };
    let error = fewest_partitions(&failing, 256, &profile, &options).unwrap_err();
    assert!(error.to_string().contains("refused"), "{error}");
}
