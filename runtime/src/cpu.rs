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
//! layer's aggregation (the dropped features never exist in memory); for
//! GraphSAGE it applies to the neighbour term only.

use fateplan_kernels::{
    activation, dense, dropout::Dropout, loss, optim::Adam, sparse, BlockRef, Write,
};
use fateplan_planner::gnn::GnnModel;
use fateplan_planner::workload::{Op, Tensor};

use crate::exec::data::{BlockData, Data};
use crate::exec::{Backend, ExecError};

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
}

impl GraphInput {
    pub fn partitions(&self) -> usize {
        self.offsets.len() - 1
    }

    fn rows(&self, p: usize) -> std::ops::Range<usize> {
        self.offsets[p] as usize..self.offsets[p + 1] as usize
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
    fn ratio(correct: u64, total: u64) -> f64 {
        if total == 0 {
            0.0
        } else {
            correct as f64 / total as f64
        }
    }
    pub fn train_accuracy(&self) -> f64 {
        Self::ratio(self.train_correct, self.train_total)
    }
    pub fn val_accuracy(&self) -> f64 {
        Self::ratio(self.val_correct, self.val_total)
    }
    pub fn test_accuracy(&self) -> f64 {
        Self::ratio(self.test_correct, self.test_total)
    }
}

/// Kinds of dropout site, part of the mask's key.
const SITE_INPUT: u64 = 0;
const SITE_HIDDEN: u64 = 1;

pub struct CpuGnn {
    graph: GraphInput,
    hyper: Hyper,
    mode: Mode,
    /// Training iterations begun: Adam's step count.
    updates: u32,
    train_nodes: usize,
    metrics: Metrics,
}

/// A name like `agg[l1,p0,s2]` as its base and its lettered indices.
struct Name<'a> {
    base: &'a str,
    fields: Vec<(char, u32)>,
}

impl<'a> Name<'a> {
    fn parse(name: &'a str) -> Result<Name<'a>, ExecError> {
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

    fn get(&self, letter: char) -> Result<usize, ExecError> {
        self.fields
            .iter()
            .find(|(l, _)| *l == letter)
            .map(|&(_, v)| v as usize)
            .ok_or_else(|| ExecError::Internal(format!("{} has no index {letter}", self.base)))
    }

    fn number(&self, k: usize) -> Result<usize, ExecError> {
        self.fields
            .get(k)
            .map(|&(_, v)| v as usize)
            .ok_or_else(|| ExecError::Internal(format!("{} has too few indices", self.base)))
    }
}

fn kernel(error: impl std::fmt::Display) -> ExecError {
    ExecError::Kernel(error.to_string())
}

impl CpuGnn {
    pub fn new(graph: GraphInput, hyper: Hyper) -> Result<CpuGnn, ExecError> {
        if hyper.model == GnnModel::Gat {
            return Err(ExecError::Kernel(
                "the CPU backend does not train GAT yet; use gcn or sage".into(),
            ));
        }
        let train_nodes = graph.train_mask.iter().filter(|&&m| m).count();
        Ok(CpuGnn {
            graph,
            hyper,
            mode: Mode::Train,
            updates: 0,
            train_nodes,
            metrics: Metrics::default(),
        })
    }

    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    pub fn metrics(&self) -> Metrics {
        self.metrics
    }

    fn dims(&self, layer: usize) -> (usize, usize) {
        let h = &self.hyper;
        let d_in = if layer == 1 {
            self.graph.features
        } else {
            h.hidden as usize
        };
        let d_out = if layer == h.layers as usize {
            self.graph.classes
        } else {
            h.hidden as usize
        };
        (d_in, d_out)
    }

    /// Inputs per linear layer: GraphSAGE has a self and a neighbour term.
    fn terms(&self) -> usize {
        if self.hyper.model == GnnModel::Sage {
            2
        } else {
            1
        }
    }

    fn dropout(&self, site: u64, layer: usize) -> Option<Dropout> {
        let p = self.hyper.dropout;
        (self.mode == Mode::Train && p > 0.0).then_some(Dropout {
            p,
            seed: self.hyper.seed,
            stream: ((self.updates as u64) << 16) | ((layer as u64) << 2) | site,
        })
    }

    fn init_weights(&self, layer: usize) -> Vec<f32> {
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
        let mut w: Vec<f32> = (0..terms * d_in * d_out)
            .map(|_| {
                let unit = (next() >> 11) as f64 / (1u64 << 53) as f64;
                ((2.0 * unit - 1.0) * limit) as f32
            })
            .collect();
        w.extend(std::iter::repeat_n(0.0, d_out));
        w
    }

    fn loss_metrics(
        &mut self,
        part: usize,
        logits: &[f32],
        labels: &[i64],
    ) -> Result<f32, ExecError> {
        let rows = self.graph.rows(part);
        let classes = self.graph.classes;
        let train = &self.graph.train_mask[rows.clone()];
        let value = loss::softmax_cross_entropy(
            logits,
            rows.len(),
            classes,
            labels,
            train,
            self.train_nodes.max(1),
        )
        .map_err(kernel)?;
        self.metrics.loss += value;
        let n = rows.len();
        let count =
            |mask: &[bool]| loss::accuracy(logits, n, classes, labels, mask).map_err(kernel);
        let (c, t) = count(train)?;
        self.metrics.train_correct += c;
        self.metrics.train_total += t;
        let (c, t) = count(&self.graph.val_mask[rows.clone()])?;
        self.metrics.val_correct += c;
        self.metrics.val_total += t;
        let (c, t) = count(&self.graph.test_mask[rows])?;
        self.metrics.test_correct += c;
        self.metrics.test_total += t;
        Ok(value as f32)
    }
}

impl Backend for CpuGnn {
    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError> {
        let name = Name::parse(&tensor.name)?;
        let g = &self.graph;
        Ok(match name.base {
            "x" => {
                let rows = g.rows(name.get('p')?);
                Data::F32(g.x[rows.start * g.features..rows.end * g.features].to_vec())
            }
            "y" => Data::I64(g.y[g.rows(name.get('p')?)].to_vec()),
            "adj" => {
                let (i, j) = (name.number(0)?, name.number(1)?);
                let block = g.blocks[i * g.partitions() + j].clone().ok_or_else(|| {
                    ExecError::Internal(format!("the graph has no block {}", tensor.name))
                })?;
                Data::Block(block)
            }
            "w" => Data::F32(self.init_weights(name.get('l')?)),
            "adam_m" | "adam_v" => {
                let (d_in, d_out) = self.dims(name.get('l')?);
                Data::F32(vec![0.0; self.terms() * d_in * d_out + d_out])
            }
            _ => {
                return Err(ExecError::Internal(format!(
                    "unexpected external tensor {}",
                    tensor.name
                )))
            }
        })
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
        if self.mode == Mode::Train {
            self.updates += 1;
        }
        Ok(())
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        let name = Name::parse(&op.name)?;
        let terms = self.terms();
        match name.base {
            "agg" => {
                let (l, j) = (name.get('l')?, name.get('s')?);
                let (d_in, _) = self.dims(l);
                let block = inputs[0].block()?;
                let src = inputs[1].f32()?;
                let init = inputs.get(2).map(|d| d.f32()).transpose()?;
                let rows = block.row_start.len().saturating_sub(1);
                let mut out = vec![0.0f32; rows * d_in];
                let view = BlockRef {
                    row_start: &block.row_start,
                    columns: &block.columns,
                    weights: &block.weights,
                };
                match self.dropout(SITE_INPUT, l).filter(|_| l == 1) {
                    Some(mask) => {
                        let src_row0 = self.graph.offsets[j];
                        sparse::spmm_dropout(
                            view,
                            src,
                            d_in,
                            init.into(),
                            &mut out,
                            &mask,
                            src_row0,
                        )
                    }
                    None => sparse::spmm(view, src, d_in, init.into(), &mut out),
                }
                .map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "linear" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.dims(l);
                let w = inputs[terms].f32()?;
                let xs: Vec<&[f32]> = inputs[..terms]
                    .iter()
                    .map(|d| d.f32())
                    .collect::<Result<_, _>>()?;
                let rows = xs[0].len() / d_in;
                let mut out = vec![0.0f32; rows * d_out];
                dense::linear(&xs, rows, d_in, w, d_out, &mut out).map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "relu" => {
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.dims(l);
                let z = inputs[0].f32()?;
                let mut out = vec![0.0f32; z.len()];
                let mask = self.dropout(SITE_HIDDEN, l);
                activation::relu_dropout(z, &mut out, d_out, self.graph.offsets[i], mask.as_ref())
                    .map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "relu_bwd" => {
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.dims(l);
                let (grad, z) = (inputs[0].f32()?, inputs[1].f32()?);
                let mut out = vec![0.0f32; z.len()];
                let mask = self.dropout(SITE_HIDDEN, l);
                activation::relu_dropout_bwd(
                    grad,
                    z,
                    d_out,
                    self.graph.offsets[i],
                    mask.as_ref(),
                    &mut out,
                )
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
                let rows = self.graph.rows(i);
                let logits = inputs[0].f32()?;
                let mut grad = vec![0.0f32; logits.len()];
                loss::softmax_cross_entropy_bwd(
                    logits,
                    rows.len(),
                    self.graph.classes,
                    inputs[1].i64()?,
                    &self.graph.train_mask[rows],
                    self.train_nodes.max(1),
                    &mut grad,
                )
                .map_err(kernel)?;
                Ok(vec![Data::F32(grad)])
            }
            "linear_bwd" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.dims(l);
                let dz = inputs[0].f32()?;
                let xs: Vec<&[f32]> = inputs[1..1 + terms]
                    .iter()
                    .map(|d| d.f32())
                    .collect::<Result<_, _>>()?;
                let w = inputs[1 + terms].f32()?;
                let rows = dz.len() / d_out;
                let mut dw = vec![0.0f32; w.len()];
                let mut outputs = Vec::new();
                if l > 1 {
                    // Outputs: grad_w, grad_agg, then (SAGE) grad_self.
                    let mut grads: Vec<Vec<f32>> =
                        (0..terms).map(|_| vec![0.0f32; rows * d_in]).collect();
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
                let mut out = vec![0.0f32; parts[0].len()];
                dense::sum_into(&parts, &mut out).map_err(kernel)?;
                Ok(vec![Data::F32(out)])
            }
            "agg_bwd" => {
                let l = name.get('l')?;
                let (d_in, _) = self.dims(l);
                let block = inputs[0].block()?;
                let grad = inputs[1].f32()?;
                let init = inputs.get(2).map(|d| d.f32()).transpose()?;
                let j = name.get('p')?;
                let rows = self.graph.rows(j).len();
                let mut out = vec![0.0f32; rows * d_in];
                let view = BlockRef {
                    row_start: &block.row_start,
                    columns: &block.columns,
                    weights: &block.weights,
                };
                sparse::spmm_t(view, grad, d_in, init.into(), &mut out).map_err(kernel)?;
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
        if self.mode == Mode::Eval {
            return Ok(());
        }
        let name = Name::parse(&op.name)?;
        let layer = name.get('l')?;
        let h = &self.hyper;
        let adam = Adam {
            lr: h.lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: if layer == 1 || h.weight_decay_all_layers {
                h.weight_decay
            } else {
                0.0
            },
        };
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
        adam.step(self.updates, w.f32_mut()?, grad, m.f32_mut()?, v.f32_mut()?)
            .map_err(kernel)?;
        Ok(())
    }
}
