//! Synthetic datasets, seeded and deterministic whatever the thread count.
//!
//! - [`RmatSpec`]: an R-MAT graph with Graph500's parameters, random
//!   features, labels and split: for sizing and speed, not for accuracy.
//! - [`PlantedSpec`]: a planted-partition graph whose labels can be learnt
//!   from features (class centroid plus gaussian noise) and from structure
//!   (a chosen share of edges join nodes of the same class).
//!
//! [`GeneratorSpec::parse`] reads the CLI's spec strings, such as
//! `rmat:scale=20,features=128,classes=16,seed=1` or
//! `planted:nodes=2000,classes=5,features=32,degree=8,homophily=0.8,seed=1`.
//!
//! Parallel generation splits the work into fixed-size chunks, each with its
//! own generator seeded from `(seed, stream, chunk)`, so the output depends
//! on the seed alone.

use std::fmt;
use std::path::Path;

use rand::seq::SliceRandom;
use rand::{Rng, RngExt, SeedableRng};
use rand_distr::StandardNormal;
use rand_pcg::Pcg64Mcg;
use rayon::prelude::*;

use crate::dataset::{Dataset, MAX_CLASSES, MAX_FEATURES};
use crate::edges::EdgeSource;
use crate::memory::Available;
use crate::{Error, Result};

/// Graph500's R-MAT quadrant probabilities; `D = 1 - A - B - C`.
pub const RMAT_A: f64 = 0.57;
pub const RMAT_B: f64 = 0.19;
pub const RMAT_C: f64 = 0.19;
const _: () = assert!(RMAT_A + RMAT_B + RMAT_C < 1.0);

/// Largest R-MAT scale (`N = 2^scale`).
pub const MAX_RMAT_SCALE: u32 = 30;
/// Largest R-MAT edge factor (`E = edge_factor · N`).
pub const MAX_EDGE_FACTOR: u32 = 1024;
/// Most nodes of a planted-partition graph.
pub const MAX_PLANTED_NODES: u64 = 1 << 30;
/// Largest average degree of a planted-partition graph.
pub const MAX_DEGREE: f64 = 1024.0;
/// Most feature values (`N · F`) a generator makes: 64 GiB of f32.
pub const MAX_FEATURE_VALUES: u64 = 1 << 34;

/// Edges generated per chunk (one generator each).
const EDGES_PER_CHUNK: usize = 1 << 16;
/// Nodes per chunk of features, labels and split.
const NODES_PER_CHUNK: usize = 1 << 12;
/// Tries to draw a neighbour other than the node itself before giving up on
/// that edge.
const SELF_LOOP_RETRIES: u32 = 16;

/// Independent random streams of one seed.
const STREAM_EDGES: u64 = 1;
const STREAM_NODES: u64 = 2;
const STREAM_PERMUTATION: u64 = 3;

/// A generator for chunk `chunk` of stream `stream` of `seed`.
fn chunk_rng(seed: u64, stream: u64, chunk: u64) -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(splitmix64(
        splitmix64(seed) ^ splitmix64(stream.wrapping_mul(0x9e37_79b9) ^ splitmix64(chunk)),
    ))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An R-MAT graph with Graph500's quadrant probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct RmatSpec {
    /// `N = 2^scale`.
    pub scale: u32,
    /// `E = edge_factor · N` directed edges (`2E` when `symmetric`).
    pub edge_factor: u32,
    pub features: u32,
    pub classes: u32,
    /// Shares of nodes in the train, validation and test splits.
    pub train: f64,
    pub val: f64,
    pub test: f64,
    /// Relabels vertices by a random permutation, as Graph500 does, so that
    /// high-degree vertices are not all at low ids.
    pub scramble: bool,
    /// Adds every edge in both directions too.
    pub symmetric: bool,
    pub seed: u64,
}

impl RmatSpec {
    pub fn new(scale: u32) -> RmatSpec {
        RmatSpec {
            scale,
            edge_factor: 16,
            features: 128,
            classes: 16,
            train: 0.6,
            val: 0.2,
            test: 0.2,
            scramble: true,
            symmetric: false,
            seed: 1,
        }
    }

    pub fn nodes(&self) -> u64 {
        1 << self.scale
    }

    /// Edges drawn before `symmetric` doubles them.
    pub fn drawn_edges(&self) -> u64 {
        self.edge_factor as u64 * self.nodes()
    }

    pub fn name(&self) -> String {
        format!(
            "rmat-s{}-e{}-seed{}",
            self.scale, self.edge_factor, self.seed
        )
    }

    pub(crate) fn validate(&self, spec: &str) -> Result<()> {
        check_range(spec, "scale", self.scale as f64, 1.0, MAX_RMAT_SCALE as f64)?;
        check_range(
            spec,
            "edge_factor",
            self.edge_factor as f64,
            1.0,
            MAX_EDGE_FACTOR as f64,
        )?;
        check_node_attributes(spec, self.nodes(), self.features, self.classes)?;
        check_range(spec, "train", self.train, 0.0, 1.0)?;
        check_range(spec, "val", self.val, 0.0, 1.0)?;
        check_range(spec, "test", self.test, 0.0, 1.0)?;
        if self.train + self.val + self.test > 1.0 + 1e-9 {
            return Err(Error::invalid(
                Path::new(spec),
                "train",
                format!(
                    "train + val + test = {} + {} + {} exceeds 1",
                    self.train, self.val, self.test
                ),
            ));
        }
        Ok(())
    }

    pub fn generate(&self) -> Result<Dataset> {
        self.generate_with(true, true)
    }

    /// [`RmatSpec::generate`], with the features only where `features`
    /// (else `x` is empty: they are drawn and dropped, so that the labels
    /// and split are the same; [`RmatSpec::rows`] draws the rows wanted),
    /// and the edges only where `edges` (else `src` and `dst` are empty:
    /// [`RmatSpec::edge_batches`] draws them a batch at a time).
    fn generate_with(&self, features: bool, edges: bool) -> Result<Dataset> {
        self.validate(&self.to_string())?;
        let nodes = self.nodes();
        let (src, dst) = if edges {
            self.edge_lists()?
        } else {
            (Vec::new(), Vec::new())
        };
        let (x, y, [train_mask, val_mask, test_mask]) = random_node_attributes(
            nodes,
            self.features,
            self.classes,
            [self.train, self.val, self.test],
            self.seed,
            features,
            &self.to_string(),
        )?;
        Ok(Dataset {
            name: self.name(),
            nodes,
            features: self.features,
            classes: self.classes,
            x,
            y,
            train_mask,
            val_mask,
            test_mask,
            src,
            dst,
        })
    }

    /// Every edge, in [`RmatSpec::generate`]'s order: those drawn, then
    /// (symmetric) the same reversed.
    pub(crate) fn edge_lists(&self) -> Result<(Vec<u64>, Vec<u64>)> {
        let drawn = self.drawn_edges() as usize;
        let total = drawn * (1 + usize::from(self.symmetric));
        let room =
            |ends: &str| crate::error::room(total, || format!("the {ends} of {self}'s edges"));
        let (mut src, mut dst) = (room("sources")?, room("destinations")?);
        src.resize(drawn, 0);
        dst.resize(drawn, 0);
        self.draw_edges(0, &mut src, &mut dst, self.permutation().as_deref());
        if self.symmetric {
            src.extend_from_within(..drawn);
            dst.extend_from_within(..drawn);
            let (forward_src, reversed_src) = src.split_at_mut(drawn);
            let (forward_dst, reversed_dst) = dst.split_at_mut(drawn);
            reversed_src.copy_from_slice(forward_dst);
            reversed_dst.copy_from_slice(forward_src);
        }
        Ok((src, dst))
    }

    /// The scrambling relabelling of the nodes, where `scramble`.
    fn permutation(&self) -> Option<Vec<u64>> {
        self.scramble.then(|| {
            let mut permutation: Vec<u64> = (0..self.nodes()).collect();
            permutation.shuffle(&mut chunk_rng(self.seed, STREAM_PERMUTATION, 0));
            permutation
        })
    }

    /// Draws the edges of chunks `first_chunk..` into `src` and `dst` (of
    /// equal length, a whole number of chunks except at the end), in
    /// parallel, relabelled by `permutation` where given.
    fn draw_edges(
        &self,
        first_chunk: usize,
        src: &mut [u64],
        dst: &mut [u64],
        permutation: Option<&[u64]>,
    ) {
        // Quadrant thresholds on a u32 draw: A, A+B, A+B+C.
        let threshold = |p: f64| (p * 4_294_967_296.0) as u64;
        let (t_a, t_ab, t_abc) = (
            threshold(RMAT_A),
            threshold(RMAT_A + RMAT_B),
            threshold(RMAT_A + RMAT_B + RMAT_C),
        );
        let scale = self.scale;
        src.par_chunks_mut(EDGES_PER_CHUNK)
            .zip(dst.par_chunks_mut(EDGES_PER_CHUNK))
            .enumerate()
            .for_each(|(chunk, (sources, destinations))| {
                let chunk = (first_chunk + chunk) as u64;
                let mut rng = chunk_rng(self.seed, STREAM_EDGES, chunk);
                for (s, d) in sources.iter_mut().zip(destinations) {
                    let (mut u, mut v) = (0u64, 0u64);
                    let mut bits = 0u64;
                    for level in 0..scale {
                        if level % 2 == 0 {
                            bits = rng.next_u64();
                        }
                        let r = bits & 0xffff_ffff;
                        bits >>= 32;
                        // Quadrant A (0, 0), B (0, 1), C (1, 0), D (1, 1), branch-free.
                        let row = u64::from(r >= t_ab);
                        let column = u64::from(r >= t_a) ^ row ^ u64::from(r >= t_abc);
                        u = u << 1 | row;
                        v = v << 1 | column;
                    }
                    (*s, *d) = match permutation {
                        Some(p) => (p[u as usize], p[v as usize]),
                        None => (u, v),
                    };
                }
            });
    }

    /// Calls `each` with the edges of [`RmatSpec::generate`] a batch of
    /// `chunks` chunks at a time (`src`, `dst`): the same edges, each once, in another order
    /// (a symmetric graph's reverse edges follow each batch). Stops at
    /// the first error `each` returns.
    pub(crate) fn edge_batches(
        &self,
        chunks: usize,
        each: crate::edges::EachBatch<'_>,
    ) -> Result<()> {
        self.validate(&self.to_string())?;
        let permutation = self.permutation();
        let drawn = self.drawn_edges() as usize;
        let batch = EDGES_PER_CHUNK * chunks.max(1);
        let mut src = vec![0u64; batch.min(drawn)];
        let mut dst = vec![0u64; batch.min(drawn)];
        for first in (0..drawn).step_by(batch) {
            let length = batch.min(drawn - first);
            let (s, d) = (&mut src[..length], &mut dst[..length]);
            self.draw_edges(first / EDGES_PER_CHUNK, s, d, permutation.as_deref());
            each(s, d)?;
            if self.symmetric {
                each(d, s)?;
            }
        }
        Ok(())
    }
}

/// A graph's features, labels and its train, val and test masks.
type NodeAttributes = (Vec<f32>, Vec<i64>, [Vec<bool>; 3]);

/// Standard-normal features, uniform labels and a split drawn per node by
/// the shares `splits` (train, val, test); the features only where
/// `keep_x` (else drawn and dropped, and `x` is empty); out of memory,
/// named as `graph`'s.
fn random_node_attributes(
    nodes: u64,
    features: u32,
    classes: u32,
    splits: [f64; 3],
    seed: u64,
    keep_x: bool,
    graph: &str,
) -> Result<NodeAttributes> {
    let n = nodes as usize;
    let f = features as usize;
    let mut x = if keep_x {
        crate::error::zeroed(n * f, || format!("the features of {graph}"))?
    } else {
        Vec::new()
    };
    let mut y = crate::error::zeroed(n, || format!("the labels of {graph}"))?;
    // 0 train, 1 val, 2 test, 3 none.
    let mut split = vec![3u8; n];
    // Each chunk's feature rows where they are kept.
    let mut x_chunks: Vec<Option<&mut [f32]>> = if keep_x {
        x.chunks_mut(NODES_PER_CHUNK * f).map(Some).collect()
    } else {
        (0..n.div_ceil(NODES_PER_CHUNK)).map(|_| None).collect()
    };
    y.par_chunks_mut(NODES_PER_CHUNK)
        .zip(split.par_chunks_mut(NODES_PER_CHUNK))
        .zip(x_chunks.par_iter_mut())
        .enumerate()
        .for_each(|(chunk, ((y, split), x))| {
            draw_node_chunk(
                seed,
                chunk,
                y.len(),
                f,
                classes,
                splits,
                |i, row, label, which| {
                    if let Some(x) = x {
                        x[i * f..(i + 1) * f].copy_from_slice(row);
                    }
                    (y[i], split[i]) = (label, which);
                },
            )
        });
    let mask = |k: u8| split.iter().map(|&s| s == k).collect();
    Ok((x, y, [mask(0), mask(1), mask(2)]))
}

/// Draws the first `rows` nodes of chunk `chunk` of the R-MAT node
/// attributes, in order: each node's `features` standard-normal values,
/// then its label and split (0 train, 1 val, 2 test, 3 none), which
/// `each` sees with the node's index in the chunk.
fn draw_node_chunk(
    seed: u64,
    chunk: usize,
    rows: usize,
    features: usize,
    classes: u32,
    splits: [f64; 3],
    mut each: impl FnMut(usize, &[f32], i64, u8),
) {
    let mut rng = chunk_rng(seed, STREAM_NODES, chunk as u64);
    let mut row = vec![0f32; features];
    for i in 0..rows {
        for value in row.iter_mut() {
            *value = rng.sample(StandardNormal);
        }
        let label = rng.random_range(0..classes as i64);
        let r: f64 = rng.random();
        let which = if r < splits[0] {
            0
        } else if r < splits[0] + splits[1] {
            1
        } else if r < splits[0] + splits[1] + splits[2] {
            2
        } else {
            3
        };
        each(i, &row, label, which);
    }
}

/// A sink for drawn feature rows: called with each node drawn, in
/// ascending order, and its row, it copies the row to every place that
/// `wanted` ((node, place) pairs sorted by node) lists for the node, in
/// `out` (a row per place).
fn keep_rows<'a>(
    wanted: &'a [(u64, usize)],
    features: usize,
    out: &'a mut [f32],
) -> impl FnMut(u64, &[f32]) + 'a {
    let mut next = 0;
    move |node, row| {
        while next < wanted.len() && wanted[next].0 < node {
            next += 1;
        }
        let mut at = next;
        while at < wanted.len() && wanted[at].0 == node {
            let place = wanted[at].1;
            out[place * features..(place + 1) * features].copy_from_slice(row);
            at += 1;
        }
    }
}

/// `ids`' (node, place) pairs, sorted by node.
fn sorted_places(ids: &[u64]) -> Vec<(u64, usize)> {
    let mut wanted: Vec<(u64, usize)> = ids.iter().copied().zip(0..).collect();
    wanted.sort_unstable();
    wanted
}

impl RmatSpec {
    /// The feature rows of nodes `ids` (each below [`RmatSpec::nodes`]:
    /// [`GeneratorSpec::rows`] checks), in that order: those of
    /// [`RmatSpec::generate`], drawing only the chunks of nodes that hold
    /// them.
    fn rows(&self, ids: &[u64]) -> Vec<f32> {
        let f = self.features as usize;
        let wanted = sorted_places(ids);
        // Per chunk, its slice of `wanted`.
        let mut groups: Vec<&[(u64, usize)]> = Vec::new();
        let mut rest = &wanted[..];
        while let Some(&(node, _)) = rest.first() {
            let chunk = node as usize / NODES_PER_CHUNK;
            let len = rest.partition_point(|&(v, _)| (v as usize) / NODES_PER_CHUNK == chunk);
            let (group, after) = rest.split_at(len);
            groups.push(group);
            rest = after;
        }
        let draw = |group: &&[(u64, usize)]| {
            let chunk = group[0].0 as usize / NODES_PER_CHUNK;
            let first = chunk * NODES_PER_CHUNK;
            // Up to the last row wanted; the group's places, renumbered.
            let last = group[group.len() - 1].0 as usize - first;
            let local: Vec<(u64, usize)> = group
                .iter()
                .enumerate()
                .map(|(k, &(v, _))| (v - first as u64, k))
                .collect();
            let mut rows = vec![0f32; group.len() * f];
            let mut keep = keep_rows(&local, f, &mut rows);
            let splits = [self.train, self.val, self.test];
            draw_node_chunk(
                self.seed,
                chunk,
                last + 1,
                f,
                self.classes,
                splits,
                |i, row, _, _| keep(i as u64, row),
            );
            drop(keep);
            rows
        };
        let mut out = vec![0f32; ids.len() * f];
        // A few chunks per thread at a time: their rows are held twice
        // (drawn, then placed) only until they are placed.
        let batch = 4 * rayon::current_num_threads();
        for groups in groups.chunks(batch) {
            let drawn: Vec<Vec<f32>> = groups.par_iter().map(draw).collect();
            for (group, rows) in groups.iter().zip(&drawn) {
                for (&(_, place), row) in group.iter().zip(rows.chunks_exact(f.max(1))) {
                    out[place * f..(place + 1) * f].copy_from_slice(row);
                }
            }
        }
        out
    }
}

/// A planted-partition graph: `classes` balanced classes, about
/// `nodes · degree` directed edges (each undirected edge in both
/// directions, no self loops, no duplicates, sorted by source then
/// destination), of which a share `homophily` join nodes of the same class.
/// Features are the node's class centroid (standard normal per class) plus
/// `noise` times standard normal noise. The split is Planetoid's:
/// `train_per_class` nodes of each class, then `val` and `test` nodes, all
/// drawn at random.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantedSpec {
    pub nodes: u64,
    pub classes: u32,
    pub features: u32,
    /// Average number of neighbours.
    pub degree: f64,
    /// Share of edges whose ends have the same class.
    pub homophily: f64,
    /// Standard deviation of the feature noise (centroids have unit variance).
    pub noise: f64,
    pub train_per_class: u64,
    pub val: u64,
    pub test: u64,
    pub seed: u64,
}

/// Whether (train nodes a class, validation, test) fit `nodes` in
/// `classes` balanced classes.
fn split_fits(nodes: u64, classes: u32, split: [u64; 3]) -> bool {
    let smallest_class = nodes / u64::from(classes.max(1));
    split[0] <= smallest_class && labelled(classes, split) <= nodes
}

/// Nodes a split labels (saturating).
fn labelled(classes: u32, [train, val, test]: [u64; 3]) -> u64 {
    train
        .saturating_mul(u64::from(classes))
        .saturating_add(val)
        .saturating_add(test)
}

impl PlantedSpec {
    pub fn new(nodes: u64) -> PlantedSpec {
        PlantedSpec {
            nodes,
            classes: 5,
            features: 32,
            degree: 8.0,
            homophily: 0.8,
            noise: 3.0,
            train_per_class: 20,
            val: 500,
            test: 1000,
            seed: 1,
        }
    }

    /// The split of a planted graph of `nodes` in `classes` classes, as
    /// (train nodes a class, validation, test): the numbers `given`, and
    /// for the others Planetoid's (20, 500, 1000) where that fits with the
    /// given ones, else a fifth of the smallest class (1 to 20), a fifth
    /// of the nodes (at most 500) and two fifths (at most 1000), the test
    /// and then the validation set shrunk to the room left where they do
    /// not fit. A split that still does not fit is refused by the spec's
    /// validation.
    pub fn split(nodes: u64, classes: u32, given: [Option<u64>; 3]) -> [u64; 3] {
        let pick = |defaults: [u64; 3]| [0, 1, 2].map(|i| given[i].unwrap_or(defaults[i]));
        let smallest_class = nodes / u64::from(classes.max(1));
        let planetoid = pick([20, 500, 1000]);
        if split_fits(nodes, classes, planetoid) {
            return planetoid;
        }
        let mut split = pick([
            (smallest_class / 5).clamp(1, 20),
            (nodes / 5).min(500),
            (2 * nodes / 5).min(1000),
        ]);
        // What was not given shrinks to the room the rest leave, test first.
        for i in [2, 1] {
            if given[i].is_none() && !split_fits(nodes, classes, split) {
                let others = labelled(classes, split) - split[i];
                split[i] = split[i].min(nodes.saturating_sub(others));
            }
        }
        split
    }

    pub fn name(&self) -> String {
        format!(
            "planted-n{}-c{}-h{}-seed{}",
            self.nodes, self.classes, self.homophily, self.seed
        )
    }

    fn validate(&self, spec: &str) -> Result<()> {
        check_range(
            spec,
            "nodes",
            self.nodes as f64,
            2.0,
            MAX_PLANTED_NODES as f64,
        )?;
        check_node_attributes(spec, self.nodes, self.features, self.classes)?;
        check_range(spec, "degree", self.degree, 0.0, MAX_DEGREE)?;
        // Repeated pairs are kept once: a degree a simple graph cannot
        // have would be cut short without a word.
        let neighbours = self.nodes - 1;
        if self.degree > neighbours as f64 {
            return Err(Error::invalid(
                Path::new(spec),
                "degree",
                format!(
                    "{} is more than the {neighbours} other nodes each of {} nodes can link to",
                    self.degree, self.nodes
                ),
            ));
        }
        // A graph of no edges is refused as a file of none is.
        if (self.nodes as f64 * self.degree / 2.0).round() < 1.0 {
            return Err(Error::invalid(
                Path::new(spec),
                "degree",
                format!(
                    "{} gives no edges to {} nodes (nodes x degree / 2 rounds to 0); a graph \
                     needs at least one",
                    readable(self.degree),
                    self.nodes
                ),
            ));
        }
        check_range(spec, "homophily", self.homophily, 0.0, 1.0)?;
        check_range(spec, "noise", self.noise, 0.0, 1e6)?;
        let smallest_class = self.nodes / self.classes as u64;
        if self.train_per_class > smallest_class {
            return Err(Error::invalid(
                Path::new(spec),
                "train_per_class",
                format!(
                    "{} exceeds the smallest class ({smallest_class} nodes)",
                    self.train_per_class
                ),
            ));
        }
        let labelled = labelled(self.classes, [self.train_per_class, self.val, self.test]);
        if labelled > self.nodes {
            return Err(Error::invalid(
                Path::new(spec),
                "val",
                format!(
                    "train_per_class · classes + val + test = {labelled} exceeds nodes = {}",
                    self.nodes
                ),
            ));
        }
        Ok(())
    }

    pub fn generate(&self) -> Result<Dataset> {
        self.generate_with(true)
    }

    /// Draws the labels (balanced classes in random order), then each
    /// node's features (its class centroid plus noise), in node order,
    /// which `each` sees; returns the labels and the node stream as the
    /// features leave it (the split is drawn from it next).
    fn draw_nodes(&self, mut each: impl FnMut(u64, &[f32])) -> (Vec<i64>, Pcg64Mcg) {
        let n = self.nodes as usize;
        let c = self.classes as usize;
        let f = self.features as usize;
        let mut rng = chunk_rng(self.seed, STREAM_NODES, 0);
        let mut y: Vec<i64> = (0..n).map(|v| (v % c) as i64).collect();
        y.shuffle(&mut rng);
        let centroids: Vec<f32> = (0..c * f).map(|_| rng.sample(StandardNormal)).collect();
        let noise = self.noise as f32;
        let mut row = vec![0f32; f];
        for (v, &label) in y.iter().enumerate() {
            let centroid = &centroids[label as usize * f..(label as usize + 1) * f];
            for (value, &mean) in row.iter_mut().zip(centroid) {
                let z: f32 = rng.sample(StandardNormal);
                *value = mean + noise * z;
            }
            each(v as u64, &row);
        }
        (y, rng)
    }

    /// The feature rows of nodes `ids` (each below `nodes`:
    /// [`GeneratorSpec::rows`] checks), in that order: those of
    /// [`PlantedSpec::generate`], drawing every row in turn and keeping
    /// those.
    fn rows(&self, ids: &[u64]) -> Vec<f32> {
        let f = self.features as usize;
        let wanted = sorted_places(ids);
        let mut out = vec![0f32; ids.len() * f];
        self.draw_nodes(keep_rows(&wanted, f, &mut out));
        out
    }

    /// [`PlantedSpec::generate`], with the features only where `features`
    /// (else `x` is empty: drawn and dropped, so that the split is the
    /// same).
    fn generate_with(&self, features: bool) -> Result<Dataset> {
        self.validate(&self.to_string())?;
        let n = self.nodes as usize;
        let c = self.classes as usize;
        let f = self.features as usize;
        let mut x = if features {
            crate::error::zeroed(n * f, || format!("the features of {self}"))?
        } else {
            Vec::new()
        };
        let (y, mut rng) = self.draw_nodes(|v, row| {
            if features {
                let v = v as usize;
                x[v * f..(v + 1) * f].copy_from_slice(row);
            }
        });
        let mut members: Vec<Vec<u64>> = vec![Vec::with_capacity(n / c + 1); c];
        for (v, &label) in y.iter().enumerate() {
            members[label as usize].push(v as u64);
        }

        // Edges: each undirected pair picks a uniform node, then a
        // neighbour in its class with probability `homophily`, else in a
        // uniformly chosen other class.
        let pairs = (self.nodes as f64 * self.degree / 2.0).round() as u64;
        let mut edge_rng = chunk_rng(self.seed, STREAM_EDGES, 0);
        let mut edges: Vec<(u64, u64)> = Vec::with_capacity(2 * pairs as usize);
        for _ in 0..pairs {
            for _ in 0..SELF_LOOP_RETRIES {
                let u = edge_rng.random_range(0..self.nodes);
                let own = y[u as usize] as usize;
                let class = if c == 1 || edge_rng.random_bool(self.homophily) {
                    own
                } else {
                    let other = edge_rng.random_range(0..c - 1);
                    other + usize::from(other >= own)
                };
                let pool = &members[class];
                let v = pool[edge_rng.random_range(0..pool.len())];
                if v != u {
                    edges.push((u, v));
                    edges.push((v, u));
                    break;
                }
            }
        }
        edges.sort_unstable();
        edges.dedup();
        let (src, dst) = edges.into_iter().unzip();

        // Planetoid split over a random order of the nodes.
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut rng);
        let mut train_mask = vec![false; n];
        let mut val_mask = vec![false; n];
        let mut test_mask = vec![false; n];
        let mut taken = vec![0u64; c];
        let mut rest = Vec::with_capacity(n);
        for v in order {
            let class = y[v] as usize;
            if taken[class] < self.train_per_class {
                taken[class] += 1;
                train_mask[v] = true;
            } else {
                rest.push(v);
            }
        }
        let (val, test) = (self.val as usize, self.test as usize);
        for &v in &rest[..val] {
            val_mask[v] = true;
        }
        for &v in &rest[val..val + test] {
            test_mask[v] = true;
        }

        Ok(Dataset {
            name: self.name(),
            nodes: self.nodes,
            features: self.features,
            classes: self.classes,
            x,
            y,
            train_mask,
            val_mask,
            test_mask,
            src,
            dst,
        })
    }
}

fn check_node_attributes(spec: &str, nodes: u64, features: u32, classes: u32) -> Result<()> {
    check_range(spec, "features", features as f64, 1.0, MAX_FEATURES as f64)?;
    check_range(spec, "classes", classes as f64, 1.0, MAX_CLASSES as f64)?;
    if classes as u64 > nodes {
        return Err(Error::invalid(
            Path::new(spec),
            "classes",
            format!(
                "{classes}{} is more than the {nodes} nodes",
                match spec.contains("classes=") {
                    true => "",
                    false => " (the default; give classes=N)",
                }
            ),
        ));
    }
    if nodes.saturating_mul(features as u64) > MAX_FEATURE_VALUES {
        return Err(Error::invalid(
            Path::new(spec),
            "features",
            format!("{nodes} nodes × {features} features exceeds {MAX_FEATURE_VALUES} values"),
        ));
    }
    Ok(())
}

fn check_range(spec: &str, key: &str, value: f64, low: f64, high: f64) -> Result<()> {
    if !(low..=high).contains(&value) {
        let [value, low, high] = [value, low, high].map(readable);
        return Err(Error::invalid(
            Path::new(spec),
            key,
            format!("{value} is outside {low}..={high}"),
        ));
    }
    Ok(())
}

/// `value` as written in a spec: plainly (`0.25`, `1000000`), or with an
/// exponent where plainly would take more than 16 digits (`1e300`,
/// `1e-12`) rather than hundreds.
fn readable(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 || !value.is_finite() || (1e-4..1e16).contains(&magnitude) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// A synthetic dataset named by a spec string `KIND:KEY=VALUE,...`.
#[derive(Debug, Clone, PartialEq)]
pub enum GeneratorSpec {
    Rmat(RmatSpec),
    Planted(PlantedSpec),
}

const RMAT_KEYS: [&str; 10] = [
    "scale",
    "edge_factor",
    "features",
    "classes",
    "train",
    "val",
    "test",
    "scramble",
    "symmetric",
    "seed",
];
const PLANTED_KEYS: [&str; 10] = [
    "nodes",
    "classes",
    "features",
    "degree",
    "homophily",
    "noise",
    "train_per_class",
    "val",
    "test",
    "seed",
];

impl GeneratorSpec {
    /// Parses `rmat:scale=S[,KEY=VALUE...]` or
    /// `planted:nodes=N[,KEY=VALUE...]`; unknown kinds, unknown or repeated
    /// keys and bad values are errors naming them. Keys left out take the
    /// defaults of [`RmatSpec::new`] and [`PlantedSpec::new`].
    pub fn parse(text: &str) -> Result<GeneratorSpec> {
        let bad = |field: &str, message: String| Error::invalid(Path::new(text), field, message);
        let (kind, rest) = text.split_once(':').unwrap_or((text, ""));
        let known: &[&str] = match kind {
            "rmat" => &RMAT_KEYS,
            "planted" => &PLANTED_KEYS,
            other => {
                return Err(bad(
                    "kind",
                    format!("{other:?} is not a generator; known: rmat, planted"),
                ))
            }
        };
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        let items: Vec<&str> = match rest.trim() {
            "" => Vec::new(),
            rest => rest.split(',').map(str::trim).collect(),
        };
        if let Some(at) = items.iter().position(|item| item.is_empty()) {
            return Err(bad(
                &format!("item {} of {}", at + 1, items.len()),
                "empty; give KEY=VALUE items, comma-separated".into(),
            ));
        }
        for item in items {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad(item, "expected KEY=VALUE".into()))?;
            let (key, value) = (key.trim(), value.trim());
            if !known.contains(&key) {
                return Err(bad(
                    key,
                    format!(
                        "unknown key (value {value:?}); {kind} takes {}",
                        known.join(", ")
                    ),
                ));
            }
            if pairs.iter().any(|&(k, _)| k == key) {
                return Err(bad(key, format!("given twice (again as {value:?})")));
            }
            pairs.push((key, value));
        }
        let get = |key: &str| pairs.iter().find(|&&(k, _)| k == key).map(|&(_, v)| v);
        fn number<T: std::str::FromStr>(
            text: &str,
            key: &str,
            value: Option<&str>,
            default: T,
        ) -> Result<T> {
            match value {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| {
                    // Digits alone that do not parse are too many for the type.
                    let most = match std::any::type_name::<T>() {
                        "u8" => Some(u64::from(u8::MAX)),
                        "u16" => Some(u64::from(u16::MAX)),
                        "u32" => Some(u64::from(u32::MAX)),
                        "u64" | "usize" => Some(u64::MAX),
                        _ => None,
                    };
                    let digits = !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
                    if let Some(most) = most.filter(|_| digits) {
                        return Error::invalid(
                            Path::new(text),
                            key,
                            format!("{v} is too large: at most {most}"),
                        );
                    }
                    let kind = match std::any::type_name::<T>() {
                        "bool" => "true or false",
                        "f32" | "f64" => "a number",
                        "i8" | "i16" | "i32" | "i64" => "a whole number",
                        _ => "a whole number, 0 or more",
                    };
                    Error::invalid(Path::new(text), key, format!("{v:?} is not {kind}"))
                }),
            }
        }
        let spec = match kind {
            "rmat" => {
                let scale = get("scale").ok_or_else(|| {
                    bad("scale", "missing; rmat needs scale (N = 2^scale)".into())
                })?;
                let d = RmatSpec::new(0);
                GeneratorSpec::Rmat(RmatSpec {
                    scale: number(text, "scale", Some(scale), 0)?,
                    edge_factor: number(text, "edge_factor", get("edge_factor"), d.edge_factor)?,
                    features: number(text, "features", get("features"), d.features)?,
                    classes: number(text, "classes", get("classes"), d.classes)?,
                    train: number(text, "train", get("train"), d.train)?,
                    val: number(text, "val", get("val"), d.val)?,
                    test: number(text, "test", get("test"), d.test)?,
                    scramble: number(text, "scramble", get("scramble"), d.scramble)?,
                    symmetric: number(text, "symmetric", get("symmetric"), d.symmetric)?,
                    seed: number(text, "seed", get("seed"), d.seed)?,
                })
            }
            _ => {
                let nodes = get("nodes")
                    .ok_or_else(|| bad("nodes", "missing; planted needs nodes".into()))?;
                let d = PlantedSpec::new(0);
                let nodes: u64 = number(text, "nodes", Some(nodes), 0)?;
                let classes: u32 = number(text, "classes", get("classes"), d.classes)?;
                let mut given = [None; 3];
                for (slot, key) in given.iter_mut().zip(["train_per_class", "val", "test"]) {
                    *slot = get(key)
                        .map(|v| number(text, key, Some(v), 0))
                        .transpose()?;
                }
                let [train_per_class, val, test] = PlantedSpec::split(nodes, classes, given);
                GeneratorSpec::Planted(PlantedSpec {
                    nodes,
                    classes,
                    features: number(text, "features", get("features"), d.features)?,
                    // The default, on a graph too small for it, is
                    // every other node; a degree given is checked.
                    degree: number(
                        text,
                        "degree",
                        get("degree"),
                        d.degree.min(nodes.saturating_sub(1) as f64),
                    )?,
                    homophily: number(text, "homophily", get("homophily"), d.homophily)?,
                    noise: number(text, "noise", get("noise"), d.noise)?,
                    train_per_class,
                    val,
                    test,
                    seed: number(text, "seed", get("seed"), d.seed)?,
                })
            }
        };
        match &spec {
            GeneratorSpec::Rmat(s) => s.validate(text)?,
            GeneratorSpec::Planted(s) => s.validate(text)?,
        }
        Ok(spec)
    }

    pub fn generate(&self) -> Result<Dataset> {
        match self {
            GeneratorSpec::Rmat(s) => s.generate(),
            GeneratorSpec::Planted(s) => s.generate(),
        }
    }

    /// Nodes, features per node and edges of the graph this spec draws
    /// (a planted graph's edges before duplicates are dropped).
    pub fn sizes(&self) -> (u64, u64, u64) {
        match self {
            GeneratorSpec::Rmat(s) => (
                s.nodes(),
                s.features as u64,
                s.drawn_edges() * (1 + u64::from(s.symmetric)),
            ),
            GeneratorSpec::Planted(s) => (
                s.nodes,
                s.features as u64,
                2 * (s.nodes as f64 * s.degree / 2.0).round() as u64,
            ),
        }
    }

    /// Bytes per vertex that drawing the edges holds beside whatever reads
    /// them: a scrambled R-MAT spec's relabelling of its vertices (8); none
    /// for a planted graph, whose edges are drawn once, when it opens.
    pub fn relabelling_bytes_per_vertex(&self) -> u64 {
        match self {
            GeneratorSpec::Rmat(s) if s.scramble => 8,
            _ => 0,
        }
    }

    /// Bytes the dataset [`GeneratorSpec::generate`] returns holds: the
    /// features (4 bytes each), a label (8) and three masks (1 each) per
    /// node, and two node ids (8 each) per edge. Drawing it holds more
    /// for a while; this is the least it needs.
    pub fn dataset_bytes(&self) -> u64 {
        let (nodes, features, edges) = self.sizes();
        nodes
            .saturating_mul(features.saturating_mul(4).saturating_add(11))
            .saturating_add(edges.saturating_mul(16))
    }

    /// The most bytes [`GeneratorSpec::open`] and counting the graph's
    /// blocks hold at once (the features not drawn): for an R-MAT spec a
    /// label (8), a split (1) and three masks (1 each) per node, which
    /// outweigh the relabelling (8 per node) its edges are later drawn
    /// with; for a planted graph, the larger of its edges drawn (labels
    /// and class lists, 16 per node; the drawn pairs and the lists they
    /// become, 32 per edge) and its split (35 per node beside the lists,
    /// 16 per edge).
    pub fn opened_bytes(&self) -> u64 {
        let (nodes, _, edges) = self.sizes();
        match self {
            GeneratorSpec::Rmat(_) => nodes.saturating_mul(12),
            GeneratorSpec::Planted(_) => {
                let drawn = nodes
                    .saturating_mul(16)
                    .saturating_add(edges.saturating_mul(32));
                let split = nodes
                    .saturating_mul(35)
                    .saturating_add(edges.saturating_mul(16));
                drawn.max(split)
            }
        }
    }

    /// Refuses a spec whose dataset ([`GeneratorSpec::dataset_bytes`])
    /// is larger than the memory `available`, where drawing it would end
    /// with the process killed for memory.
    pub fn check_fits_in(&self, available: &Available) -> Result<()> {
        let (nodes, features, edges) = self.sizes();
        let what = format!("{nodes} nodes × {features} features, {edges} edges");
        self.check_bytes_in(available, self.dataset_bytes(), &what, true)
    }

    /// [`GeneratorSpec::check_fits_in`] for [`GeneratorSpec::open`]'s
    /// bytes ([`GeneratorSpec::opened_bytes`]): what `plan`, `compare`
    /// and `curve` hold to count a spec's edges.
    pub fn check_opens_in(&self, available: &Available) -> Result<()> {
        let (nodes, _, edges) = self.sizes();
        let what = format!("{nodes} nodes and {edges} edges, without the features");
        self.check_bytes_in(available, self.opened_bytes(), &what, false)
    }

    /// Refuses a spec whose drawing holds more than `bytes` (`what` says
    /// of what) where `available` is less; `features`: whether they are
    /// drawn, and fewer would fit.
    fn check_bytes_in(
        &self,
        available: &Available,
        bytes: u64,
        what: &str,
        features: bool,
    ) -> Result<()> {
        let Some(shortfall) = available.shortfall(bytes, what) else {
            return Ok(());
        };
        let remedy = match (self, features) {
            (GeneratorSpec::Rmat(_), true) => {
                "a smaller scale, fewer features or a smaller edge_factor"
            }
            (GeneratorSpec::Rmat(_), false) => "a smaller scale",
            (GeneratorSpec::Planted(_), true) => "fewer nodes or features, or a smaller degree",
            (GeneratorSpec::Planted(_), false) => "fewer nodes or a smaller degree",
        };
        Err(Error::TooLarge {
            path: self.to_string().into(),
            field: "size".into(),
            refusal: shortfall.refusal(format!("the graph takes {shortfall}; {remedy} fits")),
        })
    }

    /// [`GeneratorSpec::check_fits_in`] the memory this process can still
    /// take ([`crate::memory::available`]: the least of `MemAvailable`,
    /// the address-space limit and the cgroup's); no check where none of
    /// them can be read.
    pub fn check_fits(&self) -> Result<()> {
        crate::memory::available().map_or(Ok(()), |available| self.check_fits_in(&available))
    }

    /// [`GeneratorSpec::generate`] without the features: `x` is empty, and
    /// [`GeneratorSpec::rows`] draws the rows wanted.
    pub fn generate_without_features(&self) -> Result<Dataset> {
        match self {
            GeneratorSpec::Rmat(s) => s.generate_with(false, true),
            GeneratorSpec::Planted(s) => s.generate_with(false),
        }
    }

    /// [`GeneratorSpec::generate_without_features`] without the edges
    /// either (`src` and `dst` empty), and where they are read from: an
    /// R-MAT spec draws them a batch at a time; a planted graph's (whose
    /// pairs are sorted and deduplicated as a whole) are drawn whole.
    pub fn open(&self) -> Result<(Dataset, EdgeSource<'static>)> {
        match self {
            GeneratorSpec::Rmat(s) => {
                Ok((s.generate_with(false, false)?, EdgeSource::Rmat(s.clone())))
            }
            GeneratorSpec::Planted(s) => {
                let mut dataset = s.generate_with(false)?;
                let edges = EdgeSource::owned(
                    std::mem::take(&mut dataset.src),
                    std::mem::take(&mut dataset.dst),
                );
                Ok((dataset, edges))
            }
        }
    }

    /// The feature rows of nodes `ids`, in that order, as
    /// [`GeneratorSpec::generate`] draws them (an id at or past the node
    /// count is an error).
    pub fn rows(&self, ids: &[u64]) -> Result<Vec<f32>> {
        let nodes = match self {
            GeneratorSpec::Rmat(s) => s.nodes(),
            GeneratorSpec::Planted(s) => s.nodes,
        };
        if let Some(&id) = ids.iter().find(|&&id| id >= nodes) {
            return Err(Error::invalid(
                Path::new(&self.to_string()),
                "nodes",
                format!("{nodes}: there is no node {id}"),
            ));
        }
        Ok(match self {
            GeneratorSpec::Rmat(s) => s.rows(ids),
            GeneratorSpec::Planted(s) => s.rows(ids),
        })
    }

    /// The first negative feature value in row-major order, as
    /// [`crate::dataset::Dataset::row_normalize_features`] finds it,
    /// drawing the rows in turn without holding them.
    pub fn first_negative(&self) -> Option<(u64, u32, f32)> {
        let negative = |v: u64, row: &[f32]| {
            row.iter()
                .position(|&x| x < 0.0)
                .map(|c| (v, c as u32, row[c]))
        };
        match self {
            GeneratorSpec::Rmat(s) => {
                let f = s.features as usize;
                let splits = [s.train, s.val, s.test];
                let nodes = s.nodes() as usize;
                (0..nodes.div_ceil(NODES_PER_CHUNK)).find_map(|chunk| {
                    let rows = NODES_PER_CHUNK.min(nodes - chunk * NODES_PER_CHUNK);
                    let mut found = None;
                    draw_node_chunk(s.seed, chunk, rows, f, s.classes, splits, |i, row, _, _| {
                        if found.is_none() {
                            found = negative((chunk * NODES_PER_CHUNK + i) as u64, row);
                        }
                    });
                    found
                })
            }
            GeneratorSpec::Planted(s) => {
                let mut found = None;
                s.draw_nodes(|v, row| {
                    if found.is_none() {
                        found = negative(v, row);
                    }
                });
                found
            }
        }
    }

    pub fn name(&self) -> String {
        match self {
            GeneratorSpec::Rmat(s) => s.name(),
            GeneratorSpec::Planted(s) => s.name(),
        }
    }

    /// Features per node and classes the spec names.
    pub fn features_and_classes(&self) -> (u32, u32) {
        match self {
            GeneratorSpec::Rmat(s) => (s.features, s.classes),
            GeneratorSpec::Planted(s) => (s.features, s.classes),
        }
    }

    /// The spec with `features` features per node. Only the node count and
    /// the edges are sure to stay the same (they are drawn from a stream of
    /// their own); labels and splits may not.
    pub fn with_features(&self, features: u32) -> GeneratorSpec {
        match self {
            GeneratorSpec::Rmat(s) => GeneratorSpec::Rmat(RmatSpec { features, ..*s }),
            GeneratorSpec::Planted(s) => GeneratorSpec::Planted(PlantedSpec { features, ..*s }),
        }
    }
}

/// The full spec string, every key given: `parse(to_string())` gives it back.
impl fmt::Display for RmatSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rmat:scale={},edge_factor={},features={},classes={},train={},val={},test={},\
             scramble={},symmetric={},seed={}",
            self.scale,
            self.edge_factor,
            self.features,
            self.classes,
            self.train,
            self.val,
            self.test,
            self.scramble,
            self.symmetric,
            self.seed
        )
    }
}

impl fmt::Display for PlantedSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "planted:nodes={},classes={},features={},degree={},homophily={},noise={},\
             train_per_class={},val={},test={},seed={}",
            self.nodes,
            self.classes,
            self.features,
            self.degree,
            self.homophily,
            self.noise,
            self.train_per_class,
            self.val,
            self.test,
            self.seed
        )
    }
}

impl fmt::Display for GeneratorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeneratorSpec::Rmat(s) => s.fmt(f),
            GeneratorSpec::Planted(s) => s.fmt(f),
        }
    }
}

impl std::str::FromStr for GeneratorSpec {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        GeneratorSpec::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rmat(text: &str) -> Dataset {
        GeneratorSpec::parse(text).unwrap().generate().unwrap()
    }

    #[test]
    fn rows_drawn_alone_are_the_generated_rows() {
        for text in [
            // Two chunks of nodes; one chunk, shorter than the others.
            "rmat:scale=13,edge_factor=2,features=5,classes=3,seed=7",
            "rmat:scale=11,edge_factor=2,features=5,classes=3,seed=7",
            "planted:nodes=700,classes=3,features=4,val=100,test=200,seed=2",
        ] {
            let spec = GeneratorSpec::parse(text).unwrap();
            let whole = spec.generate().unwrap();
            let without = spec.generate_without_features().unwrap();
            assert!(without.x.is_empty(), "{text}");
            assert_eq!(
                Dataset {
                    x: whole.x.clone(),
                    ..without
                },
                whole,
                "{text}"
            );
            // Without the edges either: the same edges, from their source.
            let (topology, edges) = spec.open().unwrap();
            assert!(topology.x.is_empty() && topology.src.is_empty(), "{text}");
            let mut pairs: Vec<(u64, u64)> = Vec::new();
            edges
                .for_each_batch(&mut |s, d| {
                    pairs.extend(s.iter().copied().zip(d.iter().copied()));
                    Ok(())
                })
                .unwrap();
            let mut expected: Vec<(u64, u64)> = whole
                .src
                .iter()
                .copied()
                .zip(whole.dst.iter().copied())
                .collect();
            pairs.sort_unstable();
            expected.sort_unstable();
            assert_eq!(pairs, expected, "{text}");
            assert_eq!(
                Dataset {
                    x: whole.x.clone(),
                    src: whole.src.clone(),
                    dst: whole.dst.clone(),
                    ..topology
                },
                whole,
                "{text}"
            );
            let n = whole.nodes;
            // Unordered, across chunks, repeated, and the last node.
            let ids = [n - 1, 5, 4096 % n, 0, 5, 8191 % n, 4095 % n, n / 2];
            let rows = spec.rows(&ids).unwrap();
            let expected: Vec<f32> = ids.iter().flat_map(|&v| whole.row(v).to_vec()).collect();
            assert_eq!(rows, expected, "{text}");
            assert!(spec.rows(&[]).unwrap().is_empty());
            let message = spec.rows(&[0, n]).unwrap_err().to_string();
            assert!(
                message.contains(&format!("there is no node {n}")),
                "{message}"
            );
            // The first negative value, as the pass over the whole finds it.
            let Some((row, column, value)) = spec.first_negative() else {
                panic!("{text}: standard-normal features have a negative value");
            };
            let mut normalised = whole.clone();
            assert_eq!(
                normalised.row_normalize_features(),
                crate::dataset::FeatureScaling::KeptSigned { row, column, value },
                "{text}"
            );
        }
    }

    #[test]
    fn rmat_is_deterministic_and_sized() {
        let a = rmat("rmat:scale=12,features=8,classes=4,seed=7");
        assert_eq!(
            (a.nodes, a.edges(), a.features, a.classes),
            (4096, 65536, 8, 4)
        );
        assert_eq!((a.x.len(), a.y.len()), (4096 * 8, 4096));
        assert!(a.src.iter().chain(&a.dst).all(|&v| v < 4096));
        assert!(a.y.iter().all(|&l| (0..4).contains(&l)));
        let b = rmat("rmat:scale=12,features=8,classes=4,seed=7");
        assert_eq!(a, b);
        // The same result on one thread.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let c = pool.install(|| rmat("rmat:scale=12,features=8,classes=4,seed=7"));
        assert_eq!(a, c);
        let d = rmat("rmat:scale=12,features=8,classes=4,seed=8");
        assert_ne!(a.src, d.src);
        // Split shares of 0.6 / 0.2 / 0.2, within sampling noise.
        let (train, val, test) = a.split_sizes();
        assert!((2300..2600).contains(&train), "{train}");
        assert!((700..950).contains(&val) && (700..950).contains(&test));
        assert_eq!(train + val + test, 4096);
    }

    #[test]
    fn rmat_degrees_are_skewed_and_symmetric_doubles() {
        let spec = "rmat:scale=12,features=1,classes=2,scramble=false";
        let a = rmat(spec);
        let mut degree = vec![0u64; a.nodes as usize];
        for &s in &a.src {
            degree[s as usize] += 1;
        }
        // Unscrambled, vertex 0 is the hub: far above the average of 16.
        assert!(degree[0] > 16 * 20, "{}", degree[0]);
        let max = *degree.iter().max().unwrap();
        assert_eq!(max, degree[0]);
        let scrambled = rmat("rmat:scale=12,features=1,classes=2");
        let mut sorted_a: Vec<u64> = degree.clone();
        let mut degree_b = vec![0u64; a.nodes as usize];
        for &s in &scrambled.src {
            degree_b[s as usize] += 1;
        }
        sorted_a.sort_unstable();
        degree_b.sort_unstable();
        assert_eq!(sorted_a, degree_b, "scrambling only relabels");
        let sym = rmat("rmat:scale=12,features=1,classes=2,symmetric=true,scramble=false");
        assert_eq!(sym.edges(), 2 * a.edges());
        assert_eq!(&sym.src[..a.src.len()], &a.src[..]);
        assert_eq!(&sym.src[a.src.len()..], &a.dst[..]);
    }

    #[test]
    fn a_small_planted_graph_gets_a_split_that_fits_unless_one_is_given() {
        let planted = |text: &str| match GeneratorSpec::parse(text).unwrap() {
            GeneratorSpec::Planted(p) => p,
            other => panic!("{other}"),
        };
        // Planetoid's split where it fits.
        let big = planted("planted:nodes=1600");
        assert_eq!((big.train_per_class, big.val, big.test), (20, 500, 1000));
        // Below that, fifths: 100 nodes of 5 classes.
        let small = planted("planted:nodes=100");
        assert_eq!((small.train_per_class, small.val, small.test), (4, 20, 40));
        let d = small.generate().unwrap();
        let count = |mask: &[bool]| mask.iter().filter(|&&m| m).count();
        assert_eq!(
            (
                count(&d.train_mask),
                count(&d.val_mask),
                count(&d.test_mask)
            ),
            (20, 20, 40)
        );
        // What is given is kept; the rest scales.
        let given = planted("planted:nodes=1000,classes=10,val=100");
        assert_eq!(
            (given.train_per_class, given.val, given.test),
            (20, 100, 400)
        );
        let tiny = planted("planted:nodes=2,classes=2");
        assert_eq!((tiny.train_per_class, tiny.val, tiny.test), (1, 0, 0));
        // Numbers given that fit with Planetoid's others keep them.
        let kept = planted("planted:nodes=300,val=50,test=100");
        assert_eq!((kept.train_per_class, kept.val, kept.test), (20, 50, 100));
        let kept = planted("planted:nodes=1000,val=700");
        assert_eq!((kept.train_per_class, kept.val, kept.test), (20, 700, 200));
        // A sum past u64 is refused, not wrapped.
        let message = GeneratorSpec::parse("planted:nodes=100,val=18446744073709551615,test=1")
            .unwrap_err()
            .to_string();
        assert!(message.contains("exceeds nodes = 100"), "{message}");
    }

    #[test]
    fn planted_graph_has_its_degree_homophily_and_split() {
        let spec = "planted:nodes=2000,classes=5,features=32,degree=8,homophily=0.8,seed=1";
        let d = GeneratorSpec::parse(spec).unwrap().generate().unwrap();
        assert_eq!(d, GeneratorSpec::parse(spec).unwrap().generate().unwrap());
        assert_eq!((d.nodes, d.classes, d.features), (2000, 5, 32));
        let average = d.edges() as f64 / d.nodes as f64;
        assert!((7.5..=8.0).contains(&average), "{average}");
        let intra = (0..d.src.len())
            .filter(|&k| d.y[d.src[k] as usize] == d.y[d.dst[k] as usize])
            .count() as f64
            / d.edges() as f64;
        assert!((0.77..0.83).contains(&intra), "{intra}");
        // Symmetric, sorted, unique, no self loops.
        let edges: Vec<(u64, u64)> = d.src.iter().copied().zip(d.dst.iter().copied()).collect();
        assert!(edges.windows(2).all(|w| w[0] < w[1]));
        assert!(edges.iter().all(|&(s, t)| s != t));
        assert!(edges
            .iter()
            .all(|&(s, t)| edges.binary_search(&(t, s)).is_ok()));
        assert_eq!(d.split_sizes(), (100, 500, 1000));
        for class in 0..5 {
            let train = (0..2000)
                .filter(|&v| d.train_mask[v] && d.y[v] == class)
                .count();
            assert_eq!(train, 20);
        }
        assert!((0..2000).all(|v| {
            u8::from(d.train_mask[v]) + u8::from(d.val_mask[v]) + u8::from(d.test_mask[v]) <= 1
        }));
    }

    /// Nearest centroid, centroids from the training nodes, scored on the test nodes.
    fn nearest_centroid_accuracy(d: &Dataset, x: &[f32]) -> f64 {
        let (c, f) = (d.classes as usize, d.features as usize);
        let mut sums = vec![0f64; c * f];
        let mut counts = vec![0f64; c];
        for v in (0..d.nodes as usize).filter(|&v| d.train_mask[v]) {
            let label = d.y[v] as usize;
            counts[label] += 1.0;
            for k in 0..f {
                sums[label * f + k] += x[v * f + k] as f64;
            }
        }
        let mut right = 0;
        let mut total = 0;
        for v in (0..d.nodes as usize).filter(|&v| d.test_mask[v]) {
            let distance = |label: usize| -> f64 {
                (0..f)
                    .map(|k| (x[v * f + k] as f64 - sums[label * f + k] / counts[label]).powi(2))
                    .sum()
            };
            let guess = (0..c)
                .min_by(|&a, &b| distance(a).total_cmp(&distance(b)))
                .unwrap();
            right += usize::from(guess as i64 == d.y[v]);
            total += 1;
        }
        right as f64 / total as f64
    }

    #[test]
    fn planted_labels_are_learnable_from_features_and_more_with_structure() {
        let d = GeneratorSpec::parse("planted:nodes=2000,classes=5,seed=3")
            .unwrap()
            .generate()
            .unwrap();
        let alone = nearest_centroid_accuracy(&d, &d.x);
        assert!(alone > 0.5, "features alone: {alone} (chance 0.2)");
        // Mean over the neighbourhood (self included): homophily helps.
        let f = d.features as usize;
        let mut smoothed = d.x.clone();
        let mut count = vec![1f32; d.nodes as usize];
        for (&s, &t) in d.src.iter().zip(&d.dst) {
            count[t as usize] += 1.0;
            for k in 0..f {
                smoothed[t as usize * f + k] += d.x[s as usize * f + k];
            }
        }
        for (v, c) in count.iter().enumerate() {
            for k in 0..f {
                smoothed[v * f + k] /= c;
            }
        }
        let with_structure = nearest_centroid_accuracy(&d, &smoothed);
        eprintln!(
            "nearest centroid: {alone:.3} on features, {with_structure:.3} on neighbourhood means"
        );
        assert!(
            with_structure > alone + 0.1,
            "{with_structure} with structure vs {alone}"
        );
    }

    #[test]
    fn a_spec_s_dataset_bytes_are_what_its_dataset_holds_and_more_is_refused() {
        let held = |d: &Dataset| {
            (d.x.len() * 4 + d.y.len() * 8 + d.nodes as usize * 3 + (d.src.len() + d.dst.len()) * 8)
                as u64
        };
        for text in [
            "rmat:scale=10,features=12,seed=3",
            "rmat:scale=9,edge_factor=5,features=3,symmetric=true",
            "planted:nodes=500,features=7,degree=6",
        ] {
            let spec = GeneratorSpec::parse(text).unwrap();
            let (bytes, dataset) = (spec.dataset_bytes(), spec.generate().unwrap());
            match spec {
                // R-MAT keeps every edge drawn; a planted graph drops
                // duplicate pairs.
                GeneratorSpec::Rmat(_) => assert_eq!(bytes, held(&dataset), "{text}"),
                GeneratorSpec::Planted(_) => {
                    assert!(
                        bytes >= held(&dataset) && bytes < held(&dataset) * 11 / 10,
                        "{text}"
                    )
                }
            }
            let figure = |bytes: u64, source: &str| Available {
                bytes,
                source: source.into(),
            };
            assert!(spec.check_fits_in(&figure(bytes, "test")).is_ok());
            let message = spec
                .check_fits_in(&figure(bytes - 1, "a test's figure"))
                .unwrap_err()
                .to_string();
            assert!(
                message.contains("size")
                    && message.contains("a test's figure")
                    && message.contains(&format!("{} nodes", dataset.nodes)),
                "{message}"
            );
        }
        // A graph no machine here holds is refused before it is drawn.
        let huge = GeneratorSpec::parse("rmat:scale=30,features=15").unwrap();
        assert!(huge.dataset_bytes() > 300 << 30);
        let message = huge
            .check_fits_in(&Available {
                bytes: 64 << 30,
                source: "64 GiB".into(),
            })
            .unwrap_err()
            .to_string();
        assert!(message.contains("a smaller scale"), "{message}");
    }

    #[test]
    fn spec_strings_round_trip_and_name_bad_keys_and_values() {
        for text in [
            "rmat:scale=20,features=128,classes=16,seed=1",
            "planted:nodes=2000,classes=5,features=32,degree=8,homophily=0.8,seed=1",
        ] {
            let spec = GeneratorSpec::parse(text).unwrap();
            assert_eq!(GeneratorSpec::parse(&spec.to_string()).unwrap(), spec);
        }
        let error = |text: &str| GeneratorSpec::parse(text).unwrap_err().to_string();
        let cases: [(&str, &[&str]); 23] = [
            (
                "rmat:scale=4,features=4294967296",
                &["features", "4294967296 is too large: at most 4294967295"],
            ),
            (
                "rmat:scale=4,seed=18446744073709551616",
                &["seed", "is too large: at most 18446744073709551615"],
            ),
            (
                "planted:nodes=100,degree=0",
                &[
                    "degree",
                    "0 gives no edges to 100 nodes",
                    "needs at least one",
                ],
            ),
            ("rmat:scale=10,,features=8", &["item 2 of 3: empty"]),
            ("planted:nodes=100,", &["item 2 of 2: empty"]),
            (
                "rmat:scale=10,colour=red",
                &["colour", "red", "unknown key"],
            ),
            (
                "rmat:scale=ten",
                &["scale", "\"ten\" is not a whole number, 0 or more"],
            ),
            (
                "rmat:scale=-1",
                &["scale", "\"-1\" is not a whole number, 0 or more"],
            ),
            (
                "planted:nodes=100,homophily=x",
                &["homophily", "\"x\" is not a number"],
            ),
            (
                "rmat:scale=4,symmetric=1",
                &["symmetric", "\"1\" is not true or false"],
            ),
            ("rmat:scale=40", &["scale", "40", "outside"]),
            ("rmat:features=3", &["scale", "missing"]),
            ("rmat:scale=4,seed=1,seed=2", &["seed", "twice"]),
            ("rmat:scale=4,train=0.9,val=0.2", &["train", "exceeds 1"]),
            ("tree:depth=3", &["kind", "tree"]),
            (
                "planted:nodes=100,homophily=1.5",
                &["homophily", "1.5 is outside 0..=1"],
            ),
            // Written with an exponent, not 301 digits.
            (
                "planted:nodes=100,noise=1e300",
                &["noise", "1e300 is outside 0..=1000000"],
            ),
            (
                "planted:nodes=100,noise=-1e-300",
                &["noise", "-1e-300 is outside"],
            ),
            ("planted:nodes=100,val=500", &["val", "exceeds nodes"]),
            (
                "planted:nodes=100,train_per_class=30",
                &["train_per_class", "30", "smallest class (20 nodes)"],
            ),
            (
                "planted:nodes=200,degree=1000",
                &["degree", "1000 is more than the 199 other nodes"],
            ),
            (
                "planted:nodes=3",
                &["classes: 5 (the default; give classes=N) is more than the 3 nodes"],
            ),
            (
                "planted:nodes=3,classes=4",
                &["classes: 4 is more than the 3 nodes"],
            ),
        ];
        for (text, parts) in cases {
            let message = error(text);
            for part in parts {
                assert!(message.contains(part), "{part:?} not in {message:?}");
            }
        }
    }
}
