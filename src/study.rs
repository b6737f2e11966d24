//! `fateplan study`: every policy on a grid of workloads, each plan that
//! fits replayed on the simulator, and the speedup of `dp` over each peer,
//! printed as a Markdown table and optionally written to a file.
//!
//! A grid point is planned exactly as `fateplan compare --simulate` plans
//! one workload (`cli::compare_policies`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use fateplan::planner::datasets::dataset;
use fateplan::planner::gnn::{GnnModel, GnnSpec};
use fateplan::planner::passes::milp::MAX_VARIABLES;
use fateplan::planner::units::{count, format_bytes, format_seconds};
use fateplan::planner::Policy;
use fateplan::profiles;

use crate::cli::{compare_policies, signed_percent, Comparison, PlanArgs, PolicyRow};

/// The machine of the study.
const PROFILE: &str = "a100-80g";
/// The hidden size of every model in the study.
const HIDDEN: u32 = 256;
/// A disagreement between simulated and predicted time larger than this
/// (in percent) is listed in the summary.
const DISAGREEMENT_LISTED_PERCENT: f64 = 5.0;

const DEFAULT_MODELS: &str = "gcn,gat";
const DEFAULT_LAYERS: &str = "2,3";
const DEFAULT_DATASETS: &str = "reddit,ogbn-products,it-2004,ogbn-papers100M,igb-full";
const DEFAULT_GPUS: &str = "1,4";

#[derive(Args)]
pub struct StudyArgs {
    /// Also write the table, the command and the summary as Markdown to
    /// this file (e.g. docs/study.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the results as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Models of the grid, comma-separated (narrows the study).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_MODELS, value_parser = crate::cli::trimmed)]
    models: Vec<String>,
    /// Layer counts of the grid, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_LAYERS, value_parser = crate::cli::positive::<u32>)]
    layers: Vec<u32>,
    /// Built-in datasets of the grid, comma-separated (`fateplan workloads`).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_DATASETS, value_parser = crate::cli::trimmed)]
    datasets: Vec<String>,
    /// GPU counts of the grid, comma-separated; each plan is one GPU's share.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_GPUS, value_parser = crate::cli::positive::<u32>)]
    gpus: Vec<u32>,
}

impl StudyArgs {
    /// Whether the report is printed as JSON (`--json`): an error is
    /// too.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// The command as a user would type it again, non-default flags only.
    fn command(&self) -> String {
        let mut command = "fateplan study".to_string();
        let mut flag = |name: &str, value: String, default: &str| {
            if value != default {
                command.push_str(&format!(" --{name} {value}"));
            }
        };
        let join = |values: &[u32]| {
            values
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        flag("models", self.models.join(","), DEFAULT_MODELS);
        flag("layers", join(&self.layers), DEFAULT_LAYERS);
        flag("datasets", self.datasets.join(","), DEFAULT_DATASETS);
        flag("gpus", join(&self.gpus), DEFAULT_GPUS);
        if let Some(out) = &self.out {
            command.push_str(&format!(" --out {}", out.display()));
        }
        if self.json {
            command.push_str(" --json");
        }
        command
    }

    /// The grid points, models outermost, GPU counts innermost; every
    /// value checked before anything is planned.
    fn grid(&self) -> Result<Vec<Point>> {
        let models = self
            .models
            .iter()
            .map(|model| GnnModel::parse(model).with_context(|| format!("--models {model}")))
            .collect::<Result<Vec<_>>>()?;
        let mut stats = Vec::with_capacity(self.datasets.len());
        for name in &self.datasets {
            match dataset(name) {
                Some(found) => stats.push(found),
                None => bail!(fateplan::planner::datasets::unknown_dataset(
                    "--datasets",
                    name
                )),
            }
        }
        // Every model's shape is checked before the first row runs.
        for &model in &models {
            for (stats, name) in stats.iter().zip(&self.datasets) {
                for &layers in &self.layers {
                    let spec = GnnSpec {
                        layers,
                        hidden: HIDDEN,
                        ..GnnSpec::new(model, stats.features, stats.classes, stats.name)
                    };
                    spec.validate().with_context(|| {
                        format!("--layers {layers} ({} on {name})", model.name())
                    })?;
                }
            }
        }
        // The counts `plan --gpus` takes on the profile: whole nodes beyond
        // one, where it has a network.
        let profile = profiles::builtin(PROFILE).expect("the study's profile is built in");
        for &gpus in &self.gpus {
            profile
                .check_gpus(gpus)
                .with_context(|| format!("--gpus {gpus}"))?;
        }
        // A value given twice would study its rows twice.
        fn once<T: PartialEq + std::fmt::Display>(flag: &str, values: &[T]) -> Result<()> {
            for (i, value) in values.iter().enumerate() {
                if values[..i].contains(value) {
                    bail!("--{flag}: {value} is given twice");
                }
            }
            Ok(())
        }
        // Compared, and the rows labelled, by their own names: `GCN` and
        // `gcn` are one model.
        let model_names: Vec<&str> = models.iter().map(|m| m.name()).collect();
        let dataset_names: Vec<&str> = stats.iter().map(|s| s.name).collect();
        once("models", &model_names)?;
        once("layers", &self.layers)?;
        once("datasets", &dataset_names)?;
        once("gpus", &self.gpus)?;
        let mut points = Vec::new();
        for model in model_names {
            for &layers in &self.layers {
                for &name in &dataset_names {
                    for &gpus in &self.gpus {
                        points.push(Point {
                            model: model.to_string(),
                            layers,
                            dataset: name.to_string(),
                            gpus,
                        });
                    }
                }
            }
        }
        Ok(points)
    }
}

/// One workload of the grid.
struct Point {
    model: String,
    layers: u32,
    dataset: String,
    gpus: u32,
}

/// A grid point's plans.
struct Row {
    point: Point,
    comparison: Comparison,
    /// Seconds spent planning and simulating this row.
    wall_s: f64,
}

impl Row {
    fn policy(&self, policy: Policy) -> Option<&PolicyRow> {
        self.comparison.rows.iter().find(|r| r.policy == policy)
    }

    /// A policy's simulated iteration, if it fits.
    fn simulated_s(&self, policy: Policy) -> Option<f64> {
        self.policy(policy)
            .and_then(PolicyRow::simulated)
            .map(|s| s.iteration_s)
    }

    /// Whether the simulator found violations in this policy's plan.
    fn violated(&self, policy: Policy) -> bool {
        self.policy(policy)
            .and_then(PolicyRow::simulated)
            .is_some_and(|s| s.violations_total > 0)
    }

    /// The peer with the least simulated time.
    fn best_peer(&self) -> Option<(Policy, f64)> {
        peers()
            .filter_map(|p| self.simulated_s(p).map(|t| (p, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Vertex partitions, from the workload's name (`...-p32`).
    fn partitions(&self) -> String {
        self.comparison
            .workload
            .rsplit_once("-p")
            .map_or("?".to_string(), |(_, p)| p.to_string())
    }

    fn label(&self) -> String {
        let p = &self.point;
        format!(
            "{} {}x{} {} on {} GPU{}",
            p.model,
            p.layers,
            HIDDEN,
            p.dataset,
            p.gpus,
            if p.gpus == 1 { "" } else { "s" }
        )
    }
}

/// The peers the study compares `dp` with, in `Policy::ALL` order.
fn peers() -> impl Iterator<Item = Policy> {
    Policy::ALL.into_iter().filter(|p| p.is_peer())
}

/// The policies the study plans: all but `milp`, which is for small
/// instances and searches up to its time limit on the others.
fn studied() -> Vec<Policy> {
    Policy::ALL
        .into_iter()
        .filter(|&p| p != Policy::Milp)
        .collect()
}

/// A simulated time, `!` when the simulator found violations.
fn mark(seconds: f64, violated: bool) -> String {
    format!(
        "{}{}",
        format_seconds(seconds),
        if violated { " !" } else { "" }
    )
}

fn table_header() -> String {
    let mut header = "| model | layers | dataset | GPUs | P | dp simulated | dp sim vs pred | best peer | its simulated |".to_string();
    let mut rule = "|---|---|---|---|---|---|---|---|---|".to_string();
    for peer in peers() {
        header.push_str(&format!(" {} |", peer.name()));
        rule.push_str("---|");
    }
    format!("{header}\n{rule}")
}

fn table_row(row: &Row) -> String {
    let p = &row.point;
    let dp = row.simulated_s(Policy::Dp);
    let dp_cell = dp.map_or("OOM".to_string(), |t| mark(t, row.violated(Policy::Dp)));
    let dp_disagreement = row
        .policy(Policy::Dp)
        .and_then(PolicyRow::simulated)
        .map_or("-".to_string(), |s| signed_percent(s.disagreement_percent));
    let (best_name, best_time) = match row.best_peer() {
        Some((peer, t)) => (peer.name().to_string(), mark(t, row.violated(peer))),
        None => ("none fits".to_string(), "-".to_string()),
    };
    let mut line = format!(
        "| {} | {} | {} | {} | {} | {dp_cell} | {dp_disagreement} | {best_name} | {best_time} |",
        p.model,
        p.layers,
        p.dataset,
        p.gpus,
        row.partitions()
    );
    for peer in peers() {
        let cell = match (row.simulated_s(peer), dp) {
            (None, _) => "OOM".to_string(),
            (Some(_), None) => "fits, dp OOM".to_string(),
            (Some(t), Some(d)) => format!(
                "{:.2}x{}",
                t / d,
                if row.violated(peer) { " !" } else { "" }
            ),
        };
        line.push_str(&format!(" {cell} |"));
    }
    line
}

/// A simulated plan whose time disagrees with the planner's prediction.
struct Disagreement<'a> {
    row: &'a Row,
    policy: Policy,
    predicted_s: f64,
    simulated_s: f64,
    percent: f64,
    ssd_peak_bytes: u64,
}

fn disagreements(rows: &[Row]) -> Vec<Disagreement<'_>> {
    let mut all: Vec<Disagreement> = rows
        .iter()
        .flat_map(|row| {
            row.comparison.rows.iter().filter_map(move |r| {
                let (p, s) = (r.predicted()?, r.simulated()?);
                Some(Disagreement {
                    row,
                    policy: r.policy,
                    predicted_s: p.iteration_s,
                    simulated_s: s.iteration_s,
                    percent: s.disagreement_percent,
                    ssd_peak_bytes: p.peak_bytes.ssd,
                })
            })
        })
        .collect();
    all.sort_by(|a, b| b.percent.abs().total_cmp(&a.percent.abs()));
    all
}

/// The summary in Markdown: what the study says against its targets.
fn summary(rows: &[Row]) -> String {
    let mut s = String::new();
    let mut line = |text: String| {
        s.push_str(&text);
        s.push('\n');
    };
    line(format!(
        "- `milp` is skipped on every row: the exact MILP is for small \
         instances (it refuses workloads with more than {MAX_VARIABLES} choices, \
         and can search for its whole time limit on the others); \
         `fateplan compare` runs it on one workload."
    ));
    let fits = rows
        .iter()
        .filter(|r| r.simulated_s(Policy::Dp).is_some())
        .count();
    let mut slower = Vec::new();
    for row in rows {
        let Some(dp) = row.simulated_s(Policy::Dp) else {
            continue;
        };
        let faster = studied()
            .into_iter()
            .filter(|&p| p != Policy::Dp)
            .filter_map(|p| row.simulated_s(p).map(|t| (p, t)))
            // Not a rounding difference: the same schedule can be summed
            // in another order.
            .filter(|&(_, t)| t < dp * (1.0 - 1e-9))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((policy, t)) = faster {
            slower.push(format!(
                "{}: {} {} simulated against dp's {} ({} slower; predicted: dp {}, {} {})",
                row.label(),
                policy.name(),
                mark(t, row.violated(policy)),
                mark(dp, row.violated(Policy::Dp)),
                signed_percent(100.0 * (dp - t) / t),
                format_seconds(
                    row.policy(Policy::Dp)
                        .and_then(PolicyRow::predicted)
                        .map_or(0.0, |p| p.iteration_s)
                ),
                policy.name(),
                format_seconds(
                    row.policy(policy)
                        .and_then(PolicyRow::predicted)
                        .map_or(0.0, |p| p.iteration_s)
                ),
            ));
        }
    }
    let dp_violated = rows.iter().filter(|r| r.violated(Policy::Dp)).count();
    line(format!(
        "- dp fits {fits} of {} rows; it is the fastest simulated plan (ties included) \
         on {} of them; the simulator finds violations in its plan on {dp_violated}.",
        rows.len(),
        fits - slower.len()
    ));
    if !slower.is_empty() {
        line("- Rows where dp is not the fastest simulated plan:".to_string());
        for text in &slower {
            line(format!("  - {text}"));
        }
    }
    let dp_oom: Vec<String> = rows
        .iter()
        .filter(|r| r.simulated_s(Policy::Dp).is_none() && r.best_peer().is_some())
        .map(Row::label)
        .collect();
    if !dp_oom.is_empty() {
        line(format!(
            "- Rows where a peer fits and dp does not: {}.",
            dp_oom.join("; ")
        ));
    }
    let none_fits: Vec<String> = rows
        .iter()
        .filter(|r| r.comparison.rows.iter().all(|p| p.predicted().is_none()))
        .map(Row::label)
        .collect();
    if none_fits.is_empty() {
        line("- Every row has a policy that fits.".to_string());
    } else {
        line(format!(
            "- Rows where no policy fits: {}. The error of each is in `fateplan compare`.",
            none_fits.join("; ")
        ));
    }
    let mut violations = Vec::new();
    for row in rows {
        for r in &row.comparison.rows {
            if let Some(s) = r.simulated().filter(|s| s.violations_total > 0) {
                violations.push(format!(
                    "{}, {}: {}, the first: {}",
                    row.label(),
                    r.policy.name(),
                    count(s.violations_total, "violation"),
                    s.first_violation.as_deref().unwrap_or("?")
                ));
            }
        }
    }
    if violations.is_empty() {
        line("- The simulator found no violation in any plan.".to_string());
    } else {
        line("- Plans the simulator found violations in (marked `!`):".to_string());
        for text in &violations {
            line(format!("  - {text}"));
        }
    }
    let all = disagreements(rows);
    if let Some(d) = all.iter().find(|d| d.policy == Policy::Dp) {
        line(format!(
            "- dp's largest difference between simulated and predicted time: {} ({}).",
            signed_percent(d.percent),
            d.row.label()
        ));
    }
    let listed: Vec<&Disagreement> = all
        .iter()
        .filter(|d| d.percent.abs() > DISAGREEMENT_LISTED_PERCENT)
        .collect();
    match all.first() {
        None => line("- No plan was simulated.".to_string()),
        Some(d) if listed.is_empty() => line(format!(
            "- Simulated and predicted times agree within {DISAGREEMENT_LISTED_PERCENT}% on \
             every simulated plan; the largest difference is {} ({}, {}).",
            signed_percent(d.percent),
            d.row.label(),
            d.policy.name()
        )),
        Some(_) => {
            line(format!(
                "- {} of {} simulated plans disagree with the prediction by more than \
                 {DISAGREEMENT_LISTED_PERCENT}% (see \"Simulated against predicted\" in \
                                  `docs/simulate.md` for the known cause: the planner books the SSD first \
                 come, first served, where the simulator shares it between the reads and \
                 writes in flight):",
                listed.len(),
                all.len()
            ));
            line(String::new());
            line("| row | policy | predicted | simulated | difference | SSD peak |".to_string());
            line("|---|---|---|---|---|---|".to_string());
            for d in &listed {
                line(format!(
                    "| {} | {} | {} | {} | {} | {} |",
                    d.row.label(),
                    d.policy.name(),
                    format_seconds(d.predicted_s),
                    format_seconds(d.simulated_s),
                    signed_percent(d.percent),
                    format_bytes(d.ssd_peak_bytes)
                ));
            }
        }
    }
    s
}

fn intro(args: &StudyArgs) -> String {
    format!(
        "Every policy but `milp` plans each grid point: the model with hidden \
         size {HIDDEN}, partitions `auto`, on {PROFILE} with the profile's budgets; \
                  with N GPUs the plan is one GPU's share (1/N of the vertices and edges; \
         the node's host memory and SSD shared by its GPUs) with the halo \
         exchanges between GPUs, chosen per layer (docs/scaling.md). \
         Each plan that fits is replayed on the simulator (seed 0, no jitter). \
         A peer's column is its simulated time over dp's (above 1.00x: dp is \
         faster); OOM: no plan of that policy fits; `!`: the simulator found \
         violations in that plan; \"dp sim vs pred\": dp's simulated time \
         against the planner's prediction. P: vertex partitions.\n\n\
         Command: `{}`\n",
        args.command()
    )
}

fn to_json(args: &StudyArgs, rows: &[Row], wall_s: f64) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let p = &row.point;
            let c = &row.comparison;
            let best = row.best_peer();
            serde_json::json!({
                "model": p.model,
                "layers": p.layers,
                "hidden": HIDDEN,
                "dataset": p.dataset,
                "gpus": p.gpus,
                "workload": c.workload,
                "workload_note": c.note,
                "budgets": {
                    "hbm": c.budgets.hbm_bytes,
                    "host": c.budgets.host_bytes,
                    "ssd": c.budgets.ssd_bytes,
                },
                "best_peer": best.map(|(policy, _)| policy.name()),
                "best_peer_simulated_s": best.map(|(_, t)| t),
                "dp_speedup": peers()
                    .map(|peer| {
                        let speedup = row
                            .simulated_s(peer)
                            .zip(row.simulated_s(Policy::Dp))
                            .map(|(t, d)| t / d);
                        (peer.name().to_string(), speedup.into())
                    })
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
                "policies": c.rows.iter().map(PolicyRow::to_json).collect::<Vec<_>>(),
                "wall_s": row.wall_s,
            })
        })
        .collect();
    serde_json::json!({
        "command": args.command(),
        "profile": PROFILE,
        "hidden": HIDDEN,
        "skipped_policies": [Policy::Milp.name()],
        "rows": rows,
        "wall_s": wall_s,
    })
}

pub fn run(args: &StudyArgs) -> Result<()> {
    let grid = args.grid()?;
    // A path the report cannot be written to is said before the grid runs.
    let report_out = args
        .out
        .as_deref()
        .map(|path| crate::cli::Staged::create(path, "--out"))
        .transpose()?;
    let policies = studied();
    let start = Instant::now();
    let mut out = Said {
        out: crate::cli::stdout(),
        gone: false,
        go_on: args.out.is_some(),
    };
    if !args.json {
        out.line(&table_header())?;
    }
    let total = grid.len();
    let mut rows = Vec::with_capacity(total);
    for (i, point) in grid.into_iter().enumerate() {
        let row_start = Instant::now();
        let plan_args = PlanArgs::for_dataset(
            &point.dataset,
            &point.model,
            point.layers,
            HIDDEN,
            point.gpus,
            PROFILE,
        )?;
        let comparison = compare_policies(&plan_args, &policies, true).with_context(|| {
            format!(
                "study row {} ({} {}x{HIDDEN} {} on {})",
                i + 1,
                point.model,
                point.layers,
                point.dataset,
                count(point.gpus as u64, "GPU")
            )
        })?;
        let row = Row {
            point,
            comparison,
            wall_s: row_start.elapsed().as_secs_f64(),
        };
        eprintln!(
            "study     row {} of {}: {} ({}) in {}",
            i + 1,
            total,
            row.label(),
            row.comparison.workload,
            format_seconds(row.wall_s)
        );
        if !args.json {
            out.line(&table_row(&row))?;
        }
        rows.push(row);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let summary = summary(&rows);
    if args.json {
        let doc = to_json(args, &rows, wall_s);
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        out.line(&format!("\n{summary}"))?;
    }
    eprintln!(
        "study     {} in {}",
        count(rows.len() as u64, "row"),
        format_seconds(wall_s)
    );
    if let (Some(report_out), Some(path)) = (report_out, &args.out) {
        let mut text = "# The study: dp against the peer policies, simulated\n\n".to_string();
        text.push_str(&intro(args));
        text.push('\n');
        text.push_str(&table_header());
        text.push('\n');
        for row in &rows {
            text.push_str(&table_row(row));
            text.push('\n');
        }
        text.push_str("\n## Summary\n\n");
        text.push_str(&summary);
        report_out.write(text.as_bytes())?;
        if !args.json {
            out.line(&format!("written   {}", path.display()))?;
        }
    }
    Ok(())
}

/// Standard output, line by line. Where its reader has gone (a pager
/// quit, `| head`) and the report is also asked for as a file (`go_on`:
/// `--out`), the lines after are dropped and the grid goes on to write
/// it; otherwise the write's error stops the study.
struct Said {
    out: crate::cli::Stdout,
    gone: bool,
    go_on: bool,
}

impl Said {
    fn line(&mut self, text: &str) -> Result<()> {
        if self.gone {
            return Ok(());
        }
        match writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && self.go_on => {
                self.gone = true;
                Ok(())
            }
            written => Ok(written?),
        }
    }
}
