//! `fateplan profile`: measures this machine and writes a hardware profile
//! that `--profile path.json` accepts.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use fateplan::planner::units::{format_bytes, format_seconds};
use fateplan::planner::Profile;
use fateplan::runtime::measure::{self, MeasureOptions, Progress, Sizes};

/// Where the machine's RAM and CPU are described.
const MEMINFO: &str = "/proc/meminfo";
const CPUINFO: &str = "/proc/cpuinfo";

#[derive(Args)]
pub struct ProfileArgs {
    /// A directory on the SSD to measure (the SSD tier's spill directory,
    /// `train --spill-dir`); a spill file is written there and deleted.
    #[arg(long, default_value = ".", visible_alias = "spill-dir")]
    ssd_dir: PathBuf,
    /// Write the profile JSON to this file (default: print it on stdout).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Measure less, in a few seconds (smaller graph, files and copies).
    #[arg(long)]
    quick: bool,
    /// The profile's name.
    #[arg(long, default_value = "measured")]
    name: String,
    /// Compute threads of the CPU backend's figures (default, and at
    /// most: every core); train with the same --threads.
    #[arg(long, value_parser = crate::cli::positive::<usize>)]
    threads: Option<usize>,
    /// Time the GCN's operators (the aggregations' fits, GEMMs,
    /// element-wise rates and the loss's math) on this graph instead of
    /// the generated R-MAT: a folder of PyG-named .npy files or a
    /// generator spec, as `train --graph` takes (the gathers' curve over
    /// working sets and the loss kernels are timed on their own data
    /// either way). An aggregation's rate depends on the graph (how
    /// often its rows come from cache): on a large graph the graph to
    /// train predicts it better; on one whose rows fit the caches it
    /// can predict worse (the runs are timed at the profile's own
    /// widths and partition counts).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    graph: Option<String>,
}

/// A graph given to profile on with fewer nodes than this gets a note:
/// on Cora (2,708 nodes) a quick profile fitted the masked gathers 1,147
/// ns an edge, where R-MAT scale 18 gives them 6-12.
const SMALL_GRAPH_NODES: u64 = 4096;

pub fn run(args: &ProfileArgs) -> Result<()> {
    // Each thread measures with buffers of its own: more threads than
    // cores measure nothing more and can run the host out of memory.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(threads) = args.threads.filter(|&t| t > cores) {
        bail!(
            "--threads {threads}: this machine has {cores} cores; the profile measures with at \
             most that many threads"
        );
    }
    crate::cli::set_threads(args.threads)?;

    if args.name.trim().is_empty() {
        bail!("--name {:?}: the profile needs a name", args.name);
    }
    // `--profile NAME` takes the shipped profile of a shipped name, and a
    // plan made on a file of that name would read as made on it.
    if fateplan::profiles::names()
        .iter()
        .any(|shipped| shipped.eq_ignore_ascii_case(&args.name))
    {
        bail!(
            "--name {}: the name of a profile shipped with fateplan; a measured profile needs a \
             name of its own (the default is `measured`)",
            args.name
        );
    }
    if !args.ssd_dir.is_dir() {
        bail!(
            "--ssd-dir {}: {}",
            args.ssd_dir.display(),
            if args.ssd_dir.exists() {
                "is not a directory"
            } else {
                "no such directory"
            }
        );
    }
    crate::cli::spare_inputs(
        &[("-o", args.output.as_deref())],
        &[(
            "--graph",
            args.graph.as_deref().and_then(crate::cli::existing),
        )],
    )?;
    // Fail before measuring if the profile cannot be written: measure
    // into a temporary file beside it, renamed over it at the end.
    let staging = match &args.output {
        Some(path) => Some(crate::cli::Staged::create(path, "-o")?),
        None => None,
    };
    let sizes = match args.quick {
        true => Sizes::quick(),
        false => Sizes::full(),
    };
    let mut small = None;
    let graph = match &args.graph {
        Some(source) => {
            crate::cli::note_unread_arrays(source);
            let dataset = fateplan::runtime::train::load_graph(source)
                .with_context(|| format!("--graph {source}"))?;
            let parts = sizes.partitions;
            if dataset.nodes < u64::from(parts) {
                bail!(
                    "--graph {source}: {} nodes, fewer than the {parts} partitions the \
                     profile's GCN is timed in{}; give a graph of at least {parts} nodes",
                    dataset.nodes,
                    if args.quick { " with --quick" } else { "" }
                );
            }
            // Its loss is timed on its training nodes, as `train` trains.
            crate::train::has_training_nodes(&dataset, source)?;
            if dataset.nodes < SMALL_GRAPH_NODES {
                small = Some(format!(
                    "the graph given ({source}) has {} nodes: its operators take \
                     microseconds, where the time of launching one weighs most, so the \
                     figures fitted on it may price a larger graph poorly",
                    dataset.nodes
                ));
            }
            Some((source.clone(), dataset))
        }
        None => None,
    };
    let meminfo = std::fs::read_to_string(MEMINFO).with_context(|| format!("reading {MEMINFO}"))?;
    let cpuinfo = std::fs::read_to_string(CPUINFO).unwrap_or_default();
    let options = MeasureOptions {
        name: args.name.clone(),
        ssd_dir: args.ssd_dir.clone(),
        sizes,
        meminfo,
        meminfo_path: PathBuf::from(MEMINFO),
        cpuinfo,
        graph,
    };
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(crate::cli::progress_style(
        "{bar:30} {pos}/{len} measuring {msg} {took}",
    ));
    let measured = measure::measure(&options, &mut |p: Progress| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.stage);
    })
    .context("measuring the machine");
    bar.finish_and_clear();
    let measured = measured.map_err(|e| ssd_dir_flagged(e, &args.ssd_dir))?;
    let mut json = measured.profile.to_json_pretty();
    json.push('\n');
    let unsteady = measured.profile.unsteady();
    let in_memory = in_memory_note(&args.ssd_dir);
    for note in measured
        .notes
        .iter()
        .chain(&small)
        .chain(&unsteady)
        .chain(&in_memory)
    {
        eprintln!("note: {note}");
    }
    match staging {
        None => crate::cli::stdout().write_all(json.as_bytes())?,
        Some(staging) => {
            let path = staging.path().to_path_buf();
            staging.write(json.as_bytes())?;
            let mut out = crate::cli::stdout();
            summary(&mut out, &measured.profile)?;
            writeln!(
                out,
                "written   {} (measured in {:.1} s)",
                path.display(),
                measured.seconds
            )?;
        }
    }
    Ok(())
}

/// A measurement's error about `ssd_dir` (its free space, its spill
/// file), led by the flag that named it.
fn ssd_dir_flagged(error: anyhow::Error, ssd_dir: &std::path::Path) -> anyhow::Error {
    use fateplan::runtime::Error;
    let about_it = error.chain().any(|e| match e.downcast_ref::<Error>() {
        Some(
            Error::InvalidInput { path, .. } | Error::Io { path, .. } | Error::SpillIo { path, .. },
        ) => path.starts_with(ssd_dir),
        _ => false,
    });
    match about_it {
        true => error.context(format!("--ssd-dir {}", ssd_dir.display())),
        false => error,
    }
}

/// Where `ssd_dir` is on a file system held in memory (tmpfs, ramfs): its
/// figures are the memory's, not a drive's, and a plan made on them
/// spills to memory.
fn in_memory_note(ssd_dir: &std::path::Path) -> Option<String> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let path = std::ffi::CString::new(ssd_dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string; `statfs` fills `stats`
    // where it returns 0, and `stats` is read only then. (`f_type` is
    // i64 on x86-64, of other widths elsewhere.)
    #[allow(clippy::unnecessary_cast)]
    let kind = unsafe {
        match libc::statfs(path.as_ptr(), stats.as_mut_ptr()) {
            0 => stats.assume_init().f_type as i64,
            _ => return None,
        }
    };
    [TMPFS_MAGIC, RAMFS_MAGIC].contains(&kind).then(|| {
        format!(
            "--ssd-dir {} is on a file system held in memory (tmpfs or ramfs), not a drive: \
             the ssd figures are the memory's, and a plan made on them spills to memory",
            ssd_dir.display()
        )
    })
}

fn rate(bytes_per_s: f64) -> String {
    format!("{:.2} GB/s", bytes_per_s / 1e9)
}

/// The figures, one per line.
fn summary(out: &mut dyn Write, p: &Profile) -> Result<()> {
    let d = &p.device;
    writeln!(out, "profile   {} ({})", p.name, p.device.model)?;
    let shapes: Vec<String> = d
        .dense_shapes
        .iter()
        .map(|s| {
            format!(
                "{:.1} at {:.1} flops/B",
                s.flops_per_s / 1e9,
                s.flops_per_byte
            )
        })
        .collect();
    let shapes = if shapes.is_empty() {
        String::new()
    } else {
        format!(" ({})", shapes.join(", "))
    };
    let scatter = d
        .scatter_bytes_per_s
        .map_or(String::new(), |s| format!(", scatter {}", rate(s)));
    let math = d.softmax_flops_per_s.map_or(String::new(), |f| {
        format!(", softmax {:.1} GFLOP/s", f / 1e9)
    });
    let attention = d
        .attention_bytes_per_s
        .map_or(String::new(), |a| format!(", attention {}", rate(a)));
    let attention = match d.attention_backward_bytes_per_s {
        Some(a) => format!("{attention}, attention backward {}", rate(a)),
        None => attention,
    };
    let attention = match d.edge_softmax_bytes_per_s {
        Some(a) => format!("{attention}, edge softmax {}", rate(a)),
        None => attention,
    };
    writeln!(
        out,
        "device    {} arena, element-wise {}{math}, GEMM {:.1} GFLOP/s{shapes}, SpMM \
                  {}{scatter}{attention}, {} per operator",
        format_bytes(d.hbm_bytes),
        rate(d.hbm_bytes_per_s),
        d.dense_flops_per_s / 1e9,
        rate(d.sparse_bytes_per_s),
        format_seconds(d.op_overhead_s)
    )?;
    if !d.class_rates.is_empty() {
        let fits: Vec<String> = d
            .class_rates
            .iter()
            .map(|r| {
                let terms: String = [
                    (r.seconds_per_edge, "edge"),
                    (r.seconds_per_edge_head, "edge head"),
                    (r.seconds_per_row, "row"),
                ]
                .iter()
                .filter(|(seconds, _)| *seconds > 0.0)
                .map(|(seconds, per)| format!(" + {:.2} ns/{per}", seconds * 1e9))
                .collect();
                let curve = if r.on_curve {
                    " (at the curve's top)"
                } else {
                    ""
                };
                format!("{} {}{terms}{curve}", r.class, rate(r.bytes_per_s))
            })
            .collect();
        writeln!(out, "fitted    {}", fits.join(", "))?;
    }
    if !d.gather_curve.is_empty() {
        // Each width's smallest and largest working set.
        let mut widths: Vec<u32> = d.gather_curve.iter().map(|g| g.width).collect();
        widths.sort_unstable();
        widths.dedup();
        let ends: Vec<String> = widths
            .iter()
            .map(|&w| {
                let of_width: Vec<_> = d.gather_curve.iter().filter(|g| g.width == w).collect();
                let (first, last) = (of_width[0], of_width[of_width.len() - 1]);
                format!(
                    "{:.2} ns/edge at {} to {:.2} at {} ({w} wide)",
                    first.seconds_per_edge * 1e9,
                    format_bytes(first.set_bytes),
                    last.seconds_per_edge * 1e9,
                    format_bytes(last.set_bytes)
                )
            })
            .collect();
        writeln!(out, "gathers   {}", ends.join(", "))?;
    }
    writeln!(
        out,
        "host      {} for the host tier, copy {}, {} cores",
        format_bytes(p.host.memory_bytes),
        rate(p.host.memory_bytes_per_s),
        p.host.cores
    )?;
    writeln!(
        out,
        "transfers h2d {}, d2h {}, {} per copy",
        rate(p.pcie.h2d_bytes_per_s),
        rate(p.pcie.d2h_bytes_per_s),
        format_seconds(p.pcie.latency_s)
    )?;
    writeln!(
        out,
        "ssd       {} free, read {} ({} per request), write {} ({} per request)",
        format_bytes(p.ssd.capacity_bytes),
        rate(p.ssd.read_bytes_per_s),
        format_seconds(p.ssd.read_latency_s),
        rate(p.ssd.write_bytes_per_s),
        format_seconds(p.ssd.write_latency_s)
    )?;
    let steadiness = p.steadiness.as_ref();
    if let Some((steadiness, (Some(fastest), Some(slowest)))) = steadiness.map(|s| (s, s.range())) {
        let others = steadiness.other_cores.map_or(String::new(), |cores| {
            format!("; other programs took {cores:.2} cores' worth of CPU time meanwhile")
        });
        writeln!(
            out,
            "steady    the probe took {} (the median; from {} to {} at {} points of the measurement, \
             {:.1}% apart; the slowest before {}){others}",
            format_seconds(steadiness.median_s()),
            format_seconds(fastest.seconds),
            format_seconds(slowest.seconds),
            steadiness.points.len(),
            steadiness.spread() * 100.0,
            slowest.before
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder in memory (tmpfs) is noted as not a drive; another file
    /// system is not.
    #[test]
    fn a_folder_held_in_memory_is_noted() {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            let note = in_memory_note(shm).expect("/dev/shm is tmpfs");
            assert!(note.starts_with("--ssd-dir /dev/shm is on a file system held in memory"));
        }
        assert_eq!(in_memory_note(std::path::Path::new("/proc")), None);
        assert_eq!(
            in_memory_note(std::path::Path::new("/no/such/folder")),
            None
        );
    }
}
