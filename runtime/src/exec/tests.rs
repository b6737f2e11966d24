//! The executor over a backend whose outputs are hashes of its inputs: any
//! wrong, stale or missing byte reaching an operator changes the final
//! parameters. Every plan of a workload must give the same parameters,
//! and the arenas must peak exactly where the planner said.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_planner::plan::{Budgets, Plan};
use fateplan_planner::workload::{Op, Tensor};
use fateplan_planner::{plan, PlanOptions, Policy, Profile, Workload};

use super::data::Data;
use super::{Backend, ExecError, ExecOptions, Executor, SsdTier};

/// Outputs are a mix of the inputs' values, the op id and the iteration.
struct HashBackend {
    iteration: u64,
    /// Inputs handed over as the only handle on their buffer, counted
    /// and then dropped (as a backend that reused them would).
    handed: Arc<AtomicUsize>,
    /// The operator (by its name) whose output cannot be allocated, as a
    /// backend out of memory finds.
    out_of_memory_at: Option<String>,
}

impl HashBackend {
    fn new() -> HashBackend {
        HashBackend {
            iteration: 0,
            handed: Arc::default(),
            out_of_memory_at: None,
        }
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x
}

fn digest(data: &Data) -> u64 {
    data.to_bytes()
        .unwrap()
        .iter()
        .fold(0xcbf29ce484222325, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        })
}

impl Backend for HashBackend {
    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError> {
        let n = (tensor.bytes / 4) as usize;
        Ok(Data::F32(
            (0..n)
                .map(|k| (mix(tensor.id.0 as u64 * 131 + k as u64) % 1000) as f32)
                .collect(),
        ))
    }

    fn begin_iteration(&mut self, iteration: u64) -> Result<(), ExecError> {
        self.iteration = iteration;
        Ok(())
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        if self.out_of_memory_at.as_ref() == Some(&op.name) {
            super::data::zeros::<f32>(1 << 61)?;
        }
        let seed = inputs
            .iter()
            .fold(mix(op.id.0 as u64 + 1000 * self.iteration), |h, d| {
                mix(h ^ digest(d))
            });
        // Output sizes are not known here; the executor checks sizes
        // against the plan, so produce one value per output.
        Ok(op
            .outputs
            .iter()
            .enumerate()
            .map(|(k, _)| Data::F32(vec![(mix(seed + k as u64) % 100_000) as f32]))
            .collect())
    }

    fn run_owned(&mut self, op: &Op, inputs: Vec<Arc<Data>>) -> Result<Vec<Data>, ExecError> {
        let refs: Vec<&Data> = inputs.iter().map(|d| d.as_ref()).collect();
        let outputs = self.run(op, &refs)?;
        for input in inputs {
            if Arc::try_unwrap(input).is_ok() {
                self.handed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(outputs)
    }

    fn update(
        &mut self,
        op: &Op,
        params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError> {
        let seed = others
            .iter()
            .fold(mix(op.id.0 as u64), |h, d| mix(h ^ digest(d)));
        for param in params.iter_mut() {
            for (k, value) in param.f32_mut()?.iter_mut().enumerate().take(8) {
                *value += (mix(seed + k as u64) % 7) as f32;
            }
        }
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct MemorySsd {
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
}

impl SsdTier for MemorySsd {
    fn put(&self, key: u64, bytes: &[u8]) -> Result<(), ExecError> {
        self.blocks.lock().unwrap().insert(key, bytes.to_vec());
        Ok(())
    }
    fn get(&self, key: u64) -> Result<Vec<u8>, ExecError> {
        self.blocks
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .ok_or_else(|| ExecError::ssd(std::io::Error::other(format!("no block {key}"))))
    }
    fn remove(&self, key: u64) -> Result<(), ExecError> {
        self.blocks
            .lock()
            .unwrap()
            .remove(&key)
            .map(|_| ())
            .ok_or_else(|| ExecError::ssd(std::io::Error::other(format!("no block {key}"))))
    }
}

fn profile() -> Profile {
    Profile::from_json(
        include_str!("../../../profiles/a100-80g.json"),
        "a100-80g.json",
    )
    .unwrap()
}

fn workload(model: GnnModel, parts: u32) -> Workload {
    let spec = GnnSpec {
        model,
        layers: 3,
        hidden: 8,
        heads: 2,
        features: 6,
        classes: 3,
        graph_name: "toy".into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    };
    build_gnn(&spec, &BlockCounts::skewed(300, 2400, parts).unwrap()).unwrap()
}

fn make_plan(w: &Workload, policy: Policy, hbm_bytes: u64) -> Plan {
    let profile = profile();
    let options = PlanOptions {
        budgets: Budgets {
            hbm_bytes,
            host_bytes: 1 << 40,
            ssd_bytes: 1 << 40,
        },
        ssd_staging_bytes: 4096,
        ..PlanOptions::new(policy, &profile)
    };
    plan(w, &profile, &options).unwrap()
}

/// Runs `iterations` and returns every parameter's final contents.
fn run(plan: Plan, iterations: u32) -> Vec<(String, Data)> {
    let plan = Arc::new(plan);
    let ssd: Arc<dyn SsdTier> = Arc::new(MemorySsd::default());
    let mut executor = Executor::new(
        plan.clone(),
        HashBackend::new(),
        Some(ssd),
        ExecOptions::default(),
    )
    .unwrap();
    for _ in 0..iterations {
        executor.run_iteration().unwrap();
    }
    let peaks = executor.peak_bytes();
    assert_eq!(
        peaks, plan.predicted.peak_bytes,
        "{}: executor peaks differ from the plan's",
        plan.policy
    );
    let budgets = executor.budgets();
    assert!(
        peaks.hbm <= budgets.hbm_bytes
            && peaks.host <= budgets.host_bytes
            && peaks.ssd <= budgets.ssd_bytes
    );
    plan.workload
        .definition
        .tensors
        .iter()
        .filter(|t| t.kind == fateplan_planner::workload::TensorKind::Parameter)
        .map(|t| {
            (
                t.name.clone(),
                executor.device_data(t.id.index()).unwrap().clone(),
            )
        })
        .collect()
}

/// How many device copies of `plan` end handed to an output.
fn handed_lives(plan: &Plan) -> usize {
    use fateplan_planner::passes::{memory::copy_lives, timeline::Timeline};
    let workload = &plan.workload.definition;
    let fates: Vec<_> = plan.tensors.iter().map(|t| t.fate).collect();
    let timeline = Timeline::new(workload.ops.len(), &plan.schedule);
    copy_lives(
        workload,
        &fates,
        &plan.schedule,
        &timeline,
        plan.ssd_staging_bytes,
    )
    .iter()
    .filter(|life| life.handed)
    .count()
}

#[test]
fn every_plan_gives_the_same_parameters_and_the_planned_peaks() {
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let w = workload(model, 3);
        let roomy = 1 << 40;
        let reference = run(make_plan(&w, Policy::RetainAll, roomy), 2);
        let retain = make_plan(&w, Policy::RetainAll, roomy);
        let retain_peak = retain.predicted.peak_bytes.hbm;
        // GCN's and SAGE's running sums are handed to the aggregation
        // that adds into them: the arenas' peaks below count them so.
        let handed = handed_lives(&retain);
        assert_eq!(handed > 0, model != GnnModel::Gat, "{model:?}: {handed}");
        let mut plans = vec![
            make_plan(&w, Policy::OffloadHostAll, roomy),
            make_plan(&w, Policy::OffloadSsdAll, roomy),
            make_plan(&w, Policy::RecomputeAll, roomy),
        ];
        for fraction in [0.25, 0.5] {
            let budget = (retain_peak as f64 * fraction) as u64;
            for policy in [Policy::Dp, Policy::CapacityGreedy] {
                let profile = profile();
                let options = PlanOptions {
                    budgets: Budgets {
                        hbm_bytes: budget,
                        host_bytes: 1 << 40,
                        ssd_bytes: 1 << 40,
                    },
                    ssd_staging_bytes: 4096,
                    ..PlanOptions::new(policy, &profile)
                };
                if let Ok(p) = plan(&w, &profile, &options) {
                    plans.push(p);
                }
            }
        }
        assert!(plans.len() >= 4, "{model:?}: too few plans fit");
        for p in plans {
            let policy = p.policy.clone();
            assert_eq!(run(p, 2), reference, "{model:?} {policy}");
        }
    }
}

#[test]
fn a_budget_below_the_plan_is_refused_before_running() {
    let w = workload(GnnModel::Gcn, 2);
    let p = make_plan(&w, Policy::RetainAll, 1 << 40);
    let mut budgets = p.budgets;
    budgets.hbm_bytes = p.predicted.peak_bytes.hbm - 1;
    let error = Executor::new(
        Arc::new(p),
        HashBackend::new(),
        None,
        ExecOptions {
            budgets: Some(budgets),
            ..ExecOptions::default()
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(error.contains("hbm") && error.contains("budget"), "{error}");
}

#[test]
fn ssd_plans_need_an_ssd_tier() {
    let w = workload(GnnModel::Gcn, 2);
    let p = make_plan(&w, Policy::OffloadSsdAll, 1 << 40);
    let error = Executor::new(
        Arc::new(p),
        HashBackend::new(),
        None,
        ExecOptions::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(error, ExecError::NoSsd));
}

#[test]
fn a_tampered_plan_is_refused() {
    let w = workload(GnnModel::Gcn, 2);
    let mut p = make_plan(&w, Policy::OffloadHostAll, 1 << 40);
    let entry = p
        .schedule
        .iter_mut()
        .find(|e| e.action == fateplan_planner::plan::Action::Reload)
        .unwrap();
    entry.done_before_step = w.ops.len() as u32 + 5;
    let error = Executor::new(
        Arc::new(p),
        HashBackend::new(),
        None,
        ExecOptions::default(),
    )
    .err()
    .unwrap();
    // The planner's error itself, naming the entry.
    assert!(
        matches!(
            &error,
            ExecError::InvalidPlan(fateplan_planner::Error::InvalidInput { context, .. })
                if context.contains("schedule[")
        ),
        "{error}"
    );
    // And its source, for a caller that walks the chain.
    let source =
        std::error::Error::source(&error).and_then(|e| e.downcast_ref::<fateplan_planner::Error>());
    assert!(
        matches!(source, Some(fateplan_planner::Error::InvalidInput { .. })),
        "{error}: source {source:?}"
    );
}

/// Inputs read for the last time are handed over alone, under every
/// plan, and taking them breaks nothing: a tensor handed over too early
/// would be absent when it is read again, offloaded or released.
#[test]
fn inputs_read_for_the_last_time_are_handed_over() {
    let w = workload(GnnModel::Sage, 3);
    let reference = run(make_plan(&w, Policy::RetainAll, 1 << 40), 2);
    for policy in [
        Policy::RetainAll,
        Policy::OffloadHostAll,
        Policy::OffloadSsdAll,
        Policy::RecomputeAll,
    ] {
        let plan = Arc::new(make_plan(&w, policy, 1 << 40));
        let backend = HashBackend::new();
        let handed = backend.handed.clone();
        let ssd: Arc<dyn SsdTier> = Arc::new(MemorySsd::default());
        let mut executor =
            Executor::new(plan.clone(), backend, Some(ssd), ExecOptions::default()).unwrap();
        for _ in 0..2 {
            executor.run_iteration().unwrap();
        }
        assert!(
            handed.load(Ordering::Relaxed) > 0,
            "{policy:?}: nothing handed over"
        );
        // Parameters are never handed over: they live on.
        for (name, data) in &reference {
            let t = plan
                .workload
                .definition
                .tensors
                .iter()
                .find(|t| &t.name == name)
                .unwrap();
            assert_eq!(
                executor.device_data(t.id.index()),
                Some(data),
                "{policy:?} {name}"
            );
        }
    }
}

/// A buffer the backend cannot allocate ends the run with an error that
/// names the operator and the bytes, not the process; so does a copy the
/// host tier cannot make, naming the tensor.
#[test]
fn a_buffer_out_of_memory_is_an_error_naming_its_operator() {
    let w = workload(GnnModel::Gcn, 2);
    let plan = Arc::new(make_plan(&w, Policy::RetainAll, 1 << 40));
    let op = &w.ops[w.ops.len() / 2];
    let backend = HashBackend {
        out_of_memory_at: Some(op.name.clone()),
        ..HashBackend::new()
    };
    let mut executor = Executor::new(plan, backend, None, ExecOptions::default()).unwrap();
    let error = executor.run_iteration().unwrap_err();
    let step = w.ops.iter().position(|o| o.name == op.name).unwrap();
    assert!(
        matches!(&error, ExecError::OutOfMemory { bytes, during: Some(during) }
            if *bytes == 1 << 63 && *during == format!("step {step} ({})", op.name)),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("out of memory: ") && message.contains("--hbm-budget"),
        "{message}"
    );
    // Where nothing says what, a tensor; an error placed once stays so.
    let unplaced = ExecError::out_of_memory(1 << 20);
    assert!(unplaced
        .to_string()
        .starts_with("out of memory: 1.00 MiB for a tensor could"));
    let placed = unplaced.during(|| "the copy of h to the host".into());
    let again = placed.clone().during(|| "step 1 (x)".into());
    assert_eq!(again.to_string(), placed.to_string());
    assert!(placed
        .to_string()
        .contains("1.00 MiB for the copy of h to the host"));
    // Other errors pass as they are.
    let other = ExecError::Internal("x".into()).during(|| "step 1 (x)".into());
    assert!(matches!(other, ExecError::Internal(why) if why == "x"));
}

/// A copy's job that panics (a mover's bug) drops its filler unfilled:
/// the lane waiting on that copy gets an error instead of waiting for ever.
#[test]
fn an_away_copy_whose_maker_panics_fails_its_reader() {
    let cell = super::AwayCell::new();
    let filler = cell.filler();
    let maker = std::thread::spawn(move || {
        let _filler = filler;
        panic!("a mover's bug");
    });
    assert!(maker.join().is_err());
    assert!(
        cell.state.lock().unwrap().is_some(),
        "unfilled: a reader would wait for ever"
    );
    let error = cell.get().expect_err("the copy was never made");
    assert!(
        error.to_string().contains("stopped before it was made"),
        "{error}"
    );

    // Filled, the cell keeps what it was given.
    let cell = super::AwayCell::new();
    cell.filler().fill(Ok(Arc::new(Data::I64(vec![7]))));
    assert!(matches!(cell.get().as_deref(), Ok(Data::I64(v)) if v == &[7]));
}

/// A kernel that could not allocate is out of memory during the work
/// named (the buffer in brackets); any other kernel error is the
/// kernel's, with the work named first.
#[test]
fn a_kernels_out_of_memory_is_the_executors() {
    let oom = fateplan_kernels::Error::OutOfMemory {
        bytes: 4096,
        what: "transpose: the columns".into(),
    };
    match ExecError::of_kernel(oom, || "adj_t[1,0]".into()) {
        ExecError::OutOfMemory { bytes, during } => {
            assert_eq!(bytes, 4096);
            assert_eq!(
                during.as_deref(),
                Some("adj_t[1,0] (transpose: the columns)")
            );
        }
        other => panic!("{other:?}"),
    }
    let invalid = fateplan_kernels::Error::InvalidInput("spmm: bad".into());
    match ExecError::of_kernel(invalid, || "adj_t[1,0]".into()) {
        ExecError::Kernel(message) => {
            assert_eq!(message, "adj_t[1,0]: invalid input: spmm: bad")
        }
        other => panic!("{other:?}"),
    }
}
