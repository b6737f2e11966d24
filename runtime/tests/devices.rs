//! Training on several devices (CPU devices, each a thread with its own
//! executor, exchanging halos and summing gradients): the same model as on
//! one device, whatever the device count and the plan.

mod common;
use common::{planted, profile, roomy};

use std::sync::Arc;

use fateplan_planner::gnn::{GnnModel, LayerOrder, Sweeps};
use fateplan_planner::plan::{Budgets, Plan};
use fateplan_planner::workload::Workload;
use fateplan_planner::{plan, PlanOptions, Policy};
use fateplan_runtime::cpu::Hyper;
use fateplan_runtime::dataset::Dataset;
use fateplan_runtime::edges::EdgeSource;
use fateplan_runtime::exec::SsdTier;
use fateplan_runtime::partition::{PartitionOptions, Partitioning};
use fateplan_runtime::share::{
    load_owner, prepare_share_reading, prepare_shared, prepare_shared_from, prepare_shared_keeping,
    save_owner, share_workload, DeviceShare, Keep, ShareMethod,
};
use fateplan_runtime::train::{self, BackendChoice, TrainReport, TrainRun};

fn hyper(model: GnnModel, dropout: f32) -> Hyper {
    Hyper {
        model,
        layers: 3,
        hidden: 16,
        heads: 1,
        dropout,
        lr: 0.01,
        weight_decay: 5e-4,
        weight_decay_all_layers: false,
        seed: 7,
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
    }
}

fn make_plan(workload: &Workload, policy: Policy, budgets: Budgets) -> Plan {
    let profile = profile();
    let options = PlanOptions {
        budgets,
        ssd_staging_bytes: 1 << 16,
        ..PlanOptions::new(policy, &profile)
    };
    plan(workload, &profile, &options).unwrap()
}

fn run(plan: Plan, epochs: u32) -> TrainRun {
    TrainRun {
        plan: Arc::new(plan),
        epochs,
        budgets: None,
        ssd: None,
        trace: false,
        backend: BackendChoice::Cpu,
        stop: None,
        evaluate_every: 0,
    }
}

fn single(data: &Dataset, h: Hyper, partitions: u32, epochs: u32) -> TrainReport {
    let prepared = train::prepare(data.clone(), &h, partitions).unwrap();
    let p = make_plan(&prepared.workload, Policy::RetainAll, roomy());
    train::train(prepared, h, run(p, epochs), &mut |_| {})
        .unwrap()
        .0
}

fn shared(
    data: &Dataset,
    h: Hyper,
    devices: u32,
    partitions: u32,
    policy: Policy,
    epochs: u32,
    ssd: Vec<Arc<dyn SsdTier>>,
) -> train::SharedReport {
    let prepared =
        prepare_shared(data.clone(), &h, devices, partitions, ShareMethod::Ranges).unwrap();
    let p = make_plan(&prepared.workload, policy, roomy());
    // Device 0's epochs come from a thread of its own pool.
    let mut seen: Vec<String> = Vec::new();
    let report = train::train_shared(prepared, h, run(p, epochs), ssd, &mut |_| {
        seen.push(std::thread::current().name().unwrap_or("").to_string());
    })
    .unwrap()
    .0;
    assert_eq!(seen.len(), epochs as usize);
    assert!(seen.iter().all(|n| n.starts_with("device0-")), "{seen:?}");
    report
}

fn assert_close(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        let rel = (x - y).abs() / x.abs().max(1e-12);
        assert!(rel < 1e-5, "{what}: epoch {}: {x} against {y}", k + 1);
    }
}

/// The same losses (1e-5) and test accuracy as one device: sums run in
/// another order, so one of the 60 test nodes may differ.
fn assert_same_model(what: &str, one: &TrainReport, many: &TrainReport) {
    assert_close(what, &one.losses, &many.losses);
    assert!(
        (one.test_accuracy.unwrap() - many.test_accuracy.unwrap()).abs() <= 1.0 / 60.0 + 1e-9,
        "{what}: test accuracy {:?} against {:?}",
        one.test_accuracy,
        many.test_accuracy
    );
}

#[test]
fn several_devices_train_the_one_device_model() {
    let data = planted(600, 3);
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        let h = hyper(model, 0.5);
        let one = single(&data, h, 4, 4);
        for (devices, partitions) in [(2, 2), (3, 1), (4, 2)] {
            let many = shared(
                &data,
                h,
                devices,
                partitions,
                Policy::RetainAll,
                4,
                Vec::new(),
            );
            let what = format!("{} on {devices} devices of {partitions}", model.name());
            assert_same_model(&what, &one, &many.report);
            let first = &many.devices[0].exchange;
            assert!(
                first.sent_bytes > 0 && first.received_bytes > 0,
                "{what}: {first:?}"
            );
            assert!(first.reduced_bytes > 0, "{what}: {first:?}");
        }
    }
}

/// A first layer narrower than the input projects first: the devices
/// exchange projected rows (the input dropout applied before the
/// projection) and, in the backward pass, the first layer's halo
/// gradients; the model is one device's, in either order.
#[test]
fn devices_exchange_projected_rows_of_the_same_model() {
    let data = planted(600, 3);
    let narrower = Hyper {
        hidden: 8,
        ..hyper(GnnModel::Gcn, 0.5)
    };
    let aggregate_first = Hyper {
        order: LayerOrder::AggregateFirst,
        ..narrower
    };
    let one = single(&data, aggregate_first, 4, 4);
    let mut sent = Vec::new();
    for h in [narrower, aggregate_first] {
        let many = shared(&data, h, 2, 2, Policy::RetainAll, 4, Vec::new());
        let what = format!("{} on 2 devices", h.order.name());
        assert_same_model(&what, &one, &many.report);
        sent.push(many.devices[0].exchange.sent_bytes);
    }
    // Per halo row, layer 1 now sends 8 values and 8 gradients (12
    // values before), and layer 3 4 and 4 (8 and 8): less in all.
    assert!(sent[0] < sent[1], "sent {sent:?}");
}

#[test]
fn the_shared_model_is_the_same_whatever_the_plan() {
    let data = planted(500, 5);
    let h = hyper(GnnModel::Gcn, 0.5);
    let retain = shared(&data, h, 2, 3, Policy::RetainAll, 3, Vec::new());
    for policy in [Policy::RecomputeAll, Policy::OffloadHostAll] {
        let other = shared(&data, h, 2, 3, policy, 3, Vec::new());
        assert_eq!(
            retain.report.weights_sha256, other.report.weights_sha256,
            "{policy:?}"
        );
        assert_eq!(retain.report.losses, other.report.losses, "{policy:?}");
    }
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<Arc<dyn SsdTier>> = dirs
        .iter()
        .map(|d| train::open_spill(d.path(), 1 << 40, 100_000, None).unwrap() as Arc<dyn SsdTier>)
        .collect();
    let ssd = shared(&data, h, 2, 3, Policy::OffloadSsdAll, 3, stores.clone());
    assert_eq!(retain.report.weights_sha256, ssd.report.weights_sha256);

    // dp under a quarter of retain-all's device peak mixes the fates.
    let prepared = prepare_shared(data.clone(), &h, 2, 3, ShareMethod::Ranges).unwrap();
    let peak = make_plan(&prepared.workload, Policy::RetainAll, roomy())
        .predicted
        .peak_bytes
        .hbm;
    let quarter = Budgets {
        hbm_bytes: peak / 4,
        ..roomy()
    };
    let p = make_plan(&prepared.workload, Policy::Dp, quarter);
    let fates: std::collections::BTreeSet<String> =
        p.tensors.iter().map(|t| format!("{:?}", t.fate)).collect();
    assert!(fates.len() > 1, "dp chose one fate: {fates:?}");
    let dp = train::train_shared(prepared, h, run(p, 3), stores, &mut |_| {})
        .unwrap()
        .0;
    assert_eq!(retain.report.weights_sha256, dp.report.weights_sha256);
    for device in &dp.devices {
        assert!(device.peak_bytes.hbm <= peak / 4, "{device:?}");
    }
}

/// A block that one device lacks but another has: the device runs the
/// operator over an empty block, and the model is still the one-device one.
#[test]
fn a_block_one_device_lacks_still_gives_the_one_device_model() {
    let mut data = planted(400, 9);
    // Four ranges of 100 vertices: no edge from range 1 into range 0, so
    // device 0 of two has no block (0, 1) of its own; device 1 has.
    let keep: Vec<bool> = data
        .src
        .iter()
        .zip(&data.dst)
        .map(|(&s, &d)| !((100..200).contains(&s) && d < 100))
        .collect();
    let mut k = keep.iter();
    data.src.retain(|_| *k.next().unwrap());
    let mut k = keep.iter();
    data.dst.retain(|_| *k.next().unwrap());
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        let h = hyper(model, 0.5);
        let prepared = prepare_shared(data.clone(), &h, 2, 2, ShareMethod::Ranges).unwrap();
        let own = |d: usize| {
            prepared.devices[d].input.blocks[1]
                .as_ref()
                .unwrap()
                .columns
                .len()
        };
        assert_eq!(own(0), 0, "device 0 has edges in its block (0, 1)");
        assert!(own(1) > 0, "device 1 has no edges in its block (0, 1)");
        let one = single(&data, h, 4, 3);
        for policy in [Policy::RetainAll, Policy::RecomputeAll] {
            let many = shared(&data, h, 2, 2, policy, 3, Vec::new());
            assert_close(
                &format!("{} {policy:?}", model.name()),
                &one.losses,
                &many.report.losses,
            );
        }
    }
}

fn gat(dropout: f32) -> Hyper {
    Hyper {
        heads: 2,
        ..hyper(GnnModel::Gat, dropout)
    }
}

#[test]
fn gat_on_several_devices_trains_the_one_device_model() {
    // Dropout 0.5 on the input, hidden and attention sites: the attention
    // masks are keyed by each edge's ends, so partitions and devices draw
    // the same ones. Halo edges join the edge softmax of their rows, and
    // the halo's `z` and `a_src` gradients go back to their owners.
    let data = planted(600, 3);
    let h = gat(0.5);
    let one = single(&data, h, 4, 4);
    let two = single(&data, h, 2, 4);
    assert_close("gat on 2 and 4 partitions", &one.losses, &two.losses);
    for (devices, partitions, method) in [
        (2, 2, ShareMethod::Ranges),
        (3, 1, ShareMethod::Ranges),
        (4, 2, ShareMethod::Ranges),
        (2, 2, ShareMethod::Mincut),
        (3, 2, ShareMethod::Mincut),
    ] {
        let prepared = prepare_shared(data.clone(), &h, devices, partitions, method).unwrap();
        assert!(
            prepared.stats.halo_edges > 0,
            "{devices} devices share no edges"
        );
        let p = make_plan(&prepared.workload, Policy::RetainAll, roomy());
        let many = train::train_shared(prepared, h, run(p, 4), Vec::new(), &mut |_| {})
            .unwrap()
            .0;
        let what = format!(
            "gat on {devices} devices of {partitions} ({})",
            method.name()
        );
        assert_same_model(&what, &one, &many.report);
        let exchange = many.devices[0].exchange;
        assert!(
            exchange.sent_bytes > 0 && exchange.received_bytes > 0,
            "{what}"
        );
    }
    // GAT's aggregations by inputs and in groups of outputs on several
    // devices, 3 partitions each: every edge softmax (with its halo
    // edges) before the layer's sums, which interleave the rows.
    for sweep in ["inputs", "f1,f2/2"] {
        let swept = Hyper {
            sweeps: Sweeps::parse(sweep).unwrap(),
            ..h
        };
        let prepared = prepare_shared(data.clone(), &swept, 2, 3, ShareMethod::Ranges).unwrap();
        let p = make_plan(&prepared.workload, Policy::RetainAll, roomy());
        let many = train::train_shared(prepared, swept, run(p, 4), Vec::new(), &mut |_| {})
            .unwrap()
            .0;
        assert_same_model(&format!("gat by {sweep} on 2 devices"), &one, &many.report);
    }
}

#[test]
fn gat_on_several_devices_is_the_same_whatever_the_plan() {
    // dp at half the retain-all peak mixes the fates, GAT's
    // edge-wise tensors among them, whose halo part must come back the same.
    let data = planted(600, 3);
    let h = gat(0.5);
    let prepared = prepare_shared(data.clone(), &h, 2, 2, ShareMethod::Ranges).unwrap();
    let peak = make_plan(&prepared.workload, Policy::RetainAll, roomy())
        .predicted
        .peak_bytes
        .hbm;
    let one = single(&data, h, 4, 3);
    for (policy, hbm) in [
        (Policy::RetainAll, None),
        (Policy::RecomputeAll, None),
        (Policy::Dp, Some(peak / 2)),
    ] {
        let prepared = prepare_shared(data.clone(), &h, 2, 2, ShareMethod::Ranges).unwrap();
        let budgets = Budgets {
            hbm_bytes: hbm.unwrap_or(roomy().hbm_bytes),
            ..roomy()
        };
        let p = make_plan(&prepared.workload, policy, budgets);
        if hbm.is_some() {
            let fates: std::collections::BTreeSet<String> =
                p.tensors.iter().map(|t| format!("{:?}", t.fate)).collect();
            assert!(fates.len() > 1, "dp chose one fate: {fates:?}");
        }
        let many = train::train_shared(prepared, h, run(p, 3), Vec::new(), &mut |_| {})
            .unwrap()
            .0;
        if let Some(hbm) = hbm {
            for device in &many.devices {
                assert!(device.peak_bytes.hbm <= hbm, "{device:?}");
            }
        }
        assert_close(&format!("gat {policy:?}"), &one.losses, &many.report.losses);
    }
}

#[test]
fn mincut_shares_train_the_one_device_model_with_fewer_halo_rows() {
    // At least 1.5x fewer halo rows than equal ranges (which cut the
    // planted communities at random) on this small graph.
    // With dropout: each device keys its masks by its vertices' numbers
    // as the graph was given, not as the shares renumber them, so the
    // renumbered graph trains the one-device model.
    let data = planted(1200, 5);
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        let h = hyper(model, 0.5);
        let one = single(&data, h, 4, 4);
        for devices in [2, 3] {
            let ranges = prepare_shared(data.clone(), &h, devices, 2, ShareMethod::Ranges).unwrap();
            let mincut = prepare_shared(data.clone(), &h, devices, 2, ShareMethod::Mincut).unwrap();
            let what = format!("{} on {devices} devices", model.name());
            assert_eq!(mincut.stats.method, ShareMethod::Mincut);
            assert_eq!(mincut.stats.edges, ranges.stats.edges, "{what}");
            assert!(
                mincut.stats.halo_rows_total * 3 <= ranges.stats.halo_rows_total * 2,
                "{what}: {} halo rows against {} of equal ranges",
                mincut.stats.halo_rows_total,
                ranges.stats.halo_rows_total
            );
            let owned: usize = mincut.devices.iter().map(|d| d.input.y.len()).sum();
            assert_eq!(owned as u64, data.nodes, "{what}: every vertex owned once");
            let p = make_plan(&mincut.workload, Policy::RetainAll, roomy());
            let many = train::train_shared(mincut, h, run(p, 4), Vec::new(), &mut |_| {})
                .unwrap()
                .0;
            assert_same_model(&what, &one, &many.report);
        }
    }
}

#[test]
fn a_share_built_alone_is_the_one_built_with_the_others() {
    // A member process builds its own share only; a launcher none. The
    // workload and statistics are the group's either way.
    let data = planted(600, 3);
    let h = hyper(GnnModel::Gcn, 0.0);
    for method in [ShareMethod::Ranges, ShareMethod::Mincut] {
        let all = prepare_shared(data.clone(), &h, 3, 2, method).unwrap();
        assert_eq!((all.devices.len(), all.group), (3, 3));
        let shown = |share: &DeviceShare| format!("{:?} {:?}", share.input, share.halo);
        for rank in 0..3 {
            let one =
                prepare_shared_keeping(data.clone(), &h, 3, 2, method, Keep::One(rank)).unwrap();
            assert_eq!((one.devices.len(), one.group), (1, 3));
            assert_eq!(shown(&one.devices[0]), shown(&all.devices[rank]), "{rank}");
            assert_eq!(one.workload.to_json(), all.workload.to_json());
            assert_eq!(one.stats, all.stats);
            // Reading its own rows from the graph and its edges from a
            // source (a process of its own): the same share, having asked
            // for those rows only.
            let without = Dataset {
                x: Vec::new(),
                src: Vec::new(),
                dst: Vec::new(),
                ..data.clone()
            };
            let edges = || EdgeSource::borrowed(&data.src, &data.dst);
            let asked = std::sync::Mutex::new(Vec::new());
            let read = |ids: &[u64]| {
                asked.lock().unwrap().extend_from_slice(ids);
                Ok(ids.iter().flat_map(|&v| data.row(v).to_vec()).collect())
            };
            let read_alone = prepare_share_reading(
                without.clone(),
                edges(),
                &read,
                None,
                &h,
                3,
                2,
                method,
                rank,
            )
            .unwrap();
            assert_eq!(
                shown(&read_alone.devices[0]),
                shown(&all.devices[rank]),
                "{rank}"
            );
            assert_eq!(read_alone.workload.to_json(), all.workload.to_json());
            assert_eq!(read_alone.stats, all.stats);
            let mut asked = asked.into_inner().unwrap();
            asked.sort_unstable();
            let mut own: Vec<u64> = match &all.devices[rank].input.row_ids {
                Some(ids) => ids.clone(),
                None => {
                    let input = &all.devices[rank].input;
                    let rows = *input.offsets.last().unwrap();
                    (input.row_base..input.row_base + rows).collect()
                }
            };
            own.sort_unstable();
            assert_eq!(asked, own, "{method:?} {rank}");
            // Given the group's partitioning, through a file: the same.
            if let Some(owner) = &all.owner {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("owner.bin");
                save_owner(&path, owner, 3).unwrap();
                let owner = Some(load_owner(&path, data.nodes, 3).unwrap());
                let rows =
                    |ids: &[u64]| Ok(ids.iter().flat_map(|&v| data.row(v).to_vec()).collect());
                let handed = prepare_share_reading(
                    without.clone(),
                    edges(),
                    &rows,
                    owner,
                    &h,
                    3,
                    2,
                    method,
                    rank,
                )
                .unwrap();
                assert_eq!(
                    shown(&handed.devices[0]),
                    shown(&all.devices[rank]),
                    "{rank}"
                );
                assert_eq!(handed.stats, all.stats);
            }
            // Rows read short are refused, not trained.
            let f = data.features as usize;
            let short = |ids: &[u64]| Ok(vec![0.0; ids.len().saturating_sub(1) * f]);
            let Err(error) = prepare_share_reading(
                without.clone(),
                edges(),
                &short,
                None,
                &h,
                3,
                2,
                method,
                rank,
            ) else {
                panic!("a share of rows read short");
            };
            assert!(
                error.to_string().contains("rows of 12 features read as"),
                "{error}"
            );
            // Edges both in the dataset and from a source: refused, as
            // one of them would be dropped.
            let twice = Dataset {
                src: data.src.clone(),
                dst: data.dst.clone(),
                ..without
            };
            let Err(error) =
                prepare_share_reading(twice, edges(), &short, None, &h, 3, 2, method, rank)
            else {
                panic!("edges given twice");
            };
            assert!(
                error.to_string().contains("a source of") && error.to_string().contains("edges"),
                "{error}"
            );
        }
        // Every share but no features: refused, naming them.
        let without = Dataset {
            x: Vec::new(),
            ..data.clone()
        };
        let Err(error) = prepare_shared(without, &h, 3, 2, method) else {
            panic!("shares without features");
        };
        assert!(error.to_string().contains("0 feature values"), "{error}");
        let none = prepare_shared_keeping(data.clone(), &h, 3, 2, method, Keep::None).unwrap();
        assert!(none.devices.is_empty());
        // The min-cut shares' partitioning, as the partitioner gives it.
        let expected = (method == ShareMethod::Mincut).then(|| {
            Partitioning::mincut(
                data.nodes,
                &data.src,
                &data.dst,
                3,
                &PartitionOptions::default(),
            )
            .unwrap()
            .owner
        });
        assert_eq!(none.owner, expected, "{method:?}");
        assert_eq!(none.workload.to_json(), all.workload.to_json());
        assert_eq!(none.stats, all.stats);
        // The same from a source of the edges, the dataset holding none
        // (and refused where it holds them too).
        let topology = Dataset {
            x: Vec::new(),
            src: Vec::new(),
            dst: Vec::new(),
            ..data.clone()
        };
        let source = || EdgeSource::borrowed(&data.src, &data.dst);
        let from = prepare_shared_from(topology, source(), &h, 3, 2, method, Keep::None).unwrap();
        assert!(from.devices.is_empty());
        assert_eq!(from.owner, expected, "{method:?}");
        assert_eq!(from.workload.to_json(), all.workload.to_json());
        assert_eq!(from.stats, all.stats);
        let Err(error) = prepare_shared_from(data.clone(), source(), &h, 3, 2, method, Keep::None)
        else {
            panic!("edges held and given as a source");
        };
        assert!(
            error.to_string().contains("a source of") && error.to_string().contains("edges"),
            "{error}"
        );
        // Threads need every share.
        let p = make_plan(&none.workload, Policy::RetainAll, roomy());
        let Err(error) = train::train_shared(none, h, run(p, 1), Vec::new(), &mut |_| {}) else {
            panic!("trained without the shares");
        };
        assert!(
            error.to_string().contains("every device's share"),
            "{error}"
        );
    }
    let Err(error) = prepare_shared_keeping(data, &h, 3, 2, ShareMethod::Ranges, Keep::One(3))
    else {
        panic!("a fourth share of three");
    };
    assert!(error.to_string().contains("rank below 3"), "{error}");
}

#[test]
fn a_saved_partitioning_is_checked_as_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("owner.bin");
    save_owner(&path, &[0, 2, 1, 2], 3).unwrap();
    assert_eq!(load_owner(&path, 4, 3).unwrap(), vec![0, 2, 1, 2]);
    let error = |nodes, devices| load_owner(&path, nodes, devices).unwrap_err().to_string();
    assert!(error(5, 3).contains("4 vertices onto 3 devices; expected 5 onto 3"));
    assert!(error(4, 2).contains("expected 4 onto 2"));
    save_owner(&path, &[0, 3], 3).unwrap();
    let message = error(2, 3);
    assert!(
        message.contains("vertex 1") && message.contains("device 3 of 3"),
        "{message}"
    );
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    assert!(error(2, 3).contains("7 bytes of devices"));
    std::fs::write(&path, b"not a partitioning at all").unwrap();
    assert!(error(2, 3).contains("not a partitioning saved by fateplan"));
    let missing = load_owner(&dir.path().join("missing"), 2, 3).unwrap_err();
    assert!(missing.to_string().contains("missing"), "{missing}");
}

#[test]
fn the_topology_alone_gives_the_workload_of_the_shares() {
    // `plan --gpus --graph` plans from the edges alone what `train
    // --devices` builds from the whole dataset.
    use fateplan_planner::gnn::GnnSpec;
    use fateplan_runtime::graph::GraphData;
    let data = planted(600, 3);
    // With dropout, whose masks the workload prices.
    let h = hyper(GnnModel::Gat, 0.5);
    let spec = GnnSpec {
        model: h.model,
        layers: h.layers,
        hidden: h.hidden,
        heads: 2,
        features: data.features,
        classes: data.classes,
        graph_name: "unused".into(),
        order: h.order,
        transposes: h.transposes,
        sweeps: h.sweeps,
        dropout: h.dropout,
    };
    let topology = || GraphData {
        name: data.name.clone(),
        nodes: data.nodes,
        edges: fateplan_runtime::edges::EdgeSource::owned(data.src.clone(), data.dst.clone()),
        features: None,
        classes: None,
        targets: false,
        gaps: None,
    };
    let h = Hyper { heads: 2, ..h };
    for method in [ShareMethod::Ranges, ShareMethod::Mincut] {
        let shared = prepare_shared(data.clone(), &h, 3, 2, method).unwrap();
        let got = share_workload(&topology(), &spec, 3, 2, method, None).unwrap();
        assert_eq!(
            got.workload.to_json(),
            shared.workload.to_json(),
            "{method:?}"
        );
        assert_eq!(got.stats, shared.stats);
        // Built again by other sweeps, the workload of shares prepared
        // with them (GCN's shape here).
        let gcn = Hyper {
            model: GnnModel::Gcn,
            heads: 1,
            ..h
        };
        let shape = share_workload(
            &topology(),
            &train::spec(data.features, data.classes, &gcn, "unused"),
            3,
            2,
            method,
            None,
        )
        .unwrap()
        .shape;
        for sweeps in ["outputs", "inputs", "f1,b2"] {
            let sweeps = Sweeps::parse(sweeps).unwrap();
            let prepared = prepare_shared(data.clone(), &Hyper { sweeps, ..gcn }, 3, 2, method);
            assert_eq!(
                shape.workload(sweeps).unwrap().to_json(),
                prepared.unwrap().workload.to_json(),
                "{method:?} {}",
                sweeps.name()
            );
        }
    }
    // With the partitioning measured already, the same.
    let owner = Partitioning::mincut(
        data.nodes,
        &data.src,
        &data.dst,
        3,
        &PartitionOptions::default(),
    )
    .unwrap()
    .owner;
    let shared = prepare_shared(data.clone(), &h, 3, 2, ShareMethod::Mincut).unwrap();
    let workload = share_workload(
        &topology(),
        &spec,
        3,
        2,
        ShareMethod::Mincut,
        Some(owner.clone()),
    )
    .unwrap()
    .workload;
    assert_eq!(workload.to_json(), shared.workload.to_json());
    // A partitioning is the min-cut shares' input: refused with ranges.
    let Err(error) = share_workload(
        &topology(),
        &spec,
        3,
        2,
        ShareMethod::Ranges,
        Some(owner.clone()),
    ) else {
        panic!("dropped the partitioning given");
    };
    assert!(error.to_string().contains("vertex ranges"), "{error}");
    // A partitioning of another graph or device count is refused.
    let Err(error) = share_workload(
        &topology(),
        &spec,
        2,
        2,
        ShareMethod::Mincut,
        Some(owner[1..].to_vec()),
    ) else {
        panic!("took a partitioning of another graph");
    };
    assert!(error.to_string().contains("owner"), "{error}");
    // Every device's partitions are ranges of one graph: at most 256.
    let Err(error) = share_workload(&topology(), &spec, 4, 65, ShareMethod::Ranges, None) else {
        panic!("built 260 partitions");
    };
    assert!(
        error.to_string().contains("260 in all") && error.to_string().contains("64 per device"),
        "{error}"
    );
}
