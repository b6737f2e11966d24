//! Plans for several GPUs: the per-layer exchange choice against the forced
//! strategies, the exchange buffers in every memory count, and the checks
//! on the GPU count.

mod common;
use common::{a100, gnn_spec};

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::exchange::{self, Halo, MultiGpu};
use fateplan_planner::gnn::{build_gnn, GnnModel};
use fateplan_planner::plan::{ExchangeKind, Leg, Strategy};
use fateplan_planner::{plan, Plan, PlanOptions, Policy, Tier, Workload};

const NODES: u64 = 4_000_000;
const EDGES: u64 = 60_000_000;

fn workload(model: GnnModel, gpus: u32, partitions: u32) -> Workload {
    let spec = gnn_spec(model);

    let g = gpus as u64;
    let blocks = BlockCounts::skewed(NODES.div_ceil(g), EDGES.div_ceil(g), partitions).unwrap();
    build_gnn(&spec, &blocks).unwrap()
}

fn plan_with(
    w: &Workload,
    gpus: u32,
    hbm: u64,
    forced: Option<Strategy>,
) -> fateplan_planner::Result<Plan> {
    let profile = a100();
    let mut options = PlanOptions::new(Policy::Dp, &profile);
    options.gpus = gpus;
    options.budgets.hbm_bytes = hbm;
    options.budgets.host_bytes = profile.share(gpus).host.memory_bytes;
    options.budgets.ssd_bytes = profile.share(gpus).ssd.capacity_bytes;
    options.multi = Some(MultiGpu {
        halo: Halo::random(NODES, EDGES),
        forced,
    });
    plan(w, &profile, &options)
}

#[test]
fn every_layer_has_its_sites_and_each_strategy_its_legs() {
    let w = workload(GnnModel::Gcn, 4, 4);
    let sites = exchange::sites(&w).unwrap();
    assert_eq!(sites.len(), 3);
    // Layer 1 reads the inputs; its gradient is not needed.
    assert!(sites[0].produced_after.iter().all(|&p| p == -1));
    assert!(sites[0].backward.is_empty());
    assert!(sites[1].produced_after.iter().all(|&p| p >= 0));
    assert_eq!(sites[1].backward.len(), 4);
    let multi = MultiGpu {
        halo: Halo::random(NODES, EDGES),
        forced: None,
    };
    let profile = a100();
    let peer = exchange::exchanges(&sites, &multi, &profile, 4, &[Strategy::Peer; 3]);
    let host = exchange::exchanges(&sites, &multi, &profile, 4, &[Strategy::Host; 3]);
    assert!(peer
        .iter()
        .all(|e| e.leg == Leg::Peer && e.network_bytes == 0));
    assert!(host.iter().any(|e| e.leg == Leg::ToHost));
    assert!(host.iter().any(|e| e.leg == Leg::FromHost));
    // The whole halo waits on the device for peer, one partition's for host.
    let peak = |x: &[fateplan_planner::plan::Exchange]| {
        exchange::bytes_per_step(x, w.ops.len(), Tier::Hbm)
            .into_iter()
            .max()
            .unwrap()
    };
    assert!(peak(&peer) > peak(&host), "{} {}", peak(&peer), peak(&host));
    // Host: each destination partition's halo comes back a block's share
    // at a time, due before the block that reads it, the shares summing to
    // the partition's halo; the device holds two shares at most.
    let layer2: Vec<_> = host
        .iter()
        .filter(|e| e.layer == 2 && e.kind == ExchangeKind::Halo && e.leg == Leg::FromHost)
        .cloned()
        .collect();
    let blocks: Vec<(u32, u32)> = sites[1].forward_blocks.concat();
    assert_eq!(blocks.len(), 16, "4 destination partitions of 4 blocks");
    assert_eq!(
        layer2
            .iter()
            .map(|e| e.done_before_step)
            .collect::<Vec<_>>(),
        blocks.iter().map(|b| b.0).collect::<Vec<_>>()
    );
    let (_, per_partition) = multi.halo.rows(4, 4);
    let per_row = sites[1].source_bytes as f64 / NODES.div_ceil(4) as f64;
    let summed: u64 = layer2.iter().map(|e| e.bytes).sum();
    let expected = 4.0 * (per_partition * per_row).round();
    assert!(
        (summed as f64 - expected).abs() <= 4.0,
        "{summed} {expected}"
    );
    let share = layer2.iter().map(|e| e.device_bytes).max().unwrap();
    assert!(peak(&layer2) <= 2 * share, "{} {share}", peak(&layer2));
    // GAT too: its rows are read by the aggregation after the partition's
    // edge softmax, not by the scores' SDDMM, so shares come just before.
    let gat = workload(GnnModel::Gat, 4, 4);
    let gat_sites = exchange::sites(&gat).unwrap();
    let legs: Vec<_> = exchange::exchanges(&gat_sites, &multi, &profile, 4, &[Strategy::Host; 3])
        .into_iter()
        .filter(|e| e.layer == 2 && e.kind == ExchangeKind::Halo && e.leg == Leg::FromHost)
        .filter(|e| e.done_before_step <= gat_sites[1].forward.last().unwrap().1)
        .collect();
    assert_eq!(legs.len(), 16);
    let share = legs.iter().map(|e| e.device_bytes).max().unwrap();
    let gat_peak = exchange::bytes_per_step(&legs, gat.ops.len(), Tier::Hbm)
        .into_iter()
        .max()
        .unwrap();
    assert!(gat_peak <= 2 * share, "{gat_peak} {share}");
    // Three all-reduces, one per layer, in both.
    for x in [&peer, &host] {
        let sums = x
            .iter()
            .filter(|e| e.kind == ExchangeKind::AllReduce)
            .count();
        assert_eq!(sums, 3);
    }
}

#[test]
fn the_choice_per_layer_is_never_slower_than_a_forced_strategy_and_fits_where_one_fits() {
    let mut compared = 0;
    for model in [GnnModel::Gcn, GnnModel::Gat] {
        let w = workload(model, 4, 4);
        for hbm in [8u64 << 30, 2 << 30] {
            let auto = plan_with(&w, 4, hbm, None);
            for forced in Strategy::ALL {
                let Ok(forced_plan) = plan_with(&w, 4, hbm, Some(forced)) else {
                    continue;
                };
                let chosen = auto.as_ref().expect("fits where a forced strategy fits");
                assert!(
                    chosen.predicted.iteration_s <= forced_plan.predicted.iteration_s,
                    "{model:?} {hbm}: auto {} > {forced:?} {}",
                    chosen.predicted.iteration_s,
                    forced_plan.predicted.iteration_s
                );
                assert!(forced_plan
                    .layer_strategies()
                    .iter()
                    .all(|&(_, s)| s == forced));
                compared += 1;
            }
        }
    }
    assert!(compared >= 4, "only {compared} forced plans fit");
}

#[test]
fn exchange_buffers_count_in_the_peaks_and_survive_a_json_round_trip() {
    let w = workload(GnnModel::Gcn, 4, 4);
    let peer = plan_with(&w, 4, 80 << 30, Some(Strategy::Peer)).unwrap();
    let alone = {
        let profile = a100();
        let mut options = PlanOptions::new(Policy::Dp, &profile);
        options.gpus = 4;
        options.budgets = peer.budgets;
        plan(&w, &profile, &options).unwrap()
    };
    assert!(alone.exchanges.is_empty());
    let buffers = exchange::bytes_per_step(&peer.exchanges, w.ops.len(), Tier::Hbm);
    let most = buffers.iter().copied().max().unwrap();
    assert!(most > 0);
    // Everything fits on the device: the peak is the plan's alone plus
    // the buffers held then, at least the largest buffer.
    assert!(peer.predicted.peak_bytes.hbm >= most);
    assert!(peer.predicted.iteration_s > alone.predicted.iteration_s);
    let back = Plan::from_json(&peer.to_json(), "peer.json").unwrap();
    assert_eq!(back, peer);
    // A plan whose exchange is out of order is refused, naming it.
    let mut broken = peer.clone();
    broken.exchanges[0].done_before_step = 0;
    broken.exchanges[0].issue_after_step = 5;
    let error = Plan::from_json(&broken.to_json(), "broken.json").unwrap_err();
    assert!(error.to_string().contains("exchanges[0]"), "{error}");
}

#[test]
fn a_read_plan_has_the_exchanges_and_predictions_its_workload_and_halo_give() {
    let w = workload(GnnModel::Gcn, 4, 4);
    let good = plan_with(&w, 4, 80 << 30, None).unwrap();
    assert_eq!(good.halo, Some(Halo::random(NODES, EDGES)));
    let refused = |broken: &Plan| {
        Plan::from_json(&broken.to_json(), "edited.json")
            .unwrap_err()
            .to_string()
    };
    // One halo share shrunk, and its buffer with it: within every budget,
    // in order, but not the halo the plan was made for.
    let at = good
        .exchanges
        .iter()
        .position(|e| e.kind == ExchangeKind::Halo)
        .unwrap();
    let mut shrunk = good.clone();
    shrunk.exchanges[at].bytes /= 2;
    shrunk.exchanges[at].network_bytes /= 2;
    let error = refused(&shrunk);
    assert!(
        error.contains(&format!("plan field exchanges[{at}].bytes")),
        "{error}"
    );
    // One deleted, or all of them doubled.
    let mut deleted = good.clone();
    deleted.exchanges.pop();
    let error = refused(&deleted);
    assert!(error.contains("plan field exchanges:"), "{error}");
    let mut doubled = good.clone();
    doubled.exchanges.extend(good.exchanges.clone());
    assert!(refused(&doubled).contains("edited.json"));
    // The halo itself, changed or taken away.
    let mut wider = good.clone();
    wider.halo.as_mut().unwrap().scale = 2.0;
    assert!(refused(&wider).contains("plan field exchanges["));
    // Without a halo, exchanges in memory are the caller's (set in the
    // options by hand); a file must carry it.
    let mut none = good.clone();
    none.halo = None;
    none.validate().unwrap();
    assert!(refused(&none).contains("plan field halo"));
    // A prediction edited, with no exchange touched: refused in memory;
    // from a file (a plan edited by hand), derived again and said to be.
    let recomputed = |edited: &Plan| {
        let read = Plan::read(&edited.to_json(), "edited.json").unwrap();
        assert_eq!(read.plan.predicted, good.predicted);
        read.recomputed
    };
    let mut faster = good.clone();
    faster.predicted.iteration_s /= 2.0;
    let error = faster.validate().unwrap_err().to_string();
    assert!(
        error.contains("plan field predicted.iteration_s"),
        "{error}"
    );
    assert!(recomputed(&faster)[0].starts_with("predicted.iteration_s: "));
    let mut moved = good.clone();
    moved.predicted.bytes_moved.h2d += 1;
    assert!(moved
        .validate()
        .unwrap_err()
        .to_string()
        .contains("plan field predicted.bytes_moved"));
    assert!(recomputed(&moved)[0].starts_with("predicted.bytes_moved.h2d: "));
    let mut elsewhere = good.clone();
    elsewhere.predicted.peak_step.hbm += 1;
    assert!(elsewhere
        .validate()
        .unwrap_err()
        .to_string()
        .contains("plan field predicted.peak_step"));
    assert!(recomputed(&elsewhere)[0].starts_with("predicted.peak_step.hbm: "));
    let mut renamed = good.clone();
    renamed.workload.name = "foo".into();
    assert!(refused(&renamed).contains("plan field workload.name: \"foo\" differs"));
    // A plan for one GPU edited to say four: the share its times are of.
    let mut one = plan_with(&w, 1, 80 << 30, None).unwrap();
    one.gpus = 4;
    let error = refused(&one);
    assert!(error.contains("one of 4 GPUs' share of"), "{error}");
    // A plan for one GPU has neither halo nor exchanges.
    let mut single = plan_with(&w, 1, 80 << 30, None).unwrap();
    assert_eq!(single.halo, None);
    single.halo = Some(Halo::random(NODES, EDGES));
    assert!(Plan::from_json(&single.to_json(), "one.json")
        .unwrap_err()
        .to_string()
        .contains("plan field halo"));
}

#[test]
fn gpu_counts_beyond_a_node_need_whole_nodes_and_a_network() {
    let profile = a100();
    assert!(profile.check_gpus(8).is_ok());
    assert!(profile.check_gpus(64).is_ok());
    let error = profile.check_gpus(12).unwrap_err().to_string();
    assert!(error.contains("whole nodes"), "{error}");
    let mut no_network = profile.clone();
    no_network.network = None;
    let error = no_network.check_gpus(16).unwrap_err().to_string();
    assert!(error.contains("network"), "{error}");
    assert!(profile.check_gpus(0).is_err());
    // Sharing a node divides host memory, its bandwidth and the SSD.
    let share = profile.share(4);
    assert_eq!(share.host.memory_bytes, profile.host.memory_bytes / 4);
    assert_eq!(
        share.ssd.read_bytes_per_s,
        profile.ssd.read_bytes_per_s / 4.0
    );
    assert_eq!(share.pcie, profile.pcie);
    assert_eq!(
        profile.share(16).host.memory_bytes,
        profile.host.memory_bytes / 8
    );
}

#[test]
fn across_nodes_part_of_every_exchange_crosses_the_network() {
    let w = workload(GnnModel::Gcn, 16, 2);
    let p = plan_with(&w, 16, 80 << 30, None).unwrap();
    let halo: Vec<_> = p
        .exchanges
        .iter()
        .filter(|e| e.leg != Leg::ToHost)
        .collect();
    assert!(!halo.is_empty());
    // 8 of the 15 other GPUs are on the other node.
    for e in halo {
        let share = e.network_bytes as f64 / e.bytes as f64;
        assert!((share - 8.0 / 15.0).abs() < 0.01, "{share}");
    }
}

/// Aggregations by inputs interleave the destinations' blocks and the
/// sources' transposed chains: through host memory, every halo share is
/// still issued before the step that reads it, and the plan passes the
/// sanity pass with each strategy.
#[test]
fn aggregations_by_inputs_exchange_in_step_order() {
    use fateplan_planner::gnn::{GnnSpec, Sweeps};
    let blocks = BlockCounts::skewed(NODES.div_ceil(4), EDGES.div_ceil(4), 4).unwrap();
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        for sweep in ["inputs", "f1,b2", "f2,b3"] {
            let spec = GnnSpec {
                sweeps: Sweeps::parse(sweep).unwrap(),
                ..gnn_spec(model)
            };
            let w = build_gnn(&spec, &blocks).unwrap();
            for forced in [Some(Strategy::Host), Some(Strategy::Peer), None] {
                let p = plan_with(&w, 4, 80 << 30, forced)
                    .unwrap_or_else(|e| panic!("{model:?} {sweep} {forced:?}: {e}"));
                assert!(!p.exchanges.is_empty());
                for (k, e) in p.exchanges.iter().enumerate() {
                    assert!(
                        e.issue_after_step < e.done_before_step as i64,
                        "{model:?} {sweep} {forced:?}: exchanges[{k}] {e:?}"
                    );
                }
                Plan::from_json(&p.to_json(), "swept.json").unwrap();
            }
        }
    }
}
