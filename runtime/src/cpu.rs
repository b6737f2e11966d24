//! The CPU backend: what each operator of a partitioned GNN workload
//! computes, with the kernels crate.
//!
//! It recognises operators and tensors by the names the planner's GNN
//! builder gives them (`agg[l1,p0,s2]`, `x[p3]`, `w[l2]`, ...). That is
//! safe because a run only executes a plan whose workload digest equals
//! the workload rebuilt from the same graph and model
//! ([`crate::train`] checks it).
//!
//! Dropout masks are never stored: each is regenerated from a
//! counter-based generator keyed by the seed, the iteration, the layer and
//! the element's global row and column, so a recomputation or a backward
//! pass sees the same mask. Input-feature dropout is fused into the first
//! layer's aggregation when that layer aggregates first (the dropped
//! features never exist in memory; for GraphSAGE it applies to the
//! neighbour term only); a layer that projects first drops its input in
//! each task of the projection, a slab of rows at a time into the task's
//! own buffer ([`dense::matmul_rows_dropped`] and its backward), as GAT
//! does.
//!
//! GAT (as PyTorch Geometric's `GATConv` in its Cora example): hidden
//! layers have `heads` heads of `hidden / heads` features, concatenated,
//! then ELU; the last layer has one head. Dropout applies to each layer's
//! input (the features before the first projection, fused into ELU for
//! the others) and to the attention coefficients (keyed by the edge's two
//! ends as the whole graph numbers them, so that the masks do not depend
//! on the partitions or devices: `gat::dropout_edges`). Weights per layer: `W`
//! (`d_in × d_out`), `att_src`, `att_dst`, bias (`d_out` each); `W` and
//! the attention vectors are Glorot-uniform as in PyG, the bias zero.
//! Every GAT operator reads only its inputs, so recomputing one gives the
//! same bits.

use std::sync::Arc;

use fateplan_kernels::dropout::{Dropout, RowKeys};
use fateplan_kernels::gat::{self, BlockGrads, BlockInputs, Heads, NodeScoreGrads};
use fateplan_kernels::{activation, dense, loss, sparse, BlockRef, Init, Write};
use fateplan_planner::gnn::GnnModel;
use fateplan_planner::workload::{Op, Tensor};

use crate::exec::data::{concatenated, copied, zeros, BlockData, Data};
use crate::exec::{Backend, ExecError};
use crate::gnn::{
    arity, running_sum, GnnBackend, Model, Name, SITE_ATTENTION, SITE_HIDDEN, SITE_INPUT,
};
pub use crate::gnn::{GraphInput, Hyper, Metrics, Mode};
use crate::peers::{Peers, Sent};

pub struct CpuGnn {
    /// Features, labels and blocks until the executor holds them.
    graph: GraphInput,
    model: Model,
    metrics: Metrics,
    /// The other devices, in a multi-device run.
    peers: Option<Peers>,
    /// By input position, the buffers of the partial sums an operator
    /// accumulates into that the executor handed over
    /// ([`Backend::run_owned`]): the operator adds into them instead of
    /// copying them into fresh outputs.
    handed: Vec<Option<Vec<f32>>>,
}

fn kernel(error: impl std::fmt::Display) -> ExecError {
    ExecError::Kernel(error.to_string())
}

impl CpuGnn {
    pub fn new(mut graph: GraphInput, hyper: Hyper) -> Result<CpuGnn, ExecError> {
        let model = Model::new(&mut graph, hyper)?;
        Ok(CpuGnn {
            graph,
            model,
            metrics: Metrics::default(),
            peers: None,
            handed: Vec::new(),
        })
    }

    /// One device of a multi-device run: `graph` is its share
    /// ([`crate::share`]), `peers` its halo and its group.
    pub fn with_peers(graph: GraphInput, hyper: Hyper, peers: Peers) -> Result<CpuGnn, ExecError> {
        let mut gnn = CpuGnn::new(graph, hyper)?;
        let p = gnn.model.partitions();
        if peers.partitions() != p {
            return Err(ExecError::Internal(format!(
                "a halo of {} partitions for a share of {p}",
                peers.partitions(),
            )));
        }
        for i in 0..p {
            for j in 0..p {
                let halo = peers.block(i, j).map_or(0, |b| b.columns.len() as u64);
                if halo > 0 && !gnn.model.has_block(i, j) {
                    return Err(ExecError::Internal(format!(
                        "halo block ({i}, {j}) has {halo} edges but the share has no block ({i}, {j})"
                    )));
                }
                gnn.model.halo_edges[i * p + j] = halo;
            }
        }
        gnn.peers = Some(peers);
        Ok(gnn)
    }

    /// The multi-device part, when there is one.
    pub fn peers(&self) -> Option<&Peers> {
        self.peers.as_ref()
    }

    pub fn set_mode(&mut self, mode: Mode) {
        self.model.mode = mode;
    }

    pub fn metrics(&self) -> Metrics {
        self.metrics
    }

    /// The output of an aggregation that starts from `init` (a chain's
    /// partial sum, or SAGE's own-row term) or from zero: the buffer the
    /// executor handed over for `init` when there is one (the kernel adds
    /// into it), else a fresh one.
    fn chain_output<'a>(
        &mut self,
        position: usize,
        init: Option<&'a Data>,
        len: usize,
    ) -> Result<(Vec<f32>, Init<'a>), ExecError> {
        if let Some(handed) = self.take_handed(position, len)? {
            return Ok((handed, Init::Out));
        }
        Ok(match init {
            Some(data) => (zeros(len)?, Init::From(data.f32()?)),
            // Already zero: the kernel adds into it without a second fill.
            None => (zeros(len)?, Init::Out),
        })
    }

    /// The partial sum at input `position` that the executor handed over,
    /// if it did; it must hold `len` values.
    fn take_handed(&mut self, position: usize, len: usize) -> Result<Option<Vec<f32>>, ExecError> {
        let Some(handed) = self.handed.get_mut(position).and_then(Option::take) else {
            return Ok(None);
        };
        if handed.len() != len {
            return Err(ExecError::Internal(format!(
                "a partial sum of {} values for an output of {len}",
                handed.len()
            )));
        }
        Ok(Some(handed))
    }

    /// The partial sum at input `position` to add into: the buffer handed
    /// over, else a copy of `data`; it must hold `len` values.
    fn partial_sum(
        &mut self,
        position: usize,
        data: &Data,
        len: usize,
    ) -> Result<Vec<f32>, ExecError> {
        if let Some(handed) = self.take_handed(position, len)? {
            return Ok(handed);
        }
        let values = data.f32()?;
        if values.len() != len {
            return Err(ExecError::Internal(format!(
                "a partial sum of {} values for an output of {len}",
                values.len()
            )));
        }
        copied(values)
    }

    /// The inputs of `op` that are partial sums it adds into: a chain's
    /// running sum of block aggregations, or GAT's backward's running
    /// gradients (after its six or seven other inputs).
    fn accumulated_inputs(
        &self,
        name: &Name,
        inputs: usize,
    ) -> Result<std::ops::Range<usize>, ExecError> {
        let gat = self.model.hyper.model == GnnModel::Gat;
        Ok(match name.base {
            "agg" if gat && inputs == 4 => 3..4,
            "agg" | "agg_bwd" if !gat && inputs == 3 => 2..3,
            "attention_bwd" if gat => {
                let others = 6 + usize::from(name.get('p')? != name.get('d')?);
                others.min(inputs)..inputs
            }
            _ => 0..0,
        })
    }

    fn loss_metrics(
        &mut self,
        part: usize,
        logits: &[f32],
        labels: &[i64],
    ) -> Result<f32, ExecError> {
        let rows = self.model.rows(part);
        let classes = self.model.classes;
        let train = &self.model.train_mask[rows.clone()];

        let value = loss::softmax_cross_entropy(
            logits,
            rows.len(),
            classes,
            labels,
            train,
            self.model.train_nodes.max(1),
        )
        .map_err(kernel)?;
        self.metrics.loss += value;

        let masks = [
            train,
            &self.model.val_mask[rows.clone()],
            &self.model.test_mask[rows.clone()],
        ];
        let counts = loss::accuracy(logits, rows.len(), classes, labels, &masks).map_err(kernel)?;
        let m = &mut self.metrics;
        let sums = [
            (&mut m.train_correct, &mut m.train_total),
            (&mut m.val_correct, &mut m.val_total),
            (&mut m.test_correct, &mut m.test_total),
        ];
        for ((correct, total), (c, t)) in sums.into_iter().zip(counts) {
            *correct += c;
            *total += t;
        }

        Ok(value as f32)
    }
}

/// A block's kernel view.
fn view(block: &BlockData) -> BlockRef<'_> {
    block.view()
}

/// GCN layers that project first ([`crate::gnn::Model::projects_first`]).
impl CpuGnn {
    /// A layer's weights, their length checked.
    fn weights<'a>(&self, op: &Op, l: usize, data: &'a Data) -> Result<&'a [f32], ExecError> {
        let w = data.f32()?;
        let expected = self.model.weight_len(l);
        if w.len() != expected {
            return Err(ExecError::Internal(format!(
                "{}: weights hold {} values, expected {expected}",
                op.name,
                w.len()
            )));
        }
        Ok(w)
    }

    /// The ReLU's input of layer `l` and, where the layer projects first
    /// (`[agg, w]`), the bias to add to it; where it aggregates first,
    /// `[z]` alone (the linear added the bias).
    fn activation_input<'a>(
        &self,
        op: &Op,
        l: usize,
        inputs: &[&'a Data],
    ) -> Result<(&'a [f32], Option<&'a [f32]>), ExecError> {
        if !self.model.projects_first(l) {
            if inputs.len() != 1 {
                return Err(ExecError::Internal(format!(
                    "{}: {} inputs for the pre-activation, expected it alone",
                    op.name,
                    inputs.len()
                )));
            }
            return Ok((inputs[0].f32()?, None));
        }
        let [agg, w] = inputs else {
            return Err(ExecError::Internal(format!(
                "{}: {} inputs for the pre-activation, expected the aggregation and the weights",
                op.name,
                inputs.len()
            )));
        };
        let w = self.weights(op, l, w)?;
        Ok((agg.f32()?, Some(self.bias(l, w))))
    }

    /// `linear_bwd[l,p]` of a layer that projects first. Inputs: the
    /// projection's gradient (from the transposed aggregation), the
    /// layer's input, the weights and the aggregation's gradient (the
    /// bias's comes from it). Outputs: the weight gradient and, above the
    /// first layer, the input's.
    fn linear_bwd_projected(
        &self,
        op: &Op,
        name: &Name,
        inputs: &[&Data],
    ) -> Result<Vec<Data>, ExecError> {
        arity(op, inputs, 4)?;
        let (l, part) = (name.get('l')?, name.get('p')?);
        let (d_in, d_out) = self.model.dims(l);
        let (dz, x) = (inputs[0].f32()?, inputs[1].f32()?);
        let w = self.weights(op, l, inputs[2])?;
        let dagg = inputs[3].f32()?;
        if dagg.len() != dz.len() {
            return Err(ExecError::Internal(format!(
                "{}: the aggregation's gradient has {} values, the projection's {}",
                op.name,
                dagg.len(),
                dz.len()
            )));
        }
        let matrix = d_in * d_out;
        let mut dw = zeros(w.len())?;
        let (dw_matrix, dw_bias) = dw.split_at_mut(matrix);
        dense::column_sums(dagg, d_out, dw_bias, Write::Overwrite).map_err(kernel)?;
        let mut dx = (l > 1)
            .then(|| zeros(dz.len() / d_out * d_in))
            .transpose()?;
        self.project_bwd(l, part, dz, x, &w[..matrix], dw_matrix, dx.as_deref_mut())?;
        let mut outputs = vec![Data::F32(dw)];
        outputs.extend(dx.map(Data::F32));
        Ok(outputs)
    }
}

/// The rows of layer `l`'s input `x` of partition `part`, `d_in` wide.
fn input_rows(l: usize, part: usize, x: &[f32], d_in: usize) -> Result<usize, ExecError> {
    if d_in == 0 || !x.len().is_multiple_of(d_in) {
        return Err(ExecError::Internal(format!(
            "layer {l}, partition {part}: {} input values are not rows of {d_in}",
            x.len()
        )));
    }
    Ok(x.len() / d_in)
}

/// GAT's operators (see the module doc and `fateplan_planner::gnn`).
impl CpuGnn {
    /// `alpha[i]`'s slice for block `(i, j)` (`block`), and with attention
    /// dropout its dropped copy.
    fn block_alpha<'a>(
        &self,
        l: usize,
        (i, j): (usize, usize),
        block: &BlockData,
        alpha: &'a [f32],
        heads: usize,
    ) -> Result<(&'a [f32], Option<Vec<f32>>), ExecError> {
        let start = self.model.edges_before(i, j);
        let src = (self.model.keys(j), self.model.rows(j).len());
        self.edge_alpha(l, i, start, view(block), src, alpha, heads)
    }

    /// `alpha[i]`'s slice for the halo block `(i, j)` (`block`, whose
    /// columns are the halo rows `ids`), and with attention dropout its
    /// dropped copy.
    #[allow(clippy::too_many_arguments)]
    fn halo_alpha<'a>(
        &self,
        l: usize,
        (i, j): (usize, usize),
        block: &BlockData,
        ids: &[u64],
        alpha: &'a [f32],
        heads: usize,
    ) -> Result<(&'a [f32], Option<Vec<f32>>), ExecError> {
        let start = self.model.edges_before(i, j) + self.model.block_nnz(i, j)?;
        let src = (RowKeys::Ids(ids), ids.len());
        self.edge_alpha(l, i, start, view(block), src, alpha, heads)
    }

    /// The slice of `alpha[i]` from edge `start` for `block`'s edges, and
    /// with attention dropout its dropped copy (the masks keyed by the
    /// edges' ends: [`gat::dropout_edges`]); `src`: the keys of the
    /// block's source rows and their count.
    #[allow(clippy::too_many_arguments)]
    fn edge_alpha<'a>(
        &self,
        l: usize,
        i: usize,
        start: u64,
        block: BlockRef,
        (src, src_rows): (RowKeys, usize),
        alpha: &'a [f32],
        heads: usize,
    ) -> Result<(&'a [f32], Option<Vec<f32>>), ExecError> {
        let nnz = block.nnz() as u64;
        let range = (start * heads as u64) as usize..((start + nnz) * heads as u64) as usize;
        let slice = alpha.get(range.clone()).ok_or_else(|| {
            ExecError::Internal(format!(
                "alpha of partition {i} has {} values, a block from edge {start} needs {range:?}",
                alpha.len()
            ))
        })?;
        let dropped = match self.model.dropout(SITE_ATTENTION, l) {
            Some(mask) => {
                let mut kept = copied(slice)?;
                let dst = self.model.keys(i);
                let nodes = self.model.nodes;
                gat::dropout_edges(block, heads, dst, src, src_rows, nodes, &mask, &mut kept)
                    .map_err(kernel)?;
                Some(kept)
            }
            None => None,
        };
        Ok((slice, dropped))
    }

    /// The input dropout of layer `l` (the first layer's alone), or
    /// `None`.
    fn input_dropout(&self, l: usize) -> Option<Dropout> {
        self.model.dropout(SITE_INPUT, l).filter(|_| l == 1)
    }

    /// `dropout(x) · W` for the layer's input rows `x` of partition `part`
    /// (`w` the `d_in × d_out` matrix alone): GAT's projection and a
    /// projecting-first GCN layer's. With input dropout each task of the
    /// product masks its own rows ([`dense::matmul_rows_dropped`]).
    fn project(&self, l: usize, part: usize, x: &[f32], w: &[f32]) -> Result<Vec<f32>, ExecError> {
        let (d_in, d_out) = self.model.dims(l);
        let rows = input_rows(l, part, x, d_in)?;
        let mut z = zeros(rows * d_out)?;
        match self.input_dropout(l) {
            Some(mask) => {
                let keys = self.model.keys(part);
                dense::matmul_rows_dropped(x, rows, d_in, w, d_out, &mut z, keys, &mask)
            }
            None => dense::matmul_rows(x, rows, d_in, w, d_out, &mut z),
        }
        .map_err(kernel)?;
        Ok(z)
    }

    /// The backward of [`CpuGnn::project`]: `dw = dropout(x)ᵀ · dz` and,
    /// above the first layer, `dx = dz · Wᵀ`.
    #[allow(clippy::too_many_arguments)]
    fn project_bwd(
        &self,
        l: usize,
        part: usize,
        dz: &[f32],
        x: &[f32],
        w: &[f32],
        dw: &mut [f32],
        dx: Option<&mut [f32]>,
    ) -> Result<(), ExecError> {
        let (d_in, d_out) = self.model.dims(l);
        let rows = input_rows(l, part, x, d_in)?;
        if dz.len() != rows * d_out {
            return Err(ExecError::Internal(format!(
                "layer {l}, partition {part}: the input has {rows} rows of {d_in}, the gradient {} \
                 values of rows of {d_out}",
                dz.len()
            )));
        }
        match self.input_dropout(l) {
            Some(mask) if dx.is_none() => {
                let keys = self.model.keys(part);
                dense::matmul_rows_dropped_bwd(
                    dz,
                    x,
                    rows,
                    d_in,
                    d_out,
                    dw,
                    keys,
                    &mask,
                    Write::Overwrite,
                )
            }
            Some(_) => {
                return Err(ExecError::Internal(format!(
                    "layer {l}, partition {part}: an input gradient through input dropout"
                )))
            }
            None => dense::matmul_rows_bwd(dz, x, rows, d_in, w, d_out, dw, dx, Write::Overwrite),
        }
        .map_err(kernel)
    }

    /// Layer `l`'s bias: the last `d_out` of its weights `w` (checked by
    /// [`CpuGnn::weights`] to hold them).
    fn bias<'a>(&self, l: usize, w: &'a [f32]) -> &'a [f32] {
        let (_, d_out) = self.model.dims(l);
        &w[w.len() - d_out..]
    }

    /// `agg + bias` for the rows of `agg`.
    fn plus_bias(&self, l: usize, agg: &[f32], w: &[f32]) -> Result<Vec<f32>, ExecError> {
        let (_, d_out) = self.model.dims(l);
        let bias = self.bias(l, w);
        let mut y = copied(agg)?;
        dense::add_bias(&mut y, d_out, bias).map_err(kernel)?;
        Ok(y)
    }

    /// Runs a GAT operator; `None` for the operators every model shares
    /// (loss, its backward, gradient accumulation).
    fn run_gat(
        &mut self,
        op: &Op,
        name: &Name,
        inputs: &[&Data],
    ) -> Result<Option<Vec<Data>>, ExecError> {
        let l = match name.base {
            "loss" | "loss_bwd" | "grad_accumulate" => return Ok(None),
            _ => name.get('l')?,
        };
        let (d_in, d_out) = self.model.dims(l);
        let heads = self.model.heads(l);
        let h_n = heads.heads;
        let weights = |k: usize| self.weights(op, l, inputs[k]);
        // [W | att_src | att_dst | bias]
        let att = |w: &'_ [f32]| {
            let a = &w[d_in * d_out..];
            (a[..d_out].to_vec(), a[d_out..2 * d_out].to_vec())
        };
        let outputs = match name.base {
            "linear" => {
                arity(op, inputs, 2)?;
                let (x, w) = (inputs[0].f32()?, weights(1)?);
                let part = name.get('p')?;
                vec![Data::F32(self.project(l, part, x, &w[..d_in * d_out])?)]
            }
            "node_scores" => {
                arity(op, inputs, 2)?;
                let (z, w) = (inputs[0].f32()?, weights(1)?);
                let rows = z.len() / d_out;
                let (att_src, att_dst) = att(w);
                let mut scores = zeros(2 * rows * h_n)?;
                let (a_src, a_dst) = scores.split_at_mut(rows * h_n);
                gat::node_scores(z, heads, &att_src, &att_dst, a_src, a_dst).map_err(kernel)?;
                vec![Data::F32(scores)]
            }
            "sddmm" => {
                let (i, j) = (name.get('p')?, name.get('s')?);
                arity(op, inputs, if i == j { 2 } else { 3 })?;
                let block = inputs[0].block()?;
                let own = inputs[1].f32()?;
                let other = if i == j { own } else { inputs[2].f32()? };
                let a_dst = &own[own.len() / 2..];
                let a_src = &other[..other.len() / 2];
                let own_len = block.columns.len() * h_n;
                let halo_len = self.model.halo_nnz(i, j) as usize * h_n;
                let mut scores = zeros(own_len + halo_len)?;
                let (own_scores, halo_scores) = scores.split_at_mut(own_len);
                gat::edge_scores(view(block), a_dst, a_src, h_n, own_scores).map_err(kernel)?;
                if let Some(peers) = &mut self.peers {
                    // Every device exchanges its `a_src` of `j` at the
                    // layer's first `sddmm` reading `j`.
                    let keys = self.model.keys(j);
                    peers.exchange(Sent::Scores, l, j, h_n, a_src, keys, None)?;
                    if let Some(halo) = peers.block(i, j) {
                        let halo_src = peers.exchanged(Sent::Scores, l, j)?;
                        gat::edge_scores(view(halo), a_dst, halo_src, h_n, halo_scores)
                            .map_err(kernel)?;
                    }
                }
                vec![Data::F32(scores)]
            }
            "edge_softmax" => {
                let k = inputs.len() / 2;
                arity(op, inputs, 2 * k)?;
                let i = name.get('p')?;
                let p = self.model.partitions();
                let sources: Vec<usize> = (0..p).filter(|&s| self.model.has_block(i, s)).collect();
                if sources.len() != k {
                    return Err(ExecError::Internal(format!(
                        "{}: {k} blocks, but partition {i} has {} source blocks",
                        op.name,
                        sources.len()
                    )));
                }
                // Each source's own block, then its halo block: the order
                // `sddmm` wrote their scores in.
                let mut blocks: Vec<BlockRef> = Vec::with_capacity(2 * k);
                let mut lens = Vec::with_capacity(2 * k);
                let mut scores: Vec<&[f32]> = Vec::with_capacity(k);
                for (b, &s) in sources.iter().enumerate() {
                    let own = inputs[b].block()?;
                    let values = inputs[k + b].f32()?;
                    let halo = self.peers.as_ref().and_then(|peers| peers.block(i, s));
                    let (own_len, halo_len) = (
                        own.columns.len() * h_n,
                        halo.map_or(0, |h| h.columns.len() * h_n),
                    );
                    if values.len() != own_len + halo_len {
                        return Err(ExecError::Internal(format!(
                            "{}: the scores of block ({i}, {s}) have {} values, expected {}",
                            op.name,
                            values.len(),
                            own_len + halo_len
                        )));
                    }
                    blocks.push(view(own));
                    lens.push(own_len);
                    if let Some(halo) = halo {
                        blocks.push(view(halo));
                        lens.push(halo_len);
                    }
                    scores.push(values);
                }
                let mut alpha = concatenated(&scores)?;
                let mut slices: Vec<&mut [f32]> = Vec::with_capacity(lens.len());
                let mut rest = alpha.as_mut_slice();
                for &len in &lens {
                    let (head, tail) = rest.split_at_mut(len);
                    slices.push(head);
                    rest = tail;
                }
                gat::edge_softmax(&blocks, h_n, &mut slices).map_err(kernel)?;
                vec![Data::F32(alpha)]
            }
            "agg" => {
                let (i, j) = (name.get('p')?, name.get('s')?);
                let first = (0..j).all(|s| !self.model.has_block(i, s));
                arity(op, inputs, if first { 3 } else { 4 })?;
                let block = inputs[0].block()?;
                let z_src = inputs[1].f32()?;
                let alpha_i = inputs[2].f32()?;
                let (alpha, dropped) = self.block_alpha(l, (i, j), block, alpha_i, h_n)?;
                let rows = block.row_start.len().saturating_sub(1);
                let (mut out, init) = self.chain_output(3, inputs.get(3).copied(), rows * d_out)?;
                let alpha = dropped.as_deref().unwrap_or(alpha);
                gat::aggregate(view(block), alpha, z_src, heads, init, &mut out).map_err(kernel)?;
                if let Some(peers) = &mut self.peers {
                    // Every device exchanges its `z` of `j` at the layer's
                    // first `agg` reading `j`.
                    let keys = self.model.keys(j);
                    peers.exchange(Sent::Rows, l, j, d_out, z_src, keys, None)?;
                }
                if let Some(peers) = &self.peers {
                    if let Some(halo) = peers.block(i, j) {
                        let z_halo = peers.exchanged(Sent::Rows, l, j)?;
                        let ids = peers.ids(j);
                        let (alpha, dropped) =
                            self.halo_alpha(l, (i, j), halo, ids, alpha_i, h_n)?;
                        let alpha = dropped.as_deref().unwrap_or(alpha);
                        gat::aggregate(view(halo), alpha, z_halo, heads, Init::Out, &mut out)
                            .map_err(kernel)?;
                    }
                }
                vec![Data::F32(out)]
            }
            "elu" => {
                arity(op, inputs, 2)?;
                let i = name.get('p')?;
                let (z, bias) = (inputs[0].f32()?, self.bias(l, weights(1)?));
                let mut out = zeros(z.len())?;
                let mask = self.model.dropout(SITE_HIDDEN, l);
                let keys = self.model.keys(i);
                activation::elu_dropout_biased(z, bias, &mut out, d_out, keys, mask.as_ref())
                    .map_err(kernel)?;
                vec![Data::F32(out)]
            }
            "bias" => {
                arity(op, inputs, 2)?;
                vec![Data::F32(self.plus_bias(
                    l,
                    inputs[0].f32()?,
                    weights(1)?,
                )?)]
            }
            "elu_bwd" => {
                arity(op, inputs, 3)?;
                let i = name.get('p')?;
                let grad = inputs[0].f32()?;
                let (z, bias) = (inputs[1].f32()?, self.bias(l, weights(2)?));
                let mut out = zeros(z.len())?;
                let mask = self.model.dropout(SITE_HIDDEN, l);
                activation::elu_dropout_bwd_biased(
                    grad,
                    z,
                    bias,
                    d_out,
                    self.model.keys(i),
                    mask.as_ref(),
                    &mut out,
                )
                .map_err(kernel)?;
                vec![Data::F32(out)]
            }
            "attention_bwd" => self.attention_bwd(op, name, inputs, l, heads)?,
            "node_scores_bwd" => {
                arity(op, inputs, 5)?;
                let grad_src = inputs[0].f32()?;
                let grad_dst = inputs[1].f32()?;
                let z = inputs[2].f32()?;
                let (att_src, att_dst) = att(weights(3)?);
                let dout = inputs[4].f32()?;
                let rows = z.len() / d_out;
                if grad_src.len() != rows * (d_out + h_n) {
                    return Err(ExecError::Internal(format!(
                        "{}: grad_src has {} values, expected {}",
                        op.name,
                        grad_src.len(),
                        rows * (d_out + h_n)
                    )));
                }
                let (value, grad_a_src) = grad_src.split_at(rows * d_out);
                let mut grad_z = copied(value)?;
                let mut grad_att = zeros(3 * d_out)?;
                let (g_src, rest) = grad_att.split_at_mut(d_out);
                let (g_dst, g_bias) = rest.split_at_mut(d_out);
                let grads = NodeScoreGrads {
                    grad_z: &mut grad_z,
                    grad_att_src: g_src,
                    grad_att_dst: g_dst,
                };
                gat::node_scores_bwd(
                    z,
                    heads,
                    &att_src,
                    &att_dst,
                    grad_a_src,
                    grad_dst,
                    grads,
                    Write::Overwrite,
                )
                .map_err(kernel)?;
                dense::column_sums(dout, d_out, g_bias, Write::Overwrite).map_err(kernel)?;
                vec![Data::F32(grad_z), Data::F32(grad_att)]
            }
            "linear_bwd" => {
                arity(op, inputs, 4)?;
                let part = name.get('p')?;
                let dz = inputs[0].f32()?;
                let x = inputs[1].f32()?;
                let w = weights(2)?;
                let grad_att = inputs[3].f32()?;
                let matrix = d_in * d_out;
                let mut dw = zeros(w.len())?;
                let (dw_matrix, dw_rest) = dw.split_at_mut(matrix);
                if grad_att.len() != dw_rest.len() {
                    return Err(ExecError::Internal(format!(
                        "{}: grad_att has {} values, expected {}",
                        op.name,
                        grad_att.len(),
                        dw_rest.len()
                    )));
                }
                dw_rest.copy_from_slice(grad_att);
                let mut dx = (l > 1)
                    .then(|| zeros(dz.len() / d_out * d_in))
                    .transpose()?;
                self.project_bwd(l, part, dz, x, &w[..matrix], dw_matrix, dx.as_deref_mut())?;
                let mut outputs = vec![Data::F32(dw)];
                outputs.extend(dx.map(Data::F32));
                outputs
            }
            _ => {
                return Err(ExecError::Kernel(format!(
                    "the CPU backend cannot run {} for GAT",
                    op.name
                )))
            }
        };
        Ok(Some(outputs))
    }

    /// `attention_bwd[l,p_j,d_i]`: block `(i, j)`'s share of the attention
    /// backward. Inputs: the block, `alpha[i]`, the node scores of `i` (and
    /// of `j` when `j != i`), `z[j]`, the aggregation's gradient and
    /// forward output for `i`, then the partial `grad_src[j]` unless `i` is
    /// `j`'s first destination (in the order the backward runs them, up or
    /// down: `gat_destination_ends`) and the partial `grad_dst[i]` unless
    /// `j` is `i`'s first source. Outputs: both partials with this block
    /// added.
    fn attention_bwd(
        &mut self,
        op: &Op,
        name: &Name,
        inputs: &[&Data],
        l: usize,
        heads: Heads,
    ) -> Result<Vec<Data>, ExecError> {
        let (j, i) = (name.get('p')?, name.get('d')?);
        let (h_n, d) = (heads.heads, heads.width());
        let (first, last) = self.model.gat_destination_ends(j).ok_or_else(|| {
            ExecError::Internal(format!("{}: source {j} has no destination", op.name))
        })?;
        let first_destination = i == first;
        let first_source = (0..j).all(|s| !self.model.has_block(i, s));
        let expected =
            6 + usize::from(i != j) + usize::from(!first_destination) + usize::from(!first_source);
        arity(op, inputs, expected)?;
        let block = inputs[0].block()?;
        let scores_i = inputs[2].f32()?;
        let mut k = 3;
        let scores_j = if i != j {
            k += 1;
            inputs[3].f32()?
        } else {
            scores_i
        };
        let z_src = inputs[k].f32()?;
        let grad_out = inputs[k + 1].f32()?;
        let out = inputs[k + 2].f32()?;
        k += 3;
        let (rows_i, rows_j) = (self.model.rows(i).len(), self.model.rows(j).len());
        let mut grad_src = if first_destination {
            zeros(rows_j * (d + h_n))?
        } else {
            k += 1;
            self.partial_sum(k - 1, inputs[k - 1], rows_j * (d + h_n))
                .map_err(|e| match e {
                    ExecError::Internal(why) => {
                        ExecError::Internal(format!("{}: grad_src: {why}", op.name))
                    }
                    other => other,
                })?
        };
        let mut grad_dst = if first_source {
            zeros(rows_i * h_n)?
        } else {
            self.partial_sum(k, inputs[k], rows_i * h_n)
                .map_err(|e| match e {
                    ExecError::Internal(why) => {
                        ExecError::Internal(format!("{}: grad_dst: {why}", op.name))
                    }
                    other => other,
                })?
        };
        let alpha_i = inputs[1].f32()?;
        let (alpha, dropped) = self.block_alpha(l, (i, j), block, alpha_i, h_n)?;
        let (grad_z_src, grad_a_src) = grad_src.split_at_mut(rows_j * d);
        let a_dst = &scores_i[scores_i.len() / 2..];
        let block_inputs = BlockInputs {
            block: view(block),
            alpha,
            alpha_dropped: dropped.as_deref(),
            a_dst,
            a_src: &scores_j[..scores_j.len() / 2],
            z_src,
            grad_out,
            out,
        };
        let grads = BlockGrads {
            grad_z_src,
            grad_a_src,
            grad_a_dst: &mut grad_dst,
        };
        gat::aggregate_bwd(block_inputs, heads, grads, Write::Accumulate).map_err(kernel)?;
        if self.peers.is_some() {
            self.attention_bwd_halo(
                l,
                (i, j),
                heads,
                (alpha_i, a_dst),
                (grad_out, out),
                &mut grad_dst,
            )
            .map_err(|e| match e {
                ExecError::Internal(why) => ExecError::Internal(format!("{}: {why}", op.name)),
                other => other,
            })?;
            // The last destination of `j` returns the halo's gradients to
            // their owners and adds the others' into its own.
            if i == last {
                if let Some(peers) = &mut self.peers {
                    peers.return_halo_grads(l, j, &[d, h_n], &mut grad_src)?;
                }
            }
        }
        Ok(vec![Data::F32(grad_src), Data::F32(grad_dst)])
    }

    /// The halo block `(i, j)`'s share of `attention_bwd[l,p_j,d_i]`: adds
    /// to the halo's gradients (its `z` and its `a_src`, to be returned to
    /// their owners) and to `grad_dst` of `i`. `alpha_i` is `alpha[i]`,
    /// `a_dst` the destination scores of `i`, `grad_out` and `out` the
    /// aggregation's gradient and forward output.
    fn attention_bwd_halo(
        &mut self,
        l: usize,
        (i, j): (usize, usize),
        heads: Heads,
        (alpha_i, a_dst): (&[f32], &[f32]),
        (grad_out, out): (&[f32], &[f32]),
        grad_dst: &mut [f32],
    ) -> Result<(), ExecError> {
        let (h_n, d) = (heads.heads, heads.width());
        let Some(peers) = &self.peers else {
            return Ok(());
        };
        let Some(halo) = peers.block(i, j) else {
            return Ok(());
        };
        let (alpha, dropped) = self.halo_alpha(l, (i, j), halo, peers.ids(j), alpha_i, h_n)?;
        let rows = peers.halo_rows(j);
        let Some(peers) = &mut self.peers else {
            return Ok(());
        };
        peers.add_halo_grads(l, j, i, rows * (d + h_n), |read, acc| {
            let block = read.block(i, j).ok_or_else(|| {
                ExecError::Internal(format!("halo block ({i}, {j}) went missing"))
            })?;
            let (grad_z_src, grad_a_src) = acc.split_at_mut(rows * d);
            let inputs = BlockInputs {
                block: view(block),
                alpha,
                alpha_dropped: dropped.as_deref(),
                a_dst,
                a_src: read.exchanged(Sent::Scores, l, j)?,
                z_src: read.exchanged(Sent::Rows, l, j)?,
                grad_out,
                out,
            };
            let grads = BlockGrads {
                grad_z_src,
                grad_a_src,
                grad_a_dst: grad_dst,
            };
            gat::aggregate_bwd(inputs, heads, grads, Write::Accumulate).map_err(kernel)
        })
    }
}

impl GnnBackend for CpuGnn {
    fn set_mode(&mut self, mode: Mode) {
        CpuGnn::set_mode(self, mode);
    }

    fn metrics(&self) -> Result<Metrics, ExecError> {
        match &self.peers {
            Some(peers) => peers.metrics(self.metrics),
            None => Ok(self.metrics),
        }
    }
}

impl Backend for CpuGnn {
    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError> {
        self.model.external(&self.graph, tensor)
    }

    /// Features, labels and blocks now live in the executor's tiers; the
    /// masks stay, for the loss.
    fn externals_placed(&mut self) {
        self.graph.x = Vec::new();
        self.graph.y = Vec::new();
        self.graph.blocks = Vec::new();
    }

    fn begin_iteration(&mut self, _iteration: u64) -> Result<(), ExecError> {
        self.metrics = Metrics::default();
        self.model.begin_iteration();
        if let Some(peers) = &mut self.peers {
            peers.begin_iteration(self.model.mode == Mode::Train);
        }
        Ok(())
    }

    /// An operator that adds into partial sums (`accumulated_inputs`: a
    /// GCN or SAGE aggregation's third input, a GAT aggregation's fourth,
    /// a GAT attention backward's running gradients) adds into their
    /// buffers when the executor hands them over, instead of copying
    /// them into fresh outputs.
    fn run_owned(&mut self, op: &Op, mut inputs: Vec<Arc<Data>>) -> Result<Vec<Data>, ExecError> {
        let name = Name::parse(&op.name)?;
        self.handed.clear();
        for position in self.accumulated_inputs(&name, inputs.len())? {
            let placeholder = Arc::new(Data::F32(Vec::new()));
            let input = std::mem::replace(&mut inputs[position], placeholder);
            match Arc::try_unwrap(input) {
                Ok(Data::F32(values)) => {
                    if self.handed.len() <= position {
                        self.handed.resize(position + 1, None);
                    }
                    // `run` reads the sum from the handed buffer.
                    self.handed[position] = Some(values);
                }
                Ok(other) => inputs[position] = Arc::new(other),
                Err(shared) => inputs[position] = shared,
            }
        }
        let refs: Vec<&Data> = inputs.iter().map(|d| d.as_ref()).collect();
        let result = self.run(op, &refs);
        let unused = self.handed.drain(..).any(|h| h.is_some());
        if unused && result.is_ok() {
            return Err(ExecError::Internal(format!(
                "{} left a partial sum it was handed unused",
                op.name
            )));
        }
        result
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        let name = Name::parse(&op.name)?;
        if name.base == "linear_bwd" {
            // After the first partition, the weight gradient is added into
            // the running sum over the partitions before it.
            let own = self.model.linear_bwd_inputs(name.get('l')?);
            if let (own, Some(before)) = running_sum(op, inputs, own)? {
                let mut outputs = self.run(op, own)?;
                match outputs.first_mut() {
                    Some(Data::F32(dw)) => dense::add_into(before.f32()?, dw).map_err(kernel)?,
                    _ => {
                        return Err(ExecError::Internal(format!(
                            "{}: its first output is not a weight gradient",
                            op.name
                        )))
                    }
                }
                return Ok(outputs);
            }
        }
        if self.model.hyper.model == GnnModel::Gat {
            if let Some(outputs) = self.run_gat(op, &name, inputs)? {
                return Ok(outputs);
            }
        }
        let terms = self.model.terms();
        match name.base {
            "agg" => {
                let (l, j) = (name.get('l')?, name.get('s')?);
                // The width of the rows it sums: a layer that projects
                // first sums projected rows, its input dropout already
                // applied.
                let projected = self.model.projects_first(l);
                let d_in = self.model.width_aggregated(l);
                let block = inputs[0].block()?;
                let src = inputs[1].f32()?;
                let rows = block.row_start.len().saturating_sub(1);
                let (mut out, init) = self.chain_output(2, inputs.get(2).copied(), rows * d_in)?;
                let view = block.view();
                let mask = self
                    .model
                    .dropout(SITE_INPUT, l)
                    .filter(|_| l == 1 && !projected);
                match mask {
                    Some(mask) => {
                        let src_keys = self.model.keys(j);
                        sparse::spmm_dropout(view, src, d_in, init, &mut out, &mask, src_keys)
                    }
                    None => sparse::spmm(view, src, d_in, init, &mut out),
                }
                .map_err(kernel)?;
                if let Some(peers) = &mut self.peers {
                    let i = name.get('p')?;
                    let keys = self.model.keys(j);
                    peers.aggregate(l, i, j, d_in, src, keys, mask.as_ref(), &mut out)?;
                }
                Ok(vec![Data::F32(out)])
            }
            "linear" if self.model.projects_first(name.get('l')?) => {
                arity(op, inputs, 2)?;
                let (l, part) = (name.get('l')?, name.get('p')?);
                let (d_in, d_out) = self.model.dims(l);
                let (x, w) = (inputs[0].f32()?, self.weights(op, l, inputs[1])?);
                Ok(vec![Data::F32(self.project(
                    l,
                    part,
                    x,
                    &w[..d_in * d_out],
                )?)])
            }
            "bias" => {
                arity(op, inputs, 2)?;
                let l = name.get('l')?;
                let w = self.weights(op, l, inputs[1])?;
                Ok(vec![Data::F32(self.plus_bias(l, inputs[0].f32()?, w)?)])
            }
            "linear" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.model.dims(l);
                let w = inputs[terms].f32()?;
                let xs: Vec<&[f32]> = inputs[..terms]
                    .iter()
                    .map(|d| d.f32())
                    .collect::<Result<_, _>>()?;
                let rows = xs[0].len() / d_in;
                let mut out = zeros(rows * d_out)?;
                dense::linear(&xs, rows, d_in, w, d_out, &mut out).map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            // Where the layer projects first, the bias is added in the
            // activation's own pass.
            "relu" => {
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.model.dims(l);
                let (z, bias) = self.activation_input(op, l, inputs)?;
                let mut out = zeros(z.len())?;
                let (mask, keys) = (self.model.dropout(SITE_HIDDEN, l), self.model.keys(i));
                match bias {
                    Some(b) => {
                        activation::relu_dropout_biased(z, b, &mut out, d_out, keys, mask.as_ref())
                    }
                    None => activation::relu_dropout(z, &mut out, d_out, keys, mask.as_ref()),
                }
                .map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "relu_mask" => {
                let l = name.get('l')?;
                let (_, d_out) = self.model.dims(l);
                let (z, bias) = self.activation_input(op, l, inputs)?;
                let mut words = zeros::<i64>(z.len().div_ceil(64))?;
                let bits = bytemuck::cast_slice_mut(&mut words);
                match bias {
                    Some(b) => activation::positive_bits_biased(z, b, d_out, bits),
                    None => activation::positive_bits(z, bits),
                }
                .map_err(kernel)?;
                Ok(vec![Data::I64(words)])
            }
            // From the ReLU's mask (`relu_mask`), or in a plan made before
            // the masks from the pre-activation.
            "relu_bwd" => {
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.model.dims(l);
                let grad = inputs[0].f32()?;
                let mut out = zeros(grad.len())?;
                let (mask, keys) = (self.model.dropout(SITE_HIDDEN, l), self.model.keys(i));
                match inputs {
                    [_, Data::I64(bits)] => activation::relu_dropout_bwd_bits(
                        grad,
                        bytemuck::cast_slice(bits),
                        d_out,
                        keys,
                        mask.as_ref(),
                        &mut out,
                    ),
                    _ => {
                        // A plan from before the masks: its pre-activation
                        // is made here.
                        let (z, bias) = self.activation_input(op, l, &inputs[1..])?;
                        let with_bias = match bias {
                            Some(b) => {
                                let mut y = copied(z)?;
                                dense::add_bias(&mut y, d_out, b).map_err(kernel)?;
                                Some(y)
                            }
                            None => None,
                        };
                        let z = with_bias.as_deref().unwrap_or(z);
                        activation::relu_dropout_bwd(grad, z, d_out, keys, mask.as_ref(), &mut out)
                    }
                }
                .map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "loss" => {
                let i = name.get('p')?;
                let value = self.loss_metrics(i, inputs[0].f32()?, inputs[1].i64()?)?;
                Ok(vec![Data::F32(vec![value])])
            }
            "loss_bwd" => {
                let i = name.get('p')?;
                let rows = self.model.rows(i);
                let logits = inputs[0].f32()?;
                let mut grad = zeros(logits.len())?;
                loss::softmax_cross_entropy_bwd(
                    logits,
                    rows.len(),
                    self.model.classes,
                    inputs[1].i64()?,
                    &self.model.train_mask[rows],
                    self.model.train_nodes.max(1),
                    &mut grad,
                )
                .map_err(kernel)?;
                Ok(vec![Data::F32(grad)])
            }
            "linear_bwd" if self.model.projects_first(name.get('l')?) => {
                self.linear_bwd_projected(op, &name, inputs)
            }
            "linear_bwd" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.model.dims(l);
                let dz = inputs[0].f32()?;
                let xs: Vec<&[f32]> = inputs[1..1 + terms]
                    .iter()
                    .map(|d| d.f32())
                    .collect::<Result<_, _>>()?;
                let w = inputs[1 + terms].f32()?;
                let rows = dz.len() / d_out;
                let mut dw = zeros(w.len())?;
                let mut outputs = Vec::new();
                if l > 1 {
                    // Outputs: grad_w, grad_agg, then (SAGE) grad_self.
                    let mut grads: Vec<Vec<f32>> = (0..terms)
                        .map(|_| zeros(rows * d_in))
                        .collect::<Result<_, _>>()?;
                    {
                        let mut refs: Vec<Option<&mut [f32]>> =
                            grads.iter_mut().map(|g| Some(g.as_mut_slice())).collect();
                        dense::linear_bwd(
                            dz,
                            &xs,
                            rows,
                            d_in,
                            w,
                            d_out,
                            &mut dw,
                            &mut refs,
                            Write::Overwrite,
                        )
                        .map_err(kernel)?;
                    }
                    outputs.push(Data::F32(dw));
                    if terms == 2 {
                        let neighbour = grads.pop().expect("two terms");
                        let own = grads.pop().expect("two terms");
                        outputs.push(Data::F32(neighbour));
                        outputs.push(Data::F32(own));
                    } else {
                        outputs.push(Data::F32(grads.pop().expect("one term")));
                    }
                } else {
                    let mut none: Vec<Option<&mut [f32]>> = (0..terms).map(|_| None).collect();
                    dense::linear_bwd(
                        dz,
                        &xs,
                        rows,
                        d_in,
                        w,
                        d_out,
                        &mut dw,
                        &mut none,
                        Write::Overwrite,
                    )
                    .map_err(kernel)?;
                    outputs.push(Data::F32(dw));
                }
                Ok(outputs)
            }
            "grad_accumulate" => {
                let parts: Vec<&[f32]> =
                    inputs.iter().map(|d| d.f32()).collect::<Result<_, _>>()?;
                let mut out = zeros(parts[0].len())?;
                dense::sum_into(&parts, &mut out).map_err(kernel)?;
                if let Some(peers) = &mut self.peers {
                    peers.reduce(&mut out)?;
                }
                Ok(vec![Data::F32(out)])
            }
            "agg_bwd" => {
                let l = name.get('l')?;
                let d_in = self.model.width_aggregated(l);
                let block = inputs[0].block()?;
                let grad = inputs[1].f32()?;
                let j = name.get('p')?;
                let rows = self.model.rows(j).len();
                let (mut out, init) = self.chain_output(2, inputs.get(2).copied(), rows * d_in)?;
                let view = block.view();
                if self.model.stored_transposes() {
                    // The same sums, in the same order, gathered over the
                    // stored transpose.
                    sparse::spmm(view, grad, d_in, init, &mut out).map_err(kernel)?;
                } else {
                    sparse::spmm_t(view, grad, d_in, init, &mut out).map_err(kernel)?;
                }
                if let Some(peers) = &mut self.peers {
                    let i = name.get('d')?;
                    let p = self.model.partitions();
                    let last = (0..p).rev().find(|&q| self.model.has_block(q, j)) == Some(i);
                    peers.aggregate_bwd(l, j, i, d_in, grad, last, &mut out)?;
                }
                Ok(vec![Data::F32(out)])
            }
            _ => Err(ExecError::Kernel(format!(
                "the CPU backend cannot run {}",
                op.name
            ))),
        }
    }

    fn update(
        &mut self,
        op: &Op,
        params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError> {
        if self.model.mode == Mode::Eval {
            return Ok(());
        }
        let name = Name::parse(&op.name)?;
        let layer = name.get('l')?;
        let adam = self.model.adam(layer);
        let [w, m, v] = params else {
            return Err(ExecError::Internal(format!(
                "{} expects three parameters",
                op.name
            )));
        };
        let grad = others
            .first()
            .ok_or_else(|| ExecError::Internal(format!("{} has no gradient", op.name)))?
            .f32()?;
        adam.step(
            self.model.updates,
            w.f32_mut()?,
            grad,
            m.f32_mut()?,
            v.f32_mut()?,
        )
        .map_err(kernel)?;
        Ok(())
    }
}
