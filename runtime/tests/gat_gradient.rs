//! The whole GAT backward on the CPU backend, operator by operator through
//! the executor, against finite differences of the training loss: every
//! part of every layer's weights (`W`, `att_src`, `att_dst`, bias), with
//! dropout on features, hidden units and attention (the masks are keyed
//! by the iteration, so every evaluation of the loss sees the same ones).

use std::sync::Arc;

use fateplan_planner::gnn::GnnModel;
use fateplan_planner::plan::Budgets;
use fateplan_planner::workload::{Op, Tensor};
use fateplan_planner::{plan, PlanOptions, Policy, Profile};
use fateplan_runtime::cpu::{CpuGnn, Hyper};
use fateplan_runtime::exec::data::Data;
use fateplan_runtime::exec::{Backend, ExecError, ExecOptions, Executor};
use fateplan_runtime::train::{self, Prepared};

/// The CPU backend with given weights, whose updates record the weight
/// gradients instead of stepping.
struct Probe {
    inner: CpuGnn,
    weights: Option<Vec<Vec<f32>>>,
    initial: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
}

fn layer_of(name: &str) -> usize {
    let digits: String = name
        .split_once("[l")
        .unwrap()
        .1
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<usize>().unwrap() - 1
}

impl Backend for Probe {
    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError> {
        let data = self.inner.external(tensor)?;
        if !tensor.name.starts_with("w[") {
            return Ok(data);
        }
        let l = layer_of(&tensor.name);
        if self.initial.len() <= l {
            self.initial.resize(l + 1, Vec::new());
        }
        self.initial[l] = data.f32()?.to_vec();
        Ok(match &self.weights {
            Some(w) => Data::F32(w[l].clone()),
            None => data,
        })
    }

    fn externals_placed(&mut self) {
        self.inner.externals_placed();
    }

    fn begin_iteration(&mut self, iteration: u64) -> Result<(), ExecError> {
        self.inner.begin_iteration(iteration)
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        self.inner.run(op, inputs)
    }

    fn update(
        &mut self,
        op: &Op,
        _params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError> {
        let l = layer_of(&op.name);
        if self.grads.len() <= l {
            self.grads.resize(l + 1, Vec::new());
        }
        self.grads[l] = others[0].f32()?.to_vec();
        Ok(())
    }
}

struct Setup {
    prepared: Prepared,
    hyper: Hyper,
    plan: Arc<fateplan_planner::plan::Plan>,
}

/// One training iteration at `weights` (the initialiser's when `None`):
/// the loss, the weights it started from and the gradients.
fn evaluate(setup: &Setup, weights: Option<Vec<Vec<f32>>>) -> (f64, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let probe = Probe {
        inner: CpuGnn::new(setup.prepared.input.clone(), setup.hyper).unwrap(),
        weights,
        initial: Vec::new(),
        grads: Vec::new(),
    };
    let mut executor =
        Executor::new(setup.plan.clone(), probe, None, ExecOptions::default()).unwrap();
    executor.run_iteration().unwrap();
    let probe = executor.backend_mut();
    let loss = probe.inner.metrics().loss;
    let initial = std::mem::take(&mut probe.initial);
    (loss, initial, std::mem::take(&mut probe.grads))
}

fn setup(layers: u32, heads: u32, head_width: u32, partitions: u32) -> Setup {
    let spec = "planted:nodes=90,classes=3,features=7,degree=4,homophily=0.7,val=10,test=10,seed=5";
    // Signed features, kept as they are (as `fateplan train` keeps them).
    let dataset = train::load_graph(spec).unwrap();
    let hyper = Hyper {
        model: GnnModel::Gat,
        layers,
        hidden: heads * head_width,
        heads,
        dropout: 0.4,
        lr: 0.01,
        weight_decay: 0.0,
        weight_decay_all_layers: false,
        seed: 3,
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
    };
    let prepared = train::prepare(dataset, &hyper, partitions).unwrap();
    let profile = Profile::from_json(
        include_str!("../../profiles/cpu-small.json"),
        "cpu-small.json",
    )
    .unwrap();
    let options = PlanOptions {
        budgets: Budgets {
            hbm_bytes: 1 << 40,
            host_bytes: 1 << 40,
            ssd_bytes: 1 << 40,
        },
        ..PlanOptions::new(Policy::RetainAll, &profile)
    };
    let plan = Arc::new(plan(&prepared.workload, &profile, &options).unwrap());
    Setup {
        prepared,
        hyper,
        plan,
    }
}

/// `[W | att_src | att_dst | bias]` of each layer, as ranges.
fn parts(setup: &Setup, layer: usize, len: usize) -> Vec<(&'static str, std::ops::Range<usize>)> {
    let d_out = if layer + 1 == setup.hyper.layers as usize {
        setup.prepared.input.classes
    } else {
        setup.hyper.hidden as usize
    };
    let matrix = len - 3 * d_out;
    vec![
        ("W", 0..matrix),
        ("att_src", matrix..matrix + d_out),
        ("att_dst", matrix + d_out..matrix + 2 * d_out),
        ("bias", matrix + 2 * d_out..len),
    ]
}

fn check(layers: u32, heads: u32, head_width: u32, partitions: u32) {
    let setup = setup(layers, heads, head_width, partitions);
    let (_, w0, grads) = evaluate(&setup, None);
    assert_eq!(grads.len(), layers as usize);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut sign = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        if state & 1 == 0 {
            1.0f64
        } else {
            -1.0
        }
    };
    for l in 0..layers as usize {
        for (part, range) in parts(&setup, l, w0[l].len()) {
            let g = &grads[l][range.clone()];
            let norm = g.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            // Along the gradient (derivative = its norm) and a random
            // direction.
            let along: Vec<f64> = g.iter().map(|&x| x as f64 / norm.max(1e-30)).collect();
            let random: Vec<f64> = {
                let n = (range.len() as f64).sqrt();
                range.clone().map(|_| sign() / n).collect()
            };
            for (what, v) in [("gradient", along), ("random", random)] {
                let analytic: f64 = g.iter().zip(&v).map(|(&a, &b)| a as f64 * b).sum();
                let eps = 1e-3;
                let at = |t: f64| {
                    let mut w = w0.clone();
                    for (x, &d) in w[l][range.clone()].iter_mut().zip(&v) {
                        *x = (*x as f64 + t * d) as f32;
                    }
                    evaluate(&setup, Some(w)).0
                };
                // The loss is only piecewise smooth (LeakyReLU, ReLU, ELU):
                // where a step of eps crosses a kink on one side, the
                // central difference is off, and the one-sided difference
                // on the other side is the derivative. A one-sided
                // difference counts only where the two sides disagree by
                // more than the tolerance, which a smooth stretch does not.
                let (minus, zero, plus) = (at(-eps), at(0.0), at(eps));
                let numeric = [
                    (plus - minus) / (2.0 * eps),
                    (plus - zero) / eps,
                    (zero - minus) / eps,
                ];
                let close = |a: f64, b: f64| (a - b).abs() <= 2e-2 * a.abs().max(b.abs()) + 2e-4;
                let kink = !close(numeric[1], numeric[2]);
                let matched = close(analytic, numeric[0])
                    || (kink && numeric[1..].iter().any(|&n| close(analytic, n)));
                assert!(
                    matched,
                    "layer {} {part} along the {what} direction: analytic {analytic}, finite \
                     differences (central, forward, backward) {numeric:?}",
                    l + 1
                );
            }
            assert!(norm > 1e-6, "layer {} {part}: gradient is zero", l + 1);
        }
    }
}

#[test]
fn gat_gradients_match_finite_differences() {
    // Two and three layers, several heads, partitions splitting the rows.
    check(2, 3, 2, 3);
    check(3, 2, 3, 2);
}
