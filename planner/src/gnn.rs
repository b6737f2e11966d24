//! Partitioned full-graph GNN workloads: GCN, GraphSAGE (mean) and GAT.
//!
//! Vertices are split into P ranges and edges into P × P blocks
//! ([`BlockCounts`]). Aggregation runs block by block and accumulates into
//! partial sums, so no step needs more than one partition's rows of any
//! layer: this is what lets a graph far larger than the device be trained.
//!
//! Per layer and partition the forward pass has aggregation (a chain of
//! block SpMMs), the linear transform, the activation and, for GAT, the
//! node scores, the edge scores (per-block SDDMM) and their edge softmax.
//! A GCN layer narrower than its input projects before it aggregates
//! ([`LayerOrder`]); GAT always does.
//! The backward pass mirrors it; each partition's weight gradient is added
//! into a running sum over the partitions before it, which a
//! gradient-accumulation step takes (summing it over devices); an Adam update
//! ends the iteration. GAT's backward through attention is one operator
//! per block whose inputs are what `fateplan_kernels::gat::aggregate_bwd`
//! needs, accumulating into its source partition's and its destination
//! partition's gradients, then per partition the node-score and linear
//! backward (`Builder::backward_gat`). Every operator's outputs are a
//! function of its inputs alone, so a plan may recompute any of them.
//! Dropout masks are not stored: the runtime regenerates them from a
//! counter-based RNG.

use crate::blocks::{BlockCounts, MAX_PARTITIONS};
use crate::workload::{ComputeClass, Cost, OpKind, Phase, TensorId, TensorKind, Workload};
use crate::{scratch, Error, Result, Tier};

/// Bytes of an f32 element.
const F32: u64 = 4;
/// Bytes of a label (int64).
pub(crate) const LABEL: u64 = 8;
/// Bytes an aggregation reads per edge, as the costs count them for every
/// model: a u32 column index and GCN's source-row scale (the mean and GAT
/// read the column alone).
const EDGE: u64 = 8;
/// Bytes per stored edge of a topology block: a u32 column index. The
/// weights are stored as scales per row ([`GnnModel::scale_rows`]).
const COLUMN: u64 = 4;
/// Bytes of a stored scale.
const SCALE: u64 = 4;
/// Bytes per row pointer of a topology block.
const ROW_POINTER: u64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GnnModel {
    Gcn,
    Sage,
    Gat,
}

impl GnnModel {
    /// Scales a block of `rows` destination rows over `src_rows` source
    /// rows stores in place of per-edge weights: GCN's `1 / sqrt(d)` per
    /// destination and per source row, GraphSAGE's `1 / d` per
    /// destination row, none for GAT (attention weighs the edges).
    pub fn scale_rows(self, rows: u64, src_rows: u64) -> u64 {
        match self {
            GnnModel::Gcn => rows + src_rows,
            GnnModel::Sage => rows,
            GnnModel::Gat => 0,
        }
    }

    pub fn parse(text: &str) -> Result<GnnModel> {
        match text.to_ascii_lowercase().as_str() {
            "gcn" => Ok(GnnModel::Gcn),
            "sage" | "graphsage" => Ok(GnnModel::Sage),
            "gat" => Ok(GnnModel::Gat),
            _ => Err(Error::invalid(
                format!("model {text:?}"),
                format!(
                    "unknown model; known models: gcn, sage, gat{}",
                    crate::units::did_you_mean(text, &["gcn", "sage", "graphsage", "gat"])
                ),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GnnModel::Gcn => "gcn",
            GnnModel::Sage => "sage",
            GnnModel::Gat => "gat",
        }
    }

    /// GCN and GAT aggregate over self loops too.
    fn self_loops(self) -> bool {
        !matches!(self, GnnModel::Sage)
    }
}

/// Which GCN layers project their input before they aggregate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayerOrder {
    /// A GCN layer whose output is narrower than its input projects first:
    /// `Â(XW) = (ÂX)W`, so the model is the same, and the aggregation then
    /// reads, moves and sums the narrower rows (DGL's `GraphConv` chooses
    /// the same way). Every other layer aggregates first.
    #[default]
    Narrower,
    /// Every layer aggregates first, then projects.
    AggregateFirst,
}

/// `"gcn".parse::<GnnModel>()`, as [`GnnModel::parse`]; the layer
/// order, the transposes and the sweeps parse the same way.
impl std::str::FromStr for GnnModel {
    type Err = Error;

    fn from_str(text: &str) -> Result<GnnModel> {
        GnnModel::parse(text)
    }
}

impl std::str::FromStr for LayerOrder {
    type Err = Error;

    fn from_str(text: &str) -> Result<LayerOrder> {
        LayerOrder::parse(text)
    }
}

impl std::str::FromStr for Transposes {
    type Err = Error;

    fn from_str(text: &str) -> Result<Transposes> {
        Transposes::parse(text)
    }
}

impl std::str::FromStr for Sweeps {
    type Err = Error;

    fn from_str(text: &str) -> Result<Sweeps> {
        Sweeps::parse(text)
    }
}

impl LayerOrder {
    pub fn parse(text: &str) -> Result<LayerOrder> {
        match text.to_ascii_lowercase().as_str() {
            "narrower" => Ok(LayerOrder::Narrower),
            "aggregate-first" => Ok(LayerOrder::AggregateFirst),
            _ => Err(Error::invalid(
                format!("layer order {text:?}"),
                "unknown layer order; known orders: narrower, aggregate-first",
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LayerOrder::Narrower => "narrower",
            LayerOrder::AggregateFirst => "aggregate-first",
        }
    }

    /// Whether a `model` layer from `d_in` to `d_out` features projects
    /// before it aggregates. GAT always does (its attention reads the
    /// projection) and has its own operators; GraphSAGE's self term needs
    /// the unprojected rows.
    pub fn projects_first(self, model: GnnModel, d_in: u64, d_out: u64) -> bool {
        self == LayerOrder::Narrower && model == GnnModel::Gcn && d_out < d_in
    }
}

/// How GCN's and GraphSAGE's transposed aggregations reach a block's
/// transpose. GAT's backward builds its blocks' transposes either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transposes {
    /// Each block's transpose is an input of its own, `adj_t[i,j]`, stored
    /// in host memory beside the block and streamed like it: the
    /// transposed aggregation is then a gather like the forward one, and
    /// no backend builds a transpose (the same bits as the scatter over
    /// the block, in the same order).
    #[default]
    Stored,
    /// The transposed aggregation reads the block itself: the CPU backend
    /// scatters over it, and the CUDA backend builds its transpose, keeping
    /// the last one ([`Cost::transpose_edges`]). The profiler times these
    /// builds with it.
    Built,
    /// GCN on a symmetric graph: block (i, j)'s transpose is block
    /// (j, i) itself (its columns in the same order, and GCN's scales,
    /// a vertex's the same as a row and as a column, in the same places),
    /// so the transposed aggregation gathers over `adj[j,i]` and nothing
    /// is stored or built for it: the same bits as `Stored`, with no
    /// `adj_t` to hold or move. Refused where a block and its mirror
    /// differ.
    Mirrored,
}

impl Transposes {
    pub fn parse(text: &str) -> Result<Transposes> {
        match text.to_ascii_lowercase().as_str() {
            "stored" => Ok(Transposes::Stored),
            "built" => Ok(Transposes::Built),
            "mirrored" => Ok(Transposes::Mirrored),
            _ => Err(Error::invalid(
                format!("transposes {text:?}"),
                "expected stored, built or mirrored",
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transposes::Stored => "stored",
            Transposes::Built => "built",
            Transposes::Mirrored => "mirrored",
        }
    }
}

/// The order of one aggregation's block products. Each output partition
/// sums its terms in ascending order of their input partition either way,
/// so both orders train the same model, bit for bit; they differ in what
/// is live at once, so in what a budget makes the plan move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sweep {
    /// Output partition after output partition: each output's sum is
    /// finished before the next starts, and an input is read once per
    /// output that reads it.
    #[default]
    Outputs,
    /// Input partition after input partition: each input is read once,
    /// into every output's partial sum, so every output's partial sum is
    /// live until the last input.
    Inputs,
    /// The outputs in this many groups of consecutive partitions (2 or
    /// more), group after group, each by inputs: an input is read once
    /// per group, and a group's partial sums are live at once.
    Groups(u32),
}

/// Which aggregations run by inputs ([`Sweep::Inputs`]): bit `l - 1` of
/// `forward` for layer `l`'s aggregation, of `backward` for its
/// transposed aggregation (the backward's). The others run by outputs.
/// GAT has forward ones alone, each run after every row's edge softmax.
/// With `groups` of 2 or more, those by inputs run in that many groups
/// of outputs ([`Sweep::Groups`]); 0 is one group (written `/1` or not
/// at all), and sweeps with no aggregation by inputs have 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sweeps {
    pub forward: u64,
    pub backward: u64,
    pub groups: u32,
}

impl Sweeps {
    /// Every aggregation by inputs.
    pub const INPUTS: Sweeps = Sweeps {
        forward: u64::MAX,
        backward: u64::MAX,
        groups: 0,
    };

    /// Most groups of outputs a sweep may have.
    pub const MAX_GROUPS: u32 = 1 << 16;

    /// `outputs`, `inputs`, or a comma-separated list of the
    /// aggregations that run by inputs: `f<l>` for layer `l`'s forward
    /// aggregation, `b<l>` for its transposed one (`f1,b2`); `inputs`
    /// or a list may end in `/N`, the groups of outputs they run in
    /// (`inputs/2`, `f1,b2/3`).
    pub fn parse(text: &str) -> Result<Sweeps> {
        let bad = |why: String| Error::invalid(format!("sweep {text:?}"), why);
        let (list, groups) = match text.split_once('/') {
            None => (text, 0),
            Some((list, groups)) => match groups.trim().parse::<u32>() {
                Ok(n) if (1..=Self::MAX_GROUPS).contains(&n) => (list, if n == 1 { 0 } else { n }),
                _ => {
                    return Err(bad(format!(
                        "{groups:?} after '/': expected the groups of outputs, from 1 to {}",
                        Self::MAX_GROUPS
                    )))
                }
            },
        };
        match list.trim().to_ascii_lowercase().as_str() {
            "outputs" if groups > 0 || text.contains('/') => {
                return Err(bad(
                    "groups of outputs are for aggregations by inputs; outputs has none".into(),
                ))
            }
            "outputs" => return Ok(Sweeps::default()),
            "inputs" => {
                return Ok(Sweeps {
                    groups,
                    ..Sweeps::INPUTS
                })
            }
            _ => {}
        }
        let mut sweeps = Sweeps {
            groups,
            ..Sweeps::default()
        };
        let entries: Vec<&str> = list.split(',').map(str::trim).collect();
        if let Some(at) = entries.iter().position(|entry| entry.is_empty()) {
            return Err(bad(format!(
                "entry {} of {} is empty; give aggregations such as f1,b2, comma-separated",
                at + 1,
                entries.len()
            )));
        }
        for entry in entries {
            let not_one = || {
                bad(format!(
                    "{entry:?} is not an aggregation; expected outputs, inputs, or a list \
                     such as f1,b2 (f<layer>: that layer's aggregation, b<layer>: its \
                     transposed aggregation), either of the last two maybe in groups of \
                     outputs (inputs/2)"
                ))
            };
            let (field, layer) = match entry.split_at_checked(1) {
                Some(("f" | "F", layer)) => (&mut sweeps.forward, layer),
                Some(("b" | "B", layer)) => (&mut sweeps.backward, layer),
                _ => return Err(not_one()),
            };
            // A word that only starts with f or b is not a layer's name.
            if layer.is_empty() || !layer.bytes().all(|c| c.is_ascii_digit()) {
                return Err(not_one());
            }
            let l: u32 = match layer.parse() {
                Ok(l) if (1..=64).contains(&l) => l,
                _ => return Err(bad(format!("{entry:?}: expected a layer from 1 to 64"))),
            };
            if *field & (1 << (l - 1)) != 0 {
                return Err(bad(format!("{entry:?} is listed twice")));
            }
            *field |= 1 << (l - 1);
        }
        Ok(sweeps)
    }

    /// The text [`Sweeps::parse`] reads back as these.
    pub fn name(self) -> String {
        let groups = match self.groups {
            0 | 1 => String::new(),
            n => format!("/{n}"),
        };
        match self {
            s if s.forward == u64::MAX && s.backward == u64::MAX => {
                return format!("inputs{groups}")
            }
            s if s.forward == 0 && s.backward == 0 => return "outputs".into(),
            _ => {}
        }
        let mut names = Vec::new();
        for (letter, bits) in [("f", self.forward), ("b", self.backward)] {
            names.extend(
                (1..=64u32)
                    .filter(|l| bits & (1 << (l - 1)) != 0)
                    .map(|l| format!("{letter}{l}")),
            );
        }
        names.join(",") + &groups
    }

    /// How layer `l`'s aggregation runs.
    pub fn forward(self, l: u32) -> Sweep {
        self.of(self.forward, l)
    }

    /// How layer `l`'s transposed aggregation runs.
    pub fn backward(self, l: u32) -> Sweep {
        self.of(self.backward, l)
    }

    fn of(self, bits: u64, l: u32) -> Sweep {
        match (1..=64).contains(&l) && bits & (1 << (l - 1)) != 0 {
            true if self.groups >= 2 => Sweep::Groups(self.groups),
            true => Sweep::Inputs,
            false => Sweep::Outputs,
        }
    }

    /// These, in `groups` groups of outputs (none where none runs by
    /// inputs; 1 is 0, one group).
    pub fn in_groups(self, groups: u32) -> Sweeps {
        let none = self.forward | self.backward == 0;
        Sweeps {
            groups: if groups == 1 || none { 0 } else { groups },
            ..self
        }
    }

    /// Those of these aggregations that `other` has too, in these groups
    /// (none where none is left by inputs).
    fn masked(self, other: Sweeps) -> Sweeps {
        let (forward, backward) = (self.forward & other.forward, self.backward & other.backward);
        Sweeps {
            forward,
            backward,
            groups: if forward | backward == 0 {
                0
            } else {
                self.groups
            },
        }
    }

    /// These with the aggregations of `other` flipped (by inputs to by
    /// outputs and back), in these groups.
    pub fn flipped(self, other: Sweeps) -> Sweeps {
        let (forward, backward) = (self.forward ^ other.forward, self.backward ^ other.backward);
        Sweeps {
            forward,
            backward,
            groups: if forward | backward == 0 {
                0
            } else {
                self.groups
            },
        }
    }

    /// Each aggregation by inputs on its own, forward ones first, by layer.
    pub fn bits(self) -> Vec<Sweeps> {
        let one = |b: u32, bits: u64| bits & (1 << b);
        let forward = (0..64).map(|b| Sweeps {
            forward: one(b, self.forward),
            ..Sweeps::default()
        });
        let backward = (0..64).map(|b| Sweeps {
            backward: one(b, self.backward),
            ..Sweeps::default()
        });
        forward
            .chain(backward)
            .filter(|s| *s != Sweeps::default())
            .collect()
    }
}

/// What to build.
#[derive(Debug, Clone, PartialEq)]
pub struct GnnSpec {
    pub model: GnnModel,
    pub layers: u32,
    pub hidden: u32,
    /// Attention heads of GAT's hidden layers (the output layer has one).
    pub heads: u32,
    pub features: u32,
    pub classes: u32,
    /// Names the graph in the workload name.
    pub graph_name: String,
    /// Which GCN layers project before they aggregate.
    pub order: LayerOrder,
    /// Whether the blocks' transposes are stored or built.
    pub transposes: Transposes,
    /// Which aggregations run by inputs ([`Sweeps::INPUTS`]: all that
    /// can).
    pub sweeps: Sweeps,
    /// The dropout probability the model trains with, in `[0, 1)`. Above
    /// 0, the first layer's projection and its backward, where it
    /// projects first (GAT, a narrower GCN layer), count the input
    /// elements they mask ([`Cost::masked`], priced by the profile's
    /// `mask_seconds_per_element`): each masks its rows into a buffer
    /// before the product (`fateplan_kernels::dense::matmul_rows_dropped`),
    /// the largest mask of a citation graph's model. The other masks
    /// are priced inside their classes' rates, which the profile
    /// measures with dropout: the hidden activations', GAT's attention's,
    /// and the first layer's where it is fused into the gather, whose
    /// operators are a class of their own
    /// ([`ComputeClass::SparseMasked`]).
    pub dropout: f32,
}

/// Most layers a model may have.
pub const MAX_LAYERS: u32 = 64;
/// Widest hidden layer.
pub const MAX_HIDDEN: u32 = 1 << 16;
/// Most attention heads of a GAT layer.
pub const MAX_HEADS: u32 = 64;

/// Attention heads of GAT's hidden layers in `fateplan plan`'s default
/// shape ([`GnnSpec::new`]).
pub const DEFAULT_HEADS: u32 = 4;

impl GnnSpec {
    /// `model` of `fateplan plan`'s default shape (3 layers of 256, 4
    /// heads in GAT's hidden layers, dropout 0.5, the default layer
    /// order, transposes and sweeps) over a graph of `features` and `classes`,
    /// named `graph_name`; change a field with struct update syntax,
    /// `GnnSpec { layers: 2, ..GnnSpec::new(...) }`.
    pub fn new(
        model: GnnModel,
        features: u32,
        classes: u32,
        graph_name: impl Into<String>,
    ) -> GnnSpec {
        GnnSpec {
            model,
            layers: 3,
            hidden: 256,
            heads: DEFAULT_HEADS,
            features,
            classes,
            graph_name: graph_name.into(),
            order: LayerOrder::default(),
            transposes: Transposes::default(),
            sweeps: Sweeps::default(),
            dropout: 0.5,
        }
    }

    /// Checks the model's shape (each field within its range, the dropout
    /// a probability, the sweeps' groups): the error names the field and
    /// its value. Building a workload checks it too.
    pub fn validate(&self) -> Result<()> {
        let checks = [
            ("layers", self.layers, 1, MAX_LAYERS),
            ("hidden", self.hidden, 1, MAX_HIDDEN),
            ("heads", self.heads, 1, MAX_HEADS),
            ("features", self.features, 1, 1 << 20),
            ("classes", self.classes, 1, 1 << 20),
        ];
        for (field, value, low, high) in checks {
            if value < low || value > high {
                return Err(Error::invalid(
                    field,
                    format!("{value} is outside {low}..={high}"),
                ));
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                "dropout",
                format!("{} is not a probability in [0, 1)", self.dropout),
            ));
        }
        if self.sweeps.groups > Sweeps::MAX_GROUPS {
            return Err(Error::invalid(
                "sweep",
                format!(
                    "{} groups of outputs: at most {}",
                    self.sweeps.groups,
                    Sweeps::MAX_GROUPS
                ),
            ));
        }
        if self.sweeps.in_groups(0) != Sweeps::INPUTS {
            let can = self.sweepable();
            let stray = self.sweeps.masked(Sweeps {
                forward: !can.forward,
                backward: !can.backward,
                groups: 0,
            });
            if stray != Sweeps::default() {
                let (letter, bits) = match stray.forward {
                    0 => ("b", stray.backward),
                    bits => ("f", bits),
                };
                let l = bits.trailing_zeros() + 1;
                let why = if l > self.layers {
                    format!("the model has {} layers", self.layers)
                } else if self.model == GnnModel::Gat {
                    "GAT has no transposed aggregation (its attention backward runs source by \
                     source)"
                        .to_string()
                } else {
                    format!("layer {l} has no transposed aggregation (it aggregates the input features first)")
                };
                return Err(Error::invalid(format!("sweep {letter}{l}"), why));
            }
        }
        // Heads split the hidden layers; a one-layer GAT has none.
        if self.model == GnnModel::Gat && self.layers > 1 && !self.hidden.is_multiple_of(self.heads)
        {
            return Err(Error::invalid(
                "heads",
                format!(
                    "hidden size {} is not divisible by {} heads",
                    self.hidden, self.heads
                ),
            ));
        }
        Ok(())
    }

    fn layer_dims(&self, layer: u32) -> (u64, u64) {
        let d_in = if layer == 1 {
            self.features
        } else {
            self.hidden
        };
        let d_out = if layer == self.layers {
            self.classes
        } else {
            self.hidden
        };
        (d_in as u64, d_out as u64)
    }

    /// The aggregations that can run by inputs: every forward one (GAT's
    /// after every row's edge softmax), and GCN's and GraphSAGE's
    /// transposed ones of the layers that have one (above the first, or
    /// projecting first). GAT's backward has none: its attention backward
    /// runs source by source already.
    pub fn sweepable(&self) -> Sweeps {
        let mut can = Sweeps::default();
        if self.model == GnnModel::Gat {
            for l in 1..=self.layers {
                can.forward |= 1 << (l - 1);
            }
            return can;
        }
        for l in 1..=self.layers {
            can.forward |= 1 << (l - 1);
            if l > 1 || self.projects_first(l) {
                can.backward |= 1 << (l - 1);
            }
        }
        can
    }

    /// The aggregations that run by inputs.
    pub fn swept(&self) -> Sweeps {
        self.sweeps.masked(self.sweepable())
    }

    /// [`GnnSpec::swept`] as [`Sweeps::parse`] reads it: `outputs`,
    /// `inputs` where every aggregation that can runs by inputs, or the
    /// list; either of the last two with its groups (`/N`).
    pub fn sweep_name(&self) -> String {
        let swept = self.swept();
        if swept == Sweeps::default() {
            return "outputs".into();
        }
        if swept.in_groups(0) == self.sweepable() {
            return Sweeps {
                groups: swept.groups,
                ..Sweeps::INPUTS
            }
            .name();
        }
        // (Masked, never every bit: the list.)
        swept.name()
    }

    /// Whether `layer` projects its input before it aggregates
    /// ([`LayerOrder`]).
    pub fn projects_first(&self, layer: u32) -> bool {
        let (d_in, d_out) = self.layer_dims(layer);
        self.order.projects_first(self.model, d_in, d_out)
    }

    fn layer_heads(&self, layer: u32) -> u64 {
        if self.model == GnnModel::Gat && layer < self.layers {
            self.heads as u64
        } else {
            1
        }
    }

    fn weight_bytes(&self, layer: u32) -> u64 {
        let (d_in, d_out) = self.layer_dims(layer);
        let matrix = match self.model {
            GnnModel::Gcn => d_in * d_out,
            GnnModel::Sage => 2 * d_in * d_out,
            GnnModel::Gat => d_in * d_out + 2 * d_out,
        };
        (matrix + d_out) * F32
    }
}

/// What a GNN workload is built from: the model and the block counts of
/// its graph, kept so that the workload can be built again by other
/// sweeps ([`crate::sizing::choose_sweeps`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GnnShape {
    pub spec: GnnSpec,
    pub counts: BlockCounts,
}

impl GnnShape {
    /// The workload with `sweeps` in place of the spec's.
    pub fn workload(&self, sweeps: Sweeps) -> Result<Workload> {
        let spec = GnnSpec {
            sweeps,
            ..self.spec.clone()
        };
        build_gnn(&spec, &self.counts)
    }
}

/// Refuses a graph and model whose byte and operation counts would pass
/// what a workload counts in (64-bit integers): the builder multiplies
/// rows by both widths of a layer, and edges by a width and the heads.
/// Every such product is bounded here, with room for the sums of a few.
fn check_counts_fit(spec: &GnnSpec, blocks: &BlockCounts) -> Result<()> {
    let nodes = u128::from(blocks.nodes);
    let edges = blocks.edges.iter().map(|&e| u128::from(e)).sum::<u128>() + nodes;
    let width = u128::from(spec.features.max(spec.hidden).max(spec.classes));
    // Heads are GAT's alone (a GCN's spec may carry the default).
    let heads = match spec.model {
        GnnModel::Gat => u128::from(spec.heads),
        _ => 1,
    };
    let most = u128::from(u64::MAX >> 4);
    let largest = [
        nodes * width * width * 2,
        edges * (width + heads) * heads * 8,
        nodes * width * heads * 8,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if largest > most {
        return Err(Error::invalid(
            "graph",
            format!(
                "{} nodes and {} edges at width {width} ({heads} heads): the workload's byte \
                 and operation counts would pass 2^60",
                blocks.nodes,
                edges - nodes,
            ),
        ));
    }
    Ok(())
}

/// The blocks a layer of a GNN over `blocks` aggregates: a pair of
/// partitions that share edges, and each partition's own. Every layer has
/// an operator and an output for each ([`build_gnn`]'s aggregations), so
/// a workload has at least `layers` times as many tensors, and as many
/// operators: a caller can refuse one too large to plan before building
/// it.
pub fn aggregated_blocks(blocks: &BlockCounts) -> u64 {
    let p = blocks.partitions;
    (0..p)
        .flat_map(|i| (0..p).map(move |j| (i, j)))
        .filter(|&(i, j)| i == j || blocks.block_edges(i, j) > 0)
        .count() as u64
}

/// Builds one training iteration of `spec` over the partitioned graph `blocks`.
pub fn build_gnn(spec: &GnnSpec, blocks: &BlockCounts) -> Result<Workload> {
    spec.validate()?;
    let p = blocks.partitions;
    if p == 0 || p > MAX_PARTITIONS {
        return Err(Error::invalid(
            "partitions",
            format!("{p} is outside 1..={MAX_PARTITIONS}"),
        ));
    }
    check_counts_fit(spec, blocks)?;
    let name = format!(
        "{}-{}x{}{}-{}-p{}",
        spec.model.name(),
        spec.layers,
        spec.hidden,
        if spec.model == GnnModel::Gat {
            format!("h{}", spec.heads)
        } else {
            String::new()
        },
        spec.graph_name,
        p
    );
    // Both orders train the same model, but a plan is for one of them
    // (where they differ).
    let narrowing = (1..=spec.layers).any(|l| {
        let (d_in, d_out) = spec.layer_dims(l);
        LayerOrder::Narrower.projects_first(spec.model, d_in, d_out)
    });
    let name = match spec.order {
        LayerOrder::AggregateFirst if narrowing => format!("{name}-aggfirst"),
        _ => name,
    };
    let name = format!("{name}{}", sweep_suffix(&spec.sweep_name()));
    if spec.transposes == Transposes::Mirrored {
        check_mirrored(spec, blocks)?;
    }
    Builder::new(spec, blocks, name).build()
}

/// Whether `Transposes::Mirrored` can hold: GCN (whose scales are a
/// vertex's own, the same as a row and as a column), every block as
/// many edges as its mirror. (The runtime checks the blocks' contents.)
fn check_mirrored(spec: &GnnSpec, blocks: &BlockCounts) -> Result<()> {
    if spec.model != GnnModel::Gcn {
        return Err(Error::invalid(
            "transposes mirrored",
            format!(
                "applies to gcn, whose symmetric normalisation gives a block's mirror its \
                 transpose's weights; {}'s are not",
                spec.model.name()
            ),
        ));
    }
    let p = blocks.partitions;
    for i in 0..p {
        for j in i + 1..p {
            let (there, back) = (blocks.block_edges(i, j), blocks.block_edges(j, i));
            if there != back {
                return Err(Error::invalid(
                    "transposes mirrored",
                    format!(
                        "the graph is not symmetric: block ({i}, {j}) holds {there} edges and \
                         block ({j}, {i}) {back}; use stored or built"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether GAT's backward runs source partition `j`'s blocks from its
/// last destination down (odd `j`) rather than up (even `j`). Turning at
/// each source, the destination a source ends on is the one the next
/// starts on wherever both have a block there (every block of a dense
/// grid): its aggregation, the aggregation's gradient and its attention
/// (with `z[j]`, the largest of a block's inputs) are read by two
/// operators in a row instead of one partition sweep apart. Each
/// `grad_src[j]` sums its destinations in this order; each `grad_dst[i]`
/// its sources upward. The backends read it to know which block starts
/// a chain (and, on several devices, which ends it).
pub fn gat_destinations_descend(j: u32) -> bool {
    j % 2 == 1
}

/// What a workload's name ends with for the sweeps named `sweep` (as
/// [`GnnSpec::sweep_name`] gives it): nothing by outputs, `-by-inputs`,
/// or the list (`-by-inputs-f1b2`), then the groups (`-in-2`).
pub fn sweep_suffix(sweep: &str) -> String {
    let (list, groups) = match sweep.split_once('/') {
        Some((list, groups)) => (list, format!("-in-{groups}")),
        None => (sweep, String::new()),
    };
    match list {
        "outputs" => String::new(),
        "inputs" => format!("-by-inputs{groups}"),
        list => format!("-by-inputs-{}{groups}", list.replace(',', "")),
    }
}

/// What a forward aggregation reads, and what follows each of its sums
/// ([`Builder::aggregate_rows`]).
struct Around<'f, 'a> {
    /// Source partition `j`'s rows.
    input: &'f dyn Fn(u32) -> TensorId,
    /// Runs as soon as row partition `i`'s sum is final, with the sum, so
    /// that what reads the sum follows it at once: by inputs, while the
    /// other rows' sums are still partial, instead of after the last of
    /// them, when every sum is held (or has been sent away to make room).
    done: &'f mut dyn FnMut(&mut Builder<'a>, u32, TensorId),
}

/// A hidden layer's activation after its bias: name, flops per element,
/// class ([`Builder::bias`]).
const RELU: (&str, f64, ComputeClass) = ("relu", 2.0, ComputeClass::Elementwise);
const ELU: (&str, f64, ComputeClass) = ("elu", 4.0, ComputeClass::Elu);

struct Builder<'a> {
    spec: &'a GnnSpec,
    blocks: &'a BlockCounts,
    w: Workload,
    parts: u32,
    /// `adjacency[i][j]`: the topology block (dst i, src j), if it has edges
    /// (diagonal blocks always exist so every row has an aggregation).
    adjacency: Vec<Vec<Option<TensorId>>>,
    /// `transposes[i][j]`: block (i, j)'s stored transpose `adj_t[i,j]`,
    /// added by the first transposed aggregation that reads it.
    transposes: Vec<Vec<Option<TensorId>>>,
}

/// The order of chains of block products: `terms[r]` are chain `r`'s
/// partitions, ascending, each chain summing them in that order. By
/// outputs, chain after chain; by inputs, partition after partition
/// (`0..parts`), each chain's term of it; in groups, the chains split
/// into that many runs of consecutive chains, each run by inputs.
/// Yields (chain, term index).
fn sweep_order(terms: &[Vec<u32>], parts: u32, sweep: Sweep) -> Vec<(usize, usize)> {
    let mut order = Vec::with_capacity(terms.iter().map(Vec::len).sum());
    match sweep {
        Sweep::Outputs => {
            for (r, chain) in terms.iter().enumerate() {
                order.extend((0..chain.len()).map(|k| (r, k)));
            }
        }
        Sweep::Inputs | Sweep::Groups(_) => {
            let groups = match sweep {
                Sweep::Groups(n) => (n as usize).clamp(1, terms.len().max(1)),
                _ => 1,
            };
            // Group `g` is chains `g * n / groups .. (g + 1) * n / groups`.
            let n = terms.len();
            let mut next = vec![0usize; n];
            for g in 0..groups {
                let chains = g * n / groups..(g + 1) * n / groups;
                for s in 0..parts {
                    for r in chains.clone() {
                        if terms[r].get(next[r]) == Some(&s) {
                            order.push((r, next[r]));
                            next[r] += 1;
                        }
                    }
                }
            }
        }
    }
    order
}

impl<'a> Builder<'a> {
    fn new(spec: &'a GnnSpec, blocks: &'a BlockCounts, name: String) -> Self {
        Builder {
            spec,
            blocks,
            w: Workload::new(name),
            parts: blocks.partitions,
            adjacency: Vec::new(),
            transposes: Vec::new(),
        }
    }

    fn rows(&self, i: u32) -> u64 {
        self.blocks.partition_nodes(i)
    }

    /// A gather of rows of `width` floats, drawing on every partition's
    /// rows over its layer (see [`Cost::gather_width`]).
    fn gathering(&self, cost: Cost, width: u64) -> Cost {
        let nodes: u64 = (0..self.parts).map(|i| self.rows(i)).sum();
        cost.gathering(width as u32, nodes * width * F32)
    }

    /// Stored edges of block (i, j), self loops included.
    fn edges(&self, i: u32, j: u32) -> u64 {
        let loops = if i == j && self.spec.model.self_loops() {
            self.rows(i)
        } else {
            0
        };
        self.blocks.block_edges(i, j) + loops
    }

    fn row_edges(&self, i: u32) -> u64 {
        (0..self.parts).map(|j| self.edges(i, j)).sum()
    }

    /// Source partitions of row `i` that have a block.
    fn sources(&self, i: u32) -> Vec<u32> {
        (0..self.parts)
            .filter(|&j| self.adjacency[i as usize][j as usize].is_some())
            .collect()
    }

    /// Destination partitions whose block has sources in `j`.
    fn destinations(&self, j: u32) -> Vec<u32> {
        (0..self.parts)
            .filter(|&i| self.adjacency[i as usize][j as usize].is_some())
            .collect()
    }

    fn adj(&self, i: u32, j: u32) -> TensorId {
        self.adjacency[i as usize][j as usize].expect("block exists")
    }

    /// Block (i, j)'s transpose, stored beside it in host memory: a CSR
    /// over the source partition's rows whose columns are destination
    /// rows, with the same scales (GraphSAGE's per destination row become
    /// per column, with a scale of 1 per row), so that the transposed
    /// aggregation is a gather like the forward one and no backend builds
    /// a transpose.
    fn adj_t(&mut self, i: u32, j: u32) -> TensorId {
        let parts = self.parts as usize;
        if self.transposes.is_empty() {
            self.transposes = vec![vec![None; parts]; parts];
        }
        if let Some(t) = self.transposes[i as usize][j as usize] {
            return t;
        }
        // Its rows are partition j's and its columns partition i's; GCN's
        // scales and GraphSAGE's (with a 1 per row) are a scale a row of
        // each (GAT builds its transposes).
        let (rows, src_rows, edges) = (self.rows(j), self.rows(i), self.edges(i, j));
        let bytes = (rows + 1) * ROW_POINTER + edges * COLUMN + (rows + src_rows) * SCALE;
        let t = self.w.add_tensor(
            format!("adj_t[{i},{j}]"),
            bytes,
            TensorKind::Input,
            Some(Tier::Host),
        );
        self.transposes[i as usize][j as usize] = Some(t);
        t
    }

    fn tensor(&mut self, name: String, bytes: u64, kind: TensorKind) -> TensorId {
        self.w.add_tensor(name, bytes.max(1), kind, None)
    }

    fn op(
        &mut self,
        name: String,
        kind: OpKind,
        phase: Phase,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        cost: Cost,
    ) {
        self.w.add_op(name, kind, phase, inputs, outputs, cost);
    }

    fn build(mut self) -> Result<Workload> {
        let (spec, parts) = (self.spec, self.parts);
        // Inputs: features, labels and topology blocks live on the host.
        let features: Vec<TensorId> = (0..parts)
            .map(|i| {
                let bytes = self.rows(i) * spec.features as u64 * F32;
                self.w.add_tensor(
                    format!("x[p{i}]"),
                    bytes.max(1),
                    TensorKind::Input,
                    Some(Tier::Host),
                )
            })
            .collect();
        let labels: Vec<TensorId> = (0..parts)
            .map(|i| {
                let bytes = self.rows(i) * LABEL;
                self.w.add_tensor(
                    format!("y[p{i}]"),
                    bytes.max(1),
                    TensorKind::Input,
                    Some(Tier::Host),
                )
            })
            .collect();
        for i in 0..parts {
            let mut row = Vec::with_capacity(parts as usize);
            for j in 0..parts {
                let edges = self.edges(i, j);
                row.push((edges > 0 || i == j).then(|| {
                    let scales = self.spec.model.scale_rows(self.rows(i), self.rows(j));
                    let bytes = (self.rows(i) + 1) * ROW_POINTER + edges * COLUMN + scales * SCALE;
                    self.w.add_tensor(
                        format!("adj[{i},{j}]"),
                        bytes,
                        TensorKind::Input,
                        Some(Tier::Host),
                    )
                }));
            }
            self.adjacency.push(row);
        }
        // Parameters: weights and Adam's two moments per layer.
        let mut weights = Vec::new();
        let mut moments = Vec::new();
        for l in 1..=spec.layers {
            let bytes = spec.weight_bytes(l);
            weights.push(
                self.w
                    .add_tensor(format!("w[l{l}]"), bytes, TensorKind::Parameter, None),
            );
            let m = self
                .w
                .add_tensor(format!("adam_m[l{l}]"), bytes, TensorKind::Parameter, None);
            let v = self
                .w
                .add_tensor(format!("adam_v[l{l}]"), bytes, TensorKind::Parameter, None);
            moments.push((m, v));
        }

        // Forward.
        let mut h: Vec<TensorId> = features.clone();
        let mut saved = Vec::new();
        for l in 1..=spec.layers {
            let layer = match spec.model {
                _ if spec.projects_first(l) => {
                    self.forward_projected(l, &h, weights[l as usize - 1])
                }
                GnnModel::Gcn | GnnModel::Sage => self.forward_conv(l, &h, weights[l as usize - 1]),
                GnnModel::Gat => self.forward_gat(l, &h, weights[l as usize - 1]),
            };
            h = layer.output.clone();
            saved.push(layer);
        }
        let logits = h;
        let classes = spec.classes as u64;
        for i in 0..parts {
            let loss = self.tensor(format!("loss[p{i}]"), F32, TensorKind::Activation);
            let bytes = self.rows(i) * (classes * F32 + LABEL);
            let flops = 5.0 * (self.rows(i) * classes) as f64;
            self.op(
                format!("loss[p{i}]"),
                OpKind::Loss,
                Phase::Forward,
                vec![logits[i as usize], labels[i as usize]],
                vec![loss],
                Cost::work(flops, bytes, ComputeClass::Softmax).over_rows(self.rows(i)),
            );
        }

        // Backward.
        let mut grad: Vec<TensorId> = Vec::new();
        for i in 0..parts {
            let bytes = self.rows(i) * classes * F32;
            let g = self.tensor(format!("grad_logits[p{i}]"), bytes, TensorKind::Gradient);
            self.op(
                format!("loss_bwd[p{i}]"),
                OpKind::LossBackward,
                Phase::Backward,
                vec![logits[i as usize], labels[i as usize]],
                vec![g],
                Cost::work(
                    5.0 * (self.rows(i) * classes) as f64,
                    2 * bytes,
                    ComputeClass::Softmax,
                )
                .over_rows(self.rows(i)),
            );
            grad.push(g);
        }
        let mut weight_grads = vec![None; spec.layers as usize];
        for l in (1..=spec.layers).rev() {
            let layer_in = if l == 1 {
                features.clone()
            } else {
                saved[l as usize - 2].output.clone()
            };
            let w = weights[l as usize - 1];
            let (next, dw) = match spec.model {
                _ if spec.projects_first(l) => {
                    self.backward_projected(l, &saved[l as usize - 1], &layer_in, &grad, w)
                }
                GnnModel::Gcn | GnnModel::Sage => {
                    self.backward_conv(l, &saved[l as usize - 1], &layer_in, &grad, w)
                }
                GnnModel::Gat => self.backward_gat(l, &saved[l as usize - 1], &layer_in, &grad, w),
            };
            weight_grads[l as usize - 1] = Some(dw);
            grad = next;
        }

        // Update.
        for l in 1..=spec.layers {
            let index = l as usize - 1;
            let (m, v) = moments[index];
            let dw = weight_grads[index].expect("every layer has a weight gradient");
            let bytes = spec.weight_bytes(l);
            self.op(
                format!("adam[l{l}]"),
                OpKind::Update,
                Phase::Update,
                vec![weights[index], dw, m, v],
                vec![],
                Cost::work(
                    10.0 * (bytes / F32) as f64,
                    7 * bytes,
                    ComputeClass::Elementwise,
                ),
            );
        }
        let largest_transpose = (0..self.w.ops.len())
            .filter(|&k| self.w.ops[k].cost.transpose_edges > 0)
            .filter_map(|k| self.op_shape(k))
            .map(|(_, shape)| scratch::transpose(shape.src_rows, shape.edges) + 8 * shape.src_rows)
            .max()
            .unwrap_or(0);
        keep_transposes(&mut self.w);
        self.count_scratch(largest_transpose);
        self.w.validate()?;
        Ok(self.w)
    }

    /// Sets each operator's [`crate::workload::Op::scratch_bytes`] and the
    /// workload's resident bytes ([`scratch`]): `largest_transpose` is the
    /// largest transpose any operator builds, with its build's counts.
    fn count_scratch(&mut self, largest_transpose: u64) {
        for k in 0..self.w.ops.len() {
            let Some((base, shape)) = self.op_shape(k) else {
                continue;
            };
            let gat = self.spec.model == GnnModel::Gat;
            let layer = name_tag(&self.w.ops[k].name, 'l').unwrap_or(self.spec.layers);
            let projects_first = !gat && self.spec.projects_first(layer);
            self.w.ops[k].scratch_bytes = scratch::op_bytes(&base, gat, projects_first, &shape);
        }
        self.w.resident_bytes = scratch::resident_bytes(self.blocks.nodes, largest_transpose);
    }

    /// Operator `k`'s name before `[` and what its temporaries depend on
    /// (`None`: a name the builder does not give).
    fn op_shape(&self, k: usize) -> Option<(String, scratch::OpShape)> {
        let op = &self.w.ops[k];
        let base = op.name.split('[').next()?.to_string();
        let tag = |key| name_tag(&op.name, key);
        let layer = tag('l').unwrap_or(self.spec.layers);
        let p = tag('p')?;
        // The block (i, j): destination i, source j.
        let (i, j) = match (tag('s'), tag('d')) {
            (Some(s), _) => (p, s),
            (None, Some(d)) => (d, p),
            (None, None) => (p, p),
        };
        let (d_in, d_out) = self.spec.layer_dims(layer);
        let rows = self.rows(p);
        let out_bytes = op.outputs.first().map_or(0, |&t| self.w.tensor(t).bytes);
        let width = match base.as_str() {
            "agg" | "agg_bwd" => out_bytes / (rows.max(1) * F32),
            "loss" => self.spec.classes as u64,
            _ => d_out,
        };
        let edges = match base.as_str() {
            "edge_softmax" => (0..self.parts).map(|s| self.edges(p, s)).max().unwrap_or(0),
            _ => self.edges(i, j),
        };
        let dropout = self.spec.dropout > 0.0;
        Some((
            base,
            scratch::OpShape {
                rows,
                src_rows: self.rows(j),
                edges,
                width,
                d_in,
                d_out,
                heads: self.spec.layer_heads(layer),
                weight_bytes: self.spec.weight_bytes(layer),
                drops_input: dropout && layer == 1,
                drops_attention: dropout && self.spec.model == GnnModel::Gat,
                builds_transpose: op.cost.transpose_edges > 0,
                halo: i != j,
            },
        ))
    }

    /// The input a GCN's or GraphSAGE's block aggregation (forward or
    /// transposed) adds into in place ([`crate::workload::Op::adds_into`]):
    /// its third, the running sum of the blocks before it (or
    /// GraphSAGE's own-row term that starts it), where it has one. Both
    /// backends take that buffer over when the executor hands it to them;
    /// GAT's aggregations are not marked.
    fn adds_into(&self, inputs: &[TensorId]) -> Option<u32> {
        (self.spec.model != GnnModel::Gat && inputs.len() == 3).then_some(2)
    }

    /// Whether layer `l`'s forward gather (GCN's, GraphSAGE's) masks its
    /// input as it gathers: the first layer's input dropout, where that
    /// layer aggregates before it projects (the backends fuse the mask
    /// into the gather; a layer that projects first masks in its
    /// projection, [`Builder::input_masks`]).
    fn gathers_masked_input(&self, l: u32) -> bool {
        l == 1
            && self.spec.dropout > 0.0
            && self.spec.model != GnnModel::Gat
            && !self.spec.projects_first(l)
    }

    /// Layer `l`'s forward aggregation of the row partitions `rows_of`
    /// (`width` wide): per row, one operator per source block, each
    /// reading the previous partial sum; returns each row's final sum.
    /// The operators run in `sweep` order: row by row, or source by
    /// source (each source's rows read once, every row's partial sum live
    /// meanwhile); each row sums its sources in ascending order either
    /// way. `edge_weights`: per row partition, a tensor each of its blocks
    /// also reads, with the bytes it holds per edge (GAT's `alpha`).
    ///
    /// `around.done(i, sum)` runs as soon as row `i`'s sum is final.
    fn aggregate_rows(
        &mut self,
        l: u32,
        width: u64,
        edge_weights: Option<(&[TensorId], u64)>,
        rows_of: &[u32],
        sweep: Sweep,
        around: Around<'_, 'a>,
    ) -> Vec<TensorId> {
        let sources: Vec<Vec<u32>> = rows_of.iter().map(|&i| self.sources(i)).collect();
        let mut partials: Vec<Option<TensorId>> = vec![None; rows_of.len()];
        for (r, k) in sweep_order(&sources, self.parts, sweep) {
            let (i, j) = (rows_of[r], sources[r][k]);
            let rows = self.rows(i);
            let partial = partials[r];
            let last = k + 1 == sources[r].len();
            let (name, kind_out) = if last {
                (format!("agg[l{l},p{i}]"), TensorKind::Activation)
            } else {
                (
                    format!("agg_partial[l{l},p{i},s{j}]"),
                    TensorKind::Workspace,
                )
            };
            let out = self.tensor(name, rows * width * F32, kind_out);
            let mut inputs = vec![self.adj(i, j), (around.input)(j)];
            inputs.extend(edge_weights.map(|(t, _)| t[i as usize]));
            inputs.extend(partial);
            let edges = self.edges(i, j);
            let edge_bytes = EDGE + width * F32 + edge_weights.map_or(0, |(_, b)| b);
            let bytes = edges * edge_bytes + 2 * rows * width * F32;
            // Weighted by attention (GAT) or by the graph alone, the
            // first layer's input masked as it is gathered where it
            // aggregates first.
            let class = if edge_weights.is_some() {
                ComputeClass::Attention
            } else if self.gathers_masked_input(l) {
                ComputeClass::SparseMasked
            } else {
                ComputeClass::Sparse
            };
            let adds = self.adds_into(&inputs);
            let cost = Cost::work(2.0 * (edges * width) as f64, bytes, class);
            // The graph's gathers, not GAT's weighted by attention.
            let cost = match edge_weights {
                Some(_) => cost,
                None => self.gathering(cost, width),
            };
            let id = self.w.add_op(
                format!("agg[l{l},p{i},s{j}]"),
                OpKind::Aggregate,
                Phase::Forward,
                inputs,
                vec![out],
                cost.over_edges(edges)
                    .over_edge_heads(edge_weights.map_or(0, |_| edges * self.spec.layer_heads(l)))
                    .over_rows(rows)
                    .with_row_bytes(match edge_weights {
                        // GAT's classes are fitted with their row bytes.
                        Some(_) => 0,
                        None => 2 * rows * width * F32,
                    }),
            );
            self.w.ops[id.index()].adds_into = adds;
            partials[r] = Some(out);
            if last {
                (around.done)(self, i, out);
            }
        }
        partials
            .into_iter()
            .map(|p| p.expect("every row has its diagonal block"))
            .collect()
    }

    fn forward_conv(&mut self, l: u32, h: &[TensorId], w: TensorId) -> Layer {
        let spec = self.spec;
        let (d_in, _) = spec.layer_dims(l);
        // Each row is projected as soon as its sum is final: by outputs
        // before the next row sums, by inputs while the rows after it
        // still do.
        let mut projected = vec![None; self.parts as usize];
        let all: Vec<u32> = (0..self.parts).collect();
        let sums = self.aggregate_rows(
            l,
            d_in,
            None,
            &all,
            spec.swept().forward(l),
            Around {
                input: &|j| h[j as usize],
                done: &mut |b, i, agg| {
                    projected[i as usize] = Some(b.project_sum(l, i, h[i as usize], agg, w));
                },
            },
        );
        let mut layer = Layer::default();
        for (agg, projected) in sums.into_iter().zip(projected) {
            let (z, out, mask) = projected.expect("each sum is projected as it ends");
            layer.agg.push(agg);
            layer.z.push(z);
            layer.output.push(out);
            layer.mask.extend(mask);
        }
        layer
    }

    /// Row partition `i`'s projection of its sum `agg` in an
    /// aggregate-first layer `l` (GraphSAGE's of its own rows `h` too),
    /// then the ReLU below the last layer, with its mask
    /// ([`Builder::relu_mask`]): `(z, output, mask)`.
    fn project_sum(
        &mut self,
        l: u32,
        i: u32,
        h: TensorId,
        agg: TensorId,
        w: TensorId,
    ) -> (TensorId, TensorId, Option<TensorId>) {
        let spec = self.spec;
        let (d_in, d_out) = spec.layer_dims(l);
        let last = l == spec.layers;
        let rows = self.rows(i);
        let z = self.tensor(
            format!("z[l{l},p{i}]"),
            rows * d_out * F32,
            TensorKind::Activation,
        );
        let (inputs, k) = match spec.model {
            GnnModel::Sage => (vec![h, agg, w], 2 * d_in),
            _ => (vec![agg, w], d_in),
        };
        self.op(
            format!("linear[l{l},p{i}]"),
            OpKind::Linear,
            Phase::Forward,
            inputs,
            vec![z],
            Cost::work(
                2.0 * (rows * k * d_out) as f64,
                rows * (k + d_out) * F32,
                ComputeClass::Dense,
            ),
        );
        if last {
            return (z, z, None);
        }
        let out = self.tensor(
            format!("h[l{l},p{i}]"),
            rows * d_out * F32,
            TensorKind::Activation,
        );
        self.w.tensors[out.index()].checkpoint = true;
        self.op(
            format!("relu[l{l},p{i}]"),
            OpKind::Activation,
            Phase::Forward,
            vec![z],
            vec![out],
            Cost::work(
                (rows * d_out) as f64,
                2 * rows * d_out * F32,
                ComputeClass::Elementwise,
            ),
        );
        let mask = self.relu_mask((l, i), vec![z]);
        (z, out, Some(mask))
    }

    /// Row partition `i`'s ReLU mask in hidden layer `l`: one bit an
    /// element, set where the pre-activation is positive (`inputs`: `z`,
    /// or in a layer that projects first the aggregation and the weights,
    /// whose bias it adds first), in 64-bit words ([`mask_bytes`]). The
    /// ReLU's backward reads it in place of the pre-activation, a 32nd of
    /// its bytes: the pre-activation dies at the ReLU, and what the
    /// backward keeps, moves or recomputes is the mask. An operator of its
    /// own, apart from the ReLU, so that recomputing it re-creates the
    /// mask alone.
    fn relu_mask(&mut self, (l, i): (u32, u32), inputs: Vec<TensorId>) -> TensorId {
        let (_, d_out) = self.spec.layer_dims(l);
        let elements = self.rows(i) * d_out;
        // The bias read and added, as the ReLU's own.
        let biased = inputs.len() == 2;
        let (per_element, bias_bytes) = match biased {
            true => (2.0, d_out * F32),
            false => (1.0, 0),
        };
        let mask = self.tensor(
            format!("relu_bits[l{l},p{i}]"),
            mask_bytes(elements),
            TensorKind::Activation,
        );
        // Kept, as the layer outputs are, by the peers that recompute what
        // lies between checkpoints: a 32nd of a layer's bytes, whose
        // recomputation would re-run the layer.
        self.w.tensors[mask.index()].checkpoint = true;
        self.op(
            format!("relu_mask[l{l},p{i}]"),
            OpKind::Activation,
            Phase::Forward,
            inputs,
            vec![mask],
            Cost::work(
                per_element * elements as f64,
                elements * F32 + bias_bytes + mask_bytes(elements),
                ComputeClass::Elementwise,
            ),
        );
        mask
    }

    fn backward_conv(
        &mut self,
        l: u32,
        layer: &Layer,
        layer_in: &[TensorId],
        grad_out: &[TensorId],
        w: TensorId,
    ) -> (Vec<TensorId>, TensorId) {
        let spec = self.spec;
        let (d_in, d_out) = spec.layer_dims(l);
        let last = l == spec.layers;
        let sage = spec.model == GnnModel::Sage;
        let mut dagg = Vec::new();
        let mut dself = Vec::new();
        let mut dw_parts = Vec::new();
        for i in 0..self.parts {
            let rows = self.rows(i);
            let dz = if last {
                grad_out[i as usize]
            } else {
                let dz = self.tensor(
                    format!("grad_z[l{l},p{i}]"),
                    rows * d_out * F32,
                    TensorKind::Gradient,
                );
                self.op(
                    format!("relu_bwd[l{l},p{i}]"),
                    OpKind::ActivationBackward,
                    Phase::Backward,
                    vec![grad_out[i as usize], layer.mask[i as usize]],
                    vec![dz],
                    Cost::work(
                        (rows * d_out) as f64,
                        2 * rows * d_out * F32 + mask_bytes(rows * d_out),
                        ComputeClass::Elementwise,
                    ),
                );
                dz
            };
            let dw = self.tensor(
                format!("grad_w[l{l},p{i}]"),
                spec.weight_bytes(l),
                TensorKind::Gradient,
            );
            let mut outputs = vec![dw];
            let k = if sage { 2 * d_in } else { d_in };
            let mut inputs = vec![dz, layer.agg[i as usize], w];
            if sage {
                inputs.insert(1, layer_in[i as usize]);
            }
            self.running_sum(&mut inputs, &dw_parts);
            if l > 1 {
                let g = self.tensor(
                    format!("grad_agg[l{l},p{i}]"),
                    rows * d_in * F32,
                    TensorKind::Gradient,
                );
                outputs.push(g);
                dagg.push(g);
                if sage {
                    let s = self.tensor(
                        format!("grad_self[l{l},p{i}]"),
                        rows * d_in * F32,
                        TensorKind::Gradient,
                    );
                    outputs.push(s);
                    dself.push(s);
                }
            }
            // The first layer writes no input gradient.
            let (passes, streams) = if l > 1 { (4.0, 2) } else { (2.0, 1) };
            self.op(
                format!("linear_bwd[l{l},p{i}]"),
                OpKind::LinearBackward,
                Phase::Backward,
                inputs,
                outputs,
                Cost::work(
                    passes * (rows * k * d_out) as f64,
                    streams * rows * (k + d_out) * F32,
                    ComputeClass::Dense,
                ),
            );
            dw_parts.push(dw);
        }
        let dw = self.accumulate_weight_grad(l, dw_parts);
        if l == 1 {
            return (Vec::new(), dw);
        }
        // Gradient to the previous layer's output: transpose aggregation,
        // accumulated over destination rows for each source partition j.
        let own = |j: u32| sage.then(|| dself[j as usize]);
        let sweep = self.spec.swept().backward(l);
        let dh = self.transposed_chains(l, d_in, &dagg, ("grad_h", l - 1), &own, sweep);
        (dh, dw)
    }

    /// Each source partition `j`'s transposed aggregation in layer `l`: one
    /// `agg_bwd[l,p_j,d_i]` per destination block, `width` wide, adding
    /// `Âᵀ grads[i]` into a partial sum named `name[l<tag>,p_j]` at the end
    /// (`name_partial[l<tag>,p_j,d_i]` before); `own` (GraphSAGE's self
    /// term) starts the sum.
    ///
    /// Every source partition's chain, the operators in `sweep` order:
    /// source by source, or destination by destination (each gradient
    /// read once, every source's partial sum live meanwhile). Each source
    /// sums its destinations in ascending order either way.
    fn transposed_chains(
        &mut self,
        l: u32,
        width: u64,
        grads: &[TensorId],
        (name, tag): (&str, u32),
        own: &dyn Fn(u32) -> Option<TensorId>,
        sweep: Sweep,
    ) -> Vec<TensorId> {
        let destinations: Vec<Vec<u32>> = (0..self.parts).map(|j| self.destinations(j)).collect();
        let mut partials: Vec<Option<TensorId>> = vec![None; self.parts as usize];
        for (r, k) in sweep_order(&destinations, self.parts, sweep) {
            let (j, i) = (r as u32, destinations[r][k]);
            let rows = self.rows(j);
            let partial = partials[r];
            let (tensor_name, kind) = if k + 1 == destinations[r].len() {
                (format!("{name}[l{tag},p{j}]"), TensorKind::Gradient)
            } else {
                (
                    format!("{name}_partial[l{tag},p{j},d{i}]"),
                    TensorKind::Workspace,
                )
            };
            let out = self.tensor(tensor_name, rows * width * F32, kind);
            let (block, stored) = match self.spec.transposes {
                Transposes::Stored => (self.adj_t(i, j), true),
                // The same gather, over the mirrored block.
                Transposes::Mirrored => (self.adj(j, i), true),
                Transposes::Built => (self.adj(i, j), false),
            };
            let mut inputs = vec![block, grads[i as usize]];
            if k == 0 {
                inputs.extend(own(j));
            }
            inputs.extend(partial);
            let edges = self.edges(i, j);
            let bytes = edges * (EDGE + width * F32) + 2 * rows * width * F32;
            // The rows walked: the transpose's (the source partition's),
            // or the block's (the destination's), each scattered from by
            // the CPU's scatter. (The CUDA backend gathers over the
            // transpose it builds, the source's rows; its profile runs in
            // one partition and fits no time per row.)
            let walked = if stored { rows } else { self.rows(i) };
            // A gather over the stored transpose, as the forward, or a
            // scatter over the block.
            let cost = match stored {
                true => self.gathering(
                    Cost::work(2.0 * (edges * width) as f64, bytes, ComputeClass::Sparse),
                    width,
                ),
                false => Cost::work(2.0 * (edges * width) as f64, bytes, ComputeClass::Scatter)
                    .transposing(edges),
            };
            let adds = self.adds_into(&inputs);
            let id = self.w.add_op(
                format!("agg_bwd[l{l},p{j},d{i}]"),
                OpKind::AggregateBackward,
                Phase::Backward,
                inputs,
                vec![out],
                cost.over_edges(edges)
                    .over_rows(walked)
                    .with_row_bytes(2 * rows * width * F32),
            );
            self.w.ops[id.index()].adds_into = adds;
            partials[r] = Some(out);
        }
        partials
            .into_iter()
            .map(|p| p.expect("every partition has its diagonal block"))
            .collect()
    }

    /// Partition `i`'s projection `z = h W`, without the bias: GAT's and a
    /// projecting-first GCN layer's.
    fn projection(&mut self, l: u32, i: u32, h: TensorId, w: TensorId) -> TensorId {
        let (d_in, d_out) = self.spec.layer_dims(l);
        let rows = self.rows(i);
        let z = self.tensor(
            format!("z[l{l},p{i}]"),
            rows * d_out * F32,
            TensorKind::Activation,
        );
        self.op(
            format!("linear[l{l},p{i}]"),
            OpKind::Linear,
            Phase::Forward,
            vec![h, w],
            vec![z],
            Cost::work(
                2.0 * (rows * d_in * d_out) as f64,
                rows * (d_in + d_out) * F32,
                ComputeClass::Dense,
            )
            .masking(self.input_masks(l, rows)),
        );
        z
    }

    /// What a projection of partition rows `rows` of layer `l`, or its
    /// backward, masks ([`Cost::masked`]): with dropout, the first
    /// layer's input features.
    fn input_masks(&self, l: u32, rows: u64) -> u64 {
        let (d_in, _) = self.spec.layer_dims(l);
        if l == 1 && self.spec.dropout > 0.0 {
            rows * d_in
        } else {
            0
        }
    }

    /// The projection's backward for partition `p` (`inputs`: its
    /// gradient, the layer's input, the weights, then what the bias's
    /// gradient comes from): the weight gradient's part and, above the
    /// first layer, the input's gradient. `more_bytes`: what the
    /// operator reads beyond the rows and their gradient.
    fn projection_bwd(
        &mut self,
        l: u32,
        p: u32,
        mut inputs: Vec<TensorId>,
        more_bytes: u64,
        dw_parts: &[TensorId],
    ) -> (TensorId, Option<TensorId>) {
        let (d_in, d_out) = self.spec.layer_dims(l);
        let rows = self.rows(p);
        self.running_sum(&mut inputs, dw_parts);
        let dw = self.tensor(
            format!("grad_w[l{l},p{p}]"),
            self.spec.weight_bytes(l),
            TensorKind::Gradient,
        );
        let dh = (l > 1).then(|| {
            self.tensor(
                format!("grad_h[l{},p{p}]", l - 1),
                rows * d_in * F32,
                TensorKind::Gradient,
            )
        });
        let (passes, streams) = if l > 1 { (4.0, 2) } else { (2.0, 1) };
        let mut outputs = vec![dw];
        outputs.extend(dh);
        self.op(
            format!("linear_bwd[l{l},p{p}]"),
            OpKind::LinearBackward,
            Phase::Backward,
            inputs,
            outputs,
            Cost::work(
                passes * (rows * d_in * d_out) as f64,
                streams * rows * (d_in + d_out) * F32 + more_bytes,
                ComputeClass::Dense,
            )
            .masking(self.input_masks(l, rows)),
        );
        (dw, dh)
    }

    /// A GCN layer that projects first ([`LayerOrder`]): per partition
    /// the projection `z = h W` (no bias), then per row partition the
    /// aggregation of the projected rows (a chain of block products, `d_out`
    /// wide) and the bias with the ReLU (hidden layers) or alone (the last
    /// layer), as GAT's layer without the attention.
    ///
    /// Every partition is projected first: with several devices, each
    /// source's rows go out to the others before the aggregation starts.
    /// Each row's bias follows its sum at once.
    fn forward_projected(&mut self, l: u32, h: &[TensorId], w: TensorId) -> Layer {
        let spec = self.spec;
        let (_, d_out) = spec.layer_dims(l);
        let z: Vec<TensorId> = (0..self.parts)
            .map(|i| self.projection(l, i, h[i as usize], w))
            .collect();
        let mut finished = vec![None; self.parts as usize];
        let all: Vec<u32> = (0..self.parts).collect();
        let sums = self.aggregate_rows(
            l,
            d_out,
            None,
            &all,
            spec.swept().forward(l),
            Around {
                input: &|j| z[j as usize],
                done: &mut |b, i, agg| finished[i as usize] = Some(b.bias((l, i), agg, w, RELU)),
            },
        );
        let mut layer = Layer::default();
        for ((z, agg), finished) in z.into_iter().zip(sums).zip(finished) {
            let (out, mask) = finished.expect("each sum is biased as it ends");
            layer.z.push(z);
            layer.agg.push(agg);
            layer.output.push(out);
            layer.mask.extend(mask);
        }
        layer
    }

    /// Row partition `i`'s bias on its sum `agg` in a layer `l` that
    /// projects first (GAT's layers all do), with the activation below
    /// the last layer, `hidden` (its name, flops per element and class):
    /// the output, and a ReLU's mask ([`Builder::relu_mask`]).
    fn bias(
        &mut self,
        (l, i): (u32, u32),
        agg: TensorId,
        w: TensorId,
        hidden: (&str, f64, ComputeClass),
    ) -> (TensorId, Option<TensorId>) {
        let spec = self.spec;
        let (_, d_out) = spec.layer_dims(l);
        let last = l == spec.layers;
        let rows = self.rows(i);
        let (name, op_name, flops, class) = if last {
            let name = format!("out[l{l},p{i}]");
            (
                name,
                format!("bias[l{l},p{i}]"),
                1.0,
                ComputeClass::Elementwise,
            )
        } else {
            let (act, flops, class) = hidden;
            (
                format!("h[l{l},p{i}]"),
                format!("{act}[l{l},p{i}]"),
                flops,
                class,
            )
        };
        let out = self.tensor(name, rows * d_out * F32, TensorKind::Activation);
        if !last {
            self.w.tensors[out.index()].checkpoint = true;
        }
        self.op(
            op_name,
            OpKind::Activation,
            Phase::Forward,
            vec![agg, w],
            vec![out],
            Cost::work(
                flops * (rows * d_out) as f64,
                (2 * rows * d_out + d_out) * F32,
                class,
            ),
        );
        let mask = (!last && hidden.0 == RELU.0).then(|| self.relu_mask((l, i), vec![agg, w]));
        (out, mask)
    }

    /// The backward of [`Builder::forward_projected`]: per partition the
    /// ReLU's backward through its mask (hidden layers), per source
    /// partition the transposed aggregation into the projection's
    /// gradient, then per partition the projection's backward (the bias's
    /// gradient from the aggregation's).
    fn backward_projected(
        &mut self,
        l: u32,
        layer: &Layer,
        layer_in: &[TensorId],
        grad_out: &[TensorId],
        w: TensorId,
    ) -> (Vec<TensorId>, TensorId) {
        let spec = self.spec;
        let (_, d_out) = spec.layer_dims(l);
        let last = l == spec.layers;
        let mut dout = Vec::new();
        for i in 0..self.parts {
            let rows = self.rows(i);
            if last {
                dout.push(grad_out[i as usize]);
                continue;
            }
            let g = self.tensor(
                format!("grad_agg[l{l},p{i}]"),
                rows * d_out * F32,
                TensorKind::Gradient,
            );
            self.op(
                format!("relu_bwd[l{l},p{i}]"),
                OpKind::ActivationBackward,
                Phase::Backward,
                vec![grad_out[i as usize], layer.mask[i as usize]],
                vec![g],
                Cost::work(
                    (rows * d_out) as f64,
                    2 * rows * d_out * F32 + mask_bytes(rows * d_out),
                    ComputeClass::Elementwise,
                ),
            );
            dout.push(g);
        }
        let sweep = self.spec.swept().backward(l);
        let dz = self.transposed_chains(l, d_out, &dout, ("grad_z", l), &|_| None, sweep);
        let mut dh = Vec::new();
        let mut dw_parts = Vec::new();
        for p in 0..self.parts {
            let inputs = vec![dz[p as usize], layer_in[p as usize], w, dout[p as usize]];
            // The aggregation's gradient too, for the bias's.
            let more_bytes = self.rows(p) * d_out * F32;
            let (dw, g) = self.projection_bwd(l, p, inputs, more_bytes, &dw_parts);
            dh.extend(g);
            dw_parts.push(dw);
        }
        let dw = self.accumulate_weight_grad(l, dw_parts);
        (dh, dw)
    }

    /// Chains a partition's `linear_bwd` to those of the partitions before
    /// it (`parts`, their weight gradients so far): the last of them is
    /// added as an input, into which this one adds its own, so that each
    /// `grad_w[l,p]` is the running sum through partition `p` and one at
    /// a time is live, whatever the partition count.
    fn running_sum(&self, inputs: &mut Vec<TensorId>, parts: &[TensorId]) {
        inputs.extend(parts.last());
    }

    /// The weight gradient `grad_w[l]` from the running sum through the
    /// last partition (`parts`' last, see [`Self::running_sum`]): where
    /// several devices train, the sum over them. It is charged the
    /// additions too, which the `linear_bwd` operators make: their costs
    /// stay their products', the dense class the profile measures.
    fn accumulate_weight_grad(&mut self, l: u32, parts: Vec<TensorId>) -> TensorId {
        let bytes = self.spec.weight_bytes(l);
        let dw = self.tensor(format!("grad_w[l{l}]"), bytes, TensorKind::Gradient);
        let count = parts.len() as u64;
        self.op(
            format!("grad_accumulate[l{l}]"),
            OpKind::GradAccumulate,
            Phase::Backward,
            parts.last().copied().into_iter().collect(),
            vec![dw],
            Cost::work(
                (count * bytes / F32) as f64,
                (count + 1) * bytes,
                ComputeClass::Elementwise,
            ),
        );
        dw
    }

    /// GAT's forward: per partition the projection `z` and the node
    /// scores `[a_src | a_dst]`; per block the edge scores; per row
    /// partition the edge softmax over its blocks, the attention-weighted
    /// aggregation (a chain of block products) and the bias with the ELU
    /// (hidden layers) or alone (the last layer).
    fn forward_gat(&mut self, l: u32, h: &[TensorId], w: TensorId) -> Layer {
        let spec = self.spec;
        let (_, d_out) = spec.layer_dims(l);
        let heads = spec.layer_heads(l);
        let mut layer = Layer::default();
        for i in 0..self.parts {
            let rows = self.rows(i);
            let z = self.projection(l, i, h[i as usize], w);
            let scores = self.tensor(
                format!("node_score[l{l},p{i}]"),
                rows * 2 * heads * F32,
                TensorKind::Activation,
            );
            self.op(
                format!("node_scores[l{l},p{i}]"),
                OpKind::AttentionScore,
                Phase::Forward,
                vec![z, w],
                vec![scores],
                Cost::work(
                    4.0 * (rows * d_out) as f64,
                    (rows * (d_out + 2 * heads) + 2 * d_out) * F32,
                    ComputeClass::NodeScores,
                ),
            );
            layer.z.push(z);
            layer.node_score.push(scores);
        }
        let zs = layer.z.clone();
        let weights = heads * F32;
        // As many groups as rows or more is the order by outputs, as in
        // the other models.
        let sweep = match spec.swept().forward(l) {
            Sweep::Groups(n) if n >= self.parts => Sweep::Outputs,
            sweep => sweep,
        };
        if sweep == Sweep::Outputs {
            // Row by row: each row's attention, then its sum and its
            // activation.
            for i in 0..self.parts {
                let alpha = self.attention(l, i, &layer.node_score);
                layer.alpha.push(alpha);
                let agg = self.aggregate_rows(
                    l,
                    d_out,
                    Some((&layer.alpha, weights)),
                    &[i],
                    sweep,
                    Around {
                        input: &|j| zs[j as usize],
                        done: &mut |_, _, _| {},
                    },
                )[0];
                let (out, _) = self.bias((l, i), agg, w, ELU);
                layer.agg.push(agg);
                layer.output.push(out);
            }
            return layer;
        }
        // By inputs: every row's attention first (an edge softmax reads
        // all of its row's blocks), then the sums source by source, each
        // row's activation as soon as its sum is final.
        for i in 0..self.parts {
            let alpha = self.attention(l, i, &layer.node_score);
            layer.alpha.push(alpha);
        }
        let all: Vec<u32> = (0..self.parts).collect();
        let mut outputs = vec![None; self.parts as usize];
        let sums = self.aggregate_rows(
            l,
            d_out,
            Some((&layer.alpha, weights)),
            &all,
            sweep,
            Around {
                input: &|j| zs[j as usize],
                done: &mut |b, i, agg| outputs[i as usize] = Some(b.bias((l, i), agg, w, ELU).0),
            },
        );
        for (agg, out) in sums.into_iter().zip(outputs) {
            layer.agg.push(agg);
            layer
                .output
                .push(out.expect("each sum is activated as it ends"));
        }
        layer
    }

    /// Row partition `i`'s attention in GAT layer `l`: one `sddmm` per
    /// source block (its edge scores from both ends' node scores), then
    /// the row's `edge_softmax` over all of them: `alpha[l,pi]`.
    fn attention(&mut self, l: u32, i: u32, node_score: &[TensorId]) -> TensorId {
        let heads = self.spec.layer_heads(l);
        let rows = self.rows(i);
        let sources = self.sources(i);
        let mut scores = Vec::new();
        for &j in &sources {
            let edges = self.edges(i, j);
            let s = self.tensor(
                format!("score[l{l},p{i},s{j}]"),
                edges * heads * F32,
                TensorKind::Activation,
            );
            let mut inputs = vec![self.adj(i, j), node_score[i as usize]];
            if j != i {
                inputs.push(node_score[j as usize]);
            }
            self.op(
                format!("sddmm[l{l},p{i},s{j}]"),
                OpKind::AttentionScore,
                Phase::Forward,
                inputs,
                vec![s],
                Cost::work(
                    2.0 * (edges * heads) as f64,
                    edges * (EDGE + heads * F32) + (rows + self.rows(j)) * 2 * heads * F32,
                    ComputeClass::EdgeScores,
                )
                .over_edges(edges)
                .over_edge_heads(edges * heads)
                .over_rows(rows),
            );
            scores.push(s);
        }
        let row_edges = self.row_edges(i);
        let alpha = self.tensor(
            format!("alpha[l{l},p{i}]"),
            row_edges * heads * F32,
            TensorKind::Activation,
        );
        // The blocks give the rows' edge ranges.
        let mut inputs: Vec<TensorId> = sources.iter().map(|&j| self.adj(i, j)).collect();
        inputs.extend(&scores);
        self.op(
            format!("edge_softmax[l{l},p{i}]"),
            OpKind::EdgeSoftmax,
            Phase::Forward,
            inputs,
            vec![alpha],
            Cost::work(
                5.0 * (row_edges * heads) as f64,
                3 * row_edges * heads * F32 + sources.len() as u64 * (rows + 1) * ROW_POINTER,
                ComputeClass::EdgeSoftmax,
            )
            .over_edges(row_edges)
            .over_edge_heads(row_edges * heads)
            .over_rows(sources.len() as u64 * rows),
        );
        alpha
    }

    /// GAT's backward. Per block `(i, j)`, source-major (each source's
    /// destinations up or down in turn: [`gat_destinations_descend`]), one
    /// `attention_bwd` takes exactly what the block's backward needs (the
    /// block, `alpha[i]`, the node scores of `i` and `j`, `z[j]`, the
    /// gradient and the forward output of the aggregation of `i`) and
    /// accumulates two chains: `grad_src[j]` (`rows_j × (d_out + H)`: the
    /// value path into `z[j]`, then the score path into `a_src[j]`) over
    /// the destination blocks of `j`, and `grad_dst[i]` (`rows_i × H`: the
    /// score path into `a_dst[i]`) over the source blocks of `i`. Per
    /// partition, `node_scores_bwd` adds the score path to `grad_z` and
    /// gives the attention vectors' and the bias's gradients (`grad_att`),
    /// and `linear_bwd` the projection's.
    fn backward_gat(
        &mut self,
        l: u32,
        layer: &Layer,
        layer_in: &[TensorId],
        grad_out: &[TensorId],
        w: TensorId,
    ) -> (Vec<TensorId>, TensorId) {
        let spec = self.spec;
        let (_, d_out) = spec.layer_dims(l);
        let heads = spec.layer_heads(l);
        let last = l == spec.layers;
        let parts = self.parts as usize;
        // Gradient of the aggregation (the bias passes it through).
        let mut dout = Vec::new();
        for i in 0..self.parts {
            let rows = self.rows(i);
            if last {
                dout.push(grad_out[i as usize]);
                continue;
            }
            let g = self.tensor(
                format!("grad_agg[l{l},p{i}]"),
                rows * d_out * F32,
                TensorKind::Gradient,
            );
            self.op(
                format!("elu_bwd[l{l},p{i}]"),
                OpKind::ActivationBackward,
                Phase::Backward,
                vec![grad_out[i as usize], layer.agg[i as usize], w],
                vec![g],
                Cost::work(
                    4.0 * (rows * d_out) as f64,
                    (3 * rows * d_out + d_out) * F32,
                    ComputeClass::Elu,
                ),
            );
            dout.push(g);
        }
        let last_source: Vec<u32> = (0..self.parts)
            .map(|i| {
                *self
                    .sources(i)
                    .last()
                    .expect("every row has its diagonal block")
            })
            .collect();
        let mut dst_partial: Vec<Option<TensorId>> = vec![None; parts];
        let mut grad_src = Vec::new();
        for j in 0..self.parts {
            let rows_j = self.rows(j);
            let mut destinations = self.destinations(j);
            if gat_destinations_descend(j) {
                destinations.reverse();
            }
            let mut src_partial: Option<TensorId> = None;
            for (k, &i) in destinations.iter().enumerate() {
                let rows_i = self.rows(i);
                let (src_name, src_kind) = if k + 1 == destinations.len() {
                    (format!("grad_src[l{l},p{j}]"), TensorKind::Gradient)
                } else {
                    (
                        format!("grad_src_partial[l{l},p{j},d{i}]"),
                        TensorKind::Workspace,
                    )
                };
                let src_out = self.tensor(src_name, rows_j * (d_out + heads) * F32, src_kind);
                let (dst_name, dst_kind) = if last_source[i as usize] == j {
                    (format!("grad_dst[l{l},p{i}]"), TensorKind::Gradient)
                } else {
                    (
                        format!("grad_dst_partial[l{l},p{i},s{j}]"),
                        TensorKind::Workspace,
                    )
                };
                let dst_out = self.tensor(dst_name, rows_i * heads * F32, dst_kind);
                let mut inputs = vec![
                    self.adj(i, j),
                    layer.alpha[i as usize],
                    layer.node_score[i as usize],
                ];
                if i != j {
                    inputs.push(layer.node_score[j as usize]);
                }
                inputs.extend([layer.z[j as usize], dout[i as usize], layer.agg[i as usize]]);
                inputs.extend(src_partial);
                inputs.extend(dst_partial[i as usize]);
                let edges = self.edges(i, j);
                // Per edge: the block, alpha, du written and read, z[j]
                // gathered and the gradient row scattered; per row: the
                // row dot products, node scores and partial sums.
                let bytes = edges * (2 * EDGE + 3 * heads * F32 + 2 * d_out * F32)
                    + (rows_i + rows_j) * (2 * d_out + 4 * heads) * F32;
                let flops = 4.0 * (edges * d_out) as f64
                    + 8.0 * (edges * heads) as f64
                    + 2.0 * (rows_i * d_out) as f64;
                self.op(
                    format!("attention_bwd[l{l},p{j},d{i}]"),
                    OpKind::AttentionBackward,
                    Phase::Backward,
                    inputs,
                    vec![src_out, dst_out],
                    Cost::work(flops, bytes, ComputeClass::AttentionBackward)
                        .over_edges(edges)
                        .over_edge_heads(edges * heads)
                        .over_rows(rows_i)
                        .transposing(edges),
                );
                src_partial = Some(src_out);
                dst_partial[i as usize] = Some(dst_out);
            }
            grad_src.push(src_partial.expect("every partition has its diagonal block"));
        }
        let grad_dst: Vec<TensorId> = dst_partial
            .into_iter()
            .map(|t| t.expect("every partition has its diagonal block"))
            .collect();
        let mut dh = Vec::new();
        let mut dw_parts = Vec::new();
        for p in 0..self.parts {
            let rows = self.rows(p);
            let dz = self.tensor(
                format!("grad_z[l{l},p{p}]"),
                rows * d_out * F32,
                TensorKind::Gradient,
            );
            let datt = self.tensor(
                format!("grad_att[l{l},p{p}]"),
                3 * d_out * F32,
                TensorKind::Gradient,
            );
            self.op(
                format!("node_scores_bwd[l{l},p{p}]"),
                OpKind::AttentionBackward,
                Phase::Backward,
                vec![
                    grad_src[p as usize],
                    grad_dst[p as usize],
                    layer.z[p as usize],
                    w,
                    dout[p as usize],
                ],
                vec![dz, datt],
                Cost::work(
                    9.0 * (rows * d_out) as f64,
                    (rows * (4 * d_out + 2 * heads) + 5 * d_out) * F32,
                    ComputeClass::NodeScoresBackward,
                ),
            );
            let inputs = vec![dz, layer_in[p as usize], w, datt];
            let (dw, g) = self.projection_bwd(l, p, inputs, spec.weight_bytes(l), &dw_parts);
            dh.extend(g);
            dw_parts.push(dw);
        }
        let dw = self.accumulate_weight_grad(l, dw_parts);
        (dh, dw)
    }
}

/// What a layer's forward pass leaves for its backward pass.
#[derive(Debug, Default, Clone)]
struct Layer {
    agg: Vec<TensorId>,
    z: Vec<TensorId>,
    /// Hidden ReLU layers: per partition, the ReLU's mask.
    mask: Vec<TensorId>,
    /// GAT: per partition, `[a_src | a_dst]` (`rows × 2H`).
    node_score: Vec<TensorId>,
    alpha: Vec<TensorId>,
    output: Vec<TensorId>,
}

/// Bytes of a ReLU mask over `elements`: one bit each, in whole 64-bit
/// words.
pub fn mask_bytes(elements: u64) -> u64 {
    elements.div_ceil(64) * 8
}

/// The number after `key` in an operator's name: the `s` of
/// `agg[l1,p2,s3]` is 3.
fn name_tag(name: &str, key: char) -> Option<u32> {
    let inner = name.split_once('[')?.1.strip_suffix(']')?;
    inner
        .split(',')
        .find_map(|field| field.strip_prefix(key)?.parse().ok())
}

/// Zeroes the transpose of every transposing operator (a positive
/// [`Cost::transpose_edges`]) whose previous one in the iteration, counted
/// cyclically since the iterations follow one another, read the same block
/// (its first input): the backend keeps the last block's transpose.
fn keep_transposes(w: &mut Workload) {
    let transposing: Vec<usize> = (0..w.ops.len())
        .filter(|&k| w.ops[k].cost.transpose_edges > 0)
        .collect();
    let block = |k: usize| w.ops[k].inputs.first().copied();
    let mut kept = transposing.last().and_then(|&k| block(k));
    let mut repeats = Vec::new();
    for &k in &transposing {
        let b = block(k);
        if b.is_some() && b == kept {
            repeats.push(k);
        }
        kept = b;
    }
    for k in repeats {
        w.ops[k].cost.transpose_edges = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names parse with `str::parse` as with their own `parse`.
    #[test]
    fn names_parse_with_from_str() {
        assert_eq!("GAT".parse::<GnnModel>().unwrap(), GnnModel::Gat);
        assert_eq!("dp".parse::<crate::Policy>().unwrap(), crate::Policy::Dp);
        assert_eq!(
            "aggregate-first".parse::<LayerOrder>().unwrap(),
            LayerOrder::parse("aggregate-first").unwrap()
        );
        assert_eq!(
            "mirrored".parse::<Transposes>().unwrap(),
            Transposes::Mirrored
        );
        assert_eq!(
            "f1,b2".parse::<Sweeps>().unwrap(),
            Sweeps::parse("f1,b2").unwrap()
        );
        let error = "gcm".parse::<GnnModel>().unwrap_err().to_string();
        assert!(error.contains("gcm"), "{error}");
        assert!("nope".parse::<crate::Policy>().is_err());
    }

    /// Sizes whose counts would pass 64 bits are refused, naming them,
    /// where the builder's products overflowed (a panic in a debug
    /// build, wrong counts in a release one); the largest real graphs
    /// still build.
    #[test]
    fn counts_past_64_bits_are_refused() {
        let spec = GnnSpec {
            features: 1 << 20,
            hidden: 1 << 16,
            ..GnnSpec::new(GnnModel::Gcn, 1 << 20, 16, "huge")
        };
        let counts = BlockCounts::skewed(1 << 36, 10 << 36, 16).unwrap();
        let error = build_gnn(&spec, &counts).unwrap_err().to_string();
        assert!(error.contains("would pass 2^60"), "{error}");
        let error = BlockCounts::skewed(1000, u64::MAX, 4)
            .unwrap_err()
            .to_string();
        assert!(error.contains("above 9007199254740992"), "{error}");
        // papers100M's 3-layer GAT of 8 heads builds.
        let stats = crate::datasets::dataset("ogbn-papers100M").unwrap();
        let gat = GnnSpec {
            heads: 8,
            ..GnnSpec::new(GnnModel::Gat, stats.features, stats.classes, stats.name)
        };
        let counts = BlockCounts::skewed(stats.nodes, stats.edges, 8).unwrap();
        assert!(build_gnn(&gat, &counts).is_ok());
    }

    /// Every model, in either order, with dropout or none, has at least
    /// `layers` times [`aggregated_blocks`] tensors and as many
    /// operators, on a graph whose blocks are not all full; GCN's forward
    /// aggregations are exactly that many.
    #[test]
    fn a_workload_has_a_tensor_and_an_operator_a_block_each_layer() {
        // 6 partitions of 60 vertices; a ring, so most pairs share no edge.
        let src: Vec<u64> = (0..60).collect();
        let dst: Vec<u64> = (0..60).map(|v| (v + 1) % 60).collect();
        let counts = BlockCounts::from_edges(60, &src, &dst, 6).unwrap();
        let blocks = aggregated_blocks(&counts);
        assert!(blocks > 6 && blocks < 36, "{blocks}");
        for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
            for (order, dropout) in [
                (LayerOrder::Narrower, 0.0),
                (LayerOrder::AggregateFirst, 0.5),
            ] {
                let spec = GnnSpec {
                    layers: 3,
                    heads: if model == GnnModel::Gat { 2 } else { 1 },
                    order,
                    dropout,
                    ..GnnSpec::new(model, 32, 4, "ring")
                };
                let w = build_gnn(&spec, &counts).unwrap();
                let least = 3 * blocks as usize;
                assert!(
                    w.tensors.len() >= least && w.ops.len() >= least,
                    "{model:?} {order:?}"
                );
                if model == GnnModel::Gcn {
                    let forward = w
                        .ops
                        .iter()
                        .filter(|op| op.kind == OpKind::Aggregate && op.phase == Phase::Forward)
                        .count();
                    assert_eq!(forward, least, "{order:?}");
                }
            }
        }
    }

    /// The number a name gives after `key`: the partition `s` of
    /// `agg[l1,p2,s3]` is 3.
    fn name_field(name: &str, key: char) -> u32 {
        name_tag(name, key).unwrap()
    }

    fn spec(model: GnnModel) -> GnnSpec {
        GnnSpec {
            model,
            layers: 3,
            hidden: 16,
            heads: 4,
            features: 8,
            classes: 3,
            graph_name: "toy".into(),
            order: Default::default(),
            transposes: Default::default(),
            sweeps: Default::default(),
            dropout: 0.0,
        }
    }

    /// With dropout, the first layer's projection and its backward count
    /// the input elements they mask where the layer projects first (GAT,
    /// a narrower GCN layer); nothing else counts any (their masks are in
    /// their classes' measured rates), and nothing does without dropout.
    #[test]
    fn dropout_masks_are_counted_in_the_first_projection() {
        let blocks = BlockCounts::skewed(1000, 1500, 4).unwrap();
        for (model, order) in [
            (GnnModel::Gcn, LayerOrder::Narrower),
            (GnnModel::Gcn, LayerOrder::AggregateFirst),
            (GnnModel::Sage, LayerOrder::Narrower),
            (GnnModel::Gat, LayerOrder::Narrower),
        ] {
            let spec = GnnSpec {
                features: 40,
                order,
                dropout: 0.5,
                ..spec(model)
            };
            // GAT projects first always, with operators of its own.
            let projects = spec.projects_first(1) || model == GnnModel::Gat;
            assert_eq!(
                projects,
                model != GnnModel::Sage && order == LayerOrder::Narrower
            );
            let w = build_gnn(&spec, &blocks).unwrap();
            let mut masking = 0;
            for op in &w.ops {
                let first =
                    op.name.starts_with("linear[l1,") || op.name.starts_with("linear_bwd[l1,");
                let expected = if first && projects {
                    blocks.partition_nodes(name_field(&op.name, 'p')) * 40
                } else {
                    0
                };
                assert_eq!(op.cost.masked, expected, "{model:?} {order:?} {}", op.name);
                masking += (expected > 0) as u32;
            }
            assert_eq!(masking, if projects { 8 } else { 0 }, "{model:?} {order:?}");
            // Where the first layer aggregates first, its gathers mask
            // their input (a class of their own); no other operator does.
            for op in &w.ops {
                let gathers_first = op.name.starts_with("agg[l1,");
                assert_eq!(
                    op.cost.class == ComputeClass::SparseMasked,
                    gathers_first && !projects,
                    "{model:?} {order:?} {}",
                    op.name
                );
            }
            // Without dropout, the same workload with no masks.
            let none = build_gnn(
                &GnnSpec {
                    dropout: 0.0,
                    ..spec.clone()
                },
                &blocks,
            )
            .unwrap();
            // Dropout's scratch (a dropped slab, dropped attention
            // weights) comes on top of the same operators' without it.
            let mut unmasked = w.clone();
            for (op, plain) in unmasked.ops.iter_mut().zip(&none.ops) {
                op.cost.masked = 0;
                if op.cost.class == ComputeClass::SparseMasked {
                    op.cost.class = ComputeClass::Sparse;
                }
                assert!(op.scratch_bytes >= plain.scratch_bytes, "{}", op.name);
                op.scratch_bytes = plain.scratch_bytes;
            }
            assert_eq!(none.to_json(), unmasked.to_json(), "{model:?} {order:?}");
        }
        for dropout in [-0.1, 1.0, f32::NAN] {
            let bad = GnnSpec {
                dropout,
                ..spec(GnnModel::Gcn)
            };
            let error = build_gnn(&bad, &blocks).unwrap_err().to_string();
            assert!(error.contains("dropout"), "{error}");
        }
    }

    /// A layer's forward sums are read as soon as they are final, by
    /// inputs as by outputs: each row's projection (or, projecting first,
    /// its bias) follows the last block product of its sum.
    #[test]
    fn sums_are_read_as_soon_as_they_are_final() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        for model in [GnnModel::Gcn, GnnModel::Sage] {
            for sweeps in [Sweeps::default(), Sweeps::INPUTS] {
                let spec = GnnSpec {
                    sweeps,
                    ..spec(model)
                };
                // GCN's last layer projects first, GraphSAGE's none.
                let projecting = model == GnnModel::Gcn;
                assert_eq!(spec.projects_first(3), projecting);
                assert!(!spec.projects_first(2));
                let w = build_gnn(&spec, &blocks).unwrap();
                let mut checked = 0;
                for (k, op) in w.ops.iter().enumerate() {
                    if op.kind != OpKind::Aggregate {
                        continue;
                    }
                    let sum = op.outputs[0];
                    let name = &w.tensors[sum.index()].name;
                    if !name.starts_with("agg[") {
                        continue;
                    }
                    let next = &w.ops[k + 1];
                    assert!(
                        next.inputs.contains(&sum),
                        "{model:?} {}: {name} is followed by {}",
                        sweeps.name(),
                        next.name
                    );
                    checked += 1;
                }
                // Three layers' sums of 4 partitions.
                assert_eq!(checked, 12, "{model:?} {}", sweeps.name());
            }
        }
    }

    /// By inputs, an aggregation's operators run input partition after
    /// input partition; they are the same operators, reading and writing
    /// the same tensors, as by outputs, so each output sums its inputs in
    /// the same order.
    #[test]
    fn by_inputs_the_same_operators_run_input_after_input() {
        use std::collections::BTreeMap;
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        for model in [GnnModel::Gcn, GnnModel::Sage] {
            let outputs = spec(model);
            let inputs = GnnSpec {
                sweeps: Sweeps::INPUTS,
                ..outputs.clone()
            };
            let (a, b) = (
                build_gnn(&outputs, &blocks).unwrap(),
                build_gnn(&inputs, &blocks).unwrap(),
            );
            assert!(b.name.ends_with("-by-inputs"), "{}", b.name);
            // Every operator with the same tensors (by name) either way.
            let named = |w: &Workload| -> BTreeMap<String, (Vec<String>, Vec<String>)> {
                let names = |ids: &[TensorId]| {
                    ids.iter()
                        .map(|t| w.tensors[t.index()].name.clone())
                        .collect()
                };
                w.ops
                    .iter()
                    .map(|op| (op.name.clone(), (names(&op.inputs), names(&op.outputs))))
                    .collect()
            };
            assert_eq!(named(&a), named(&b), "{model:?}");
            assert_ne!(
                a.ops.iter().map(|op| &op.name).collect::<Vec<_>>(),
                b.ops.iter().map(|op| &op.name).collect::<Vec<_>>()
            );
            // Per layer: by outputs the output partition never goes back,
            // by inputs the input partition never does.
            for l in 1..=3 {
                for (prefix, output, input) in [("agg[", 'p', 's'), ("agg_bwd[", 'p', 'd')] {
                    let of = |w: &Workload, key: char| -> Vec<u32> {
                        w.ops
                            .iter()
                            .filter(|op| op.name.starts_with(&format!("{prefix}l{l},")))
                            .map(|op| name_field(&op.name, key))
                            .collect()
                    };
                    let ascending = |v: &[u32]| v.windows(2).all(|w| w[0] <= w[1]);
                    let (by_out, by_in) = (of(&a, output), of(&b, input));
                    assert!(ascending(&by_out), "{model:?} {prefix}l{l}: {by_out:?}");
                    assert!(ascending(&by_in), "{model:?} {prefix}l{l}: {by_in:?}");
                    // (Layer 1 aggregates the features first: no transposed
                    // aggregation.)
                    let expected = !(prefix == "agg_bwd[" && l == 1);
                    assert_eq!(!by_in.is_empty(), expected, "{model:?} {prefix}l{l}");
                    if expected {
                        assert!(!ascending(&of(&b, output)), "{model:?} {prefix}l{l}");
                    }
                }
            }
        }
    }

    #[test]
    fn sweeps_are_read_back_and_checked_against_the_model() {
        for (text, name) in [
            ("outputs", "outputs"),
            ("INPUTS", "inputs"),
            ("f1,b2", "f1,b2"),
            (" b2 , F3 ", "f3,b2"),
            ("f64", "f64"),
        ] {
            let sweeps = Sweeps::parse(text).unwrap();
            assert_eq!(sweeps.name(), name, "{text}");
            assert_eq!(Sweeps::parse(name).unwrap(), sweeps);
        }
        for bad in ["", "rows", "f0", "f65", "b", "x1", "f1,,b2"] {
            let message = Sweeps::parse(bad).unwrap_err().to_string();
            assert!(message.contains(&format!("sweep {bad:?}")), "{message}");
        }
        // Words that start as a layer's name does are named as words, and
        // an aggregation is listed once.
        for (bad, says) in [
            ("fast", "\"fast\" is not an aggregation"),
            ("both", "\"both\" is not an aggregation"),
            ("f+1", "\"f+1\" is not an aggregation"),
            ("f1,F1", "\"F1\" is listed twice"),
            ("b2,b2,b2", "\"b2\" is listed twice"),
            ("outputs,", "entry 2 of 2 is empty"),
            ("f1,,b2", "entry 2 of 3 is empty"),
        ] {
            let message = Sweeps::parse(bad).unwrap_err().to_string();
            assert!(message.contains(says), "{bad}: {message}");
        }
        let blocks = BlockCounts::skewed(100, 800, 2).unwrap();
        let with = |model: GnnModel, sweep: &str| {
            let s = GnnSpec {
                sweeps: Sweeps::parse(sweep).unwrap(),
                ..spec(model)
            };
            build_gnn(&s, &blocks).map(|w| (s.sweep_name(), w.name))
        };
        // The spec's three layers aggregate their input first (8 features
        // into 16): layer 1 has no transposed aggregation.
        let (name, workload) = with(GnnModel::Gcn, "b3,f1").unwrap();
        assert_eq!(name, "f1,b3");
        assert!(workload.ends_with("-by-inputs-f1b3"), "{workload}");
        assert_eq!(with(GnnModel::Sage, "f1,f2,f3,b2,b3").unwrap().0, "inputs");
        assert_eq!(with(GnnModel::Gat, "outputs").unwrap().0, "outputs");
        assert_eq!(with(GnnModel::Gat, "inputs/2").unwrap().0, "inputs/2");
        assert_eq!(with(GnnModel::Gat, "f1,f2,f3").unwrap().0, "inputs");
        let (name, workload) = with(GnnModel::Gat, "f2").unwrap();
        assert_eq!(name, "f2");
        assert!(workload.ends_with("-by-inputs-f2"), "{workload}");
        for (model, sweep, expected) in [
            (GnnModel::Gcn, "f4", "sweep f4: the model has 3 layers"),
            (
                GnnModel::Gcn,
                "b1",
                "sweep b1: layer 1 has no transposed aggregation",
            ),
            (
                GnnModel::Gat,
                "f1,b2",
                "sweep b2: GAT has no transposed aggregation",
            ),
            (GnnModel::Gat, "f4", "sweep f4: the model has 3 layers"),
        ] {
            let message = with(model, sweep).unwrap_err().to_string();
            assert!(message.contains(expected), "{model:?} {sweep}: {message}");
        }
    }

    /// In groups of outputs, each group's outputs run by inputs, group
    /// after group, with the same operators and tensors as by outputs.
    #[test]
    fn in_groups_each_group_of_outputs_runs_by_inputs() {
        let blocks = BlockCounts::skewed(1000, 8000, 5).unwrap();
        let named = |w: &Workload| -> std::collections::BTreeSet<String> {
            w.ops.iter().map(|op| op.name.clone()).collect()
        };
        let by_outputs = build_gnn(&spec(GnnModel::Gcn), &blocks).unwrap();
        for (groups, expected) in [(2, vec![0..2, 2..5]), (3, vec![0..1, 1..3, 3..5])] {
            let s = GnnSpec {
                sweeps: Sweeps::parse("f2,b3").unwrap().in_groups(groups),
                ..spec(GnnModel::Gcn)
            };
            let w = build_gnn(&s, &blocks).unwrap();
            assert!(
                w.name.ends_with(&format!("-by-inputs-f2b3-in-{groups}")),
                "{}",
                w.name
            );
            assert_eq!(named(&w), named(&by_outputs));
            for prefix in ["agg[l2,", "agg_bwd[l3,"] {
                let input = if prefix.starts_with("agg[") { 's' } else { 'd' };
                let ops: Vec<(u32, u32)> = w
                    .ops
                    .iter()
                    .filter(|op| op.name.starts_with(prefix))
                    .map(|op| (name_field(&op.name, 'p'), name_field(&op.name, input)))
                    .collect();
                // Group after group; within one, inputs ascending.
                let mut at = 0;
                for outputs in &expected {
                    let group: Vec<(u32, u32)> = ops[at..]
                        .iter()
                        .take_while(|(p, _)| outputs.contains(&(*p as usize)))
                        .copied()
                        .collect();
                    at += group.len();
                    let inputs: Vec<u32> = group.iter().map(|&(_, j)| j).collect();
                    assert!(
                        inputs.windows(2).all(|w| w[0] <= w[1]),
                        "{prefix} {inputs:?}"
                    );
                    let rows: std::collections::BTreeSet<u32> =
                        group.iter().map(|&(p, _)| p).collect();
                    assert_eq!(rows.len(), outputs.len(), "{prefix} {groups}: {ops:?}");
                }
                assert_eq!(at, ops.len(), "{prefix} {groups}: {ops:?}");
            }
        }
    }

    #[test]
    fn sweeps_in_groups_are_read_back_and_checked() {
        for (text, name) in [
            ("inputs/2", "inputs/2"),
            ("f1,b2/3", "f1,b2/3"),
            ("f1/1", "f1"),
            ("inputs / 4", "inputs/4"),
        ] {
            let sweeps = Sweeps::parse(text).unwrap();
            assert_eq!(sweeps.name(), name, "{text}");
            assert_eq!(Sweeps::parse(name).unwrap(), sweeps);
        }
        assert_eq!(Sweeps::parse("f1,b2/3").unwrap().groups, 3);
        assert_eq!(Sweeps::parse("inputs/1").unwrap(), Sweeps::INPUTS);
        for (bad, expected) in [
            ("outputs/2", "outputs has none"),
            ("inputs/0", "expected the groups of outputs"),
            ("f1/x", "expected the groups of outputs"),
            ("f1/65537", "expected the groups of outputs"),
        ] {
            let message = Sweeps::parse(bad).unwrap_err().to_string();
            assert!(
                message.contains(expected) && message.contains(bad),
                "{message}"
            );
        }
        // The spec names every aggregation that can in groups `inputs/N`,
        // and none by inputs has no groups.
        let s = GnnSpec {
            sweeps: Sweeps::INPUTS.in_groups(2),
            ..spec(GnnModel::Gcn)
        };
        assert_eq!(s.sweep_name(), "inputs/2");
        s.validate().unwrap();
        let gat = GnnSpec {
            sweeps: Sweeps::INPUTS.in_groups(2),
            ..spec(GnnModel::Gat)
        };
        gat.validate().unwrap();
        assert_eq!(gat.sweep_name(), "inputs/2");
        assert_eq!(
            Sweeps::parse("f1/2")
                .unwrap()
                .flipped(Sweeps::parse("f1").unwrap()),
            Sweeps::default()
        );
        // By outputs there is nothing to group.
        assert_eq!(Sweeps::default().in_groups(2), Sweeps::default());
        let many = GnnSpec {
            sweeps: Sweeps {
                groups: Sweeps::MAX_GROUPS + 1,
                ..Sweeps::INPUTS
            },
            ..spec(GnnModel::Gcn)
        };
        let message = many.validate().unwrap_err().to_string();
        assert!(message.contains("groups of outputs"), "{message}");
    }

    #[test]
    fn every_model_builds_a_valid_workload() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
            let w = build_gnn(&spec(model), &blocks).unwrap();
            w.validate().unwrap();
            assert!(w.ops.iter().any(|op| op.phase == Phase::Backward));
            assert!(w.ops.last().unwrap().phase == Phase::Update);
        }
    }

    /// Where transposes are built (GAT's, and GCN's and GraphSAGE's with
    /// [`Transposes::Built`]), every transposed aggregation builds its
    /// block's transpose unless the previous one, cyclically, read the
    /// same block: with one partition none does; with several, every one
    /// whose block differs from its predecessor's.
    #[test]
    fn transposes_are_counted_where_the_kept_one_is_another_block_s() {
        for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
            for parts in [1, 3] {
                let blocks = BlockCounts::skewed(1000, 8000, parts).unwrap();
                let spec = GnnSpec {
                    transposes: Transposes::Built,
                    ..spec(model)
                };
                let w = build_gnn(&spec, &blocks).unwrap();
                let transposing: Vec<&crate::workload::Op> = w
                    .ops
                    .iter()
                    .filter(|op| {
                        op.name.starts_with("agg_bwd[") || op.name.starts_with("attention_bwd[")
                    })
                    .collect();
                assert!(transposing.len() >= parts as usize, "{model:?} {parts}");
                let mut built = 0;
                for (k, op) in transposing.iter().enumerate() {
                    let previous = transposing[(k + transposing.len() - 1) % transposing.len()];
                    let expected = if previous.inputs[0] == op.inputs[0] {
                        0
                    } else {
                        op.cost.edges
                    };
                    assert_eq!(op.cost.transpose_edges, expected, "{model:?} {}", op.name);
                    built += op.cost.transpose_edges;
                }
                assert_eq!(built == 0, parts == 1, "{model:?} {parts}");
                // Nothing else transposes.
                assert!(w
                    .ops
                    .iter()
                    .filter(|op| !transposing.iter().any(|t| t.name == op.name))
                    .all(|op| op.cost.transpose_edges == 0));
            }
        }
    }

    /// With stored transposes (the default), GCN's and GraphSAGE's
    /// transposed aggregations build none: each reads its block's
    /// `adj_t[i,j]`, one tensor per block shared by every layer, as big as
    /// the block with its row pointers over the source partition (and
    /// GraphSAGE's scales a row of either side). GAT is as with built ones.
    #[test]
    fn stored_transposes_are_read_instead_of_built() {
        for parts in [1, 3] {
            let blocks = BlockCounts::skewed(1000, 8000, parts).unwrap();
            for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
                let w = build_gnn(&spec(model), &blocks).unwrap();
                let built = GnnSpec {
                    transposes: Transposes::Built,
                    ..spec(model)
                };
                let built = build_gnn(&built, &blocks).unwrap();
                if model == GnnModel::Gat {
                    assert_eq!(w, built);
                    continue;
                }
                assert!(w.ops.iter().all(|op| op.cost.transpose_edges == 0));
                let name = |t: TensorId| w.tensors[t.index()].name.as_str();
                let mut read = std::collections::HashMap::new();
                for op in w
                    .ops
                    .iter()
                    .filter(|op| op.kind == OpKind::AggregateBackward)
                {
                    let (l, j, i) = agg_bwd_ids(&op.name);
                    assert_eq!(name(op.inputs[0]), format!("adj_t[{i},{j}]"), "{}", op.name);
                    assert_eq!(op.cost.class, ComputeClass::Sparse, "{}", op.name);
                    read.entry(op.inputs[0]).or_insert_with(Vec::new).push(l);
                }
                for (&t, layers) in &read {
                    assert_eq!(layers.len(), 2, "{} read by layers {layers:?}", name(t));
                    let tensor = &w.tensors[t.index()];
                    let (i, j) = block_ids(&tensor.name);
                    let (rows_i, rows_j) = (blocks.partition_nodes(i), blocks.partition_nodes(j));
                    let loops = if i == j && model == GnnModel::Gcn {
                        rows_i
                    } else {
                        0
                    };
                    let edges = blocks.block_edges(i, j) + loops;
                    let expected = (rows_j + 1) * 8 + edges * 4 + (rows_i + rows_j) * 4;
                    assert_eq!(tensor.bytes, expected, "{}", tensor.name);
                    assert_eq!(tensor.kind, TensorKind::Input);
                }
                // Every block is read transposed.
                let adj = w
                    .tensors
                    .iter()
                    .filter(|t| t.name.starts_with("adj["))
                    .count();
                assert_eq!(read.len(), adj, "{model:?} {parts}");
                // The same operators otherwise, one more input tensor per
                // block.
                assert_eq!(w.ops.len(), built.ops.len());
                assert_eq!(w.tensors.len(), built.tensors.len() + adj);
            }
        }
    }

    /// Mirrored transposes (GCN on a symmetric graph): each transposed
    /// aggregation gathers over the mirrored block, so the workload has
    /// the built one's tensors (no `adj_t`) and the stored one's costs.
    /// Refused for the other models, and where a block's edges are not
    /// its mirror's.
    #[test]
    fn mirrored_transposes_read_the_mirrored_block() {
        let edges = vec![500, 40, 7, 40, 600, 0, 7, 0, 300];
        let blocks = BlockCounts {
            partitions: 3,
            nodes: 900,
            edges,
        };
        let mirrored = GnnSpec {
            transposes: Transposes::Mirrored,
            ..spec(GnnModel::Gcn)
        };
        let w = build_gnn(&mirrored, &blocks).unwrap();
        let stored = build_gnn(&spec(GnnModel::Gcn), &blocks).unwrap();
        let built = build_gnn(
            &GnnSpec {
                transposes: Transposes::Built,
                ..spec(GnnModel::Gcn)
            },
            &blocks,
        )
        .unwrap();
        assert!(w.tensors.iter().all(|t| !t.name.starts_with("adj_t[")));
        assert_eq!(w.tensors.len(), built.tensors.len());
        let name = |t: TensorId| w.tensors[t.index()].name.as_str();
        let mut read = 0;
        for (op, was) in w.ops.iter().zip(&stored.ops) {
            assert_eq!(op.name, was.name);
            assert_eq!(op.cost, was.cost, "{}", op.name);
            if op.kind == OpKind::AggregateBackward {
                let (_, j, i) = agg_bwd_ids(&op.name);
                assert_eq!(name(op.inputs[0]), format!("adj[{j},{i}]"), "{}", op.name);
                read += 1;
            }
        }
        assert!(read > 0);
        let sage = GnnSpec {
            transposes: Transposes::Mirrored,
            ..spec(GnnModel::Sage)
        };
        let error = build_gnn(&sage, &blocks).unwrap_err().to_string();
        assert!(error.contains("applies to gcn"), "{error}");
        let lopsided = BlockCounts {
            edges: vec![500, 40, 7, 41, 600, 0, 7, 0, 300],
            ..blocks
        };
        let error = build_gnn(&mirrored, &lopsided).unwrap_err().to_string();
        assert!(
            error.contains("not symmetric: block (0, 1) holds 40 edges and block (1, 0) 41"),
            "{error}"
        );
    }

    /// `(l, j, i)` of `agg_bwd[l<l>,p<j>,d<i>]`.
    fn agg_bwd_ids(name: &str) -> (u32, u32, u32) {
        let inner = name.trim_start_matches("agg_bwd[").trim_end_matches(']');
        let parts: Vec<u32> = inner.split(',').map(|p| p[1..].parse().unwrap()).collect();
        (parts[0], parts[1], parts[2])
    }

    /// `(i, j)` of `adj_t[i,j]`.
    fn block_ids(name: &str) -> (u32, u32) {
        let inner = name.trim_start_matches("adj_t[").trim_end_matches(']');
        let (i, j) = inner.split_once(',').unwrap();
        (i.parse().unwrap(), j.parse().unwrap())
    }

    /// A GCN layer narrower than its input projects, then aggregates the
    /// projected rows and adds the bias; its transposed aggregation runs
    /// in the first layer too. GraphSAGE and the other order never do.
    #[test]
    fn a_narrowing_gcn_layer_projects_then_aggregates() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        let find = |w: &Workload, name: &str| w.ops.iter().position(|op| op.name == name);
        // 64 -> 16 -> 16 -> 3: layers 1 and 3 narrow, layer 2 does not.
        let wide = GnnSpec {
            features: 64,
            ..spec(GnnModel::Gcn)
        };
        assert_eq!(
            (1..=3).map(|l| wide.projects_first(l)).collect::<Vec<_>>(),
            [true, false, true]
        );
        let w = build_gnn(&wide, &blocks).unwrap();
        w.validate().unwrap();
        let rows = blocks.partition_nodes(0);
        for (l, width) in [(1, 16), (3, 3)] {
            let linear = find(&w, &format!("linear[l{l},p0]")).unwrap();
            let agg = find(&w, &format!("agg[l{l},p0,s0]")).unwrap();
            assert!(linear < agg, "layer {l}");
            let out = w.ops[agg].outputs[0];
            assert_eq!(w.tensor(out).bytes, rows * width * F32, "layer {l}");
            assert_eq!(w.ops[agg].inputs[1], w.ops[linear].outputs[0]);
            assert!(find(&w, &format!("agg_bwd[l{l},p0,d0]")).is_some());
            let backward = find(&w, &format!("linear_bwd[l{l},p0]")).unwrap();
            assert_eq!(w.ops[backward].inputs.len(), 4, "layer {l}");
        }
        // Layer 2 as before: aggregate, then the linear with its bias.
        let agg = find(&w, "agg[l2,p0,s0]").unwrap();
        assert!(find(&w, "linear[l2,p0]").unwrap() > agg);
        assert!(find(&w, "bias[l3,p0]").is_some() && find(&w, "bias[l2,p0]").is_none());

        let first = GnnSpec {
            order: LayerOrder::AggregateFirst,
            ..wide.clone()
        };
        let w_first = build_gnn(&first, &blocks).unwrap();
        assert!(find(&w_first, "agg_bwd[l1,p0,d0]").is_none());
        assert!(find(&w_first, "bias[l3,p0]").is_none());
        assert_ne!(w_first.name, w.name);
        // The aggregations sum 16 and 3 wide rows instead of 64 and 16.
        let sparse = |w: &Workload| -> f64 {
            w.ops
                .iter()
                .filter(|op| op.name.starts_with("agg["))
                .map(|op| op.cost.flops)
                .sum()
        };
        let ratio = sparse(&w) / sparse(&w_first);
        assert!((ratio - 35.0 / 96.0).abs() < 1e-9, "{ratio}");

        let sage = GnnSpec {
            model: GnnModel::Sage,
            ..wide
        };
        assert!(!(1..=3).any(|l| sage.projects_first(l)));
        assert!(LayerOrder::parse("aggregate-first").is_ok() && LayerOrder::parse("x").is_err());
    }

    /// GAT's operators each have their class (edge scores, aggregation,
    /// edge softmax, attention backward, node scores and their backward,
    /// ELU and its backward), nothing else is any of them, and every
    /// edge operator walks, over a layer's blocks, every stored edge once.
    #[test]
    fn gat_operators_have_their_class_and_walk_every_edge() {
        use std::collections::HashMap;
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        let s = spec(GnnModel::Gat);
        let w = build_gnn(&s, &blocks).unwrap();
        let classes = [
            ("sddmm[", ComputeClass::EdgeScores),
            ("agg[", ComputeClass::Attention),
            ("edge_softmax[", ComputeClass::EdgeSoftmax),
            ("attention_bwd[", ComputeClass::AttentionBackward),
            ("node_scores[", ComputeClass::NodeScores),
            ("node_scores_bwd[", ComputeClass::NodeScoresBackward),
            ("elu[", ComputeClass::Elu),
            ("elu_bwd[", ComputeClass::Elu),
        ];
        for o in &w.ops {
            for (prefix, class) in classes {
                assert_eq!(
                    o.cost.class == class,
                    classes
                        .iter()
                        .any(|(p, c)| *c == class && o.name.starts_with(p)),
                    "{} ({prefix})",
                    o.name
                );
            }
        }
        let mut edges: HashMap<(&str, String), u64> = HashMap::new();
        for o in w.ops.iter().filter(|o| o.cost.edges > 0) {
            let (kind, rest) = o.name.split_once('[').unwrap();
            let layer = rest.split(',').next().unwrap().to_string();
            *edges.entry((kind, layer)).or_default() += o.cost.edges;
        }
        let walkers = ["sddmm", "agg", "edge_softmax", "attention_bwd"];
        assert_eq!(edges.len(), walkers.len() * s.layers as usize, "{edges:?}");
        // GAT aggregates over self loops too.
        let stored = blocks.total_edges() + 1000;
        for ((kind, _), n) in &edges {
            assert!(walkers.contains(kind), "{kind}");
            assert_eq!(*n, stored, "{kind}");
        }
        // Each edge is scored by every head of its layer, and every
        // walker walks a destination row once for each block it has.
        let walked = |w: &Workload| {
            let mut sums: HashMap<(String, String), (u64, u64)> = HashMap::new();
            for o in w.ops.iter().filter(|o| o.cost.edges > 0) {
                let (kind, rest) = o.name.split_once('[').unwrap();
                let layer = rest.split(',').next().unwrap().to_string();
                let sum = sums.entry((kind.into(), layer)).or_default();
                sum.0 += o.cost.edge_heads;
                sum.1 += o.cost.rows;
            }
            sums
        };
        let sums = walked(&w);
        for l in 1..=s.layers {
            let layer = format!("l{l}");
            let rows = sums[&("sddmm".to_string(), layer.clone())].1;
            assert!((1000..=4 * 1000).contains(&rows), "{rows}");
            for kind in walkers {
                let (heads, r) = sums[&(kind.to_string(), layer.clone())];
                assert_eq!(heads, stored * s.layer_heads(l), "{kind} {layer}");
                assert_eq!(r, rows, "{kind} {layer}");
            }
        }
        // In one partition each row is walked once a layer.
        let whole = build_gnn(&s, &BlockCounts::skewed(1000, 8000, 1).unwrap()).unwrap();
        for ((kind, layer), (_, rows)) in walked(&whole) {
            assert_eq!(rows, 1000, "{kind} {layer}");
        }
        // A GCN's aggregations record their rows, as GAT's (over a layer
        // a row is walked once a block in the forward and the backward
        // alike), and the bytes of their running sums; no heads.
        let gcn = build_gnn(&spec(GnnModel::Gcn), &blocks).unwrap();
        assert!(gcn.ops.iter().all(|o| o.cost.edge_heads == 0));
        let mut rows: HashMap<(OpKind, String), u64> = HashMap::new();
        for o in &gcn.ops {
            let loss = o.cost.class == ComputeClass::Softmax;
            assert_eq!(o.cost.rows > 0, o.cost.edges > 0 || loss, "{}", o.name);
            if loss {
                // The loss's rows, its partition's.
                assert_eq!(
                    o.cost.rows,
                    blocks.partition_nodes(name_field(&o.name, 'p'))
                );
                continue;
            }
            assert!(
                o.cost.row_bytes < o.cost.bytes || o.cost.edges == 0,
                "{}",
                o.name
            );
            let layer = o.name.split_once('[').unwrap().1.split(',').next().unwrap();
            *rows.entry((o.kind, layer.to_string())).or_default() += o.cost.rows;
        }
        let forward = rows[&(OpKind::Aggregate, "l2".to_string())];
        assert!((1000..=4 * 1000).contains(&forward), "{forward}");
        assert_eq!(
            rows[&(OpKind::AggregateBackward, "l2".to_string())],
            forward
        );
        assert!(w.ops.iter().all(|o| o.cost.row_bytes == 0));
        // The GCN's gathers record their working set, every partition's
        // rows at their width; GAT's edge operators and the others none.
        assert!(w.ops.iter().all(|o| o.cost.gather_width == 0));
        let mut gathers = 0;
        for o in &gcn.ops {
            let c = &o.cost;
            let gathers_rows = matches!(c.class, ComputeClass::Sparse | ComputeClass::SparseMasked);
            assert_eq!(c.gather_width > 0, gathers_rows, "{}", o.name);
            assert_eq!(c.gather_set_bytes, 1000 * 4 * u64::from(c.gather_width));
            gathers += usize::from(gathers_rows);
        }
        assert!(
            gathers >= 2 * spec(GnnModel::Gcn).layers as usize,
            "{gathers}"
        );
    }

    /// Transposed aggregations are scatters where the transposes are
    /// built; the first layer's linear backward writes no input gradient,
    /// so it streams half the bytes.
    #[test]
    fn aggregation_backward_scatters_and_layer_one_writes_no_input_gradient() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        for model in [GnnModel::Gcn, GnnModel::Sage] {
            let spec = GnnSpec {
                transposes: Transposes::Built,
                ..spec(model)
            };
            let w = build_gnn(&spec, &blocks).unwrap();
            let op = |name: &str| w.ops.iter().find(|op| op.name == name).unwrap();
            for o in &w.ops {
                let scatter = o.kind == OpKind::AggregateBackward;
                assert_eq!(o.cost.class == ComputeClass::Scatter, scatter, "{}", o.name);
            }
            assert!(w.ops.iter().all(|o| !matches!(
                o.cost.class,
                ComputeClass::Attention
                    | ComputeClass::EdgeScores
                    | ComputeClass::AttentionBackward
                    | ComputeClass::EdgeSoftmax
                    | ComputeClass::NodeScores
                    | ComputeClass::NodeScoresBackward
                    | ComputeClass::Elu
            )));
            // The aggregations and their backward walk every stored edge
            // (GCN's self loops too).
            let stored = blocks.total_edges() + if model == GnnModel::Gcn { 1000 } else { 0 };
            for kind in [OpKind::Aggregate, OpKind::AggregateBackward] {
                let layer = |o: &&crate::workload::Op| o.name.contains("[l2,");
                let walked: u64 = w
                    .ops
                    .iter()
                    .filter(|o| o.kind == kind)
                    .filter(layer)
                    .map(|o| o.cost.edges)
                    .sum();
                assert_eq!(walked, stored, "{model:?} {kind:?}");
            }
            let k = if model == GnnModel::Sage { 2 } else { 1 };
            let (first, second) = (op("linear_bwd[l1,p0]"), op("linear_bwd[l2,p0]"));
            let z = w.tensors.iter().find(|t| t.name == "z[l1,p0]").unwrap();
            let rows = z.bytes / (16 * F32);

            assert_eq!(first.cost.bytes, rows * (k * 8 + 16) * F32, "{model:?}");
            assert_eq!(
                second.cost.bytes,
                2 * rows * (k * 16 + 16) * F32,
                "{model:?}"
            );
        }
    }

    /// Every block's attention backward reads exactly what the kernel
    /// needs and feeds both chains; the weights hold W, att_src, att_dst
    /// and the bias.
    #[test]
    fn gat_backward_reads_what_the_block_kernel_needs() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        let s = spec(GnnModel::Gat);
        let w = build_gnn(&s, &blocks).unwrap();
        let name = |t: &TensorId| w.tensors[t.index()].name.clone();
        let mut seen = 0;
        for op in w
            .ops
            .iter()
            .filter(|o| o.name.starts_with("attention_bwd["))
        {
            let fields: Vec<&str> = op.name["attention_bwd[".len()..op.name.len() - 1]
                .split(',')
                .collect();
            let (l, j, i) = (fields[0], &fields[1][1..], &fields[2][1..]);
            let inputs: Vec<String> = op.inputs.iter().map(name).collect();
            let mut expected = vec![
                format!("adj[{i},{j}]"),
                format!("alpha[{l},p{i}]"),
                format!("node_score[{l},p{i}]"),
                format!("node_score[{l},p{j}]"),
                format!("z[{l},p{j}]"),
                format!("agg[{l},p{i}]"),
            ];
            expected.dedup();
            for e in &expected {
                assert!(inputs.contains(e), "{}: no {e} in {inputs:?}", op.name);
            }
            let outputs: Vec<String> = op.outputs.iter().map(name).collect();
            assert!(outputs[0].starts_with("grad_src"), "{outputs:?}");
            assert!(outputs[0].contains(&format!("[{l},p{j}")), "{outputs:?}");
            assert!(outputs[1].starts_with("grad_dst"), "{outputs:?}");
            assert!(outputs[1].contains(&format!("[{l},p{i}")), "{outputs:?}");
            seen += 1;
        }
        let blocks_per_layer = w
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("adj["))
            .count();
        assert_eq!(seen, blocks_per_layer * s.layers as usize);
        for l in 1..=s.layers {
            let (d_in, d_out) = s.layer_dims(l);
            assert_eq!(s.weight_bytes(l), (d_in * d_out + 3 * d_out) * F32);
            let heads = s.layer_heads(l);
            let score = w
                .tensors
                .iter()
                .find(|t| t.name == format!("node_score[l{l},p0]"))
                .unwrap();
            assert_eq!(score.bytes, blocks.partition_nodes(0) * 2 * heads * F32);
        }
        // Every forward operator has one output, so a plan may recompute it.
        for op in w.ops.iter().filter(|o| o.phase == Phase::Forward) {
            assert_eq!(op.outputs.len(), 1, "{}", op.name);
        }
    }

    /// GAT's backward turns at each source: even sources run their
    /// destinations up, odd ones down, so the destination one source
    /// ends on is the one the next starts on. Each `grad_src` chain
    /// starts without a partial, reads the one before, and ends in
    /// `grad_src[l,pj]`; each `grad_dst` chain still runs its sources up.
    #[test]
    fn gat_backward_turns_at_each_source() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        let w = build_gnn(&spec(GnnModel::Gat), &blocks).unwrap();
        let name = |t: TensorId| w.tensors[t.index()].name.clone();
        for l in 1..=3 {
            let prefix = format!("attention_bwd[l{l},");
            let ops: Vec<&crate::workload::Op> = w
                .ops
                .iter()
                .filter(|o| o.name.starts_with(&prefix))
                .collect();
            let mut runs: Vec<(u32, Vec<u32>)> = Vec::new();
            for op in &ops {
                let (j, i) = (name_field(&op.name, 'p'), name_field(&op.name, 'd'));
                match runs.last_mut() {
                    Some((s, dests)) if *s == j => dests.push(i),
                    _ => runs.push((j, vec![i])),
                }
            }
            let sources: Vec<u32> = runs.iter().map(|(j, _)| *j).collect();
            assert_eq!(
                sources,
                vec![0, 1, 2, 3],
                "layer {l}: each source in one run, in order"
            );
            for (j, dests) in &runs {
                assert_eq!(dests.len(), 4, "layer {l}: the test wants every block");
                let mut ordered = dests.clone();
                ordered.sort_unstable();
                if gat_destinations_descend(*j) {
                    ordered.reverse();
                }
                assert_eq!(dests, &ordered, "layer {l}, source {j}");
            }
            for pair in runs.windows(2) {
                assert_eq!(pair[0].1.last(), pair[1].1.first(), "layer {l}: no turn");
            }
            let mut src_partial: Option<TensorId> = None;
            let mut dst_sources: Vec<Vec<u32>> = vec![Vec::new(); 4];
            for (k, op) in ops.iter().enumerate() {
                let (j, i) = (name_field(&op.name, 'p'), name_field(&op.name, 'd'));
                let first = k % 4 == 0;
                let read_partial = op.inputs.iter().any(|&t| Some(t) == src_partial);
                assert_eq!(read_partial, !first, "{}", op.name);
                let partials = op
                    .inputs
                    .iter()
                    .filter(|&&t| name(t).starts_with("grad_src_partial"))
                    .count();
                assert_eq!(partials, usize::from(!first), "{}", op.name);
                let out = name(op.outputs[0]);
                match k % 4 == 3 {
                    true => assert_eq!(out, format!("grad_src[l{l},p{j}]")),
                    false => assert_eq!(out, format!("grad_src_partial[l{l},p{j},d{i}]")),
                }
                src_partial = Some(op.outputs[0]);
                dst_sources[i as usize].push(j);
            }
            for sources in dst_sources {
                assert_eq!(sources, vec![0, 1, 2, 3], "layer {l}: grad_dst sums upward");
            }
        }
    }

    /// GAT's forward aggregations by inputs, or in groups: every row's
    /// edge softmax first, then the sums source by source, each row's
    /// activation right after its last block; the same operators reading
    /// the same tensors as by outputs, and each row's blocks in ascending
    /// order.
    #[test]
    fn gat_by_inputs_runs_every_softmax_first_then_the_same_operators() {
        let blocks = BlockCounts::skewed(1000, 8000, 4).unwrap();
        let by_outputs = build_gnn(&spec(GnnModel::Gat), &blocks).unwrap();
        let reads = |w: &Workload| -> std::collections::BTreeMap<String, Vec<String>> {
            let name = |t: &TensorId| w.tensors[t.index()].name.clone();
            w.ops
                .iter()
                .map(|op| (op.name.clone(), op.inputs.iter().map(name).collect()))
                .collect()
        };
        // In as many groups as rows, or more, the order by outputs.
        let order = |w: &Workload| w.ops.iter().map(|op| op.name.clone()).collect::<Vec<_>>();
        for sweep in ["inputs/4", "f1,f3/9"] {
            let s = GnnSpec {
                sweeps: Sweeps::parse(sweep).unwrap(),
                ..spec(GnnModel::Gat)
            };
            let w = build_gnn(&s, &blocks).unwrap();
            assert_eq!(order(&w), order(&by_outputs), "{sweep}");
        }
        for sweep in ["inputs", "f2", "inputs/2"] {
            let s = GnnSpec {
                sweeps: Sweeps::parse(sweep).unwrap(),
                ..spec(GnnModel::Gat)
            };
            let w = build_gnn(&s, &blocks).unwrap();
            assert_eq!(reads(&w), reads(&by_outputs), "{sweep}");
            for l in 1..=3 {
                let at = |prefix: &str| -> Vec<usize> {
                    let prefix = format!("{prefix}[l{l},");
                    w.ops
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.name.starts_with(&prefix))
                        .map(|(k, _)| k)
                        .collect()
                };
                let (softmax, aggs) = (at("edge_softmax"), at("agg"));
                let swept = s.swept().forward(l) != Sweep::Outputs;
                let all_first = softmax.iter().max() < aggs.iter().min();
                assert_eq!(all_first, swept, "{sweep}, layer {l}");
                let mut seen = vec![Vec::new(); 4];
                for &k in &aggs {
                    let name = &w.ops[k].name;
                    let (i, j) = (name_field(name, 'p'), name_field(name, 's'));
                    seen[i as usize].push(j);
                    if seen[i as usize].len() == 4 {
                        let next = &w.ops[k + 1].name;
                        let act = if l == 3 { "bias" } else { "elu" };
                        assert_eq!(next, &format!("{act}[l{l},p{i}]"), "{sweep}");
                    }
                }
                for (i, sources) in seen.iter().enumerate() {
                    assert_eq!(sources, &vec![0, 1, 2, 3], "{sweep}, layer {l}, row {i}");
                }
                if swept && sweep == "inputs" {
                    let first: Vec<u32> = aggs[..4]
                        .iter()
                        .map(|&k| name_field(&w.ops[k].name, 's'))
                        .collect();
                    assert_eq!(first, vec![0; 4], "{sweep}: source 0 into every row first");
                }
            }
        }
    }

    #[test]
    fn gat_heads_must_divide_hidden() {
        let blocks = BlockCounts::skewed(100, 800, 2).unwrap();
        let mut s = spec(GnnModel::Gat);
        s.heads = 3;
        assert!(build_gnn(&s, &blocks)
            .unwrap_err()
            .to_string()
            .contains("divisible"));
    }
}
