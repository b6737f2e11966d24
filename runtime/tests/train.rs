//! Training through the executor: the same model whatever the plan, budgets
//! that hold, and SSD faults that fail loudly or fall back to the same
//! numbers.

mod common;
use common::{planted, profile, roomy};

use std::path::Path;
use std::sync::Arc;

use fateplan_planner::gnn::{GnnModel, LayerOrder, Sweeps, Transposes};
use fateplan_planner::plan::{Budgets, Fate, Plan};
use fateplan_planner::{plan, PlanOptions, Policy};
use fateplan_runtime::cpu::Hyper;
use fateplan_runtime::dataset::Dataset;
use fateplan_runtime::exec::{Data, ExecError, SsdTier};
use fateplan_runtime::spill::{tier_key, Faults, SpillOptions, SpillStore};
use fateplan_runtime::train::{self, Prepared, TrainReport, TrainRun};
use proptest::prelude::*;

fn hyper(model: GnnModel, layers: u32, hidden: u32, seed: u64) -> Hyper {
    Hyper {
        layers,
        hidden,
        seed,
        ..Hyper::new(model)
    }
}

fn make_plan(
    prepared: &Prepared,
    policy: Policy,
    budgets: Budgets,
) -> Result<Plan, fateplan_planner::Error> {
    let profile = profile();
    let options = PlanOptions {
        budgets,
        ssd_staging_bytes: 1 << 16,
        ..PlanOptions::new(policy, &profile)
    };
    plan(&prepared.workload, &profile, &options)
}

fn spill(dir: &Path, options: SpillOptions) -> Arc<SpillStore> {
    train::open_spill(dir, 1 << 40, 100_000, Some(options)).unwrap()
}

fn run(
    dataset: &Dataset,
    hyper: Hyper,
    partitions: u32,
    plan: Plan,
    epochs: u32,
    ssd: Option<Arc<dyn SsdTier>>,
) -> Result<TrainReport, ExecError> {
    let prepared = train::prepare(dataset.clone(), &hyper, partitions).unwrap();
    let run = TrainRun {
        plan: Arc::new(plan),
        epochs,
        budgets: None,
        ssd,
        trace: false,
        backend: Default::default(),
        stop: None,
        evaluate_every: 0,
    };
    let (report, _) = train::train(prepared, hyper, run, &mut |_| {})?;
    let (peak, budget) = (report.peak_bytes, report.budgets);
    assert!(
        peak.hbm <= budget.hbm_bytes
            && peak.host <= budget.host_bytes
            && peak.ssd <= budget.ssd_bytes
    );
    Ok(report)
}

/// Trains `dataset` with every forced fate and a mixed plan at two fifths
/// of the retain-all peak (a quarter, until the operators' scratch was
/// counted: on Cora the first layer's dropped input takes a slab as large
/// as a partition's features); every run must match retain-all bit for
/// bit.
fn same_model_whatever_the_plan(dataset: &Dataset, hyper: Hyper, partitions: u32, epochs: u32) {
    let prepared = train::prepare(dataset.clone(), &hyper, partitions).unwrap();
    let retain = make_plan(&prepared, Policy::RetainAll, roomy()).unwrap();
    let tight = Budgets {
        hbm_bytes: retain.predicted.peak_bytes.hbm / 5 * 2,
        ..roomy()
    };
    let reference = run(dataset, hyper, partitions, retain, epochs, None).unwrap();
    assert!(reference.final_loss.is_finite());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SsdTier> = spill(dir.path(), SpillOptions::with_budget(0));
    let mut plans = vec![
        make_plan(&prepared, Policy::OffloadHostAll, roomy()).unwrap(),
        make_plan(&prepared, Policy::OffloadSsdAll, roomy()).unwrap(),
        make_plan(&prepared, Policy::RecomputeAll, roomy()).unwrap(),
    ];
    match make_plan(&prepared, Policy::Dp, tight) {
        Ok(mixed) => plans.push(mixed),
        Err(error) => panic!("no plan at two fifths of the retain-all peak: {error}"),
    }
    for p in plans {
        let policy = p.policy.clone();
        let moved = p.predicted.bytes_moved;
        let report = run(dataset, hyper, partitions, p, epochs, Some(store.clone())).unwrap();
        assert_eq!(report.losses, reference.losses, "{policy}: losses differ");
        assert_eq!(
            report.weights_sha256, reference.weights_sha256,
            "{policy}: weights differ"
        );
        if policy != "recompute-all" && policy != "dp" {
            assert!(
                moved.h2d > 0,
                "{policy} moves nothing: the comparison would be empty"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, .. ProptestConfig::default() })]
    #[test]
    fn the_model_is_the_same_whatever_the_plan(
        sage in any::<bool>(),
        layers in 2u32..4,
        hidden in 4u32..12,
        partitions in 4u32..7,
        nodes in 200u32..400,
        seed in 0u64..1000,
    ) {
        let model = if sage { GnnModel::Sage } else { GnnModel::Gcn };
        same_model_whatever_the_plan(&planted(nodes, seed), hyper(model, layers, hidden, seed), partitions, 3);
    }

    #[test]
    fn gat_is_the_same_model_whatever_the_plan(
        layers in 2u32..4,
        heads in 1u32..4,
        head_width in 1u32..5,
        partitions in 4u32..7,
        nodes in 200u32..400,
        seed in 0u64..1000,
    ) {
        let h = gat(layers, heads, head_width, seed);
        same_model_whatever_the_plan(&planted(nodes, seed), h, partitions, 3);
    }
}

/// A GCN layer narrower than its input projects first (the default
/// order); projecting first or aggregating first trains the same model,
/// dropout included, within float rounding.
#[test]
fn projecting_first_trains_the_same_model() {
    let dataset = planted(300, 7);
    for layers in [2, 3] {
        // 12 features, 8 hidden, 4 classes: every layer narrows.
        let narrower = hyper(GnnModel::Gcn, layers, 8, 7);
        let aggregate_first = Hyper {
            order: LayerOrder::AggregateFirst,
            ..narrower
        };
        let mut reports = Vec::new();
        for h in [narrower, aggregate_first] {
            let prepared = train::prepare(dataset.clone(), &h, 4).unwrap();
            let biases = prepared
                .workload
                .ops
                .iter()
                .filter(|op| op.name.starts_with("bias["))
                .count();
            // The last layer's bias after its aggregation, per partition.
            let expected = if h.order == LayerOrder::Narrower {
                4
            } else {
                0
            };
            assert_eq!(biases, expected, "{}", h.order.name());
            let p = make_plan(&prepared, Policy::RetainAll, roomy()).unwrap();
            reports.push(run(&dataset, h, 4, p, 5, None).unwrap());
        }
        let (projected, aggregated) = (&reports[0], &reports[1]);
        assert_eq!(projected.losses.len(), aggregated.losses.len());
        for (a, b) in projected.losses.iter().zip(&aggregated.losses) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs(),
                "{layers} layers: {a} against {b}"
            );
        }
        assert_eq!(projected.test_accuracy, aggregated.test_accuracy);
    }
}

/// Stored transposes (the default) and built ones train the same model
/// bit for bit: the gather over a block's stored transpose adds what the
/// scatter over the block adds, in the same order. The plan offloads
/// every tensor to the SSD, so the stored transposes go through the spill
/// store and back.
#[test]
fn stored_and_built_transposes_train_the_same_model() {
    let dataset = planted(300, 5);
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        for partitions in [1, 3] {
            let stored = hyper(model, 3, 8, 5);
            let built = Hyper {
                transposes: Transposes::Built,
                ..stored
            };
            let mut reports = Vec::new();
            for h in [stored, built] {
                let prepared = train::prepare(dataset.clone(), &h, partitions).unwrap();
                let transposes = prepared
                    .workload
                    .tensors
                    .iter()
                    .filter(|t| t.name.starts_with("adj_t["))
                    .count();
                let blocks = prepared
                    .workload
                    .tensors
                    .iter()
                    .filter(|t| t.name.starts_with("adj["))
                    .count();
                let expected = if h.transposes == Transposes::Stored {
                    blocks
                } else {
                    0
                };
                assert_eq!(transposes, expected, "{model:?} {partitions}");
                let p = make_plan(&prepared, Policy::OffloadSsdAll, roomy()).unwrap();
                let dir = tempfile::tempdir().unwrap();
                let store: Arc<dyn SsdTier> = spill(dir.path(), SpillOptions::with_budget(0));
                reports.push(run(&dataset, h, partitions, p, 4, Some(store)).unwrap());
            }
            let (stored, built) = (&reports[0], &reports[1]);
            assert!(stored.final_loss.is_finite());
            assert_eq!(stored.losses, built.losses, "{model:?} {partitions}");
            assert_eq!(
                stored.weights_sha256, built.weights_sha256,
                "{model:?} {partitions}"
            );
        }
    }
}

/// An aggregation run input partition after input partition trains the
/// same model, bit for bit, as one run output after output: each output
/// sums its inputs in the same order. The plans are dp's at a third of
/// retain-all's peak, so the two orders' tensors move differently. GAT's
/// forward aggregations alone can (every row's edge softmax first).
#[test]
fn aggregations_by_inputs_train_the_same_model() {
    let dataset = planted(300, 9);
    let both = ["outputs", "inputs", "f1,b3", "f2,b2", "inputs/2", "f1,b2/2"];
    let forward = ["outputs", "inputs", "f1,f3", "f2", "inputs/2", "f1,f2/2"];
    for (model, sweeps) in [
        (GnnModel::Gcn, both),
        (GnnModel::Sage, both),
        (GnnModel::Gat, forward),
    ] {
        let outputs = match model {
            GnnModel::Gat => gat(3, 2, 4, 9),
            _ => hyper(model, 3, 8, 9),
        };
        let mut reports = Vec::new();
        for sweep in sweeps {
            let h = Hyper {
                sweeps: Sweeps::parse(sweep).unwrap(),
                ..outputs
            };
            let prepared = train::prepare(dataset.clone(), &h, 3).unwrap();
            // By inputs, the first layer's aggregation reads the first
            // partition's features in three operators in a row.
            let readers: Vec<String> = prepared
                .workload
                .ops
                .iter()
                .filter(|op| op.name.starts_with("agg[l1,"))
                .map(|op| op.name.clone())
                .collect();
            let by_inputs = readers[..3].iter().all(|n| n.ends_with(",s0]"));
            let grouped = sweep.contains('/');
            assert_eq!(
                by_inputs,
                !grouped && (sweep == "inputs" || sweep.contains("f1")),
                "{readers:?}"
            );
            // In 2 groups of outputs (partition 0, then 1 and 2), the
            // second group reads the first partition's features first.
            let second_by_inputs = readers[3..5].iter().all(|n| n.ends_with(",s0]"));
            assert_eq!(second_by_inputs, grouped, "{sweep}: {readers:?}");
            let peak = make_plan(&prepared, Policy::RetainAll, roomy())
                .unwrap()
                .predicted
                .peak_bytes
                .hbm;
            let budgets = Budgets {
                hbm_bytes: peak / 3,
                ..roomy()
            };
            let p = make_plan(&prepared, Policy::Dp, budgets).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn SsdTier> = spill(dir.path(), SpillOptions::with_budget(0));
            reports.push((sweep, run(&dataset, h, 3, p, 4, Some(store)).unwrap()));
        }
        let (_, first) = &reports[0];
        assert!(first.final_loss.is_finite());
        for (sweep, report) in &reports[1..] {
            assert_eq!(first.losses, report.losses, "{model:?} {sweep}");
            assert_eq!(
                first.weights_sha256, report.weights_sha256,
                "{model:?} {sweep}"
            );
        }
    }
}

#[test]
fn the_reported_parts_are_means_over_the_iterations_timed() {
    // The first iteration warms caches and allocators and is left out of
    // the iteration's mean; its parts are left out alike, so they never
    // add up to more than the iteration they make.
    let dataset = planted(300, 7);
    let h = hyper(GnnModel::Gcn, 2, 8, 7);
    let prepared = train::prepare(dataset.clone(), &h, 4).unwrap();
    let plan = make_plan(&prepared, Policy::RetainAll, roomy()).unwrap();
    let run = TrainRun {
        plan: Arc::new(plan),
        epochs: 3,
        budgets: None,
        ssd: None,
        trace: false,
        backend: Default::default(),
        stop: None,
        evaluate_every: 0,
    };
    let mut epochs = Vec::new();
    let (report, _) = train::train(prepared, h, run, &mut |e| epochs.push(*e)).unwrap();
    assert_eq!(epochs.len(), 3);
    let mean = |f: fn(&train::EpochStats) -> f64| (f(&epochs[1]) + f(&epochs[2])) / 2.0;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-9);
    assert!(close(report.iteration_s, mean(|e| e.iteration_s)));
    assert!(close(report.compute_s, mean(|e| e.compute_s)));
    assert!(close(report.recompute_s, mean(|e| e.recompute_s)));
    assert!(close(report.wait_s, mean(|e| e.wait_s)));
}

/// GAT with `heads` heads of `head_width` features in its hidden layers.
fn gat(layers: u32, heads: u32, head_width: u32, seed: u64) -> Hyper {
    Hyper {
        heads,
        ..hyper(GnnModel::Gat, layers, heads * head_width, seed)
    }
}

fn cora() -> Option<Dataset> {
    let root = std::env::var_os("FATEPLAN_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    let dir = root.join("cora");
    if !dir.is_dir() {
        eprintln!("skipped: Cora not found (set FATEPLAN_DATA to the folder holding cora/)");
        return None;
    }
    let mut d = Dataset::load(&dir).unwrap();
    d.row_normalize_features();
    Some(d)
}

#[test]
fn cora_is_the_same_model_whatever_the_plan() {
    let Some(cora) = cora() else { return };
    same_model_whatever_the_plan(&cora, hyper(GnnModel::Gcn, 2, 16, 1), 8, 3);
}

#[test]
fn cora_gat_is_the_same_model_whatever_the_plan() {
    let Some(cora) = cora() else { return };
    same_model_whatever_the_plan(&cora, gat(2, 8, 8, 1), 8, 3);
}

fn ssd_plan(dataset: &Dataset, hyper: Hyper) -> Plan {
    let prepared = train::prepare(dataset.clone(), &hyper, 3).unwrap();
    make_plan(&prepared, Policy::OffloadSsdAll, roomy()).unwrap()
}

#[test]
fn io_uring_unavailable_falls_back_to_the_same_numbers() {
    let data = planted(200, 7);
    let h = hyper(GnnModel::Gcn, 2, 8, 7);
    let dir = tempfile::tempdir().unwrap();
    let fast = run(
        &data,
        h,
        3,
        ssd_plan(&data, h),
        2,
        Some(spill(dir.path(), SpillOptions::with_budget(0))),
    )
    .unwrap();
    for options in [
        SpillOptions {
            force_fallback: true,
            ..SpillOptions::with_budget(0)
        },
        SpillOptions {
            faults: Faults {
                fail_uring_setup: true,
                ..Faults::default()
            },
            ..SpillOptions::with_budget(0)
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = spill(dir.path(), options);
        assert!(!store.mode().uring, "{}", store.mode());
        let slow = run(&data, h, 3, ssd_plan(&data, h), 2, Some(store)).unwrap();
        assert_eq!(slow.weights_sha256, fast.weights_sha256);
        assert_eq!(slow.losses, fast.losses);
    }
}

/// Tensors larger than a staging buffer move to the SSD and back a
/// chunk at a time, through the staging the plan counts, and train the
/// model that staging holding them whole trains, and keeping them all on
/// the device.
#[test]
fn tensors_larger_than_a_staging_buffer_train_the_same_model() {
    let data = planted(2400, 11);
    let h = hyper(GnnModel::Sage, 2, 16, 11);
    let prepared = train::prepare(data.clone(), &h, 4).unwrap();
    let largest = prepared.workload.tensors.iter().map(|t| t.bytes).max();
    let largest = largest.unwrap().div_ceil(4096) * 4096;
    assert!(largest >= 3 * 4096, "{largest}");
    let profile = profile();
    let mut weights = Vec::new();
    for staging in [4 * 4096, 4 * largest] {
        let options = PlanOptions {
            budgets: roomy(),
            ssd_staging_bytes: staging,
            ..PlanOptions::new(Policy::OffloadSsdAll, &profile)
        };
        let p = plan(&prepared.workload, &profile, &options).unwrap();
        assert_eq!(p.ssd_staging_bytes, staging);
        // Blocks too: their row starts (600 of a partition's rows, 8
        // bytes each after the form's 25-byte header) are cut inside a
        // word by the first chunk's end and end inside the second, where
        // the columns begin.
        assert!(p
            .tensors
            .iter()
            .any(|t| t.name.starts_with("adj[") && t.fate == Fate::StreamSsd));
        let dir = tempfile::tempdir().unwrap();
        let store = spill(dir.path(), SpillOptions::with_budget(0));
        let report = run(&data, h, 4, p, 3, Some(store.clone())).unwrap();
        // The transfers' staging buffers, a share each, kept.
        assert!(store.kept_bytes() > 0);
        assert!(
            store.kept_bytes() <= staging,
            "{} of {staging}",
            store.kept_bytes()
        );
        weights.push(report.weights_sha256);
    }
    let retain = make_plan(&prepared, Policy::RetainAll, roomy()).unwrap();
    weights.push(run(&data, h, 4, retain, 3, None).unwrap().weights_sha256);
    assert_eq!(weights[0], weights[1]);
    assert_eq!(weights[0], weights[2]);
}

#[test]
fn a_full_spill_disk_is_a_clear_error() {
    let data = planted(200, 8);
    let h = hyper(GnnModel::Gcn, 2, 8, 8);
    let dir = tempfile::tempdir().unwrap();
    let store = spill(
        dir.path(),
        SpillOptions {
            faults: Faults {
                enospc_after_bytes: Some(64 << 10),
                ..Faults::default()
            },
            ..SpillOptions::with_budget(0)
        },
    );
    let error = run(&data, h, 3, ssd_plan(&data, h), 2, Some(store))
        .unwrap_err()
        .to_string();
    assert!(error.contains("No space left on device"), "{error}");
}

#[test]
fn an_unwritable_spill_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let inside = file.join("spill");
    let error = train::open_spill(&inside, 1 << 20, 10, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("spill"), "{error}");
}

/// Flips one byte of every block on disk right after it is written.
struct Corrupting(Arc<SpillStore>);

impl Corrupting {
    /// Flips the first byte of the tier's first chunk of `key`.
    fn corrupt(&self, key: u64) {
        let (path, offset) = self.0.block_location(tier_key(key, 0).unwrap()).unwrap();
        let mut contents = std::fs::read(&path).unwrap();
        contents[offset as usize] ^= 0x40;
        std::fs::write(&path, contents).unwrap();
    }
}

impl SsdTier for Corrupting {
    fn put(&self, key: u64, bytes: &[u8]) -> Result<(), ExecError> {
        self.0.put(key, bytes)?;
        self.corrupt(key);
        Ok(())
    }
    fn get(&self, key: u64) -> Result<Vec<u8>, ExecError> {
        self.0.get(key)
    }
    fn put_data(&self, key: u64, data: &Data, chunk_bytes: usize) -> Result<(), ExecError> {
        self.0.put_data(key, data, chunk_bytes)?;
        self.corrupt(key);
        Ok(())
    }
    fn get_data(&self, key: u64, chunk_bytes: usize) -> Result<Data, ExecError> {
        self.0.get_data(key, chunk_bytes)
    }
    fn remove(&self, key: u64) -> Result<(), ExecError> {
        SsdTier::remove(self.0.as_ref(), key)
    }
}

#[test]
fn a_corrupted_spill_block_is_caught_not_used() {
    let data = planted(200, 9);
    let h = hyper(GnnModel::Gcn, 2, 8, 9);
    let dir = tempfile::tempdir().unwrap();
    let store = Corrupting(spill(dir.path(), SpillOptions::with_budget(0)));
    let error = run(&data, h, 3, ssd_plan(&data, h), 2, Some(Arc::new(store)))
        .unwrap_err()
        .to_string();
    assert!(error.contains("checksum"), "{error}");
}

#[test]
fn a_budget_below_the_plan_is_refused_before_training() {
    let data = planted(200, 10);
    let h = hyper(GnnModel::Sage, 2, 8, 10);
    let prepared = train::prepare(data.clone(), &h, 2).unwrap();
    let p = make_plan(&prepared, Policy::RetainAll, roomy()).unwrap();
    let mut budgets = p.budgets;
    budgets.hbm_bytes = p.predicted.peak_bytes.hbm - 1;
    let run = TrainRun {
        plan: Arc::new(p),
        epochs: 1,
        budgets: Some(budgets),
        ssd: None,
        trace: false,
        backend: Default::default(),
        stop: None,
        evaluate_every: 0,
    };
    let error = train::train(prepared, h, run, &mut |_| panic!("no epoch may run")).unwrap_err();
    assert!(matches!(error, ExecError::PlanTooBig { .. }), "{error}");
}

#[test]
fn a_plan_for_another_workload_is_refused() {
    let data = planted(200, 11);
    let h = hyper(GnnModel::Gcn, 2, 8, 11);
    let other = train::prepare(data.clone(), &hyper(GnnModel::Gcn, 2, 9, 11), 2).unwrap();
    let p = make_plan(&other, Policy::RetainAll, roomy()).unwrap();
    let prepared = train::prepare(data.clone(), &h, 2).unwrap();
    let run = TrainRun {
        plan: Arc::new(p),
        epochs: 1,
        budgets: None,
        ssd: None,
        trace: false,
        backend: Default::default(),
        stop: None,
        evaluate_every: 0,
    };
    let error = train::train(prepared, h, run, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(error.contains("plan again"), "{error}");
}

#[test]
fn a_run_that_cannot_train_is_refused_before_it_starts_naming_why() {
    let dataset = planted(300, 3);
    let hyper = Hyper::new(GnnModel::Gcn);
    let prepared = || train::prepare(dataset.clone(), &hyper, 2).unwrap();
    let planned = make_plan(&prepared(), Policy::RetainAll, roomy()).unwrap();
    let attempt = |hyper: Hyper, epochs: u32| {
        let run = TrainRun {
            plan: Arc::new(planned.clone()),
            epochs,
            budgets: None,
            ssd: None,
            trace: false,
            backend: Default::default(),
            stop: None,
            evaluate_every: 0,
        };
        let mut ran = 0;
        let result = train::train(prepared(), hyper, run, &mut |_| ran += 1);
        assert_eq!(ran, 0, "no epoch may run");
        result.unwrap_err().to_string()
    };
    let cases = [
        (hyper, 0, "epochs: 0"),
        (Hyper { lr: -1.0, ..hyper }, 1, "hyper-parameter lr: -1"),
        (
            Hyper {
                hidden: 32,
                ..hyper
            },
            1,
            "hidden 32 (prepared with 16)",
        ),
        (
            Hyper {
                model: GnnModel::Sage,
                ..hyper
            },
            1,
            "model sage (prepared with gcn)",
        ),
    ];
    for (hyper, epochs, expected) in cases {
        let message = attempt(hyper, epochs);
        assert!(message.contains(expected), "{message}");
    }
    // A graph whose training mask selects no node has nothing to learn.
    let mut untrained = dataset.clone();
    untrained.train_mask.iter_mut().for_each(|m| *m = false);
    let none = train::prepare(untrained, &hyper, 2).unwrap();
    let run = TrainRun {
        plan: Arc::new(make_plan(&none, Policy::RetainAll, roomy()).unwrap()),
        epochs: 1,
        budgets: None,
        ssd: None,
        trace: false,
        backend: Default::default(),
        stop: None,
        evaluate_every: 0,
    };
    let error = train::train(none, hyper, run, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&error, ExecError::InvalidInput { field, message }
            if field == "train_mask" && message.contains("selects none of the graph's 300 nodes")),
        "{error}"
    );
    // And in preparing: a learning rate that cannot train.
    let nan = Hyper {
        lr: f32::NAN,
        ..hyper
    };
    let message = match train::prepare(dataset.clone(), &nan, 2) {
        Ok(_) => panic!("a NaN learning rate was prepared"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("hyper-parameter lr: NaN"), "{message}");
}

/// The report hands back the trained model: each layer's parameters, in
/// the layout `LayerWeights` gives, whose bytes are the report's digest;
/// and a run told to stop does so after the epoch in which it was told,
/// reporting the model of that epoch.
#[test]
fn the_report_holds_the_trained_weights_and_a_run_stops_when_told() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dataset = planted(300, 4);
    let (features, classes) = (12, 4);
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let h = hyper(model, 2, 8, 5);
        let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
        let plan = Arc::new(make_plan(&prepared, Policy::RetainAll, roomy()).unwrap());
        let full = run(&dataset, h, 2, (*plan).clone(), 6, None).unwrap();
        let names: Vec<&str> = full.weights.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["w[l1]", "w[l2]"], "{model:?}");
        let terms = if model == GnnModel::Sage { 2 } else { 1 };
        // GAT's hidden layer: the heads' attention vectors too.
        let attention = |d_out: usize| if model == GnnModel::Gat { 2 * d_out } else { 0 };
        let lengths = [
            terms * features * 8 + attention(8) + 8,
            terms * 8 * classes + attention(classes) + classes,
        ];
        for (w, len) in full.weights.iter().zip(lengths) {
            assert_eq!(w.values.len(), len, "{model:?} {}", w.name);
            assert!(w.values.iter().all(|v| v.is_finite()), "{model:?}");
        }
        let digest = {
            use sha2::Digest;
            let mut hasher = sha2::Sha256::new();
            for v in full.weights.iter().flat_map(|w| &w.values) {
                hasher.update(v.to_le_bytes());
            }
            hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        assert_eq!(digest, full.weights_sha256, "{model:?}");

        // Told to stop in epoch 3: three epochs, and the model three
        // epochs train.
        let stop = Arc::new(AtomicBool::new(false));
        let told = stop.clone();
        let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
        let stopped = TrainRun {
            stop: Some(stop),
            ..TrainRun::new(plan.clone(), 6)
        };
        let (early, _) = train::train(prepared, h, stopped, &mut |epoch| {
            if epoch.epoch == 3 {
                told.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
        assert_eq!(early.epochs, 3, "{model:?}");
        assert_eq!(early.losses[..], full.losses[..3], "{model:?}");
        let three = run(&dataset, h, 2, (*plan).clone(), 3, None).unwrap();
        assert_eq!(early.weights, three.weights, "{model:?}");
        assert_eq!(early.weights_sha256, three.weights_sha256, "{model:?}");
        assert_ne!(early.weights, full.weights, "{model:?}");
    }
}

/// Evaluating every few epochs tells the progress callback the
/// validation accuracy then and after the last epoch, and changes
/// nothing the training computes: the same losses and weights, under a
/// plan that keeps everything and one that offloads to the host.
#[test]
fn evaluating_between_epochs_reports_validation_and_trains_the_same() {
    let dataset = planted(300, 4);
    for model in [GnnModel::Gcn, GnnModel::Gat] {
        for policy in [Policy::RetainAll, Policy::OffloadHostAll] {
            let h = hyper(model, 2, 8, 5);
            let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
            let plan = Arc::new(make_plan(&prepared, policy, roomy()).unwrap());
            let trained = |every: u32| {
                let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
                let run = TrainRun {
                    evaluate_every: every,
                    ..TrainRun::new(plan.clone(), 5)
                };
                let mut seen = Vec::new();
                let (report, _) = train::train(prepared, h, run, &mut |epoch| {
                    seen.push((epoch.epoch, epoch.val_accuracy));
                })
                .unwrap();
                (report, seen)
            };
            let (plain, plain_seen) = trained(0);
            assert!(
                plain_seen.iter().all(|(_, v)| v.is_none()),
                "{plain_seen:?}"
            );
            let (evaluated, seen) = trained(2);
            let at: Vec<u32> = seen
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|&(e, _)| e)
                .collect();
            assert_eq!(at, [2, 4, 5], "{model:?} {policy:?}");
            // The evaluation after the last epoch is the report's.
            assert_eq!(
                seen.last().unwrap().1,
                plain.val_accuracy,
                "{model:?} {policy:?}"
            );
            assert_eq!(evaluated.losses, plain.losses, "{model:?} {policy:?}");
            assert_eq!(
                evaluated.weights_sha256, plain.weights_sha256,
                "{model:?} {policy:?}"
            );
            assert_eq!(
                evaluated.test_accuracy, plain.test_accuracy,
                "{model:?} {policy:?}"
            );
            assert_eq!(
                evaluated.peak_bytes, plain.peak_bytes,
                "{model:?} {policy:?}"
            );
        }
    }
}
