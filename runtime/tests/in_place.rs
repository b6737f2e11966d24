//! The CPU backend's aggregations (and GAT's attention backward) add
//! into the partial sums handed over to them (`Backend::run_owned`) and
//! give the same bits as when they copy them into fresh outputs
//! (`Backend::run`).

mod common;

use std::sync::Arc;

use common::planted;
use fateplan_planner::gnn::GnnModel;
use fateplan_runtime::cpu::{CpuGnn, Hyper};
use fateplan_runtime::exec::data::Data;
use fateplan_runtime::exec::Backend;
use fateplan_runtime::gnn::Mode;
use fateplan_runtime::train;

/// Deterministic values in about [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|k| {
            let x = (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ seed.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            ((x >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// The inputs of `name` that are partial sums it adds into, given its
/// input count: a GCN or SAGE aggregation's third, a GAT aggregation's
/// fourth, and the running gradients after a GAT attention backward's
/// six (diagonal block) or seven other inputs.
fn partial_sums(model: GnnModel, name: &str, inputs: usize) -> Vec<usize> {
    let gat = model == GnnModel::Gat;
    if name.starts_with("agg[") && gat && inputs == 4 {
        return vec![3];
    }
    if (name.starts_with("agg[") || name.starts_with("agg_bwd[")) && !gat && inputs == 3 {
        return vec![2];
    }
    if let Some(rest) = name.strip_prefix("attention_bwd[") {
        // attention_bwd[l1,pJ,dI]
        let mut parts = rest.trim_end_matches(']').split(',');
        let (_, p, d) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let others = 6 + usize::from(p[1..] != d[1..]);
        return (others..inputs).collect();
    }
    Vec::new()
}

/// A 3-layer `model` of 16 hidden (GAT's of two heads), dropout 0.5.
fn three_layers(model: GnnModel) -> Hyper {
    Hyper {
        layers: 3,
        hidden: 16,
        heads: if model == GnnModel::Gat { 2 } else { 1 },
        seed: 7,
        ..Hyper::new(model)
    }
}

#[test]
fn chained_aggregations_add_in_place_with_the_same_bits() {
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let hyper = three_layers(model);
        let prepared = train::prepare(planted(300, 3), &hyper, 3).unwrap();
        let workload = prepared.workload;
        let mut backend = CpuGnn::new(prepared.input, hyper).unwrap();
        backend.set_mode(Mode::Train);
        backend.begin_iteration(0).unwrap();
        let (mut chained, mut two) = (0, 0);
        for op in &workload.ops {
            let sums = partial_sums(model, &op.name, op.inputs.len());
            if sums.is_empty() {
                continue;
            }
            let inputs: Vec<Data> = op
                .inputs
                .iter()
                .enumerate()
                .map(|(k, &t)| {
                    let tensor = &workload.tensors[t.index()];
                    if tensor.name.starts_with("adj") {
                        backend.external(tensor).unwrap()
                    } else {
                        Data::F32(values(
                            (tensor.bytes / 4) as usize,
                            op.id.0 as u64 * 11 + k as u64,
                        ))
                    }
                })
                .collect();
            let refs: Vec<&Data> = inputs.iter().collect();
            let copied = backend.run(op, &refs).unwrap();
            let handed: Vec<*const f32> = sums
                .iter()
                .map(|&k| inputs[k].f32().unwrap().as_ptr())
                .collect();
            let owned: Vec<Arc<Data>> = inputs.into_iter().map(Arc::new).collect();
            let added = backend.run_owned(op, owned).unwrap();
            assert_eq!(added, copied, "{model:?} {}", op.name);
            let outputs: Vec<*const f32> =
                added.iter().map(|d| d.f32().unwrap().as_ptr()).collect();
            for sum in &handed {
                assert!(
                    outputs.contains(sum),
                    "{model:?} {}: a partial sum's buffer was not reused",
                    op.name
                );
            }
            chained += 1;
            two += usize::from(sums.len() == 2);
        }
        assert!(
            chained >= 6,
            "{model:?}: only {chained} chained aggregations"
        );
        if model == GnnModel::Gat {
            assert!(two > 0, "no attention backward with both running gradients");
        }
    }
}

/// The plan counts an aggregation's output in its running sum's buffer
/// (`Op::adds_into`) only where both backends take that buffer over: a
/// GCN's or GraphSAGE's third input. GAT's, which only the CPU backend
/// takes, are counted apart.
#[test]
fn the_plan_counts_in_place_only_the_sums_both_backends_take() {
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let hyper = three_layers(model);
        let workload = train::prepare(planted(300, 3), &hyper, 3).unwrap().workload;
        let mut marked = 0;
        for op in &workload.ops {
            let taken = partial_sums(model, &op.name, op.inputs.len());
            let expected = match model {
                GnnModel::Gat => None,
                _ => taken.first().map(|&k| k as u32),
            };
            assert_eq!(op.adds_into, expected, "{model:?} {}", op.name);
            marked += usize::from(op.adds_into.is_some());
        }
        if model != GnnModel::Gat {
            assert!(marked >= 6, "{model:?}: only {marked} marked");
        }
    }
}
