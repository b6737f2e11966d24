//! Pass 2, the cost model: seconds for every operator and every transfer on
//! the profiled machine.
//!
//! It comes before the policies because they weigh fates by what they cost.
//! The simulator must not call this module: it is the independent judge.

use crate::plan::{Action, ScheduleEntry};
use crate::profile::Profile;
use crate::workload::{ComputeClass, Op};
use crate::Tier;

/// Seconds to run `op` on the profiled device.
pub fn op_seconds(op: &Op, profile: &Profile) -> f64 {
    if let Some(seconds) = op.cost.seconds {
        return seconds;
    }
    let device = &profile.device;
    let memory_s = op.cost.bytes as f64
        / match op.cost.class {
            ComputeClass::Sparse => device.sparse_bytes_per_s,
            _ => device.hbm_bytes_per_s,
        };
    let math_s = op.cost.flops / device.dense_flops_per_s;
    device.op_overhead_s + memory_s.max(math_s)
}

/// Seconds a transfer occupies each link it crosses: `(pcie_s, ssd_s)`.
/// SSD transfers cross PCIe too; with chunked staging the two overlap.
pub fn transfer_seconds(entry: &ScheduleEntry, profile: &Profile) -> (f64, f64) {
    let bytes = entry.bytes as f64;
    let pcie = &profile.pcie;
    let ssd = &profile.ssd;
    match entry.action {
        Action::Recompute => (0.0, 0.0),
        Action::Offload => {
            let pcie_s = pcie.latency_s + bytes / pcie.d2h_bytes_per_s;
            let ssd_s = if entry.to == Tier::Ssd {
                ssd.write_latency_s + bytes / ssd.write_bytes_per_s
            } else {
                0.0
            };
            (pcie_s, ssd_s)
        }
        Action::Reload | Action::Load => {
            let pcie_s = pcie.latency_s + bytes / pcie.h2d_bytes_per_s;
            let ssd_s = if entry.from == Tier::Ssd {
                ssd.read_latency_s + bytes / ssd.read_bytes_per_s
            } else {
                0.0
            };
            (pcie_s, ssd_s)
        }
    }
}
