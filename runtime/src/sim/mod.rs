//! A discrete-event simulator that replays a plan on a modelled machine:
//! the independent judge of the planner's prediction.
//!
//! What is modelled:
//!
//! - **Compute**: one compute stream per device runs the plan's
//!   recomputations and operators in order (durations: [`model`]). Before
//!   step `d` it waits for every transfer due before `d`.
//! - **Transfer streams**: `h2d`, `d2h`, `ssd_read`, `ssd_write`, each a
//!   FIFO queue running one transfer at a time in issue order. A transfer
//!   is issued when step `issue_after_step` ends (-1: at the start); a load
//!   of an offloaded tensor also waits for its offload to finish.
//! - **Links** ([`flows`]): PCIe host-to-device and device-to-host (full
//!   duplex, independent), the SSD (reads and writes share the device's
//!   time), host-memory bandwidth (shared by PCIe DMA and SSD DMA), and a
//!   device-to-device link (no plan action uses it yet). Transfers in
//!   flight share every link they cross, max-min fairly.
//! - **Latency**: every PCIe copy and every SSD request pays its latency.
//! - **Memory**: a device copy exists from its creation (operator or
//!   recomputation start, or the issue of a load or reload: the in-flight
//!   buffer) to the end of its last read, or to the end of the offload that
//!   moves it away; an away copy from its offload's issue to the end of the
//!   reload that frees it. Parameters and resident inputs hold the device
//!   throughout, streamed inputs their tier; host memory holds
//!   `ssd_staging_bytes` while the plan uses the SSD.
//! - **Checks** at every event: every input of an operator is on the device,
//!   complete, and waited for by the plan; every tier within its budget
//!   (the smaller of the plan's budget and the profile's capacity). A
//!   failure is a [`Violation`] naming the time, tier, tensor and bytes.
//! - **Jitter**: with a non-zero seed, every operator and transfer is
//!   stretched by a factor uniform in `[1 - JITTER, 1 + JITTER)` from a
//!   seeded generator; seed 0 means none. Every report carries its seed.
//!
//! It does not use the planner's cost model or prediction pass.

mod events;
pub mod flows;
mod memory;
pub mod model;
pub mod svg;
pub mod trace;

use serde::{Deserialize, Serialize};

use fateplan_planner::plan::{Budgets, PerTier, Plan};
use fateplan_planner::profile::Profile;
use fateplan_planner::Tier;

use crate::Result;

pub use model::JITTER;

/// Version of the report JSON.
pub const SIM_REPORT_FORMAT_VERSION: u32 = 1;

/// Most violations a report lists; `violations_total` counts them all.
pub const MAX_VIOLATIONS: usize = 100;

/// How to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimOptions {
    /// Jitter seed; 0 means no jitter.
    pub seed: u64,
}

/// A value per transfer stream.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerStream<T> {
    pub h2d: T,
    pub d2h: T,
    pub ssd_read: T,
    pub ssd_write: T,
    /// Transfers between devices (a multi-GPU plan's exchanges).
    #[serde(default)]
    pub exchange: T,
}

/// A value per link.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerLink<T> {
    pub pcie_h2d: T,
    pub pcie_d2h: T,
    pub ssd: T,
    pub host_memory: T,
    pub peer: T,
    /// Between nodes.
    #[serde(default)]
    pub network: T,
}

/// What one transfer stream did.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamReport {
    pub bytes: u64,
    pub transfers: u64,
    /// Seconds with a transfer in progress.
    pub busy_s: f64,
}

/// What one link carried.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkReport {
    /// Bytes carried (host memory counts a staged byte twice: in and out).
    pub bytes: u64,
    /// Seconds with at least one transfer on the link.
    pub busy_s: f64,
    /// Share of the link's capacity used over the iteration (for the SSD,
    /// of the device's time).
    pub utilisation: f64,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// A tier held more than its budget.
    OverBudget,
    /// An operator or recomputation needed a tensor that was not on the
    /// device, not complete, or not yet waited for.
    MissingInput,
    /// A transfer had nothing to move, or would overwrite a copy.
    BadTransfer,
}

/// A broken promise of the plan, found at a simulated time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Violation {
    pub kind: ViolationKind,
    pub time_s: f64,
    pub tier: Tier,
    pub tensor: String,
    /// For `over_budget`, the bytes the tier held; otherwise the tensor's bytes.
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
    /// The step running or about to run, and its operator.
    pub step: u32,
    pub op: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (step {}, {})", self.message, self.step, self.op)
    }
}

/// The simulated iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimReport {
    pub format_version: u32,
    pub workload: String,
    pub policy: String,
    /// The profile the plan was made for, and the one it was replayed on.
    pub planned_profile: String,
    pub profile: String,
    pub seed: u64,
    /// Half-width of the jitter band (0 without a seed).
    pub jitter: f64,
    pub iteration_s: f64,
    /// Operators' time on the compute stream.
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Time the compute stream waited for transfers.
    pub exposed_transfer_s: f64,
    /// The waits, each stretch charged to the stream whose transfer ended it.
    pub exposed_by_stream_s: PerStream<f64>,
    pub streams: PerStream<StreamReport>,
    pub links: PerLink<LinkReport>,
    pub peak_bytes: PerTier<u64>,
    pub peak_time_s: PerTier<f64>,
    pub budgets: Budgets,
    pub violations: Vec<Violation>,
    pub violations_total: u64,
    /// The planner's prediction, for comparison.
    pub predicted_iteration_s: f64,
    /// Events the simulation processed.
    pub events: u64,
}

impl SimReport {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a report always serializes");
        text.push('\n');
        text
    }

    /// The simulated iteration against the planner's prediction, in percent.
    pub fn difference_percent(&self) -> f64 {
        if self.predicted_iteration_s > 0.0 {
            100.0 * (self.iteration_s - self.predicted_iteration_s) / self.predicted_iteration_s
        } else {
            0.0
        }
    }
}

/// Which track a slice of the timeline is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Track {
    Compute,
    /// A transfer stream, in [`PerStream`] order.
    Stream(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    Op(u32),
    /// A recomputation (schedule entry).
    Recompute(u32),
    /// The compute stream waiting for transfers due before this step.
    Wait(u32),
    /// A transfer (schedule entry), from its start to its end.
    Transfer(u32),
    /// An exchange between devices (index into the plan's exchanges).
    Exchange(u32),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Slice {
    pub track: Track,
    pub start: f64,
    pub end: f64,
    pub what: What,
}

/// The timeline of a simulation, for the trace and the memory picture.
#[derive(Debug, Clone)]
pub struct Recording {
    pub(crate) slices: Vec<Slice>,
    /// Bytes per second on each link after each change.
    pub(crate) links: Vec<(f64, [f64; flows::LINKS])>,
    /// Bytes per tier after each change.
    pub(crate) memory: Vec<(f64, [u64; 3])>,
    pub(crate) budgets: Budgets,
    pub(crate) iteration_s: f64,
}

/// The budgets a replay is held to: the plan's, capped by what `profile`
/// has per device (host and SSD shared by the node's GPUs).
pub fn budgets_for(plan: &Plan, profile: &Profile) -> Budgets {
    let share = profile.share(plan.gpus);
    Budgets {
        hbm_bytes: plan.budgets.hbm_bytes.min(share.device.hbm_bytes),
        host_bytes: plan.budgets.host_bytes.min(share.host.memory_bytes),
        ssd_bytes: plan.budgets.ssd_bytes.min(share.ssd.capacity_bytes),
    }
}

/// Replays `plan` on `profile` (the plan's own, or another for a what-if).
/// Broken budgets and missing inputs are reported as violations; only a
/// plan whose structure cannot be replayed is an error.
pub fn simulate(plan: &Plan, profile: &Profile, options: &SimOptions) -> Result<SimReport> {
    Ok(run(plan, profile, options, false)?.0)
}

/// As [`simulate`], and keeps the timeline for [`trace`] and [`svg`].
pub fn simulate_recorded(
    plan: &Plan,
    profile: &Profile,
    options: &SimOptions,
) -> Result<(SimReport, Recording)> {
    let (report, recording) = run(plan, profile, options, true)?;
    Ok((report, recording.expect("recording was asked for")))
}

fn run(
    plan: &Plan,
    profile: &Profile,
    options: &SimOptions,
    record: bool,
) -> Result<(SimReport, Option<Recording>)> {
    profile.validate()?;
    // A plan of several devices needs their link (a CPU profile has none).
    profile.check_gpus(plan.gpus)?;
    plan.workload.definition.validate()?;
    // Fates the schedule does not carry out (a tensor said recomputed with
    // no recomputation) are refused, as training refuses them: replayed,
    // the tensor would stay where it was and the plan pass for another.
    fateplan_planner::passes::sanity::check_structure(plan)?;
    let budgets = budgets_for(plan, profile);
    // One device of the plan's: its share of the node's host memory, SSD
    // and their bandwidth, which the node's devices use at once.
    events::run(plan, &profile.share(plan.gpus), &budgets, options, record)
}

#[cfg(test)]
mod tests;
