//! Pass 4, memory: bytes on every tier at every position of the timeline,
//! counted from the lifetimes of copies.
//!
//! It runs after the schedule, which fixes when copies appear and go, and
//! before the prediction, which reports its peaks. A device copy lives from
//! its creation (its operator, its recomputation, or the issue of its
//! reload or load) to its last read before the next creation, or to the end
//! of the offload that moves it away. Host and SSD copies live from their
//! offload's issue to the end of the reload that brings them back.
//!
//! Bytes are counted at two slots per timeline position: the position's
//! boundary, then its item. At a step's boundary the transfers issued after
//! the previous step start (their buffers are allocated at once) while the
//! transfers due before this step may still run and hold theirs; only then
//! does the step wait for them. So a copy that a finishing transfer frees
//! is still counted at the boundary, beside the buffers issued there, and
//! is gone at the item. A copy whose last read is the previous item is
//! freed before the boundary. This is the order in which the simulator and
//! the runtime's executor allocate and free.

use super::grouped::Grouped;
use super::timeline::{Item, Timeline};
use crate::plan::{Action, Budgets, Exchange, Fate, PerTier, ScheduleEntry};
use crate::workload::{TensorId, TensorKind, Workload};
use crate::{Error, Result, Tier};

const TIERS: [Tier; 3] = [Tier::Hbm, Tier::Host, Tier::Ssd];

/// Bytes per tier per position.
#[derive(Debug, Clone)]
pub struct Occupancy {
    pub bytes: PerTier<Vec<u64>>,
}

/// Slots per timeline position: its boundary, then its item.
pub const SLOTS_PER_POSITION: usize = 2;

/// The slot of position `position`'s boundary.
pub fn boundary_slot(position: usize) -> usize {
    SLOTS_PER_POSITION * position
}

/// The slot of position `position`'s item (operator or recomputation).
pub fn item_slot(position: usize) -> usize {
    boundary_slot(position) + 1
}

/// Slots of a timeline: two per position and the boundary after the last.
pub fn slot_count(timeline: &Timeline) -> usize {
    boundary_slot(timeline.len()) + 1
}

/// One copy of a tensor on one tier, alive over slots `start..end` (see
/// [`boundary_slot`] and [`item_slot`]). `tensor` is `None` for the SSD
/// staging buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLife {
    pub tensor: Option<TensorId>,
    pub tier: Tier,
    pub start: usize,
    pub end: usize,
    pub bytes: u64,
    /// A device copy whose buffer the item at `end` takes over for its
    /// output ([`crate::workload::Op::adds_into`]): it ends as that
    /// item's output begins, and the item still reads it.
    pub handed: bool,
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
    let slots = slot_count(timeline);
    let mut lives = Vec::new();
    let mut add = |tensor: Option<TensorId>,
                   tier: Tier,
                   (start, end): (usize, usize),
                   bytes: u64,
                   handed: bool| {
        let end = end.min(slots);
        if start < end {
            lives.push(CopyLife {
                tensor,
                tier,
                start,
                end,
                bytes,
                handed,
            });
        }
    };
    // Per tensor, in slots: device-copy creations, reads, and offloads
    // (issue, and the slot at which the device copy is gone). Gathered
    // as `(tensor, value)` pairs and grouped once: a list per tensor
    // would be thousands of small allocations on every evaluation.
    let n = workload.tensors.len();
    let added = added_into(workload, schedule, timeline);
    let mut creations: Vec<(usize, usize)> = Vec::new();
    let mut reads: Vec<(usize, usize)> = Vec::new();
    for (position, item) in timeline.items.iter().enumerate() {
        let slot = item_slot(position);
        let op = match *item {
            Item::Op(step) => &workload.ops[step as usize],
            Item::Recompute(index) => {
                let entry = &schedule[index];
                let op = &workload.ops[entry.op.expect("recompute names its op").index()];
                creations.push((entry.tensor.index(), slot));
                reads.extend(op.inputs.iter().map(|input| (input.index(), slot)));
                continue;
            }
        };
        reads.extend(op.inputs.iter().map(|input| (input.index(), slot)));
        creations.extend(op.outputs.iter().map(|output| (output.index(), slot)));
    }
    // A transfer due before step `d` holds its copies through `d`'s
    // boundary: they are gone from `d`'s first item on.
    let gone = |done_before_step: u32| item_slot(timeline.step_start[done_before_step as usize]);
    let reload_done = Grouped::new(
        n,
        schedule
            .iter()
            .filter(|e| e.action == Action::Reload)
            .map(|entry| (entry.tensor.index(), gone(entry.done_before_step))),
    );
    let mut offloads: Vec<(usize, (usize, usize))> = Vec::new();
    let mut uses_ssd = false;
    for entry in schedule {
        let t = entry.tensor.index();
        let issued = boundary_slot(timeline.after_step(entry.issue_after_step));
        match entry.action {
            Action::Offload => {
                offloads.push((t, (issued, gone(entry.done_before_step))));
                // The away copy lives until a reload from it finishes.
                let back = reload_done
                    .of(t)
                    .iter()
                    .copied()
                    .filter(|&end| end > issued)
                    .min()
                    .unwrap_or(slots);
                add(
                    Some(entry.tensor),
                    entry.to,
                    (issued, back),
                    entry.bytes,
                    false,
                );
            }
            Action::Reload | Action::Load => creations.push((t, issued)),
            Action::Recompute => {}
        }
        uses_ssd |= entry.from == Tier::Ssd || entry.to == Tier::Ssd;
    }
    if uses_ssd {
        add(None, Tier::Host, (0, slots), ssd_staging_bytes, false);
    }
    let mut creations = Grouped::new(n, creations);
    let reads = Grouped::new(n, reads);
    let offloads = Grouped::new(n, offloads);
    for (tensor, &fate) in workload.tensors.iter().zip(fates) {
        let t = tensor.id.index();
        let persistent = tensor.kind == TensorKind::Parameter || fate == Fate::Resident;
        if persistent {
            add(Some(tensor.id), Tier::Hbm, (0, slots), tensor.bytes, false);
            continue;
        }
        if let Some(tier) = fate
            .away_tier()
            .filter(|_| tensor.kind == TensorKind::Input)
        {
            add(Some(tensor.id), tier, (0, slots), tensor.bytes, false);
        }
        creations.of_mut(t).sort_unstable();
        let created = creations.of(t);
        // Reads are in slot order, and so are offloads (the schedule is
        // ordered by issue): one pass over each.
        let (tensor_reads, tensor_offloads) = (reads.of(t), offloads.of(t));
        let (mut r, mut o) = (0usize, 0usize);
        for (k, &start) in created.iter().enumerate() {
            let next = created.get(k + 1).copied().unwrap_or(usize::MAX);
            while o < tensor_offloads.len() && tensor_offloads[o].0 < start {
                o += 1;
            }
            while r < tensor_reads.len() && tensor_reads[r] < next {
                r += 1;
            }
            let mut handed = false;
            let end = match tensor_offloads.get(o) {
                // The first offload issued while this copy lives ends it.
                Some(&(issued, done)) if issued < next => done,
                // Else its last read before the next creation: freed when
                // that item ends, before the next boundary; or, where that
                // item adds into it in place, as the item's output takes
                // its buffer over.
                _ => match r.checked_sub(1).map(|i| tensor_reads[i]) {
                    Some(last)
                        if last > start
                            && added.get(last / SLOTS_PER_POSITION) == Some(&Some(tensor.id)) =>
                    {
                        handed = true;
                        last
                    }
                    Some(last) if last >= start => last + 1,
                    _ => start + 1,
                },
            };
            add(
                Some(tensor.id),
                Tier::Hbm,
                (start, end),
                tensor.bytes,
                handed,
            );
        }
    }
    lives
}

/// Per position, the tensor the item there adds into in place
/// ([`crate::workload::Op::adds_into`]); empty where no operator does. A
/// recomputation adds into it only where the output it keeps is the
/// operator's one output, as it always is.
fn added_into(
    workload: &Workload,
    schedule: &[ScheduleEntry],
    timeline: &Timeline,
) -> Vec<Option<TensorId>> {
    if workload.ops.iter().all(|op| op.adds_into.is_none()) {
        return Vec::new();
    }
    timeline
        .items
        .iter()
        .map(|item| {
            let op = match *item {
                Item::Op(step) => &workload.ops[step as usize],
                Item::Recompute(index) => {
                    let entry = &schedule[index];
                    let op = &workload.ops[entry.op.expect("recompute names its op").index()];
                    if op.outputs != [entry.tensor] {
                        return None;
                    }
                    op
                }
            };
            op.adds_into
                .and_then(|k| op.inputs.get(k as usize))
                .copied()
        })
        .collect()
}

impl Occupancy {
    pub fn compute(
        workload: &Workload,
        fates: &[Fate],
        schedule: &[ScheduleEntry],
        timeline: &Timeline,
        ssd_staging_bytes: u64,
    ) -> Occupancy {
        let lives = copy_lives(workload, fates, schedule, timeline, ssd_staging_bytes);
        Occupancy::from_lives(&lives, timeline)
    }

    /// The bytes per tier per slot of `lives` (see [`copy_lives`]).
    pub fn from_lives(lives: &[CopyLife], timeline: &Timeline) -> Occupancy {
        let slots = slot_count(timeline);
        let mut delta: PerTier<Vec<i128>> = PerTier {
            hbm: vec![0; slots + 1],
            host: vec![0; slots + 1],
            ssd: vec![0; slots + 1],
        };
        for life in lives {
            let d = delta.get_mut(life.tier);
            d[life.start] += life.bytes as i128;
            d[life.end] -= life.bytes as i128;
        }
        let mut bytes = PerTier {
            hbm: vec![0u64; slots],
            host: vec![0; slots],
            ssd: vec![0; slots],
        };
        for tier in TIERS {
            let mut running: i128 = 0;
            let d = delta.get_ref(tier);
            let out = bytes.get_mut(tier);
            for slot in 0..slots {
                running += d[slot];
                out[slot] = running as u64;
            }
        }
        Occupancy { bytes }
    }

    /// Adds the exchange buffers of a multi-device plan: each from the
    /// boundary before its first step to the end of its last.
    pub fn add_exchanges(&mut self, exchanges: &[Exchange], timeline: &Timeline) {
        let slots = self.bytes.hbm.len();
        let steps = timeline.step_start.len() - 1;
        for e in exchanges {
            let from = boundary_slot(timeline.step_start[(e.held_from_step as usize).min(steps)]);
            let holds = [
                (Tier::Hbm, e.device_bytes, e.held_until_step),
                (Tier::Host, e.host_bytes, e.host_held_until_step),
            ];
            for (tier, bytes, last) in holds {
                let until = boundary_slot(timeline.step_start[(last as usize + 1).min(steps)]);
                if bytes > 0 && from < until {
                    for value in &mut self.bytes.get_mut(tier)[from.min(slots)..until.min(slots)] {
                        *value += bytes;
                    }
                }
            }
        }
    }

    /// Adds what the runtime holds on the device beside the tensors: the
    /// workload's resident bytes at every slot, and each operator's scratch
    /// at its item, a recomputation's included.
    pub fn add_scratch(
        &mut self,
        workload: &Workload,
        schedule: &[ScheduleEntry],
        timeline: &Timeline,
    ) {
        let device = &mut self.bytes.hbm;
        if workload.resident_bytes > 0 {
            for value in device.iter_mut() {
                *value += workload.resident_bytes;
            }
        }
        for (position, item) in timeline.items.iter().enumerate() {
            let op = match *item {
                Item::Op(step) => &workload.ops[step as usize],
                Item::Recompute(index) => match schedule[index].op {
                    Some(op) => workload.op(op),
                    None => continue,
                },
            };
            if let Some(value) = device.get_mut(item_slot(position)) {
                *value += op.scratch_bytes;
            }
        }
    }

    /// Highest bytes per tier over every slot (boundaries included) of
    /// `slots`.
    pub fn max_over(&self, tier: Tier, slots: std::ops::Range<usize>) -> u64 {
        let values = self.bytes.get_ref(tier);
        values[slots.start.min(values.len())..slots.end.min(values.len())]
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Highest bytes per tier and the step where each first occurs (a
    /// boundary counts for the step after it).
    pub fn peaks(&self, timeline: &Timeline) -> (PerTier<u64>, PerTier<u32>) {
        let mut peak = PerTier::<u64>::default();
        let mut step = PerTier::<u32>::default();
        for tier in TIERS {
            let values = self.bytes.get_ref(tier);
            let mut best = 0usize;
            for (slot, &value) in values.iter().enumerate() {
                if value > values[best] {
                    best = slot;
                }
            }
            *peak.get_mut(tier) = values.get(best).copied().unwrap_or(0);
            *step.get_mut(tier) = step_of_slot(timeline, best);
        }
        (peak, step)
    }

    /// The worst overrun, tier by tier in order hbm, host, ssd, as an error.
    pub fn check(&self, timeline: &Timeline, budgets: &Budgets, workload: &Workload) -> Result<()> {
        for tier in TIERS {
            let budget = budgets.of(tier);
            let values = self.bytes.get_ref(tier);
            let worst = (0..values.len()).max_by_key(|&s| (values[s], std::cmp::Reverse(s)));
            if let Some(slot) = worst.filter(|&s| values[s] > budget) {
                let step = step_of_slot(timeline, slot);
                let at_boundary = slot % SLOTS_PER_POSITION == 0;
                return Err(Error::Infeasible {
                    tier,
                    step,
                    op: workload
                        .ops
                        .get(step as usize)
                        .map(|op| op.name.clone())
                        .unwrap_or_default(),
                    needed_bytes: values[slot],
                    budget_bytes: budget,
                    bytes_over: values[slot] - budget,
                    hint: if at_boundary {
                        "; at the boundary before the step, where the transfers issued there \
                         have started while those due there still hold their copies"
                            .into()
                    } else {
                        String::new()
                    },
                    fits_with: Vec::new(),
                });
            }
        }
        Ok(())
    }
}

/// The step a slot belongs to: an item's step, or for a boundary the step
/// that follows it (the last step for the boundary after the last).
pub fn step_of_slot(timeline: &Timeline, slot: usize) -> u32 {
    let position = slot / SLOTS_PER_POSITION;
    match timeline.step_of.get(position) {
        Some(&step) => step,
        None => timeline.step_of.last().copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Stream;
    use crate::workload::{Cost, OpKind, Phase};

    /// `a` (100 B) is made at step 0 and read again at step 3; `x` (40 B),
    /// streamed from the host, is read at step 2; `o` (1 B) outputs keep
    /// every step busy. `a` is offloaded after step 0, due before step 2,
    /// and reloaded after step 2, due before step 3; `x` is loaded after
    /// step 1, due before step 2.
    fn boundary_case() -> (Workload, Vec<Fate>, Vec<ScheduleEntry>) {
        let mut w = Workload::new("boundary");
        let x = w.add_tensor("x", 40, TensorKind::Input, Some(Tier::Host));
        let a = w.add_tensor("a", 100, TensorKind::Activation, None);
        let outs: Vec<TensorId> = (0..3)
            .map(|k| w.add_tensor(format!("o{k}"), 1, TensorKind::Activation, None))
            .collect();
        let second = Cost::seconds(1.0);
        let (f, b) = (Phase::Forward, Phase::Backward);
        let g = OpKind::Generic;
        w.add_op("f0", g, f, vec![], vec![a], second);
        w.add_op("f1", g, f, vec![], vec![outs[0]], second);
        w.add_op("f2", g, f, vec![x, outs[0]], vec![outs[1]], second);
        w.add_op("b3", g, b, vec![a, outs[1]], vec![outs[2]], second);
        let entry =
            |action, tensor: TensorId, bytes, from, to, stream, issue, done| ScheduleEntry {
                action,
                tensor,
                bytes,
                from,
                to,
                stream,
                issue_after_step: issue,
                done_before_step: done,
                op: None,
            };
        let schedule = vec![
            entry(
                Action::Offload,
                a,
                100,
                Tier::Hbm,
                Tier::Host,
                Stream::D2h,
                0,
                2,
            ),
            entry(
                Action::Load,
                x,
                40,
                Tier::Host,
                Tier::Hbm,
                Stream::H2d,
                1,
                2,
            ),
            entry(
                Action::Reload,
                a,
                100,
                Tier::Host,
                Tier::Hbm,
                Stream::H2d,
                2,
                3,
            ),
        ];
        let fates = vec![
            Fate::StreamHost,
            Fate::OffloadHost,
            Fate::Retain,
            Fate::Retain,
            Fate::Retain,
        ];
        (w, fates, schedule)
    }

    #[test]
    fn a_boundary_counts_issued_buffers_beside_the_copies_still_leaving() {
        let (w, fates, schedule) = boundary_case();
        let timeline = Timeline::new(w.ops.len(), &schedule);
        let occupancy = Occupancy::compute(&w, &fates, &schedule, &timeline, 0);
        let hbm = &occupancy.bytes.hbm;
        // Step 2's boundary: `a` still leaving (100), `x` arriving (40),
        // `o0` (1).
        assert_eq!(hbm[boundary_slot(2)], 141);
        // Step 2 itself: `a` gone; `x`, `o0` and the new `o1`.
        assert_eq!(hbm[item_slot(2)], 42);
        // Step 1: `a` (its offload is running) and `o0`.
        assert_eq!(hbm[item_slot(1)], 101);
        // Step 3's boundary: `x` and `o0` were freed after step 2's read;
        // `a` is arriving, `o1` waits for its read.
        assert_eq!(hbm[boundary_slot(3)], 101);
        // The host copy of `a` lives from its offload's issue through the
        // boundary where its reload is due.
        let host = &occupancy.bytes.host;
        assert_eq!(host[boundary_slot(1)], 140);
        assert_eq!(host[boundary_slot(3)], 140);
        assert_eq!(host[item_slot(3)], 40);
        let (peak, step) = occupancy.peaks(&timeline);
        assert_eq!((peak.hbm, step.hbm), (141, 2));
    }

    /// `s0` (100 B) is made at step 0; step 1 adds into it making `s1`,
    /// step 2 adds into `s1` making `s2`, but `s1` is read again at step
    /// 3; `o` (1 B) keeps step 3 busy.
    fn running_sums() -> (Workload, Vec<Fate>) {
        let mut w = Workload::new("sums");
        let s: Vec<TensorId> = (0..3)
            .map(|k| w.add_tensor(format!("s{k}"), 100, TensorKind::Workspace, None))
            .collect();
        let o = w.add_tensor("o", 1, TensorKind::Activation, None);
        let second = Cost::seconds(1.0);
        let (f, g) = (Phase::Forward, OpKind::Generic);
        w.add_op("f0", g, f, vec![], vec![s[0]], second);
        let add1 = w.add_op("f1", g, f, vec![s[0]], vec![s[1]], second);
        let add2 = w.add_op("f2", g, f, vec![s[1]], vec![s[2]], second);
        w.add_op("f3", g, f, vec![s[1], s[2]], vec![o], second);
        for op in [add1, add2] {
            w.ops[op.index()].adds_into = Some(0);
        }
        w.validate().unwrap();
        (w, vec![Fate::Retain; 4])
    }

    #[test]
    fn an_output_takes_over_the_buffer_of_an_input_read_there_last() {
        let (w, fates) = running_sums();
        let timeline = Timeline::new(w.ops.len(), &[]);
        let lives = copy_lives(&w, &fates, &[], &timeline, 0);
        let life = |t: usize| {
            lives
                .iter()
                .find(|l| l.tensor == Some(TensorId(t as u32)))
                .unwrap()
        };
        // `s0` is read last at step 1, which adds into it: handed over.
        assert!(life(0).handed);
        assert_eq!(life(0).end, item_slot(1));
        // `s1` is read again at step 3: step 2 must not take it over.
        assert!(!life(1).handed);
        assert_eq!(life(1).end, boundary_slot(4));
        let hbm = Occupancy::compute(&w, &fates, &[], &timeline, 0).bytes.hbm;
        assert_eq!(hbm[item_slot(1)], 100);
        assert_eq!(hbm[item_slot(2)], 200);

        // The same operators without the marks count both at step 1.
        let mut plain = w.clone();
        plain.ops.iter_mut().for_each(|op| op.adds_into = None);
        let hbm = Occupancy::compute(&plain, &fates, &[], &timeline, 0)
            .bytes
            .hbm;
        assert_eq!(hbm[item_slot(1)], 200);
    }

    #[test]
    fn a_copy_an_offload_holds_is_not_taken_over() {
        let (w, fates) = running_sums();
        // `s0` leaves after step 0, its offload due only after step 1
        // reads it: the copy is the offload's until then.
        let schedule = vec![ScheduleEntry {
            action: Action::Offload,
            tensor: TensorId(0),
            bytes: 100,
            from: Tier::Hbm,
            to: Tier::Host,
            stream: Stream::D2h,
            issue_after_step: 0,
            done_before_step: 2,
            op: None,
        }];
        let timeline = Timeline::new(w.ops.len(), &schedule);
        let lives = copy_lives(&w, &fates, &schedule, &timeline, 0);
        assert!(lives
            .iter()
            .all(|l| !l.handed || l.tensor != Some(TensorId(0))));
    }

    #[test]
    fn an_overrun_at_a_boundary_says_so() {
        let (w, fates, schedule) = boundary_case();
        let timeline = Timeline::new(w.ops.len(), &schedule);
        let occupancy = Occupancy::compute(&w, &fates, &schedule, &timeline, 0);
        let budgets = Budgets {
            hbm_bytes: 120,
            host_bytes: 1000,
            ssd_bytes: 0,
        };
        let message = occupancy
            .check(&timeline, &budgets, &w)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("needs 141 bytes at step 2 (f2)")
                && message.contains("at the boundary before the step"),
            "{message}"
        );
    }
}
