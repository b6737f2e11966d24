//! One training iteration as operators over tensors, in a fixed execution order.
//!
//! A [`Workload`] is the planner's whole view of the model: which tensors exist,
//! how big they are, which operator produces and which operators read each one,
//! and what each operator costs. The position of an operator in
//! [`Workload::ops`] is its *step*; ids equal positions.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Error, Result, Tier};

/// Version of the workload JSON format written by [`Workload::to_json`].
pub const WORKLOAD_FORMAT_VERSION: u32 = 1;
/// Largest number of tensors or operators a workload may have.
pub const MAX_ITEMS: usize = 10_000_000;
/// The least memory planning takes a tensor or operator beyond the
/// workload itself: its lifetimes, its fates' choices, the schedule and
/// the plan's copy of the workload. Measured as the peak resident memory
/// of `fateplan plan` over its items, 1.77 KB (GCN on ogbn-arxiv, 8
/// layers in 128 and 256 partitions) to 4.31 KB (GAT) on two threads,
/// less the 0.30 KB an item that building the workload took; more
/// threads take more. See [`Workload::least_planning_bytes`].
pub const LEAST_PLANNING_BYTES_PER_ITEM: u64 = 1280;
/// The least memory building a workload takes a tensor or operator at
/// its peak: twice the 0.30 KB an item held, measured beside
/// [`LEAST_PLANNING_BYTES_PER_ITEM`], since a vector that grows holds its
/// old and new buffers at once (ogbn-arxiv's GCN of 64 layers in 222
/// partitions, 6.3 million items, failed to allocate 1.5 GiB under a
/// 3.8 GiB address-space limit with 1.8 GiB left). What a search that
/// builds counts to measure them needs of each.
pub const LEAST_BUILDING_BYTES_PER_ITEM: u64 = 600;
/// The least memory planning takes a tensor or operator beyond the
/// workload and what its tensors' choices take
/// ([`CHOICES_HELD_PERCENT`], counted by
/// [`crate::planner::least_planning_bytes_counted`]).
pub const LEAST_PLANNING_BYTES_BEYOND_CHOICES: u64 = 640;
/// The share of the bytes of its tensors' choices planning holds at
/// least, beyond [`LEAST_PLANNING_BYTES_BEYOND_CHOICES`] an item, in
/// percent: the choices themselves, and what the search and the
/// allocator hold beside them. Measured as
/// [`LEAST_PLANNING_BYTES_PER_ITEM`] was, less the workload and that,
/// over the choices: 1.98 (GAT on ogbn-arxiv, 8 layers in 128
/// partitions), 2.66 (its GCN), 5.71 (GAT on igb-full, 3 layers in
/// 128), 5.84 (GCN on ogbn-papers100M, 8 in 128), 7.68 (GCN on igb-full,
/// 8 in 256).
pub const CHOICES_HELD_PERCENT: u64 = 175;

/// Index of a tensor in [`Workload::tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorId(pub u32);

/// Index of an operator in [`Workload::ops`]; also its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpId(pub u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl OpId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorKind {
    /// Data the iteration reads but does not produce: features, labels, graph blocks.
    Input,
    /// Trainable weights and optimizer state; updated in place, resident on the device.
    Parameter,
    /// Produced in the forward pass.
    Activation,
    /// Produced in the backward pass.
    Gradient,
    /// Scratch space of an operator.
    Workspace,
}

impl TensorKind {
    /// Inputs and parameters exist before the iteration starts.
    pub fn is_external(self) -> bool {
        matches!(self, TensorKind::Input | TensorKind::Parameter)
    }
}

/// Writes a unit variant as the files spell it (its serde name).
fn write_serde_name<T: Serialize + std::fmt::Debug>(
    value: &T,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => f.write_str(&name),
        _ => write!(f, "{value:?}"),
    }
}

impl std::fmt::Display for TensorKind {
    /// The kind as workloads spell it (`activation`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_serde_name(self, f)
    }
}

/// Which part of the iteration an operator belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Backward,
    Update,
}

/// What an operator computes. Generic DAGs use [`OpKind::Generic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Aggregate,
    Linear,
    Activation,
    AttentionScore,
    EdgeSoftmax,
    Loss,
    LinearBackward,
    AggregateBackward,
    ActivationBackward,
    AttentionBackward,
    LossBackward,
    GradAccumulate,
    Update,
    Generic,
}

/// Which device rate bounds an operator's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeClass {
    /// Dense math (GEMM): bounded by the GEMM rate for its intensity
    /// (`dense_flops_per_s`, or `dense_shapes`) and memory bandwidth.
    Dense,
    /// Irregular gathers (SpMM): bounded by `sparse_bytes_per_s`.
    Sparse,
    /// Irregular scatters (the transposed SpMM of an aggregation's
    /// backward): bounded by `scatter_bytes_per_s`.
    Scatter,
    /// A gather with dropout on its input fused in (GCN's and
    /// GraphSAGE's first layer, where it aggregates first): each gathered
    /// value masked by its keep bit. Its own fit in `device.class_rates`
    /// where the profile has one, else priced as [`ComputeClass::Sparse`].
    SparseMasked,

    /// Streaming element-wise work: bounded by memory bandwidth.
    #[default]
    Elementwise,
    /// A softmax and its exponentials (a loss): bounded by
    /// `softmax_flops_per_s` and memory bandwidth.
    Softmax,
    /// GAT's attention-weighted aggregation (and, in workloads written
    /// before [`ComputeClass::EdgeScores`], its edge scores): bounded by
    /// `attention_bytes_per_s`, or by the class's fit in
    /// `device.class_rates` for operators that record their edges.
    Attention,
    /// GAT's edge scores (an SDDMM of the node scores): the attention
    /// rate where the profile fits none of its own.
    EdgeScores,
    /// The backward of GAT's attention (the gradients of the aggregation
    /// and of the edge scores, scattered to the source rows): bounded by
    /// `attention_backward_bytes_per_s`.
    AttentionBackward,
    /// GAT's edge softmax (an exponential, a maximum and a sum per edge
    /// and head): bounded by `edge_softmax_bytes_per_s`.
    EdgeSoftmax,
    /// GAT's node scores (a dot product per row and head): memory
    /// bandwidth where the profile fits no rate of its own.
    NodeScores,
    /// Their backward (the score path added into the projection's
    /// gradient, and the attention vectors' gradients): likewise.
    NodeScoresBackward,
    /// GAT's ELU and its backward (an exponential an element): likewise.
    Elu,
}

impl ComputeClass {
    /// The classes whose operators record the heads of the edges they
    /// walk (GAT's edge operators: [`Cost::edge_heads`]), and so the only
    /// ones a profile may give a time per edge head.
    pub const WALKS_HEADS: [ComputeClass; 4] = [
        ComputeClass::EdgeScores,
        ComputeClass::Attention,
        ComputeClass::EdgeSoftmax,
        ComputeClass::AttentionBackward,
    ];

    /// The classes whose operators walk edges ([`Cost::edges`]: GAT's
    /// edge operators and every aggregation), and so the only ones a
    /// profile may give a time per edge.
    pub const WALKS_EDGES: [ComputeClass; 7] = [
        ComputeClass::EdgeScores,
        ComputeClass::Attention,
        ComputeClass::EdgeSoftmax,
        ComputeClass::AttentionBackward,
        ComputeClass::Sparse,
        ComputeClass::SparseMasked,
        ComputeClass::Scatter,
    ];

    /// The classes whose operators record the rows they walk
    /// ([`Cost::rows`]: GAT's edge operators, every aggregation and the
    /// loss), and so the only ones a profile may give a time per row.
    pub const WALKS_ROWS: [ComputeClass; 8] = {
        let mut classes = [ComputeClass::Softmax; 8];
        let mut k = 0;
        while k < ComputeClass::WALKS_EDGES.len() {
            classes[k] = ComputeClass::WALKS_EDGES[k];
            k += 1;
        }
        classes
    };
}

impl std::fmt::Display for ComputeClass {
    /// The class as workloads and profiles spell it (`edge_scores`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_serde_name(self, f)
    }
}

/// The most bytes one tensor may have (1 PiB): with at most
/// [`MAX_WORKLOAD_BYTES`] in all, no sum of them wraps.
pub const MAX_TENSOR_BYTES: u64 = 1 << 50;

/// The most bytes a workload's tensors may add up to (1 EiB).
pub const MAX_WORKLOAD_BYTES: u64 = 1 << 60;

/// The most seconds one operator may be given (about 32 years): the
/// iteration's sums stay finite however many operators there are.
pub const MAX_OP_SECONDS: f64 = 1e9;

/// The most floating-point operations one operator may be given (1e9
/// seconds at 1e15 per second).
pub const MAX_OP_FLOPS: f64 = 1e24;

/// The most edges, rows or elements one operator's cost may count
/// (`cost.edges`, `cost.rows` and the like; 2^50, about 1.1e15): a
/// quadrillion edges is far past any graph. Its `bytes` may be up to
/// [`MAX_WORKLOAD_BYTES`], what its tensors may add up to. Each figure
/// bounded, the seconds it is priced at stay finite.
pub const MAX_OP_COUNT: u64 = 1 << 50;

/// What an operator costs: either work (`flops`, `bytes` touched, the
/// `edges` it walks, `class`) or explicit `seconds`, which take precedence
/// when given.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    #[serde(default)]
    pub flops: f64,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub class: ComputeClass,
    /// Edges an edge operator walks (zero for the others): what a
    /// profile's per-edge time (`device.class_rates`) is charged on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edges: u64,
    /// Edges an attention operator walks times the heads of each: a
    /// score, a weight or their gradients per edge and head. What a
    /// profile's per-head time (`device.class_rates`) is charged on. The
    /// GNN builder records them on GAT's edge operators; zero elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_heads: u64,
    /// Rows an edge operator walks, each once per block it walks them in
    /// (a block's destination rows; an edge softmax's rows once for each
    /// block of their partition), whether the row holds edges there or
    /// not: what a profile's per-row time (`device.class_rates`) is
    /// charged on. The GNN builder records them on GAT's edge operators
    /// and on every aggregation and its backward, and on the loss and its
    /// backward (the rows of their partition: a row's softmax, its label
    /// and its prediction); zero elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rows: u64,
    /// Of `bytes`, those moved once for each row walked (an aggregation's
    /// running sum of the row, read and written): a class fit with a time
    /// per row charges that time instead of these bytes. Recorded on the
    /// GCN's and GraphSAGE's aggregations and their backward; zero
    /// elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub row_bytes: u64,
    /// Edges of the block whose transpose the operator builds before it
    /// runs, on a backend that builds one (the CUDA backend's transposed
    /// aggregations; the CPU's scatter builds none): a profile's
    /// `device.transpose_seconds_per_edge` is charged on them. Zero where
    /// the previous transposing operator of the iteration (cyclically)
    /// read the same block, whose transpose the backend kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transpose_edges: u64,
    /// Elements whose dropout mask the operator draws (hashes each
    /// element's keep bit and applies it), on top of its work: a
    /// profile's `device.mask_seconds_per_element` is charged on them.
    /// Zero without dropout. The GNN builder counts them on a first
    /// layer's projection and its backward ([`crate::gnn::GnnSpec::dropout`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub masked: u64,
    /// Floats a row of the rows an aggregation gathers from, and the
    /// bytes of all of them over its layer (every source partition's:
    /// the blocks of a layer take turns over them): the working set at
    /// which a profile's `device.gather_curve` gives the gather its share
    /// of its class's fit (`DeviceProfile::memory_seconds`).
    /// Recorded on the GCN's and GraphSAGE's gathers (their aggregations,
    /// and the backward over a stored transpose); zero elsewhere.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub gather_width: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gather_set_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Cost {
    pub fn work(flops: f64, bytes: u64, class: ComputeClass) -> Cost {
        Cost {
            flops,
            bytes,
            class,
            edges: 0,
            edge_heads: 0,
            rows: 0,
            row_bytes: 0,
            transpose_edges: 0,
            masked: 0,
            gather_width: 0,
            gather_set_bytes: 0,
            seconds: None,
        }
    }

    /// `self` gathering rows of `width` floats from a working set of
    /// `set_bytes` (see [`Cost::gather_width`]).
    pub fn gathering(self, width: u32, set_bytes: u64) -> Cost {
        Cost {
            gather_width: width,
            gather_set_bytes: set_bytes,
            ..self
        }
    }

    /// `self` walking `edges` edges.
    pub fn over_edges(self, edges: u64) -> Cost {
        Cost { edges, ..self }
    }

    /// `self` walking edges of `edge_heads` heads in all (see
    /// [`Cost::edge_heads`]).
    pub fn over_edge_heads(self, edge_heads: u64) -> Cost {
        Cost { edge_heads, ..self }
    }

    /// `self` walking `rows` rows (see [`Cost::rows`]).
    pub fn over_rows(self, rows: u64) -> Cost {
        Cost { rows, ..self }
    }

    /// `self` with `row_bytes` of its bytes moved once a row walked (see
    /// [`Cost::row_bytes`]).
    pub fn with_row_bytes(self, row_bytes: u64) -> Cost {
        Cost { row_bytes, ..self }
    }

    /// `self` transposing a block of `edges` edges first (see
    /// [`Cost::transpose_edges`]).
    pub fn transposing(self, edges: u64) -> Cost {
        Cost {
            transpose_edges: edges,
            ..self
        }
    }

    /// `self` masking `elements` elements with dropout (see
    /// [`Cost::masked`]).
    pub fn masking(self, elements: u64) -> Cost {
        Cost {
            masked: elements,
            ..self
        }
    }

    pub fn seconds(seconds: f64) -> Cost {
        Cost {
            seconds: Some(seconds),
            ..Cost::default()
        }
    }
}

/// A datum of the iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tensor {
    pub id: TensorId,
    pub name: String,
    pub bytes: u64,
    pub kind: TensorKind,
    /// Where an input is when the iteration starts. Required for inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<Tier>,
    /// A hint that this tensor is a layer boundary: the `recompute-all`
    /// policy keeps checkpoints and recomputes what lies between them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checkpoint: bool,
}

/// A step of the iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    pub id: OpId,
    pub name: String,
    pub kind: OpKind,
    pub phase: Phase,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub cost: Cost,
    /// Device bytes the operator's kernels allocate while it runs, beyond
    /// its inputs and outputs (masks, slabs, segment sums, a transpose
    /// being built): held at its step, and at each recomputation of it,
    /// beside the tensors. The GNN builder counts the most either
    /// backend allocates ([`crate::gnn`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scratch_bytes: u64,
    /// The input (its index in `inputs`) that the operator adds its result
    /// into, in place: where that input's device copy ends at this
    /// operator, the operator's one output (of the same bytes) takes over
    /// its buffer, so the two are never held at once
    /// ([`crate::passes::memory::copy_lives`]). The GNN builder marks the
    /// running sums its aggregations add blocks into, as both backends
    /// run them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adds_into: Option<u32>,
}

/// One training iteration: tensors and operators in execution order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub format_version: u32,
    pub name: String,
    pub tensors: Vec<Tensor>,
    pub ops: Vec<Op>,
    /// Device bytes the runtime holds for the whole iteration beside the
    /// tensors (the GNN's label masks, a kept transpose): held at every
    /// step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resident_bytes: u64,
}

impl Workload {
    /// An empty workload to add tensors and operators to.
    pub fn new(name: impl Into<String>) -> Workload {
        Workload {
            format_version: WORKLOAD_FORMAT_VERSION,
            name: name.into(),
            tensors: Vec::new(),
            ops: Vec::new(),
            resident_bytes: 0,
        }
    }

    /// Adds a tensor and returns its id.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        bytes: u64,
        kind: TensorKind,
        home: Option<Tier>,
    ) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.tensors.push(Tensor {
            id,
            name: name.into(),
            bytes,
            kind,
            home,
            checkpoint: false,
        });
        id
    }

    /// Appends an operator (the next step) and returns its id.
    pub fn add_op(
        &mut self,
        name: impl Into<String>,
        kind: OpKind,
        phase: Phase,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        cost: Cost,
    ) -> OpId {
        let id = OpId(self.ops.len() as u32);
        self.ops.push(Op {
            id,
            name: name.into(),
            kind,
            phase,
            inputs,
            outputs,
            cost,
            scratch_bytes: 0,
            adds_into: None,
        });
        id
    }

    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id.index()]
    }

    /// Checks everything the planner relies on. Errors name the operator or tensor.
    pub fn validate(&self) -> Result<()> {
        if self.format_version != WORKLOAD_FORMAT_VERSION {
            return Err(Error::invalid(
                "workload field format_version",
                format!(
                    "{} is not supported; this build reads version {WORKLOAD_FORMAT_VERSION}",
                    self.format_version
                ),
            ));
        }
        // The name heads every summary and ties a plan to its workload.
        if self.name.trim().is_empty() || self.name.chars().any(char::is_control) {
            return Err(Error::invalid(
                "workload field name",
                format!(
                    "{:?}: expected a name of printable characters, not empty",
                    self.name
                ),
            ));
        }
        if self.tensors.len() > MAX_ITEMS || self.ops.len() > MAX_ITEMS {
            return Err(Error::invalid(
                format!("workload {:?}", self.name),
                format!(
                    "{} tensors and {} operators: at most {MAX_ITEMS} of each",
                    self.tensors.len(),
                    self.ops.len()
                ),
            ));
        }
        if self.ops.is_empty() {
            return Err(Error::invalid(
                format!("workload {:?}", self.name),
                "has no operators",
            ));
        }
        for (index, tensor) in self.tensors.iter().enumerate() {
            let context = || format!("tensor {index} ({:?})", tensor.name);
            if tensor.id.index() != index {
                return Err(Error::invalid(
                    context(),
                    format!("id is {} but ids must equal positions", tensor.id.0),
                ));
            }
            if tensor.name.is_empty() {
                return Err(Error::invalid(context(), "name is empty"));
            }
            if tensor.bytes == 0 {
                return Err(Error::invalid(
                    context(),
                    "bytes is 0; every tensor must have a size",
                ));
            }
            if tensor.bytes > MAX_TENSOR_BYTES {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "bytes {} is over the most a tensor may have, {MAX_TENSOR_BYTES} (1 PiB)",
                        tensor.bytes
                    ),
                ));
            }
            match (tensor.kind, tensor.home) {
                (TensorKind::Input, None) => {
                    return Err(Error::invalid(context(), "an input needs a home tier"))
                }
                (kind, Some(home)) if !kind.is_external() => {
                    return Err(Error::invalid(
                        context(),
                        format!("home {home} given, but only inputs and parameters have a home"),
                    ))
                }
                _ => {}
            }
        }
        // Plans, explanations and the schedule's messages name tensors.
        let mut names = std::collections::HashMap::with_capacity(self.tensors.len());
        for (index, tensor) in self.tensors.iter().enumerate() {
            if let Some(first) = names.insert(tensor.name.as_str(), index) {
                return Err(Error::invalid(
                    format!("tensor {index} ({:?})", tensor.name),
                    format!("name is tensor {first}'s too; every tensor needs a name of its own"),
                ));
            }
        }
        let total: u128 = self.tensors.iter().map(|t| t.bytes as u128).sum();
        if total > MAX_WORKLOAD_BYTES as u128 {
            return Err(Error::invalid(
                format!("workload {:?}", self.name),
                format!(
                    "its tensors add up to {total} bytes, over the most a workload may \
                     have, {MAX_WORKLOAD_BYTES} (1 EiB)"
                ),
            ));
        }
        if self.resident_bytes > MAX_TENSOR_BYTES {
            return Err(Error::invalid(
                format!("workload {:?} field resident_bytes", self.name),
                format!(
                    "{} is over the most it may hold, {MAX_TENSOR_BYTES} (1 PiB)",
                    self.resident_bytes
                ),
            ));
        }
        let mut producer: Vec<Option<u32>> = vec![None; self.tensors.len()];
        for (step, op) in self.ops.iter().enumerate() {
            let context = || format!("operator {step} ({:?})", op.name);
            if op.id.index() != step {
                return Err(Error::invalid(
                    context(),
                    format!("id is {} but ids must equal positions", op.id.0),
                ));
            }
            if op.name.is_empty() {
                return Err(Error::invalid(context(), "name is empty"));
            }
            if !(0.0..=MAX_OP_FLOPS).contains(&op.cost.flops) {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "cost.flops {:e} must be finite, not negative and at most {MAX_OP_FLOPS:e}",
                        op.cost.flops
                    ),
                ));
            }
            let counts = [
                ("bytes", op.cost.bytes, MAX_WORKLOAD_BYTES),
                ("edges", op.cost.edges, MAX_OP_COUNT),
                ("edge_heads", op.cost.edge_heads, MAX_OP_COUNT),
                ("rows", op.cost.rows, MAX_OP_COUNT),
                ("transpose_edges", op.cost.transpose_edges, MAX_OP_COUNT),
                ("masked", op.cost.masked, MAX_OP_COUNT),
                (
                    "gather_set_bytes",
                    op.cost.gather_set_bytes,
                    MAX_WORKLOAD_BYTES,
                ),
            ];
            if let Some((field, count, most)) = counts.iter().find(|(_, c, most)| c > most) {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "cost.{field} {count} is over the most an operator may count, {most} \
                         (2^{})",
                        most.trailing_zeros()
                    ),
                ));
            }
            if op.cost.row_bytes > op.cost.bytes {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "cost.row_bytes {} must be at most cost.bytes {}: they are the bytes \
                         of those moved once a row",
                        op.cost.row_bytes, op.cost.bytes
                    ),
                ));
            }
            if (op.cost.gather_width == 0) != (op.cost.gather_set_bytes == 0) {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "cost.gather_width {} and cost.gather_set_bytes {} must both be 0 \
                         or both be positive: the rows a gather draws from and their bytes",
                        op.cost.gather_width, op.cost.gather_set_bytes
                    ),
                ));
            }
            if op.scratch_bytes > MAX_TENSOR_BYTES {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "scratch_bytes {} is over the most an operator may hold, \
                         {MAX_TENSOR_BYTES} (1 PiB)",
                        op.scratch_bytes
                    ),
                ));
            }
            if let Some(seconds) = op
                .cost
                .seconds
                .filter(|s| !(0.0..=MAX_OP_SECONDS).contains(s))
            {
                return Err(Error::invalid(
                    context(),
                    format!(
                        "cost.seconds {seconds:e} must be finite, not negative and at most \
                         {MAX_OP_SECONDS:e}"
                    ),
                ));
            }
            for &input in &op.inputs {
                let Some(tensor) = self.tensors.get(input.index()) else {
                    return Err(Error::invalid(
                        context(),
                        format!("input {} is not a tensor id", input.0),
                    ));
                };
                if !tensor.kind.is_external() && producer[input.index()].is_none() {
                    return Err(Error::invalid(
                        context(),
                        format!(
                            "reads tensor {} ({:?}) before any operator produces it \
                             (a cycle, or a missing producer)",
                            input.0, tensor.name
                        ),
                    ));
                }
            }
            for &output in &op.outputs {
                let Some(tensor) = self.tensors.get(output.index()) else {
                    return Err(Error::invalid(
                        context(),
                        format!("output {} is not a tensor id", output.0),
                    ));
                };
                if tensor.kind.is_external() {
                    return Err(Error::invalid(
                        context(),
                        format!(
                            "writes {:?}, {} tensor; inputs and parameters are \
                             not produced by operators",
                            tensor.name,
                            with_article(tensor.kind)
                        ),
                    ));
                }
                if let Some(previous) = producer[output.index()] {
                    return Err(Error::invalid(
                        context(),
                        format!(
                            "produces tensor {:?}, already produced by operator {previous}",
                            tensor.name
                        ),
                    ));
                }
                producer[output.index()] = Some(step as u32);
            }
            if let Some(k) = op.adds_into {
                self.check_adds_into(op, k)
                    .map_err(|m| Error::invalid(context(), format!("adds_into {k}: {m}")))?;
            }
        }
        for (index, tensor) in self.tensors.iter().enumerate() {
            if !tensor.kind.is_external() && producer[index].is_none() {
                return Err(Error::invalid(
                    format!("tensor {index} ({:?})", tensor.name),
                    "no operator produces it",
                ));
            }
        }
        Ok(())
    }

    /// Per operator, the input whose buffer its output takes over where
    /// the operator is that input's last reader ([`Op::adds_into`]): the
    /// least a step needs holds the two once.
    pub fn inputs_taken_over(&self) -> Vec<Option<TensorId>> {
        let mut last = vec![None; self.tensors.len()];
        for (step, op) in self.ops.iter().enumerate() {
            for &t in &op.inputs {
                last[t.index()] = Some(step);
            }
        }
        self.ops
            .iter()
            .enumerate()
            .map(|(step, op)| {
                op.adds_into
                    .and_then(|k| op.inputs.get(k as usize))
                    .copied()
                    .filter(|t| last[t.index()] == Some(step))
            })
            .collect()
    }

    /// Why operator `op` cannot add into its input `k` in place, if it
    /// cannot ([`Op::adds_into`]): that input must be an intermediate it
    /// reads once, and the operator's one output as large.
    fn check_adds_into(&self, op: &Op, k: u32) -> std::result::Result<(), String> {
        let Some(&input) = op.inputs.get(k as usize) else {
            return Err(format!("the operator has {} inputs", op.inputs.len()));
        };
        let [output] = op.outputs[..] else {
            return Err(format!(
                "an operator that adds into an input has one output, not {}",
                op.outputs.len()
            ));
        };
        let (input, output) = (self.tensor(input), self.tensor(output));
        if input.kind.is_external() {
            return Err(format!(
                "{:?} is {} tensor, whose buffer no operator may take over",
                input.name,
                with_article(input.kind)
            ));
        }
        if op.inputs.iter().filter(|&&t| t == input.id).count() > 1 {
            return Err(format!("{:?} is read more than once", input.name));
        }
        if input.bytes != output.bytes {
            return Err(format!(
                "{:?} holds {} bytes and the output {:?} {}; one takes over the other's buffer",
                input.name, input.bytes, output.name, output.bytes
            ));
        }
        Ok(())
    }

    /// Compact JSON; byte-for-byte deterministic.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a workload always serializes")
    }

    /// Reads the workload JSON format and validates it. `source` names the
    /// file in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Workload> {
        let workload: Workload = crate::json::parse(text, source)?;
        workload
            .validate()
            .map_err(|error| crate::json::within(source, error))?;
        Ok(workload)
    }

    /// SHA-256 of the compact JSON, in hex. The JSON is hashed as it is
    /// written, never held: a workload of a million tensors writes
    /// hundreds of megabytes of it.
    pub fn digest(&self) -> String {
        let mut hasher = Hashing(Sha256::new());
        serde_json::to_writer(&mut hasher, self).expect("a workload always serializes");
        hex(&hasher.0.finalize())
    }

    /// The least memory planning this workload takes
    /// ([`LEAST_PLANNING_BYTES_PER_ITEM`] a tensor or operator): a caller
    /// that knows how much the process can still take refuses a workload
    /// over it, which would otherwise run the machine out of memory part
    /// way through. Planning takes more: a GCN about 1.2 times this, a
    /// GAT three times (`docs/planner.md`, "Planning memory"), which
    /// [`crate::planner::least_planning_bytes_counted`] sees nearer, at
    /// the cost of making every tensor's choices once.
    pub fn least_planning_bytes(&self) -> u64 {
        (self.tensors.len() + self.ops.len()) as u64 * LEAST_PLANNING_BYTES_PER_ITEM
    }

    /// Total bytes of tensors of one kind.
    pub fn bytes_of_kind(&self, kind: TensorKind) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| t.bytes)
            .sum()
    }
}

/// A tensor kind with its article: "an input", "a parameter".
fn with_article(kind: TensorKind) -> String {
    let kind = kind.to_string();
    match kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => format!("an {kind}"),
        false => format!("a {kind}"),
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A writer that hashes what is written to it.
struct Hashing(Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Workload {
        let mut w = Workload::new("tiny");
        let x = w.add_tensor("x", 64, TensorKind::Input, Some(Tier::Host));
        let h = w.add_tensor("h", 64, TensorKind::Activation, None);
        w.add_op(
            "f",
            OpKind::Generic,
            Phase::Forward,
            vec![x],
            vec![h],
            Cost::seconds(1.0),
        );
        w
    }

    #[test]
    fn valid_workload_round_trips() {
        let w = tiny();
        w.validate().unwrap();
        let back = Workload::from_json(&w.to_json(), "tiny.json").unwrap();
        assert_eq!(back, w);
        assert_eq!(back.digest(), w.digest());
        // Hashed as written: the same as the hash of the whole text.
        assert_eq!(w.digest(), hex(&Sha256::digest(w.to_json().as_bytes())));
    }

    #[test]
    fn an_operator_adds_into_an_intermediate_it_reads_once_and_as_large() {
        // `f` makes `h`; `g` reads `x` and `h` and makes `s`, as large as `h`.
        let sums = |s_bytes| {
            let mut w = tiny();
            let s = w.add_tensor("s", s_bytes, TensorKind::Workspace, None);
            let op = w.add_op(
                "g",
                OpKind::Generic,
                Phase::Forward,
                vec![TensorId(0), TensorId(1)],
                vec![s],
                Cost::seconds(1.0),
            );
            (w, op.index())
        };
        let (mut w, g) = sums(64);
        w.ops[g].adds_into = Some(1);
        w.validate().unwrap();
        let back = Workload::from_json(&w.to_json(), "w.json").unwrap();
        assert_eq!(back.ops[g].adds_into, Some(1));
        for (adds_into, s_bytes, says) in [
            (5, 64, "adds_into 5: the operator has 2 inputs"),
            (
                0,
                64,
                "\"x\" is an input tensor, whose buffer no operator may take over",
            ),
            (1, 32, "\"h\" holds 64 bytes and the output \"s\" 32"),
        ] {
            let (mut w, g) = sums(s_bytes);
            w.ops[g].adds_into = Some(adds_into);
            let message = w.validate().unwrap_err().to_string();
            assert!(
                message.contains("operator 1") || message.contains("\"g\""),
                "{message}"
            );
            assert!(message.contains(says), "{message}");
        }
        // A parameter, named with its article.
        let (mut w, g) = sums(64);
        let weights = w.add_tensor("w", 64, TensorKind::Parameter, Some(Tier::Hbm));
        w.ops[g].inputs.push(weights);
        w.ops[g].adds_into = Some(2);
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("\"w\" is a parameter tensor, whose buffer"),
            "{message}"
        );
        // An input read twice by the operator.
        let (mut w, g) = sums(64);
        w.ops[g].inputs.push(TensorId(1));
        w.ops[g].adds_into = Some(1);
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("\"h\" is read more than once"),
            "{message}"
        );
        // Two outputs: which would take the buffer over is not said.
        let (mut w, g) = sums(64);
        let t = w.add_tensor("t", 64, TensorKind::Workspace, None);
        w.ops[g].outputs.push(t);
        w.ops[g].adds_into = Some(1);
        let message = w.validate().unwrap_err().to_string();
        assert!(message.contains("one output, not 2"), "{message}");
    }

    #[test]
    fn errors_name_the_culprit() {
        // A name that is empty or holds control characters (it heads the
        // summaries and ties a plan to its workload).
        for name in ["", "  ", "bad\nname"] {
            let mut w = tiny();
            w.name = name.into();
            let message = w.validate().unwrap_err().to_string();
            assert!(
                message.contains("workload field name")
                    && message.contains("expected a name of printable characters"),
                "{message}"
            );
        }
        // An operator writing an input or a parameter, named with its
        // article.
        for (kind, says) in [
            (TensorKind::Input, "\"h\", an input tensor"),
            (TensorKind::Parameter, "\"h\", a parameter tensor"),
        ] {
            let mut w = tiny();
            w.tensors[1].kind = kind;
            w.tensors[1].home = Some(Tier::Host);
            let message = w.validate().unwrap_err().to_string();
            assert!(message.contains(says), "{message}");
        }
        // More row bytes than bytes (a hand-edited workload) would be
        // priced as none.
        let mut w = tiny();
        w.ops[0].cost.row_bytes = w.ops[0].cost.bytes + 1;
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("cost.row_bytes") && message.contains("at most cost.bytes"),
            "{message}"
        );
        // A working set without its width, or a width without its bytes.
        for (width, set_bytes) in [(0, 4096), (16, 0)] {
            let mut w = tiny();
            w.ops[0].cost = w.ops[0].cost.gathering(width, set_bytes);
            let message = w.validate().unwrap_err().to_string();
            assert!(
                message.contains(&format!(
                    "cost.gather_width {width} and cost.gather_set_bytes {set_bytes} must both"
                )),
                "{message}"
            );
        }
        let mut w = tiny();
        w.ops[0].cost = w.ops[0].cost.gathering(16, 4096);
        w.validate().unwrap();
        let mut w = tiny();
        w.tensors[1].bytes = 0;
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("\"h\"") && message.contains("bytes is 0"),
            "{message}"
        );
        // A size near 2^64 wrapped the memory pass's sums: it planned a
        // peak of a few MiB.
        let mut w = tiny();
        w.tensors[1].bytes = u64::MAX;
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("\"h\"") && message.contains("bytes 18446744073709551615 is over"),
            "{message}"
        );
        let mut w = tiny();
        for k in 0..1100 {
            w.add_tensor(
                format!("big{k}"),
                MAX_TENSOR_BYTES,
                TensorKind::Activation,
                None,
            );
        }
        let message = w.validate().unwrap_err().to_string();
        assert!(message.contains("add up to"), "{message}");
        // Two tensors of one name.
        let mut w = tiny();
        w.tensors[1].name = w.tensors[0].name.clone();
        let message = w.validate().unwrap_err().to_string();
        assert!(message.contains("name is tensor 0's too"), "{message}");
        // Costs are named by field, not printed as a structure.
        let mut w = tiny();
        w.ops[0].cost = Cost::seconds(-0.5);
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("cost.seconds -5e-1 must be finite") && !message.contains("Cost {"),
            "{message}"
        );

        // Counts past any graph's are refused, named by field; at the
        // bound they are taken.
        let mut w = tiny();
        w.ops[0].cost.edges = MAX_OP_COUNT;
        w.validate().unwrap();
        w.ops[0].cost.edges = MAX_OP_COUNT + 1;
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("cost.edges 1125899906842625 is over the most an operator may count"),
            "{message}"
        );
        let mut w = tiny();
        w.ops[0].cost.bytes = MAX_WORKLOAD_BYTES;
        w.validate().unwrap();
        w.ops[0].cost.bytes = u64::MAX;
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("cost.bytes 18446744073709551615 is over")
                && message.contains("(2^60)"),
            "{message}"
        );

        let mut w = tiny();
        let y = w.add_tensor("y", 8, TensorKind::Activation, None);
        w.add_op(
            "g",
            OpKind::Generic,
            Phase::Forward,
            vec![y],
            vec![],
            Cost::default(),
        );
        let message = w.validate().unwrap_err().to_string();
        assert!(
            message.contains("\"g\"") && message.contains("before any operator"),
            "{message}"
        );

        let mut w = tiny();
        w.tensors[0].home = None;
        assert!(w.validate().unwrap_err().to_string().contains("home tier"));
    }
}
