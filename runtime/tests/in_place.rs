//! The CPU backend's aggregations add into a partial sum handed over to
//! them (`Backend::run_owned`) and give the same bits as when they copy
//! it into a fresh output (`Backend::run`).

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

#[test]
fn chained_aggregations_add_in_place_with_the_same_bits() {
    for model in [GnnModel::Gcn, GnnModel::Sage] {
        let hyper = Hyper {
            model,
            layers: 3,
            hidden: 16,
            heads: 1,
            dropout: 0.5,
            lr: 0.01,
            weight_decay: 5e-4,
            weight_decay_all_layers: false,
            seed: 7,
        };
        let prepared = train::prepare(planted(300, 3), &hyper, 3).unwrap();
        let workload = prepared.workload;
        let mut backend = CpuGnn::new(prepared.input, hyper).unwrap();
        backend.set_mode(Mode::Train);
        backend.begin_iteration(0).unwrap();
        let mut chained = 0;
        for op in &workload.ops {
            let aggregation = op.name.starts_with("agg[") || op.name.starts_with("agg_bwd[");
            if !aggregation || op.inputs.len() != 3 {
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
                            op.id.0 as u64 * 3 + k as u64,
                        ))
                    }
                })
                .collect();
            let refs: Vec<&Data> = inputs.iter().collect();
            let copied = backend.run(op, &refs).unwrap();
            let sum = inputs[2].f32().unwrap().as_ptr();
            let owned: Vec<Arc<Data>> = inputs.into_iter().map(Arc::new).collect();
            let added = backend.run_owned(op, owned).unwrap();
            assert_eq!(added, copied, "{model:?} {}", op.name);
            let out = added[0].f32().unwrap().as_ptr();
            assert_eq!(
                out, sum,
                "{model:?} {}: the sum's buffer was not reused",
                op.name
            );
            chained += 1;
        }
        assert!(
            chained >= 6,
            "{model:?}: only {chained} chained aggregations"
        );
    }
}
