//! What the operators of a partitioned GNN workload mean, shared by the
//! backends that compute them ([`crate::cpu`], [`crate::cuda`]): the graph
//! input, the hyper-parameters, operator names, layer shapes, the weights'
//! initial values and layout, and the keys of the dropout masks. A backend
//! adds only the arithmetic, so two backends given the same plan compute
//! the same model.

use fateplan_kernels::dense;
use fateplan_kernels::dropout::{Dropout, RowKeys};
use fateplan_kernels::gat::Heads;
use fateplan_planner::gnn::{gat_destinations_descend, GnnModel, LayerOrder, Sweeps, Transposes};

use crate::exec::data::BlockData;
use crate::exec::ExecError;

/// The graph as the executor's inputs: features, labels, masks and the
/// normalised blocks of a P-way vertex-range partition.
#[derive(Debug, Clone)]
pub struct GraphInput {
    /// Row offsets of the partitions: `offsets[p]..offsets[p + 1]`.
    pub offsets: Vec<u64>,
    pub features: usize,
    pub classes: usize,
    /// Node features, row-major.
    pub x: Vec<f32>,
    pub y: Vec<i64>,
    pub train_mask: Vec<bool>,
    pub val_mask: Vec<bool>,
    pub test_mask: Vec<bool>,
    /// Block `(dst i, src j)` at `i * P + j`, when it exists.
    pub blocks: Vec<Option<BlockData>>,
    /// The whole graph's index of this input's first row: 0, except for
    /// one device's share of a multi-device run ([`crate::share`]). The
    /// dropout masks are keyed by the whole graph's rows.
    pub row_base: u64,
    /// The whole graph's row of each row, as the graph was given, when a
    /// multi-device share renumbered the vertices (min-cut shares): the
    /// dropout masks are keyed by it, so that every device draws the masks
    /// one device would. `None`: row `r` is `row_base + r`.
    pub row_ids: Option<Vec<u64>>,
    /// Training nodes of the whole graph, over which the loss averages,
    /// when this input is one device's share (otherwise those of
    /// `train_mask`).
    pub train_nodes_total: Option<u64>,
    /// Vertices of the whole graph, when this input is one device's share
    /// (otherwise its own rows): GAT's attention masks are keyed by both
    /// ends of an edge ([`fateplan_kernels::gat::dropout_edges`]).
    pub graph_nodes: Option<u64>,
}

impl GraphInput {
    pub fn partitions(&self) -> usize {
        self.offsets.len() - 1
    }

    pub(crate) fn rows(&self, p: usize) -> std::ops::Range<usize> {
        self.offsets[p] as usize..self.offsets[p + 1] as usize
    }

    /// Bytes of the features, labels and blocks, which a backend gives
    /// over to the executor's tiers and then frees
    /// ([`crate::exec::Backend::externals_placed`]): a run's memory less
    /// them is what it takes beyond what the process holds already.
    pub fn given_bytes(&self) -> u64 {
        let block = |b: &BlockData| {
            std::mem::size_of_val(b.row_start.as_slice())
                + std::mem::size_of_val(b.columns.as_slice())
                + std::mem::size_of_val(b.weights.as_slice())
        };
        let bytes = std::mem::size_of_val(self.x.as_slice())
            + std::mem::size_of_val(self.y.as_slice())
            + self.blocks.iter().flatten().map(block).sum::<usize>();
        bytes as u64
    }
}

/// Hyper-parameters of training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    pub model: GnnModel,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub dropout: f32,
    pub lr: f32,
    pub weight_decay: f32,
    /// Weight decay on every layer; otherwise on the first only (Kipf's GCN).
    pub weight_decay_all_layers: bool,
    pub seed: u64,
    /// Which GCN layers project before they aggregate.
    pub order: LayerOrder,
    /// Whether GCN's and GraphSAGE's blocks' transposes are stored or
    /// built.
    pub transposes: Transposes,
    /// Which aggregations run by inputs (the operators' order only: the
    /// same model, bit for bit).
    pub sweeps: Sweeps,
}

impl Hyper {
    /// `model` as `fateplan train` trains it by default: 2 layers of 16
    /// hidden, 1 head, dropout 0.5, Adam at 0.01 with weight decay 5e-4
    /// on the first layer, seed 1, the default layer order, transposes
    /// and sweeps. Change a field with struct update syntax,
    /// `Hyper { hidden: 64, ..Hyper::new(GnnModel::Gcn) }`.
    pub fn new(model: GnnModel) -> Hyper {
        Hyper {
            model,
            layers: 2,
            hidden: 16,
            heads: 1,
            dropout: 0.5,
            lr: 0.01,
            weight_decay: 5e-4,
            weight_decay_all_layers: false,
            seed: 1,
            order: LayerOrder::default(),
            transposes: Transposes::default(),
            sweeps: Sweeps::default(),
        }
    }

    /// Checks the numbers training steps with, which the model's shape
    /// (checked as its workload is built) does not hold: a positive
    /// learning rate, a weight decay of 0 or more, a dropout probability
    /// in `[0, 1)`.
    pub fn check(&self) -> Result<(), fateplan_planner::Error> {
        let invalid = |field: &str, message: String| {
            Err(fateplan_planner::Error::InvalidInput {
                context: format!("hyper-parameter {field}"),
                message,
            })
        };
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return invalid("lr", format!("{} is not a positive number", self.lr));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return invalid(
                "weight_decay",
                format!("{} is not a number of 0 or more", self.weight_decay),
            );
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return invalid(
                "dropout",
                format!("{} is not a probability in [0, 1)", self.dropout),
            );
        }
        Ok(())
    }
}

/// Whether an iteration trains or only evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Train,
    /// No dropout and no parameter updates; accuracy on every mask.
    Eval,
}

/// What the loss operators saw in the last iteration.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Metrics {
    /// Mean cross-entropy over the training nodes.
    pub loss: f64,
    pub train_correct: u64,
    pub train_total: u64,
    pub val_correct: u64,
    pub val_total: u64,
    pub test_correct: u64,
    pub test_total: u64,
}

impl Metrics {
    /// The share correct; none where the mask holds no node.
    fn ratio(correct: u64, total: u64) -> Option<f64> {
        (total > 0).then(|| correct as f64 / total as f64)
    }
    pub fn train_accuracy(&self) -> Option<f64> {
        Self::ratio(self.train_correct, self.train_total)
    }
    pub fn val_accuracy(&self) -> Option<f64> {
        Self::ratio(self.val_correct, self.val_total)
    }
    pub fn test_accuracy(&self) -> Option<f64> {
        Self::ratio(self.test_correct, self.test_total)
    }
}

/// A backend that trains a GNN: the training loop switches its mode and
/// reads its metrics.
pub trait GnnBackend: crate::exec::Backend {
    fn set_mode(&mut self, mode: Mode);
    /// What the loss operators saw in the last iteration.
    fn metrics(&self) -> Result<Metrics, ExecError>;
    /// The most bytes the backend's own device allocator held at once so
    /// far (every device buffer: the plan's tensors, the kernels'
    /// scratch, what it keeps for the run), where it has one apart from
    /// the executor's arena; `None` where the device is host memory.
    fn device_peak_bytes(&self) -> Option<u64> {
        None
    }
}

/// Kinds of dropout site, part of the mask's key (two bits).
pub(crate) const SITE_INPUT: u64 = 0;
pub(crate) const SITE_HIDDEN: u64 = 1;
pub(crate) const SITE_ATTENTION: u64 = 2;

/// A name like `agg[l1,p0,s2]` as its base and its lettered indices.
pub(crate) struct Name<'a> {
    pub(crate) base: &'a str,
    fields: Vec<(char, u32)>,
}

impl<'a> Name<'a> {
    pub(crate) fn parse(name: &'a str) -> Result<Name<'a>, ExecError> {
        let bad = || ExecError::Internal(format!("unexpected operator or tensor name {name:?}"));
        let (base, rest) = name.split_once('[').ok_or_else(bad)?;
        let inner = rest.strip_suffix(']').ok_or_else(bad)?;
        let mut fields = Vec::new();
        for part in inner.split(',') {
            let mut chars = part.chars();
            let first = chars.next().ok_or_else(bad)?;
            let (letter, digits) = if first.is_ascii_digit() {
                ('#', part)
            } else {
                (first, chars.as_str())
            };
            fields.push((letter, digits.parse().map_err(|_| bad())?));
        }
        Ok(Name { base, fields })
    }

    pub(crate) fn get(&self, letter: char) -> Result<usize, ExecError> {
        self.fields
            .iter()
            .find(|(l, _)| *l == letter)
            .map(|&(_, v)| v as usize)
            .ok_or_else(|| ExecError::Internal(format!("{} has no index {letter}", self.base)))
    }

    pub(crate) fn number(&self, k: usize) -> Result<usize, ExecError> {
        self.fields
            .get(k)
            .map(|&(_, v)| v as usize)
            .ok_or_else(|| ExecError::Internal(format!("{} has too few indices", self.base)))
    }
}

/// The model's shape over the graph's partitions, the training state that
/// keys the dropout masks (mode and update count), and the masks the loss
/// counts over.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub(crate) hyper: Hyper,
    pub(crate) mode: Mode,
    /// Training iterations begun: Adam's step count.
    pub(crate) updates: u32,
    pub(crate) offsets: Vec<u64>,
    /// See [`GraphInput::row_base`].
    pub(crate) row_base: u64,
    /// See [`GraphInput::row_ids`].
    pub(crate) row_ids: Option<Vec<u64>>,
    pub(crate) features: usize,
    pub(crate) classes: usize,
    pub(crate) train_mask: Vec<bool>,
    pub(crate) val_mask: Vec<bool>,
    pub(crate) test_mask: Vec<bool>,
    pub(crate) train_nodes: usize,
    /// Edges of block `(i, j)` at `i * P + j`, when it exists: kept after
    /// the blocks move to the executor, for GAT's edge offsets.
    pub(crate) block_edges: Vec<Option<u64>>,
    /// Edges of the halo block `(i, j)` (a device's share of a multi-device
    /// run; 0 otherwise). GAT's edge-wise tensors of block `(i, j)` hold
    /// its own edges, then its halo edges.
    pub(crate) halo_edges: Vec<u64>,
    /// Vertices of the whole graph ([`GraphInput::graph_nodes`]).
    pub(crate) nodes: u64,
}

impl Model {
    /// Checks the hyper-parameters against the graph and takes the masks
    /// out of `graph` (the loss needs them; the executor does not).
    pub(crate) fn new(graph: &mut GraphInput, hyper: Hyper) -> Result<Model, ExecError> {
        // Heads split the hidden layers (the last has one); a one-layer
        // GAT has none to split.
        if hyper.model == GnnModel::Gat
            && (hyper.heads == 0 || hyper.layers > 1 && !hyper.hidden.is_multiple_of(hyper.heads))
        {
            return Err(ExecError::Kernel(format!(
                "heads {}: GAT needs a positive number of heads that divides hidden ({})",
                hyper.heads, hyper.hidden
            )));
        }
        let p = graph.partitions();
        if graph.blocks.len() != p * p {
            return Err(ExecError::Internal(format!(
                "{} blocks for {p} partitions",
                graph.blocks.len()
            )));
        }
        let rows = graph.offsets.last().copied().unwrap_or(0);
        if let Some(ids) = &graph.row_ids {
            if ids.len() as u64 != rows {
                return Err(ExecError::Internal(format!(
                    "{} row ids for {rows} rows",
                    ids.len()
                )));
            }
        }
        let block_edges: Vec<Option<u64>> = graph
            .blocks
            .iter()
            .map(|b| b.as_ref().map(|b| b.columns.len() as u64))
            .collect();
        let train_nodes = match graph.train_nodes_total {
            Some(total) => total as usize,
            None => graph.train_mask.iter().filter(|&&m| m).count(),
        };
        Ok(Model {
            hyper,
            mode: Mode::Train,
            updates: 0,
            offsets: graph.offsets.clone(),
            row_base: graph.row_base,
            row_ids: graph.row_ids.take(),
            features: graph.features,
            classes: graph.classes,
            train_mask: std::mem::take(&mut graph.train_mask),
            val_mask: std::mem::take(&mut graph.val_mask),
            test_mask: std::mem::take(&mut graph.test_mask),
            train_nodes,
            block_edges,
            halo_edges: vec![0; p * p],
            nodes: graph.graph_nodes.unwrap_or(rows),
        })
    }

    /// The contents of an input or parameter when the run starts, as
    /// every backend gives them ([`crate::exec::Backend::external`]): a
    /// partition's features or labels, a block, a block's transpose
    /// (built here, and recorded in [`Model::stored_transposes`]), a
    /// layer's initial weights, or Adam's moments at zero. A transpose
    /// is refused where the hyper-parameters say transposes are built
    /// ([`Model::stored_transposes`]).
    pub(crate) fn external(
        &mut self,
        graph: &GraphInput,
        tensor: &fateplan_planner::workload::Tensor,
    ) -> Result<crate::exec::data::Data, ExecError> {
        use crate::exec::data::{copied, zeros, Data};
        let name = Name::parse(&tensor.name)?;
        let block = |name: &Name| {
            let (i, j) = (name.number(0)?, name.number(1)?);
            let block = graph
                .blocks
                .get(i * graph.partitions() + j)
                .and_then(Option::as_ref)
                .ok_or_else(|| {
                    ExecError::Internal(format!("the graph has no block {}", tensor.name))
                })?;
            Ok::<_, ExecError>((j, block))
        };
        Ok(match name.base {
            "x" => {
                let rows = graph.rows(name.get('p')?);
                Data::F32(copied(
                    &graph.x[rows.start * graph.features..rows.end * graph.features],
                )?)
            }
            "y" => Data::I64(copied(&graph.y[graph.rows(name.get('p')?)])?),
            "adj" => Data::Block(block(&name)?.1.try_clone()?),
            "adj_t" if !self.stored_transposes() => {
                return Err(ExecError::Internal(format!(
                    "{}: a stored transpose, for a run whose transposes are {}",
                    tensor.name,
                    self.hyper.transposes.name()
                )))
            }
            "adj_t" => {
                let (j, b) = block(&name)?;
                let t = b
                    .view()
                    .transpose(graph.rows(j).len())
                    .map_err(|e| ExecError::of_kernel(e, || tensor.name.clone()))?;
                Data::Block(BlockData {
                    row_start: t.row_start,
                    columns: t.columns,
                    weights: t.weights,
                    weighting: t.weighting,
                })
            }
            "w" => Data::F32(self.init_weights(name.get('l')?)),
            "adam_m" | "adam_v" => Data::F32(zeros(self.weight_len(name.get('l')?))?),
            _ => {
                return Err(ExecError::Internal(format!(
                    "unexpected external tensor {}",
                    tensor.name
                )))
            }
        })
    }

    /// Whether GCN's and GraphSAGE's transposed aggregations gather over
    /// a transpose handed in (a stored one, or the mirrored block), as
    /// the workload of these hyper-parameters does, or read the blocks.
    pub(crate) fn stored_transposes(&self) -> bool {
        matches!(
            self.hyper.transposes,
            Transposes::Stored | Transposes::Mirrored
        ) && self.hyper.model != GnnModel::Gat
    }

    pub(crate) fn partitions(&self) -> usize {
        self.offsets.len() - 1
    }

    pub(crate) fn rows(&self, p: usize) -> std::ops::Range<usize> {
        self.offsets[p] as usize..self.offsets[p + 1] as usize
    }

    /// The whole graph's index of partition `p`'s first row, as this
    /// input numbers the rows.
    pub(crate) fn row0(&self, p: usize) -> u64 {
        self.row_base + self.offsets[p]
    }

    /// The whole graph's rows of partition `p`'s rows, as the graph was
    /// given: its rows' dropout masks.
    pub(crate) fn keys(&self, p: usize) -> RowKeys<'_> {
        match &self.row_ids {
            Some(ids) => RowKeys::Ids(&ids[self.rows(p)]),
            None => RowKeys::Contiguous(self.row0(p)),
        }
    }

    /// Called before each iteration.
    pub(crate) fn begin_iteration(&mut self) {
        if self.mode == Mode::Train {
            self.updates += 1;
        }
    }

    pub(crate) fn dims(&self, layer: usize) -> (usize, usize) {
        let h = &self.hyper;
        let d_in = if layer == 1 {
            self.features
        } else {
            h.hidden as usize
        };
        let d_out = if layer == h.layers as usize {
            self.classes
        } else {
            h.hidden as usize
        };
        (d_in, d_out)
    }

    /// Whether `layer` projects its input before it aggregates
    /// ([`LayerOrder`]): its `linear` has no bias, its aggregation reads
    /// the projected rows, and its `relu` (or, in the last layer, `bias`)
    /// adds the bias.
    pub(crate) fn projects_first(&self, layer: usize) -> bool {
        let (d_in, d_out) = self.dims(layer);
        self.hyper
            .order
            .projects_first(self.hyper.model, d_in as u64, d_out as u64)
    }

    /// The width of the rows `layer`'s aggregation sums.
    pub(crate) fn width_aggregated(&self, layer: usize) -> usize {
        let (d_in, d_out) = self.dims(layer);
        if self.projects_first(layer) {
            d_out
        } else {
            d_in
        }
    }

    /// Inputs per linear layer: GraphSAGE has a self and a neighbour term.
    pub(crate) fn terms(&self) -> usize {
        if self.hyper.model == GnnModel::Sage {
            2
        } else {
            1
        }
    }

    /// `linear_bwd`'s own inputs in `layer`, before the weight gradients'
    /// running sum ([`running_sum`]): four for GAT and a layer that
    /// projects first (the projection's gradient, the input, the weights,
    /// and the gradient the bias's comes from), else the gradient, each
    /// term's input and the weights.
    pub(crate) fn linear_bwd_inputs(&self, layer: usize) -> usize {
        if self.hyper.model == GnnModel::Gat || self.projects_first(layer) {
            4
        } else {
            self.terms() + 2
        }
    }

    /// The mask of a dropout site of a layer in this iteration, or `None`
    /// when evaluating or without dropout.
    pub(crate) fn dropout(&self, site: u64, layer: usize) -> Option<Dropout> {
        let p = self.hyper.dropout;
        (self.mode == Mode::Train && p > 0.0).then_some(Dropout {
            p,
            seed: self.hyper.seed,
            stream: ((self.updates as u64) << 16) | ((layer as u64) << 2) | site,
        })
    }

    /// Values in a layer's weights (and in each Adam moment).
    pub(crate) fn weight_len(&self, layer: usize) -> usize {
        let (d_in, d_out) = self.dims(layer);
        match self.hyper.model {
            GnnModel::Gat => d_in * d_out + 3 * d_out,
            _ => dense::linear_weight_len(self.terms(), d_in, d_out),
        }
    }

    pub(crate) fn init_weights(&self, layer: usize) -> Vec<f32> {
        let (d_in, d_out) = self.dims(layer);
        let terms = self.terms();
        let limit = (6.0 / (d_in + d_out) as f64).sqrt();
        let mut state = self.hyper.seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(layer as u64 + 1));
        let mut next = || {
            // SplitMix64.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut uniform = |count: usize, limit: f64| -> Vec<f32> {
            (0..count)
                .map(|_| {
                    let unit = (next() >> 11) as f64 / (1u64 << 53) as f64;
                    ((2.0 * unit - 1.0) * limit) as f32
                })
                .collect()
        };
        let mut w = uniform(terms * d_in * d_out, limit);
        if self.hyper.model == GnnModel::Gat {
            // att_src and att_dst, Glorot over their (heads, head_width)
            // shape as PyG initialises them.
            let heads = self.heads(layer);
            let limit = (6.0 / (heads.heads + heads.head_width) as f64).sqrt();
            w.extend(uniform(2 * d_out, limit));
        }
        w.extend(std::iter::repeat_n(0.0, d_out));
        w
    }

    /// GAT's heads at `layer`: the hidden layers' `heads`, one at the last.
    pub(crate) fn heads(&self, layer: usize) -> Heads {
        let (_, d_out) = self.dims(layer);
        let heads = if layer == self.hyper.layers as usize {
            1
        } else {
            self.hyper.heads.max(1) as usize
        };
        Heads {
            heads,
            head_width: d_out / heads,
        }
    }

    pub(crate) fn has_block(&self, i: usize, j: usize) -> bool {
        self.block_edges[i * self.partitions() + j].is_some()
    }

    /// Source partition `j`'s first and last destination in the order
    /// GAT's backward runs them (up or down by
    /// [`gat_destinations_descend`]): the block whose `attention_bwd`
    /// starts `grad_src[j]` and the one that finishes it.
    pub(crate) fn gat_destination_ends(&self, j: usize) -> Option<(usize, usize)> {
        let mut up = (0..self.partitions()).filter(|&i| self.has_block(i, j));
        let lowest = up.next()?;
        let highest = up.next_back().unwrap_or(lowest);
        Some(match gat_destinations_descend(j as u32) {
            true => (highest, lowest),
            false => (lowest, highest),
        })
    }

    /// Edges of row partition `i` in blocks before source `j`, halo edges
    /// included: where block `(i, j)` starts in `alpha[i]`. Its halo edges
    /// follow its own.
    pub(crate) fn edges_before(&self, i: usize, j: usize) -> u64 {
        let p = self.partitions();
        let own: u64 = self.block_edges[i * p..i * p + j].iter().flatten().sum();
        own + self.halo_edges[i * p..i * p + j].iter().sum::<u64>()
    }

    /// Edges of the halo block `(i, j)`.
    pub(crate) fn halo_nnz(&self, i: usize, j: usize) -> u64 {
        self.halo_edges[i * self.partitions() + j]
    }

    /// Edges of block `(i, j)`, or an error when the graph has none.
    pub(crate) fn block_nnz(&self, i: usize, j: usize) -> Result<u64, ExecError> {
        self.block_edges[i * self.partitions() + j]
            .ok_or_else(|| ExecError::Internal(format!("the graph has no block ({i}, {j})")))
    }

    /// Adam's hyper-parameters for `layer` (weight decay on the first
    /// layer unless every layer decays).
    pub(crate) fn adam(&self, layer: usize) -> fateplan_kernels::optim::Adam {
        let h = &self.hyper;
        fateplan_kernels::optim::Adam {
            lr: h.lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: if layer == 1 || h.weight_decay_all_layers {
                h.weight_decay
            } else {
                0.0
            },
        }
    }
}

/// Checks an operator's input count (the plan was made for this workload,
/// so a mismatch is a bug).
pub(crate) fn arity<T>(
    op: &fateplan_planner::workload::Op,
    inputs: &[T],
    expected: usize,
) -> Result<(), ExecError> {
    if inputs.len() == expected {
        Ok(())
    } else {
        Err(ExecError::Internal(format!(
            "{} has {} inputs, expected {expected}",
            op.name,
            inputs.len()
        )))
    }
}

/// `linear_bwd[l,p]`'s own inputs (`own` of them) and, after them, the
/// running sum of layer `l`'s weight gradients through the partitions
/// before `p`, which it adds its own into (none for the first partition:
/// `fateplan_planner::gnn`). Another count is a bug, as for [`arity`].
pub(crate) fn running_sum<'a, T>(
    op: &fateplan_planner::workload::Op,
    inputs: &'a [T],
    own: usize,
) -> Result<(&'a [T], Option<&'a T>), ExecError> {
    match inputs.len() {
        n if n == own => Ok((inputs, None)),
        n if n == own + 1 => Ok((&inputs[..own], inputs.last())),
        n => Err(ExecError::Internal(format!(
            "{} has {n} inputs, expected {own}, or {} with the weight gradients' running sum",
            op.name,
            own + 1
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_parameters_that_cannot_train_are_refused_by_name() {
        let good = Hyper::new(GnnModel::Gcn);
        assert!(good.check().is_ok());
        let cases = [
            (
                Hyper {
                    lr: f32::NAN,
                    ..good
                },
                "hyper-parameter lr: NaN",
            ),
            (Hyper { lr: 0.0, ..good }, "hyper-parameter lr: 0"),
            (
                Hyper {
                    weight_decay: -1.0,
                    ..good
                },
                "hyper-parameter weight_decay: -1",
            ),
            (
                Hyper {
                    dropout: 1.0,
                    ..good
                },
                "hyper-parameter dropout: 1",
            ),
        ];
        for (hyper, expected) in cases {
            let message = hyper.check().unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
        }
    }
}
