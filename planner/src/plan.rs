//! The plan: a fate for every tensor, a schedule of transfers and
//! recomputations, and the predicted time and memory. Versioned JSON,
//! byte-for-byte deterministic; loading validates it again.

use serde::{Deserialize, Serialize};

use crate::passes::sanity;
use crate::policy::Policy;
use crate::profile::Profile;
use crate::workload::{OpId, TensorId, TensorKind, Workload};
use crate::{Error, Result, Tier};

/// Version of the plan JSON format.
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// How far, relative, a plan's recorded predicted seconds may be from
/// what its schedule gives when it is read again (the same arithmetic
/// gives the same figures; this allows only for rounding).
pub const PREDICTED_TOLERANCE: f64 = 1e-9;

/// What happens to a tensor between its uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Stays on the device from production to last use.
    Retain,
    /// Copied to host memory once, off the device in every idle stretch
    /// between its uses, and copied back before each use.
    OffloadHost,
    /// As `OffloadHost`, with the copy on the SSD (through host staging buffers).
    OffloadSsd,
    /// Dropped after its last forward use and recomputed before its next use.
    Recompute,
    /// An input or parameter kept on the device for the whole iteration.
    Resident,
    /// An input kept in host memory and copied to the device for each use.
    StreamHost,
    /// An input kept on the SSD and read to the device for each use.
    StreamSsd,
}

impl Fate {
    pub const ALL: [Fate; 7] = [
        Fate::Retain,
        Fate::OffloadHost,
        Fate::OffloadSsd,
        Fate::Recompute,
        Fate::Resident,
        Fate::StreamHost,
        Fate::StreamSsd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fate::Retain => "retain",
            Fate::OffloadHost => "offload_host",
            Fate::OffloadSsd => "offload_ssd",
            Fate::Recompute => "recompute",
            Fate::Resident => "resident",
            Fate::StreamHost => "stream_host",
            Fate::StreamSsd => "stream_ssd",
        }
    }

    /// The tier holding the tensor while it is off the device, if any.
    pub fn away_tier(self) -> Option<Tier> {
        match self {
            Fate::OffloadHost | Fate::StreamHost => Some(Tier::Host),
            Fate::OffloadSsd | Fate::StreamSsd => Some(Tier::Ssd),
            _ => None,
        }
    }
}

impl std::fmt::Display for Fate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-tier byte limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    pub hbm_bytes: u64,
    pub host_bytes: u64,
    pub ssd_bytes: u64,
}

impl Budgets {
    /// No tier limits the plan (each a quarter of `u64::MAX`, so that sums
    /// of a few budgets cannot overflow): for the unconstrained peak.
    pub const UNLIMITED: Budgets = Budgets {
        hbm_bytes: u64::MAX / 4,
        host_bytes: u64::MAX / 4,
        ssd_bytes: u64::MAX / 4,
    };

    pub fn of(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Hbm => self.hbm_bytes,
            Tier::Host => self.host_bytes,
            Tier::Ssd => self.ssd_bytes,
        }
    }

    /// The whole capacity of every tier of `profile`.
    pub fn from_profile(profile: &Profile) -> Budgets {
        Budgets {
            hbm_bytes: profile.device.hbm_bytes,
            host_bytes: profile.host.memory_bytes,
            ssd_bytes: profile.ssd.capacity_bytes,
        }
    }
}

/// A value per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerTier<T> {
    pub hbm: T,
    pub host: T,
    pub ssd: T,
}

/// Bytes per tier as a plan file names them: `hbm 5, host 0, ssd 0`.
fn tiers(bytes: &PerTier<u64>) -> String {
    format!("hbm {}, host {}, ssd {}", bytes.hbm, bytes.host, bytes.ssd)
}

impl<T: Copy> PerTier<T> {
    pub fn get(&self, tier: Tier) -> T {
        *self.get_ref(tier)
    }
}

impl<T> PerTier<T> {
    pub fn get_ref(&self, tier: Tier) -> &T {
        match tier {
            Tier::Hbm => &self.hbm,
            Tier::Host => &self.host,
            Tier::Ssd => &self.ssd,
        }
    }

    pub fn get_mut(&mut self, tier: Tier) -> &mut T {
        match tier {
            Tier::Hbm => &mut self.hbm,
            Tier::Host => &mut self.host,
            Tier::Ssd => &mut self.ssd,
        }
    }
}

/// What a schedule entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Move the device copy to `to` (host or SSD); the device copy is freed when done.
    Offload,
    /// Move the copy on `from` back to the device; the copy on `from` is freed when done.
    Reload,
    /// Copy a streamed input, or an offloaded tensor between two of its
    /// gaps, from `from` to the device; the copy on `from` stays.
    Load,
    /// Re-run `op` on the compute stream to produce the tensor again.
    Recompute,
}

/// Where a schedule entry runs. SSD transfers pass through a host staging
/// buffer and the PCIe link as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Compute,
    H2d,
    D2h,
    SsdRead,
    SsdWrite,
}

impl Action {
    /// As a plan file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Offload => "offload",
            Action::Reload => "reload",
            Action::Load => "load",
            Action::Recompute => "recompute",
        }
    }
}

impl Stream {
    /// As a plan file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::H2d => "h2d",
            Stream::D2h => "d2h",
            Stream::SsdRead => "ssd_read",
            Stream::SsdWrite => "ssd_write",
        }
    }
}

/// One transfer or recomputation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    pub action: Action,
    pub tensor: TensorId,
    pub bytes: u64,
    pub from: Tier,
    pub to: Tier,
    pub stream: Stream,
    /// Issued once this step has finished; -1 means at the start of the iteration.
    pub issue_after_step: i64,
    /// Finished before this step (and any recomputation placed before it)
    /// starts; the operator count means by the end of the iteration.
    pub done_before_step: u32,
    /// The operator re-run by a recomputation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OpId>,
}

/// How a layer's boundary rows move between devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Device to device (NVLink, or PCIe peer copies; the network between
    /// nodes): fast, but the received rows need exchange buffers on the
    /// device.
    Peer,
    /// Through host memory: each device copies the rows others need to the
    /// host and copies the rows it needs from there into staging buffers,
    /// a destination partition's halo one block's share at a time: no
    /// buffer for the whole halo, but PCIe-bound and paid once per
    /// destination partition.
    Host,
}

impl Strategy {
    pub const ALL: [Strategy; 2] = [Strategy::Peer, Strategy::Host];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Peer => "peer",
            Strategy::Host => "host",
        }
    }

    pub fn parse(text: &str) -> Result<Strategy> {
        match text {
            "peer" => Ok(Strategy::Peer),
            "host" => Ok(Strategy::Host),
            _ => Err(Error::invalid(
                format!("exchange strategy {text:?}"),
                "expected peer or host",
            )),
        }
    }
}

/// What an exchange entry moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeKind {
    /// Boundary rows of a layer's input, to the devices whose destinations
    /// read them (forward; GAT's backward reads them again).
    Halo,
    /// Gradients of those rows, back to their owners (backward).
    HaloGrad,
    /// The weight gradients, summed over every device (ring all-reduce).
    AllReduce,
}

impl ExchangeKind {
    /// As a plan file spells it.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Halo => "halo",
            ExchangeKind::HaloGrad => "halo_grad",
            ExchangeKind::AllReduce => "all_reduce",
        }
    }
}

/// The way one exchange entry's bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leg {
    /// Device to device (and over the network between nodes).
    Peer,
    /// Device to host memory, for the devices that read these rows.
    ToHost,
    /// Host memory to the device (the network part first, between nodes).
    FromHost,
}

impl Leg {
    /// As a plan file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Leg::Peer => "peer",
            Leg::ToHost => "to_host",
            Leg::FromHost => "from_host",
        }
    }
}

/// One transfer between devices, as one device sees it (every device runs
/// the same plan on its share, at the same time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    pub kind: ExchangeKind,
    pub layer: u32,
    pub strategy: Strategy,
    pub leg: Leg,
    /// Bytes this device receives (and, by symmetry, sends).
    pub bytes: u64,
    /// The part of `bytes` that crosses the network between nodes.
    pub network_bytes: u64,
    /// Issued once this step has finished; -1 means at the start.
    pub issue_after_step: i64,
    /// Finished before this step starts.
    pub done_before_step: u32,
    /// Device buffer (received rows, or the staging buffer of `host`)
    /// held from the boundary before step `held_from_step` to the end of
    /// step `held_until_step`.
    pub device_bytes: u64,
    /// Host memory (the rows copied out) held from the same boundary to
    /// the end of step `host_held_until_step`.
    pub host_bytes: u64,
    pub held_from_step: u32,
    pub held_until_step: u32,
    pub host_held_until_step: u32,
}

impl Exchange {
    /// Whether its steps are in order within an iteration of `steps`:
    /// issued before due, held from a step to a later one, and no more
    /// bytes over the network than in all.
    pub fn in_order(&self, steps: usize) -> bool {
        let steps = steps as i64;
        self.issue_after_step >= -1
            && self.issue_after_step < self.done_before_step as i64
            && self.done_before_step as i64 <= steps
            && self.held_from_step <= self.held_until_step.min(self.host_held_until_step)
            && (self.held_until_step.max(self.host_held_until_step) as i64) < steps
            && self.network_bytes <= self.bytes
    }
}

/// A planned tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedTensor {
    pub id: TensorId,
    pub name: String,
    pub bytes: u64,
    pub kind: TensorKind,
    pub fate: Fate,
}

/// Bytes over each link in one iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkBytes {
    pub h2d: u64,
    pub d2h: u64,
    pub ssd_read: u64,
    pub ssd_write: u64,
}

/// The planner's prediction for one iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicted {
    pub iteration_s: f64,
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Time the compute stream waits for transfers.
    pub exposed_transfer_s: f64,
    pub peak_bytes: PerTier<u64>,
    /// The step at which each tier peaks.
    pub peak_step: PerTier<u32>,
    pub bytes_moved: LinkBytes,
}

/// A recorded prediction that differs from what the plan gives
/// ([`Plan::derived_predictions`]): its field in the plan file
/// (`predicted.iteration_s`), the value recorded and the value derived.
#[derive(Debug, Clone)]
struct Derived {
    field: String,
    recorded: String,
    derived: String,
}

impl std::fmt::Display for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} -> {}", self.field, self.recorded, self.derived)
    }
}

/// A plan read from a file ([`Plan::read`]).
#[derive(Debug, Clone)]
pub struct ReadPlan {
    pub plan: Plan,
    /// The sanity pass's rejection, where the plan breaks its budgets or
    /// an operator reads a tensor that is not on the device: a replay
    /// says where.
    pub rejected: Option<Error>,
    /// The recorded predictions that differed from what the plan's
    /// schedule gives, each `field: recorded -> derived` (a plan edited
    /// by hand, or made by a build that predicts otherwise); `plan` holds
    /// the derived ones.
    pub recomputed: Vec<String>,
}

/// The workload a plan is for: name and digest, and the definition itself so
/// that a plan can be simulated or executed on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanWorkload {
    pub name: String,
    pub digest: String,
    pub definition: Workload,
    /// The GNN the workload was built from, where it was (`plan --graph`,
    /// `train --save-plan`): what `train --plan` trains unless its flags
    /// say otherwise. Plans of a generic DAG have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<PlanModel>,
}

/// The shape of the GNN a plan was made for: the `train` flags that give
/// its workload (with the graph, which the workload's name and digest
/// identify).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanModel {
    /// `gcn`, `sage` or `gat`.
    pub model: String,
    pub layers: u32,
    pub hidden: u32,
    /// Attention heads of GAT's hidden layers (1 for the others).
    pub heads: u32,
    /// `narrower` or `aggregate-first`.
    pub layer_order: String,
    /// How GCN's and GraphSAGE's transposed aggregations read a block's
    /// transpose: `stored` or `built` (plans from before stored
    /// transposes, which lack the field).
    #[serde(default = "built_transposes")]
    pub transposes: String,
    /// Which aggregations run by inputs: `outputs` (none; plans from
    /// before the field), `inputs` (all that can), or a list such as
    /// `f1,b2`, either of the last two in groups of outputs (`inputs/2`)
    /// ([`crate::gnn::Sweeps::parse`]).
    #[serde(default = "by_outputs", skip_serializing_if = "is_by_outputs")]
    pub sweep: String,
    /// Vertex partitions (of one GPU's share, on several).
    pub partitions: u32,
    /// Devices sharing the graph.
    #[serde(default = "one_device", skip_serializing_if = "is_one_device")]
    pub devices: u32,
    /// How `train --devices` shared the vertices out (`mincut` or
    /// `ranges`); none on one device, and for `plan --gpus`, whose
    /// workload is the statistics of a min-cut share rather than shares
    /// `train` builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<String>,
    /// The dropout probability, which decides the masks the workload
    /// prices (`cost.masked`); none in plans from before the field,
    /// which priced none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f32>,
}

fn built_transposes() -> String {
    crate::gnn::Transposes::Built.name().to_string()
}

fn by_outputs() -> String {
    "outputs".to_string()
}

fn is_by_outputs(sweep: &String) -> bool {
    sweep == "outputs"
}

fn one_device() -> u32 {
    1
}

fn is_one_device(devices: &u32) -> bool {
    *devices == 1
}

impl PlanModel {
    /// The model `spec` at `partitions` partitions, on one device.
    pub fn new(spec: &crate::gnn::GnnSpec, partitions: u32) -> PlanModel {
        PlanModel {
            model: spec.model.name().to_string(),
            layers: spec.layers,
            hidden: spec.hidden,
            // (`plan --heads` defaults to 4 whatever the model.)
            heads: if spec.model == crate::gnn::GnnModel::Gat {
                spec.heads
            } else {
                1
            },
            layer_order: spec.order.name().to_string(),
            transposes: spec.transposes.name().to_string(),
            sweep: spec.sweep_name(),
            partitions,
            devices: 1,
            shares: None,
            dropout: Some(spec.dropout),
        }
    }

    /// Whether `definition` (its name, as [`crate::gnn::build_gnn`]
    /// writes it) is a workload of this model: its model, layers, width,
    /// heads and partitions. A model edited apart from its definition
    /// would train another workload than the plan's.
    fn check_definition(&self, definition: &crate::workload::Workload) -> Result<()> {
        // As `build_gnn` names it (`model` may be spelled `GCN` or
        // `graphsage`; `validate` has parsed it).
        let Ok(model) = crate::gnn::GnnModel::parse(&self.model) else {
            return self.validate();
        };
        let gat = model == crate::gnn::GnnModel::Gat;
        let heads = if gat {
            format!("h{}", self.heads)
        } else {
            String::new()
        };
        let prefix = format!("{}-{}x{}{heads}-", model.name(), self.layers, self.hidden);
        // The count ends the name, or comes before the layer order's or
        // the sweep's part (`-aggfirst`, `-by-inputs...`).
        let count = format!("-p{}", self.partitions);
        let name = &definition.name;
        if name.starts_with(&prefix)
            && (name.ends_with(&count) || name.contains(&format!("{count}-")))
        {
            return self.check_build(definition);
        }
        Err(Error::invalid(
            "plan field workload.model",
            format!(
                "{} of {} layers of {}{} in {} partitions, but the workload definition is {name:?} \
                 (names begin with {prefix:?} and give the count as {count:?})",
                self.model,
                self.layers,
                self.hidden,
                if gat {
                    format!(", {} heads,", self.heads)
                } else {
                    String::new()
                },
                self.partitions,
            ),
        ))
    }

    /// What the definition's name and operators say of the fields the
    /// name's prefix leaves out: the sweeps (the name's end), the layer
    /// order (`-aggfirst` is aggregate-first's) and dropout (masks priced).
    fn check_build(&self, definition: &crate::workload::Workload) -> Result<()> {
        let field = |name: &str| format!("plan field workload.model.{name}");
        let name = &definition.name;
        // What follows the count: the graph's name before it is the
        // user's, and may hold `-aggfirst` or `-by-inputs` itself.
        let count = format!("-p{}", self.partitions);
        let tail = name
            .rmatch_indices(&count)
            .map(|(at, _)| &name[at + count.len()..])
            .find(|rest| rest.is_empty() || rest.starts_with('-'))
            .unwrap_or(name);
        // After the count, the layer order's part where it has one, then
        // the sweeps' and nothing else: anything more is a count the
        // graph's name holds, not the workload's.
        let suffix = crate::gnn::sweep_suffix(&self.sweep);
        let rest = tail.strip_prefix("-aggfirst").unwrap_or(tail);
        if rest != suffix {
            let (which, given, built) = match rest.starts_with("-by-inputs") || !suffix.is_empty() {
                true => ("sweep", format!("{:?}", self.sweep), "other sweeps"),
                false => ("partitions", self.partitions.to_string(), "another count"),
            };
            return Err(Error::invalid(
                field(which),
                format!("{given}, but the workload definition {name:?} was built with {built}"),
            ));
        }
        let aggregate_first = self.aggregates_first();
        if (tail == "-aggfirst" || tail.starts_with("-aggfirst-")) && !aggregate_first {
            return Err(Error::invalid(
                field("layer_order"),
                format!(
                    "{:?}, but the workload definition {name:?} aggregates first",
                    self.layer_order
                ),
            ));
        }
        // Stored transposes are inputs of their own (`adj_t[i,j]`); a
        // GCN or GraphSAGE that reads them from its blocks has none. (GAT
        // builds its transposes whatever the field says, which a plan
        // read back gives as `stored`.)
        let stored = definition
            .tensors
            .iter()
            .any(|t| t.name.starts_with("adj_t["));
        let transposes = crate::gnn::Transposes::parse(&self.transposes).ok();
        let gat = crate::gnn::GnnModel::parse(&self.model).ok() == Some(crate::gnn::GnnModel::Gat);
        if stored && !gat && transposes != Some(crate::gnn::Transposes::Stored) {
            return Err(Error::invalid(
                field("transposes"),
                format!(
                    "{:?}, but the workload definition {name:?} stores its blocks' transposes \
                     (its adj_t tensors): expected \"stored\"",
                    self.transposes
                ),
            ));
        }
        // (Dropout draws no mask where the first layer aggregates its
        // input first: a model with dropout may price none.)
        let masked = definition.ops.iter().any(|op| op.cost.masked > 0);
        if self.dropout == Some(0.0) && masked {
            return Err(Error::invalid(
                field("dropout"),
                "0, but the workload definition prices dropout masks",
            ));
        }
        Ok(())
    }

    /// Whether the layer order is aggregate-first (`false` where it does
    /// not parse: [`Self::validate`] names that).
    fn aggregates_first(&self) -> bool {
        crate::gnn::LayerOrder::parse(&self.layer_order)
            .is_ok_and(|o| o == crate::gnn::LayerOrder::AggregateFirst)
    }

    fn validate(&self) -> Result<()> {
        let field = |name: &str| format!("plan field workload.model.{name}");
        crate::gnn::GnnModel::parse(&self.model).map_err(|_| {
            Error::invalid(
                field("model"),
                format!("{:?}: expected gcn, sage or gat", self.model),
            )
        })?;
        crate::gnn::LayerOrder::parse(&self.layer_order).map_err(|_| {
            Error::invalid(
                field("layer_order"),
                format!(
                    "{:?}: expected narrower or aggregate-first",
                    self.layer_order
                ),
            )
        })?;
        let model = crate::gnn::GnnModel::parse(&self.model).ok();
        let gcn = model == Some(crate::gnn::GnnModel::Gcn);
        let aggregate_first = self.aggregates_first();
        if !gcn && aggregate_first {
            return Err(Error::invalid(
                field("layer_order"),
                format!(
                    "{:?} under model {:?}: the layer order applies to gcn only",
                    self.layer_order, self.model
                ),
            ));
        }
        crate::gnn::Transposes::parse(&self.transposes).map_err(|_| {
            Error::invalid(
                field("transposes"),
                format!("{:?}: expected stored, built or mirrored", self.transposes),
            )
        })?;
        crate::gnn::Sweeps::parse(&self.sweep).map_err(|error| {
            Error::invalid(
                field("sweep"),
                format!(
                    "{:?}: expected outputs, inputs or a list such as f1,b2, either of the \
                     last two maybe in groups (inputs/2) ({error})",
                    self.sweep
                ),
            )
        })?;
        if let Some(p) = self.dropout {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::invalid(
                    field("dropout"),
                    format!("{p}: expected a probability in [0, 1)"),
                ));
            }
        }
        if let Some(shares) = &self.shares {
            if !["mincut", "ranges"].contains(&shares.as_str()) {
                return Err(Error::invalid(
                    field("shares"),
                    format!("{shares:?}: expected mincut or ranges"),
                ));
            }
        }
        let counts = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("partitions", self.partitions),
            ("devices", self.devices),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(Error::invalid(field(name), "0: expected at least 1"));
            }
        }
        // What the planner writes of a model: heads of GAT's alone, and
        // the share method of a plan of several devices alone.
        if model != Some(crate::gnn::GnnModel::Gat) && self.heads != 1 {
            return Err(Error::invalid(
                field("heads"),
                format!(
                    "{} under model {:?}: heads apply to gat only; a plan of another model \
                     records 1",
                    self.heads, self.model
                ),
            ));
        }
        if let (Some(shares), 1) = (&self.shares, self.devices) {
            return Err(Error::invalid(
                field("shares"),
                format!(
                    "{shares:?} with devices 1: a share method is recorded for plans of \
                     several devices only"
                ),
            ));
        }
        Ok(())
    }
}

/// A complete plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub format_version: u32,
    pub policy: String,
    pub workload: PlanWorkload,
    pub profile: Profile,
    pub gpus: u32,
    pub budgets: Budgets,
    /// Host memory held for SSD staging buffers while the plan uses the SSD.
    pub ssd_staging_bytes: u64,
    pub tensors: Vec<PlannedTensor>,
    pub schedule: Vec<ScheduleEntry>,
    /// Transfers between devices, in issue order (plans for one device
    /// have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<Exchange>,
    /// The halo the exchanges were sized from, on plans the planner made
    /// for several GPUs: reading the plan derives its exchanges again
    /// from it and the workload, and refuses any that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halo: Option<crate::exchange::Halo>,
    pub predicted: Predicted,
    /// How the exact MILP's search ended, on plans of policy `milp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milp: Option<MilpSearch>,
}

/// How the MILP's search for a plan ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MilpSearch {
    /// Whether the solver proved the plan optimal (within the model the
    /// MILP and dp share, with the device bytes charged that the memory
    /// pass found an earlier round's plan over). False: its time limit
    /// ran out first, and the plan is the best it had found by then.
    pub proven_optimal: bool,
    /// The seconds the search was allowed in all
    /// (`PlanOptions::milp_time_limit_s`; a round after the first has
    /// what the rounds before it left). On several GPUs with the exchange
    /// chosen per layer, the plan's exchange vector's share of the limit
    /// the vectors share.
    pub time_limit_s: f64,
    /// The MILP was solved this many times: each plan the memory pass
    /// found over the device somewhere had those bytes charged to their
    /// steps and was solved again. Written only above 1.
    #[serde(default = "first_round", skip_serializing_if = "is_first_round")]
    pub rounds: u32,
}

fn first_round() -> u32 {
    1
}

fn is_first_round(rounds: &u32) -> bool {
    *rounds == 1
}

impl MilpSearch {
    /// What a summary says of the search: proven, or the limit ran out,
    /// and in which round.
    pub fn describe(&self) -> String {
        let text = if self.proven_optimal {
            "the MILP proved it optimal in the linear model of time it shares with dp (the \
             prediction times more than that model, and may find another policy's plan faster)"
                .to_string()
        } else {
            format!(
                "the MILP's time limit of {} s ran out first: the best plan it had found, not \
                 proven optimal (--milp-time-limit; `PlanOptions::milp_time_limit_s` in the library)",
                self.time_limit_s
            )
        };
        match self.rounds {
            0 | 1 => text,
            n => format!(
                "{text}, in round {n}: each round's plan before it was over the device budget \
                 where the memory pass counts bytes the MILP's model does not, and those bytes \
                 were charged to their steps"
            ),
        }
    }
}

impl Plan {
    /// Pretty JSON with a trailing newline; byte-for-byte deterministic.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a plan always serializes");
        text.push('\n');
        text
    }

    /// [`Plan::to_json`]'s text, written to `out` as it is made: a plan
    /// of a million tensors is a gigabyte of it, which is never held.
    pub fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self).map_err(std::io::Error::from)?;
        out.write_all(b"\n")
    }

    /// Each layer's halo strategy, in layer order (none on one device).
    pub fn layer_strategies(&self) -> Vec<(u32, Strategy)> {
        let mut out: Vec<(u32, Strategy)> = self
            .exchanges
            .iter()
            .filter(|e| e.kind != ExchangeKind::AllReduce)
            .map(|e| (e.layer, e.strategy))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn fate(&self, tensor: TensorId) -> Fate {
        self.tensors[tensor.index()].fate
    }

    /// Reads a plan and validates it again: format, workload digest, that
    /// its tensors match the workload, and the sanity pass. A file's
    /// exchanges must come with the halo they are derived from again.
    /// Its recorded predictions (peaks and their steps, times, bytes
    /// moved), derived from the rest, are derived again where they differ
    /// (a plan edited by hand): [`Plan::read`] says which did.
    pub fn from_json(text: &str, source: &str) -> Result<Plan> {
        let read = Self::read(text, source)?;
        match read.rejected {
            None => Ok(read.plan),
            // A plan that breaks its own budgets is bad input here.
            Some(rejected) => Err(Error::invalid(source, rejected.to_string())),
        }
    }

    /// A plan read from a file as this build records it: GAT's workload
    /// is the same with either setting of the transposes (its backward
    /// builds them), so a GAT plan from before the field, read as
    /// `built`, says `stored` as GAT plans do.
    fn as_read(mut plan: Plan) -> Plan {
        if let Some(model) = &mut plan.workload.model {
            if crate::gnn::GnnModel::parse(&model.model).ok() == Some(crate::gnn::GnnModel::Gat) {
                model.transposes = crate::gnn::Transposes::Stored.name().to_string();
            }
        }
        plan
    }

    /// Reads a plan to replay it: as [`Plan::from_json`], except that a
    /// plan the sanity pass rejects (it breaks its own budgets, or an
    /// operator reads a tensor that is not on the device) is returned
    /// with that rejection instead of refused, so that a replay can say
    /// where, when and by how much. Its structure, workload name and
    /// exchanges are checked as ever. The recorded predictions of a plan
    /// the pass accepts are derived again where they differ from what
    /// its schedule gives (`recomputed` says which); a rejected plan's
    /// are kept as they are.
    pub fn read(text: &str, source: &str) -> Result<ReadPlan> {
        let mut plan: Plan = crate::json::parse(text, source)?;
        let within = |error| crate::json::within(source, error);
        plan.halo_recorded().map_err(within)?;
        plan.check_fields().map_err(within)?;
        let (rejected, recomputed) = match sanity::check(&plan) {
            Ok(checked) => {
                plan.check_workload().map_err(within)?;
                let (derived, changed) = plan.derived_predictions(&checked);
                plan.predicted = derived;
                (None, changed.iter().map(Derived::to_string).collect())
            }
            Err(rejected @ Error::PlanRejected { .. }) => {
                plan.check_workload().map_err(within)?;
                (Some(rejected), Vec::new())
            }
            Err(other) => return Err(within(other)),
        };
        plan.within_capacity().map_err(within)?;
        Ok(ReadPlan {
            plan: Self::as_read(plan),
            rejected,
            recomputed,
        })
    }

    /// The predictions the sanity pass (`checked`: the peaks and their
    /// steps) and the schedule on the plan's profile give, with each
    /// recorded one that differs from them.
    fn derived_predictions(&self, checked: &sanity::SanityReport) -> (Predicted, Vec<Derived>) {
        let mut changed = Vec::new();
        let mut differs = |field: String, recorded: String, derived: String| {
            changed.push(Derived {
                field,
                recorded,
                derived,
            })
        };
        let mut p = self.predicted.clone();
        if p.peak_bytes != checked.peak_bytes {
            differs(
                "predicted.peak_bytes".into(),
                tiers(&p.peak_bytes),
                tiers(&checked.peak_bytes),
            );
            p.peak_bytes = checked.peak_bytes;
        }
        if p.peak_step != checked.peak_step {
            let (name, value, step) = first_difference(&p.peak_step, &checked.peak_step);
            differs(format!("predicted.peak_step{name}"), value, step);
            p.peak_step = checked.peak_step;
        }
        let timing = self.timing();
        for (name, recorded, derived) in [
            ("iteration_s", &mut p.iteration_s, timing.iteration_s),
            ("compute_s", &mut p.compute_s, timing.compute_s),
            ("recompute_s", &mut p.recompute_s, timing.recompute_s),
            (
                "exposed_transfer_s",
                &mut p.exposed_transfer_s,
                timing.exposed_transfer_s,
            ),
        ] {
            if !within_tolerance(*recorded, derived) {
                differs(
                    format!("predicted.{name}"),
                    crate::units::figure(*recorded),
                    crate::units::figure(derived),
                );
                *recorded = derived;
            }
        }
        if p.bytes_moved != timing.bytes_moved {
            let (name, value, moved) = first_difference(&p.bytes_moved, &timing.bytes_moved);
            differs(format!("predicted.bytes_moved{name}"), value, moved);
            p.bytes_moved = timing.bytes_moved;
        }
        (p, changed)
    }

    /// That a plan read from a file with exchanges between GPUs records
    /// the halo they were sized from: without it, an exchange edited in
    /// the file could not be told from the planner's.
    fn halo_recorded(&self) -> Result<()> {
        if self.halo.is_none() && self.gpus > 1 && !self.exchanges.is_empty() {
            return Err(Error::invalid(
                "plan field halo",
                format!(
                    "missing on a plan for {} GPUs with {} exchanges: reading a plan derives its \
                     exchanges again from it; the planner records it on plans for several GPUs \
                     (`PlanOptions::multi`), and builds before it did not (plan again)",
                    self.gpus,
                    self.exchanges.len()
                ),
            ));
        }
        Ok(())
    }

    /// That the plan's budgets are within what its profile's device (on
    /// several GPUs, one GPU's share of the node) has, as a plan read
    /// from a file must be. [`crate::plan()`] returns a plan whose peak is
    /// over that capacity when its budget is (with
    /// [`Budgets::UNLIMITED`], to learn what a run needs): this tells a
    /// plan that fits the machine from one that does not, naming the tier.
    pub fn within_capacity(&self) -> Result<()> {
        let capacity = Budgets::from_profile(&self.profile.share(self.gpus));
        for (field, tier) in [
            ("hbm_bytes", Tier::Hbm),
            ("host_bytes", Tier::Host),
            ("ssd_bytes", Tier::Ssd),
        ] {
            let (budget, most) = (self.budgets.of(tier), capacity.of(tier));
            if budget > most {
                let whose = if self.gpus > 1 {
                    format!("one of {} GPUs' share of ", self.gpus)
                } else {
                    String::new()
                };
                // `Budgets::UNLIMITED`'s is said as what it is, not as
                // its 19 digits.
                let given = match budget == Budgets::UNLIMITED.of(tier) {
                    true => "unlimited (Budgets::UNLIMITED)".to_string(),
                    false => format!("{budget} bytes"),
                };
                return Err(Error::invalid(
                    format!("plan field budgets.{field}"),
                    format!(
                        "{given}, above the {most} bytes ({}) of {whose}the plan's profile {:?}; \
                         the plan's peak there is {}",
                        crate::units::format_bytes(most),
                        self.profile.name,
                        crate::units::format_bytes(self.predicted.peak_bytes.get(tier)),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether the schedule moves a tensor to or from the SSD.
    pub fn uses_ssd(&self) -> bool {
        self.schedule
            .iter()
            .any(|e| e.from == Tier::Ssd || e.to == Tier::Ssd)
    }

    /// Refuses a plan that moves tensors to or from the SSD without its
    /// staging buffers in host memory (a byte each at least), or with
    /// more of them than its host budget holds, the error named by
    /// `field` and ending in `advice`.
    pub(crate) fn check_staging(&self, field: &str, advice: &str) -> Result<()> {
        let buffers = crate::planner::SSD_STAGING_BUFFERS;
        if !self.uses_ssd() {
            return Ok(());
        }
        if self.ssd_staging_bytes < buffers {
            return Err(Error::invalid(
                field,
                format!(
                    "{}: the plan moves tensors to or from the SSD, through {buffers} staging \
                     buffers in host memory of at least a byte each ({buffers} bytes in \
                     all){advice}",
                    self.ssd_staging_bytes
                ),
            ));
        }
        if self.ssd_staging_bytes > self.budgets.host_bytes {
            return Err(Error::invalid(
                field,
                format!(
                    "{}: more than the host budget of {} bytes (budgets.host_bytes), which \
                     holds the {buffers} SSD staging buffers{advice}",
                    self.ssd_staging_bytes, self.budgets.host_bytes
                ),
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        self.check_fields()?;
        let checked = sanity::check(self)?;
        self.check_against(&checked)
    }

    /// [`Plan::validate`] up to the sanity pass: the format, policy,
    /// model, budgets, recorded figures, digest and tensors.
    fn check_fields(&self) -> Result<()> {
        if self.format_version != PLAN_FORMAT_VERSION {
            return Err(Error::invalid(
                "plan field format_version",
                format!(
                    "{} is not supported; this build reads version {PLAN_FORMAT_VERSION}",
                    self.format_version
                ),
            ));
        }
        // As the planner writes it: the command line takes a policy in any
        // case, a plan file in the one it is written in.
        if !Policy::ALL.iter().any(|p| p.name() == self.policy) {
            let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            return Err(Error::invalid(
                "plan field policy",
                format!(
                    "{:?} is not a policy; known policies: {}",
                    self.policy,
                    known.join(", ")
                ),
            ));
        }
        if let Some(model) = &self.workload.model {
            model.validate()?;
        }
        if let Some(milp) = &self.milp {
            if self.policy != Policy::Milp.name() {
                return Err(Error::invalid(
                    "plan field milp",
                    format!(
                        "present on a plan of policy {:?}; only milp plans have it",
                        self.policy
                    ),
                ));
            }
            let most = crate::planner::MAX_MILP_TIME_LIMIT_S;
            if !(milp.time_limit_s > 0.0 && milp.time_limit_s <= most) {
                return Err(Error::invalid(
                    "plan field milp.time_limit_s",
                    format!(
                        "{}: expected a positive number of seconds, at most {most}",
                        milp.time_limit_s
                    ),
                ));
            }
            let rounds = crate::planner::DP_ATTEMPTS;
            if !(1..=rounds as u32).contains(&milp.rounds) {
                return Err(Error::invalid(
                    "plan field milp.rounds",
                    format!("{}: expected 1 to {rounds}", milp.rounds),
                ));
            }
        }
        let definition = &self.workload.definition;
        definition.validate()?;
        if let Some(model) = &self.workload.model {
            model.check_definition(definition)?;
        }
        // SSD transfers pass through staging buffers in host memory, a
        // chunk at a time: none would stage nothing, and the host tier
        // would not count the buffers the run uses.
        self.check_staging("plan field ssd_staging_bytes", "")?;
        // Named by the plan's field: `profile.device.…`.
        self.profile.validate().map_err(|error| match error {
            Error::InvalidInput { context, message } => {
                let context = match context.split_once(" field ") {
                    Some((profile, field)) => format!("plan field profile.{field} ({profile})"),
                    None => format!("plan field profile ({context})"),
                };
                Error::InvalidInput { context, message }
            }
            other => other,
        })?;
        self.profile
            .check_gpus(self.gpus)
            .map_err(|error| match error {
                Error::InvalidInput { context, message } => {
                    Error::invalid("plan field gpus", format!("{context}: {message}"))
                }
                other => other,
            })?;
        let predicted = &self.predicted;
        for (name, seconds) in [
            ("iteration_s", predicted.iteration_s),
            ("compute_s", predicted.compute_s),
            ("recompute_s", predicted.recompute_s),
            ("exposed_transfer_s", predicted.exposed_transfer_s),
        ] {
            if !(seconds.is_finite() && seconds >= 0.0) {
                return Err(Error::invalid(
                    format!("plan field predicted.{name}"),
                    format!("{seconds}: expected seconds, finite and not negative"),
                ));
            }
        }
        let digest = definition.digest();
        if digest != self.workload.digest {
            return Err(Error::invalid(
                "plan field workload.digest",
                format!(
                    "{} does not match the workload definition ({digest})",
                    self.workload.digest
                ),
            ));
        }
        sanity::check_tensor_count(self)?;
        for (index, (planned, tensor)) in self.tensors.iter().zip(&definition.tensors).enumerate() {
            let field = |name: &str| format!("plan field tensors[{index}].{name}");
            if planned.id.index() != index {
                return Err(Error::invalid(
                    field("id"),
                    format!("{} is not its position, {index}", planned.id.index()),
                ));
            }
            if planned.name != tensor.name {
                return Err(Error::invalid(
                    field("name"),
                    format!(
                        "{:?} differs from the workload's tensor {index}, {:?}",
                        planned.name, tensor.name
                    ),
                ));
            }
            let differs = |name: &str, planned: String, actual: String| {
                Err(Error::invalid(
                    field(name),
                    format!(
                        "{planned} differs from the workload's {actual} for {:?}",
                        tensor.name
                    ),
                ))
            };
            if planned.bytes != tensor.bytes {
                return differs("bytes", planned.bytes.to_string(), tensor.bytes.to_string());
            }
            if planned.kind != tensor.kind {
                return differs("kind", planned.kind.to_string(), tensor.kind.to_string());
            }
        }
        Ok(())
    }

    /// [`Plan::validate`] after the sanity pass: [`Plan::check_workload`],
    /// then the recorded predictions are the ones the pass (`checked`) and
    /// the schedule give.
    fn check_against(&self, checked: &sanity::SanityReport) -> Result<()> {
        self.check_workload()?;
        match self.derived_predictions(checked).1.first() {
            None => Ok(()),
            Some(d) => Err(Error::invalid(
                format!("plan field {}", d.field),
                format!(
                    "{} differs from the {} its memory replay and schedule give on {}",
                    d.recorded,
                    d.derived,
                    match self.gpus {
                        1 => "its profile".to_string(),
                        n => format!("one of {n} GPUs' share of its profile (field gpus)"),
                    }
                ),
            )),
        }
    }

    /// That the plan's workload name is its definition's and its
    /// exchanges are the ones its halo gives: checked whether or not the
    /// sanity pass accepts the plan.
    fn check_workload(&self) -> Result<()> {
        let definition = &self.workload.definition;
        if self.workload.name != definition.name {
            return Err(Error::invalid(
                "plan field workload.name",
                format!(
                    "{:?} differs from the workload definition's name {:?}",
                    self.workload.name, definition.name
                ),
            ));
        }
        self.check_exchanges()
    }

    /// That the exchanges are the ones the workload and the recorded halo
    /// give for each layer's strategy: none deleted, added or resized.
    fn check_exchanges(&self) -> Result<()> {
        // Exchanges made without a halo (set in the options by hand) are
        // checked by the sanity pass alone; a file must carry the halo
        // (`from_json`).
        let Some(halo) = &self.halo else {
            return Ok(());
        };
        if self.gpus <= 1 {
            return Err(Error::invalid(
                "plan field halo",
                format!(
                    "present on a plan for {} GPU: a halo is between GPUs",
                    self.gpus
                ),
            ));
        }
        if !(halo.scale.is_finite() && halo.scale >= 0.0) {
            return Err(Error::invalid(
                "plan field halo.scale",
                format!("{}: expected a finite number, not negative", halo.scale),
            ));
        }
        let definition = &self.workload.definition;
        let sites = crate::exchange::sites(definition)?;
        let mut strategies = Vec::with_capacity(sites.len());
        for site in &sites {
            let mut seen = self
                .exchanges
                .iter()
                .filter(|e| e.layer == site.layer && e.kind != ExchangeKind::AllReduce)
                .map(|e| e.strategy);
            let Some(first) = seen.next() else {
                return Err(Error::invalid(
                    "plan field exchanges",
                    format!(
                        "none for layer {}, whose aggregation reads rows of the other GPUs",
                        site.layer
                    ),
                ));
            };
            if let Some(other) = seen.find(|&s| s != first) {
                return Err(Error::invalid(
                    "plan field exchanges",
                    format!(
                        "layer {} exchanges both by {} and by {}: one strategy per layer",
                        site.layer,
                        first.name(),
                        other.name()
                    ),
                ));
            }
            strategies.push(first);
        }
        let multi = crate::exchange::MultiGpu {
            halo: halo.clone(),
            forced: None,
        };
        let share = self.profile.share(self.gpus);
        let expected = crate::exchange::exchanges(&sites, &multi, &share, self.gpus, &strategies);
        if self.exchanges.len() != expected.len() {
            return Err(Error::invalid(
                "plan field exchanges",
                format!(
                    "{} entries, where the workload and the halo give {} for the layers' \
                     strategies",
                    self.exchanges.len(),
                    expected.len()
                ),
            ));
        }
        for (index, (found, wanted)) in self.exchanges.iter().zip(&expected).enumerate() {
            if found == wanted {
                continue;
            }
            let (name, value, expected_value) = first_difference(found, wanted);
            return Err(Error::invalid(
                format!("plan field exchanges[{index}]{name}"),
                format!(
                    "{value} differs from the {expected_value} that the workload and the halo \
                     give there (layer {}, {} strategy): exchanges deleted, added or resized",
                    wanted.layer,
                    wanted.strategy.name()
                ),
            ));
        }
        Ok(())
    }

    /// What the plan's schedule gives on its profile (one device's share
    /// of it on several): the predicted times and bytes moved.
    fn timing(&self) -> crate::passes::predict::Timing {
        let definition = &self.workload.definition;
        let timeline = crate::passes::timeline::Timeline::new(definition.ops.len(), &self.schedule);
        crate::passes::predict::predict(
            definition,
            &self.profile.share(self.gpus),
            &self.schedule,
            &timeline,
            self.ssd_staging_bytes / crate::planner::SSD_STAGING_BUFFERS,
            &self.exchanges,
        )
    }

    /// The most bytes `tiers` hold together at any one point of an
    /// iteration, counted as the predicted peaks are (the tensors' copies,
    /// the SSD staging buffers, the exchanges' buffers, the operators'
    /// scratch): at most the sum of the tiers' peaks, and less where they
    /// peak at different steps. A backend that keeps several tiers in one
    /// memory (the CPU's device and host arenas) needs this much of it.
    pub fn peak_together(&self, tiers: &[Tier]) -> u64 {
        use crate::passes::memory::Occupancy;
        use crate::passes::timeline::Timeline;
        let workload = &self.workload.definition;
        let fates: Vec<Fate> = self.tensors.iter().map(|t| t.fate).collect();
        let timeline = Timeline::new(workload.ops.len(), &self.schedule);
        let mut occupancy = Occupancy::compute(
            workload,
            &fates,
            &self.schedule,
            &timeline,
            self.ssd_staging_bytes,
        );
        occupancy.add_exchanges(&self.exchanges, &timeline);
        occupancy.add_scratch(workload, &self.schedule, &timeline);
        let slots = occupancy.bytes.hbm.len();
        (0..slots)
            .map(|slot| {
                tiers
                    .iter()
                    .map(|&tier| occupancy.bytes.get_ref(tier)[slot])
                    .fold(0u64, u64::saturating_add)
            })
            .max()
            .unwrap_or(0)
    }

    /// How many tensors have each fate, in [`Fate::ALL`] order.
    pub fn fate_counts(&self) -> Vec<(Fate, usize)> {
        Fate::ALL
            .iter()
            .map(|&fate| (fate, self.tensors.iter().filter(|t| t.fate == fate).count()))
            .collect()
    }
}

/// Whether recorded predicted seconds are the `derived` ones, within
/// [`PREDICTED_TOLERANCE`].
fn within_tolerance(recorded: f64, derived: f64) -> bool {
    (recorded - derived).abs() <= PREDICTED_TOLERANCE * derived.abs().max(1e-12)
}

/// The first field in which `found` differs from `wanted`, as the plan
/// file spells it: `.name` (empty where they are not objects), the value
/// found (`missing` where it has none) and the one wanted.
fn first_difference<T: Serialize>(found: &T, wanted: &T) -> (String, String, String) {
    let (found, wanted) = (
        serde_json::to_value(found).expect("plan fields always serialize"),
        serde_json::to_value(wanted).expect("plan fields always serialize"),
    );
    match (&found, &wanted) {
        (serde_json::Value::Object(f), serde_json::Value::Object(w)) => w
            .iter()
            .find(|(k, v)| f.get(*k) != Some(*v))
            .map(|(k, v)| {
                let value = f.get(k).map_or_else(|| "missing".into(), |v| v.to_string());
                (format!(".{k}"), value, v.to_string())
            })
            .unwrap_or_default(),
        _ => (String::new(), found.to_string(), wanted.to_string()),
    }
}
