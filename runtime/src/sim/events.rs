//! The event loop: one compute stream, one FIFO queue per transfer stream,
//! links shared by the transfers in flight, and the tiers' bytes.
//!
//! Each server has at most one thing in progress (the compute stream one
//! operator; each transfer stream one transfer, in a latency or a flow of
//! bytes), so the calendar is a fixed set of timers: the compute stream's
//! end, each stream's latency end, and the links' next flow completion. The
//! earliest fires; ties go to flows, then latencies (stream order), then
//! compute, so that bytes freed at an instant are freed before bytes
//! allocated at the same instant.
//!
//! Order of one step, as the plan defines it: when step `s - 1` ends, the
//! transfers issued after it are issued (in schedule order); the compute
//! stream then waits for every transfer due before step `s`, runs the
//! recomputations placed before `s`, then operator `s`.

use std::collections::VecDeque;

use fateplan_planner::plan::{Action, Budgets, Fate, Plan, Stream};
use fateplan_planner::profile::{DeviceKind, Profile};
use fateplan_planner::workload::{Op, TensorKind, Workload};
use fateplan_planner::{Error as PlanError, Tier};

use super::flows::{Fluid, Link, LINKS};
use super::memory::{Context, Tiers};
use super::model::{self, Jitter, Path, Phase, MAX_PHASES, STAGING_BUFFERS};
use super::{
    LinkReport, PerLink, PerStream, Recording, SimOptions, SimReport, Slice, StreamReport, Track,
    Violation, ViolationKind, What, JITTER, SIM_REPORT_FORMAT_VERSION,
};
use crate::{Error, Result};

/// Transfer streams, in the order of [`PerStream`]: the last runs a
/// multi-GPU plan's exchanges.
pub const STREAMS: usize = 5;

/// The stream of exchanges between devices.
const EXCHANGE_STREAM: usize = 4;

fn stream_slot(stream: Stream) -> Option<usize> {
    match stream {
        Stream::H2d => Some(0),
        Stream::D2h => Some(1),
        Stream::SsdRead => Some(2),
        Stream::SsdWrite => Some(3),
        Stream::Compute => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Op(u32),
    /// A recomputation: index of its schedule entry.
    Recompute(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TouchKind {
    Create,
    Read,
    OffloadIssue,
}

/// Something that happens to a tensor's device copy, in plan order.
#[derive(Debug, Clone, Copy)]
struct Touch {
    tensor: u32,
    kind: TouchKind,
    /// The device copy is freed after this touch: no read or offload of
    /// this copy comes later.
    frees: bool,
}

/// The plan, rearranged for the event loop.
struct Prepared {
    items: Vec<Item>,
    /// First item of each step; one more entry, the number of items.
    step_first_item: Vec<u32>,
    /// Transfers issued at each boundary (before step `b`), schedule order.
    issue_start: Vec<u32>,
    issues: Vec<u32>,
    /// Transfers due at each boundary.
    due: Vec<u32>,
    touches: Vec<Touch>,
    /// Each item's touches: `touches[start..end]`.
    item_touches: Vec<(u32, u32)>,
    /// The touch of each transfer's issue (`u32::MAX` for recomputations).
    transfer_touch: Vec<u32>,
    /// Per transfer, for an offload: the last read of the device copy it
    /// moves after its issue and before it is due (a recomputation reading
    /// it while it is being moved), or `u32::MAX` where none is. The plan
    /// holds the copy until the offload is due, so the offload's end does
    /// not free it before that read.
    reads_after_offload: Vec<u32>,
    /// Per item, the input whose buffer its output takes over
    /// ([`fateplan_planner::workload::Op::adds_into`]) where the item is
    /// that copy's last read: freed as the output is made.
    handed: Vec<Option<u32>>,
    paths: Vec<Option<Path>>,
    persistent: Vec<bool>,
    uses_ssd: bool,
    /// Per boundary: the exchanges issued there, and those whose buffers
    /// are taken there.
    exchange_issues: Vec<Vec<u32>>,
    exchange_holds: Vec<Vec<u32>>,
    /// Per step: exchanges whose device (host) buffers are given back
    /// after it.
    device_releases: Vec<Vec<u32>>,
    host_releases: Vec<Vec<u32>>,
}

fn invalid(context: String, message: String) -> Error {
    Error::Planner(PlanError::InvalidInput { context, message })
}

fn prepare(plan: &Plan) -> Result<Prepared> {
    let workload = &plan.workload.definition;
    let ops = workload.ops.len();
    let n = workload.tensors.len();
    if plan.tensors.len() != n {
        return Err(invalid(
            "plan field tensors".into(),
            format!(
                "{} entries for a workload of {n} tensors",
                plan.tensors.len()
            ),
        ));
    }
    let persistent: Vec<bool> = workload
        .tensors
        .iter()
        .zip(&plan.tensors)
        .map(|(t, p)| t.kind == TensorKind::Parameter || p.fate == Fate::Resident)
        .collect();
    let mut recomputes_per_step = vec![0u32; ops];
    let mut issue_count = vec![0u32; ops + 2];
    let mut due = vec![0u32; ops + 1];
    let mut paths = Vec::with_capacity(plan.schedule.len());
    let mut uses_ssd = false;
    for (index, entry) in plan.schedule.iter().enumerate() {
        let bad = |message: String| invalid(format!("plan field schedule[{index}]"), message);
        let t = entry.tensor.index();
        if t >= n {
            return Err(bad(format!("tensor {} does not exist", entry.tensor.0)));
        }
        if entry.issue_after_step < -1
            || entry.issue_after_step >= ops as i64
            || entry.done_before_step as usize > ops
            || entry.issue_after_step + 1 > entry.done_before_step as i64
        {
            return Err(bad(format!(
                "issue_after_step {} and done_before_step {} are not an interval within \
                 -1..={ops} (a transfer must be issued before it is due)",
                entry.issue_after_step, entry.done_before_step
            )));
        }
        uses_ssd |= entry.from == Tier::Ssd || entry.to == Tier::Ssd;
        if entry.action == Action::Recompute {
            let op_ok = entry.op.is_some_and(|op| op.index() < ops);
            if !op_ok || entry.done_before_step as usize >= ops {
                return Err(bad(
                    "a recomputation needs an operator and a step to run before".into(),
                ));
            }
            if persistent[t] {
                return Err(bad(format!(
                    "recomputes {:?}, which stays on the device",
                    workload.tensors[t].name
                )));
            }
            recomputes_per_step[entry.done_before_step as usize] += 1;
            paths.push(None);
            continue;
        }
        let path = Path::of(entry).ok_or_else(|| {
            bad(format!(
                "{:?} from {} to {} is not a transfer the machine can make",
                entry.action, entry.from, entry.to
            ))
        })?;
        if stream_slot(entry.stream).is_none() {
            return Err(bad(format!("a {:?} on the compute stream", entry.action)));
        }
        if persistent[t] {
            return Err(bad(format!(
                "moves {:?}, which stays on the device",
                workload.tensors[t].name
            )));
        }
        paths.push(Some(path));
        issue_count[(entry.issue_after_step + 1) as usize] += 1;
        due[entry.done_before_step as usize] += 1;
    }

    let mut exchange_issues = vec![Vec::new(); ops + 1];
    let mut exchange_holds = vec![Vec::new(); ops + 1];
    let mut device_releases = vec![Vec::new(); ops];
    let mut host_releases = vec![Vec::new(); ops];
    for (index, e) in plan.exchanges.iter().enumerate() {
        if !e.in_order(ops) {
            return Err(invalid(
                format!("plan field exchanges[{index}]"),
                "its steps are out of order or outside the iteration".into(),
            ));
        }
        let index = index as u32;
        exchange_issues[(e.issue_after_step + 1) as usize].push(index);
        exchange_holds[e.held_from_step as usize].push(index);
        device_releases[e.held_until_step as usize].push(index);
        host_releases[e.host_held_until_step as usize].push(index);
        due[e.done_before_step as usize] += 1;
    }

    // Items: each step's recomputations (schedule order), then its operator.
    let mut step_first_item = Vec::with_capacity(ops + 1);
    let mut total = 0u32;
    for &count in &recomputes_per_step {
        step_first_item.push(total);
        total += count + 1;
    }
    step_first_item.push(total);
    let mut items = vec![Item::Op(0); total as usize];
    let mut fill: Vec<u32> = step_first_item[..ops].to_vec();
    for (index, entry) in plan.schedule.iter().enumerate() {
        if entry.action == Action::Recompute {
            let step = entry.done_before_step as usize;
            items[fill[step] as usize] = Item::Recompute(index as u32);
            fill[step] += 1;
        }
    }
    for step in 0..ops {
        items[step_first_item[step + 1] as usize - 1] = Item::Op(step as u32);
    }

    // Issues per boundary, in schedule order.
    let mut issue_start = Vec::with_capacity(ops + 2);
    let mut running = 0u32;
    for &count in &issue_count {
        issue_start.push(running);
        running += count;
    }
    issue_start.push(running);
    let mut issues = vec![0u32; running as usize];
    let mut fill: Vec<u32> = issue_start.clone();
    for (index, entry) in plan.schedule.iter().enumerate() {
        if entry.action != Action::Recompute {
            let b = (entry.issue_after_step + 1) as usize;
            issues[fill[b] as usize] = index as u32;
            fill[b] += 1;
        }
    }

    // Touches in plan order: at each boundary the issues, then the items.
    let mut touches = Vec::new();
    let mut item_touches = vec![(0u32, 0u32); items.len()];
    let mut transfer_touch = vec![u32::MAX; plan.schedule.len()];
    // The first touch of each boundary.
    let mut boundary_touch = vec![0u32; ops + 1];
    for b in 0..=ops {
        boundary_touch[b] = touches.len() as u32;
        for &index in &issues[issue_start[b] as usize..issue_start[b + 1] as usize] {
            let entry = &plan.schedule[index as usize];
            transfer_touch[index as usize] = touches.len() as u32;
            touches.push(Touch {
                tensor: entry.tensor.0,
                kind: if entry.action == Action::Offload {
                    TouchKind::OffloadIssue
                } else {
                    TouchKind::Create
                },
                frees: false,
            });
        }
        if b == ops {
            break;
        }
        for k in step_first_item[b]..step_first_item[b + 1] {
            let start = touches.len() as u32;
            let (op, outputs) = match items[k as usize] {
                Item::Op(s) => {
                    let op = &workload.ops[s as usize];
                    (op, &op.outputs[..])
                }
                Item::Recompute(index) => {
                    let entry = &plan.schedule[index as usize];
                    let op = workload.op(entry.op.expect("checked above"));
                    (op, std::slice::from_ref(&entry.tensor))
                }
            };
            let first_read = touches.len();
            for &input in &op.inputs {
                let duplicate = touches[first_read..]
                    .iter()
                    .any(|t: &Touch| t.tensor == input.0);
                if !persistent[input.index()] && !duplicate {
                    touches.push(Touch {
                        tensor: input.0,
                        kind: TouchKind::Read,
                        frees: false,
                    });
                }
            }
            for &output in outputs {
                touches.push(Touch {
                    tensor: output.0,
                    kind: TouchKind::Create,
                    frees: false,
                });
            }
            item_touches[k as usize] = (start, touches.len() as u32);
        }
    }
    // Backwards: a copy is freed after a read or creation that no read or
    // offload of the same copy follows.
    let mut next: Vec<Option<TouchKind>> = vec![None; n];
    for touch in touches.iter_mut().rev() {
        let t = touch.tensor as usize;
        touch.frees = touch.kind != TouchKind::OffloadIssue
            && !matches!(next[t], Some(TouchKind::Read | TouchKind::OffloadIssue));
        next[t] = Some(touch.kind);
    }
    let handed = items
        .iter()
        .zip(&item_touches)
        .map(|(&item, &(first, last))| {
            let op = match item {
                Item::Op(s) => &workload.ops[s as usize],
                Item::Recompute(index) => {
                    let entry = &plan.schedule[index as usize];
                    let op = workload.op(entry.op.expect("checked above"));
                    if op.outputs != [entry.tensor] {
                        return None;
                    }
                    op
                }
            };
            let input = op.inputs.get(op.adds_into? as usize)?.0;
            touches[first as usize..last as usize]
                .iter()
                .any(|t| t.tensor == input && t.kind == TouchKind::Read && t.frees)
                .then_some(input)
        })
        .collect();
    // Each tensor's touches, in order, for the reads after an offload.
    let mut of_tensor: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (index, touch) in touches.iter().enumerate() {
        of_tensor[touch.tensor as usize].push(index as u32);
    }
    let reads_after_offload = plan
        .schedule
        .iter()
        .zip(&transfer_touch)
        .map(|(entry, &issue)| {
            if entry.action != Action::Offload {
                return u32::MAX;
            }
            let due = boundary_touch[entry.done_before_step as usize];
            let mine = &of_tensor[entry.tensor.index()];
            let after = mine.partition_point(|&k| k <= issue);
            mine[after..]
                .iter()
                .take_while(|&&k| k < due && touches[k as usize].kind == TouchKind::Read)
                .last()
                .copied()
                .unwrap_or(u32::MAX)
        })
        .collect();
    Ok(Prepared {
        items,
        step_first_item,
        issue_start,
        issues,
        due,
        touches,
        item_touches,
        transfer_touch,
        reads_after_offload,
        handed,
        paths,
        persistent,
        uses_ssd,
        exchange_issues,
        exchange_holds,
        device_releases,
        host_releases,
    })
}

/// A tensor on the simulated machine.
#[derive(Debug, Clone, Copy, Default)]
struct TensorState {
    /// The device holds bytes for it (being computed or transferred, there, or leaving).
    held: bool,
    /// All its bytes are there: its operator or transfer has finished.
    arrived: bool,
    /// An offload of the device copy is in flight.
    leaving: bool,
    /// First step allowed to read it: the plan waits for its transfer before that step.
    readable_from: u32,
    /// The tier holding its away copy.
    away: Option<Tier>,
    /// The away copy is complete (its offload has finished).
    away_ready: bool,
    /// The touch (a read before the offload is due) after which the device
    /// copy is freed, where its offload ended before it.
    free_after: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Active {
    /// A schedule entry, or on the exchange stream an exchange.
    entry: u32,
    phase: u8,
    factor: f64,
    start: f64,
    /// A schedule entry's path; `None` for an exchange.
    path: Option<Path>,
}

#[derive(Debug, Clone)]
struct StreamState {
    queue: VecDeque<u32>,
    active: Option<Active>,
    delay_end: f64,
    /// Waiting for this tensor's offload to finish before the head may start.
    blocked_on: Option<u32>,
    bytes: u64,
    busy_s: f64,
    transfers: u64,
}

#[derive(Debug, Clone, Copy)]
enum Compute {
    Running {
        item: u32,
        start: f64,
        end: f64,
        /// Share of full speed since the last change (below 1 only when
        /// the CPU backend's copies share the cores).
        speed: f64,
    },
    Waiting {
        boundary: u32,
        since: f64,
        mark: f64,
    },
    Done {
        at: f64,
    },
}

struct Engine<'a> {
    plan: &'a Plan,
    workload: &'a Workload,
    profile: &'a Profile,
    prepared: Prepared,
    chunk_bytes: u64,
    tensors: Vec<TensorState>,
    streams: [StreamState; STREAMS],
    fluid: Fluid,
    /// The host's cores, on a CPU-backend profile: operators and copies
    /// share them (`model::core_share`).
    cores: Option<f64>,
    /// Streams whose transfer is moving bytes across a PCIe link or the
    /// SSD now: on a CPU backend, a lane thread at work.
    copying: [bool; STREAMS],
    tiers: Tiers,
    compute: Compute,
    /// Touches before this one belong to items that have ended.
    touched: u32,
    jitter: Jitter,
    pending_due: Vec<u32>,
    compute_s: f64,
    recompute_s: f64,
    exposed: [f64; STREAMS],
    events: u64,
    recording: Option<Recording>,
}

/// Replays `plan` on `profile` with `budgets`; records the timeline for
/// pictures when `record` is set.
pub fn run(
    plan: &Plan,
    profile: &Profile,
    budgets: &Budgets,
    options: &SimOptions,
    record: bool,
) -> Result<(SimReport, Option<Recording>)> {
    let prepared = prepare(plan)?;
    let workload = &plan.workload.definition;
    let peer = profile.peer.as_ref().map_or(0.0, |p| p.bytes_per_s);
    let capacity: [f64; LINKS] = [
        profile.pcie.h2d_bytes_per_s,
        profile.pcie.d2h_bytes_per_s,
        1.0,
        profile.host_transfer_bytes_per_s(),
        peer,
        profile.network.as_ref().map_or(0.0, |n| n.bytes_per_s),
    ];
    let stream = || StreamState {
        queue: VecDeque::new(),
        active: None,
        delay_end: f64::INFINITY,
        blocked_on: None,
        bytes: 0,
        busy_s: 0.0,
        transfers: 0,
    };
    let pending_due = prepared.due.clone();
    let mut engine = Engine {
        plan,
        workload,
        profile,
        chunk_bytes: plan.ssd_staging_bytes / STAGING_BUFFERS,
        tensors: vec![TensorState::default(); workload.tensors.len()],
        streams: [stream(), stream(), stream(), stream(), stream()],
        fluid: Fluid::new(capacity),
        cores: (profile.device.kind == DeviceKind::Cpu).then_some(profile.host.cores as f64),
        copying: [false; STREAMS],
        tiers: Tiers::new(budgets, record),
        // Before the first step; `start` decides whether it waits.
        compute: Compute::Waiting {
            boundary: 0,
            since: 0.0,
            mark: 0.0,
        },
        touched: 0,
        jitter: Jitter::new(options.seed),
        pending_due,
        compute_s: 0.0,
        recompute_s: 0.0,
        exposed: [0.0; STREAMS],
        events: 0,
        recording: record.then(|| Recording {
            slices: Vec::new(),
            links: Vec::new(),
            memory: Vec::new(),
            budgets: *budgets,
            iteration_s: 0.0,
        }),
        prepared,
    };
    engine.start();
    engine.share_cores(0.0);
    engine.run_loop()?;
    Ok(engine.finish(budgets, options))
}

impl<'a> Engine<'a> {
    fn context(&self, step: u32) -> Context<'a> {
        let workload: &'a Workload = self.workload;
        Context {
            step,
            op: workload
                .ops
                .get(step as usize)
                .map_or("end of iteration", |op| op.name.as_str()),
        }
    }

    fn name(&self, tensor: u32) -> &'a str {
        let workload: &'a Workload = self.workload;
        &workload.tensors[tensor as usize].name
    }

    fn bytes(&self, tensor: u32) -> u64 {
        self.workload.tensors[tensor as usize].bytes
    }

    fn violation(
        &mut self,
        kind: ViolationKind,
        t: f64,
        tier: Tier,
        tensor: u32,
        step: u32,
        message: String,
    ) {
        let at = self.context(step);
        self.tiers.violation(Violation {
            kind,
            time_s: t,
            tier,
            tensor: self.name(tensor).to_string(),
            bytes: self.bytes(tensor),
            budget_bytes: None,
            step,
            op: at.op.to_string(),
            message,
        });
    }

    /// What is there before the first step: parameters and resident inputs
    /// on the device, streamed inputs on their tier, SSD staging buffers.
    fn start(&mut self) {
        let at = self.context(0);
        // What the runtime holds for the whole run beside the tensors.
        let resident = self.workload.resident_bytes;
        if resident > 0 {
            self.tiers
                .alloc(0.0, Tier::Hbm, resident, "the backend's resident bytes", at);
        }
        for (index, tensor) in self.workload.tensors.iter().enumerate() {
            let fate = self.plan.tensors[index].fate;
            if self.prepared.persistent[index] {
                self.tiers
                    .alloc(0.0, Tier::Hbm, tensor.bytes, &tensor.name, at);
            } else if tensor.kind == TensorKind::Input {
                if let Some(tier) = fate.away_tier() {
                    self.tiers.alloc(0.0, tier, tensor.bytes, &tensor.name, at);
                    self.tensors[index].away = Some(tier);
                    self.tensors[index].away_ready = true;
                }
            }
        }
        if self.prepared.uses_ssd {
            let bytes = self.plan.ssd_staging_bytes;
            self.tiers
                .alloc(0.0, Tier::Host, bytes, "ssd staging buffers", at);
        }
        self.enter_boundary(0, 0.0);
    }

    fn run_loop(&mut self) -> Result<()> {
        // Every item, transfer phase and completion is one event; anything
        // beyond that bound is a bug.
        let bound = 4
            + self.prepared.items.len() as u64 * 2
            + (self.plan.schedule.len() + self.plan.exchanges.len()) as u64
                * (MAX_PHASES as u64 + 2);
        while self.events <= bound {
            let flow = self.fluid.next_completion();
            let flow_t = flow.map_or(f64::INFINITY, |(t, _)| t);
            let mut delay_t = f64::INFINITY;
            let mut delay_s = 0;
            for (s, stream) in self.streams.iter().enumerate() {
                if stream.delay_end < delay_t {
                    delay_t = stream.delay_end;
                    delay_s = s;
                }
            }
            let compute_t = match self.compute {
                Compute::Running { end, .. } => end,
                _ => f64::INFINITY,
            };
            if flow_t == f64::INFINITY && delay_t == f64::INFINITY && compute_t == f64::INFINITY {
                break;
            }
            self.events += 1;
            let t = if flow_t <= delay_t && flow_t <= compute_t {
                let s = self.fluid.finish_next().expect("a flow is due");
                self.copying[s] = false;
                self.record_links(flow_t);
                self.next_phase(s, flow_t);
                flow_t
            } else if delay_t <= compute_t {
                self.streams[delay_s].delay_end = f64::INFINITY;
                self.next_phase(delay_s, delay_t);
                delay_t
            } else {
                self.end_item(compute_t);
                compute_t
            };
            self.share_cores(t);
        }
        match self.compute {
            Compute::Done { .. } if self.streams.iter().all(|s| s.active.is_none()) => Ok(()),
            state => Err(Error::Planner(PlanError::Internal(format!(
                "the simulation stopped after {} events in state {state:?}",
                self.events
            )))),
        }
    }

    fn enter_boundary(&mut self, b: u32, t: f64) {
        let range = self.prepared.issue_start[b as usize] as usize
            ..self.prepared.issue_start[b as usize + 1] as usize;
        for k in range {
            let index = self.prepared.issues[k];
            self.issue(index, b, t);
        }
        let plan: &'a Plan = self.plan;
        let at = self.context(b);
        for k in 0..self.prepared.exchange_holds[b as usize].len() {
            let e = &plan.exchanges[self.prepared.exchange_holds[b as usize][k] as usize];
            self.tiers
                .alloc(t, Tier::Hbm, e.device_bytes, "exchange buffer", at);
            self.tiers
                .alloc(t, Tier::Host, e.host_bytes, "exchange buffer", at);
        }
        for k in 0..self.prepared.exchange_issues[b as usize].len() {
            let index = self.prepared.exchange_issues[b as usize][k];
            self.streams[EXCHANGE_STREAM].queue.push_back(index);
        }
        self.try_start(EXCHANGE_STREAM, t);
        if self.pending_due[b as usize] > 0 {
            self.compute = Compute::Waiting {
                boundary: b,
                since: t,
                mark: t,
            };
        } else {
            self.resume(b, t);
        }
    }

    fn resume(&mut self, b: u32, t: f64) {
        if let (Compute::Waiting { since, .. }, Some(rec)) = (self.compute, &mut self.recording) {
            if t > since {
                rec.slices.push(Slice {
                    track: Track::Compute,
                    start: since,
                    end: t,
                    what: What::Wait(b),
                });
            }
        }
        if b as usize == self.workload.ops.len() {
            self.compute = Compute::Done { at: t };
        } else {
            self.start_item(self.prepared.step_first_item[b as usize], t);
        }
    }

    fn item_step(&self, item: Item) -> u32 {
        match item {
            Item::Op(s) => s,
            Item::Recompute(index) => self.plan.schedule[index as usize].done_before_step,
        }
    }

    fn start_item(&mut self, k: u32, t: f64) {
        let item = self.prepared.items[k as usize];
        let step = self.item_step(item);
        let (first, last) = self.prepared.item_touches[k as usize];
        let range = first as usize..last as usize;
        for index in range {
            let touch = self.prepared.touches[index];
            let tensor = touch.tensor;
            let state = self.tensors[tensor as usize];
            match touch.kind {
                TouchKind::Read => {
                    let missing = if !state.held {
                        Some("is not on the device".to_string())
                    } else if !state.arrived {
                        Some("is still being transferred or computed".to_string())
                    } else if state.readable_from > step {
                        Some(format!(
                            "has arrived, but the plan waits for its transfer only before step {}",
                            state.readable_from
                        ))
                    } else {
                        None
                    };
                    if let Some(why) = missing {
                        let what = self.item_name(item);
                        let message = format!(
                            "at {t:.6} s {what} needs {:?} ({} bytes), which {why}",
                            self.name(tensor),
                            self.bytes(tensor)
                        );
                        self.violation(
                            ViolationKind::MissingInput,
                            t,
                            Tier::Hbm,
                            tensor,
                            step,
                            message,
                        );
                    }
                }
                TouchKind::Create => {
                    if let Some(input) = self.prepared.handed[k as usize] {
                        // The output takes over the input's buffer, unless
                        // an offload still holds that copy.
                        let copy = self.tensors[input as usize];
                        if copy.held && !copy.leaving && copy.free_after.is_none() {
                            self.free_device(input, t);
                        }
                    }
                    if !state.held {
                        let at = self.context(step);
                        self.tiers
                            .alloc(t, Tier::Hbm, self.bytes(tensor), self.name(tensor), at);
                    }
                    self.tensors[tensor as usize] = TensorState {
                        held: true,
                        arrived: false,
                        leaving: false,
                        readable_from: 0,
                        free_after: None,
                        ..state
                    };
                }
                TouchKind::OffloadIssue => unreachable!("items do not issue offloads"),
            }
        }
        let op = self.item_op(item);
        if op.scratch_bytes > 0 {
            let at = self.context(step);
            let what = format!("scratch of {}", op.name);
            self.tiers.alloc(t, Tier::Hbm, op.scratch_bytes, &what, at);
        }
        let seconds = model::op_seconds(op, &self.profile.device) * self.jitter.factor();
        // Full speed; `share_cores` slows it if copies share the cores.
        self.compute = Compute::Running {
            item: k,
            start: t,
            end: t + seconds,
            speed: 1.0,
        };
    }

    /// On a CPU backend, gives the running operator and the copies their
    /// share of the cores from time `t` (after every event): the
    /// operator's remaining work is stretched or shrunk to the new speed,
    /// and the PCIe links and the SSD (the lanes' transfers) carry their
    /// share of their capacity.
    fn share_cores(&mut self, t: f64) {
        let Some(cores) = self.cores else { return };
        let copies = self.copying.iter().filter(|&&c| c).count();
        let computing = matches!(self.compute, Compute::Running { .. });
        let share = model::core_share(cores, computing, copies);
        if let Compute::Running {
            item,
            start,
            end,
            speed,
        } = self.compute
        {
            if speed != share {
                let work = (end - t).max(0.0) * speed;
                self.compute = Compute::Running {
                    item,
                    start,
                    end: t + work / share,
                    speed: share,
                };
            }
        }
        let mut changed = false;
        for link in [Link::PcieH2d, Link::PcieD2h, Link::Ssd] {
            changed |= self.fluid.set_share(t, link, share);
        }
        if changed {
            self.record_links(t);
        }
    }

    fn item_name(&self, item: Item) -> String {
        match item {
            Item::Op(s) => format!("operator {:?}", self.workload.ops[s as usize].name),
            Item::Recompute(index) => {
                let entry = &self.plan.schedule[index as usize];
                format!("the recomputation of {:?}", self.name(entry.tensor.0))
            }
        }
    }

    /// The operator an item runs (a recomputation's, its producer).
    fn item_op(&self, item: Item) -> &'a Op {
        let workload: &'a Workload = self.workload;
        match item {
            Item::Op(s) => &workload.ops[s as usize],
            Item::Recompute(index) => {
                let op = self.plan.schedule[index as usize].op.expect("checked");
                workload.op(op)
            }
        }
    }

    fn end_item(&mut self, t: f64) {
        let Compute::Running { item: k, start, .. } = self.compute else {
            unreachable!("only a running item ends");
        };
        let item = self.prepared.items[k as usize];
        let scratch = self.item_op(item).scratch_bytes;
        self.tiers.free(t, Tier::Hbm, scratch);
        match item {
            Item::Op(_) => self.compute_s += t - start,
            Item::Recompute(_) => self.recompute_s += t - start,
        }
        if let Some(rec) = &mut self.recording {
            let what = match item {
                Item::Op(s) => What::Op(s),
                Item::Recompute(index) => What::Recompute(index),
            };
            rec.slices.push(Slice {
                track: Track::Compute,
                start,
                end: t,
                what,
            });
        }
        let (first, last) = self.prepared.item_touches[k as usize];
        self.touched = last;
        let range = first as usize..last as usize;
        for index in range.clone() {
            let touch = self.prepared.touches[index];
            if touch.kind == TouchKind::Create {
                self.tensors[touch.tensor as usize].arrived = true;
            }
        }
        for index in range {
            let touch = self.prepared.touches[index];
            let state = &mut self.tensors[touch.tensor as usize];
            let last_before_due = state.free_after == Some(index as u32);
            if last_before_due {
                state.free_after = None;
            }
            if touch.frees || last_before_due {
                self.free_device(touch.tensor, t);
            }
        }
        if let Item::Op(s) = item {
            let plan: &'a Plan = self.plan;
            for &index in &self.prepared.device_releases[s as usize] {
                let e = &plan.exchanges[index as usize];
                self.tiers.free(t, Tier::Hbm, e.device_bytes);
            }
            for &index in &self.prepared.host_releases[s as usize] {
                let e = &plan.exchanges[index as usize];
                self.tiers.free(t, Tier::Host, e.host_bytes);
            }
        }
        match item {
            Item::Op(s) => self.enter_boundary(s + 1, t),
            Item::Recompute(_) => self.start_item(k + 1, t),
        }
    }

    /// Frees a device copy unless an offload is moving it (the offload's
    /// end frees it then).
    fn free_device(&mut self, tensor: u32, t: f64) {
        let state = &mut self.tensors[tensor as usize];
        if state.held && !state.leaving {
            state.held = false;
            state.arrived = false;
            let bytes = self.workload.tensors[tensor as usize].bytes;
            self.tiers.free(t, Tier::Hbm, bytes);
        }
    }

    fn issue(&mut self, index: u32, b: u32, t: f64) {
        let entry = &self.plan.schedule[index as usize];
        let tensor = entry.tensor.0;
        let bytes = self.bytes(tensor);
        let state = self.tensors[tensor as usize];
        let at = self.context(b);
        match entry.action {
            Action::Offload => {
                if state.held && state.arrived && !state.leaving {
                    self.tensors[tensor as usize].leaving = true;
                } else {
                    let message = format!(
                        "at {t:.6} s an offload of {:?} ({bytes} bytes) is issued, but the \
                         device holds no finished copy of it",
                        self.name(tensor)
                    );
                    self.violation(ViolationKind::BadTransfer, t, Tier::Hbm, tensor, b, message);
                }
                if state.away.is_none() {
                    self.tiers.alloc(t, entry.to, bytes, self.name(tensor), at);
                    let state = &mut self.tensors[tensor as usize];
                    state.away = Some(entry.to);
                    state.away_ready = false;
                } else {
                    let message = format!(
                        "at {t:.6} s an offload of {:?} ({bytes} bytes) is issued while a copy \
                         is already away",
                        self.name(tensor)
                    );
                    self.violation(ViolationKind::BadTransfer, t, entry.to, tensor, b, message);
                }
            }
            Action::Load | Action::Reload => {
                if state.held {
                    let message = format!(
                        "at {t:.6} s a {:?} of {:?} ({bytes} bytes) is issued while the device \
                         already holds it",
                        entry.action,
                        self.name(tensor)
                    );
                    self.violation(ViolationKind::BadTransfer, t, Tier::Hbm, tensor, b, message);
                } else {
                    self.tiers.alloc(t, Tier::Hbm, bytes, self.name(tensor), at);
                }
                let state = &mut self.tensors[tensor as usize];
                state.held = true;
                state.arrived = false;
                state.leaving = false;
                state.readable_from = entry.done_before_step;
            }
            Action::Recompute => unreachable!("recomputations are items"),
        }
        let s = stream_slot(entry.stream).expect("checked");
        self.streams[s].queue.push_back(index);
        self.try_start(s, t);
    }

    fn try_start(&mut self, s: usize, t: f64) {
        if self.streams[s].active.is_some() {
            return;
        }
        let Some(&index) = self.streams[s].queue.front() else {
            return;
        };
        if s == EXCHANGE_STREAM {
            let factor = self.jitter.factor();
            let stream = &mut self.streams[s];
            stream.queue.pop_front();
            stream.active = Some(Active {
                entry: index,
                phase: 0,
                factor,
                start: t,
                path: None,
            });
            return self.run_phase(s, t);
        }
        let entry = &self.plan.schedule[index as usize];
        let tensor = entry.tensor.0;
        if entry.action != Action::Offload {
            let state = self.tensors[tensor as usize];
            match state.away {
                Some(tier) if tier == entry.from && state.away_ready => {}
                Some(tier) if tier == entry.from => {
                    // Its offload is still running: the stream waits for it.
                    self.streams[s].blocked_on = Some(tensor);
                    return;
                }
                _ => {
                    let message = format!(
                        "at {t:.6} s a {:?} of {:?} ({} bytes) starts, but {} holds no copy of it",
                        entry.action,
                        self.name(tensor),
                        entry.bytes,
                        entry.from
                    );
                    let step = (entry.issue_after_step + 1) as u32;
                    self.violation(
                        ViolationKind::BadTransfer,
                        t,
                        entry.from,
                        tensor,
                        step,
                        message,
                    );
                }
            }
        }
        let factor = self.jitter.factor();
        let path = self.prepared.paths[index as usize].expect("transfers have paths");
        let stream = &mut self.streams[s];
        stream.queue.pop_front();
        stream.blocked_on = None;
        stream.active = Some(Active {
            entry: index,
            phase: 0,
            factor,
            start: t,
            path: Some(path),
        });
        self.run_phase(s, t);
    }

    fn next_phase(&mut self, s: usize, t: f64) {
        if let Some(active) = &mut self.streams[s].active {
            active.phase += 1;
        }
        self.run_phase(s, t);
    }

    /// Starts the active transfer's current phase, skipping empty ones;
    /// completes the transfer after its last.
    fn run_phase(&mut self, s: usize, t: f64) {
        for _ in 0..=MAX_PHASES {
            let active = self.streams[s].active.expect("a transfer is active");
            let phase = match active.path {
                Some(path) => model::phase(
                    path,
                    active.phase,
                    self.plan.schedule[active.entry as usize].bytes,
                    self.chunk_bytes,
                    self.profile,
                    active.factor,
                ),
                None => {
                    let e = &self.plan.exchanges[active.entry as usize];
                    model::exchange_phase(
                        e.leg,
                        active.phase,
                        e.bytes,
                        e.network_bytes,
                        self.profile,
                        active.factor,
                    )
                }
            };
            match phase {
                None => return self.complete(s, t),
                Some(Phase::Delay(seconds)) if seconds > 0.0 => {
                    self.streams[s].delay_end = t + seconds;
                    return;
                }
                Some(Phase::Flow { bytes, usage }) if bytes > 0.0 => {
                    self.copying[s] = usage.cost[Link::PcieH2d as usize] > 0.0
                        || usage.cost[Link::PcieD2h as usize] > 0.0
                        || usage.cost[Link::Ssd as usize] > 0.0;
                    self.fluid.start(t, s, bytes, usage);
                    self.record_links(t);
                    return;
                }
                Some(_) => {
                    if let Some(active) = &mut self.streams[s].active {
                        active.phase += 1;
                    }
                }
            }
        }
        unreachable!("a transfer has at most MAX_PHASES phases");
    }

    fn complete(&mut self, s: usize, t: f64) {
        let active = self.streams[s].active.take().expect("a transfer is active");
        let index = active.entry as usize;
        if active.path.is_none() {
            let e = &self.plan.exchanges[index];
            let (bytes, due) = (e.bytes, e.done_before_step);
            return self.finished(s, t, active, bytes, due, What::Exchange(active.entry));
        }
        let entry = &self.plan.schedule[index];
        let tensor = entry.tensor.0;
        match entry.action {
            Action::Offload => {
                // A read of the device copy before the offload is due,
                // still to come (or running), frees it when it ends: the
                // plan holds the copy till then.
                let read = self.prepared.reads_after_offload[index];
                let read_to_come = read != u32::MAX && read >= self.touched;
                let state = &mut self.tensors[tensor as usize];
                if state.leaving {
                    state.leaving = false;
                    if read_to_come {
                        state.free_after = Some(read);
                    } else {
                        self.free_device(tensor, t);
                    }
                }
                let state = &mut self.tensors[tensor as usize];
                if state.away == Some(entry.to) {
                    state.away_ready = true;
                }
                for other in 0..STREAMS {
                    if self.streams[other].blocked_on == Some(tensor) {
                        self.streams[other].blocked_on = None;
                        self.try_start(other, t);
                    }
                }
            }
            Action::Load | Action::Reload => {
                let state = &mut self.tensors[tensor as usize];
                state.arrived = true;
                if entry.action == Action::Reload && state.away == Some(entry.from) {
                    state.away = None;
                    state.away_ready = false;
                    self.tiers
                        .free(t, entry.from, self.workload.tensors[tensor as usize].bytes);
                }
                let touch = self.prepared.transfer_touch[index];
                if self.prepared.touches[touch as usize].frees {
                    self.free_device(tensor, t);
                }
            }
            Action::Recompute => unreachable!("recomputations are items"),
        }
        let (bytes, due) = (entry.bytes, entry.done_before_step);
        self.finished(s, t, active, bytes, due, What::Transfer(active.entry));
    }

    /// A transfer or exchange has finished: the stream's counts, the
    /// recording, and the compute stream if it waits for it.
    fn finished(&mut self, s: usize, t: f64, active: Active, bytes: u64, due: u32, what: What) {
        let stream = &mut self.streams[s];
        stream.bytes += bytes;
        stream.busy_s += t - active.start;
        stream.transfers += 1;
        if let Some(rec) = &mut self.recording {
            rec.slices.push(Slice {
                track: Track::Stream(s as u8),
                start: active.start,
                end: t,
                what,
            });
        }
        self.pending_due[due as usize] -= 1;
        if let Compute::Waiting {
            boundary,
            since,
            mark,
        } = self.compute
        {
            if boundary == due {
                self.exposed[s] += t - mark;
                self.compute = Compute::Waiting {
                    boundary,
                    since,
                    mark: t,
                };
                if self.pending_due[due as usize] == 0 {
                    self.resume(due, t);
                }
            }
        }
        self.try_start(s, t);
    }

    fn record_links(&mut self, t: f64) {
        if let Some(rec) = &mut self.recording {
            let rates = self.fluid.link_bytes_per_s();
            match rec.links.last_mut() {
                Some(last) if last.0 == t => last.1 = rates,
                _ => rec.links.push((t, rates)),
            }
        }
    }

    fn finish(mut self, budgets: &Budgets, options: &SimOptions) -> (SimReport, Option<Recording>) {
        let Compute::Done { at } = self.compute else {
            unreachable!("checked by run_loop");
        };
        let iteration_s = at;
        let capacity = self.fluid.capacity();
        let link = |l: Link| {
            let i = l as usize;
            let possible = capacity[i] * iteration_s;
            LinkReport {
                bytes: self.fluid.bytes[i].round() as u64,
                busy_s: self.fluid.busy_s[i],
                utilisation: if possible > 0.0 {
                    self.fluid.cost_integral[i] / possible
                } else {
                    0.0
                },
            }
        };
        let links = PerLink {
            pcie_h2d: link(Link::PcieH2d),
            pcie_d2h: link(Link::PcieD2h),
            ssd: link(Link::Ssd),
            host_memory: link(Link::HostMemory),
            peer: link(Link::Peer),
            network: link(Link::Network),
        };
        let stream = |s: usize| StreamReport {
            bytes: self.streams[s].bytes,
            busy_s: self.streams[s].busy_s,
            transfers: self.streams[s].transfers,
        };
        let streams = PerStream {
            h2d: stream(0),
            d2h: stream(1),
            ssd_read: stream(2),
            ssd_write: stream(3),
            exchange: stream(EXCHANGE_STREAM),
        };
        let exposed_by_stream_s = PerStream {
            h2d: self.exposed[0],
            d2h: self.exposed[1],
            ssd_read: self.exposed[2],
            ssd_write: self.exposed[3],
            exchange: self.exposed[EXCHANGE_STREAM],
        };
        let (peak_bytes, peak_time_s) = self.tiers.peaks();
        let report = SimReport {
            format_version: SIM_REPORT_FORMAT_VERSION,
            workload: self.plan.workload.name.clone(),
            policy: self.plan.policy.clone(),
            planned_profile: self.plan.profile.name.clone(),
            profile: self.profile.name.clone(),
            seed: options.seed,
            jitter: if options.seed == 0 { 0.0 } else { JITTER },
            iteration_s,
            compute_s: self.compute_s,
            recompute_s: self.recompute_s,
            exposed_transfer_s: self.exposed.iter().sum(),
            exposed_by_stream_s,
            streams,
            links,
            peak_bytes,
            peak_time_s,
            budgets: *budgets,
            violations: std::mem::take(&mut self.tiers.violations),
            violations_total: self.tiers.violations_total,
            predicted_iteration_s: self.plan.predicted.iteration_s,
            events: self.events,
        };
        let recording = self.recording.take().map(|mut rec| {
            rec.memory = self.tiers.samples.take().unwrap_or_default();
            rec.iteration_s = iteration_s;
            rec
        });
        (report, recording)
    }
}
