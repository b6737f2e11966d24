//! `fateplan partition`: assigns a graph's vertices to k GPUs, by random
//! and min-cut partitioning, and prints what each must exchange.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use fateplan::runtime::graph::GraphData;
use fateplan::runtime::partition::{
    Method, PartitionOptions, PartitionStats, Partitioning, BYTES_PER_VERTEX, DEFAULT_TOLERANCE,
    VERTEX_TOLERANCE_FACTOR,
};
use serde_json::json;

/// The most GPUs `--gpus` takes: as many as a plan may have, within what
/// the partitioner splits a graph into.
const MOST_GPUS: u32 = {
    let (plan, parts) = (
        fateplan::planner::profile::MAX_GPUS,
        fateplan::runtime::partition::MAX_PARTS,
    );
    if plan < parts {
        plan
    } else {
        parts
    }
};

#[derive(Args)]
pub struct PartitionArgs {
    /// The graph: a folder with `edge_index.npy`, an edge-list text file,
    /// or a generator spec (`rmat:scale=16,seed=1`, `planted:nodes=2000`).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    graph: String,
    /// GPUs to partition onto (1 to 1024, as `plan --gpus` takes).
    #[arg(long, value_parser = crate::cli::whole_in::<u32>(1..=MOST_GPUS as u128))]
    gpus: u32,
    /// `random`, `mincut`, or `both` (side by side, with their ratio).
    #[arg(long, value_enum, default_value_t = Which::Both)]
    method: Which,
    #[arg(long, default_value_t = 1, value_parser = crate::cli::whole::<u64>)]
    seed: u64,
    /// Most in-edges a GPU may own, over the mean: a share from 0 to 1
    /// (0.05) or a percentage (5%, which may exceed 100%) [default: 5%].
    /// Min-cut holds the vertices a GPU owns to twice it.
    #[arg(long, allow_hyphen_values = true, value_parser = tolerance_value)]
    tolerance: Option<String>,
    /// Replicate on every GPU the vertices with at least this many
    /// out-edges (1 or more: 0 would replicate every vertex).
    #[arg(long, value_parser = crate::cli::positive::<u64>)]
    replicate_degree: Option<u64>,
    /// Print the result as JSON (with every GPU's figures).
    #[arg(long)]
    json: bool,
}

impl PartitionArgs {
    /// Whether the report is printed as JSON (`--json`): an error is
    /// too.
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Random,
    Mincut,
    Both,
}

/// `--tolerance`'s value as it is read ([`tolerance`]).
fn tolerance_value(text: &str) -> std::result::Result<String, String> {
    tolerance(Some(text)).map_err(|e| {
        let message = e.to_string();
        match message.split_once(": ") {
            Some((_, why)) => why.to_string(),
            None => message,
        }
    })?;
    Ok(text.to_string())
}

/// `--tolerance`: a share from 0 to 1, or a percentage.
fn tolerance(text: Option<&str>) -> Result<f64> {
    let Some(text) = text else {
        return Ok(DEFAULT_TOLERANCE);
    };
    let (number, percent) = match text.trim().strip_suffix('%') {
        Some(number) => (number, true),
        None => (text.trim(), false),
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        anyhow::anyhow!("--tolerance {text:?}: expected a share (0.05) or a percentage (5%)")
    })?;
    if !value.is_finite() || value < 0.0 {
        bail!("--tolerance {text}: expected a share or percentage of at least 0");
    }
    if percent {
        return Ok(value / 100.0);
    }
    if value > 1.0 {
        bail!(
            "--tolerance {text}: a share over the mean is at most 1 (0.05 is 5%); write {text}% for {text} percent"
        );
    }
    Ok(value)
}

pub fn run(args: &PartitionArgs) -> Result<()> {
    let tolerance = tolerance(args.tolerance.as_deref())?;
    let graph = GraphData::open_holding(
        &args.graph,
        BYTES_PER_VERTEX,
        &format!(
            "partitioning onto {}",
            fateplan::planner::units::count(args.gpus as u64, "GPU")
        ),
    )?;
    if let Some(gaps) = &graph.gaps {
        eprintln!("warning: {gaps}");
    }
    if u64::from(args.gpus) > graph.nodes {
        bail!(
            "--gpus {}: {} has {} vert{}: every GPU must own at least one",
            args.gpus,
            args.graph,
            graph.nodes,
            if graph.nodes == 1 { "ex" } else { "ices" }
        );
    }
    let options = PartitionOptions {
        tolerance,
        seed: args.seed,
        replicate_min_out_degree: args.replicate_degree,
    };
    let methods: &[Method] = match args.method {
        Which::Random => &[Method::Random],
        Which::Mincut => &[Method::Mincut],
        Which::Both => &[Method::Random, Method::Mincut],
    };
    let mut results: Vec<(Method, PartitionStats, f64)> = Vec::new();
    for &method in methods {
        let started = Instant::now();
        let partitioning =
            Partitioning::reading(method, graph.nodes, &graph.edges, args.gpus, &options)?;
        let seconds = started.elapsed().as_secs_f64();
        let stats = partitioning.stats_reading(&graph.edges)?;
        results.push((method, stats, seconds));
    }
    // Random's halo over min-cut's, and random's total (of both methods).
    let ratios = match results.as_slice() {
        [(_, random, _), (_, mincut, _)] => Some((
            ratio(random.halo_rows_total, mincut.halo_rows_total),
            ratio(random.halo_rows_max, mincut.halo_rows_max),
            random.halo_rows_total,
        )),
        _ => None,
    };
    let mut out = crate::cli::stdout();
    if args.json {
        let value = json!({
            "graph": graph.name,
            "vertices": graph.nodes,
            "edges": graph.edge_count(),
            "gpus": args.gpus,
            "seed": args.seed,
            "tolerance": tolerance,
            "replicate_degree": args.replicate_degree,
            "methods": results.iter().map(|(method, stats, seconds)| json!({
                "method": method.name(),
                "seconds": seconds,
                "stats": stats,
            })).collect::<Vec<_>>(),
            "random_over_mincut": ratios.map(|(total, max, _)| json!({
                "halo_rows_total": total,
                "halo_rows_max": max,
            })),
        });
        serde_json::to_writer_pretty(&mut out, &value).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    // Min-cut's vertex tolerance, where it runs.
    let vertices = match results.iter().any(|(m, _, _)| *m == Method::Mincut) {
        true => format!(
            ", min-cut's vertices within {}%",
            tolerance * VERTEX_TOLERANCE_FACTOR * 100.0
        ),
        false => String::new(),
    };
    writeln!(
        out,
        "{}: {} vertices, {} edges onto {} (in-edges held within {}% of the mean{vertices}, \
         where the moves can: the imbalance columns say what was reached; seed {})",
        graph.name,
        graph.nodes,
        graph.edge_count(),
        fateplan::planner::units::count(args.gpus as u64, "GPU"),
        tolerance * 100.0,
        args.seed
    )?;
    writeln!(
        out,
        "{:<8} {:>12} {:>12} {:>12} {:>15} {:>17} {:>10}",
        "method",
        "halo rows",
        "max per GPU",
        "edge cut",
        "edge imbalance",
        "vertex imbalance",
        "time"
    )?;
    for (method, stats, seconds) in &results {
        writeln!(
            out,
            "{:<8} {:>12} {:>12} {:>12} {:>15.3} {:>17.3} {:>9.3}s",
            method.name(),
            stats.halo_rows_total,
            stats.halo_rows_max,
            stats.edge_cut,
            stats.edge_imbalance,
            stats.vertex_imbalance,
            seconds
        )?;
        if stats.replicated_vertices > 0 {
            writeln!(
                out,
                "{:<8} replicated {} vertices: {} extra rows held, {} halo rows saved",
                "", stats.replicated_vertices, stats.replica_rows, stats.halo_rows_saved
            )?;
        }
    }
    match ratios {
        Some((Some(total), Some(max), _)) => writeln!(
            out,
            "random/mincut: {total:.2}x halo rows, {max:.2}x the largest halo"
        )?,
        // Every vertex a GPU reads is its own or replicated.
        Some((_, _, 0)) => writeln!(out, "random/mincut: no halo rows with either")?,
        Some((_, _, random)) => writeln!(
            out,
            "random/mincut: no ratio: min-cut has no halo rows, random {random}"
        )?,
        None => {}
    }
    Ok(())
}

/// `a / b`; `None` where `b` is empty (no ratio to give: JSON null).
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}
