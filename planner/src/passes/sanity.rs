//! Pass 6, the sanity pass: replays a plan step by step and rejects it if
//! any operator would find an input missing, any transfer would move a copy
//! that is not there, or any tier would exceed its budget.
//!
//! It runs last and only checks. It shares nothing with the passes that
//! built the plan but the workload and the schedule: it keeps its own set
//! of copies per tier, so a bug in the memory pass cannot hide behind
//! itself. Every plan is checked when made and again when loaded.

use crate::plan::{
    Action, Exchange, ExchangeKind, Fate, Leg, PerTier, Plan, ScheduleEntry, Strategy, Stream,
};
use crate::workload::{TensorKind, Workload, MAX_TENSOR_BYTES};
use crate::{units, Error, Result, Tier};

/// What the replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SanityReport {
    pub peak_bytes: PerTier<u64>,
    pub peak_step: PerTier<u32>,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// A transfer finishes (schedule index).
    Complete(usize),
    /// A transfer is issued (schedule index).
    Issue(usize),
    /// The compute stream runs a recomputation (schedule index) or an operator.
    Recompute(usize),
    Op(u32),
    /// An exchange's buffers are taken (at a boundary) or given back
    /// (after an operator); index into `Plan::exchanges`.
    Hold(usize),
    Release(usize, Tier),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Create,
    Read,
    OffloadIssue,
}

#[derive(Debug, Clone, Copy)]
struct DeviceCopy {
    /// First step at which the data may be read.
    ready_step: u32,
    offloading: bool,
}

#[derive(Debug, Clone, Copy)]
struct AwayCopy {
    tier: Tier,
    ready_step: u32,
}

/// A fate for every tensor of the workload, no more.
pub(crate) fn check_tensor_count(plan: &Plan) -> Result<()> {
    let (planned, tensors) = (plan.tensors.len(), plan.workload.definition.tensors.len());
    if planned != tensors {
        return Err(Error::invalid(
            "plan field tensors",
            format!("{planned} entries for a workload of {tensors} tensors"),
        ));
    }
    Ok(())
}

/// The plan's fates against its workload and its schedule: each fate one
/// its tensor may take, each schedule entry well formed for its tensor's
/// fate, and every fate that moves or re-runs its tensor scheduled to.
/// The part of [`check`] that does not count memory: a replay
/// (`runtime::sim`) checks it before it runs, and reports budgets itself.
pub fn check_structure(plan: &Plan) -> Result<()> {
    let workload = &plan.workload.definition;
    check_tensor_count(plan)?;
    let fates: Vec<Fate> = plan.tensors.iter().map(|t| t.fate).collect();
    check_fates(workload, &fates)?;
    for (index, entry) in plan.schedule.iter().enumerate() {
        check_entry(workload, &fates, entry, index)?;
    }
    check_fates_scheduled(workload, &fates, &plan.schedule)
}

pub fn check(plan: &Plan) -> Result<SanityReport> {
    let workload = &plan.workload.definition;
    check_structure(plan)?;
    let fates: Vec<Fate> = plan.tensors.iter().map(|t| t.fate).collect();
    if plan.gpus <= 1 && !plan.exchanges.is_empty() {
        return Err(Error::invalid(
            "plan field exchanges",
            format!(
                "{} exchanges on a plan of {} GPU: exchanges are between GPUs",
                plan.exchanges.len(),
                plan.gpus
            ),
        ));
    }
    let layers = plan.workload.model.as_ref().map(|m| m.layers);
    for (index, exchange) in plan.exchanges.iter().enumerate() {
        check_exchange(workload, exchange, index, layers)?;
    }
    let script = script(workload.ops.len(), &plan.schedule, &plan.exchanges);
    Replay::new(plan, &fates, &script).run(&script)
}

/// An exchange's steps lie in the iteration, in order; its sizes are
/// sizes; its leg is one of its strategy's; its layer is one of the
/// model's (`layers`, where the plan records its model).
fn check_exchange(
    workload: &Workload,
    e: &Exchange,
    index: usize,
    layers: Option<u32>,
) -> Result<()> {
    let field = |name: &str| format!("plan field exchanges[{index}].{name}");
    for (name, bytes) in [
        ("bytes", e.bytes),
        ("network_bytes", e.network_bytes),
        ("device_bytes", e.device_bytes),
        ("host_bytes", e.host_bytes),
    ] {
        if bytes > MAX_TENSOR_BYTES {
            return Err(Error::invalid(
                field(name),
                format!(
                    "{bytes} is over the most one exchange may hold, {MAX_TENSOR_BYTES} (1 PiB)"
                ),
            ));
        }
    }
    let leg_fits = match e.strategy {
        Strategy::Peer => e.leg == Leg::Peer,
        Strategy::Host => matches!(e.leg, Leg::ToHost | Leg::FromHost),
    };
    if !leg_fits || e.kind == ExchangeKind::AllReduce && e.strategy != Strategy::Peer {
        return Err(Error::invalid(
            field("leg"),
            format!(
                "{} with strategy {} on a {} exchange: peer moves on the peer leg, host on \
                 to_host and from_host, and the all-reduce is peer",
                e.leg.name(),
                e.strategy.name(),
                e.kind.name()
            ),
        ));
    }
    if let Some(layers) = layers.filter(|&l| !(1..=l).contains(&e.layer)) {
        return Err(Error::invalid(
            field("layer"),
            format!("{}: the model has layers 1 to {layers}", e.layer),
        ));
    }
    let steps = workload.ops.len();
    if e.in_order(steps) {
        Ok(())
    } else {
        Err(Error::invalid(
            format!("plan field exchanges[{index}]"),
            format!(
                "issue after step {}, done before step {}, held over steps {}..={}, {} of {} bytes over the network: \
                 out of order or outside the {steps} steps",
                e.issue_after_step,
                e.done_before_step,
                e.held_from_step,
                e.held_until_step,
                e.network_bytes,
                e.bytes
            ),
        ))
    }
}

fn reject(workload: &Workload, step: u32, message: String) -> Error {
    let op = workload
        .ops
        .get(step as usize)
        .map(|o| o.name.clone())
        .unwrap_or_else(|| "end of iteration".into());
    Error::PlanRejected { step, op, message }
}

fn check_fates(workload: &Workload, fates: &[Fate]) -> Result<()> {
    for (tensor, &fate) in workload.tensors.iter().zip(fates) {
        let allowed = match tensor.kind {
            TensorKind::Input => {
                matches!(fate, Fate::Resident | Fate::StreamHost | Fate::StreamSsd)
            }
            TensorKind::Parameter => fate == Fate::Resident,
            _ => matches!(
                fate,
                Fate::Retain | Fate::OffloadHost | Fate::OffloadSsd | Fate::Recompute
            ),
        };
        if !allowed {
            return Err(Error::invalid(
                format!("plan field tensors[{}].fate", tensor.id.0),
                format!(
                    "{fate} is not a fate for {} tensor {:?}",
                    tensor.kind, tensor.name
                ),
            ));
        }
    }
    Ok(())
}

/// Every fate that moves or re-runs its tensor has the entries that do
/// it: a recomputation, an offload, a load. (Without them the replay
/// keeps the tensor where it was, and a plan whose schedule was cut
/// would pass for one that follows its fates.) And the recomputations
/// follow the fates: the replay drops a device copy after its last read
/// before it is made again, whatever the fate says, so a fate edited
/// from `recompute` to `retain` (or back) would be ignored. A `recompute`
/// tensor is re-run for a read of its own life (after its producer, by
/// its last read); a `retain`ed one is never re-run there (it may be
/// before its producer or after its last read, for a recomputation that
/// reads it); no other fate is re-run.
fn check_fates_scheduled(
    workload: &Workload,
    fates: &[Fate],
    schedule: &[ScheduleEntry],
) -> Result<()> {
    // Each tensor's producing step and last reading step.
    let n = workload.tensors.len();
    let (mut producer, mut last_read) = (vec![None; n], vec![None; n]);
    for (step, op) in workload.ops.iter().enumerate() {
        for input in &op.inputs {
            last_read[input.index()] = Some(step as u32);
        }
        for output in &op.outputs {
            producer[output.index()].get_or_insert(step as u32);
        }
    }
    let in_life = |t: usize, step: u32| {
        producer[t].is_some_and(|p| p < step) && last_read[t].is_some_and(|last| step <= last)
    };
    let mut done = vec![[false; 3]; fates.len()];
    for entry in schedule {
        let t = entry.tensor.index();
        let slot = match entry.action {
            Action::Recompute => 0,
            Action::Offload => 1,
            Action::Load | Action::Reload => 2,
        };
        if entry.action != Action::Recompute {
            done[t][slot] = true;
            continue;
        }
        let (fate, step) = (fates[t], entry.done_before_step);
        let why = match fate {
            Fate::Recompute => {
                done[t][slot] |= in_life(t, step);
                continue;
            }
            Fate::Retain if !in_life(t, step) => continue,
            Fate::Retain => {
                "a retained tensor stays on the device from its producer to its last \
                 read; re-run there, it is recomputed: give it fate recompute, or leave the \
                 entry out"
            }
            _ => {
                "only recomputed tensors, and retained ones before their producer or after \
                  their last read, are re-run"
            }
        };
        let before = workload
            .ops
            .get(step as usize)
            .map_or_else(|| "the end".to_string(), |op| format!("{:?}", op.name));
        return Err(Error::invalid(
            format!("plan field tensors[{t}].fate"),
            format!(
                "{fate} for {:?}, but the schedule re-runs it before step {step} ({before}): {why}",
                workload.tensors[t].name
            ),
        ));
    }
    for (tensor, (&fate, [recomputed, offloaded, loaded])) in
        workload.tensors.iter().zip(fates.iter().zip(&done))
    {
        let missing = match fate {
            Fate::Recompute if !recomputed => {
                "recompute of it for a read after its producer, by its last read"
            }
            Fate::OffloadHost | Fate::OffloadSsd if !offloaded => "offload of it",
            Fate::StreamHost | Fate::StreamSsd if !loaded => "load of it",
            _ => continue,
        };
        return Err(Error::invalid(
            format!("plan field tensors[{}].fate", tensor.id.0),
            format!(
                "{fate} for {:?}, but the schedule has no {missing}",
                tensor.name
            ),
        ));
    }
    Ok(())
}

fn check_entry(
    workload: &Workload,
    fates: &[Fate],
    entry: &ScheduleEntry,
    index: usize,
) -> Result<()> {
    let steps = workload.ops.len() as u32;
    let bad = |message: String| Error::invalid(format!("plan field schedule[{index}]"), message);
    let tensor = workload
        .tensors
        .get(entry.tensor.index())
        .ok_or_else(|| bad(format!("tensor {} does not exist", entry.tensor.0)))?;
    let fate = fates[entry.tensor.index()];
    if entry.bytes != tensor.bytes {
        return Err(bad(format!(
            "bytes {} but tensor {:?} has {}",
            entry.bytes, tensor.name, tensor.bytes
        )));
    }
    if entry.issue_after_step < -1
        || entry.issue_after_step + 1 > entry.done_before_step as i64
        || entry.done_before_step > steps
    {
        return Err(bad(format!(
            "issue_after_step {} and done_before_step {} are not an interval within \
             -1..={steps} (a transfer must be issued before it is due)",
            entry.issue_after_step, entry.done_before_step
        )));
    }
    if entry.action != Action::Recompute && entry.issue_after_step + 1 >= steps as i64 {
        return Err(bad(format!(
            "a transfer issued after the last step ({})",
            entry.issue_after_step
        )));
    }
    let expected = match entry.action {
        Action::Offload => {
            let ok = matches!(fate, Fate::OffloadHost | Fate::OffloadSsd)
                && fate.away_tier() == Some(entry.to);
            (
                ok && entry.from == Tier::Hbm,
                if entry.to == Tier::Ssd {
                    Stream::SsdWrite
                } else {
                    Stream::D2h
                },
            )
        }
        Action::Reload => {
            let ok = matches!(fate, Fate::OffloadHost | Fate::OffloadSsd)
                && fate.away_tier() == Some(entry.from);
            (
                ok && entry.to == Tier::Hbm,
                if entry.from == Tier::Ssd {
                    Stream::SsdRead
                } else {
                    Stream::H2d
                },
            )
        }
        Action::Load => {
            let ok = matches!(
                fate,
                Fate::StreamHost | Fate::StreamSsd | Fate::OffloadHost | Fate::OffloadSsd
            ) && fate.away_tier() == Some(entry.from);
            (
                ok && entry.to == Tier::Hbm,
                if entry.from == Tier::Ssd {
                    Stream::SsdRead
                } else {
                    Stream::H2d
                },
            )
        }
        Action::Recompute => {
            let op = entry.op.and_then(|o| workload.ops.get(o.index()));
            let ok = op.is_some_and(|op| op.outputs == [entry.tensor])
                && entry.issue_after_step + 1 == entry.done_before_step as i64
                && entry.done_before_step < steps
                && entry.from == Tier::Hbm
                && entry.to == Tier::Hbm;
            (ok, Stream::Compute)
        }
    };
    if !expected.0 {
        return Err(bad(format!(
            "{} of {:?} (fate {fate}) from {} to {} is not consistent with its fate or operator",
            entry.action.name(),
            tensor.name,
            entry.from,
            entry.to
        )));
    }
    if entry.stream != expected.1 {
        return Err(bad(format!(
            "{} of {:?} runs on stream {}, expected {}",
            entry.action.name(),
            tensor.name,
            entry.stream.name(),
            expected.1.name()
        )));
    }
    Ok(())
}

/// Everything that happens, in order: at each step's boundary, issues then
/// completions (a transfer may be issued and due at the same boundary); then
/// the step's recomputations and its operator.
fn script(steps: usize, schedule: &[ScheduleEntry], exchanges: &[Exchange]) -> Vec<(u32, Event)> {
    let mut holds: Vec<Vec<usize>> = vec![Vec::new(); steps + 1];
    let mut releases: Vec<Vec<Event>> = vec![Vec::new(); steps + 1];
    for (index, e) in exchanges.iter().enumerate() {
        holds[e.held_from_step as usize].push(index);
        releases[e.held_until_step as usize].push(Event::Release(index, Tier::Hbm));
        releases[e.host_held_until_step as usize].push(Event::Release(index, Tier::Host));
    }
    let mut completes: Vec<Vec<usize>> = vec![Vec::new(); steps + 1];
    let mut issues: Vec<Vec<usize>> = vec![Vec::new(); steps + 1];
    let mut recomputes: Vec<Vec<usize>> = vec![Vec::new(); steps + 1];
    for (index, entry) in schedule.iter().enumerate() {
        if entry.action == Action::Recompute {
            recomputes[entry.done_before_step as usize].push(index);
        } else {
            completes[entry.done_before_step as usize].push(index);
            issues[(entry.issue_after_step + 1) as usize].push(index);
        }
    }
    let mut events = Vec::new();
    for step in 0..=steps {
        let s = step as u32;
        events.extend(issues[step].iter().map(|&i| (s, Event::Issue(i))));
        events.extend(holds[step].iter().map(|&i| (s, Event::Hold(i))));
        events.extend(completes[step].iter().map(|&i| (s, Event::Complete(i))));
        if step < steps {
            events.extend(recomputes[step].iter().map(|&i| (s, Event::Recompute(i))));
            events.push((s, Event::Op(s)));
            events.extend(releases[step].iter().map(|&event| (s, event)));
        }
    }
    events
}

struct Replay<'a> {
    plan: &'a Plan,
    workload: &'a Workload,
    persistent: Vec<bool>,
    device: Vec<Option<DeviceCopy>>,
    away: Vec<Option<AwayCopy>>,
    /// Per tensor: its touches in order, and how many have happened.
    touches: Vec<Vec<Touch>>,
    cursor: Vec<usize>,
    used: PerTier<u64>,
    peak: PerTier<u64>,
    peak_step: PerTier<u32>,
}

impl<'a> Replay<'a> {
    fn new(plan: &'a Plan, fates: &[Fate], script: &[(u32, Event)]) -> Self {
        let workload = &plan.workload.definition;
        let n = workload.tensors.len();
        let mut used = PerTier::<u64>::default();
        // What the runtime holds for the whole run beside the tensors.
        used.hbm += workload.resident_bytes;
        let mut persistent = vec![false; n];
        for (tensor, &fate) in workload.tensors.iter().zip(fates) {
            if fate == Fate::Resident {
                persistent[tensor.id.index()] = true;
                used.hbm += tensor.bytes;
            } else if tensor.kind == TensorKind::Input {
                *used.get_mut(fate.away_tier().expect("inputs are resident or streamed")) +=
                    tensor.bytes;
            }
        }
        let uses_ssd = plan
            .schedule
            .iter()
            .any(|e| e.from == Tier::Ssd || e.to == Tier::Ssd);
        if uses_ssd {
            used.host += plan.ssd_staging_bytes;
        }
        let mut touches: Vec<Vec<Touch>> = vec![Vec::new(); n];
        for &(_, event) in script {
            match event {
                Event::Complete(_) | Event::Hold(_) | Event::Release(..) => {}
                Event::Issue(index) => {
                    let entry = &plan.schedule[index];
                    let touch = if entry.action == Action::Offload {
                        Touch::OffloadIssue
                    } else {
                        Touch::Create
                    };
                    touches[entry.tensor.index()].push(touch);
                }
                Event::Recompute(index) => {
                    let entry = &plan.schedule[index];
                    let op = workload.op(entry.op.expect("checked"));
                    for input in distinct(&op.inputs) {
                        touches[input.index()].push(Touch::Read);
                    }
                    touches[entry.tensor.index()].push(Touch::Create);
                }
                Event::Op(step) => {
                    let op = &workload.ops[step as usize];
                    for input in distinct(&op.inputs) {
                        touches[input.index()].push(Touch::Read);
                    }
                    for output in &op.outputs {
                        touches[output.index()].push(Touch::Create);
                    }
                }
            }
        }
        Replay {
            plan,
            workload,
            persistent,
            device: vec![None; n],
            away: vec![None; n],
            touches,
            cursor: vec![0; n],
            used,
            peak: PerTier::default(),
            peak_step: PerTier::default(),
        }
    }

    fn name(&self, tensor: usize) -> &str {
        &self.workload.tensors[tensor].name
    }

    fn bytes(&self, tensor: usize) -> u64 {
        self.workload.tensors[tensor].bytes
    }

    /// Moves past this tensor's next touch; returns the one after it.
    fn advance(&mut self, tensor: usize) -> Option<Touch> {
        self.cursor[tensor] += 1;
        self.touches[tensor].get(self.cursor[tensor]).copied()
    }

    fn free_device(&mut self, tensor: usize) {
        self.device[tensor] = None;
        self.used.hbm -= self.bytes(tensor);
    }

    fn run(mut self, script: &[(u32, Event)]) -> Result<SanityReport> {
        for &(step, event) in script {
            match event {
                Event::Complete(index) => self.complete(step, index)?,
                Event::Issue(index) => {
                    self.issue(step, index)?;
                    // The buffers issued at a boundary exist while the
                    // transfers due there still hold theirs.
                    let entry = &self.plan.schedule[index];
                    let what = format!(
                        "at the boundary before step {step}, once the {} of {:?} is issued",
                        entry.action.name(),
                        self.name(entry.tensor.index())
                    );
                    self.account(step, &what)?;
                }
                Event::Recompute(index) => {
                    let entry = &self.plan.schedule[index];
                    let op = self.workload.op(entry.op.expect("checked"));
                    self.execute(
                        step,
                        op,
                        &format!("recomputation of {:?}", self.name(entry.tensor.index())),
                    )?;
                }
                Event::Hold(index) => {
                    let e = &self.plan.exchanges[index];
                    self.used.hbm += e.device_bytes;
                    self.used.host += e.host_bytes;
                    let what = format!(
                        "at the boundary before step {step}, once the buffers of exchange {index} are held"
                    );
                    self.account(step, &what)?;
                }
                Event::Release(index, tier) => {
                    let e = &self.plan.exchanges[index];
                    match tier {
                        Tier::Hbm => self.used.hbm -= e.device_bytes,
                        _ => self.used.host -= e.host_bytes,
                    }
                }
                Event::Op(s) => {
                    let op = &self.workload.ops[s as usize];
                    self.execute(step, op, &format!("operator {:?}", op.name))?;
                }
            }
        }
        Ok(SanityReport {
            peak_bytes: self.peak,
            peak_step: self.peak_step,
        })
    }

    fn complete(&mut self, step: u32, index: usize) -> Result<()> {
        let entry = &self.plan.schedule[index];
        let t = entry.tensor.index();
        match entry.action {
            Action::Offload => match self.device[t] {
                Some(copy) if copy.offloading => self.free_device(t),
                _ => {
                    return Err(reject(
                        self.workload,
                        step,
                        format!(
                            "offload of {:?} finishes but no device copy is leaving",
                            self.name(t)
                        ),
                    ))
                }
            },
            Action::Reload => match self.away[t] {
                Some(away) if away.tier == entry.from => {
                    self.away[t] = None;
                    *self.used.get_mut(away.tier) -= entry.bytes;
                }
                _ => {
                    return Err(reject(
                        self.workload,
                        step,
                        format!(
                            "reload of {:?} finishes but {} holds no copy",
                            self.name(t),
                            entry.from
                        ),
                    ))
                }
            },
            Action::Load | Action::Recompute => {}
        }
        Ok(())
    }

    fn issue(&mut self, step: u32, index: usize) -> Result<()> {
        let entry = &self.plan.schedule[index];
        let t = entry.tensor.index();
        let name = self.name(t).to_string();
        match entry.action {
            Action::Offload => {
                match self.device[t] {
                    Some(copy) if !copy.offloading && copy.ready_step <= step => {}
                    _ => {
                        return Err(reject(
                            self.workload,
                            step,
                            format!(
                                "offload of {name:?} issued but the device holds no finished copy"
                            ),
                        ))
                    }
                }
                if self.away[t].is_some() {
                    return Err(reject(
                        self.workload,
                        step,
                        format!("offload of {name:?} issued while a copy is already away"),
                    ));
                }
                self.device[t] = self.device[t].map(|c| DeviceCopy {
                    offloading: true,
                    ..c
                });
                self.away[t] = Some(AwayCopy {
                    tier: entry.to,
                    ready_step: entry.done_before_step,
                });
                *self.used.get_mut(entry.to) += entry.bytes;
                self.advance(t);
            }
            Action::Reload | Action::Load => {
                if self.device[t].is_some() || self.persistent[t] {
                    return Err(reject(
                        self.workload,
                        step,
                        format!(
                            "{} of {name:?} issued while the device already holds it",
                            entry.action.name()
                        ),
                    ));
                }
                if entry.action == Action::Reload
                    || self.workload.tensors[t].kind != TensorKind::Input
                {
                    match self.away[t] {
                        Some(away) if away.tier == entry.from && away.ready_step <= step => {}
                        _ => {
                            return Err(reject(
                                self.workload,
                                step,
                                format!(
                                    "reload of {name:?} issued but {} holds no finished copy",
                                    entry.from
                                ),
                            ))
                        }
                    }
                }
                self.device[t] = Some(DeviceCopy {
                    ready_step: entry.done_before_step,
                    offloading: false,
                });
                self.used.hbm += entry.bytes;
                if self.advance(t) != Some(Touch::Read) {
                    return Err(reject(
                        self.workload,
                        step,
                        format!("{} of {name:?} is never read", entry.action.name()),
                    ));
                }
            }
            Action::Recompute => {}
        }
        Ok(())
    }

    /// Runs `op` at `step`: its inputs must be on the device and ready;
    /// its outputs and its scratch are counted while it runs.
    fn execute(&mut self, step: u32, op: &crate::workload::Op, what: &str) -> Result<()> {
        let (inputs, outputs) = (distinct(&op.inputs), &op.outputs);
        for &input in &inputs {
            let t = input.index();
            if self.persistent[t] {
                continue;
            }
            match self.device[t] {
                Some(copy) if copy.ready_step <= step => {}
                Some(copy) => {
                    return Err(reject(
                        self.workload,
                        step,
                        format!(
                            "{what} reads {:?}, whose transfer is only done before step {}",
                            self.name(t),
                            copy.ready_step
                        ),
                    ))
                }
                None => {
                    return Err(reject(
                        self.workload,
                        step,
                        format!(
                            "{what} reads {:?}, which is not on the device",
                            self.name(t)
                        ),
                    ))
                }
            }
        }
        // An input the operator adds into in place, read here for the
        // last time and held by no offload: its output takes the buffer.
        let handed = op
            .adds_into
            .and_then(|k| op.inputs.get(k as usize))
            .map(|t| t.index())
            .filter(|&t| {
                !self.persistent[t]
                    && self.device[t].is_some_and(|c| !c.offloading)
                    && !matches!(
                        self.touches[t].get(self.cursor[t] + 1),
                        Some(Touch::Read | Touch::OffloadIssue)
                    )
            });
        if let Some(t) = handed {
            self.used.hbm -= self.bytes(t);
        }
        for &output in outputs {
            let t = output.index();
            if self.device[t].is_some() {
                return Err(reject(
                    self.workload,
                    step,
                    format!(
                        "{what} produces {:?} while a copy is on the device",
                        self.name(t)
                    ),
                ));
            }
            self.device[t] = Some(DeviceCopy {
                ready_step: step,
                offloading: false,
            });
            self.used.hbm += self.bytes(t);
        }
        self.used.hbm += op.scratch_bytes;
        let during = match op.scratch_bytes {
            0 => format!("during {what}"),
            bytes => format!(
                "during {what}, with its {} of scratch",
                units::count(bytes, "byte")
            ),
        };
        self.account(step, &during)?;
        self.used.hbm -= op.scratch_bytes;

        for &input in &inputs {
            let t = input.index();
            if self.persistent[t] {
                continue;
            }
            let next = self.advance(t);
            if handed == Some(t) {
                // Counted as the output's already.
                self.device[t] = None;
                continue;
            }
            let leaving = self.device[t].is_some_and(|c| c.offloading);
            if !leaving && !matches!(next, Some(Touch::Read) | Some(Touch::OffloadIssue)) {
                self.free_device(t);
            }
        }
        for &output in outputs {
            let t = output.index();
            if !matches!(
                self.advance(t),
                Some(Touch::Read) | Some(Touch::OffloadIssue)
            ) {
                self.free_device(t);
            }
        }
        Ok(())
    }
}

impl Replay<'_> {
    /// Checks every tier against its budget and records the peaks.
    fn account(&mut self, step: u32, when: &str) -> Result<()> {
        for tier in [Tier::Hbm, Tier::Host, Tier::Ssd] {
            let used = self.used.get(tier);
            let budget = self.plan.budgets.of(tier);
            if used > budget {
                return Err(reject(
                    self.workload,
                    step,
                    format!(
                        "{tier} holds {} {when}, over its budget of {} by {}",
                        units::count(used, "byte"),
                        units::count(budget, "byte"),
                        units::count(used - budget, "byte")
                    ),
                ));
            }
            if used > self.peak.get(tier) {
                *self.peak.get_mut(tier) = used;
                let last = self.workload.ops.len().saturating_sub(1) as u32;
                *self.peak_step.get_mut(tier) = step.min(last);
            }
        }
        Ok(())
    }
}

fn distinct(ids: &[crate::TensorId]) -> Vec<crate::TensorId> {
    let mut seen = Vec::with_capacity(ids.len());
    for &id in ids {
        if !seen.contains(&id) {
            seen.push(id);
        }
    }
    seen
}
