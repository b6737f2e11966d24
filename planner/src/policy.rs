//! Policies: how each tensor's fate is chosen.
//!
//! The `-all` policies apply one fate to every tensor that can take it, as
//! other systems do; `greedy` is the simple policy that fits whenever an
//! offload-or-stream plan can. Optimal planning is a later pass.

use std::collections::BinaryHeap;

use crate::passes::lifetimes::{use_runs, Lifetimes};
use crate::plan::{Budgets, Fate};
use crate::workload::{TensorKind, Workload};
use crate::{Error, Result, Tier};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    RetainAll,
    OffloadHostAll,
    OffloadSsdAll,
    RecomputeAll,
    Greedy,
}

impl Policy {
    pub const ALL: [Policy; 5] = [
        Policy::Greedy,
        Policy::RetainAll,
        Policy::OffloadHostAll,
        Policy::OffloadSsdAll,
        Policy::RecomputeAll,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::RetainAll => "retain-all",
            Policy::OffloadHostAll => "offload-host-all",
            Policy::OffloadSsdAll => "offload-ssd-all",
            Policy::RecomputeAll => "recompute-all",
            Policy::Greedy => "greedy",
        }
    }

    pub fn parse(text: &str) -> Result<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                Error::invalid(
                    format!("policy {text:?}"),
                    format!("unknown policy; known policies: {}", known.join(", ")),
                )
            })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Policy::RetainAll => "every intermediate stays on the device; inputs resident",
            Policy::OffloadHostAll => "every intermediate with a gap goes to host memory; inputs streamed from host",
            Policy::OffloadSsdAll => "every intermediate with a gap goes to the SSD; inputs streamed from SSD",
            Policy::RecomputeAll => "every recomputable intermediate but layer outputs is recomputed; inputs resident",
            Policy::Greedy => "retain what fits; move the largest idle tensors to host, then SSD, until every tier fits",
        }
    }
}

/// Chooses a fate for every tensor.
pub fn assign(
    policy: Policy,
    workload: &Workload,
    lives: &Lifetimes,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
) -> Result<Vec<Fate>> {
    if policy == Policy::Greedy {
        return greedy(workload, lives, budgets, ssd_staging_bytes);
    }
    let fates = workload
        .tensors
        .iter()
        .map(|tensor| {
            let life = &lives.tensors[tensor.id.index()];
            match tensor.kind {
                TensorKind::Parameter => Fate::Resident,
                TensorKind::Input => match policy {
                    Policy::OffloadHostAll => Fate::StreamHost,
                    Policy::OffloadSsdAll => Fate::StreamSsd,
                    _ => Fate::Resident,
                },
                _ => match (policy, life.gap) {
                    (Policy::OffloadHostAll, Some(_)) => Fate::OffloadHost,
                    (Policy::OffloadSsdAll, Some(_)) => Fate::OffloadSsd,
                    (Policy::RecomputeAll, Some(_)) if life.recomputable && !tensor.checkpoint => {
                        Fate::Recompute
                    }
                    _ => Fate::Retain,
                },
            }
        })
        .collect();
    Ok(fates)
}

/// Range add, point query over steps.
struct Fenwick {
    tree: Vec<i128>,
}

impl Fenwick {
    fn new(len: usize) -> Self {
        Fenwick {
            tree: vec![0; len + 1],
        }
    }

    fn add_at(&mut self, index: usize, value: i128) {
        let mut i = index + 1;
        while i < self.tree.len() {
            self.tree[i] += value;
            i += i & i.wrapping_neg();
        }
    }

    /// Adds `value` to every step in `[start, end)`.
    fn add(&mut self, start: usize, end: usize, value: i128) {
        if start < end {
            self.add_at(start, value);
            self.add_at(end, -value);
        }
    }

    fn get(&self, index: usize) -> i128 {
        let (mut i, mut sum) = (index + 1, 0);
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

/// Device intervals `[start, end)` of a tensor's copies under `fate`, in
/// steps, for the fates greedy uses (no recomputation, so positions are steps).
fn device_intervals(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    fate: Fate,
) -> Vec<(usize, usize)> {
    let steps = workload.ops.len();
    let life = &lives.tensors[tensor];
    match fate {
        Fate::Resident => vec![(0, steps)],
        Fate::StreamHost | Fate::StreamSsd => use_runs(&life.uses)
            .into_iter()
            .map(|(f, l)| (f as usize, l as usize + 1))
            .collect(),
        Fate::Retain => {
            let p = life.producer.expect("intermediates have producers") as usize;
            vec![(p, life.last_use().expect("produced") as usize + 1)]
        }
        Fate::OffloadHost | Fate::OffloadSsd => {
            let mut start = life.producer.expect("intermediates have producers") as usize;
            let mut intervals = Vec::with_capacity(life.gaps.len() + 1);
            for gap in &life.gaps {
                intervals.push((start, gap.after as usize + 1));
                start = gap.before as usize;
            }
            intervals.push((start, life.last_use().expect("produced") as usize + 1));
            intervals
        }
        Fate::Recompute => unreachable!("greedy does not recompute"),
    }
}

/// Away intervals: the tier and `[start, end)` where the tensor is held off the device.
fn away_interval(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    fate: Fate,
) -> Option<(Tier, usize, usize)> {
    let tier = fate.away_tier()?;
    if workload.tensors[tensor].kind == TensorKind::Input {
        return Some((tier, 0, workload.ops.len()));
    }
    let gaps = &lives.tensors[tensor].gaps;
    let first = gaps.first().expect("offloaded tensors have gaps");
    let last = gaps.last().expect("nonempty");
    Some((tier, first.after as usize + 1, last.before as usize))
}

struct Tiers {
    hbm: Fenwick,
    host: Fenwick,
    ssd: Fenwick,
}

impl Tiers {
    fn of(&mut self, tier: Tier) -> &mut Fenwick {
        match tier {
            Tier::Hbm => &mut self.hbm,
            Tier::Host => &mut self.host,
            Tier::Ssd => &mut self.ssd,
        }
    }

    fn apply(
        &mut self,
        workload: &Workload,
        lives: &Lifetimes,
        tensor: usize,
        fate: Fate,
        sign: i128,
    ) {
        let bytes = workload.tensors[tensor].bytes as i128 * sign;
        for (start, end) in device_intervals(workload, lives, tensor, fate) {
            self.hbm.add(start, end, bytes);
        }
        if let Some((tier, start, end)) = away_interval(workload, lives, tensor, fate) {
            self.of(tier).add(start, end, bytes);
        }
    }
}

/// Where demoting a tensor frees `tier`: `[start, end)` per stretch.
fn relief(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    tier: Tier,
) -> Vec<(usize, usize)> {
    let steps = workload.ops.len();
    let life = &lives.tensors[tensor];
    match (tier, workload.tensors[tensor].kind) {
        (_, TensorKind::Parameter) => Vec::new(),
        (Tier::Hbm, TensorKind::Input) => {
            let mut free = Vec::new();
            let mut next = 0usize;
            for (first, last) in use_runs(&life.uses) {
                free.push((next, first as usize));
                next = last as usize + 1;
            }
            free.push((next, steps));
            free.retain(|&(s, e)| s < e);
            free
        }
        (Tier::Host, TensorKind::Input) => vec![(0, steps)],
        (Tier::Hbm, _) => life
            .gaps
            .iter()
            .map(|g| (g.after as usize + 1, g.before as usize))
            .collect(),
        (_, _) => match (life.gaps.first(), life.gaps.last()) {
            (Some(first), Some(last)) => vec![(first.after as usize + 1, last.before as usize)],
            _ => Vec::new(),
        },
    }
}

/// Sweeps the steps in order; wherever `tier` is over budget, demotes the
/// largest tensor whose demotion frees that step. Demotion never adds bytes
/// to `tier` anywhere, so steps already fitted stay fitted.
#[allow(clippy::too_many_arguments)]
fn sweep(
    workload: &Workload,
    lives: &Lifetimes,
    fates: &mut [Fate],
    tiers: &mut Tiers,
    tier: Tier,
    budget: u64,
    eligible: &dyn Fn(Fate) -> Option<Fate>,
) -> Result<()> {
    let steps = workload.ops.len();
    let mut starts: Vec<Vec<(usize, usize)>> = vec![Vec::new(); steps];
    for tensor in 0..workload.tensors.len() {
        if eligible(fates[tensor]).is_none() {
            continue;
        }
        for (start, end) in relief(workload, lives, tensor, tier) {
            starts[start].push((tensor, end));
        }
    }
    // Max-heap by bytes, then lowest id.
    let mut active: BinaryHeap<(u64, std::cmp::Reverse<usize>, usize)> = BinaryHeap::new();
    for step in 0..steps {
        for &(tensor, end) in &starts[step] {
            active.push((
                workload.tensors[tensor].bytes,
                std::cmp::Reverse(tensor),
                end,
            ));
        }
        loop {
            let used = tiers.of(tier).get(step).max(0) as u64;
            if used <= budget {
                break;
            }
            let Some((_, std::cmp::Reverse(tensor), end)) = active.pop() else {
                return Err(Error::Infeasible {
                    tier,
                    step: step as u32,
                    op: workload.ops[step].name.clone(),
                    needed_bytes: used,
                    budget_bytes: budget,
                    bytes_over: used - budget,
                });
            };
            let Some(demoted) = eligible(fates[tensor]) else {
                continue;
            };
            if end <= step {
                continue;
            }
            tiers.apply(workload, lives, tensor, fates[tensor], -1);
            fates[tensor] = demoted;
            tiers.apply(workload, lives, tensor, demoted, 1);
        }
    }
    Ok(())
}

fn greedy(
    workload: &Workload,
    lives: &Lifetimes,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
) -> Result<Vec<Fate>> {
    let steps = workload.ops.len();
    let mut fates: Vec<Fate> = workload
        .tensors
        .iter()
        .map(|t| {
            if t.kind.is_external() {
                Fate::Resident
            } else {
                Fate::Retain
            }
        })
        .collect();
    let mut tiers = Tiers {
        hbm: Fenwick::new(steps),
        host: Fenwick::new(steps),
        ssd: Fenwick::new(steps),
    };
    for tensor in 0..fates.len() {
        tiers.apply(workload, lives, tensor, fates[tensor], 1);
    }
    sweep(
        workload,
        lives,
        &mut fates,
        &mut tiers,
        Tier::Hbm,
        budgets.hbm_bytes,
        &|fate| match fate {
            Fate::Retain => Some(Fate::OffloadHost),
            Fate::Resident => Some(Fate::StreamHost),
            _ => None,
        },
    )?;
    let host_over = (0..steps).any(|s| tiers.host.get(s) > budgets.host_bytes as i128);
    if host_over {
        // Spilling to the SSD needs staging buffers in host memory.
        tiers.host.add(0, steps, ssd_staging_bytes as i128);
        sweep(
            workload,
            lives,
            &mut fates,
            &mut tiers,
            Tier::Host,
            budgets.host_bytes,
            &|fate| match fate {
                Fate::OffloadHost => Some(Fate::OffloadSsd),
                Fate::StreamHost => Some(Fate::StreamSsd),
                _ => None,
            },
        )?;
    }
    Ok(fates)
}
