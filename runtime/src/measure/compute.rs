//! A backend's compute rates (the CPU's, or with a GPU the CUDA
//! backend's), measured inside training: a few
//! retain-all iterations of a 3-layer GCN on a generated R-MAT graph
//! (every layer `width` wide but the last, whose output is an eighth of
//! that, as few classes make it), of the same GCN at half the width, and
//! of a 2-layer GAT, through the executor and the backend as
//! `fateplan train` runs them, with each operator timed (on the GPU, each
//! operator waits for its kernels). A
//! rate is the operators' flops or bytes, as the GNN workload builder
//! counts them ([`fateplan_planner::gnn::build_gnn`]), over their
//! seconds, so that a rate times an operator's cost is the operator's
//! time in training, which is how the planner and the simulator use the
//! profile. Kernels timed in a loop of their own ran faster than in
//! training, where other operators come between them (`docs/profile.md`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use fateplan_planner::gnn::{GnnModel, LayerOrder, Transposes};
use fateplan_planner::plan::{Budgets, Plan, Stream};
use fateplan_planner::profile::DeviceKind;
use fateplan_planner::profile::{curve_share, ClassRate, DenseShape, GatherPoint};
use fateplan_planner::workload::{ComputeClass, Cost, Op, OpKind, TensorKind, Workload};
use fateplan_planner::{plan, PlanOptions, Policy, Profile};

use crate::cpu::{CpuGnn, Hyper};
use crate::cuda::{CudaGnn, CudaOptions};
use crate::dataset::Dataset;
use crate::exec::{ExecError, ExecOptions, Executor};
use crate::generate::{PlantedSpec, RmatSpec};
use crate::gnn::{GnnBackend, Mode};
use crate::train::{self, BackendChoice, TrainRun};
use crate::{Error, Result};

use super::{median, Rounds};

/// The measured training run: graph, model and partitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bench {
    pub scale: u32,
    pub partitions: u32,
    /// Features and hidden width; the classes are an eighth of it (at
    /// least 2).
    pub width: u32,
}

impl Bench {
    pub fn classes(&self) -> u32 {
        (self.width / 8).max(2)
    }

    /// The second GCN's features and hidden width: half of `width` (at
    /// least 1), so that its aggregations move about half the bytes an
    /// edge (an edge's index does not shrink).
    pub fn half_width(&self) -> u32 {
        (self.width / 2).max(1)
    }

    /// A narrow GCN's features and hidden width: an eighth of `width` (at
    /// least 1), whose rows' bytes are few beside their walks.
    pub fn narrow_width(&self) -> u32 {
        (self.width / 8).max(1)
    }
}

/// One GCN timed for the aggregations' time per row ([`row_runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRun {
    pub width: u32,
    pub partitions: u32,
    /// Iterations timed, after one left out.
    pub iterations: u32,
}

/// The GCNs, as (width, partitions), timed beside the two in `bench`'s
/// partitions to tell an aggregation's time per row (walked once a
/// block) from its time per edge and its bandwidth: the wide one in one
/// partition, which walks each row once a layer; a narrow one (an eighth
/// of the width), whose rows' bytes are few beside their walks, in
/// `bench`'s partitions and in one; and the wide one in twice `bench`'s
/// partitions. Fitted on the first two alone, the rows of the profile's
/// 3-layer GCN of 128 on R-MAT scale 18 in 16 partitions were priced at 0.85 of
/// their time and a narrow GCN's in one partition at 1.2 of theirs
/// (docs/profile.md, "More partition counts in the aggregations' fit").
pub fn row_runs(bench: Bench) -> [(u32, u32); 4] {
    let parts = bench.partitions;
    [
        (bench.width, 1),
        (bench.narrow_width(), parts),
        (bench.narrow_width(), 1),
        (bench.width, 2 * parts),
    ]
}

/// One GEMM shape's rate: the linear layers (forward and backward) of
/// `d_in -> d_out`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseRate {
    pub d_in: u32,
    pub d_out: u32,
    pub flops_per_s: f64,
    pub flops_per_byte: f64,
}

/// What [`training_rates`] measured: medians over iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingRates {
    pub nodes: u64,
    pub edges: u64,
    /// The GEMM rate of each layer shape of the first two GCNs, least
    /// intense first (of two shapes as intense, the first measured).
    pub dense: Vec<DenseRate>,
    /// ReLU with dropout, its mask and its backward: bytes per second.
    pub elementwise_bytes_per_s: f64,
    /// Forward aggregations (SpMM, the first with input dropout fused)
    /// of the GCN of `width`.
    pub gather_bytes_per_s: f64,
    /// Backward aggregations (transposed SpMM) of the GCN of `width`.
    pub scatter_bytes_per_s: f64,
    /// The forward and backward aggregations (`sparse`, `sparse_masked`,
    /// `scatter`), each fitted a bandwidth, a time per edge and, where
    /// the runs that tell rows apart ran, a time per row over the layers
    /// of every GCN timed (`fit_class`).
    pub class_rates: Vec<ClassRate>,
    /// The loss (softmax cross-entropy, with the accuracy of three masks)
    /// and its backward: flops per second.
    pub loss_flops_per_s: f64,
    /// Iterations timed, after one left out: of the GCN of `width`, and
    /// of the one of half of it.
    pub iterations: u32,
    pub half_iterations: u32,
    /// The runs that tell the aggregations' rows apart ([`row_runs`]),
    /// none where they did not run (one partition, or one of them that
    /// cannot: `row_runs_fit`).
    pub row_runs: Vec<RowRun>,
    /// Seconds per edge to build a block's transpose on a backend that
    /// builds them (the CUDA backend's; `None` on the CPU): the GCN of
    /// half the width timed again with every transpose built afresh
    /// (`CudaOptions::rebuild_transposes`), its backward aggregations'
    /// added seconds over the edges it built beyond the first run's.
    pub transpose_seconds_per_edge: Option<f64>,
    /// How the GCNs were timed: in turn, an iteration of each after
    /// another (`time_trainings`), or one after another and why.
    pub in_turn: InTurn,
}

impl TrainingRates {
    /// The rate of the widest shape: `dense_flops_per_s`.
    pub fn wide(&self) -> DenseRate {
        *self
            .dense
            .last()
            .expect("training_rates measures at least one shape")
    }

    /// The profile's `dense_shapes`.
    pub fn dense_shapes(&self) -> Vec<DenseShape> {
        self.dense
            .iter()
            .map(|r| DenseShape {
                flops_per_byte: r.flops_per_byte,
                flops_per_s: r.flops_per_s,
            })
            .collect()
    }
}

/// What a timed operator counts towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Group {
    /// The linear layers, forward and backward, of one shape `d_in ->
    /// d_out`.
    Dense(u32, u32),
    Elementwise,
    /// The forward aggregations of one layer.
    Gather(u32),
    /// The forward aggregations of one layer that mask their input as
    /// they gather (the first layer's, with dropout).
    MaskedGather(u32),
    /// The backward aggregations of one layer.
    Scatter(u32),
    /// The loss (with the accuracy) and its backward.
    Loss,
    /// A class of GAT's operators in one layer.
    Gat(ComputeClass, u32),
    /// The operators that draw dropout masks.
    Masked,
}

/// The classes of GAT's operators the GAT run times, each fitted its own
/// rate.
pub(crate) const GAT_CLASSES: [ComputeClass; 7] = [
    ComputeClass::EdgeScores,
    ComputeClass::Attention,
    ComputeClass::EdgeSoftmax,
    ComputeClass::AttentionBackward,
    ComputeClass::NodeScores,
    ComputeClass::NodeScoresBackward,
    ComputeClass::Elu,
];

/// Flops, bytes, edges and seconds of one group in one iteration.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    flops: f64,
    bytes: f64,
    edges: f64,
    /// Edges whose transpose the operators build first, as the workload
    /// counts them (`cost.transpose_edges`).
    transposed: f64,
    /// Elements the operators mask with dropout (`cost.masked`).
    masked: f64,
    /// Heads of the edges the operators walk (`cost.edge_heads`).
    edge_heads: f64,
    /// Rows the operators walk, once a block (`cost.rows`).
    rows: f64,
    /// Of `bytes`, those moved once a row walked (`cost.row_bytes`).
    row_bytes: f64,
    seconds: f64,
}

impl Sums {
    /// Adds an operator of `cost` that took `seconds`. A forward gather's
    /// bytes (less those moved once a row) and edges, masked or not, are
    /// counted at its share of `curve` ([`curve_share`]; all of them
    /// without a curve), so that a fit over them is of a gather at the
    /// curve's largest working set (docs/profile.md, "The masked gathers
    /// on the curve again").
    fn add(&mut self, cost: &Cost, seconds: f64, curve: &[GatherPoint]) {
        let share = match cost.class {
            ComputeClass::Sparse | ComputeClass::SparseMasked => {
                curve_share(curve, cost.gather_width, cost.gather_set_bytes)
            }
            _ => 1.0,
        };
        let row_bytes = cost.row_bytes.min(cost.bytes) as f64;
        self.flops += cost.flops;
        self.bytes += share * (cost.bytes as f64 - row_bytes) + row_bytes;
        self.edges += share * cost.edges as f64;
        self.transposed += cost.transpose_edges as f64;
        self.masked += cost.masked as f64;
        self.edge_heads += cost.edge_heads as f64;
        self.rows += cost.rows as f64;
        self.row_bytes += cost.row_bytes as f64;
        self.seconds += seconds;
    }
}

/// The layer of an operator named `kind[l<layer>,...]`.
fn layer_of(name: &str) -> Option<u32> {
    name.split_once("[l")?
        .1
        .split([',', ']'])
        .next()?
        .parse()
        .ok()
}

/// The measured GCN's layers: each layer's `(d_in, d_out)`.
#[derive(Debug, Clone, PartialEq)]
struct Shapes(Vec<(u32, u32)>);

impl Shapes {
    /// `layers` layers of `hidden` on `features` into `classes`.
    fn gcn(layers: u32, features: u32, hidden: u32, classes: u32) -> Shapes {
        Shapes(
            (1..=layers)
                .map(|l| {
                    let d_in = if l == 1 { features } else { hidden };
                    let d_out = if l == layers { classes } else { hidden };
                    (d_in, d_out)
                })
                .collect(),
        )
    }

    fn layers(&self) -> u32 {
        self.0.len() as u32
    }

    /// Layer `l`'s shape (layers count from 1).
    fn of(&self, l: u32) -> Option<(u32, u32)> {
        self.0.get((l as usize).checked_sub(1)?).copied()
    }
}

/// The group a GCN operator's time counts towards; `None` for operators
/// no figure is measured on (weight gradients' sums, updates). An
/// operator of a timed kind that does not fit its group is an error, so
/// that none is left out unseen.
fn group_of(op: &Op, shapes: &Shapes) -> Result<Option<Group>> {
    let unexpected = || {
        Error::Internal(format!(
            "the compute measurement cannot place operator {} ({:?}, {:?})",
            op.name, op.kind, op.cost.class
        ))
    };
    let layer = || {
        layer_of(&op.name)
            .filter(|l| shapes.of(*l).is_some())
            .ok_or_else(unexpected)
    };
    Ok(Some(match op.kind {
        OpKind::Linear | OpKind::LinearBackward => {
            if op.cost.class != ComputeClass::Dense {
                return Err(unexpected());
            }
            let (d_in, d_out) = layer_of(&op.name)
                .and_then(|l| shapes.of(l))
                .ok_or_else(unexpected)?;
            Group::Dense(d_in, d_out)
        }
        OpKind::Activation | OpKind::ActivationBackward => Group::Elementwise,
        OpKind::Aggregate if op.cost.class == ComputeClass::Sparse => Group::Gather(layer()?),
        OpKind::Aggregate if op.cost.class == ComputeClass::SparseMasked => {
            Group::MaskedGather(layer()?)
        }
        OpKind::AggregateBackward if op.cost.class == ComputeClass::Scatter => {
            Group::Scatter(layer()?)
        }
        OpKind::Loss | OpKind::LossBackward => Group::Loss,
        OpKind::Aggregate | OpKind::AggregateBackward => return Err(unexpected()),
        _ => return Ok(None),
    }))
}

/// A graph given to time the GCN on (`--graph`), and the host memory
/// free once it was loaded ([`crate::memory::available`]), in which its
/// runs must fit.
#[derive(Debug, Clone)]
pub struct GivenGraph<'a> {
    pub dataset: &'a Dataset,
    pub host_free: crate::memory::Available,
}

/// Refuses a graph on which the GCN `hyper` in `partitions` would not fit
/// the device (on the CPU backend, its arena's share of RAM) with every
/// tensor kept, as the retain-all plan counts it from the graph's block
/// counts: before the blocks are built, so that a graph given to profile
/// on that is too large fails at once instead of running out of memory.
/// With `host_free`, the host must hold what the run adds to the graph
/// already loaded: its prepared inputs (features, labels, blocks: the
/// workload's input tensors) and, while they are built, the adjacency
/// (`8 (N + 1) + 4 E` bytes) with the degree scales and masks beside it
/// (`11 N`); on the CPU backend, whose device is the host, also the
/// inputs again while the executor takes its copies, or every tensor
/// kept, where either is more. Returns that figure, the host memory the
/// run takes beside the graph (counted with or without `host_free`).
fn fits_the_device(
    graph: &Dataset,
    hyper: &Hyper,
    partitions: u32,
    profile: &Profile,
    host_free: Option<&crate::memory::Available>,
) -> Result<u64> {
    let spec = train::spec(graph.features, graph.classes, hyper, &graph.name);
    let workload = fateplan_planner::gnn::build_gnn(&spec, &graph.blocks(partitions)?)?;
    let peak = retain_all(&workload, profile)?.predicted.peak_bytes.hbm;
    let capacity = profile.device.hbm_bytes;
    let refused = |message: String| Error::InvalidInput {
        path: "--graph".into(),
        field: format!("{} ({} nodes)", graph.name, graph.nodes),
        message: format!(
            "the {}-layer {} of hidden width {} the profile times on it needs {message}: profile \
             on a smaller graph",
            hyper.layers,
            hyper.model.name(),
            hyper.hidden,
        ),
    };
    let bytes = fateplan_planner::units::format_bytes;
    if peak > capacity {
        return Err(refused(format!(
            "{} on the device at its peak (every tensor kept), more than the {} it has",
            bytes(peak),
            bytes(capacity)
        )));
    }
    let inputs = workload.bytes_of_kind(TensorKind::Input);
    let adjacency = 8 * (graph.nodes + 1) + 4 * graph.edges() + 11 * graph.nodes;
    let prepared = inputs.saturating_add(adjacency);
    let host = match profile.device.kind {
        DeviceKind::Cpu => prepared.max(inputs.saturating_mul(2)).max(peak),
        _ => prepared,
    };
    let Some(free) = host_free else {
        return Ok(host);
    };
    if host > free.bytes {
        return Err(refused(format!(
            "about {} of host memory beside the graph (its prepared inputs {}, the adjacency \
             built from its edges {}{}), more than the {} free once the graph was loaded \
             ({})",
            bytes(host),
            bytes(inputs),
            bytes(adjacency),
            match profile.device.kind {
                DeviceKind::Cpu => format!(
                    ", the inputs twice {} while the executor copies them, or every tensor \
                     kept {}",
                    bytes(inputs.saturating_mul(2)),
                    bytes(peak)
                ),
                _ => String::new(),
            },
            bytes(free.bytes),
            free.source
        )));
    }
    Ok(host)
}

/// One measured GCN: its layers and their timings.
struct GcnRun {
    shapes: Shapes,
    nodes: u64,
    edges: u64,
    timed: Timed,
}

/// The graphs the GCNs are timed on: the one given, or else `bench`'s
/// R-MAT graph of each width timed (as many features as the width, and
/// `bench`'s classes), each generated once.
struct GcnGraphs<'g> {
    given: Option<&'g GivenGraph<'g>>,
    generated: HashMap<u32, Dataset>,
}

impl<'g> GcnGraphs<'g> {
    /// The graphs for GCNs of `widths`.
    fn new(bench: Bench, given: Option<&'g GivenGraph<'g>>, widths: &[u32]) -> Result<Self> {
        let mut generated = HashMap::new();
        if given.is_none() {
            for &width in widths {
                if let std::collections::hash_map::Entry::Vacant(slot) = generated.entry(width) {
                    slot.insert(
                        RmatSpec {
                            features: width,
                            classes: bench.classes(),
                            ..RmatSpec::new(bench.scale)
                        }
                        .generate()?,
                    );
                }
            }
        }
        Ok(GcnGraphs { given, generated })
    }

    /// The graph of a GCN of `width`, and the host memory free once it
    /// was loaded where it was given.
    fn of(&self, width: u32) -> Result<(&Dataset, Option<&crate::memory::Available>)> {
        match self.given {
            Some(given) => Ok((given.dataset, Some(&given.host_free))),
            None => self
                .generated
                .get(&width)
                .map(|g| (g, None))
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "the compute measurement generated no graph of width {width}"
                    ))
                }),
        }
    }

    /// The host memory free for the runs: the given graph's `host_free`,
    /// else what is available now, the graphs generated.
    fn free(&self) -> Option<crate::memory::Available> {
        match self.given {
            Some(given) => Some(given.host_free.clone()),
            None => crate::memory::available(),
        }
    }
}

/// A 3-layer GCN for [`time_gcns`] to time: its graph, its layers and
/// the host memory it takes beside the graph ([`fits_the_device`]),
/// counted before any is prepared.
struct GcnJob<'g> {
    width: u32,
    partitions: u32,
    dataset: &'g Dataset,
    shapes: Shapes,
    host_bytes: u64,
}

impl<'g> GcnJob<'g> {
    /// A GCN of `width` hidden width in `partitions` partitions on its
    /// graph of `graphs`; refused where it does not fit
    /// ([`fits_the_device`]).
    fn new(
        graphs: &'g GcnGraphs<'g>,
        width: u32,
        partitions: u32,
        profile: &Profile,
    ) -> Result<GcnJob<'g>> {
        let hyper = gcn(3, width);
        let (dataset, host_free) = graphs.of(width)?;
        Ok(GcnJob {
            width,
            partitions,
            dataset,
            shapes: Shapes::gcn(hyper.layers, dataset.features, width, dataset.classes),
            host_bytes: fits_the_device(dataset, &hyper, partitions, profile, host_free)?,
        })
    }

    /// The run, prepared when it is timed: its graph stays, for the
    /// next run (only its features, labels and masks are copied).
    fn training(&self) -> Training<'g> {
        let hyper = gcn(3, self.width);
        let (dataset, partitions) = (self.dataset, self.partitions);
        let shapes = self.shapes.clone();
        Training {
            prepare: Box::new(move || train::prepare_borrowed(dataset, &hyper, partitions)),
            hyper,
            classify: Box::new(move |op| group_of(op, &shapes)),
        }
    }
}

/// Trains the 3-layer GCNs `jobs` ([`time_trainings`]): in turn where
/// what each takes beside its graph, all together, is at most half of
/// `free` on the CPU backend ([`InTurn::choose`]), and otherwise one
/// after another, each prepared as it is timed; also how they were
/// timed. (An `InvalidInput` a run's preparation could give, its
/// workload refused, its check gave first: `fits_the_device` builds the
/// same workload.)
fn time_gcns(
    jobs: Vec<GcnJob<'_>>,
    free: Option<&crate::memory::Available>,
    profile: &Profile,
    rounds: &Rounds,
    backend: &BackendChoice,
) -> Result<(Vec<GcnRun>, InTurn)> {
    let needed = jobs
        .iter()
        .fold(0u64, |sum, job| sum.saturating_add(job.host_bytes));
    let how = InTurn::choose(backend, jobs.len(), Some(needed), free);
    let trainings = jobs.iter().map(GcnJob::training).collect();
    let timed = time_trainings(trainings, how, profile, rounds, backend)?;
    let runs = jobs
        .into_iter()
        .zip(timed)
        .map(|(job, timed)| GcnRun {
            shapes: job.shapes,
            nodes: job.dataset.nodes,
            edges: job.dataset.edges(),
            timed,
        })
        .collect();
    Ok((runs, how))
}

/// What the runs `runs` (each a model and its partitions) on `graph`
/// take of the host beside it, all together ([`fits_the_device`]),
/// counted on the CPU backend only (the only one that times runs in
/// turn); `None` where one cannot be counted (its check refuses it: it
/// is then timed alone, and fails there if it must).
fn needed_together(
    graph: &Dataset,
    runs: impl Iterator<Item = (Hyper, u32)>,
    profile: &Profile,
    backend: &BackendChoice,
) -> Option<u64> {
    if !matches!(backend, BackendChoice::Cpu) {
        return None;
    }
    let mut needed = 0u64;
    for (hyper, partitions) in runs {
        let bytes = fits_the_device(graph, &hyper, partitions, profile, None).ok()?;
        needed = needed.saturating_add(bytes);
    }
    Some(needed)
}

impl GcnRun {
    /// The GEMM rate of each of its layer shapes.
    fn dense(&self) -> Result<Vec<DenseRate>> {
        let mut shapes = self.shapes.0.clone();
        shapes.dedup();
        shapes
            .into_iter()
            .map(|(d_in, d_out)| {
                let group = Group::Dense(d_in, d_out);
                let sums = self.timed.iterations[0]
                    .get(&group)
                    .copied()
                    .unwrap_or_default();
                Ok(DenseRate {
                    d_in,
                    d_out,
                    flops_per_s: self.rate(group, |s| s.flops)?,
                    flops_per_byte: sums.flops / sums.bytes,
                })
            })
            .collect()
    }

    fn rate(&self, group: Group, per: fn(&Sums) -> f64) -> Result<f64> {
        self.timed.rate(&format!("{group:?}"), |g| *g == group, per)
    }

    /// The medians of `group(l)` for each layer `l` that has it.
    fn layer_points(&self, group: fn(u32) -> Group) -> Result<Vec<Sums>> {
        self.timed.layer_points(self.shapes.layers(), group)
    }
}

/// Trains 3-layer GCNs in `bench`'s partitions, on `graph` where
/// given (with its own features) and else on `bench`'s R-MAT graph (as
/// many features as the hidden width), one of `bench.width` hidden width
/// and one of half of it (and, where `bench` has several partitions and
/// every one of them can run, the runs of [`row_runs`], for the
/// aggregations' time per row),
/// each with a retain-all plan (made with `profile`, whose figures a
/// retain-all plan does not depend on), and times every operator of one
/// warm-up iteration and then of `rounds` iterations (at least `min`,
/// until `budget_s` a GCN has passed, at most `max`), in turn where they
/// fit (`time_gcns`). The single rates are the
/// first GCN's; the GEMM shapes take the first two (the two widths
/// move different bytes over the same edges), the aggregations' fits
/// every GCN timed.
pub fn training_rates(
    bench: Bench,
    graph: Option<GivenGraph<'_>>,
    profile: &Profile,
    rounds: &Rounds,
    backend: &BackendChoice,
) -> Result<TrainingRates> {
    let graph = graph.as_ref();
    let parts = bench.partitions;
    let widths: Vec<u32> = [bench.width, bench.half_width()]
        .into_iter()
        .chain(row_runs(bench).map(|(width, _)| width))
        .collect();
    let graphs = GcnGraphs::new(bench, graph, &widths)?;
    let job = |width, partitions| GcnJob::new(&graphs, width, partitions, profile);
    let mut jobs = vec![job(bench.width, parts)?, job(bench.half_width(), parts)?];
    // The aggregations' times per row ([`row_runs`]): all of them, or
    // none where the profile has one partition or one of them does not
    // fit ([`row_runs_fit`], or its check refuses the graph).
    let mut rows = Vec::new();
    if parts > 1 && row_runs_fit(bench, graph, profile)? {
        for (width, partitions) in row_runs(bench) {
            match job(width, partitions) {
                Ok(job) => rows.push(job),
                Err(Error::InvalidInput { .. }) => {
                    rows.clear();
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    let row_count = rows.len();
    jobs.extend(rows);
    let free = graphs.free();
    let (mut runs, in_turn) = time_gcns(jobs, free.as_ref(), profile, rounds, backend)?;
    let extra_runs = runs.split_off(2);
    let (Some(half), Some(wide)) = (runs.pop(), runs.pop()) else {
        return Err(Error::Internal(
            "the compute measurement timed fewer GCNs than it ran".into(),
        ));
    };
    let extra: Vec<(RowRun, GcnRun)> = row_runs(bench)
        .into_iter()
        .take(row_count)
        .zip(extra_runs)
        .map(|((width, partitions), run)| (row_run(width, partitions, &run), run))
        .collect();
    let runs: Vec<&GcnRun> = extra.iter().map(|(_, run)| run).collect();
    let mut rates = rates_of(&wide, &half, &runs)?;
    rates.row_runs = extra.iter().map(|(row, _)| *row).collect();
    rates.in_turn = in_turn;
    // The forward gathers were summed at the curve's largest working
    // set (`time_in_turn`), so their fits are of it.
    if !profile.device.gather_curve.is_empty() {
        for fit in &mut rates.class_rates {
            fit.on_curve |= matches!(fit.class, ComputeClass::Sparse | ComputeClass::SparseMasked);
        }
    }
    if let BackendChoice::Cuda(options) = backend {
        let rebuilding = BackendChoice::Cuda(CudaOptions {
            rebuild_transposes: true,
            ..options.clone()
        });
        let again = GcnJob::new(&graphs, bench.half_width(), parts, profile)?;
        let (rebuilt, _) = time_gcns(vec![again], None, profile, rounds, &rebuilding)?;
        let rebuilt = rebuilt
            .into_iter()
            .next()
            .ok_or_else(|| Error::Internal("the transpose measurement timed no GCN".into()))?;
        rates.transpose_seconds_per_edge = Some(transpose_cost(&half, &rebuilt)?);
    }
    Ok(rates)
}

/// Whether every GCN of [`row_runs`] can run, checked before any is
/// timed: a vertex for each partition, and on a graph given, the device
/// and the host as [`GcnJob::new`] checks them ([`fits_the_device`]: a
/// block's row pointers grow with the partitions).
fn row_runs_fit(bench: Bench, graph: Option<&GivenGraph<'_>>, profile: &Profile) -> Result<bool> {
    let nodes = graph.map_or(1u64 << bench.scale, |g| g.dataset.nodes);
    for (width, partitions) in row_runs(bench) {
        if nodes < u64::from(partitions) {
            return Ok(false);
        }
        let Some(given) = graph else {
            continue;
        };
        let hyper = gcn(3, width);
        match fits_the_device(
            given.dataset,
            &hyper,
            partitions,
            profile,
            Some(&given.host_free),
        ) {
            Ok(_) => {}
            Err(Error::InvalidInput { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn row_run(width: u32, partitions: u32, run: &GcnRun) -> RowRun {
    RowRun {
        width,
        partitions,
        iterations: run.timed.iterations.len() as u32,
    }
}

/// Seconds per edge of the transposes `rebuilt` built beyond those of
/// `kept` (the same GCN): the backward aggregations' added median
/// seconds over the edges added; zero where it is not slower.
fn transpose_cost(kept: &GcnRun, rebuilt: &GcnRun) -> Result<f64> {
    let total = |points: Vec<Sums>| {
        points.iter().fold((0.0, 0.0, 0.0), |(s, e, t), p| {
            (s + p.seconds, e + p.edges, t + p.transposed)
        })
    };
    let (kept_s, edges, kept_built) = total(kept.layer_points(Group::Scatter)?);
    let (rebuilt_s, _, _) = total(rebuilt.layer_points(Group::Scatter)?);
    let added = edges - kept_built;
    if added <= 0.0 {
        return Err(Error::Internal(
            "the transpose measurement: the GCN's plan builds every transpose already".into(),
        ));
    }
    Ok(((rebuilt_s - kept_s) / added).max(0.0))
}

/// The points of an aggregation class's fit: the medians of `group(l)`
/// for each layer `l` of `wide` that has it, then of `half`, then of
/// each of `extra`.
fn aggregation_points(
    wide: &GcnRun,
    half: &GcnRun,
    extra: &[&GcnRun],
    group: fn(u32) -> Group,
) -> Result<Vec<Sums>> {
    let mut points = wide.layer_points(group)?;
    points.extend(half.layer_points(group)?);
    for run in extra {
        points.extend(run.layer_points(group)?);
    }
    Ok(points)
}

/// [`training_rates`] from its GCNs: `wide` and `half` in the profile's
/// partitions, and the runs that tell the aggregations' rows apart
/// (`extra`: [`row_runs`]), where they ran; the caller records which
/// those were.
fn rates_of(wide: &GcnRun, half: &GcnRun, extra: &[&GcnRun]) -> Result<TrainingRates> {
    let mut dense = wide.dense()?;
    dense.extend(half.dense()?);
    // Stable: of two shapes as intense, the wide GCN's stays.
    dense.sort_by(|a, b| a.flops_per_byte.total_cmp(&b.flops_per_byte));
    dense.dedup_by(|later, kept| later.flops_per_byte == kept.flops_per_byte);
    let fit = |class, group: fn(u32) -> Group| -> Result<ClassRate> {
        Ok(fit_class(
            class,
            &aggregation_points(wide, half, extra, group)?,
        ))
    };
    // The first layers' gathers, masked, fitted apart from the others
    // (where the runs have them: the profile's GCN drops its input).
    let masked = aggregation_points(wide, half, extra, Group::MaskedGather)?;
    let masked = (!masked.is_empty()).then(|| fit_class(ComputeClass::SparseMasked, &masked));
    Ok(TrainingRates {
        nodes: wide.nodes,
        edges: wide.edges,
        dense,
        elementwise_bytes_per_s: wide.rate(Group::Elementwise, |s| s.bytes)?,
        gather_bytes_per_s: wide.timed.rate(
            "Gather",
            |g| matches!(g, Group::Gather(_) | Group::MaskedGather(_)),
            |s| s.bytes,
        )?,
        scatter_bytes_per_s: wide.timed.rate(
            "Scatter",
            |g| matches!(g, Group::Scatter(_)),
            |s| s.bytes,
        )?,
        loss_flops_per_s: wide.rate(Group::Loss, |s| s.flops)?,
        class_rates: [
            Some(fit(ComputeClass::Sparse, Group::Gather)?),
            masked,
            Some(fit(ComputeClass::Scatter, Group::Scatter)?),
        ]
        .into_iter()
        .flatten()
        .collect(),
        iterations: wide.timed.iterations.len() as u32,
        row_runs: Vec::new(),
        half_iterations: half.timed.iterations.len() as u32,
        transpose_seconds_per_edge: None,
        in_turn: InTurn::One,
    })
}

/// What GAT's operators were measured on, and their rates.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionRate {
    /// Edge scores and attention-weighted aggregation, bytes over
    /// seconds.
    pub bytes_per_s: f64,
    /// The backward of both.
    pub backward_bytes_per_s: f64,
    /// The edge softmaxes.
    pub edge_softmax_bytes_per_s: f64,
    /// Every class of `GAT_CLASSES`, fitted (`fit_class`).
    pub class_rates: Vec<ClassRate>,
    pub scale: u32,
    pub nodes: u64,
    pub edges: u64,
    pub partitions: u32,
    pub hidden: u32,
    pub heads: u32,
    pub iterations: u32,
    /// Every GAT timed (`gat_runs`), the one above first: the class
    /// fits take the layers of all of them.
    pub runs: Vec<GatRun>,
    /// How they were timed (`time_trainings`).
    pub in_turn: InTurn,
}

/// One GAT [`attention_rate`] timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatRun {
    pub heads: u32,
    pub partitions: u32,
    pub iterations: u32,
}

/// The GATs [`attention_rate`] times, as (heads, partitions): `heads` in
/// `partitions`, then in one, then one head in each; the one-partition
/// runs left out where `partitions` is one.
fn gat_runs(heads: u32, partitions: u32) -> impl Iterator<Item = (u32, u32)> {
    let counts = if partitions > 1 {
        vec![partitions, 1]
    } else {
        vec![1]
    };
    [heads, 1]
        .into_iter()
        .flat_map(move |h| counts.clone().into_iter().map(move |p| (h, p)))
}

/// GAT's operators of their own classes (`GAT_CLASSES`: edge scores,
/// attention-weighted aggregation, edge softmaxes, the attention's
/// backward, node scores and their backward, ELU), timed as
/// [`training_rates`] times the GCN's, in a 2-layer GAT of 8 heads of
/// `width / 16` (at least one) on an R-MAT graph a quarter of `bench`'s
/// size in half its partitions (GAT's per-edge tensors are 8 times a
/// GCN's). Rates in bytes per second are the medians over iterations of
/// that run. The same GAT is then timed in one partition, and both again
/// with one head of the same width (`gat_runs`); each class is fitted a
/// rate over the two layers of every run (`fit_class`): one partition
/// walks each row once where several walk it once a block, which tells a
/// time per row apart, and one head scores each edge once where eight
/// score it eight times, which tells a time per head apart.
pub fn attention_rate(
    bench: Bench,
    profile: &Profile,
    rounds: &Rounds,
    backend: &BackendChoice,
) -> Result<AttentionRate> {
    let scale = bench.scale.saturating_sub(2).max(6);
    let partitions = (bench.partitions / 2).max(1);
    let heads = 8;
    let hidden = heads * (bench.width / 16).max(1);
    let graph = RmatSpec {
        features: bench.width,
        classes: bench.classes(),
        ..RmatSpec::new(scale)
    }
    .generate()?;
    let (nodes, edges) = (graph.nodes, graph.edges());
    let hyper = |heads: u32| Hyper {
        model: GnnModel::Gat,
        heads,
        ..gcn(2, hidden)
    };
    let classify = |op: &Op| {
        if !GAT_CLASSES.contains(&op.cost.class) {
            return Ok(None);
        }
        let layer = layer_of(&op.name).ok_or_else(|| {
            Error::Internal(format!(
                "the compute measurement cannot read the layer of operator {}",
                op.name
            ))
        })?;
        Ok(Some(Group::Gat(op.cost.class, layer)))
    };
    let runs: Vec<(u32, u32)> = gat_runs(heads, partitions).collect();
    let how = InTurn::choose(
        backend,
        runs.len(),
        needed_together(
            &graph,
            runs.iter().map(|&(h, p)| (hyper(h), p)),
            profile,
            backend,
        ),
        crate::memory::available().as_ref(),
    );
    let jobs = runs
        .iter()
        .map(|&(heads, parts)| {
            let graph = &graph;
            Training {
                prepare: Box::new(move || train::prepare(graph.clone(), &hyper(heads), parts)),
                hyper: hyper(heads),
                classify: Box::new(classify),
            }
        })
        .collect();
    let runs = time_trainings(jobs, how, profile, rounds, backend)?;
    let timed = &runs[0];
    let rate = |classes: &[ComputeClass]| {
        timed.rate(
            &format!("{classes:?}"),
            |g| matches!(g, Group::Gat(c, _) if classes.contains(c)),
            |s| s.bytes,
        )
    };
    let layers = hyper(heads).layers;
    let class_rates = GAT_CLASSES
        .iter()
        .map(|&class| {
            let mut points = Vec::new();
            for run in &runs {
                points.extend(run.layer_points(layers, |l| Group::Gat(class, l))?);
            }
            if points.is_empty() {
                return Err(Error::Internal(format!(
                    "the compute measurement timed no {class:?} operators"
                )));
            }
            Ok(fit_class(class, &points))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(AttentionRate {
        bytes_per_s: rate(&[ComputeClass::EdgeScores, ComputeClass::Attention])?,
        backward_bytes_per_s: rate(&[ComputeClass::AttentionBackward])?,
        edge_softmax_bytes_per_s: rate(&[ComputeClass::EdgeSoftmax])?,
        class_rates,
        scale,
        nodes,
        edges,
        partitions,
        hidden,
        heads,
        iterations: timed.iterations.len() as u32,
        runs: gat_runs(heads, partitions)
            .zip(&runs)
            .map(|((heads, partitions), run)| GatRun {
                heads,
                partitions,
                iterations: run.iterations.len() as u32,
            })
            .collect(),
        in_turn: how,
    })
}

/// Per iteration, the sums of every group's operators.
struct Timed {
    iterations: Vec<HashMap<Group, Sums>>,
}

/// A class's rate fitted to its operators' sums (one point a layer, of
/// each run) by least squares of the relative misses ([`least_squares`]):
/// seconds = bytes / `bytes_per_s` + edges ×
/// `seconds_per_edge` + edge heads × `seconds_per_edge_head` + rows ×
/// `seconds_per_row`, where with a time per row the bytes moved once a
/// row (`cost.row_bytes`) are left out of the bytes. Where the points
/// cannot tell the four apart (no heads or rows recorded, or one in
/// proportion to the others) or the fit gives a bandwidth that is not
/// positive or a negative time, the same without the heads; then without
/// the rows instead; then without either; then, where bytes and edges
/// cannot be told apart either (one point, no edges, or bytes and edges
/// in one proportion) or fit the same, the bytes over the seconds of all
/// points.
fn fit_class(class: ComputeClass, points: &[Sums]) -> ClassRate {
    let sum = |f: &dyn Fn(&Sums) -> f64| points.iter().map(f).sum::<f64>();
    let bytes_only = ClassRate {
        class,
        bytes_per_s: sum(&|p| p.bytes) / sum(&|p| p.seconds),
        seconds_per_edge: 0.0,
        seconds_per_edge_head: 0.0,
        seconds_per_row: 0.0,
        on_curve: false,
    };
    let valid = |x: &[f64]| {
        x[0] > 0.0 && (1.0 / x[0]).is_finite() && x.iter().all(|v| v.is_finite() && *v >= 0.0)
    };
    // With a time per row, the bytes moved once a row are left to it.
    let models: [&[Term]; 4] = [
        &[Term::EdgeBytes, Term::Edges, Term::EdgeHeads, Term::Rows],
        &[Term::EdgeBytes, Term::Edges, Term::Rows],
        &[Term::Bytes, Term::Edges, Term::EdgeHeads],
        &[Term::Bytes, Term::Edges],
    ];
    for terms in models {
        let Some(x) = least_squares(points, terms) else {
            continue;
        };
        if !valid(&x) {
            continue;
        }
        let of = |term: Term| terms.iter().position(|t| *t == term).map_or(0.0, |k| x[k]);
        return ClassRate {
            class,
            bytes_per_s: 1.0 / x[0],
            seconds_per_edge: of(Term::Edges),
            seconds_per_edge_head: of(Term::EdgeHeads),
            seconds_per_row: of(Term::Rows),
            on_curve: false,
        };
    }
    bytes_only
}

/// What a class's time is fitted on (see [`fit_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    Bytes,
    /// The bytes less those moved once a row (`cost.row_bytes`).
    EdgeBytes,
    Edges,
    EdgeHeads,
    Rows,
}

impl Term {
    fn of(self, p: &Sums) -> f64 {
        match self {
            Term::Bytes => p.bytes,
            Term::EdgeBytes => p.bytes - p.row_bytes,
            Term::Edges => p.edges,
            Term::EdgeHeads => p.edge_heads,
            Term::Rows => p.rows,
        }
    }
}

/// The coefficients `x` minimising the relative misses `Σ ((Σ_k x_k
/// terms[k](p) - p.seconds) / p.seconds)²` over `points`, so that a
/// small run's point counts as much as a large one's (fitted to their
/// seconds, the large runs' points ruled the fit and a small run's were
/// priced up to twice off: docs/profile.md, "The runs timed in turn"),
/// from the normal equations of the weighed terms scaled to unit length,
/// points that took no time left out; `None` where a term is zero on
/// every point left, or the terms are dependent to within rounding (the
/// scaled equations' determinant under 1e-9).
fn least_squares(points: &[Sums], terms: &[Term]) -> Option<Vec<f64>> {
    let n = terms.len();
    // A point that took no time has no relative miss: left out.
    let points: Vec<&Sums> = points
        .iter()
        .filter(|p| p.seconds.is_finite() && p.seconds > 0.0)
        .collect();
    // Each point's terms over its seconds, so that its time is 1.
    let weighed = |k: usize, p: &Sums| terms[k].of(p) / p.seconds;
    let norms: Vec<f64> = (0..n)
        .map(|k| {
            points
                .iter()
                .map(|p| weighed(k, p).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    if norms.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let scaled = |k: usize, p: &Sums| weighed(k, p) / norms[k];
    // [A'A | A'y], then Gaussian elimination with partial pivoting.
    let mut m: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut row: Vec<f64> = (0..n)
                .map(|j| points.iter().map(|p| scaled(i, p) * scaled(j, p)).sum())
                .collect();
            row.push(points.iter().map(|p| scaled(i, p)).sum());
            row
        })
        .collect();
    let mut det = 1.0;
    for c in 0..n {
        let pivot = (c..n).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))?;
        m.swap(c, pivot);
        det *= m[c][c];
        if det.is_nan() || det.abs() <= 1e-9 {
            return None;
        }
        let (top, below) = m.split_at_mut(c + 1);
        let pivot_row = &top[c];
        for row in below {
            let f = row[c] / pivot_row[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot_row[c..]) {
                *x -= f * p;
            }
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let known: f64 = (c + 1..n).map(|k| m[c][k] * x[k]).sum();
        x[c] = (m[c][n] - known) / m[c][c];
    }
    Some(x.iter().zip(&norms).map(|(v, norm)| v / norm).collect())
}

impl Timed {
    /// The group's bytes, edges and median seconds over iterations; `None`
    /// where no iteration timed it.
    fn medians(&self, group: Group) -> Result<Option<Sums>> {
        let found: Vec<&Sums> = self
            .iterations
            .iter()
            .filter_map(|s| s.get(&group))
            .collect();
        let Some(first) = found.first() else {
            return Ok(None);
        };
        if found.len() != self.iterations.len() {
            return Err(Error::Internal(format!(
                "the compute measurement timed {group:?} in {} of {} iterations",
                found.len(),
                self.iterations.len()
            )));
        }
        let mut seconds: Vec<f64> = found.iter().map(|s| s.seconds).collect();
        let seconds = median(&mut seconds);
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(Error::Internal(format!(
                "the compute measurement's timer did not advance over {group:?}"
            )));
        }
        Ok(Some(Sums { seconds, ..**first }))
    }

    /// The medians of `group(l)` for each layer `l` in `1..=layers` that
    /// has it (see [`Timed::medians`]).
    fn layer_points(&self, layers: u32, group: impl Fn(u32) -> Group) -> Result<Vec<Sums>> {
        Ok((1..=layers)
            .map(|l| self.medians(group(l)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect())
    }

    /// The median over iterations of `per(sums) / seconds` over every
    /// group `select` picks; an error naming `what` where an iteration
    /// timed none of them or the timer did not advance.
    fn rate(
        &self,
        what: &str,
        select: impl Fn(&Group) -> bool,
        per: fn(&Sums) -> f64,
    ) -> Result<f64> {
        let mut values: Vec<f64> = self
            .iterations
            .iter()
            .map(|sums| {
                let (amount, seconds) = sums
                    .iter()
                    .filter(|(g, _)| select(g))
                    .fold((0.0, 0.0), |(a, t), (_, s)| (a + per(s), t + s.seconds));
                amount / seconds
            })
            .collect();
        if values.is_empty() || values.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(Error::Internal(format!(
                "the compute measurement timed no {what} operators, or the timer did not advance"
            )));
        }
        Ok(median(&mut values))
    }
}

/// The group an operator counts towards, where it counts towards one.
type Classify<'c> = Box<dyn Fn(&Op) -> Result<Option<Group>> + 'c>;

/// A training run for [`time_trainings`] to time: how to prepare its
/// graph and model (called when it is timed), and the group each of its
/// operators counts towards.
struct Training<'c> {
    prepare: Box<dyn FnOnce() -> Result<train::Prepared> + 'c>,
    hyper: Hyper,
    classify: Classify<'c>,
}

/// How the runs of one fit were timed (`time_trainings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InTurn {
    /// In turn: an iteration of each, then the next.
    Yes,
    /// One run alone.
    One,
    /// One after another: on a GPU each run sizes its own arena.
    Gpu,
    /// One after another: together they need more than half the host
    /// memory free (or what they need could not be counted).
    NoRoom,
    /// One after another: how much host memory is free is not known.
    MemoryUnknown,
}

impl InTurn {
    /// How `count` runs are timed on `backend` where together they need
    /// `needed` bytes of host memory (`None`: not counted) and `free`
    /// are free: in turn on the CPU backend where they need at most half
    /// of it. Counted before any is prepared, each run's figure is what
    /// it takes beside its graph ([`fits_the_device`]) and the sum
    /// errs high: each one's adjacency, built while it is prepared, and
    /// each one's peak, reached inside its own iterations, are counted
    /// as if held together.
    fn choose(
        backend: &BackendChoice,
        count: usize,
        needed: Option<u64>,
        free: Option<&crate::memory::Available>,
    ) -> InTurn {
        match (backend, free, needed) {
            _ if count < 2 => InTurn::One,
            (BackendChoice::Cuda(_), _, _) => InTurn::Gpu,
            (_, None, _) => InTurn::MemoryUnknown,
            (_, Some(free), Some(needed)) if needed <= free.bytes / 2 => InTurn::Yes,
            _ => InTurn::NoRoom,
        }
    }
}

/// Trains each of `jobs` with a retain-all plan (made with `profile`,
/// whose figures a retain-all plan does not depend on), one iteration of
/// each left out and then `rounds` of each, and sums each iteration's
/// operators by the group its job's `classify` gives them; the timings
/// in the order of `jobs`. Where `how` is [`InTurn::Yes`] they are
/// prepared together and timed in turn ([`in_turns`]), so that a machine
/// whose speed drifts over the measurement slows them alike (timed one
/// after another, the same GCN's aggregations took 102 ms in one profile
/// and 278 in the next, where a GCN timed later took 112 and 211:
/// docs/profile.md, "The runs timed in turn"); otherwise each is
/// prepared, timed and dropped before the next.
fn time_trainings(
    jobs: Vec<Training<'_>>,
    how: InTurn,
    profile: &Profile,
    rounds: &Rounds,
    backend: &BackendChoice,
) -> Result<Vec<Timed>> {
    let count = jobs.len();
    let batch = match how {
        InTurn::Yes => count.max(1),
        _ => 1,
    };
    let curve = &profile.device.gather_curve[..];
    let failed =
        |what: &str, e: ExecError| Error::of_run(&format!("the compute measurement's {what}"), e);
    let mut jobs = jobs.into_iter();
    let mut timed = Vec::with_capacity(count);
    while timed.len() < count {
        let batch: Vec<Training<'_>> = jobs.by_ref().take(batch).collect();
        let mut prepared = Vec::with_capacity(batch.len());
        let mut classify = Vec::with_capacity(batch.len());
        for job in batch {
            prepared.push(((job.prepare)()?, job.hyper));
            classify.push(job.classify);
        }
        let plans = prepared
            .iter()
            .map(|(p, _)| Ok(Arc::new(retain_all(&p.workload, profile)?)))
            .collect::<Result<Vec<_>>>()?;
        let groups = plans
            .iter()
            .zip(&classify)
            .map(|(plan, classify)| {
                let mut groups: HashMap<&str, (Group, usize)> = HashMap::new();
                for (k, op) in plan.workload.definition.ops.iter().enumerate() {
                    if let Some(group) = classify(op)? {
                        groups.insert(op.name.as_str(), (group, k));
                    }
                }
                Ok(groups)
            })
            .collect::<Result<Vec<_>>>()?;
        let inputs: Vec<_> = prepared.into_iter().map(|(p, h)| (p.input, h)).collect();
        let iterations = match backend {
            // On a thread of the pool, as training runs.
            BackendChoice::Cpu => train::on_a_worker(&mut |_| {}, |_| {
                let gnns = inputs
                    .into_iter()
                    .map(|(input, hyper)| {
                        CpuGnn::new(input, hyper).map_err(|e| failed("backend", e))
                    })
                    .collect::<Result<Vec<_>>>()?;
                time_in_turn(&plans, gnns, &groups, rounds, curve)
            })?,
            BackendChoice::Cuda(options) => {
                // Each operator waits for its kernels, so that its span is
                // the GPU's time.
                let options = CudaOptions {
                    synchronize_operators: true,
                    ..options.clone()
                };
                let gnns = inputs
                    .into_iter()
                    .zip(&plans)
                    .map(|((input, hyper), plan)| {
                        CudaGnn::new(input, hyper, plan.budgets.hbm_bytes, &options)
                            .map_err(|e| failed("backend", e))
                    })
                    .collect::<Result<Vec<_>>>()?;
                time_in_turn(&plans, gnns, &groups, rounds, curve)?
            }
        };
        timed.extend(
            iterations
                .into_iter()
                .map(|iterations| Timed { iterations }),
        );
    }
    Ok(timed)
}

/// Runs `count` jobs in turn: each once, left out (a warm-up), then
/// passes of one run of each, each pass starting one job later than the
/// last, at least `rounds.min` passes, until `rounds.budget_s` a job
/// has passed since the warm-ups, at most `rounds.max`: each job's
/// values in order, as many for each. With one job, as [`run_rounds`]
/// runs its rounds.
///
/// [`run_rounds`]: super::run_rounds
fn in_turns<T>(
    count: usize,
    rounds: &Rounds,
    mut run: impl FnMut(usize) -> Result<T>,
) -> Result<Vec<Vec<T>>> {
    for k in 0..count {
        run(k)?;
    }
    let mut values: Vec<Vec<T>> = (0..count).map(|_| Vec::new()).collect();
    let (min, max) = (rounds.min.max(1), rounds.max.max(rounds.min).max(1));
    let started = Instant::now();
    for pass in 0..max as usize {
        for j in 0..count {
            let k = (pass + j) % count;
            values[k].push(run(k)?);
        }
        let enough = pass + 1 >= min as usize;
        if enough && started.elapsed().as_secs_f64() >= rounds.budget_s * count as f64 {
            break;
        }
    }
    Ok(values)
}

/// Times each of `plans` on its backend of `gnns`, in turn
/// ([`in_turns`]): each operator of the plan's `groups` (by name, with
/// its index) summed into its group.
fn time_in_turn<B: GnnBackend>(
    plans: &[Arc<Plan>],
    gnns: Vec<B>,
    groups: &[HashMap<&str, (Group, usize)>],
    rounds: &Rounds,
    curve: &[GatherPoint],
) -> Result<Vec<Vec<HashMap<Group, Sums>>>> {
    let mut executors = plans
        .iter()
        .zip(gnns)
        .map(|(plan, gnn)| {
            let options = ExecOptions {
                budgets: None,
                trace: true,
            };
            Executor::new(plan.clone(), gnn, None, options)
                .map_err(|e| Error::of_run("the compute measurement's executor", e))
        })
        .collect::<Result<Vec<_>>>()?;
    in_turns(executors.len(), rounds, |k| {
        let executor = &mut executors[k];
        let ops = &plans[k].workload.definition.ops;
        executor.backend_mut().set_mode(Mode::Train);
        executor
            .run_iteration()
            .map_err(|e| Error::of_run("the compute measurement's training", e))?;
        let mut sums: HashMap<Group, Sums> = HashMap::new();
        for span in executor.trace() {
            if span.stream != Stream::Compute {
                continue;
            }
            let Some(&(group, op)) = groups[k].get(span.name.as_str()) else {
                continue;
            };
            let seconds = span.span.end_s - span.span.start_s;
            sums.entry(group)
                .or_default()
                .add(&ops[op].cost, seconds, curve);
        }
        Ok(sums)
    })
}

/// What [`mask_rate`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskRate {
    /// Seconds per masked element (`cost.masked`): the masking
    /// operators' added median seconds over the elements they mask; zero
    /// where they were not slower.
    pub seconds_per_element: f64,
    /// Elements masked per iteration, and the masking operators' median
    /// seconds per iteration with dropout and without.
    pub masked: u64,
    pub with_s: f64,
    pub without_s: f64,
    pub scale: u32,
    pub nodes: u64,
    pub features: u32,
    pub hidden: u32,
    pub partitions: u32,
    pub iterations: u32,
    /// The GEMM rate of the masking operators (the first layer's
    /// projection and its backward, `features -> hidden`) in the run
    /// without dropout: a wide input projected to a narrow layer, as a
    /// citation graph's first layer is, which the GCN runs' shapes (of
    /// inputs as wide as their layers) do not hold. `None` where it timed
    /// no time.
    pub projection: Option<DenseRate>,
    /// How the two GCNs were timed (`time_trainings`).
    pub in_turn: InTurn,
}

/// Dropout's price per element masked by a projection (`cost.masked`):
/// a 2-layer GCN of `8 · width - 1`
/// input features and `width / 8` hidden (at least 2; the first layer
/// projects first, its input dropped in the projection and its
/// backward, as a citation graph's is) on an R-MAT graph a sixty-fourth
/// of `bench`'s size in half its partitions, trained with dropout 0.5
/// and without; the operators that mask in the first (`cost.masked`)
/// timed in both (`time_trainings`), their added median seconds over
/// the elements they mask.
pub fn mask_rate(
    bench: Bench,
    profile: &Profile,
    rounds: &Rounds,
    backend: &BackendChoice,
) -> Result<MaskRate> {
    let scale = bench.scale.saturating_sub(6).max(6);
    let partitions = (bench.partitions / 2).max(1);
    // One short of a multiple of 64, as most datasets' widths are: rows
    // of 1,024 floats lie 4 KiB apart, which slowed the run without
    // dropout and shrank the difference (docs/profile.md, "Dropout
    // priced").
    let features = 8 * bench.width - 1;
    let hidden = (bench.width / 8).max(2);
    let graph = RmatSpec {
        features,
        classes: bench.classes(),
        ..RmatSpec::new(scale)
    }
    .generate()?;
    let nodes = graph.nodes;
    let hyper = |dropout| Hyper {
        dropout,
        order: LayerOrder::Narrower,
        transposes: Transposes::Stored,
        ..gcn(2, hidden)
    };
    let needed = needed_together(
        &graph,
        [0.5, 0.0].map(|d| (hyper(d), partitions)).into_iter(),
        profile,
        backend,
    );
    let how = InTurn::choose(backend, 2, needed, crate::memory::available().as_ref());
    // Both prepared first, their workloads naming the masking operators
    // (the graph is a sixty-fourth of the profile's).
    let dropped = train::prepare(graph.clone(), &hyper(0.5), partitions)?;
    let kept = train::prepare(graph, &hyper(0.0), partitions)?;
    let ops = &dropped.workload.ops;
    let masking: std::collections::HashSet<String> = ops
        .iter()
        .filter(|op| op.cost.masked > 0)
        .map(|op| op.name.clone())
        .collect();
    // The same operators without dropout: their flops and bytes an
    // iteration, for the projection's GEMM rate.
    let (projection_flops, projection_bytes) = kept
        .workload
        .ops
        .iter()
        .filter(|op| masking.contains(&op.name) && op.cost.class == ComputeClass::Dense)
        .fold((0.0, 0u64), |(f, b), op| {
            (f + op.cost.flops, b + op.cost.bytes)
        });
    let masked: u64 = ops.iter().map(|op| op.cost.masked).sum();
    if masked == 0 {
        return Err(Error::Internal(
            "the dropout measurement's GCN masks no elements".into(),
        ));
    }
    let classify = |op: &Op| Ok(masking.contains(&op.name).then_some(Group::Masked));
    let job = |prepared: train::Prepared, dropout| Training {
        prepare: Box::new(move || Ok(prepared)),
        hyper: hyper(dropout),
        classify: Box::new(classify),
    };
    let timed = time_trainings(
        vec![job(dropped, 0.5), job(kept, 0.0)],
        how,
        profile,
        rounds,
        backend,
    )?;
    let masking_seconds = |timed: &Timed| {
        let mut seconds: Vec<f64> = timed
            .iterations
            .iter()
            .map(|sums| sums.get(&Group::Masked).map_or(0.0, |s| s.seconds))
            .collect();
        (median(&mut seconds), timed.iterations.len() as u32)
    };
    let [with, without] = &timed[..] else {
        return Err(Error::Internal(
            "the dropout measurement timed other than its two GCNs".into(),
        ));
    };
    let (with_s, iterations) = masking_seconds(with);
    let (without_s, _) = masking_seconds(without);
    let projection =
        (without_s > 0.0 && projection_flops > 0.0 && projection_bytes > 0).then(|| DenseRate {
            d_in: features,
            d_out: hidden,
            flops_per_s: projection_flops / without_s,
            flops_per_byte: projection_flops / projection_bytes as f64,
        });
    Ok(MaskRate {
        seconds_per_element: ((with_s - without_s) / masked as f64).max(0.0),
        masked,
        with_s,
        without_s,
        scale,
        nodes,
        features,
        hidden,
        partitions,
        iterations,
        projection,
        in_turn: how,
    })
}

/// The measured GCN: `layers` layers of `hidden`, dropout 0.5 (its masks
/// are in the rates of the operators that draw them; a projection's, which
/// this GCN has none of, are priced on their own: [`mask_rate`]), every
/// layer aggregating first, so that each layer's aggregation and linear
/// have the widths the rate fits assume (a narrower last layer would
/// otherwise project first), and its transposed aggregations scattering
/// over the blocks (on a GPU, building their transposes), so that the
/// scatter's rate and the builds' price are measured (GAT's backward
/// builds them).
fn gcn(layers: u32, hidden: u32) -> Hyper {
    Hyper {
        layers,
        hidden,
        order: LayerOrder::AggregateFirst,
        transposes: Transposes::Built,
        ..Hyper::new(GnnModel::Gcn)
    }
}

/// A retain-all plan without budgets; `profile` is only planned with (a
/// retain-all plan does not depend on its figures).
fn retain_all(workload: &Workload, profile: &Profile) -> Result<Plan> {
    let options = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    Ok(plan(workload, profile, &options)?)
}

/// What the per-operator overhead was measured on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overhead {
    pub op_overhead_s: f64,
    pub operators: usize,
    pub nodes: u64,
    pub iterations: u32,
}

/// The fixed cost of one operator: training iterations of a GCN so small
/// that its kernels do next to nothing (a planted graph of 256 nodes, 4
/// features, 4 hidden, 4 partitions), through the executor and `backend`
/// (as training runs it) with a retain-all plan; seconds per iteration (the first left
/// out) divided by its operators. `profile` is only planned with.
pub fn op_overhead(
    profile: &Profile,
    iterations: u32,
    backend: &BackendChoice,
) -> Result<Overhead> {
    let nodes = 256;
    let graph = PlantedSpec {
        classes: 2,
        features: 4,
        train_per_class: 20,
        val: 50,
        test: 100,
        ..PlantedSpec::new(nodes)
    }
    .generate()?;
    let hyper = gcn(2, 4);
    let prepared = train::prepare(graph, &hyper, 4)?;
    let plan = retain_all(&prepared.workload, profile)?;
    let operators = plan.workload.definition.ops.len();
    let iterations = iterations.max(2);
    let run = TrainRun {
        plan: std::sync::Arc::new(plan),
        epochs: iterations,
        budgets: None,
        ssd: None,
        trace: false,
        backend: backend.clone(),
        stop: None,
        evaluate_every: 0,
    };
    let (report, _) = train::train(prepared, hyper, run, &mut |_| {})
        .map_err(|e| Error::of_run("the per-operator measurement", e))?;
    Ok(Overhead {
        op_overhead_s: report.iteration_s / operators.max(1) as f64,
        operators,
        nodes,
        iterations: iterations - 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile::from_json(
            include_str!("../../../profiles/cpu-small.json"),
            "cpu-small.json",
        )
        .unwrap()
    }

    /// An R-MAT graph of 1,024 nodes, 16 features and 4 classes.
    fn small_graph() -> Dataset {
        RmatSpec {
            features: 16,
            classes: 4,
            ..RmatSpec::new(10)
        }
        .generate()
        .unwrap()
    }

    /// A graph whose GCN would not fit the device with every tensor kept
    /// is refused before its blocks are built, naming the graph and what
    /// it needs; one that fits passes.
    #[test]
    fn a_graph_too_large_for_the_device_is_refused_up_front() {
        let graph = small_graph();
        let mut small = profile();
        assert!(fits_the_device(&graph, &gcn(3, 16), 2, &small, None).is_ok());
        small.device.hbm_bytes = 64 << 10;
        let error = fits_the_device(&graph, &gcn(3, 16), 2, &small, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--graph: rmat-s10")
                && error.contains("(1024 nodes)")
                && error.contains("more than the 64.0 KiB it has"),
            "{error}"
        );
    }

    /// A given graph whose run would not fit the host memory free beside
    /// it is refused up front, naming what it needs; with room, it passes.
    /// On the CPU backend the device's tensors count as host memory.
    #[test]
    fn a_graph_too_large_for_the_host_is_refused_up_front() {
        let graph = small_graph();
        let cpu = profile();
        assert_eq!(cpu.device.kind, DeviceKind::Cpu);
        let free = |bytes| crate::memory::Available {
            bytes,
            source: "a test's limit".into(),
        };
        let fits = |profile: &Profile, bytes: u64| {
            fits_the_device(&graph, &gcn(3, 16), 2, profile, Some(&free(bytes)))
        };
        assert!(fits(&cpu, 1 << 40).is_ok());
        // The adjacency alone: 8 bytes a node and 4 an edge, with the
        // degree scales and masks beside it (11 a node).
        let adjacency = 8 * (graph.nodes + 1) + 4 * graph.edges() + 11 * graph.nodes;
        let error = fits(&cpu, adjacency).unwrap_err().to_string();
        assert!(
            error.starts_with("--graph: rmat-s10")
                && error.contains("(1024 nodes): ")
                && error.contains("of host memory beside the graph")
                && error.contains("or every tensor kept")
                && error.contains("free once the graph was loaded (a test's limit)"),
            "{error}"
        );
        // What a GPU's run holds on the host: inputs and adjacency only,
        // less than the device's tensors here.
        let mut gpu = cpu.clone();
        gpu.device.kind = DeviceKind::Gpu;
        let spec = train::spec(16, 4, &gcn(3, 16), &graph.name);
        let workload = fateplan_planner::gnn::build_gnn(&spec, &graph.blocks(2).unwrap()).unwrap();
        let inputs = workload.bytes_of_kind(TensorKind::Input);
        let peak = retain_all(&workload, &cpu)
            .unwrap()
            .predicted
            .peak_bytes
            .hbm;
        assert!(
            (inputs + adjacency).max(2 * inputs) < peak,
            "{inputs} + {adjacency} against {peak}"
        );
        assert!(fits(&gpu, inputs + adjacency).is_ok());
        let error = fits(&gpu, inputs + adjacency - 1).unwrap_err().to_string();
        assert!(!error.contains("every tensor kept"), "{error}");
        assert!(fits(&cpu, peak).is_ok());
        assert!(fits(&cpu, peak - 1).is_err());
    }

    #[test]
    fn rates_of_a_tiny_training_run() {
        let bench = Bench {
            scale: 10,
            partitions: 2,
            width: 16,
        };
        let rates = training_rates(
            bench,
            None,
            &profile(),
            &Rounds::tiny(),
            &BackendChoice::Cpu,
        )
        .unwrap();
        assert_eq!((rates.nodes, rates.iterations), (1024, 1));
        let runs: Vec<(u32, u32, u32)> = rates
            .row_runs
            .iter()
            .map(|r| (r.width, r.partitions, r.iterations))
            .collect();
        assert_eq!(runs, [(16, 1, 1), (2, 2, 1), (2, 1, 1), (16, 4, 1)]);
        for rate in [
            rates.elementwise_bytes_per_s,
            rates.gather_bytes_per_s,
            rates.scatter_bytes_per_s,
            rates.loss_flops_per_s,
        ] {
            assert!(rate > 0.0 && rate.is_finite(), "{rates:?}");
        }
        // Two shapes of each GCN, least intense first: 8 -> 2 does
        // 2·8·2 flops per 4·10 bytes forward and 4·8·2 per 8·10 backward;
        // 16 -> 2 does 2·16·2 per 4·18 (and 4·16·2 per 8·18); 8 -> 8 does
        // 2·8·8 per 4·16; 16 -> 16 does 2·16·16 per 4·32 (layer 1's
        // backward has no input gradient: as many per byte; layer 2's
        // 4·16·16 per 8·32).
        let shapes: Vec<(u32, u32)> = rates.dense.iter().map(|r| (r.d_in, r.d_out)).collect();
        assert_eq!(shapes, [(8, 2), (16, 2), (8, 8), (16, 16)]);
        let intensities: Vec<f64> = rates.dense.iter().map(|r| r.flops_per_byte).collect();
        for (got, want) in intensities.iter().zip([0.8, 64.0 / 72.0, 2.0, 4.0]) {
            assert!((got - want).abs() < 1e-9, "{rates:?}");
        }
        assert_eq!(rates.wide(), rates.dense[3]);
        assert!(rates
            .dense
            .iter()
            .all(|r| r.flops_per_s > 0.0 && r.flops_per_s.is_finite()));
        assert_eq!(rates.dense_shapes().len(), 4);
        // Both aggregations fitted over both GCNs' layers.
        let classes: Vec<ComputeClass> = rates.class_rates.iter().map(|r| r.class).collect();
        assert_eq!(
            classes,
            [
                ComputeClass::Sparse,
                ComputeClass::SparseMasked,
                ComputeClass::Scatter
            ]
        );
        for fit in &rates.class_rates {
            assert!(
                fit.bytes_per_s > 0.0 && fit.bytes_per_s.is_finite(),
                "{fit:?}"
            );
            assert!(
                fit.seconds_per_edge >= 0.0 && fit.seconds_per_edge.is_finite(),
                "{fit:?}"
            );
            assert!(!fit.on_curve, "{fit:?}");
        }
        // With a curve in the profile, the gathers' fits are made on it;
        // the scatter's is not.
        let mut profile = profile();
        profile.device.gather_curve = vec![GatherPoint {
            width: 8,
            set_bytes: 1 << 20,
            seconds_per_edge: 1e-9,
        }];
        let rates =
            training_rates(bench, None, &profile, &Rounds::tiny(), &BackendChoice::Cpu).unwrap();
        let on_curve: Vec<(ComputeClass, bool)> = rates
            .class_rates
            .iter()
            .map(|r| (r.class, r.on_curve))
            .collect();
        assert_eq!(
            on_curve,
            [
                (ComputeClass::Sparse, true),
                (ComputeClass::SparseMasked, true),
                (ComputeClass::Scatter, false)
            ]
        );
    }

    /// A forward gather, masked or not, is summed at its share of the
    /// curve, its rows' bytes whole; other operators, and gathers
    /// without a curve, as they are.
    #[test]
    fn gathers_are_summed_at_their_share_of_the_curve() {
        let point = |set_bytes, ns: f64| GatherPoint {
            width: 16,
            set_bytes,
            seconds_per_edge: ns * 1e-9,
        };
        // A quarter of the time per edge at 1 MiB that 16 MiB takes.
        let curve = [point(1 << 20, 1.0), point(16 << 20, 4.0)];
        let gather = Cost::work(10.0, 1000, ComputeClass::Sparse)
            .over_edges(40)
            .over_rows(8)
            .with_row_bytes(200)
            .gathering(16, 1 << 20);
        let mut sum = Sums::default();
        sum.add(&gather, 2.0, &curve);
        assert_eq!(
            (sum.flops, sum.bytes, sum.edges, sum.rows, sum.row_bytes),
            (10.0, 0.25 * 800.0 + 200.0, 10.0, 8.0, 200.0)
        );
        assert_eq!(sum.seconds, 2.0);
        let masked = Cost {
            class: ComputeClass::SparseMasked,
            ..gather
        };
        let mut masked_sum = Sums::default();
        masked_sum.add(&masked, 2.0, &curve);
        assert_eq!((masked_sum.bytes, masked_sum.edges), (sum.bytes, sum.edges));
        // Another class, no curve, or no working set: whole.
        for (cost, curve) in [
            (masked, &[][..]),
            (gather, &[][..]),
            (
                Cost {
                    class: ComputeClass::Scatter,
                    ..gather
                },
                &curve[..],
            ),
            (gather.gathering(0, 0), &curve[..]),
        ] {
            let mut sum = Sums::default();
            sum.add(&cost, 1.0, curve);
            assert_eq!((sum.bytes, sum.edges), (1000.0, 40.0), "{cost:?}");
        }
    }

    /// GCNs timed in turn each keep their own operators' sums, in the
    /// order given, the same as each timed alone (the seconds apart),
    /// each as many iterations as the rounds ask; where they do not fit
    /// in half the memory free, they are timed one after another, the
    /// same sums again.
    #[test]
    fn runs_timed_in_turn_keep_their_own_sums() {
        let bench = Bench {
            scale: 9,
            partitions: 2,
            width: 16,
        };
        let profile = profile();
        let dataset = small_graph();
        let given = |bytes| GivenGraph {
            dataset: &dataset,
            host_free: crate::memory::Available {
                bytes,
                source: "a test".into(),
            },
        };
        let rounds = Rounds {
            min: 3,
            max: 3,
            budget_s: 0.0,
        };
        let runs = [(16, 2), (4, 1), (8, 2)];
        let timed = |graph: &GivenGraph<'_>, runs: &[(u32, u32)]| {
            let graphs = GcnGraphs::new(bench, Some(graph), &[]).unwrap();
            let jobs = runs
                .iter()
                .map(|&(w, p)| GcnJob::new(&graphs, w, p, &profile).unwrap())
                .collect::<Vec<_>>();
            let needed: u64 = jobs.iter().map(|job| job.host_bytes).sum();
            let largest = jobs.iter().map(|job| job.host_bytes).max().unwrap();
            let free = graphs.free();
            let (runs, how) =
                time_gcns(jobs, free.as_ref(), &profile, &rounds, &BackendChoice::Cpu).unwrap();
            (runs, how, needed, largest)
        };
        let (together, how, needed, largest) = timed(&given(u64::MAX), &runs);
        assert_eq!(how, InTurn::Yes);
        // Every iteration's sums but their seconds.
        let sums = |run: &GcnRun| {
            let of = |iteration: &HashMap<Group, Sums>| {
                let mut sums: Vec<(String, u64, u64, u64)> = iteration
                    .iter()
                    .map(|(g, s)| {
                        (
                            format!("{g:?}"),
                            s.bytes as u64,
                            s.edges as u64,
                            s.rows as u64,
                        )
                    })
                    .collect();
                sums.sort();
                sums
            };
            run.timed.iterations.iter().map(of).collect::<Vec<_>>()
        };
        for (k, &run) in runs.iter().enumerate() {
            let (mut alone, how, _, _) = timed(&given(u64::MAX), &[run]);
            assert_eq!(how, InTurn::One);
            let alone = alone.remove(0);
            assert_eq!(together[k].timed.iterations.len(), 3, "run {k}");
            assert_eq!(together[k].shapes, alone.shapes, "run {k}");
            assert_eq!(sums(&together[k]), sums(&alone), "run {k}");
        }
        // Different GCNs: the sums tell them apart.
        assert_ne!(sums(&together[0]), sums(&together[1]));
        assert_ne!(sums(&together[0]), sums(&together[2]));
        // Room for each alone, not for all of them twice over: one after
        // another, the same sums.
        assert!(largest < needed);
        let (after, how, _, _) = timed(&given(2 * needed - 1), &runs);
        assert_eq!(how, InTurn::NoRoom);
        for (a, b) in after.iter().zip(&together) {
            assert_eq!(sums(a), sums(b));
        }
    }

    /// Jobs in turn: each once first (left out), then a pass of each,
    /// each pass starting one later, as many values for each, the
    /// passes at least `min`, then until the budget a job has passed, at
    /// most `max`.
    #[test]
    fn jobs_in_turn_rotate_and_share_the_budget() {
        let rounds = |min, max, budget_s| Rounds { min, max, budget_s };
        let mut order = Vec::new();
        let values = in_turns(3, &rounds(3, 3, 0.0), |k| {
            order.push(k);
            Ok(order.len())
        })
        .unwrap();
        assert_eq!(order, [0, 1, 2, 0, 1, 2, 1, 2, 0, 2, 0, 1]);
        assert_eq!(values, [vec![4, 9, 11], vec![5, 7, 12], vec![6, 8, 10]]);
        // Each run takes 2 ms or more; a budget of 10 ms a job is 20 ms
        // for two: the passes go on until 20 ms have passed, and a pass
        // takes 4 ms or more, so there are at most five; each job as
        // many values.
        let started = Instant::now();
        let values = in_turns(2, &rounds(1, 1000, 0.01), |_| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(())
        })
        .unwrap();
        assert!(started.elapsed().as_secs_f64() >= 0.02);
        assert_eq!(values[0].len(), values[1].len());
        assert!((1..=5).contains(&values[0].len()), "{}", values[0].len());
        // The minimum is kept past the budget, and the maximum ends it.
        assert_eq!(
            in_turns(2, &rounds(4, 9, 0.0), |_| Ok(())).unwrap()[1].len(),
            4
        );
        let long = in_turns(2, &rounds(1, 3, 1e9), |_| Ok(())).unwrap();
        assert_eq!(long[0].len(), 3);
        // An error ends it.
        let failed = in_turns(2, &rounds(3, 3, 0.0), |k| match k {
            1 => Err(Error::Internal("the second job failed".into())),
            _ => Ok(()),
        });
        assert!(failed.is_err());
    }

    /// In turn only on the CPU, for several runs, where what they need
    /// is known and at most half of what is free.
    #[test]
    fn runs_are_timed_in_turn_within_half_the_memory_free() {
        let free = |bytes| crate::memory::Available {
            bytes,
            source: "a test".into(),
        };
        let cpu = BackendChoice::Cpu;
        let choose = InTurn::choose;
        assert_eq!(choose(&cpu, 3, Some(50), Some(&free(100))), InTurn::Yes);
        assert_eq!(choose(&cpu, 3, Some(51), Some(&free(100))), InTurn::NoRoom);
        assert_eq!(choose(&cpu, 3, None, Some(&free(100))), InTurn::NoRoom);
        assert_eq!(choose(&cpu, 3, Some(50), None), InTurn::MemoryUnknown);
        assert_eq!(choose(&cpu, 1, Some(50), Some(&free(100))), InTurn::One);
        let gpu = BackendChoice::Cuda(CudaOptions::default());
        assert_eq!(choose(&gpu, 3, Some(50), Some(&free(100))), InTurn::Gpu);
    }

    /// The aggregations' fits take every layer of the GCNs: the first
    /// layer's masked gathers, the two plain forward ones and two backward
    /// of a GCN, the half-width GCN's with fewer bytes over the same
    /// edges, then those of the runs that tell rows apart ([`row_runs`]):
    /// the wide GCN's in one partition, whose rows are walked once a
    /// layer where the others walk them once a block, a narrow GCN's in
    /// two partitions and in one, and the wide GCN's in four.
    #[test]
    fn aggregations_are_fitted_over_the_gcns() {
        let bench = Bench {
            scale: 10,
            partitions: 2,
            width: 16,
        };
        let profile = profile();
        let runs: Vec<(u32, u32)> = [(16, 2), (8, 2)]
            .into_iter()
            .chain(row_runs(bench))
            .collect();
        let widths: Vec<u32> = runs.iter().map(|&(w, _)| w).collect();
        let graphs = GcnGraphs::new(bench, None, &widths).unwrap();
        let jobs = runs
            .iter()
            .map(|&(w, p)| GcnJob::new(&graphs, w, p, &profile).unwrap())
            .collect();
        let (timed, _) =
            time_gcns(jobs, None, &profile, &Rounds::tiny(), &BackendChoice::Cpu).unwrap();
        let (wide, half) = (&timed[0], &timed[1]);
        let extra: Vec<&GcnRun> = timed[2..].iter().collect();
        let rates = rates_of(wide, half, &extra).unwrap();
        for (k, class, group, layers) in [
            (
                0,
                ComputeClass::Sparse,
                Group::Gather as fn(u32) -> Group,
                2,
            ),
            (
                1,
                ComputeClass::SparseMasked,
                Group::MaskedGather as fn(u32) -> Group,
                1,
            ),
            (
                2,
                ComputeClass::Scatter,
                Group::Scatter as fn(u32) -> Group,
                2,
            ),
        ] {
            let points = aggregation_points(wide, half, &extra, group).unwrap();
            assert_eq!(points.len(), 6 * layers, "{class:?}");
            let per_edge: Vec<f64> = points.iter().map(|p| p.bytes / p.edges).collect();
            let (w, rest) = per_edge.split_at(layers);
            let h = &rest[..layers];
            // Every layer of one GCN moves as many bytes over as many
            // edges; the half-width GCN fewer over the same edges.
            assert!(w.iter().all(|b| *b == w[0]) && h.iter().all(|b| *b == h[0]));
            assert!(h[0] < w[0], "{per_edge:?}");
            assert_eq!(points[0].edges, points[layers].edges);
            // One partition walks half the rows of two; each row's bytes
            // are its running sum's, read and written.
            let rows: Vec<f64> = points.iter().step_by(layers).map(|p| p.rows).collect();
            assert_eq!(
                rows,
                [2048.0, 2048.0, 1024.0, 2048.0, 1024.0, 4096.0],
                "{class:?}"
            );
            assert!(points
                .iter()
                .all(|p| p.row_bytes > 0.0 && p.row_bytes < p.bytes));
            assert_eq!(rates.class_rates[k], fit_class(class, &points));
        }
        assert_eq!((rates.iterations, rates.half_iterations), (1, 1));
        // Without the runs that tell rows apart none is fitted.
        let rates = rates_of(wide, half, &[]).unwrap();
        assert!(rates.class_rates.iter().all(|r| r.seconds_per_row == 0.0));
    }

    /// On a graph given whose vertices are fewer than the row runs'
    /// largest partition count (8 vertices, 5 partitions: 10 in the
    /// wide GCN's row run), the row runs are left out together and the
    /// profile's own runs still timed; with the partitions they need,
    /// they run.
    #[test]
    fn row_runs_are_left_out_together_where_one_cannot_run() {
        let graph = RmatSpec {
            features: 16,
            classes: 2,
            ..RmatSpec::new(3)
        }
        .generate()
        .unwrap();
        let given = |partitions| {
            let bench = Bench {
                scale: 3,
                partitions,
                width: 16,
            };
            let given = GivenGraph {
                dataset: &graph,
                host_free: crate::memory::Available {
                    bytes: 1 << 40,
                    source: "a test's limit".into(),
                },
            };
            training_rates(
                bench,
                Some(given),
                &profile(),
                &Rounds::tiny(),
                &BackendChoice::Cpu,
            )
            .unwrap()
        };
        let rates = given(5);
        assert!(rates.row_runs.is_empty(), "{:?}", rates.row_runs);
        assert!(rates.class_rates.iter().all(|r| r.seconds_per_row == 0.0));
        assert_eq!(given(4).row_runs.len(), 4);
    }

    /// With a time per row, the bytes moved once a row are left to it:
    /// points made by bytes of edges, a time per edge and a time per row
    /// (their rows' bytes free) recover all three.
    #[test]
    fn a_time_per_row_takes_the_place_of_the_rows_bytes() {
        let truth =
            |edge_bytes: f64, edges: f64, rows: f64| edge_bytes / 3e10 + edges * 4e-9 + rows * 1e-8;
        let mut points = Vec::new();
        for (width, rows) in [(128.0, 8.0), (64.0, 8.0), (128.0, 1.0), (16.0, 8.0)] {
            let (edges, rows) = (4e6, rows * 262144.0);
            let edge_bytes = edges * (4.0 + 4.0 * width);
            let row_bytes = 2.0 * rows * 4.0 * width;
            points.push(Sums {
                bytes: edge_bytes + row_bytes,
                row_bytes,
                edges,
                rows,
                seconds: truth(edge_bytes, edges, rows),
                ..Sums::default()
            });
        }
        let fit = fit_class(ComputeClass::Sparse, &points);
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-6;
        assert!(close(fit.bytes_per_s, 3e10), "{fit:?}");
        assert!(close(fit.seconds_per_edge, 4e-9), "{fit:?}");
        assert!(close(fit.seconds_per_row, 1e-8), "{fit:?}");
        assert_eq!(fit.seconds_per_edge_head, 0.0);
    }

    #[test]
    fn gcn_layer_shapes() {
        let shapes = Shapes::gcn(3, 64, 32, 4);
        assert_eq!(shapes.0, [(64, 32), (32, 32), (32, 4)]);
        assert_eq!(
            (shapes.of(1), shapes.of(3)),
            (Some((64, 32)), Some((32, 4)))
        );
        assert_eq!((shapes.of(0), shapes.of(4)), (None, None));
        assert_eq!(Shapes::gcn(1, 8, 16, 2).0, [(8, 2)]);
    }

    /// Every operator of the measured GCN is placed: in P partitions,
    /// layers 1 and 2's linear layers and backward (4P) are the wide
    /// shape, layer 3's (2P) the narrow one; ReLU, its mask and its
    /// backward for two layers (6P); P² aggregations in each layer (layer 1's masking
    /// its input) and P² backward in layers 2 and 3; the loss and its
    /// backward (2P).
    #[test]
    fn every_operator_of_the_measured_gcn_is_placed() {
        let graph = RmatSpec {
            features: 16,
            classes: 2,
            ..RmatSpec::new(10)
        }
        .generate()
        .unwrap();
        let p = 2;
        let prepared = train::prepare(graph, &gcn(3, 16), p as u32).unwrap();
        let shapes = Shapes::gcn(3, 16, 16, 2);
        let mut counts: HashMap<Group, usize> = HashMap::new();
        for op in &prepared.workload.ops {
            if let Some(group) = group_of(op, &shapes).unwrap() {
                *counts.entry(group).or_default() += 1;
            }
        }
        let expected = [
            (Group::Dense(16, 16), 4 * p),
            (Group::Dense(16, 2), 2 * p),
            // Per hidden layer and partition: relu, relu_mask, relu_bwd.
            (Group::Elementwise, 6 * p),
            (Group::MaskedGather(1), p * p),
            (Group::Gather(2), p * p),
            (Group::Gather(3), p * p),
            (Group::Scatter(2), p * p),
            (Group::Scatter(3), p * p),
            (Group::Loss, 2 * p),
        ];
        assert_eq!(counts, expected.into_iter().collect());
        // A linear operator or aggregation whose name does not say its
        // layer, or names one the GCN lacks, is refused.
        for kind in [OpKind::Linear, OpKind::Aggregate, OpKind::AggregateBackward] {
            let mut op = prepared
                .workload
                .ops
                .iter()
                .find(|o| o.kind == kind)
                .unwrap()
                .clone();
            for name in ["x[p0]", "x[l4,p0]", "x[l0,p0]"] {
                op.name = name.into();
                assert!(group_of(&op, &shapes).is_err(), "{name}");
            }
        }
    }

    #[test]
    fn gat_attention_rate_of_a_tiny_training_run() {
        let bench = Bench {
            scale: 10,
            partitions: 4,
            width: 16,
        };
        let rate = attention_rate(bench, &profile(), &Rounds::tiny(), &BackendChoice::Cpu).unwrap();
        assert_eq!(
            (
                rate.scale,
                rate.nodes,
                rate.partitions,
                rate.hidden,
                rate.heads
            ),
            (8, 256, 2, 8, 8)
        );
        assert!(
            rate.edge_softmax_bytes_per_s > 0.0 && rate.edge_softmax_bytes_per_s.is_finite(),
            "{rate:?}"
        );
        for r in [rate.bytes_per_s, rate.backward_bytes_per_s] {
            assert!(r > 0.0 && r.is_finite(), "{rate:?}");
        }
        assert_eq!(rate.iterations, 1);
        // Every class fitted once, in order, and valid in a profile.
        let classes: Vec<ComputeClass> = rate.class_rates.iter().map(|r| r.class).collect();
        assert_eq!(classes, GAT_CLASSES);
        let mut p = profile();
        p.device.class_rates = rate.class_rates.clone();
        p.validate().unwrap();
    }

    fn point(bytes: f64, edges: f64, seconds: f64) -> Sums {
        Sums {
            bytes,
            edges,
            seconds,
            ..Sums::default()
        }
    }

    /// Points of a class priced by all four terms, as [`attention_rate`]
    /// times them: two layers (eight heads of 8, one of 16) of four runs
    /// (in 4 partitions and in one, then with one head in the first
    /// layer) recover the bandwidth and the times per edge, per head and
    /// per row that made them; without the runs that tell heads or rows
    /// apart, the fit leaves that term out.
    #[test]
    fn a_class_is_fitted_its_times_per_head_and_per_row() {
        let class = ComputeClass::AttentionBackward;
        let (edges, nodes) = (1.1e6, 65536.0);
        let truth =
            |p: &Sums| p.bytes / 4e10 + p.edges * 1.9e-8 + p.edge_heads * 2.6e-9 + p.rows * 2.9e-8;
        let mut runs = Vec::new();
        for (heads, partitions) in [(8.0, 4.0), (8.0, 1.0), (1.0, 4.0), (1.0, 1.0)] {
            for (layer_heads, width) in [(heads, 64.0), (1.0, 16.0)] {
                let rows = nodes * partitions;
                let mut p = Sums {
                    bytes: edges * (8.0 + 12.0 * layer_heads + 8.0 * width)
                        + rows * (2.0 * width + 4.0 * layer_heads) * 4.0,
                    edges,
                    edge_heads: edges * layer_heads,
                    rows,
                    ..Sums::default()
                };
                p.seconds = truth(&p);
                runs.push(p);
            }
        }
        let fit = fit_class(class, &runs);
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-6;
        assert!(close(fit.bytes_per_s, 4e10), "{fit:?}");
        assert!(close(fit.seconds_per_edge, 1.9e-8), "{fit:?}");
        assert!(close(fit.seconds_per_edge_head, 2.6e-9), "{fit:?}");
        assert!(close(fit.seconds_per_row, 2.9e-8), "{fit:?}");
        // One partition count cannot tell rows from edges (as a profile
        // whose GAT runs in one partition): the heads are still fitted,
        // the rows' time is in the edges'.
        let four: Vec<Sums> = [0, 1, 4, 5].iter().map(|&k| runs[k]).collect();
        let fit = fit_class(class, &four);
        assert_eq!(fit.seconds_per_row, 0.0, "{fit:?}");
        assert!(close(fit.seconds_per_edge_head, 2.6e-9), "{fit:?}");
        assert!(close(fit.bytes_per_s, 4e10), "{fit:?}");
        // One run's two layers: a bandwidth and a time per edge.
        let fit = fit_class(class, &runs[..2]);
        assert_eq!(
            (fit.seconds_per_edge_head, fit.seconds_per_row),
            (0.0, 0.0),
            "{fit:?}"
        );
        // A negative time per row from noise falls back to the terms
        // without it, never to a negative price.
        let mut noisy = runs.clone();
        for p in noisy.iter_mut().filter(|p| p.rows == nodes) {
            p.seconds *= 1.6;
        }
        let fit = fit_class(class, &noisy);
        for v in [
            fit.seconds_per_edge,
            fit.seconds_per_edge_head,
            fit.seconds_per_row,
        ] {
            assert!(v >= 0.0 && v.is_finite(), "{fit:?}");
        }
        assert!(fit.bytes_per_s > 0.0, "{fit:?}");
    }

    /// Two layers of one class recover the bandwidth and the time per
    /// edge that made them; what cannot tell them apart, or fits a
    /// negative part, gets the bytes over the seconds.
    #[test]
    fn a_class_is_fitted_its_bandwidth_and_time_per_edge() {
        let class = ComputeClass::Attention;
        let time = |bytes: f64, edges: f64| bytes / 2e10 + edges * 3e-9;
        let layers = [
            point(4.6e8, 1.1e6, time(4.6e8, 1.1e6)),
            point(6.6e7, 1.1e6, time(6.6e7, 1.1e6)),
        ];
        let fit = fit_class(class, &layers);
        assert_eq!(fit.class, class);
        assert!((fit.bytes_per_s / 2e10 - 1.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.seconds_per_edge / 3e-9 - 1.0).abs() < 1e-9, "{fit:?}");
        // A third point off the line: least squares, between them.
        let mut three = layers.to_vec();
        three.push(point(2e8, 1.1e6, 1.2 * time(2e8, 1.1e6)));
        let fit = fit_class(class, &three);
        assert!(
            fit.seconds_per_edge > 0.0 && fit.bytes_per_s > 0.0,
            "{fit:?}"
        );
        // Least squares of the relative misses: no worse over the three
        // than the line through two, nor than the fit nudged either way.
        let squares = |bytes_per_s: f64, per_edge: f64| {
            three
                .iter()
                .map(|p| ((p.bytes / bytes_per_s + p.edges * per_edge) / p.seconds - 1.0).powi(2))
                .sum::<f64>()
        };
        let fitted = squares(fit.bytes_per_s, fit.seconds_per_edge);
        assert!(fitted < squares(2e10, 3e-9), "{fit:?}");
        for (db, de) in [(1.01, 1.0), (0.99, 1.0), (1.0, 1.01), (1.0, 0.99)] {
            let nudged = squares(fit.bytes_per_s * db, fit.seconds_per_edge * de);
            assert!(fitted <= nudged, "{fit:?} against ({db}, {de})");
        }
        let bytes_only = |points: &[Sums]| {
            let b: f64 = points.iter().map(|p| p.bytes).sum();
            let t: f64 = points.iter().map(|p| p.seconds).sum();
            ClassRate {
                class,
                bytes_per_s: b / t,
                seconds_per_edge: 0.0,
                seconds_per_edge_head: 0.0,
                seconds_per_row: 0.0,
                on_curve: false,
            }
        };
        let cases: [&[Sums]; 5] = [
            // One layer.
            &[point(4e8, 1e6, 0.03)],
            // No edges (the node scores).
            &[point(2e7, 0.0, 4e-3), point(3e6, 0.0, 7e-4)],
            // Bytes in proportion to edges.
            &[point(4e8, 1e6, 0.03), point(8e8, 2e6, 0.05)],
            // Time falling with the bytes: no positive bandwidth.
            &[point(4e8, 1e6, 0.01), point(1e8, 1e6, 0.02)],
            // A negative time per edge.
            &[point(4e8, 1e6, 0.04), point(1e8, 1e6, 0.001)],
        ];
        for points in cases {
            assert_eq!(fit_class(class, points), bytes_only(points), "{points:?}");
        }
    }

    #[test]
    fn layers_are_read_from_operator_names() {
        assert_eq!(layer_of("sddmm[l2,p0,s1]"), Some(2));
        assert_eq!(layer_of("edge_softmax[l1,p3]"), Some(1));
        assert_eq!(layer_of("linear_bwd[l12,p0]"), Some(12));
        assert_eq!(layer_of("loss[p0]"), None);
        assert_eq!(layer_of("linear[x]"), None);
    }

    #[test]
    fn overhead_is_positive() {
        let overhead = op_overhead(&profile(), 2, &BackendChoice::Cpu).unwrap();
        assert!(overhead.op_overhead_s > 0.0 && overhead.operators > 10);
    }
}
