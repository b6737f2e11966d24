//! Policies: how each tensor's fate is chosen.
//!
//! The `-all` policies apply one fate to every tensor that can take it, as
//! other systems do; `greedy` is the simple policy that fits whenever an
//! offload-or-stream plan can. Optimal planning is a later pass.

use std::collections::BinaryHeap;

use crate::passes::cost::{self, boundary, item, Choices};
use crate::passes::lifetimes::{use_runs, Lifetimes};
use crate::passes::segtree::MaxTree;
use crate::plan::{Budgets, Fate};
use crate::workload::{TensorKind, Workload};
use crate::{Error, Result, Tier};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The default planner: a search over every fate and transfer timing.
    Dp,
    /// The exact reference: a MILP over the same choices (small instances).
    Milp,
    RetainAll,
    OffloadHostAll,
    OffloadSsdAll,
    RecomputeAll,
    Greedy,
    Hongtu,
    CapacityGreedy,
    RematOnly,
}

impl Policy {
    pub const ALL: [Policy; 10] = [
        Policy::Dp,
        Policy::Milp,
        Policy::Greedy,
        Policy::RetainAll,
        Policy::OffloadHostAll,
        Policy::OffloadSsdAll,
        Policy::RecomputeAll,
        Policy::Hongtu,
        Policy::CapacityGreedy,
        Policy::RematOnly,
    ];

    /// The policies other systems follow, that `dp` is compared with.
    pub const PEERS: [Policy; 8] = [
        Policy::RetainAll,
        Policy::RecomputeAll,
        Policy::OffloadHostAll,
        Policy::OffloadSsdAll,
        Policy::Hongtu,
        Policy::CapacityGreedy,
        Policy::RematOnly,
        Policy::Greedy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Dp => "dp",
            Policy::Milp => "milp",
            Policy::RetainAll => "retain-all",
            Policy::OffloadHostAll => "offload-host-all",
            Policy::OffloadSsdAll => "offload-ssd-all",
            Policy::RecomputeAll => "recompute-all",
            Policy::Greedy => "greedy",
            Policy::Hongtu => "hongtu",
            Policy::CapacityGreedy => "capacity-greedy",
            Policy::RematOnly => "remat-only",
        }
    }

    /// The policy named `text` ([`Policy::name`]), in any case.
    pub fn parse(text: &str) -> Result<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                Error::invalid(
                    format!("policy {text:?}"),
                    format!(
                        "unknown policy; known policies: {}{}",
                        known.join(", "),
                        crate::units::did_you_mean(text, &known)
                    ),
                )
            })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Policy::Dp => "the default: searches every fate and transfer timing for the least predicted time within budget",
            Policy::Milp => "exact MILP over the same choices as dp, optimal in its own linear model of time (the prediction, which queues transfers, may still rank dp first); for small instances (tens of tensors)",
            Policy::RetainAll => "every intermediate stays on the device; inputs resident",
            Policy::OffloadHostAll => "every intermediate with a gap goes to host memory (activations saved on the CPU); inputs streamed from host",
            Policy::OffloadSsdAll => "every intermediate with a gap goes to the SSD; inputs streamed from SSD",
            Policy::RecomputeAll => "checkpoint every layer: every recomputable intermediate but layer outputs is recomputed; inputs resident",
            Policy::Greedy => "retain what fits; move the largest idle tensors to host, then SSD, until every tier fits",
            Policy::Hongtu => "recompute-caching hybrid: vertex data (inputs, layer outputs) in host memory, other forward intermediates recomputed, the rest offloaded to host",
            Policy::CapacityGreedy => "largest tensors first: keep on the device if it fits, else host, else SSD",
            Policy::RematOnly => "retain or recompute only (the rematerialisation setting): recompute the largest idle tensors until the device fits",
        }
    }

    /// Whether this is one of the peer policies (which choose fates
    /// without searching timings and costs).
    pub fn is_peer(self) -> bool {
        !matches!(self, Policy::Dp | Policy::Milp)
    }

    /// Whether this peer's fates depend on the budgets (it gives tensors
    /// away until its count of each step fits): planned again below a
    /// budget its fates miss ([`crate::planner::plan`]).
    pub fn sizes_to_budgets(self) -> bool {
        matches!(
            self,
            Policy::Greedy | Policy::RematOnly | Policy::CapacityGreedy
        )
    }
}

/// Chooses a fate for every tensor under a peer policy. `dp` and `milp`
/// are planned in [`crate::planner`].
pub fn assign(
    policy: Policy,
    workload: &Workload,
    lives: &Lifetimes,
    choices: &Choices,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
) -> Result<Vec<Fate>> {
    match policy {
        Policy::Greedy => return greedy(workload, lives, budgets, ssd_staging_bytes, false),
        Policy::RematOnly => return greedy(workload, lives, budgets, ssd_staging_bytes, true),
        Policy::CapacityGreedy => {
            return capacity_greedy(workload, choices, budgets, ssd_staging_bytes)
        }
        Policy::Dp | Policy::Milp => {
            return Err(Error::Internal(format!(
                "{} is not a peer policy",
                policy.name()
            )))
        }
        _ => {}
    }
    let fates = workload
        .tensors
        .iter()
        .map(|tensor| {
            let life = &lives.tensors[tensor.id.index()];
            match tensor.kind {
                TensorKind::Parameter => Fate::Resident,
                TensorKind::Input => match policy {
                    Policy::OffloadHostAll | Policy::Hongtu => Fate::StreamHost,
                    Policy::OffloadSsdAll => Fate::StreamSsd,
                    _ => Fate::Resident,
                },
                _ => match (policy, life.gap) {
                    (Policy::OffloadHostAll, Some(_)) => Fate::OffloadHost,
                    (Policy::OffloadSsdAll, Some(_)) => Fate::OffloadSsd,
                    (Policy::RecomputeAll, Some(_)) if life.recomputable && !tensor.checkpoint => {
                        Fate::Recompute
                    }
                    (Policy::Hongtu, Some(_)) if life.recomputable && !tensor.checkpoint => {
                        Fate::Recompute
                    }
                    (Policy::Hongtu, Some(_)) => Fate::OffloadHost,
                    _ => Fate::Retain,
                },
            }
        })
        .collect();
    Ok(fates)
}

/// Largest tensors first: each stays on the device if it fits there over
/// its whole life, else goes to host memory if it fits there, else to the
/// SSD. Tensors not yet placed hold only the device copies their uses need.
fn capacity_greedy(
    workload: &Workload,
    choices: &Choices,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
) -> Result<Vec<Fate>> {
    let slots = choices.slots as usize;
    let clamp = |b: u64| b.min(i64::MAX as u64 / 4) as i64;
    let mut fates = choices.baseline.clone();
    // The most-freeing host and SSD choice of each tensor.
    let first = |t: usize, fate: Fate| choices.options[t].iter().find(|c| c.fate == fate);
    let host_fate = |t: usize| {
        if workload.tensors[t].kind == TensorKind::Input {
            (Fate::StreamHost, Fate::StreamSsd)
        } else {
            (Fate::OffloadHost, Fate::OffloadSsd)
        }
    };
    let base: Vec<i64> = choices.base_hbm.iter().map(|&b| b as i64).collect();
    let mut hbm = MaxTree::new(&base);
    let mut host = MaxTree::new(&vec![0; slots]);
    let mut ssd = MaxTree::new(&vec![0; slots]);
    // Start with every movable tensor off the device between its uses.
    let mut movable: Vec<usize> = Vec::new();
    for t in 0..fates.len() {
        if let Some(choice) = first(t, host_fate(t).0) {
            for &(s, e) in &choice.hbm_free {
                hbm.add(s as usize, e as usize, -(workload.tensors[t].bytes as i64));
            }
            movable.push(t);
        }
    }
    movable.sort_by_key(|&t| (std::cmp::Reverse(workload.tensors[t].bytes), t));
    let mut staging = false;
    for t in movable {
        let bytes = workload.tensors[t].bytes as i64;
        let (to_host, to_ssd) = host_fate(t);
        let choice = first(t, to_host).expect("movable tensors have a host choice");
        let fits_device = choice
            .hbm_free
            .iter()
            .all(|&(s, e)| hbm.max(s as usize, e as usize) + bytes <= clamp(budgets.hbm_bytes));
        if fits_device {
            for &(s, e) in &choice.hbm_free {
                hbm.add(s as usize, e as usize, bytes);
            }
            continue;
        }
        let (_, start, end) = choice.away.expect("host choices hold an away copy");
        let (start, end) = (start as usize, end as usize);
        if host.max(start, end) + bytes <= clamp(budgets.host_bytes) {
            host.add(start, end, bytes);
            fates[t] = to_host;
            continue;
        }
        if let Some(ssd_choice) = first(t, to_ssd) {
            let (_, s, e) = ssd_choice.away.expect("SSD choices hold an away copy");
            if !staging {
                staging = true;
                host.add(0, slots, ssd_staging_bytes as i64);
            }
            if ssd.max(s as usize, e as usize) + bytes <= clamp(budgets.ssd_bytes) {
                ssd.add(s as usize, e as usize, bytes);
                fates[t] = to_ssd;
                continue;
            }
        }
        // Nowhere fits: leave it off the device on host; the memory pass
        // reports the overrun.
        host.add(start, end, bytes);
        fates[t] = to_host;
    }
    Ok(fates)
}

/// Range add, point query over memory slots.
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
/// memory slots ([`boundary`], [`item`]), for the fates greedy uses: an
/// offload is due before the step after the last forward read, and a copy
/// back is issued at the boundary before the next read. `handed`: the
/// last read adds into the tensor in place, so its last copy ends at that
/// read's item ([`cost::handed_at_last_use`]).
fn device_intervals(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    fate: Fate,
    handed: bool,
) -> Vec<(usize, usize)> {
    let slots = slot_count(workload);
    let life = &lives.tensors[tensor];
    let produced = || item(life.producer.expect("intermediates have producers"));
    let last_read = || {
        let last = life.last_use().expect("produced");
        match handed {
            true => item(last),
            false => boundary(last + 1),
        }
    };
    let spans: Vec<(u32, u32)> = match fate {
        Fate::Resident => return vec![(0, slots)],
        Fate::StreamHost | Fate::StreamSsd => use_runs(&life.uses)
            .into_iter()
            .map(|(f, l)| (boundary(f), boundary(l + 1)))
            .collect(),
        Fate::Retain => vec![(produced(), last_read())],
        Fate::OffloadHost | Fate::OffloadSsd => {
            let mut start = produced();
            let mut spans = Vec::with_capacity(life.gaps.len() + 1);
            for (k, gap) in life.gaps.iter().enumerate() {
                // The first gap's copy leaves with the offload; later ones
                // go after their last read.
                let end = if k == 0 {
                    item(gap.after + 1)
                } else {
                    boundary(gap.after + 1)
                };
                spans.push((start, end));
                start = boundary(gap.before);
            }
            spans.push((start, last_read()));
            spans
        }
        Fate::Recompute => {
            let gap = life.gap.expect("recomputed tensors have a gap");
            vec![
                (produced(), boundary(gap.after + 1)),
                (item(gap.before), last_read()),
            ]
        }
    };
    spans
        .into_iter()
        .map(|(s, e)| (s as usize, e as usize))
        .collect()
}

/// Away intervals: the tier and `[start, end)` slots where the tensor is
/// held off the device.
fn away_interval(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    fate: Fate,
) -> Option<(Tier, usize, usize)> {
    let tier = fate.away_tier()?;
    if workload.tensors[tensor].kind == TensorKind::Input {
        return Some((tier, 0, slot_count(workload)));
    }
    let gaps = &lives.tensors[tensor].gaps;
    let first = gaps.first().expect("offloaded tensors have gaps");
    let last = gaps.last().expect("nonempty");
    Some((
        tier,
        boundary(first.after + 1) as usize,
        item(last.before) as usize,
    ))
}

/// Memory slots of a workload (see [`crate::passes::cost::slot_count`]).
fn slot_count(workload: &Workload) -> usize {
    cost::slot_count(workload.ops.len() as u32) as usize
}

struct Tiers {
    hbm: Fenwick,
    host: Fenwick,
    ssd: Fenwick,
    /// Per tensor, whether its last read adds into it in place.
    handed: Vec<bool>,
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
        let handed = self.handed[tensor];
        for (start, end) in device_intervals(workload, lives, tensor, fate, handed) {
            self.hbm.add(start, end, bytes);
        }
        if let Some((tier, start, end)) = away_interval(workload, lives, tensor, fate) {
            self.of(tier).add(start, end, bytes);
        }
    }
}

/// Where demoting a tensor frees `tier`: `[start, end)` slots per stretch.
fn relief(
    workload: &Workload,
    lives: &Lifetimes,
    tensor: usize,
    tier: Tier,
    remat: bool,
) -> Vec<(usize, usize)> {
    let slots = slot_count(workload) as u32;
    let life = &lives.tensors[tensor];
    let spans: Vec<(u32, u32)> = match (tier, workload.tensors[tensor].kind) {
        (_, TensorKind::Parameter) => Vec::new(),
        (Tier::Hbm, TensorKind::Activation | TensorKind::Gradient | TensorKind::Workspace)
            if remat =>
        {
            life.gap
                .iter()
                .map(|g| (boundary(g.after + 1), item(g.before)))
                .collect()
        }
        (Tier::Hbm, TensorKind::Input) => {
            let mut free = Vec::new();
            let mut next = 0;
            for (first, last) in use_runs(&life.uses) {
                free.push((boundary(next), boundary(first)));
                next = last + 1;
            }
            free.push((boundary(next), slots));
            free
        }
        (Tier::Host, TensorKind::Input) => vec![(0, slots)],
        (Tier::Hbm, _) => life
            .gaps
            .iter()
            .enumerate()
            .map(|(k, g)| {
                let start = if k == 0 {
                    item(g.after + 1)
                } else {
                    boundary(g.after + 1)
                };
                (start, boundary(g.before))
            })
            .collect(),
        (_, _) => match (life.gaps.first(), life.gaps.last()) {
            (Some(first), Some(last)) => vec![(boundary(first.after + 1), item(last.before))],
            _ => Vec::new(),
        },
    };
    spans
        .into_iter()
        .filter(|&(s, e)| s < e)
        .map(|(s, e)| (s as usize, e as usize))
        .collect()
}

/// Sweeps the memory slots in order; wherever `tier` is over budget,
/// demotes the largest tensor whose demotion frees that slot. Demotion
/// never adds bytes to `tier` anywhere, so slots already fitted stay
/// fitted.
#[allow(clippy::too_many_arguments)]
fn sweep(
    workload: &Workload,
    lives: &Lifetimes,
    fates: &mut [Fate],
    tiers: &mut Tiers,
    tier: Tier,
    budget: u64,
    remat: bool,
    eligible: &dyn Fn(usize, Fate) -> Option<Fate>,
) -> Result<()> {
    let mut starts: Vec<Vec<(usize, usize)>> = vec![Vec::new(); slot_count(workload)];
    for (tensor, &fate) in fates.iter().enumerate() {
        if eligible(tensor, fate).is_none() {
            continue;
        }
        for (start, end) in relief(workload, lives, tensor, tier, remat) {
            starts[start].push((tensor, end));
        }
    }
    // Max-heap by bytes, then lowest id.
    let mut active: BinaryHeap<(u64, std::cmp::Reverse<usize>, usize)> = BinaryHeap::new();
    for (slot, starting) in starts.iter().enumerate() {
        for &(tensor, end) in starting {
            active.push((
                workload.tensors[tensor].bytes,
                std::cmp::Reverse(tensor),
                end,
            ));
        }
        loop {
            let used = tiers.of(tier).get(slot).max(0) as u64;
            if used <= budget {
                break;
            }
            let Some((_, std::cmp::Reverse(tensor), end)) = active.pop() else {
                // A boundary counts for the step after it.
                let step = (slot / 2).min(workload.ops.len().saturating_sub(1));
                return Err(Error::Infeasible {
                    tier,
                    step: step as u32,
                    op: workload.ops[step].name.clone(),
                    needed_bytes: used,
                    budget_bytes: budget,
                    bytes_over: used - budget,
                    hint: String::new(),
                    fits_with: Vec::new(),
                });
            };
            let Some(demoted) = eligible(tensor, fates[tensor]) else {
                continue;
            };
            if end <= slot {
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
    remat: bool,
) -> Result<Vec<Fate>> {
    let slots = slot_count(workload);
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
        hbm: Fenwick::new(slots),
        host: Fenwick::new(slots),
        ssd: Fenwick::new(slots),
        handed: cost::handed_at_last_use(workload),
    };
    for (tensor, &fate) in fates.iter().enumerate() {
        tiers.apply(workload, lives, tensor, fate, 1);
    }
    for (start, end, bytes) in cost::held_beside_tensors(workload) {
        tiers.hbm.add(start, end, bytes as i128);
    }
    sweep(
        workload,
        lives,
        &mut fates,
        &mut tiers,
        Tier::Hbm,
        budgets.hbm_bytes,
        remat,
        &|tensor, fate| match fate {
            Fate::Retain if remat => {
                let life = &lives.tensors[tensor];
                (life.recomputable && life.gap.is_some()).then_some(Fate::Recompute)
            }
            Fate::Retain => Some(Fate::OffloadHost),
            Fate::Resident if !remat => Some(Fate::StreamHost),
            _ => None,
        },
    )?;
    let host_over = (0..slots).any(|s| tiers.host.get(s) > budgets.host_bytes as i128);
    if host_over {
        // Spilling to the SSD needs staging buffers in host memory.
        tiers.host.add(0, slots, ssd_staging_bytes as i128);
        sweep(
            workload,
            lives,
            &mut fates,
            &mut tiers,
            Tier::Host,
            budgets.host_bytes,
            false,
            &|_, fate| match fate {
                Fate::OffloadHost => Some(Fate::OffloadSsd),
                Fate::StreamHost => Some(Fate::StreamSsd),
                _ => None,
            },
        )?;
    }
    Ok(fates)
}

/// `"dp".parse::<Policy>()`, as [`Policy::parse`].
impl std::str::FromStr for Policy {
    type Err = crate::Error;

    fn from_str(text: &str) -> Result<Policy> {
        Policy::parse(text)
    }
}
