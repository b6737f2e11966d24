//! The CPU backend's compute rates, measured on the kernels it runs
//! ([`crate::cpu`] calls the same functions, with the same fresh output
//! buffers), over the operators of a 3-layer GCN on a generated R-MAT
//! graph (every layer `width` wide but the last, whose output is an
//! eighth of that, as few classes make it). Flops and bytes are the ones the GNN workload builder gives
//! those operators ([`fateplan_planner::gnn::build_gnn`]), so that a rate
//! times an operator's cost is the operator's time, which is how the
//! planner and the simulator use the profile.

use std::collections::HashMap;
use std::time::Instant;

use fateplan_kernels::dropout::Dropout;
use fateplan_kernels::{activation, dense, sparse, BlockRef, Init, Write};
use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_planner::plan::Budgets;
use fateplan_planner::profile::DenseShape;
use fateplan_planner::workload::Cost;
use fateplan_planner::{plan, PlanOptions, Policy, Profile};

use crate::blockcsr::{BlockCsr, CsrBlock, Normalization};
use crate::cpu::Hyper;
use crate::csr::Csr;
use crate::generate::{PlantedSpec, RmatSpec};
use crate::train::{self, TrainRun};
use crate::{Error, Result};

use super::{fill_pattern_f32, median_of_rounds, Rounds};

/// Drop probability of the measured dropout masks (GCN's usual 0.5).
const DROPOUT: f32 = 0.5;

/// The measured graph: an R-MAT graph cut into partitions and blocks as
/// training cuts it, and the op costs of a 3-layer GCN over it with
/// features and hidden `width` wide and `narrow` classes.
pub struct Bench {
    pub scale: u32,
    pub nodes: u64,
    pub edges: u64,
    pub partitions: u32,
    pub width: usize,
    pub narrow: usize,
    offsets: Vec<u64>,
    blocks: BlockCsr,
    costs: HashMap<String, Cost>,
}

impl Bench {
    /// Generates the graph (Graph500's R-MAT, edge factor 16, seed 1).
    pub fn new(scale: u32, partitions: u32, width: u32) -> Result<Bench> {
        let spec = RmatSpec {
            features: 1,
            classes: 2,
            ..RmatSpec::new(scale)
        };
        let graph = spec.generate()?;
        let counts: BlockCounts = graph.blocks(partitions)?;
        let csr = Csr::from_edges(graph.nodes, &graph.src, &graph.dst)?;
        let blocks = BlockCsr::build(&csr, partitions, Normalization::GcnSym)?;
        let narrow = (width / 8).max(1);
        let gnn = GnnSpec {
            model: GnnModel::Gcn,
            layers: 3,
            hidden: width,
            heads: 1,
            features: width,
            classes: narrow,
            graph_name: graph.name.clone(),
        };
        let workload = build_gnn(&gnn, &counts)?;
        let costs = workload
            .ops
            .iter()
            .map(|op| (op.name.clone(), op.cost))
            .collect();
        let mut offsets: Vec<u64> = (0..partitions).map(|p| blocks.range(p).0).collect();
        offsets.push(graph.nodes);
        Ok(Bench {
            scale,
            nodes: graph.nodes,
            edges: graph.edges(),
            partitions,
            width: width as usize,
            narrow: narrow as usize,
            offsets,
            blocks,
            costs,
        })
    }

    fn rows(&self, p: u32) -> usize {
        (self.offsets[p as usize + 1] - self.offsets[p as usize]) as usize
    }

    fn largest_rows(&self) -> usize {
        (0..self.partitions)
            .map(|p| self.rows(p))
            .max()
            .unwrap_or(0)
    }

    fn cost(&self, name: &str) -> Result<&Cost> {
        self.costs.get(name).ok_or_else(|| {
            Error::Internal(format!("the measured GCN workload has no operator {name}"))
        })
    }

    fn block(&self, i: u32, j: u32) -> Option<(&CsrBlock, BlockRef<'_>)> {
        self.blocks.block(i, j).map(|b| {
            let view = BlockRef {
                row_start: &b.row_start,
                columns: &b.columns,
                weights: &b.weights,
            };
            (b, view)
        })
    }

    fn dropout(&self, stream: u64) -> Result<Dropout> {
        Dropout::new(DROPOUT, 1, stream).map_err(kernel)
    }
}

fn kernel(error: fateplan_kernels::Error) -> Error {
    Error::Internal(format!("a kernel refused the measurement's input: {error}"))
}

/// A GEMM rate at one shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseRate {
    pub flops_per_s: f64,
    /// Flops per byte of the measured operators, as the workload counts them.
    pub flops_per_byte: f64,
    pub d_in: usize,
    pub d_out: usize,
    pub rounds: u32,
}

/// f32 GEMM rate at `width -> width` (`wide`) and at `width -> narrow`:
/// per partition, the second (or third) layer's `linear` (x · W + b) and
/// `linear_bwd` (its weight, bias and input gradients), faer inside, on
/// the rayon pool as it is. Flops per second, median of rounds.
pub fn dense_rate(bench: &Bench, rounds: &Rounds, wide: bool) -> Result<DenseRate> {
    let (layer, d_in, d_out) = if wide {
        (2, bench.width, bench.width)
    } else {
        (3, bench.width, bench.narrow)
    };
    let rows_max = bench.largest_rows();
    let mut x = vec![0f32; rows_max * d_in];
    let mut dz = vec![0f32; rows_max * d_out];
    fill_pattern_f32(&mut x, 1);
    fill_pattern_f32(&mut dz, 2);
    let mut w = vec![0f32; dense::linear_weight_len(1, d_in, d_out)];
    fill_pattern_f32(&mut w, 3);
    let mut flops = 0.0;
    let mut bytes = 0;
    for p in 0..bench.partitions {
        for op in ["linear", "linear_bwd"] {
            let cost = bench.cost(&format!("{op}[l{layer},p{p}]"))?;
            flops += cost.flops;
            bytes += cost.bytes;
        }
    }
    let (flops_per_s, rounds) = median_of_rounds(rounds, || {
        // Outputs live to the end of the round, as activations and
        // gradients live on in training: each is written to memory not
        // touched since the last round.
        let mut kept = Vec::with_capacity(3 * bench.partitions as usize);
        let start = Instant::now();
        for p in 0..bench.partitions {
            let rows = bench.rows(p);
            let x = &x[..rows * d_in];
            let mut out = vec![0f32; rows * d_out];
            dense::linear(&[x], rows, d_in, &w, d_out, &mut out).map_err(kernel)?;
            let mut dw = vec![0f32; w.len()];
            let mut dx = vec![0f32; rows * d_in];
            dense::linear_bwd(
                &dz[..rows * d_out],
                &[x],
                rows,
                d_in,
                &w,
                d_out,
                &mut dw,
                &mut [Some(dx.as_mut_slice())],
                Write::Overwrite,
            )
            .map_err(kernel)?;
            kept.extend([out, dw, dx]);
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(&kept);
        Ok(flops / seconds)
    })?;
    Ok(DenseRate {
        flops_per_s,
        flops_per_byte: flops / bytes.max(1) as f64,
        d_in,
        d_out,
        rounds,
    })
}

/// The profile's `dense_shapes` from measured rates: in increasing order
/// of intensity, one per intensity (the first measured of equal ones).
pub fn dense_shapes(rates: &[DenseRate]) -> Vec<DenseShape> {
    let mut shapes: Vec<DenseShape> = rates
        .iter()
        .map(|r| DenseShape {
            flops_per_byte: r.flops_per_byte,
            flops_per_s: r.flops_per_s,
        })
        .collect();
    shapes.sort_by(|a, b| a.flops_per_byte.total_cmp(&b.flops_per_byte));
    shapes.dedup_by(|b, a| b.flops_per_byte <= a.flops_per_byte);
    shapes
}

/// Element-wise bandwidth: per partition, the first layer's `relu` and
/// `relu_bwd` with dropout (the mask regenerated from its counter, as in
/// training). Bytes per second as the workload counts them, median of
/// rounds.
pub fn elementwise_rate(bench: &Bench, rounds: &Rounds) -> Result<(f64, u32)> {
    let w_ = bench.width;
    let rows_max = bench.largest_rows();
    let mut z = vec![0f32; rows_max * w_];
    let mut grad = vec![0f32; rows_max * w_];
    fill_pattern_f32(&mut z, 4);
    fill_pattern_f32(&mut grad, 5);
    let mask = bench.dropout(6)?;
    let mut bytes = 0u64;
    for p in 0..bench.partitions {
        bytes += bench.cost(&format!("relu[l1,p{p}]"))?.bytes;
        bytes += bench.cost(&format!("relu_bwd[l1,p{p}]"))?.bytes;
    }
    median_of_rounds(rounds, || {
        // Outputs live to the end of the round (see `dense_rate`).
        let mut kept = Vec::with_capacity(2 * bench.partitions as usize);
        let start = Instant::now();
        for p in 0..bench.partitions {
            let rows = bench.rows(p);
            let row0 = bench.offsets[p as usize];
            let z = &z[..rows * w_];
            let mut out = vec![0f32; rows * w_];
            activation::relu_dropout(z, &mut out, w_, row0, Some(&mask)).map_err(kernel)?;
            let mut dz = vec![0f32; rows * w_];
            activation::relu_dropout_bwd(&grad[..rows * w_], z, w_, row0, Some(&mask), &mut dz)
                .map_err(kernel)?;
            kept.extend([out, dz]);
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(&kept);
        Ok(bytes as f64 / seconds)
    })
}

/// A chain's next output, as the CPU backend makes it: the partial sum
/// so far, added into in place, or a fresh zeroed buffer.
fn chain_output(partial: Option<Vec<f32>>, len: usize) -> (Vec<f32>, Init<'static>) {
    match partial {
        Some(sum) => (sum, Init::Out),
        None => (vec![0f32; len], Init::Zero),
    }
}

/// The sources every block reads: one `width`-wide value per row.
fn sparse_sources(bench: &Bench) -> Vec<Vec<f32>> {
    (0..bench.partitions)
        .map(|j| {
            let mut values = vec![0f32; bench.rows(j) * bench.width];
            fill_pattern_f32(&mut values, 10 + j as u64);
            values
        })
        .collect()
}

/// The bytes of `op` (`agg[l{layer},p{i},s{j}]` or
/// `agg_bwd[l{layer},p{j},d{i}]`) over every block `(i, j)`.
fn block_bytes(bench: &Bench, name: impl Fn(u32, u32) -> String) -> Result<u64> {
    let mut bytes = 0;
    for i in 0..bench.partitions {
        for j in 0..bench.partitions {
            if bench.block(i, j).is_some() {
                bytes += bench.cost(&name(i, j))?.bytes;
            }
        }
    }
    Ok(bytes)
}

/// SpMM effective gather bandwidth: one round runs, over every block,
/// the first two layers' `agg` as a GCN trains with them (the first
/// layer's SpMM with input dropout fused into the gather, the second's
/// plain SpMM), each chained into partial sums as the workload chains
/// them. Bytes per second as the workload counts them (`edges · (8 + 4 ·
/// width) + 2 · rows · 4 · width` per block), median of rounds.
pub fn sparse_rate(bench: &Bench, rounds: &Rounds) -> Result<(f64, u32)> {
    let w_ = bench.width;
    let p = bench.partitions;
    let sources = sparse_sources(bench);
    let mask = bench.dropout(7)?;
    let bytes = block_bytes(bench, |i, j| format!("agg[l1,p{i},s{j}]"))?
        + block_bytes(bench, |i, j| format!("agg[l2,p{i},s{j}]"))?;
    median_of_rounds(rounds, || {
        // Each row's final sum lives to the end of the round, as the
        // aggregations' outputs live on in training; each operator adds
        // into the partial sum before it, as the CPU backend does.
        let mut kept = Vec::with_capacity(2 * p as usize);
        let start = Instant::now();
        for layer in 1..=2 {
            for i in 0..p {
                let mut partial: Option<Vec<f32>> = None;
                for j in 0..p {
                    let Some((_, view)) = bench.block(i, j) else {
                        continue;
                    };
                    let (mut out, init) = chain_output(partial.take(), bench.rows(i) * w_);
                    let src = &sources[j as usize];
                    if layer == 1 {
                        let row0 = bench.offsets[j as usize];
                        sparse::spmm_dropout(view, src, w_, init, &mut out, &mask, row0)
                    } else {
                        sparse::spmm(view, src, w_, init, &mut out)
                    }
                    .map_err(kernel)?;
                    partial = Some(out);
                }
                kept.push(partial);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(&kept);
        Ok(bytes as f64 / seconds)
    })
}

/// Transposed SpMM effective scatter bandwidth: one round runs the
/// second layer's `agg_bwd` over every block, chained into partial sums
/// per source partition as the workload chains them. Bytes per second as
/// the workload counts them (as the gather's), median of rounds.
pub fn scatter_rate(bench: &Bench, rounds: &Rounds) -> Result<(f64, u32)> {
    let w_ = bench.width;
    let p = bench.partitions;
    let grads = sparse_sources(bench);
    let bytes = block_bytes(bench, |i, j| format!("agg_bwd[l2,p{j},d{i}]"))?;
    median_of_rounds(rounds, || {
        // Outputs live to the end of the round (see `sparse_rate`).
        let mut kept = Vec::with_capacity(p as usize);
        let start = Instant::now();
        for j in 0..p {
            let mut partial: Option<Vec<f32>> = None;
            for i in 0..p {
                let Some((_, view)) = bench.block(i, j) else {
                    continue;
                };
                let (mut out, init) = chain_output(partial.take(), bench.rows(j) * w_);
                let grad = &grads[i as usize][..bench.rows(i) * w_];
                sparse::spmm_t(view, grad, w_, init, &mut out).map_err(kernel)?;
                partial = Some(out);
            }
            kept.push(partial);
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(&kept);
        Ok(bytes as f64 / seconds)
    })
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
    let hyper = Hyper {
        model: GnnModel::Gcn,
        layers: 2,
        hidden: 4,
        heads: 1,
        dropout: 0.5,
        lr: 0.01,
        weight_decay: 5e-4,
        weight_decay_all_layers: false,
        seed: 1,
    };
    let prepared = train::prepare(graph, &hyper, 4)?;
    let options = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    let plan = plan(&prepared.workload, profile, &options)?;
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

    #[test]
    fn rates_on_a_tiny_graph_are_positive() {
        let bench = Bench::new(8, 2, 16).unwrap();
        assert_eq!(bench.nodes, 256);
        let rounds = Rounds::tiny();
        for (name, (rate, n)) in [
            ("elementwise", elementwise_rate(&bench, &rounds).unwrap()),
            ("sparse", sparse_rate(&bench, &rounds).unwrap()),
            ("scatter", scatter_rate(&bench, &rounds).unwrap()),
        ] {
            assert!(rate > 0.0 && rate.is_finite() && n >= 1, "{name}: {rate}");
        }
        let wide = dense_rate(&bench, &rounds, true).unwrap();
        let narrow = dense_rate(&bench, &rounds, false).unwrap();
        assert_eq!((wide.d_in, wide.d_out, narrow.d_out), (16, 16, 2));
        for rate in [wide, narrow] {
            assert!(rate.flops_per_s > 0.0 && rate.flops_per_s.is_finite() && rate.rounds >= 1);
        }
        // The narrow shape does fewer flops per byte: 2·16·2 / (4·18)
        // forward, 4·16·2 / (8·18) backward.
        assert!(
            (narrow.flops_per_byte - 64.0 / 72.0).abs() < 1e-9,
            "{narrow:?}"
        );
        assert!(
            wide.flops_per_byte > 2.0 * narrow.flops_per_byte,
            "{wide:?}"
        );
    }

    #[test]
    fn the_sparse_bytes_are_the_workloads() {
        // One block's forward bytes, as the GCN builder counts them.
        let bench = Bench::new(8, 2, 16).unwrap();
        let (block, _) = bench.block(0, 1).unwrap();
        let cost = bench.cost("agg[l1,p0,s1]").unwrap();
        let rows = bench.rows(0) as u64;
        assert_eq!(cost.bytes, block.edges() * (8 + 4 * 16) + 2 * rows * 16 * 4);
    }

    #[test]
    fn overhead_is_positive() {
        let profile = fateplan_planner::Profile::from_json(
            include_str!("../../../profiles/cpu-small.json"),
            "cpu-small.json",
        )
        .unwrap();
        let overhead = op_overhead(&profile, 2).unwrap();
        assert!(overhead.op_overhead_s > 0.0 && overhead.operators > 10);
    }
}
