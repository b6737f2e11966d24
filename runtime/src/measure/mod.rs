//! `fateplan profile`: measures the machine and describes it as a
//! hardware profile (`planner/src/profile.rs`, `profiles/README.md`).
//!
//! - Host ([`host`]): RAM from `/proc/meminfo`'s text (the caller reads
//!   it), the CPUs this process may run on, and the copy bandwidth of as
//!   many threads as the rayon pool has.
//! - SSD tier ([`ssd`]): the spill store in the given directory, driven
//!   as the executor drives it, and the directory's free space.
//! - Device: [`gpu::measure_gpu`] finds a GPU (its memory from the
//!   driver, pinned copies each way timed) or says why it skipped; then
//!   the GPU's CUDA backend, or else the CPU backend ([`compute`]): GEMM,
//!   SpMM, element-wise and softmax rates of the operators timed inside
//!   training iterations (on the CPU at the rayon pool's thread count),
//!   and the per-operator overhead of the executor and backend together.
//!   Without a GPU, "PCIe" is the executor's transfer lanes: a copy
//!   between two arenas on a lane's thread.
//!
//! Every figure gets a `sources` entry that starts with `measured:` and
//! says what ran, at which size, and how many rounds its median has.
//! Rates are medians over rounds after one warm-up round, so that a
//! burst of other work on a shared machine moves them little.

pub mod compute;
pub mod gather;
pub mod gpu;
pub mod host;
pub mod loss;
pub mod probe;
pub mod ssd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fateplan_planner::profile::{
    DenseShape, DeviceKind, DeviceProfile, HostProfile, PcieProfile, Profile, SsdProfile,
    Steadiness, PROFILE_FORMAT_VERSION,
};
use fateplan_planner::units::count;

use crate::dataset::Dataset;
use crate::exec::lanes::Lane;
use crate::{Error, Result};

use gpu::{GpuFigures, GpuOutcome};

use crate::cuda::CudaOptions;
use crate::train::BackendChoice;
use host::MemInfo;
use ssd::{SsdFigures, SsdSizes};

/// Rounds of one measurement: at least `min` after a warm-up, more while
/// `budget_s` seconds have not passed, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rounds {
    pub min: u32,
    pub max: u32,
    pub budget_s: f64,
}

impl Rounds {
    /// One round after the warm-up: for tests.
    pub fn tiny() -> Rounds {
        Rounds {
            min: 1,
            max: 1,
            budget_s: 0.0,
        }
    }
}

/// How much each measurement moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    /// `quick` or `full`, for the sources.
    pub label: &'static str,
    pub rounds: Rounds,
    /// Rounds of the SSD bandwidths (each writes and reads `ssd.round_bytes`).
    pub ssd_rounds: Rounds,
    /// Bytes each thread copies per round of the host copy bandwidth.
    pub copy_bytes: usize,
    /// Bytes of one lane copy (a tensor's size), and of the set of
    /// tensors the copies take turns from (larger than the caches).
    pub lane_copy_bytes: usize,
    pub lane_set_bytes: usize,
    pub latency_requests: u32,
    pub ssd: SsdSizes,
    /// The compute graph: R-MAT `2^rmat_scale` nodes, in `partitions`.
    pub rmat_scale: u32,
    pub partitions: u32,
    /// Features and hidden width of the measured GCN; its classes are an
    /// eighth of it (at least 2).
    pub width: u32,
    /// Training iterations of the per-operator overhead.
    pub overhead_iterations: u32,
    /// Rows of the loss kernels timed alone ([`loss::loss_fit`]).
    pub loss_rows: usize,
}

impl Sizes {
    /// The default: tens of seconds.
    pub fn full() -> Sizes {
        Sizes {
            label: "full",
            rounds: Rounds {
                min: 5,
                max: 20,
                budget_s: 2.0,
            },
            ssd_rounds: Rounds {
                min: 2,
                max: 3,
                budget_s: 2.0,
            },
            copy_bytes: 64 << 20,
            lane_copy_bytes: 16 << 20,
            lane_set_bytes: 256 << 20,
            latency_requests: 200,
            ssd: SsdSizes {
                block_bytes: 16 << 20,
                round_bytes: 512 << 20,
                latency_requests: 100,
            },
            rmat_scale: 18,
            partitions: 8,
            width: 128,
            overhead_iterations: 40,
            loss_rows: loss::LOSS_ROWS,
        }
    }

    /// `--quick`: a few seconds: a smaller graph (its partitions are
    /// 16,384 rows), smaller copies and files, fewer rounds.
    pub fn quick() -> Sizes {
        Sizes {
            label: "quick",
            rounds: Rounds {
                min: 3,
                max: 10,
                budget_s: 0.25,
            },
            ssd_rounds: Rounds {
                min: 1,
                max: 1,
                budget_s: 0.0,
            },
            copy_bytes: 32 << 20,
            lane_copy_bytes: 8 << 20,
            lane_set_bytes: 128 << 20,
            latency_requests: 50,
            ssd: SsdSizes {
                block_bytes: 4 << 20,
                round_bytes: 64 << 20,
                latency_requests: 20,
            },
            rmat_scale: 16,
            partitions: 4,
            width: 128,
            overhead_iterations: 10,
            loss_rows: loss::LOSS_ROWS / 4,
        }
    }
}

/// What to measure and how to name it.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// The profile's name.
    pub name: String,
    /// A directory on the SSD to measure (it must exist).
    pub ssd_dir: PathBuf,
    pub sizes: Sizes,
    /// The text of `/proc/meminfo`, and the file it came from.
    pub meminfo: String,
    pub meminfo_path: PathBuf,
    /// The text of `/proc/cpuinfo` (for the CPU's model name; may be empty).
    pub cpuinfo: String,
    /// A graph to time the GCN's operators on (the aggregations' fits,
    /// the GEMM shapes, the element-wise and loss rates, the transposes'
    /// price), by its name, instead of the generated R-MAT graph: an
    /// aggregation's rate depends on how often its rows come from cache,
    /// which depends on the graph.
    pub graph: Option<(String, Dataset)>,
}

/// Where the measurement is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Stages done so far.
    pub done: u32,
    pub total: u32,
    /// The stage starting now.
    pub stage: &'static str,
}

/// Stages, in order.
const STAGES: [&str; 10] = [
    "host memory",
    "memory copy",
    "ssd",
    "device and its transfers",
    "gathers' working sets",
    "loss kernels",
    "training iterations",
    "attention iterations",
    "dropout iterations",
    "operator overhead",
];

/// The measured profile and what the caller should know about it.
#[derive(Debug, Clone)]
pub struct Measured {
    pub profile: Profile,
    /// One line each: a GPU skipped, an SSD without O_DIRECT, ...
    pub notes: Vec<String>,
    pub seconds: f64,
}

/// Measures this machine. The rayon pool's thread count is the thread
/// count of the compute figures. `progress` is told each stage as it
/// starts.
pub fn measure(options: &MeasureOptions, progress: &mut dyn FnMut(Progress)) -> Result<Measured> {
    let started = Instant::now();
    if options.name.trim().is_empty() {
        return Err(Error::invalid(
            Path::new("profile"),
            "name",
            "is empty: give the profile a name",
        ));
    }
    let sizes = &options.sizes;
    let threads = rayon::current_num_threads();
    let mut stage = 0u32;
    // The probe is timed as each stage starts, and after the last.
    let mut probe = probe::Probe::new()?;
    let cpu_times = host::CpuTimes::now();
    let mut next = |progress: &mut dyn FnMut(Progress)| -> Result<()> {
        progress(Progress {
            done: stage,
            total: STAGES.len() as u32,
            stage: STAGES[stage as usize],
        });
        probe.point(STAGES[stage as usize]).map(|_| ())?;
        stage += 1;
        Ok(())
    };
    let mut sources = BTreeMap::new();
    let mut notes = Vec::new();

    next(progress)?;
    let memory = host::parse_meminfo(&options.meminfo, &options.meminfo_path)?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let cpu = host::cpu_model(&options.cpuinfo).unwrap_or_else(|| "unknown CPU".to_string());

    next(progress)?;
    let (copy_rate, copy_rounds) = host::copy_bandwidth(threads, sizes.copy_bytes, &sizes.rounds)?;
    let copy_rounds = count(copy_rounds as u64, "round");
    put(
        &mut sources,
        "host.memory_bytes_per_s",
        format!(
            "{} threads each copying {} into another buffer at once (copy_from_slice, \
             buffers touched first), bytes copied per second, median of {copy_rounds}",
            threads,
            mib(sizes.copy_bytes as u64)
        ),
    );
    put(
        &mut sources,
        "host.cores",
        format!(
            "{cores}: CPUs this process may run on (sched_getaffinity and cgroup quota, as \
             std::thread::available_parallelism reads them)"
        ),
    );

    next(progress)?;
    let ssd = ssd::measure_ssd(&options.ssd_dir, &sizes.ssd, &sizes.ssd_rounds)?;
    // The folder whole: the profile outlives the folder it was run from.
    let ssd_dir =
        std::fs::canonicalize(&options.ssd_dir).unwrap_or_else(|_| options.ssd_dir.clone());
    if !ssd.direct {
        notes.push(format!(
            "the SSD figures were measured with {} in {}: they may include the page cache",
            ssd.mode,
            ssd_dir.display()
        ));
    }
    let ssd_how = format!(
        "through the spill store in {} ({}), one f32 tensor at a time as the executor's SSD \
         lanes move a tensor, through {} staging shares (its form written into a kept staging \
         buffer, then read back and crc32c verified into the tensor's own buffer)",
        ssd_dir.display(),
        ssd.mode,
        mib(ssd::STAGING_SHARE_BYTES as u64)
    );
    put(
        &mut sources,
        "ssd.write_bytes_per_s",
        format!(
            "{} tensors of {} written in sequence per round, {ssd_how}; median of {} \
             after a warm-up",
            sizes.ssd.round_bytes.div_ceil(sizes.ssd.block_bytes as u64),
            mib(sizes.ssd.block_bytes as u64),
            count(ssd.rounds as u64, "round")
        ),
    );
    put(
        &mut sources,
        "ssd.read_bytes_per_s",
        format!(
            "the same tensors read back in sequence after each write round, {ssd_how}; median \
             of {} after a warm-up",
            count(ssd.rounds as u64, "round")
        ),
    );
    put(
        &mut sources,
        "ssd.write_latency_s",
        format!(
            "median time of writing one {}-byte block, {} times, {ssd_how}",
            ssd::LATENCY_REQUEST_BYTES,
            sizes.ssd.latency_requests
        ),
    );
    put(
        &mut sources,
        "ssd.read_latency_s",
        format!(
            "median time of reading one {}-byte block, {} times, {ssd_how}",
            ssd::LATENCY_REQUEST_BYTES,
            sizes.ssd.latency_requests
        ),
    );
    put(
        &mut sources,
        "ssd.capacity_bytes",
        format!(
            "free space in {} (statvfs: blocks available to this user times the fragment size)",
            ssd_dir.display()
        ),
    );

    next(progress)?;
    let gpu = gpu::measure_gpu(sizes.lane_set_bytes, sizes.rounds.max);

    let machine = Host {
        memory,
        cores,
        copy_bytes_per_s: copy_rate,
    };
    let (mut profile, backend, engine, gemm, bench) = match &gpu {
        GpuOutcome::Measured(figures) => {
            let profile = gpu_profile(&options.name, figures, &machine, &ssd, &mut sources);
            let backend = BackendChoice::Cuda(CudaOptions::default());
            let engine = format!("the CUDA backend on {}", figures.model);
            // A GPU runs the CPU's graph in a blink: eight times the
            // nodes, in one partition of the default sizes' scale.
            let bench = compute::Bench {
                scale: sizes.rmat_scale + 3,
                partitions: 1,
                width: sizes.width,
            };
            (profile, backend, engine, "cuBLAS", bench)
        }
        GpuOutcome::Skipped(why) => {
            notes.push(why.clone());
            // Without a GPU, the transfers are the executor's lanes.
            let clock = Instant::now();
            let lane =
                |name: &'static str| Lane::start(name, clock).map_err(|e| Error::of_run(name, e));
            let (h2d_lane, d2h_lane) = (lane("measure-h2d")?, lane("measure-d2h")?);
            let lane_copy = |lane: &Lane| {
                host::lane_copy_bandwidth(
                    lane,
                    sizes.lane_copy_bytes,
                    sizes.lane_set_bytes,
                    &sizes.rounds,
                )
            };
            let (h2d_rate, h2d_rounds) = lane_copy(&h2d_lane)?;
            let (d2h_rate, d2h_rounds) = lane_copy(&d2h_lane)?;
            let (h2d_rounds, d2h_rounds) = (
                count(h2d_rounds as u64, "round"),
                count(d2h_rounds as u64, "round"),
            );
            let lane_latency = host::lane_latency(&h2d_lane, sizes.latency_requests)?;
            drop((h2d_lane, d2h_lane));
            let mut profile =
                cpu_profile(&options.name, sizes.label, &cpu, threads, &machine, &ssd);
            put(
                &mut sources,
                "device.threads",
                format!(
                    "the threads of the CPU backend's pool the rates were measured with ({}); \
                     training on another count runs at other rates",
                    count(threads as u64, "thread")
                ),
            );
            profile.pcie = PcieProfile {
                h2d_bytes_per_s: h2d_rate,
                d2h_bytes_per_s: d2h_rate,
                latency_s: lane_latency,
            };
            let lane = "on the CPU backend a transfer is a copy between two arenas in RAM, \
                        made on a transfer lane's thread";
            put(
                &mut sources,
                "pcie.h2d_bytes_per_s",
                format!(
                    "{lane}: a lane job cloning a tensor of {} (allocation and copy) taken in \
                     turn from {} of tensors, issue to wait, median of {h2d_rounds}",
                    mib(sizes.lane_copy_bytes as u64),
                    mib(sizes.lane_set_bytes as u64)
                ),
            );
            put(
                &mut sources,
                "pcie.d2h_bytes_per_s",
                format!("{lane}: the same copy on a second lane, median of {d2h_rounds}"),
            );
            put(&mut sources, "pcie.latency_s", {
                let (rounds, batch) = host::latency_rounds(sizes.latency_requests);
                format!(
                    "{lane}: one-value copies queued back to back, as training queues \
                         them, {batch} a round, each round's time per copy on the lane's clock \
                         from the end of its first to the end of its last (the lane's wake-up \
                         for the first left out), median of {rounds} rounds"
                )
            });
            put(
                &mut sources,
                "device.hbm_bytes",
                format!(
                    "a third of MemTotal ({}) in {}: the CPU backend's device arena (the host \
                     arena gets half, the rest is left to the process and the system)",
                    machine.memory.total_bytes,
                    options.meminfo_path.display()
                ),
            );
            put(
                &mut sources,
                "host.memory_bytes",
                format!(
                    "half of MemTotal ({}) in {}: the host tier's arena (the device arena is a \
                     third)",
                    machine.memory.total_bytes,
                    options.meminfo_path.display()
                ),
            );
            put(
                &mut sources,
                "device.count_max",
                "the CPU backend is one device".to_string(),
            );
            let bench = compute::Bench {
                scale: sizes.rmat_scale,
                partitions: sizes.partitions,
                width: sizes.width,
            };
            let engine = format!("the CPU backend at {}", count(threads as u64, "thread"));
            (profile, BackendChoice::Cpu, engine, "faer", bench)
        }
    };
    next(progress)?;
    // The CPU's gathers alone at several working sets, before the GCNs,
    // whose gathers are fitted with their shares of it.
    // The kernels timed alone: each sweep's point a few rounds, the
    // sweeps take the noise.
    let kernel_rounds = Rounds {
        min: 3,
        max: sizes.rounds.max.min(10),
        budget_s: sizes.rounds.budget_s / 50.0,
    };
    if let BackendChoice::Cpu = backend {
        let curve_sizes = gather::GatherSizes::up_to(sizes.rmat_scale);
        let rounds = kernel_rounds;
        profile.device.gather_curve = gather::gather_curve(&curve_sizes, &rounds, |_| {})?;
        let scales: Vec<String> = curve_sizes.scales.iter().map(|s| s.to_string()).collect();
        let widths: Vec<String> = curve_sizes.widths.iter().map(|w| w.to_string()).collect();
        put(
            &mut sources,
            "device.gather_curve",
            format!(
                "the forward SpMM alone ({engine}; rows by destination, weighted as the \
                 GCN's), on R-MAT graphs (Graph500 parameters, {} edges a node and a \
                 self-loop) of scales {}, at widths {}: seconds over edges, the median over \
                 {} sweeps over the points of each point's median of at least {} rounds \
                 after one left out; the fits of the forward gathers (sparse, and \
                 sparse_masked for those that mask their input) are made with each \
                 gather's share of it taken out (on_curve)",
                gather::EDGE_FACTOR,
                scales.join(", "),
                widths.join(", "),
                gather::SWEEPS,
                rounds.min
            ),
        );
    }
    next(progress)?;
    // The CPU's loss kernels alone at several class counts: a time a row
    // and a byte.
    let mut loss_source = None;
    let loss_fit = match backend {
        BackendChoice::Cpu => {
            let rounds = kernel_rounds;
            let fit = loss::loss_fit(&loss::LOSS_CLASSES, sizes.loss_rows, &rounds)?;
            let classes: Vec<String> = fit.points.iter().map(|p| p.classes.to_string()).collect();
            let times: Vec<String> = fit
                .points
                .iter()
                .map(|p| format!("{:.1}", p.seconds / p.rows as f64 * 1e9))
                .collect();
            match &fit.fit {
                Some(_) => {
                    loss_source = Some(format!(
                    "The loss (the softmax class): the CPU backend's loss kernels alone ({engine}: \
                     softmax cross-entropy over the train mask, the accuracy of three masks, \
                     and the backward) over {} rows of {} classes, labels and masks (0.6, 0.2, \
                     0.2 of the rows) drawn at random: {} ns a row, the median over {} sweeps \
                     of each point's median of at least {} rounds; fitted seconds = bytes / \
                     bytes_per_s + rows × seconds_per_row (the loss and its backward each \
                     charged half the pair's time a row) by least squares weighed by each \
                     point's time",
                    sizes.loss_rows,
                    classes.join(", "),
                    times.join(", "),
                    loss::SWEEPS,
                    rounds.min
                ))
                }
                None => notes.push(format!(
                    "the loss kernels' time a row and a byte could not be fitted ({} ns a \
                     row at {} classes): the loss is priced by its math",
                    times.join(", "),
                    classes.join(", ")
                )),
            }
            fit.fit
        }
        _ => None,
    };
    next(progress)?;
    // Planned with placeholder rates: a retain-all plan does not
    // depend on them.
    let placeholder = 1e9;
    profile.device.dense_flops_per_s = placeholder;
    profile.device.hbm_bytes_per_s = placeholder;
    profile.device.sparse_bytes_per_s = placeholder;
    let graph = options.graph.as_ref();
    if let Some((name, _)) = graph {
        profile.description.push_str(&format!(
            "; the GCN's operators timed on the graph {name} (--graph)"
        ));
    }
    let rates = compute::training_rates(
        bench,
        graph.map(|(_, dataset)| compute::GivenGraph {
            dataset,
            // What is free now, the graph loaded: the least of
            // MemAvailable, the address-space limit and the cgroup's.
            host_free: crate::memory::available().unwrap_or_else(|| crate::memory::Available {
                bytes: memory.available_bytes,
                source: format!("MemAvailable in {}", options.meminfo_path.display()),
            }),
        }),
        &profile,
        &sizes.rounds,
        &backend,
    )?;
    notes.extend(fallback_notes(
        &rates.class_rates,
        !rates.row_runs.is_empty(),
    ));
    let wide = rates.wide();
    profile.device.dense_flops_per_s = wide.flops_per_s;
    profile.device.dense_shapes = rates.dense_shapes();
    profile.device.hbm_bytes_per_s = rates.elementwise_bytes_per_s;
    profile.device.sparse_bytes_per_s = rates.gather_bytes_per_s;
    profile.device.scatter_bytes_per_s = Some(rates.scatter_bytes_per_s);
    profile.device.transpose_seconds_per_edge = rates.transpose_seconds_per_edge;
    profile.device.softmax_flops_per_s = Some(rates.loss_flops_per_s);
    next(progress)?;
    let attention = compute::attention_rate(bench, &profile, &sizes.rounds, &backend)?;
    profile.device.attention_bytes_per_s = Some(attention.bytes_per_s);
    profile.device.attention_backward_bytes_per_s = Some(attention.backward_bytes_per_s);
    profile.device.edge_softmax_bytes_per_s = Some(attention.edge_softmax_bytes_per_s);
    profile.device.class_rates = rates
        .class_rates
        .iter()
        .chain(&attention.class_rates)
        .chain(&loss_fit)
        .cloned()
        .collect();
    next(progress)?;
    let masks = compute::mask_rate(bench, &profile, &sizes.rounds, &backend)?;
    profile.device.mask_seconds_per_element = Some(masks.seconds_per_element);
    // The wide-to-narrow projection's rate among the GEMM shapes, unless
    // one of them is as intense.
    let projection = masks
        .projection
        .filter(|p| p.flops_per_s.is_finite() && p.flops_per_byte.is_finite())
        .filter(|p| {
            let shapes = &profile.device.dense_shapes;
            let apart = |s: &DenseShape| (s.flops_per_byte / p.flops_per_byte - 1.0).abs() > 1e-6;
            shapes.iter().all(apart)
        });
    if let Some(p) = projection {
        profile.device.dense_shapes.push(DenseShape {
            flops_per_byte: p.flops_per_byte,
            flops_per_s: p.flops_per_s,
        });
        profile
            .device
            .dense_shapes
            .sort_by(|a, b| a.flops_per_byte.total_cmp(&b.flops_per_byte));
    }
    next(progress)?;
    let overhead = compute::op_overhead(&profile, sizes.overhead_iterations, &backend)?;
    profile.device.op_overhead_s = overhead.op_overhead_s;
    probe.point("the end")?;
    let steadiness = Steadiness {
        other_cores: cpu_times
            .zip(host::CpuTimes::now())
            .and_then(|(a, b)| a.others_until(&b)),
        ..probe.steadiness()
    };
    put(
        &mut sources,
        "steadiness",
        format!(
            "the probe ({}: an SpMM over an R-MAT graph of scale {} at {} floats a row, a GEMM \
             of {} rows at 128 by 128 and a copy of {}, on the CPU at {}) timed as each of \
             the measurement's {} stages started and after the last, each point the median \
             of {} runs; other_cores: the CPU time of the whole machine (/proc/stat, steal \
             included) less this process's over the measurement, over its length",
            probe::PROBE,
            probe::PROBE_SCALE,
            probe::PROBE_WIDTH,
            probe::GEMM_ROWS,
            mib(probe::COPY_BYTES as u64),
            count(u64::from(steadiness.threads), "thread"),
            STAGES.len(),
            probe::RUNS_A_POINT
        ),
    );
    profile.steadiness = Some(steadiness);

    let on_graph = match graph {
        Some((name, dataset)) => format!(
            "a 3-layer GCN of hidden width {} (dropout 0.5) on the graph {name} ({} nodes, {} \
             edges, {} features, {} classes, given by --graph)",
            bench.width, rates.nodes, rates.edges, dataset.features, dataset.classes
        ),
        None => format!(
            "a 3-layer GCN of width {} ({} classes, dropout 0.5) on an R-MAT graph (Graph500 \
             parameters, scale {}: {} nodes, {} edges)",
            bench.width,
            bench.classes(),
            bench.scale,
            rates.nodes,
            rates.edges
        ),
    };
    let run = format!(
        "timed inside training: every operator of {} retain-all iterations (after one \
             left out) of {on_graph} in {} partitions, through the executor and {engine}; \
             flops and bytes as the workload counts them; the median over iterations",
        rates.iterations, bench.partitions
    );
    put(
        &mut sources,
        "device.dense_flops_per_s",
        format!(
            "f32 GEMM at {} -> {}: the linear layers and their backward ({gemm}), {run}",
            wide.d_in, wide.d_out
        ),
    );
    let half_run = format!(
        "an identical GCN of width {} ({}) on the same graph and partitions, {} iterations \
             after one left out",
        bench.half_width(),
        match graph {
            Some(_) => "hidden; the graph's own features",
            None => "features and hidden",
        },
        rates.half_iterations
    );
    let shapes: Vec<String> = rates
        .dense
        .iter()
        .map(|r| {
            format!(
                "{} -> {} ({:.1} flops per byte)",
                r.d_in, r.d_out, r.flops_per_byte
            )
        })
        .collect();
    let projection_source = match projection {
        Some(p) => format!(
            "; and at {} -> {} ({:.1} flops per byte): the first layer's projection and its \
             backward in the dropout measurement's GCN without dropout (see \
             device.mask_seconds_per_element: {} partitions of about {} rows), a wide input \
             projected to a narrow layer as a citation graph's first layer is",
            p.d_in,
            p.d_out,
            p.flops_per_byte,
            masks.partitions,
            masks.nodes / u64::from(masks.partitions.max(1))
        ),
        None => String::new(),
    };
    put(
        &mut sources,
        "device.dense_shapes",
        format!(
            "the GEMM rate at {} (least intense first): the linear layers and their \
                 backward ({gemm}) of the GCN of width {}, {run}, and of {half_run} (the \
                 shapes whose input is {} wide){projection_source}",
            shapes.join(", "),
            bench.width,
            bench.half_width()
        ),
    );
    put(
        &mut sources,
        "device.hbm_bytes_per_s",
        format!("element-wise: ReLU with dropout, its mask and its backward, {run}"),
    );
    // With a curve, the gathers' bytes are counted at their share of it.
    let top = match profile.device.gather_curve.is_empty() {
        true => "",
        false => {
            "; each gather's bytes counted at its share of device.gather_curve, so that the \
             rate is a gather's at the curve's largest working set"
        }
    };
    put(
        &mut sources,
        "device.sparse_bytes_per_s",
        format!(
            "SpMM effective gather bandwidth: the forward aggregations over every block \
                 (the first layer's with input dropout fused), {run}{top}"
        ),
    );
    put(
        &mut sources,
        "device.scatter_bytes_per_s",
        format!(
            "transposed SpMM effective scatter bandwidth: the backward aggregations over \
                 every block, {run}"
        ),
    );
    if let Some(transpose) = rates.transpose_seconds_per_edge {
        put(
            &mut sources,
            "device.transpose_seconds_per_edge",
            format!(
                "{:.3} ns per edge to build a block's transpose for the transposed \
                     SpMM: the GCN of width {} timed again with every transpose built afresh \
                     (the backend otherwise keeps the last block's), its backward \
                     aggregations' added median seconds over the edges added",
                transpose * 1e9,
                bench.half_width()
            ),
        );
    }
    put(
        &mut sources,
        "device.mask_seconds_per_element",
        format!(
            "{:.3} ns per element a projection masks with dropout: timed inside training, every operator \
             of {} retain-all iterations (after one left out) of a 2-layer GCN of {} input \
             features and {} hidden (the first layer projecting first, its input dropped in \
             the projection and its backward) on an R-MAT graph (scale {}: {} nodes) in {} \
             partitions, through {engine}, with dropout 0.5 and again without; the masking \
             operators' median seconds per iteration ({:.3} ms with, {:.3} ms without) their \
             difference over the {} elements they mask (`cost.masked`){}",
            masks.seconds_per_element * 1e9,
            masks.iterations,
            masks.features,
            masks.hidden,
            masks.scale,
            masks.nodes,
            masks.partitions,
            masks.with_s * 1e3,
            masks.without_s * 1e3,
            masks.masked,
            in_turn_note(masks.in_turn, 2, "GCNs")
        ),
    );
    let gat_run = format!(
        "timed inside training: every operator of {} retain-all iterations (after one \
             left out) of a 2-layer GAT of {} heads, {} hidden, dropout 0.5, on an R-MAT graph (scale \
             {}: {} nodes, {} edges) in {} partitions, through {engine}; bytes as the \
             workload counts them; the median over iterations",
        attention.iterations,
        attention.heads,
        attention.hidden,
        attention.scale,
        attention.nodes,
        attention.edges,
        attention.partitions
    );
    let others: Vec<String> = attention.runs[1..]
        .iter()
        .map(|run| {
            format!(
                "{} in {} ({} iterations after one left out)",
                fateplan_planner::units::count(run.heads as u64, "head"),
                fateplan_planner::units::count(run.partitions as u64, "partition"),
                run.iterations
            )
        })
        .collect();
    let row_runs = match &rates.row_runs[..] {
        [] if bench.partitions > 1 => format!(
            ", without a time per row: the GCNs that tell rows apart (in one partition and in \
             {}) do not all fit the device, or the graph has fewer vertices than partitions",
            2 * bench.partitions
        ),
        [] => String::new(),
        runs => {
            let mut runs: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "{} in {} ({} iterations after one left out)",
                        r.width,
                        count(r.partitions as u64, "partition"),
                        r.iterations
                    )
                })
                .collect();
            let last = runs.pop().unwrap_or_default();
            let runs = match runs.is_empty() {
                true => last,
                false => format!("{} and {last}", runs.join(", ")),
            };
            format!(
                ", and, for a time per row (their bytes moved once a row left to it), of GCNs \
                 of hidden width {runs}: a row is walked once a layer in one partition and once \
                 a block in several, and a narrow GCN's rows' bytes are few beside their walks"
            )
        }
    };
    let gcn_turn = in_turn_note(rates.in_turn, 2 + rates.row_runs.len(), "GCNs");
    let gat_turn = in_turn_note(attention.in_turn, attention.runs.len(), "GATs");
    let gat_layers = match others.is_empty() {
        true => format!("over its two layers, {gat_run}"),
        false => format!(
            "over its two layers, {gat_run}, and over the two layers of the same GAT of {} \
             (one partition walks each row in one block where several walk it once a block; \
             one head scores each edge once where eight score it eight times)",
            others.join(", ")
        ),
    };
    put(
        &mut sources,
        "device.attention_bytes_per_s",
        format!(
            "GAT's attention operators (edge scores and attention-weighted \
                 aggregation), {gat_run}"
        ),
    );
    put(
        &mut sources,
        "device.attention_backward_bytes_per_s",
        format!("the backward of GAT's attention operators, {gat_run}"),
    );
    put(
        &mut sources,
        "device.edge_softmax_bytes_per_s",
        format!("GAT's edge softmaxes, {gat_run}"),
    );
    put(
        &mut sources,
        "device.class_rates",
        format!(
            "each class fitted seconds = bytes / bytes_per_s + edges × \
                 seconds_per_edge + edge_heads × seconds_per_edge_head + rows × \
                 seconds_per_row by least squares of the relative misses (each point's miss \
                 over its seconds, so that a small run counts as much as a large one) over the \
                 medians of its layers \
                 (edge_heads: edges times their heads, recorded on GAT's edge operators; \
                 rows: those walked once a block, recorded on them and on every \
                 aggregation and its backward; without the heads where \
                 they cannot be told apart, then without the rows instead, then without \
                 either, then a bandwidth alone where bytes and edges cannot be told apart \
                 either, or where a fit gives a bandwidth that is not positive or a \
                 negative time). \
                 The GCN's aggregations (sparse, scatter): over the layers of the GCN of \
                 width {} ({run}) and of {half_run}, whose aggregations move about half \
                 the bytes an edge over the same edges{row_runs}{gcn_turn}; the first layer's \
                 gathers, which \
                 mask their input as they gather, apart (sparse_masked: that layer of \
                 each run). GAT's \
                 operator classes (edge scores, aggregation, edge softmax, attention \
                 backward, node scores, their backward, ELU): {gat_layers}{gat_turn}{on_curve}\
                 {loss}",
            bench.width,
            on_curve = match profile.device.gather_curve.is_empty() {
                true => "",
                false => {
                    ". The forward gathers' fits (sparse, and sparse_masked for those that \
                     mask their input) are of the gathers at the largest working set of \
                     device.gather_curve, each point's bytes and edges counted at its share \
                     of the curve (on_curve); device.sparse_bytes_per_s likewise"
                }
            },
            loss = match &loss_source {
                Some(text) => format!(". {text}"),
                None => String::new(),
            }
        ),
    );
    put(
        &mut sources,
        "device.softmax_flops_per_s",
        format!(
            "softmax math: the loss (softmax cross-entropy with the accuracy of \
                 three masks) and its backward, {run}"
        ),
    );
    put(
        &mut sources,
        "device.op_overhead_s",
        format!(
            "training iterations of a GCN whose kernels do next to nothing ({} nodes, \
                 4 features, 4 hidden, 4 partitions: {} operators) through the executor \
                 and {engine}, retain-all; seconds per iteration over operators, \
                 mean of {} iterations after a warm-up",
            overhead.nodes, overhead.operators, overhead.iterations
        ),
    );
    profile.sources = sources;
    profile.validate()?;
    for (field, _) in profile.figures() {
        if !profile.sources.contains_key(field) {
            return Err(Error::Internal(format!(
                "the measured profile has no source for {field}"
            )));
        }
    }
    progress(Progress {
        done: STAGES.len() as u32,
        total: STAGES.len() as u32,
        stage: "done",
    });
    Ok(Measured {
        profile,
        notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What was measured of the host.
struct Host {
    memory: MemInfo,
    cores: u32,
    copy_bytes_per_s: f64,
}

/// The CPU backend's profile; device rates, PCIe and the overhead are
/// filled in by the caller.
fn cpu_profile(
    name: &str,
    sizes_label: &str,
    cpu: &str,
    threads: usize,
    host: &Host,
    ssd: &SsdFigures,
) -> Profile {
    let Host {
        memory,
        cores,
        copy_bytes_per_s: copy_rate,
    } = host;
    Profile {
        format_version: PROFILE_FORMAT_VERSION,
        name: name.to_string(),
        description: format!(
            "Measured by `fateplan profile` ({} sizes): {cpu}, {cores} CPUs, {} GiB RAM, no \
             GPU; the CPU backend at {} (device and host tiers are arenas in RAM)",
            sizes_label,
            memory.total_bytes >> 30,
            count(threads as u64, "thread")
        ),
        device: DeviceProfile {
            kind: DeviceKind::Cpu,
            model: format!("{cpu} (CPU backend, {})", count(threads as u64, "thread")),
            count_max: 1,
            hbm_bytes: memory.total_bytes / 3,
            hbm_bytes_per_s: 0.0,
            dense_flops_per_s: 0.0,
            dense_shapes: Vec::new(),
            sparse_bytes_per_s: 0.0,
            scatter_bytes_per_s: None,
            transpose_seconds_per_edge: None,
            mask_seconds_per_element: None,
            softmax_flops_per_s: None,
            attention_bytes_per_s: None,
            attention_backward_bytes_per_s: None,
            edge_softmax_bytes_per_s: None,
            class_rates: Vec::new(),
            gather_curve: Vec::new(),
            op_overhead_s: 0.0,
            threads: u32::try_from(threads).ok(),
        },
        host: HostProfile {
            memory_bytes: memory.total_bytes / 2,
            memory_bytes_per_s: *copy_rate,
            cores: *cores,
        },
        pcie: PcieProfile {
            h2d_bytes_per_s: 0.0,
            d2h_bytes_per_s: 0.0,
            latency_s: 0.0,
        },
        peer: None,
        network: None,
        ssd: ssd_profile(ssd),
        sources: BTreeMap::new(),
        steadiness: None,
    }
}

fn ssd_profile(ssd: &SsdFigures) -> SsdProfile {
    SsdProfile {
        capacity_bytes: ssd.capacity_bytes,
        read_bytes_per_s: ssd.read_bytes_per_s,
        write_bytes_per_s: ssd.write_bytes_per_s,
        read_latency_s: ssd.read_latency_s,
        write_latency_s: ssd.write_latency_s,
    }
}

/// A GPU's profile from [`GpuFigures`]: the host tier gets all of RAM.
fn gpu_profile(
    name: &str,
    gpu: &GpuFigures,
    host: &Host,
    ssd: &SsdFigures,
    sources: &mut BTreeMap<String, String>,
) -> Profile {
    let Host {
        memory,
        cores,
        copy_bytes_per_s,
    } = host;
    for (key, text) in &gpu.sources {
        sources.insert(key.to_string(), format!("measured: {text}"));
    }
    sources.insert(
        "host.memory_bytes".into(),
        format!("measured: MemTotal ({})", memory.total_bytes),
    );
    Profile {
        format_version: PROFILE_FORMAT_VERSION,
        name: name.to_string(),
        description: format!(
            "Measured by `fateplan profile`: {} x {}, {} GiB RAM",
            gpu.count,
            gpu.model,
            memory.total_bytes >> 30
        ),
        device: DeviceProfile {
            kind: DeviceKind::Gpu,
            model: gpu.model.clone(),
            count_max: gpu.count,
            hbm_bytes: gpu.hbm_bytes,
            // Measured by training on the GPU, after this.
            hbm_bytes_per_s: 0.0,
            dense_flops_per_s: 0.0,
            dense_shapes: Vec::new(),
            sparse_bytes_per_s: 0.0,
            scatter_bytes_per_s: None,
            transpose_seconds_per_edge: None,
            mask_seconds_per_element: None,
            softmax_flops_per_s: None,
            attention_bytes_per_s: None,
            attention_backward_bytes_per_s: None,
            edge_softmax_bytes_per_s: None,
            class_rates: Vec::new(),
            gather_curve: Vec::new(),
            op_overhead_s: 0.0,
            threads: None,
        },
        host: HostProfile {
            memory_bytes: memory.total_bytes,
            memory_bytes_per_s: *copy_bytes_per_s,
            cores: *cores,
        },
        pcie: PcieProfile {
            h2d_bytes_per_s: gpu.h2d_bytes_per_s,
            d2h_bytes_per_s: gpu.d2h_bytes_per_s,
            latency_s: gpu.pcie_latency_s,
        },
        peer: None,
        network: None,
        ssd: ssd_profile(ssd),
        sources: BTreeMap::new(),
        steadiness: None,
    }
}

/// Records how `key` was measured.
fn put(sources: &mut BTreeMap<String, String>, key: &str, text: String) {
    sources.insert(key.to_string(), format!("measured: {text}"));
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// Runs `round` once to warm up, then as [`Rounds`] says (at least
/// `min` rounds, until `budget_s` has passed, at most `max`); returns
/// what the counted rounds returned.
pub fn run_rounds<T>(rounds: &Rounds, mut round: impl FnMut() -> Result<T>) -> Result<Vec<T>> {
    round()?;
    let started = Instant::now();
    let mut values = Vec::new();
    let max = rounds.max.max(rounds.min).max(1);
    while values.len() < max as usize {
        values.push(round()?);
        let enough = values.len() >= rounds.min.max(1) as usize;
        if enough && started.elapsed().as_secs_f64() >= rounds.budget_s {
            break;
        }
    }
    Ok(values)
}

/// [`run_rounds`], whose rounds return a positive figure; returns the
/// median of the counted rounds' figures, and their number.
pub fn median_of_rounds(
    rounds: &Rounds,
    mut round: impl FnMut() -> Result<f64>,
) -> Result<(f64, u32)> {
    let mut values = run_rounds(rounds, || {
        let value = round()?;
        if !(value.is_finite() && value > 0.0) {
            return Err(Error::Internal(format!(
                "a measurement gave {value}: the timer did not advance"
            )));
        }
        Ok(value)
    })?;
    let n = values.len() as u32;
    Ok((median(&mut values), n))
}

/// The median (the mean of the middle two of an even count); 0 when empty.
pub use fateplan_planner::units::median;

/// How `count` runs (`what`) of a fit were timed
/// ([`compute::InTurn`]): in turn, or one after another and why; nothing
/// for one run ([`compute::InTurn::One`]).
fn in_turn_note(how: compute::InTurn, count: usize, what: &str) -> String {
    use compute::InTurn;
    let after = |why: &str| format!(" (the {count} {what} timed one after another: {why})");
    match how {
        InTurn::One => String::new(),
        InTurn::Yes => format!(
            " (the {count} {what} timed in turn, an iteration of each after another, so that \
             the machine's speed drifting over the measurement slows them alike)"
        ),
        InTurn::Gpu => after("on a GPU each sizes its own arena"),
        InTurn::NoRoom => after("together they need more than half the host memory free"),
        InTurn::MemoryUnknown => after("how much host memory is free is not known"),
    }
}

/// A note for each aggregation class fitted without a time per row where
/// the runs that tell rows apart ran (`rows_told`): its time per row came
/// out negative, and it was fitted a bandwidth and a time per edge alone.
/// Such a fit agrees with the others on the profile's own graph and can
/// price a small graph's aggregations far from them (2.2 times apart in
/// docs/profile.md, "The machine's speed: the probe").
fn fallback_notes(
    class_rates: &[fateplan_planner::profile::ClassRate],
    rows_told: bool,
) -> Vec<String> {
    use fateplan_planner::workload::ComputeClass;
    let aggregations = [
        ComputeClass::Sparse,
        ComputeClass::SparseMasked,
        ComputeClass::Scatter,
    ];
    class_rates
        .iter()
        .filter(|r| rows_told && aggregations.contains(&r.class) && r.seconds_per_row == 0.0)
        .map(|r| {
            format!(
                "the {} fit has no time per row (fitted one, it came out negative): a bandwidth \
                 and a time per edge alone can price a graph smaller than the profile's far \
                 from what its aggregations take; measure again, or profile on the graph to \
                 train (--graph)",
                r.class
            )
        })
        .collect()
}

/// Fills `words` with a cheap deterministic pattern (splitmix64).
pub(crate) fn fill_pattern(words: &mut [u64], seed: u64) {
    let mut state = seed;
    for word in words {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        *word = z ^ (z >> 31);
    }
}

/// Fills `values` with finite values in `[-1, 1)` from [`fill_pattern`].
pub(crate) fn fill_pattern_f32(values: &mut [f32], seed: u64) {
    let mut words = vec![0u64; values.len()];
    fill_pattern(&mut words, seed);
    for (v, w) in values.iter_mut().zip(words) {
        *v = (w >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fateplan_planner::workload::ComputeClass;

    #[test]
    fn an_aggregation_fit_without_its_time_per_row_is_noted() {
        use fateplan_planner::profile::ClassRate;
        let rate = |class, seconds_per_row| ClassRate {
            class,
            bytes_per_s: 2e10,
            seconds_per_edge: 5e-9,
            seconds_per_edge_head: 0.0,
            seconds_per_row,
            on_curve: true,
        };
        let rates = [
            rate(ComputeClass::Sparse, 0.0),
            rate(ComputeClass::Scatter, 7e-9),
            rate(ComputeClass::Softmax, 0.0),
        ];
        let notes = fallback_notes(&rates, true);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("the sparse fit has no time per row"),
            "{notes:?}"
        );
        // Without the runs that tell rows apart, none has one.
        assert!(fallback_notes(&rates, false).is_empty());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn rounds_warm_up_then_count_between_min_and_max() {
        let mut calls = 0;
        let rounds = Rounds {
            min: 3,
            max: 5,
            budget_s: 0.0,
        };
        let (value, n) = median_of_rounds(&rounds, || {
            calls += 1;
            Ok(calls as f64)
        })
        .unwrap();
        assert_eq!((calls, n), (4, 3));
        assert_eq!(value, 3.0);
        let zero = median_of_rounds(&Rounds::tiny(), || Ok(0.0)).unwrap_err();
        assert!(zero.to_string().contains("timer"));
    }

    #[test]
    fn patterns_are_deterministic_and_bounded() {
        let (mut a, mut b) = (vec![0f32; 100], vec![0f32; 100]);
        fill_pattern_f32(&mut a, 1);
        fill_pattern_f32(&mut b, 1);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
    }

    fn ssd_figures() -> SsdFigures {
        SsdFigures {
            capacity_bytes: 1 << 40,
            write_bytes_per_s: 1e9,
            read_bytes_per_s: 2e9,
            write_latency_s: 1e-4,
            read_latency_s: 2e-4,
            rounds: 2,
            mode: "io_uring, O_DIRECT".into(),
            direct: true,
        }
    }

    /// A GPU's figures, with the compute rates measured after them, make a
    /// valid GPU profile with all of RAM as the host tier.
    #[test]
    fn measured_gpu_figures_make_a_gpu_profile() {
        let fields = [
            "device.count_max",
            "device.hbm_bytes",
            "pcie.h2d_bytes_per_s",
            "pcie.d2h_bytes_per_s",
            "pcie.latency_s",
        ];
        let gpu = GpuFigures {
            model: "a GPU".into(),
            count: 2,
            hbm_bytes: 80 << 30,
            h2d_bytes_per_s: 2.5e10,
            d2h_bytes_per_s: 2.4e10,
            pcie_latency_s: 1e-5,
            sources: fields.iter().map(|&f| (f, "a test".to_string())).collect(),
        };
        let memory = MemInfo {
            total_bytes: 512 << 30,
            available_bytes: 500 << 30,
        };
        let mut sources = BTreeMap::new();
        let host = Host {
            memory,
            cores: 64,
            copy_bytes_per_s: 5e10,
        };
        let mut profile = gpu_profile("g", &gpu, &host, &ssd_figures(), &mut sources);
        // The compute rates come next, from training on the GPU.
        let d = &mut profile.device;
        assert_eq!(
            (
                d.hbm_bytes_per_s,
                d.dense_flops_per_s,
                d.sparse_bytes_per_s,
                d.op_overhead_s
            ),
            (0.0, 0.0, 0.0, 0.0)
        );
        (d.hbm_bytes_per_s, d.dense_flops_per_s) = (2e12, 1e14);
        (d.sparse_bytes_per_s, d.op_overhead_s) = (5e11, 5e-6);
        profile.sources = sources;
        profile.validate().unwrap();
        assert_eq!(profile.pcie.h2d_bytes_per_s, 2.5e10);
        assert_eq!(profile.device.kind, DeviceKind::Gpu);
        assert_eq!(profile.host.memory_bytes, 512 << 30);
        assert_eq!(profile.device.count_max, 2);
        assert!(profile.sources["pcie.h2d_bytes_per_s"].starts_with("measured: "));
    }

    #[test]
    fn the_gpu_is_measured_or_skipped_with_the_probe_s_reason() {
        let outcome = gpu::measure_gpu(1 << 20, 2);
        match (crate::cuda::probe(0), outcome) {
            // Without a driver (CI): the probe's own words.
            (Err(e), GpuOutcome::Skipped(why)) => {
                assert!(why.contains(&e.to_string()), "{why}");
                assert!(why.ends_with(gpu::CPU_FIGURES), "{why}");
            }
            (Ok(info), GpuOutcome::Measured(gpu)) => {
                assert_eq!(gpu.model, info.name);
                assert_eq!(gpu.hbm_bytes, info.total_bytes);
                assert!(gpu.h2d_bytes_per_s > 0.0 && gpu.d2h_bytes_per_s > 0.0);
                assert!(gpu.pcie_latency_s > 0.0);
            }
            (probe, outcome) => panic!("probe {probe:?}, but {outcome:?}"),
        }
    }

    #[test]
    fn a_whole_measurement_at_tiny_sizes_is_a_valid_profile() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = Sizes {
            label: "tiny",
            rounds: Rounds::tiny(),
            ssd_rounds: Rounds::tiny(),
            copy_bytes: 1 << 16,
            lane_copy_bytes: 1 << 16,
            lane_set_bytes: 1 << 17,
            latency_requests: 2,
            ssd: SsdSizes {
                block_bytes: 1 << 16,
                round_bytes: 1 << 17,
                latency_requests: 2,
            },
            rmat_scale: 8,
            partitions: 2,
            width: 16,
            overhead_iterations: 2,
            loss_rows: 1 << 10,
        };
        let options = MeasureOptions {
            name: "tiny".into(),
            ssd_dir: dir.path().to_path_buf(),
            sizes,
            meminfo: "MemTotal: 1000 kB\nMemAvailable: 900 kB\n".into(),
            meminfo_path: PathBuf::from("meminfo"),
            cpuinfo: String::new(),
            graph: None,
        };
        let mut stages = Vec::new();
        let measured = measure(&options, &mut |p| stages.push(p.stage)).unwrap();
        assert_eq!(stages.len(), STAGES.len() + 1);
        assert_eq!(stages.last(), Some(&"done"));
        let profile = measured.profile;
        assert_eq!(profile.device.kind, DeviceKind::Cpu);
        assert_eq!(profile.host.memory_bytes, 1000 * 1024 / 2);
        assert_eq!(profile.device.hbm_bytes, 1000 * 1024 / 3);
        for (field, _) in profile.figures() {
            assert!(
                profile.sources[field].starts_with("measured: "),
                "{field}: {}",
                profile.sources[field]
            );
        }
        assert!(measured.notes.iter().any(|n| n.starts_with("no GPU")));
        // The GCN's aggregations and GAT's classes, each fitted once.
        let classes: Vec<ComputeClass> =
            profile.device.class_rates.iter().map(|r| r.class).collect();
        let mut expected = vec![
            ComputeClass::Sparse,
            ComputeClass::SparseMasked,
            ComputeClass::Scatter,
        ];
        expected.extend(compute::GAT_CLASSES);
        // Then the loss's, unless its kernels at these tiny sizes gave no
        // fit, which a note then says.
        if classes.last() == Some(&ComputeClass::Softmax) {
            expected.push(ComputeClass::Softmax);
        } else {
            assert!(measured
                .notes
                .iter()
                .any(|n| n.contains("could not be fitted")));
        }
        assert_eq!(classes, expected);
        // The gathers alone on its one graph (scale 8) at three widths.
        assert_eq!(profile.device.gather_curve.len(), 3);
        let again = Profile::from_json(&profile.to_json_pretty(), "measured.json").unwrap();
        assert_eq!(again, profile);
    }
}
