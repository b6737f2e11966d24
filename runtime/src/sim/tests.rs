//! Small plans whose simulated times can be worked out by hand.

use fateplan_planner::plan::{Action, Plan};
use fateplan_planner::profile::{
    DeviceKind, DeviceProfile, HostProfile, PcieProfile, Profile, SsdProfile,
    PROFILE_FORMAT_VERSION,
};
use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind, Workload};
use fateplan_planner::{plan, PlanOptions, Policy, Tier};

use super::*;

/// Round figures: PCIe 100 B/s each way, SSD reads 50 B/s and writes
/// 25 B/s, no latencies, host memory fast enough never to matter.
fn profile() -> Profile {
    Profile {
        format_version: PROFILE_FORMAT_VERSION,
        name: "round".into(),
        description: String::new(),
        device: DeviceProfile {
            kind: DeviceKind::Gpu,
            model: "test".into(),
            count_max: 1,
            hbm_bytes: 1000,
            hbm_bytes_per_s: 1e3,
            dense_flops_per_s: 1e3,
            dense_shapes: Vec::new(),
            sparse_bytes_per_s: 1e3,
            scatter_bytes_per_s: None,
            transpose_seconds_per_edge: None,
            mask_seconds_per_element: None,
            softmax_flops_per_s: None,
            attention_bytes_per_s: None,
            attention_backward_bytes_per_s: None,
            edge_softmax_bytes_per_s: None,
            class_rates: Vec::new(),
            gather_curve: Vec::new(),
            op_overhead_s: 0.0,
            threads: None,
        },
        host: HostProfile {
            memory_bytes: 1000,
            memory_bytes_per_s: 1e9,
            cores: 1,
        },
        pcie: PcieProfile {
            h2d_bytes_per_s: 100.0,
            d2h_bytes_per_s: 100.0,
            latency_s: 0.0,
        },
        peer: None,
        network: None,
        ssd: SsdProfile {
            capacity_bytes: 1000,
            read_bytes_per_s: 50.0,
            write_bytes_per_s: 25.0,
            read_latency_s: 0.0,
            write_latency_s: 0.0,
        },
        sources: Default::default(),
        steadiness: None,
    }
}

/// x (input, 100 B) → f0 → a (100 B) → f1 → b (10 B), read by g0..g2, then
/// bw reads a and b. Every operator takes 1 s. `a` is idle from step 1 to 5.
fn workload() -> Workload {
    let mut w = Workload::new("by-hand");
    let x = w.add_tensor("x", 100, TensorKind::Input, Some(Tier::Host));
    let a = w.add_tensor("a", 100, TensorKind::Activation, None);
    let b = w.add_tensor("b", 10, TensorKind::Activation, None);
    let second = Cost::seconds(1.0);
    w.add_op(
        "f0",
        OpKind::Generic,
        Phase::Forward,
        vec![x],
        vec![a],
        second,
    );
    w.add_op(
        "f1",
        OpKind::Generic,
        Phase::Forward,
        vec![a],
        vec![b],
        second,
    );
    for k in 0..3 {
        w.add_op(
            format!("g{k}"),
            OpKind::Generic,
            Phase::Forward,
            vec![b],
            vec![],
            second,
        );
    }
    w.add_op(
        "bw",
        OpKind::Generic,
        Phase::Backward,
        vec![a, b],
        vec![],
        second,
    );
    w
}

fn planned(policy: Policy, staging: u64) -> Plan {
    let profile = profile();
    let mut options = PlanOptions::new(policy, &profile);
    options.ssd_staging_bytes = staging;
    // The times below are worked out for transfers at their latest times.
    options.prefetch = false;
    plan(&workload(), &profile, &options).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn offload_to_host_by_hand() {
    // Load x: 0..1 (step 0 waits 1 s). f0 1..2, f1 2..3. Offload a 3..4,
    // due before step 2: waits 1 s. g0..g2 4..7. Reload a 7..8, due before
    // step 5: waits 1 s. bw 8..9.
    let plan = planned(Policy::OffloadHostAll, 0);
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 9.0), "{report:#?}");
    assert!(close(report.compute_s, 6.0));
    assert!(close(report.recompute_s, 0.0));
    assert!(close(report.exposed_transfer_s, 3.0));
    assert!(close(report.exposed_by_stream_s.h2d, 2.0));
    assert!(close(report.exposed_by_stream_s.d2h, 1.0));
    // Device: x (from its load's issue to the end of f0) with a (from f0's
    // start): 200 B during f0. Host: x throughout, a from 3 s to 8 s.
    assert_eq!(report.peak_bytes.hbm, 200);
    assert!(close(report.peak_time_s.hbm, 1.0));
    assert_eq!(report.peak_bytes.host, 200);
    assert!(close(report.peak_time_s.host, 3.0));
    assert_eq!(report.peak_bytes.ssd, 0);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.streams.h2d.bytes, 200);
    assert_eq!(report.streams.d2h.bytes, 100);
    assert_eq!(report.links.pcie_h2d.bytes, 200);
    assert!(close(report.links.pcie_h2d.busy_s, 2.0));
    assert!(close(report.links.pcie_h2d.utilisation, 2.0 / 9.0));
    assert_eq!(report.seed, 0);
    // This schedule has no overlap to argue about: the planner agrees.
    assert!(report.difference_percent().abs() < 1e-6, "{report:#?}");
}

#[test]
fn a_gpu_s_transfers_take_host_memory_at_twice_its_copy_rate() {
    // Host memory copies 25 B/s. A GPU's DMA touches each byte once, so
    // host memory serves its transfers at 50 B/s, under PCIe's 100: each
    // 100 B transfer takes 2 s. Load x 0..2, f0 and f1 to 4, the offload
    // of a 4..6 (g0 waits), g0..g2 to 9, the reload 9..11, bw to 12.
    let mut gpu = profile();
    gpu.host.memory_bytes_per_s = 25.0;
    let mut options = PlanOptions::new(Policy::OffloadHostAll, &gpu);
    options.prefetch = false;
    let host = plan(&workload(), &gpu, &options).unwrap();
    let report = simulate(&host, &gpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 12.0), "{report:#?}");
    assert!(close(report.links.host_memory.busy_s, 6.0));
    assert!(close(report.links.pcie_h2d.busy_s, 4.0));
    // The planner charges host memory the same.
    assert!(report.difference_percent().abs() < 1e-6, "{report:#?}");

    // The SSD tier's bytes cross host memory by copies, at 25 B/s: with
    // chunks of 20 B, a transfer's first chunk (one pass) takes 0.8 s,
    // its middle 80 B (two passes) 6.4 s and its last chunk 0.8 s: 8 s.
    // Load x 0..8, f0 and f1 to 10, the offload of a 10..18, g0..g2 to
    // 21, the reload 21..29, bw to 30.
    let mut options = PlanOptions::new(Policy::OffloadSsdAll, &gpu);
    options.ssd_staging_bytes = 80;
    options.prefetch = false;
    let ssd = plan(&workload(), &gpu, &options).unwrap();
    let report = simulate(&ssd, &gpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 30.0), "{report:#?}");
    assert!(report.difference_percent().abs() < 1e-6, "{report:#?}");
}

#[test]
fn offload_to_ssd_goes_through_staging_in_chunks() {
    // Staging of 80 B: chunks of 20 B. x streams from the SSD: 20 B at the
    // read rate (0.4 s), 80 B at min(50, 100) (1.6 s), 20 B over PCIe
    // (0.2 s): 2.2 s. f0 2.2..3.2, f1 ..4.2. Offload of a: 20 B over PCIe
    // (0.2 s), 80 B at the write rate (3.2 s), 20 B written (0.8 s): 4.2 s,
    // to 8.4. g0..g2 to 11.4; reload 2.2 s to 13.6; bw to 14.6.
    let plan = planned(Policy::OffloadSsdAll, 80);
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 14.6), "{report:#?}");
    assert!(close(report.exposed_by_stream_s.ssd_read, 4.4));
    assert!(close(report.exposed_by_stream_s.ssd_write, 4.2));
    // Host: the staging buffers throughout.
    assert_eq!(report.peak_bytes.host, 80);
    assert_eq!(report.peak_bytes.ssd, 200);
    // Every SSD byte crosses host memory twice.
    assert_eq!(report.links.host_memory.bytes, 2 * 300);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[test]
fn recomputation_runs_on_the_compute_stream_before_its_step() {
    // x resident; a recomputed by re-running f0 before bw: 7 s, 1 of it recompute.
    let plan = planned(Policy::RecomputeAll, 0);
    assert!(plan.schedule.iter().any(|e| e.action == Action::Recompute));
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 7.0), "{report:#?}");
    assert!(close(report.compute_s, 6.0));
    assert!(close(report.recompute_s, 1.0));
    assert!(close(report.exposed_transfer_s, 0.0));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// A fate its schedule does not carry out is refused, as training
/// refuses it: replayed, the tensor would stay on the device, and the
/// plan would be timed as another.
#[test]
fn a_fate_the_schedule_does_not_carry_out_is_refused() {
    let mut plan = planned(Policy::RetainAll, 0);
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let a = plan.tensors.iter().position(|t| t.name == "a").unwrap();
    plan.tensors[a].fate = fateplan_planner::Fate::Recompute;
    let error = simulate(&plan, &profile(), &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("recompute for \"a\", but the schedule has no recompute of it"),
        "{error}"
    );
    // Fewer fates than tensors, the schedule naming one left out: an
    // error, not an index past the end.
    let mut short = planned(Policy::OffloadHostAll, 0);
    let last = short
        .schedule
        .iter()
        .map(|e| e.tensor.index())
        .max()
        .unwrap();
    short.tensors.truncate(last);
    let error = simulate(&short, &profile(), &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("entries for a workload of"), "{error}");
}

/// The replay drops a copy after its last read before it is made again,
/// whatever the fate says: a recomputed tensor's fate edited to `retain`
/// would be replayed as before. It is refused, and so are a recomputation
/// of an offloaded tensor and a `recompute` tensor whose only re-run is
/// outside its life (as a retained tensor's fate edited to `recompute`
/// would be where its re-run is after its last read, for another's
/// recomputation).
#[test]
fn recomputations_follow_the_fates() {
    let recomputed = planned(Policy::RecomputeAll, 0);
    let a = recomputed
        .tensors
        .iter()
        .position(|t| t.name == "a")
        .unwrap();
    assert_eq!(
        recomputed.tensors[a].fate,
        fateplan_planner::Fate::Recompute
    );
    simulate(&recomputed, &profile(), &SimOptions::default()).unwrap();
    let mut retained = recomputed.clone();
    retained.tensors[a].fate = fateplan_planner::Fate::Retain;
    let error = simulate(&retained, &profile(), &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("retain for \"a\", but the schedule re-runs it before step 5 (\"bw\")"),
        "{error}"
    );
    let mut offloaded = recomputed.clone();
    offloaded.tensors[a].fate = fateplan_planner::Fate::OffloadHost;
    let error = simulate(&offloaded, &profile(), &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("offload_host for \"a\", but the schedule re-runs it"),
        "{error}"
    );
    // A recomputation of it moved before its producer no longer serves
    // its fate: the read in its gap has no copy re-run for it.
    let mut early = recomputed;
    for entry in &mut early.schedule {
        if entry.action == Action::Recompute {
            entry.issue_after_step = -1;
            entry.done_before_step = 0;
        }
    }
    let error = simulate(&early, &profile(), &SimOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("recompute for \"a\", but the schedule has no recompute of it for a read"),
        "{error}"
    );
}

#[test]
fn a_missing_reload_is_a_violation_naming_time_tensor_and_bytes() {
    let mut plan = planned(Policy::OffloadHostAll, 0);
    plan.schedule.retain(|e| e.action != Action::Reload);
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    let v = &report.violations[0];
    assert_eq!(v.kind, ViolationKind::MissingInput);
    assert_eq!((v.tensor.as_str(), v.bytes, v.tier), ("a", 100, Tier::Hbm));
    assert_eq!((v.step, v.op.as_str()), (5, "bw"));
    // No wait for the reload any more: bw starts at 7 s.
    assert!(close(v.time_s, 7.0), "{v:?}");
    assert!(v.message.contains("not on the device"), "{}", v.message);
}

#[test]
fn a_reload_due_too_late_is_a_read_of_a_copy_still_in_flight() {
    let mut plan = planned(Policy::OffloadHostAll, 0);
    let steps = plan.workload.definition.ops.len() as u32;
    for entry in &mut plan.schedule {
        if entry.action == Action::Reload {
            entry.done_before_step = steps;
        }
    }
    let report = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    assert_eq!(report.violations_total, 1, "{:?}", report.violations);
    let v = &report.violations[0];
    assert_eq!(
        (v.kind, v.tensor.as_str()),
        (ViolationKind::MissingInput, "a")
    );
    assert!(
        v.message.contains("still being transferred"),
        "{}",
        v.message
    );
}

#[test]
fn what_if_less_host_memory_breaks_the_host_budget() {
    let plan = planned(Policy::OffloadHostAll, 0);
    let mut small = profile();
    small.name = "round-small-host".into();
    small.host.memory_bytes = 150;
    let report = simulate(&plan, &small, &SimOptions::default()).unwrap();
    assert_eq!(report.budgets.host_bytes, 150);
    assert_eq!(report.profile, "round-small-host");
    assert_eq!(report.planned_profile, "round");
    let v = &report.violations[0];
    assert_eq!(v.kind, ViolationKind::OverBudget);
    assert_eq!((v.tier, v.tensor.as_str()), (Tier::Host, "a"));
    assert_eq!((v.bytes, v.budget_bytes), (200, Some(150)));
    assert!(close(v.time_s, 3.0), "{v:?}");
    assert!(v.message.contains("by 50 bytes"), "{}", v.message);
}

#[test]
fn what_if_half_the_ssd_bandwidth_is_slower_but_fits() {
    let plan = planned(Policy::OffloadSsdAll, 80);
    let mut slow = profile();
    slow.ssd.read_bytes_per_s /= 2.0;
    slow.ssd.write_bytes_per_s /= 2.0;
    let fast = simulate(&plan, &profile(), &SimOptions::default()).unwrap();
    let report = simulate(&plan, &slow, &SimOptions::default()).unwrap();
    assert!(report.iteration_s > fast.iteration_s + 5.0, "{report:#?}");
    assert!(report.violations.is_empty());
}

#[test]
fn jitter_is_deterministic_per_seed() {
    let plan = planned(Policy::OffloadHostAll, 0);
    let run = |seed| simulate(&plan, &profile(), &SimOptions { seed }).unwrap();
    let (a, b, c) = (run(7), run(7), run(8));
    assert_eq!(a, b);
    assert_eq!(a.seed, 7);
    assert_ne!(a.iteration_s, c.iteration_s);
    assert!((a.iteration_s - 9.0).abs() <= 9.0 * JITTER);
    assert!(close(run(0).iteration_s, 9.0));
    // The jitter stretches times, not bytes: every seed moves the same.
    let bytes = |r: &SimReport| {
        let l = &r.links;
        [l.pcie_h2d.bytes, l.pcie_d2h.bytes, l.host_memory.bytes]
    };
    assert!(bytes(&a)[0] > 0, "{a:#?}");
    assert_eq!(bytes(&a), bytes(&c));
    assert_eq!(bytes(&a), bytes(&run(0)));
}

#[test]
fn a_jittered_flow_takes_its_factor_longer_and_carries_its_own_bytes() {
    use model::{phase, Path, Phase as Flow};
    let profile = profile();
    let (bytes, chunk) = (3u64 << 20, 1u64 << 20);
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
    for path in [Path::HostToDevice, Path::SsdToDevice, Path::DeviceToSsd] {
        for k in 0..model::MAX_PHASES {
            let (Some(plain), Some(slow)) = (
                phase(path, k, bytes, chunk, &profile, 1.0),
                phase(path, k, bytes, chunk, &profile, 1.05),
            ) else {
                continue;
            };
            match (plain, slow) {
                (Flow::Delay(a), Flow::Delay(b)) => assert!(near(b, 1.05 * a), "{a} {b}"),
                (Flow::Flow { bytes: a, usage: u }, Flow::Flow { bytes: b, usage: v }) => {
                    for link in 0..u.cost.len() {
                        // Alone on a link: capacity used is bytes × cost.
                        assert!(near(b * v.cost[link], 1.05 * a * u.cost[link]));
                        // Carried: bytes × traffic.
                        assert!(near(b * v.traffic[link], a * u.traffic[link]));
                    }
                }
                other => panic!("{path:?} {k}: {other:?}"),
            }
        }
    }
}

#[test]
fn report_json_round_trips() {
    let mut plan = planned(Policy::OffloadHostAll, 0);
    plan.schedule.retain(|e| e.action != Action::Reload);
    let report = simulate(&plan, &profile(), &SimOptions { seed: 3 }).unwrap();
    let back: SimReport = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(back, report);
    let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    for key in [
        "iteration_s",
        "compute_s",
        "recompute_s",
        "exposed_transfer_s",
        "seed",
    ] {
        assert!(value[key].is_number(), "{key}");
    }
    assert!(value["peak_bytes"]["host"].is_u64());
    assert!(value["violations"][0]["time_s"].is_number());
}

#[test]
fn a_plan_that_cannot_be_replayed_is_an_error() {
    let mut plan = planned(Policy::OffloadHostAll, 0);
    plan.schedule[0].done_before_step = 0;
    plan.schedule[0].issue_after_step = 3;
    let error = simulate(&plan, &profile(), &SimOptions::default()).unwrap_err();
    assert!(error.to_string().contains("schedule[0]"), "{error}");
}

#[test]
fn trace_has_a_track_per_stream_and_counters_per_tier() {
    let plan = planned(Policy::OffloadSsdAll, 80);
    let (report, recording) = simulate_recorded(&plan, &profile(), &SimOptions::default()).unwrap();
    let mut bytes = Vec::new();
    trace::write_trace(&mut bytes, &plan, &report, &recording).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let events = value["traceEvents"].as_array().unwrap();
    let threads: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        threads,
        ["compute", "h2d", "d2h", "ssd_read", "ssd_write", "exchange"]
    );
    let slices = |cat: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .count()
    };
    assert_eq!(slices("op"), 6);
    assert_eq!(slices("offload") + slices("load") + slices("reload"), 3);
    assert!(slices("wait") >= 1);
    for counter in ["hbm", "host", "ssd", "pcie_h2d", "ssd"] {
        assert!(
            events
                .iter()
                .any(|e| e["ph"] == "C" && e["name"] == counter),
            "no counter {counter}"
        );
    }
    // Counters end where the iteration ends.
    let last_ts = events
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(0.0, f64::max);
    assert!((last_ts - 14.6e6).abs() < 1.0, "{last_ts}");
}

#[test]
fn memory_picture_has_a_budget_line_per_tier() {
    let plan = planned(Policy::OffloadHostAll, 0);
    let (report, recording) =
        simulate_recorded(&plan, &profile(), &SimOptions { seed: 5 }).unwrap();
    let svg = svg::memory_svg(&report, &recording);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("class=\"budget\"").count(), 3);
    assert_eq!(svg.matches("class=\"used\"").count(), 3);
    assert!(svg.contains("seed 5"));
}

#[test]
fn planner_plans_replay_without_violations() {
    use fateplan_planner::blocks::BlockCounts;
    use fateplan_planner::datasets::dataset;
    use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};

    let mut profile = Profile {
        name: "a100-like".into(),
        ..profile()
    };
    // a100-80g's rates, so that every kind of transfer takes real time.
    profile.device.hbm_bytes_per_s = 2.0e12;
    profile.device.dense_flops_per_s = 1.95e13;
    profile.device.sparse_bytes_per_s = 6.0e11;
    profile.device.op_overhead_s = 5e-6;
    profile.pcie = PcieProfile {
        h2d_bytes_per_s: 2.5e10,
        d2h_bytes_per_s: 2.5e10,
        latency_s: 1e-5,
    };
    profile.ssd.read_bytes_per_s = 7e9;
    profile.ssd.write_bytes_per_s = 5e9;
    profile.ssd.read_latency_s = 8e-5;
    profile.host.memory_bytes_per_s = 2e11;
    profile.device.hbm_bytes = 300 << 20;
    profile.host.memory_bytes = 1 << 40;
    profile.ssd.capacity_bytes = 1 << 42;
    let stats = dataset("ogbn-arxiv").unwrap();
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let spec = GnnSpec {
            model,
            layers: 3,
            hidden: 64,
            heads: 4,
            features: stats.features,
            classes: stats.classes,
            graph_name: stats.name.into(),
            order: Default::default(),
            transposes: Default::default(),
            sweeps: Default::default(),
            dropout: 0.0,
        };
        let blocks = BlockCounts::skewed(stats.nodes, stats.edges, 8).unwrap();
        let workload = build_gnn(&spec, &blocks).unwrap();
        for policy in Policy::ALL.into_iter().filter(|&p| p != Policy::Milp) {
            // The `-all` policies ignore the device budget: give them room.
            let mut profile = profile.clone();
            if policy != Policy::Greedy {
                profile.device.hbm_bytes = 1 << 40;
            }
            let options = PlanOptions::new(policy, &profile);
            let plan = plan(&workload, &profile, &options).unwrap();
            for seed in [0, 1, 2] {
                let report = simulate(&plan, &profile, &SimOptions { seed }).unwrap();
                let what = format!("{} {} seed {seed}", workload.name, policy.name());
                assert_eq!(
                    report.violations_total, 0,
                    "{what}: {:?}",
                    report.violations
                );
                // Peaks may pass the planner's (it counts at operators, the
                // simulator also between them) but never the budgets.
                for tier in [Tier::Hbm, Tier::Host, Tier::Ssd] {
                    assert!(
                        report.peak_bytes.get(tier) <= report.budgets.of(tier),
                        "{what}"
                    );
                }
                let accounted = report.compute_s + report.recompute_s + report.exposed_transfer_s;
                assert!((accounted - report.iteration_s).abs() <= 1e-9 * report.iteration_s);
                if seed == 0 {
                    assert!(
                        report.difference_percent().abs() < 50.0,
                        "{what}: {report:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn on_the_cpu_backend_copies_and_operators_share_the_cores() {
    // With prefetch: load x 0..1 (nothing computes: full speed); f0, f1
    // to 3; the offload of a runs beside g0 and the reload beside g2.
    // As a GPU: 7 s. On a 2-core CPU backend the operators take both
    // cores and a copy a third thread, so while a copy runs each goes at
    // 2/3: g0 and the offload 3..4.5, g1 4.5..5.5, g2 and the reload
    // 5.5..7, bw 7..8.
    let gpu = profile();
    let mut options = PlanOptions::new(Policy::OffloadHostAll, &gpu);
    options.prefetch = true;
    let plan = plan(&workload(), &gpu, &options).unwrap();
    let as_gpu = simulate(&plan, &gpu, &SimOptions::default()).unwrap();
    assert!(close(as_gpu.iteration_s, 7.0), "{as_gpu:#?}");
    let mut cpu = gpu.clone();
    cpu.device.kind = DeviceKind::Cpu;
    cpu.host.cores = 2;
    let report = simulate(&plan, &cpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 8.0), "{report:#?}");
    assert!(close(report.compute_s, 7.0));
    assert!(close(report.links.pcie_d2h.busy_s, 1.5));
    assert!(close(report.links.pcie_h2d.busy_s, 2.5));
    assert!(close(report.exposed_transfer_s, 1.0));
    // One core: each thread at 1/2 while a copy runs: 3..5, 5..6, 6..8, 8..9.
    cpu.host.cores = 1;
    let report = simulate(&plan, &cpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 9.0), "{report:#?}");
}

#[test]
fn on_the_cpu_backend_ssd_transfers_share_the_cores_too() {
    // Staging of 80 B (chunks of 20 B), with prefetch. As a GPU: load x
    // 0..2.2, f0 and f1 to 4.2, the offload of a 4.2..8.4 (g0 waits),
    // g0 to 9.4; the reload of a (20 B read at 50 B/s, 80 B at 50 B/s
    // through PCIe, 20 B over PCIe at 100 B/s) 9.4..11.6 beside g1 and
    // g2; bw 11.6..12.6.
    let gpu = profile();
    let mut options = PlanOptions::new(Policy::OffloadSsdAll, &gpu);
    options.ssd_staging_bytes = 80;
    options.prefetch = true;
    let plan = plan(&workload(), &gpu, &options).unwrap();
    let as_gpu = simulate(&plan, &gpu, &SimOptions::default()).unwrap();
    assert!(close(as_gpu.iteration_s, 12.6), "{as_gpu:#?}");
    assert!(close(as_gpu.links.ssd.busy_s, 8.0));
    // On a 2-core CPU backend the SSD lane's thread is a third thread
    // for the whole transfer, its SSD leg included: while g1 and g2 run,
    // each thread goes at 2/3. The first 20 B take 9.4..10.0 (g1 did
    // 0.4 s of work), the next 80 B 10.0..12.4 (g1 ends at 10.9, g2 at
    // 12.4), the last 20 B alone to 12.6; bw 12.6..13.6.
    let mut cpu = gpu.clone();
    cpu.device.kind = DeviceKind::Cpu;
    cpu.host.cores = 2;
    let report = simulate(&plan, &cpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 13.6), "{report:#?}");
    assert!(close(report.compute_s, 7.0));
    // Load 2, offload 4 (nothing computes), reload 0.6 + 2.4.
    assert!(close(report.links.ssd.busy_s, 9.0));
    assert!(close(report.exposed_by_stream_s.ssd_read, 2.4));
    // One core: 1/2 each; 9.4..10.2, 10.2..13.4 (g1 to 11.4, g2 to
    // 13.4), 13.4..13.6; bw to 14.6.
    cpu.host.cores = 1;
    let report = simulate(&plan, &cpu, &SimOptions::default()).unwrap();
    assert!(close(report.iteration_s, 14.6), "{report:#?}");
    assert!(close(report.compute_s, 8.0));
}

/// The simulator charges an operator's masked elements at the profile's
/// time per element (none without the figure), as the planner does.
#[test]
fn masked_elements_add_the_profile_s_time_per_element() {
    let mut w = Workload::new("masks");
    let x = w.add_tensor("x", 100, TensorKind::Input, Some(Tier::Host));
    let y = w.add_tensor("y", 100, TensorKind::Activation, None);
    // 200 bytes at 1,000 B/s: 0.2 s; 500 masked elements.
    let cost = Cost::work(
        0.0,
        200,
        fateplan_planner::workload::ComputeClass::Elementwise,
    );
    w.add_op(
        "f",
        OpKind::Activation,
        Phase::Forward,
        vec![x],
        vec![y],
        cost.masking(500),
    );
    let mut profile = profile();
    let mut options = PlanOptions::new(Policy::RetainAll, &profile);
    options.prefetch = false;
    let compute = |profile: &Profile| {
        let plan = plan(&w, profile, &options).unwrap();
        let report = simulate(&plan, profile, &SimOptions::default()).unwrap();
        (report.compute_s, plan.predicted.compute_s)
    };
    let (sim, planned) = compute(&profile);
    assert!(close(sim, 0.2) && close(planned, 0.2), "{sim} {planned}");
    profile.device.mask_seconds_per_element = Some(1e-3);
    let (sim, planned) = compute(&profile);
    assert!(close(sim, 0.7) && close(planned, 0.7), "{sim} {planned}");
}

/// x → f0 → a → f1 → b → g0; g1 reads x; g2 reads b; g3 reads x; bw
/// reads a and g2's e. Every operator takes 1 s; a and b are 100 B.
fn read_while_away_workload() -> Workload {
    let mut w = Workload::new("read-while-away");
    let x = w.add_tensor("x", 100, TensorKind::Input, Some(Tier::Host));
    let a = w.add_tensor("a", 100, TensorKind::Activation, None);
    let b = w.add_tensor("b", 100, TensorKind::Activation, None);
    let e = w.add_tensor("e", 10, TensorKind::Activation, None);
    let second = Cost::seconds(1.0);
    let mut op = |name: &str, phase, inputs: Vec<_>, outputs: Vec<_>| {
        w.add_op(name, OpKind::Generic, phase, inputs, outputs, second)
    };
    op("f0", Phase::Forward, vec![x], vec![a]);
    op("f1", Phase::Forward, vec![a], vec![b]);
    op("g0", Phase::Forward, vec![b], vec![]);
    op("g1", Phase::Forward, vec![x], vec![]);
    op("g2", Phase::Forward, vec![b], vec![e]);
    op("g3", Phase::Forward, vec![x], vec![]);
    op("bw", Phase::Backward, vec![a, e], vec![]);
    w
}

/// A recomputation may read a device copy whose offload is under way:
/// the plan holds the copy until the offload is due (the sanity pass and
/// the executor free it then). Here `a` goes to host memory once f1 has
/// run (1 s at 100 B/s) and is due before g3 (step 5), and `b` is
/// recomputed from it before g2 (step 4), seconds after the offload has
/// ended. That end must not free the copy the recomputation still reads;
/// the read frees it. (Freed at the offload's end, the recomputation at
/// 6 s found `a` gone.)
#[test]
fn a_recomputation_reads_a_copy_whose_offload_has_ended() {
    use fateplan_planner::plan::{Fate, ScheduleEntry, Stream};
    use fateplan_planner::workload::{OpId, TensorId};
    let profile = profile();
    let mut options = PlanOptions::new(Policy::OffloadHostAll, &profile);
    options.prefetch = false;
    let mut plan = plan(&read_while_away_workload(), &profile, &options).unwrap();
    let (a, b) = (TensorId(1), TensorId(2));
    plan.schedule.retain(|e| e.tensor != b);
    for entry in &mut plan.schedule {
        if (entry.tensor, entry.action) == (a, Action::Offload) {
            entry.done_before_step = 5;
        }
    }
    plan.schedule.push(ScheduleEntry {
        action: Action::Recompute,
        tensor: b,
        bytes: 100,
        from: Tier::Hbm,
        to: Tier::Hbm,
        stream: Stream::Compute,
        issue_after_step: 3,
        done_before_step: 4,
        op: Some(OpId(1)),
    });
    plan.tensors[b.index()].fate = Fate::Recompute;
    // The planner's own check holds it valid.
    fateplan_planner::passes::sanity::check(&plan).unwrap();
    let report = simulate(&plan, &profile, &SimOptions::default()).unwrap();
    assert_eq!(report.violations_total, 0, "{:?}", report.violations);
    assert!(close(report.recompute_s, 1.0), "{report:#?}");
    // Without a's reload, bw reads it after the offload was due: the copy
    // went after the recomputation's read (the last before the due step,
    // freed though another read follows), and bw finds it gone.
    plan.schedule
        .retain(|e| (e.tensor, e.action) != (a, Action::Reload));
    assert!(fateplan_planner::passes::sanity::check(&plan).is_err());
    let report = simulate(&plan, &profile, &SimOptions::default()).unwrap();
    assert_eq!(report.violations_total, 1, "{:?}", report.violations);
    let v = &report.violations[0];
    assert_eq!(v.kind, ViolationKind::MissingInput);
    assert_eq!((v.tensor.as_str(), v.op.as_str()), ("a", "bw"), "{v:?}");
}
