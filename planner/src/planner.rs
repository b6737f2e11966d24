//! Runs the passes in order and assembles the plan.

use crate::passes::cost::{op_seconds, transfer_seconds};
use crate::passes::lifetimes::{use_runs, Lifetimes};
use crate::passes::memory::Occupancy;
use crate::passes::timeline::Timeline;
use crate::passes::{predict, sanity, schedule};
use crate::plan::{
    Action, Budgets, Fate, Plan, PlanWorkload, PlannedTensor, Predicted, ScheduleEntry,
    PLAN_FORMAT_VERSION,
};
use crate::policy::{self, Policy};
use crate::profile::Profile;
use crate::units::{format_bytes, format_seconds};
use crate::workload::{TensorKind, Workload};
use crate::{Error, Result};

/// Host memory reserved for SSD staging buffers (four 64 MiB buffers:
/// double-buffered reads and writes) whenever a plan uses the SSD.
pub const SSD_STAGING_BYTES: u64 = 4 * (64 << 20);

/// How to plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOptions {
    pub policy: Policy,
    pub budgets: Budgets,
    /// GPUs the workload is one share of (recorded in the plan).
    pub gpus: u32,
    pub ssd_staging_bytes: u64,
}

impl PlanOptions {
    /// The given policy with the profile's full capacities as budgets.
    pub fn new(policy: Policy, profile: &Profile) -> PlanOptions {
        PlanOptions {
            policy,
            budgets: Budgets::from_profile(profile),
            gpus: 1,
            ssd_staging_bytes: SSD_STAGING_BYTES,
        }
    }
}

/// Plans `workload` on `profile`. The result has passed the sanity pass.
pub fn plan(workload: &Workload, profile: &Profile, options: &PlanOptions) -> Result<Plan> {
    workload.validate()?;
    profile.validate()?;
    let lives = Lifetimes::compute(workload);
    let fates = policy::assign(
        options.policy,
        workload,
        &lives,
        &options.budgets,
        options.ssd_staging_bytes,
    )?;
    let schedule = schedule::build(workload, &lives, fates)?;
    let timeline = Timeline::new(workload.ops.len(), &schedule.entries);
    let occupancy = Occupancy::compute(
        workload,
        &schedule.fates,
        &schedule.entries,
        &timeline,
        options.ssd_staging_bytes,
    );
    occupancy.check(&timeline, &options.budgets, workload)?;
    let (peak_bytes, peak_step) = occupancy.peaks(&timeline);
    let timing = predict::predict(workload, profile, &schedule.entries, &timeline);
    let plan = Plan {
        format_version: PLAN_FORMAT_VERSION,
        policy: options.policy.name().to_string(),
        workload: PlanWorkload {
            name: workload.name.clone(),
            digest: workload.digest(),
            definition: workload.clone(),
        },
        profile: profile.clone(),
        gpus: options.gpus,
        budgets: options.budgets,
        ssd_staging_bytes: options.ssd_staging_bytes,
        tensors: workload
            .tensors
            .iter()
            .zip(&schedule.fates)
            .map(|(t, &fate)| PlannedTensor {
                id: t.id,
                name: t.name.clone(),
                bytes: t.bytes,
                kind: t.kind,
                fate,
            })
            .collect(),
        schedule: schedule.entries,
        predicted: Predicted {
            iteration_s: timing.iteration_s,
            compute_s: timing.compute_s,
            recompute_s: timing.recompute_s,
            exposed_transfer_s: timing.exposed_transfer_s,
            peak_bytes,
            peak_step,
            bytes_moved: timing.bytes_moved,
        },
    };
    let checked = sanity::check(&plan).map_err(|e| {
        Error::Internal(format!(
            "the planner made a plan the sanity pass rejects: {e}"
        ))
    })?;
    if checked.peak_bytes != plan.predicted.peak_bytes {
        return Err(Error::Internal(format!(
            "memory pass peaks {:?} differ from the sanity pass's {:?}",
            plan.predicted.peak_bytes, checked.peak_bytes
        )));
    }
    Ok(plan)
}

/// A tensor's fate and the reason for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub name: String,
    pub fate: Fate,
    pub reason: String,
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<12}  {}: {}",
            self.fate.name(),
            self.name,
            self.reason
        )
    }
}

/// Every tensor's fate and why.
pub fn explain(plan: &Plan) -> Vec<Explanation> {
    let workload = &plan.workload.definition;
    let profile = &plan.profile;
    let lives = Lifetimes::compute(workload);
    // Compute seconds before each step, to say how much compute a gap holds.
    let mut before = vec![0.0f64; workload.ops.len() + 1];
    for (step, op) in workload.ops.iter().enumerate() {
        before[step + 1] = before[step] + op_seconds(op, profile);
    }
    let mut per_tensor: Vec<Vec<&ScheduleEntry>> = vec![Vec::new(); workload.tensors.len()];
    for entry in &plan.schedule {
        per_tensor[entry.tensor.index()].push(entry);
    }
    workload
        .tensors
        .iter()
        .zip(&plan.tensors)
        .map(|(tensor, planned)| {
            let life = &lives.tensors[tensor.id.index()];
            let entries = &per_tensor[tensor.id.index()];
            let size = format_bytes(tensor.bytes);
            let reason = match planned.fate {
                Fate::Resident if tensor.kind == TensorKind::Parameter => {
                    format!("{size}: parameters stay on the device")
                }
                Fate::Resident => format!("{size}: kept on the device for its {} reads", life.uses.len()),
                Fate::StreamHost | Fate::StreamSsd => {
                    let seconds: f64 = entries.iter().map(|e| link_seconds(e, profile)).sum();
                    format!(
                        "{size}: frees the device between uses; {} loads, {} of transfers",
                        use_runs(&life.uses).len(),
                        format_seconds(seconds)
                    )
                }
                Fate::Retain => match life.gap {
                    None => format!("{size}: no idle stretch between its uses"),
                    Some(gap) => format!(
                        "{size}: idle for {} steps ({} of compute) but kept on the device",
                        gap.idle_steps(),
                        format_seconds(before[gap.before as usize] - before[gap.after as usize + 1])
                    ),
                },
                Fate::OffloadHost | Fate::OffloadSsd => {
                    let idle: u32 = life.gaps.iter().map(|g| g.idle_steps()).sum();
                    let hidden: f64 =
                        life.gaps.iter().map(|g| before[g.before as usize] - before[g.after as usize + 1]).sum();
                    let seconds: f64 = entries.iter().map(|e| link_seconds(e, profile)).sum();
                    format!(
                        "{size} off the device for {idle} steps in {} gaps; {} of transfers against {} of compute in the gaps",
                        life.gaps.len(),
                        format_seconds(seconds),
                        format_seconds(hidden)
                    )
                }
                Fate::Recompute => {
                    let gap = life.gap.expect("recomputed tensors have gaps");
                    let slot: Vec<&ScheduleEntry> = plan
                        .schedule
                        .iter()
                        .filter(|e| e.action == Action::Recompute && e.done_before_step == gap.before)
                        .collect();
                    let seconds: f64 =
                        slot.iter().filter_map(|e| e.op).map(|op| op_seconds(workload.op(op), profile)).sum();
                    format!(
                        "{size} off the device for {} steps; re-run with {} operator(s) before step {} ({})",
                        gap.idle_steps(),
                        slot.len(),
                        gap.before,
                        format_seconds(seconds)
                    )
                }
            };
            Explanation { name: tensor.name.clone(), fate: planned.fate, reason }
        })
        .collect()
}

fn link_seconds(entry: &ScheduleEntry, profile: &Profile) -> f64 {
    let (pcie_s, ssd_s) = transfer_seconds(entry, profile);
    pcie_s.max(ssd_s)
}
