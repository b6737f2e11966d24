//! A graph shared out to the devices of a multi-device run.
//!
//! The vertices are split into `devices × partitions` ranges of the whole
//! graph, with the same normalisation over the whole graph's degrees;
//! device `d` owns ranges `d·P .. (d+1)·P`, its P partitions. The ranges
//! are the single-device split ([`ShareMethod::Ranges`]), or each
//! device's min-cut vertices, renumbered contiguous, cut into P equal
//! ranges ([`ShareMethod::Mincut`]; each device keeps its vertices'
//! numbers as given, [`GraphInput::row_ids`], which key the dropout
//! masks as on one device). Per device:
//!
//! - its **own** rows (features, labels, masks) and the blocks between its
//!   own partitions, as a single-device [`GraphInput`];
//! - its **halo**: per source partition index `s`, the rows of partition
//!   `s` of every other device that an edge leads from into this device,
//!   in rank order, and per own partition `p` the block `(p, s)` of those
//!   edges, whose columns index that halo ([`HaloInput`]);
//! - what it **sends**: per own partition `s` and per other device, the
//!   rows of `s` that device reads.
//!
//! Every device runs the same workload, built from the largest block and
//! partition over the devices (own and halo edges together), so one plan
//! serves all of them and their operators run in the same order: the
//! collectives inside the operators meet ([`crate::collective`]).

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{GnnShape, GnnSpec};
use fateplan_planner::workload::Workload;

use crate::blockcsr::{build_destinations, Adjacency, CsrBlock, Normalization, Split};
use crate::csr::{fill_rows, MAX_CSR_NODES};
use crate::dataset::Dataset;
use crate::edges::EdgeSource;
use crate::exec::data::BlockData;
use crate::gnn::{GraphInput, Hyper};
use crate::graph::GraphData;
use crate::Error;
use fateplan_kernels::Weighting;
use fateplan_planner::blocks::{partition_range, MAX_PARTITIONS};

/// One device's halo: what it receives and what it sends.
#[derive(Debug, Clone, Default)]
pub struct HaloInput {
    /// Block `(own p, s)` at `p * P + s` over the halo rows of source
    /// partition index `s`, when it has edges.
    pub blocks: Vec<Option<BlockData>>,
    /// `recv[s][e]`: rows of device `e`'s partition `s` in this device's
    /// halo (0 for itself). The halo of `s` is those rows, in rank order.
    pub recv: Vec<Vec<usize>>,
    /// `send[s][e]`: rows of this device's partition `s` (from its first
    /// row) that device `e` reads, ascending (empty for itself).
    pub send: Vec<Vec<Vec<u32>>>,
    /// `ids[s]`: the halo rows of source partition index `s`, in halo
    /// order, as the whole graph numbers them as given (they key GAT's
    /// attention masks).
    pub ids: Vec<Vec<u64>>,
}

impl HaloInput {
    /// Rows in the halo of source partition index `s`.
    pub fn rows(&self, s: usize) -> usize {
        self.recv[s].iter().sum()
    }

    /// Bytes the halo's blocks hold (they stay with the backend, outside
    /// the executor's tiers).
    pub fn block_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .flatten()
            .map(|b| (b.row_start.len() * 8 + b.columns.len() * 4 + b.weights.len() * 4) as u64)
            .sum()
    }
}

/// One device's share: its own rows as a single-device input, its halo.
#[derive(Debug, Clone)]
pub struct DeviceShare {
    pub input: GraphInput,
    pub halo: HaloInput,
}

/// How the vertices are shared out to the devices.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMethod {
    /// Device `d` owns the `d`-th of K equal ranges of vertex ids.
    #[default]
    Ranges,
    /// The min-cut partitioner ([`crate::partition`], in-edges balanced
    /// within its default tolerance, seed 1) picks each device's vertices;
    /// they are renumbered so each device's are contiguous (in their old
    /// order), and each device's vertices are cut into P equal ranges.
    /// The dropout masks stay keyed by the vertices' numbers as given
    /// ([`GraphInput::row_ids`]), as on one device.
    Mincut,
}

impl ShareMethod {
    pub fn name(self) -> &'static str {
        match self {
            ShareMethod::Ranges => "ranges",
            ShareMethod::Mincut => "mincut",
        }
    }

    pub fn parse(name: &str) -> Option<ShareMethod> {
        match name {
            "ranges" => Some(ShareMethod::Ranges),
            "mincut" => Some(ShareMethod::Mincut),
            _ => None,
        }
    }
}

/// What [`prepare_shared`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ShareStats {
    pub method: ShareMethod,
    /// Halo rows of the device with the most (the largest exchange in).
    pub halo_rows_max: u64,
    /// Halo rows over all devices.
    pub halo_rows_total: u64,
    /// Edges whose source is on another device, over all devices.
    pub halo_edges: u64,
    pub edges: u64,
}

/// The shares and the one workload every device runs.
pub struct SharedPrepared {
    pub workload: Workload,
    /// What the workload was built from.
    pub shape: GnnShape,
    /// The min-cut partitioning of the graph onto the devices, for min-cut
    /// shares: a member process given it ([`prepare_share_reading`]) does
    /// not partition again.
    pub owner: Option<Vec<u32>>,
    /// The shares built ([`Keep`]), in rank order.
    pub devices: Vec<DeviceShare>,
    /// Devices in the group, whose shares were built or not.
    pub group: usize,
    pub stats: ShareStats,
}

/// Whose shares [`prepare_shared_keeping`] builds. The workload and the
/// statistics are the whole group's whichever it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every device's (devices as threads of one process).
    All,
    /// One device's, by rank (a process of its own).
    One(usize),
    /// None (a launcher that plans, then starts a process per device).
    None,
}

impl Keep {
    fn keeps(self, rank: usize) -> bool {
        match self {
            Keep::All => true,
            Keep::One(r) => r == rank,
            Keep::None => false,
        }
    }
}

/// Shares `dataset` out to `devices` devices of `partitions` partitions
/// each, normalises the blocks for `hyper.model`, and builds the workload
/// every device runs, with every device's share.
pub fn prepare_shared(
    dataset: Dataset,
    hyper: &Hyper,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
) -> Result<SharedPrepared, Error> {
    prepare_shared_keeping(dataset, hyper, devices, partitions, method, Keep::All)
}

/// [`prepare_shared`] building only the shares `keep` names: a process
/// that trains one device holds its own rows, blocks and halo, not every
/// device's.
pub fn prepare_shared_keeping(
    dataset: Dataset,
    hyper: &Hyper,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
    keep: Keep,
) -> Result<SharedPrepared, Error> {
    let mut dataset = dataset;
    let edges = EdgeSource::owned(
        std::mem::take(&mut dataset.src),
        std::mem::take(&mut dataset.dst),
    );
    prepare(
        dataset, edges, hyper, devices, partitions, method, keep, None, None,
    )
}

/// [`prepare_shared_keeping`] for a dataset without its edges (`src` and
/// `dst` empty), whose edges come from `edges`, read a batch at a time:
/// a launcher that keeps no share ([`Keep::None`]) partitions the graph
/// and counts the shares' statistics without holding the edge list.
pub fn prepare_shared_from(
    dataset: Dataset,
    edges: EdgeSource<'_>,
    hyper: &Hyper,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
    keep: Keep,
) -> Result<SharedPrepared, Error> {
    refuse_held_edges(&dataset, &edges)?;
    prepare(
        dataset, edges, hyper, devices, partitions, method, keep, None, None,
    )
}

/// A dataset given with a source of its edges must not hold edges too.
fn refuse_held_edges(dataset: &Dataset, edges: &EdgeSource<'_>) -> Result<(), Error> {
    if dataset.src.is_empty() && dataset.dst.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(
        std::path::Path::new(&dataset.name),
        "edges",
        format!(
            "the dataset holds {} edges and a source of {} was given too",
            dataset.src.len().max(dataset.dst.len()),
            edges.len()
        ),
    ))
}

/// Reads the feature rows of vertices numbered as the graph gives them, in
/// the order given ([`crate::dataset::FeatureRows::rows`], normalised as
/// the run normalises them).
pub type ReadRows<'a> = &'a (dyn Fn(&[u64]) -> Result<Vec<f32>, Error> + Sync);

/// [`prepare_shared_keeping`] for the one device `rank`, from a dataset
/// without its features or edges (`x`, `src` and `dst` empty), whose
/// share's rows `read` reads and whose edges come from `edges`: a process
/// that trains one device reads its own rows, not the graph's, and holds
/// its own rows' edges, not the graph's (it reads the others to count
/// them). `owner`, where given, is the min-cut partitioning the group
/// shares ([`SharedPrepared::owner`]), so that the process does not
/// partition again (else it holds every edge to partition them).
#[allow(clippy::too_many_arguments)]
pub fn prepare_share_reading(
    dataset: Dataset,
    edges: EdgeSource<'_>,
    read: ReadRows<'_>,
    owner: Option<Vec<u32>>,
    hyper: &Hyper,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
    rank: usize,
) -> Result<SharedPrepared, Error> {
    refuse_held_edges(&dataset, &edges)?;
    prepare(
        dataset,
        edges,
        hyper,
        devices,
        partitions,
        method,
        Keep::One(rank),
        owner,
        Some(read),
    )
}

/// First bytes of a file of [`save_owner`].
const OWNER_MAGIC: &[u8; 8] = b"FPOWNER1";

/// Writes a partitioning of a graph's vertices onto `devices` devices to
/// `path`, as [`encode_owner`] does.
pub fn save_owner(path: &std::path::Path, owner: &[u32], devices: u32) -> Result<(), Error> {
    std::fs::write(path, encode_owner(owner, devices)).map_err(|e| Error::io(path, e))
}

/// A partitioning of a graph's vertices onto `devices` devices as bytes:
/// a tag, the vertex and device counts, then each vertex's device
/// (little-endian u64, u32, u32s).
pub fn encode_owner(owner: &[u32], devices: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(20 + owner.len() * 4);
    bytes.extend_from_slice(OWNER_MAGIC);
    bytes.extend_from_slice(&(owner.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&devices.to_le_bytes());
    for &o in owner {
        bytes.extend_from_slice(&o.to_le_bytes());
    }
    bytes
}

/// Reads a file of [`save_owner`], which must partition `nodes` vertices
/// onto `devices` devices.
pub fn load_owner(path: &std::path::Path, nodes: u64, devices: u32) -> Result<Vec<u32>, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode_owner(&bytes, path, nodes, devices)
}

/// The partitioning [`encode_owner`] wrote as `bytes` (read from `source`,
/// which errors name), which must partition `nodes` vertices onto
/// `devices` devices.
pub fn decode_owner(
    bytes: &[u8],
    source: &std::path::Path,
    nodes: u64,
    devices: u32,
) -> Result<Vec<u32>, Error> {
    let path = source;
    if bytes.len() < 20 || &bytes[..8] != OWNER_MAGIC {
        return Err(Error::invalid(
            path,
            "tag",
            "not a partitioning saved by fateplan",
        ));
    }
    let saved_nodes = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let saved_devices = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if (saved_nodes, saved_devices) != (nodes, devices) {
        return Err(Error::invalid(
            path,
            "header",
            format!(
                "{saved_nodes} vertices onto {saved_devices} devices; expected {nodes} onto \
                 {devices}"
            ),
        ));
    }
    let body = &bytes[20..];
    if body.len() as u64 != nodes * 4 {
        return Err(Error::invalid(
            path,
            "size",
            format!(
                "{} bytes of devices; {nodes} vertices need {}",
                body.len(),
                nodes * 4
            ),
        ));
    }
    let owner: Vec<u32> = body
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    if let Some(v) = owner.iter().position(|&o| o >= devices) {
        return Err(Error::invalid(
            path,
            format!("vertex {v}"),
            format!("device {} of {devices}", owner[v]),
        ));
    }
    Ok(owner)
}

/// What [`share_workload`] gives: the workload, the shares' statistics,
/// and what the workload was built from.
#[derive(Debug, Clone)]
pub struct ShareWorkload {
    pub workload: Workload,
    pub stats: ShareStats,
    pub shape: GnnShape,
}

/// The workload every device of a shared run trains and the shares'
/// statistics, from the graph's topology alone: what `train --devices`
/// plans for these `devices`, `partitions` and `method`, for the shape of
/// `spec` (its graph name aside: the workload is named after `graph`).
/// `owner`, where given, is the min-cut partitioning of `graph` onto
/// `devices` ([`crate::partition::Partitioning::mincut`] with the default
/// options), so that a caller who measured it does not partition twice
/// (with [`ShareMethod::Ranges`], which takes none, it is refused).
pub fn share_workload(
    graph: &GraphData,
    spec: &GnnSpec,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
    owner: Option<Vec<u32>>,
) -> Result<ShareWorkload, Error> {
    // Only the shape and the dropout (whose masks it prices) reach the
    // workload; the other training settings do not.
    let hyper = Hyper {
        model: spec.model,
        layers: spec.layers,
        hidden: spec.hidden,
        heads: spec.heads,
        order: spec.order,
        transposes: spec.transposes,
        sweeps: spec.sweeps,
        dropout: spec.dropout,
        lr: 0.0,
        weight_decay: 0.0,
        weight_decay_all_layers: false,
        seed: 0,
    };
    // No features, labels or masks: no share is kept, and the workload
    // needs their sizes only.
    let topology = Dataset {
        name: graph.name.clone(),
        nodes: graph.nodes,
        features: spec.features,
        classes: spec.classes,
        x: Vec::new(),
        y: Vec::new(),
        train_mask: Vec::new(),
        val_mask: Vec::new(),
        test_mask: Vec::new(),
        src: Vec::new(),
        dst: Vec::new(),
    };
    let shared = prepare(
        topology,
        &graph.edges,
        &hyper,
        devices,
        partitions,
        method,
        Keep::None,
        owner,
        None,
    )?;
    Ok(ShareWorkload {
        workload: shared.workload,
        stats: shared.stats,
        shape: shared.shape,
    })
}

/// [`prepare_shared_keeping`] from the graph's `edges` (the dataset's own
/// lists are empty), with the min-cut partitioning `owner` where the
/// caller has it, and the kept shares' feature rows read with `read`
/// where given (else taken from the dataset's `x`).
///
/// The edges are read twice, a batch at a time (a source of lists holds
/// them whole, as its caller gave them; a file or an R-MAT spec does
/// not): first for every vertex's in-degree, the edges per pair of partitions
/// and which vertices each device reads from the others; then for the
/// kept shares' own rows, which are all the blocks they build (where a
/// share is kept). Min-cut shares without `owner` read them twice more
/// before, to partition them ([`crate::partition::Partitioning::reading`]).
#[allow(clippy::too_many_arguments)]
fn prepare<'e>(
    mut dataset: Dataset,
    edges: impl std::borrow::Borrow<EdgeSource<'e>>,
    hyper: &Hyper,
    devices: u32,
    partitions: u32,
    method: ShareMethod,
    keep: Keep,
    owner: Option<Vec<u32>>,
    read: Option<ReadRows<'_>>,
) -> Result<SharedPrepared, Error> {
    // Edges the caller gave up are let go once read (`drop(edges)` below).
    let source: &EdgeSource<'e> = edges.borrow();
    let name = dataset.name.clone();
    let invalid =
        |field: &str, why: String| Error::invalid(std::path::Path::new(&name), field, why);
    if devices == 0 {
        return Err(invalid(
            "devices",
            "0: a run needs at least one device".into(),
        ));
    }
    if let Keep::One(rank) = keep {
        if rank >= devices as usize {
            return Err(invalid(
                "devices",
                format!("share {rank} of {devices} devices: expected a rank below {devices}"),
            ));
        }
    }
    let all = devices.checked_mul(partitions).ok_or_else(|| {
        invalid(
            "partitions",
            format!("{devices} devices × {partitions} partitions overflows"),
        )
    })?;
    if all > MAX_PARTITIONS {
        return Err(invalid(
            "partitions",
            if devices > MAX_PARTITIONS {
                format!(
                    "{partitions} per device on {devices} devices is {all} in all; the shares \
                     of one graph hold at most {MAX_PARTITIONS}, so at most {MAX_PARTITIONS} \
                     devices"
                )
            } else {
                format!(
                    "{partitions} per device on {devices} devices is {all} in all; the shares \
                     of one graph hold at most {MAX_PARTITIONS} ({} per device on {devices})",
                    MAX_PARTITIONS / devices
                )
            },
        ));
    }
    if all == 0 {
        return Err(invalid(
            "partitions",
            "0: expected at least 1 per device".into(),
        ));
    }
    if method == ShareMethod::Ranges && owner.is_some() {
        // A partitioning is the min-cut shares' input; ranges would drop it.
        return Err(invalid(
            "owner",
            "a min-cut partitioning was given, but the shares are vertex ranges".into(),
        ));
    }
    let n = dataset.nodes;
    if n == 0 || n > MAX_CSR_NODES {
        return Err(invalid(
            "nodes",
            format!("{n} is outside 1..={MAX_CSR_NODES}"),
        ));
    }
    if n < u64::from(all) {
        return Err(invalid(
            "partitions",
            format!(
                "{partitions} per device on {devices} devices is {all} in all, for a graph of \
                 {n} nodes: each partition needs one"
            ),
        ));
    }
    // The shares' vertex ranges; for min-cut shares, `new[v]`: the number
    // of the vertex numbered `v` as the graph was given, and `old[w]`:
    // the vertex numbered `w`.
    let (split, new, old) = match method {
        ShareMethod::Ranges => (
            Split::Equal {
                nodes: n,
                partitions: all,
            },
            None,
            None,
        ),
        ShareMethod::Mincut => {
            let owner = match owner {
                Some(owner) => owner,
                None => {
                    crate::partition::Partitioning::reading(
                        crate::partition::Method::Mincut,
                        n,
                        source,
                        devices,
                        &crate::partition::PartitionOptions::default(),
                    )?
                    .owner
                }
            };
            let (split, new, old) = mincut_numbering(&name, n, devices, partitions, &owner)?;
            permute_vertices(&mut dataset, &old);
            (split, Some(new), Some(old))
        }
    };
    let (k, p, kp) = (devices as usize, partitions as usize, all as usize);
    let starts: Vec<u64> = (0..all).map(|g| split.range(g).0).chain([n]).collect();
    // The kept shares' feature rows, gathered from the graph's order (the
    // features are not renumbered), and the whole dropped before the
    // adjacency is built: a process keeping one share holds its rows,
    // not a second copy of every row.
    let f = dataset.features as usize;
    let kept_any = (0..k).any(|d| keep.keeps(d));
    let held = n as usize * f;
    if kept_any && read.is_none() && dataset.x.len() != held {
        return Err(invalid(
            "x",
            format!(
                "{} feature values, but {n} nodes of {f} features need {held}",
                dataset.x.len()
            ),
        ));
    }
    let mut own_x: Vec<Vec<f32>> = {
        let x = std::mem::take(&mut dataset.x);
        (0..k)
            .map(|d| {
                if !keep.keeps(d) {
                    return Ok(Vec::new());
                }
                let (lo, hi) = (starts[d * p] as usize, starts[(d + 1) * p] as usize);
                if let Some(read) = read {
                    let ids: Vec<u64> = match &old {
                        Some(old) => old[lo..hi].to_vec(),
                        None => (lo as u64..hi as u64).collect(),
                    };
                    let rows = read(&ids)?;
                    if rows.len() != ids.len() * f {
                        return Err(invalid(
                            "x",
                            format!(
                                "device {d}'s {} rows of {f} features read as {} values",
                                ids.len(),
                                rows.len()
                            ),
                        ));
                    }
                    return Ok(rows);
                }
                Ok(match &old {
                    Some(old) => {
                        let mut rows = Vec::with_capacity((hi - lo) * f);
                        for &v in &old[lo..hi] {
                            let v = v as usize;
                            rows.extend_from_slice(&x[v * f..(v + 1) * f]);
                        }
                        rows
                    }
                    None => x[lo * f..hi * f].to_vec(),
                })
            })
            .collect::<Result<_, Error>>()?
    };

    // The kept devices' vertices: one contiguous range (every device's,
    // one device's, or none).
    let kept: Vec<usize> = (0..k).filter(|&d| keep.keeps(d)).collect();
    let (first_kept, end_kept) = match (kept.first(), kept.last()) {
        (Some(&a), Some(&b)) => (a, b + 1),
        _ => (0, 0),
    };
    let (kept_lo, kept_hi) = (starts[first_kept * p], starts[end_kept * p]);
    let number = |v: u64| new.as_ref().map_or(v, |new| u64::from(new[v as usize]));

    // First pass: in-degrees, edges per pair of partitions, and reads[d]:
    // the vertices of other devices that an edge leads from into d.
    let mut degree = vec![0u64; n as usize];
    let mut pair_edges = vec![0u64; kp * kp];
    let mut reads: Vec<Vec<u64>> = vec![vec![0u64; (n as usize).div_ceil(64)]; k];
    let mut seen = 0u64;
    source.for_each_batch(&mut |src, dst| {
        for (i, (&s, &t)) in src.iter().zip(dst).enumerate() {
            if s >= n || t >= n {
                return Err(invalid(
                    &format!("edge {}", seen + i as u64),
                    format!("{s} -> {t} names a vertex outside 0..{n}"),
                ));
            }
            let (u, v) = (number(s), number(t));
            let (gu, gv) = (split.of(u) as usize, split.of(v) as usize);
            degree[v as usize] += 1;
            pair_edges[gv * kp + gu] += 1;
            let (du, dv) = (gu / p, gv / p);
            if du != dv {
                reads[dv][u as usize / 64] |= 1 << (u % 64);
            }
        }
        seen += src.len() as u64;
        Ok(())
    })?;
    // Second pass: the kept rows' sources, grouped by destination.
    let rows = (kept_hi - kept_lo) as usize;
    let mut row_start = vec![0u64; rows + 1];
    for r in 0..rows {
        row_start[r + 1] = row_start[r] + degree[kept_lo as usize + r];
    }
    // The kept rows' edges per pair of partitions, read again: they must
    // be those of the first reading, and every source on another device
    // one that was marked, or the halo would not hold it.
    let mut again = vec![0u64; kp * kp];
    let changed = |what: String| {
        invalid(
            "edges",
            format!("{what}: the edges read again differ from those read first"),
        )
    };
    let columns = if rows == 0 {
        Vec::new()
    } else {
        fill_rows(&row_start, &mut |place| {
            let mut seen = 0u64;
            source.for_each_batch(&mut |src, dst| {
                for (i, (&s, &t)) in src.iter().zip(dst).enumerate() {
                    let edge = seen + i as u64;
                    if s >= n || t >= n {
                        return Err(changed(format!("edge {edge}, {s} -> {t}")));
                    }
                    let v = number(t);
                    if (kept_lo..kept_hi).contains(&v) {
                        let u = number(s);
                        let (gu, gv) = (split.of(u) as usize, split.of(v) as usize);
                        let dv = gv / p;
                        let marked = reads[dv][u as usize / 64] >> (u % 64) & 1 == 1;
                        if gu / p != dv && !marked {
                            return Err(changed(format!("edge {edge}, {s} -> {t}")));
                        }
                        again[gv * kp + gu] += 1;
                        place(u as u32, (v - kept_lo) as usize)?;
                    }
                }
                seen += src.len() as u64;
                Ok(())
            })
        })?
    };
    drop(edges);
    let kept_pairs = first_kept * p * kp..end_kept * p * kp;
    if let Some(at) = kept_pairs
        .into_iter()
        .find(|&at| again[at] != pair_edges[at])
    {
        return Err(changed(format!(
            "partitions {} <- {}: {} edges, then {}",
            at / kp,
            at % kp,
            pair_edges[at],
            again[at]
        )));
    }
    let own_rows = KeptRows {
        first: kept_lo,
        row_start,
        columns,
        degree,
    };
    // slots[q][h]: block (kept partition first_kept·P + q, partition h).
    let mut slots = build_destinations(
        &own_rows,
        &split,
        Normalization::for_model(hyper.model),
        (first_kept * p) as u32..(end_kept * p) as u32,
    );
    drop(own_rows);
    let counts = BlockCounts {
        partitions: all,
        nodes: n,
        edges: pair_edges,
    };

    // needed[d][e][s]: rows of device e's partition s that device d
    // reads, listed where d or e is kept (what a kept share receives and
    // sends), and counted for every pair (the statistics).
    let mut needed: Vec<Vec<Vec<Vec<u32>>>> = vec![vec![vec![Vec::new(); p]; k]; k];
    let mut read_rows = vec![vec![vec![0usize; p]; k]; k];
    for (d, marks) in reads.iter().enumerate() {
        for (word, &bits) in marks.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let w = (word * 64) as u64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                let g = split.of(w) as usize;
                let (e, s) = (g / p, g % p);
                read_rows[d][e][s] += 1;
                if keep.keeps(d) || keep.keeps(e) {
                    needed[d][e][s].push((w - starts[g]) as u32);
                }
            }
        }
    }
    drop(reads);

    let mut stats = ShareStats {
        method,
        edges: counts.total_edges(),
        ..ShareStats::default()
    };
    // The workload's blocks: per (p, s), the most edges over devices.
    let mut union = vec![0u64; p * p];
    let mut shares = Vec::with_capacity(k);
    for (d, reads) in needed.iter().enumerate() {
        let kept = keep.keeps(d);
        let mut halo = HaloInput {
            blocks: vec![None; p * p],
            recv: (0..p)
                .map(|s| (0..k).map(|e| read_rows[d][e][s]).collect())
                .collect(),
            // Only a share that is built needs what it sends and its
            // halo's ids.
            send: (0..p)
                .filter(|_| kept)
                .map(|s| (0..k).map(|e| needed[e][d][s].clone()).collect())
                .collect(),
            ids: (0..p)
                .filter(|_| kept)
                .map(|s| {
                    let mut ids = Vec::with_capacity(reads.iter().map(|r| r[s].len()).sum());
                    for (e, by_source) in reads.iter().enumerate() {
                        let first = starts[e * p + s];
                        ids.extend(by_source[s].iter().map(|&r| {
                            let w = first + r as u64;
                            old.as_ref().map_or(w, |old| old[w as usize])
                        }));
                    }
                    ids
                })
                .collect(),
        };
        let halo_rows: u64 = (0..p).map(|s| halo.rows(s) as u64).sum();
        stats.halo_rows_max = stats.halo_rows_max.max(halo_rows);
        stats.halo_rows_total += halo_rows;
        for q in 0..p {
            let g = d * p + q;
            let rows = (starts[g + 1] - starts[g]) as usize;
            for s in 0..p {
                let own = counts.block_edges(g as u32, (d * p + s) as u32);
                let remote: u64 = (0..k)
                    .filter(|&e| e != d)
                    .map(|e| counts.block_edges(g as u32, (e * p + s) as u32))
                    .sum();
                stats.halo_edges += remote;
                union[q * p + s] = union[q * p + s].max(own + remote);
                if !kept || remote == 0 {
                    continue;
                }
                let row = g - first_kept * p;
                let parts: Vec<(usize, &CsrBlock)> = (0..k)
                    .filter(|&e| e != d)
                    .filter_map(|e| slots[row][e * p + s].as_ref().map(|b| (e, b)))
                    .collect();
                halo.blocks[q * p + s] = Some(halo_block(rows, &parts, reads, s));
            }
        }
        shares.push(halo);
    }

    let mut devices_out = Vec::with_capacity(kept.len());
    let features = dataset.features as usize;
    let train_total = dataset.train_mask.iter().filter(|&&m| m).count() as u64;
    for (d, halo) in shares.into_iter().enumerate() {
        if !keep.keeps(d) {
            continue;
        }
        let base = starts[d * p];
        let end = starts[(d + 1) * p];
        let (lo, hi) = (base as usize, end as usize);
        let mut table = Vec::with_capacity(p * p);
        for q in 0..p {
            let rows = (starts[d * p + q + 1] - starts[d * p + q]) as usize;
            let row = d * p + q - first_kept * p;
            for s in 0..p {
                let own = slots[row][d * p + s].take();
                let exists = q == s || union[q * p + s] > 0;
                table.push(match own {
                    Some(block) => Some(BlockData {
                        row_start: block.row_start,
                        columns: block.columns,
                        weights: block.weights,
                        weighting: block.weighting,
                    }),
                    // No edges: no weights either.
                    None if exists => Some(BlockData {
                        row_start: vec![0; rows + 1],
                        columns: Vec::new(),
                        weights: Vec::new(),
                        weighting: Weighting::Unit,
                    }),
                    None => None,
                });
            }
            // The halo blocks were built from the rest of the row.
            slots[row].clear();
        }
        devices_out.push(DeviceShare {
            input: GraphInput {
                offsets: (0..=p).map(|q| starts[d * p + q] - base).collect(),
                features,
                classes: dataset.classes as usize,
                x: std::mem::take(&mut own_x[d]),
                y: dataset.y[lo..hi].to_vec(),
                train_mask: dataset.train_mask[lo..hi].to_vec(),
                val_mask: dataset.val_mask[lo..hi].to_vec(),
                test_mask: dataset.test_mask[lo..hi].to_vec(),
                blocks: table,
                row_base: base,
                row_ids: old.as_ref().map(|old| old[lo..hi].to_vec()),
                train_nodes_total: Some(train_total),
                graph_nodes: Some(n),
            },
            halo,
        });
    }

    // Every partition as large as the largest, so the workload's tensors
    // hold any device's.
    let largest = (0..kp)
        .map(|g| starts[g + 1] - starts[g])
        .max()
        .unwrap_or(0);
    let union_counts = BlockCounts {
        partitions,
        nodes: largest * partitions as u64,
        edges: union,
    };
    let name = format!("{}-{devices}dev", dataset.name);
    let shape = crate::train::shape(
        dataset.features,
        dataset.classes,
        union_counts,
        hyper,
        &name,
    );
    let workload = shape
        .workload(hyper.sweeps)
        .map_err(|e| Error::invalid(std::path::Path::new(&dataset.name), "model", e.to_string()))?;
    // Device d owns the vertices it numbers starts[d·P]..starts[(d+1)·P].
    let owner = old.map(|old| {
        let mut owner = vec![0u32; old.len()];
        for d in 0..k {
            for &v in &old[starts[d * p] as usize..starts[(d + 1) * p] as usize] {
                owner[v as usize] = d as u32;
            }
        }
        owner
    });
    Ok(SharedPrepared {
        workload,
        shape,
        owner,
        devices: devices_out,
        group: k,
        stats,
    })
}

/// The min-cut shares' numbering: each device's vertices (`owner`, a
/// partitioning of the `n` vertices onto `devices`) contiguous, in rank
/// order and in their old order within a device, and each device's cut
/// into `partitions` equal ranges. Returns those ranges, `new` (each
/// vertex's new number) and `old` (the old number of each new one).
fn mincut_numbering(
    name: &str,
    n: u64,
    devices: u32,
    partitions: u32,
    owner: &[u32],
) -> Result<(Split, Vec<u32>, Vec<u64>), Error> {
    if owner.len() as u64 != n || owner.iter().any(|&o| o >= devices) {
        return Err(Error::invalid(
            std::path::Path::new(name),
            "owner",
            format!(
                "a partitioning of {} vertices onto {} devices does not fit a graph of \
                 {n} vertices onto {devices}",
                owner.len(),
                owner.iter().max().map_or(0, |&o| o + 1)
            ),
        ));
    }
    let k = devices as usize;
    let mut count = vec![0u64; k];
    for &o in owner {
        count[o as usize] += 1;
    }
    let mut next: Vec<u64> = count
        .iter()
        .scan(0, |at, &c| {
            let first = *at;
            *at += c;
            Some(first)
        })
        .collect();
    if let Some(d) = count.iter().position(|&c| c < partitions as u64) {
        return Err(Error::invalid(
            std::path::Path::new(name),
            "partitions",
            format!(
                "{partitions} per device, but the min-cut shares give device {d} {}: \
                 use fewer partitions (or shares by vertex ranges: train --shares ranges)",
                if count[d] == 1 {
                    "1 vertex".to_string()
                } else {
                    format!("{} vertices", count[d])
                }
            ),
        ));
    }
    let mut starts = Vec::with_capacity(k * partitions as usize + 1);
    for (d, &c) in count.iter().enumerate() {
        for q in 0..partitions {
            starts.push(next[d] + partition_range(c, partitions, q).0);
        }
    }
    starts.push(n);
    let mut new = vec![0u32; n as usize];
    let mut old = vec![0u64; n as usize];
    for (v, &o) in owner.iter().enumerate() {
        let w = next[o as usize];
        next[o as usize] += 1;
        // Below n, which is at most MAX_CSR_NODES = 2^32.
        new[v] = w as u32;
        old[w as usize] = v as u64;
    }
    Ok((Split::starts(starts, name)?, new, old))
}

/// The labels and masks of `dataset` renumbered: vertex `w`'s are those
/// of the vertex numbered `old[w]` as given. A topology alone (no labels
/// or masks: [`share_workload`]) stays without; the features stay in the
/// graph's order for the shares to gather.
fn permute_vertices(dataset: &mut Dataset, old: &[u64]) {
    fn permute<T: Copy>(values: &[T], old: &[u64]) -> Vec<T> {
        if values.is_empty() {
            return Vec::new();
        }
        old.iter().map(|&v| values[v as usize]).collect()
    }
    dataset.train_mask = permute(&dataset.train_mask, old);
    dataset.val_mask = permute(&dataset.val_mask, old);
    dataset.test_mask = permute(&dataset.test_mask, old);
    dataset.y = permute(&dataset.y, old);
}

/// The rows of the kept shares' vertices, `first..first + rows`, and every
/// vertex's in-degree, as the block build reads them.
struct KeptRows {
    first: u64,
    row_start: Vec<u64>,
    columns: Vec<u32>,
    degree: Vec<u64>,
}

impl Adjacency for KeptRows {
    fn row(&self, v: u64) -> &[u32] {
        let r = (v - self.first) as usize;
        &self.columns[self.row_start[r] as usize..self.row_start[r + 1] as usize]
    }

    fn in_degree(&self, v: u64) -> u64 {
        self.degree[v as usize]
    }
}

/// The halo block of `rows` destination rows from the blocks of the other
/// devices' partition `s` (`parts`, in rank order); `needed[e][s]` lists the
/// rows of device `e` in the halo, so column `c` of device `e` becomes
/// `e`'s offset in the halo plus `c`'s place in that list.
fn halo_block(
    rows: usize,
    parts: &[(usize, &CsrBlock)],
    needed: &[Vec<Vec<u32>>],
    s: usize,
) -> BlockData {
    let mut offset = vec![0usize; needed.len() + 1];
    for e in 0..needed.len() {
        offset[e + 1] = offset[e] + needed[e][s].len();
    }
    let mut row_start = Vec::with_capacity(rows + 1);
    let mut columns = Vec::new();
    let mut weights = Vec::new();
    row_start.push(0u64);
    for r in 0..rows {
        for &(e, block) in parts {
            let (a, b) = (block.row_start[r] as usize, block.row_start[r + 1] as usize);
            for k in a..b {
                let c = block.columns[k];
                let at = needed[e][s]
                    .binary_search(&c)
                    .expect("every column of another device's block is in its needed rows");
                columns.push((offset[e] + at) as u32);
                weights.push(block.view().weight(r, k));
            }
        }
        row_start.push(columns.len() as u64);
    }
    // The rows come from several devices' blocks: weights per edge.
    BlockData {
        row_start,
        columns,
        weights,
        weighting: Weighting::PerEdge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::GeneratorSpec;
    use crate::npy::Npy;
    use fateplan_planner::gnn::GnnModel;

    fn hyper(model: GnnModel) -> Hyper {
        Hyper {
            model,
            layers: 2,
            hidden: 8,
            heads: 1,
            dropout: 0.0,
            lr: 0.01,
            weight_decay: 0.0,
            weight_decay_all_layers: false,
            seed: 3,
            order: Default::default(),
            transposes: Default::default(),
            sweeps: Default::default(),
        }
    }

    fn shown(share: &DeviceShare) -> String {
        format!("{:?} {:?}", share.input, share.halo)
    }

    #[test]
    fn a_share_read_from_a_file_in_small_batches_is_the_one_built_from_lists() {
        let data = GeneratorSpec::parse("planted:nodes=500,classes=3,features=4,degree=6,seed=4")
            .unwrap()
            .generate()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        data.save(dir.path()).unwrap();
        let path = dir.path().join("edge_index.npy");
        for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
            let h = hyper(model);
            for method in [ShareMethod::Ranges, ShareMethod::Mincut] {
                let all = prepare_shared(data.clone(), &h, 3, 2, method).unwrap();
                let topology = Dataset {
                    x: Vec::new(),
                    src: Vec::new(),
                    dst: Vec::new(),
                    ..data.clone()
                };
                let read =
                    |ids: &[u64]| Ok(ids.iter().flat_map(|&v| data.row(v).to_vec()).collect());
                for rank in 0..3 {
                    // 37 edges a batch: the two passes cross many batches.
                    let edges = EdgeSource::npy_in_batches(
                        path.clone(),
                        Npy::open(&path).unwrap(),
                        data.nodes,
                        37,
                    )
                    .unwrap();
                    let one = prepare_share_reading(
                        topology.clone(),
                        edges,
                        &read,
                        all.owner.clone(),
                        &h,
                        3,
                        2,
                        method,
                        rank,
                    )
                    .unwrap();
                    let what = format!("{model:?} {method:?} {rank}");
                    assert_eq!(shown(&one.devices[0]), shown(&all.devices[rank]), "{what}");
                    assert_eq!(one.workload.to_json(), all.workload.to_json(), "{what}");
                    assert_eq!(one.stats, all.stats, "{what}");
                }
            }
        }
    }

    #[test]
    fn the_statistics_are_those_counted_edge_by_edge() {
        let data = GeneratorSpec::parse("planted:nodes=400,classes=4,features=2,degree=5,seed=9")
            .unwrap()
            .generate()
            .unwrap();
        let h = hyper(GnnModel::Gcn);
        for method in [ShareMethod::Ranges, ShareMethod::Mincut] {
            let k = 3usize;
            let all = prepare_shared(data.clone(), &h, k as u32, 2, method).unwrap();
            // Each vertex's device, as the graph numbers it.
            let mut device = vec![usize::MAX; data.nodes as usize];
            for (d, share) in all.devices.iter().enumerate() {
                let rows = *share.input.offsets.last().unwrap();
                for r in 0..rows {
                    let v = match &share.input.row_ids {
                        Some(ids) => ids[r as usize],
                        None => share.input.row_base + r,
                    };
                    device[v as usize] = d;
                }
            }
            assert!(
                device.iter().all(|&d| d < k),
                "{method:?}: every vertex owned"
            );
            let mut halo_edges = 0;
            let mut read: Vec<std::collections::BTreeSet<u64>> = vec![Default::default(); k];
            for (&u, &v) in data.src.iter().zip(&data.dst) {
                let (du, dv) = (device[u as usize], device[v as usize]);
                if du != dv {
                    halo_edges += 1;
                    read[dv].insert(u);
                }
            }
            let rows: Vec<u64> = read.iter().map(|r| r.len() as u64).collect();
            let expected = ShareStats {
                method,
                halo_rows_max: *rows.iter().max().unwrap(),
                halo_rows_total: rows.iter().sum(),
                halo_edges,
                edges: data.src.len() as u64,
            };
            assert!(halo_edges > 0, "{method:?}");
            assert_eq!(all.stats, expected, "{method:?}");
            // Each device's halo holds the rows it reads, by their numbers.
            for (d, share) in all.devices.iter().enumerate() {
                let mut ids: Vec<u64> = share.halo.ids.concat();
                ids.sort_unstable();
                assert_eq!(
                    ids,
                    read[d].iter().copied().collect::<Vec<_>>(),
                    "{method:?} {d}"
                );
            }
        }
    }

    #[test]
    fn a_graph_with_fewer_vertices_than_partitions_is_refused() {
        let data = Dataset {
            name: "tiny".into(),
            nodes: 3,
            features: 1,
            classes: 1,
            x: vec![1.0; 3],
            y: vec![0; 3],
            train_mask: vec![true; 3],
            val_mask: vec![false; 3],
            test_mask: vec![false; 3],
            src: vec![0, 1],
            dst: vec![1, 2],
        };
        let h = hyper(GnnModel::Gcn);
        let Err(error) = prepare_shared(data.clone(), &h, 2, 2, ShareMethod::Ranges) else {
            panic!("4 partitions of 3 vertices");
        };
        let error = error.to_string();
        assert!(
            error.contains("tiny") && error.contains("4 in all, for a graph of 3 nodes"),
            "{error}"
        );
        assert!(prepare_shared(data.clone(), &h, 3, 1, ShareMethod::Ranges).is_ok());
        // An edge naming no vertex, from lists: named by its number.
        let broken = Dataset {
            dst: vec![1, 3],
            ..data
        };
        let Err(error) = prepare_shared(broken, &h, 3, 1, ShareMethod::Ranges) else {
            panic!("an edge to vertex 3 of 3");
        };
        let error = error.to_string();
        assert!(
            error.contains("edge 1") && error.contains("1 -> 3 names a vertex outside 0..3"),
            "{error}"
        );
    }
}
