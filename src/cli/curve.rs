//! `fateplan curve`: one workload planned at each of several device
//! budgets, the predicted iteration against the budget. A plan that fits a
//! budget fits every larger one, so each row is the fastest plan of its
//! budget and the smaller ones: the curve never rises as the budget grows,
//! and a row says where a smaller budget's plan was the faster.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Args;
use fateplan::planner::units::{count, format_bytes, format_seconds};
use fateplan::planner::{Error as PlanError, Plan, PlanOptions, Policy, Tier};

use super::{
    budget_percent, load_profile, planned, prepare, retain_all_peak, share_of, NothingFits,
    PlanArgs, Planned, RETAIN_ALL_PEAK,
};
use fateplan::runtime::sim::{simulate, SimOptions};

/// The budgets planned when none are given: shares of the retain-all
/// plan's device peak.
const DEFAULT_BUDGETS: &str = "10%,15%,20%,25%,30%,40%,50%,75%,100%";

/// At most this many budgets in one curve.
const MAX_BUDGETS: usize = 64;

#[derive(Args)]
#[command(
    mut_arg("output", |a| a.hide(true)),
    mut_arg("explain", |a| a.hide(true)),
    mut_arg("hbm_budget", |a| a.hide(true)),
    mut_arg("json", |a| a.help("Print the curve as JSON instead of the table"))
)]
pub(crate) struct CurveArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// Device budgets, comma-separated, in any order: sizes (`256MiB`,
    /// `2GiB`, bytes) or shares (`25%`) of the retain-all plan's device
    /// peak as `plan --hbm-budget 25%` takes it, at --partitions N or,
    /// with `auto`, at the count the retain-all plan is sized to on the
    /// profile; where that peak is over the device's memory, shares of
    /// the memory. With `--partitions auto`, each budget sizes its own
    /// partitions [default: 10%,15%,20%,25%,30%,40%,50%,75%,100%]
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    budgets: Option<Vec<String>>,
    /// Replay the plans on the discrete-event simulator (seed 0, no
    /// jitter) and print beside each row its plan's simulated time and
    /// violations (JSON: `simulated_s`, `violations`).
    #[arg(long)]
    simulate: bool,
}

impl CurveArgs {
    /// Whether the report is printed as JSON (`--json`): an error is
    /// too.
    pub(crate) fn json(&self) -> bool {
        self.plan.json
    }
}

/// A plan replayed on the simulator.
#[derive(Debug, Clone, Copy)]
struct Simulated {
    iteration_s: f64,
    violations: u64,
}

/// What shares of `--budgets` are of (and `plan`'s with `--partitions
/// auto`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reference {
    pub(crate) bytes: u64,
    /// The retain-all plan's partitions, where it fits and has them.
    pub(crate) partitions: Option<u32>,
    /// Whether `bytes` is the retain-all plan's device peak; or, where
    /// that peak is over the device's memory, the memory.
    pub(crate) retain_all: bool,
    /// The GPUs the plans share the graph between (one GPU's share).
    pub(crate) gpus: u32,
}

impl Reference {
    /// What it is, in words: the retain-all plan's device peak and its
    /// count, or the memory of `profile`'s device.
    pub(crate) fn what(&self, profile: &str) -> String {
        match self.retain_all {
            true => {
                let (at, mut flag) = match self.partitions {
                    Some(p) => (
                        format!(" at {}", count(p.into(), "partition")),
                        format!("--partitions {p} "),
                    ),
                    None => (String::new(), String::new()),
                };
                if self.gpus > 1 {
                    flag = format!("--gpus {} {flag}", self.gpus);
                }
                format!("the retain-all plan's device peak{at} (`plan {flag}--hbm-budget 100%`)")
            }
            false => format!(
                "the device memory of profile {profile} (the retain-all plan's device peak is \
                 over it)"
            ),
        }
    }
}

/// One budget as given.
#[derive(Debug, Clone, Copy)]
enum Given {
    Bytes(u64),
    Percent(f64),
}

/// One row of the curve.
struct Row {
    /// The budget as given (`25%`, `256MiB`).
    label: String,
    bytes: u64,
    outcome: Outcome,
}

enum Outcome {
    Fits {
        /// This budget's own plan.
        own: Box<Plan>,
        /// The row of the smaller budget whose plan is faster, if one is.
        faster_from: Option<usize>,
        /// `own` on the simulator, with `--simulate`.
        simulated: Option<Simulated>,
    },
    /// This budget's own plan does not fit: the planner's message, its
    /// lines joined, and the row of the smaller budget whose plan is the
    /// fastest that fits, if one does (it fits this budget too).
    Infeasible {
        message: String,
        smaller: Option<usize>,
    },
}

fn parse_budgets(texts: &[String]) -> Result<Vec<(String, Given)>> {
    if texts.is_empty() || texts.len() > MAX_BUDGETS {
        bail!(
            "--budgets: {} budgets given; a curve needs 1 to {MAX_BUDGETS}",
            texts.len()
        );
    }
    let mut budgets = Vec::with_capacity(texts.len());
    for (k, text) in texts.iter().enumerate() {
        let text = text.trim();
        if text.is_empty() {
            bail!(
                "--budgets: entry {} of {} is empty; give sizes or shares, comma-separated",
                k + 1,
                texts.len()
            );
        }
        let given = match budget_percent(&Some(text.to_string()), "budgets")? {
            Some(percent) => Given::Percent(percent),
            None => {
                let bytes =
                    crate::cli::budget_bytes(text).with_context(|| format!("--budgets {text}"))?;
                if bytes == 0 {
                    bail!("--budgets {text}: a budget of 0 bytes holds nothing");
                }
                if let Some(note) = crate::cli::bare_budget_note("budgets", text, bytes, true) {
                    eprintln!("{note}");
                }
                Given::Bytes(bytes)
            }
        };
        budgets.push((text.to_string(), given));
    }
    Ok(budgets)
}

/// `args` with the device budget `hbm`.
fn at(args: &PlanArgs, hbm: String) -> PlanArgs {
    PlanArgs {
        hbm_budget: Some(hbm),
        ..args.clone()
    }
}

/// Where no plan fits (the planner's infeasible error, whatever context
/// it was given), the message, its lines joined (the partitions `auto`
/// tried, where it says).
fn infeasible(error: &anyhow::Error) -> Option<String> {
    let found = error.chain().any(|e| {
        matches!(
            e.downcast_ref::<PlanError>(),
            Some(PlanError::Infeasible { .. })
        )
    });
    found.then(|| error.to_string().lines().collect::<Vec<_>>().join("; "))
}

/// Whether no plan fits because of the device's memory.
fn device_infeasible(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        matches!(
            e.downcast_ref::<PlanError>(),
            Some(PlanError::Infeasible {
                tier: Tier::Hbm,
                ..
            })
        )
    })
}

/// What shares are of: the device peak of the retain-all plan of one GPU
/// with no budgets, as `plan --hbm-budget 25%` takes it (`retain_all_peak`;
/// under `--sweep auto`, by outputs), at `--partitions N` or, with `auto`,
/// at the count the retain-all plan is sized to on the profile; where that
/// peak is over the device's `capacity` (or no count fits retain-all), the
/// capacity.
pub(crate) fn reference(base: &PlanArgs, capacity: u64) -> Result<Reference> {
    let device = Reference {
        bytes: capacity,
        partitions: None,
        retain_all: false,
        gpus: base.gpus,
    };
    let base = &PlanArgs {
        sweep: match base.sweep.eq_ignore_ascii_case("auto") {
            true => "outputs".to_string(),
            false => base.sweep.clone(),
        },
        ..base.clone()
    };
    // The workload at the count, and the profile: with `auto`, those the
    // sized retain-all plan carries (the workload is not prepared again).
    let (workload, profile, partitions, like) =
        match base.partitions == "auto" && base.dag.is_none() {
            true => {
                let retain = PlanArgs {
                    policy: Policy::RetainAll.name().to_string(),
                    ..base.clone()
                };
                match planned(&retain) {
                    Ok(made) => {
                        let plan = made.plan;
                        let partitions = plan.workload.model.as_ref().map(|m| m.partitions);
                        // Its GPUs and exchanges, taken as they are.
                        let like = PlanOptions {
                            gpus: plan.gpus,
                            exchanges: plan.exchanges,
                            ..PlanOptions::new(Policy::RetainAll, &plan.profile)
                        };
                        (plan.workload.definition, plan.profile, partitions, like)
                    }
                    Err(error) if device_infeasible(&error) => return Ok(device),
                    Err(error) => return Err(error),
                }
            }
            false => {
                let prepared = prepare(base, None)?;
                let partitions = prepared.model.map(|m| m.partitions);
                (
                    prepared.workload,
                    prepared.profile,
                    partitions,
                    prepared.options,
                )
            }
        };
    let peak = retain_all_peak(&workload, &profile, &like)?;
    Ok(match peak <= capacity {
        true => Reference {
            bytes: peak,
            partitions,
            retain_all: true,
            gpus: base.gpus,
        },
        false => device,
    })
}

pub(crate) fn run(args: &CurveArgs) -> Result<()> {
    args.plan.warn();
    args.plan.check_policy_flags()?;
    if let Some(hbm) = &args.plan.hbm_budget {
        bail!("--hbm-budget {hbm}: `curve` plans at each of --budgets instead");
    }
    if args.plan.output.is_some() || args.plan.explain {
        bail!("-o and --explain are `plan`'s: plan one budget of the curve with `fateplan plan`");
    }
    let texts: Vec<String> = match &args.budgets {
        Some(texts) => texts.clone(),
        None => DEFAULT_BUDGETS.split(',').map(str::to_string).collect(),
    };
    let budgets = parse_budgets(&texts)?;
    let profile = load_profile(&args.plan.profile)?;
    let capacity = profile.device.hbm_bytes;
    let base = PlanArgs {
        hbm_budget: None,
        ..args.plan.clone()
    };
    let reference = match budgets.iter().any(|(_, g)| matches!(g, Given::Percent(_))) {
        true => Some(reference(&base, capacity)?),
        false => None,
    };
    let mut budgets: Vec<(String, u64)> = budgets
        .into_iter()
        .map(|(label, given)| {
            let bytes = match (given, reference) {
                (Given::Bytes(bytes), _) => bytes,
                (Given::Percent(percent), Some(of)) => {
                    let whose = match of.retain_all {
                        true => RETAIN_ALL_PEAK.to_string(),
                        false => format!("the device memory of profile {}", profile.name),
                    };
                    share_of(of.bytes, percent, (&format!("--budgets {label}"), &whose))?
                }
                (Given::Percent(_), None) => unreachable!("a share is of the reference"),
            };
            Ok((label, bytes))
        })
        .collect::<Result<_>>()?;
    budgets.sort_by_key(|&(_, bytes)| bytes);
    if let Some((label, bytes)) = budgets.iter().find(|(_, bytes)| *bytes > capacity) {
        bail!(
            "--budgets {label}: {} is more than profile {:?} has ({}); to plan for a larger \
             machine, give its profile",
            format_bytes(*bytes),
            profile.name,
            format_bytes(capacity)
        );
    }
    if let Some(twice) = budgets.windows(2).find(|w| w[0].1 == w[1].1) {
        bail!(
            "--budgets: {} and {} are both {} bytes",
            twice[0].0,
            twice[1].0,
            twice[0].1
        );
    }
    // Planning a large graph at a budget can take seconds: say which (on
    // a terminal only).
    let bar = indicatif::ProgressBar::new(budgets.len() as u64)
        .with_finish(indicatif::ProgressFinish::AndClear);
    bar.set_style(crate::cli::progress_style(
        "{bar:30} {pos}/{len} planning at {msg} {took}",
    ));
    let mut rows: Vec<Row> = Vec::with_capacity(budgets.len());
    let mut header = None;
    for (label, bytes) in &budgets {
        bar.set_message(label.clone());
        let row = match planned(&at(&args.plan, bytes.to_string())) {
            Ok(Planned { plan, note, .. }) => {
                header.get_or_insert_with(|| Header::of(&plan, note, &args.plan));
                let simulated = match args.simulate {
                    true => {
                        let report = simulate(&plan, &profile, &SimOptions { seed: 0 })
                            .with_context(|| format!("simulating the plan at {label}"))?;
                        Some(Simulated {
                            iteration_s: report.iteration_s,
                            violations: report.violations_total,
                        })
                    }
                    false => None,
                };
                Row {
                    label: label.clone(),
                    bytes: plan.budgets.hbm_bytes,
                    outcome: Outcome::Fits {
                        own: Box::new(plan),
                        faster_from: None,
                        simulated,
                    },
                }
            }
            Err(error) => match infeasible(&error) {
                Some(message) => Row {
                    label: label.clone(),
                    bytes: *bytes,
                    outcome: Outcome::Infeasible {
                        message,
                        smaller: None,
                    },
                },
                None => return Err(error),
            },
        };
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let any_fits = carry_fastest(&mut rows);
    // Where no budget fits, the workload as planned at the profile's
    // capacity names it.
    let header = match header {
        Some(header) => header,
        None => {
            let prepared = prepare(&base, None)?;
            // As where some budget fits: with `--partitions auto`, a
            // GNN's budgets each sized their own, and the name has no
            // count.
            let name = &prepared.workload.name;
            let count = name
                .rsplit_once("-p")
                .filter(|(_, p)| p.parse::<u32>().is_ok())
                .map(|(stem, _)| stem.to_string());
            let sized = args.plan.partitions == "auto" && args.plan.dag.is_none();
            Header {
                name: count.filter(|_| sized).unwrap_or_else(|| name.clone()),
                note: prepared.note,
                sized,
                profile: prepared.profile.name,
                policy: args.plan.policy.clone(),
            }
        }
    };
    let mut out = crate::cli::stdout();
    let written = match args.plan.json {
        true => serde_json::to_string_pretty(&json(&rows, reference, &header))
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(writeln!(out, "{text}")?)),
        false => table(&mut out, &rows, reference, &header),
    };
    let outcome = match any_fits {
        true => Ok(()),
        false => Err(NothingFits("no budget's plan fits (each row says why)").into()),
    };
    crate::cli::reported(written.and_then(|()| Ok(out.flush()?)), outcome)
}

/// In the order of the bytes, each row carries the fastest plan of the
/// budgets up to it, a row whose own plan does not fit too (a plan that
/// fits a budget fits every larger one, though a peer policy's own fates
/// at the larger one need not). Whether any plan fits.
fn carry_fastest(rows: &mut [Row]) -> bool {
    let mut best: Option<(usize, f64)> = None;
    for (i, row) in rows.iter_mut().enumerate() {
        match &mut row.outcome {
            Outcome::Fits {
                own, faster_from, ..
            } => {
                let mine = own.predicted.iteration_s;
                match best {
                    Some((j, seconds)) if seconds < mine => *faster_from = Some(j),
                    _ => best = Some((i, mine)),
                }
            }
            Outcome::Infeasible { smaller, .. } => *smaller = best.map(|(j, _)| j),
        }
    }
    best.is_some()
}

/// What the curve is of.
struct Header {
    /// The workload's name (with `--partitions auto`, without the count).
    name: String,
    /// Lines on the workload, from `fateplan plan`'s summary.
    note: String,
    /// Whether each budget sized its own partitions.
    sized: bool,
    profile: String,
    policy: String,
}

impl Header {
    fn of(plan: &Plan, note: String, args: &PlanArgs) -> Header {
        let partitions = plan.workload.model.as_ref().map(|m| m.partitions);
        let sized = args.partitions == "auto" && partitions.is_some();
        let name = &plan.workload.name;
        let name = match partitions.filter(|_| sized) {
            Some(p) => name.strip_suffix(&format!("-p{p}")).unwrap_or(name),
            None => name,
        };
        Header {
            name: name.to_string(),
            note,
            sized,
            profile: plan.profile.name.clone(),
            policy: plan.policy.clone(),
        }
    }
}

/// The row whose plan a row predicts with: its own, or the smaller
/// budget's whose plan is faster or, where its own does not fit, fits;
/// none where no plan fits.
fn taken(rows: &[Row], row: usize) -> Option<usize> {
    match &rows[row].outcome {
        Outcome::Fits { faster_from, .. } => Some(faster_from.unwrap_or(row)),
        Outcome::Infeasible { smaller, .. } => *smaller,
    }
}

/// A row's own plan, and its replay; none where no plan fits.
fn own(row: &Row) -> Option<(&Plan, Option<Simulated>)> {
    match &row.outcome {
        Outcome::Fits { own, simulated, .. } => Some((own, *simulated)),
        Outcome::Infeasible { .. } => None,
    }
}

fn partitions(plan: &Plan) -> String {
    plan.workload
        .model
        .as_ref()
        .map_or("-".to_string(), |m| m.partitions.to_string())
}

fn table(
    out: &mut dyn Write,
    rows: &[Row],
    reference: Option<Reference>,
    header: &Header,
) -> Result<()> {
    let sized = match header.sized {
        true => "; the partitions sized per budget",
        false => "",
    };
    writeln!(
        out,
        "curve     {} on {}, policy {}{sized}",
        header.name, header.profile, header.policy
    )?;
    // With the partitions sized per budget, the tensors and operators
    // are each row's own: the graph alone is said.
    match header.note.lines().next() {
        Some(line) if !header.sized => writeln!(out, "workload  {line}")?,
        Some(line) => {
            if let Some((_, graph)) = line.split_once("; ") {
                writeln!(
                    out,
                    "workload  {graph}; tensors and operators as each budget's partitions make them"
                )?;
            }
        }
        None => {}
    }
    if let Some(of) = reference {
        let what = of.what(&header.profile);
        writeln!(out, "shares    of {}, {what}", format_bytes(of.bytes))?;
    }
    let fastest = (0..rows.len())
        .filter_map(|i| taken(rows, i))
        .filter_map(|j| own(&rows[j]))
        .map(|(plan, _)| plan.predicted.iteration_s)
        .fold(f64::INFINITY, f64::min);
    let simulated_header = match args_simulate(rows) {
        true => format!(" {:>12} {:>10}", "simulated", "violations"),
        false => String::new(),
    };
    writeln!(
        out,
        "{:<10} {:>11} {:>12} {:>8} {:>11} {:>11} {:>10}{simulated_header}",
        "budget", "bytes", "iteration", "vs best", "hbm peak", "h2d moved", "partitions"
    )?;
    for (i, row) in rows.iter().enumerate() {
        let Some((j, (plan, simulated))) =
            taken(rows, i).and_then(|j| own(&rows[j]).map(|o| (j, o)))
        else {
            let Outcome::Infeasible { message, .. } = &row.outcome else {
                unreachable!("a row with no plan taken has none that fits");
            };
            writeln!(
                out,
                "{:<10} {:>11} does not fit: {message}",
                row.label,
                format_bytes(row.bytes)
            )?;
            continue;
        };
        let p = &plan.predicted;
        let replayed = simulated.map_or(String::new(), |s| {
            format!(
                " {:>12} {:>10}",
                format_seconds(s.iteration_s),
                s.violations
            )
        });
        let from = match (&row.outcome, own(row)) {
            (_, Some((mine, _))) if j != i => format!(
                "  the {} plan (this budget's own: {})",
                rows[j].label,
                format_seconds(mine.predicted.iteration_s)
            ),
            (Outcome::Infeasible { message, .. }, _) => format!(
                "  the {} plan (this budget's own does not fit: {message})",
                rows[j].label
            ),
            _ => String::new(),
        };
        // The MILP's plan where its time limit ran out first, as `compare`
        // marks it.
        let unproven = match plan.milp {
            Some(m) if !m.proven_optimal => "  ~ not proven optimal",
            _ => "",
        };
        writeln!(
            out,
            "{:<10} {:>11} {:>12} {:>7.2}x {:>11} {:>11} {:>10}{replayed}{from}{unproven}",
            row.label,
            format_bytes(row.bytes),
            format_seconds(p.iteration_s),
            p.iteration_s / fastest,
            format_bytes(p.peak_bytes.hbm),
            format_bytes(p.bytes_moved.h2d),
            partitions(plan),
        )?;
    }
    Ok(())
}

/// Whether the rows were replayed on the simulator (`--simulate`).
fn args_simulate(rows: &[Row]) -> bool {
    rows.iter()
        .any(|r| own(r).is_some_and(|(_, simulated)| simulated.is_some()))
}

fn json(rows: &[Row], reference: Option<Reference>, header: &Header) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut value = serde_json::json!({
                "budget": row.label,
                "hbm_budget_bytes": row.bytes,
            });
            let taken = taken(rows, i).and_then(|j| own(&rows[j]).map(|o| (j, o)));
            match (taken, &row.outcome) {
                (Some((j, (plan, simulated))), outcome) => {
                    let p = &plan.predicted;
                    value["fits"] = true.into();
                    value["iteration_s"] = p.iteration_s.into();
                    // This budget's own plan's time, or why it has none
                    // that fits (the row takes a smaller budget's).
                    match (own(row), outcome) {
                        (Some((mine, _)), _) => {
                            value["own_iteration_s"] = mine.predicted.iteration_s.into();
                        }
                        (None, Outcome::Infeasible { message, .. }) => {
                            value["own_iteration_s"] = serde_json::Value::Null;
                            value["own_error"] = message.clone().into();
                        }
                        (None, Outcome::Fits { .. }) => {}
                    }
                    value["plan_of"] = rows[j].label.clone().into();
                    value["hbm_peak_bytes"] = p.peak_bytes.hbm.into();
                    value["host_peak_bytes"] = p.peak_bytes.host.into();
                    value["ssd_peak_bytes"] = p.peak_bytes.ssd.into();
                    value["bytes_moved"] =
                        serde_json::to_value(p.bytes_moved).unwrap_or(serde_json::Value::Null);
                    value["partitions"] = plan.workload.model.as_ref().map(|m| m.partitions).into();
                    if let Some(m) = plan.milp {
                        value["proven_optimal"] = m.proven_optimal.into();
                        value["milp_time_limit_s"] = m.time_limit_s.into();
                    }
                    if let Some(s) = simulated {
                        value["simulated_s"] = s.iteration_s.into();
                        value["violations"] = s.violations.into();
                    }
                }
                (None, Outcome::Infeasible { message, .. }) => {
                    value["fits"] = false.into();
                    value["error"] = message.clone().into();
                }
                (None, Outcome::Fits { .. }) => {}
            }
            value
        })
        .collect();
    serde_json::json!({
        "workload": header.name,
        "profile": header.profile,
        "policy": header.policy,
        "partitions_sized_per_budget": header.sized,
        // What shares are of: `retain_all` (its device peak) or
        // `device_memory`.
        "shares_of": reference.map(|of| match of.retain_all {
            true => "retain_all",
            false => "device_memory",
        }),
        "shares_of_bytes": reference.map(|of| of.bytes),
        "retain_all_partitions": reference.and_then(|of| of.partitions),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fateplan::planner::gnn::{build_gnn, GnnModel, GnnSpec};
    use fateplan::planner::plan::MilpSearch;
    use fateplan::planner::{blocks::BlockCounts, plan, PlanOptions};

    /// A budget whose own plan does not fit takes the fastest smaller
    /// budget's plan that fits, and says why, in the table and the JSON;
    /// below every plan that fits, a row still does not fit.
    #[test]
    fn a_budget_whose_own_plan_misses_takes_a_smaller_budgets_plan() {
        let spec = GnnSpec::new(GnnModel::Gcn, 16, 4, "g");
        let workload = build_gnn(&spec, &BlockCounts::skewed(1000, 8000, 2).unwrap()).unwrap();
        let profile = fateplan::profiles::builtin("a100-80g").unwrap();
        let made = plan(&workload, &profile, &PlanOptions::new(Policy::Dp, &profile)).unwrap();
        let header = Header {
            name: "w".into(),
            note: String::new(),
            sized: false,
            profile: "p".into(),
            policy: "remat-only".into(),
        };
        let missed = |label: &str, bytes: u64| Row {
            label: label.into(),
            bytes,
            outcome: Outcome::Infeasible {
                message: format!("over at {label}"),
                smaller: None,
            },
        };
        let mut rows = [
            missed("1MiB", 1 << 20),
            Row {
                label: "2MiB".into(),
                bytes: 2 << 20,
                outcome: Outcome::Fits {
                    own: Box::new(made.clone()),
                    faster_from: None,
                    simulated: None,
                },
            },
            missed("3MiB", 3 << 20),
        ];
        assert!(carry_fastest(&mut rows));
        assert_eq!(
            (taken(&rows, 0), taken(&rows, 1), taken(&rows, 2)),
            (None, Some(1), Some(1))
        );
        let mut out = Vec::new();
        table(&mut out, &rows, None, &header).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = |label: &str| text.lines().find(|l| l.starts_with(label)).unwrap();
        assert!(
            line("1MiB").contains("does not fit: over at 1MiB"),
            "{text}"
        );
        let seconds = format_seconds(made.predicted.iteration_s);
        assert!(line("3MiB").contains(&seconds), "{text}");
        assert!(
            line("3MiB").ends_with("the 2MiB plan (this budget's own does not fit: over at 3MiB)"),
            "{text}"
        );
        let value = json(&rows, None, &header);
        let row = &value["rows"][2];
        assert_eq!(row["fits"], true, "{value}");
        assert_eq!(row["plan_of"], "2MiB", "{value}");
        assert_eq!(row["iteration_s"], made.predicted.iteration_s, "{value}");
        assert!(row["own_iteration_s"].is_null(), "{value}");
        assert_eq!(row["own_error"], "over at 3MiB", "{value}");
        assert_eq!(value["rows"][0]["fits"], false, "{value}");
        assert_eq!(value["rows"][0]["error"], "over at 1MiB", "{value}");
    }

    /// A row of a plan the MILP's time limit cut short is marked `~`, as
    /// `compare` marks it, and its JSON says so; a proven one is not.
    #[test]
    fn a_milp_plan_its_time_limit_cut_short_is_marked() {
        let spec = GnnSpec::new(GnnModel::Gcn, 16, 4, "g");
        let workload = build_gnn(&spec, &BlockCounts::skewed(1000, 8000, 2).unwrap()).unwrap();
        let profile = fateplan::profiles::builtin("a100-80g").unwrap();
        let mut made = plan(&workload, &profile, &PlanOptions::new(Policy::Dp, &profile)).unwrap();
        let header = Header {
            name: "w".into(),
            note: String::new(),
            sized: false,
            profile: "p".into(),
            policy: "milp".into(),
        };
        for proven_optimal in [false, true] {
            made.milp = Some(MilpSearch {
                proven_optimal,
                time_limit_s: 3.0,
                rounds: 1,
            });
            let rows = [Row {
                label: "50%".into(),
                bytes: made.budgets.hbm_bytes,
                outcome: Outcome::Fits {
                    own: Box::new(made.clone()),
                    faster_from: None,
                    simulated: None,
                },
            }];
            let mut out = Vec::new();
            table(&mut out, &rows, None, &header).unwrap();
            let text = String::from_utf8(out).unwrap();
            let line = text.lines().find(|l| l.starts_with("50%")).unwrap();
            assert_eq!(
                line.ends_with("~ not proven optimal"),
                !proven_optimal,
                "{text}"
            );
            let value = json(&rows, None, &header);
            assert_eq!(
                value["rows"][0]["proven_optimal"], proven_optimal,
                "{value}"
            );
            assert_eq!(value["rows"][0]["milp_time_limit_s"], 3.0, "{value}");
        }
    }
}
