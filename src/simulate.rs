//! `fateplan simulate`: replays a plan on the discrete-event simulator.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use fateplan::planner::plan::Budgets;
use fateplan::planner::units::{bytes_exact, count, format_bytes, format_seconds};
use fateplan::planner::{Plan, Profile, Tier};
use fateplan::runtime::sim::{self, PerStream, SimOptions, SimReport};

#[derive(Args)]
pub struct SimulateArgs {
    /// The plan JSON (`fateplan plan -o PLAN.json`).
    plan: PathBuf,
    /// Replay on this profile instead of the one planned for: a built-in
    /// name or a profile JSON file. Budgets become the smaller of the
    /// plan's and this profile's capacities.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    profile: Option<String>,
    /// Write the timeline in Chrome trace-event format (Perfetto, chrome://tracing).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write a picture of memory per tier over time, with the budgets.
    #[arg(long)]
    memory_svg: Option<PathBuf>,
    /// Seed of the duration jitter (±5%); 0 means none.
    #[arg(long, default_value_t = 0, value_parser = crate::cli::whole::<u64>)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Replay under this device budget per GPU instead of the plan's, in
    /// bytes (e.g. 40GiB): would the plan hold on a smaller device? At
    /// most the profile's capacity; where the plan breaks it, the report
    /// lists the violations (exit 3). A share (25%) is refused: its bytes
    /// depend on how the plan was sized, which `plan --hbm-budget 25%`
    /// prints.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::bytes_budget_value("hbm-budget"))]
    hbm_budget: Option<String>,
    /// Host memory budget per GPU to replay under instead of the plan's,
    /// in bytes (0: no host tier).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::bytes_budget_value("host-budget"))]
    host_budget: Option<String>,
    /// SSD budget per GPU to replay under instead of the plan's, in bytes
    /// (0: no SSD tier).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::cli::bytes_budget_value("ssd-budget"))]
    ssd_budget: Option<String>,
}

impl SimulateArgs {
    /// Whether the report is printed as JSON (`--json`): an error is
    /// too.
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

/// `simulate --json`'s document: the report's fields, then what the
/// text says beside them, each only where it applies.
#[derive(serde::Serialize)]
struct Annotated<'a> {
    #[serde(flatten)]
    report: &'a SimReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    priced_by_field: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priced_at_curve_top: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rejected_by_sanity_pass: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile_differs_from_planned: Option<bool>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    predictions_recomputed: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    planned_budgets: Option<Budgets>,
}

/// The simulation ran and found violations; the report has been printed.
/// The command exits with status 3.
#[derive(Debug)]
pub struct ViolationsFound(pub u64);

impl std::fmt::Display for ViolationsFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => write!(
                f,
                "the planner's own check rejected the plan (in the report); the simulation \
                 found no violation"
            ),
            n => write!(
                f,
                "the simulation found {} of the plan (listed in the report)",
                count(n, "violation")
            ),
        }
    }
}

impl std::error::Error for ViolationsFound {}

pub fn run(args: &SimulateArgs, load_profile: fn(&str) -> Result<Profile>) -> Result<()> {
    let source = args.plan.display().to_string();
    let text = fateplan::read_text(&args.plan)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading {source}"))?;
    // A plan that breaks its own budgets, or reads a tensor that is not
    // on the device, is replayed rather than refused: the report says
    // where, when and by how much, and the exit status is 3.
    let read = Plan::read(&text, &source)?;
    drop(text);
    let (mut plan, rejected, recomputed) = (read.plan, read.rejected, read.recomputed);
    if args.profile.is_none() {
        crate::cli::warn_unsteady_plan(&source, &plan);
    }
    let profile = match &args.profile {
        Some(name) => load_profile(name)?,
        None => plan.profile.clone(),
    };
    // Budgets given replace the plan's for the replay; the plan's are
    // said beside them.
    let planned_budgets = plan.budgets;
    plan.budgets = replay_budgets(args, &plan, &profile)?;
    let budgets_given =
        args.hbm_budget.is_some() || args.host_budget.is_some() || args.ssd_budget.is_some();
    let options = SimOptions { seed: args.seed };
    crate::cli::distinct_outputs(&[
        ("--trace", args.trace.as_deref()),
        ("--memory-svg", args.memory_svg.as_deref()),
    ])?;
    crate::cli::spare_inputs(
        &[
            ("--trace", args.trace.as_deref()),
            ("--memory-svg", args.memory_svg.as_deref()),
        ],
        &[
            ("PLAN", Some(args.plan.as_path())),
            (
                "--profile",
                args.profile.as_deref().and_then(crate::cli::existing),
            ),
        ],
    )?;
    // A folder that is missing, or a path that is one, is refused before
    // the replay, as `train` refuses it.
    let stage = |path: &Option<std::path::PathBuf>, flag| {
        path.as_deref()
            .map(|path| crate::cli::Staged::create(path, flag))
            .transpose()
    };
    let (trace_out, svg_out) = (
        stage(&args.trace, "--trace")?,
        stage(&args.memory_svg, "--memory-svg")?,
    );
    let record = args.trace.is_some() || args.memory_svg.is_some();
    let start = Instant::now();
    let (report, recording) = if record {
        let (report, recording) = sim::simulate_recorded(&plan, &profile, &options)?;
        (report, Some(recording))
    } else {
        (sim::simulate(&plan, &profile, &options)?, None)
    };
    let wall_s = start.elapsed().as_secs_f64();
    // Budgets given, or a profile given that holds less than the plan's
    // (the replay is held to its capacity): said beside the plan's.
    let budgets_differ = budgets_given || report.budgets != planned_budgets;
    // Files that cannot be written fail the run after its report, which
    // lists those written.
    let mut written = Vec::new();
    let mut unwritten = None;
    if let Some(recording) = &recording {
        if let (Some(out), Some(path)) = (trace_out, &args.trace) {
            match out.write_with(|out| sim::trace::write_trace(out, &plan, &report, recording)) {
                Ok(()) => written.push(("trace", path)),
                Err(error) => unwritten = Some(error),
            }
        }
        if let (Some(out), Some(path)) = (svg_out, &args.memory_svg) {
            match out.write(sim::svg::memory_svg(&report, recording).as_bytes()) {
                Ok(()) => written.push(("memory", path)),
                Err(error) => {
                    unwritten.get_or_insert(error);
                }
            }
        }
    }
    // The report, then the outcome: a budget broken is exit status 3
    // even where the report could not be written.
    let printed = (|| -> Result<()> {
        let mut out = crate::cli::stdout();
        // A profile given under the plan's profile's name with other figures
        // (an edited copy): the header's names alone would not tell them apart.
        let renamed_what_if = args.profile.is_some()
            && profile.name == plan.profile.name
            && !profile.same_figures(&plan.profile);
        // A plan saved before its operators counted their edge heads and
        // rows, replayed on a profile with times for them.
        let by_field = profile
            .device
            .priced_by_field(&plan.workload.definition.ops);
        // One saved before its gathers recorded their working set, replayed
        // on a profile that prices gathers by it.
        let at_top = profile
            .device
            .priced_at_curve_top(&plan.workload.definition.ops);
        if args.json {
            // Said in the JSON as in the text, after the report's own
            // fields and in their order: the first operator priced by its
            // class's field, and the plan's own check.
            let annotated = Annotated {
                report: &report,
                priced_by_field: by_field.map(|op| op.name.as_str()),
                priced_at_curve_top: at_top.map(|op| op.name.as_str()),
                rejected_by_sanity_pass: rejected.as_ref().map(ToString::to_string),
                profile_differs_from_planned: renamed_what_if.then_some(true),
                predictions_recomputed: &recomputed,
                planned_budgets: budgets_differ.then_some(planned_budgets),
            };
            out.write_all(serde_json::to_string_pretty(&annotated)?.as_bytes())?;
            out.write_all(b"\n")?;
        } else {
            // Budgets other than the plan's, said before the figures they
            // change.
            let under = budgets_differ
                .then(|| budgets_against(args, &report.budgets, &planned_budgets, &profile.name));
            write_table(&mut out, &report, wall_s, renamed_what_if, under.as_deref())?;
            // A profile named as a shipped one, with other figures (a plan
            // edited, or made with a profile file of that name): the report's
            // figures are the plan's own.
            let replayed = args.profile.is_none().then_some(&plan.profile);
            if let Some(profile) = replayed {
                if fateplan::profiles::builtin(&profile.name)
                    .is_some_and(|shipped| shipped != *profile)
                {
                    writeln!(
                        out,
                        "note      the plan's profile {:?} is not the one shipped with fateplan under \
                         that name: replayed on the plan's figures (--profile {} replays on the \
                         shipped one)",
                        profile.name, profile.name
                    )?;
                }
            }
            if let Some(note) = crate::cli::recomputed_note(&recomputed) {
                writeln!(out, "note      {note}")?;
            }
            if renamed_what_if {
                writeln!(
                    out,
                    "note      --profile gives a profile named {:?}, as the plan's is, with other \
                     figures: the replay is on its figures, the prediction on the plan's",
                    profile.name
                )?;
            }
            if let Some(op) = by_field {
                writeln!(
                    out,
                    "note      operator {} records no edge heads or rows (the plan is from a build \
                     before they were counted), and profile {:?} has a time for them: its class is \
                     priced by the profile's field, not its fit; `fateplan plan` again prices it by \
                     the fit",
                    op.name, profile.name
                )?;
            }
            if let Some(op) = at_top {
                writeln!(
                    out,
                    "note      operator {} records no working set (the plan is from a build \
                     before its gathers recorded one), and profile {:?} prices a gather by its \
                     working set: it is priced as a gather of the profile's largest, slower than \
                     one whose rows stay in the caches; `fateplan plan` again prices it by its own",
                    op.name, profile.name
                )?;
            }
            if let Some(rejected) = &rejected {
                writeln!(
                    out,
                    "rejected  by the planner's own check (the sanity pass), which `plan` and \
                     `train --plan` apply: {rejected}"
                )?;
            }
            for (flag, path) in written {
                writeln!(out, "{flag:<10}{}", path.display())?;
            }
        }
        out.flush()?;
        Ok(())
    })();
    // The replay and the sanity pass model the same promises; where only
    // the pass finds one broken, the plan is still marked.
    let outcome = match report.violations_total > 0 || rejected.is_some() {
        true => Err(ViolationsFound(report.violations_total).into()),
        false => Ok(()),
    };
    // A file that could not be written is the failure (exit status 1),
    // as before the report's own outcome.
    match unwritten {
        Some(error) => crate::cli::reported(printed, Err(error)),
        None => crate::cli::reported(printed, outcome),
    }
}

/// The budgets to replay `plan` under: the plan's, with each one
/// `args` gives in its place, in bytes, none over `profile`'s capacity
/// (host and SSD: one GPU's share of them).
fn replay_budgets(args: &SimulateArgs, plan: &Plan, profile: &Profile) -> Result<Budgets> {
    let flags = [
        ("hbm-budget", &args.hbm_budget),
        ("host-budget", &args.host_budget),
        ("ssd-budget", &args.ssd_budget),
    ];
    crate::cli::warn_bare_budgets(flags, false);
    let mut budgets = plan.budgets;
    let share = profile.share(plan.gpus);
    let capacities = [
        profile.device.hbm_bytes,
        share.host.memory_bytes,
        share.ssd.capacity_bytes,
    ];
    let capacity = crate::cli::Capacity {
        profile: &profile.name,
        gpus: plan.gpus,
        replay: true,
    };
    let slots = [
        &mut budgets.hbm_bytes,
        &mut budgets.host_bytes,
        &mut budgets.ssd_bytes,
    ];
    for (k, ((name, given), slot)) in flags.into_iter().zip(slots).enumerate() {
        // (A share was refused as the flag was read: `bytes_budget_value`.)
        let Some(text) = given else { continue };
        *slot = crate::cli::within_capacity(
            (name, text),
            crate::cli::budget(given, name, 0)?,
            (capacities[k], k > 0),
            &capacity,
        )?;
    }
    Ok(budgets)
}

/// Each budget the replay was held to where `args` gave it or
/// `profile`'s capacity lowered it, beside the plan's: `hbm 100 MiB (the
/// plan's: 200 MiB)`, bytes exact where the two read alike, `(the plan's
/// own)` where they are the same.
fn budgets_against(
    args: &SimulateArgs,
    replayed: &Budgets,
    planned: &Budgets,
    profile: &str,
) -> String {
    let tiers = [
        (
            "hbm",
            &args.hbm_budget,
            replayed.hbm_bytes,
            planned.hbm_bytes,
        ),
        (
            "host",
            &args.host_budget,
            replayed.host_bytes,
            planned.host_bytes,
        ),
        (
            "ssd",
            &args.ssd_budget,
            replayed.ssd_bytes,
            planned.ssd_bytes,
        ),
    ];
    let mut said = Vec::new();
    for (tier, flag, replayed, planned) in tiers {
        if flag.is_none() && replayed == planned {
            continue;
        }
        let why = match flag {
            Some(_) => String::new(),
            None => format!("; profile {profile:?}'s capacity"),
        };
        said.push(
            match (
                replayed == planned,
                format_bytes(replayed) == format_bytes(planned),
            ) {
                (true, _) => format!("{tier} {} (the plan's own)", format_bytes(replayed)),
                (false, true) => format!(
                    "{tier} {} (the plan's: {}{why})",
                    bytes_exact(replayed),
                    bytes_exact(planned)
                ),
                (false, false) => format!(
                    "{tier} {} (the plan's: {}{why})",
                    format_bytes(replayed),
                    format_bytes(planned)
                ),
            },
        );
    }
    said.join(", ")
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// The report as a table. `what_if`: replayed on a `--profile` of the
/// plan's profile's name with other figures, which the names alone would
/// not tell apart; `under`: the budgets replayed under, where budget
/// flags were given or a `--profile` lowered one.
fn write_table(
    out: &mut dyn Write,
    r: &SimReport,
    wall_s: f64,
    what_if: bool,
    under: Option<&str>,
) -> Result<()> {
    let replayed = if r.profile != r.planned_profile {
        format!("{} (planned for {})", r.profile, r.planned_profile)
    } else if what_if {
        format!(
            "{} (--profile: other figures than the plan's of that name)",
            r.profile
        )
    } else {
        r.profile.clone()
    };
    writeln!(
        out,
        "simulate  {} on {replayed}, policy {}, seed {}{}",
        r.workload,
        r.policy,
        r.seed,
        if r.seed == 0 {
            " (no jitter)".to_string()
        } else {
            format!(" (jitter ±{:.0}%)", r.jitter * 100.0)
        }
    )?;
    if let Some(under) = under {
        writeln!(out, "what-if   replayed under {under}")?;
    }
    writeln!(
        out,
        "events    {} in {} ({:.2} M events/s)",
        r.events,
        format_seconds(wall_s),
        r.events as f64 / wall_s.max(1e-9) / 1e6
    )?;
    let difference = r.difference_percent();
    writeln!(
        out,
        "iteration {} simulated, {} predicted by the planner{} ({:+.2}%)",
        format_seconds(r.iteration_s),
        format_seconds(r.predicted_iteration_s),
        if r.profile != r.planned_profile {
            format!(" for {}", r.planned_profile)
        } else if what_if {
            " on the plan's figures".to_string()
        } else {
            String::new()
        },
        // No "-0.00%" for a difference that is rounding noise.
        if difference.abs() < 0.005 {
            0.0
        } else {
            difference
        }
    )?;
    writeln!(
        out,
        "compute   {}, recompute {}, exposed transfers {} ({:.1}% of the iteration)",
        format_seconds(r.compute_s),
        format_seconds(r.recompute_s),
        format_seconds(r.exposed_transfer_s),
        percent(r.exposed_transfer_s, r.iteration_s)
    )?;
    let e: &PerStream<f64> = &r.exposed_by_stream_s;
    writeln!(
        out,
        "exposed   h2d {}, d2h {}, ssd read {}, ssd write {}, exchange {}",
        format_seconds(e.h2d),
        format_seconds(e.d2h),
        format_seconds(e.ssd_read),
        format_seconds(e.ssd_write),
        format_seconds(e.exchange)
    )?;
    // Two measures of a link: the time anything moved on it, and how much
    // of its bandwidth (for the SSD, of the device's time) was used over
    // the iteration. Host memory is busy for long at a small share.
    writeln!(
        out,
        "link      {:>12}  {:>12}  {:>6}  (busy: time with a transfer on it; use: of its capacity over the iteration)",
        "bytes", "busy", "use"
    )?;
    let l = &r.links;
    for (name, link) in [
        ("pcie h2d", &l.pcie_h2d),
        ("pcie d2h", &l.pcie_d2h),
        ("ssd", &l.ssd),
        ("host mem", &l.host_memory),
        ("peer", &l.peer),
        ("network", &l.network),
    ] {
        writeln!(
            out,
            "{name:<9} {:>12}  {:>12}  {:>5.1}%",
            format_bytes(link.bytes),
            format_seconds(link.busy_s),
            100.0 * link.utilisation
        )?;
    }
    writeln!(
        out,
        "tier      {:>12}  {:>12}  {:>6}  peak at",
        "peak", "budget", "use"
    )?;
    for tier in [Tier::Hbm, Tier::Host, Tier::Ssd] {
        let (peak, budget) = (r.peak_bytes.get(tier), r.budgets.of(tier));
        writeln!(
            out,
            "{:<9} {:>12}  {:>12}  {:>6}  {}",
            tier.name(),
            format_bytes(peak),
            format_bytes(budget),
            crate::cli::tier_use(peak, budget),
            // A tier the plan never uses has no peak to place (as `plan`
            // says it).
            match peak {
                0 => "unused".to_string(),
                _ => format_seconds(*r.peak_time_s.get_ref(tier)),
            }
        )?;
    }
    if r.violations_total == 0 {
        writeln!(out, "violations none")?;
    } else {
        writeln!(out, "violations {}", r.violations_total)?;
        for violation in r.violations.iter().take(10) {
            writeln!(out, "  {violation}")?;
        }
        if r.violations_total > 10 {
            writeln!(out, "  ... {} more", r.violations_total - 10)?;
        }
    }
    Ok(())
}
