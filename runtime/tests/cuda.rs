//! The CUDA backend against the CPU backend and the `f64` reference.
//!
//! These tests need an NVIDIA GPU with the CUDA 13 driver, NVRTC and
//! cuBLAS (NVRTC may come from `FATEPLAN_NVRTC_DIR`, as in `.ci/run`).
//! Without one they print that they skipped and why, unless
//! `FATEPLAN_REQUIRE_GPU=1`, when they fail.
//!
//! - Every operator of GCN (projecting first, as by default, and
//!   aggregating first), GraphSAGE and GAT workloads runs on both
//!   backends with the same inputs (the CPU's values, operator after
//!   operator): the outputs must agree, and where the kernels crate has an
//!   `f64` reference (SpMM with dropout, its transpose, linear layers and
//!   their backward, ReLU and ELU with dropout, the loss gradient, Adam,
//!   a whole GAT aggregation) the CUDA outputs must be within 1e-5 of it
//!   (`|a - b| <= 1e-5 (1 + |b|)`, the kernels' own tests' measure).
//! - Training through the executor on the GPU gives the same losses
//!   whatever the plan (retain-all, offload to host, offload to the SSD,
//!   recompute-all, dp at a quarter of the device peak), and losses close
//!   to the CPU backend's.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use fateplan_kernels::dropout::Dropout;
use fateplan_kernels::optim::Adam;
use fateplan_kernels::{reference, BlockRef, Csr};
use fateplan_planner::gnn::{GnnModel, LayerOrder, Sweeps, Transposes};
use fateplan_planner::plan::{Budgets, Plan};
use fateplan_planner::workload::{TensorKind, Workload};
use fateplan_planner::{plan, PlanOptions, Policy, Profile};
use fateplan_runtime::cpu::{CpuGnn, Hyper};
use fateplan_runtime::cuda::{self, CudaGnn, CudaOptions};
use fateplan_runtime::dataset::Dataset;
use fateplan_runtime::exec::data::Data;
use fateplan_runtime::exec::{Backend, SsdTier};
use fateplan_runtime::gnn::GnnBackend;
use fateplan_runtime::train::{self, BackendChoice, Prepared, TrainRun};

/// Whether a GPU can be used; `false` after saying why the test skips.
fn gpu_ready(test: &str) -> bool {
    if let Some(dir) = std::env::var_os("FATEPLAN_NVRTC_DIR") {
        let _ = cuda::nvrtc::preload_nvrtc_dir(&PathBuf::from(dir));
    }
    match cuda::probe(0) {
        Ok(info) => {
            eprintln!(
                "{test}: {} (compute capability {}.{})",
                info.name, info.compute_capability.0, info.compute_capability.1
            );
            true
        }
        Err(why) => {
            let required = std::env::var("FATEPLAN_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(!required, "FATEPLAN_REQUIRE_GPU=1 but {why}");
            eprintln!("skipped {test}: {why}");
            false
        }
    }
}

fn planted(nodes: u32, seed: u64) -> Dataset {
    planted_wide(nodes, 12, seed)
}

fn planted_wide(nodes: u32, features: u32, seed: u64) -> Dataset {
    let spec = format!(
        "planted:nodes={nodes},classes=4,features={features},degree=6,homophily=0.8,val=40,test=60,seed={seed}"
    );
    let mut d = train::load_graph(&spec).unwrap();
    d.row_normalize_features();
    d
}

fn hyper(model: GnnModel, heads: u32) -> Hyper {
    Hyper {
        model,
        layers: 2,
        hidden: 8,
        heads,
        dropout: 0.5,
        lr: 0.01,
        weight_decay: 5e-4,
        weight_decay_all_layers: false,
        seed: 7,
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
    }
}

fn profile() -> Profile {
    Profile::from_json(
        include_str!("../../profiles/cpu-small.json"),
        "cpu-small.json",
    )
    .unwrap()
}

fn roomy() -> Budgets {
    Budgets {
        hbm_bytes: 1 << 40,
        host_bytes: 1 << 40,
        ssd_bytes: 1 << 40,
    }
}

/// `policy`'s plan of `workload` under roomy budgets.
fn roomy_plan(workload: &Workload, policy: Policy) -> Plan {
    let profile = profile();
    let options = PlanOptions {
        budgets: roomy(),
        ..PlanOptions::new(policy, &profile)
    };
    plan(workload, &profile, &options).unwrap()
}

fn to64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// `|a - b| <= tol (1 + |b|)` elementwise.
#[track_caller]
fn assert_close(what: &str, a: &[f32], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x as f64 - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: cuda {x}, reference {y}"
        );
    }
}

fn f32s(data: &Data) -> &[f32] {
    data.f32().unwrap()
}

fn block_of(data: &Data) -> BlockRef<'_> {
    let b = data.block().unwrap();
    b.view()
}

/// Input dropout, as the backends key it (iteration 1, layer, site).
fn mask(h: &Hyper, layer: u64, site: u64) -> Dropout {
    Dropout::new(h.dropout, h.seed, (1 << 16) | (layer << 2) | site).unwrap()
}

/// `agg + bias`, the bias the last `d_out` values of `w`.
fn plus_bias(agg: &[f64], w: &[f64], d_out: usize) -> Vec<f64> {
    let bias = &w[w.len() - d_out..];
    agg.iter()
        .enumerate()
        .map(|(i, v)| v + bias[i % d_out])
        .collect()
}

/// Where the kernels crate has an `f64` reference for operator `name`,
/// checks the CUDA outputs against it (given the operator's inputs).
fn check_reference(
    name: &str,
    inputs: &[&Data],
    cuda: &[Data],
    h: &Hyper,
    prepared: &Prepared,
    workload: &Workload,
) -> bool {
    let base = name.split('[').next().unwrap();
    let layer: u64 = name
        .split("[l")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    let classes = prepared.input.classes;
    let features = prepared.input.features;
    let d_in = if layer == 1 {
        features
    } else {
        h.hidden as usize
    };
    let d_out = if layer == 2 {
        classes
    } else {
        h.hidden as usize
    };
    let gnn = h.model != GnnModel::Gat;
    // A GCN layer narrower than its input projects first: its linear has
    // no bias and takes the input dropout, the aggregations carry d_out
    // columns, and relu (or bias) adds the bias.
    let first = h.order.projects_first(h.model, d_in as u64, d_out as u64);
    // The width the layer's aggregations carry.
    let width = if first { d_out } else { d_in };
    let _ = workload;
    match base {
        // P = 1: one block, no init; an aggregating-first first layer
        // with input dropout.
        "agg" if gnn && inputs.len() == 2 => {
            let src = to64(f32s(inputs[1]));
            let src = if layer == 1 && !first {
                reference::dropout(&src, d_in, 0, &mask(h, 1, 0))
            } else {
                src
            };
            let expect = reference::spmm(block_of(inputs[0]), &src, width);
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "agg_bwd" if inputs.len() == 2 => {
            let grad = to64(f32s(inputs[1]));
            let rows = f32s(&cuda[0]).len() / width;
            // A stored transpose (the default for GCN and GraphSAGE) is
            // gathered over; a block is scattered over.
            let expect = if h.transposes == Transposes::Stored && h.model != GnnModel::Gat {
                reference::spmm(block_of(inputs[0]), &grad, width)
            } else {
                reference::spmm_t(block_of(inputs[0]), &grad, width, rows)
            };
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        // `dropout(h) · W`, without the bias.
        "linear" if first => {
            let x = to64(f32s(inputs[0]));
            let x = if layer == 1 {
                reference::dropout(&x, d_in, 0, &mask(h, 1, 0))
            } else {
                x
            };
            let rows = x.len() / d_in;
            let w = to64(f32s(inputs[1]));
            let expect = reference::linear(&[&x], rows, d_in, &w, d_out, false);
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "linear" if gnn => {
            let terms = inputs.len() - 1;
            let xs: Vec<Vec<f64>> = inputs[..terms].iter().map(|d| to64(f32s(d))).collect();
            let refs: Vec<&[f64]> = xs.iter().map(|x| x.as_slice()).collect();
            let rows = xs[0].len() / d_in;
            let w = to64(f32s(inputs[terms]));
            let expect = reference::linear(&refs, rows, d_in, &w, d_out, true);
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        // Inputs: grad_xw, h, w, grad_z; the bias's gradient sums grad_z.
        "linear_bwd" if first => {
            let dxw = to64(f32s(inputs[0]));
            let x = to64(f32s(inputs[1]));
            let x = if layer == 1 {
                reference::dropout(&x, d_in, 0, &mask(h, 1, 0))
            } else {
                x
            };
            let w = to64(f32s(inputs[2]));
            let dz = to64(f32s(inputs[3]));
            let rows = x.len() / d_in;
            let (mut dw, dx) = reference::linear_bwd(&dxw, &[&x], rows, d_in, &w, d_out, false);
            let matrix = d_in * d_out;
            for (o, g) in dw[matrix..].iter_mut().enumerate() {
                *g = (0..rows).map(|r| dz[r * d_out + o]).sum();
            }
            assert_close(name, f32s(&cuda[0]), &dw, 1e-5);
            assert_eq!(cuda.len(), if layer > 1 { 2 } else { 1 }, "{name}");
            for out in &cuda[1..] {
                assert_close(name, f32s(out), &dx[0], 1e-5);
            }
            true
        }
        "linear_bwd" if gnn => {
            let terms = inputs.len() - 2;
            let dz = to64(f32s(inputs[0]));
            let xs: Vec<Vec<f64>> = inputs[1..1 + terms].iter().map(|d| to64(f32s(d))).collect();
            let refs: Vec<&[f64]> = xs.iter().map(|x| x.as_slice()).collect();
            let rows = dz.len() / d_out;
            let w = to64(f32s(inputs[1 + terms]));
            let (dw, dx) = reference::linear_bwd(&dz, &refs, rows, d_in, &w, d_out, true);
            assert_close(name, f32s(&cuda[0]), &dw, 1e-5);
            // Outputs after grad_w: the last term's input gradient first.
            for (k, out) in cuda[1..].iter().enumerate() {
                assert_close(name, f32s(out), &dx[terms - 1 - k], 1e-5);
            }
            true
        }
        "relu" => {
            let z = to64(f32s(inputs[0]));
            let z = if first {
                plus_bias(&z, &to64(f32s(inputs[1])), d_out)
            } else {
                z
            };
            let expect = reference::relu_dropout(&z, d_out, 0, Some(&mask(h, layer, 1)));
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "relu_mask" => {
            // The same f32 sum as the backends', then its sign.
            let z: Vec<f32> = if first {
                let (agg, w) = (f32s(inputs[0]), f32s(inputs[1]));
                let bias = &w[w.len() - d_out..];
                agg.iter()
                    .enumerate()
                    .map(|(i, v)| v + bias[i % d_out])
                    .collect()
            } else {
                f32s(inputs[0]).to_vec()
            };
            let words = cuda[0].i64().unwrap();
            assert_eq!(words.len(), z.len().div_ceil(64), "{name}: words");
            for (i, v) in z.iter().enumerate() {
                let bit = (words[i / 64] as u64 >> (i % 64)) & 1 == 1;
                assert_eq!(bit, *v > 0.0, "{name}: bit {i} of {v}");
            }
            let past = z.len() % 64;
            if past > 0 {
                assert_eq!(
                    *words.last().unwrap() as u64 >> past,
                    0,
                    "{name}: bits past the end"
                );
            }
            true
        }
        // From the mask: its bits stand in for the pre-activation.
        "relu_bwd" if matches!(inputs[1], Data::I64(_)) => {
            let g = to64(f32s(inputs[0]));
            let words = inputs[1].i64().unwrap();
            let z: Vec<f64> = (0..g.len())
                .map(|i| ((words[i / 64] as u64 >> (i % 64)) & 1) as f64)
                .collect();
            let expect = reference::relu_dropout_bwd(&g, &z, d_out, 0, Some(&mask(h, layer, 1)));
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "relu_bwd" => {
            let (g, z) = (to64(f32s(inputs[0])), to64(f32s(inputs[1])));
            let z = if first {
                plus_bias(&z, &to64(f32s(inputs[2])), d_out)
            } else {
                z
            };
            let expect = reference::relu_dropout_bwd(&g, &z, d_out, 0, Some(&mask(h, layer, 1)));
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "bias" => {
            let (agg, w) = (to64(f32s(inputs[0])), to64(f32s(inputs[1])));
            assert_close(name, f32s(&cuda[0]), &plus_bias(&agg, &w, d_out), 1e-5);
            true
        }
        "elu" => {
            let (agg, w) = (to64(f32s(inputs[0])), to64(f32s(inputs[1])));
            let y = plus_bias(&agg, &w, d_out);
            let expect = reference::elu_dropout(&y, d_out, 0, Some(&mask(h, layer, 1)));
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "elu_bwd" => {
            let g = to64(f32s(inputs[0]));
            let (agg, w) = (to64(f32s(inputs[1])), to64(f32s(inputs[2])));
            let y = plus_bias(&agg, &w, d_out);
            let expect = reference::elu_dropout_bwd(&g, &y, d_out, 0, Some(&mask(h, layer, 1)));
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        "loss_bwd" => {
            let logits = to64(f32s(inputs[0]));
            let labels = inputs[1].i64().unwrap();
            let train_mask = &prepared_masks(prepared);
            let nodes = train_mask.iter().filter(|&&m| m).count();
            let expect =
                reference::softmax_cross_entropy_bwd(&logits, classes, labels, train_mask, nodes);
            assert_close(name, f32s(&cuda[0]), &expect, 1e-5);
            true
        }
        _ => false,
    }
}

fn prepared_masks(prepared: &Prepared) -> Vec<bool> {
    prepared.input.train_mask.clone()
}

/// Runs every operator of one training iteration on both backends, the
/// CPU's outputs feeding the next operators of both; returns how many
/// operators were checked against the reference.
fn operators_agree(h: Hyper, partitions: u32) -> usize {
    operators_agree_on(planted(300, 3), h, partitions)
}

fn operators_agree_on(dataset: Dataset, h: Hyper, partitions: u32) -> usize {
    // Failures name the case: several share their operators' names.
    let case = format!(
        "{:?} ({}, by {}) at {partitions} partitions",
        h.model,
        h.order.name(),
        h.sweeps.name()
    );
    let prepared = train::prepare(dataset, &h, partitions).unwrap();
    let workload = prepared.workload.clone();
    let mut cpu = CpuGnn::new(prepared.input.clone(), h).unwrap();
    let mut gpu =
        CudaGnn::new(prepared.input.clone(), h, 1 << 30, &CudaOptions::default()).unwrap();
    let mover = gpu.mover();
    let up = |data: &Data| mover.to_device(Cow::Borrowed(data)).unwrap();
    let down = |data: &Data| mover.to_plain(data).unwrap();
    let mut values: HashMap<usize, Data> = HashMap::new();
    for tensor in &workload.tensors {
        if tensor.kind.is_external() {
            values.insert(tensor.id.index(), cpu.external(tensor).unwrap());
        }
    }
    cpu.begin_iteration(0).unwrap();
    gpu.begin_iteration(0).unwrap();
    let mut referenced = 0;
    for op in &workload.ops {
        let is_param = |t: usize| workload.tensors[t].kind == TensorKind::Parameter;
        if op.outputs.is_empty() && op.inputs.iter().any(|t| is_param(t.index())) {
            // An update: both from the same parameters and gradient.
            let params: Vec<usize> = op
                .inputs
                .iter()
                .map(|t| t.index())
                .filter(|&t| is_param(t))
                .collect();
            let others: Vec<Data> = op
                .inputs
                .iter()
                .map(|t| t.index())
                .filter(|&t| !is_param(t))
                .map(|t| values[&t].clone())
                .collect();
            let mut on_gpu: Vec<Data> = params.iter().map(|t| up(&values[t])).collect();
            let gpu_others: Vec<Data> = others.iter().map(&up).collect();
            {
                let mut refs: Vec<&mut Data> = on_gpu.iter_mut().collect();
                let o: Vec<&Data> = gpu_others.iter().collect();
                gpu.update(op, &mut refs, &o).unwrap();
            }
            let before: Vec<Vec<f64>> = params.iter().map(|t| to64(f32s(&values[t]))).collect();
            let mut host: Vec<Data> = params.iter().map(|t| values[t].clone()).collect();
            {
                let mut refs: Vec<&mut Data> = host.iter_mut().collect();
                let o: Vec<&Data> = others.iter().collect();
                cpu.update(op, &mut refs, &o).unwrap();
            }
            // Adam against the f64 reference, from the same state.
            let layer: usize = op.name[op.name.find("[l").unwrap() + 2..op.name.len() - 1]
                .parse()
                .unwrap();
            let adam = Adam {
                lr: h.lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: if layer == 1 { h.weight_decay } else { 0.0 },
            };
            let (mut w, mut m, mut v) = (before[0].clone(), before[1].clone(), before[2].clone());
            reference::adam_step(&adam, 1, &mut w, &to64(f32s(&others[0])), &mut m, &mut v);
            let got: Vec<Data> = on_gpu.iter().map(&down).collect();
            let what = format!("{case}: {}", op.name);
            assert_close(&what, f32s(&got[0]), &w, 1e-5);
            assert_close(&what, f32s(&got[1]), &m, 1e-5);
            assert_close(&what, f32s(&got[2]), &v, 1e-5);
            referenced += 1;
            for (t, data) in params.iter().zip(host) {
                values.insert(*t, data);
            }
            continue;
        }
        let inputs: Vec<&Data> = op.inputs.iter().map(|t| &values[&t.index()]).collect();
        let on_gpu: Vec<Data> = inputs.iter().map(|d| up(d)).collect();
        let gpu_inputs: Vec<&Data> = on_gpu.iter().collect();
        let cuda_out: Vec<Data> = gpu
            .run(op, &gpu_inputs)
            .unwrap_or_else(|e| panic!("{case}: {}: {e}", op.name))
            .iter()
            .map(&down)
            .collect();
        // GCN's and SAGE's aggregations' third input is their partial sum
        // (GAT's are its edge weights).
        if h.model != GnnModel::Gat && op.name.starts_with("agg") && op.inputs.len() == 3 {
            // The aggregation adding into its partial sum, handed over as
            // the executor hands it (`run_owned`): the same bits as into
            // a fresh output.
            let owned: Vec<Arc<Data>> = inputs.iter().map(|d| Arc::new(up(d))).collect();
            let before = gpu.sums_added_in_place();
            let into: Vec<Data> = gpu
                .run_owned(op, owned)
                .unwrap_or_else(|e| panic!("{case}: {} handed its sum: {e}", op.name))
                .iter()
                .map(&down)
                .collect();
            assert_eq!(
                gpu.sums_added_in_place(),
                before + 1,
                "{case}: {} added into the sum it was handed",
                op.name
            );
            assert_eq!(into.len(), cuda_out.len(), "{case}: {}", op.name);
            for (fresh, into) in cuda_out.iter().zip(&into) {
                let bits = |d: &Data| f32s(d).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(fresh),
                    bits(into),
                    "{case}: {} handed its sum",
                    op.name
                );
            }
        }
        let cpu_out = cpu.run(op, &inputs).unwrap();
        assert_eq!(cuda_out.len(), cpu_out.len(), "{case}: {}", op.name);
        for (k, (g, c)) in cuda_out.iter().zip(&cpu_out).enumerate() {
            let what = format!("{case}: {} output {k}", op.name);
            match (g, c) {
                // A ReLU's mask: the same bits.
                (Data::I64(g), Data::I64(c)) => assert_eq!(g, c, "{what}"),
                _ => assert_close(&what, f32s(g), &to64(f32s(c)), 1e-4),
            }
        }
        if partitions == 1
            && check_reference(&op.name, &inputs, &cuda_out, &h, &prepared, &workload)
        {
            referenced += 1;
        }
        for (&t, data) in op.outputs.iter().zip(cpu_out) {
            values.insert(t.index(), data);
        }
    }
    let metrics = gpu.metrics().unwrap();
    assert!(
        metrics.train_total > 0,
        "the GPU's loss operators counted the training rows"
    );
    referenced
}

/// GAT's whole attention aggregation (scores, softmax over the row,
/// weighted sum, attention dropout) against the reference, through the
/// CUDA operators of a one-partition workload.
fn gat_layer_matches_reference() {
    let h = Hyper {
        dropout: 0.3,
        ..hyper(GnnModel::Gat, 2)
    };
    let prepared = train::prepare(planted(200, 5), &h, 1).unwrap();
    let workload = &prepared.workload;
    let mut gpu =
        CudaGnn::new(prepared.input.clone(), h, 1 << 30, &CudaOptions::default()).unwrap();
    let mut cpu = CpuGnn::new(prepared.input.clone(), h).unwrap();
    let mover = gpu.mover();
    gpu.begin_iteration(0).unwrap();
    let find = |name: &str| workload.ops.iter().find(|o| o.name == name).unwrap();
    let tensor = |name: &str| workload.tensors.iter().find(|t| t.name == name).unwrap();
    let adj = cpu.external(tensor("adj[0,0]")).unwrap();
    let w = cpu.external(tensor("w[l2]")).unwrap();
    let up = |d: &Data| mover.to_device(Cow::Borrowed(d)).unwrap();
    // A layer-2 input: values in [-1, 1).
    let rows = prepared.input.offsets[1] as usize;
    let (d, classes) = (h.hidden as usize, prepared.input.classes);
    let z: Vec<f32> = (0..rows * classes)
        .map(|i| ((i * 7919 % 2000) as f32 / 1000.0) - 1.0)
        .collect();
    let _ = d;
    let z = Data::F32(z);
    let (adj_d, w_d, z_d) = (up(&adj), up(&w), up(&z));
    let run = |gpu: &mut CudaGnn, name: &str, inputs: &[&Data]| {
        gpu.run(find(name), inputs).unwrap().remove(0)
    };
    let scores = run(&mut gpu, "node_scores[l2,p0]", &[&z_d, &w_d]);
    let edge = run(&mut gpu, "sddmm[l2,p0,s0]", &[&adj_d, &scores]);
    let alpha = run(&mut gpu, "edge_softmax[l2,p0]", &[&adj_d, &edge]);
    let agg = run(&mut gpu, "agg[l2,p0,s0]", &[&adj_d, &z_d, &alpha]);
    let agg = mover.to_plain(&agg).unwrap();
    // The reference on the block as a whole graph.
    let b = adj.block().unwrap();
    let csr = Csr {
        row_start: b.row_start.clone(),
        columns: b.columns.clone(),
    };
    let w64 = to64(f32s(&w));
    let att = &w64[d * classes..];
    let (att_src, att_dst) = (&att[..classes], &att[classes..2 * classes]);
    let drop = Dropout::new(h.dropout, h.seed, (1 << 16) | (2 << 2) | 2).unwrap();
    // The mask of edge (r, c), one head: element r · N + c (one partition,
    // so rows are the graph's).
    let nodes = rows as u64;
    let factors: Vec<f64> = (0..rows)
        .flat_map(|r| (b.row_start[r]..b.row_start[r + 1]).map(move |e| (r, e as usize)))
        .map(|(r, e)| drop.value(r as u64 * nodes + b.columns[e] as u64) as f64)
        .collect();
    let expect = reference::gat(
        &csr,
        &to64(f32s(&z)),
        1,
        classes,
        att_src,
        att_dst,
        Some(&factors),
    );
    assert_close("gat aggregation", f32s(&agg), &expect, 1e-5);
}

#[test]
fn every_operator_matches_the_cpu_and_the_reference() {
    if !gpu_ready("every_operator_matches_the_cpu_and_the_reference") {
        return;
    }
    // GCN both ways: by default both of its layers (12 -> 8 -> 4) project
    // first; aggregating first keeps the other order's operators covered.
    let aggregate_first = Hyper {
        order: LayerOrder::AggregateFirst,
        ..hyper(GnnModel::Gcn, 1)
    };
    for h in [
        hyper(GnnModel::Gcn, 1),
        aggregate_first,
        hyper(GnnModel::Sage, 1),
        hyper(GnnModel::Gat, 2),
    ] {
        let referenced = operators_agree(h, 1);
        assert!(
            referenced >= 5,
            "{:?} ({}): {referenced} operators checked against the reference",
            h.model,
            h.order.name()
        );
        operators_agree(h, 3);
    }
    // By inputs, each output's sum is built a block product at a time
    // (the first product writes it, the later ones add to it).
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        let by_inputs = Hyper {
            sweeps: Sweeps::INPUTS,
            ..hyper(model, 1)
        };
        operators_agree(by_inputs, 3);
    }
    gat_layer_matches_reference();
}

#[test]
fn hub_columns_are_transposed_in_edge_order() {
    if !gpu_ready("hub_columns_are_transposed_in_edge_order") {
        return;
    }
    // An R-MAT graph has hubs: sources with more edges than one thread
    // sorts (256, `ONE_THREAD_SORT` in kernels/cuda/sparse.cu), whose
    // columns a whole block sorts. The transposed aggregations (GCN's
    // with built transposes, GCN's gather over stored ones, and GAT's
    // into source rows) must still sum them in edge order. Its
    // destination hubs' rows, and its source hubs' columns, are longer
    // than a segment (256 edges or more, `segments` in
    // runtime/src/cuda/gnn.rs): their sums are split over segments and
    // fixed up (`segment_fixup_f32`), GAT's edge-wise kernels, edge
    // softmax and attention backward included (`gat_segments`).
    let dataset =
        train::load_graph("rmat:scale=12,edge_factor=16,features=12,classes=4,seed=2").unwrap();
    for (end, ids) in [("sources", &dataset.src), ("destinations", &dataset.dst)] {
        let mut edges = HashMap::<u64, usize>::new();
        for &v in ids.iter() {
            *edges.entry(v).or_default() += 1;
        }
        let hubs = edges.values().filter(|&&n| n > 256).count();
        let most = edges.values().max().copied().unwrap_or(0);
        assert!(
            hubs >= 10 && most > 2000,
            "{end}: {hubs} hubs, the largest {most} edges"
        );
    }
    let built = Hyper {
        transposes: Transposes::Built,
        ..hyper(GnnModel::Gcn, 1)
    };
    for h in [hyper(GnnModel::Gcn, 1), built, hyper(GnnModel::Gat, 2)] {
        let referenced = operators_agree_on(dataset.clone(), h, 1);
        assert!(referenced >= 5, "{:?}: {referenced} operators", h.model);
        operators_agree_on(dataset.clone(), h, 2);
    }
}

#[test]
fn a_wide_first_layer_projects_in_slabs() {
    if !gpu_ready("a_wide_first_layer_projects_in_slabs") {
        return;
    }
    // 9,000 rows of 2,048 features are 70.3 MiB: the CUDA backend drops
    // and projects them in two slabs of at most 64 MiB (the second one
    // short), adding the second slab's weight gradient to the first's.
    let (nodes, features) = (9000u32, 2048u32);
    assert!(nodes as u64 * features as u64 * 4 > 64 << 20);
    for h in [hyper(GnnModel::Gcn, 1), hyper(GnnModel::Gat, 2)] {
        let referenced = operators_agree_on(planted_wide(nodes, features, 3), h, 1);
        assert!(referenced >= 5, "{:?}: {referenced} operators", h.model);
    }
}

fn train_losses(
    dataset: &Dataset,
    h: Hyper,
    partitions: u32,
    policy: Policy,
    budgets: Budgets,
    backend: BackendChoice,
    ssd: Option<Arc<dyn SsdTier>>,
) -> Option<Vec<f64>> {
    let prepared = train::prepare(dataset.clone(), &h, partitions).unwrap();
    let profile = profile();
    let options = PlanOptions {
        budgets,
        ssd_staging_bytes: 1 << 16,
        ..PlanOptions::new(policy, &profile)
    };
    let plan = match plan(&prepared.workload, &profile, &options) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{policy:?} does not fit ({e}): not run");
            return None;
        }
    };
    let run = TrainRun {
        plan: Arc::new(plan),
        epochs: 8,
        budgets: None,
        ssd,
        trace: false,
        backend,
        stop: None,
        evaluate_every: 0,
    };
    let (report, _) = train::train(prepared, h, run, &mut |_| {}).unwrap();
    assert!(report.peak_bytes.hbm <= report.budgets.hbm_bytes);
    Some(report.losses)
}

#[test]
fn every_plan_trains_the_same_model_on_the_gpu() {
    if !gpu_ready("every_plan_trains_the_same_model_on_the_gpu") {
        return;
    }
    let dataset = planted(500, 11);
    let cuda = || BackendChoice::Cuda(CudaOptions::default());
    let by_inputs = Hyper {
        sweeps: Sweeps::INPUTS,
        ..hyper(GnnModel::Gcn, 1)
    };
    // GCN by outputs' retain-all losses: by inputs sums the same terms in
    // the same order, so it must give them bit for bit.
    let mut gcn_by_outputs: Option<Vec<f64>> = None;
    for h in [
        hyper(GnnModel::Gcn, 1),
        hyper(GnnModel::Sage, 1),
        hyper(GnnModel::Gat, 2),
        by_inputs,
    ] {
        let model = format!("{:?} by {}", h.model, h.sweeps.name());
        let reference =
            train_losses(&dataset, h, 4, Policy::RetainAll, roomy(), cuda(), None).unwrap();
        if h.model == GnnModel::Gcn {
            match &gcn_by_outputs {
                None => gcn_by_outputs = Some(reference.clone()),
                Some(outputs) => assert_eq!(
                    &reference, outputs,
                    "{model}: retain-all losses differ from GCN by outputs'"
                ),
            }
        }
        let cpu = train_losses(
            &dataset,
            h,
            4,
            Policy::RetainAll,
            roomy(),
            BackendChoice::Cpu,
            None,
        )
        .unwrap();
        assert_eq!(reference.len(), cpu.len(), "{model}");
        for (g, c) in reference.iter().zip(&cpu) {
            assert!(
                (g - c).abs() <= 1e-3 * c.abs().max(1.0),
                "{model}: cuda {g}, cpu {c}"
            );
        }
        let prepared = train::prepare(dataset.clone(), &h, 4).unwrap();
        let retain = roomy_plan(&prepared.workload, Policy::RetainAll);
        let quarter = Budgets {
            hbm_bytes: retain.predicted.peak_bytes.hbm / 4,
            ..roomy()
        };
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn SsdTier> =
            train::open_spill(dir.path(), 1 << 40, 100_000, None).unwrap();
        let runs = [
            (Policy::OffloadHostAll, roomy(), None),
            (Policy::OffloadSsdAll, roomy(), Some(store.clone())),
            (Policy::RecomputeAll, roomy(), None),
            (Policy::Dp, quarter, Some(store)),
        ];
        for (policy, budgets, ssd) in runs {
            let Some(losses) = train_losses(&dataset, h, 4, policy, budgets, cuda(), ssd) else {
                assert_eq!(
                    policy,
                    Policy::Dp,
                    "{model}: only dp at a quarter budget may not fit"
                );
                continue;
            };
            assert_eq!(losses.len(), reference.len(), "{model} {policy:?}");
            let exact = losses == reference;
            eprintln!("{model} {policy:?}: losses bit-identical to retain-all: {exact}");
            for (a, b) in losses.iter().zip(&reference) {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{model} {policy:?}: {a} vs {b}"
                );
            }
        }
    }
}

/// The device pool (every buffer the CUDA backend allocates: the plan's
/// tensors, the kernels' scratch, the masks and the kept transpose) never
/// holds more than the plan's predicted device peak, which counts the
/// tensors by their bytes, each operator's `scratch_bytes` and the
/// workload's `resident_bytes`: the CUDA backend's side of
/// `runtime/tests/scratch_heap.rs`. (cuBLAS's own workspace is outside
/// the pool.) dp runs at the least of a quarter, a half and three
/// quarters of the retain-all peak that fits.
#[test]
fn the_device_pool_holds_no_more_than_the_plan_counts() {
    if !gpu_ready("the_device_pool_holds_no_more_than_the_plan_counts") {
        return;
    }
    // 12,000 rows in 2 partitions: several reduction chunks, halo blocks;
    // 1,024 features: the first layer's dropped input in a slab.
    let wide = planted_wide(12_000, 1024, 5);
    let narrow = planted_wide(12_000, 48, 5);
    let cases = [
        ("gcn", &wide, hyper(GnnModel::Gcn, 1)),
        (
            "gcn, aggregating first, transposes built",
            &narrow,
            Hyper {
                hidden: 64,
                order: LayerOrder::AggregateFirst,
                transposes: Transposes::Built,
                ..hyper(GnnModel::Gcn, 1)
            },
        ),
        ("sage", &narrow, hyper(GnnModel::Sage, 1)),
        ("gat, 4 heads", &narrow, hyper(GnnModel::Gat, 4)),
    ];
    let mut over = Vec::new();
    for (name, dataset, h) in cases {
        let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
        let profile = profile();
        let retain = roomy_plan(&prepared.workload, Policy::RetainAll);
        // dp at the least of a quarter, a half and three quarters of the
        // retain-all peak that fits (at 2 partitions the wide GCN's first
        // projection alone needs about two thirds): one of them must.
        let dp = [(1, 4), (1, 2), (3, 4)]
            .into_iter()
            .find_map(|(num, den)| {
                let budgets = Budgets {
                    hbm_bytes: retain.predicted.peak_bytes.hbm / den * num,
                    ..roomy()
                };
                let options = PlanOptions {
                    budgets,
                    ..PlanOptions::new(Policy::Dp, &profile)
                };
                plan(&prepared.workload, &profile, &options).ok()
            })
            .unwrap_or_else(|| panic!("{name}: dp fits at none of the three budgets"));
        for policy in [Policy::RetainAll, Policy::RecomputeAll, Policy::Dp] {
            let made = match policy {
                Policy::Dp => dp.clone(),
                _ => roomy_plan(&prepared.workload, policy),
            };
            let counted = made.predicted.peak_bytes.hbm;
            let run = TrainRun {
                plan: Arc::new(made),
                epochs: 2,
                budgets: None,
                ssd: None,
                trace: false,
                backend: BackendChoice::Cuda(CudaOptions::default()),
                stop: None,
                evaluate_every: 0,
            };
            let prepared = train::prepare(dataset.clone(), &h, 2).unwrap();
            let (report, _) = train::train(prepared, h, run, &mut |_| {}).unwrap();
            let held = report.device_peak_bytes.expect("the CUDA backend's pool");
            eprintln!(
                "{name} {policy:?}: the pool held {held} B at most, the plan counts {counted} B ({:.3})",
                held as f64 / counted as f64
            );
            if held > counted {
                over.push(format!(
                    "{name} {policy:?}: held {held} B, counted {counted} B"
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "the pool held more than the plan counts:\n{}",
        over.join("\n")
    );
}
