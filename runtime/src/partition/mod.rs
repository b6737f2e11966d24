//! Vertices assigned to k GPUs, balanced by the aggregation work.
//!
//! Edges run from `src` to `dst`: a GPU owns some vertices and computes
//! their aggregation, so it needs the row of every source of an edge whose
//! destination it owns. The rows it needs but does not own are its
//! **halo**: they are exchanged between GPUs every layer, and the largest
//! halo bounds the per-GPU exchange buffer. Balance is by edges (the
//! in-edges of owned vertices), within a tolerance over the mean; min-cut
//! holds the owned vertices too, within [`VERTEX_TOLERANCE_FACTOR`] times
//! that tolerance (a device's tensors are sized by the most vertices a
//! partition has).
//!
//! Two methods:
//! - [`Method::Random`]: the vertices in a seeded random order dealt to
//!   the GPUs in turn (so vertex counts are even), each moved to the
//!   lightest GPU when its turn's GPU would go over the edge budget.
//! - [`Method::Mincut`]: a multilevel partitioner of our own
//!   (`multilevel.rs`; the crates found wrap C libraries, or were a
//!   first 0.1 release): heavy-edge matching on the symmetrised graph
//!   (label-propagation clusters where pairs would keep most of a level's
//!   edges or barely shrink it), greedy graph growing of the coarsest graph into k parts, then greedy
//!   boundary refinement (positive-gain moves that respect the edge and
//!   vertex budgets, and zero-gain moves that improve balance) on every
//!   level on the way back up. It minimises the edge cut, which bounds the halo.
//!
//! A vertex with no edge to another vertex never enters a halo; min-cut
//! gives those to the GPU owning the fewest vertices.
//!
//! High-out-degree vertices may be **replicated** on every GPU
//! ([`Partitioning::replicate_min_out_degree`]): their rows are then in no
//! halo, and cost `k - 1` rows of memory beyond the owner's. A vertex is
//! in at most `k - 1` halos, so a copy on every GPU never saves more rows
//! than it costs; it saves the exchange of rows that do not change
//! (input features). The statistics report both sides.
//!
//! Everything here is deterministic for a seed: no hash maps, no clock,
//! no threads.

mod multilevel;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::edges::EdgeSource;
use crate::{Error, Result};

/// Most GPUs a partitioning may have.
pub const MAX_PARTS: u32 = 4096;

/// The least a partitioning holds for each vertex, whichever the method:
/// two counts of 8 bytes (its in- and out-edges) and, at once, for random
/// an order and an owner of 4 bytes each, for min-cut a third count of 8.
/// A graph whose vertices take more than the memory available is refused
/// before they are counted in (`GraphData::open_holding`).
pub const BYTES_PER_VERTEX: u64 = 24;

/// The default balance tolerance: 5% over the mean in-edges per GPU.
pub const DEFAULT_TOLERANCE: f64 = 0.05;

/// Min-cut holds each GPU's vertices within this many times the
/// tolerance over the mean, where its greedy moves can. Balanced by
/// in-edges alone, Cora's min-cut parts had up to 1.37 times the mean
/// vertices (8 GPUs, seeds 1 to 6); held within the tolerance itself, its
/// halo grew by 7% to 17%; within twice it, up to 1.10 times, the halo
/// moved by -6% to +6% and the most rows a GPU holds (owned and halo) fell
/// by up to 5.5% (`docs/scaling.md`).
pub const VERTEX_TOLERANCE_FACTOR: f64 = 2.0;

/// How vertices are assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Random,
    Mincut,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Random => "random",
            Method::Mincut => "mincut",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionOptions {
    /// Most in-edges a GPU may own, as a share over the mean
    /// (`0.05`: at most 5% above `edges / k`); min-cut also holds the
    /// vertices a GPU owns to [`VERTEX_TOLERANCE_FACTOR`] times it.
    /// Vertices heavier than the slack can make it unreachable;
    /// [`PartitionStats::edge_imbalance`] and
    /// [`PartitionStats::vertex_imbalance`] say what was reached.
    pub tolerance: f64,
    pub seed: u64,
    /// Replicate on every GPU the vertices with at least this many
    /// out-edges (`None`: no replication).
    pub replicate_min_out_degree: Option<u64>,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            tolerance: DEFAULT_TOLERANCE,
            seed: 1,
            replicate_min_out_degree: None,
        }
    }
}

/// Which GPU owns each vertex, and which vertices every GPU holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitioning {
    /// `k`, the number of GPUs.
    pub parts: u32,
    pub method: Method,
    /// The GPU owning vertex `v`, in `0..parts`.
    pub owner: Vec<u32>,
    /// Vertices held on every GPU (their rows are in no halo).
    pub replicated: Vec<bool>,
}

/// One GPU's share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartStats {
    pub part: u32,
    /// Vertices it owns.
    pub vertices: u64,
    /// Edges whose destination it owns: its aggregation work.
    pub in_edges: u64,
    /// Of those, edges whose source another GPU owns.
    pub cut_in_edges: u64,
    /// Distinct vertices it does not own, not replicated, that are the
    /// source of an edge whose destination it owns.
    pub halo_rows: u64,
}

/// What a partitioning costs: per GPU, and in total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub parts: u32,
    pub vertices: u64,
    pub edges: u64,
    pub per_part: Vec<PartStats>,
    /// Exchanged boundary rows: the sum of every GPU's halo.
    pub halo_rows_total: u64,
    /// The largest halo: the per-GPU exchange buffer, in rows.
    pub halo_rows_max: u64,
    /// Edges whose ends have different owners.
    pub edge_cut: u64,
    /// Largest in-edges per GPU over the mean (1.0: perfect balance).
    pub edge_imbalance: f64,
    /// Largest vertex count per GPU over the mean.
    pub vertex_imbalance: f64,
    pub in_edges_max: u64,
    pub vertices_max: u64,
    pub replicated_vertices: u64,
    /// Rows the replicas cost beyond their owners': `replicated · (k - 1)`.
    pub replica_rows: u64,
    /// Halo rows the replicas removed (counted over all GPUs).
    pub halo_rows_saved: u64,
}

/// The name errors carry in place of a file.
const WHAT: &str = "partition";

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(Path::new(WHAT), field, message)
}

fn check_lengths(src: &[u64], dst: &[u64]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(invalid(
            "edges",
            format!("{} sources but {} destinations", src.len(), dst.len()),
        ));
    }
    Ok(())
}

/// Every end of the edges `first..` is a vertex (an error names the first
/// that is not, by its number among all the edges).
fn check_ends(nodes: u64, src: &[u64], dst: &[u64], first: u64) -> Result<()> {
    for (name, ends) in [("src", src), ("dst", dst)] {
        if let Some((k, &v)) = ends.iter().enumerate().find(|&(_, &v)| v >= nodes) {
            return Err(invalid(
                format!("{name}[{}]", first + k as u64),
                format!("vertex {v} is out of range for {nodes} vertices"),
            ));
        }
    }
    Ok(())
}

/// Checks the request alone; returns the vertex count as `usize`.
fn check_request(nodes: u64, parts: u32, options: &PartitionOptions) -> Result<usize> {
    if parts == 0 {
        return Err(invalid("parts", "0: expected at least 1 GPU"));
    }
    if parts > MAX_PARTS {
        return Err(invalid(
            "parts",
            format!("{parts} is over the limit of {MAX_PARTS} GPUs"),
        ));
    }
    if u64::from(parts) > nodes {
        return Err(invalid(
            "parts",
            format!("{parts} GPUs for {nodes} vertices: every GPU must own at least one vertex"),
        ));
    }
    if nodes >= u64::from(u32::MAX) {
        return Err(invalid(
            "nodes",
            format!("{nodes} is over the limit of {} vertices", u32::MAX - 1),
        ));
    }
    if !options.tolerance.is_finite() || options.tolerance < 0.0 {
        return Err(invalid(
            "tolerance",
            format!(
                "{}: expected a finite share of at least 0",
                options.tolerance
            ),
        ));
    }
    Ok(nodes as usize)
}

/// What one reading of the edges counts per vertex.
struct Degrees {
    ins: Vec<u64>,
    outs: Vec<u64>,
    /// Ends of edges that are not self-loops (the min-cut graph's
    /// neighbours), where asked for; else empty.
    symmetric: Vec<usize>,
}

/// In- and out-edges per vertex of the edges `edges` gives (and, with
/// `symmetric`, their ends that are not self-loops), each end checked to
/// be one of the `n` vertices.
fn degrees(n: usize, edges: &EdgeSource<'_>, symmetric: bool) -> Result<Degrees> {
    let (mut ins, mut outs) = (vec![0u64; n], vec![0u64; n]);
    let mut both = if symmetric {
        vec![0usize; n]
    } else {
        Vec::new()
    };
    let mut first = 0u64;
    edges.for_each_batch(&mut |src, dst| {
        check_ends(n as u64, src, dst, first)?;
        first += src.len() as u64;
        for (&s, &d) in src.iter().zip(dst) {
            outs[s as usize] += 1;
            ins[d as usize] += 1;
        }
        if symmetric {
            multilevel::count_symmetric(&mut both, src, dst);
        }
        Ok(())
    })?;
    Ok(Degrees {
        ins,
        outs,
        symmetric: both,
    })
}

/// Most in-edges a GPU may own: `ceil(total / k · (1 + tolerance))`.
fn max_part_weight(total: u64, parts: u32, tolerance: f64) -> u64 {
    let bound = (total as f64 / f64::from(parts) * (1.0 + tolerance)).ceil() as u64;
    bound.max(total.div_ceil(u64::from(parts)))
}

impl Partitioning {
    /// Partitions the graph of `nodes` vertices and edges `src[i] ->
    /// dst[i]` onto `parts` GPUs by `method`, then replicates as the
    /// options say. Errors name the field and value: `parts` of 0, over
    /// [`MAX_PARTS`] or over `nodes`; an edge naming a missing vertex.
    pub fn new(
        method: Method,
        nodes: u64,
        src: &[u64],
        dst: &[u64],
        parts: u32,
        options: &PartitionOptions,
    ) -> Result<Partitioning> {
        check_lengths(src, dst)?;
        Self::reading(
            method,
            nodes,
            &EdgeSource::borrowed(src, dst),
            parts,
            options,
        )
    }

    /// [`Partitioning::new`] for the edges `edges` gives, read a batch at
    /// a time (twice for min-cut, once for random) rather than held: what
    /// it holds is 24 bytes per vertex of counts, and for min-cut the
    /// symmetrised graph it coarsens (4 bytes per end of an edge that is
    /// not a self-loop while it is built, then 8 per distinct neighbour
    /// of each vertex) and its coarser levels. The result does not
    /// depend on the order of the edges.
    pub fn reading(
        method: Method,
        nodes: u64,
        edges: &EdgeSource<'_>,
        parts: u32,
        options: &PartitionOptions,
    ) -> Result<Partitioning> {
        let n = check_request(nodes, parts, options)?;
        let Degrees {
            ins: weight,
            outs: out_degree,
            symmetric,
        } = degrees(n, edges, method == Method::Mincut)?;
        let total: u64 = weight.iter().sum();
        let max_weight = max_part_weight(total, parts, options.tolerance);
        let mut owner = match method {
            Method::Random => random_owners(&weight, parts, max_weight, options.seed),
            Method::Mincut => {
                let graph = multilevel::Graph::symmetric(n, edges, &weight, symmetric)?;
                let limit = multilevel::Load {
                    edges: max_weight,
                    vertices: max_part_weight(
                        n as u64,
                        parts,
                        VERTEX_TOLERANCE_FACTOR * options.tolerance,
                    ),
                };
                mincut_owners(n, graph, &weight, parts, limit, options.seed)
            }
        };
        fill_empty_parts(&mut owner, parts, &weight, &out_degree);
        let mut partitioning = Partitioning {
            parts,
            method,
            owner,
            replicated: vec![false; n],
        };
        if let Some(min) = options.replicate_min_out_degree {
            partitioning.replicate_by_out_degree(&out_degree, min);
        }
        Ok(partitioning)
    }

    /// [`Partitioning::new`] with [`Method::Random`].
    pub fn random(
        nodes: u64,
        src: &[u64],
        dst: &[u64],
        parts: u32,
        options: &PartitionOptions,
    ) -> Result<Partitioning> {
        Self::new(Method::Random, nodes, src, dst, parts, options)
    }

    /// [`Partitioning::new`] with [`Method::Mincut`].
    pub fn mincut(
        nodes: u64,
        src: &[u64],
        dst: &[u64],
        parts: u32,
        options: &PartitionOptions,
    ) -> Result<Partitioning> {
        Self::new(Method::Mincut, nodes, src, dst, parts, options)
    }

    pub fn nodes(&self) -> u64 {
        self.owner.len() as u64
    }

    /// Marks for replication every vertex with at least `min` out-edges
    /// (`src` as given to [`Partitioning::new`]); clears the others. With
    /// one GPU there is nothing to replicate.
    pub fn replicate_min_out_degree(&mut self, src: &[u64], min: u64) {
        let mut out_degree = vec![0u64; self.owner.len()];
        for &s in src {
            out_degree[s as usize] += 1;
        }
        self.replicate_by_out_degree(&out_degree, min);
    }

    /// [`Partitioning::replicate_min_out_degree`] from each vertex's
    /// out-edge count.
    fn replicate_by_out_degree(&mut self, out_degree: &[u64], min: u64) {
        let replicate = self.parts > 1;
        for (flag, &degree) in self.replicated.iter_mut().zip(out_degree) {
            *flag = replicate && degree >= min && degree > 0;
        }
    }

    /// Halo rows, edges and vertices per GPU for the same graph as
    /// [`Partitioning::new`] was given. Errors when the graph does not
    /// match the partitioning.
    pub fn stats(&self, src: &[u64], dst: &[u64]) -> Result<PartitionStats> {
        check_lengths(src, dst)?;
        self.stats_reading(&EdgeSource::borrowed(src, dst))
    }

    /// [`Partitioning::stats`] for the edges `edges` gives, read a batch
    /// at a time rather than held: once for up to 64 GPUs, once more for
    /// each further 64. What it holds is a word per vertex: which GPUs
    /// its out-edges lead into.
    pub fn stats_reading(&self, edges: &EdgeSource<'_>) -> Result<PartitionStats> {
        let nodes = self.nodes();
        let n = check_request(nodes, self.parts, &PartitionOptions::default())?;
        if self.replicated.len() != n {
            return Err(invalid(
                "replicated",
                format!("{} flags for {n} vertices", self.replicated.len()),
            ));
        }
        if let Some((v, &p)) = self
            .owner
            .iter()
            .enumerate()
            .find(|&(_, &p)| p >= self.parts)
        {
            return Err(invalid(
                format!("owner[{v}]"),
                format!("GPU {p} of {}", self.parts),
            ));
        }
        let k = self.parts as usize;
        let mut per_part: Vec<PartStats> = (0..self.parts)
            .map(|part| PartStats {
                part,
                vertices: 0,
                in_edges: 0,
                cut_in_edges: 0,
                halo_rows: 0,
            })
            .collect();
        for &p in &self.owner {
            per_part[p as usize].vertices += 1;
        }
        let owner = &self.owner;
        let (mut edge_cut, mut edges_read) = (0u64, 0u64);
        // Bit `b` of `leads[v]`: an edge leads from `v` into GPU `low + b`
        // of another GPU than `v`'s, for the 64 GPUs from `low`.
        let mut leads = vec![0u64; n];
        let mut saved = 0u64;
        for low in (0..k).step_by(64) {
            let first_reading = low == 0;
            if !first_reading {
                leads.fill(0);
            }
            let mut first = 0u64;
            edges.for_each_batch(&mut |src, dst| {
                check_ends(nodes, src, dst, first)?;
                first += src.len() as u64;
                for (&s, &d) in src.iter().zip(dst) {
                    let (a, b) = (owner[s as usize] as usize, owner[d as usize] as usize);
                    if first_reading {
                        per_part[b].in_edges += 1;
                        if a != b {
                            edge_cut += 1;
                            per_part[b].cut_in_edges += 1;
                        }
                    }
                    if a != b && (low..low + 64).contains(&b) {
                        leads[s as usize] |= 1 << (b - low);
                    }
                }
                Ok(())
            })?;
            if first_reading {
                edges_read = first;
            } else if first != edges_read {
                return Err(invalid(
                    "edges",
                    format!(
                        "{edges_read} edges, then {first}: the edges read again differ from \
                         those read first"
                    ),
                ));
            }
            for (s, &word) in leads.iter().enumerate() {
                if self.replicated[s] {
                    saved += u64::from(word.count_ones());
                    continue;
                }
                let mut bits = word;
                while bits != 0 {
                    per_part[low + bits.trailing_zeros() as usize].halo_rows += 1;
                    bits &= bits - 1;
                }
            }
        }
        let replicated_vertices = self.replicated.iter().filter(|&&r| r).count() as u64;
        let edges = edges_read;
        let in_edges_max = per_part.iter().map(|p| p.in_edges).max().unwrap_or(0);
        let vertices_max = per_part.iter().map(|p| p.vertices).max().unwrap_or(0);
        let over_mean = |max: u64, total: u64| {
            if total == 0 {
                1.0
            } else {
                max as f64 / (total as f64 / k as f64)
            }
        };
        Ok(PartitionStats {
            parts: self.parts,
            vertices: nodes,
            edges,
            halo_rows_total: per_part.iter().map(|p| p.halo_rows).sum(),
            halo_rows_max: per_part.iter().map(|p| p.halo_rows).max().unwrap_or(0),
            edge_cut,
            edge_imbalance: over_mean(in_edges_max, edges),
            vertex_imbalance: over_mean(vertices_max, nodes),
            in_edges_max,
            vertices_max,
            replicated_vertices,
            replica_rows: replicated_vertices * (u64::from(self.parts) - 1),
            halo_rows_saved: saved,
            per_part,
        })
    }
}

/// A small seeded generator (splitmix64): the same stream on every
/// platform, whatever the `rand` version.
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64, stream: u64) -> SplitMix {
        let mut rng = SplitMix(seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        rng.next();
        rng
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

fn random_owners(weight: &[u64], parts: u32, max_weight: u64, seed: u64) -> Vec<u32> {
    let n = weight.len();
    let mut rng = SplitMix::new(seed, 1);
    let mut order: Vec<u32> = (0..n as u32).collect();
    rng.shuffle(&mut order);
    let mut part_weight = vec![0u64; parts as usize];
    let mut owner = vec![0u32; n];
    for (i, &v) in order.iter().enumerate() {
        let w = weight[v as usize];
        let mut p = i % parts as usize;
        if part_weight[p] + w > max_weight {
            p = lightest(&part_weight);
        }
        part_weight[p] += w;
        owner[v as usize] = p as u32;
    }
    owner
}

/// The part with the least weight (the lowest index among equals).
fn lightest(part_weight: &[u64]) -> usize {
    let mut best = 0;
    for (p, &w) in part_weight.iter().enumerate() {
        if w < part_weight[best] {
            best = p;
        }
    }
    best
}

/// The min-cut owners of the `n` vertices from their symmetrised graph
/// and the vertices it holds.
fn mincut_owners(
    n: usize,
    (graph, active): (multilevel::Graph, Vec<u32>),
    weight: &[u64],
    parts: u32,
    limit: multilevel::Load,
    seed: u64,
) -> Vec<u32> {
    let max_weight = limit.edges;
    let active_parts = multilevel::partition(graph, parts, limit, seed);
    let mut owner = vec![u32::MAX; n];
    let mut part_weight = vec![0u64; parts as usize];
    let mut part_vertices = vec![0u64; parts as usize];
    for (&v, &p) in active.iter().zip(&active_parts) {
        owner[v as usize] = p;
        part_weight[p as usize] += weight[v as usize];
        part_vertices[p as usize] += 1;
    }
    // Vertices without an edge to another vertex: to the GPU owning the
    // fewest vertices (a heap of (vertices, part), smallest first; an
    // entry is stale once its count changed), or to the lightest GPU when
    // their self-loops would put that one over the edge budget.
    let mut fewest: BinaryHeap<Reverse<(u64, u32)>> = (0..parts)
        .map(|p| Reverse((part_vertices[p as usize], p)))
        .collect();
    for v in 0..n {
        if owner[v] != u32::MAX {
            continue;
        }
        let w = weight[v];
        let p = loop {
            let Some(Reverse((count, p))) = fewest.peek().copied() else {
                break lightest(&part_weight);
            };
            if count != part_vertices[p as usize] {
                fewest.pop();
                continue;
            }
            break if part_weight[p as usize] + w > max_weight {
                lightest(&part_weight)
            } else {
                p as usize
            };
        };
        owner[v] = p as u32;
        part_weight[p] += w;
        part_vertices[p] += 1;
        fewest.push(Reverse((part_vertices[p], p as u32)));
    }
    owner
}

/// Gives every empty part one vertex: the vertex with the fewest edges
/// (in and out, the lowest index among equals) of the part owning the
/// most vertices.
fn fill_empty_parts(owner: &mut [u32], parts: u32, in_degree: &[u64], out_degree: &[u64]) {
    let mut count = vec![0u64; parts as usize];
    for &p in owner.iter() {
        count[p as usize] += 1;
    }
    if count.iter().all(|&c| c > 0) {
        return;
    }
    let degree = |v: usize| in_degree[v] + out_degree[v];
    for empty in 0..parts as usize {
        if count[empty] > 0 {
            continue;
        }
        let mut most = 0;
        for (p, &c) in count.iter().enumerate() {
            if c > count[most] {
                most = p;
            }
        }
        if count[most] < 2 {
            return; // fewer vertices than parts: refused by `check_request`
        }
        let chosen = (0..owner.len())
            .filter(|&v| owner[v] as usize == most)
            .min_by_key(|&v| (degree(v), v))
            .expect("the largest part owns vertices");
        owner[chosen] = empty as u32;
        count[most] -= 1;
        count[empty] += 1;
    }
}
