//! The CPU backend's compute rates, measured inside training: a few
//! retain-all iterations of a 3-layer GCN on a generated R-MAT graph
//! (every layer `width` wide but the last, whose output is an eighth of
//! that, as few classes make it), through the executor and the CPU
//! backend as `fateplan train` runs them, with each operator timed. A
//! rate is the operators' flops or bytes, as the GNN workload builder
//! counts them ([`fateplan_planner::gnn::build_gnn`]), over their
//! seconds, so that a rate times an operator's cost is the operator's
//! time in training, which is how the planner and the simulator use the
//! profile. Kernels timed in a loop of their own ran faster than in
//! training, where other operators come between them (`docs/profile.md`).

use std::collections::HashMap;
use std::sync::Arc;

use fateplan_planner::gnn::GnnModel;
use fateplan_planner::plan::{Budgets, Plan, Stream};
use fateplan_planner::profile::DenseShape;
use fateplan_planner::workload::{ComputeClass, Op, OpKind};
use fateplan_planner::{plan, PlanOptions, Policy, Profile};

use crate::cpu::{CpuGnn, Hyper};
use crate::exec::{ExecOptions, Executor};
use crate::generate::{PlantedSpec, RmatSpec};
use crate::gnn::Mode;
use crate::train::{self, TrainRun};
use crate::{Error, Result};

use super::{median, run_rounds, Rounds};

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
    /// The GEMM rate of each layer shape, least intense first.
    pub dense: Vec<DenseRate>,
    /// ReLU with dropout and its backward: bytes per second.
    pub elementwise_bytes_per_s: f64,
    /// Forward aggregations (SpMM, the first with input dropout fused).
    pub gather_bytes_per_s: f64,
    /// Backward aggregations (transposed SpMM).
    pub scatter_bytes_per_s: f64,
    /// The loss (softmax cross-entropy, with the accuracy of three masks)
    /// and its backward: flops per second.
    pub loss_flops_per_s: f64,
    /// Iterations timed, after one left out.
    pub iterations: u32,
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
    /// The linear layers, forward and backward: the last layer's
    /// (`true`: `width -> classes`) or the others' (`width -> width`).
    Dense(bool),
    Elementwise,
    Gather,
    Scatter,
    /// The loss (with the accuracy) and its backward.
    Loss,
    /// GAT's attention operators (forward).
    Attention,
    /// Their backward.
    AttentionBackward,
    /// GAT's edge softmaxes.
    EdgeSoftmax,
}

/// Flops, bytes and seconds of one group in one iteration.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    flops: f64,
    bytes: f64,
    seconds: f64,
}

/// The group a GCN operator's time counts towards; `None` for operators
/// no figure is measured on (weight gradients' sums, updates). An
/// operator of a timed kind that does not fit its group is an error, so
/// that none is left out unseen.
fn group_of(op: &Op, layers: u32) -> Result<Option<Group>> {
    let unexpected = || {
        Error::Internal(format!(
            "the compute measurement cannot place operator {} ({:?}, {:?})",
            op.name, op.kind, op.cost.class
        ))
    };
    Ok(Some(match op.kind {
        OpKind::Linear | OpKind::LinearBackward => {
            let prefix = if op.kind == OpKind::Linear {
                "linear[l"
            } else {
                "linear_bwd[l"
            };
            let layer: u32 = op
                .name
                .strip_prefix(prefix)
                .and_then(|rest| rest.split(',').next())
                .and_then(|l| l.parse().ok())
                .ok_or_else(unexpected)?;
            if op.cost.class != ComputeClass::Dense || layer == 0 || layer > layers {
                return Err(unexpected());
            }
            Group::Dense(layer == layers)
        }
        OpKind::Activation | OpKind::ActivationBackward => Group::Elementwise,
        OpKind::Aggregate if op.cost.class == ComputeClass::Sparse => Group::Gather,
        OpKind::AggregateBackward if op.cost.class == ComputeClass::Scatter => Group::Scatter,
        OpKind::Loss | OpKind::LossBackward => Group::Loss,
        OpKind::Aggregate | OpKind::AggregateBackward => return Err(unexpected()),
        _ => return Ok(None),
    }))
}

/// Trains `bench`'s GCN with a retain-all plan (made with `profile`,
/// whose figures a retain-all plan does not depend on) and times every
/// operator of one warm-up iteration and then of `rounds` iterations (at
/// least `min`, until `budget_s` has passed, at most `max`).
pub fn training_rates(bench: Bench, profile: &Profile, rounds: &Rounds) -> Result<TrainingRates> {
    let graph = RmatSpec {
        features: bench.width,
        classes: bench.classes(),
        ..RmatSpec::new(bench.scale)
    }
    .generate()?;
    let (nodes, edges) = (graph.nodes, graph.edges());
    let hyper = gcn(3, bench.width);
    let prepared = train::prepare(graph, &hyper, bench.partitions)?;
    let timed = time_training(prepared, hyper, profile, rounds, |op| {
        group_of(op, hyper.layers)
    })?;
    let rate = |group, per| timed.rate(group, per);
    let mut dense = Vec::new();
    for (narrow, d_out) in [(false, bench.width), (true, bench.classes())] {
        let group = Group::Dense(narrow);
        let sums = timed.iterations[0].get(&group).copied().unwrap_or_default();
        dense.push(DenseRate {
            d_in: bench.width,
            d_out,
            flops_per_s: rate(group, |s| s.flops)?,
            flops_per_byte: sums.flops / sums.bytes,
        });
    }
    dense.sort_by(|a, b| a.flops_per_byte.total_cmp(&b.flops_per_byte));
    dense.dedup_by(|b, a| b.flops_per_byte <= a.flops_per_byte);
    Ok(TrainingRates {
        nodes,
        edges,
        dense,
        elementwise_bytes_per_s: rate(Group::Elementwise, |s| s.bytes)?,
        gather_bytes_per_s: rate(Group::Gather, |s| s.bytes)?,
        scatter_bytes_per_s: rate(Group::Scatter, |s| s.bytes)?,
        loss_flops_per_s: rate(Group::Loss, |s| s.flops)?,
        iterations: timed.iterations.len() as u32,
    })
}

/// What GAT's attention operators were measured on, and their rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionRate {
    /// Edge scores and attention-weighted aggregation.
    pub bytes_per_s: f64,
    /// The backward of both.
    pub backward_bytes_per_s: f64,
    /// The edge softmaxes.
    pub edge_softmax_bytes_per_s: f64,
    pub scale: u32,
    pub nodes: u64,
    pub edges: u64,
    pub partitions: u32,
    pub hidden: u32,
    pub heads: u32,
    pub iterations: u32,
}

/// GAT's attention operators (`ComputeClass::Attention`: edge scores,
/// attention-weighted aggregation), their backward
/// (`ComputeClass::AttentionBackward`) and its edge softmaxes
/// (`ComputeClass::EdgeSoftmax`), timed as [`training_rates`]
/// times the GCN's, in a 2-layer GAT of 8 heads of `width / 16` (at
/// least one) on an R-MAT graph a quarter of `bench`'s size in half its
/// partitions (GAT's per-edge tensors are 8 times a GCN's). Bytes per
/// second, the medians over iterations.
pub fn attention_rate(bench: Bench, profile: &Profile, rounds: &Rounds) -> Result<AttentionRate> {
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
    let hyper = Hyper {
        model: GnnModel::Gat,
        heads,
        ..gcn(2, hidden)
    };
    let prepared = train::prepare(graph, &hyper, partitions)?;
    let timed = time_training(prepared, hyper, profile, rounds, |op| {
        Ok(match op.cost.class {
            ComputeClass::Attention => Some(Group::Attention),
            ComputeClass::AttentionBackward => Some(Group::AttentionBackward),
            ComputeClass::EdgeSoftmax => Some(Group::EdgeSoftmax),
            _ => None,
        })
    })?;
    Ok(AttentionRate {
        bytes_per_s: timed.rate(Group::Attention, |s| s.bytes)?,
        backward_bytes_per_s: timed.rate(Group::AttentionBackward, |s| s.bytes)?,
        edge_softmax_bytes_per_s: timed.rate(Group::EdgeSoftmax, |s| s.bytes)?,
        scale,
        nodes,
        edges,
        partitions,
        hidden,
        heads,
        iterations: timed.iterations.len() as u32,
    })
}

/// Per iteration, the sums of every group's operators.
struct Timed {
    iterations: Vec<HashMap<Group, Sums>>,
}

impl Timed {
    /// The median over iterations of `per(sums) / seconds` for `group`.
    fn rate(&self, group: Group, per: fn(&Sums) -> f64) -> Result<f64> {
        let mut values: Vec<f64> = self
            .iterations
            .iter()
            .filter_map(|sums| sums.get(&group))
            .map(|s| per(s) / s.seconds)
            .collect();
        if values.len() != self.iterations.len()
            || values.iter().any(|v| !(v.is_finite() && *v > 0.0))
        {
            return Err(Error::Internal(format!(
                "the compute measurement timed no {group:?} operators, or the timer did not advance"
            )));
        }
        Ok(median(&mut values))
    }
}

/// Trains `prepared` with a retain-all plan (made with `profile`, whose
/// figures a retain-all plan does not depend on), one iteration left out
/// and then `rounds` of them (at least `min`, until `budget_s` has
/// passed, at most `max`), and sums each iteration's operators by the
/// group `classify` gives them.
fn time_training(
    prepared: train::Prepared,
    hyper: Hyper,
    profile: &Profile,
    rounds: &Rounds,
    classify: impl Fn(&Op) -> Result<Option<Group>>,
) -> Result<Timed> {
    let plan = Arc::new(retain_all(&prepared, profile)?);
    let ops = &plan.workload.definition.ops;
    let mut groups: HashMap<&str, (Group, usize)> = HashMap::new();
    for (k, op) in ops.iter().enumerate() {
        if let Some(group) = classify(op)? {
            groups.insert(op.name.as_str(), (group, k));
        }
    }
    let backend = CpuGnn::new(prepared.input, hyper)
        .map_err(|e| Error::Internal(format!("the compute measurement's backend: {e}")))?;
    let exec_options = ExecOptions {
        budgets: None,
        trace: true,
    };
    let mut executor = Executor::new(plan.clone(), backend, None, exec_options)
        .map_err(|e| Error::Internal(format!("the compute measurement's executor: {e}")))?;
    let iteration = || -> Result<HashMap<Group, Sums>> {
        executor.backend_mut().set_mode(Mode::Train);
        executor
            .run_iteration()
            .map_err(|e| Error::Internal(format!("the compute measurement's training: {e}")))?;
        let mut sums: HashMap<Group, Sums> = HashMap::new();
        for span in executor.trace() {
            if span.stream != Stream::Compute {
                continue;
            }
            let Some(&(group, k)) = groups.get(span.name.as_str()) else {
                continue;
            };
            let sum = sums.entry(group).or_default();
            sum.flops += ops[k].cost.flops;
            sum.bytes += ops[k].cost.bytes as f64;
            sum.seconds += span.span.end_s - span.span.start_s;
        }
        Ok(sums)
    };
    Ok(Timed {
        iterations: run_rounds(rounds, iteration)?,
    })
}

/// The measured GCN: `layers` layers of `hidden`, dropout 0.5.
fn gcn(layers: u32, hidden: u32) -> Hyper {
    Hyper {
        model: GnnModel::Gcn,
        layers,
        hidden,
        heads: 1,
        dropout: 0.5,
        lr: 0.01,
        weight_decay: 5e-4,
        weight_decay_all_layers: false,
        seed: 1,
    }
}

/// A retain-all plan without budgets; `profile` is only planned with (a
/// retain-all plan does not depend on its figures).
fn retain_all(prepared: &train::Prepared, profile: &Profile) -> Result<Plan> {
    let options = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    Ok(plan(&prepared.workload, profile, &options)?)
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
/// features, 4 hidden, 4 partitions), through the executor and the CPU
/// backend with a retain-all plan; seconds per iteration (the first left
/// out) divided by its operators. `profile` is only planned with.
pub fn op_overhead(profile: &Profile, iterations: u32) -> Result<Overhead> {
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
    let plan = retain_all(&prepared, profile)?;
    let operators = plan.workload.definition.ops.len();
    let iterations = iterations.max(2);
    let run = TrainRun {
        plan: std::sync::Arc::new(plan),
        epochs: iterations,
        budgets: None,
        ssd: None,
        trace: false,
        backend: train::BackendChoice::Cpu,
    };
    let (report, _) = train::train(prepared, hyper, run, &mut |_| {})
        .map_err(|e| Error::Internal(format!("the per-operator measurement failed: {e}")))?;
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

    #[test]
    fn rates_of_a_tiny_training_run() {
        let bench = Bench {
            scale: 10,
            partitions: 2,
            width: 16,
        };
        let rates = training_rates(bench, &profile(), &Rounds::tiny()).unwrap();
        assert_eq!((rates.nodes, rates.iterations), (1024, 1));
        for rate in [
            rates.elementwise_bytes_per_s,
            rates.gather_bytes_per_s,
            rates.scatter_bytes_per_s,
            rates.loss_flops_per_s,
        ] {
            assert!(rate > 0.0 && rate.is_finite(), "{rates:?}");
        }
        // Two shapes, the narrow one first: 16 -> 2 does 2·16·2 flops per
        // 4·18 bytes forward and 4·16·2 per 8·18 backward; 16 -> 16 does
        // 2·16·16 per 4·32 (layer 1's backward has no input gradient:
        // 2·16·16 per 4·32 too; layer 2's 4·16·16 per 8·32).
        let shapes: Vec<(u32, u32)> = rates.dense.iter().map(|r| (r.d_in, r.d_out)).collect();
        assert_eq!(shapes, [(16, 2), (16, 16)]);
        assert!(
            (rates.dense[0].flops_per_byte - 64.0 / 72.0).abs() < 1e-9,
            "{rates:?}"
        );
        assert!(
            (rates.dense[1].flops_per_byte - 4.0).abs() < 1e-9,
            "{rates:?}"
        );
        assert_eq!(rates.wide(), rates.dense[1]);
        assert!(rates
            .dense
            .iter()
            .all(|r| r.flops_per_s > 0.0 && r.flops_per_s.is_finite()));
        assert_eq!(rates.dense_shapes().len(), 2);
    }

    /// Every operator of the measured GCN is placed: in P partitions,
    /// layers 1 and 2's linear layers and backward (4P) are the wide
    /// shape, layer 3's (2P) the narrow one; ReLU and its backward for
    /// two layers (4P); P² aggregations per layer (3P²) and backward for
    /// layers 2 and 3 (2P²); the loss and its backward (2P).
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
        let mut counts: HashMap<Group, usize> = HashMap::new();
        for op in &prepared.workload.ops {
            if let Some(group) = group_of(op, 3).unwrap() {
                *counts.entry(group).or_default() += 1;
            }
        }
        let expected = [
            (Group::Dense(false), 4 * p),
            (Group::Dense(true), 2 * p),
            (Group::Elementwise, 4 * p),
            (Group::Gather, 3 * p * p),
            (Group::Scatter, 2 * p * p),
            (Group::Loss, 2 * p),
        ];
        assert_eq!(counts, expected.into_iter().collect());
        // A linear operator whose name does not say its layer is refused.
        let mut op = prepared
            .workload
            .ops
            .iter()
            .find(|o| o.kind == OpKind::Linear)
            .unwrap()
            .clone();
        op.name = "linear[x]".into();
        assert!(group_of(&op, 3).is_err());
    }

    #[test]
    fn gat_attention_rate_of_a_tiny_training_run() {
        let bench = Bench {
            scale: 10,
            partitions: 4,
            width: 16,
        };
        let rate = attention_rate(bench, &profile(), &Rounds::tiny()).unwrap();
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
    }

    #[test]
    fn overhead_is_positive() {
        let overhead = op_overhead(&profile(), 2).unwrap();
        assert!(overhead.op_overhead_s > 0.0 && overhead.operators > 10);
    }
}
