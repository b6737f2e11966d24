//! Pass 4, memory: bytes on every tier at every position of the timeline,
//! counted from the lifetimes of copies.
//!
//! It runs after the schedule, which fixes when copies appear and go, and
//! before the prediction, which reports its peaks. A device copy lives from
//! its creation (its operator, its recomputation, or the issue of its
//! reload or load) to its last read before the next creation, or to the end
//! of the offload that moves it away. Host and SSD copies live from their
//! offload's issue to the end of the reload that brings them back.

use super::timeline::{Item, Timeline};
use crate::plan::{Action, Budgets, Fate, PerTier, ScheduleEntry};
use crate::workload::{TensorId, TensorKind, Workload};
use crate::{Error, Result, Tier};

const TIERS: [Tier; 3] = [Tier::Hbm, Tier::Host, Tier::Ssd];

/// Bytes per tier per position.
#[derive(Debug, Clone)]
pub struct Occupancy {
    pub bytes: PerTier<Vec<u64>>,
}

/// One copy of a tensor on one tier, alive over positions `start..end`.
/// `tensor` is `None` for the SSD staging buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLife {
    pub tensor: Option<TensorId>,
    pub tier: Tier,
    pub start: usize,
    pub end: usize,
    pub bytes: u64,
}

/// Every copy's lifetime: the one definition of when memory is held, shared
/// by this pass and by the runtime's executor, which charges its arenas
/// from it.
pub fn copy_lives(
    workload: &Workload,
    fates: &[Fate],
    schedule: &[ScheduleEntry],
    timeline: &Timeline,
    ssd_staging_bytes: u64,
) -> Vec<CopyLife> {
    let positions = timeline.len();
    let mut lives = Vec::new();
    let mut add = |tensor: Option<TensorId>, tier: Tier, start: usize, end: usize, bytes: u64| {
        if start < end {
            lives.push(CopyLife {
                tensor,
                tier,
                start,
                end,
                bytes,
            });
        }
    };
    // Per tensor: device-copy creations, reads, and offloads, in position order.
    let n = workload.tensors.len();
    let mut creations: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut offloads: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (position, item) in timeline.items.iter().enumerate() {
        let op = match *item {
            Item::Op(step) => &workload.ops[step as usize],
            Item::Recompute(index) => {
                let entry = &schedule[index];
                let op = &workload.ops[entry.op.expect("recompute names its op").index()];
                creations[entry.tensor.index()].push(position);
                for &input in &op.inputs {
                    reads[input.index()].push(position);
                }
                continue;
            }
        };
        for &input in &op.inputs {
            reads[input.index()].push(position);
        }
        for &output in &op.outputs {
            creations[output.index()].push(position);
        }
    }
    let mut reload_done: Vec<Vec<usize>> = vec![Vec::new(); n];
    for entry in schedule.iter().filter(|e| e.action == Action::Reload) {
        reload_done[entry.tensor.index()]
            .push(timeline.step_start[entry.done_before_step as usize]);
    }
    let mut uses_ssd = false;
    for entry in schedule {
        let t = entry.tensor.index();
        let issued = timeline.after_step(entry.issue_after_step);
        let done = timeline.step_start[entry.done_before_step as usize];
        match entry.action {
            Action::Offload => {
                offloads[t].push((issued, done));
                // The away copy lives until a reload from it finishes.
                let back = reload_done[t]
                    .iter()
                    .copied()
                    .filter(|&end| end > issued)
                    .min()
                    .unwrap_or(positions);
                add(Some(entry.tensor), entry.to, issued, back, entry.bytes);
            }
            Action::Reload | Action::Load => creations[t].push(issued),
            Action::Recompute => {}
        }
        uses_ssd |= entry.from == Tier::Ssd || entry.to == Tier::Ssd;
    }
    if uses_ssd {
        add(None, Tier::Host, 0, positions, ssd_staging_bytes);
    }
    for (tensor, &fate) in workload.tensors.iter().zip(fates) {
        let t = tensor.id.index();
        let persistent = tensor.kind == TensorKind::Parameter || fate == Fate::Resident;
        if persistent {
            add(Some(tensor.id), Tier::Hbm, 0, positions, tensor.bytes);
            continue;
        }
        if let Some(tier) = fate
            .away_tier()
            .filter(|_| tensor.kind == TensorKind::Input)
        {
            add(Some(tensor.id), tier, 0, positions, tensor.bytes);
        }
        let created = &mut creations[t];
        created.sort_unstable();
        // Reads are in position order, and so are offloads (the schedule is
        // ordered by issue): one pass over each.
        let (tensor_reads, tensor_offloads) = (&reads[t], &offloads[t]);
        let (mut r, mut o) = (0usize, 0usize);
        for (k, &start) in created.iter().enumerate() {
            let next = created.get(k + 1).copied().unwrap_or(usize::MAX);
            while o < tensor_offloads.len() && tensor_offloads[o].0 < start {
                o += 1;
            }
            while r < tensor_reads.len() && tensor_reads[r] < next {
                r += 1;
            }
            let end = match tensor_offloads.get(o) {
                // The first offload issued while this copy lives ends it.
                Some(&(issued, done)) if issued < next => done,
                // Else its last read before the next creation.
                _ => match r.checked_sub(1).map(|i| tensor_reads[i]) {
                    Some(last) if last >= start => last + 1,
                    _ => start + 1,
                },
            };
            add(Some(tensor.id), Tier::Hbm, start, end, tensor.bytes);
        }
    }
    lives
}

impl Occupancy {
    pub fn compute(
        workload: &Workload,
        fates: &[Fate],
        schedule: &[ScheduleEntry],
        timeline: &Timeline,
        ssd_staging_bytes: u64,
    ) -> Occupancy {
        let positions = timeline.len();
        let mut delta: PerTier<Vec<i128>> = PerTier {
            hbm: vec![0; positions + 1],
            host: vec![0; positions + 1],
            ssd: vec![0; positions + 1],
        };
        for life in copy_lives(workload, fates, schedule, timeline, ssd_staging_bytes) {
            let d = delta.get_mut(life.tier);
            d[life.start] += life.bytes as i128;
            d[life.end] -= life.bytes as i128;
        }
        let mut bytes = PerTier {
            hbm: vec![0u64; positions],
            host: vec![0; positions],
            ssd: vec![0; positions],
        };
        for tier in TIERS {
            let mut running: i128 = 0;
            let d = delta.get_ref(tier);
            let out = bytes.get_mut(tier);
            for position in 0..positions {
                running += d[position];
                out[position] = running as u64;
            }
        }
        Occupancy { bytes }
    }

    /// Highest bytes per tier and the step where each first occurs.
    pub fn peaks(&self, timeline: &Timeline) -> (PerTier<u64>, PerTier<u32>) {
        let mut peak = PerTier::<u64>::default();
        let mut step = PerTier::<u32>::default();
        for tier in TIERS {
            let values = self.bytes.get_ref(tier);
            let mut best = 0usize;
            for (position, &value) in values.iter().enumerate() {
                if value > values[best] {
                    best = position;
                }
            }
            *peak.get_mut(tier) = values.get(best).copied().unwrap_or(0);
            *step.get_mut(tier) = timeline.step_of.get(best).copied().unwrap_or(0);
        }
        (peak, step)
    }

    /// The worst overrun, tier by tier in order hbm, host, ssd, as an error.
    pub fn check(&self, timeline: &Timeline, budgets: &Budgets, workload: &Workload) -> Result<()> {
        for tier in TIERS {
            let budget = budgets.of(tier);
            let values = self.bytes.get_ref(tier);
            let worst = (0..values.len()).max_by_key(|&p| (values[p], std::cmp::Reverse(p)));
            if let Some(position) = worst.filter(|&p| values[p] > budget) {
                let step = timeline.step_of[position];
                return Err(Error::Infeasible {
                    tier,
                    step,
                    op: workload.ops[step as usize].name.clone(),
                    needed_bytes: values[position],
                    budget_bytes: budget,
                    bytes_over: values[position] - budget,
                    hint: String::new(),
                });
            }
        }
        Ok(())
    }
}
