use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use fateplan::planner::blocks::{BlockCounts, MAX_PARTITIONS};
use fateplan::planner::datasets::{dataset, DATASETS};
use fateplan::planner::exchange::{Halo, MultiGpu};
use fateplan::planner::gnn::{
    build_gnn, GnnModel, GnnShape, GnnSpec, LayerOrder, Sweeps, Transposes, DEFAULT_HEADS,
    MAX_HEADS, MAX_HIDDEN, MAX_LAYERS,
};
use fateplan::planner::passes::cost::FateSet;
use fateplan::planner::plan::{
    Action, ExchangeKind, Fate, Leg, MilpSearch, PlanModel, Predicted, Strategy,
};
use fateplan::planner::planner;
use fateplan::planner::profile::DeviceKind;
use fateplan::planner::sizing::{
    choose_groups, choose_sweeps, per_layer, size_partitions, size_partitions_choosing, AtCount,
    ByOutputs, MadePlan, Sized, Sizing, Swept, LEAST_OPERATORS,
};
use fateplan::planner::units::{
    bytes_exact, count, format_bytes, format_bytes_up, format_seconds, parse_bytes,
};
use fateplan::planner::{
    dag, explain, plan, Budgets, Error as PlanError, Plan, PlanOptions, Policy, Profile, Tier,
    Workload,
};
use fateplan::profiles;
use fateplan::runtime::dataset::{MAX_CLASSES, MAX_FEATURES};
use fateplan::runtime::generate::GeneratorSpec;
use fateplan::runtime::graph::GraphData;
use fateplan::runtime::memory::Work;
use fateplan::runtime::partition::{Method, PartitionOptions, Partitioning, BYTES_PER_VERTEX};
use fateplan::runtime::share::{share_workload, ShareMethod, ShareStats, ShareWorkload};
use fateplan::runtime::sim::{self as simulator, SimOptions};

mod curve;

use crate::partition::{self, PartitionArgs};
use crate::profile::{self as measure_profile, ProfileArgs};
use crate::simulate::{self, SimulateArgs, ViolationsFound};
use crate::study::{self, StudyArgs};
use crate::train::{self, TrainArgs};

#[derive(Parser)]
#[command(
    name = "fateplan",
    version,
    about = "Plans memory for full-graph GNN training that does not fit in GPU memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan one training iteration: a fate for every tensor, a schedule, a prediction.
    Plan(PlanArgs),
    /// List the built-in datasets, models, policies and profiles.
    Workloads,
    /// Replay a plan on the discrete-event simulator (exit 3 on violations).
    Simulate(SimulateArgs),
    /// Plan one workload with every policy and print the table: predicted
    /// time, peak per tier, and which cannot fit (`--simulate`: and the
    /// simulator's time for each plan; exit 2 where no policy fits).
    Compare(CompareArgs),
    /// Plan one workload at each of several device budgets and print the
    /// predicted iteration against the budget: how much device memory a
    /// run needs to be how fast (each row the fastest plan of its budget
    /// and the smaller ones; exit 2 where no budget fits).
    Curve(curve::CurveArgs),
    /// Run every policy on the grid of models, depths, datasets and GPU
    /// counts, simulate each plan that fits, and print (or write) the
    /// speedup of dp over each peer.
    Study(StudyArgs),
    /// Train a GNN for real on the CPU or CUDA backend, executing a plan under its budgets.
    Train(TrainArgs),
    /// Measure this machine and write a hardware profile (for --profile FILE).
    Profile(ProfileArgs),
    /// Assign a graph's vertices to GPUs (random and min-cut partitioning)
    /// and print the boundary rows each must exchange.
    Partition(PartitionArgs),
    /// One device's process of `train --processes` (started by it, with
    /// its job on standard input).
    #[command(hide = true)]
    Member,
    /// Write a generated graph as a folder of PyG-named .npy files.
    Generate {
        /// A generator spec, e.g. `rmat:scale=20,features=128,classes=16,seed=1`.
        #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
        graph: String,
        /// The folder to write (made if missing). One that already
        /// holds a dataset file is refused, unless --force.
        #[arg(long)]
        out: PathBuf,
        /// Overwrite the dataset files a folder already holds.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Args)]
#[command(
    mut_arg("output", |a| a.hide(true)),
    mut_arg("explain", |a| a.hide(true)),
    mut_arg("policy", |a| a.hide(true)),
    mut_arg("json", |a| a.help("Print a row per policy as JSON instead of the table"))
)]
struct CompareArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// Replay every plan that fits on the discrete-event simulator (seed 0,
    /// no jitter) and print its time next to the planner's prediction.
    #[arg(long)]
    simulate: bool,
}

#[derive(Args, Clone)]
pub(crate) struct PlanArgs {
    /// GNN model: gcn, sage or gat.
    #[arg(long, conflicts_with = "dag", default_value = "gcn")]
    model: String,
    /// A built-in dataset's statistics (see `fateplan workloads`); with no
    /// --dataset, --graph or --dag, ogbn-papers100M.
    #[arg(long, conflicts_with_all = ["graph", "dag"], value_parser = clap::builder::NonEmptyStringValueParser::new())]
    dataset: Option<String>,
    /// A real graph: a folder of PyG-named .npy files, an edge-list text
    /// file, or a generator spec as `train` takes (e.g.
    /// `rmat:scale=20,features=128,classes=16,seed=1`).
    #[arg(long, conflicts_with = "dag", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    graph: Option<String>,
    /// A generic DAG: fateplan's workload JSON, or networkx node-link JSON.
    #[arg(long)]
    dag: Option<PathBuf>,
    /// GNN layers, the output layer included.
    #[arg(long, conflicts_with = "dag", default_value_t = 3,
          value_parser = whole_in::<u32>(1..=MAX_LAYERS as u128))]
    layers: u32,
    /// Width of each hidden layer (for GAT, all heads together).
    #[arg(long, conflicts_with = "dag", default_value_t = DEFAULT_HIDDEN,
          value_parser = whole_in::<u32>(1..=MAX_HIDDEN as u128))]
    hidden: u32,
    /// GAT attention heads of hidden layers [default: 4]; other models
    /// have none, and refuse a count other than 1.
    #[arg(long, conflicts_with = "dag",
          value_parser = whole_in::<u32>(1..=MAX_HEADS as u128))]
    heads: Option<u32>,
    /// The dropout probability the model trains with (as `train
    /// --dropout`): the masks it draws are priced by the profile
    /// (`device.mask_seconds_per_element`); 0 draws none.
    #[arg(long, conflicts_with = "dag", default_value_t = 0.5, value_parser = probability_f32)]
    dropout: f32,
    /// Which GCN layers project before they aggregate: `narrower` (those
    /// whose output is narrower than their input) or `aggregate-first`
    /// (none). The model is the same. GCN only: refused for sage and gat
    /// [default: narrower].
    #[arg(long, conflicts_with = "dag")]
    layer_order: Option<String>,
    /// How GCN's and GraphSAGE's transposed aggregations read a block's
    /// transpose: `stored` (an input of its own, in host memory beside the
    /// block, moved like it), `built` (a GPU builds each as it goes,
    /// keeping the last; `device.transpose_seconds_per_edge` prices it) or,
    /// for GCN on a symmetric graph, `mirrored` (block (j, i) is block (i,
    /// j)'s transpose: nothing stored or built). The model is the same.
    #[arg(long, conflicts_with = "dag", default_value = "stored")]
    transposes: String,
    /// Which aggregations run input partition after input partition
    /// (each input read once, every output's partial sum live meanwhile)
    /// rather than output after output: `outputs` (none), `inputs` (all
    /// that can), or a list such as `f1,b2` (layer 1's aggregation, layer
    /// 2's transposed one); `inputs` or a list may end in `/N`: the
    /// outputs in N groups, group after group, each by inputs (each input
    /// read once per group, a group's partial sums live at once; as many
    /// groups as partitions or more is the order by outputs); or
    /// `auto`: the planner plans every combination (up to six
    /// aggregations; beyond, it walks from outputs flipping one, then
    /// two, at a time while its prediction falls), then every aggregation
    /// and the combination taken in 2, 3 and 4 groups, and takes the
    /// fastest (a plan per sweep tried; with --gpus, each plan has the
    /// exchanges).
    /// The model is the same. GAT has forward aggregations alone (by
    /// inputs, every row's edge softmax runs before its layer's sums).
    #[arg(long, conflicts_with = "dag", default_value = "outputs")]
    sweep: String,
    /// Input feature size (default: the dataset's or graph's).
    #[arg(long, conflicts_with = "dag", value_parser = whole_in::<u32>(1..=MAX_FEATURES as u128))]
    features: Option<u32>,
    /// Number of classes (default: the dataset's or graph's).
    #[arg(long, conflicts_with = "dag", value_parser = whole_in::<u32>(1..=MAX_CLASSES as u128))]
    classes: Option<u32>,
    /// Vertex partitions: a number, or `auto` (from the fewest at which
    /// dp's memory model fits the plan under the budgets, or under a peer
    /// `--policy` that policy's own plan: fewer partitions stream less).
    /// On several GPUs with `--exchange auto`, from the fewest that fit
    /// with some exchange strategy per layer (every halo through host
    /// memory tried first), or the fewest with every halo GPU to GPU where
    /// the policy (dp under milp) predicts that faster. Then, except under
    /// milp, the next counts up (or down) are planned until two in a row
    /// are not predicted faster (at most 32 each way), and the fastest is
    /// taken; with --sweep auto, each with the sweeps chosen at it.
    /// The search and the
    /// counts planned are in the summary. `compare` sizes as dp does.
    #[arg(long, conflicts_with = "dag", default_value = "auto", value_parser = partitions_value)]
    partitions: String,
    /// A built-in profile name or a profile JSON file.
    #[arg(long, default_value = "a100-80g", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    profile: String,
    /// GPUs sharing the graph; the plan is for one GPU's share, with the
    /// halo exchanges between them (of a --graph, the shares `train
    /// --devices` builds). More than one node's GPUs need whole
    /// nodes and the profile's network section.
    #[arg(long, default_value_t = 1, value_parser = positive::<u32>)]
    gpus: u32,
    /// How each layer's halo moves between GPUs: auto (the planner chooses
    /// per layer), peer (GPU to GPU everywhere) or host (through host
    /// memory everywhere).
    #[arg(long, default_value = "auto", value_parser = lowercase)]
    exchange: String,
    /// Device memory budget per GPU (e.g. 80GiB, 512GB, 1000000), or a
    /// share of the retain-all plan's device peak (e.g. 25%; of the
    /// device's memory where that peak is over it; with --partitions
    /// auto, of the retain-all plan at the count it is sized to).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_value)]
    hbm_budget: Option<String>,
    /// Host memory budget per GPU (bytes, or a share of the retain-all
    /// plan's device peak).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_value)]
    host_budget: Option<String>,
    /// SSD budget per GPU (bytes, or a share of the retain-all plan's
    /// device peak).
    #[arg(long, allow_hyphen_values = true, value_parser = budget_value)]
    ssd_budget: Option<String>,
    /// dp (default), milp, or a peer policy: retain-all, recompute-all,
    /// offload-host-all, offload-ssd-all, hongtu, capacity-greedy,
    /// remat-only, greedy (see `fateplan workloads`).
    #[arg(long, default_value = "dp", value_parser = lowercase)]
    policy: String,
    /// Fates dp and milp may give, comma-separated: retain, offload_host,
    /// offload_ssd, recompute (e.g. `retain,recompute` for the
    /// rematerialisation setting). Default: all.
    #[arg(long)]
    fates: Option<String>,
    /// Seconds the MILP may search before it returns its best plan unproven.
    /// With --gpus and --exchange auto, the exchange vectors share it
    /// (2^layers of them up to 4 layers, 2 × (layers + 1) beyond): each
    /// has what is left divided among those not yet solved, the one dp
    /// predicts fastest last [default: 60]. Only `milp` plans read it
    /// (under `compare`, its row): another `--policy` refuses it.
    #[arg(long, value_parser = milp_time_limit_value)]
    milp_time_limit: Option<f64>,
    /// Work dp's polish may do from each of its starts (moving one tensor
    /// at a time to another of its choices, kept where the prediction is
    /// faster), in evaluations of the workload counted by its tensors
    /// plus operators [default: 500000, about 2,200 evaluations of a
    /// 2-layer GCN in 4 partitions], 32 at a time, each batch only where
    /// the evaluations left cover all of it; 0: none. More work tries more
    /// moves and plans for longer. Only
    /// dp's plans read it (under `compare`, its row; the dp plans that
    /// size partitions or order the MILP's exchanges polish with the
    /// default): another `--policy` refuses it
    #[arg(long, value_parser = whole::<usize>)]
    polish_work: Option<usize>,
    /// How many of dp's fastest candidates (each of other fates or
    /// timings) the polish starts from, the fastest plan any reaches taken
    /// [default: 1]; 0: no polish. More starts never plan slower, and on
    /// the plans measured six planned faster than one by 2.8% (geometric
    /// mean), up to 18%, in about three times the planning time. Each
    /// start may spend --polish-work. The searches of `--partitions auto`
    /// and `--sweep auto` compare their trials polished from one start,
    /// and the plan taken is made again with these starts. Only dp's plans
    /// read it, as --polish-work
    #[arg(long, value_parser = whole::<usize>)]
    polish_starts: Option<usize>,
    /// Write the plan JSON to this file.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Print the plan JSON on stdout instead of the summary (where no plan
    /// fits, a JSON document saying so: `fits` false, the error, the
    /// budgets that would fit).
    #[arg(long)]
    json: bool,
    /// Print every tensor's fate and the reason for it.
    #[arg(long)]
    explain: bool,
}

/// The MILP's time limit when no `--milp-time-limit` is given.
const DEFAULT_MILP_TIME_LIMIT_S: f64 = 60.0;

impl PlanArgs {
    /// `--milp-time-limit`, or its default.
    pub(crate) fn milp_time_limit(&self) -> f64 {
        self.milp_time_limit.unwrap_or(DEFAULT_MILP_TIME_LIMIT_S)
    }

    /// Refuses `--milp-time-limit`, `--polish-work` and `--polish-starts`
    /// beside a `--policy` that never reads them (`plan` and `curve`;
    /// `compare` plans the MILP's row with the first and dp's with the
    /// others).
    pub(crate) fn check_policy_flags(&self) -> Result<()> {
        if let Some(limit) = self.milp_time_limit {
            if !self.policy.eq_ignore_ascii_case(Policy::Milp.name()) {
                bail!(
                    "--milp-time-limit {limit}: applies to --policy milp only, not to {}",
                    self.policy
                );
            }
        }
        for (flag, value) in [
            ("polish-work", self.polish_work),
            ("polish-starts", self.polish_starts),
        ] {
            if let Some(value) = value {
                if !self.policy.eq_ignore_ascii_case(Policy::Dp.name()) {
                    bail!(
                        "--{flag} {value}: applies to --policy dp only, not to {}",
                        self.policy
                    );
                }
            }
        }
        Ok(())
    }
}

/// `PlanArgs` parsed on their own, for commands that make them up.
#[derive(Parser)]
struct PlanArgsOnly {
    #[command(flatten)]
    args: PlanArgs,
}

impl PlanArgs {
    /// The arguments of `fateplan compare --dataset DATASET --model MODEL
    /// --layers L --hidden H --gpus N --profile PROFILE`, everything else at
    /// its default (partitions `auto`, the profile's budgets).
    pub(crate) fn for_dataset(
        dataset: &str,
        model: &str,
        layers: u32,
        hidden: u32,
        gpus: u32,
        profile: &str,
    ) -> Result<PlanArgs> {
        let (layers, hidden, gpus) = (layers.to_string(), hidden.to_string(), gpus.to_string());
        let argv = [
            "compare",
            "--dataset",
            dataset,
            "--model",
            model,
            "--layers",
            &layers,
            "--hidden",
            &hidden,
            "--gpus",
            &gpus,
            "--profile",
            profile,
        ];
        Ok(PlanArgsOnly::try_parse_from(argv)?.args)
    }
}

/// What every command's exit status means (`main`), in every `--help`.
const EXIT_STATUS: &str = "Exit status: 0 done; 1 bad input or a failure (named on stderr); 2 no \
                           plan fits the budgets (plan, compare, curve, and train when it plans) \
                           or the MILP found none in its time; 3 simulate found a plan breaking \
                           a budget. Interrupted (SIGINT, SIGTERM, SIGHUP), it removes its \
                           temporary and spill files and ends by that signal";

/// Every subcommand takes `-1` as a flag's value, so that a negative
/// count is refused by the flag's own parser, which names the flag,
/// rather than read as an unknown option.
fn parse_cli() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command()
        .after_help(EXIT_STATUS)
        .mut_subcommands(|sub| sub.allow_negative_numbers(true).after_help(EXIT_STATUS));
    Cli::from_arg_matches(&command.try_get_matches()?)
}

pub fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(error) => {
            // Usage errors are bad input (exit 1), keeping exit 2 for "no
            // plan fits".
            if error.use_stderr() {
                // clap names no argument where one is not UTF-8: said
                // here with its flag.
                let said = match error.kind() {
                    clap::error::ErrorKind::InvalidUtf8 => not_utf8(std::env::args_os()),
                    _ => None,
                };
                match &said {
                    Some(said) => eprintln!("error: {said}"),
                    None => {
                        let _ = error.print();
                    }
                }
                usage_json(&error, said.as_deref());
                return ExitCode::from(1);
            }
            // --help and --version print and succeed where their text
            // is written; a full disk fails as any report's would.
            return match print_help(&error) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(1)
                }
            };
        }
    };
    // The commands with --threads start their own.
    let own_threads = matches!(
        cli.command,
        Command::Train(_) | Command::Profile(_) | Command::Member
    );
    let started = match own_threads {
        true => Ok(()),
        false => set_threads(None),
    };
    let json = match &cli.command {
        Command::Plan(args) => args.json,
        Command::Compare(args) => args.plan.json,
        Command::Curve(args) => args.json(),
        Command::Simulate(args) => args.json(),
        Command::Study(args) => args.json(),
        Command::Train(args) => args.json(),
        Command::Partition(args) => args.json(),
        Command::Workloads | Command::Profile(_) | Command::Member | Command::Generate { .. } => {
            false
        }
    };
    let result = started.and_then(|()| match cli.command {
        Command::Plan(args) => run_plan(&args),
        Command::Workloads => run_workloads(),
        Command::Simulate(args) => simulate::run(&args, load_profile),
        Command::Compare(args) => run_compare(&args),
        Command::Curve(args) => curve::run(&args),
        Command::Study(args) => study::run(&args),
        Command::Train(args) => train::run(&args, load_profile),
        Command::Profile(args) => measure_profile::run(&args),
        Command::Partition(args) => partition::run(&args),
        Command::Member => crate::members::run_member(),
        Command::Generate { graph, out, force } => run_generate(&graph, &out, force),
    });
    let result = result.inspect_err(|error| {
        fateplan::runtime::cleanup::park_if_interrupted();
        error_json(json, error)
    });
    // What is left in standard output's buffer (a last line without a
    // newline) is written here, where its failure can still be reported.
    let result = result.and_then(|()| Ok(stdout().flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if broken_pipe(&error) {
                // The reader (e.g. `head`) has what it wanted.
                return ExitCode::SUCCESS;
            }
            // Failed because it was interrupted (its members ended by the
            // same signal): it ends by the signal, saying nothing more.
            fateplan::runtime::cleanup::park_if_interrupted();
            eprintln!("error: {}", error_chain(&error));
            // No plan fits, or none was found in the MILP's time.
            let infeasible = matches!(
                plan_error_in(&error),
                Some(PlanError::Infeasible { .. } | PlanError::MilpOutOfTime { .. })
            );
            let violations = error.is::<ViolationsFound>();
            let infeasible = infeasible || error.is::<NothingFits>();
            ExitCode::from(if infeasible {
                2
            } else if violations {
                3
            } else {
                1
            })
        }
    }
}

/// The hidden width a `plan` without `--hidden` takes.
const DEFAULT_HIDDEN: u32 = 256;

/// A one-layer model maps the features to the classes: it has no hidden
/// layer, so a hidden width (`hidden`, other than `default`) or heads
/// other than 1 change no weight or operator; said on standard error
/// rather than refused, so that one command line serves several depths.
/// Called once per command, from the flags as given.
pub(crate) fn one_layer_warning(
    layers: u32,
    hidden: Option<u32>,
    default: Option<u32>,
    heads: Option<u32>,
) {
    if layers != 1 {
        return;
    }
    let mut given = Vec::new();
    if let Some(hidden) = hidden.filter(|&h| Some(h) != default) {
        given.push(format!("--hidden {hidden}"));
    }
    if let Some(heads) = heads.filter(|&h| h != 1) {
        given.push(format!("--heads {heads}"));
    }
    if !given.is_empty() {
        let verb = if given.len() > 1 { "change" } else { "changes" };
        eprintln!(
            "warning: {} {verb} no weight or operator with --layers 1: the one layer maps the \
             features to the classes, with no hidden layer (the workload's name still records \
             them)",
            given.join(" and ")
        );
    }
}

impl PlanArgs {
    /// The command line's warnings, said once: [`one_layer_warning`] for
    /// its model (GAT's heads alone: another model refuses them) and
    /// [`warn_bare_budgets`] for its budgets.
    pub(crate) fn warn(&self) {
        let gat = GnnModel::parse(&self.model).ok() == Some(GnnModel::Gat);
        let heads = self.heads.filter(|_| gat);
        one_layer_warning(self.layers, Some(self.hidden), Some(DEFAULT_HIDDEN), heads);
        warn_bare_budgets(
            [
                ("hbm-budget", &self.hbm_budget),
                ("host-budget", &self.host_budget),
                ("ssd-budget", &self.ssd_budget),
            ],
            true,
        );
    }
}

/// With `--json`, a command that fails says so in a JSON document on
/// standard output, as its report would have been, so that a script
/// reading it gets more than an empty document: `error` (the message on
/// standard error) and `kind`:
///
/// - `no_plan_fits` (exit status 2): `fits` false, and for a budget over
///   its tier the tier, step, operator and bytes, and `fits_with`, the
///   budgets with which a plan fits (the others as given), each with
///   whether the profile has that much;
/// - `milp_out_of_time` (exit status 2): `fits` null;
/// - `solver_failed`: the MILP's solver stopped without a plan (a
///   numerical failure; neither bad input nor a sign that none fits):
///   `fits` null;
/// - `over_memory`: refused before it started for want of memory (a
///   run, a graph, a workload to plan), `needed_bytes` against
///   `available_bytes`;
/// - `out_of_memory`: a buffer of `bytes` could not be allocated
///   `during` what it names (null where unknown);
/// - `member_failed`: `member`, the rank of the process of a
///   `--processes` run that stopped the group, and `member_error`, its
///   own document, where it wrote one;
/// - `failed`: anything else.
///
/// Where the report was printed before the error (`compare` and `curve`
/// where nothing fits, `simulate` finding a budget broken, a trace or a
/// file written after the report that could not be), nothing more: the
/// error is on standard error, and the exit status says it.
/// The first of `args` (the program's name first) that is not UTF-8,
/// with the flag it is the value of: `--graph cora-\u{FFFD}: not UTF-8;
/// ...`. `None` where every argument is UTF-8.
fn not_utf8(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<String> {
    let args: Vec<std::ffi::OsString> = args.into_iter().skip(1).collect();
    let at = args.iter().position(|a| a.to_str().is_none())?;
    let shown = args[at].to_string_lossy();
    let flag = match at.checked_sub(1).and_then(|k| args[k].to_str()) {
        Some(flag) if flag.starts_with('-') && !shown.starts_with('-') => format!("{flag} "),
        _ => String::new(),
    };
    Some(format!(
        "{flag}{shown}: not UTF-8 (shown with \u{FFFD} for what is not); fateplan reads its \
         arguments, paths included, in UTF-8: rename the file or folder"
    ))
}

/// A usage error's JSON document (`kind` `usage`) where the command line
/// asks for `--json` (before any `--`): a script reading standard output
/// finds a document whichever check refused the command.
fn usage_json(error: &clap::Error, said: Option<&str>) {
    // The help a command without its subcommand prints is no error's.
    if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return;
    }
    let asked = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    if !asked {
        return;
    }
    // The message's first paragraph, its lines joined: what is missing
    // is on the lines after "not provided:", before the usage line.
    let text = error.to_string();
    let first: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty() && !line.starts_with("Usage:"))
        .collect();
    let first = first.join(" ");
    let message = said.unwrap_or_else(|| first.strip_prefix("error: ").unwrap_or(&first));
    let document = serde_json::json!({ "error": message, "kind": "usage" });
    let mut out = stdout();
    let _ = writeln!(out, "{document:#}").and_then(|()| out.flush());
}

fn error_json(json: bool, error: &anyhow::Error) {
    if !json || error.is::<NothingFits>() || error.is::<ViolationsFound>() {
        return;
    }
    // A report, then a failure (a trace or a file it could not write).
    if REPORT_WRITTEN.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if broken_pipe(error) {
        return;
    }
    let document = error_document(error);
    // Standard output may be closed (the exit status still says it).
    let mut out = stdout();
    let _ = writeln!(out, "{document:#}").and_then(|()| out.flush());
}

/// The planner's error `error` is or wraps, which the exit status and
/// `--json`'s document both read.
fn plan_error_in(error: &anyhow::Error) -> Option<&PlanError> {
    error.chain().find_map(|e| e.downcast_ref::<PlanError>())
}

/// The document [`error_json`] prints for `error`.
pub(crate) fn error_document(error: &anyhow::Error) -> serde_json::Value {
    use fateplan::runtime::exec::ExecError;
    let message = error_chain(error);
    // The error itself or one it wraps (a run's error inside a
    // measurement's).
    let plan_error = plan_error_in(error);
    let exec_error = error.chain().find_map(|e| {
        // A measurement's run keeps the executor's error beside its own.
        e.downcast_ref::<ExecError>().or_else(|| {
            match e.downcast_ref::<fateplan::runtime::Error>() {
                Some(fateplan::runtime::Error::Run { failure, .. }) => Some(&**failure),
                _ => None,
            }
        })
    });
    if let Some(PlanError::Infeasible {
        tier,
        step,
        op,
        needed_bytes,
        budget_bytes,
        fits_with,
        ..
    }) = plan_error
    {
        let fits_with: Vec<serde_json::Value> = fits_with
            .iter()
            .map(|f| {
                serde_json::json!({
                    "tier": f.tier.name(),
                    "bytes": f.bytes,
                    "over_capacity": f.over_capacity,
                })
            })
            .collect();
        return serde_json::json!({
            "kind": "no_plan_fits",
            "fits": false,
            "error": message,
            "tier": tier.name(),
            "step": step,
            "op": op,
            "needed_bytes": needed_bytes,
            "budget_bytes": budget_bytes,
            "fits_with": fits_with,
        });
    }
    if let Some(PlanError::MilpOutOfTime { .. }) = plan_error {
        return serde_json::json!({"kind": "milp_out_of_time", "fits": null, "error": message});
    }
    if let Some(PlanError::SolverFailed { .. }) = plan_error {
        return serde_json::json!({"kind": "solver_failed", "fits": null, "error": message});
    }
    match exec_error {
        Some(ExecError::OverMemory {
            needed_bytes,
            available_bytes,
            ..
        }) => serde_json::json!({
            "kind": "over_memory",
            "error": message,
            "needed_bytes": needed_bytes,
            "available_bytes": available_bytes,
        }),
        Some(ExecError::OutOfMemory { bytes, during }) => serde_json::json!({
            "kind": "out_of_memory",
            "error": message,
            "bytes": bytes,
            "during": during,
        }),
        Some(ExecError::MemberFailed { rank, .. }) => {
            let mut document = serde_json::json!({
                "kind": "member_failed",
                "error": message,
                "member": rank,
            });
            let said = error
                .chain()
                .find_map(|e| e.downcast_ref::<crate::members::MemberError>());
            if let Some(said) = said {
                document["member_error"] = said.document.clone();
            }
            document
        }
        _ => other_document(error, message),
    }
}

/// [`error_document`] of an error neither the planner's nor the
/// executor's: a graph, or a workload to plan, refused for want of
/// memory (`over_memory`), a graph's buffer the allocator could not give
/// (`out_of_memory`), or any other (`failed`).
fn other_document(error: &anyhow::Error, message: String) -> serde_json::Value {
    use fateplan::runtime::{memory::OverMemory, Error};
    let refused = error.chain().find_map(|e| {
        e.downcast_ref::<OverMemory>()
            .or_else(|| match e.downcast_ref::<Error>() {
                Some(Error::TooLarge { refusal, .. }) => Some(refusal),
                _ => None,
            })
    });
    if let Some(refused) = refused {
        return serde_json::json!({
            "kind": "over_memory",
            "error": message,
            "needed_bytes": refused.needed_bytes,
            "available_bytes": refused.available_bytes,
        });
    }
    match error.chain().find_map(|e| e.downcast_ref::<Error>()) {
        // A graph read or drawn.
        Some(Error::OutOfMemory { bytes, what }) => serde_json::json!({
            "kind": "out_of_memory",
            "error": message,
            "bytes": bytes,
            "during": what,
        }),
        _ => serde_json::json!({"kind": "failed", "error": message}),
    }
}

/// The text of `--help` or `--version` (clap's "error" that is not one)
/// on standard output, styled where that is a terminal, its write's
/// failure returned (clap's own printing ignores it).
fn print_help(shown: &clap::Error) -> std::io::Result<()> {
    let text = shown.render();
    // As clap chooses: a terminal, unless NO_COLOR, CLICOLOR=0 or
    // TERM=dumb say otherwise, or CLICOLOR_FORCE anywhere.
    let styled = anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never;
    let mut out = stdout();
    match styled {
        true => write!(out, "{}", text.ansi())?,
        false => write!(out, "{text}")?,
    }
    out.flush()
}

/// Standard output for a command's report: a write that fails (a full
/// disk, a closed pipe) says it was standard output it could not write,
/// keeping the error's kind (so a closed pipe still ends quietly).
pub(crate) struct Stdout(std::io::StdoutLock<'static>);

pub(crate) fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

/// `error` as failing to write standard output.
fn writing_stdout(error: std::io::Error) -> std::io::Error {
    std::io::Error::new(error.kind(), format!("writing to standard output: {error}"))
}

/// Whether anything of a command's report was written on standard
/// output: an error after it gets no document of its own ([`error_json`]),
/// so that a reader of `--json` finds one document.
static REPORT_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.0.write(buf).map_err(writing_stdout)?;
        if written > 0 {
            REPORT_WRITTEN.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(writing_stdout)
    }
}

/// The error and its causes, each cause left out when the message before
/// it already says it (many errors put their OS error in their message).
pub(crate) fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

fn run_generate(spec: &str, out: &std::path::Path, force: bool) -> Result<()> {
    let spec = GeneratorSpec::parse(spec)?;
    // Checked before the graph is drawn, which can take minutes.
    let shown = out.display();
    if out.to_str().is_none() {
        bail!(
            "--out {shown}: not UTF-8 (shown with \u{FFFD} for what is not): `--graph` could \
             not read the folder back; name it in UTF-8"
        );
    }
    if out.exists() && !out.is_dir() {
        bail!("--out {shown}: is not a directory");
    }
    let present: Vec<&str> = fateplan::runtime::dataset::DATASET_FILES
        .into_iter()
        .filter(|file| out.join(file).exists())
        .collect();
    if !present.is_empty() && !force {
        bail!(
            "--out {shown}: already holds {}; pass --force to overwrite {}",
            present.join(", "),
            if present.len() == 1 { "it" } else { "them" }
        );
    }
    spec.check_fits()?;
    let graph = spec.generate()?;
    graph.save(out).map_err(|e| match e {
        // The folder itself: said once, after the flag.
        fateplan::runtime::Error::Io { path, source } if path == out => {
            anyhow!("--out {shown}: {source}")
        }
        other => anyhow::Error::new(other).context(format!("--out {shown}")),
    })?;
    writeln!(
        stdout(),
        "wrote {} ({} nodes, {} edges, {} features, {}) to {}",
        graph.name,
        graph.nodes,
        graph.edges(),
        graph.features,
        match graph.classes {
            1 => "1 class".to_string(),
            n => format!("{n} classes"),
        },
        out.display()
    )?;
    // Written as asked, but `train` needs a training row: said now.
    if !graph.train_mask.contains(&true) {
        eprintln!(
            "warning: train_mask selects none of its {} nodes (none was asked for or drawn): \
             `fateplan train` refuses the graph",
            graph.nodes
        );
    }
    Ok(())
}

/// Whether `path` can name a file (`flag` names it): not a folder, in a
/// folder that exists.
pub(crate) fn check_file_path(path: &std::path::Path, flag: &str) -> Result<()> {
    let shown = path.display();
    // Many tools read `-` as standard input or output; a file named `-`
    // is not what is meant.
    if path.as_os_str() == "-" {
        bail!("{flag} -: names a file called `-`, not standard output; give ./- for such a file");
    }
    if path.is_dir() {
        bail!("{flag} {shown}: is a directory");
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        bail!("{flag} {shown}: names a folder (it ends in /), not a file");
    }
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !folder.is_dir() {
            bail!(
                "{flag} {shown}: {} {}",
                if folder.exists() {
                    "not a directory:"
                } else {
                    "no such directory"
                },
                folder.display()
            );
        }
    }
    Ok(())
}

/// Where a path's folder exists, its canonical form with the name (the
/// file's own canonical form where it exists, so a link names what it
/// points to).
fn resolved(path: &std::path::Path) -> Option<PathBuf> {
    if let Ok(whole) = path.canonicalize() {
        return Some(whole);
    }
    let folder = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(folder) => folder.to_path_buf(),
        None => PathBuf::from("."),
    };
    let name = path.file_name()?;
    Some(folder.canonicalize().ok()?.join(name))
}

/// Refuses two output flags that name one file, where the second would
/// overwrite the first: `outputs` pairs each flag with its path, if given.
/// Paths are the same file where they are equal, or where their folders
/// are one folder and their names the same.
pub(crate) fn distinct_outputs(outputs: &[(&str, Option<&std::path::Path>)]) -> Result<()> {
    // A device or a pipe is written in place: two outputs there do not
    // overwrite each other (`/dev/null` twice).
    let given: Vec<(&str, &std::path::Path)> = outputs
        .iter()
        .filter_map(|&(flag, path)| path.map(|p| (flag, p)))
        .filter(|(_, path)| !std::fs::metadata(path).is_ok_and(|m| !m.is_file()))
        .collect();
    for (i, &(flag, path)) in given.iter().enumerate() {
        for &(other_flag, other) in &given[..i] {
            let same = path == other || resolved(path).is_some_and(|p| Some(p) == resolved(other));
            if same {
                bail!(
                    "{other_flag} {} and {flag} {} are the same file: the second would overwrite \
                     the first; give each its own",
                    other.display(),
                    path.display()
                );
            }
        }
    }
    Ok(())
}

/// Refuses an output that would overwrite one of the run's inputs:
/// `outputs` and `inputs` pair each flag with its path, if given (an
/// input that names no file or folder, such as a generator spec or a
/// built-in profile, is passed as `None` or is skipped). An output that is
/// an input file, or one of an input folder's arrays (a graph folder's
/// `x.npy`, ...), is refused; another file in that folder is not.
pub(crate) fn spare_inputs(
    outputs: &[(&str, Option<&std::path::Path>)],
    inputs: &[(&str, Option<&std::path::Path>)],
) -> Result<()> {
    for &(flag, path) in outputs {
        let Some(out) = path.and_then(resolved) else {
            continue;
        };
        let path = path.expect("resolved from a path");
        for &(input_flag, input) in inputs {
            let Some((input, canonical)) = input.and_then(|i| Some((i, i.canonicalize().ok()?)))
            else {
                continue;
            };
            if canonical.is_dir() {
                // A graph folder: its arrays are what the run reads. The
                // folder is compared as a file (device and inode), so that
                // another path to it (a bind mount) is the folder too.
                let array = out
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| fateplan::runtime::dataset::DATASET_FILES.contains(&n));
                let in_folder = out
                    .parent()
                    .is_some_and(|folder| same_file(folder, &canonical));
                // Another name for one of its arrays (a hard link) is
                // that array too.
                let linked = fateplan::runtime::dataset::DATASET_FILES
                    .iter()
                    .find(|name| same_file(&out, &canonical.join(name)));
                if let Some(name) = linked.filter(|_| !(in_folder && array)) {
                    bail!(
                        "{flag} {}: is {name} of the {input_flag} folder {} under another name \
                         (a hard link), which the run reads; writing it would overwrite that \
                         input: give the output a path of its own",
                        path.display(),
                        input.display()
                    );
                }
                if in_folder && array {
                    bail!(
                        "{flag} {}: is an array of the {input_flag} folder {}, which the run \
                         reads; writing it would overwrite that input: give the output a path of \
                         its own",
                        path.display(),
                        input.display()
                    );
                }
            } else if out == canonical || same_file(&out, &canonical) {
                bail!(
                    "{flag} {} is the {input_flag} file {}, which the run reads; writing it would \
                     overwrite that input: give the output a path of its own",
                    path.display(),
                    input.display()
                );
            }
        }
    }
    Ok(())
}

/// Whether two paths that exist are one file (device and inode).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Says on standard error which `.npy` files of a `--graph` folder no
/// one reads (edge attributes, say), so that none is dropped unseen.
pub(crate) fn note_unread_arrays(graph: &str) {
    let dir = std::path::Path::new(graph);
    if !dir.is_dir() {
        return;
    }
    let unread = fateplan::runtime::dataset::unread_arrays(dir);
    if !unread.is_empty() {
        eprintln!(
            "note: --graph {graph}: {} not read (a dataset folder's arrays are {})",
            unread.join(", "),
            fateplan::runtime::dataset::DATASET_FILES.join(", ")
        );
    }
}

/// Where `--graph` is a dataset folder whose `x.npy` holds float64
/// values that are read as 0 (under float32's least magnitude), a note on
/// stderr saying so (training reads the features as float32).
pub(crate) fn note_flushed_features(graph: &str) {
    let dir = std::path::Path::new(graph);
    if !dir.is_dir() {
        return;
    }
    if let Some(line) = fateplan::runtime::dataset::flushed_features(dir) {
        eprintln!("note: --graph {graph}: {line}");
    }
}

/// A flag's text as an input path where it names a file or folder that
/// exists (a `--graph` or `--profile` may name a generator spec or a
/// built-in profile instead).
pub(crate) fn existing(text: &str) -> Option<&std::path::Path> {
    let path = std::path::Path::new(text);
    path.exists().then_some(path)
}

/// An output file written whole or not at all. Where the destination is
/// a regular file or new, the output goes to a temporary file beside it,
/// renamed over it once written (with the replaced file's permissions),
/// so that a failed write (a full disk) leaves whatever was there and no
/// part of the new file; a link is followed, and its target replaced. A
/// file with other names (hard links) or extended attributes the new
/// file would lack is kept: the whole output is copied into it, and
/// where that copy fails the temporary file is left, named by the error.
/// A destination that is not a regular file (a device, a pipe) is
/// written in place. [`Staged::create`] checks that the destination can
/// be written before a long run (a missing folder, a read-only file
/// system), leaving nothing behind; the temporary file exists only while
/// [`Staged::write_with`] writes it.
pub(crate) struct Staged {
    /// As given, for messages.
    path: PathBuf,
    /// Where the bytes go: `path`, or the file a link at `path` names.
    target: PathBuf,
    /// Written in place (not a regular file).
    in_place: bool,
    flag: String,
}

/// The temporary file of [`Staged`] (`cleanup::create`'s), removed on
/// drop unless renamed or kept (`.1`: a copy into the file there
/// failed), and on an interruption until then.
struct Temporary(PathBuf, bool);

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_file(&self.0);
        }
        fateplan::runtime::cleanup::unregister(&self.0);
    }
}

impl Staged {
    /// Stages `path`, given by `flag`.
    pub(crate) fn create(path: &std::path::Path, flag: &str) -> Result<Staged> {
        if path.as_os_str() == "-" {
            bail!(
                "{flag} -: names a file called `-`, not standard output; write /dev/stdout for \
                 standard output (the command's report goes there too), or ./- for such a file"
            );
        }
        check_file_path(path, flag)?;
        let shown = path.display();
        // Standard output and the process's descriptors are written
        // through, whatever they lead to (a file the shell redirected to
        // holds the command's other output too).
        let pseudo = ["/dev/stdout", "/dev/stderr", "/dev/fd", "/proc/self/fd"]
            .iter()
            .any(|p| path.starts_with(p));
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let target = match path.canonicalize() {
            _ if pseudo => path.to_path_buf(),
            Ok(real) => real,
            // A link to a file not made yet.
            Err(_) if is_link => {
                let to = std::fs::read_link(path)
                    .with_context(|| format!("{flag} {shown}: reading the link"))?;
                let to = match path.parent() {
                    Some(folder) if to.is_relative() => folder.join(to),
                    _ => to,
                };
                check_file_path(&to, flag)?;
                to
            }
            Err(_) => path.to_path_buf(),
        };
        let mut in_place = pseudo || std::fs::metadata(&target).is_ok_and(|m| !m.is_file());
        use std::os::unix::fs::FileTypeExt;
        let fifo = std::fs::metadata(&target).is_ok_and(|m| m.file_type().is_fifo());
        // Opened to append: nothing there is truncated by the check.
        let writable = |target: &std::path::Path| {
            std::fs::OpenOptions::new()
                .append(true)
                .open(target)
                .map(drop)
        };
        if in_place && !fifo {
            writable(&target).with_context(|| format!("{flag} {shown}: cannot be written"))?;
        } else if !in_place {
            // A file there must be one this user may write (it is
            // replaced, so its own permissions would not otherwise be
            // asked), and the folder must take new files: created and
            // removed. A file this user may write in a folder that takes
            // none (read-only to them) is written in place.
            let exists = target.exists();
            if exists {
                writable(&target).with_context(|| format!("{flag} {shown}: cannot be written"))?;
            }
            match fateplan::runtime::cleanup::create(&target) {
                Ok((probe, file)) => {
                    drop(file);
                    drop(Temporary(probe, false));
                }
                Err(error) if exists && error.kind() == std::io::ErrorKind::PermissionDenied => {
                    in_place = true;
                }
                Err(error) => {
                    return Err(error)
                        .with_context(|| format!("{flag} {shown}: cannot create a file there"))
                }
            }
        }
        Ok(Staged {
            path: path.to_path_buf(),
            target,
            in_place,
            flag: flag.to_string(),
        })
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Writes `bytes` into place.
    pub(crate) fn write(self, bytes: &[u8]) -> Result<()> {
        self.write_with(|out| out.write_all(bytes))
    }

    /// Writes what `fill` writes, through a buffer, into place.
    pub(crate) fn write_with(
        self,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let shown = format!("{} {}", self.flag, self.path.display());
        if self.in_place {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&self.target)
                .with_context(|| format!("{shown}: cannot be written"))?;
            let mut out = std::io::BufWriter::new(file);
            return fill(&mut out)
                .and_then(|()| out.flush())
                .with_context(|| format!("{shown}: writing it"));
        }
        let (path, file) = fateplan::runtime::cleanup::create(&self.target)
            .with_context(|| format!("{shown}: cannot create a file there"))?;
        let mut temporary = Temporary(path, false);
        let writing = || format!("{shown}: writing {}", temporary.0.display());
        let existing = std::fs::metadata(&self.target).ok();
        if let Some(existing) = &existing {
            use std::os::unix::fs::MetadataExt;
            file.set_permissions(existing.permissions())
                .with_context(writing)?;
            // The replaced file's owner, where this user may give it
            // (root may; others keep their own).
            let _ = std::os::unix::fs::fchown(&file, Some(existing.uid()), Some(existing.gid()));
        }
        let mut out = std::io::BufWriter::new(file);
        fill(&mut out)
            .and_then(|()| out.flush())
            .with_context(writing)?;
        let mut whole = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(writing)?;
        // The whole output is in the temporary file: copied into the file
        // there, which keeps what a new file would lose, or renamed over it.
        let copy_over = |temporary: &mut Temporary, whole: &mut std::fs::File| {
            use std::io::Seek;
            // An interruption waits: stopped half way, the file there
            // would be cut short and the whole output removed.
            let _hold = fateplan::runtime::cleanup::hold();
            let mut to = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&self.target)
                .with_context(|| format!("{shown}: cannot be written"))?;
            let copied = whole
                .rewind()
                .and_then(|()| std::io::copy(whole, &mut to))
                .and_then(|_| to.flush());
            if copied.is_err() {
                // The file there is cut short: the output stays whole in
                // the temporary file, which the message names.
                fateplan::runtime::cleanup::unregister(&temporary.0);
                temporary.1 = true;
            }
            copied.with_context(|| {
                format!(
                    "{shown}: writing it (the whole output is in {})",
                    temporary.0.display()
                )
            })
        };
        if existing
            .as_ref()
            .is_some_and(|m| kept_by_the_file(&self.target, m, &temporary.0))
        {
            return copy_over(&mut temporary, &mut whole);
        }
        match std::fs::rename(&temporary.0, &self.target) {
            Ok(()) => temporary.1 = true,
            // A folder that lets this user write the file but not replace
            // it (a sticky /tmp, the file another's): the bytes are
            // copied over it instead.
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                copy_over(&mut temporary, &mut whole)?
            }
            Err(error) => {
                return Err(error).with_context(|| {
                    format!("{shown}: renaming {} into place", temporary.0.display())
                })
            }
        }
        Ok(())
    }
}

/// Whether the file `target` (`existing` its metadata) replaced by the
/// new one `temporary` would lose something: other names (hard links,
/// which would go on naming the old bytes), or an extended attribute the
/// new file lacks or holds with another value (an access control list
/// set on the file, say; one the folder gives every new file, or a label
/// the system does, is on both). Such a file is written into instead.
fn kept_by_the_file(
    target: &std::path::Path,
    existing: &std::fs::Metadata,
    temporary: &std::path::Path,
) -> bool {
    use std::os::unix::fs::MetadataExt;
    if existing.nlink() > 1 {
        return true;
    }
    let Some(old) = attributes(target) else {
        return false;
    };
    let new = attributes(temporary).unwrap_or_default();
    old.iter().any(|attribute| !new.contains(attribute))
}

/// An extended attribute's name and value (`None` where it cannot be
/// read).
type Attribute = (Vec<u8>, Option<Vec<u8>>);

/// A file's extended attributes; `None` where the list cannot be read (a
/// file system without them).
fn attributes(path: &std::path::Path) -> Option<Vec<Attribute>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is NUL-terminated, and `sized` passes a buffer of
    // `len` writable bytes (or null and 0, which asks for the size).
    let names = sized(|buf, len| unsafe { libc::listxattr(path.as_ptr(), buf.cast(), len) })?;
    let read = |name: &[u8]| {
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: as above, `name` NUL-terminated too.
        sized(|buf, len| unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.cast(), len) })
    };
    Some(
        names
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| (name.to_vec(), read(name)))
            .collect(),
    )
}

/// What a call that reports its size when given no buffer writes: asked
/// for the size, then filled, asked again where it grew in between
/// (`ERANGE`); `None` where the call fails.
fn sized(call: impl Fn(*mut u8, usize) -> isize) -> Option<Vec<u8>> {
    for _ in 0..8 {
        let size = usize::try_from(call(std::ptr::null_mut(), 0)).ok()?;
        let mut bytes = vec![0u8; size];
        match usize::try_from(call(bytes.as_mut_ptr(), bytes.len())) {
            Ok(written) => {
                bytes.truncate(written);
                return Some(bytes);
            }
            Err(_) if std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Most `--threads` per core this process may use.
pub const MAX_THREADS_PER_CORE: usize = 16;

/// `--threads N`: the global rayon pool's size (every core when absent),
/// the pool started here, where a thread that cannot start is an error.
pub fn set_threads(threads: Option<usize>) -> Result<()> {
    use fateplan::runtime::memory::no_thread;
    if let Some(threads) = threads {
        if threads == 0 {
            bail!("--threads 0: expected at least 1");
        }
        // More threads than cores only queue on them; far more would take
        // minutes to start (a thread's stack each) before any work.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let most = MAX_THREADS_PER_CORE * cores;
        if threads > most {
            bail!(
                "--threads {threads}: more than {most} ({MAX_THREADS_PER_CORE} for each of the \
                 {cores} cores this process may use)"
            );
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .map_err(|e| anyhow!(no_thread("--threads' worker threads", &e)))?;
    } else {
        // Started here, where a failure is an error: started at their
        // first use, they would panic.
        rayon::ThreadPoolBuilder::new()
            .build_global()
            .map_err(|e| anyhow!(no_thread("the worker threads", &e)))?;
    }
    Ok(())
}

/// A profile as `--profile` takes one ([`profiles::load`]); a name that is
/// neither a built-in profile nor a file is named with the flag.
///
/// A profile file's figures far from any machine's (a figure written in
/// the wrong unit) are warned about, once a file.
fn load_profile(name: &str) -> Result<Profile> {
    let profile = profiles::load(name).map_err(|e| flagged("--profile", name, e))?;
    static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = WARNED
        .lock()
        .map(|mut warned| warned.insert(name.to_string()))
        .unwrap_or(false);
    if first && profiles::builtin(name).is_none() {
        for (field, why) in profile.doubtful_figures() {
            eprintln!("warning: --profile {name}: field {field}: {why}; it is used as written");
        }
        if let Some(why) = profile.unsteady() {
            eprintln!("warning: --profile {name}: {why}");
        }
    }
    Ok(profile)
}

/// A planner's `InvalidInput` about a flag's value, named by the flag
/// (`--model foo: unknown model; ...`), where its context is the value as
/// the library names it (`model "foo"`); any other error led by the flag
/// and value (a profile file's: `--profile F: invalid input: F:1:4:
/// ...`, its file and field after them).
pub(crate) fn flagged(flag: &str, value: &str, error: PlanError) -> anyhow::Error {
    match error {
        PlanError::InvalidInput { context, message }
            if context.ends_with(&format!("{value:?}")) =>
        {
            anyhow::anyhow!("{flag} {value}: {message}")
        }
        other => anyhow::Error::from(other).context(format!("{flag} {value}")),
    }
}

/// The note on a plan file whose recorded predictions were derived
/// again ([`fateplan::planner::plan::ReadPlan::recomputed`]): the first
/// that differed and how many more; `None` where none did.
pub(crate) fn recomputed_note(recomputed: &[String]) -> Option<String> {
    let first = recomputed.first()?;
    Some(format!(
        "the plan's recorded predictions differ from what its schedule gives (a plan edited by \
         hand, or made by another build): predicted again ({first}{})",
        match recomputed.len() {
            1 => String::new(),
            n => format!(", and {} more", n - 1),
        }
    ))
}

/// A GNN's spec refused for its sweeps (`sweep f9: the model has 2
/// layers`), named by the flag (`--sweep f9: ...`); any other error as it
/// is.
pub(crate) fn sweep_flagged(error: PlanError) -> anyhow::Error {
    match error {
        PlanError::InvalidInput { context, message } if context.starts_with("sweep ") => {
            anyhow::anyhow!("--{context}: {message}")
        }
        other => other.into(),
    }
}

/// A name taken in any case, as its lower case (`--exchange PEER`,
/// `--policy DP`).
pub(crate) fn lowercase(text: &str) -> std::result::Result<String, String> {
    Ok(text.to_ascii_lowercase())
}

/// What the GNN builder needs to know about the graph.
enum GraphSource {
    Stats {
        name: String,
        nodes: u64,
        edges: u64,
    },
    /// A real graph, and the block counts of each partition count read
    /// so far (`auto` may ask for one again; at most 256 tables of P²
    /// counts, about 45 MB were every count read).
    Real(GraphData, RefCell<BTreeMap<u32, BlockCounts>>),
}

impl GraphSource {
    /// The block counts at `partitions`; with `near`, a real graph's
    /// reading counts the counts near it too, and keeps them.
    fn blocks(&self, partitions: u32, near: bool) -> Result<BlockCounts> {
        Ok(match self {
            GraphSource::Stats { nodes, edges, .. } => {
                BlockCounts::skewed(*nodes, *edges, partitions)?
            }
            GraphSource::Real(graph, read) => {
                if let Some(counts) = read.borrow().get(&partitions) {
                    return Ok(counts.clone());
                }
                if !near {
                    // Kept: `--sweep auto` builds this count again.
                    let counts = graph.blocks(partitions)?;
                    read.borrow_mut().insert(partitions, counts.clone());
                    return Ok(counts);
                }
                // The counts near this one too, in the same reading:
                // `auto` asks for the neighbours of a count it tried.
                let most = graph.nodes.min(u64::from(MAX_PARTITIONS)) as u32;
                let near = partitions.saturating_sub(NEAR_BELOW).max(1)
                    ..=partitions.saturating_add(NEAR_ABOVE).min(most);
                let each: Vec<u32> = std::iter::once(partitions)
                    .chain(near.filter(|&p| p != partitions && !read.borrow().contains_key(&p)))
                    .collect();
                let mut read = read.borrow_mut();
                for (p, counts) in each.iter().zip(graph.blocks_of(&each)?) {
                    read.insert(*p, counts);
                }
                read[&partitions].clone()
            }
        })
    }

    fn nodes(&self) -> u64 {
        match self {
            GraphSource::Stats { nodes, .. } => *nodes,
            GraphSource::Real(graph, _) => graph.nodes,
        }
    }
}

/// A tier's peak over its budget, as `plan`'s and `simulate`'s `use`
/// column says it, in at most six characters: a share to a tenth of a
/// percent; one over its budget never reads 100.0% (`>100%`), one of
/// twice it or more reads as a multiple (`7.4x`, `37x`, `>999x`), one over a
/// budget of nothing `over`, and a tier of neither `-`; a peak too small
/// to show is `<0.1%`, not nothing.
pub(crate) fn tier_use(peak: u64, budget: u64) -> String {
    if budget == 0 {
        return if peak == 0 { "-" } else { "over" }.to_string();
    }
    let times = peak as f64 / budget as f64;
    let share = 100.0 * times;
    // To a tenth, as a multiple shows it.
    let tenths = (times * 10.0).round() / 10.0;
    if peak >= budget.saturating_mul(1000) {
        ">999x".to_string()
    } else if tenths >= 10.0 {
        format!("{times:.0}x")
    } else if share >= 199.95 {
        format!("{times:.1}x")
    } else if peak > budget && format!("{share:.1}") == "100.0" {
        ">100%".to_string()
    } else if peak > 0 && format!("{share:.1}") == "0.0" {
        "<0.1%".to_string()
    } else {
        format!("{share:.1}%")
    }
}

/// Refuses `workload`, before it is planned for `profile` with `fates`,
/// where planning it would take more memory than the process can still
/// take ([`fateplan::runtime::memory::planning_shortfall`]): the machine
/// would otherwise run out of it part way through. `smaller` says what
/// makes a smaller workload ([`fewer_partitions`] for a GNN's).
pub(crate) fn plannable(
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
    smaller: &str,
) -> Result<()> {
    plannable_at_once(workload, profile, options, 1, smaller)
}

/// [`plannable`] where `--sweep auto` plans its sweeps' workloads side by
/// side: as many at once as the thread pool runs, up to
/// [`fateplan::planner::sizing::SWEEPS_AT_ONCE`].
pub(crate) fn sweeps_plannable(
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
    smaller: &str,
) -> Result<()> {
    let at_once = rayon::current_num_threads().min(fateplan::planner::sizing::SWEEPS_AT_ONCE);
    plannable_at_once(
        workload,
        profile,
        options,
        at_once as u64,
        &format!(
            "{smaller}; or name one sweep (--sweep, not auto), which plans one workload at a \
             time"
        ),
    )
}

/// [`plannable`] or [`sweeps_plannable`], as a workload built at a count
/// given is planned: alone, or with `--sweep auto` beside its sweeps'
/// workloads (checked once, as they are planned: the sweeps' check is the
/// larger, and counting the choices twice near the limit took seconds).
pub(crate) fn plannable_as(sweeps: bool) -> Plannable {
    match sweeps {
        true => sweeps_plannable,
        false => plannable,
    }
}

/// A check of the memory planning a workload takes ([`plannable`]).
pub(crate) type Plannable = fn(&Workload, &Profile, &PlanOptions, &str) -> Result<()>;

/// Memory left, per tensor or operator, below which [`plannable`]
/// counts the workload's choices; with more left it is checked on its
/// items alone. Planning was measured at up to 6.7 KB an item on two
/// threads (GAT on igb-full, 3 layers in 128 partitions;
/// `docs/planner.md`, "Planning memory"): more threads, or a workload
/// larger for its items than any measured, can take more.
const COUNT_BELOW_BYTES_PER_ITEM: u64 = 12 << 10;

fn plannable_at_once(
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
    at_once: u64,
    smaller: &str,
) -> Result<()> {
    let least = workload.least_planning_bytes().saturating_mul(at_once);
    if admitted(least) {
        return Ok(());
    }
    let available = fateplan::runtime::memory::available();
    if let Some(short) = planning_refusal(workload, profile, options, at_once, available.as_ref()) {
        return Err(short.refusal(format!("{short}; {smaller}")).into());
    }
    admit(least);
    Ok(())
}

/// Why planning `at_once` workloads like `workload` would take more
/// memory than `available`: from its count of items at once, and where
/// little more than that is left, with its tensors' choices counted (a
/// GAT's are most of it, which the count per item cannot see). `None`
/// where it fits, or nothing is known.
fn planning_refusal(
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
    at_once: u64,
    available: Option<&fateplan::runtime::memory::Available>,
) -> Option<fateplan::runtime::memory::Shortfall> {
    use fateplan::runtime::memory;
    let available = available?;
    let rough = memory::planning_shortfall_at_once(workload, at_once, Some(available));
    let items = (workload.tensors.len() + workload.ops.len()) as u64;
    let near = items
        .saturating_mul(at_once)
        .saturating_mul(COUNT_BELOW_BYTES_PER_ITEM);
    // Refused on its items, the choices are counted too where counting
    // has room and takes seconds, so that the figure said is the one a
    // larger limit is checked against (not a second refusal at a larger
    // one).
    let room_to_count = available.bytes >= items.saturating_mul(COUNTING_BYTES_PER_ITEM)
        && items <= COUNTED_WHEN_REFUSED_MOST_ITEMS;
    match (rough, available.bytes >= near) {
        (None, true) => None,
        (Some(rough), _) if !room_to_count => Some(rough),
        (rough, _) => {
            let counted = fateplan::planner::planner::least_planning_bytes_counted(
                workload, profile, options,
            );
            let least = workload.least_planning_bytes();
            match rough {
                Some(rough) if least > counted.0 => Some(rough),
                _ => {
                    memory::planning_shortfall_counted(workload, counted, at_once, Some(available))
                }
            }
        }
    }
}

/// The end of a refusal for want of memory: what else makes room.
const FREE_MEMORY: &str = "or free memory, or raise the limit named";

/// The most tensors and operators a workload refused on its count of
/// items has its choices counted too: counting takes about 2 s a
/// million (ogbn-arxiv's GCN in 64 layers and 256 partitions, 17
/// million, was refused with the same figure in 35 s counted, 16-18 s
/// not).
const COUNTED_WHEN_REFUSED_MOST_ITEMS: u64 = 2_000_000;

/// What counting a workload's choices holds at most, a tensor or
/// operator: its lifetimes and the steps' seconds (about 90 bytes), one
/// tensor's choices at a time.
const COUNTING_BYTES_PER_ITEM: u64 = 256;

/// The most memory a workload admitted for planning in this process
/// takes at least ([`admit`]).
static ADMITTED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether a workload that takes at least `least` bytes to plan is no
/// larger than one admitted before in this process: that one's memory,
/// freed, is the allocator's to reuse, and the memory left now does not
/// count it (`curve` plans budget after budget, and was refused part
/// way where it had room).
fn admitted(least: u64) -> bool {
    least <= ADMITTED_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records that a workload taking at least `least` bytes was admitted.
fn admit(least: u64) {
    ADMITTED_BYTES.fetch_max(least, std::sync::atomic::Ordering::Relaxed);
}

/// What makes a GNN's workload in `partitions` smaller, as [`plannable`]
/// says it: a layer's aggregation has an operator a pair of partitions
/// that share edges, so the workload grows as their square.
pub(crate) fn fewer_partitions(partitions: u32) -> String {
    format!(
        "fewer partitions (--partitions, here {partitions}) or layers make a smaller workload: \
         each layer aggregates a block for each pair of partitions that share edges"
    )
}

/// Partition counts below and above the one asked for whose blocks a
/// real graph's reading counts too.
const NEAR_BELOW: u32 = 2;
const NEAR_ABOVE: u32 = 4;

/// A GNN over a graph, built for any partition count.
struct GnnSource {
    spec: GnnSpec,
    source: GraphSource,
    /// The most partitions `auto` tries: fewer where a real graph's shares
    /// hold all GPUs' partitions.
    most: u32,
}

impl GnnSource {
    /// The workload at `partitions`, as `auto` tries it where `near`
    /// ([`GraphSource::blocks`]).
    fn build(&self, partitions: u32, near: bool) -> Result<Workload> {
        let counts = self.source.blocks(partitions, near)?;
        // A count `auto` reaches is refused before it is built where
        // building it alone needs more memory than is left (it would fail
        // to allocate and abort); most of the counts it builds are only
        // measured, so planning's memory is not asked of them.
        let built = self.room_for(partitions, &counts, Work::Building)?;
        let workload = build_gnn(&self.spec, &counts)?;
        // Its memory, freed, is the allocator's to reuse.
        admit(built);
        Ok(workload)
    }

    /// Whether a workload of `counts` in `partitions` leaves room for
    /// `work` (building it, for `auto`; building and planning it, for a
    /// count given), from its blocks, and the least bytes that takes;
    /// else the refusal, saying that `auto` reached the count where it
    /// did.
    fn room_for(&self, partitions: u32, counts: &BlockCounts, work: Work) -> Result<u64> {
        use fateplan::runtime::memory;
        let blocks = fateplan::planner::gnn::aggregated_blocks(counts);
        let least = match work {
            Work::Planning => memory::least_planning_bytes_before(self.spec.layers, blocks),
            Work::Building => memory::least_building_bytes_before(self.spec.layers, blocks),
        };
        let available = memory::available().filter(|_| !admitted(least));
        let Some(short) =
            memory::shortfall_before(self.spec.layers, blocks, work, available.as_ref())
        else {
            return Ok(least);
        };
        let message = match work {
            Work::Planning => format!("{short}; {}; {FREE_MEMORY}", fewer_partitions(partitions)),
            Work::Building => format!(
                "--partitions auto tried {partitions} partitions, where {short}; fewer layers \
                 make a smaller workload, and a count below {partitions} (--partitions N) or \
                 larger budgets may fit; {FREE_MEMORY}"
            ),
        };
        Err(short.refusal(message).into())
    }

    /// The workload the `--partitions` flag asks for, a line saying how
    /// `auto` chose, and the plan of it with `options` where choosing made
    /// one. `at`: what `auto` makes of each count it plans
    /// ([`size_partitions_choosing`]), where it chooses more than the
    /// count. `gpus`: the GPUs the graph is shared out to (1: the whole
    /// graph). `planned`: where the workload is the one planned, the check
    /// of the memory its planning takes ([`plannable_as`]); where real
    /// shares replace it (`--gpus` above 1 on a graph read), they are
    /// checked instead, under their own name.
    #[allow(clippy::too_many_arguments)]
    fn sized(
        &self,
        partitions: &str,
        gpus: u32,
        planned: Option<Plannable>,
        profile: &Profile,
        options: &PlanOptions,
        at: Option<&AtCount<'_, anyhow::Error>>,
    ) -> Result<(Workload, u32, String, Option<MadePlan>)> {
        if partitions != "auto" {
            let p: u32 = parse_count(partitions, &(1..=MAX_PARTITIONS as u128)).map_err(|why| {
                anyhow!("--partitions {partitions:?}: {why}; expected a count or auto")
            })?;
            // Each partition needs a vertex: said by the flag.
            let nodes = self.source.nodes();
            if nodes < u64::from(p) {
                let whose = match gpus {
                    1 => "a graph",
                    _ => "a GPU's share",
                };
                bail!(
                    "--partitions {p}: {} for {whose} of {}: each partition needs a vertex",
                    fateplan::planner::units::count(u64::from(p), "partition"),
                    fateplan::planner::units::count(nodes, "node")
                );
            }
            // A count given is planned as it is (those `auto` tries are
            // mostly built to be measured, not planned): refused from
            // its blocks before it is built, and from its size after.
            let counts = self.source.blocks(p, false)?;
            self.room_for(p, &counts, Work::Planning)?;
            let workload = build_gnn(&self.spec, &counts)?;
            if let Some(plannable) = planned {
                plannable(&workload, profile, options, &fewer_partitions(p))?;
            }
            return Ok((workload, p, String::new(), None));
        }
        let most = (self.most as u64).min(self.source.nodes()) as u32;
        let started = std::time::Instant::now();
        let build = |p: u32| self.build(p, true);
        let _shown = Searching::start("sizing the partitions (--partitions auto)");
        let sized = match at {
            Some(at) => size_partitions_choosing(&build, most, profile, options, at)?,
            None => size_partitions(&build, most, profile, options)?,
        };
        let took = format_seconds(started.elapsed().as_secs_f64());
        let below = below_capacity(options, &profile.share(gpus));
        let line = sizing_line(&sized, most, options, &took, (at.is_some(), below));
        Ok((sized.workload, sized.partitions, line, sized.plan))
    }
}

/// Whether the host or SSD budget of `options` is below what `share` (one
/// GPU's share of the profile) has: where none fits, more of either may
/// fit a count with less device memory than the count reported needs.
fn below_capacity(options: &PlanOptions, share: &Profile) -> bool {
    let capacity = Budgets::from_profile(share);
    [Tier::Host, Tier::Ssd]
        .into_iter()
        .any(|tier| options.budgets.of(tier) < capacity.of(tier))
}

/// The `partitions` line: how `auto` chose (`swept`: with the sweeps
/// chosen at each count it walked to; `below`: [`below_capacity`]).
fn sizing_line(
    sized: &Sized,
    most: u32,
    options: &PlanOptions,
    took: &str,
    (swept, below): (bool, bool),
) -> String {
    let shown = |sizing: &Sizing| -> String {
        let tried: Vec<String> = sizing
            .tried
            .iter()
            .map(|&(p, ok)| format!("{p}{}", if ok { "" } else { "x" }))
            .collect();
        tried.join(" ")
    };
    let (sizing, partitions) = (&sized.sizing, sized.partitions);
    let chosen = per_layer(options);
    let each_layer = if chosen {
        " with the exchange chosen per layer"
    } else {
        ""
    };
    let peer_note = match &sized.peer {
        None => String::new(),
        Some(peer) if peer.sizing.none_fit => {
            format!("; with every halo GPU to GPU none up to {} fits", peer.most)
        }
        Some(peer) if peer.compared => {
            let verdict = |s: Option<f64>| s.map_or("no plan".to_string(), format_seconds);
            let taken = if peer.taken {
                peer.sizing.partitions
            } else {
                sizing.partitions
            };
            format!(
                "; the fewest with every halo GPU to GPU {} (tried {}), predicted {} against {}, \
                 {taken} taken",
                peer.sizing.partitions,
                shown(&peer.sizing),
                verdict(peer.predicted_s),
                verdict(peer.host_predicted_s),
            )
        }
        Some(peer) => format!(
            "; every halo GPU to GPU fits there too (tried {})",
            shown(&peer.sizing)
        ),
    };
    let walked = walk_note(sized, swept);
    // The legend, where some count shown did not fit (the search GPU to
    // GPU that fits none shows no counts).
    let failed = sizing.tried.iter().any(|&(_, ok)| !ok)
        || sized
            .peer
            .as_ref()
            .is_some_and(|p| !p.sizing.none_fit && p.sizing.tried.iter().any(|&(_, ok)| !ok))
        || (!walked.is_empty() && sized.walked.iter().any(|&(_, s)| s.is_none()));
    let legend = if failed { ", x: no fit" } else { "" };
    // Where none fits, the count reported: the one that fits with the
    // least device budget, or a peer's whose plan came closest.
    let closest = match (sizing.least_device, sizing.partitions == most) {
        (Some(least), _) => format!(
            "; {partitions} is reported: of the counts 1 to {} a quarter apart, it fits with the \
             least device budget, {}, the other budgets as given{}{}",
            least.last_asked,
            format_bytes_up(least.bytes),
            match least.still_falling {
                true => format!(
                    ", and more partitions may need less (the budget was still falling; counts \
                     of more than {LEAST_OPERATORS} operators are not asked)"
                ),
                false => String::new(),
            },
            match below {
                true =>
                    "; with more host memory or SSD than their budgets, another count may \
                         fit with less device memory (`--partitions N` gives, at N, the budget \
                         of each tier with which it fits)",
                false => "",
            }
        ),
        (None, true) => String::new(),
        (None, false) => format!("; {partitions}, whose plan needed the least, is reported"),
    };
    match (sizing.none_fit, sizing.tried.is_empty()) {
        (true, true) => format!(
            "partitions {partitions} (auto: no count up to {most} has a largest step that fits \
             the device{closest}; {took})"
        ),
        (true, _) => {
            format!(
                "partitions {partitions} (auto: none up to {most} fits{each_layer}; tried \
                 {}{peer_note}{closest}; in {took}{legend})",
                shown(sizing),
            )
        }
        (false, _) if chosen => format!(
            "partitions {partitions} (auto: the fewest{each_layer} {} (tried {}){peer_note}\
             {walked}; in {took}{legend})",
            sizing.partitions,
            shown(sizing),
        ),
        (false, _) => format!(
            "partitions {partitions} (auto: the fewest that fit {} (tried {}){walked}; in \
             {took}{legend})",
            sizing.partitions,
            shown(sizing),
        ),
    }
}

/// The walk from the fewest that fit, for the `partitions` line: each
/// count planned and its predicted iteration (`x`: no plan fits).
fn walk_note(sized: &Sized, swept: bool) -> String {
    if sized.walked.len() < 2 {
        return String::new();
    }
    let counts: Vec<String> = sized
        .walked
        .iter()
        .map(|&(p, s)| match s {
            Some(s) => format!("{p} {}", format_seconds(s)),
            None => format!("{p}x"),
        })
        .collect();
    let each = if swept {
        ", the sweeps chosen at each count"
    } else {
        ""
    };
    format!(
        "; the fastest near it by the prediction{each} ({}): {}",
        counts.join(", "),
        sized.partitions
    )
}

/// A real graph to share out to several GPUs once the partition count is
/// known, as `train --devices` shares it: its topology and its min-cut
/// partitioning onto the GPUs.
struct GraphShares {
    graph: GraphData,
    owner: Vec<u32>,
}

/// The halo of `devices` devices' shares of a graph of `nodes` and
/// `edges` as `stats` measured it: the planner's estimate for random
/// partitioning, scaled to the largest measured. `plan --gpus` and
/// `train --devices` plan the same shares with it.
pub(crate) fn shares_halo(nodes: u64, edges: u64, devices: u32, stats: &ShareStats) -> Halo {
    let mut halo = Halo::random(nodes, edges);
    let estimate = halo.rows(devices, 1).0;
    halo.scale = stats.halo_rows_max as f64 / estimate.max(1.0);
    halo.source = format!(
        "measured: {devices} devices' {} shares, largest halo {} row{}",
        stats.method.name(),
        stats.halo_rows_max,
        if stats.halo_rows_max == 1 { "" } else { "s" }
    );
    halo
}

/// One GPU's share of a real graph on `gpus` GPUs, by min-cut
/// partitioning (the partitioner of `fateplan partition`): the share with
/// the most in-edges, the slowest, as statistics to size the partitions
/// by; the halo measured on that partitioning, the largest of the GPUs',
/// as a scale on the planner's estimate for random partitioning; and the
/// graph with its partitioning, to build the shares `train` trains.
fn graph_share(graph: GraphData, gpus: u32) -> Result<(GraphSource, Halo, GraphShares)> {
    let parts = Partitioning::reading(
        Method::Mincut,
        graph.nodes,
        &graph.edges,
        gpus,
        &PartitionOptions::default(),
    )?;
    let stats = parts.stats_reading(&graph.edges)?;
    let edges = graph.edge_count();
    let estimate = Halo::random(graph.nodes, edges).rows(gpus, 1).0;
    let halo = Halo {
        scale: stats.halo_rows_max as f64 / estimate.max(1.0),
        source: format!(
            "measured: min-cut partitioning onto {gpus} GPUs, largest halo {} rows ({:.0} \
             estimated for random partitioning)",
            stats.halo_rows_max, estimate
        ),
        ..Halo::random(graph.nodes, edges)
    };
    let share = stats
        .per_part
        .iter()
        .max_by_key(|p| (p.in_edges, p.vertices))
        .ok_or_else(|| anyhow!("the partitioning has no parts"))?;
    let source = GraphSource::Stats {
        name: format!("{}-share1of{gpus}", graph.name),
        nodes: share.vertices,
        edges: share.in_edges,
    };
    let shares = GraphShares {
        graph,
        owner: parts.owner,
    };
    Ok((source, halo, shares))
}

/// The shares `train --devices` builds, planned.
struct SharesPlanned {
    workload: Workload,
    /// What `workload` was built from.
    shape: GnnShape,
    partitions: u32,
    /// The plan of `workload`, where one was made here.
    made: Option<MadePlan>,
    /// The `shares` line of the summary.
    line: String,
}

/// Most counts above the sized one tried on the shares.
const SHARES_RETRIES: u32 = 8;

/// The workload of `gnn` on the GPUs' shares of `shares` at `partitions`
/// each, with the halo measured on them set in `options`. Where `auto`
/// sized the count on the largest share's statistics and a plan fitted
/// there (`fitted`), the shares are planned too, and where they do not
/// fit (every partition as large as the largest over the GPUs, every
/// block as the largest), the next counts up, up to [`SHARES_RETRIES`]
/// of them.
fn plan_shares(
    args: &PlanArgs,
    gnn: &GnnSource,
    shares: GraphShares,
    partitions: u32,
    fitted: bool,
    profile: &Profile,
    options: &mut PlanOptions,
) -> Result<SharesPlanned> {
    let gpus = args.gpus;
    let GraphShares { graph, owner } = shares;
    let (nodes, edges) = (graph.nodes, graph.edge_count());
    let keep_owner = fitted.then(|| owner.clone());
    let build = |owner: Vec<u32>, p: u32| {
        share_workload(&graph, &gnn.spec, gpus, p, ShareMethod::Mincut, Some(owner))
            .with_context(|| format!("--gpus {gpus} --partitions {p}"))
    };
    let ShareWorkload {
        mut workload,
        stats,
        mut shape,
    } = build(owner, partitions)?;
    // Planned beside their sweeps' under `--sweep auto` at a count given
    // (`auto` partitions are checked with their sweeps once the count is
    // known, in `prepare`).
    let sweeps = args.sweep.eq_ignore_ascii_case("auto") && args.partitions != "auto";
    plannable_as(sweeps)(&workload, profile, options, &fewer_partitions(partitions))?;
    if let Some(multi) = options.multi.as_mut() {
        // The halo rows do not depend on the partition count.
        multi.halo = shares_halo(nodes, edges, gpus, &stats);
    }
    let each = |p: u32| format!("{p} partition{} each", if p == 1 { "" } else { "s" });
    // The counts `auto` tried were sized and timed on the statistics.
    let sized = if args.partitions == "auto" {
        " (the counts above were sized and timed on the largest share's statistics; this plan \
         is of the shares)"
    } else {
        ""
    };
    let line = |p: u32, tried: &str| {
        format!(
            "shares    the {gpus} GPUs' min-cut shares at {}{tried}, as `train --devices {gpus}` \
             builds them{sized}",
            each(p)
        )
    };
    let Some(owner) = keep_owner else {
        return Ok(SharesPlanned {
            workload,
            shape,
            partitions,
            made: None,
            line: line(partitions, ""),
        });
    };
    let most = gnn.most.min(nodes.min(u32::MAX as u64) as u32);
    let last = partitions.saturating_add(SHARES_RETRIES).min(most);
    let mut p = partitions;
    loop {
        let started = std::time::Instant::now();
        if let Ok(plan) = plan(&workload, profile, options) {
            let tried = if p == partitions {
                String::new()
            } else {
                format!(" (at {partitions}, sized on the statistics, the shares do not fit)")
            };
            return Ok(SharesPlanned {
                workload,
                shape,
                partitions: p,
                made: Some(MadePlan {
                    plan,
                    seconds: started.elapsed().as_secs_f64(),
                }),
                line: line(p, &tried),
            });
        }
        // The next count up, unless the shares cannot be cut that fine
        // (a device with fewer vertices than partitions): then none fits.
        let next = if p < last {
            build(owner.clone(), p + 1).ok()
        } else {
            None
        };
        let Some(next) = next else {
            // The caller plans it again and says why it does not fit.
            let tried = if p == partitions {
                String::new()
            } else {
                format!(
                    " (the count sized on the statistics was {partitions}; {partitions} to {p} \
                     tried on the shares: none fits)"
                )
            };
            return Ok(SharesPlanned {
                workload,
                shape,
                partitions: p,
                made: None,
                line: line(p, &tried),
            });
        };
        p += 1;
        (workload, shape) = (next.workload, next.shape);
    }
}

/// What `--sweep auto` took ([`auto_sweeps`]).
pub(crate) struct AutoSweeps {
    pub(crate) swept: Swept,
    /// The sweeps' name as plans record it.
    pub(crate) name: String,
    /// The summary's `sweep` line: what was taken, against what, and how
    /// many plans were made.
    pub(crate) line: String,
    /// The policy whose predictions were compared (dp's under milp).
    pub(crate) compared_by: Policy,
}

/// A spinner on standard error while a search that can take a while runs
/// (sizing the partitions, choosing the sweeps): what it is and the time
/// so far, so that a search of a minute is not taken for a hang. Shown on
/// a terminal only, as `compare`'s bar, and one at a time: a search run
/// inside another (the sweeps chosen at each count) shows none of its
/// own. Cleared when dropped, before anything is printed.
pub(crate) struct Searching(Option<indicatif::ProgressBar>);

/// A progress style of `template` (a fixed one), whose `{took}` is the
/// time since the bar began in whole seconds, with minutes and hours from
/// a minute on (`59s`, `1m 30s`, `2h 05m 00s`): indicatif's own
/// `{elapsed}` rounds to the nearest minute from 90 seconds on, so that
/// 90 s read `2m`.
pub(crate) fn progress_style(template: &str) -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(template)
        .expect("a fixed template parses")
        .with_key(
            "took",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&took(state.elapsed()));
            },
        )
}

/// [`progress_style`]'s `{took}`.
fn took(elapsed: std::time::Duration) -> String {
    let s = elapsed.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m {:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

/// Whether a [`Searching`] spinner is showing.
static SEARCHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Searching {
    pub(crate) fn start(what: &str) -> Searching {
        use std::sync::atomic::Ordering;
        if SEARCHING.swap(true, Ordering::SeqCst) {
            return Searching(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(progress_style("{spinner} {msg}, {took}"));
        bar.set_message(what.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Searching(Some(bar))
    }
}

impl Drop for Searching {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
            SEARCHING.store(false, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// A [`Searching`] spinner while the MILP solves (`--policy milp`), which
/// may take its whole time limit; none under another policy.
pub(crate) fn solving(options: &PlanOptions) -> Option<Searching> {
    (options.policy == Policy::Milp).then(|| {
        Searching::start(&format!(
            "solving the MILP (--policy milp; at most {} s, --milp-time-limit)",
            options.milp_time_limit_s
        ))
    })
}

/// `--sweep auto`: the sweeps [`choose_sweeps`] takes for `shape`, or
/// those in groups of outputs [`choose_groups`] takes over them, under
/// `options` (on one GPU or several). `outputs`: the workload by
/// outputs, and its plan where one was made with these options.
pub(crate) fn auto_sweeps(
    shape: &GnnShape,
    profile: &Profile,
    options: &PlanOptions,
    outputs: Option<(Workload, ByOutputs)>,
) -> Result<AutoSweeps> {
    let started = std::time::Instant::now();
    let build = |sweeps: Sweeps| -> Result<Workload> { Ok(shape.workload(sweeps)?) };
    let _shown = Searching::start("choosing the sweeps (--sweep auto)");
    let can = shape.spec.sweepable();
    let swept = choose_sweeps(&build, can, profile, options, outputs)?;
    let swept = choose_groups(&build, can, profile, options, swept)?;
    let took = format_seconds(started.elapsed().as_secs_f64());
    // Milp's sweeps are compared by dp's plans.
    let (dp, compared_by) = match options.policy {
        Policy::Milp => (" by dp", Policy::Dp),
        other => ("", other),
    };
    let against = match (swept.predicted_s, swept.outputs_s) {
        (_, _) if swept.sweeps == Sweeps::default() => String::new(),
        (Some(s), Some(o)) => format!(
            ": {} predicted{dp} against {} by outputs in as many partitions",
            format_seconds(s),
            format_seconds(o)
        ),
        (Some(s), None) => {
            format!(
                ": {} predicted{dp}; by outputs nothing fits",
                format_seconds(s)
            )
        }
        _ => String::new(),
    };
    let name = GnnSpec {
        sweeps: swept.sweeps,
        ..shape.spec.clone()
    }
    .sweep_name();
    // On several GPUs the combinations are screened with one exchange
    // vector first (`sizing::SWEEP_FINALISTS`), and the groups of outputs
    // with the sweeps chosen's (`sizing::choose_groups`).
    let grouped = match (swept.grouped.len(), swept.grouped_screened) {
        (0, _) => String::new(),
        (g, false) => format!(", {g} of them in groups of outputs"),
        (g, true) => {
            format!(", and {g} in groups of outputs with the exchanges of the sweeps chosen first")
        }
    };
    let planned = match swept.screened.len() {
        0 => format!("{} sweeps planned{grouped}", swept.tried),
        n => format!(
            "{n} sweeps planned with the exchanges by outputs, {} with every exchange \
             vector{grouped}",
            swept.tried
        ),
    };
    let line = format!("sweep     {name} (auto{against}; {planned} in {took})");
    Ok(AutoSweeps {
        swept,
        name,
        line,
        compared_by,
    })
}

/// What a plan is made for: a generic DAG, or a GNN to size.
enum Source {
    Dag(Workload),
    Gnn(Box<GnnSource>),
}

/// What a plan is made for, as the command line gives it.
struct SourceGiven {
    source: Source,
    /// A line describing the graph.
    note: String,
    /// On several GPUs, the halo to size the partitions with: estimated
    /// from the whole graph's size, or measured on a real graph's min-cut.
    halo: Option<Halo>,
    /// On several GPUs, a real graph's shares to build once the partition
    /// count is known.
    shares: Option<GraphShares>,
}

/// The workload source the arguments name.
fn workload_source(args: &PlanArgs) -> Result<SourceGiven> {
    if let Some(path) = &args.dag {
        let text = fateplan::read_text(path)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--dag {}", path.display()))?;
        let source = path.display().to_string();
        let workload = if dag::is_node_link(&text) {
            dag::from_node_link(&text, &source)?
        } else {
            Workload::from_json(&text, &source)?
        };
        if args.gpus != 1 {
            bail!(
                "--gpus {} with --dag: a generic DAG is planned for one device",
                args.gpus
            );
        }
        return Ok(SourceGiven {
            source: Source::Dag(workload),
            note: String::new(),
            halo: None,
            shares: None,
        });
    }
    let model = GnnModel::parse(&args.model).map_err(|e| flagged("--model", &args.model, e))?;
    let heads = match (model, args.heads) {
        (GnnModel::Gat, heads) => heads.unwrap_or(DEFAULT_HEADS),
        (_, Some(heads)) if heads != 1 => bail!(
            "--heads {heads}: attention heads apply to gat only, not to --model {}",
            model.name()
        ),
        // Not read outside GAT; the default keeps the library's spec.
        _ => DEFAULT_HEADS,
    };
    if model == GnnModel::Gat && args.layers > 1 {
        heads_divide(args.hidden, heads)?;
    }
    let order = match &args.layer_order {
        Some(name) => LayerOrder::parse(name).map_err(|e| flagged("--layer-order", name, e))?,
        None => LayerOrder::default(),
    };
    let transposes = Transposes::parse(&args.transposes)
        .map_err(|e| flagged("--transposes", &args.transposes, e))?;
    // `auto` chooses once the budgets are known (`prepare`).
    let sweeps = match args.sweep.as_str() {
        text if text.eq_ignore_ascii_case("auto") => Sweeps::default(),
        text => Sweeps::parse(text)
            .map_err(|e| anyhow!("{}; --sweep also takes auto", sweep_flagged(e)))?,
    };
    if transposes == Transposes::Mirrored && args.gpus > 1 {
        bail!(
            "--transposes mirrored: one GPU only (with --gpus {}, a GPU's blocks are its \
             share's, not mirrored); use stored or built",
            args.gpus
        );
    }
    if model == GnnModel::Gat && transposes != Transposes::Stored {
        bail!(
            "--transposes {}: applies to gcn and sage (gat's backward builds its transposes \
             either way)",
            args.transposes
        );
    }
    if let Some(given) = args.layer_order.as_ref().filter(|_| model != GnnModel::Gcn) {
        bail!(
            "--layer-order {given}: the layer order applies to gcn only (gat always projects \
             first, sage aggregates first); leave it out: the model is {}",
            model.name()
        );
    }
    let mut halo = None;
    let mut shares = None;
    let mut targets = false;
    let (source, features, classes) = if let Some(path) = &args.graph {
        // On several GPUs the graph's vertices are partitioned (min-cut):
        // checked to fit in memory before they are counted in.
        let graph = if args.gpus > 1 {
            GraphData::open_holding(
                path,
                BYTES_PER_VERTEX,
                &format!("min-cut partitioning onto {} GPUs", args.gpus),
            )?
        } else {
            GraphData::open(path)?
        };
        if let Some(gaps) = &graph.gaps {
            eprintln!("warning: {gaps}");
        }
        note_unread_arrays(path);
        // A graph's own sizes are the model's: a plan for others would
        // not run on it (a named --dataset plans other sizes).
        for (flag, given, own, what) in [
            ("--features", args.features, graph.features, "features"),
            ("--classes", args.classes, graph.classes, "classes"),
        ] {
            if let (Some(given), Some(own)) = (given, own) {
                if given != own {
                    bail!(
                        "{flag} {given}: {path} has {own} {what}; a plan for {given} would not \
                         run on this graph. Leave {flag} out, or plan a named --dataset to try \
                         other sizes"
                    );
                }
            }
        }
        let features = args.features.or(graph.features).ok_or_else(|| {
            anyhow!(
                "{path}: the graph has no features to give the feature size (x.npy in a \
                 folder; an edge list has none); pass --features"
            )
        })?;
        let classes = args.classes.or(graph.classes).ok_or_else(|| {
            anyhow!(
                "{path}: the graph has no labels to give the class count (y.npy in a folder; an \
                 edge list has none); pass --classes"
            )
        })?;
        targets = graph.targets;
        if args.gpus > 1 {
            let (share, measured, real) = graph_share(graph, args.gpus)
                .with_context(|| format!("--gpus {} with {path}", args.gpus))?;
            halo = Some(measured);
            shares = Some(real);
            (share, features, classes)
        } else {
            (
                GraphSource::Real(graph, RefCell::default()),
                features,
                classes,
            )
        }
    } else {
        let name = args.dataset.as_deref().unwrap_or("ogbn-papers100M");
        let stats = dataset(name).ok_or_else(|| {
            anyhow!(fateplan::planner::datasets::unknown_dataset(
                "--dataset",
                name
            ))
        })?;
        let gpus = args.gpus as u64;
        halo = Some(Halo::random(stats.nodes, stats.edges));
        let source = GraphSource::Stats {
            name: if gpus > 1 {
                format!("{}-share1of{gpus}", stats.name)
            } else {
                stats.name.to_string()
            },
            nodes: stats.nodes.div_ceil(gpus),
            edges: stats.edges.div_ceil(gpus),
        };
        (
            source,
            args.features.unwrap_or(stats.features),
            args.classes.unwrap_or(stats.classes),
        )
    };
    let graph_name = match &source {
        GraphSource::Stats { name, .. } => name.clone(),
        GraphSource::Real(graph, _) => graph.name.clone(),
    };
    let spec = GnnSpec {
        model,
        layers: args.layers,
        hidden: args.hidden,
        heads,
        features,
        classes,
        graph_name,
        order,
        transposes,
        sweeps,
        dropout: args.dropout,
    };
    let edges: u64 = match &source {
        GraphSource::Stats { edges, .. } => *edges,
        GraphSource::Real(graph, _) => graph.edge_count(),
    };
    let mut note = format!("{} nodes, {} edges", source.nodes(), edges);
    if targets {
        note.push_str(&format!(
            "; y.npy's {classes} columns are {classes} targets a vertex, the output layer's \
             width (train reads one label a vertex)"
        ));
    }
    Ok(SourceGiven {
        source: Source::Gnn(Box::new(GnnSource {
            spec,
            source,
            // The shares of every GPU are cut into `gpus × partitions`
            // ranges of one graph.
            most: if shares.is_some() {
                MAX_PARTITIONS / args.gpus
            } else {
                MAX_PARTITIONS
            },
        })),
        note,
        halo,
        shares,
    })
}

/// A whole number a count flag (`--epochs`, `--seed`, `--polish-work`)
/// may hold: [`whole`] and [`whole_in`] parse it.
pub(crate) trait Count: TryFrom<u128> + Clone + Send + Sync + 'static {
    /// The largest the flag's type holds.
    const MOST: u128;
}

impl Count for u32 {
    const MOST: u128 = u32::MAX as u128;
}

impl Count for u64 {
    const MOST: u128 = u64::MAX as u128;
}

impl Count for usize {
    const MOST: u128 = usize::MAX as u128;
}

/// A count flag's value, as the command line is parsed: a whole number
/// from `range`, what is wrong said in words. (clap's own integer
/// parser says "invalid digit found in string" of `-3` and of `2.5`.)
fn parse_count<T: Count>(
    text: &str,
    range: &RangeInclusive<u128>,
) -> std::result::Result<T, String> {
    let (least, most) = (*range.start(), *range.end().min(&T::MOST));
    let text = text.trim();
    // A flag bounded above names its range; one bounded below alone, its
    // least.
    let bounded = most < T::MOST;
    let outside = || format!("{text} is not in {least}..={most}");
    let below = |what: String| match bounded {
        true => outside(),
        false => format!("{text} is {what}: expected a whole number, {least} or more"),
    };
    let above = || match bounded {
        true => outside(),
        false => format!("{text} is larger than {most}"),
    };
    let digits = text.strip_prefix('+').unwrap_or(text);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        // Past u128, or past the flag's most: too large either way.
        return match digits.parse::<u128>().ok().filter(|&v| v <= most) {
            None => Err(above()),
            Some(value) if value < least => Err(below(format!("less than {least}"))),
            Some(value) => T::try_from(value).map_err(|_| above()),
        };
    }
    Err(match text.parse::<f64>() {
        Ok(number) if number < 0.0 => below("negative".into()),
        Ok(number) if number.is_finite() && number.fract() != 0.0 => {
            format!("{text} is not a whole number")
        }
        Ok(number) if number > most as f64 => above(),
        Ok(number) if number < least as f64 => below(format!("less than {least}")),
        Ok(number) if number.is_finite() => {
            format!(
                "{text}: write the count in digits, such as {}",
                number as u128
            )
        }
        _ => format!("{text:?} is not a whole number (digits only, such as 200)"),
    })
}

/// [`parse_count`] of any whole number the type holds.
pub(crate) fn whole<T: Count>(text: &str) -> std::result::Result<T, String> {
    parse_count(text, &(0..=T::MOST))
}

/// A dropout probability: [`real_f32`] in `[0, 1)` (1 would drop
/// everything).
pub(crate) fn probability_f32(text: &str) -> std::result::Result<f32, String> {
    let p = real_f32(text)?;
    match (0.0..1.0).contains(&p) {
        true => Ok(p),
        false => Err(format!("{} is not a probability in [0, 1)", text.trim())),
    }
}

/// A number flag kept as an `f32` (a probability, a rate), parsed so
/// that its rounding to 32 bits changes nothing a user meant: a finite
/// value too large for an `f32` (it would be kept as infinity) or a
/// nonzero one too small (kept as 0, so that `--dropout 1e-50` would
/// mask nothing) is refused, quoting the value as given. Ranges are the
/// flag's own checks.
pub(crate) fn real_f32(text: &str) -> std::result::Result<f32, String> {
    let given = text.trim();
    // The value kept is the text rounded once to 32 bits; the 64-bit
    // reading only tells whether that rounding lost what was meant.
    let (Ok(kept), Ok(wide)) = (given.parse::<f32>(), given.parse::<f64>()) else {
        return Err(format!("{text:?} is not a number"));
    };
    if wide.is_finite() && kept.is_infinite() {
        return Err(format!(
            "{given} is too large in magnitude: it is kept as a 32-bit float, which holds \
             at most ±{:e}",
            f32::MAX
        ));
    }
    if wide != 0.0 && kept == 0.0 {
        return Err(format!(
            "{given} is too close to 0: it is kept as a 32-bit float, and would be 0 (the \
             nearest to 0 it holds are ±{:e})",
            f32::from_bits(1)
        ));
    }
    Ok(kept)
}

/// [`parse_count`] of a whole number from 1 up.
pub(crate) fn positive<T: Count>(text: &str) -> std::result::Result<T, String> {
    parse_count(text, &(1..=T::MOST))
}

/// A list's item without the spaces around it (`--datasets "reddit,
/// ogbn-arxiv"`), as the lists of numbers and sizes take them; an empty
/// one (two commas in a row, or one at an end) is refused.
pub(crate) fn trimmed(text: &str) -> std::result::Result<String, String> {
    let item = text.trim();
    if item.is_empty() {
        let said = "an empty entry (two commas in a row, or one at an end); give names, \
                    comma-separated";
        return Err(said.into());
    }
    Ok(item.to_string())
}

/// [`parse_count`] of a whole number in `range`.
pub(crate) fn whole_in<T: Count>(
    range: RangeInclusive<u128>,
) -> impl Fn(&str) -> std::result::Result<T, String> + Clone + Send + Sync + 'static {
    move |text| parse_count(text, &range)
}

/// A budget flag's value, as the command line is parsed. The budget
/// flags take values that begin with a hyphen, so that a negative size is
/// refused by name ([`parse_bytes`]) rather than taken for a flag; a flag
/// (`-o`, `--json`) where the value should be is refused as a flag, not a
/// size: the value is missing, or (`--hbm-budget=--json`) is not a size.
pub(crate) fn budget_value(text: &str) -> std::result::Result<String, String> {
    not_a_flag(text)?;
    // Refused as it is read, as any flag's value: a share or a size.
    if share_value(text)?.is_none() {
        budget_bytes(text).map_err(|e| format!("{e:#}"))?;
    }
    Ok(text.to_string())
}

/// `--{name}`'s value where it takes bytes alone (`simulate`'s budgets,
/// which replay a plan whose shares were made bytes when it was sized):
/// a share, or a fraction that reads as one, is told how to get its
/// bytes.
pub(crate) fn bytes_budget_value(
    name: &'static str,
) -> impl Fn(&str) -> std::result::Result<String, String> + Clone + Send + Sync + 'static {
    move |text| {
        not_a_flag(text)?;
        let fraction = text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| *f > 0.0 && *f < 1.0)
            .map(|f| format!("{}%", (f * 1e4).round() / 1e2));
        let share = share_value(text)?.or(fraction);
        if let Some(share) = share {
            return Err(format!(
                "simulate replays under bytes (such as 4GiB); a share's bytes depend on how the \
                 plan was sized: `fateplan plan ... --{name} {share}` prints them (its \
                 `percent` line)"
            ));
        }
        budget_bytes(text).map_err(|e| format!("{e:#}"))?;
        Ok(text.to_string())
    }
}

/// Refuses a flag (`-o`, `--json`) where a budget's value should be.
fn not_a_flag(text: &str) -> std::result::Result<(), String> {
    let name = text.trim_start_matches('-');
    let dashes = text.len() - name.len();
    if (dashes == 1 || dashes == 2) && name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!(
            "{text} is a flag, not a size or a share: a budget takes a value such as 4GiB or 25%"
        ));
    }
    Ok(())
}

/// `--partitions`' value as it is read: `auto` (in any case) or a count
/// of 1 to [`MAX_PARTITIONS`].
pub(crate) fn partitions_value(text: &str) -> std::result::Result<String, String> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok("auto".to_string());
    }
    parse_count::<u32>(text, &(1..=MAX_PARTITIONS as u128))
        .map(|_| text.to_string())
        .map_err(|why| format!("{why}; expected a count or auto"))
}

/// `--milp-time-limit`'s seconds as they are read: positive and at most
/// a week (`plan`, `curve`, `compare` and `train`).
pub(crate) fn milp_time_limit_value(text: &str) -> std::result::Result<f64, String> {
    let most = fateplan::planner::planner::MAX_MILP_TIME_LIMIT_S;
    match text.trim().parse::<f64>() {
        Ok(limit) if limit > 0.0 && limit <= most => Ok(limit),
        _ => Err(format!(
            "expected a positive number of seconds, at most {most} (a week)"
        )),
    }
}

/// A positive finite number kept as an `f32` ([`real_f32`]): a rate.
pub(crate) fn positive_f32(text: &str) -> std::result::Result<f32, String> {
    let value = real_f32(text)?;
    match value > 0.0 && value.is_finite() {
        true => Ok(value),
        false => Err(format!("{} is not a finite positive number", text.trim())),
    }
}

/// A finite number of 0 or more kept as an `f32` ([`real_f32`]).
pub(crate) fn non_negative_f32(text: &str) -> std::result::Result<f32, String> {
    let value = real_f32(text)?;
    match value >= 0.0 && value.is_finite() {
        true => Ok(value),
        false => Err(format!(
            "{} is not a finite number of 0 or more",
            text.trim()
        )),
    }
}

pub(crate) fn budget(flag: &Option<String>, name: &str, default: u64) -> Result<u64> {
    match flag {
        Some(text) => budget_bytes(text).with_context(|| format!("--{name}")),
        None => Ok(default),
    }
}

/// A budget's bytes ([`parse_bytes`]); a fraction without a unit, more
/// likely a share than bytes, is told how a share is written.
pub(crate) fn budget_bytes(text: &str) -> Result<u64> {
    parse_bytes(text).map_err(|error| match text.trim().parse::<f64>() {
        Ok(share) if share > 0.0 && share < 1.0 => anyhow!(
            "{error}; a share of the retain-all peak is written {}%",
            (share * 1e4).round() / 1e2
        ),
        _ => error.into(),
    })
}

/// Warns, once per plan file, where the profile a plan carries was
/// measured on an unsteady machine ([`Profile::unsteady`]).
pub(crate) fn warn_unsteady_plan(source: &str, plan: &Plan) {
    if let Some(why) = plan.profile.unsteady() {
        eprintln!(
            "warning: {source}: the plan's profile {}: {why}",
            plan.profile.name
        );
    }
}

/// Warns of each budget flag `(name, given)` that [`bare_budget_note`]
/// finds bare and small; a budget that does not parse is left to the
/// flag's own error. `shares`: the flags take a share (`25%`) too.
pub(crate) fn warn_bare_budgets(flags: [(&str, &Option<String>); 3], shares: bool) {
    for (name, given) in flags {
        let Some(text) = given else { continue };
        if let Some(note) = parse_bytes(text)
            .ok()
            .and_then(|bytes| bare_budget_note(name, text, bytes, shares))
        {
            eprintln!("{note}");
        }
    }
}

/// Budgets below this many bytes given without a unit are told how a
/// unit or a share is written ([`bare_budget_note`]).
const BARE_BUDGET_NOTE_BELOW: u64 = 1 << 20;

/// A warning for `--{name} {text}` (`bytes`) given as a number without a
/// unit (no letter but an exponent's `e`) of 1 to
/// [`BARE_BUDGET_NOTE_BELOW`] bytes: more likely a share or a size in
/// another unit than so few bytes. A plain whole number is told how those
/// are written; a share only where the flag takes one (`shares`). (0 bytes
/// is refused on its own.)
pub(crate) fn bare_budget_note(name: &str, text: &str, bytes: u64, shares: bool) -> Option<String> {
    let bare = text.trim();
    let unitless = !bare
        .chars()
        .any(|c| c.is_alphabetic() && !c.eq_ignore_ascii_case(&'e'));
    if !unitless || bytes == 0 || bytes >= BARE_BUDGET_NOTE_BELOW {
        return None;
    }
    // What the number could be: a share up to 100%, mebibytes or
    // gibibytes up to a few thousand, else kibibytes (mebibytes of a
    // number that large are more than most machines have).
    let hint = match bare.chars().all(|c| c.is_ascii_digit()) {
        true if shares && bytes <= 100 => format!(
            "; a share of the retain-all peak is written {bare}%, a size in gibibytes {bare}GiB"
        ),
        true if bytes <= 4096 => {
            format!("; a size in mebibytes is written {bare}MiB, in gibibytes {bare}GiB")
        }
        true => format!("; a size in kibibytes is written {bare}KiB"),
        false => String::new(),
    };
    Some(format!(
        "warning: --{name} {bare} is {} (a size without a unit is bytes){hint}",
        fateplan::planner::units::count(bytes, "byte")
    ))
}

/// Whose capacity a budget is held to: profile `profile`'s, or for a
/// tier the node's `gpus` GPUs share (host memory, SSD), one GPU's share.
pub(crate) struct Capacity<'a> {
    pub(crate) profile: &'a str,
    pub(crate) gpus: u32,
    /// Held by `simulate`, which replays on a larger machine's profile
    /// given with `--profile`, where the others plan for one.
    pub(crate) replay: bool,
}

/// GAT's heads share its hidden width: refused by `--heads` where they
/// do not divide it (the caller asks where there is a hidden layer: one
/// layer has none, and is warned that neither changes anything).
pub(crate) fn heads_divide(hidden: u32, heads: u32) -> Result<()> {
    if heads > 0 && !hidden.is_multiple_of(heads) {
        bail!(
            "--heads {heads}: the hidden width {hidden} (--hidden, all heads together) is not \
             divisible by {heads} heads"
        );
    }
    Ok(())
}

/// `bytes`, the budget `--{name} {given}`, where it is no more than the
/// tier's `capacity` (`shared`: one of the node's GPUs' share of it): a
/// plan for more than the machine has could not run on it. A device
/// budget of 0 bytes is refused too: no plan fits it.
pub(crate) fn within_capacity(
    (name, given): (&str, &str),
    bytes: u64,
    (capacity, shared): (u64, bool),
    of: &Capacity,
) -> Result<u64> {
    // The host and SSD tiers may be left out (0); no step fits on a
    // device of no bytes.
    if bytes == 0 && name == "hbm-budget" {
        bail!("--{name} {given}: a device budget of 0 bytes holds nothing");
    }
    if bytes > capacity {
        let whose = if shared && of.gpus > 1 {
            format!("one of {} GPUs' share of profile {:?}", of.gpus, of.profile)
        } else {
            format!("profile {:?}", of.profile)
        };
        bail!(
            "--{name} {given} ({}): more than {whose} has ({}); to {} a larger machine, give its \
             profile (--profile)",
            format_bytes(bytes),
            format_bytes(capacity),
            if of.replay { "replay on" } else { "plan for" }
        );
    }
    Ok(bytes)
}

/// A budget flag's percentage (`25%`: that share of the retain-all plan's
/// device peak); `None` for bytes or no flag.
pub(crate) fn budget_percent(flag: &Option<String>, name: &str) -> Result<Option<f64>> {
    let Some(percent) = flag.as_deref().and_then(|text| text.strip_suffix('%')) else {
        return Ok(None);
    };
    let share = positive_percent(percent)
        .with_context(|| format!("--{name} {percent}%: expected a positive percentage"))?;
    Ok(Some(share))
}

/// A share's number (`25` of `25%`), where positive and finite.
fn positive_percent(percent: &str) -> Option<f64> {
    percent
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| *v > 0.0 && v.is_finite())
}

/// A budget's value ending in `%`, checked as it is read: `Some` of
/// the share as given, `None` for bytes.
fn share_value(text: &str) -> std::result::Result<Option<String>, String> {
    match text.strip_suffix('%') {
        Some(percent) => match positive_percent(percent) {
            Some(_) => Ok(Some(text.to_string())),
            None => Err(format!("{text}: expected a positive percentage")),
        },
        None => Ok(None),
    }
}

/// `percent` of `of` bytes, the budget `given` (`--hbm-budget 25%`), `of`
/// being what `whose` names (the retain-all plan's device peak). A
/// positive share that comes to less than one byte is refused, as
/// [`parse_bytes`] refuses a size that rounds to none: not what was meant.
pub(crate) fn share_of(of: u64, percent: f64, (given, whose): (&str, &str)) -> Result<u64> {
    let exact = of as f64 * percent / 100.0;
    if exact >= u64::MAX as f64 {
        bail!(
            "{given}: 2^64 bytes or more (a share of {whose}, {})",
            bytes_exact(of)
        );
    }
    let bytes = exact as u64;
    if bytes == 0 {
        bail!(
            "{given}: less than one byte of {whose}, {}",
            bytes_exact(of)
        );
    }
    Ok(bytes)
}

/// What a budget's percentage is a share of, in `plan`, `compare` and
/// `train`.
pub(crate) const RETAIN_ALL_PEAK: &str = "the retain-all plan's device peak";

/// What `--hbm-budget P%` is a share of, and its name: the retain-all
/// plan's device `peak`, or, where that peak is over the device's memory
/// (`capacity`), the memory, as `curve` takes its shares: a share of a
/// peak no device holds would be refused at every share above the
/// device's.
pub(crate) fn hbm_share_base(peak: u64, capacity: u64) -> (u64, String) {
    match peak <= capacity {
        true => (peak, RETAIN_ALL_PEAK.to_string()),
        false => (capacity, "the device's memory".to_string()),
    }
}

/// The device peak of the retain-all plan of `workload` without budgets,
/// on the GPUs and with the exchanges of `like` (its `gpus`, `multi` and
/// `exchanges`), their buffers included: what budget percentages are
/// shares of, in `plan`, `compare`, `curve` and `train` alike, so that
/// 100% fits the retain-all plan.
pub(crate) fn retain_all_peak(
    workload: &Workload,
    profile: &Profile,
    like: &PlanOptions,
) -> Result<u64> {
    let roomy = PlanOptions {
        budgets: Budgets::UNLIMITED,
        gpus: like.gpus,
        multi: like.multi.clone(),
        exchanges: like.exchanges.clone(),
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    Ok(plan(workload, profile, &roomy)?.predicted.peak_bytes.hbm)
}

/// What a `plan` or `compare` command asks for.
struct Prepared {
    profile: Profile,
    options: PlanOptions,
    workload: Workload,
    /// Lines on the workload, its partitions, halo and budgets.
    note: String,
    /// The plan of `workload` with `options` and the seconds it took,
    /// where sizing the partitions or choosing the sweeps made it.
    made: Option<MadePlan>,
    /// Which of the two made it.
    made_while: &'static str,
    /// The GNN `workload` was built from (none for a DAG).
    model: Option<PlanModel>,
}

/// [`prepare`] where budgets are given as shares and the partitions are
/// sized (`--partitions auto`): the shares are of the retain-all plan's
/// device peak at the count that plan is sized to, or of the device's
/// memory where no count fits it (as `curve` takes its shares:
/// `curve::reference`), made bytes before the partitions are sized to
/// them; the note says what they were of.
fn prepare_with_shares_at_auto(
    args: &PlanArgs,
    sized_as: Option<Policy>,
    percents: [Option<f64>; 3],
    profile: &Profile,
) -> Result<Prepared> {
    let without = |given: &Option<String>, percent: Option<f64>| match percent {
        Some(_) => None,
        None => given.clone(),
    };
    let base = PlanArgs {
        hbm_budget: without(&args.hbm_budget, percents[0]),
        host_budget: without(&args.host_budget, percents[1]),
        ssd_budget: without(&args.ssd_budget, percents[2]),
        ..args.clone()
    };
    let of = curve::reference(&base, profile.device.hbm_bytes)
        .context("planning retain-all for the budgets' percentages")?;
    let what = of.what(&profile.name);
    let mut given = base;
    let mut entries = Vec::new();
    let slots = [
        ("hbm-budget", &args.hbm_budget, &mut given.hbm_budget),
        ("host-budget", &args.host_budget, &mut given.host_budget),
        ("ssd-budget", &args.ssd_budget, &mut given.ssd_budget),
    ];
    for ((name, text, slot), percent) in slots.into_iter().zip(percents) {
        let Some(percent) = percent else { continue };
        let flag = format!("--{name} {}", text.as_deref().unwrap_or_default());
        let bytes = share_of(of.bytes, percent, (&flag, &what))?;
        *slot = Some(bytes.to_string());
        entries.push(format!("--{name} {percent}%: {}", format_bytes(bytes)));
    }
    let mut prepared = prepare(&given, sized_as)?;
    prepared.note = format!(
        "{}\npercent   {} (of {}, {what})",
        prepared.note,
        entries.join(", "),
        format_bytes(of.bytes)
    );
    Ok(prepared)
}

/// The profile, options and workload a `plan` or `compare` command asks for.
/// `sized_as`, where given, is the policy the options carry and the
/// partitions are sized under instead of `--policy`'s.
fn prepare(args: &PlanArgs, sized_as: Option<Policy>) -> Result<Prepared> {
    let profile = load_profile(&args.profile)?;
    let policy = Policy::parse(&args.policy).map_err(|e| flagged("--policy", &args.policy, e))?;
    profile
        .check_gpus(args.gpus)
        .with_context(|| format!("--gpus {}", args.gpus))?;
    // Budgets default to one GPU's share of its node's host memory and SSD.
    let share = profile.share(args.gpus);
    let forced = match args.exchange.as_str() {
        "auto" => None,
        text => Some(Strategy::parse(text).map_err(|_| {
            anyhow::anyhow!(
                "--exchange: {text:?} is not a strategy; expected auto (the planner chooses per layer), peer or host"
            )
        })?),
    };
    let mut options = PlanOptions::new(sized_as.unwrap_or(policy), &profile);
    options.gpus = args.gpus;
    if let Some(fates) = &args.fates {
        if policy.is_peer() {
            bail!(
                "--fates applies to dp and milp; policy {} chooses its own fates",
                policy.name()
            );
        }
        options.fates = FateSet::parse(fates).context("--fates")?;
    }
    options.milp_time_limit_s = args.milp_time_limit();
    if let Some(work) = args.polish_work {
        options.polish_work = work;
    }
    if let Some(starts) = args.polish_starts {
        options.polish_starts = starts;
    }
    // Either at 0 turns the polish off: the other, given, does nothing.
    match (args.polish_work, args.polish_starts) {
        (Some(0), Some(starts)) if starts > 0 => eprintln!(
            "warning: --polish-starts {starts} does nothing with --polish-work 0, which turns \
             the polish off"
        ),
        (Some(work), Some(0)) if work > 0 => eprintln!(
            "warning: --polish-work {work} does nothing with --polish-starts 0, which turns the \
             polish off"
        ),
        _ => {}
    }
    // Percentages wait for the workload: they are shares of its
    // retain-all peak.
    let flags = [
        ("hbm-budget", &args.hbm_budget, profile.device.hbm_bytes),
        ("host-budget", &args.host_budget, share.host.memory_bytes),
        ("ssd-budget", &args.ssd_budget, share.ssd.capacity_bytes),
    ];
    let capacity = Capacity {
        profile: &profile.name,
        gpus: args.gpus,
        replay: false,
    };
    let mut percents = [None; 3];
    let mut bytes = [0u64; 3];
    for (k, (name, flag, default)) in flags.into_iter().enumerate() {
        percents[k] = budget_percent(flag, name)?;
        bytes[k] = match percents[k] {
            Some(_) => default,
            None => within_capacity(
                (name, flag.as_deref().unwrap_or_default()),
                budget(flag, name, default)?,
                (default, k > 0),
                &capacity,
            )?,
        };
    }
    [
        options.budgets.hbm_bytes,
        options.budgets.host_bytes,
        options.budgets.ssd_bytes,
    ] = bytes;
    if percents.iter().any(Option::is_some) && args.dag.is_none() && args.partitions == "auto" {
        return prepare_with_shares_at_auto(args, sized_as, percents, &profile);
    }
    let SourceGiven {
        source,
        note: graph_note,
        halo,
        shares,
    } = workload_source(args)?;
    if args.gpus > 1 {
        let halo = halo.ok_or_else(|| {
            anyhow!(
                "--gpus {}: only a GNN's graph (--dataset or --graph) is split across GPUs",
                args.gpus
            )
        })?;
        options.multi = Some(MultiGpu { halo, forced });
    } else if forced.is_some() {
        bail!("--exchange {}: applies with --gpus above 1", args.exchange);
    }
    // What the workload of real shares was built from.
    let mut shares_shape = None;
    let auto = args.sweep.eq_ignore_ascii_case("auto");
    // `--partitions auto --sweep auto`: the sweeps chosen at each count
    // the sizing walks to (their name and the summary's line, by count),
    // so that the counts are compared with their sweeps. Real shares are
    // built again once the count is known, and choose theirs then.
    let chosen_at: RefCell<BTreeMap<u32, (String, String)>> = RefCell::new(BTreeMap::new());
    // The searches compare their trials polished from one start; the plan
    // taken is made again with `options` where they ask more
    // (`PlanOptions::for_search`). `made` is a search's plan but where
    // the shares' plan replaces it.
    let mut searched = true;
    let (mut workload, sizing_note, mut made, mut model, gnn) = match source {
        Source::Dag(workload) => {
            plannable(
                &workload,
                &profile,
                &options,
                "a DAG of fewer tensors and operators plans in less",
            )?;
            (workload, String::new(), None, None, None)
        }
        Source::Gnn(gnn) => {
            gnn.spec.validate().map_err(sweep_flagged)?;
            // The options as they are here: budgets given as shares of
            // the peak, and the shares' halo, come after the sizing.
            let search = options.for_search();
            let at = |p: u32, workload: Workload, made: Option<MadePlan>| {
                let shape = GnnShape {
                    spec: gnn.spec.clone(),
                    counts: gnn.source.blocks(p, true)?,
                };
                // The walk planned this count by outputs with these
                // options: `None` is no fit, not planned again.
                let outputs = Some((workload, ByOutputs::Planned(made)));
                let chose = auto_sweeps(&shape, &profile, &search, outputs)?;
                chosen_at.borrow_mut().insert(p, (chose.name, chose.line));
                Ok((chose.swept.workload, chose.swept.plan))
            };
            let joint = auto
                && args.partitions == "auto"
                && shares.is_none()
                && gnn.spec.sweepable() != Sweeps::default();
            let (mut workload, p, mut note, mut made) = gnn.sized(
                &args.partitions,
                args.gpus,
                shares.is_none().then_some(plannable_as(auto)),
                &profile,
                &search,
                joint.then_some(&at as &AtCount<'_, anyhow::Error>),
            )?;
            let mut model = PlanModel {
                devices: args.gpus,
                ..PlanModel::new(&gnn.spec, p)
            };
            if let Some(shares) = shares {
                // The partitions were sized on the largest share's
                // statistics; the plan is for the shares `train` builds,
                // so that `train --plan` trains it.
                let fitted = args.partitions == "auto" && made.is_some();
                let built = plan_shares(args, &gnn, shares, p, fitted, &profile, &mut options)?;
                workload = built.workload;
                shares_shape = Some(built.shape);
                made = built.made;
                // Planned with `options` (the shares' plan is not a search's).
                searched = false;
                model.partitions = built.partitions;
                model.shares = Some(ShareMethod::Mincut.name().to_string());
                note = if note.is_empty() {
                    built.line
                } else {
                    format!("{note}\n{}", built.line)
                };
            }
            (workload, note, made, Some(model), Some(gnn))
        }
    };
    let mut budget_note = String::new();
    if percents.iter().any(Option::is_some) {
        // (Sizing made no plan: percentages need a partition count. Were
        // one made, it would be under other budgets.)
        made = None;
        let peak = retain_all_peak(&workload, &profile, &options)
            .context("planning retain-all for the budgets' percentages")?;
        let budgets = &mut options.budgets;
        let slots = [
            &mut budgets.hbm_bytes,
            &mut budgets.host_bytes,
            &mut budgets.ssd_bytes,
        ];
        let mut given = Vec::new();
        let held = Capacity {
            profile: &profile.name,
            gpus: args.gpus,
            replay: false,
        };
        let tiers = slots.into_iter().zip(percents).zip(flags).enumerate();
        for (k, ((slot, percent), (name, flag, capacity))) in tiers {
            if let Some(percent) = percent {
                let (of, whose) = match k {
                    0 => hbm_share_base(peak, capacity),
                    _ => (peak, RETAIN_ALL_PEAK.to_string()),
                };
                *slot = within_capacity(
                    (name, flag.as_deref().unwrap_or_default()),
                    share_of(
                        of,
                        percent,
                        (
                            &format!("--{name} {}", flag.as_deref().unwrap_or_default()),
                            &whose,
                        ),
                    )?,
                    (capacity, k > 0),
                    &held,
                )?;
                let entry = format!("--{name} {percent}%: {}", format_bytes(*slot));
                given.push((entry, of == peak));
            }
        }
        budget_note = match given.iter().all(|(_, on_peak)| *on_peak) {
            true => format!(
                "percent   {} (of the retain-all plan's device peak, {})",
                given
                    .iter()
                    .map(|(e, _)| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                format_bytes(peak)
            ),
            // The device's share is of its memory: each says what it is of.
            false => format!(
                "percent   {}",
                given
                    .iter()
                    .map(|(entry, on_peak)| match on_peak {
                        true => format!("{entry} of {RETAIN_ALL_PEAK} ({})", format_bytes(peak)),
                        false => format!(
                            "{entry} of the device's memory ({}; {RETAIN_ALL_PEAK}, {}, is \
                             over it)",
                            format_bytes(profile.device.hbm_bytes),
                            format_bytes(peak)
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    }
    let mut sweep_note = String::new();
    let mut made_while = "sizing the partitions";
    let chosen = model
        .as_ref()
        .and_then(|model| chosen_at.borrow_mut().remove(&model.partitions));
    if let (Some(model), Some((name, line))) = (&mut model, chosen) {
        // The sizing chose them with the count: `workload` and `made` are
        // theirs (by outputs, the sizing's own plan).
        if name != "outputs" {
            made_while = "choosing the sweeps";
        }
        sweep_note = line;
        model.sweep = name;
    } else if let (Some(gnn), Some(model), true) = (&gnn, &mut model, auto) {
        let shared = shares_shape.is_some();
        let shape = match shares_shape {
            Some(shape) => shape,
            None => GnnShape {
                spec: gnn.spec.clone(),
                counts: gnn.source.blocks(model.partitions, false)?,
            },
        };
        // A plan of the shares made with more starts than the search
        // compares with is not one of its trials.
        if !searched && !options.search_plans_final() {
            made = None;
        }
        let reused = made.is_some();
        if args.partitions == "auto" && shared {
            // A count given was checked with its sweeps as it was built
            // (`plannable_as`); the shares at the count `auto` sized (on
            // the largest share's statistics, the sweeps not chosen with
            // it) are checked here, before their sweeps are planned.
            sweeps_plannable(
                &workload,
                &profile,
                &options,
                &fewer_partitions(model.partitions),
            )?;
        }
        let outputs = Some((
            workload,
            match made.take() {
                Some(made) => ByOutputs::Planned(Some(made)),
                None => ByOutputs::Unplanned,
            },
        ));
        let AutoSweeps {
            swept, name, line, ..
        } = auto_sweeps(&shape, &profile, &options.for_search(), outputs)?;
        if !(reused && swept.sweeps == Sweeps::default()) {
            made_while = "choosing the sweeps";
        }
        sweep_note = line;
        model.sweep = name;
        workload = swept.workload;
        made = swept.plan;
        searched = true;
    }
    if searched && !options.search_plans_final() {
        made = None;
    }
    let mut note = format!(
        "{} tensors, {} operators",
        workload.tensors.len(),
        workload.ops.len()
    );
    if !graph_note.is_empty() {
        note = format!("{note}; {graph_note}");
    }
    if !sizing_note.is_empty() {
        note = format!("{note}\n{sizing_note}");
    }
    if let Some(multi) = &options.multi {
        note = format!("{note}\nhalo      {}", multi.halo.source);
    }
    if !budget_note.is_empty() {
        note = format!("{note}\n{budget_note}");
    }
    if !sweep_note.is_empty() {
        note = format!("{note}\n{sweep_note}");
    }
    let search_ran = gnn.is_some() && (args.partitions == "auto" || auto);
    if search_ran && !options.search_plans_final() {
        note = format!(
            "{note}\npolish    the searches above compared plans polished from one start; the \
             plan is polished from {} (--polish-starts)",
            options.polish_starts
        );
    }
    Ok(Prepared {
        profile,
        options,
        workload,
        note,
        made,
        made_while,
        model,
    })
}

/// One policy's outcome on one workload, as `compare` and `study` report it.
pub(crate) struct PolicyRow {
    pub policy: Policy,
    pub outcome: Outcome,
}

pub(crate) enum Outcome {
    /// A plan within the budgets: the planner's prediction and, when asked
    /// for, the simulator's replay of it.
    Fits {
        predicted: Box<Predicted>,
        simulated: Option<Simulated>,
        /// How the MILP's search ended (milp's plan only).
        milp: Option<MilpSearch>,
    },
    /// The policy gave no plan for another reason than the budgets: milp
    /// on a large workload, or stopped by its solver.
    Skipped(String),
    /// The MILP's time limit ran out before it found a plan.
    OutOfTime(String),
    /// No plan of this policy fits the budgets.
    DoesNotFit(String),
}

/// The simulator's replay of a plan (seed 0, no jitter).
pub(crate) struct Simulated {
    pub iteration_s: f64,
    /// The simulated iteration against the planner's prediction, in percent.
    pub disagreement_percent: f64,
    /// Violations of the plan the replay found; such a plan is marked.
    pub violations_total: u64,
    pub first_violation: Option<String>,
}

impl PolicyRow {
    pub fn predicted(&self) -> Option<&Predicted> {
        match &self.outcome {
            Outcome::Fits { predicted, .. } => Some(predicted),
            _ => None,
        }
    }

    pub fn simulated(&self) -> Option<&Simulated> {
        match &self.outcome {
            Outcome::Fits { simulated, .. } => simulated.as_ref(),
            _ => None,
        }
    }

    /// The row as `compare --json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        let name = self.policy.name();
        match &self.outcome {
            Outcome::Fits {
                predicted: p,
                simulated,
                milp,
            } => {
                let mut row = serde_json::json!({
                    "policy": name,
                    "fits": true,
                    "iteration_s": p.iteration_s,
                    "compute_s": p.compute_s,
                    "recompute_s": p.recompute_s,
                    "exposed_transfer_s": p.exposed_transfer_s,
                    "peak_bytes": {
                        "hbm": p.peak_bytes.hbm,
                        "host": p.peak_bytes.host,
                        "ssd": p.peak_bytes.ssd,
                    },
                });
                if let Some(s) = simulated {
                    row["simulated_iteration_s"] = s.iteration_s.into();
                    row["disagreement_percent"] = s.disagreement_percent.into();
                    row["simulated_violations"] = s.violations_total.into();
                    row["first_violation"] = s.first_violation.clone().into();
                }
                if let Some(m) = milp {
                    row["proven_optimal"] = m.proven_optimal.into();
                    row["milp_time_limit_s"] = m.time_limit_s.into();
                }
                row
            }
            Outcome::Skipped(message) => {
                serde_json::json!({"policy": name, "fits": null, "skipped": message})
            }
            Outcome::OutOfTime(message) => serde_json::json!({
                "policy": name, "fits": null, "skipped": message, "out_of_time": true
            }),
            Outcome::DoesNotFit(error) => {
                serde_json::json!({"policy": name, "fits": false, "error": error})
            }
        }
    }
}

/// Every policy's plan for one workload.
pub(crate) struct Comparison {
    pub workload: String,
    /// The GNN's partitions (none for a DAG).
    pub partitions: Option<u32>,
    /// Tensors, operators, nodes and edges.
    pub note: String,
    pub profile: String,
    pub budgets: Budgets,
    pub rows: Vec<PolicyRow>,
}

/// Plans the workload `args` describes with each of `policies` (peers with
/// every fate, dp and milp with `--fates`; `--partitions auto` sized under
/// dp, whatever `--policy` says), and replays each plan that fits
/// on the simulator when `simulate` is set. Plans are dropped as soon as
/// they are measured: a large workload's plan takes gigabytes, so at most
/// two rows are planned at once (one with `simulate`, whose replay holds
/// its report beside the plan).
pub(crate) fn compare_policies(
    args: &PlanArgs,
    policies: &[Policy],
    simulate: bool,
) -> Result<Comparison> {
    let Prepared {
        profile,
        options,
        workload,
        note,
        mut made,
        made_while: _,
        model,
    } = prepare(args, Some(Policy::Dp))?;
    // The MILP may search for its whole time limit: say what is planning
    // (on a terminal only).
    let bar = indicatif::ProgressBar::new(policies.len() as u64)
        .with_finish(indicatif::ProgressFinish::AndClear);
    bar.set_style(crate::cli::progress_style(
        "{bar:30} {pos}/{len} planning {msg} {took}",
    ));
    let trial_of = |policy: Policy| PlanOptions {
        policy,
        fates: if policy.is_peer() {
            FateSet::ALL
        } else {
            options.fates
        },
        ..options.clone()
    };
    // The plan made while sizing goes to the first row with its options.
    let sized_row = policies.iter().position(|&policy| {
        made.is_some() && policy == options.policy && trial_of(policy).fates == options.fates
    });
    // dp's and milp's hints at a budget nothing fits
    // (`planner::dp_and_milp_hints`): asked once, by whichever row needs
    // them first, the model's bisection shared. They differ where dp would
    // take a peer policy's plan that its memory model misses.
    type Hints = Result<Option<(planner::Hint, planner::Hint)>, PlanError>;
    let model_hints: OnceLock<Hints> = OnceLock::new();
    let hint_after = |policy: Policy| !policy.is_peer() && options.gpus <= 1;
    let hinted = |policy: Policy, error: PlanError| -> PlanError {
        if !matches!(error, PlanError::Infeasible { .. }) {
            return error;
        }
        let hints = model_hints
            .get_or_init(|| planner::dp_and_milp_hints(&workload, &profile, &trial_of(policy)));
        match hints {
            Ok(Some((dp, milp))) => match policy {
                Policy::Milp => planner::add_hint(error, milp),
                _ => planner::add_hint(error, dp),
            },
            Ok(None) => error,
            // The hint's own error (the workload or profile refused).
            Err(other) => other.clone(),
        }
    };
    // Planned with the hint, or without it where `hinted` adds it after
    // (asked once per policy).
    let plan_row = |policy: Policy| -> Result<Plan, PlanError> {
        let trial = trial_of(policy);
        if hint_after(policy) {
            planner::plan_or_infeasible(&workload, &profile, &trial)
        } else {
            plan(&workload, &profile, &trial)
        }
    };
    let row = |policy: Policy, planned: Result<Plan, PlanError>| -> Result<PolicyRow> {
        let outcome = match planned {
            Ok(p) => {
                let simulated = if simulate {
                    let report = simulator::simulate(&p, &profile, &SimOptions { seed: 0 })
                        .with_context(|| format!("simulating the {} plan", policy.name()))?;
                    Some(Simulated {
                        iteration_s: report.iteration_s,
                        disagreement_percent: report.difference_percent(),
                        violations_total: report.violations_total,
                        first_violation: report.violations.first().map(|v| v.to_string()),
                    })
                } else {
                    None
                };
                Outcome::Fits {
                    predicted: Box::new(p.predicted),
                    simulated,
                    milp: p.milp,
                }
            }
            // No plan in its time, or a workload too large for it: the
            // MILP's row says why, and the others are compared.
            Err(error @ PlanError::MilpOutOfTime { .. }) => Outcome::OutOfTime(error.to_string()),
            Err(PlanError::InvalidInput { message, .. }) if policy == Policy::Milp => {
                Outcome::Skipped(message)
            }
            Err(error @ PlanError::SolverFailed { .. }) => {
                let said = error.to_string();
                Outcome::Skipped(said.trim_start_matches("policy milp: ").to_string())
            }
            Err(error @ PlanError::Infeasible { .. }) => Outcome::DoesNotFit(error.to_string()),
            Err(other) => return Err(other.into()),
        };
        bar.inc(1);
        Ok(PolicyRow { policy, outcome })
    };
    // The MILP's rows alone, first: its time limit is of a search with
    // the cores to itself. Where it does not fit, its row waits for the
    // hint it shares with dp's. The others two at a time, side by side,
    // each of two threads taking the next row as it finishes one: most
    // rows are a single thread's work (a peer's plan, or at a budget
    // nothing fits, the search for one that does), and a plan is the
    // same whatever runs beside it. Two at a time, not one per core: a
    // large workload's plan takes gigabytes; one at a time where each is
    // replayed too. Every row is planned; the first error in the
    // policies' order is the one returned.
    let mut rows: Vec<Option<Result<PolicyRow>>> = (0..policies.len()).map(|_| None).collect();
    let mut sized = made.take().map(|made| made.plan);
    let mut sized_for = |i: usize| {
        if sized_row == Some(i) {
            sized.take()
        } else {
            None
        }
    };
    let (milp, others): (Vec<usize>, Vec<usize>) =
        (0..policies.len()).partition(|&i| policies[i] == Policy::Milp);
    let mut waiting: Vec<(usize, PlanError)> = Vec::new();
    for i in milp {
        bar.set_message(format!(
            "milp (up to {} s: --milp-time-limit)",
            options.milp_time_limit_s
        ));
        let planned = match sized_for(i) {
            Some(plan) => Ok(plan),
            None => plan_row(policies[i]),
        };
        match planned {
            Err(error @ PlanError::Infeasible { .. }) if hint_after(policies[i]) => {
                waiting.push((i, error));
            }
            planned => rows[i] = Some(row(policies[i], planned)),
        }
    }
    // Each row with the plan sizing made for it, if any.
    let queue: Mutex<VecDeque<(usize, Option<Plan>)>> =
        Mutex::new(others.iter().map(|&i| (i, sized_for(i))).collect());
    let planning: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let finished: Mutex<Vec<(usize, Result<PolicyRow>)>> = Mutex::new(Vec::new());
    let work = || loop {
        let Some((i, given)) = queue.lock().expect("no row panicked").pop_front() else {
            break;
        };
        let policy = policies[i];
        let mut names = planning.lock().expect("no row panicked");
        names.push(policy.name());
        bar.set_message(names.join(", "));
        drop(names);
        let planned = match given {
            Some(plan) => Ok(plan),
            None => plan_row(policy).map_err(|error| {
                if hint_after(policy) {
                    hinted(policy, error)
                } else {
                    error
                }
            }),
        };
        let result = row(policy, planned);
        let mut names = planning.lock().expect("no row panicked");
        names.retain(|&name| name != policy.name());
        bar.set_message(names.join(", "));
        drop(names);
        finished.lock().expect("no row panicked").push((i, result));
    };
    if simulate {
        work();
    } else {
        std::thread::scope(|scope| {
            scope.spawn(work);
            work();
        });
    }
    for (i, result) in finished.into_inner().expect("no row panicked") {
        rows[i] = Some(result);
    }
    for (i, error) in waiting {
        bar.set_message("milp (the budgets that would fit)");
        rows[i] = Some(row(policies[i], Err(hinted(policies[i], error))));
    }
    let rows = rows
        .into_iter()
        .flatten()
        .collect::<Result<Vec<PolicyRow>>>()?;
    bar.finish_and_clear();
    Ok(Comparison {
        workload: workload.name,
        partitions: model.map(|m| m.partitions),
        note,
        profile: profile.name,
        budgets: options.budgets,
        rows,
    })
}

/// A command that plans several ways (`compare`'s policies, `curve`'s
/// budgets) printed its table, and none of its plans fits: exit 2, as
/// `plan` does where its plan does not.
#[derive(Debug)]
pub(crate) struct NothingFits(pub &'static str);

impl std::fmt::Display for NothingFits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for NothingFits {}

/// A percentage with a sign, without "-0.00%" for rounding noise.
pub(crate) fn signed_percent(value: f64) -> String {
    let value = if value.abs() < 0.005 { 0.0 } else { value };
    format!("{value:+.2}%")
}

fn run_compare(args: &CompareArgs) -> Result<()> {
    args.plan.warn();
    // `plan`'s flags that write or explain one plan have no meaning here.
    if let Some(path) = &args.plan.output {
        bail!(
            "-o {}: compare prints a row per policy and writes no plan; run `fateplan plan --policy P -o FILE` for one",
            path.display()
        );
    }
    if args.plan.explain {
        bail!(
            "--explain: compare prints a row per policy; run `fateplan plan --policy P --explain` for one plan's fates"
        );
    }
    // Every policy is planned, at dp's partition count.
    if args.plan.policy != Policy::Dp.name() {
        bail!(
            "--policy {}: compare plans every policy, at the partition count dp takes; run \
             `fateplan plan --policy {}` for that policy's own plan",
            args.plan.policy,
            args.plan.policy
        );
    }
    let c = compare_policies(&args.plan, &Policy::ALL, args.simulate)?;
    let fits = c
        .rows
        .iter()
        .any(|row| matches!(row.outcome, Outcome::Fits { .. }));
    let outcome = match fits {
        true => Ok(()),
        false => Err(NothingFits("no policy's plan fits the budgets (each row says why)").into()),
    };
    reported(write_compare(args, &c), outcome)
}

/// A command's report written (`written`), then its `outcome`. An
/// outcome with an exit status of its own (nothing fits, a budget broken)
/// stands where the report could not be written too: a reader that
/// closed the pipe early has the rows it read, and another failure to
/// write is said on standard error first.
pub(crate) fn reported(written: Result<()>, outcome: Result<()>) -> Result<()> {
    match (written, outcome) {
        (Err(write), Err(outcome)) => {
            if !broken_pipe(&write) {
                eprintln!("error: {}", error_chain(&write));
            }
            Err(outcome)
        }
        (written, Ok(())) => written,
        (Ok(()), outcome) => outcome,
    }
}

/// Whether `error` is a write to a pipe whose reader has gone.
fn broken_pipe(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The text's lines on a workload as JSON strings, each led by its
/// label as the text gives it (the first, the workload's size, by
/// `workload`), one space after it.
fn json_notes(note: &str) -> Vec<String> {
    note.lines()
        .enumerate()
        .map(|(k, line)| {
            let line = line.trim_end();
            let line = match k {
                0 => format!("workload {line}"),
                _ => line.to_string(),
            };
            match line.split_once(' ') {
                Some((label, rest)) => format!("{label} {}", rest.trim_start()),
                None => line,
            }
        })
        .collect()
}

/// `compare`'s table, or its JSON under `--json`.
fn write_compare(args: &CompareArgs, c: &Comparison) -> Result<()> {
    let mut out = stdout();
    if args.plan.json {
        let doc = serde_json::json!({
            "workload": c.workload,
            "partitions": c.partitions,
            // The text's lines on the workload: its size, how `auto`
            // chose the partitions, the halo, budgets given as shares.
            "notes": json_notes(&c.note),
            "profile": c.profile,
            "budgets": {
                "hbm": c.budgets.hbm_bytes,
                "host": c.budgets.host_bytes,
                "ssd": c.budgets.ssd_bytes,
            },
            "simulated": args.simulate,
            "policies": c.rows.iter().map(PolicyRow::to_json).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    write_comparison(&mut out, c, args.simulate)
}

/// `compare`'s table: a row per policy, then the marks' explanations.
fn write_comparison(out: &mut dyn Write, c: &Comparison, simulate: bool) -> Result<()> {
    writeln!(out, "compare   {} on {}", c.workload, c.profile)?;
    writeln!(out, "workload  {}", c.note)?;
    writeln!(
        out,
        "budgets   hbm {}, host {}, ssd {}",
        format_bytes(c.budgets.hbm_bytes),
        format_bytes(c.budgets.host_bytes),
        format_bytes(c.budgets.ssd_bytes)
    )?;
    if simulate {
        writeln!(out, "simulated seed 0 (no jitter); sim-pred is the simulated time against the prediction; ! marks a plan the simulator found violations in")?;
    }
    let dp_time = c.rows.iter().find(|r| r.policy == Policy::Dp);
    let dp_time = dp_time
        .and_then(PolicyRow::predicted)
        .map(|p| p.iteration_s);
    write!(
        out,
        "{:<18} {:>14} {:>8} {:>11} {:>11} {:>11}",
        "policy", "iteration", "vs dp", "hbm peak", "host peak", "ssd peak"
    )?;
    if simulate {
        write!(out, " {:>14} {:>9}", "simulated", "sim-pred")?;
    }
    writeln!(out)?;
    for row in &c.rows {
        let name = row.policy.name();
        match &row.outcome {
            Outcome::Fits {
                predicted: p,
                simulated,
                milp,
            } => {
                let t = p.iteration_s;
                let ratio = dp_time.map_or("-".to_string(), |d| format!("{:.2}x", t / d));
                write!(
                    out,
                    "{name:<18} {:>14} {ratio:>8} {:>11} {:>11} {:>11}",
                    format_seconds(t),
                    format_bytes(p.peak_bytes.hbm),
                    format_bytes(p.peak_bytes.host),
                    format_bytes(p.peak_bytes.ssd)
                )?;
                if let Some(s) = simulated {
                    write!(
                        out,
                        " {:>14} {:>9}",
                        format_seconds(s.iteration_s),
                        signed_percent(s.disagreement_percent)
                    )?;
                    if s.violations_total > 0 {
                        write!(out, "  ! {}", count(s.violations_total, "violation"))?;
                    }
                }
                if milp.is_some_and(|m| !m.proven_optimal) {
                    write!(out, "  ~ not proven optimal")?;
                }
                writeln!(out)?;
            }
            Outcome::Skipped(why) => writeln!(out, "{name:<18} skipped: {why}")?,
            Outcome::OutOfTime(why) => writeln!(out, "{name:<18} out of time: {why}")?,
            Outcome::DoesNotFit(why) => writeln!(out, "{name:<18} does not fit: {why}")?,
        }
    }
    for row in &c.rows {
        if let Some(first) = row.simulated().and_then(|s| s.first_violation.as_ref()) {
            writeln!(out, "! {}: first violation: {first}", row.policy.name())?;
        }
    }
    for row in &c.rows {
        if let Outcome::Fits {
            milp:
                Some(
                    m @ MilpSearch {
                        proven_optimal: false,
                        ..
                    },
                ),
            ..
        } = &row.outcome
        {
            writeln!(out, "~ {}: {}", row.policy.name(), m.describe())?;
        }
    }
    Ok(())
}

/// The plan `fateplan plan` makes of `args`, with what its summary says
/// beside it.
pub(crate) struct Planned {
    pub(crate) plan: Plan,
    /// Lines on the workload, its partitions, halo and budgets.
    pub(crate) note: String,
    /// Seconds planning took (the plan's own, where sizing the partitions
    /// or choosing the sweeps made it).
    planned_s: f64,
    /// Where sizing or choosing the sweeps made it, which of the two.
    made_while: Option<&'static str>,
}

/// Plans `args` as `fateplan plan` does: the workload, its partitions and
/// sweeps, then the plan, which records the model it was made for.
/// `plan`'s flags alone, parsed from a command line `train --partitions
/// auto` makes.
#[derive(Parser)]
pub(crate) struct PlanOnly {
    #[command(flatten)]
    pub(crate) args: PlanArgs,
}

/// Where the MILP could not be run on `workload` (too many choices for
/// it) and dp's memory model, which sizes the MILP's partitions, finds
/// no fates that fit: dp's infeasible error, which names the budgets that
/// fit, with why the MILP was not run; else `error` as it is. No plan
/// fits there under either policy, which is exit status 2, not a refusal
/// of the input.
fn milp_beyond_fit(
    error: fateplan::planner::Error,
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
) -> fateplan::planner::Error {
    use fateplan::planner::Error;
    // The MILP's refusal of a workload of too many choices for it.
    let unrun = options.policy == Policy::Milp
        && matches!(&error, Error::InvalidInput { context, .. } if context == "policy milp");
    if !unrun || planner::fits(workload, profile, options).unwrap_or(true) {
        return error;
    }
    let dp = PlanOptions {
        policy: Policy::Dp,
        ..options.clone()
    };
    match plan(workload, profile, &dp) {
        Err(mut infeasible @ Error::Infeasible { .. }) => {
            if let Error::Infeasible { hint, .. } = &mut infeasible {
                hint.push_str(&format!(
                    " (dp's plan: dp's memory model finds no fates that fit, and the MILP was \
                     not run: {error})"
                ));
            }
            infeasible
        }
        _ => error,
    }
}

pub(crate) fn planned(args: &PlanArgs) -> Result<Planned> {
    let Prepared {
        profile,
        options,
        workload,
        note,
        made,
        made_while,
        model,
    } = prepare(args, None)?;
    let started = std::time::Instant::now();
    // The plan made while sizing, with these options.
    let sizing_planned_s = made.as_ref().map(|m| m.seconds);
    let made = made.map(|m| Ok(m.plan));
    let mut plan = made
        .unwrap_or_else(|| {
            let _shown = solving(&options);
            plan(&workload, &profile, &options)
        })
        .map_err(|error| milp_beyond_fit(error, &workload, &profile, &options))
        .map_err(|error| {
            // Say how many partitions `auto` tried: the error is at that count.
            // (A context repeating the error keeps it first in the message
            // and keeps its type for the exit status.)
            let line = note.lines().find(|line| line.starts_with("partitions "));
            let message = line.map(|line| format!("{error}; planned at {line}"));
            let error = anyhow::Error::from(error);
            match message {
                Some(message) => error.context(message),
                None => error,
            }
        })?;
    let planned_s = sizing_planned_s.unwrap_or_else(|| started.elapsed().as_secs_f64());
    // What `train --plan` trains.
    plan.workload.model = model;
    Ok(Planned {
        plan,
        note,
        planned_s,
        made_while: sizing_planned_s.map(|_| made_while),
    })
}

fn run_plan(args: &PlanArgs) -> Result<()> {
    args.check_policy_flags()?;
    args.warn();
    spare_inputs(
        &[("-o", args.output.as_deref())],
        &[
            ("--graph", args.graph.as_deref().and_then(existing)),
            ("--dag", args.dag.as_deref()),
            ("--profile", existing(&args.profile)),
        ],
    )?;
    // Checked before planning, which may take a while.
    let plan_out = args
        .output
        .as_deref()
        .map(|path| Staged::create(path, "-o"))
        .transpose()?;
    let begun = std::time::Instant::now();
    let Planned {
        plan,
        note,
        planned_s,
        made_while,
    } = planned(args)?;
    // The searches (partitions, sweeps, shares' reference) and the plan.
    let all_s = begun.elapsed().as_secs_f64();
    // Serialised only where it is written or printed, as it is written.
    if let Some(plan_out) = plan_out {
        plan_out.write_with(|out| plan.write_json(out))?;
    }
    let mut out = stdout();
    if args.json && args.explain {
        let lines: Vec<serde_json::Value> = explain(&plan)
            .into_iter()
            .map(|e| serde_json::json!({"tensor": e.name, "fate": e.fate.name(), "reason": e.reason}))
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"explain": lines}))?
        )?;
    } else if args.json {
        let mut buffered = std::io::BufWriter::new(&mut out);
        plan.write_json(&mut buffered)?;
        buffered.flush()?;
    } else {
        write_summary(&mut out, &plan, &note, args.output.as_ref())?;
        let when = match made_while {
            Some(made_while) => format!(" (while {made_while})"),
            None => String::new(),
        };
        let search = plan.milp.map(|m| {
            // Its exchange vector's share of the limit they all shared.
            let shared =
                (!m.proven_optimal && args.gpus > 1 && args.exchange == "auto").then(|| {
                    format!(
                        "; that was this exchange vector's share of the {} s the vectors shared",
                        args.milp_time_limit()
                    )
                });
            format!("; {}{}", m.describe(), shared.unwrap_or_default())
        });
        // Where the searches took more than the plan itself, the whole.
        let all = (all_s > 2.0 * planned_s && all_s - planned_s > 0.05)
            .then(|| format!("; {} in all, with the searches", format_seconds(all_s)));
        writeln!(
            out,
            "planned   in {}{when}{}{}",
            format_seconds(planned_s),
            all.unwrap_or_default(),
            search.unwrap_or_default()
        )?;
        if args.explain {
            writeln!(out)?;
            for line in explain(&plan) {
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

fn write_summary(
    out: &mut dyn Write,
    plan: &Plan,
    note: &str,
    written: Option<&PathBuf>,
) -> Result<()> {
    let p = &plan.predicted;
    let gpus = match (plan.profile.device.kind, plan.gpus) {
        (DeviceKind::Cpu, _) => "CPU backend".to_string(),
        (_, 1) => "1 GPU".to_string(),
        (_, n) => format!("one of {n} GPUs"),
    };
    writeln!(
        out,
        "plan      {} on {} ({gpus}), policy {}",
        plan.workload.name, plan.profile.name, plan.policy
    )?;
    writeln!(out, "workload  {note}")?;
    if plan.gpus > 1 {
        let layers: Vec<String> = plan
            .layer_strategies()
            .iter()
            .map(|(l, s)| format!("l{l} {}", s.name()))
            .collect();
        let bytes = |leg: Leg| -> u64 {
            plan.exchanges
                .iter()
                .filter(|e| e.leg == leg && e.kind != ExchangeKind::AllReduce)
                .map(|e| e.bytes)
                .sum()
        };
        let all_reduce: u64 = plan
            .exchanges
            .iter()
            .filter(|e| e.kind == ExchangeKind::AllReduce)
            .map(|e| e.bytes)
            .sum();
        let network: u64 = plan.exchanges.iter().map(|e| e.network_bytes).sum();
        writeln!(
            out,
            "exchange  {}; GPU to GPU {}, to host {}, from host {}, all-reduce {}, over the network {}",
            layers.join(", "),
            format_bytes(bytes(Leg::Peer)),
            format_bytes(bytes(Leg::ToHost)),
            format_bytes(bytes(Leg::FromHost)),
            format_bytes(all_reduce),
            format_bytes(network)
        )?;
    }
    writeln!(
        out,
        "tier      {:>12}  {:>12}  {:>6}  peak at",
        "peak", "budget", "use"
    )?;
    for tier in [Tier::Hbm, Tier::Host, Tier::Ssd] {
        let (peak, budget) = (p.peak_bytes.get(tier), plan.budgets.of(tier));
        // A tier the plan never uses has no peak to place.
        let at = match peak {
            0 => "unused".to_string(),
            _ => {
                let step = p.peak_step.get(tier);
                let op = &plan.workload.definition.ops[step as usize].name;
                format!("step {step} ({op})")
            }
        };
        writeln!(
            out,
            "{:<9} {:>12}  {:>12}  {:>6}  {at}",
            tier.name(),
            format_bytes(peak),
            format_bytes(budget),
            tier_use(peak, budget)
        )?;
    }
    // What the hbm peak holds beside the tensors.
    let definition = &plan.workload.definition;
    let scratch = definition.ops.iter().max_by_key(|op| op.scratch_bytes);
    if let Some(op) = scratch.filter(|op| op.scratch_bytes > 0 || definition.resident_bytes > 0) {
        writeln!(
            out,
            "scratch   in hbm beside the tensors: {} resident, and up to {} while an operator runs ({})",
            format_bytes(definition.resident_bytes),
            format_bytes(op.scratch_bytes),
            op.name
        )?;
    }
    // A recomputed tensor is rebuilt through the intermediates its
    // operators made (a partial sum), which rerun too whatever their own
    // fate: the runs are said beside the count of tensors.
    let reruns = plan
        .schedule
        .iter()
        .filter(|e| e.action == Action::Recompute)
        .count() as u64;
    let counts: Vec<String> = plan
        .fate_counts()
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(fate, n): (Fate, usize)| match fate {
            Fate::Recompute if reruns != n as u64 => format!(
                "{fate} {n} ({} an iteration, the intermediates they are rebuilt through \
                 included)",
                fateplan::planner::units::count(reruns, "recomputation")
            ),
            _ => format!("{fate} {n}"),
        })
        .collect();
    writeln!(out, "fates     {}", counts.join(", "))?;
    writeln!(
        out,
        "predicted {} per iteration: compute {}, recompute {}, exposed transfers {}",
        format_seconds(p.iteration_s),
        format_seconds(p.compute_s),
        format_seconds(p.recompute_s),
        format_seconds(p.exposed_transfer_s)
    )?;
    let m = &p.bytes_moved;
    // The exchanges' bytes are on their own line: say so where they cross
    // the same links.
    let apart = if plan.exchanges.is_empty() {
        ""
    } else {
        " (the tensors'; the exchanges' are on the exchange line)"
    };
    writeln!(
        out,
        "moved     h2d {}, d2h {}, ssd read {}, ssd write {}{apart}",
        format_bytes(m.h2d),
        format_bytes(m.d2h),
        format_bytes(m.ssd_read),
        format_bytes(m.ssd_write)
    )?;
    if let Some(path) = written {
        writeln!(out, "written   {}", path.display())?;
    }
    Ok(())
}

fn run_workloads() -> Result<()> {
    let mut out = stdout();
    writeln!(out, "datasets (statistics; --dataset NAME)")?;
    writeln!(
        out,
        "  {:<16} {:>12} {:>14} {:>9} {:>8}  note",
        "name", "nodes", "edges", "features", "classes"
    )?;
    for d in DATASETS {
        writeln!(
            out,
            "  {:<16} {:>12} {:>14} {:>9} {:>8}  {}",
            d.name, d.nodes, d.edges, d.features, d.classes, d.note
        )?;
    }
    writeln!(out, "\nmodels (--model): gcn, sage, gat")?;
    writeln!(out, "\npolicies (--policy)")?;
    for policy in Policy::ALL {
        writeln!(out, "  {:<17} {}", policy.name(), policy.describe())?;
    }
    writeln!(out, "\nprofiles (--profile NAME, or a JSON file)")?;
    for name in profiles::names() {
        let profile = profiles::builtin(name).expect("listed profiles exist");
        writeln!(
            out,
            "  {:<14} {} x {}, {} device memory, {} host, {} SSD",
            name,
            profile.device.count_max,
            profile.device.model,
            format_bytes(profile.device.hbm_bytes),
            format_bytes(profile.host.memory_bytes),
            format_bytes(profile.ssd.capacity_bytes)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run out of memory keeps its kind and figures in `--json`'s
    /// document wherever it is wrapped: in context, or as the source of a
    /// measurement's error.
    #[test]
    fn a_run_out_of_memory_is_named_in_the_json_document() {
        use fateplan::runtime::exec::ExecError;
        let oom = || ExecError::OutOfMemory {
            bytes: 1 << 20,
            during: Some("step 3 (agg[l0,p1,s0])".into()),
        };
        let wrapped = fateplan::runtime::Error::Run {
            what: "the GEMM measurement".into(),
            failure: Box::new(oom()),
        };
        let errors = [
            anyhow::Error::new(oom()),
            anyhow::Error::new(oom()).context("training"),
            anyhow::Error::new(wrapped),
        ];
        for error in &errors {
            let document = error_document(error);
            assert_eq!(document["kind"], "out_of_memory", "{document}");
            assert_eq!(document["bytes"], 1 << 20, "{document}");
            assert_eq!(document["during"], "step 3 (agg[l0,p1,s0])", "{document}");
            assert_eq!(document["error"], error_chain(error), "{document}");
            // Said once.
            let said = error_chain(error);
            assert_eq!(said.matches("out of memory").count(), 1, "{said}");
        }
        // A measurement's is said with a measurement's advice alone.
        assert!(!error_chain(&errors[2]).contains("--hbm-budget"));
        let graph = fateplan::runtime::Error::OutOfMemory {
            bytes: 1 << 20,
            what: "step 3 (agg[l0,p1,s0])".into(),
        };
        let document = error_document(&anyhow::Error::new(graph).context("--graph g"));
        assert_eq!(document["kind"], "out_of_memory", "{document}");
        assert_eq!(document["during"], "step 3 (agg[l0,p1,s0])", "{document}");
        // A graph, or planning, refused before it starts.
        let refusal = fateplan::runtime::memory::OverMemory {
            message: "planning workload \"w\" takes at least 2 GiB".into(),
            needed_bytes: 2 << 30,
            available_bytes: 1 << 30,
        };
        let graph = fateplan::runtime::Error::TooLarge {
            path: "rmat:scale=30".into(),
            field: "size".into(),
            refusal: refusal.clone(),
        };
        // The MILP's solver failing is neither bad input nor no plan.
        let solver = PlanError::SolverFailed {
            solver: "microlp".into(),
            message: "Singular matrix".into(),
        };
        let document = error_document(&anyhow::Error::new(solver).context("planning"));
        assert_eq!(document["kind"], "solver_failed", "{document}");
        assert!(document["fits"].is_null(), "{document}");
        let said = document["error"].as_str().unwrap();
        assert!(
            said.contains("Singular matrix") && !said.contains("invalid input"),
            "{said}"
        );
        for error in [
            anyhow::Error::new(refusal),
            anyhow::Error::new(graph).context("--graph"),
        ] {
            let document = error_document(&error);
            assert_eq!(document["kind"], "over_memory", "{document}");
            assert_eq!(document["needed_bytes"], 2u64 << 30, "{document}");
            assert_eq!(document["available_bytes"], 1u64 << 30, "{document}");
        }
        let unplaced = error_document(&ExecError::out_of_memory(8).into());
        assert!(unplaced["during"].is_null(), "{unplaced}");
        let other = error_document(&anyhow::anyhow!("a file"));
        assert_eq!(
            other,
            serde_json::json!({"kind": "failed", "error": "a file"})
        );
    }

    #[test]
    fn host_or_ssd_below_the_profile_s_is_said() {
        let profile = fateplan::profiles::builtin("a100-80g").unwrap();
        let mut options = PlanOptions::new(Policy::Dp, &profile);
        assert!(!below_capacity(&options, &profile));
        options.budgets.ssd_bytes -= 1;
        assert!(below_capacity(&options, &profile));
        options = PlanOptions::new(Policy::Dp, &profile);
        options.budgets.host_bytes = 1 << 30;
        assert!(below_capacity(&options, &profile));
        // A larger device budget is not a reason.
        options = PlanOptions::new(Policy::Dp, &profile);
        options.budgets.hbm_bytes = 1 << 20;
        assert!(!below_capacity(&options, &profile));
    }

    #[test]
    fn compare_s_json_notes_are_each_led_by_their_label() {
        let note = "26 tensors, 17 operators; 300 nodes\npartitions 1 (auto: the fewest)\n\
                    percent   --hbm-budget 40% is 46.0 KiB   ";
        assert_eq!(
            json_notes(note),
            [
                "workload 26 tensors, 17 operators; 300 nodes",
                "partitions 1 (auto: the fewest)",
                "percent --hbm-budget 40% is 46.0 KiB",
            ]
        );
    }

    /// A GAT, whose tensors kept for the backward pass have most of its
    /// planning's memory in their choices, is refused where its count
    /// of items fits but its counted choices do not; with room, it is
    /// not; with less room than its items take, it is refused on them.
    #[test]
    fn a_workload_is_refused_on_its_choices_where_its_items_fit() {
        use fateplan::planner::blocks::BlockCounts;
        use fateplan::planner::gnn::{GnnModel, GnnSpec};
        use fateplan::runtime::memory::Available;
        let spec = GnnSpec::new(GnnModel::Gat, 8, 4, "tiny");
        let workload = build_gnn(&spec, &BlockCounts::skewed(1000, 8000, 4).unwrap()).unwrap();
        let profile = fateplan::profiles::builtin("a100-80g").unwrap();
        let options = PlanOptions::new(Policy::Dp, &profile);
        let room = |bytes| Available {
            bytes,
            source: "a test's".to_string(),
        };
        let refused = |bytes, at_once| {
            planning_refusal(&workload, &profile, &options, at_once, Some(&room(bytes)))
                .map(|short| short.text)
        };
        let items = workload.least_planning_bytes();
        let (counted, choices) =
            fateplan::planner::planner::least_planning_bytes_counted(&workload, &profile, &options);
        assert!(counted > items && choices > 0, "{counted} {items}");
        let short = planning_refusal(&workload, &profile, &options, 1, Some(&room(items)));
        let short = short.unwrap();
        // The figure said is the one counted, beside the room.
        assert_eq!(
            (short.needed_bytes, short.available_bytes),
            (counted, items)
        );
        let said = short.text;
        assert!(
            said.contains("operators, whose choices hold") && said.ends_with("(a test's)"),
            "{said}"
        );
        assert_eq!(refused(counted, 1), None);
        // Two at once take twice.
        assert!(refused(counted, 2)
            .unwrap()
            .contains(", 2 such plans made at once)"));
        // Refused on its items too, it says the figure it is counted at:
        // not a second refusal at a larger limit. With no room to count,
        // its items alone.
        let counted_said = |said: &str| said.split(" in memory").next().unwrap().to_string();
        let said = refused(items - 1, 1).unwrap();
        assert!(said.contains("whose choices hold"), "{said}");
        assert_eq!(
            counted_said(&said),
            counted_said(&refused(items, 1).unwrap())
        );
        let n = (workload.tensors.len() + workload.ops.len()) as u64;
        let said = refused(n * COUNTING_BYTES_PER_ITEM - 1, 1).unwrap();
        assert!(!said.contains("choices"), "{said}");
        assert_eq!(
            planning_refusal(&workload, &profile, &options, 1, None),
            None
        );
        // dp with fewer fates plans beside the peers, which have them all:
        // both are counted. The MILP has its own alone.
        let fewer = PlanOptions {
            fates: FateSet::parse("retain,recompute").unwrap(),
            ..options.clone()
        };
        let (_, both) =
            fateplan::planner::planner::least_planning_bytes_counted(&workload, &profile, &fewer);
        let milp = PlanOptions {
            policy: Policy::Milp,
            ..fewer.clone()
        };
        let (_, own) =
            fateplan::planner::planner::least_planning_bytes_counted(&workload, &profile, &milp);
        assert!(
            both > choices && own < choices && own > 0,
            "{both} {choices} {own}"
        );
    }

    /// A workload no larger than one admitted before is admitted; a
    /// larger one is checked.
    #[test]
    fn a_workload_no_larger_than_one_admitted_is_not_checked_again() {
        admit(5 << 20);
        assert!(admitted(5 << 20) && admitted(1));
        assert!(!admitted(u64::MAX));
    }

    /// A peak over its budget never reads as within it, however little
    /// over; far over, as a multiple; with no budget, `over` or `-`.
    #[test]
    fn tier_use_never_hides_an_overrun() {
        let mib = 1u64 << 20;
        assert_eq!(tier_use(mib / 2, mib), "50.0%");
        assert_eq!(tier_use(0, mib), "0.0%");
        assert_eq!(tier_use(1, mib), "<0.1%");
        assert_eq!(tier_use(mib, mib), "100.0%");
        assert_eq!(tier_use(200 * mib + 4096, 200 * mib), ">100%");
        assert_eq!(tier_use(3 * mib, 2 * mib), "150.0%");
        assert_eq!(tier_use(2 * mib - 1024, mib), "199.9%");
        assert_eq!(tier_use(2 * mib, mib), "2.0x");
        assert_eq!(tier_use(7394 * mib / 1000, mib), "7.4x");
        assert_eq!(tier_use(9 * mib, mib), "9.0x");
        assert_eq!(tier_use(10 * mib - 1, mib), "10x");
        assert_eq!(tier_use(10 * mib, mib), "10x");
        assert_eq!(tier_use(37 * mib, mib), "37x");
        assert_eq!(tier_use(999 * mib, mib), "999x");
        assert_eq!(tier_use(1000 * mib, mib), ">999x");
        assert_eq!(tier_use(5, 0), "over");
        assert_eq!(tier_use(0, 0), "-");
    }

    /// The time a bar shows is whole seconds, and minutes and seconds
    /// past a minute (90 s is `1m 30s`, not indicatif's `2m`).
    #[test]
    fn a_bar_s_time_is_not_rounded_to_minutes() {
        let at = |s: u64| took(std::time::Duration::from_millis(s * 1000 + 999));
        assert_eq!(at(0), "0s");
        assert_eq!(at(59), "59s");
        assert_eq!(at(89), "1m 29s");
        assert_eq!(at(90), "1m 30s");
        assert_eq!(at(3599), "59m 59s");
        assert_eq!(at(3600 + 65), "1h 01m 05s");
    }

    /// A bare number is told what it could be: a share and gibibytes up
    /// to 100, mebibytes or gibibytes up to 4096, else kibibytes; a
    /// number with a unit, or of a mebibyte or more, is not told.
    #[test]
    fn a_bare_budget_is_told_what_it_could_be() {
        let note = |text: &str, bytes| bare_budget_note("hbm-budget", text, bytes, true);
        let said = note("25", 25).unwrap();
        assert!(
            said.contains("written 25%, a size in gibibytes 25GiB"),
            "{said}"
        );
        let said = note("200", 200).unwrap();
        assert!(
            said.ends_with("written 200MiB, in gibibytes 200GiB"),
            "{said}"
        );
        assert!(!said.contains('%'), "{said}");
        let said = note("1048575", 1048575).unwrap();
        assert!(
            said.ends_with("in kibibytes is written 1048575KiB"),
            "{said}"
        );
        assert!(!said.contains("GiB"), "{said}");
        assert_eq!(note("1048576", 1 << 20), None);
        assert_eq!(note("200B", 200), None);
        let said = note("2e2", 200).unwrap();
        assert!(said.ends_with("(a size without a unit is bytes)"), "{said}");
        // Where the flag takes no share (`simulate`), none is offered.
        let said = bare_budget_note("hbm-budget", "25", 25, false).unwrap();
        assert!(
            said.ends_with("written 25MiB, in gibibytes 25GiB"),
            "{said}"
        );
    }

    /// `train --threads`' help says the cap `set_threads` holds it to.
    #[test]
    fn the_threads_help_names_its_cap() {
        use clap::CommandFactory;
        let command = Cli::command();
        let help = |sub: &str| {
            let sub = command.find_subcommand(sub).unwrap();
            let arg = sub
                .get_arguments()
                .find(|a| a.get_id() == "threads")
                .unwrap();
            arg.get_help().unwrap().to_string()
        };
        let train = help("train");
        assert!(
            train.contains(&format!("at most {MAX_THREADS_PER_CORE} a core")),
            "{train}"
        );
        assert!(help("profile").contains("at most: every core"));
    }

    /// A 32-bit number flag keeps what was meant or says why it cannot:
    /// never infinity from a finite value, never 0 from a nonzero one.
    #[test]
    fn a_32_bit_number_flag_refuses_what_rounding_would_change() {
        assert_eq!(real_f32("0.5"), Ok(0.5));
        assert_eq!(real_f32(" 5e-4 "), Ok(5e-4));
        assert_eq!(real_f32("0"), Ok(0.0));
        assert_eq!(real_f32("-0.1"), Ok(-0.1));
        assert_eq!(real_f32("1e-40"), Ok(1e-40));
        // Not finite as given: the flag's own check says what it takes.
        assert!(real_f32("inf").unwrap().is_infinite());
        assert!(real_f32("NaN").unwrap().is_nan());
        // Rounded once, as clap's own parser rounds: just above the
        // midpoint of 1 and the next 32-bit float, which a 64-bit reading
        // would round to the midpoint itself, and then to 1 (even).
        let above_midpoint = "1.00000005960464477539062500001";
        assert_eq!(real_f32(above_midpoint), Ok(f32::from_bits(0x3f80_0001)));
        for text in ["1e39", " -1e39"] {
            let large = real_f32(text).unwrap_err();
            assert!(
                large.starts_with(&format!("{} is too large in magnitude", text.trim())),
                "{large}"
            );
        }
        for text in ["1e-50", "-1e-50"] {
            let small = real_f32(text).unwrap_err();
            assert!(
                small.starts_with(&format!("{text} is too close to 0"))
                    && small.contains("would be 0"),
                "{small}"
            );
        }
        assert_eq!(real_f32("abc").unwrap_err(), "\"abc\" is not a number");
    }

    #[test]
    fn counts_are_whole_numbers_in_their_range_and_say_what_is_wrong() {
        assert_eq!(whole::<u32>("200"), Ok(200));
        assert_eq!(whole::<u64>(" 0 "), Ok(0));
        assert_eq!(whole::<u32>("4294967295"), Ok(u32::MAX));
        let wrong = |text: &str| whole::<u32>(text).unwrap_err();
        assert_eq!(
            wrong("-3"),
            "-3 is negative: expected a whole number, 0 or more"
        );
        assert_eq!(wrong("2.5"), "2.5 is not a whole number");
        assert_eq!(wrong("4294967296"), "4294967296 is larger than 4294967295");
        assert_eq!(
            wrong("1".repeat(50).as_str()),
            format!("{} is larger than 4294967295", "1".repeat(50))
        );
        assert_eq!(
            wrong("x"),
            "\"x\" is not a whole number (digits only, such as 200)"
        );
        assert!(wrong("").contains("not a whole number"));
        let layers = whole_in::<u32>(1..=64);
        assert_eq!(layers("64"), Ok(64));
        for outside in ["0", "65", "-1", "99999999999999999999999"] {
            assert_eq!(
                layers(outside).unwrap_err(),
                format!("{outside} is not in 1..=64")
            );
        }
        assert_eq!(layers("1.5").unwrap_err(), "1.5 is not a whole number");
        // A sign, and whole numbers written otherwise than in digits.
        assert_eq!(whole::<u32>("+5"), Ok(5));
        assert_eq!(wrong("5.0"), "5.0: write the count in digits, such as 5");
        assert_eq!(wrong("1e10"), "1e10 is larger than 4294967295");
        assert_eq!(
            wrong(&format!("+{}", "9".repeat(45))),
            format!("+{} is larger than 4294967295", "9".repeat(45))
        );
        // From 1 up: what is below says the least.
        let epochs = |text: &str| positive::<u32>(text).unwrap_err();
        assert_eq!(positive::<u32>("1"), Ok(1));
        assert_eq!(
            epochs("0"),
            "0 is less than 1: expected a whole number, 1 or more"
        );
        assert_eq!(
            epochs("-0"),
            "-0 is less than 1: expected a whole number, 1 or more"
        );
        assert_eq!(
            epochs("-3"),
            "-3 is negative: expected a whole number, 1 or more"
        );
        assert_eq!(epochs("4294967296"), "4294967296 is larger than 4294967295");
    }

    /// A fitting row predicted at `iteration_s`, with `milp`.
    fn fits(policy: Policy, iteration_s: f64, milp: Option<MilpSearch>) -> PolicyRow {
        PolicyRow {
            policy,
            outcome: Outcome::Fits {
                predicted: Box::new(Predicted {
                    iteration_s,
                    compute_s: iteration_s,
                    recompute_s: 0.0,
                    exposed_transfer_s: 0.0,
                    peak_bytes: Default::default(),
                    peak_step: Default::default(),
                    bytes_moved: Default::default(),
                }),
                simulated: None,
                milp,
            },
        }
    }

    fn table(milp: MilpSearch) -> String {
        let c = Comparison {
            workload: "w".into(),
            partitions: None,
            note: String::new(),
            profile: "p".into(),
            budgets: Budgets::UNLIMITED,
            rows: vec![
                fits(Policy::Dp, 0.1, None),
                fits(Policy::Milp, 0.12, Some(milp)),
            ],
        };
        let mut out = Vec::new();
        write_comparison(&mut out, &c, false).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn compare_marks_a_milp_plan_its_time_limit_cut_short() {
        let unproven = MilpSearch {
            proven_optimal: false,
            time_limit_s: 5.0,
            rounds: 1,
        };
        let text = table(unproven);
        let line = text.lines().find(|l| l.starts_with("milp ")).unwrap();
        assert!(line.ends_with("~ not proven optimal"), "{text}");
        assert!(
            text.contains("~ milp: the MILP's time limit of 5 s ran out first"),
            "{text}"
        );
        let row = fits(Policy::Milp, 0.12, Some(unproven)).to_json();
        assert_eq!(row["proven_optimal"], false);
        assert_eq!(row["milp_time_limit_s"], 5.0);
        // A proven plan is not marked; other policies have no such fields.
        let proven = MilpSearch {
            proven_optimal: true,
            ..unproven
        };
        let text = table(proven);
        assert!(!text.contains('~'), "{text}");
        assert_eq!(
            fits(Policy::Milp, 0.12, Some(proven)).to_json()["proven_optimal"],
            true
        );
        assert!(fits(Policy::Dp, 0.1, None)
            .to_json()
            .get("proven_optimal")
            .is_none());
    }

    #[test]
    fn the_library_s_default_model_is_the_command_line_s() {
        for model in ["gcn", "gat"] {
            let argv = ["plan", "--dataset", "ogbn-arxiv", "--model", model];
            let args = PlanArgsOnly::try_parse_from(argv).unwrap().args;
            let Source::Gnn(given) = workload_source(&args).unwrap().source else {
                panic!("a dataset is a GNN's workload");
            };
            let model = GnnModel::parse(model).unwrap();
            assert_eq!(given.spec, GnnSpec::new(model, 128, 40, "ogbn-arxiv"));
        }
    }
}
