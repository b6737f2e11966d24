//! A GPU's copies also cross host memory: where its bandwidth is the
//! narrowest (a node's GPUs share it), the prediction waits for it.

use fateplan_planner::profile::DeviceKind;
use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind};
use fateplan_planner::{plan, PlanOptions, Policy, Profile, Tier, Workload};

/// Activations the backward reads in reverse, with short operators, so
/// that offloading them all leaves the copies exposed.
fn chain(n: usize, bytes: u64) -> Workload {
    let mut w = Workload::new("chain");
    let x = w.add_tensor("x", bytes, TensorKind::Input, Some(Tier::Host));
    let mut acts = vec![x];
    for i in 0..n {
        let a = w.add_tensor(format!("a{i}"), bytes, TensorKind::Activation, None);
        let input = acts[i];
        w.add_op(
            format!("f{i}"),
            OpKind::Generic,
            Phase::Forward,
            vec![input],
            vec![a],
            Cost::seconds(1e-4),
        );
        acts.push(a);
    }
    let mut grad = w.add_tensor("g_out", bytes, TensorKind::Gradient, None);
    w.add_op(
        "loss",
        OpKind::Generic,
        Phase::Forward,
        vec![acts[n]],
        vec![grad],
        Cost::seconds(1e-4),
    );
    for i in (0..n).rev() {
        let g = w.add_tensor(format!("g{i}"), bytes, TensorKind::Gradient, None);
        w.add_op(
            format!("b{i}"),
            OpKind::Generic,
            Phase::Backward,
            vec![grad, acts[i + 1], acts[i]],
            vec![g],
            Cost::seconds(1e-4),
        );
        grad = g;
    }
    w
}

#[test]
fn copies_wait_for_host_memory_where_it_is_the_narrowest() {
    let mut wide = Profile::from_json(
        include_str!("../../profiles/a100-80g.json"),
        "a100-80g.json",
    )
    .unwrap();
    assert_eq!(wide.device.kind, DeviceKind::Gpu);
    let w = chain(6, 256 << 20);
    let pcie = wide.pcie.h2d_bytes_per_s.min(wide.pcie.d2h_bytes_per_s);
    wide.host.memory_bytes_per_s = 100.0 * pcie;
    let mut narrow = wide.clone();
    narrow.host.memory_bytes_per_s = pcie / 4.0;
    let run = |profile: &Profile| {
        let options = PlanOptions::new(Policy::OffloadHostAll, profile);
        plan(&w, profile, &options).unwrap().predicted
    };
    let (fast, slow) = (run(&wide), run(&narrow));
    assert_eq!(fast.bytes_moved, slow.bytes_moved);
    let moved = (fast.bytes_moved.h2d + fast.bytes_moved.d2h) as f64;
    assert!(moved > 0.0);
    // Host memory at a quarter of PCIe: every byte takes at least four
    // times its PCIe time, and PCIe's two directions no longer overlap.
    let floor = moved / narrow.host.memory_bytes_per_s;
    assert!(slow.iteration_s >= floor, "{} < {floor}", slow.iteration_s);
    assert!(fast.iteration_s < floor / 2.0, "{}", fast.iteration_s);
}
