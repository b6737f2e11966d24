//! The executor: runs a plan's schedule over a backend, for real.
//!
//! It walks the plan's timeline (for each step, the recomputations placed
//! before it, then its operator). At every position it
//!
//! 1. releases the copies whose lives ended with the previous item,
//! 2. charges the buffers of the transfers issued after the previous step
//!    and issues them,
//! 3. waits for the transfers the plan says are done by this step, and
//!    releases the copies they held,
//! 4. charges the copies the item creates, and
//! 5. runs the position's operator or recomputation on the backend.
//!
//! Steps 1 and 2 are the position's boundary slot, 3 to 5 its item slot,
//! as the planner's memory pass counts them: the buffers issued at a
//! boundary and the copies of the transfers due there are charged together.
//! A device copy remembers the slot its life started at, so that the end
//! of an older life never drops a newer copy of the same tensor.
//!
//! The lives are the planner's own definition
//! ([`fateplan_planner::passes::memory::copy_lives`]), so the arenas hold
//! exactly what the planner counted, and each arena refuses a charge past
//! its budget: a run cannot exceed a budget without failing loudly.
//! Transfers run on their own threads ([`lanes`]), one per stream, and
//! overlap compute; the compute thread waits on each explicitly.
//!
//! Architecture invariant: the executor knows nothing about GNNs. What an
//! operator computes is the [`Backend`]'s business.

pub mod arena;
pub mod data;
pub mod lanes;
pub mod trace;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use fateplan_planner::passes::memory::{boundary_slot, copy_lives, item_slot, slot_count};
use fateplan_planner::passes::timeline::{Item, Timeline};
use fateplan_planner::plan::{Action, Budgets, Fate, LinkBytes, PerTier, Plan, Stream};
use fateplan_planner::units::bytes_exact;
use fateplan_planner::workload::{Op, Tensor, TensorKind, Workload};
use fateplan_planner::Tier;

use arena::Arena;
pub use data::Data;
use lanes::{Lane, Pending, Span};

/// What can go wrong while executing a plan. More variants may come: a
/// `match` on it needs a wildcard arm.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    #[error(
        "{tier} arena over budget: {what} would need {}, budget {}",
        bytes_exact(*.needed_bytes),
        bytes_exact(*.budget_bytes)
    )]
    OverBudget {
        tier: Tier,
        what: String,
        needed_bytes: u64,
        budget_bytes: u64,
    },
    #[error(
        "the plan needs {} of {tier} at its peak; the budget is {}",
        bytes_exact(*.needed_bytes),
        bytes_exact(*.budget_bytes)
    )]
    PlanTooBig {
        tier: Tier,
        needed_bytes: u64,
        budget_bytes: u64,
    },
    #[error("step {step} ({op}) needs tensor {tensor}, which is not on the device")]
    Absent {
        step: u32,
        op: String,
        tensor: String,
    },
    #[error("{tensor} holds {actual_bytes} bytes but the plan charges {planned_bytes}")]
    Undersized {
        tensor: String,
        actual_bytes: u64,
        planned_bytes: u64,
    },
    /// The plan fails its own checks (`Plan::validate`): the planner's
    /// error, whole, so that a caller can match it; it is the
    /// [`std::error::Error::source`] too, so that a caller walking an
    /// error's chain finds it.
    #[error("the plan does not check out: {0}")]
    InvalidPlan(#[source] fateplan_planner::Error),
    /// The plan uses the SSD tier and the run has none: `--spill-dir` on
    /// the command line, [`crate::train::TrainRun::ssd`] in the library
    /// (a store [`crate::train::open_spill`] opens).
    #[error(
        "the plan uses the SSD tier but no spill store was given (`--spill-dir DIR` on the \
         command line; in the library, `TrainRun::ssd`, a store `train::open_spill` opens)"
    )]
    NoSsd,
    /// The SSD tier failed: its store's error, whole (the spill store's
    /// is a [`crate::Error`]: `SpillBlockIo`, `SpillChecksum`,
    /// `ResourcesExhausted`, ...), to downcast and match
    /// (`inner.downcast_ref::<fateplan_runtime::Error>()`); it is the
    /// [`std::error::Error::source`] too. [`ExecError::ssd`] makes one.
    #[error("ssd tier: {0}")]
    Ssd(#[source] Arc<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Kernel(String),
    /// What the run was given does not hold together: the hyper-parameters
    /// (against themselves or those the model was prepared with), the
    /// epochs, a plan made for another workload, a backend that cannot
    /// run it. Nothing ran. `field` names what was given (`epochs`,
    /// `train_mask`, `plan`, `hyper-parameter lr` and the other two,
    /// `hyper-parameters` where they differ from those prepared, ...),
    /// `message` what is wrong with it.
    #[error("{field}: {message}")]
    InvalidInput { field: String, message: String },
    /// A collective between the devices of a multi-device run.
    #[error("exchange between devices: {0}")]
    Exchange(String),
    /// A member of a group of processes ([`crate::collective::Hub`])
    /// stopped the group: it failed with the error `why` says (its own
    /// message), or its connection did.
    #[error("member {rank} failed: {why}")]
    MemberFailed { rank: usize, why: String },
    /// The CUDA backend: a missing library or device, or a driver error.
    #[error("cuda: {0}")]
    Cuda(String),
    /// A thread the run needs could not be started: the process's limits
    /// (its address space, its processes) leave no room for it.
    #[error("{0}")]
    Threads(String),
    /// A run that cannot fit in the memory the process can still take,
    /// refused before it starts ([`crate::train::check_memory`]): what
    /// it takes against what is left (`short`), and what would fit
    /// (`advice`); the bytes it takes at least (`needed_bytes`) and
    /// those it could take (`available_bytes`).
    #[error("{short}; {advice}")]
    OverMemory {
        short: String,
        advice: String,
        needed_bytes: u64,
        available_bytes: u64,
    },
    /// The allocator had not the memory for a buffer the run needed (a
    /// tensor of `bytes`, made by or for what `during` names): the
    /// process's memory ran out before the run ended, beyond the check
    /// made before it started ([`crate::train::check_memory`]: the
    /// allocator's own room and the kernels' buffers come on top of the
    /// plan's peak). The run stops with this error rather than the
    /// process with `memory allocation of N bytes failed`.
    #[error(
        "{}: the run takes more than this process has left (the plan's tiers, its kernels' \
         buffers and the allocator's own room); plan under smaller budgets (--hbm-budget and \
         --host-budget: what does not fit is recomputed, or spilled to the SSD tier with \
         --spill-dir), or free memory, or raise its limit",
        unallocated(*.bytes, .during.as_deref())
    )]
    OutOfMemory { bytes: u64, during: Option<String> },
    #[error("internal error (a bug in fateplan): {0}")]
    Internal(String),
}

/// "out of memory: 33.0 MiB for step 141 (attention_bwd[l1,p2,d0]) could
/// not be allocated": what [`ExecError::OutOfMemory`] says before its
/// advice, which suits a training run (a run of the profile's
/// measurements gives its own, [`crate::Error::Run`]).
pub(crate) fn unallocated(bytes: u64, during: Option<&str>) -> String {
    format!(
        "out of memory: {} for {} could not be allocated",
        fateplan_planner::units::format_bytes(bytes),
        during.unwrap_or("a tensor")
    )
}

impl ExecError {
    /// [`ExecError::OutOfMemory`] of a buffer of `bytes`, not yet placed.
    pub fn out_of_memory(bytes: u64) -> ExecError {
        ExecError::OutOfMemory {
            bytes,
            during: None,
        }
    }

    /// This error, an [`ExecError::OutOfMemory`] not yet placed said to
    /// come `during` what is named (`step 12 (agg[l1,p0,s1])`, `the copy
    /// of h[l1,p0] to the host`); any other error as it is.
    pub fn during(self, what: impl FnOnce() -> String) -> ExecError {
        match self {
            ExecError::OutOfMemory {
                bytes,
                during: None,
            } => ExecError::OutOfMemory {
                bytes,
                during: Some(what()),
            },
            other => other,
        }
    }

    /// [`ExecError::InvalidInput`] of `field` and what is wrong with it.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ExecError {
        ExecError::InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A kernel's error, `what` naming the work it did: a buffer it could
    /// not allocate is [`ExecError::OutOfMemory`] during `what`, any other
    /// error [`ExecError::Kernel`].
    pub fn of_kernel(error: fateplan_kernels::Error, what: impl FnOnce() -> String) -> ExecError {
        match error {
            fateplan_kernels::Error::OutOfMemory {
                bytes,
                what: buffer,
            } => ExecError::out_of_memory(bytes).during(|| format!("{} ({buffer})", what())),
            other => ExecError::Kernel(format!("{}: {other}", what())),
        }
    }

    /// [`ExecError::Ssd`] of an SSD tier's own error.
    pub fn ssd(error: impl std::error::Error + Send + Sync + 'static) -> ExecError {
        ExecError::Ssd(Arc::new(error))
    }
}

/// Moves a tensor's contents between the device and the host. The
/// executor calls it from the transfer lanes' threads.
pub trait Mover: Send + Sync {
    /// The host tier's copy of device contents (may stay held by the
    /// backend, in pinned buffers for instance).
    fn to_host(&self, data: &Data) -> Result<Data, ExecError>;
    /// Plain contents (`F32`, `I64` or `Block`), for the SSD tier and for
    /// reading results.
    fn to_plain(&self, data: &Data) -> Result<Data, ExecError>;
    /// The device copy of host contents; `data` is owned when the caller
    /// has no further use for it.
    fn to_device(&self, data: Cow<'_, Data>) -> Result<Data, ExecError>;
}

/// The mover of a backend whose device memory is host memory: a copy is a
/// clone, as a transfer between two arenas of one memory is.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostMover;

impl Mover for HostMover {
    fn to_host(&self, data: &Data) -> Result<Data, ExecError> {
        data.try_clone()
    }

    fn to_plain(&self, data: &Data) -> Result<Data, ExecError> {
        match data {
            Data::Held(_) => Err(ExecError::Internal(
                "the host mover was given backend-held data".into(),
            )),
            plain => plain.try_clone(),
        }
    }

    fn to_device(&self, data: Cow<'_, Data>) -> Result<Data, ExecError> {
        match data {
            Cow::Owned(data) => Ok(data),
            Cow::Borrowed(data) => data.try_clone(),
        }
    }
}

/// What computes the operators.
pub trait Backend {
    /// How contents move between its device and the host (by default,
    /// clones: the device is host memory).
    fn mover(&self) -> Arc<dyn Mover> {
        Arc::new(HostMover)
    }
    /// The contents of an input or parameter when the run starts.
    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError>;
    /// Called once every input and parameter has its place: the backend
    /// may drop its own copies of them.
    fn externals_placed(&mut self) {}
    /// Called before each iteration; iterations count from 0.
    fn begin_iteration(&mut self, iteration: u64) -> Result<(), ExecError>;
    /// Runs an operator that does not update parameters; returns its
    /// outputs in `op.outputs` order.
    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError>;
    /// Runs an operator as [`Backend::run`] does, with its inputs as the
    /// executor holds them. An input the executor reads no more after
    /// this operator (its device copy ends here, and no transfer holds
    /// it) is handed over as the only handle on its buffer, so the
    /// backend may take it (`Arc::try_unwrap`) and write an output into
    /// it instead of a fresh one. By default the inputs are lent to `run`.
    ///
    /// An input the operator adds into in place
    /// ([`Op::adds_into`](fateplan_planner::workload::Op::adds_into))
    /// that is handed over is counted as the output already: the arenas
    /// released its bytes before charging the output. A backend that runs
    /// such operators on a device with a budget should take it, or it
    /// holds both for the operator's time while the arena counts one
    /// (the shipped backends take every input the GNN builder marks).
    fn run_owned(&mut self, op: &Op, inputs: Vec<Arc<Data>>) -> Result<Vec<Data>, ExecError> {
        let refs: Vec<&Data> = inputs.iter().map(|d| d.as_ref()).collect();
        self.run(op, &refs)
    }

    /// Runs an update: `params` are the operator's parameter inputs in
    /// order, updated in place; `others` its other inputs in order.
    fn update(
        &mut self,
        op: &Op,
        params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError>;
}

/// The SSD tier as the executor sees it: blocking calls, made from the
/// SSD lanes' threads. The executor stores tensors through `put_data` and
/// `get_data`, whose defaults go through the byte form
/// ([`Data::to_bytes`]) whole; a tier that can move a tensor's form a
/// piece at a time through buffers of its own overrides them (the spill
/// store does: a chunk of the plan's staging share at a time, in two
/// buffers per transfer, writing the form straight into them
/// ([`Data::write_byte_form_part`]) and reading it back straight into
/// the tensor ([`data::FormReader`]), so that a transfer holds at most
/// the staging the plan counts beside the tensor).
pub trait SsdTier: Send + Sync {
    fn put(&self, key: u64, bytes: &[u8]) -> Result<(), ExecError>;
    fn get(&self, key: u64) -> Result<Vec<u8>, ExecError>;
    fn remove(&self, key: u64) -> Result<(), ExecError>;

    /// Stores plain `data` (not backend-held) under `key`. `chunk_bytes`
    /// is the plan's staging share, one of its SSD staging buffers
    /// ([`Executor::ssd_chunk_bytes`]): the most of the tensor a tier
    /// should hold in a buffer of its own at once, two such buffers per
    /// transfer.
    fn put_data(&self, key: u64, data: &Data, chunk_bytes: usize) -> Result<(), ExecError> {
        let _ = chunk_bytes;
        self.put(key, &data.to_bytes()?)
    }

    /// What `put_data` stored under `key`; `chunk_bytes` as there.
    fn get_data(&self, key: u64, chunk_bytes: usize) -> Result<Data, ExecError> {
        let _ = chunk_bytes;
        Data::from_bytes(&self.get(key)?)
    }
}

/// An away copy that a transfer lane fills, possibly after another lane
/// has started waiting for it.
struct AwayCell {
    state: Mutex<Option<Result<Arc<Data>, ExecError>>>,
    filled: Condvar,
}

impl AwayCell {
    fn new() -> Arc<AwayCell> {
        Arc::new(AwayCell {
            state: Mutex::new(None),
            filled: Condvar::new(),
        })
    }

    fn ready(data: Arc<Data>) -> Arc<AwayCell> {
        let cell = AwayCell::new();
        cell.fill(Ok(data));
        cell
    }

    fn fill(&self, value: Result<Arc<Data>, ExecError>) {
        *self.state.lock().expect("cell lock") = Some(value);
        self.filled.notify_all();
    }

    fn get(&self) -> Result<Arc<Data>, ExecError> {
        let mut state = self.state.lock().expect("cell lock");
        while state.is_none() {
            state = self.filled.wait(state).expect("cell lock");
        }
        state.as_ref().expect("filled").clone()
    }

    /// What the lane making the copy fills the cell through.
    fn filler(self: &Arc<AwayCell>) -> Filler {
        Filler(self.clone())
    }
}

/// Fills an [`AwayCell`] once; dropped unfilled (its job ended in a
/// panic), it fills the cell with an error, so that a lane waiting on the
/// copy stops waiting.
struct Filler(Arc<AwayCell>);

impl Filler {
    fn fill(self, value: Result<Arc<Data>, ExecError>) {
        self.0.fill(value);
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        let unfilled = self.0.state.lock().is_ok_and(|state| state.is_none());
        if unfilled {
            self.0.fill(Err(ExecError::Internal(
                "the lane making an away copy stopped before it was made".into(),
            )));
        }
    }
}

/// A copy's life: tier, tensor (none for staging buffers), bytes, start slot.
type Life = (Tier, Option<usize>, u64, usize);

enum Slot {
    Empty,
    Ready(Arc<Data>),
    Arriving(Pending),
}

/// One traced interval.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceSpan {
    pub name: String,
    pub stream: Stream,
    pub span: Span,
}

/// What one iteration did.
#[derive(Debug, Clone, PartialEq)]
pub struct IterationReport {
    pub iteration_s: f64,
    /// Seconds the compute thread spent in operators (recomputations
    /// included), less the waits for inputs inside them.
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Seconds the compute thread waited for transfers. The rest of
    /// `iteration_s` is issuing transfers and the executor's bookkeeping.
    pub wait_s: f64,
    pub bytes_moved: LinkBytes,
}

/// How to execute.
#[derive(Clone, Default)]
pub struct ExecOptions {
    /// Arena budgets; `None` uses the plan's.
    pub budgets: Option<Budgets>,
    /// Records every operator and transfer of the last iteration.
    pub trace: bool,
}

/// Runs a plan iteration after iteration.
pub struct Executor<B: Backend> {
    plan: Arc<Plan>,
    backend: B,
    ssd: Option<Arc<dyn SsdTier>>,
    /// The plan's staging share ([`Executor::ssd_chunk_bytes`]).
    ssd_chunk_bytes: usize,
    timeline: Timeline,
    /// Per slot (two per position, see `passes::memory`): lives starting
    /// and ending there.
    starts: Vec<Vec<Life>>,
    ends: Vec<Vec<Life>>,
    /// Per slot: device lives that end there by handing their buffer to
    /// the output of the item at that slot (`CopyLife::handed`). Their
    /// bytes are released before the output is charged; the data stays
    /// for the item, which takes it over.
    hands: Vec<Vec<Life>>,
    /// Lives of the whole run: charged once, at the start.
    persistent: Vec<Life>,
    /// Per position: schedule entries issued / due there.
    issued_at: Vec<Vec<usize>>,
    due_at: Vec<Vec<usize>>,
    arenas: PerTier<Arena>,
    /// Each tensor's device copy and the slot its life started at.
    device: Vec<(Slot, usize)>,
    host: Vec<Option<Arc<AwayCell>>>,
    on_ssd: Vec<Option<Arc<AwayCell>>>,
    in_flight: HashMap<usize, Pending>,
    lanes: [Lane; 4],
    mover: Arc<dyn Mover>,
    clock: Instant,
    iteration: u64,
    trace_enabled: bool,
    trace: Vec<TraceSpan>,
    /// An iteration failed: the arenas and slots are no longer trustworthy.
    failed: bool,
}

/// [`Executor::ssd_chunk_bytes`] for `plan`: a byte at least.
fn ssd_chunk_bytes(plan: &Plan) -> usize {
    let share = plan.ssd_staging_bytes / fateplan_planner::planner::SSD_STAGING_BUFFERS;
    usize::try_from(share).unwrap_or(usize::MAX).max(1)
}

fn lane_index(stream: Stream) -> usize {
    match stream {
        Stream::H2d => 0,
        Stream::D2h => 1,
        Stream::SsdRead => 2,
        Stream::SsdWrite => 3,
        Stream::Compute => unreachable!("compute entries are not transfers"),
    }
}

impl<B: Backend> Executor<B> {
    /// Prepares a run: checks the plan again and the budgets against its
    /// peaks (a plan that needs more is refused before anything runs), starts the lanes,
    /// and places inputs and parameters where the plan keeps them.
    pub fn new(
        plan: Arc<Plan>,
        backend: B,
        ssd: Option<Arc<dyn SsdTier>>,
        options: ExecOptions,
    ) -> Result<Executor<B>, ExecError> {
        // A plan built in memory has not been through `Plan::from_json`'s
        // checks; the executor indexes by its steps and tensors, so check.
        plan.validate().map_err(ExecError::InvalidPlan)?;
        let budgets = options.budgets.unwrap_or(plan.budgets);
        for tier in [Tier::Hbm, Tier::Host, Tier::Ssd] {
            let needed_bytes = plan.predicted.peak_bytes.get(tier);
            if needed_bytes > budgets.of(tier) {
                return Err(ExecError::PlanTooBig {
                    tier,
                    needed_bytes,
                    budget_bytes: budgets.of(tier),
                });
            }
        }
        let workload = &plan.workload.definition;
        let fates: Vec<Fate> = plan.tensors.iter().map(|t| t.fate).collect();
        let uses_ssd = plan
            .schedule
            .iter()
            .any(|e| e.from == Tier::Ssd || e.to == Tier::Ssd);
        if uses_ssd && ssd.is_none() {
            return Err(ExecError::NoSsd);
        }
        let timeline = Timeline::new(workload.ops.len(), &plan.schedule);
        let positions = timeline.len();
        let slots = slot_count(&timeline);
        let lives = copy_lives(
            workload,
            &fates,
            &plan.schedule,
            &timeline,
            plan.ssd_staging_bytes,
        );
        let mut starts = vec![Vec::new(); slots + 1];
        let mut ends = vec![Vec::new(); slots + 1];
        let mut hands = vec![Vec::new(); slots + 1];
        let mut persistent = Vec::new();
        for life in lives {
            let tensor = life.tensor.map(|t| t.index());
            let external = tensor.is_none_or(|t| workload.tensors[t].kind.is_external());
            let entry = (life.tier, tensor, life.bytes, life.start);
            if external && life.start == 0 && life.end == slots {
                persistent.push(entry);
            } else if life.handed {
                starts[life.start].push(entry);
                hands[life.end].push(entry);
            } else {
                starts[life.start].push(entry);
                ends[life.end].push(entry);
            }
        }
        let mut issued_at = vec![Vec::new(); positions + 1];
        let mut due_at = vec![Vec::new(); positions + 1];
        for (index, entry) in plan.schedule.iter().enumerate() {
            if entry.action == Action::Recompute {
                continue;
            }
            issued_at[timeline.after_step(entry.issue_after_step)].push(index);
            due_at[timeline.step_start[entry.done_before_step as usize]].push(index);
        }
        let clock = Instant::now();
        let lanes = [
            Lane::start("h2d", clock)?,
            Lane::start("d2h", clock)?,
            Lane::start("ssd-read", clock)?,
            Lane::start("ssd-write", clock)?,
        ];
        let n = workload.tensors.len();
        let mover = backend.mover();
        let mut executor = Executor {
            arenas: PerTier {
                hbm: Arena::new(Tier::Hbm, budgets.hbm_bytes),
                host: Arena::new(Tier::Host, budgets.host_bytes),
                ssd: Arena::new(Tier::Ssd, budgets.ssd_bytes),
            },
            device: (0..n).map(|_| (Slot::Empty, 0)).collect(),
            host: vec![None; n],
            on_ssd: vec![None; n],
            in_flight: HashMap::new(),
            plan: plan.clone(),
            backend,
            ssd,
            ssd_chunk_bytes: ssd_chunk_bytes(&plan),
            timeline,
            starts,
            ends,
            hands,
            persistent,
            issued_at,
            due_at,
            lanes,
            mover,
            clock,
            iteration: 0,
            trace_enabled: options.trace,
            trace: Vec::new(),
            failed: false,
        };
        executor.place_externals()?;
        Ok(executor)
    }

    fn place_externals(&mut self) -> Result<(), ExecError> {
        let plan = self.plan.clone();
        // What the backend holds for the whole run beside the tensors.
        let resident = plan.workload.definition.resident_bytes;
        if resident > 0 {
            self.arenas
                .hbm
                .charge(resident, "the backend's resident bytes")?;
        }
        for &(tier, tensor, bytes, _) in &self.persistent {
            self.arenas
                .get_mut(tier)
                .charge(bytes, life_name(&plan.workload.definition, tensor))?;
        }
        for tensor in &plan.workload.definition.tensors {
            if !tensor.kind.is_external() {
                continue;
            }
            self.place_external(&plan, tensor)
                .map_err(|e| e.during(|| format!("input {}", tensor.name)))?;
        }
        self.backend.externals_placed();
        Ok(())
    }

    /// Makes the contents of external `tensor` and puts them where `plan`
    /// keeps them when the run starts.
    fn place_external(&mut self, plan: &Plan, tensor: &Tensor) -> Result<(), ExecError> {
        let t = tensor.id.index();
        let data = self.backend.external(tensor)?;
        check_size(tensor, &data)?;
        let fate = plan.fate(tensor.id);
        match fate
            .away_tier()
            .filter(|_| tensor.kind == TensorKind::Input)
        {
            Some(Tier::Host) => {
                let data = self.mover.to_host(&data)?;
                self.host[t] = Some(AwayCell::ready(Arc::new(data)))
            }
            Some(Tier::Ssd) => {
                let ssd = self.ssd.as_ref().ok_or(ExecError::NoSsd)?;
                ssd.put_data(t as u64, &data, self.ssd_chunk_bytes)?;
                self.on_ssd[t] = Some(AwayCell::ready(Arc::new(Data::I64(Vec::new()))));
            }
            _ => {
                let data = self.mover.to_device(Cow::Owned(data))?;
                self.device[t] = (Slot::Ready(Arc::new(data)), 0)
            }
        }
        Ok(())
    }

    /// One of the plan's SSD staging buffers: its `ssd_staging_bytes`
    /// over [`SSD_STAGING_BUFFERS`](fateplan_planner::planner::SSD_STAGING_BUFFERS)
    /// (two per direction). A transfer to or from the SSD tier is handed
    /// it ([`SsdTier::put_data`]).
    pub fn ssd_chunk_bytes(&self) -> usize {
        self.ssd_chunk_bytes
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Peak bytes per tier over the run so far.
    pub fn peak_bytes(&self) -> PerTier<u64> {
        PerTier {
            hbm: self.arenas.hbm.peak_bytes(),
            host: self.arenas.host.peak_bytes(),
            ssd: self.arenas.ssd.peak_bytes(),
        }
    }

    pub fn budgets(&self) -> Budgets {
        Budgets {
            hbm_bytes: self.arenas.hbm.budget_bytes,
            host_bytes: self.arenas.host.budget_bytes,
            ssd_bytes: self.arenas.ssd.budget_bytes,
        }
    }

    /// The operators and transfers of the last iteration run with tracing on.
    pub fn trace(&self) -> &[TraceSpan] {
        &self.trace
    }

    /// The current contents of a parameter (or any tensor on the device),
    /// as the backend holds them.
    pub fn device_data(&self, tensor: usize) -> Option<&Data> {
        match &self.device[tensor].0 {
            Slot::Ready(data) => Some(data),
            _ => None,
        }
    }

    /// [`Executor::device_data`] as plain contents, read back from the
    /// backend's memory.
    pub fn read_device(&self, tensor: usize) -> Result<Option<Data>, ExecError> {
        self.device_data(tensor)
            .map(|data| {
                self.mover.to_plain(data).map_err(|e| {
                    let name = &self.plan.workload.definition.tensors[tensor].name;
                    e.during(|| format!("the copy of {name} read back"))
                })
            })
            .transpose()
    }

    /// Runs one iteration of the plan.
    /// After a failed iteration the executor refuses to run again.
    pub fn run_iteration(&mut self) -> Result<IterationReport, ExecError> {
        if self.failed {
            return Err(ExecError::Internal(
                "an earlier iteration failed; start a new executor".into(),
            ));
        }
        let result = self.iterate();
        if result.is_err() {
            self.failed = true;
            self.abandon();
        }
        result
    }

    /// After a failure: let every lane finish, and drop what the iteration held.
    fn abandon(&mut self) {
        for (_, pending) in self.in_flight.drain() {
            let _ = pending.wait();
        }
        for (slot, _) in &mut self.device {
            if let Slot::Arriving(_) = slot {
                if let Slot::Arriving(pending) = std::mem::replace(slot, Slot::Empty) {
                    let _ = pending.wait();
                }
            }
        }
    }

    fn iterate(&mut self) -> Result<IterationReport, ExecError> {
        let plan = self.plan.clone();
        let workload = &plan.workload.definition;
        self.backend.begin_iteration(self.iteration)?;
        self.trace.clear();
        let started = self.clock.elapsed().as_secs_f64();
        let mut report = IterationReport {
            iteration_s: 0.0,
            compute_s: 0.0,
            recompute_s: 0.0,
            wait_s: 0.0,
            bytes_moved: LinkBytes::default(),
        };
        let positions = self.timeline.len();
        for position in 0..=positions {
            let (boundary, item) = (boundary_slot(position), item_slot(position));
            self.release_slot(boundary)?;
            self.charge_slot(boundary)?;
            for k in 0..self.issued_at[position].len() {
                self.issue(
                    self.issued_at[position][k],
                    position,
                    &mut report.bytes_moved,
                )?;
            }
            let before_wait = self.clock.elapsed().as_secs_f64();
            for k in 0..self.due_at[position].len() {
                self.finish(self.due_at[position][k])?;
            }
            report.wait_s += self.clock.elapsed().as_secs_f64() - before_wait;
            self.release_slot(item)?;
            self.charge_slot(item)?;
            if position == positions {
                break;
            }
            let (op, keep) = match self.timeline.items[position] {
                Item::Op(step) => (&workload.ops[step as usize], None),
                Item::Recompute(index) => {
                    let entry = &plan.schedule[index];
                    let op = entry.op.ok_or_else(|| {
                        ExecError::Internal(format!("recompute entry {index} names no operator"))
                    })?;
                    (&workload.ops[op.index()], Some(entry.tensor.index()))
                }
            };
            let step = self.timeline.step_of[position];
            let start_s = self.clock.elapsed().as_secs_f64();
            // Waits for an input inside the operator count as waiting.
            let waited_before = report.wait_s;
            // The operator's kernels take their scratch while it runs.
            if op.scratch_bytes > 0 {
                let what = format!("scratch of {}", op.name);
                self.arenas.hbm.charge(op.scratch_bytes, &what)?;
                self.compute(step, position, op, keep, &mut report.wait_s)?;
                self.arenas.hbm.release(op.scratch_bytes, &what)?;
            } else {
                self.compute(step, position, op, keep, &mut report.wait_s)?;
            }
            let span = Span {
                start_s,
                end_s: self.clock.elapsed().as_secs_f64(),
            };
            let seconds = (span.end_s - span.start_s - (report.wait_s - waited_before)).max(0.0);
            report.compute_s += seconds;
            if keep.is_some() {
                report.recompute_s += seconds;
            }
            if self.trace_enabled {
                let name = if keep.is_some() {
                    format!("recompute {}", op.name)
                } else {
                    op.name.clone()
                };
                self.trace.push(TraceSpan {
                    name,
                    stream: Stream::Compute,
                    span,
                });
            }
        }
        if !self.in_flight.is_empty() {
            return Err(ExecError::Internal(format!(
                "{} transfers were never waited for",
                self.in_flight.len()
            )));
        }
        report.iteration_s = self.clock.elapsed().as_secs_f64() - started;
        self.iteration += 1;
        Ok(report)
    }

    fn release_slot(&mut self, slot: usize) -> Result<(), ExecError> {
        for k in 0..self.ends[slot].len() {
            let (tier, tensor, bytes, start) = self.ends[slot][k];
            self.release(tier, tensor, bytes, start)?;
        }
        // The item here takes these buffers over: their bytes become its
        // output's, charged next; `compute` hands the data to the backend.
        for &(tier, tensor, bytes, _) in &self.hands[slot] {
            self.arenas
                .get_mut(tier)
                .release(bytes, life_name(&self.plan.workload.definition, tensor))?;
        }
        Ok(())
    }

    fn charge_slot(&mut self, slot: usize) -> Result<(), ExecError> {
        let workload = &self.plan.workload.definition;
        for &(tier, tensor, bytes, _) in &self.starts[slot] {
            self.arenas
                .get_mut(tier)
                .charge(bytes, life_name(workload, tensor))?;
        }
        Ok(())
    }

    /// Runs `op`; keeps every output, or only `keep` for a recomputation.
    fn compute(
        &mut self,
        step: u32,
        position: usize,
        op: &Op,
        keep: Option<usize>,
        wait_s: &mut f64,
    ) -> Result<(), ExecError> {
        let plan = self.plan.clone();
        let workload = &plan.workload.definition;
        // Make every input present, waiting for a copy still arriving.
        for &input in &op.inputs {
            let t = input.index();
            if let Slot::Arriving(_) = self.device[t].0 {
                let before = self.clock.elapsed().as_secs_f64();
                self.settle(t)?;
                *wait_s += self.clock.elapsed().as_secs_f64() - before;
            }
            if let Slot::Empty = self.device[t].0 {
                return Err(ExecError::Absent {
                    step,
                    op: op.name.clone(),
                    tensor: workload.tensors[t].name.clone(),
                });
            }
        }
        let is_param = |t: usize| workload.tensors[t].kind == TensorKind::Parameter;
        if op.outputs.is_empty() && op.inputs.iter().any(|t| is_param(t.index())) {
            // An update: take the parameters out so they can change in place.
            let mut taken = Vec::new();
            for &input in op.inputs.iter().filter(|t| is_param(t.index())) {
                let (slot, start) =
                    std::mem::replace(&mut self.device[input.index()], (Slot::Empty, 0));
                let Slot::Ready(data) = slot else {
                    unreachable!("inputs were made present above")
                };
                taken.push((input.index(), data, start));
            }
            let others: Vec<Arc<Data>> = op
                .inputs
                .iter()
                .filter(|t| !is_param(t.index()))
                .map(|t| self.ready(t.index()))
                .collect();
            let result = {
                let mut params: Vec<&mut Data> = Vec::with_capacity(taken.len());
                for (t, data, _) in taken.iter_mut() {
                    params.push(Arc::get_mut(data).ok_or_else(|| {
                        ExecError::Internal(format!(
                            "parameter {} is shared while it is updated",
                            workload.tensors[*t].name
                        ))
                    })?);
                }
                let others: Vec<&Data> = others.iter().map(|d| d.as_ref()).collect();
                self.backend
                    .update(op, &mut params, &others)
                    .map_err(|e| e.during(|| format!("step {step} ({})", op.name)))
            };
            for (t, data, start) in taken {
                self.device[t] = (Slot::Ready(data), start);
            }
            return result;
        }
        // An input whose device copy ends right after this operator, or
        // is handed to its output here, leaves its slot now (the release
        // that follows finds it empty), so that the backend holds the only
        // handle on it.
        let (end, here) = (boundary_slot(position + 1), item_slot(position));
        let inputs: Vec<Arc<Data>> = op
            .inputs
            .iter()
            .map(|&t| {
                let once = op.inputs.iter().filter(|&&u| u == t).count() == 1;
                let t = t.index();
                let start = self.device[t].1;
                let this =
                    |&(tier, u, _, s): &Life| tier == Tier::Hbm && u == Some(t) && s == start;
                let ends_here =
                    self.ends[end].iter().any(this) || self.hands[here].iter().any(this);
                if once && ends_here && matches!(self.device[t].0, Slot::Ready(_)) {
                    if let Slot::Ready(data) = std::mem::replace(&mut self.device[t].0, Slot::Empty)
                    {
                        return data;
                    }
                }
                self.ready(t)
            })
            .collect();
        let outputs = self.backend.run_owned(op, inputs).map_err(|e| {
            e.during(|| match keep {
                Some(_) => format!("step {step} (recomputing {})", op.name),
                None => format!("step {step} ({})", op.name),
            })
        })?;
        if outputs.len() != op.outputs.len() {
            return Err(ExecError::Internal(format!(
                "{} returned {} outputs, expected {}",
                op.name,
                outputs.len(),
                op.outputs.len()
            )));
        }
        for (&tensor, data) in op.outputs.iter().zip(outputs) {
            if keep.is_some_and(|k| k != tensor.index()) {
                continue;
            }
            check_size(&workload.tensors[tensor.index()], &data)?;
            self.device[tensor.index()] = (Slot::Ready(Arc::new(data)), item_slot(position));
        }
        Ok(())
    }

    fn ready(&self, t: usize) -> Arc<Data> {
        match &self.device[t].0 {
            Slot::Ready(data) => data.clone(),
            _ => unreachable!("callers make the tensor present first"),
        }
    }

    /// Waits for a device copy still arriving.
    fn settle(&mut self, t: usize) -> Result<(), ExecError> {
        let start = self.device[t].1;
        if let Slot::Arriving(pending) = std::mem::replace(&mut self.device[t].0, Slot::Empty) {
            let (data, _) = pending.wait()?;
            let data = data.ok_or_else(|| ExecError::Internal("a load produced nothing".into()))?;
            self.device[t] = (Slot::Ready(Arc::new(data)), start);
        }
        Ok(())
    }

    fn release(
        &mut self,
        tier: Tier,
        tensor: Option<usize>,
        bytes: u64,
        start: usize,
    ) -> Result<(), ExecError> {
        let plan = self.plan.clone();
        self.arenas
            .get_mut(tier)
            .release(bytes, life_name(&plan.workload.definition, tensor))?;
        let Some(t) = tensor else { return Ok(()) };
        match tier {
            Tier::Hbm if self.device[t].1 == start => {
                if let Slot::Arriving(_) = self.device[t].0 {
                    self.settle(t)?;
                }
                self.device[t].0 = Slot::Empty;
            }
            Tier::Hbm => {}
            Tier::Host => self.host[t] = None,
            Tier::Ssd => {
                if let Some(cell) = self.on_ssd[t].take() {
                    cell.get()?;
                    self.ssd
                        .as_ref()
                        .ok_or(ExecError::NoSsd)?
                        .remove(t as u64)?;
                }
            }
        }
        Ok(())
    }

    fn issue(
        &mut self,
        index: usize,
        position: usize,
        moved: &mut LinkBytes,
    ) -> Result<(), ExecError> {
        let plan = self.plan.clone();
        let entry = &plan.schedule[index];
        let t = entry.tensor.index();
        let tensor = &plan.workload.definition.tensors[t];
        if entry.action == Action::Offload {
            if let Slot::Arriving(_) = self.device[t].0 {
                self.settle(t)?;
            }
        }
        let lane = &self.lanes[lane_index(entry.stream)];
        match entry.action {
            Action::Offload => {
                let Slot::Ready(source) = &self.device[t].0 else {
                    return Err(ExecError::Absent {
                        step: entry.issue_after_step.max(0) as u32,
                        op: format!("offload of {}", tensor.name),
                        tensor: tensor.name.clone(),
                    });
                };
                let source = source.clone();
                let bytes = source.byte_len();
                let cell = AwayCell::new();
                let filler = cell.filler();
                let mover = self.mover.clone();
                let pending = match entry.to {
                    Tier::Host => {
                        moved.d2h += bytes;
                        self.host[t] = Some(cell);
                        let name = tensor.name.clone();
                        lane.issue(move || {
                            let copy = mover
                                .to_host(&source)
                                .map_err(|e| e.during(|| format!("the copy of {name} to the host")))
                                .map(Arc::new);
                            let failed = copy.as_ref().err().cloned();
                            filler.fill(copy);
                            failed.map_or(Ok(None), Err)
                        })?
                    }
                    Tier::Ssd => {
                        moved.d2h += bytes;
                        moved.ssd_write += bytes;
                        let ssd = self.ssd.clone().ok_or(ExecError::NoSsd)?;
                        let chunk_bytes = self.ssd_chunk_bytes;
                        self.on_ssd[t] = Some(cell);
                        let name = tensor.name.clone();
                        lane.issue(move || {
                            // Plain data is stored as it is; a backend's
                            // held contents are read into plain data first.
                            let plain = match source.as_ref() {
                                Data::Held(_) => mover.to_plain(&source).map(Cow::Owned),
                                plain => Ok(Cow::Borrowed(plain)),
                            };
                            let result = plain
                                .and_then(|plain| ssd.put_data(t as u64, &plain, chunk_bytes))
                                .map_err(|e| {
                                    e.during(|| format!("the copy of {name} to the SSD tier"))
                                });
                            filler.fill(result.clone().map(|()| Arc::new(Data::I64(Vec::new()))));
                            result.map(|()| None)
                        })?
                    }
                    Tier::Hbm => {
                        return Err(ExecError::Internal(format!(
                            "offload of {} to hbm",
                            tensor.name
                        )))
                    }
                };
                self.in_flight.insert(index, pending);
            }
            Action::Reload | Action::Load => {
                let pending = match entry.from {
                    Tier::Host => {
                        let cell = self.host[t].clone().ok_or_else(|| {
                            ExecError::Internal(format!("{} has no host copy to load", tensor.name))
                        })?;
                        moved.h2d += tensor.bytes;
                        let mover = self.mover.clone();
                        let name = tensor.name.clone();
                        lane.issue(move || {
                            let away = cell.get()?;
                            let copy = mover.to_device(Cow::Borrowed(away.as_ref()));
                            Ok(Some(copy.map_err(|e| {
                                e.during(|| format!("the copy of {name} to the device"))
                            })?))
                        })?
                    }
                    Tier::Ssd => {
                        let cell = self.on_ssd[t].clone().ok_or_else(|| {
                            ExecError::Internal(format!("{} has no SSD copy to load", tensor.name))
                        })?;
                        moved.ssd_read += tensor.bytes;
                        moved.h2d += tensor.bytes;
                        let ssd = self.ssd.clone().ok_or(ExecError::NoSsd)?;
                        let chunk_bytes = self.ssd_chunk_bytes;
                        let mover = self.mover.clone();
                        let name = tensor.name.clone();
                        lane.issue(move || {
                            cell.get()?;
                            let copy = ssd
                                .get_data(t as u64, chunk_bytes)
                                .and_then(|plain| mover.to_device(Cow::Owned(plain)));
                            Ok(Some(copy.map_err(|e| {
                                e.during(|| format!("the read of {name} from the SSD tier"))
                            })?))
                        })?
                    }
                    Tier::Hbm => {
                        return Err(ExecError::Internal(format!(
                            "load of {} from hbm",
                            tensor.name
                        )))
                    }
                };
                self.device[t] = (Slot::Arriving(pending), boundary_slot(position));
            }
            Action::Recompute => {}
        }
        Ok(())
    }

    /// Waits for transfer `index`, due now.
    fn finish(&mut self, index: usize) -> Result<(), ExecError> {
        let plan = self.plan.clone();
        let entry = &plan.schedule[index];
        let t = entry.tensor.index();
        let name = |what: &str| format!("{what} {}", plan.workload.definition.tensors[t].name);
        match entry.action {
            Action::Offload => {
                let pending = self.in_flight.remove(&index).ok_or_else(|| {
                    ExecError::Internal(format!("{} was never issued", name("offload of")))
                })?;
                let (_, span) = pending.wait()?;
                if self.trace_enabled {
                    self.trace.push(TraceSpan {
                        name: name("offload"),
                        stream: entry.stream,
                        span,
                    });
                }
            }
            Action::Reload | Action::Load => {
                let start = self.device[t].1;
                if let Slot::Arriving(pending) =
                    std::mem::replace(&mut self.device[t].0, Slot::Empty)
                {
                    let (data, span) = pending.wait()?;
                    let data = data.ok_or_else(|| {
                        ExecError::Internal(format!("{} produced nothing", name("load of")))
                    })?;
                    self.device[t] = (Slot::Ready(Arc::new(data)), start);
                    if self.trace_enabled {
                        self.trace.push(TraceSpan {
                            name: name(if entry.action == Action::Load {
                                "load"
                            } else {
                                "reload"
                            }),
                            stream: entry.stream,
                            span,
                        });
                    }
                } else if let Slot::Empty = self.device[t].0 {
                    return Err(ExecError::Internal(format!(
                        "{} was never issued",
                        name("load of")
                    )));
                }
            }
            Action::Recompute => {}
        }
        Ok(())
    }
}

/// What a life holds, for error messages.
fn life_name(workload: &Workload, tensor: Option<usize>) -> &str {
    tensor.map_or("ssd staging buffers", |t| &workload.tensors[t].name)
}

fn check_size(tensor: &Tensor, data: &Data) -> Result<(), ExecError> {
    let actual_bytes = data.byte_len();
    if actual_bytes > tensor.bytes {
        return Err(ExecError::Undersized {
            tensor: tensor.name.clone(),
            actual_bytes,
            planned_bytes: tensor.bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
