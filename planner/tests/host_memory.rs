//! A GPU's copies also cross host memory: where its bandwidth is the
//! narrowest (a node's GPUs share it), the prediction waits for it. A
//! GPU's DMA touches each byte once, so host memory serves it at twice
//! its copy rate (`host.memory_bytes_per_s`).

use fateplan_planner::profile::DeviceKind;
mod common;

use fateplan_planner::{plan, PlanOptions, Policy, Profile};

#[test]
fn copies_wait_for_host_memory_where_it_is_the_narrowest() {
    let mut wide = common::a100();
    assert_eq!(wide.device.kind, DeviceKind::Gpu);
    // Short operators: offloading every activation leaves the copies exposed.
    let w = common::chain(6, 256 << 20, 1e-4);
    let pcie = wide.pcie.h2d_bytes_per_s.min(wide.pcie.d2h_bytes_per_s);
    wide.host.memory_bytes_per_s = 100.0 * pcie;
    let mut narrow = wide.clone();
    // Copies at an eighth of PCIe: DMA at a quarter.
    narrow.host.memory_bytes_per_s = pcie / 8.0;
    assert_eq!(narrow.host_transfer_bytes_per_s(), pcie / 4.0);
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
    let floor = moved / narrow.host_transfer_bytes_per_s();
    assert!(slow.iteration_s >= floor, "{} < {floor}", slow.iteration_s);
    assert!(fast.iteration_s < floor / 2.0, "{}", fast.iteration_s);
}
