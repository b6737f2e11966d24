//! Pass 4, the `dp` planner: chooses every tensor's fate and transfer timing
//! to minimise the predicted iteration time under every tier's budget.
//!
//! It works on the choices of the cost model ([`super::cost::Choices`]):
//! each tensor starts at its baseline (retained, or resident for inputs),
//! which costs nothing and frees nothing. The search has three stages.
//!
//! 1. **Sweep.** Memory slots (a boundary and an item per step, as the
//!    memory pass counts them) are visited in order. Wherever the device is
//!    over budget, the overrun is covered by a minimum-cost knapsack over
//!    the tensors idle at that slot (dynamic programming over a Pareto front of
//!    bytes freed against seconds spent). Each candidate is scored by the
//!    cheapest timing its fate allows, since stage 2 can reach it; the
//!    sweep itself applies the timing that frees the most steps. Where a
//!    slot cannot be covered, a tensor whose recomputation brings bytes
//!    back there is switched to a choice that adds none (`repair`).
//!    Further sweeps cover overruns in score order alone; refuse
//!    recomputations whose added bytes land where the device is still
//!    over budget; and, where host memory ran short, score offloads by
//!    the timing they are given. The cheapest result is kept.
//! 2. **Improvement.** Every changed tensor, costliest first, takes the
//!    cheapest of its choices (the baseline included) that keeps every
//!    tier within budget: this returns over-demoted tensors and moves
//!    transfers earlier (prefetch) or lets offloads run longer wherever
//!    memory allows, hiding them behind compute. Equal prices are broken
//!    by fewer bytes moved.
//! 3. **Exchange.** On instances with few decisions, each costly choice is
//!    tried at a cheaper one, with the room it needs made by moving other
//!    host copies to the SSD or re-timing decided tensors, and the overrun
//!    it causes re-covered by the sweep; and each tensor is tried at a
//!    costlier choice that frees more, with stage 2 spending the room.
//!    A move is kept if the total cost falls. It runs on the best results
//!    of stages 1 and 2 first, under a budget of moves
//!    ([`EXCHANGE_WORK`] over the instance's choices).
//!
//! The first round of the three stages prices added seconds only. The
//! iteration is the larger of compute plus added seconds and the busiest
//! link, so later rounds price link time too: every sweep again, with a
//! link's seconds charged in full, where that link is busier than
//! compute plus added seconds in one of round 1's results (every sweep
//! round 1 ran); and, since the model does not see transfers queue on
//! their link, the sweep of round 1's best result with its busiest link
//! charged at [`LINK_WEIGHT`] where that link is busy for more than
//! [`LINK_BOUND`] of compute plus added seconds. A recomputation's own
//! link seconds are none, but it reads tensors its baseline keeps on the
//! device; where another choice keeps one away at that step, the schedule
//! copies it in ([`Choice::copies_in`]). So where round 1's best makes
//! such copies, one more round runs every sweep with each recomputation
//! charged the copies it would need under that best: each link with
//! copies that bounds the iteration with them priced in full, and one
//! whose copies are over [`COPIES_SHARE`] of its seconds at
//! [`LINK_WEIGHT`] (no round where neither holds). Stage 3 has a round's
//! budget of moves for round 1;
//! the later rounds, which run side by side, share what round 1 left plus
//! half a round's budget, and the round charged the copies has a share of
//! the same size beside theirs. The best result
//! in the model is returned with each other round's best beside it, for
//! the prediction (which queues the transfers) to choose among.
//!
//! Host memory bounds the host choices as they are made. SSD choices need
//! staging buffers in host memory, so the search runs twice, without the
//! SSD and with it (staging reserved), and keeps the cheaper result. The
//! sweeps (with stage 2 after each) run side by side on rayon's threads;
//! the result does not depend on their order.
//!
//! Equal-sized partitions make many tensors interchangeable: they share
//! scores, so the knapsack merges them into one front entry per size and
//! cost, which keeps it small on partitioned GNN workloads.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use rayon::prelude::*;

use super::cost::{Choice, Choices, CopyIn, LinkSeconds};
use super::schedule::Shift;
use super::segtree::MaxTree;
use crate::plan::{Budgets, Fate};
use crate::workload::Workload;
use crate::Tier;

/// Most decisions for which stage 3 runs.
pub const EXCHANGE_LIMIT: usize = 300;

/// Stage 3's budget per round: its moves times the choices of the
/// instance (a move's cost grows with them). About 5,000 moves on an
/// instance of 200 choices, where stage 3 matters most against the exact
/// optimum; about 100 on one of 10,000 (3-layer GAT on 8 partitions),
/// where each move takes about half a millisecond. The later rounds share
/// half a round's budget more (see the module documentation).
pub const EXCHANGE_WORK: usize = 1_000_000;

/// A later round prices round 1's best result's busiest link when its
/// busy time is above this share of compute plus added seconds. The
/// model's iteration is the larger of the two, but transfers queue on
/// their link, which the model does not see: a link busy for half the
/// compute time can stall it where the transfers bunch up. (On
/// `ogbn-arxiv` in 8 partitions at 60% of the retain-all peak, a share
/// of 0.5 left the plan at 62.5 ms and 0.1 found 41.3 ms.)
pub const LINK_BOUND: f64 = 0.1;

/// Seconds that round charges per second of that link's busy time. (1.0
/// as well, tried on 14 workloads, improved none of the predictions
/// further and took longer.)
pub const LINK_WEIGHT: f64 = 0.5;

/// The share of a link's busy seconds above which the copies that
/// recomputations bring in over it call for a round of their own where
/// the link does not bound the iteration. On the plans of `docs/planner.md`
/// ("A recomputation's copies in") such copies were 3% to 40% of their
/// link's seconds where that round planned faster; 0.6% on IGB-full's
/// GCN, where it planned the same and took a quarter longer.
pub const COPIES_SHARE: f64 = 0.01;

/// Largest knapsack front kept per overflowing step; beyond it the
/// sweep takes candidates in score order.
const FRONT_LIMIT: usize = 4_096;

/// Prices closer than this are equal; fewer bytes moved breaks the tie.
const PRICE_TIE_S: f64 = 1e-12;

/// Most candidates a step's knapsack considers.
const KNAPSACK_CANDIDATES: usize = 48;

/// Most candidates a step's knapsack takes: a step overrun by far more
/// than its first [`KNAPSACK_CANDIDATES`] cover can gather many more (an
/// ogbn-arxiv budget of 3.6 MiB at 256 partitions gathered 131,570 at its
/// first step), and the knapsack's front grows with them, quadratic in
/// all: 13 s for that one step. Beyond this many the step takes them in
/// score order, where each is a small part of the overrun anyway.
const KNAPSACK_ITEMS_MAX: usize = 1024;

/// A fate and timing for every tensor: `None` is the baseline, `Some(i)`
/// the `i`-th of its choices.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub picks: Vec<Option<u16>>,
}

impl Assignment {
    pub fn baseline(choices: &Choices) -> Assignment {
        Assignment {
            picks: vec![None; choices.options.len()],
        }
    }

    pub fn choice<'a>(&self, choices: &'a Choices, tensor: usize) -> Option<&'a Choice> {
        self.picks[tensor].map(|i| &choices.options[tensor][i as usize])
    }

    pub fn fate(&self, choices: &Choices, tensor: usize) -> Fate {
        self.choice(choices, tensor)
            .map(|c| c.fate)
            .unwrap_or(choices.baseline[tensor])
    }

    /// Seconds the choices add to the iteration.
    pub fn cost_s(&self, choices: &Choices) -> f64 {
        (0..self.picks.len())
            .filter_map(|t| self.choice(choices, t))
            .map(|c| c.cost_s)
            .sum()
    }

    pub fn link_s(&self, choices: &Choices) -> LinkSeconds {
        let mut total = [0.0; 4];
        for t in 0..self.picks.len() {
            if let Some(c) = self.choice(choices, t) {
                for (sum, s) in total.iter_mut().zip(c.link_s) {
                    *sum += s;
                }
            }
        }
        total
    }

    /// The model's iteration time: compute plus added seconds, or the
    /// busiest link if that is longer.
    pub fn objective_s(&self, choices: &Choices) -> f64 {
        let link = self.link_s(choices);
        let busiest = link.iter().copied().fold(0.0, f64::max);
        (choices.compute_s() + self.cost_s(choices)).max(busiest)
    }

    pub fn uses_ssd(&self, choices: &Choices) -> bool {
        (0..self.picks.len()).any(|t| self.choice(choices, t).is_some_and(Choice::uses_ssd))
    }

    /// Device bytes at each of a step's two slots (a boundary, then the
    /// step) as the model counts them under this assignment, with
    /// `held_hbm` more at each step (per step; empty: none).
    pub fn device_bytes(&self, choices: &Choices, bytes: &[u64], held_hbm: &[u64]) -> Vec<i64> {
        let slots = choices.slots as usize;
        // Differences, summed in order at the end.
        let mut change = vec![0i64; slots + 1];
        let mut add = |start: u32, end: u32, by: i64| {
            change[start as usize] += by;
            change[end as usize] -= by;
        };
        for (t, &b) in bytes.iter().enumerate() {
            if let Some(c) = self.choice(choices, t) {
                for &(s, e) in &c.hbm_free {
                    add(s, e, -(b as i64));
                }
                for &(s, e, added) in &c.hbm_add {
                    add(s, e, added as i64);
                }
            }
        }
        let mut running = 0i64;
        (0..slots)
            .map(|slot| {
                running += change[slot];
                let held = held_hbm.get(slot / 2).copied().unwrap_or(0);
                choices.base_hbm[slot] as i64 + held as i64 + running
            })
            .collect()
    }
}

impl Assignment {
    /// Whether tensor `t`'s choice here keeps it off the device at `slot`:
    /// `Some(true)` where its copy is on the SSD.
    fn away_at(&self, choices: &Choices, t: usize, slot: u32) -> Option<bool> {
        self.choice(choices, t)
            .filter(|c| c.frees(slot))
            .map(Choice::uses_ssd)
    }

    /// Link seconds of the copies in that the recomputations here need of
    /// tensors whose choices here keep them away at that step
    /// ([`Choice::copies_in`]), each copy once: what [`Self::link_s`]
    /// does not count.
    pub fn copies_link_s(&self, choices: &Choices) -> LinkSeconds {
        let mut total = [0.0; 4];
        let mut counted: Vec<CopyIn> = Vec::new();
        for t in 0..self.picks.len() {
            let Some(choice) = self.choice(choices, t) else {
                continue;
            };
            for &(u, slot) in &choice.copies_in {
                if counted.contains(&(u, slot)) {
                    continue;
                }
                if let Some(ssd) = self.away_at(choices, u as usize, slot) {
                    counted.push((u, slot));
                    add_copy_in(&mut total, choices.load_s[u as usize], ssd);
                }
            }
        }
        total
    }
}

/// Adds one copy in, `(pcie_s, ssd_s)`, to `link`: the SSD's read only
/// where the copy comes from there.
fn add_copy_in(link: &mut LinkSeconds, (pcie_s, ssd_s): (f64, f64), ssd: bool) {
    link[0] += pcie_s;
    if ssd {
        link[2] += ssd_s;
    }
}

/// `choices` with every recomputation's link seconds charged the copies
/// in it needs of tensors that `assignment` keeps away at its step.
fn copies_charged(choices: &Choices, assignment: &Assignment) -> Choices {
    // The tensors' lists are shared; those with a copy to charge are
    // copied and charged.
    let mut charged = choices.clone();
    for options in &mut charged.options {
        let away = |&(u, slot): &CopyIn| assignment.away_at(choices, u as usize, slot);
        if !options
            .iter()
            .any(|c| c.copies_in.iter().any(|c| away(c).is_some()))
        {
            continue;
        }
        let mut changed = options.to_vec();
        for choice in &mut changed {
            for copy in &choice.copies_in {
                if let Some(ssd) = away(copy) {
                    add_copy_in(&mut choice.link_s, choices.load_s[copy.0 as usize], ssd);
                }
            }
        }
        *options = changed.into();
    }
    charged
}

/// Bytes per step, per tier, that the choices do not account for: the
/// exchange buffers, and device bytes the memory pass found the model
/// missed on an earlier attempt. An empty list holds none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    pub hbm: Vec<u64>,
    pub host: Vec<u64>,
}

/// Bytes per step on each tier under an assignment.
struct Usage {
    hbm: MaxTree,
    host: MaxTree,
    ssd: MaxTree,
    limit: [i64; 3],
    /// Whether a choice's added device bytes must fit at every slot they
    /// cover, not only at those the sweep has brought within budget.
    strict_adds: bool,
}

impl Usage {
    fn new(choices: &Choices, limit: [i64; 3], host_reserved: i64, held: &Held) -> Usage {
        // `held` is per step: both of a step's slots carry it.
        let at = |list: &[u64], slot: usize| list.get(slot / 2).copied().unwrap_or(0) as i64;
        let base: Vec<i64> = choices
            .base_hbm
            .iter()
            .enumerate()
            .map(|(s, &b)| b as i64 + at(&held.hbm, s))
            .collect();
        let slots = choices.slots as usize;
        let host: Vec<i64> = (0..slots)
            .map(|s| host_reserved + at(&held.host, s))
            .collect();
        Usage {
            hbm: MaxTree::new(&base),
            host: MaxTree::new(&host),
            ssd: MaxTree::new(&vec![0; slots]),
            limit,
            strict_adds: false,
        }
    }

    fn tree(&mut self, tier: Tier) -> &mut MaxTree {
        match tier {
            Tier::Hbm => &mut self.hbm,
            Tier::Host => &mut self.host,
            Tier::Ssd => &mut self.ssd,
        }
    }

    /// Whether `refusal` still holds: the most bytes its tier holds over
    /// its slots are no fewer than when it was made.
    fn still_refuses(&self, refusal: &Refusal) -> bool {
        let tree = [&self.hbm, &self.host, &self.ssd][refusal.tier as usize];
        tree.max(refusal.start as usize, refusal.end as usize) >= refusal.max
    }

    fn apply(&mut self, choice: &Choice, bytes: i64, sign: i64) {
        for &(start, end) in &choice.hbm_free {
            self.hbm.add(start as usize, end as usize, -sign * bytes);
        }
        for &(start, end, added) in &choice.hbm_add {
            self.hbm
                .add(start as usize, end as usize, sign * added as i64);
        }
        if let Some((tier, start, end)) = choice.away {
            self.tree(tier)
                .add(start as usize, end as usize, sign * bytes);
        }
    }

    /// Whether the device bytes `choice` adds fit at the steps before
    /// `step` (those the sweep has already brought within budget).
    fn adds_fit(&self, choice: &Choice, step: usize) -> bool {
        choice.hbm_add.iter().all(|&(s, e, added)| {
            let end = if self.strict_adds {
                e as usize
            } else {
                (e as usize).min(step)
            };
            s as usize >= end || self.hbm.max(s as usize, end) + added as i64 <= self.limit[0]
        })
    }

    /// Whether the away copy of `choice` fits, with the choice not applied.
    fn away_fits(&self, choice: &Choice, bytes: i64) -> bool {
        match choice.away {
            None => true,
            Some((tier, start, end)) => {
                let (tree, limit) = match tier {
                    Tier::Hbm => (&self.hbm, self.limit[0]),
                    Tier::Host => (&self.host, self.limit[1]),
                    Tier::Ssd => (&self.ssd, self.limit[2]),
                };
                tree.max(start as usize, end as usize) + bytes <= limit
            }
        }
    }
}

/// The bytes per step a change of one tensor's choice adds (or, negative,
/// removes) on each tier, as disjoint `[start, end)` segments with a
/// nonzero change. Buffers are kept between uses.
#[derive(Default)]
struct Delta {
    /// Added-bytes and away-copy events.
    events: Vec<(u32, i64)>,
    /// The old and the new choice's device frees, as events.
    frees: [Vec<(u32, i64)>; 2],
    /// Per tier (device, host, SSD): `(start, end, bytes)`.
    segments: [Vec<(u32, u32, i64)>; 3],
    /// Where the last check refused the change: the tier's index, the
    /// segment's `[start, end)`, and the most bytes the tier held there.
    refused: (u8, u32, u32, i64),
}

impl Delta {
    fn compute(&mut self, old: Option<&Choice>, new: Option<&Choice>, bytes: i64) {
        for index in 0..3 {
            self.compute_tier(index, old, new, bytes, None);
        }
    }

    /// Whether the change fits, computing tier by tier and stopping at
    /// the first step that does not (then the segments are incomplete).
    fn compute_fits(
        &mut self,
        old: Option<&Choice>,
        new: Option<&Choice>,
        bytes: i64,
        usage: &Usage,
    ) -> bool {
        (0..3).all(|index| self.compute_tier(index, old, new, bytes, Some(usage)))
    }

    /// The segments of tier `index` (device, host, SSD). With `check`,
    /// stops at the first segment that adds bytes where they do not fit
    /// and returns false.
    fn compute_tier(
        &mut self,
        index: usize,
        old: Option<&Choice>,
        new: Option<&Choice>,
        bytes: i64,
        check: Option<&Usage>,
    ) -> bool {
        let tier = [Tier::Hbm, Tier::Host, Tier::Ssd][index];
        let Delta {
            events,
            frees,
            segments,
            refused,
        } = self;
        events.clear();
        for (k, (choice, sign)) in [(old, -1i64), (new, 1i64)].into_iter().enumerate() {
            frees[k].clear();
            let Some(choice) = choice else { continue };
            if tier == Tier::Hbm {
                // Disjoint and in order: a sorted run of events.
                for &(s, e) in &choice.hbm_free {
                    frees[k].push((s, -sign * bytes));
                    frees[k].push((e, sign * bytes));
                }
                debug_assert!(frees[k].windows(2).all(|w| w[0].0 <= w[1].0));
                for &(s, e, added) in &choice.hbm_add {
                    events.push((s, sign * added as i64));
                    events.push((e, -sign * added as i64));
                }
            }
            if let Some((away, s, e)) = choice.away {
                if away == tier {
                    events.push((s, sign * bytes));
                    events.push((e, -sign * bytes));
                }
            }
        }
        // Events at one step are summed: their order does not matter.
        events.sort_unstable_by_key(|&(at, _)| at);
        // The three sorted runs merged, summing as they go.
        let segments = &mut segments[index];
        segments.clear();
        let runs = [&frees[0][..], &frees[1][..], &events[..]];
        let mut at_run = [0usize; 3];
        let head = |at_run: &[usize; 3], r: usize| runs[r].get(at_run[r]).map_or(u32::MAX, |e| e.0);
        let next = |at_run: &[usize; 3]| head(at_run, 0).min(head(at_run, 1)).min(head(at_run, 2));
        let check = check.map(|usage| {
            (
                [&usage.hbm, &usage.host, &usage.ssd][index],
                usage.limit[index],
            )
        });
        let mut running = 0i64;
        let mut at = next(&at_run);
        while at != u32::MAX {
            for (r, run) in runs.iter().enumerate() {
                while let Some(&(position, change)) = run.get(at_run[r]) {
                    if position != at {
                        break;
                    }
                    running += change;
                    at_run[r] += 1;
                }
            }
            let end = next(&at_run);
            if end != u32::MAX && running != 0 {
                if let Some((tree, limit)) = check {
                    if running > 0 {
                        let max = tree.max(at as usize, end as usize);
                        if max + running > limit {
                            *refused = (index as u8, at, end, max);
                            return false;
                        }
                    }
                }
                segments.push((at, end, running));
            }
            at = end;
        }
        true
    }

    fn apply(&self, usage: &mut Usage) {
        for (tree, segments) in [&mut usage.hbm, &mut usage.host, &mut usage.ssd]
            .into_iter()
            .zip(&self.segments)
        {
            for &(s, e, bytes) in segments {
                tree.add(s as usize, e as usize, bytes);
            }
        }
    }
}

/// A change [`Search::try_set`] refused: from which pick, and the tier,
/// `[start, end)` slots and the most bytes held there where the change's
/// bytes did not fit. A change from the same pick adds the same bytes
/// there, so while the most held there is no less, it is refused again
/// without being computed again.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    from: Option<u16>,
    tier: u8,
    start: u32,
    end: u32,
    max: i64,
}

/// The last refusal of each entry of a run's tables (a tensor's baseline
/// or one of its choices), kept sparse: few entries ever have one, and
/// every run starts its own.
struct Refusals {
    /// Per entry, 1 + its place in `kept`, or 0 for none yet. Zeroed
    /// memory: a run pays only for the pages it touches.
    at: Vec<u32>,
    kept: Vec<Option<Refusal>>,
}

impl Refusals {
    fn new(entries: usize) -> Refusals {
        Refusals {
            at: vec![0; entries],
            kept: Vec::new(),
        }
    }

    fn get(&self, entry: usize) -> Option<&Refusal> {
        match self.at[entry] {
            0 => None,
            k => self.kept[k as usize - 1].as_ref(),
        }
    }

    fn set(&mut self, entry: usize, refusal: Option<Refusal>) {
        match self.at[entry] {
            0 if refusal.is_none() => {}
            0 => {
                self.kept.push(refusal);
                self.at[entry] = self.kept.len() as u32;
            }
            k => self.kept[k as usize - 1] = refusal,
        }
    }
}

/// What a run's settings (its link weights, whether it may use the SSD,
/// how it scores) fix about each choice, computed once per setting for
/// the runs that share it, rather than at every sweep and stage 2.
struct Tables {
    /// Whether SSD choices are allowed.
    ssd: bool,
    /// Per tensor, where its entries start in the flat lists below: the
    /// baseline's, then one per choice.
    at: Vec<usize>,
    /// Each entry's price ([`price`]); the baseline's is 0.
    price: Vec<f64>,
    /// The sweep's candidates: each allowed choice that is the first of
    /// its fate (it frees the most steps), once per freed interval, as
    /// `(start, end, tensor, choice, score)`, by start. The score is the
    /// cheapest price of the fate per byte: of any of its timings (which
    /// stage 2 may reach if memory allows), or, scored as applied, of
    /// the timing the sweep applies.
    intervals: Vec<(u32, u32, usize, u16, f64)>,
    /// Which allowed choices free each slot, built on first use (by
    /// stage 3's re-timing).
    freed_at: OnceLock<Stabbing>,
    /// Which choices add device bytes at each slot, built on first use
    /// (by the sweep's repair).
    added_at: OnceLock<Stabbing>,
}

/// Which choices have an interval over each slot: a stabbing index over
/// intervals of the choices (those each frees, or adds bytes over). A
/// segment tree over the slots whose every node lists the intervals that
/// cover it whole and no ancestor; a slot's choices are on the nodes from
/// its leaf to the root.
struct Stabbing {
    leaves: usize,
    /// Node `k`'s entries: `entries[start[k]..start[k + 1]]`.
    start: Vec<usize>,
    /// `(tensor, choice)`.
    entries: Vec<(u32, u16)>,
}

/// Calls its argument with each `(tensor, choice, start, end)` interval
/// a [`Stabbing`] indexes.
type EachInterval<'a> = &'a dyn Fn(&mut dyn FnMut(usize, u16, usize, usize));

impl Stabbing {
    /// The choices' freed intervals (SSD choices only with `ssd`).
    fn freed(choices: &Choices, ssd: bool) -> Stabbing {
        Stabbing::new(choices.slots as usize, &|f| {
            for (t, options) in choices.options.iter().enumerate() {
                for (i, choice) in options.iter().enumerate() {
                    if ssd || !choice.uses_ssd() {
                        for &(a, b) in &choice.hbm_free {
                            f(t, i as u16, a as usize, b as usize);
                        }
                    }
                }
            }
        })
    }

    /// The intervals over which the choices add device bytes.
    fn added(choices: &Choices) -> Stabbing {
        Stabbing::new(choices.slots as usize, &|f| {
            for (t, options) in choices.options.iter().enumerate() {
                for (i, choice) in options.iter().enumerate() {
                    for &(a, b, _) in &choice.hbm_add {
                        f(t, i as u16, a as usize, b as usize);
                    }
                }
            }
        })
    }

    fn new(slots: usize, each: EachInterval) -> Stabbing {
        let leaves = slots.max(1).next_power_of_two();
        // The nodes that cover `[a, b)` whole, no two on one path.
        let cover = |a: usize, b: usize, f: &mut dyn FnMut(usize)| {
            let (mut l, mut r) = (a.min(leaves) + leaves, b.min(leaves) + leaves);
            while l < r {
                if l & 1 == 1 {
                    f(l);
                    l += 1;
                }
                if r & 1 == 1 {
                    r -= 1;
                    f(r);
                }
                l >>= 1;
                r >>= 1;
            }
        };
        let mut start = vec![0usize; 2 * leaves + 1];
        each(&mut |_, _, a, b| cover(a, b, &mut |node| start[node + 1] += 1));
        for k in 1..start.len() {
            start[k] += start[k - 1];
        }
        let mut filled = start.clone();
        let mut entries = vec![(0u32, 0u16); start[2 * leaves]];
        each(&mut |t, i, a, b| {
            cover(a, b, &mut |node| {
                entries[filled[node]] = (t as u32, i);
                filled[node] += 1;
            })
        });
        Stabbing {
            leaves,
            start,
            entries,
        }
    }

    /// Calls `f` with each `(tensor, choice)` with an interval over
    /// `slot` (once per such interval).
    fn at(&self, slot: usize, mut f: impl FnMut(usize, u16)) {
        let mut node = slot + self.leaves;
        while node >= 1 {
            for &(t, i) in &self.entries[self.start[node]..self.start[node + 1]] {
                f(t as usize, i);
            }
            node >>= 1;
        }
    }
}

/// A choice's price: its added seconds plus its link time weighted by
/// `weights`.
fn price(choice: &Choice, weights: &LinkSeconds) -> f64 {
    choice.cost_s
        + choice
            .link_s
            .iter()
            .zip(weights)
            .map(|(s, w)| s * w)
            .sum::<f64>()
}

impl Tables {
    /// The tables under those settings; the sweep's candidates only
    /// `with_sweep` (stage 2 alone needs none).
    fn new(
        choices: &Choices,
        bytes: &[i64],
        weights: &LinkSeconds,
        ssd: bool,
        as_applied: bool,
        with_sweep: bool,
    ) -> Tables {
        let allowed = |choice: &Choice| ssd || !choice.uses_ssd();
        let (mut at, mut price_list) = (Vec::new(), Vec::new());
        let mut intervals = Vec::new();
        for (t, options) in choices.options.iter().enumerate() {
            at.push(price_list.len());
            price_list.push(0.0);
            price_list.extend(options.iter().map(|c| price(c, weights)));
            let prices = &price_list[price_list.len() - options.len()..];
            if !with_sweep {
                continue;
            }
            let mut fate_cost = [f64::INFINITY; 7];
            for (i, choice) in options.iter().enumerate() {
                // Scored as applied: only the first (most-freeing) choice
                // of each fate counts.
                if !allowed(choice) || as_applied && i > 0 && options[i - 1].fate == choice.fate {
                    continue;
                }
                let f = choice.fate as usize;
                fate_cost[f] = fate_cost[f].min(prices[i]);
            }
            for (i, choice) in options.iter().enumerate() {
                // The first choice of each fate frees the most steps.
                if !allowed(choice) || (i > 0 && options[i - 1].fate == choice.fate) {
                    continue;
                }
                let score = fate_cost[choice.fate as usize] / bytes[t] as f64;
                for &(s, e) in &choice.hbm_free {
                    intervals.push((s, e, t, i as u16, score));
                }
            }
        }
        // The heap the sweep pushes them into orders them fully: ties
        // need no order.
        intervals.sort_unstable_by_key(|&(start, ..)| start);
        Tables {
            ssd,
            at,
            price: price_list,
            intervals,
            freed_at: OnceLock::new(),
            added_at: OnceLock::new(),
        }
    }

    fn index(&self, tensor: usize, pick: Option<u16>) -> usize {
        self.at[tensor] + pick.map_or(0, |i| i as usize + 1)
    }

    fn freed_at(&self, choices: &Choices) -> &Stabbing {
        self.freed_at
            .get_or_init(|| Stabbing::freed(choices, self.ssd))
    }

    fn added_at(&self, choices: &Choices) -> &Stabbing {
        self.added_at.get_or_init(|| Stabbing::added(choices))
    }

    /// The tables of each distinct setting among `runs`, built side by
    /// side, and for each run the index of its own.
    fn for_runs(
        choices: &Choices,
        bytes: &[i64],
        runs: &[(Sweep, LinkSeconds)],
    ) -> (Vec<Tables>, Vec<usize>) {
        let mut settings: Vec<(LinkSeconds, bool, bool)> = Vec::new();
        let which = runs
            .iter()
            .map(|(sweep, weights)| {
                let setting = (*weights, sweep.ssd, sweep.as_applied);
                settings
                    .iter()
                    .position(|s| *s == setting)
                    .unwrap_or_else(|| {
                        settings.push(setting);
                        settings.len() - 1
                    })
            })
            .collect();
        let tables = settings
            .par_iter()
            .map(|(weights, ssd, as_applied)| {
                Tables::new(choices, bytes, weights, *ssd, *as_applied, true)
            })
            .collect();
        (tables, which)
    }
}

/// How a sweep covers overruns (see [`search`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sweep {
    /// Whether SSD choices are allowed (staging reserved in host memory).
    ssd: bool,
    /// By the knapsack, else in score order alone.
    knapsack: bool,
    /// Refusing recomputations whose added bytes land where the device
    /// is still over budget.
    strict_adds: bool,
    /// Scoring offloads by the timing the sweep applies.
    as_applied: bool,
}

const fn sweep(ssd: bool, knapsack: bool, strict_adds: bool, as_applied: bool) -> Sweep {
    Sweep {
        ssd,
        knapsack,
        strict_adds,
        as_applied,
    }
}

/// Each sweep covers overruns by the knapsack, then again in score order
/// alone: neither is always the cheaper in the end. A third sweep refuses
/// recomputations whose added bytes land where the device is still over
/// budget (the first two let later slots sort them out, which can commit
/// to a recomputation too early). Where host memory ran short, a fourth
/// scores offloads by the timing the sweep applies: a cheap-looking
/// offload whose hiding needs memory it will not get can take host room a
/// recomputation or a stream would have left. The first three again with
/// the SSD, where host memory ran short.
const SWEEPS: [Sweep; 7] = [
    sweep(false, true, false, false),
    sweep(false, false, false, false),
    sweep(false, true, true, false),
    sweep(false, true, false, true),
    sweep(true, true, false, false),
    sweep(true, false, false, false),
    sweep(true, true, true, false),
];

/// The search state: an assignment and the usage it implies.
struct Search<'a> {
    choices: &'a Choices,
    bytes: Vec<i64>,
    assignment: Assignment,
    usage: Usage,
    /// Stage 2 may change timings only, not fates (peer policies).
    keep_fates: bool,
    /// Whether a choice was refused for lack of room on an away tier.
    away_refused: bool,
    /// Whether the sweep covers an overrun by the knapsack (else in score
    /// order alone).
    knapsack: bool,
    /// Scratch space for changes.
    delta: Delta,
    /// Prices (with the round's link weights: zero in round 1, more on
    /// one link in a later round, see the module documentation),
    /// rankings and the sweep's candidates.
    tables: &'a Tables,
    /// The last change `try_set` refused, per entry of `tables`.
    refusals: Refusals,
    /// Per tensor, its allowed choices by price, then bytes moved, then
    /// index: ranked by stage 2 on first use.
    ranked: Vec<Option<Box<[u16]>>>,
    /// Stage 3's moves tried so far, and the most it may try.
    tries: usize,
    max_tries: usize,
}

impl<'a> Search<'a> {
    fn pick(&self, tensor: usize) -> Option<&'a Choice> {
        self.assignment.choice(self.choices, tensor)
    }

    /// The price of `tensor` at `pick` ([`price`] with the search's
    /// weights; 0 at the baseline).
    fn price_of(&self, tensor: usize, pick: Option<u16>) -> f64 {
        self.tables.price[self.tables.index(tensor, pick)]
    }

    /// `tensor`'s allowed choices by price, then bytes moved, then index.
    fn rank(&self, tensor: usize) -> Box<[u16]> {
        let options = &self.choices.options[tensor];
        let mut ranked: Vec<u16> = (0..options.len() as u16)
            .filter(|&i| self.allowed(&options[i as usize]))
            .collect();
        ranked.sort_by(|&a, &b| {
            self.price_of(tensor, Some(a))
                .total_cmp(&self.price_of(tensor, Some(b)))
                .then(
                    options[a as usize]
                        .moved_bytes
                        .cmp(&options[b as usize].moved_bytes),
                )
                .then(a.cmp(&b))
        });
        ranked.into_boxed_slice()
    }

    /// The price of `tensor`'s pick.
    fn price_now(&self, tensor: usize) -> f64 {
        self.price_of(tensor, self.assignment.picks[tensor])
    }

    fn total_price(&self) -> f64 {
        (0..self.assignment.picks.len())
            .filter(|&t| self.assignment.picks[t].is_some())
            .map(|t| self.price_now(t))
            .sum()
    }

    fn allowed(&self, choice: &Choice) -> bool {
        self.tables.ssd || !choice.uses_ssd()
    }

    fn set(&mut self, tensor: usize, pick: Option<u16>) {
        if self.assignment.picks[tensor] == pick {
            return;
        }
        let (old, new) = (self.pick(tensor), self.choice_of(tensor, pick));
        if old.is_none() || new.is_none() {
            // From or to the baseline: nothing to merge.
            let bytes = self.bytes[tensor];
            if let Some(old) = old {
                self.usage.apply(old, bytes, -1);
            }
            if let Some(new) = new {
                self.usage.apply(new, bytes, 1);
            }
            self.assignment.picks[tensor] = pick;
            return;
        }
        let mut delta = std::mem::take(&mut self.delta);
        delta.compute(
            self.pick(tensor),
            self.choice_of(tensor, pick),
            self.bytes[tensor],
        );
        self.assignment.picks[tensor] = pick;
        delta.apply(&mut self.usage);
        self.delta = delta;
    }

    fn choice_of(&self, tensor: usize, pick: Option<u16>) -> Option<&'a Choice> {
        pick.map(|i| &self.choices.options[tensor][i as usize])
    }

    /// Changes `tensor` to `pick` if every tier stays within budget
    /// wherever the change adds bytes; returns whether it did. Only the
    /// steps where the two choices differ are touched.
    fn try_set(&mut self, tensor: usize, pick: Option<u16>) -> bool {
        let from = self.assignment.picks[tensor];
        if from == pick {
            return true;
        }
        // Refused before, from the same choice, and the tier holds no
        // fewer bytes where it was: it is refused again.
        let at = self.tables.index(tensor, pick);
        if let Some(refusal) = self.refusals.get(at) {
            if refusal.from == from && self.usage.still_refuses(refusal) {
                return false;
            }
        }
        let mut delta = std::mem::take(&mut self.delta);
        let fits = delta.compute_fits(
            self.pick(tensor),
            self.choice_of(tensor, pick),
            self.bytes[tensor],
            &self.usage,
        );
        if fits {
            self.assignment.picks[tensor] = pick;
            delta.apply(&mut self.usage);
            self.refusals.set(at, None);
        } else {
            let (tier, start, end, max) = delta.refused;
            self.refusals.set(
                at,
                Some(Refusal {
                    from,
                    tier,
                    start,
                    end,
                    max,
                }),
            );
        }
        self.delta = delta;
        fits
    }

    /// Stage 1 over slots `[from, to)` (see [`super::cost::boundary`]),
    /// never touching `frozen`. Returns the first slot it could not bring
    /// within budget.
    fn sweep(&mut self, from: usize, to: usize, frozen: Option<usize>) -> Result<(), usize> {
        let choices = self.choices;
        // Per step, the candidate (tensor, choice index) intervals that
        // start there (from `from` on), by start: those of undecided
        // tensors among the search's candidates.
        let starts: Vec<(u32, usize, u16, u32, f64)> = self
            .tables
            .intervals
            .iter()
            .take_while(|&&(s, ..)| (s as usize) < to)
            .filter(|&&(_, e, t, ..)| {
                e as usize > from && self.assignment.picks[t].is_none() && Some(t) != frozen
            })
            .map(|&(s, e, t, i, score)| ((s as usize).max(from) as u32, t, i, e, score))
            .collect();
        let mut next_start = 0;
        let mut active: BinaryHeap<Candidate> = BinaryHeap::new();
        // Candidates whose host or SSD copy did not fit: those tiers only
        // fill up as the sweep picks, so they cannot fit later unless a
        // repair switches a pick away from them. Kept out of the heap (a
        // full host tier would otherwise have every step pop them all).
        let mut refused: Vec<Candidate> = Vec::new();
        let mut step = from;
        while step < to {
            // Nothing happens at a step within budget but candidates
            // starting: go to the next step over it.
            match self.usage.hbm.first_above(step, self.usage.limit[0]) {
                Some(over) if over < to => step = over,
                _ => break,
            }
            while next_start < starts.len() && starts[next_start].0 as usize <= step {
                let (_, t, i, end, score) = starts[next_start];
                next_start += 1;
                active.push(Candidate {
                    score,
                    end,
                    bytes: self.bytes[t],
                    tensor: t,
                    choice: i,
                });
            }
            let over = self.usage.hbm.get(step) - self.usage.limit[0];
            // The candidates still usable here, best first.
            let mut usable: Vec<Candidate> = Vec::new();
            let mut spare: Vec<Candidate> = Vec::new();
            let mut covered = 0i64;
            while let Some(candidate) = active.pop() {
                if candidate.end as usize <= step
                    || self.assignment.picks[candidate.tensor].is_some()
                {
                    continue;
                }
                let choice = &choices.options[candidate.tensor][candidate.choice as usize];
                if !self.usage.away_fits(choice, candidate.bytes) {
                    self.away_refused = true;
                    refused_or_spare(choice, candidate, &mut refused, &mut spare);
                    continue;
                }
                if !self.usage.adds_fit(choice, step) {
                    spare.push(candidate);
                    continue;
                }
                if usable.len() < KNAPSACK_CANDIDATES || covered < over {
                    covered += candidate.bytes;
                    usable.push(candidate);
                } else {
                    spare.push(candidate);
                    break;
                }
            }
            let chosen = (if self.knapsack && usable.len() <= KNAPSACK_ITEMS_MAX {
                knapsack(&usable, over)
            } else {
                None
            })
            .unwrap_or_else(|| (0..usable.len()).collect::<Vec<_>>());
            let mut taken = vec![false; usable.len()];
            for &k in &chosen {
                let c = usable[k];
                if self.assignment.picks[c.tensor].is_some() {
                    continue;
                }
                let choice = &choices.options[c.tensor][c.choice as usize];
                if !self.usage.away_fits(choice, c.bytes) || !self.usage.adds_fit(choice, step) {
                    continue;
                }
                self.set(c.tensor, Some(c.choice));
                taken[k] = true;
                if self.usage.hbm.get(step) <= self.usage.limit[0] {
                    break;
                }
            }
            for (k, c) in usable.into_iter().enumerate() {
                if !taken[k] {
                    active.push(c);
                }
            }
            for c in spare {
                active.push(c);
            }
            if self.usage.hbm.get(step) > self.usage.limit[0] {
                // The knapsack's pick did not cover it (an away tier filled
                // up); take whatever still fits, in score order.
                let mut rest = Vec::new();
                while let Some(c) = active.pop() {
                    if c.end as usize <= step || self.assignment.picks[c.tensor].is_some() {
                        continue;
                    }
                    let choice = &choices.options[c.tensor][c.choice as usize];
                    if !self.usage.away_fits(choice, c.bytes) {
                        refused_or_spare(choice, c, &mut refused, &mut rest);
                        continue;
                    }
                    if !self.usage.adds_fit(choice, step) {
                        rest.push(c);
                        continue;
                    }
                    self.set(c.tensor, Some(c.choice));
                    if self.usage.hbm.get(step) <= self.usage.limit[0] {
                        break;
                    }
                }
                for c in rest {
                    active.push(c);
                }
                if self.usage.hbm.get(step) > self.usage.limit[0] {
                    if !self.repair(step) {
                        return Err(step);
                    }
                    // A repair may have freed host or SSD room.
                    active.extend(refused.drain(..));
                }
            }
            step += 1;
        }
        Ok(())
    }

    /// When nothing left can cover `step`: switch tensors whose choice adds
    /// bytes there (a recomputation's inputs) to a choice of theirs that
    /// does not, most bytes first. Returns whether `step` now fits.
    fn repair(&mut self, step: usize) -> bool {
        let choices = self.choices;
        let s = step as u32;
        // The tensors whose pick adds bytes at `step`, each once.
        let mut picked: Vec<usize> = Vec::new();
        self.tables.added_at(choices).at(step, |t, i| {
            if self.assignment.picks[t] == Some(i) {
                picked.push(t);
            }
        });
        picked.sort_unstable();
        picked.dedup();
        let mut adders: Vec<(u64, usize)> = picked
            .into_iter()
            .filter_map(|t| {
                let added: u64 = self
                    .pick(t)?
                    .hbm_add
                    .iter()
                    .filter(|&&(a, b, _)| a <= s && s < b)
                    .map(|&(_, _, bytes)| bytes)
                    .sum();
                (added > 0).then_some((added, t))
            })
            .collect();
        adders.sort_by(|a, b| b.cmp(a));
        for (_, t) in adders {
            let old_pick = self.assignment.picks[t];
            let old = self.pick(t);
            // Any choice that adds nothing at `step` and frees it if the
            // old one did: one that frees only earlier slots still takes
            // the added bytes away (a tensor read at `step` itself can
            // offload instead of recomputing from inputs that must come back).
            let old_frees = old.is_some_and(|o| o.frees(s));
            let mut alternatives: Vec<(f64, Option<u16>)> = choices.options[t]
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    self.allowed(c)
                        && (c.frees(s) || !old_frees)
                        && !c.hbm_add.iter().any(|&(a, b, _)| a <= s && s < b)
                })
                .map(|(i, _)| (self.price_of(t, Some(i as u16)), Some(i as u16)))
                .collect();
            if !old_frees && !self.keep_fates {
                // The baseline adds nothing anywhere.
                alternatives.push((0.0, None));
            }
            alternatives.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (_, pick) in alternatives {
                self.set(t, pick);
                let earlier_ok = old.is_none_or(|o| {
                    o.hbm_free.iter().all(|&(a, b)| {
                        let end = (b as usize).min(step);
                        a as usize >= end
                            || self.usage.hbm.max(a as usize, end) <= self.usage.limit[0]
                    })
                });
                let away_ok = self.pick(t).is_none_or(|c| match c.away {
                    None => true,
                    Some((tier, a, b)) => {
                        let limit = match tier {
                            Tier::Hbm => self.usage.limit[0],
                            Tier::Host => self.usage.limit[1],
                            Tier::Ssd => self.usage.limit[2],
                        };
                        self.usage.tree(tier).max(a as usize, b as usize) <= limit
                    }
                });
                if earlier_ok && away_ok {
                    break;
                }
                self.set(t, old_pick);
            }
            if self.usage.hbm.get(step) <= self.usage.limit[0] {
                return true;
            }
        }
        false
    }

    /// Stage 2: each changed tensor, costliest first, takes its cheapest
    /// choice that fits. Returns whether anything changed.
    fn improve(&mut self) -> bool {
        let choices = self.choices;
        // Costliest first; among equals, those that move the most bytes
        // per byte they hold.
        let mut order: Vec<(f64, f64, usize)> = (0..choices.options.len())
            .filter_map(|t| {
                let c = self.pick(t)?;
                let traffic = c.moved_bytes as f64 / self.bytes[t].max(1) as f64;
                Some((self.price_now(t), traffic, t))
            })
            .collect();
        order.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(b.1.total_cmp(&a.1))
                .then(a.2.cmp(&b.2))
        });
        let mut changed = false;
        for (current, _, t) in order {
            let current_moved = self.pick(t).map_or(0, |c| c.moved_bytes);
            // Cheaper, or as cheap and moving fewer bytes: when transfers
            // hide behind compute, keeping more on the device is free in
            // the model and spares the links (and, on the CPU backend, the
            // cores that copy).
            let improves = |price: f64, moved: u64| {
                price < current - PRICE_TIE_S
                    || (price <= current + PRICE_TIE_S && moved < current_moved)
            };
            let fate = self.pick(t).map(|c| c.fate);
            // The choices that improve, cheapest first (then fewest bytes
            // moved, then by index), with the baseline (price 0, nothing
            // moved) after those that rank no higher; the first that fits
            // is taken. Past the current price plus the tie, none improves.
            let mut baseline_due = !self.keep_fates;
            let ranked = self.ranked[t].take().unwrap_or_else(|| self.rank(t));
            let mut taken = false;
            for &i in ranked.iter() {
                let c = &choices.options[t][i as usize];
                let price = self.price_of(t, Some(i));
                if price > current + PRICE_TIE_S {
                    break;
                }
                let above_baseline = price.total_cmp(&0.0).then(c.moved_bytes.cmp(&0)).is_gt();
                if baseline_due && above_baseline {
                    baseline_due = false;
                    if self.try_set(t, None) {
                        taken = true;
                        break;
                    }
                }
                if (self.keep_fates && Some(c.fate) != fate) || !improves(price, c.moved_bytes) {
                    continue;
                }
                if self.try_set(t, Some(i)) {
                    taken = true;
                    break;
                }
            }
            self.ranked[t] = Some(ranked);
            if !taken && baseline_due {
                taken = self.try_set(t, None);
            }
            changed |= taken;
        }
        changed
    }

    /// Stage 3: exchanges. Returns whether the cost fell.
    fn exchange(&mut self) -> bool {
        let choices = self.choices;
        let mut improved = false;
        let decided: Vec<usize> = (0..choices.options.len())
            .filter(|&t| self.assignment.picks[t].is_some() && self.price_now(t) > 0.0)
            .collect();
        for t in decided {
            let Some(current) = self.pick(t) else {
                continue;
            };
            let current_cost = self.price_now(t);
            let mut cheaper: Vec<Option<u16>> = vec![None];
            cheaper.extend(
                choices.options[t]
                    .iter()
                    .enumerate()
                    .filter(|&(i, c)| {
                        self.allowed(c) && self.price_of(t, Some(i as u16)) < current_cost
                    })
                    .map(|(i, _)| Some(i as u16)),
            );
            for pick in cheaper {
                if self.tries >= self.max_tries {
                    return improved;
                }
                self.tries += 1;
                let before_cost = self.total_price();
                let saved = self.assignment.clone();
                self.set(t, pick);
                let (start, end) = current
                    .hbm_free
                    .iter()
                    .fold((usize::MAX, 0usize), |(s, e), &(a, b)| {
                        (s.min(a as usize), e.max(b as usize))
                    });
                let away_ok = self.pick(t).is_none_or(|c| {
                    let bytes = self.bytes[t];
                    // Checked with the choice applied: compare with its own bytes removed.
                    self.usage.apply(c, bytes, -1);
                    let ok = self.usage.away_fits(c, bytes);
                    self.usage.apply(c, bytes, 1);
                    ok
                });
                // No room on the host for the cheaper choice: make it by
                // moving other host copies to the SSD.
                let away_ok = away_ok || (self.tables.ssd && self.make_host_room(t));
                let slots = choices.slots as usize;
                let ok = away_ok && self.sweep(start, end, Some(t)).is_ok() && {
                    self.improve();
                    // A new choice's added bytes may fall outside the swept steps.
                    self.usage.hbm.max(0, slots) <= self.usage.limit[0]
                };
                if ok && self.total_price() + 1e-12 < before_cost {
                    improved = true;
                    break;
                }
                // Roll back to the saved assignment.
                self.restore(&saved);
                if ok {
                    continue;
                }
                // It did not fit: again, making room by re-timing tensors
                // already decided (a later prefetch, an earlier offload)
                // before the sweep. Room made on the host above was rolled
                // back: every tier is checked at the end.
                self.set(t, pick);
                let ok = self.retime(t) && self.sweep(start, end, Some(t)).is_ok() && {
                    self.improve();
                    self.within_budgets()
                };
                if ok && self.total_price() + 1e-12 < before_cost {
                    improved = true;
                    break;
                }
                self.restore(&saved);
            }
        }
        improved || self.upgrade()
    }

    /// Stage 3's other move: a tensor takes a costlier choice that frees
    /// more, and stage 2 then returns others to cheaper choices with the
    /// room it made; kept if the total cost falls. Returns whether it did.
    fn upgrade(&mut self) -> bool {
        let choices = self.choices;
        // Decided tensors (at most EXCHANGE_LIMIT of them), and undecided
        // ones too where as few tensors have choices: each try runs stage 2.
        let with_choices = choices.options.iter().filter(|o| !o.is_empty()).count();
        let tried: Vec<usize> = (0..choices.options.len())
            .filter(|&t| {
                !choices.options[t].is_empty()
                    && (self.assignment.picks[t].is_some() || with_choices <= EXCHANGE_LIMIT)
            })
            .collect();
        for t in tried {
            let current = self.price_now(t);
            let fate = self.pick(t).map(|c| c.fate);
            let costlier: Vec<u16> = choices.options[t]
                .iter()
                .enumerate()
                .filter(|&(i, c)| self.allowed(c) && self.price_of(t, Some(i as u16)) > current)
                .filter(|(_, c)| Some(c.fate) != fate)
                .map(|(i, _)| i as u16)
                .collect();
            for pick in costlier {
                if self.tries >= self.max_tries {
                    return false;
                }
                self.tries += 1;
                let before_cost = self.total_price();
                let saved = self.assignment.clone();
                if !self.try_set(t, Some(pick)) {
                    continue;
                }
                for _ in 0..4 {
                    if !self.improve() {
                        break;
                    }
                }
                if self.within_budgets() && self.total_price() + 1e-12 < before_cost {
                    return true;
                }
                self.restore(&saved);
            }
        }
        false
    }

    /// With `tensor` just changed and the device over budget somewhere:
    /// moves other decided tensors, one at a time, to a choice of the same
    /// fate that frees the first slot over budget (least added price
    /// first), until every slot fits. Returns whether they do.
    fn retime(&mut self, tensor: usize) -> bool {
        let choices = self.choices;
        let slots = choices.slots as usize;
        let limit = self.usage.limit[0];
        for _ in 0..choices.options.len() {
            if self.usage.hbm.max(0, slots) <= limit {
                return true;
            }
            let Some(slot) = self.usage.hbm.first_above(0, limit) else {
                return true;
            };
            let s = slot as u32;
            // The allowed choices that free `slot`, of decided tensors
            // other than `tensor` whose pick does not, of the pick's fate,
            // adding nothing there.
            let mut moves: Vec<(f64, usize, u16)> = Vec::new();
            // A tensor's choices are listed together on each node: whether
            // it may move at all is asked once per run of them.
            let mut movable: Option<(usize, Option<&Choice>)> = None;
            self.tables.freed_at(choices).at(slot, |u, i| {
                let current = match movable {
                    Some((v, current)) if v == u => current,
                    _ => {
                        let current = self
                            .pick(u)
                            .filter(|current| u != tensor && !current.frees(s));
                        movable = Some((u, current));
                        current
                    }
                };
                let Some(current) = current else {
                    return;
                };
                let c = &choices.options[u][i as usize];
                if c.fate == current.fate && !c.hbm_add.iter().any(|&(a, b, _)| a <= s && s < b) {
                    moves.push((self.price_of(u, Some(i)) - self.price_now(u), u, i));
                }
            });
            moves.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            if !moves.iter().any(|&(_, u, i)| self.try_set(u, Some(i))) {
                return false;
            }
        }
        self.usage.hbm.max(0, slots) <= limit
    }

    /// With `tensor` just set to a choice whose host copy overflows the
    /// host budget: moves other tensors' host copies over that stretch to
    /// their cheapest SSD choice (least added price per byte first) until
    /// it fits. Returns whether it does; the caller keeps or rolls back
    /// the whole exchange by its total price.
    fn make_host_room(&mut self, tensor: usize) -> bool {
        let choices = self.choices;
        let Some((Tier::Host, start, end)) = self.pick(tensor).and_then(|c| c.away) else {
            return false;
        };
        let (start, end) = (start as usize, end as usize);
        let fits = |s: &Self| s.usage.host.max(start, end) <= s.usage.limit[1];
        let mut movers: Vec<(f64, usize, u16)> = Vec::new();
        for u in 0..choices.options.len() {
            let Some(current) = self.pick(u) else {
                continue;
            };
            let Some((Tier::Host, a, b)) = current.away else {
                continue;
            };
            if u == tensor || b as usize <= start || a as usize >= end {
                continue;
            }
            let price = self.price_now(u);
            let best = choices.options[u]
                .iter()
                .enumerate()
                .filter(|(_, c)| self.allowed(c) && c.uses_ssd())
                .map(|(i, _)| (self.price_of(u, Some(i as u16)) - price, i as u16))
                .min_by(|x, y| x.0.total_cmp(&y.0));
            if let Some((extra, i)) = best {
                movers.push((extra / self.bytes[u].max(1) as f64, u, i));
            }
        }
        movers.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        for (_, u, i) in movers {
            if fits(self) {
                break;
            }
            self.try_set(u, Some(i));
        }
        fits(self)
    }

    /// Whether every tier is within budget at every slot.
    fn within_budgets(&self) -> bool {
        let slots = self.choices.slots as usize;
        self.usage.hbm.max(0, slots) <= self.usage.limit[0]
            && self.usage.host.max(0, slots) <= self.usage.limit[1]
            && self.usage.ssd.max(0, slots) <= self.usage.limit[2]
    }

    fn restore(&mut self, saved: &Assignment) {
        for t in 0..saved.picks.len() {
            if self.assignment.picks[t] != saved.picks[t] {
                self.set(t, saved.picks[t]);
            }
        }
    }
}

/// Where a sweep keeps a candidate whose away copy did not fit: apart
/// (`refused`) when the copy goes to host memory or the SSD, whose usage
/// only grows as a sweep picks; back with the candidates to try again
/// (`spare`) when it goes to the device, which picks also free.
fn refused_or_spare(
    choice: &Choice,
    candidate: Candidate,
    refused: &mut Vec<Candidate>,
    spare: &mut Vec<Candidate>,
) {
    match choice.away {
        Some((Tier::Host | Tier::Ssd, ..)) => refused.push(candidate),
        _ => spare.push(candidate),
    }
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f64,
    end: u32,
    bytes: i64,
    tensor: usize,
    choice: u16,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Best first in a max-heap: lowest seconds per byte, then the longest
    /// relief, the largest tensor, the lowest id.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.end.cmp(&other.end))
            .then(self.bytes.cmp(&other.bytes))
            .then(other.tensor.cmp(&self.tensor))
            .then(other.choice.cmp(&self.choice))
    }
}

/// Minimum-cost subset of `items` freeing at least `need` bytes, by
/// dynamic programming over the Pareto front of (bytes, cost). Items'
/// costs are their scores times bytes. `None` if the front grows too large.
fn knapsack(items: &[Candidate], need: i64) -> Option<Vec<usize>> {
    // Front entries: (bytes freed, cost, back pointer into `trail`).
    #[derive(Clone, Copy)]
    struct Entry {
        bytes: i64,
        cost: f64,
        trail: usize,
    }
    // trail: (item, previous trail index), usize::MAX ends.
    let mut trail: Vec<(usize, usize)> = Vec::new();
    let mut front = vec![Entry {
        bytes: 0,
        cost: 0.0,
        trail: usize::MAX,
    }];
    let mut best: Option<Entry> = None;
    // Bytes of the items from each index on.
    let mut remaining = vec![0i64; items.len() + 1];
    for k in (0..items.len()).rev() {
        remaining[k] = remaining[k + 1] + items[k].bytes;
    }
    let mut grown_entries: Vec<(usize, Entry)> = Vec::new();
    let mut kept: Vec<Entry> = Vec::new();
    for (k, item) in items.iter().enumerate() {
        let cost = item.score * item.bytes as f64;
        grown_entries.clear();
        for (i, entry) in front.iter().enumerate() {
            let bytes = entry.bytes + item.bytes;
            let total = entry.cost + cost;
            if best.is_some_and(|b| total >= b.cost) {
                continue;
            }
            trail.push((k, entry.trail));
            let grown = Entry {
                bytes,
                cost: total,
                trail: trail.len() - 1,
            };
            if bytes >= need {
                best = Some(grown);
            } else {
                grown_entries.push((i, grown));
            }
        }
        // The front is sorted by bytes (most first), then cost; so are the
        // grown entries. Merge them, an entry before the one grown from it
        // or from a later entry when they tie, and keep the Pareto front:
        // more bytes for less cost.
        // An entry that the later items cannot complete, or can complete
        // only at a cost no lower than the best found (their scores are at
        // least the next item's), is dropped too: it cannot lead to a
        // better selection, and neither can the entries it dominates.
        let (next_score, later_bytes) =
            (items.get(k + 1).map_or(0.0, |c| c.score), remaining[k + 1]);
        kept.clear();
        let mut cheapest = f64::INFINITY;
        let mut keep = |entry: Entry, kept: &mut Vec<Entry>| {
            if entry.cost < cheapest && best.is_none_or(|b| entry.cost < b.cost) {
                cheapest = entry.cost;
                let short = need - entry.bytes;
                let hopeless = short > later_bytes
                    || best.is_some_and(|b| {
                        entry.cost + short as f64 * next_score > b.cost * (1.0 + 1e-9)
                    });
                if !hopeless {
                    kept.push(entry);
                }
            }
        };
        let (mut a, mut b) = (0, 0);
        while a < front.len() || b < grown_entries.len() {
            let take_front = match (front.get(a), grown_entries.get(b)) {
                (Some(x), Some(&(i, y))) => match y.bytes.cmp(&x.bytes) {
                    Ordering::Less => true,
                    Ordering::Greater => false,
                    Ordering::Equal => match x.cost.total_cmp(&y.cost) {
                        Ordering::Less => true,
                        Ordering::Greater => false,
                        Ordering::Equal => a <= i,
                    },
                },
                (Some(_), None) => true,
                _ => false,
            };
            if take_front {
                keep(front[a], &mut kept);
                a += 1;
            } else {
                keep(grown_entries[b].1, &mut kept);
                b += 1;
            }
        }
        if kept.len() > FRONT_LIMIT {
            return None;
        }
        std::mem::swap(&mut front, &mut kept);
    }
    let best = best?;
    let mut picked = Vec::new();
    let mut at = best.trail;
    while at != usize::MAX {
        picked.push(trail[at].0);
        at = trail[at].1;
    }
    picked.reverse();
    Some(picked)
}

/// What [`search`] runs each sweep with.
struct Runner<'a> {
    choices: &'a Choices,
    bytes: &'a [i64],
    limit: [i64; 3],
    held: &'a Held,
    ssd_staging_bytes: u64,
    first_fit: bool,
}

impl<'a> Runner<'a> {
    /// One sweep and stage 2 (not for a first fit) with the given
    /// settings and the tables of those settings.
    fn run<'t>(&self, sweep: Sweep, tables: &'t Tables) -> (Sweep, Search<'t>, Result<(), usize>)
    where
        'a: 't,
    {
        let choices = self.choices;
        let reserved = if sweep.ssd {
            self.ssd_staging_bytes as i64
        } else {
            0
        };
        let mut search = Search {
            choices,
            bytes: self.bytes.to_vec(),
            assignment: Assignment::baseline(choices),
            usage: Usage {
                strict_adds: sweep.strict_adds,
                ..Usage::new(choices, self.limit, reserved, self.held)
            },
            keep_fates: false,
            away_refused: false,
            knapsack: sweep.knapsack,
            delta: Delta::default(),
            refusals: Refusals::new(tables.price.len()),
            ranked: vec![None; choices.options.len()],
            tables,
            tries: 0,
            max_tries: 0,
        };
        let swept = search.sweep(0, choices.slots as usize, None);
        if swept.is_ok() && !self.first_fit {
            for _ in 0..4 {
                if !search.improve() {
                    break;
                }
            }
        }
        (sweep, search, swept)
    }
}

/// What the search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub assignment: Assignment,
    pub objective_s: f64,
    /// The best of each other round (see the module documentation), no
    /// cheaper in the model, each once: the prediction, which queues the
    /// transfers on their links, may find one of them faster.
    pub others: Vec<Assignment>,
}

/// Why no assignment fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun {
    pub tier: Tier,
    pub step: u32,
    pub needed_bytes: u64,
}

/// Runs the search under `budgets`. `ssd_staging_bytes` is reserved in
/// host memory when the SSD is used. `held` holds bytes per step that the
/// model does not see.
pub fn solve(
    workload: &Workload,
    choices: &Choices,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
    held: &Held,
) -> Result<Outcome, Overrun> {
    search(workload, choices, budgets, ssd_staging_bytes, held, None)
}

/// Whether [`solve`] finds a plan, answered by the first sweep that
/// brings every slot within budget (what stages 2 and 3 do keeps it
/// within budget): the question the smallest-budget search asks many times.
pub fn fits(
    workload: &Workload,
    choices: &Choices,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
    held: &Held,
) -> bool {
    FitTables::new(workload, choices).fits(budgets, ssd_staging_bytes, held)
}

/// What [`fits`] computes from the choices alone (the sweeps' prices and
/// candidates, per setting, each on first use), kept for the many
/// questions asked of the same choices under other budgets, as the
/// smallest-budget search asks.
pub struct FitTables<'c> {
    workload: &'c Workload,
    choices: &'c Choices,
    /// By `[ssd as usize * 2 + as_applied as usize]`.
    tables: [OnceLock<Tables>; 4],
}

impl<'c> FitTables<'c> {
    pub fn new(workload: &'c Workload, choices: &'c Choices) -> FitTables<'c> {
        FitTables {
            workload,
            choices,
            tables: Default::default(),
        }
    }

    /// [`fits`] for the workload and choices these tables are of.
    pub fn fits(&self, budgets: &Budgets, ssd_staging_bytes: u64, held: &Held) -> bool {
        search(
            self.workload,
            self.choices,
            budgets,
            ssd_staging_bytes,
            held,
            Some(self),
        )
        .is_ok()
    }

    fn get(&self, bytes: &[i64], sweep: &Sweep) -> &Tables {
        self.tables[sweep.ssd as usize * 2 + sweep.as_applied as usize].get_or_init(|| {
            Tables::new(
                self.choices,
                bytes,
                &[0.0; 4],
                sweep.ssd,
                sweep.as_applied,
                true,
            )
        })
    }
}

/// The search: a whole one, or with `first_fit`'s tables, only whether
/// some sweep fits (the first that does ends it).
fn search(
    workload: &Workload,
    choices: &Choices,
    budgets: &Budgets,
    ssd_staging_bytes: u64,
    held: &Held,
    first_fit: Option<&FitTables>,
) -> Result<Outcome, Overrun> {
    let bytes: Vec<i64> = workload.tensors.iter().map(|t| t.bytes as i64).collect();
    let clamp = |b: u64| b.min(i64::MAX as u64 / 4) as i64;
    let limit = [
        clamp(budgets.hbm_bytes),
        clamp(budgets.host_bytes),
        clamp(budgets.ssd_bytes),
    ];
    // Host bytes held beside the tensors (the exchanges' buffers) over
    // the host budget alone: no fates make room for them.
    if let Some((step, &bytes)) = held
        .host
        .iter()
        .enumerate()
        .find(|&(_, &bytes)| clamp(bytes) > limit[1])
    {
        return Err(Overrun {
            tier: Tier::Host,
            step: step as u32,
            needed_bytes: bytes,
        });
    }
    let any_ssd = choices
        .options
        .iter()
        .flat_map(|o| o.iter())
        .any(Choice::uses_ssd);
    let runner = Runner {
        choices,
        bytes: &bytes,
        limit,
        held,
        ssd_staging_bytes,
        first_fit: first_fit.is_some(),
    };
    // The first sweep says whether host memory ran short, which the fourth
    // and those with the SSD depend on.
    let allowed = |s: &Sweep, host_short: bool| {
        // The SSD only helps where host memory ran short.
        !(s.ssd && (!any_ssd || !host_short) || s.as_applied && !host_short)
            && (!s.ssd || ssd_staging_bytes as i64 <= limit[1])
    };
    let no_weights: LinkSeconds = [0.0; 4];
    if let Some(fit_tables) = first_fit {
        // The first sweep that fits, in order, ends the search. The first
        // runs alone (whether host memory ran short decides the others);
        // the others a round of as many as there are threads at a time,
        // side by side, so that a budget nothing fits (where every sweep
        // runs) costs fewer rounds.
        let outcome = |search: Search| Outcome {
            objective_s: search.assignment.objective_s(choices),
            assignment: search.assignment,
            others: Vec::new(),
        };
        let mut first_failure = None;
        let (sweep, search, swept) = runner.run(SWEEPS[0], fit_tables.get(&bytes, &SWEEPS[0]));
        match swept {
            Ok(()) => return Ok(outcome(search)),
            Err(step) => note_failure(&mut first_failure, sweep, &search, step, choices),
        }
        // A first sweep that does not fit counts as host memory short.
        let rest: Vec<Sweep> = SWEEPS[1..]
            .iter()
            .copied()
            .filter(|s| allowed(s, true))
            .collect();
        for round in rest.chunks(rayon::current_num_threads().max(1)) {
            let results: Vec<_> = round
                .par_iter()
                .map(|&sweep| runner.run(sweep, fit_tables.get(&bytes, &sweep)))
                .collect();
            for (sweep, search, swept) in results {
                match swept {
                    Ok(()) => return Ok(outcome(search)),
                    Err(step) => note_failure(&mut first_failure, sweep, &search, step, choices),
                }
            }
        }
        return Err(or_staging(first_failure, ssd_staging_bytes));
    }
    // Stage 3 on a round's results of stages 1 and 2, best first (the
    // first among equals), while the round's `moves` last: each move
    // re-runs the sweep and stage 2, so it is the costliest stage by far.
    // The round's best, with the sweep that found it, and the moves used.
    let options: usize = choices.options.iter().map(|o| o.len()).sum();
    let round_moves = EXCHANGE_WORK / options.max(1);
    let finish = |results: Vec<(Sweep, Search<'_>, Result<(), usize>)>, moves: usize| {
        let mut finalists: Vec<(f64, Sweep, Search)> = Vec::new();
        let mut outcomes: Vec<(f64, Sweep, Assignment)> = Vec::new();
        for (sweep, search, swept) in results {
            if swept.is_err() {
                continue;
            }
            let objective_s = search.assignment.objective_s(search.choices);
            let decisions = search
                .assignment
                .picks
                .iter()
                .filter(|p| p.is_some())
                .count();
            if decisions <= EXCHANGE_LIMIT {
                finalists.push((objective_s, sweep, search));
            } else {
                outcomes.push((objective_s, sweep, search.assignment));
            }
        }
        finalists.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut moves_left = moves;
        let mut used = 0;
        for (objective_s, sweep, mut search) in finalists {
            let objective_s = if moves_left > 0 {
                search.max_tries = moves_left;
                for _ in 0..3 {
                    if !search.exchange() {
                        break;
                    }
                }
                moves_left -= search.tries;
                used += search.tries;
                search.assignment.objective_s(search.choices)
            } else {
                objective_s
            };
            outcomes.push((objective_s, sweep, search.assignment));
        }
        // The first among equals.
        let mut best: Option<(f64, Sweep, Assignment)> = None;
        for outcome in outcomes {
            if best.as_ref().is_none_or(|b| outcome.0 < b.0) {
                best = Some(outcome);
            }
        }
        (best, used)
    };
    // Round 1 prices added seconds only. Its sweeps run side by side: the
    // first three, then those the first allows.
    // Each setting's tables are built once, for all the runs that share it.
    let runs = |sweeps: &[Sweep]| sweeps.iter().map(|&s| (s, no_weights)).collect::<Vec<_>>();
    let (first_tables, which) = Tables::for_runs(choices, &bytes, &runs(&SWEEPS[..3]));
    let mut results: Vec<_> = SWEEPS[..3]
        .par_iter()
        .zip(&which)
        .map(|(&sweep, &k)| runner.run(sweep, &first_tables[k]))
        .collect();
    let host_short = results[0].2.is_err() || results[0].1.away_refused;
    let rest: Vec<Sweep> = SWEEPS[3..]
        .iter()
        .copied()
        .filter(|s| allowed(s, host_short))
        .collect();
    let (rest_tables, which) = Tables::for_runs(choices, &bytes, &runs(&rest));
    results.par_extend(
        rest.par_iter()
            .zip(&which)
            .map(|(&sweep, &k)| runner.run(sweep, &rest_tables[k])),
    );
    let mut first_failure: Option<Overrun> = None;
    // Later rounds: every sweep again, with the seconds of each link
    // that bounds one of round 1's results (stage 2 done) priced in full.
    let mut bounding = [false; 4];
    for (sweep, search, swept) in &results {
        if let Err(step) = swept {
            note_failure(&mut first_failure, *sweep, search, *step, choices);
            continue;
        }
        let compute = choices.compute_s() + search.assignment.cost_s(choices);
        for (bound, busy) in bounding.iter_mut().zip(search.assignment.link_s(choices)) {
            *bound |= busy > compute;
        }
    }
    let mut later: Vec<(Sweep, LinkSeconds)> = Vec::new();
    for l in (0..bounding.len()).filter(|&l| bounding[l]) {
        let mut weights = no_weights;
        weights[l] = 1.0;
        later.extend(results.iter().map(|(sweep, _, _)| (*sweep, weights)));
    }
    let first_sweeps: Vec<Sweep> = results
        .iter()
        .filter(|(_, _, swept)| swept.is_ok())
        .map(|(sweep, _, _)| *sweep)
        .collect();
    let (best, used) = finish(results, round_moves);
    let Some((objective_s, sweep, assignment)) = best else {
        return Err(or_staging(first_failure, ssd_staging_bytes));
    };
    // And where the best result's busiest link is busy for more than
    // `LINK_BOUND` of its compute, the sweep that found it with that
    // link priced at `LINK_WEIGHT` (see the module documentation).
    let link = assignment.link_s(choices);
    let compute = choices.compute_s() + assignment.cost_s(choices);
    let (busiest, busy) =
        link.iter()
            .copied()
            .enumerate()
            .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    if busy > LINK_BOUND * compute {
        let mut weights = no_weights;
        weights[busiest] = LINK_WEIGHT;
        if !later.contains(&(sweep, weights)) {
            later.push((sweep, weights));
        }
    }
    // Each weighting is a round of its own (stage 3 included); all run
    // side by side.
    let mut weightings: Vec<(LinkSeconds, Vec<Sweep>, bool)> = Vec::new();
    for (sweep, weights) in &later {
        match weightings.iter_mut().find(|(w, _, _)| w == weights) {
            Some((_, sweeps, _)) => sweeps.push(*sweep),
            None => weightings.push((*weights, vec![*sweep], false)),
        }
    }
    // And where round 1's best recomputes from tensors that its own
    // choices keep off the device at that step, the copies brought in for
    // them, which no choice's link seconds count: a round with every recomputation
    // charged the copies it would need under round 1's best, each link
    // with copies that bounds the iteration with them priced in full, and
    // one whose copies are more than `COPIES_SHARE` of its busy seconds at
    // `LINK_WEIGHT`.
    let copies = assignment.copies_link_s(choices);
    let mut weights = no_weights;
    for (l, (&busy, more)) in link.iter().zip(copies).enumerate() {
        if more > 0.0 && busy + more > compute {
            weights[l] = 1.0;
        } else if more > COPIES_SHARE * busy {
            weights[l] = LINK_WEIGHT;
        }
    }
    let charged = (weights != no_weights).then(|| copies_charged(choices, &assignment));
    if charged.is_some() {
        weightings.push((weights, first_sweeps, true));
    }
    let charged_runner = charged.as_ref().map(|charged| Runner {
        choices: charged,
        ..runner
    });
    // Stage 3's moves: round 1 has a round's budget; the later rounds
    // share what it left and half a round's budget more.
    // The round charged the copies has a share beside theirs.
    let shares = weightings.iter().filter(|(_, _, charged)| !charged).count();
    let later_moves = (round_moves - used + round_moves / 2) / shares.max(1);
    let rounds: Vec<(f64, Assignment)> = weightings
        .par_iter()
        .filter_map(|(weights, sweeps, charged)| {
            let runner = match (&charged_runner, charged) {
                (Some(charged), true) => charged,
                _ => &runner,
            };
            let round: Vec<(Sweep, LinkSeconds)> =
                sweeps.iter().map(|&sweep| (sweep, *weights)).collect();
            let (tables, which) = Tables::for_runs(runner.choices, &bytes, &round);
            let results: Vec<_> = round
                .par_iter()
                .zip(&which)
                .map(|(&(sweep, _), &k)| runner.run(sweep, &tables[k]))
                .collect();
            finish(results, later_moves).0.map(|(o, _, a)| (o, a))
        })
        .collect();
    // The best of all rounds, round 1's among equals; the others
    // distinct from it beside it.
    let (mut objective_s, mut assignment) = (objective_s, assignment);
    let mut others: Vec<Assignment> = Vec::new();
    for (round_s, mut round) in rounds {
        if round_s < objective_s {
            objective_s = round_s;
            std::mem::swap(&mut assignment, &mut round);
        }
        others.push(round);
    }
    let mut distinct: Vec<Assignment> = Vec::new();
    for other in others {
        if other != assignment && !distinct.contains(&other) {
            distinct.push(other);
        }
    }
    let others = distinct;
    Ok(Outcome {
        assignment,
        objective_s,
        others,
    })
}

/// Records where a sweep of the main kind (knapsack, no refusals, no
/// applied timings) first failed to bring the device within budget; an
/// SSD sweep's failure replaces one without the SSD.
fn note_failure(
    first: &mut Option<Overrun>,
    sweep: Sweep,
    search: &Search,
    step: usize,
    choices: &Choices,
) {
    if !sweep.knapsack || sweep.strict_adds || sweep.as_applied {
        return;
    }
    if first.is_none() || sweep.ssd {
        *first = Some(Overrun {
            tier: Tier::Hbm,
            step: (step as u32 / 2).min(choices.steps.saturating_sub(1)),
            needed_bytes: search.usage.hbm.get(step).max(0) as u64,
        });
    }
}

/// The recorded failure, or else host memory short of the SSD's staging
/// buffers.
fn or_staging(failure: Option<Overrun>, ssd_staging_bytes: u64) -> Overrun {
    failure.unwrap_or(Overrun {
        tier: Tier::Host,
        step: 0,
        needed_bytes: ssd_staging_bytes,
    })
}

impl Assignment {
    /// Fates and transfer timings for the schedule pass.
    pub fn fates_and_shifts(&self, choices: &Choices) -> (Vec<Fate>, Vec<Shift>) {
        (0..self.picks.len())
            .map(|t| match self.choice(choices, t) {
                None => (choices.baseline[t], Shift::default()),
                Some(c) => (
                    c.fate,
                    Shift {
                        lag: c.lag,
                        leads: c.leads.to_vec(),
                    },
                ),
            })
            .unzip()
    }
}

/// Schedule construction for fates chosen elsewhere (the peer policies):
/// every tensor takes the most-freeing timing of its fate, then each moves
/// its transfers earlier, or lets them run longer, as far as the budgets
/// allow. Tensors whose fate has no choice keep no shift. Also says
/// whether the fates fit the model's budgets at their most-freeing timings
/// (if not, nothing is moved); `true` where the model cannot tell (a fate
/// with no choice).
pub fn time_fates(
    workload: &Workload,
    choices: &Choices,
    fates: &[Fate],
    budgets: &Budgets,
    ssd_staging_bytes: u64,
) -> (Vec<Shift>, bool) {
    let clamp = |b: u64| b.min(i64::MAX as u64 / 4) as i64;
    let limit = [
        clamp(budgets.hbm_bytes),
        clamp(budgets.host_bytes),
        clamp(budgets.ssd_bytes),
    ];
    let mut assignment = Assignment::baseline(choices);
    // A fate with no choice of its own (an input no operator reads, given
    // a stream fate) stays at its baseline in the model, which then counts
    // bytes the memory pass does not: no verdict on fit.
    let mut unmatched = false;
    for (t, &fate) in fates.iter().enumerate() {
        if fate != choices.baseline[t] {
            assignment.picks[t] = choices.options[t]
                .iter()
                .position(|c| c.fate == fate)
                .map(|i| i as u16);
            unmatched |= assignment.picks[t].is_none();
        }
    }
    let ssd = assignment.uses_ssd(choices);
    let reserved = if ssd { ssd_staging_bytes as i64 } else { 0 };
    let bytes: Vec<i64> = workload.tensors.iter().map(|t| t.bytes as i64).collect();
    let mut usage = Usage::new(choices, limit, reserved, &Held::default());
    for (t, &b) in bytes.iter().enumerate() {
        if let Some(choice) = assignment.choice(choices, t) {
            usage.apply(choice, b, 1);
        }
    }
    let slots = choices.slots as usize;
    let fits = usage.hbm.max(0, slots) <= limit[0]
        && usage.host.max(0, slots) <= limit[1]
        && usage.ssd.max(0, slots) <= limit[2];
    if !fits {
        let (_, shifts) = assignment.fates_and_shifts(choices);
        return (shifts, unmatched);
    }
    // Stage 2 within the fates.
    let tables = Tables::new(choices, &bytes, &[0.0; 4], ssd, false, false);
    let mut search = Search {
        choices,
        bytes,
        assignment,
        usage,
        keep_fates: true,
        away_refused: false,
        knapsack: true,
        delta: Delta::default(),
        refusals: Refusals::new(tables.price.len()),
        ranked: vec![None; choices.options.len()],
        tables: &tables,
        tries: 0,
        max_tries: 0,
    };
    for _ in 0..4 {
        if !search.improve() {
            break;
        }
    }
    let (_, shifts) = search.assignment.fates_and_shifts(choices);
    (shifts, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockCounts;
    use crate::dag::{from_node_link, random_node_link};
    use crate::datasets::dataset;
    use crate::gnn::{build_gnn, GnnModel, GnnSpec};
    use crate::passes::cost::FateSet;
    use crate::passes::lifetimes::Lifetimes;
    use crate::Profile;

    fn profile() -> Profile {
        let text = include_str!("../../../profiles/a100-80g.json");
        Profile::from_json(text, "a100-80g.json").unwrap()
    }

    fn workloads() -> Vec<Workload> {
        let stats = dataset("ogbn-arxiv").unwrap();
        let spec = GnnSpec {
            model: GnnModel::Gat,
            layers: 2,
            hidden: 64,
            heads: 2,
            features: stats.features,
            classes: stats.classes,
            graph_name: stats.name.into(),
            order: Default::default(),
            transposes: Default::default(),
            sweeps: Default::default(),
            dropout: 0.5,
        };
        let counts = BlockCounts::skewed(stats.nodes, stats.edges, 4).unwrap();
        vec![
            build_gnn(&spec, &counts).unwrap(),
            from_node_link(&random_node_link(150, 7), "random.json").unwrap(),
        ]
    }

    #[test]
    fn a_recomputation_is_charged_the_copies_in_of_what_the_assignment_keeps_away() {
        let workload = &workloads()[0];
        let lives = Lifetimes::compute(workload);
        let choices = Choices::build(workload, &lives, &profile(), FateSet::ALL);
        // A recomputation that reads a tensor its baseline keeps on the
        // device, and a choice of that tensor's that keeps it away there,
        // on the host or on the SSD.
        let mut found = 0;
        for (t, options) in choices.options.iter().enumerate() {
            for (i, recompute) in options.iter().enumerate() {
                for &(u, slot) in &recompute.copies_in {
                    let (u, i) = (u as usize, i as u16);
                    for (j, away) in choices.options[u].iter().enumerate() {
                        if !away.frees(slot) {
                            continue;
                        }
                        found += 1;
                        let mut assignment = Assignment::baseline(&choices);
                        assignment.picks[t] = Some(i);
                        // With the tensor at its baseline there is no copy.
                        assert_eq!(assignment.copies_link_s(&choices), [0.0; 4]);
                        assignment.picks[u] = Some(j as u16);
                        let (pcie_s, ssd_s) = choices.load_s[u];
                        let ssd_read = if away.uses_ssd() { ssd_s } else { 0.0 };
                        let copies = assignment.copies_link_s(&choices);
                        assert_eq!(copies, [pcie_s, 0.0, ssd_read, 0.0], "{t} reads {u}");
                        let charged = copies_charged(&choices, &assignment);
                        let (before, after) =
                            (&recompute.link_s, &charged.options[t][i as usize].link_s);
                        assert_eq!(after[0] - before[0], pcie_s);
                        assert_eq!(after[2] - before[2], ssd_read);
                        // What the tensor's own choice moves is not charged again.
                        assert_eq!(charged.options[u][j].link_s, away.link_s);
                    }
                }
            }
        }
        assert!(
            found > 0,
            "no recomputation reads a tensor another choice keeps away"
        );
    }

    #[test]
    fn freed_at_lists_every_choice_that_frees_a_slot() {
        for workload in workloads() {
            let lives = Lifetimes::compute(&workload);
            let choices = Choices::build(&workload, &lives, &profile(), FateSet::ALL);
            assert!(choices
                .options
                .iter()
                .flat_map(|o| o.iter())
                .any(Choice::uses_ssd));
            for ssd in [false, true] {
                let index = Stabbing::freed(&choices, ssd);
                for slot in 0..choices.slots {
                    let mut found = Vec::new();
                    index.at(slot as usize, |t, i| found.push((t, i)));
                    found.sort_unstable();
                    let mut expected = Vec::new();
                    for (t, options) in choices.options.iter().enumerate() {
                        for (i, c) in options.iter().enumerate() {
                            if (ssd || !c.uses_ssd()) && c.frees(slot) {
                                expected.push((t, i as u16));
                            }
                        }
                    }
                    assert_eq!(found, expected, "{} slot {slot} ssd {ssd}", workload.name);
                }
            }
        }
    }

    #[test]
    fn added_at_lists_every_choice_that_adds_bytes_at_a_slot() {
        for workload in workloads() {
            let lives = Lifetimes::compute(&workload);
            let choices = Choices::build(&workload, &lives, &profile(), FateSet::ALL);
            let index = Stabbing::added(&choices);
            let mut listed = 0;
            for slot in 0..choices.slots {
                let mut found = Vec::new();
                index.at(slot as usize, |t, i| found.push((t, i)));
                found.sort_unstable();
                found.dedup();
                let mut expected = Vec::new();
                for (t, options) in choices.options.iter().enumerate() {
                    for (i, c) in options.iter().enumerate() {
                        if c.hbm_add.iter().any(|&(a, b, _)| a <= slot && slot < b) {
                            expected.push((t, i as u16));
                        }
                    }
                }
                assert_eq!(found, expected, "{} slot {slot}", workload.name);
                listed += found.len();
            }
            assert!(listed > 0, "{}: no choice adds bytes", workload.name);
        }
    }

    /// `try_set` answers as a fresh check would, refusals remembered or
    /// not, along a random walk of changes over a searched assignment.
    #[test]
    fn a_remembered_refusal_answers_as_a_fresh_check() {
        for workload in workloads() {
            let lives = Lifetimes::compute(&workload);
            let choices = Choices::build(&workload, &lives, &profile(), FateSet::ALL);
            let bytes: Vec<i64> = workload.tensors.iter().map(|t| t.bytes as i64).collect();
            let peak = *choices.base_hbm.iter().max().unwrap() as i64;
            let host: i64 = bytes.iter().sum::<i64>() / 3;
            let sweep = SWEEPS[4];
            let tables = Tables::new(&choices, &bytes, &[0.0; 4], sweep.ssd, false, true);
            // The tightest device budget, in tenths of the peak, that the
            // sweep fits.
            let held = Held::default();
            let mut search = (1..10)
                .find_map(|tenths| {
                    let runner = Runner {
                        choices: &choices,
                        bytes: &bytes,
                        limit: [peak * tenths / 10, host, i64::MAX / 4],
                        held: &held,
                        ssd_staging_bytes: 0,
                        first_fit: false,
                    };
                    let (_, search, swept) = runner.run(sweep, &tables);
                    swept.is_ok().then_some(search)
                })
                .unwrap();
            let with_choices: Vec<usize> = (0..choices.options.len())
                .filter(|&t| !choices.options[t].is_empty())
                .collect();
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = |n: usize| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % n as u64) as usize
            };
            let (mut refused, mut remembered) = (0, 0);
            let mut fresh = Delta::default();
            // Half the changes tried again from those refused lately.
            let mut lately: Vec<(usize, Option<u16>)> = Vec::new();
            for _ in 0..20_000 {
                let (t, pick) = if !lately.is_empty() && next(2) == 0 {
                    lately[next(lately.len())]
                } else {
                    let t = with_choices[next(with_choices.len())];
                    let pick = match next(choices.options[t].len() + 1) {
                        0 => None,
                        k => Some(k as u16 - 1),
                    };
                    (t, pick)
                };
                if search.assignment.picks[t] == pick {
                    continue;
                }
                let expected = fresh.compute_fits(
                    search.pick(t),
                    search.choice_of(t, pick),
                    bytes[t],
                    &search.usage,
                );
                let at = search.tables.index(t, pick);
                let known = search.refusals.get(at).is_some_and(|r| {
                    r.from == search.assignment.picks[t] && search.usage.still_refuses(r)
                });
                assert_eq!(
                    search.try_set(t, pick),
                    expected,
                    "{} tensor {t}",
                    workload.name
                );
                refused += usize::from(!expected);
                remembered += usize::from(known);
                if !expected {
                    if lately.len() == 16 {
                        lately.remove(0);
                    }
                    lately.push((t, pick));
                }
            }
            // The walk both refused changes and answered some from memory.
            assert!(
                refused > 100 && remembered > 10,
                "{}: {refused} refused, {remembered} remembered",
                workload.name
            );
        }
    }
}
