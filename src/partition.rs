//! `fateplan partition`: assigns a graph's vertices to k GPUs, by random
//! and min-cut partitioning, and prints what each must exchange.

use std::io::Write;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use fateplan::runtime::graph::GraphData;
use fateplan::runtime::partition::{
    Method, PartitionOptions, PartitionStats, Partitioning, DEFAULT_TOLERANCE,
};
use serde_json::json;

#[derive(Args)]
pub struct PartitionArgs {
    /// The graph: a folder with `edge_index.npy`, an edge-list text file,
    /// or a generator spec (`rmat:scale=16,seed=1`, `planted:nodes=2000`).
    #[arg(long)]
    graph: String,
    /// GPUs to partition onto.
    #[arg(long)]
    gpus: u32,
    /// `random`, `mincut`, or `both` (side by side, with their ratio).
    #[arg(long, value_enum, default_value_t = Which::Both)]
    method: Which,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most in-edges a GPU may own, as a share over the mean (0.05: 5%).
    #[arg(long, default_value_t = DEFAULT_TOLERANCE)]
    tolerance: f64,
    /// Replicate on every GPU the vertices with at least this many out-edges.
    #[arg(long)]
    replicate_degree: Option<u64>,
    /// Print the result as JSON (with every GPU's figures).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Random,
    Mincut,
    Both,
}

pub fn run(args: &PartitionArgs) -> Result<()> {
    let graph = GraphData::open(&args.graph)?;
    let options = PartitionOptions {
        tolerance: args.tolerance,
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
        let partitioning = Partitioning::new(
            method,
            graph.nodes,
            &graph.src,
            &graph.dst,
            args.gpus,
            &options,
        )?;
        let seconds = started.elapsed().as_secs_f64();
        let stats = partitioning.stats(&graph.src, &graph.dst)?;
        results.push((method, stats, seconds));
    }
    let ratios = match results.as_slice() {
        [(_, random, _), (_, mincut, _)] => Some((
            ratio(random.halo_rows_total, mincut.halo_rows_total),
            ratio(random.halo_rows_max, mincut.halo_rows_max),
        )),
        _ => None,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = json!({
            "graph": graph.name,
            "vertices": graph.nodes,
            "edges": graph.src.len(),
            "gpus": args.gpus,
            "seed": args.seed,
            "tolerance": args.tolerance,
            "replicate_degree": args.replicate_degree,
            "methods": results.iter().map(|(method, stats, seconds)| json!({
                "method": method.name(),
                "seconds": seconds,
                "stats": stats,
            })).collect::<Vec<_>>(),
            "random_over_mincut": ratios.map(|(total, max)| json!({
                "halo_rows_total": total,
                "halo_rows_max": max,
            })),
        });
        serde_json::to_writer_pretty(&mut out, &value).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} vertices, {} edges onto {} GPUs (balance by in-edges within {}%, seed {})",
        graph.name,
        graph.nodes,
        graph.src.len(),
        args.gpus,
        args.tolerance * 100.0,
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
    if let Some((total, max)) = ratios {
        writeln!(
            out,
            "random/mincut: {total:.2}x halo rows, {max:.2}x the largest halo"
        )?;
    }
    Ok(())
}

/// `a / b`, with an empty `b` counted as one row.
fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}
