//! Pass 3, schedule: turns fates into transfers and recomputations.
//!
//! It runs after the fates are chosen and before memory and time are
//! counted, because both depend on when each copy appears and disappears.
//! An offloaded tensor leaves the device in every idle stretch between its
//! uses: it is copied away once, right after the use before its first gap,
//! and brought back before each later use (a `load` keeps the away copy for
//! the next gap, the final `reload` frees it). Transfers back are issued one
//! step before the use that needs them. Recomputation re-runs the producer just before the
//! use, first recomputing (or loading) whatever of its inputs is no longer
//! on the device, so a chain of partial sums is rebuilt in order. A tensor
//! whose recomputation is impossible (an input that cannot be brought back)
//! or too long (over [`MAX_CASCADE_OPS`]) is retained instead.

use super::lifetimes::{use_runs, Lifetimes};
use crate::plan::{Action, Fate, ScheduleEntry, Stream};
use crate::workload::{OpId, TensorId, TensorKind, Workload};
use crate::{Error, Result, Tier};

/// Most operators one recomputation may re-run, its inputs' included.
pub const MAX_CASCADE_OPS: usize = 512;

/// When a tensor's transfers run, relative to the latest timing that is
/// still correct: an offload may finish `lag` steps later (hiding behind
/// their compute), and each copy back (per gap, or per run of uses for a
/// streamed input) is issued `leads[k]` steps earlier (prefetch). Empty
/// means no shift.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shift {
    pub lag: u32,
    pub leads: Vec<u32>,
}

/// The schedule, and the fates it could honour (recompute may fall back to retain).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub entries: Vec<ScheduleEntry>,
    pub fates: Vec<Fate>,
}

pub fn build(
    workload: &Workload,
    lives: &Lifetimes,
    fates: Vec<Fate>,
    shifts: &[Shift],
) -> Result<Schedule> {
    let mut fates = fates;
    // Each round honours every recomputation it can and retains the rest;
    // retaining a tensor only makes others easier to recompute, so this
    // settles within as many rounds as there are tensors.
    for _round in 0..=workload.tensors.len() {
        let (recomputes, retimed, failed) = recomputations(workload, lives, &fates, shifts);
        if failed.is_empty() {
            let mut entries = transfers(workload, lives, &fates, shifts);
            for (tensor, retime, step) in retimed {
                match retime {
                    // A recomputation that reads a prefetched copy needs it sooner.
                    Retime::Hurry { due } => {
                        if let Some(entry) = entries.iter_mut().find(|e| {
                            e.tensor == tensor
                                && e.done_before_step == due
                                && matches!(e.action, Action::Load | Action::Reload)
                        }) {
                            entry.done_before_step = entry.done_before_step.min(step);
                        }
                    }
                    // One that reads a copy being offloaded keeps it there.
                    Retime::Linger { .. } => {
                        if let Some(entry) = entries
                            .iter_mut()
                            .find(|e| e.tensor == tensor && e.action == Action::Offload)
                        {
                            entry.done_before_step = entry.done_before_step.max(step + 1);
                        }
                    }
                }
            }
            entries.extend(recomputes);
            // Stable: recomputations of one slot keep their dependency order.
            entries.sort_by_key(|e| e.issue_after_step);
            return Ok(Schedule { entries, fates });
        }
        for tensor in failed {
            fates[tensor.index()] = Fate::Retain;
        }
    }
    Err(Error::Internal("recompute fallback did not settle".into()))
}

fn stream_for(action: Action, tier: Tier) -> Stream {
    match (action, tier) {
        (Action::Offload, Tier::Ssd) => Stream::SsdWrite,
        (Action::Offload, _) => Stream::D2h,
        (_, Tier::Ssd) => Stream::SsdRead,
        _ => Stream::H2d,
    }
}

fn transfers(
    workload: &Workload,
    lives: &Lifetimes,
    fates: &[Fate],
    shifts: &[Shift],
) -> Vec<ScheduleEntry> {
    let none = Shift::default();
    let mut entries = Vec::new();
    for (tensor, &fate) in workload.tensors.iter().zip(fates) {
        let life = &lives.tensors[tensor.id.index()];
        let shift = shifts.get(tensor.id.index()).unwrap_or(&none);
        let lead = |k: usize| shift.leads.get(k).copied().unwrap_or(0);
        match fate {
            Fate::OffloadHost | Fate::OffloadSsd => {
                let tier = fate.away_tier().expect("offload fates have a tier");
                let first = life.gaps.first().expect("offloaded tensors have a gap");
                entries.push(ScheduleEntry {
                    action: Action::Offload,
                    tensor: tensor.id,
                    bytes: tensor.bytes,
                    from: Tier::Hbm,
                    to: tier,
                    stream: stream_for(Action::Offload, tier),
                    issue_after_step: first.after as i64,
                    done_before_step: first.after + 1 + shift.lag,
                    op: None,
                });
                for (k, gap) in life.gaps.iter().enumerate() {
                    let last = k + 1 == life.gaps.len();
                    let mut back = load(tensor.id, tensor.bytes, tier, gap.before);
                    back.issue_after_step -= lead(k) as i64;
                    if last {
                        back.action = Action::Reload;
                    }
                    entries.push(back);
                }
            }
            Fate::StreamHost | Fate::StreamSsd => {
                let tier = fate.away_tier().expect("stream fates have a tier");
                for (k, (first, _)) in use_runs(&life.uses).into_iter().enumerate() {
                    let mut back = load(tensor.id, tensor.bytes, tier, first);
                    back.issue_after_step -= lead(k) as i64;
                    entries.push(back);
                }
            }
            _ => {}
        }
    }
    entries
}

fn load(tensor: TensorId, bytes: u64, tier: Tier, step: u32) -> ScheduleEntry {
    ScheduleEntry {
        action: Action::Load,
        tensor,
        bytes,
        from: tier,
        to: Tier::Hbm,
        stream: stream_for(Action::Load, tier),
        issue_after_step: step as i64 - 1,
        done_before_step: step,
        op: None,
    }
}

/// Whether a tensor's device copy is there just before step `step` runs.
enum Status {
    Present,
    /// A prefetch is already on its way, due before step `due`: it must
    /// arrive before this step instead.
    Arriving {
        due: u32,
    },
    NeedLoad(Tier),
    NeedRecompute,
    /// Its offload finishes at the boundary before this step, where a
    /// copy back for it would be issued while the device still holds it:
    /// the offload finishes after this step instead, the copy read in place.
    Linger,
}

fn status(
    workload: &Workload,
    lives: &Lifetimes,
    fates: &[Fate],
    shifts: &[Shift],
    lingered: &[u32],
    tensor: TensorId,
    step: u32,
) -> Status {
    let life = &lives.tensors[tensor.index()];
    // How many steps early the copy back for gap or run `k` is issued.
    let lead = |k: usize| {
        shifts
            .get(tensor.index())
            .and_then(|s| s.leads.get(k))
            .copied()
            .unwrap_or(0)
    };
    match fates[tensor.index()] {
        Fate::Resident => Status::Present,
        Fate::StreamHost | Fate::StreamSsd => {
            let runs = use_runs(&life.uses);
            let in_run = runs
                .iter()
                .any(|&(first, last)| first <= step && step <= last);
            let next = runs.iter().position(|&(first, _)| step < first);
            if in_run {
                Status::Present
            } else if let Some(k) = next.filter(|&k| step + lead(k) >= runs[k].0) {
                Status::Arriving { due: runs[k].0 }
            } else {
                Status::NeedLoad(
                    fates[tensor.index()]
                        .away_tier()
                        .expect("stream fates have a tier"),
                )
            }
        }
        Fate::Retain => {
            if workload.tensor(tensor).kind == TensorKind::Parameter {
                Status::Present
            } else if life.producer.is_some_and(|p| p < step)
                && (life.last_use().is_some_and(|last| step <= last) || !life.recomputable)
            {
                // Alive, or kept alive until this step (it cannot be re-run).
                Status::Present
            } else {
                // Not produced yet, or dead after its last use: re-run it
                // rather than keep it alive through the gap.
                Status::NeedRecompute
            }
        }
        Fate::OffloadHost | Fate::OffloadSsd => {
            let lag = shifts.get(tensor.index()).map_or(0, |s| s.lag);
            // The copy back for gap `k` is on its way by this step.
            let arriving = |k: usize| step + lead(k) >= life.gaps[k].before;
            // The boundary the offload finishes at (later where an earlier
            // read kept the copy).
            let done = life.gaps.first().map_or(0, |first| {
                (first.after + 1 + lag).max(lingered[tensor.index()])
            });
            match life.gaps.iter().position(|g| g.contains(step)) {
                // Still on the device while the offload runs.
                Some(0) if step < done => Status::Present,
                // A load issued here would find the copy still there: the
                // offload finishes after this step instead, where that is
                // before the copy back for the gap is issued.
                Some(0) if step == done && step + 1 + lead(0) < life.gaps[0].before => {
                    Status::Linger
                }
                Some(k) if arriving(k) => Status::Arriving {
                    due: life.gaps[k].before,
                },
                // The away copy is there: copy it in (again) for this step.
                Some(_) => Status::NeedLoad(
                    fates[tensor.index()]
                        .away_tier()
                        .expect("offload fates have a tier"),
                ),
                None => Status::Present,
            }
        }
        Fate::Recompute => match life.gap {
            Some(gap) if gap.after < step && step <= gap.before => Status::NeedRecompute,
            _ => Status::Present,
        },
    }
}

/// How a recomputation's read moves a transfer of the tensor it reads.
#[derive(Debug, Clone, Copy)]
enum Retime {
    /// The copy back due before step `due` must arrive before the read.
    Hurry { due: u32 },
    /// The offload finishing at the read's step finishes after it
    /// (`before`: where an earlier read had it finish, 0 if none).
    Linger { before: u32 },
}

/// A recomputation's read that moves a transfer: the tensor, how, and the
/// step of the read.
type Retimed = (TensorId, Retime, u32);

/// All recomputation entries, slot by slot, the transfers their reads
/// move, and the recompute-fated tensors whose recomputation could not be
/// built.
fn recomputations(
    workload: &Workload,
    lives: &Lifetimes,
    fates: &[Fate],
    shifts: &[Shift],
) -> (Vec<ScheduleEntry>, Vec<Retimed>, Vec<TensorId>) {
    let mut entries = Vec::new();
    let mut retimed = Vec::new();
    let mut failed = Vec::new();
    let mut marks = vec![0u32; workload.tensors.len()];
    let mut lingered = vec![0u32; workload.tensors.len()];
    for (step, op) in workload.ops.iter().enumerate() {
        let step = step as u32;
        let mut slot = Slot {
            step,
            done: Vec::new(),
            marks: std::mem::take(&mut marks),
            lingered: std::mem::take(&mut lingered),
            entries: Vec::new(),
            retimed: Vec::new(),
        };
        for &input in &op.inputs {
            let wanted = fates[input.index()] == Fate::Recompute
                && lives.tensors[input.index()]
                    .gap
                    .is_some_and(|g| g.before == step);
            if !wanted {
                continue;
            }
            let mark = (slot.entries.len(), slot.retimed.len(), slot.done.len());
            let mut ops_left = MAX_CASCADE_OPS;
            if !slot.materialize(workload, lives, fates, shifts, input, &mut ops_left) {
                slot.entries.truncate(mark.0);
                for (t, how) in slot.retimed.drain(mark.1..).rev() {
                    if let Retime::Linger { before } = how {
                        slot.lingered[t.index()] = before;
                    }
                }
                for t in slot.done.drain(mark.2..) {
                    slot.marks[t.index()] = 0;
                }
                failed.push(input);
            }
        }
        marks = slot.marks;
        lingered = slot.lingered;
        entries.extend(slot.entries);
        retimed.extend(slot.retimed.into_iter().map(|(t, how)| (t, how, step)));
    }
    (entries, retimed, failed)
}

struct Slot {
    step: u32,
    /// Tensors this step has made present, in order, and per tensor the
    /// step (plus one) that last did.
    done: Vec<TensorId>,
    marks: Vec<u32>,
    /// Per offloaded tensor, the boundary its offload now finishes at
    /// where reads kept its copy longer (0: none did).
    lingered: Vec<u32>,
    entries: Vec<ScheduleEntry>,
    /// Transfers this step's reads move.
    retimed: Vec<(TensorId, Retime)>,
}

impl Slot {
    fn materialize(
        &mut self,
        workload: &Workload,
        lives: &Lifetimes,
        fates: &[Fate],
        shifts: &[Shift],
        tensor: TensorId,
        ops_left: &mut usize,
    ) -> bool {
        if self.marks[tensor.index()] == self.step + 1 {
            return true;
        }
        let bytes = workload.tensor(tensor).bytes;
        match status(
            workload,
            lives,
            fates,
            shifts,
            &self.lingered,
            tensor,
            self.step,
        ) {
            Status::Present => return true,
            Status::Arriving { due } => {
                self.retimed.push((tensor, Retime::Hurry { due }));
                return true;
            }
            Status::Linger => {
                let before = self.lingered[tensor.index()];
                self.lingered[tensor.index()] = self.step + 1;
                self.retimed.push((tensor, Retime::Linger { before }));
                return true;
            }
            Status::NeedLoad(tier) => self.entries.push(load(tensor, bytes, tier, self.step)),
            Status::NeedRecompute => {
                let life = &lives.tensors[tensor.index()];
                let Some(producer) = life.producer.filter(|_| life.recomputable) else {
                    return false;
                };
                if *ops_left == 0 {
                    return false;
                }
                *ops_left -= 1;
                for &input in &workload.ops[producer as usize].inputs {
                    if !self.materialize(workload, lives, fates, shifts, input, ops_left) {
                        return false;
                    }
                }
                self.entries.push(ScheduleEntry {
                    action: Action::Recompute,
                    tensor,
                    bytes,
                    from: Tier::Hbm,
                    to: Tier::Hbm,
                    stream: Stream::Compute,
                    issue_after_step: self.step as i64 - 1,
                    done_before_step: self.step,
                    op: Some(OpId(producer)),
                });
            }
        }
        self.done.push(tensor);
        self.marks[tensor.index()] = self.step + 1;
        true
    }
}
