//! Training: a GNN over a real graph, epoch after epoch, through the
//! executor and the CPU backend, with a plan made for exactly this
//! workload.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{GnnModel, GnnShape, GnnSpec};
use fateplan_planner::plan::{Budgets, Fate, LinkBytes, PerTier, Plan};
use fateplan_planner::workload::{ComputeClass, TensorKind};
use fateplan_planner::{Tier, Workload};

use crate::blockcsr::{BlockCsr, Normalization};
use crate::collective::Collective;
use crate::cpu::CpuGnn;
use crate::csr::{edge_digest, Csr};
use crate::dataset::Dataset;
use crate::exec::data::{BlockData, Data};
use crate::exec::{ExecError, ExecOptions, Executor, SsdTier, TraceSpan};
use crate::generate::GeneratorSpec;
use crate::gnn::{GnnBackend, GraphInput, Hyper, Metrics, Mode};
use crate::peers::{ExchangeStats, Peers};
use crate::share::{DeviceShare, ShareStats, SharedPrepared};
use crate::spill::{SpillOptions, SpillStore};

/// What the workload of `hyper` is built from, over partitions with
/// `counts` edges per block, for a graph of `features` input features and
/// `classes` classes (as [`Dataset`] counts them): [`GnnShape::workload`]
/// by `hyper.sweeps` builds the one a plan for this run must be made for,
/// and by other sweeps their workloads.
pub fn shape(
    features: u32,
    classes: u32,
    counts: BlockCounts,
    hyper: &Hyper,
    graph_name: &str,
) -> GnnShape {
    GnnShape {
        spec: spec(features, classes, hyper, graph_name),
        counts,
    }
}

/// The model of `hyper` for a graph of `features` input features and
/// `classes` classes (as [`Dataset`] counts them), as the planner builds
/// it ([`shape`]).
pub fn spec(features: u32, classes: u32, hyper: &Hyper, graph_name: &str) -> GnnSpec {
    GnnSpec {
        model: hyper.model,
        layers: hyper.layers,
        hidden: hyper.hidden,
        heads: hyper.heads,
        features,
        classes,
        graph_name: graph_name.to_string(),
        order: hyper.order,
        transposes: hyper.transposes,
        sweeps: hyper.sweeps,
        dropout: hyper.dropout,
    }
}

/// One epoch as the progress display and the report see it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpochStats {
    pub epoch: u32,
    pub loss: f64,
    /// None where the training mask holds no node.
    pub train_accuracy: Option<f64>,
    /// The validation accuracy after this epoch, where the run evaluates
    /// after it ([`TrainRun::evaluate_every`]) and the validation mask
    /// holds a node; else none.
    pub val_accuracy: Option<f64>,
    pub iteration_s: f64,
    /// Seconds of the iteration in operators (recomputations included).
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Seconds the compute thread waited for transfers.
    pub wait_s: f64,
}

/// One training iteration's seconds and their parts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct IterationTimes {
    pub iteration_s: f64,
    /// In operators, recomputations included.
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Waiting for transfers.
    pub wait_s: f64,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    pub policy: String,
    pub epochs: u32,
    /// Accuracy on each mask's nodes after training: none (`null` in
    /// JSON) where the mask holds no node.
    pub train_accuracy: Option<f64>,
    pub val_accuracy: Option<f64>,
    pub test_accuracy: Option<f64>,
    /// Training loss of the last epoch.
    pub final_loss: f64,
    /// SHA-256 of the final weights' little-endian bytes, layer by layer.
    pub weights_sha256: String,
    /// Mean measured seconds of a training iteration (the first excluded
    /// when there are several: it warms caches and allocators).
    pub iteration_s: f64,
    pub iteration_s_predicted: f64,
    /// Means over the same iterations as `iteration_s`.
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Seconds per iteration the compute thread waited for transfers.
    pub wait_s: f64,
    /// The median of the same iterations by their seconds (the lower of
    /// the middle two where they are even), with its own parts: a steady
    /// iteration, which a warm-up longer than the first iteration (an
    /// allocator still growing its pools) or a slow moment of a shared
    /// machine does not move, as it moves the means.
    #[serde(default)]
    pub median: IterationTimes,
    pub peak_bytes: PerTier<u64>,
    pub budgets: Budgets,
    /// The most bytes the backend's device allocator held at once, every
    /// device buffer counted (the CUDA backend's pool); none where the
    /// device is host memory. `peak_bytes.hbm` is the executor's count of
    /// the same by the plan's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_peak_bytes: Option<u64>,
    /// Bytes over each link per training iteration.
    pub bytes_moved: LinkBytes,
    pub losses: Vec<f64>,
    /// The trained model: each layer's parameters as the backends hold
    /// them, layer by layer ([`LayerWeights`]). Not in the JSON report
    /// (`weights_sha256` stands for them there), so empty in a report
    /// read back from JSON, as a launcher reads its members'.
    #[serde(skip)]
    pub weights: Vec<LayerWeights>,
}

/// One layer's trained parameters (`w[lN]`, N from 1), f32, laid out as
/// the backends hold them, for a layer of `d_in` inputs and `d_out`
/// outputs (`d_in` the features in the first layer, else `hidden`;
/// `d_out` the classes in the last, else `hidden`): the weight matrix
/// (`d_in × d_out`, row-major: a row's output is `x · W`), two for
/// GraphSAGE (the self term's, then the neighbours'); then GAT's
/// attention vectors (`att_src`, then `att_dst`, `d_out` each, head by
/// head); then the bias (`d_out`).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    /// The parameter tensor's name in the plan (`w[l1]`, ...).
    pub name: String,
    pub values: Vec<f32>,
}

/// How to run a training.
pub struct TrainRun {
    pub plan: Arc<Plan>,
    pub epochs: u32,
    /// Arena budgets; `None` uses the plan's.
    pub budgets: Option<Budgets>,
    /// The SSD tier, needed when the plan uses it.
    pub ssd: Option<Arc<dyn SsdTier>>,
    /// Record the last training iteration's trace.
    pub trace: bool,
    /// What computes the operators.
    pub backend: BackendChoice,
    /// Training stops after the epoch in which this is set (by the
    /// `progress` callback, for early stopping, or by another thread, to
    /// cancel): the model is evaluated and reported as after its last
    /// epoch, `epochs` the epochs run. One device's run
    /// ([`train`]); [`train_shared`] refuses it. With it set, the CPU
    /// backend's epochs wait for `progress` to return, on a thread of
    /// rayon's global pool: a `progress` that runs work on that pool
    /// needs a pool of two threads or more.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Evaluate the model every this many epochs, and after the last,
    /// for [`EpochStats::val_accuracy`] (early stopping on validation,
    /// with `stop`); 0, the default: never. An evaluation runs the
    /// iteration without dropout or updates, at most about an iteration's time,
    /// and changes nothing the training computes; the one after the last
    /// epoch is the report's. A run that `stop` ends from the progress
    /// callback has its epoch's progress told before the stop: that
    /// epoch is evaluated where it is one of every N, and the report's
    /// evaluation follows it either way. On the CUDA backend an
    /// evaluation waits for the kernels the epoch before it queued, whose
    /// tail the next epoch's would otherwise wait for: the epochs
    /// evaluated after may read slightly shorter.
    pub evaluate_every: u32,
}

impl TrainRun {
    /// `epochs` of `plan` under its own budgets, on the CPU backend, with
    /// no SSD tier and no trace: set the fields to run otherwise.
    pub fn new(plan: Arc<Plan>, epochs: u32) -> TrainRun {
        TrainRun {
            plan,
            epochs,
            budgets: None,
            ssd: None,
            trace: false,
            backend: BackendChoice::default(),
            stop: None,
            evaluate_every: 0,
        }
    }
}

/// Training learns from the nodes of the training mask alone: an input
/// whose mask (the whole graph's, for one device's share) selects none
/// has nothing to train on, and is refused.
fn check_training_nodes(input: &GraphInput) -> Result<(), ExecError> {
    let nodes = input
        .train_nodes_total
        .unwrap_or_else(|| input.train_mask.iter().filter(|&&m| m).count() as u64);
    if nodes == 0 {
        let of = match input.train_nodes_total {
            Some(_) => "the graph's nodes".to_string(),
            None => format!("the graph's {} nodes", input.train_mask.len()),
        };
        return Err(ExecError::invalid(
            "train_mask",
            format!("selects none of {of}; training needs at least one"),
        ));
    }
    Ok(())
}

/// Checks what a run is asked to do before it starts: hyper-parameters
/// that can train ([`Hyper::check`]), at least one epoch, and, where the
/// model was `built` from a spec ([`prepare`]), `hyper`'s shape the same
/// as the one built (the plan is checked against the workload later, but
/// a model of another shape would fail there on a weight's size).
fn check_run(hyper: &Hyper, epochs: u32, built: Option<&GnnSpec>) -> Result<(), ExecError> {
    hyper.check().map_err(|e| match e {
        fateplan_planner::Error::InvalidInput { context, message } => {
            ExecError::invalid(context, message)
        }
        other => ExecError::invalid("hyper-parameters", other.to_string()),
    })?;
    if epochs == 0 {
        return Err(ExecError::invalid("epochs", "0; a run trains at least 1"));
    }
    let Some(built) = built else {
        return Ok(());
    };
    let wanted = spec(built.features, built.classes, hyper, &built.graph_name);
    let differ: Vec<String> = [
        (
            "model",
            wanted.model.name().into(),
            built.model.name().into(),
        ),
        (
            "layers",
            wanted.layers.to_string(),
            built.layers.to_string(),
        ),
        (
            "hidden",
            wanted.hidden.to_string(),
            built.hidden.to_string(),
        ),
        ("heads", wanted.heads.to_string(), built.heads.to_string()),
        (
            "dropout",
            wanted.dropout.to_string(),
            built.dropout.to_string(),
        ),
        (
            "order",
            wanted.order.name().into(),
            built.order.name().into(),
        ),
        (
            "transposes",
            wanted.transposes.name().into(),
            built.transposes.name().into(),
        ),
        ("sweeps", wanted.sweeps.name(), built.sweeps.name()),
    ]
    .into_iter()
    .filter(|(_, a, b)| a != b)
    .map(|(field, a, b)| format!("{field} {a} (prepared with {b})"))
    .collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(ExecError::invalid(
        "hyper-parameters",
        format!(
            "not those the model was prepared with: {}; prepare it with these",
            differ.join(", ")
        ),
    ))
}

/// The bytes a run of `plan` on `backend` holds in this process's
/// memory at their most, and what they are: on the CPU backend the device
/// arena and the host tier together ([`Plan::peak_together`]), on the
/// CUDA backend the host tier alone (its pinned buffers; the arena is on
/// the device).
fn held_in_memory(plan: &Plan, backend: &BackendChoice) -> (u64, String) {
    use fateplan_planner::units::format_bytes;
    let (held, what) = tiers_in_memory(plan, backend);
    match ssd_copies_in_flight(plan, backend) {
        0 => (held, what),
        copies => (
            held.saturating_add(copies),
            format!(
                "{what}, and {} of whole tensors the SSD tier's transfers hold in host memory \
                 (a pinned and a plain copy of the largest written, a plain copy of the largest \
                 read, beside the staging the plan counts)",
                format_bytes(copies)
            ),
        ),
    }
}

/// The host memory SSD transfers take beside the plan's staging buffers.
/// On the CPU backend none: the spill store moves a tensor a staging
/// buffer's chunk at a time, straight from and into the tensor's own
/// memory (`crate::spill::tier`). On the CUDA backend a tensor moves
/// through host copies of it whole: out, a pinned copy of the device's
/// and the plain copy made from it while the pinned one is still held
/// (`Mover::to_plain`); back in, the plain copy the device loads from.
/// So twice the largest tensor the plan writes to the SSD and once the
/// largest it reads (the two SSD lanes run at once). Not counted: the
/// pinned pool keeps buffers given back for reuse, up to the host budget
/// less the staging (`cuda::keep`), which may hold more than the host
/// tier's peak and these copies.
fn ssd_copies_in_flight(plan: &Plan, backend: &BackendChoice) -> u64 {
    if matches!(backend, BackendChoice::Cpu) {
        return 0;
    }
    let bytes = |tensor: usize| {
        // A tensor the plan does not have is refused by the executor.
        plan.workload
            .definition
            .tensors
            .get(tensor)
            .map_or(0, |t| t.bytes)
    };
    let largest = |moved: &dyn Fn(&fateplan_planner::plan::ScheduleEntry) -> bool| {
        plan.schedule
            .iter()
            .filter(|e| moved(e))
            .map(|e| bytes(e.tensor.index()))
            .max()
            .unwrap_or(0)
    };
    largest(&|e| e.to == Tier::Ssd)
        .saturating_mul(2)
        .saturating_add(largest(&|e| e.from == Tier::Ssd))
}

/// What the plan's tiers hold in this process's memory at their peak.
fn tiers_in_memory(plan: &Plan, backend: &BackendChoice) -> (u64, String) {
    use fateplan_planner::units::format_bytes;
    let peak = &plan.predicted.peak_bytes;
    match backend {
        BackendChoice::Cpu => {
            let together = plan.peak_together(&[Tier::Hbm, Tier::Host]);
            let what = if together == peak.hbm.saturating_add(peak.host) {
                format!(
                    "the plan's peak, hbm {} and host {}",
                    format_bytes(peak.hbm),
                    format_bytes(peak.host)
                )
            } else {
                format!(
                    "the plan's peak of hbm and host together, {} (hbm {} and host {} at \
                     their own peaks)",
                    format_bytes(together),
                    format_bytes(peak.hbm),
                    format_bytes(peak.host)
                )
            };
            (
                together,
                format!("{what}, both in this process's memory on the CPU backend"),
            )
        }
        BackendChoice::Cuda(_) => (
            peak.host,
            format!(
                "the plan's host tier at its peak, {}, in pinned memory",
                format_bytes(peak.host)
            ),
        ),
    }
}

/// Refuses a run of `plan` on `backend` for each of `inputs` (a
/// device's share each, or the one graph), all in this process, that
/// cannot fit in the memory it can still take
/// ([`crate::memory::available`]): where what the backend holds in this
/// process's memory at the plan's peak (on the CPU backend the device
/// arena and the host tier together, on the CUDA backend the host tier),
/// each run's, less the bytes of graph the backends take over and free
/// ([`GraphInput::given_bytes`]), is more ([`ExecError::OverMemory`]).
/// The tensors' bytes alone: the allocator's own room comes on top.
/// [`train`] and [`train_shared`] check this; a program that runs one
/// device of a group in a process of its own ([`train_member`]) calls it
/// before.
pub fn check_memory(
    plan: &Plan,
    backend: &BackendChoice,
    inputs: &[&GraphInput],
) -> Result<(), ExecError> {
    let Some(available) = crate::memory::available() else {
        return Ok(());
    };
    let given = inputs.iter().map(|input| input.given_bytes()).sum();
    check_run_memory(plan, backend, inputs.len() as u64, given, &available)
}

/// [`check_memory`] of `runs` runs of `plan` that take over `given`
/// bytes of graph, against `available`. The tiers' peaks summed are at
/// least what they hold together: where that fits, nothing more is
/// counted (the slots' bytes take memory of their own on a large plan).
fn check_run_memory(
    plan: &Plan,
    backend: &BackendChoice,
    runs: u64,
    given: u64,
    available: &crate::memory::Available,
) -> Result<(), ExecError> {
    let peak = &plan.predicted.peak_bytes;
    let most = match backend {
        BackendChoice::Cpu => peak.hbm.saturating_add(peak.host),
        BackendChoice::Cuda(_) => peak.host,
    }
    .saturating_add(ssd_copies_in_flight(plan, backend));
    if most.saturating_mul(runs).saturating_sub(given) <= available.bytes {
        return Ok(());
    }
    let held = held_in_memory(plan, backend);
    over_memory(&plan.workload.name, held, backend, runs, given, available)
}

/// Refuses a run of `plan` on the CPU backend by `members` processes
/// started together (`train --devices K --processes`) where what they
/// hold at the plan's peak, each, is more than the memory they can take
/// together ([`crate::memory::available_together`]): before they start,
/// each to read its share of the graph and then to find that out. Each
/// checks its own share as it starts too ([`check_memory`]).
pub fn check_members_memory(plan: &Plan, members: u64) -> Result<(), ExecError> {
    let Some(available) = crate::memory::available_together() else {
        return Ok(());
    };
    check_run_memory(plan, &BackendChoice::Cpu, members, 0, &available)
}

/// Refuses `runs` executors of a plan of workload `name` that each hold
/// `held` bytes in this process's memory (`(bytes, what they are)`,
/// [`held_in_memory`]), less the `given` bytes of graph the backends take
/// over and free, where that is more than the memory `available`.
fn over_memory(
    name: &str,
    (held, what): (u64, String),
    backend: &BackendChoice,
    runs: u64,
    given: u64,
    available: &crate::memory::Available,
) -> Result<(), ExecError> {
    use fateplan_planner::units::format_bytes;
    let needed = held.saturating_mul(runs).saturating_sub(given);
    let (of, each) = match runs {
        1 => (what, ""),
        n => (format!("{n} devices each at {what}"), ", each device's"),
    };
    let what = match given {
        0 => of,
        _ => format!(
            "{of}, less the {} of the graph given over to them",
            format_bytes(given)
        ),
    };
    let Some(short) = available.shortfall(needed, &what) else {
        return Ok(());
    };
    let budgets = match backend {
        BackendChoice::Cpu => "smaller budgets (--hbm-budget and --host-budget",
        BackendChoice::Cuda(_) => "a smaller host budget (--host-budget",
    };
    Err(ExecError::OverMemory {
        needed_bytes: needed,
        available_bytes: available.bytes,
        short: format!("training workload {name:?} takes {short}"),
        advice: format!(
            "plan under {budgets}{each}: what does not fit is recomputed, or spilled to the SSD \
             tier with --spill-dir; more --partitions where no plan fits them), or free memory, \
             or raise the limit named"
        ),
    })
}

/// The backend a training runs on.
#[derive(Debug, Clone, Default)]
pub enum BackendChoice {
    /// The CPU backend (deterministic: the same bits whatever the plan).
    #[default]
    Cpu,
    /// The CUDA backend on a GPU.
    Cuda(crate::cuda::CudaOptions),
}

/// Trains with `run.plan`, which must be made for `prepared.workload`,
/// and reports. `progress` is called after every epoch.
pub fn train(
    prepared: Prepared,
    hyper: Hyper,
    run: TrainRun,
    progress: &mut dyn FnMut(&EpochStats),
) -> Result<(TrainReport, Vec<TraceSpan>), ExecError> {
    let TrainRun {
        plan,
        epochs,
        budgets,
        ssd,
        trace,
        backend,
        stop,
        evaluate_every,
    } = run;
    check_run(&hyper, epochs, Some(&prepared.shape.spec))?;
    check_training_nodes(&prepared.input)?;
    let stop = stop.as_deref();
    let Prepared {
        workload: expected,
        input: graph,
        ..
    } = prepared;
    let digest = expected.digest();
    if !planned_for(&plan.workload.digest, &expected) {
        let hint = digest_hint(&plan.workload.definition, &expected);
        return Err(ExecError::invalid(
            "plan",
            format!(
                "made for workload {} ({}), but this graph and model give {} ({}): plan again \
                 for this run{hint}",
                plan.workload.name, plan.workload.digest, expected.name, digest
            ),
        ));
    }
    check_memory(&plan, &backend, &[&graph])?;
    let options = ExecOptions { budgets, trace };
    match backend {
        BackendChoice::Cpu => on_a_worker_told(progress, stop.is_some(), move |progress| {
            let backend = CpuGnn::new(graph, hyper)?;
            let executor = Executor::new(plan.clone(), backend, ssd, options)?;
            run_epochs(
                &mut { executor },
                &plan,
                (epochs, evaluate_every),
                stop,
                progress,
            )
        }),
        BackendChoice::Cuda(cuda) => {
            let budgets = budgets.unwrap_or(plan.budgets);
            // The host tier's pinned buffers, kept for reuse, within its
            // budget less the SSD staging buffers charged to it.
            let uses_ssd = plan
                .schedule
                .iter()
                .any(|e| e.from == Tier::Ssd || e.to == Tier::Ssd);
            let staging = if uses_ssd { plan.ssd_staging_bytes } else { 0 };
            let cuda = crate::cuda::CudaOptions {
                host_budget_bytes: Some(budgets.host_bytes.saturating_sub(staging)),
                ..cuda
            };
            let backend = crate::cuda::CudaGnn::new(graph, hyper, budgets.hbm_bytes, &cuda)?;
            let executor = Executor::new(plan.clone(), backend, ssd, options)?;
            run_epochs(
                &mut { executor },
                &plan,
                (epochs, evaluate_every),
                stop,
                progress,
            )
        }
    }
}

/// Runs `job` on a thread of rayon's pool, so that the CPU kernels'
/// parallel loops start on the thread that calls them: a loop called from
/// outside the pool hands its work to the pool and sleeps until it is
/// done, 20-60 µs an operator on two cores, which is most of a small
/// graph's iteration. `progress` still runs on the calling thread: the job
/// sends it each epoch. Where the caller is already on a pool thread, the
/// job runs there.
///
/// The job may block its thread (waiting for a transfer lane, or in a
/// device's exchanges) as long as nothing it waits for needs the pool:
/// the lanes' copies do not, and every device of a multi-device run has
/// a pool of its own ([`train_member`]). The
/// profile's compute measurement times its operators here too.
/// A panic in the job reaches the caller once the job has ended.
pub(crate) fn on_a_worker<T: Send>(
    progress: &mut dyn FnMut(&EpochStats),
    job: impl FnOnce(&mut dyn FnMut(&EpochStats)) -> T + Send,
) -> T {
    if rayon::current_thread_index().is_some() {
        return job(progress);
    }
    on_a_worker_told(progress, false, job)
}

/// [`on_a_worker`]; where `told`, the job waits after each epoch until
/// `progress` has returned, so that what `progress` does (setting a
/// run's `stop`) is seen before the next epoch starts.
pub(crate) fn on_a_worker_told<T: Send>(
    progress: &mut dyn FnMut(&EpochStats),
    told: bool,
    job: impl FnOnce(&mut dyn FnMut(&EpochStats)) -> T + Send,
) -> T {
    if rayon::current_thread_index().is_some() {
        return job(progress);
    }
    let (sender, epochs) =
        std::sync::mpsc::channel::<(EpochStats, Option<std::sync::mpsc::SyncSender<()>>)>();
    let mut result = None;
    // `progress`'s panic, caught on this thread and passed on once the
    // job has stopped. Left to unwind the scope, it raced the job's own
    // (the job sees the receiver dropped as the scope unwinds), and the
    // scope passes on whichever it stored first.
    let mut progress_panic = None;
    let scoped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rayon::in_place_scope(|scope| {
            let result = &mut result;
            scope.spawn(move |_| {
                // The receiver reads until this sender drops, unless `progress`
                // panicked: then the job stops at the epoch it reports next,
                // unwinding (dropping what it holds, its spill files among
                // them) without the panic hook's message; `progress`'s panic
                // is the one passed on, after the scope.
                let gone = || -> ! {
                    std::panic::resume_unwind(Box::new("the progress callback panicked"))
                };
                *result = Some(job(&mut |stats: &EpochStats| {
                    if !told {
                        if sender.send((*stats, None)).is_err() {
                            gone();
                        }
                        return;
                    }
                    let (done, seen) = std::sync::mpsc::sync_channel(1);
                    if sender.send((*stats, Some(done))).is_err() || seen.recv().is_err() {
                        gone();
                    }
                }));
            });
            for (stats, done) in epochs {
                let shown =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| progress(&stats)));
                if let Err(payload) = shown {
                    // Leaving the loop drops the receiver (and `done`): the
                    // job stops at the next epoch it reports.
                    progress_panic = Some(payload);
                    break;
                }
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
        })
    }));
    if let Some(payload) = progress_panic {
        std::panic::resume_unwind(payload);
    }
    if let Err(payload) = scoped {
        std::panic::resume_unwind(payload);
    }
    // The scope returns once its job has: had the job panicked, the scope
    // would have passed the panic on instead.
    result.expect("a scope's job has run when the scope returns")
}

/// One device of a multi-device run, as [`train_shared`] reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub rank: usize,
    /// Mean measured seconds of its training iterations (as
    /// [`TrainReport::iteration_s`]).
    pub iteration_s: f64,
    pub peak_bytes: PerTier<u64>,
    /// Its exchanges in the last training iteration.
    pub exchange: ExchangeStats,
    /// Bytes of its halo blocks (held by the backend).
    pub halo_block_bytes: u64,
    /// The most resident memory its process held, where the device ran as
    /// a process of its own (Linux's `VmHWM`; `None` for devices that
    /// share a process, or where the system does not say).
    #[serde(default)]
    pub process_peak_bytes: Option<u64>,
}

/// What a multi-device run did: device 0's report (its losses and
/// accuracies are the whole graph's; its iteration time the slowest
/// device's) and every device's own figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedReport {
    pub report: TrainReport,
    pub devices: Vec<DeviceReport>,
    /// The shares' halos.
    pub shares: ShareStats,
}

/// What one device of a multi-device run brings back: its report (the
/// losses and accuracies are the whole graph's), its own figures, and the
/// spans of its last training iteration when it was traced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberOutcome {
    pub report: TrainReport,
    pub device: DeviceReport,
    pub spans: Vec<TraceSpan>,
}

/// Refuses a plan made for another workload than the shares'.
pub fn check_shared_plan(plan: &Plan, workload: &Workload) -> Result<(), ExecError> {
    let digest = workload.digest();
    if !planned_for(&plan.workload.digest, workload) {
        let hint = digest_hint(&plan.workload.definition, workload);
        return Err(ExecError::invalid(
            "plan",
            format!(
                "made for workload {} ({}), but these shares and model give {} ({}): plan \
                 again for this run{hint}",
                plan.workload.name, plan.workload.digest, workload.name, digest
            ),
        ));
    }
    Ok(())
}

/// Whether `plan` trains `workload`, as [`train`] and
/// [`check_shared_plan`] ask before running it: its digest is the
/// workload's, or one the workload had as builds before this one wrote
/// it (below).
pub fn plan_is_for(plan: &Plan, workload: &Workload) -> bool {
    planned_for(&plan.workload.digest, workload)
}

/// Whether a plan whose workload has digest `planned` trains the run's
/// workload `expected`: the same digest, or a digest `expected` had as
/// workloads were written before
///
/// - the GCN's and GraphSAGE's gathers recorded their working set
///   (`cost.gather_width`, `cost.gather_set_bytes`) and the loss its rows
///   (`cost.rows`), which only price them;
/// - the aggregations and GAT's edge operators recorded the rows they
///   walk and GAT's the heads of their edges (`cost.rows`,
///   `cost.row_bytes`, `cost.edge_heads`), which only price them;
/// - the ReLU's backward read its mask ([`before_relu_masks`]): such a
///   plan's `relu_bwd` reads the pre-activation, which both backends
///   still take;
/// - the aggregations' running sums were marked as added into in place
///   ([`Op::adds_into`](fateplan_planner::workload::Op::adds_into)): such
///   a plan counts each sum beside the output that takes its buffer
///   over, and its executor charges them so, which holds more than the
///   run needs;
/// - and before that, the first layer's masked gathers were a class of
///   their own ([`ComputeClass::SparseMasked`], `sparse` then). The
///   executor does not read an operator's class, so such a plan runs the
///   same operators; only its prices were the sparse class's.
fn planned_for(planned: &str, expected: &Workload) -> bool {
    planned == expected.digest()
        || older_marks(planned, expected.clone())
        || before_relu_masks(expected)
            .is_some_and(|then| planned == then.digest() || older_marks(planned, then))
}

/// Whether `planned` is the digest of `form` as written before its
/// gathers recorded their working set, before that before its
/// operators recorded the heads and rows they walk (GAT's edge operators
/// a build before the aggregations, whose GAT plans are this build's),
/// before that before its running sums were
/// marked, or before that, before its masked gathers had a class of their
/// own ([`planned_for`]).
fn older_marks(planned: &str, mut form: Workload) -> bool {
    let mut ungathered = false;
    for op in &mut form.ops {
        let c = &mut op.cost;
        ungathered |= c.gather_width > 0 || c.gather_set_bytes > 0;
        (c.gather_width, c.gather_set_bytes) = (0, 0);
        if c.class == ComputeClass::Softmax {
            ungathered |= c.rows > 0;
            c.rows = 0;
        }
    }
    if ungathered && planned == form.digest() {
        return true;
    }
    let mut unwalked = false;
    for op in &mut form.ops {
        let c = &mut op.cost;
        unwalked |= c.edge_heads > 0 || c.rows > 0 || c.row_bytes > 0;
        (c.edge_heads, c.rows, c.row_bytes) = (0, 0, 0);
    }
    if unwalked && planned == form.digest() {
        return true;
    }
    let mut unmarked = false;
    for op in &mut form.ops {
        unmarked |= op.adds_into.take().is_some();
    }
    if unmarked && planned == form.digest() {
        return true;
    }
    let mut renamed = false;
    for op in &mut form.ops {
        if op.cost.class == ComputeClass::SparseMasked {
            op.cost.class = ComputeClass::Sparse;
            renamed = true;
        }
    }
    renamed && planned == form.digest()
}

/// The workload a build from before the ReLU masks made where this one
/// makes `now`: no `relu_bits[..]` tensors or `relu_mask` operators, and each
/// `relu_bwd` reading the gradient and what its mask's operator reads
/// (the pre-activation `z`, or in a layer that projects first the
/// aggregation and the weights), priced and given scratch as then; the
/// tensors and operators after a removed one numbered down. `None` where
/// `now` has no masks.
fn before_relu_masks(now: &Workload) -> Option<Workload> {
    use fateplan_planner::workload::{Cost, OpId, TensorId};
    use std::collections::HashMap;
    let masks: HashMap<TensorId, &fateplan_planner::workload::Op> = now
        .ops
        .iter()
        .filter(|op| op.name.starts_with("relu_mask["))
        .filter_map(|op| Some((*op.outputs.first()?, op)))
        .collect();
    if masks.is_empty() {
        return None;
    }
    let mut renumbered = vec![None; now.tensors.len()];
    let mut tensors = Vec::with_capacity(now.tensors.len() - masks.len());
    for tensor in now.tensors.iter().filter(|t| !masks.contains_key(&t.id)) {
        let id = TensorId(tensors.len() as u32);
        renumbered[tensor.id.index()] = Some(id);
        tensors.push(fateplan_planner::workload::Tensor {
            id,
            ..tensor.clone()
        });
    }
    let renumber = |ids: &[TensorId]| -> Option<Vec<TensorId>> {
        ids.iter().map(|t| renumbered[t.index()]).collect()
    };
    let mut ops = Vec::with_capacity(now.ops.len() - masks.len());
    for op in now
        .ops
        .iter()
        .filter(|op| !op.name.starts_with("relu_mask["))
    {
        let mut op = op.clone();
        op.id = OpId(ops.len() as u32);
        if let [grad, mask] = op.inputs[..] {
            if let Some(made) = masks.get(&mask) {
                let elements = now.tensor(grad).bytes / 4;
                let projects_first = made.inputs.len() == 2;
                // What the mask's operator read beside the pre-activation
                // (the bias).
                let extra = made
                    .cost
                    .bytes
                    .saturating_sub(4 * elements + now.tensor(mask).bytes);
                op.inputs = std::iter::once(grad)
                    .chain(made.inputs.iter().copied())
                    .collect();
                op.cost = match projects_first {
                    true => Cost::work(
                        2.0 * elements as f64,
                        3 * elements * 4 + extra,
                        op.cost.class,
                    ),
                    false => Cost::work(elements as f64, 3 * elements * 4, op.cost.class),
                };
                if projects_first {
                    // A bias-added copy of the rows.
                    op.scratch_bytes = 4 * elements;
                }
            }
        }
        op.inputs = renumber(&op.inputs)?;
        op.outputs = renumber(&op.outputs)?;
        ops.push(op);
    }
    Some(Workload {
        tensors,
        ops,
        ..now.clone()
    })
}

/// What may train a plan whose workload `planned` is not the run's
/// `expected`, where a flag tells them apart: a plan whose transposed
/// aggregations read the blocks (one from before stored transposes)
/// against a run's stored ones, or the other way round; a plan that
/// prices no dropout masks (made with `--dropout 0`, or before masks were
/// priced) against a run that draws them, or the other way round.
fn digest_hint(planned: &Workload, expected: &Workload) -> String {
    // A plan from before the ReLU masks is told apart from the workload a
    // build of then made of this run, not from this build's.
    let masked = |w: &Workload| w.ops.iter().any(|op| op.name.starts_with("relu_mask["));
    if !masked(planned) {
        if let Some(then) = before_relu_masks(expected) {
            return format!(
                "{} (the plan is from a build before the ReLU masks: such a plan trains the run \
                 it was made for)",
                differences(planned, &then)
            );
        }
    }
    differences(planned, expected)
}

/// [`digest_hint`] of a plan's workload against the run's, told apart as
/// the same build made them.
fn differences(planned: &Workload, expected: &Workload) -> String {
    // A plan of a DAG given as such (`plan --dag`, a workload file): its
    // operators are none of a GNN's, and no flag makes this run its.
    let generic = |w: &Workload| {
        !w.ops.is_empty()
            && w.ops
                .iter()
                .all(|op| op.kind == fateplan_planner::workload::OpKind::Generic)
    };
    if generic(planned) && !generic(expected) {
        return " (the plan is of a DAG given to `plan --dag` or as a workload file, whose \
                 operators train cannot run: it trains the GNNs `plan --graph` and `plan \
                 --dataset` build)"
            .into();
    }
    // The same workload under another name: the graph's, which is its
    // folder's or file's name.
    if planned.name != expected.name {
        let renamed = Workload {
            name: expected.name.clone(),
            ..planned.clone()
        };
        if renamed.digest() == expected.digest() {
            return " (the same tensors and operators: only the name differs, which holds the \
                    graph's folder or file name; the graph read from a folder or file of the \
                    name the plan was made from trains it)"
                .into();
        }
    }
    let stored = |w: &Workload| w.tensors.iter().any(|t| t.name.starts_with("adj_t["));
    let masks = |w: &Workload| w.ops.iter().any(|op| op.cost.masked > 0);
    // The same operators, in another order: what differs is when they
    // run (and so which partial sums their chains name).
    let order = |w: &Workload| -> Vec<String> { w.ops.iter().map(|op| op.name.clone()).collect() };
    let (planned_ops, expected_ops) = (order(planned), order(expected));
    let reordered = planned_ops != expected_ops && {
        let (mut a, mut b) = (planned_ops, expected_ops);
        a.sort_unstable();
        b.sort_unstable();
        a == b
    };
    // The first tensor that differs (names leave out some of what makes
    // a workload, such as a graph's features or degree).
    let differs = if reordered {
        Some(
            " (the same operators, run in another order: a plan made with other sweeps, or by \
             a build that orders them otherwise, such as GAT's backward before it turned at each \
             source)"
                .to_string(),
        )
    } else if planned.tensors.len() != expected.tensors.len() {
        Some(format!(
            " (the plan's workload has {} tensors, this run's {})",
            planned.tensors.len(),
            expected.tensors.len()
        ))
    } else {
        planned
            .tensors
            .iter()
            .zip(&expected.tensors)
            .find(|(a, b)| a.bytes != b.bytes || a.name != b.name)
            .map(|(a, b)| {
                format!(
                    " (the first tensor that differs: {:?} of {} bytes in the plan, {:?} of {} \
                     bytes in this run)",
                    a.name, a.bytes, b.name, b.bytes
                )
            })
    };
    match (stored(planned), stored(expected)) {
        (false, true) => " (the plan's transposed aggregations read the blocks: transposes built (`Transposes::Built`, --transposes built) may train it)".into(),
        (true, false) => " (the plan reads stored transposes: transposes stored (`Transposes::Stored`, --transposes stored) may train it)".into(),
        // Masks change no tensor: where the tensors differ, so does the
        // graph or the model's shape, and dropout is not why.
        _ if let Some(differs) = differs => differs,
        _ => match (masks(planned), masks(expected)) {
            (false, true) => " (the plan prices no dropout masks: made with dropout 0 (--dropout 0), which trains it, or by a build from before masks were priced, whose model to train at another dropout needs planning again)".into(),
            (true, false) => " (the plan prices dropout masks: train it with its dropout, --dropout)".into(),
            _ => operator_difference(planned, expected),
        },
    }
}

/// The first operator of `planned` that differs from `expected`'s, and
/// the first of its fields that does (tensors by name), where the
/// tensors are the same: `""` where none does.
fn operator_difference(planned: &Workload, expected: &Workload) -> String {
    if planned.ops.len() != expected.ops.len() {
        return format!(
            " (the plan's workload has {} operators, this run's {})",
            planned.ops.len(),
            expected.ops.len()
        );
    }
    // Each field as JSON, its tensors by name.
    let fields = |w: &Workload, op: &fateplan_planner::workload::Op| -> Vec<(String, String)> {
        let named = |ids: &[fateplan_planner::workload::TensorId]| -> String {
            let names: Vec<&str> = ids
                .iter()
                .map(|t| w.tensors.get(t.index()).map_or("?", |t| t.name.as_str()))
                .collect();
            format!("[{}]", names.join(", "))
        };
        let value = serde_json::to_value(op).unwrap_or_default();
        let mut fields: Vec<(String, String)> = value
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, _)| !matches!(key.as_str(), "id" | "inputs" | "outputs"))
            .map(|(key, v)| (key.clone(), v.to_string()))
            .collect();
        fields.push(("inputs".into(), named(&op.inputs)));
        fields.push(("outputs".into(), named(&op.outputs)));
        fields.sort();
        fields
    };
    for (a, b) in planned.ops.iter().zip(&expected.ops) {
        let (of_a, of_b) = (fields(planned, a), fields(expected, b));
        if of_a == of_b {
            continue;
        }
        let value = |fields: &[(String, String)], key: &str| -> String {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map_or("none".into(), |(_, v)| v.clone())
        };
        let mut keys: Vec<&str> = of_a.iter().chain(&of_b).map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        if let Some(key) = keys
            .into_iter()
            .find(|k| value(&of_a, k) != value(&of_b, k))
        {
            return format!(
                " (the first operator that differs: {:?}, its {key}: {} in the plan, {} in this \
                 run)",
                a.name,
                value(&of_a, key),
                value(&of_b, key)
            );
        }
    }
    String::new()
}

/// Trains one device's `share` with `plan` on the CPU backend, its own
/// executor and `ssd`, exchanging through `comm` with the other members,
/// which run the same plan (made for the shares' workload:
/// [`check_shared_plan`]) on theirs. `progress` sees its epochs. The
/// member has made its last call when this returns
/// ([`Collective::finish`]).
///
/// It trains on a thread of the rayon pool it is called in (`on_a_worker`),
/// whose threads its kernels use: each member needs a pool of its own
/// (a process's, or one [`train_shared`] gives it), since a member waits
/// in the exchanges for the others while holding its thread.
#[allow(clippy::too_many_arguments)]
pub fn train_member(
    share: DeviceShare,
    hyper: Hyper,
    plan: Arc<Plan>,
    (epochs, evaluate_every): (u32, u32),
    options: ExecOptions,
    ssd: Option<Arc<dyn SsdTier>>,
    comm: Box<dyn Collective>,
    progress: &mut dyn FnMut(&EpochStats),
) -> Result<MemberOutcome, ExecError> {
    check_run(&hyper, epochs, None)?;
    check_training_nodes(&share.input)?;
    on_a_worker(progress, move |progress| {
        let rank = comm.rank();
        let halo_block_bytes = share.halo.block_bytes();
        let peers = Peers::new(share.halo, comm)?;
        let backend = CpuGnn::with_peers(share.input, hyper, peers)?;
        let mut executor = Executor::new(plan.clone(), backend, ssd, options)?;
        let (report, spans) = run_epochs(
            &mut executor,
            &plan,
            (epochs, evaluate_every),
            None,
            progress,
        )?;
        let peers = executor
            .backend()
            .peers()
            .ok_or_else(|| ExecError::Internal("a device's backend lost its peers".into()))?;
        let device = DeviceReport {
            rank,
            iteration_s: report.iteration_s,
            peak_bytes: report.peak_bytes,
            exchange: peers.last_training_stats(),
            halo_block_bytes,
            process_peak_bytes: None,
        };
        peers.finish();
        Ok(MemberOutcome {
            report,
            device,
            spans,
        })
    })
}

/// The error to report from a group's members: the first that is not the
/// news that another member stopped the group.
pub fn first_cause(mut errors: Vec<ExecError>) -> Option<ExecError> {
    let stopped = |e: &ExecError| matches!(e, ExecError::Exchange(why) if why.starts_with("the group stopped"));
    match errors.iter().position(|e| !stopped(e)) {
        Some(i) => Some(errors.swap_remove(i)),
        None => errors.pop(),
    }
}

/// The members' outcomes as one run's report: device 0's report with the
/// slowest device's iteration, every device's figures in rank order, and
/// every device's spans in rank order (empty where it was not traced).
/// Fails unless every device holds the same weights.
pub fn gather(
    mut outcomes: Vec<MemberOutcome>,
    shares: ShareStats,
) -> Result<(SharedReport, Vec<Vec<TraceSpan>>), ExecError> {
    outcomes.sort_by_key(|o| o.device.rank);
    let ranks: Vec<usize> = outcomes.iter().map(|o| o.device.rank).collect();
    if ranks != (0..outcomes.len()).collect::<Vec<_>>() {
        return Err(ExecError::Internal(format!(
            "the members' ranks are {ranks:?}: expected each of 0..{} once",
            outcomes.len()
        )));
    }
    let mut outcomes = outcomes.into_iter();
    let first = outcomes
        .next()
        .ok_or_else(|| ExecError::Internal("a run of no devices".into()))?;
    let mut report = first.report;
    let mut devices = vec![first.device];
    let mut spans = vec![first.spans];
    for other in outcomes {
        if other.report.weights_sha256 != report.weights_sha256 {
            return Err(ExecError::Internal(format!(
                "the devices' weights differ after training ({} on device 0, {} on device {})",
                report.weights_sha256, other.report.weights_sha256, other.device.rank
            )));
        }
        report.iteration_s = report.iteration_s.max(other.report.iteration_s);
        if other.report.median.iteration_s > report.median.iteration_s {
            report.median = other.report.median;
        }
        devices.push(other.device);
        spans.push(other.spans);
    }
    Ok((
        SharedReport {
            report,
            devices,
            shares,
        },
        spans,
    ))
}

/// Trains every device's share of `prepared` with `run.plan` (made for
/// `prepared.workload`), each device a thread of this process with its
/// own executor and CPU backend ([`train_member`]), exchanging through
/// shared memory ([`crate::collective::LocalGroup`]). `ssd` gives each
/// device its own SSD tier (one per device, or empty when the plan keeps
/// off the SSD). `progress` sees device 0's epochs.
pub fn train_shared(
    prepared: SharedPrepared,
    hyper: Hyper,
    run: TrainRun,
    ssd: Vec<Arc<dyn SsdTier>>,
    progress: &mut (dyn FnMut(&EpochStats) + Send),
) -> Result<(SharedReport, Vec<Vec<TraceSpan>>), ExecError> {
    let TrainRun {
        plan,
        epochs,
        budgets,
        ssd: shared_ssd,
        trace,
        backend,
        stop,
        evaluate_every,
    } = run;
    if stop.is_some() {
        return Err(ExecError::invalid(
            "stop",
            "training on several devices runs its epochs to the end: its devices stop \
             together only there",
        ));
    }
    if shared_ssd.is_some() {
        return Err(ExecError::Internal(
            "several devices need one SSD tier each: pass them in `ssd`, not in the run".into(),
        ));
    }
    if !matches!(backend, BackendChoice::Cpu) {
        return Err(ExecError::invalid(
            "backend",
            "training on several devices runs on the CPU backend only (the CUDA backend's \
             exchange through NCCL is not written)",
        ));
    }
    check_run(&hyper, epochs, Some(&prepared.shape.spec))?;
    check_shared_plan(&plan, &prepared.workload)?;
    // Each device's share knows the whole graph's training nodes: one
    // device tells for all, before any waits on the others.
    if let Some(first) = prepared.devices.first() {
        check_training_nodes(&first.input)?;
    }
    let k = prepared.devices.len();
    if k != prepared.group {
        return Err(ExecError::Internal(format!(
            "training {} devices as threads needs every device's share, not {k} (prepared \
             with Keep::All)",
            prepared.group
        )));
    }
    if !ssd.is_empty() && ssd.len() != k {
        return Err(ExecError::Internal(format!(
            "{} SSD tiers for {k} devices",
            ssd.len()
        )));
    }
    let inputs: Vec<&GraphInput> = prepared.devices.iter().map(|d| &d.input).collect();
    check_memory(&plan, &backend, &inputs)?;
    let group = crate::collective::LocalGroup::new(k);
    let pools = member_pools(rayon::current_num_threads(), k)?;
    let progress = std::sync::Mutex::new(progress);
    let results: Vec<Result<MemberOutcome, ExecError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = prepared
            .devices
            .into_iter()
            .zip(group)
            .zip(&pools)
            .enumerate()
            .map(|(rank, ((share, member), pool))| {
                let plan = plan.clone();
                let ssd = ssd.get(rank).cloned();
                let progress = &progress;
                scope.spawn(move || {
                    let options = ExecOptions { budgets, trace };
                    pool.install(|| {
                        let mut quiet = |_: &EpochStats| {};
                        let mut shown = |stats: &EpochStats| {
                            if let Ok(mut f) = progress.lock() {
                                (*f)(stats)
                            }
                        };
                        let shown: &mut dyn FnMut(&EpochStats) =
                            if rank == 0 { &mut shown } else { &mut quiet };
                        train_member(
                            share,
                            hyper,
                            plan,
                            (epochs, evaluate_every),
                            options,
                            ssd,
                            Box::new(member),
                            shown,
                        )
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ExecError::Internal("a device's thread panicked".into()))
                })
            })
            .collect()
    });
    let mut outcomes = Vec::with_capacity(k);
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => errors.push(e),
        }
    }
    if let Some(e) = first_cause(errors) {
        return Err(e);
    }
    gather(outcomes, prepared.stats)
}

/// Member `rank`'s part of `threads` shared out between `members` devices
/// (threads of one process, or processes): the first ones get one more
/// where they do not divide evenly; one at least each.
pub fn member_threads(threads: usize, members: usize, rank: usize) -> usize {
    let members = members.max(1);
    (threads / members + usize::from(rank < threads % members)).max(1)
}

/// A rayon pool for each of `members` devices trained as threads of one
/// process, sharing `threads` between them ([`member_threads`]). Each member's
/// kernels then start their loops on its own pool's thread, and a member
/// waiting in an exchange holds a thread no other member needs.
fn member_pools(threads: usize, members: usize) -> Result<Vec<rayon::ThreadPool>, ExecError> {
    (0..members)
        .map(|rank| {
            let size = member_threads(threads, members, rank);
            rayon::ThreadPoolBuilder::new()
                .num_threads(size)
                .thread_name(move |i| format!("device{rank}-{i}"))
                .build()
                .map_err(|e| {
                    ExecError::Internal(format!("device {rank}'s pool of {size} threads: {e}"))
                })
        })
        .collect()
}

/// The epochs (to the last, or to the one in which `stop` is set), the
/// evaluation pass and the report.
fn run_epochs<B: GnnBackend>(
    executor: &mut Executor<B>,
    plan: &Plan,
    (epochs, evaluate_every): (u32, u32),
    stop: Option<&std::sync::atomic::AtomicBool>,
    progress: &mut dyn FnMut(&EpochStats),
) -> Result<(TrainReport, Vec<TraceSpan>), ExecError> {
    let mut losses = Vec::with_capacity(epochs as usize);
    let mut seconds = Vec::with_capacity(epochs as usize);
    // Per epoch: compute, recompute and wait seconds.
    let mut parts: Vec<(f64, f64, f64)> = Vec::new();
    let mut moved = LinkBytes::default();
    // An evaluation after the last training iteration, and that
    // iteration's trace (the executor's is then the evaluation's): the
    // report's evaluation, not run again.
    let mut evaluated_last: Option<(Metrics, Vec<TraceSpan>)> = None;

    for epoch in 1..=epochs {
        executor.backend_mut().set_mode(Mode::Train);
        let report = executor.run_iteration()?;
        evaluated_last = None;
        let metrics = executor.backend().metrics()?;
        if !metrics.loss.is_finite() {
            return Err(ExecError::Kernel(format!(
                "the loss is {} at epoch {epoch}: lower the learning rate",
                metrics.loss
            )));
        }
        losses.push(metrics.loss);
        seconds.push(report.iteration_s);
        parts.push((report.compute_s, report.recompute_s, report.wait_s));
        moved = report.bytes_moved;
        let stopping = stop.is_some_and(|stop| stop.load(std::sync::atomic::Ordering::Relaxed));
        let evaluated =
            evaluate_every > 0 && (epoch % evaluate_every == 0 || epoch == epochs || stopping);
        let val_accuracy = match evaluated {
            true => {
                let spans = executor.trace().to_vec();
                executor.backend_mut().set_mode(Mode::Eval);
                executor.run_iteration()?;
                let eval = executor.backend().metrics()?;
                evaluated_last = Some((eval, spans));
                eval.val_accuracy()
            }
            false => None,
        };
        progress(&EpochStats {
            epoch,
            loss: metrics.loss,
            train_accuracy: metrics.train_accuracy(),
            val_accuracy,
            iteration_s: report.iteration_s,
            compute_s: report.compute_s,
            recompute_s: report.recompute_s,
            wait_s: report.wait_s,
        });
        if stop.is_some_and(|stop| stop.load(std::sync::atomic::Ordering::Relaxed)) {
            break;
        }
    }
    let epochs = losses.len() as u32;
    let (eval, spans) = match evaluated_last {
        Some(evaluated) => evaluated,
        None => {
            let spans = executor.trace().to_vec();
            executor.backend_mut().set_mode(Mode::Eval);
            executor.run_iteration()?;
            (executor.backend().metrics()?, spans)
        }
    };
    let mut hasher = Sha256::new();
    let mut weights = Vec::new();
    for tensor in &plan.workload.definition.tensors {
        if tensor.kind == TensorKind::Parameter && tensor.name.starts_with("w[") {
            let Some(Data::F32(values)) = executor.read_device(tensor.id.index())? else {
                return Err(ExecError::Internal(format!(
                    "weights {} are not on the device",
                    tensor.name
                )));
            };
            for value in &values {
                hasher.update(value.to_le_bytes());
            }
            weights.push(LayerWeights {
                name: tensor.name.clone(),
                values,
            });
        }
    }
    let weights_sha256 = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // The iterations after the first where there are several, for the
    // iteration and its parts alike.
    let skip = usize::from(seconds.len() > 1);
    let (timed, parts) = (&seconds[skip..], &parts[skip..]);
    let runs = timed.len().max(1) as f64;
    let mean = |part: fn(&(f64, f64, f64)) -> f64| parts.iter().map(part).sum::<f64>() / runs;
    let median = median_iteration(timed, parts);
    Ok((
        TrainReport {
            policy: plan.policy.clone(),
            epochs,
            train_accuracy: eval.train_accuracy(),
            val_accuracy: eval.val_accuracy(),
            test_accuracy: eval.test_accuracy(),
            final_loss: losses.last().copied().unwrap_or(f64::NAN),
            weights_sha256,
            iteration_s: timed.iter().sum::<f64>() / runs,
            iteration_s_predicted: plan.predicted.iteration_s,
            compute_s: mean(|p| p.0),
            recompute_s: mean(|p| p.1),
            wait_s: mean(|p| p.2),
            median,
            peak_bytes: executor.peak_bytes(),
            budgets: executor.budgets(),
            device_peak_bytes: executor.backend().device_peak_bytes(),
            bytes_moved: moved,
            losses,
            weights,
        },
        spans,
    ))
}

/// The median of iterations of `seconds` (the lower of the middle two
/// where they are even) with its own `parts` (compute, recompute and wait
/// seconds); zeros where there are none.
fn median_iteration(seconds: &[f64], parts: &[(f64, f64, f64)]) -> IterationTimes {
    let mut order: Vec<usize> = (0..seconds.len().min(parts.len())).collect();
    order.sort_by(|&a, &b| seconds[a].total_cmp(&seconds[b]));
    order
        .get(order.len().saturating_sub(1) / 2)
        .map_or_else(IterationTimes::default, |&k| IterationTimes {
            iteration_s: seconds[k],
            compute_s: parts[k].0,
            recompute_s: parts[k].1,
            wait_s: parts[k].2,
        })
}

/// A graph and model made ready to train: the workload a plan must be
/// made for, and the executor's inputs.
pub struct Prepared {
    pub workload: Workload,
    pub input: GraphInput,
    /// What the workload was built from.
    pub shape: GnnShape,
}

/// The workload by name and size and the graph by its counts: the
/// features and blocks themselves are too many to print.
impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let input = &self.input;
        f.debug_struct("Prepared")
            .field("workload", &self.workload.name)
            .field("tensors", &self.workload.tensors.len())
            .field("operators", &self.workload.ops.len())
            .field("nodes", &input.y.len())
            .field("features", &input.features)
            .field("classes", &input.classes)
            .field("partitions", &input.offsets.len().saturating_sub(1))
            .field("spec", &self.shape.spec)
            .finish_non_exhaustive()
    }
}

/// The plan by its workload and policy, the SSD tier by whether there is
/// one.
impl std::fmt::Debug for TrainRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainRun")
            .field(
                "plan",
                &format_args!("{} ({})", self.plan.workload.name, self.plan.policy),
            )
            .field("epochs", &self.epochs)
            .field("budgets", &self.budgets)
            .field("ssd", &self.ssd.as_ref().map(|_| "an SSD tier"))
            .field("trace", &self.trace)
            .field("backend", &self.backend)
            .field("stop", &self.stop)
            .field("evaluate_every", &self.evaluate_every)
            .finish()
    }
}

/// Reads a dataset folder, or generates a graph from a spec such as
/// `rmat:scale=16` or `planted:nodes=2000` when `source` is not a folder.
pub fn load_graph(source: &str) -> Result<Dataset, crate::Error> {
    let path = Path::new(source);
    if path.is_dir() {
        return Dataset::load(path);
    }
    let spec = generator(source)?;
    spec.check_fits()?;
    spec.generate()
}

/// `source`, which is not a folder, as a generator spec.
fn generator(source: &str) -> Result<GeneratorSpec, crate::Error> {
    // A path may hold a colon (a run's folder named by its time): one that
    // names no generator is read as the path it is.
    let kind = source.split_once(':').map(|(kind, _)| kind);
    if !matches!(kind, Some("rmat" | "planted")) {
        let path = Path::new(source);
        // Say what is there: nothing, or a file where a folder is read.
        let what = match path.exists() {
            false => "no such file or folder: expected a dataset folder or a generator spec",
            true => "is a file, not a dataset folder, and not a generator spec",
        };
        return Err(crate::Error::invalid(
            path,
            "graph",
            format!("{what} (rmat:... or planted:...)"),
        ));
    }
    GeneratorSpec::parse(source)
}

/// [`load_graph`] without the features (`x` empty), and where their rows
/// are read from as they are wanted.
pub fn load_graph_without_features(
    source: &str,
) -> Result<(Dataset, crate::dataset::FeatureRows), crate::Error> {
    let path = Path::new(source);
    if path.is_dir() {
        return Dataset::load_without_features(path);
    }
    let spec = generator(source)?;
    let dataset = spec.generate_without_features()?;
    Ok((dataset, crate::dataset::FeatureRows::Generated(spec)))
}

/// [`load_graph_without_features`] without the edges either (`src` and
/// `dst` empty), and where they are read from
/// ([`Dataset::open`], [`GeneratorSpec::open`]).
pub fn open_graph(
    source: &str,
) -> Result<
    (
        Dataset,
        crate::dataset::FeatureRows,
        crate::edges::EdgeSource<'static>,
    ),
    crate::Error,
> {
    let path = Path::new(source);
    if path.is_dir() {
        return Dataset::open(path);
    }
    let spec = generator(source)?;
    let (dataset, edges) = spec.open()?;
    Ok((dataset, crate::dataset::FeatureRows::Generated(spec), edges))
}

/// Partitions `dataset` into `partitions` vertex ranges, normalises the
/// blocks for `hyper.model`, and builds the workload. The dataset's
/// arrays move into the result; nothing is copied.
pub fn prepare(dataset: Dataset, hyper: &Hyper, partitions: u32) -> Result<Prepared, crate::Error> {
    prepare_cached(dataset, hyper, partitions, None)
}

/// The field a refusal of `Transposes::Mirrored` names: the graph is
/// not symmetric, or the model is not GCN (an `Error::InvalidInput` of
/// [`prepare`] and the functions like it).
pub const MIRRORED: &str = "transposes mirrored";

/// Whether every block's transpose is its mirror, bit for bit (rows,
/// columns in order, weights), as
/// [`fateplan_planner::gnn::Transposes::Mirrored`] reads them: the graph
/// is symmetric and GCN's scales are a vertex's own. Refused as the
/// graph `graph`'s field [`MIRRORED`].
fn check_mirrored(
    model: GnnModel,
    table: &[Option<BlockData>],
    offsets: &[u64],
    graph: &str,
) -> Result<(), crate::Error> {
    let p = offsets.len() - 1;
    let refused = |message: String| crate::Error::InvalidInput {
        path: graph.into(),
        field: MIRRORED.into(),
        message: format!("the graph is {message}; transposes stored or built train it"),
    };
    if model != GnnModel::Gcn {
        return Err(crate::Error::InvalidInput {
            path: graph.into(),
            field: MIRRORED.into(),
            message: format!(
                "applies to gcn, whose symmetric normalisation gives a block's mirror its \
                 transpose's weights; {}'s are not",
                model.name()
            ),
        });
    }
    for i in 0..p {
        for j in 0..p {
            let (block, mirror) = (&table[i * p + j], &table[j * p + i]);
            let (block, mirror) = match (block, mirror) {
                (None, None) => continue,
                (Some(block), Some(mirror)) => (block, mirror),
                _ => {
                    return Err(refused(format!(
                        "not symmetric: block ({i}, {j}) has edges and block ({j}, {i}) {}",
                        if block.is_some() { "none" } else { "some" }
                    )))
                }
            };
            let src_rows = (offsets[j + 1] - offsets[j]) as usize;
            let t = block.view().transpose(src_rows).map_err(|e| match e {
                fateplan_kernels::Error::OutOfMemory { bytes, what } => crate::Error::OutOfMemory {
                    bytes,
                    what: format!("the check of block ({i}, {j})'s mirror ({what})"),
                },
                e => refused(format!("not transposable at block ({i}, {j}): {e}")),
            })?;
            // The weights' bits, compared in place (no copy of them).
            let same = t.row_start == mirror.row_start
                && t.columns == mirror.columns
                && t.weighting == mirror.weighting
                && t.weights.len() == mirror.weights.len()
                && t.weights
                    .iter()
                    .zip(&mirror.weights)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            if !same {
                let which = match i == j {
                    true => format!("block ({i}, {i}) is not its own transpose"),
                    false => format!("block ({j}, {i}) is not block ({i}, {j})'s transpose"),
                };
                return Err(refused(format!(
                    "not symmetric: {which}{}",
                    if t.columns.len() != mirror.columns.len() {
                        format!(
                            " ({} edges against {})",
                            mirror.columns.len(),
                            t.columns.len()
                        )
                    } else {
                        String::new()
                    }
                )));
            }
        }
    }
    Ok(())
}

/// [`prepare`], with the adjacency read from the CSR cache file
/// `csr_cache` when it exists (it must match the graph's node and edge
/// counts), else built from the edge list and written there.
///
/// The edge lists are dropped as soon as the adjacency is built, before
/// the blocks are: they are no longer needed, and a large graph's take 16
/// bytes an edge.
pub fn prepare_cached(
    mut dataset: Dataset,
    hyper: &Hyper,
    partitions: u32,
    csr_cache: Option<&Path>,
) -> Result<Prepared, crate::Error> {
    let src = std::mem::take(&mut dataset.src);
    let dst = std::mem::take(&mut dataset.dst);
    prepare_with_edges(
        dataset,
        (src.into(), dst.into()),
        hyper,
        partitions,
        csr_cache,
    )
}

/// [`prepare`] of a graph that stays the caller's: its edge lists are
/// read where they are, and only its features, labels and masks are
/// copied (the prepared input holds its own). The profiler's GCN runs on
/// a graph given to it this way, run after run.
pub fn prepare_borrowed(
    dataset: &Dataset,
    hyper: &Hyper,
    partitions: u32,
) -> Result<Prepared, crate::Error> {
    let rest = Dataset {
        name: dataset.name.clone(),
        nodes: dataset.nodes,
        features: dataset.features,
        classes: dataset.classes,
        x: dataset.x.clone(),
        y: dataset.y.clone(),
        train_mask: dataset.train_mask.clone(),
        val_mask: dataset.val_mask.clone(),
        test_mask: dataset.test_mask.clone(),
        src: Vec::new(),
        dst: Vec::new(),
    };
    let edges = (dataset.src.as_slice().into(), dataset.dst.as_slice().into());
    prepare_with_edges(rest, edges, hyper, partitions, None)
}

/// Edge `k` of a graph runs from `.0[k]` to `.1[k]`: the lists owned
/// (dropped once the adjacency is built) or borrowed.
type EdgeLists<'a> = (std::borrow::Cow<'a, [u64]>, std::borrow::Cow<'a, [u64]>);

/// [`prepare_cached`] of `dataset` with its edges given apart (its own
/// `src` and `dst` are not read).
fn prepare_with_edges(
    dataset: Dataset,
    (src, dst): EdgeLists<'_>,
    hyper: &Hyper,
    partitions: u32,
    csr_cache: Option<&Path>,
) -> Result<Prepared, crate::Error> {
    hyper.check()?;
    // The edges (given apart: its own lists are empty) are checked as the
    // adjacency is built; the rest here, before any of it is read.
    dataset.check()?;
    // An edge naming no node is said as the dataset's check says it: the
    // lists are walked again only then.
    let build = || {
        Csr::from_edges(dataset.nodes, &src, &dst)
            .map_err(|error| crate::dataset::edge_error_named(&dataset, &src, &dst, error))
    };
    let csr = match csr_cache {
        Some(path) => {
            let digest = edge_digest(&src, &dst);
            Csr::cached(path, Some((dataset.nodes, src.len() as u64, digest)), build)?
        }
        None => build()?,
    };
    drop((src, dst));
    let counts = csr.block_counts(partitions)?;
    let blocks = BlockCsr::build(&csr, partitions, Normalization::for_model(hyper.model))?;
    let p = partitions as usize;
    let mut offsets = Vec::with_capacity(p + 1);
    for i in 0..partitions {
        offsets.push(blocks.range(i).0);
    }
    offsets.push(dataset.nodes);
    drop(csr);
    let table: Vec<Option<BlockData>> = blocks
        .into_slots()
        .into_iter()
        .map(|slot| {
            slot.map(|block| BlockData {
                row_start: block.row_start,
                columns: block.columns,
                weights: block.weights,
                weighting: block.weighting,
            })
        })
        .collect();
    debug_assert_eq!(table.len(), p * p);
    if hyper.transposes == fateplan_planner::gnn::Transposes::Mirrored {
        check_mirrored(hyper.model, &table, &offsets, &dataset.name)?;
    }
    let input = GraphInput {
        offsets,
        features: dataset.features as usize,
        classes: dataset.classes as usize,
        x: dataset.x,
        y: dataset.y,
        train_mask: dataset.train_mask,
        val_mask: dataset.val_mask,
        test_mask: dataset.test_mask,
        blocks: table,
        row_base: 0,
        row_ids: None,
        train_nodes_total: None,
        graph_nodes: None,
    };
    let shape = shape(
        dataset.features,
        dataset.classes,
        counts,
        hyper,
        &dataset.name,
    );
    // The planner's error whole (`Error::Planner`), to match.
    let workload = shape.workload(hyper.sweeps)?;
    Ok(Prepared {
        workload,
        input,
        shape,
    })
}

/// Spill-file space a tensor may take beyond its bytes: the byte form's
/// header and the padding of its last chunk to the store's alignment
/// (its other chunks are whole aligned blocks, `crate::spill::tier`).
pub const SPILL_SLACK_BYTES: u64 = crate::spill::ALIGN_BYTES as u64 + 64;

/// The tensors `plan` may put on the SSD: those of an SSD fate, and any
/// its schedule moves to or from the SSD. Each takes one tensor's slack
/// of the spill file at most ([`open_spill`]'s `blocks`).
pub fn ssd_blocks(plan: &Plan) -> usize {
    let mut on_ssd: Vec<bool> = plan
        .tensors
        .iter()
        .map(|t| matches!(t.fate, Fate::OffloadSsd | Fate::StreamSsd))
        .collect();
    for entry in &plan.schedule {
        if entry.from == Tier::Ssd || entry.to == Tier::Ssd {
            if let Some(flag) = on_ssd.get_mut(entry.tensor.index()) {
                *flag = true;
            }
        }
    }
    on_ssd.into_iter().filter(|&on| on).count()
}

/// Opens the SSD tier in `dir` for a plan that holds at most `blocks`
/// tensors there at once ([`ssd_blocks`]) and whose SSD budget is
/// `budget_bytes`. The executor's SSD arena enforces the plan's budget
/// exactly; the store's own limit, and so the spill file's size, adds
/// each tensor's slack ([`SPILL_SLACK_BYTES`]: its header and the
/// padding of its last chunk to the store's alignment).
pub fn open_spill(
    dir: &Path,
    budget_bytes: u64,
    blocks: usize,
    options: Option<SpillOptions>,
) -> Result<Arc<SpillStore>, crate::Error> {
    let limit = budget_bytes.saturating_add(blocks as u64 * SPILL_SLACK_BYTES);
    let options = options.unwrap_or_else(|| SpillOptions::with_budget(limit));
    Ok(Arc::new(SpillStore::open(
        dir,
        SpillOptions {
            budget_bytes: limit,
            ..options
        },
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run is given that does not hold together is an
    /// `InvalidInput`, which a caller can match, not a kernel's failure.
    #[test]
    fn a_run_given_what_cannot_run_is_invalid_input() {
        let hyper = Hyper {
            hidden: 8,
            ..Hyper::new(GnnModel::Gcn)
        };
        assert!(check_run(&hyper, 1, None).is_ok());
        let zero = check_run(&hyper, 0, None).unwrap_err();
        assert!(
            matches!(&zero, ExecError::InvalidInput { field, message }
                if field == "epochs" && message.starts_with("0;")),
            "{zero}"
        );
        let bad = Hyper { lr: -1.0, ..hyper };
        let error = check_run(&bad, 1, None).unwrap_err();
        assert!(
            matches!(&error, ExecError::InvalidInput { field, .. } if field == "hyper-parameter lr"),
            "{error}"
        );
    }

    /// A run is refused where what it holds in this process's memory at
    /// the plan's peak, each device's, less the graph the backend frees,
    /// is more than the memory left, naming both and the budgets to
    /// lower; on the CPU backend the device and host tiers at their peak
    /// together, which a plan that offloads reaches at no one step.
    #[test]
    fn a_run_over_the_memory_left_is_refused_before_it_starts() {
        let mib = 1u64 << 20;
        let left = crate::memory::Available {
            bytes: 600 * mib,
            source: "a limit".into(),
        };
        let cpu = BackendChoice::Cpu;
        let check = |held: u64, runs: u64, given: u64| {
            over_memory("w", (held, "held".into()), &cpu, runs, given, &left)
        };
        let error = check(700 * mib, 1, 50 * mib).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, ExecError::OverMemory { .. }), "{error:?}");
        assert_eq!(
            message,
            "training workload \"w\" takes at least 650 MiB in memory (held, less the 50.0 MiB \
             of the graph given over to them), more than the 600 MiB available (a limit); plan \
             under smaller budgets (--hbm-budget and --host-budget: what does not fit is \
             recomputed, or spilled to the SSD tier with --spill-dir; more --partitions where no \
             plan fits them), or free memory, or raise the limit named"
        );
        // The graph given over is freed: what is left takes the rest.
        assert!(check(700 * mib, 1, 100 * mib).is_ok());
        // Processes started together give over nothing yet.
        let none = check(601 * mib, 1, 0).unwrap_err().to_string();
        assert!(
            none.contains("601 MiB in memory (held), more than"),
            "{none}"
        );
        // Each device holds a plan's peak, under budgets of its own.
        let two = check(700 * mib, 2, 799 * mib).unwrap_err().to_string();
        assert!(
            two.contains("takes at least 601 MiB in memory (2 devices each at held")
                && two.contains("--host-budget, each device's:"),
            "{two}"
        );
        assert!(check(700 * mib, 2, 800 * mib).is_ok());
        let cuda = BackendChoice::Cuda(Default::default());
        let pinned = over_memory("w", (601 * mib, "h".into()), &cuda, 1, 0, &left);
        assert!(pinned
            .unwrap_err()
            .to_string()
            .contains("under a smaller host budget (--host-budget: what"),);

        // What a plan holds: on the CPU both tiers at their peak
        // together, on the CUDA backend the host tier alone.
        let (dataset, hyper) = small_gcn(9);
        let prepared = prepare(dataset, &hyper, 4).unwrap();
        let profile = cpu_small();
        let retain = retain_all(&prepared);
        let peak = retain.predicted.peak_bytes;
        let options = fateplan_planner::PlanOptions {
            budgets: Budgets {
                hbm_bytes: peak.hbm / 3,
                ..Budgets::UNLIMITED
            },
            ..fateplan_planner::PlanOptions::new(fateplan_planner::Policy::OffloadHostAll, &profile)
        };
        let offloaded = fateplan_planner::plan(&prepared.workload, &profile, &options).unwrap();
        for plan in [&retain, &offloaded] {
            let peak = plan.predicted.peak_bytes;
            assert_eq!(plan.peak_together(&[Tier::Hbm]), peak.hbm);
            assert_eq!(plan.peak_together(&[Tier::Host]), peak.host);
            let (held, what) = held_in_memory(plan, &cpu);
            assert!(held >= peak.hbm.max(peak.host) && held <= peak.hbm + peak.host);
            assert!(what.ends_with("both in this process's memory on the CPU backend"));
            assert_eq!(held_in_memory(plan, &cuda).0, peak.host);
        }
        let peak = offloaded.predicted.peak_bytes;
        let (held, what) = held_in_memory(&offloaded, &cpu);
        assert!(
            peak.host > 0 && held < peak.hbm + peak.host,
            "{peak:?}: {held}"
        );
        assert!(
            what.starts_with("the plan's peak of hbm and host together"),
            "{what}"
        );
        // On the SSD, the CPU backend holds nothing beside the staging
        // (the spill store streams a tensor through it); the CUDA backend
        // a plain copy of the largest tensor written and of the largest
        // read.
        let to_ssd = fateplan_planner::PlanOptions {
            ssd_staging_bytes: 1 << 16,
            ..fateplan_planner::PlanOptions::new(fateplan_planner::Policy::OffloadSsdAll, &profile)
        };
        let spilled = fateplan_planner::plan(&prepared.workload, &profile, &to_ssd).unwrap();
        let largest = |from: bool| {
            spilled
                .schedule
                .iter()
                .filter(|e| match from {
                    true => e.from == Tier::Ssd,
                    false => e.to == Tier::Ssd,
                })
                .map(|e| spilled.workload.definition.tensors[e.tensor.index()].bytes)
                .max()
                .unwrap()
        };
        assert_eq!(ssd_copies_in_flight(&spilled, &cpu), 0);
        assert_eq!(
            held_in_memory(&spilled, &cpu),
            tiers_in_memory(&spilled, &cpu)
        );
        let copies = ssd_copies_in_flight(&spilled, &cuda);
        assert_eq!(copies, 2 * largest(false) + largest(true));
        let (held, what) = held_in_memory(&spilled, &cuda);
        assert_eq!(held, tiers_in_memory(&spilled, &cuda).0 + copies);
        assert!(
            what.contains("of whole tensors the SSD tier's transfers hold"),
            "{what}"
        );
        assert_eq!(ssd_copies_in_flight(&retain, &cuda), 0);
    }

    /// An R-MAT graph of `2^scale` vertices, 6 features and 3 classes,
    /// and a GCN of 8 hidden for it.
    fn small_gcn(scale: u32) -> (Dataset, Hyper) {
        let graph = crate::generate::RmatSpec {
            features: 6,
            classes: 3,
            ..crate::generate::RmatSpec::new(scale)
        }
        .generate()
        .unwrap();
        let hyper = Hyper {
            hidden: 8,
            ..Hyper::new(GnnModel::Gcn)
        };
        (graph, hyper)
    }

    /// An edge of a dataset built in code that names no node is refused as
    /// its other fields are: an [`crate::Error::InvalidInput`] naming the
    /// dataset, the list and the place, the same from `check`, `blocks`
    /// and `prepare` (before, the last two gave the planner's error,
    /// naming the edge alone).
    #[test]
    fn an_edge_naming_no_node_is_refused_naming_the_dataset() {
        let (mut graph, hyper) = small_gcn(7);
        let nodes = graph.nodes;
        graph.dst[5] = nodes;
        let src = graph.src[5];
        let said = format!(
            "{}: dst[5]: {nodes} is not a node in 0..{nodes} (edge 5: {src} -> {nodes})",
            graph.name
        );
        let errors = [
            graph.check().unwrap_err(),
            graph.blocks(2).unwrap_err(),
            prepare_borrowed(&graph, &hyper, 2).err().unwrap(),
            prepare(graph.clone(), &hyper, 2).err().unwrap(),
        ];
        for error in errors {
            assert_eq!(error.to_string(), said);
            match error {
                crate::Error::InvalidInput { path, field, .. } => {
                    assert_eq!(path, Path::new(&graph.name));
                    assert_eq!(field, "dst[5]");
                }
                other => panic!("{other:?}"),
            }
        }
        // A source too, and the first edge that is out named.
        graph.src[3] = nodes + 1;
        let message = graph.check().unwrap_err().to_string();
        assert!(message.contains(": src[3]: "), "{message}");
    }

    /// A dataset built in code whose arrays disagree with its counts is
    /// refused when prepared, naming the field, where training used to
    /// panic on the first slice past the end.
    #[test]
    fn a_dataset_whose_arrays_disagree_is_refused_when_prepared() {
        let (graph, hyper) = small_gcn(7);
        assert!(prepare(graph.clone(), &hyper, 2).is_ok());
        type Break = fn(&mut Dataset);
        let cases: [(&str, Break); 7] = [
            ("x: ", |d| d.x.truncate(5)),
            ("x[0, 2]: NaN", |d| d.x[2] = f32::NAN),
            ("x: ", |d| d.features = 7),
            ("y: ", |d| d.y.pop().map(drop).unwrap_or(())),
            ("test_mask: ", |d| d.test_mask.push(true)),
            ("y[3]: ", |d| d.y[3] = 3),
            ("dst: ", |d| d.dst.truncate(1)),
        ];
        for (field, break_it) in cases {
            let mut broken = graph.clone();
            break_it(&mut broken);
            let error = prepare(broken.clone(), &hyper, 2)
                .err()
                .unwrap()
                .to_string();
            let checked = broken.check().err().map(|e| e.to_string());
            assert!(
                error.contains(field) || error.contains("sources but"),
                "{field} {error}"
            );
            if field != "dst: " {
                assert_eq!(checked.as_deref(), Some(error.as_str()), "{field}");
            }
        }
    }

    /// The shipped `cpu-small` profile.
    fn cpu_small() -> fateplan_planner::Profile {
        fateplan_planner::Profile::from_json(
            include_str!("../../profiles/cpu-small.json"),
            "cpu-small.json",
        )
        .unwrap()
    }

    /// `prepared`'s retain-all plan on [`cpu_small`].
    fn retain_all(prepared: &Prepared) -> Plan {
        let profile = cpu_small();
        let options =
            fateplan_planner::PlanOptions::new(fateplan_planner::Policy::RetainAll, &profile);
        fateplan_planner::plan(&prepared.workload, &profile, &options).unwrap()
    }

    /// What a run is given prints by its names and counts, not its data.
    #[test]
    fn a_run_and_its_inputs_print_by_their_counts() {
        let (graph, hyper) = small_gcn(7);
        let nodes = graph.nodes;
        let prepared = prepare(graph, &hyper, 2).unwrap();
        let printed = format!("{prepared:?}");
        assert!(
            printed.contains(&format!("workload: {:?}", prepared.workload.name))
                && printed.contains(&format!("nodes: {nodes}"))
                && printed.contains("partitions: 2")
                && printed.len() < 2000,
            "{printed}"
        );
        let run = TrainRun::new(Arc::new(retain_all(&prepared)), 3);
        let printed = format!("{run:?}");
        assert!(
            printed.contains("retain-all")
                && printed.contains("ssd: None")
                && printed.contains("evaluate_every: 0"),
            "{printed}"
        );
    }

    /// A model the planner's GNN builder refuses is its error, whole.
    #[test]
    fn a_model_the_builder_refuses_is_the_planner_s_error() {
        let (graph, mut hyper) = small_gcn(7);
        hyper.hidden = 0;
        match prepare(graph, &hyper, 2).err().unwrap() {
            crate::Error::Planner(fateplan_planner::Error::InvalidInput { context, message }) => {
                assert_eq!(context, "hidden");
                assert!(message.contains("0 is outside"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A graph prepared where it lies gives what the graph moved in gives
    /// (blocks, features, labels, masks, workload).
    #[test]
    fn a_borrowed_graph_prepares_as_a_moved_one() {
        let (graph, hyper) = small_gcn(9);
        for partitions in [1, 3] {
            let moved = prepare(graph.clone(), &hyper, partitions).unwrap();
            let borrowed = prepare_borrowed(&graph, &hyper, partitions).unwrap();
            let (a, b) = (&moved.input, &borrowed.input);
            assert_eq!(a.blocks, b.blocks, "{partitions} partitions");
            assert_eq!(a.offsets, b.offsets);
            assert!(a.x == b.x && a.y == b.y && a.train_mask == b.train_mask);
            assert!(a.val_mask == b.val_mask && a.test_mask == b.test_mask);
            let json = |p: &Prepared| serde_json::to_string(&p.workload).unwrap();
            assert_eq!(json(&moved), json(&borrowed));
            assert!(!b.blocks.iter().flatten().next().unwrap().columns.is_empty());
        }
    }

    /// A 2-layer GCN of 8 hidden on 32 features and 3 classes, its first
    /// layer projecting first.
    fn toy_gcn(
        dropout: f32,
        transposes: fateplan_planner::gnn::Transposes,
    ) -> fateplan_planner::gnn::GnnSpec {
        fateplan_planner::gnn::GnnSpec {
            model: GnnModel::Gcn,
            layers: 2,
            hidden: 8,
            heads: 1,
            features: 32,
            classes: 3,
            graph_name: "toy".into(),
            order: fateplan_planner::gnn::LayerOrder::Narrower,
            transposes,
            sweeps: Default::default(),
            dropout,
        }
    }

    /// A plan made before the running sums were marked as added into in
    /// place, or before the masked gathers had a class of their own
    /// (theirs `sparse`), trains the same workload; another does not.
    #[test]
    fn a_plan_from_before_the_masked_class_still_trains() {
        use fateplan_planner::blocks::BlockCounts;
        use fateplan_planner::gnn::{build_gnn, GnnSpec, LayerOrder, Transposes};
        let blocks = BlockCounts::skewed(400, 2000, 2).unwrap();
        let built = |dropout| {
            let spec = GnnSpec {
                order: LayerOrder::AggregateFirst,
                ..toy_gcn(dropout, Transposes::Stored)
            };
            build_gnn(&spec, &blocks).unwrap()
        };
        let now = built(0.5);
        assert!(now
            .ops
            .iter()
            .any(|op| op.cost.class == ComputeClass::SparseMasked));
        // Before the ReLU masks (`tests/train_cli.rs` trains a plan a
        // build of then saved): each relu_bwd reads its z again, and
        // every id is dense.
        let unmasked = before_relu_masks(&now).expect("a hidden ReLU");
        assert!(unmasked
            .tensors
            .iter()
            .all(|t| !t.name.starts_with("relu_bits[")));
        assert!(unmasked
            .tensors
            .iter()
            .enumerate()
            .all(|(i, t)| t.id.index() == i));
        assert!(unmasked
            .ops
            .iter()
            .enumerate()
            .all(|(i, op)| op.id.index() == i));
        for op in unmasked
            .ops
            .iter()
            .filter(|op| op.name.starts_with("relu_bwd["))
        {
            let read = unmasked.tensor(op.inputs[1]).name.clone();
            assert!(read.starts_with("z["), "{}: {read}", op.name);
        }
        assert_eq!(unmasked.ops.len() + 2, now.ops.len());
        assert!(planned_for(&unmasked.digest(), &now));
        // Before the gathers recorded their working set.
        let mut ungathered = now.clone();
        for op in &mut ungathered.ops {
            (op.cost.gather_width, op.cost.gather_set_bytes) = (0, 0);
            if op.cost.class == ComputeClass::Softmax {
                op.cost.rows = 0;
            }
        }
        assert_ne!(ungathered.digest(), now.digest());
        assert!(planned_for(&ungathered.digest(), &now));
        // And before that, before the aggregations counted their rows
        // walked.
        let mut uncounted = ungathered.clone();
        for op in &mut uncounted.ops {
            (op.cost.rows, op.cost.row_bytes) = (0, 0);
        }
        assert_ne!(uncounted.digest(), now.digest());
        assert!(planned_for(&uncounted.digest(), &now));
        // And before that, before the running sums were marked as added
        // into in place.
        let mut unmarked = uncounted.clone();
        for op in &mut unmarked.ops {
            op.adds_into = None;
        }
        assert_ne!(unmarked.digest(), now.digest());
        assert!(planned_for(&unmarked.digest(), &now));
        // And before that, the masked gathers `sparse`.
        let mut before = unmarked.clone();
        for op in &mut before.ops {
            if op.cost.class == ComputeClass::SparseMasked {
                op.cost.class = ComputeClass::Sparse;
            }
        }
        assert_ne!(before.digest(), now.digest());
        assert!(planned_for(&now.digest(), &now));
        assert!(planned_for(&before.digest(), &now));
        // Without dropout there is no masked gather to tell apart.
        let plain = built(0.0);
        assert!(planned_for(&plain.digest(), &plain));
        assert!(!planned_for(&before.digest(), &plain));
        assert!(!planned_for(&plain.digest(), &now));
    }

    /// A GAT plan made before its edge operators recorded the heads and
    /// rows they walk trains the same workload.
    #[test]
    fn a_gat_plan_from_before_heads_and_rows_still_trains() {
        use fateplan_planner::blocks::BlockCounts;
        use fateplan_planner::gnn::{build_gnn, GnnSpec, Transposes};
        let blocks = BlockCounts::skewed(400, 2000, 2).unwrap();
        let spec = GnnSpec {
            model: GnnModel::Gat,
            heads: 2,
            ..toy_gcn(0.5, Transposes::Stored)
        };
        let now = build_gnn(&spec, &blocks).unwrap();
        let walked = now
            .ops
            .iter()
            .filter(|op| op.cost.edge_heads > 0 && op.cost.rows > 0)
            .count();
        assert!(walked > 0);
        let mut before = now.clone();
        for op in &mut before.ops {
            (op.cost.edge_heads, op.cost.rows) = (0, 0);
        }
        assert_ne!(before.digest(), now.digest());
        assert!(planned_for(&before.digest(), &now));
        // Another GAT's plan is still refused.
        let other = build_gnn(&GnnSpec { heads: 1, ..spec }, &blocks).unwrap();
        assert!(!planned_for(&before.digest(), &other));
    }

    /// The median iteration is one of those timed, with its own parts:
    /// a slow warm-up or a slow moment does not move it.
    #[test]
    fn the_median_iteration_is_a_steady_one_with_its_parts() {
        let part = |s: f64| (s * 0.9, 0.0, s * 0.05);
        let seconds = [0.34, 0.24, 0.25, 0.23, 0.60];
        let parts: Vec<_> = seconds.iter().map(|&s| part(s)).collect();
        let median = median_iteration(&seconds, &parts);
        assert_eq!(
            median,
            IterationTimes {
                iteration_s: 0.25,
                compute_s: 0.25 * 0.9,
                recompute_s: 0.0,
                wait_s: 0.25 * 0.05,
            }
        );
        // Even: the lower of the middle two.
        let median = median_iteration(&seconds[..4], &parts[..4]);
        assert_eq!(median.iteration_s, 0.24);
        assert_eq!(median_iteration(&[], &[]), IterationTimes::default());
    }

    /// A refused plan's hint names what tells the workloads apart: the
    /// transposes, else the dropout masks; none where neither does.
    #[test]
    fn a_refused_plan_is_told_what_differs() {
        use fateplan_planner::blocks::BlockCounts;
        use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec, LayerOrder, Transposes};
        let blocks = BlockCounts::skewed(400, 2000, 2).unwrap();
        let built_on = |blocks: &BlockCounts, dropout, transposes| {
            build_gnn(&toy_gcn(dropout, transposes), blocks).unwrap()
        };
        let built = |dropout, transposes| built_on(&blocks, dropout, transposes);
        let (stored, kept) = (Transposes::Stored, Transposes::Built);
        let hint = |a: &Workload, b: &Workload| digest_hint(a, b);
        let masked = built(0.5, stored);
        let unmasked = built(0.0, stored);
        assert!(hint(&unmasked, &masked).contains("prices no dropout masks"));
        assert!(hint(&masked, &unmasked).contains("train it with its dropout, --dropout)"));
        assert!(hint(&built(0.5, kept), &masked).contains("--transposes built"));
        assert!(hint(&masked, &built(0.0, kept)).contains("--transposes stored"));
        // Another name alone: a graph's folder renamed.
        let renamed = Workload {
            name: "gcn-elsewhere".into(),
            ..masked.clone()
        };
        assert!(hint(&masked, &renamed).contains("only the name differs"));
        assert_eq!(hint(&masked, &built(0.3, stored)), "");
        // The same tensors, an operator edited: that operator and field,
        // its tensors by name.
        let mut edited = masked.clone();
        let at = edited
            .ops
            .iter()
            .position(|op| op.name.starts_with("relu_bwd["))
            .unwrap();
        let h = edited
            .tensors
            .iter()
            .find(|t| t.name == "h[l1,p0]")
            .unwrap()
            .id;
        edited.ops[at].inputs[1] = h;
        let said = hint(&edited, &masked);
        assert!(
            said.contains("the first operator that differs: \"relu_bwd[l1,p0]\", its inputs: [")
                && said.contains("h[l1,p0]]")
                && said.contains("relu_bits[l1,p0]]"),
            "{said}"
        );
        let mut priced = masked.clone();
        priced.ops[at].cost.flops += 1.0;
        let said = hint(&priced, &masked);
        assert!(said.contains("its cost: {"), "{said}");
        // Another graph: no word on dropout, but the first tensor that
        // differs (workload names leave out a graph's features).
        let other = built_on(&BlockCounts::skewed(800, 4000, 2).unwrap(), 0.0, stored);
        let said = hint(&other, &masked);
        assert!(!said.contains("dropout"), "{said}");
        assert!(
            said.contains("the first tensor that differs: \"x[p0]\"")
                || said.contains("tensors, this run's"),
            "{said}"
        );
        // GAT by inputs: the same operators, run in another order.
        let gat = |sweep: &str| {
            let spec = GnnSpec {
                model: GnnModel::Gat,
                layers: 2,
                hidden: 8,
                heads: 2,
                features: 32,
                classes: 3,
                graph_name: "toy".into(),
                order: LayerOrder::Narrower,
                transposes: Transposes::Stored,
                sweeps: fateplan_planner::gnn::Sweeps::parse(sweep).unwrap(),
                dropout: 0.5,
            };
            build_gnn(&spec, &blocks).unwrap()
        };
        let said = hint(&gat("outputs"), &gat("inputs"));
        assert!(said.contains("run in another order"), "{said}");
        // A plan of a generic DAG: no flag trains it.
        let mut dag = Workload::new("nx");
        let a = dag.add_tensor(
            "a",
            8,
            fateplan_planner::workload::TensorKind::Activation,
            None,
        );
        dag.add_op(
            "f0",
            fateplan_planner::workload::OpKind::Generic,
            fateplan_planner::workload::Phase::Forward,
            vec![],
            vec![a],
            fateplan_planner::workload::Cost::seconds(1.0),
        );
        let said = hint(&dag, &masked);
        assert!(
            said.contains("a DAG given to `plan --dag`") && !said.contains("--transposes"),
            "{said}"
        );
        assert!(hint(&masked, &built(0.3, stored)).is_empty());
        let mut wider = masked.clone();
        wider.tensors[0].bytes *= 2;
        let said = hint(&wider, &masked);
        assert!(
            said.contains(&format!(
                "{:?} of {} bytes in the plan, {:?} of {} bytes in this run",
                masked.tensors[0].name,
                masked.tensors[0].bytes * 2,
                masked.tensors[0].name,
                masked.tensors[0].bytes
            )),
            "{said}"
        );
    }

    fn epoch(epoch: u32) -> EpochStats {
        EpochStats {
            epoch,
            loss: 1.0 / epoch as f64,
            train_accuracy: Some(0.5),
            val_accuracy: None,
            iteration_s: 0.1,
            compute_s: 0.1,
            recompute_s: 0.0,
            wait_s: 0.0,
        }
    }

    /// The job runs on a pool thread; the caller's thread sees every epoch
    /// in order; the job's panic comes back; from a pool thread the job
    /// runs where it is called.
    #[test]
    fn training_runs_on_a_pool_thread_and_reports_on_the_callers() {
        let caller = std::thread::current().id();
        let mut seen = Vec::new();
        let ran_on = on_a_worker(
            &mut |stats| {
                assert_eq!(std::thread::current().id(), caller);
                seen.push(stats.epoch);
            },
            |progress| {
                (1..=3).for_each(|e| progress(&epoch(e)));
                (rayon::current_thread_index(), std::thread::current().id())
            },
        );
        assert_eq!(seen, [1, 2, 3]);
        assert!(ran_on.0.is_some() && ran_on.1 != caller, "{ran_on:?}");

        // A panic in the job reaches the caller.
        let panicked = std::panic::catch_unwind(|| {
            on_a_worker(&mut |_| {}, |progress| {
                progress(&epoch(1));
                panic!("boom")
            })
        });
        assert!(panicked.is_err());

        // A panic in `progress` reaches the caller with its own payload,
        // and the job stops at the next epoch it reports (told or not).
        for told in [false, true] {
            let reported = std::sync::atomic::AtomicU32::new(0);
            let panicked = std::panic::catch_unwind(|| {
                on_a_worker_told(
                    &mut |stats| {
                        if stats.epoch == 2 {
                            std::panic::panic_any("progress failed");
                        }
                    },
                    told,
                    |progress| {
                        for e in 1..=1000 {
                            reported.store(e, std::sync::atomic::Ordering::Relaxed);
                            progress(&epoch(e));
                            // Time for the caller to see each epoch.
                            std::thread::sleep(std::time::Duration::from_millis(2));
                        }
                    },
                )
            });
            let payload = panicked.expect_err("progress panicked");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"progress failed"));
            let reported = reported.load(std::sync::atomic::Ordering::Relaxed);
            // (Told, the job waits for each epoch to be seen: it stops at
            // 2. Not told, it may run ahead by what the caller takes to
            // see epoch 2; 1000 without the stop.)
            assert!(
                reported <= 100,
                "told {told}: the job went on to epoch {reported}"
            );
            if told {
                assert_eq!(reported, 2);
            }
        }

        let inside = rayon::scope(|_| {
            let worker = std::thread::current().id();
            on_a_worker(&mut |_| {}, |_| std::thread::current().id() == worker)
        });
        assert!(inside);
    }

    /// The threads are shared out, the first members taking the remainder,
    /// one at least each; a member's loops run on its own pool's threads;
    /// members waiting for each other on pools of one thread each all get
    /// there (on one shared pool of one thread, the first to wait would
    /// hold the thread the others need).
    #[test]
    fn each_member_gets_a_pool_of_its_own() {
        use rayon::prelude::*;
        let sizes = |threads, members| -> Vec<usize> {
            member_pools(threads, members)
                .unwrap()
                .iter()
                .map(rayon::ThreadPool::current_num_threads)
                .collect()
        };
        assert_eq!(sizes(2, 2), [1, 1]);
        assert_eq!(sizes(5, 2), [3, 2]);
        assert_eq!(sizes(7, 3), [3, 2, 2]);
        assert_eq!(sizes(1, 3), [1, 1, 1]);

        // Each member waits for the others on its pool's one thread, then
        // names the threads its loop ran on. Threads of their own, so that
        // a hang fails the test after the wait instead of hanging it.
        let pools = member_pools(3, 3).unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(pools.len()));
        let (sender, done) = std::sync::mpsc::channel();
        for (rank, pool) in pools.into_iter().enumerate() {
            let (barrier, sender) = (barrier.clone(), sender.clone());
            std::thread::spawn(move || {
                let names = pool.install(|| {
                    barrier.wait();
                    let mut names: Vec<String> = (0..64)
                        .into_par_iter()
                        .map(|_| std::thread::current().name().unwrap_or("").to_string())
                        .collect();
                    names.dedup();
                    names
                });
                let _ = sender.send((rank, names));
            });
        }
        let mut names = vec![Vec::new(); 3];
        for _ in 0..3 {
            let (rank, got) = done
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("the members waiting for each other all got there");
            names[rank] = got;
        }
        for (rank, names) in names.iter().enumerate() {
            assert_eq!(names, &[format!("device{rank}-0")], "member {rank}");
        }
    }
}
