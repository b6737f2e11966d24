//! `fateplan train`: trains a GNN for real on the CPU or CUDA backend
//! under the plan's budgets.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cli::flagged;
use anyhow::{bail, Context, Result};
use clap::Args;
use fateplan::planner::exchange::MultiGpu;
use fateplan::planner::gnn::{
    GnnModel, GnnShape, LayerOrder, Sweeps, Transposes, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS,
};
use fateplan::planner::plan::{Budgets, Plan, PlanModel};
use fateplan::planner::units::{count, format_bytes, format_seconds};
use fateplan::planner::{plan, PlanOptions, Policy, Profile, Tier, Workload};
use fateplan::runtime::compare::{compare, Comparison, MeasuredIteration, Pair};
use fateplan::runtime::cpu::Hyper;
use fateplan::runtime::dataset::FeatureScaling;
use fateplan::runtime::edges::EdgeSource;
use fateplan::runtime::exec::{ExecError, SsdTier};
use fateplan::runtime::measure;
use fateplan::runtime::share::{prepare_shared_from, prepare_shared_keeping, Keep, SharedPrepared};
use fateplan::runtime::sim::{simulate, SimOptions};
use fateplan::runtime::spill::CreatedDirs;
use fateplan::runtime::train::{self, EpochStats};

/// The graph made ready for one device, or shared out to several.
enum Prepared {
    One(train::Prepared),
    Shared(SharedPrepared),
}

impl Prepared {
    fn shared(&self) -> Option<&SharedPrepared> {
        match self {
            Prepared::Shared(s) => Some(s),
            Prepared::One(_) => None,
        }
    }

    fn workload(&self) -> &Workload {
        match self {
            Prepared::One(p) => &p.workload,
            Prepared::Shared(s) => &s.workload,
        }
    }

    fn shape(&self) -> &GnnShape {
        match self {
            Prepared::One(p) => &p.shape,
            Prepared::Shared(s) => &s.shape,
        }
    }

    /// Trains `workload`, built from this shape by `sweeps` instead.
    fn swept(&mut self, workload: Workload, sweeps: Sweeps) {
        let (held, shape) = match self {
            Prepared::One(p) => (&mut p.workload, &mut p.shape),
            Prepared::Shared(s) => (&mut s.workload, &mut s.shape),
        };
        *held = workload;
        shape.spec.sweeps = sweeps;
    }
}

/// `train`'s arguments; a launcher hands them to its member processes
/// (`crate::members`), hence serde.
#[derive(Args, Clone, serde::Serialize, serde::Deserialize)]
pub struct TrainArgs {
    /// The graph: a folder of PyG-named .npy files, or a generator spec such
    /// as `rmat:scale=20,features=128,classes=16,seed=1` or
    /// `planted:nodes=2000,classes=5,features=32,degree=8,homophily=0.8,seed=1`.
    /// Every key but `scale` and `nodes` may be left out: the values shown
    /// are their defaults (README: `--graph`, for the others).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub(crate) graph: String,
    /// gcn, sage or gat [default: gcn, or with --plan the plan's, as for
    /// each flag of the model's shape: --layers, --hidden, --heads,
    /// --layer-order, --transposes and --partitions].
    #[arg(long)]
    model: Option<String>,
    /// GNN layers, the output layer included [default: 2].
    #[arg(long, value_parser = crate::cli::whole_in::<u32>(1..=MAX_LAYERS as u128))]
    layers: Option<u32>,
    /// Width of each hidden layer. For GAT, all heads together (as for
    /// `plan`): PyG's `GATConv(hidden_channels=8, heads=8)` is
    /// `--hidden 64 --heads 8` [default: 16].
    #[arg(long, value_parser = crate::cli::whole_in::<u32>(1..=MAX_HIDDEN as u128))]
    hidden: Option<u32>,
    /// Attention heads of GAT's hidden layers (the output layer has one);
    /// must divide --hidden [default: 1].
    #[arg(long, value_parser = crate::cli::whole_in::<u32>(1..=MAX_HEADS as u128))]
    heads: Option<u32>,
    /// Which GCN layers project before they aggregate: `narrower` (those
    /// whose output is narrower than their input) or `aggregate-first`
    /// (none). The model is the same. GCN only: refused for sage and gat
    /// [default: narrower].
    #[arg(long)]
    layer_order: Option<String>,
    /// How GCN's and GraphSAGE's transposed aggregations read a block's
    /// transpose: `stored` (an input of its own, built once when the
    /// graph is loaded, held in host memory beside the block and moved
    /// like it), `built` (scattered over the block; a GPU builds the
    /// transpose as it goes, keeping the last) or, for GCN on a symmetric
    /// graph, `mirrored` (gathered over block (j, i), which is block (i,
    /// j)'s transpose: nothing held or built; checked when the graph is
    /// loaded). The model is the same, bit for bit [default: stored].
    #[arg(long)]
    transposes: Option<String>,
    /// Which aggregations run input partition after input partition
    /// rather than output after output: `outputs`, `inputs`, a list such
    /// as `f1,b2`, either of the last two in groups of outputs (`inputs/2`,
    /// `f1,b2/3`), or `auto` (the planner chooses, as `plan --sweep
    /// auto`: when planning here, not with --plan). The model is the
    /// same, bit for bit [default: outputs, or with --plan the plan's].
    #[arg(long)]
    sweep: Option<String>,
    /// Epochs to train: one full-graph iteration each.
    #[arg(long, default_value_t = 200, value_parser = crate::cli::positive::<u32>)]
    pub(crate) epochs: u32,
    /// Evaluate the model every N epochs, and after the last: the
    /// validation accuracy shows on the progress bar, and the report says
    /// its best and when (`--json`: `validation`, each evaluation's epoch
    /// and accuracy). Each evaluation takes at most about an iteration, and
    /// changes nothing the training computes. Not with --processes
    /// [default: none before the last epoch's]
    #[arg(long, value_parser = crate::cli::positive::<u32>)]
    eval_every: Option<u32>,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 0.01, value_parser = crate::cli::positive_f32)]
    lr: f32,
    /// Dropout probability on each layer's input features; for GAT also
    /// on the attention coefficients (as PyG's `GATConv(dropout=p)`).
    /// [default: 0.5, or with --plan the plan's]
    #[arg(long, value_parser = crate::cli::probability_f32)]
    dropout: Option<f32>,
    /// Adam weight decay (L2), on the first layer only unless
    /// --weight-decay-all-layers (Kipf and Welling's GCN decays the first).
    #[arg(long, default_value_t = 5e-4, value_parser = crate::cli::non_negative_f32)]
    weight_decay: f32,
    /// Decay every layer's weights, not the first layer's alone.
    #[arg(long)]
    weight_decay_all_layers: bool,
    /// Seed of the weights and the dropout masks.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::whole::<u64>)]
    seed: u64,
    /// Compute threads (default: every core; at most 16 a core). With
    /// --devices, shared out: each device gets its part (at least one),
    /// as a pool of its own, or with --processes as its process's.
    #[arg(long, value_parser = crate::cli::positive::<usize>)]
    pub(crate) threads: Option<usize>,
    /// Vertex partitions of the workload (per device, with --devices; 1
    /// to 256), or `auto`: the count `fateplan plan --graph ...
    /// --partitions auto` sizes for these flags and budgets, and its plan
    /// [default: 4].
    #[arg(long, value_parser = partitions_or_auto)]
    partitions: Option<u32>,
    /// Devices to train on, each owning a share of the vertices and
    /// exchanging its halo with the others (data-parallel full-graph
    /// training). On the CPU backend the devices are threads of this
    /// process, exchanging through shared memory; the plan is made for
    /// the largest share: with the exchanges of --devices GPUs where the
    /// profile prices them (a `peer` section, as h100-sxm's), else alone,
    /// with no exchange (as on cpu-small) [default: 1, or the plan's].
    #[arg(long, value_parser = crate::cli::positive::<u32>)]
    devices: Option<u32>,
    /// With --devices, each device is a process of its own instead of a
    /// thread of this one: this process starts them, and their exchanges
    /// go through a hub it serves on the loopback interface (TCP).
    #[arg(long)]
    pub(crate) processes: bool,
    /// With --devices, how the vertices are shared out: `mincut` (the
    /// min-cut partitioner picks each device's vertices, which are then
    /// renumbered; the dropout masks stay keyed by the vertices as given)
    /// or `ranges` (equal ranges of vertex numbers) [default: mincut, or
    /// the plan's].
    #[arg(long, value_parser = ["mincut", "ranges"])]
    pub(crate) shares: Option<String>,

    /// Keep the features as they are (default: rows normalised to sum 1 when
    /// no feature of any row is negative; signed features are always kept as
    /// they are).
    #[arg(long)]
    raw_features: bool,
    /// A plan made for this graph (`fateplan plan --graph ... -o FILE`, or
    /// `train --save-plan`). The model it was made for is trained: the
    /// flags of the model's shape may be left out.
    #[arg(long, conflicts_with = "policy")]
    plan: Option<PathBuf>,
    /// Plan on the spot with this policy (default dp).
    #[arg(long, value_parser = crate::cli::lowercase)]
    policy: Option<String>,
    /// Seconds the MILP may search before it returns its best plan
    /// unproven, as `plan --milp-time-limit` [default: 60]. Refused under
    /// another `--policy`.
    #[arg(long, conflicts_with = "plan", value_parser = crate::cli::milp_time_limit_value)]
    milp_time_limit: Option<f64>,
    /// Profile to plan with [default: cpu-small; with --plan the plan's,
    /// and another is refused].
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    profile: Option<String>,
    /// Device arena budget: bytes (e.g. 64MiB) or a share of the
    /// retain-all plan's peak (e.g. 25%).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::budget_value)]
    hbm_budget: Option<String>,
    /// Host memory arena budget (the host tier): bytes or a share of the
    /// retain-all plan's device peak, as --hbm-budget [default: the
    /// profile's host memory (with --devices on a profile with a `peer`
    /// section, a device's share), or with --plan the plan's budget].
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::budget_value)]
    host_budget: Option<String>,
    /// SSD tier budget (the tensors in its spill files in --spill-dir; a
    /// file may be larger by up to 4,160 bytes for each tensor the plan
    /// puts on the SSD: a block's header and its padding to O_DIRECT's
    /// 4 KiB): bytes or a share
    /// of the retain-all plan's device peak, as --hbm-budget [default: the
    /// profile's SSD capacity (with --devices on a profile with a `peer`
    /// section, a device's share), or with --plan the plan's budget].
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::budget_value)]
    ssd_budget: Option<String>,
    /// Directory for the SSD tier's spill files (needed when the plan uses
    /// the SSD; the folder `profile --ssd-dir` measures). With --devices,
    /// each device has its own folder in it (`device0`, ...) with the
    /// plan's SSD budget: devices × budget in all.
    #[arg(long, visible_alias = "ssd-dir")]
    pub(crate) spill_dir: Option<PathBuf>,
    /// Write the last training iteration's measured trace (Chrome trace
    /// events; with --devices, each device's).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    /// The graph's adjacency, cached: read from this file when it exists
    /// (it must be this graph's), else built and written there.
    #[arg(long)]
    csr_cache: Option<PathBuf>,
    /// Write the plan that is executed (planned on the spot or given) to this file.
    #[arg(long)]
    save_plan: Option<PathBuf>,
    /// Print the report as JSON (where no plan fits, a JSON document
    /// saying so, as `plan --json` prints).
    #[arg(long)]
    json: bool,
    /// What computes the operators: cpu, or cuda (an NVIDIA GPU, with the
    /// driver, NVRTC and cuBLAS of CUDA 13; `gpu` is the same).
    #[arg(long, default_value = "cpu", value_parser = backend_names())]
    backend: String,
    /// The CUDA device's ordinal (with --backend cuda; default 0).
    #[arg(long, value_parser = crate::cli::whole::<usize>)]
    cuda_device: Option<usize>,
    /// Folder for the compiled CUDA kernels (default: fateplan/kernels in
    /// the user's cache folder, $XDG_CACHE_HOME or ~/.cache).
    #[arg(long)]
    kernel_cache: Option<PathBuf>,
    /// After training, replay the plan on the simulator with the plan's
    /// profile and print the measured and simulated iteration side by
    /// side, in total and per link (with --json: under `compare_simulated`).
    #[arg(long)]
    pub(crate) compare_simulated: bool,
}

/// The model's shape when a flag leaves it out and no plan gives it.
const DEFAULT_MODEL: (&str, u32, u32, u32, &str, u32) = ("gcn", 2, 16, 1, "narrower", 4);

impl TrainArgs {
    pub(crate) fn model(&self) -> &str {
        self.model.as_deref().unwrap_or(DEFAULT_MODEL.0)
    }
    pub(crate) fn layers(&self) -> u32 {
        self.layers.unwrap_or(DEFAULT_MODEL.1)
    }
    pub(crate) fn hidden(&self) -> u32 {
        self.hidden.unwrap_or(DEFAULT_MODEL.2)
    }
    pub(crate) fn heads(&self) -> u32 {
        self.heads.unwrap_or(DEFAULT_MODEL.3)
    }
    pub(crate) fn layer_order(&self) -> &str {
        self.layer_order.as_deref().unwrap_or(DEFAULT_MODEL.4)
    }
    pub(crate) fn transposes(&self) -> &str {
        self.transposes.as_deref().unwrap_or("stored")
    }
    pub(crate) fn sweep(&self) -> &str {
        self.sweep.as_deref().unwrap_or("outputs")
    }
    /// Whether `--sweep auto` asks the planner to choose.
    fn sweep_auto(&self) -> bool {
        self.sweep().eq_ignore_ascii_case("auto")
    }
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions.unwrap_or(DEFAULT_MODEL.5)
    }
    /// Whether `--partitions auto` was given ([`AUTO_PARTITIONS`]).
    fn partitions_auto(&self) -> bool {
        self.partitions == Some(AUTO_PARTITIONS)
    }
    pub(crate) fn devices(&self) -> u32 {
        self.devices.unwrap_or(1)
    }

    /// `--dropout`, 0.5 where not given.
    pub(crate) fn dropout(&self) -> f32 {
        self.dropout.unwrap_or(0.5)
    }

    /// The arguments with the model's shape `plan` (read from `source`)
    /// was made for wherever a flag leaves it out. A flag that gives
    /// another value than the plan's is refused, naming both.
    fn adopting(&self, plan: &PlanModel, source: &str) -> Result<TrainArgs> {
        fn take<T: Clone + PartialEq + std::fmt::Display>(
            flag: &Option<T>,
            planned: &T,
            (name, source): (&str, &str),
        ) -> Result<Option<T>> {
            match flag {
                Some(given) if given != planned => bail!(
                    "--{name} {given}: the plan {source} is for --{name} {planned}; leave \
                     --{name} out to train as the plan was made, or plan again for this run"
                ),
                _ => Ok(Some(planned.clone())),
            }
        }
        let mut args = self.clone();
        // Model names are taken in any case (`GAT`, `graphsage`): compare
        // their canonical names.
        let model = match &self.model {
            Some(name) => Some(
                GnnModel::parse(name)
                    .map_err(|e| flagged("--model", name, e))?
                    .name()
                    .to_string(),
            ),
            None => None,
        };
        let order = match &self.layer_order {
            Some(name) => Some(
                LayerOrder::parse(name)
                    .map_err(|e| crate::cli::flagged("--layer-order", name, e))?
                    .name()
                    .to_string(),
            ),
            None => None,
        };
        args.model = take(&model, &plan.model, ("model", source))?;
        args.layers = take(&self.layers, &plan.layers, ("layers", source))?;
        args.hidden = take(&self.hidden, &plan.hidden, ("hidden", source))?;
        args.heads = take(&self.heads, &plan.heads, ("heads", source))?;
        // Only a GCN's plan has a layer order to take: another model's
        // records the default, and `--layer-order` is refused for it.
        args.layer_order = match GnnModel::parse(&plan.model)? {
            GnnModel::Gcn => take(&order, &plan.layer_order, ("layer-order", source))?,
            _ => order,
        };
        let transposes = match &self.transposes {
            Some(name) => Some(
                Transposes::parse(name)
                    .map_err(|e| crate::cli::flagged("--transposes", name, e))?
                    .name()
                    .to_string(),
            ),
            None => None,
        };
        args.transposes = take(&transposes, &plan.transposes, ("transposes", source))?;
        let sweep = match self.sweep.as_deref() {
            Some(name) if name.eq_ignore_ascii_case("auto") => bail!(
                "--sweep auto: the plan {source} is for --sweep {}; leave --sweep out to train \
                 as the plan was made",
                plan.sweep
            ),
            Some(name) => Some(Sweeps::parse(name)?.name()),
            None => None,
        };
        // (Validated with the plan; a plan's list is compared as read.)
        let planned = Sweeps::parse(&plan.sweep)?.name();
        args.sweep = take(&sweep, &planned, ("sweep", source))?;
        args.partitions = take(&self.partitions, &plan.partitions, ("partitions", source))?;
        args.devices = take(&self.devices, &plan.devices, ("devices", source))?;
        if let Some(planned) = &plan.dropout {
            args.dropout = take(&self.dropout, planned, ("dropout", source))?;
        }
        if let Some(planned) = &plan.shares {
            let given = match &self.shares {
                Some(_) => Some(share_method(self)?.name().to_string()),
                None => None,
            };
            args.shares = take(&given, planned, ("shares", source))?;
        }
        Ok(args)
    }
}

/// `--partitions auto` as the flag's value holds it: no count is 0 (the
/// parser refuses it), and `run` sizes the count before anything reads
/// it.
const AUTO_PARTITIONS: u32 = 0;

/// `--partitions`' value: a count of 1 to the most, or `auto`
/// ([`AUTO_PARTITIONS`]).
fn partitions_or_auto(text: &str) -> std::result::Result<u32, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(AUTO_PARTITIONS);
    }
    crate::cli::whole_in::<u32>(1..=fateplan::planner::blocks::MAX_PARTITIONS as u128)(text)
        .map_err(|e| format!("{e}, or auto"))
}

/// The plan `fateplan plan --graph ... --partitions auto` makes for this
/// run's flags (its model, profile, policy, sweep and budgets; without a
/// spill folder, no SSD tier), and the line saying the count it took.
fn sized_plan(args: &TrainArgs) -> Result<(Plan, String)> {
    if args.plan.is_some() {
        bail!("--partitions auto: the plan given has its count; leave --partitions out");
    }
    if args.devices() > 1 {
        bail!(
            "--partitions auto: sizes one device's run; with --devices, `fateplan plan --graph \
             {} --gpus {} --partitions auto` with the same flags and -o FILE sizes the shares, \
             and train --plan FILE trains them",
            args.graph,
            args.devices()
        );
    }
    let policy = args.policy.as_deref().unwrap_or("dp");
    let mut flags: Vec<String> = vec!["plan".into(), "--graph".into(), args.graph.clone()];
    let mut flag = |name: &str, value: String| {
        flags.push(format!("--{name}"));
        flags.push(value);
    };
    flag("model", args.model().to_string());
    flag("layers", args.layers().to_string());
    flag("hidden", args.hidden().to_string());
    if let Some(heads) = args.heads {
        flag("heads", heads.to_string());
    }
    flag("dropout", args.dropout().to_string());
    if let Some(order) = &args.layer_order {
        flag("layer-order", order.clone());
    }
    flag("transposes", args.transposes().to_string());
    flag("sweep", args.sweep().to_string());
    flag("partitions", "auto".into());
    flag(
        "profile",
        args.profile.clone().unwrap_or_else(|| "cpu-small".into()),
    );
    flag("policy", policy.to_string());
    if let Some(limit) = args.milp_time_limit {
        flag("milp-time-limit", limit.to_string());
    }
    for (name, given) in [
        ("hbm-budget", &args.hbm_budget),
        ("host-budget", &args.host_budget),
    ] {
        if let Some(text) = given {
            flag(name, text.clone());
        }
    }
    match (&args.spill_dir, &args.ssd_budget) {
        (Some(_), Some(text)) => flag("ssd-budget", text.clone()),
        (Some(_), None) => {}
        // As a run planned here: no spill folder, no SSD tier. A share (of
        // a peak not yet known, and never 0%) asks for the tier.
        (None, given) => {
            let asked = given
                .as_deref()
                .is_some_and(|text| crate::cli::budget_bytes(text).map_or(true, |b| b > 0));
            no_ssd_tier(args, policy, asked)?;
            flag("ssd-budget", "0".into());
        }
    }
    let plan_args = <crate::cli::PlanOnly as clap::Parser>::try_parse_from(&flags)
        .map_err(|e| anyhow::anyhow!("--partitions auto: {}", e.to_string().trim()))?
        .args;
    let planned = crate::cli::planned(&plan_args)?;
    let line = planned
        .note
        .lines()
        .find_map(|line| line.strip_prefix("partitions "))
        .map(|line| line.trim().to_string())
        .unwrap_or_default();
    Ok((planned.plan, line))
}

/// Refuses, for a run without `--spill-dir`, what asks for the SSD tier:
/// `--ssd-budget` over 0 (`asked`) or `--policy offload-ssd-all`.
fn no_ssd_tier(args: &TrainArgs, policy: &str, asked: bool) -> Result<()> {
    if let (Some(text), true) = (&args.ssd_budget, asked) {
        bail!(
            "--ssd-budget {text}: the SSD tier needs --spill-dir DIR, the folder its file goes in"
        );
    }
    if policy.eq_ignore_ascii_case(Policy::OffloadSsdAll.name()) {
        bail!("--policy {policy} keeps tensors on the SSD tier: give --spill-dir DIR");
    }
    Ok(())
}

/// `--backend`'s values: `gpu` is `cuda` (clap's suggestion for it was
/// `cpu`), kept as `cuda`.
fn backend_names() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new([
        PossibleValue::new("cpu"),
        PossibleValue::new("cuda").alias("gpu"),
    ])
    .map(|name| match name.as_str() {
        "gpu" => "cuda".to_string(),
        _ => name,
    })
}

/// The backend a run asked for; for CUDA, checked before the graph is
/// read, so a machine without a GPU says so at once.
fn backend_choice(args: &TrainArgs) -> Result<train::BackendChoice> {
    match args.backend.as_str() {
        "cpu" => {
            let given: Vec<&str> = [
                ("--cuda-device", args.cuda_device.is_some()),
                ("--kernel-cache", args.kernel_cache.is_some()),
            ]
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect();
            if !given.is_empty() {
                bail!(
                    "{} {} to --backend cuda, not cpu",
                    given.join(" and "),
                    if given.len() == 1 { "applies" } else { "apply" }
                );
            }
            Ok(train::BackendChoice::Cpu)
        }
        "cuda" => {
            // NVRTC outside the loader's path (a pip wheel, say): its folder.
            if let Some(dir) = std::env::var_os("FATEPLAN_NVRTC_DIR") {
                let dir = PathBuf::from(dir);
                fateplan::runtime::cuda::nvrtc::preload_nvrtc_dir(&dir)
                    .map_err(|e| anyhow::anyhow!("FATEPLAN_NVRTC_DIR: {e}"))?;
            }
            let device = args.cuda_device.unwrap_or(0);
            fateplan::runtime::cuda::probe(device)?;
            let kernel_cache_dir = args.kernel_cache.clone().or_else(|| {
                std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .map(|root| root.join("fateplan").join("kernels"))
            });
            Ok(train::BackendChoice::Cuda(
                fateplan::runtime::cuda::CudaOptions {
                    device,
                    kernel_cache_dir,
                    workspace_bytes: None,
                    synchronize_operators: false,
                    rebuild_transposes: false,
                    kernel_times: std::env::var_os("FATEPLAN_KERNEL_TIMES")
                        .is_some_and(|v| !v.is_empty() && v != "0"),
                    // The build before's ordering of loads, to time beside
                    // this one's (`benches/gpu.sh loads`).
                    compute_waits_for_loads: std::env::var_os("FATEPLAN_LOADS_WAIT")
                        .is_some_and(|v| !v.is_empty() && v != "0"),
                    // The run's host budget, set when the plan is known.
                    host_budget_bytes: None,
                },
            ))
        }
        other => bail!("--backend {other}: expected cpu or cuda"),
    }
}

/// The runtime's refusal of `Transposes::Mirrored` for this graph or
/// model, named by the flag (`--transposes mirrored: ...`); any other
/// error as it is.
fn mirrored_flagged(error: fateplan::runtime::Error) -> anyhow::Error {
    match error {
        fateplan::runtime::Error::InvalidInput { field, message, .. }
            if field == train::MIRRORED =>
        {
            anyhow::anyhow!("--transposes mirrored: {message}")
        }
        other => other.into(),
    }
}

/// The hyper-parameters the arguments give, checked.
pub(crate) fn hyper(args: &TrainArgs) -> Result<Hyper> {
    let model = GnnModel::parse(args.model()).map_err(|e| flagged("--model", args.model(), e))?;
    let hyper = Hyper {
        model,
        layers: args.layers(),
        hidden: args.hidden(),
        heads: args.heads(),
        dropout: args.dropout(),
        lr: args.lr,
        weight_decay: args.weight_decay,
        weight_decay_all_layers: args.weight_decay_all_layers,
        seed: args.seed,
        order: LayerOrder::parse(args.layer_order())
            .map_err(|e| crate::cli::flagged("--layer-order", args.layer_order(), e))?,
        transposes: Transposes::parse(args.transposes())
            .map_err(|e| crate::cli::flagged("--transposes", args.transposes(), e))?,
        // `auto` starts by outputs: planning chooses ([`run`]).
        sweeps: match args.sweep_auto() {
            true => Sweeps::default(),
            false => Sweeps::parse(args.sweep()).map_err(|e| {
                anyhow::anyhow!("{}; --sweep also takes auto", crate::cli::sweep_flagged(e))
            })?,
        },
    };
    if !(0.0..1.0).contains(&args.dropout()) {
        bail!(
            "--dropout {}: expected a probability in [0, 1)",
            args.dropout()
        );
    }
    if model != GnnModel::Gat && args.heads() != 1 {
        bail!(
            "--heads {}: attention heads apply to gat only",
            args.heads()
        );
    }
    if model == GnnModel::Gat && args.layers() > 1 {
        crate::cli::heads_divide(args.hidden(), args.heads())?;
    }
    if hyper.transposes == Transposes::Mirrored && args.devices() > 1 {
        bail!(
            "--transposes mirrored: one device only (with --devices {}, a device's blocks are \
             its share's, whose mirrors are not checked); use stored or built",
            args.devices()
        );
    }
    if model == GnnModel::Gat && hyper.transposes != Transposes::Stored {
        bail!(
            "--transposes {}: applies to gcn and sage (gat's backward builds its transposes \
             either way)",
            args.transposes()
        );
    }
    if let Some(given) = args.layer_order.as_ref().filter(|_| model != GnnModel::Gcn) {
        bail!(
            "--layer-order {given}: the layer order applies to gcn only (gat always projects \
             first, sage aggregates first); leave it out: the model is {}",
            model.name()
        );
    }
    if args.epochs == 0 {
        bail!("--epochs 0: expected at least 1");
    }
    if args.partitions() == 0 {
        bail!("--partitions 0: expected at least 1");
    }
    Ok(hyper)
}

/// How --shares shares the vertices out (default mincut).
pub(crate) fn share_method(args: &TrainArgs) -> Result<fateplan::runtime::share::ShareMethod> {
    let name = args.shares.as_deref().unwrap_or("mincut");
    fateplan::runtime::share::ShareMethod::parse(name)
        .ok_or_else(|| anyhow::anyhow!("--shares {name}: expected mincut or ranges"))
}

/// The graph the arguments name, its feature rows normalised to sum 1
/// unless --raw-features or some feature is negative, and a line saying
/// what was done to the features.
pub(crate) fn dataset(args: &TrainArgs) -> Result<(fateplan::runtime::dataset::Dataset, String)> {
    let mut dataset = train::load_graph(&args.graph)?;
    has_training_nodes(&dataset, &args.graph)?;
    let features = if args.raw_features {
        RAW_FEATURES.to_string()
    } else {
        dataset.row_normalize_features().describe()
    };
    Ok((dataset, features))
}

/// Points the probe is timed at before training, and again after, where
/// `--compare-simulated` compares the machine's speed with the profile's
/// (each point a few of its runs, tens of milliseconds on a CPU).
const PROBE_POINTS: usize = 2;

const RAW_FEATURES: &str = "kept as they are (--raw-features)";

/// The classes no node has, said where some are; a stray label that
/// would make the output layer wide is refused
/// ([`fateplan::runtime::dataset::stray_label`]).
fn unused_classes(
    dataset: &fateplan::runtime::dataset::Dataset,
    graph: &str,
) -> Result<Option<String>> {
    let classes = dataset.classes as usize;
    if dataset.y.is_empty() {
        return Ok(None);
    }
    let mut seen = vec![false; classes];
    for &label in &dataset.y {
        if let Some(slot) = usize::try_from(label).ok().and_then(|l| seen.get_mut(l)) {
            *slot = true;
        }
    }
    let occur = seen.iter().filter(|&&s| s).count();
    let file = std::path::Path::new(graph);
    let place = match file.is_dir() {
        true => file.join("y.npy"),
        false => file.to_path_buf(),
    };
    let labels = dataset.y.iter().map(|&l| u64::try_from(l).unwrap_or(0));
    fateplan::runtime::dataset::stray_label(&place, labels)?;
    Ok((occur < classes).then(|| {
        format!(
            "{classes} classes (one more than the largest label, {}), of which {occur} occur: \
             the output layer is {classes} wide",
            classes - 1
        )
    }))
}

/// Where the split masks share nodes: an accuracy over nodes the model
/// trained on is not a held-out score, so the report says so. (Nothing
/// else depends on the splits being apart: training goes on.)
fn overlapping_splits(dataset: &fateplan::runtime::dataset::Dataset) -> Option<String> {
    let masks = [
        ("train_mask", &dataset.train_mask),
        ("val_mask", &dataset.val_mask),
        ("test_mask", &dataset.test_mask),
    ];
    let mut said = Vec::new();
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let ((first_name, first), (second_name, second)) = (masks[a], masks[b]);
        let mut shared = first
            .iter()
            .zip(second.iter())
            .enumerate()
            .filter(|(_, (x, y))| **x && **y)
            .map(|(v, _)| v);
        let Some(node) = shared.next() else {
            continue;
        };
        let nodes = count(1 + shared.count() as u64, "node");
        let score = match second_name {
            "val_mask" => "validation",
            _ => "test",
        };
        let consequence = match a {
            0 => format!(": the {score} accuracy counts nodes trained on"),
            _ => String::new(),
        };
        said.push(format!(
            "{first_name} and {second_name} share {nodes} (the first: node {node}){consequence}"
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// Training learns from the nodes of the training mask alone: a graph
/// whose mask selects none has nothing to train on.
pub(crate) fn has_training_nodes(
    dataset: &fateplan::runtime::dataset::Dataset,
    graph: &str,
) -> Result<()> {
    if !dataset.train_mask.contains(&true) {
        let file = if std::path::Path::new(graph).is_dir() {
            " (train_mask.npy)"
        } else {
            ""
        };
        bail!(
            "--graph {graph}: its training mask{file} selects none of its {} nodes; training \
             needs at least one",
            dataset.nodes
        );
    }
    Ok(())
}

/// The graph the arguments name without its features or edges (a
/// launcher of member processes plans from the topology, read a batch of
/// edges at a time; each member reads its own rows), where its edges are
/// read from, whether [`dataset`] would normalise its rows to sum 1
/// (found by reading every row in turn, holding none), and the line
/// saying so.
fn topology(args: &TrainArgs) -> Result<Topology> {
    let (dataset, rows, edges) = train::open_graph(&args.graph)?;
    has_training_nodes(&dataset, &args.graph)?;
    if args.raw_features {
        return Ok((dataset, edges, false, RAW_FEATURES.to_string()));
    }
    let scaling = rows.scaling()?;
    let sum_to_one = matches!(scaling, FeatureScaling::RowsSumToOne { .. });
    Ok((dataset, edges, sum_to_one, scaling.describe()))
}

type Topology = (
    fateplan::runtime::dataset::Dataset,
    EdgeSource<'static>,
    bool,
    String,
);

impl TrainArgs {
    /// Whether the report is printed as JSON (`--json`).
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

/// What the members' spill stores said of their I/O, as one line: the
/// mode where all said the same, else each device's. `None` where none
/// opened one.
fn members_io(modes: &[Option<String>]) -> Option<String> {
    let first = modes.iter().flatten().next()?;
    if modes.iter().all(|m| m.as_ref() == Some(first)) {
        return Some(first.clone());
    }
    Some(
        modes
            .iter()
            .enumerate()
            .map(|(rank, m)| format!("device {rank} {}", m.as_deref().unwrap_or("none")))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

pub fn run(args: &TrainArgs, load_profile: fn(&str) -> Result<Profile>) -> Result<()> {
    crate::cli::set_threads(args.threads)?;
    if args.weight_decay_all_layers && args.weight_decay == 0.0 {
        eprintln!(
            "warning: --weight-decay-all-layers does nothing with --weight-decay 0: no layer's \
             weights decay"
        );
    }
    // From the flags as given: a plan's own shape (`--plan`) is not the
    // user's to be told about, and GCN refuses heads anyway.
    if args.plan.is_none() {
        let gat = GnnModel::parse(args.model()).ok() == Some(GnnModel::Gat);
        crate::cli::one_layer_warning(args.layers(), args.hidden, None, args.heads.filter(|_| gat));
    }
    crate::cli::warn_bare_budgets(
        [
            ("hbm-budget", &args.hbm_budget),
            ("host-budget", &args.host_budget),
            ("ssd-budget", &args.ssd_budget),
        ],
        true,
    );
    crate::cli::distinct_outputs(&[
        ("--save-plan", args.save_plan.as_deref()),
        ("--trace", args.trace.as_deref()),
        ("--csr-cache", args.csr_cache.as_deref()),
    ])?;
    crate::cli::spare_inputs(
        &[
            ("--save-plan", args.save_plan.as_deref()),
            ("--trace", args.trace.as_deref()),
            ("--csr-cache", args.csr_cache.as_deref()),
        ],
        &[
            ("--graph", crate::cli::existing(&args.graph)),
            ("--plan", args.plan.as_deref()),
            (
                "--profile",
                args.profile.as_deref().and_then(crate::cli::existing),
            ),
        ],
    )?;
    // What is written after training is checked before it.
    let trace_out = args
        .trace
        .as_deref()
        .map(|path| crate::cli::Staged::create(path, "--trace"))
        .transpose()?;
    let plan_out = args
        .save_plan
        .as_deref()
        .map(|path| crate::cli::Staged::create(path, "--save-plan"))
        .transpose()?;
    // A cache is a file (read where it exists, so maybe read-only), in a
    // folder that exists; spill files go in a folder.
    // Whether the cache is read (it exists) or written, for the report.
    let csr_cache_read = args.csr_cache.as_deref().is_some_and(Path::exists);
    if let Some(path) = &args.csr_cache {
        crate::cli::check_file_path(path, "--csr-cache")?;
        // Read and renamed over: a device or a pipe cannot be either.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            bail!(
                "--csr-cache {}: is not a regular file (the cache is a file fateplan reads \
                 where it exists, else writes)",
                path.display()
            );
        }
        // One to write: its folder must take it, known before the graph
        // is read.
        if !path.exists() {
            drop(crate::cli::Staged::create(path, "--csr-cache")?);
        }
    }
    if let Some(dir) = &args.spill_dir {
        if dir.exists() && !dir.is_dir() {
            bail!("--spill-dir {}: is not a directory", dir.display());
        }
    }
    // A plan is read first: the model it was made for is the one trained.
    // Its predictions, where they differ from what its schedule gives (a
    // plan edited by hand), are derived again and said to be.
    let mut plan_recomputed = Vec::new();
    // `--partitions auto`: sized and planned as `plan` does, then trained
    // as a plan given (its budgets, in bytes, the run's).
    let sized = match args.partitions_auto() {
        true => Some(sized_plan(args)?),
        false => None,
    };
    let auto_args;
    let (args, sized_plan, sized_note) = match sized {
        Some((plan, line)) => {
            auto_args = TrainArgs {
                partitions: None,
                sweep: None,
                hbm_budget: None,
                host_budget: None,
                ssd_budget: None,
                ..args.clone()
            };
            (&auto_args, Some(plan), Some(line))
        }
        None => (args, None, None),
    };
    let given_plan = match (&args.plan, sized_plan) {
        (_, Some(plan)) => Some((plan, "sized by --partitions auto".to_string())),
        (None, None) => None,
        (Some(path), None) => {
            let source = path.display().to_string();
            let text = fateplan::read_text(path)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("--plan {source}"))?;
            let read = Plan::read(&text, &source)?;
            if let Some(rejected) = read.rejected {
                // A plan that breaks its own budgets is bad input here.
                bail!("{source}: {rejected}");
            }
            plan_recomputed = read.recomputed;
            let plan = read.plan;
            if args.profile.is_none() {
                crate::cli::warn_unsteady_plan(&source, &plan);
            }
            if let Some(name) = &args.profile {
                let given = load_profile(name)?;
                if given != plan.profile {
                    // Measured profiles share a default name: where the
                    // names are the same, it is the figures that differ.
                    let made_on = match given.name == plan.profile.name {
                        true => format!(
                            "a profile also named {:?}, with other figures",
                            plan.profile.name
                        ),
                        false => format!("profile {:?}", plan.profile.name),
                    };
                    bail!(
                        "--profile {name}: the plan {source} was made on {made_on}; leave \
                         --profile out to train it as it was made, or plan again for this profile"
                    );
                }
            }
            Some((plan, source))
        }
    };
    // How a refusal names the device count: given, or the plan's.
    let devices_given = args.devices.is_some();
    let adopted;
    let args = match given_plan.as_ref() {
        Some((plan, source)) => match &plan.workload.model {
            Some(model) => {
                if model.devices > 1 && model.shares.is_none() {
                    let shape = match model.model.as_str() {
                        "gat" => format!(" --heads {}", model.heads),
                        "gcn" => format!(" --layer-order {}", model.layer_order),
                        _ => String::new(),
                    };
                    let dropout = model
                        .dropout
                        .map_or(String::new(), |p| format!(" --dropout {p}"));
                    bail!(
                        "--plan {source}: the plan was made by `fateplan plan --gpus {k}` for \
                         the statistics of one GPU's share (of a --dataset, or by a build from \
                         before plans of real shares), which `train` does not build; \
                         `fateplan train --graph {} --devices {k} --model {} --layers {} \
                         --hidden {}{shape} --transposes {} --sweep {} \
                         --partitions {}{dropout} --save-plan FILE`, \
                         or `fateplan plan --graph` with the same flags and --gpus {k}, writes a \
                         plan of the shares it trains, which --plan takes",
                        args.graph,
                        model.model,
                        model.layers,
                        model.hidden,
                        model.transposes,
                        model.sweep,
                        model.partitions,
                        k = model.devices,
                    );
                }
                adopted = args.adopting(model, source)?;
                &adopted
            }
            None if args.sweep_auto() => bail!(
                "--sweep auto: the plan {source} is trained as it was made (it records no \
                 model, so no sweep); leave --sweep out, or plan again with --sweep auto"
            ),
            None => args,
        },
        None => args,
    };
    if let Some(limit) = args.milp_time_limit {
        let policy = args.policy.as_deref().unwrap_or("dp");
        if !policy.eq_ignore_ascii_case(Policy::Milp.name()) {
            bail!("--milp-time-limit {limit}: applies to --policy milp only, not to {policy}");
        }
    }
    let mut hyper = hyper(args)?;
    let backend = backend_choice(args)?;
    if args.devices() == 0 {
        bail!("--devices 0: expected at least 1");
    }
    let shared = args.devices() > 1;
    let devices_flag = format!(
        "--devices {}{}",
        args.devices(),
        if devices_given { "" } else { " (the plan's)" }
    );
    if shared && !matches!(backend, train::BackendChoice::Cpu) {
        bail!(
            "{devices_flag}: training on several devices runs on the CPU backend only (the CUDA \
             backend's exchange through NCCL is not written)"
        );
    }
    if shared && args.csr_cache.is_some() {
        bail!("--csr-cache applies to one device; leave it out with {devices_flag}");
    }
    let share_method = share_method(args)?;

    if args.shares.is_some() && !shared {
        bail!(
            "--shares: sharing vertices out applies with --devices above 1 (--devices {})",
            args.devices()
        );
    }
    if args.processes && !shared {
        bail!(
            "--processes: each device a process applies with --devices above 1 (--devices {})",
            args.devices()
        );
    }
    if let (Some(every), true) = (args.eval_every, args.processes) {
        bail!(
            "--eval-every {every}: member processes report at the end, not per epoch: evaluate \
             with --devices alone (devices as threads), or leave it out"
        );
    }
    // Member processes read their own rows, normalised as the whole
    // graph's would be.
    let (dataset, source, features, rows_sum_to_one) = if args.processes {
        let (dataset, edges, sum_to_one, line) = topology(args)?;
        (dataset, Some(edges), line, sum_to_one)
    } else {
        let (dataset, line) = dataset(args)?;
        (dataset, None, line, false)
    };

    crate::cli::note_unread_arrays(&args.graph);
    crate::cli::note_flushed_features(&args.graph);
    let labels = unused_classes(&dataset, &args.graph)?;
    let splits = overlapping_splits(&dataset);
    let nodes = dataset.nodes;
    // Each partition needs a vertex: said by the flag, before any is built.
    let parts = u64::from(args.partitions()) * u64::from(args.devices());
    if nodes < parts {
        let each = match args.devices() {
            1 => String::new(),
            k => format!(" on each of {k} devices"),
        };
        bail!(
            "--partitions {}{each}: {} for a graph of {nodes} nodes: each partition needs a vertex",
            args.partitions(),
            fateplan::planner::units::count(parts, "partition")
        );
    }
    let dataset_dims = (dataset.features, dataset.classes);
    // The model checked on the graph's widths before anything is built:
    // a sweep of a layer it lacks is the flag's fault.
    train::spec(dataset_dims.0, dataset_dims.1, &hyper, &dataset.name)
        .validate()
        .map_err(crate::cli::sweep_flagged)?;
    let edges = source.as_ref().map_or(dataset.edges(), |s| s.len());
    let mut prepared = if let Some(source) = source {
        // With --processes each member builds its own share: the
        // launcher needs the workload and the statistics only, which it
        // counts reading the edges a batch at a time.
        Prepared::Shared(prepare_shared_from(
            dataset,
            source,
            &hyper,
            args.devices(),
            args.partitions(),
            share_method,
            Keep::None,
        )?)
    } else if shared {
        Prepared::Shared(prepare_shared_keeping(
            dataset,
            &hyper,
            args.devices(),
            args.partitions(),
            share_method,
            Keep::All,
        )?)
    } else {
        Prepared::One(
            train::prepare_cached(
                dataset,
                &hyper,
                args.partitions(),
                args.csr_cache.as_deref(),
            )
            .map_err(mirrored_flagged)?,
        )
    };
    let workload = prepared.workload();
    let profile = load_profile(args.profile.as_deref().unwrap_or("cpu-small"))?;
    // The retain-all plan's peak on these GPUs with these exchanges.
    let retain_peak = |like: &PlanOptions| crate::cli::retain_all_peak(workload, &profile, like);
    // With --plan, budget flags set the run's arenas (the plan is refused
    // if it needs more); without, they are the budgets to plan for.
    let mut run_budgets = None;
    // With --plan, what each budget flag's share was of (none for bytes).
    let mut shares_said: [Option<String>; 3] = Default::default();
    let mut unplanned_exchange = None;
    // `--sweep auto`'s workload and the summary's line on it.
    let mut chosen = None;
    // What `train --plan` trains (with --save-plan).
    let mut trained_model = PlanModel {
        model: hyper.model.name().to_string(),
        layers: hyper.layers,
        hidden: hyper.hidden,
        heads: hyper.heads,
        layer_order: hyper.order.name().to_string(),
        transposes: hyper.transposes.name().to_string(),
        sweep: train::spec(dataset_dims.0, dataset_dims.1, &hyper, "").sweep_name(),
        partitions: args.partitions(),
        devices: args.devices(),
        shares: shared.then(|| share_method.name().to_string()),
        dropout: Some(hyper.dropout),
    };
    // A plan made for the same tensors and operators under another name
    // (the graph's folder or file name: a folder renamed, or written by
    // `generate` from the spec the plan was made from) trains under this
    // run's name, and the report says so.
    let mut renamed_plan = None;
    let plan = match given_plan {
        Some((mut plan, source)) => {
            if plan.workload.name != workload.name {
                let as_planned = Workload {
                    name: plan.workload.name.clone(),
                    ..workload.clone()
                };
                if train::plan_is_for(&plan, &as_planned) {
                    let planned = std::mem::replace(&mut plan.workload.name, workload.name.clone());
                    plan.workload.definition.name = workload.name.clone();
                    plan.workload.digest = plan.workload.definition.digest();
                    renamed_plan = Some(planned);
                }
            }
            // A plan from before plans recorded their model is saved
            // with this run's, where it is for this run's workload (were
            // it not, training refuses it).
            if plan.workload.model.is_none() && plan.workload.digest == workload.digest() {
                plan.workload.model = Some(trained_model);
            }
            // Likewise a model that records no dropout: saved with the
            // dropout it trains at, so that the saved plan trains the
            // same model again.
            if let Some(model) = plan.workload.model.as_mut() {
                model.dropout.get_or_insert(hyper.dropout);
            }
            if args.hbm_budget.is_some() || args.host_budget.is_some() || args.ssd_budget.is_some()
            {
                let given = plan.budgets;
                // The plan's profile, one device's share of it.
                let machine = plan.profile.share(plan.gpus);
                let held = crate::cli::Capacity {
                    profile: &plan.profile.name,
                    gpus: plan.gpus,
                    replay: false,
                };
                // The plan's GPUs and exchanges, taken as they are, on
                // its profile (the run's may have no peer link to price
                // them by).
                let like = PlanOptions {
                    gpus: plan.gpus,
                    exchanges: plan.exchanges.clone(),
                    ..PlanOptions::new(Policy::RetainAll, &plan.profile)
                };
                let planned_on = plan.profile.clone();
                let retain_peak = || crate::cli::retain_all_peak(workload, &planned_on, &like);
                let said = |flag, name, given, capacity, shared| {
                    budget_said(flag, name, (given, capacity, shared), &held, &retain_peak)
                };
                let hbm = said(
                    &args.hbm_budget,
                    "hbm-budget",
                    given.hbm_bytes,
                    machine.device.hbm_bytes,
                    false,
                )?;
                let host = said(
                    &args.host_budget,
                    "host-budget",
                    given.host_bytes,
                    machine.host.memory_bytes,
                    true,
                )?;
                let ssd = said(
                    &args.ssd_budget,
                    "ssd-budget",
                    given.ssd_bytes,
                    machine.ssd.capacity_bytes,
                    true,
                )?;
                shares_said = [hbm.1, host.1, ssd.1];
                run_budgets = Some(Budgets {
                    hbm_bytes: hbm.0,
                    host_bytes: host.0,
                    ssd_bytes: ssd.0,
                });
            }
            // A budget flag the plan does not fit: said by the flag,
            // before anything is placed.
            if let Some(run) = &run_budgets {
                let flags = [
                    (Tier::Hbm, "hbm-budget", &args.hbm_budget),
                    (Tier::Host, "host-budget", &args.host_budget),
                    (Tier::Ssd, "ssd-budget", &args.ssd_budget),
                ];
                for ((tier, name, given), said) in flags.into_iter().zip(&shares_said) {
                    let (needed, held) = (plan.predicted.peak_bytes.get(tier), run.of(tier));
                    if let Some(text) = given.as_deref().filter(|_| needed > held) {
                        // A share is of the retain-all plan at the plan's
                        // count, which `plan --partitions auto` may not
                        // have taken its shares at.
                        let share = match said {
                            Some(said) => format!(
                                ": {said} at the plan's {}; `plan --partitions auto` takes its \
                                 shares of the retain-all plan at the count it is sized to, \
                                 which may be fewer",
                                match plan.workload.model.as_ref() {
                                    Some(model) => fateplan::planner::units::count(
                                        u64::from(model.partitions),
                                        "partition"
                                    ),
                                    None => "partition count".to_string(),
                                }
                            ),
                            None => String::new(),
                        };
                        bail!(
                            "--{name} {text}: the plan {source} needs {} of {tier} at its peak, \
                             more than this budget ({}{share}); leave --{name} out to train \
                             with the plan's ({}), or plan again for this one",
                            format_bytes(needed),
                            format_bytes(held),
                            format_bytes(plan.budgets.of(tier))
                        );
                    }
                }
            }
            plan
        }
        None => {
            let name = args.policy.as_deref().unwrap_or("dp");
            let policy = Policy::parse(name).map_err(|e| flagged("--policy", name, e))?;
            let mut options = PlanOptions::new(policy, &profile);
            if let Some(limit) = args.milp_time_limit {
                // (Its policy checked before the graph was read.)
                options.milp_time_limit_s = limit;
            }
            if shared && profile.peer.is_some() {
                // As `plan --gpus`: one device's share of its node's host
                // memory and SSD.
                let share = profile.share(args.devices());
                options.budgets.host_bytes = share.host.memory_bytes;
                options.budgets.ssd_bytes = share.ssd.capacity_bytes;
            }
            if let Some(s) = prepared.shared().filter(|_| profile.peer.is_some()) {
                // The halo measured on the shares, against the estimate
                // for a random partitioning.
                let halo = crate::cli::shares_halo(nodes, edges, args.devices(), &s.stats);
                options.gpus = args.devices();
                options.multi = Some(MultiGpu { halo, forced: None });
            }
            // Planned here: refused first where that would run the
            // machine out of memory (a plan given is not planned again),
            // beside its sweeps' workloads under `--sweep auto`.
            crate::cli::plannable_as(args.sweep_auto())(
                workload,
                &profile,
                &options,
                &crate::cli::fewer_partitions(args.partitions()),
            )?;
            // Percentages are of the retain-all plan on these GPUs.
            let like = options.clone();
            let retain_peak = || retain_peak(&like);
            // The defaults are the profile's capacities (one device's
            // share of its node's host memory and SSD).
            let given = options.budgets;
            let held = crate::cli::Capacity {
                profile: &profile.name,
                gpus: if shared && profile.peer.is_some() {
                    args.devices()
                } else {
                    1
                },
                replay: false,
            };
            options.budgets.hbm_bytes = budget(
                &args.hbm_budget,
                "hbm-budget",
                (given.hbm_bytes, given.hbm_bytes, false),
                &held,
                &retain_peak,
            )?;
            options.budgets.host_bytes = budget(
                &args.host_budget,
                "host-budget",
                (given.host_bytes, given.host_bytes, true),
                &held,
                &retain_peak,
            )?;
            options.budgets.ssd_bytes = budget(
                &args.ssd_budget,
                "ssd-budget",
                (given.ssd_bytes, given.ssd_bytes, true),
                &held,
                &retain_peak,
            )?;
            // Without a spill folder there is no SSD tier to plan for:
            // asked for, it is refused now, not after planning; else the
            // plan is made without it (a plan that spilled would be
            // refused only once made, after the MILP's whole time limit).
            if args.spill_dir.is_none() {
                no_ssd_tier(args, name, options.budgets.ssd_bytes > 0)?;
                options.budgets.ssd_bytes = 0;
            }
            if shared && options.multi.is_none() {
                unplanned_exchange = Some(format!(
                    "the plan leaves the exchange out: profile {} has no peer section (no \
                     device-to-device link to model)",
                    profile.name
                ));
            }
            let mut plan = match args.sweep_auto() {
                true => {
                    let outputs = Some((
                        workload.clone(),
                        fateplan::planner::sizing::ByOutputs::Unplanned,
                    ));
                    // Compared polished from one start; the plan taken is
                    // made again where `options` ask more.
                    let search = options.for_search();
                    let auto =
                        crate::cli::auto_sweeps(prepared.shape(), &profile, &search, outputs)?;
                    let swept = auto.swept;
                    hyper.sweeps = swept.sweeps;
                    trained_model.sweep = auto.name.clone();
                    let made = swept.plan.filter(|_| options.search_plans_final());
                    let plan = match made {
                        Some(made) => made.plan,
                        // Milp's plan (the walk compares dp's), none fits,
                        // or dp's polish from more starts: planned here,
                        // saying why none fits.
                        None => {
                            let _shown = crate::cli::solving(&options);
                            plan(&swept.workload, &profile, &options)
                        }
                        .map_err(|e| more_partitions(e, args.partitions()))
                        .with_context(|| {
                            format!("--sweep auto ({} sweeps planned)", swept.tried)
                        })?,
                    };
                    let json = serde_json::json!({
                        "sweep": auto.name,
                        "predicted_s": swept.predicted_s,
                        "outputs_s": swept.outputs_s,
                        "compared_by": auto.compared_by.name(),
                        "plans": swept.tried,
                        "screened": swept.screened.len(),
                        "grouped": swept.grouped.len(),
                    });
                    chosen = Some((swept.workload, swept.sweeps, auto.name, auto.line, json));
                    plan
                }
                false => {
                    let _shown = crate::cli::solving(&options);
                    plan(workload, &profile, &options)
                        .map_err(|e| more_partitions(e, args.partitions()))?
                }
            };
            plan.workload.model = Some(trained_model);
            plan
        }
    };
    // `--sweep auto`: the workload of the sweeps taken is trained, and
    // member processes are told them.
    let chosen_args;
    let mut sweep_auto = None;
    let args = match chosen {
        Some((workload, sweeps, name, line, json)) => {
            prepared.swept(workload, sweeps);
            sweep_auto = Some((line, json));
            chosen_args = TrainArgs {
                sweep: Some(name),
                ..args.clone()
            };
            &chosen_args
        }
        None => args,
    };
    let workload = prepared.workload();
    if let Some(out) = plan_out {
        out.write(plan.to_json().as_bytes())?;
    }
    let uses_ssd = plan.predicted.peak_bytes.ssd > 0;
    // A spill folder that is not there yet is made (and removed at the
    // end): said, since a mistyped path would spill to a drive no profile
    // measured.
    let spill_made = args
        .spill_dir
        .as_ref()
        .filter(|dir| !dir.exists())
        .map(|dir| {
            format!(
                "--spill-dir {}: not there, so made for the spill file and removed at the end",
                dir.display()
            )
        });
    // A run over the memory left is refused before a spill store or
    // folder is made for it (`train` checks again as it starts).
    match &prepared {
        Prepared::One(one) => train::check_memory(&plan, &backend, &[&one.input]),
        Prepared::Shared(_) if args.processes => {
            train::check_members_memory(&plan, args.devices() as u64)
        }
        Prepared::Shared(shares) => {
            let inputs: Vec<_> = shares.devices.iter().map(|d| &d.input).collect();
            train::check_memory(&plan, &backend, &inputs)
        }
    }
    .map_err(|e| plan_flagged(e, args.plan.as_deref()))?;
    let mut io_mode = None;
    // One store per device: each device's executor keys its blocks by
    // tensor, so devices cannot share one.
    // With several devices, each store has its own folder in the spill
    // folder: the folder and its missing parents are created here, and
    // removed where empty when the stores have closed (this is dropped
    // after them).
    let _spill_root = match &args.spill_dir {
        Some(dir) if shared => Some(
            CreatedDirs::create(dir)
                .with_context(|| format!("--spill-dir {}: creating it", dir.display()))?,
        ),
        _ => None,
    };
    let mut stores: Vec<Arc<dyn SsdTier>> = Vec::new();
    if let (Some(dir), true) = (&args.spill_dir, uses_ssd) {
        spill_room(dir, &plan, args.devices() as u64)?;
    }
    let ssd: Option<Arc<dyn SsdTier>> = match (&args.spill_dir, uses_ssd) {
        (Some(dir), _) => {
            let ssd_bytes = run_budgets.map_or(plan.budgets.ssd_bytes, |b: Budgets| b.ssd_bytes);
            let tensors = train::ssd_blocks(&plan);
            if args.processes {
                // Each member opens its own (`crate::members`).
                io_mode = Some(format!(
                    "one spill store per device process, in {}",
                    dir.display()
                ));
                None
            } else if shared {
                for rank in 0..args.devices() {
                    // The store creates (and on close removes) its folder.
                    let sub = dir.join(format!("device{rank}"));
                    let store = train::open_spill(&sub, ssd_bytes, tensors, None)
                        .with_context(|| format!("--spill-dir {}", dir.display()))?;
                    io_mode = Some(store.mode().to_string());
                    stores.push(store);
                }
                None
            } else {
                let store = train::open_spill(dir, ssd_bytes, tensors, None)
                    .with_context(|| format!("--spill-dir {}", dir.display()))?;
                io_mode = Some(store.mode().to_string());
                Some(store)
            }
        }
        (None, true) => bail!(
            "plan {} keeps {} on the SSD tier: give --spill-dir DIR",
            plan.policy,
            format_bytes(plan.predicted.peak_bytes.ssd)
        ),
        (None, false) => None,
    };
    let bar = indicatif::ProgressBar::new(args.epochs as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} epoch {pos}/{len} {msg}")
            .expect("a fixed template parses"),
    );
    // Each evaluation's epoch and validation accuracy (--eval-every).
    let mut evaluations: Vec<(u32, f64)> = Vec::new();
    let mut on_epoch = |stats: &EpochStats| {
        if let Some(val) = stats.val_accuracy {
            evaluations.push((stats.epoch, val));
        }
        // The last evaluation's, with its epoch.
        let val = match evaluations.last() {
            Some((epoch, val)) => format!("  val acc {val:.3} (epoch {epoch})"),
            None => String::new(),
        };
        // The message first: a redraw on the new position then shows this
        // epoch's loss, not the one before's.
        bar.set_message(format!(
            "loss {:.4}  train acc {}{val}  {:.1} it/s",
            stats.loss,
            accuracy(stats.train_accuracy, 3),
            1.0 / stats.iteration_s.max(1e-9)
        ));
        bar.set_position(stats.epoch as u64);
    };
    let workload_name = workload.name.clone();
    let plan = Arc::new(plan);
    let run = train::TrainRun {
        plan: plan.clone(),
        epochs: args.epochs,
        budgets: run_budgets,
        ssd,
        trace: args.trace.is_some() || args.compare_simulated,
        backend,
        stop: None,
        evaluate_every: args.eval_every.unwrap_or(0),
    };
    // The probe around a run on one CPU device, to compare the machine's
    // speed now with its speed when the profile was measured: timed
    // before and after training, its data dropped in between. Where it
    // cannot be, the comparison says why and the run goes on. Other
    // programs' share of the cores is counted while it trains.
    let mut probe = None;
    let mut machine_note = None;
    let mut cpu_times = None;
    if args.compare_simulated {
        let not = |why: String| Some(format!("the machine's speed is not compared: {why}"));
        let one_cpu = args.backend == "cpu" && matches!(prepared, Prepared::One(_));
        match &plan.profile.steadiness {
            None if one_cpu => {
                machine_note = not(format!(
                    "profile {} records no probe (shipped, written by hand, or measured by an \
                     earlier build)",
                    plan.profile.name
                ))
            }
            None => {}
            Some(_) if args.backend != "cpu" => {
                machine_note = not(format!(
                    "the probe times the CPU, and this run trains on the {} backend",
                    args.backend
                ))
            }
            Some(_) if !one_cpu => {
                machine_note = not("the probe is timed around a run on one device".to_string())
            }
            Some(profiled) => match measure::probe::comparable(profiled) {
                Err(why) => machine_note = not(why),
                Ok(()) => match measure::probe::time_points(PROBE_POINTS, "training") {
                    Ok(points) => probe = Some(points),
                    Err(e) => machine_note = not(format!("the probe failed: {e}")),
                },
            },
        }
        if one_cpu {
            cpu_times = measure::host::CpuTimes::now();
        }
    }
    let (report, spans, devices) = match prepared {
        Prepared::One(one) => {
            let (report, spans) = train::train(one, hyper, run, &mut on_epoch)
                .map_err(|e| plan_flagged(e, args.plan.as_deref()))?;
            (report, vec![spans], None)
        }
        Prepared::Shared(shares) if args.processes => {
            // The members report at the end, not per epoch.
            bar.println(format!(
                "training on {} member processes ({})",
                args.devices(),
                count(args.epochs as u64, "epoch")
            ));
            bar.finish_and_clear();
            // A plan for another run is refused before K processes
            // prepare the graph to find out.
            train::check_shared_plan(&plan, &shares.workload)
                .map_err(|e| plan_flagged(e, args.plan.as_deref()))?;
            let ssd_bytes = run.budgets.unwrap_or(plan.budgets).ssd_bytes;
            let launched = crate::members::launch(
                args,
                &plan,
                run.budgets,
                ssd_bytes,
                rows_sum_to_one,
                shares.owner.as_deref(),
            )?;
            if let (Some(mode), Some(said)) = (&mut io_mode, members_io(&launched.ssd_tiers)) {
                *mode = format!("{mode}: {said}");
            }
            let (shared, spans) = train::gather(launched.outcomes, shares.stats)?;
            (shared.report, spans, Some((shared.devices, shared.shares)))
        }
        Prepared::Shared(shares) => {
            let (shared, spans) = train::train_shared(shares, hyper, run, stores, &mut on_epoch)
                .map_err(|e| plan_flagged(e, args.plan.as_deref()))?;
            (shared.report, spans, Some((shared.devices, shared.shares)))
        }
    };
    bar.finish_and_clear();
    let comparison = if args.compare_simulated {
        // Device 0's: the plan is each device's.
        let mut comparison =
            compare_simulated(&plan, &report, spans.first().map_or(&[], Vec::as_slice))?;
        // Other programs' share of the cores while it trained (and the
        // comparison's replay, a small part).
        comparison.other_cores = cpu_times
            .zip(measure::host::CpuTimes::now())
            .and_then(|(a, b)| a.others_until(&b));
        if let (Some(mut points), Some(profiled)) = (probe, &plan.profile.steadiness) {
            match measure::probe::time_points(PROBE_POINTS, "the end") {
                Ok(after) => {
                    points.extend(after);
                    comparison.machine = measure::probe::drift(profiled, &points);
                }
                Err(e) => {
                    machine_note = Some(format!(
                        "the machine's speed is not compared: the probe failed after training: {e}"
                    ))
                }
            }
        }
        comparison.machine_note = machine_note;
        Some(comparison)
    } else {
        None
    };
    // A trace that cannot be written fails the run after its report.
    let trace_written = match trace_out {
        Some(out) => write_trace(out, &workload_name, &report.policy, &spans),
        None => Ok(()),
    };
    // The threads a CPU device trains at (several devices share the pool:
    // the slowest's), and a note where the profile was measured at others.
    let device_threads = (args.backend == "cpu").then(|| match &devices {
        Some(_) => {
            let k = args.devices() as usize;
            train::member_threads(rayon::current_num_threads(), k, k - 1)
        }
        None => rayon::current_num_threads(),
    });
    let threads_note = device_threads.and_then(|t| threads_note(&plan.profile, t, cores()));
    // On the CPU backend the device and host tiers are this machine's
    // memory: budgets of a larger machine's profile are what-ifs.
    let memory_note = (args.backend == "cpu")
        .then(machine_memory)
        .flatten()
        .and_then(|total| {
            // Where each budget came from: its flag, the plan file, or
            // the profile.
            let from = |given: &Option<String>| match (given, &args.plan) {
                (Some(_), _) => "given".to_string(),
                (None, Some(_)) => "the plan's".to_string(),
                (None, None) => format!("profile {}'s", plan.profile.name),
            };
            let from = [from(&args.hbm_budget), from(&args.host_budget)];
            memory_note(&report.budgets, &from, total)
        });
    let mut out = crate::cli::stdout();
    if args.json {
        let mut json = serde_json::to_value(&report)?;
        if let Some(threads) = device_threads {
            json["device_threads"] = threads.into();
            // Several devices: each one's, as the text's note gives them.
            if devices.is_some() {
                let (pool, k) = (rayon::current_num_threads(), args.devices() as usize);
                let each: Vec<usize> = (0..k)
                    .map(|rank| train::member_threads(pool, k, rank))
                    .collect();
                json["device_threads_each"] = each.into();
            }
        }
        if let Some(threads) = plan.profile.device.threads {
            json["profile_threads"] = threads.into();
        }
        if let Some(note) = &threads_note {
            json["threads_note"] = note.clone().into();
        }
        if let Some(note) = &memory_note {
            json["memory_note"] = note.clone().into();
        }
        // The warning on stderr of a profile measured on an unsteady machine.
        if let Some(why) = plan.profile.unsteady() {
            json["profile_unsteady"] = why.into();
        }
        if let Some(note) = &spill_made {
            json["spill_dir_note"] = note.clone().into();
        }
        if let Some(line) = &sized_note {
            json["partitions_auto"] = line.clone().into();
        }
        json["features"] = serde_json::to_value(&features)?;
        if args.eval_every.is_some() {
            json["validation"] = evaluations
                .iter()
                .map(|&(epoch, accuracy)| serde_json::json!({ "epoch": epoch, "accuracy": accuracy }))
                .collect();
        }
        if let Some(note) = &labels {
            json["labels"] = serde_json::to_value(note)?;
        }
        if let Some(note) = &splits {
            json["splits"] = serde_json::to_value(note)?;
        }
        if let Some(comparison) = &comparison {
            json["compare_simulated"] = serde_json::to_value(comparison)?;
            // What "measured" is: the median iteration (`median`).
            json["compare_simulated"]["measured_epochs"] = measured_epochs(report.epochs).into();
        }
        if let Some((devices, shares)) = &devices {
            json["devices"] = serde_json::to_value(devices)?;
            json["shares"] = serde_json::to_value(shares)?;
        }
        if let Some((_, auto)) = &sweep_auto {
            json["sweep_auto"] = auto.clone();
        }
        // The text's "the rest": neither computing nor waiting.
        json["other_s"] = (report.iteration_s - report.compute_s - report.wait_s)
            .max(0.0)
            .into();
        // What the text's header and file lines say: the workload, the
        // SSD tier's I/O, and the files read or written.
        json["workload"] = workload_name.clone().into();
        if let Some(planned) = &renamed_plan {
            json["plan_workload"] = planned.clone().into();
        }
        if !plan_recomputed.is_empty() {
            json["plan_predictions_recomputed"] = plan_recomputed.clone().into();
        }
        if let Some(mode) = &io_mode {
            json["ssd_tier"] = mode.clone().into();
        }
        if let Some(path) = &args.csr_cache {
            json["csr_cache"] = serde_json::json!({
                "path": path.display().to_string(),
                "read": csr_cache_read,
            });
        }
        if let Some(path) = &args.save_plan {
            json["saved_plan"] = path.display().to_string().into();
        }
        if let (Some(path), Ok(())) = (&args.trace, &trace_written) {
            json["trace"] = path.display().to_string().into();
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        return trace_written;
    }
    writeln!(
        out,
        "trained   {} with plan {}, {}",
        workload_name,
        report.policy,
        count(report.epochs as u64, "epoch")
    )?;
    if let Some((line, _)) = &sweep_auto {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "accuracy  train {}  val {}  test {}  (final loss {:.4})",
        accuracy(report.train_accuracy, 4),
        accuracy(report.val_accuracy, 4),
        accuracy(report.test_accuracy, 4),
        report.final_loss
    )?;
    if let Some(line) = args
        .eval_every
        .and_then(|every| validation_line(every, &evaluations))
    {
        writeln!(out, "{line}")?;
    }
    // What neither computes nor waits: issuing transfers, the executor's
    // bookkeeping (and on several devices, the slowest member's spread).
    let rest = (report.iteration_s - report.compute_s - report.wait_s).max(0.0);
    // A shipped profile describes some machine, not this one: its
    // prediction is not this machine's.
    // A plan's profile under a shipped one's name with other figures (a
    // plan edited, or made on a profile file of that name) is said to be,
    // as `simulate` says it.
    let shipped = fateplan::profiles::builtin(&plan.profile.name).as_ref() == Some(&plan.profile);
    let on = match fateplan::profiles::builtin(&plan.profile.name) {
        Some(shipped) if shipped == plan.profile => format!(
            " on profile {:?} (shipped with fateplan, not this machine)",
            plan.profile.name
        ),
        Some(_) => format!(
            " on profile {:?} (the plan's own figures, not those of the profile shipped with \
             fateplan under that name)",
            plan.profile.name
        ),
        None => format!(" on profile {:?}", plan.profile.name),
    };
    // The mean: a slow epoch counts. The median beside it, which
    // `--compare-simulated` takes, where there are several to take it of.
    let mean = match report.epochs {
        0..=1 => String::new(),
        2 => " (the mean after the first epoch)".to_string(),
        _ => format!(
            " (the mean after the first epoch; their median {})",
            format_seconds(report.median.iteration_s)
        ),
    };
    // The simulator's replay, which the comparison below measures against,
    // said beside the planner's prediction where they differ (it models
    // what the planner's search does not: the copies' share of the cores,
    // transfers queued on their link).
    let on = match &comparison {
        Some(c) if differ_by_a_percent(c.iteration_s.simulated, report.iteration_s_predicted) => {
            format!(
                "{on}, {} simulated (the comparison below)",
                format_seconds(c.iteration_s.simulated)
            )
        }
        _ => on,
    };
    // On several devices the rest is mostly waiting for the others (their
    // halos and gradients) and, sharing the cores, for a core.
    let rest_is = match args.devices() {
        1 => "issuing transfers, bookkeeping",
        _ => "waiting for the other devices or a core, issuing transfers, bookkeeping",
    };
    writeln!(
        out,
        "time      {} per iteration measured{mean}, {} predicted{on}; compute {} (recomputation {} \
         of it), waiting {}, the rest {} ({rest_is})",
        format_seconds(report.iteration_s),
        format_seconds(report.iteration_s_predicted),
        format_seconds(report.compute_s),
        format_seconds(report.recompute_s),
        format_seconds(report.wait_s),
        format_seconds(rest)
    )?;
    for (tier, peak, limit) in [
        ("hbm", report.peak_bytes.hbm, report.budgets.hbm_bytes),
        ("host", report.peak_bytes.host, report.budgets.host_bytes),
        ("ssd", report.peak_bytes.ssd, report.budgets.ssd_bytes),
    ] {
        writeln!(
            out,
            "peak      {tier:<4} {} of {}",
            format_bytes(peak),
            format_bytes(limit)
        )?;
    }
    if let Some(device) = report.device_peak_bytes {
        writeln!(
            out,
            "device    {} at most in the device pool (every buffer), {} by the executor's count",
            format_bytes(device),
            format_bytes(report.peak_bytes.hbm)
        )?;
    }
    let m = report.bytes_moved;
    // Device 0's, where there are several: each moves its own share's.
    let whose = match devices {
        Some(_) => " on device 0",
        None => "",
    };
    writeln!(
        out,
        "moved     h2d {}, d2h {}, ssd read {}, ssd write {} per iteration{whose}",
        format_bytes(m.h2d),
        format_bytes(m.d2h),
        format_bytes(m.ssd_read),
        format_bytes(m.ssd_write)
    )?;
    if let Some(mode) = io_mode {
        let unused = if m.ssd_read == 0 && m.ssd_write == 0 {
            " (opened, unused: the plan moves nothing through the SSD)"
        } else {
            ""
        };
        writeln!(out, "ssd tier  {mode}{unused}")?;
    }
    writeln!(out, "weights   sha256 {}", report.weights_sha256)?;
    writeln!(out, "features  {features}")?;
    if let Some(note) = &labels {
        writeln!(out, "labels    {note}")?;
    }
    if let Some(note) = &splits {
        writeln!(out, "splits    {note}")?;
    }
    if let Some(planned) = &renamed_plan {
        writeln!(
            out,
            "note      the plan was made for workload {planned}, whose tensors and operators \
             are this run's under another name (the graph's folder or file name)"
        )?;
    }
    if let Some(note) = crate::cli::recomputed_note(&plan_recomputed) {
        writeln!(out, "note      {note}")?;
    }
    if let Some(line) = &sized_note {
        writeln!(out, "partitions {line}")?;
    }
    if let Some(note) = &unplanned_exchange {
        writeln!(out, "note      {note}")?;
    }
    if let Some(note) = &threads_note {
        writeln!(out, "note      {note}")?;
    }
    if let Some(note) = &memory_note {
        writeln!(out, "note      {note}")?;
    }
    if let Some(note) = &spill_made {
        writeln!(out, "note      {note}")?;
    }
    if let Some((_, s)) = &devices {
        writeln!(
            out,
            "shares    {} of {} edges cross devices; halo rows {} in all, {} at most on one \
             device ({} shares)",
            s.halo_edges,
            s.edges,
            s.halo_rows_total,
            s.halo_rows_max,
            s.method.name()
        )?;
        let k = args.devices() as usize;
        let threads = rayon::current_num_threads();
        let most = train::member_threads(threads, k, 0);
        let fewest = train::member_threads(threads, k, k - 1);
        let share = match (fewest == most, most == 1) {
            (true, true) => "1 thread".to_string(),
            (true, false) => format!("{most} threads"),
            (false, _) => format!("{fewest}-{most} threads"),
        };
        // The profile's threads where it names them: the note on them
        // says what to measure, or nothing where they are the slowest's.
        let measured = match plan.profile.device.threads {
            Some(t) if t as usize == fewest => {
                format!(
                    ", measured at the slowest device's {}",
                    count(fewest as u64, "thread")
                )
            }
            Some(_) => String::new(),
            None => format!(
                " (one taken with `fateplan profile --threads {fewest}` measures the slowest \
                 device's)"
            ),
        };
        writeln!(
            out,
            "note      the CPU devices share this machine's cores: each trains on a pool of \
             {share} of the {threads} (one at least), and the prediction prices each at the \
             profile's compute{measured}"
        )?;
        if args.processes {
            let launcher = crate::members::peak_resident_bytes()
                .map(|b| {
                    format!(
                        "; the launching process held at most {} resident",
                        format_bytes(b)
                    )
                })
                .unwrap_or_default();
            writeln!(
                out,
                "note      each device ran as a process of its own, exchanging through a hub \
                 on the loopback interface (TCP){launcher}"
            )?;
        }
    }
    for device in devices.iter().flat_map(|(d, _)| d) {
        let x = &device.exchange;
        let process = device
            .process_peak_bytes
            .map(|b| format!("; its process held at most {} resident", format_bytes(b)))
            .unwrap_or_default();
        writeln!(
            out,
            "device {:<2} {} per iteration; exchanged {} out, {} in, {} summed, in {}; held {} \
             of exchanged rows, {} of halo blocks{process}",
            device.rank,
            format_seconds(device.iteration_s),
            format_bytes(x.sent_bytes),
            format_bytes(x.received_bytes),
            format_bytes(x.reduced_bytes),
            format_seconds(x.seconds),
            format_bytes(x.held_peak_bytes),
            format_bytes(device.halo_block_bytes)
        )?;
    }
    // The files this run read or wrote, as `simulate` lists its own.
    let csr = match csr_cache_read {
        true => " (read)",
        false => " (written)",
    };
    let files = [
        ("saved", args.save_plan.as_deref(), ""),
        ("csr cache", args.csr_cache.as_deref(), csr),
        (
            "trace",
            args.trace.as_deref().filter(|_| trace_written.is_ok()),
            "",
        ),
    ];
    for (what, path, how) in files {
        if let Some(path) = path {
            writeln!(out, "{what:<10}{}{how}", path.display())?;
        }
    }
    if let Some(comparison) = &comparison {
        write_comparison(&mut out, comparison, report.epochs, devices.is_some())?;
        if shipped {
            // A plan from a file keeps its profile: plan again on P.
            let again = match args.plan {
                Some(_) => "a plan made with `--profile P`",
                None => "`--profile P`",
            };
            writeln!(
                out,
                "note      profile {} is one shipped with fateplan, not this machine: `fateplan \
                 profile -o P` measures this one, and {again} compares against it",
                plan.profile.name
            )?;
        }
    }
    trace_written
}

/// Whether `a` and `b` differ by more than 1% of the larger.
fn differ_by_a_percent(a: f64, b: f64) -> bool {
    (a - b).abs() > 0.01 * a.abs().max(b.abs())
}

/// This machine's cores, as `fateplan profile` counts them.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A run's refusal of its plan, named by `--plan FILE` where the plan
/// came from one (a plan over the memory left, told that its budgets
/// are the file's); any other error as it is.
fn plan_flagged(error: ExecError, plan: Option<&Path>) -> anyhow::Error {
    match (error, plan) {
        (ExecError::InvalidInput { field, message }, Some(path)) if field == "plan" => {
            anyhow::anyhow!("--plan {}: {message}", path.display())
        }
        // The budgets are the plan's: smaller ones need another plan.
        (
            ExecError::OverMemory {
                short,
                needed_bytes,
                available_bytes,
                ..
            },
            Some(path),
        ) => ExecError::OverMemory {
            short,
            advice: format!(
                "the plan {} holds that under its own budgets: make another with `fateplan \
                 plan` under smaller ones (--hbm-budget and --host-budget), or free memory, or \
                 raise the limit named",
                path.display()
            ),
            needed_bytes,
            available_bytes,
        }
        .into(),
        (other, _) => other.into(),
    }
}

/// This machine's memory (`MemTotal`), where it can be read.
fn machine_memory() -> Option<u64> {
    let path = Path::new("/proc/meminfo");
    let text = std::fs::read_to_string(path).ok()?;
    fateplan::runtime::measure::host::parse_meminfo(&text, path)
        .ok()
        .map(|info| info.total_bytes)
}

/// Where the device and host budgets of a CPU run add to more than this
/// machine's `total` memory, which holds both tiers on the CPU backend:
/// where each came `from` (`given`, `the plan's`, `profile P's`), and
/// that its peaks are what this run took.
fn memory_note(budgets: &Budgets, from: &[String; 2], total: u64) -> Option<String> {
    let both = budgets.hbm_bytes.saturating_add(budgets.host_bytes);
    let (hbm, host) = (
        format_bytes(budgets.hbm_bytes),
        format_bytes(budgets.host_bytes),
    );
    let budgets = match from[0] == from[1] {
        true => format!("the budgets (hbm {hbm}, host {host}) are {}, and", from[0]),
        false => format!(
            "the budgets (hbm {hbm}, {}; host {host}, {}) add up to",
            from[0], from[1]
        ),
    };
    (both > total).then(|| {
        format!(
            "{budgets} more than this machine's {} of memory, which holds both tiers on the CPU \
             backend: the peaks are what the run took, and a plan that needed the budgets would \
             not fit here",
            format_bytes(total)
        )
    })
}

/// Where `profile` was measured on the CPU backend at another thread
/// count than `threads`, the run's (a device's) on `cores` cores: its
/// prediction is of the profile's threads.
fn threads_note(profile: &Profile, threads: usize, cores: usize) -> Option<String> {
    let measured = profile.device.threads? as usize;
    let at = |n: usize| count(n as u64, "thread");
    let measure = match threads <= cores {
        true => format!(
            "`fateplan profile --threads {threads}` measures the rates at {}",
            at(threads)
        ),
        false => format!(
            "its {} share this machine's {}, and a profile measures at most one thread a core",
            at(threads),
            count(cores as u64, "core")
        ),
    };
    (measured != threads).then(|| {
        format!(
            "profile {} was measured with the CPU backend at {}, and this run trains at {}: its \
             prediction is of the rates at {} ({measure})",
            profile.name,
            at(measured),
            at(threads),
            at(measured)
        )
    })
}

/// Writes the last iteration's measured trace to `out`.
fn write_trace(
    out: crate::cli::Staged,
    workload: &str,
    policy: &str,
    spans: &[Vec<fateplan::runtime::exec::TraceSpan>],
) -> Result<()> {
    out.write_with(|file| {
        fateplan::runtime::exec::trace::write_trace(file, workload, policy, spans)
    })
}

/// Which epoch's times `--compare-simulated` measures, as its text says:
/// the median of those after the first (`TrainReport::median`).
fn measured_epochs(epochs: u32) -> String {
    match epochs.saturating_sub(1) {
        0 => "the first epoch's, the only one, which warms caches and allocators up and is \
              slower than a steady one (train 3 or more epochs to compare a steady one)"
            .to_string(),
        1 => "the second epoch's (the first warms up)".to_string(),
        n if n % 2 == 0 => {
            format!("the median of the {n} epochs after the first (the faster middle one)")
        }
        n => format!("the median of the {n} epochs after the first"),
    }
}

/// The measured iteration (the report's median iteration of the epochs
/// after the first, a steady one, with its parts; copies and operators
/// from the last training iteration) beside the simulator's replay of the
/// plan on the plan's profile, which is of a steady iteration.
fn compare_simulated(
    plan: &Plan,
    report: &train::TrainReport,
    spans: &[fateplan::runtime::exec::TraceSpan],
) -> Result<Comparison> {
    let measured = MeasuredIteration {
        iteration_s: report.median.iteration_s,
        compute_s: report.median.compute_s,
        recompute_s: report.median.recompute_s,
        wait_s: report.median.wait_s,
        bytes_moved: report.bytes_moved,
        spans,
    };
    let simulated = simulate(plan, &plan.profile, &SimOptions { seed: 0 })
        .context("simulating the plan for --compare-simulated")?;
    Ok(compare(
        &measured,
        &simulated,
        &plan.workload.definition.ops,
        &plan.profile.device,
    ))
}

fn ratio(pair: &Pair) -> String {
    pair.ratio.map_or("-".to_string(), |r| format!("{r:.3}"))
}

fn write_comparison(out: &mut dyn Write, c: &Comparison, epochs: u32, shared: bool) -> Result<()> {
    writeln!(
        out,
        "compared  with the simulator: this plan on profile {} (seed {}, no jitter); measured \
         times are {}, copies from the last one",
        c.profile,
        c.seed,
        measured_epochs(epochs)
    )?;
    writeln!(
        out,
        "          {:<10} {:>12} {:>12} {:>9}",
        "", "measured", "simulated", "ratio"
    )?;
    // Recomputation is a part of compute, on both sides (its row the
    // part); a plan that recomputes nothing has no row for it.
    let recomputes = c.recompute_s.measured > 0.0 || c.recompute_s.simulated > 0.0;
    let rows = [
        ("iteration", &c.iteration_s),
        ("compute", &c.compute_s),
        ("recompute", &c.recompute_s),
        ("waiting", &c.wait_s),
    ];
    for (name, pair) in rows
        .into_iter()
        .filter(|(name, _)| recomputes || *name != "recompute")
    {
        writeln!(
            out,
            "          {name:<10} {:>12} {:>12} {:>9}",
            format_seconds(pair.measured),
            format_seconds(pair.simulated),
            ratio(pair)
        )?;
    }
    if let Some(machine) = &c.machine {
        let over = c.iteration_s.ratio.map_or(String::new(), |r| {
            format!("; the iteration's ratio over it {:.3}", r / machine.ratio)
        });
        writeln!(
            out,
            "          {:<10} {:>12} {:>12} {:>9}   (the probe around the run, and when the \
             profile was measured: above 1, the machine ran slower than then{over})",
            "machine",
            format_seconds(machine.now_s),
            format_seconds(machine.profiled_s),
            format!("{:.3}", machine.ratio)
        )?;
    }
    if let Some(note) = &c.machine_note {
        writeln!(out, "          {note}")?;
    }
    if let Some(others) = c.other_cores {
        let cores = cores();
        let share = match others > fateplan::planner::profile::UNSTEADY_OTHER_SHARE * cores as f64 {
            true => ": the measured times include their share",
            false => "",
        };
        writeln!(
            out,
            "          other programs took {others:.2} cores' worth of CPU time while it \
             trained, of the {cores} it may run on{share}"
        )?;
    }
    // A table of traffic: its head (`what` and a remark after it), then
    // a row of each of `rows`.
    use fateplan::runtime::compare::Traffic;
    let table = |out: &mut dyn Write, what: &str, remark: &str, rows: &[Traffic]| {
        writeln!(
            out,
            "          {what:<10} {:>12} {:>12} {:>12} {:>12} {:>9}{remark}",
            "bytes", "simulated", "busy", "simulated", "ratio"
        )?;
        for t in rows {
            writeln!(
                out,
                "          {:<10} {:>12} {:>12} {:>12} {:>12} {:>9}",
                t.name,
                format_bytes(t.bytes.measured),
                format_bytes(t.bytes.simulated),
                format_seconds(t.busy_s.measured),
                format_seconds(t.busy_s.simulated),
                ratio(&t.busy_s)
            )?;
        }
        Ok::<(), std::io::Error>(())
    };
    table(out, "link", "", &c.links)?;
    // An SSD copy's span counts whole on the PCIe direction it crosses
    // (the CPU backend cannot time its PCIe part): the streams apart
    // show what each moved and how long it was busy.
    let ssd =
        |t: &Traffic| t.name.starts_with("ssd") && (t.bytes.measured > 0 || t.bytes.simulated > 0);
    if c.streams.iter().any(ssd) {
        let remark = "   (a link's measured busy time spans each SSD copy crossing it whole)";
        table(out, "stream", remark, &c.streams)?;
    }
    if c.simulated_violations > 0 {
        writeln!(
            out,
            "          the simulator found {} in the plan",
            count(c.simulated_violations, "violation")
        )?;
    }
    writeln!(
        out,
        "          {:<16} {:>6} {:>12} {:>12} {:>9}   (the last iteration; the model alone, no contention)",
        "operators", "runs", "measured", "model", "ratio"
    )?;
    for op in &c.operators {
        writeln!(
            out,
            "          {:<16} {:>6} {:>12} {:>12} {:>9}",
            op.name,
            op.count,
            format_seconds(op.seconds.measured),
            format_seconds(op.seconds.simulated),
            ratio(&op.seconds)
        )?;
    }
    if shared {
        // The exchange runs inside the aggregations that wait on it (the
        // devices' lines above give its time).
        writeln!(
            out,
            "          (on several devices the measured times of the operators that exchange \
             halos, agg and agg_bwd, or GAT's sddmm, agg and attention_bwd, include the \
             exchanges they wait on; the model prices the operator alone)"
        )?;
        writeln!(
            out,
            "          (the bytes and times measured are device 0's; the plan's tensors are \
             the largest device's share, so a smaller share moves and computes less)"
        )?;
    }
    Ok(())
}

/// A budget flag: bytes (as `plan` reads them), or a percentage of the
/// retain-all plan's device peak (the device budget's, of the device's
/// memory where that peak is over it: [`crate::cli::hbm_share_base`]).
fn budget(
    flag: &Option<String>,
    name: &str,
    (default, capacity, shared): (u64, u64, bool),
    of: &crate::cli::Capacity,
    retain_peak: &dyn Fn() -> Result<u64>,
) -> Result<u64> {
    Ok(budget_said(flag, name, (default, capacity, shared), of, retain_peak)?.0)
}

/// [`budget`], and for a share what it is a share of ("25% of 19.7 MiB,
/// the retain-all plan's device peak").
fn budget_said(
    flag: &Option<String>,
    name: &str,
    (default, capacity, shared): (u64, u64, bool),
    of: &crate::cli::Capacity,
    retain_peak: &dyn Fn() -> Result<u64>,
) -> Result<(u64, Option<String>)> {
    // Only what was given: a plan's own budgets are the plan's business.
    let Some(given) = flag.as_deref() else {
        return Ok((default, None));
    };
    let (bytes, said) = match crate::cli::budget_percent(flag, name)? {
        Some(percent) => {
            let given = format!("--{name} {given}");
            let peak = retain_peak()?;
            let (base, whose) = match shared {
                false => crate::cli::hbm_share_base(peak, capacity),
                true => (peak, crate::cli::RETAIN_ALL_PEAK.to_string()),
            };
            let bytes = crate::cli::share_of(base, percent, (&given, &whose))?;
            let said = format!("{percent}% of {}, {whose}", format_bytes(base));
            (bytes, Some(said))
        }
        None => (crate::cli::budget(flag, name, default)?, None),
    };
    let bytes = crate::cli::within_capacity((name, given), bytes, (capacity, shared), of)?;
    Ok((bytes, said))
}

/// The `validation` line of a run evaluated every `every` epochs: the
/// best accuracy and the first epoch it came at, and the last; none where
/// no evaluation had a validation node.
fn validation_line(every: u32, evaluations: &[(u32, f64)]) -> Option<String> {
    let &(last_epoch, last) = evaluations.last()?;
    let (best_epoch, best) = evaluations
        .iter()
        .fold((0, f64::NEG_INFINITY), |best, &(e, v)| {
            if v > best.1 {
                (e, v)
            } else {
                best
            }
        });
    Some(format!(
        "validation every {}: best {best:.4} at epoch {best_epoch}, {last:.4} at the last \
         (epoch {last_epoch}), of {}",
        count(u64::from(every), "epoch"),
        count(evaluations.len() as u64, "evaluation")
    ))
}

/// An accuracy to `digits` places, or `n/a` where its mask holds no node.
fn accuracy(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(value) => format!("{value:.digits$}"),
        None => "n/a (no node in its mask)".into(),
    }
}

/// A plan that does not fit the device at `--partitions`, with what other
/// counts would do: more partitions make each step smaller (Cora's
/// 2-layer GCN under 3 MiB: its failing step needs 8.45 MiB in 4
/// partitions, 3.03 MiB in 16), and `plan --partitions auto` finds the
/// count. Other errors as they are.
fn more_partitions(error: fateplan::planner::Error, partitions: u32) -> anyhow::Error {
    let short_of_device = matches!(
        error,
        fateplan::planner::Error::Infeasible {
            tier: Tier::Hbm,
            ..
        }
    );
    let message = format!(
        "{error} (at --partitions {partitions}: other counts need other device budgets, more \
         partitions smaller steps; `fateplan plan` with the same model flags, the budgets in \
         bytes and --partitions auto finds the fewest that fit, or where none does (dp or milp, \
         on one GPU), the count that needs the least)"
    );
    let error = anyhow::Error::from(error);
    match short_of_device {
        // A context repeating the error keeps it first in the message
        // and its type for the exit status.
        true => error.context(message),
        false => error,
    }
}

/// Refuses a run whose spill files cannot fit the free space of the file
/// system `dir` is on (or will be made on): the plan's SSD peak and each
/// tensor's slack, once per device, said before training rather than as
/// a failed write part way through.
fn spill_room(dir: &std::path::Path, plan: &Plan, devices: u64) -> Result<()> {
    let Some(there) = dir.ancestors().find(|d| d.is_dir()) else {
        return Ok(());
    };
    let Ok(free) = fateplan::runtime::measure::ssd::free_bytes(there) else {
        // Where the file system cannot say, the store's own errors will.
        return Ok(());
    };
    let slack = train::ssd_blocks(plan) as u64 * train::SPILL_SLACK_BYTES;
    let needed = plan
        .predicted
        .peak_bytes
        .ssd
        .saturating_add(slack)
        .saturating_mul(devices);
    if needed > free {
        bail!(
            "--spill-dir {}: {} free there, and the plan's spill file takes up to {} (the SSD \
             tier's peak of {} and each tensor's header){}; free space, give a folder on \
             another drive, or plan for less with --ssd-budget (what does not fit is kept in \
             host memory or recomputed)",
            dir.display(),
            format_bytes(free),
            format_bytes(needed),
            format_bytes(plan.predicted.peak_bytes.ssd),
            match devices {
                1 => String::new(),
                n => format!(" on {n} devices"),
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The members' I/O modes: one where all say the same, each device's
    /// where they differ, none where no store was opened.
    #[test]
    fn the_members_io_is_one_mode_or_each_device_s() {
        let uring = Some("io_uring, O_DIRECT".to_string());
        let sync = Some("pread/pwrite, buffered; io_uring setup failed".to_string());
        assert_eq!(members_io(&[uring.clone(), uring.clone()]), uring);
        assert_eq!(
            members_io(&[uring.clone(), sync, None]).unwrap(),
            "device 0 io_uring, O_DIRECT; device 1 pread/pwrite, buffered; io_uring setup \
             failed; device 2 none"
        );
        assert_eq!(members_io(&[None, None]), None);
    }

    /// The simulated iteration is said beside the prediction only where
    /// they differ by more than 1%.
    #[test]
    fn a_simulation_apart_from_the_prediction_is_said() {
        assert!(!differ_by_a_percent(0.744084, 0.741120));
        assert!(differ_by_a_percent(0.034138, 0.032701));
        assert!(differ_by_a_percent(0.032701, 0.034138));
        assert!(!differ_by_a_percent(0.0, 0.0));
    }

    /// A spill folder on a file system with less free space than the
    /// plan's spill file takes is refused before training, naming both.
    #[test]
    fn a_spill_folder_without_the_room_is_refused_before_training() {
        use fateplan::planner::blocks::BlockCounts;
        use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
        let spec = GnnSpec::new(GnnModel::Gcn, 8, 2, "room");
        let workload = build_gnn(&spec, &BlockCounts::skewed(64, 256, 2).unwrap()).unwrap();
        let profile = fateplan::profiles::builtin("cpu-small").unwrap();
        let options = PlanOptions::new(Policy::RetainAll, &profile);
        let mut plan = fateplan::planner::plan(&workload, &profile, &options).unwrap();
        let dir = std::env::temp_dir();
        let free = fateplan::runtime::measure::ssd::free_bytes(&dir).unwrap();
        plan.predicted.peak_bytes.ssd = free / 2;
        assert!(spill_room(&dir.join("not-made-yet"), &plan, 1).is_ok());
        let error = spill_room(&dir.join("not-made-yet"), &plan, 3)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("free there, and the plan's spill file takes up to")
                && error.contains("on 3 devices")
                && error.contains("not-made-yet"),
            "{error}"
        );
        plan.predicted.peak_bytes.ssd = free.saturating_add(1 << 30);
        assert!(spill_room(&dir, &plan, 1).is_err());
    }

    #[derive(Parser)]
    struct TrainArgsOnly {
        #[command(flatten)]
        args: TrainArgs,
    }

    /// Budgets that add to more than the machine's memory are said to
    /// be the profile's; within it, nothing is said.
    #[test]
    fn budgets_over_the_machine_s_memory_are_said_to_be_the_profile_s() {
        let budgets = Budgets {
            hbm_bytes: 80 << 30,
            host_bytes: 2 << 40,
            ssd_bytes: 0,
        };
        let profile = || "profile h100-sxm's".to_string();
        let note = memory_note(&budgets, &[profile(), profile()], 24 << 30).unwrap();
        assert!(
            note.starts_with(
                "the budgets (hbm 80.0 GiB, host 2.00 TiB) are profile h100-sxm's, and more \
                 than this machine's 24.0 GiB"
            ),
            "{note}"
        );
        // A budget given is not the profile's.
        let note = memory_note(&budgets, &["given".into(), profile()], 24 << 30).unwrap();
        assert!(
            note.starts_with(
                "the budgets (hbm 80.0 GiB, given; host 2.00 TiB, profile h100-sxm's) add up \
                 to more than"
            ),
            "{note}"
        );
        let small = Budgets {
            hbm_bytes: 8 << 30,
            host_bytes: 8 << 30,
            ssd_bytes: 0,
        };
        let from = ["given".to_string(), "the plan's".to_string()];
        assert_eq!(memory_note(&small, &from, 24 << 30), None);
    }

    /// A CPU profile that names its threads is told apart from a run at
    /// another count; one that names none, or a GPU's, says nothing.
    #[test]
    fn a_run_at_other_threads_than_the_profile_s_is_told_so() {
        let mut profile = fateplan::profiles::builtin("cpu-small").unwrap();
        assert_eq!(threads_note(&profile, 3, 4), None);
        profile.device.threads = Some(2);
        assert_eq!(threads_note(&profile, 2, 4), None);
        let note = threads_note(&profile, 3, 4).unwrap();
        assert!(
            note.contains("at 2 threads, and this run trains at 3 threads"),
            "{note}"
        );
        assert!(
            note.contains("`fateplan profile --threads 3` measures"),
            "{note}"
        );
        // More threads than cores: no profile measures them.
        let note = threads_note(&profile, 8, 4).unwrap();
        assert!(
            note.contains("its 8 threads share this machine's 4 cores"),
            "{note}"
        );
        assert!(!note.contains("--threads 8"), "{note}");
        profile.device.threads = Some(1);
        let note = threads_note(&profile, 2, 4).unwrap();
        assert!(
            note.contains("at 1 thread, and this run trains at 2 threads: its prediction is of the rates at 1 thread"),
            "{note}"
        );
    }

    #[test]
    fn the_library_s_default_hyper_parameters_are_the_command_line_s() {
        for model in ["gcn", "sage", "gat"] {
            let argv = ["train", "--graph", "planted:nodes=100", "--model", model];
            let args = TrainArgsOnly::try_parse_from(argv).unwrap().args;
            let model = GnnModel::parse(model).unwrap();
            assert_eq!(hyper(&args).unwrap(), Hyper::new(model));
        }
    }
}
