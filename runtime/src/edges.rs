//! A graph's edge list read a batch at a time: from lists in memory, from
//! a dataset folder's mapped `edge_index.npy`, or drawn by an R-MAT spec.
//! A process that keeps some of the edges (a member of a multi-process
//! run keeps those of its share) reads the rest without holding them.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::generate::RmatSpec;
use crate::npy::{Dtype, Npy};
use crate::{Error, Result};

/// Edges read from a file per batch.
const FILE_BATCH: u64 = 1 << 20;
/// Chunks of an R-MAT spec's edges drawn per batch (2^16 edges each).
const EDGE_BATCH_CHUNKS: usize = 16;

/// What takes a batch of edges: `(src, dst)`, edge `k` running from
/// `src[k]` to `dst[k]`.
pub type EachBatch<'a> = &'a mut dyn FnMut(&[u64], &[u64]) -> Result<()>;

/// A source list and a destination list of edges.
pub type EdgeLists<'a> = (Cow<'a, [u64]>, Cow<'a, [u64]>);

/// Where a graph's edges come from.
#[derive(Debug)]
pub enum EdgeSource<'a> {
    /// Edge `k` runs from `src[k]` to `dst[k]` (lists of different
    /// lengths are an error when they are read).
    Lists {
        src: Cow<'a, [u64]>,
        dst: Cow<'a, [u64]>,
    },
    /// A mapped `edge_index.npy` ([`EdgeSource::npy`]).
    Npy(NpyEdges),
    /// The edges an R-MAT spec draws, a batch of chunks at a time.
    Rmat(RmatSpec),
}

/// A mapped `[2, E]` integer `edge_index.npy` of a graph of `nodes`
/// vertices: sources, then destinations, each checked as it is read.
#[derive(Debug)]
pub struct NpyEdges {
    path: PathBuf,
    npy: Npy,
    nodes: u64,
    /// Where `nodes` came from, as an error about an end outside it says.
    nodes_from: &'static str,
    /// Edges read per batch.
    batch: u64,
}

impl<'a> EdgeSource<'a> {
    /// Lists of edges held elsewhere.
    pub fn borrowed(src: &'a [u64], dst: &'a [u64]) -> EdgeSource<'a> {
        EdgeSource::Lists {
            src: Cow::Borrowed(src),
            dst: Cow::Borrowed(dst),
        }
    }

    /// Lists of edges it holds.
    pub fn owned(src: Vec<u64>, dst: Vec<u64>) -> EdgeSource<'static> {
        EdgeSource::Lists {
            src: Cow::Owned(src),
            dst: Cow::Owned(dst),
        }
    }

    /// The edges of `npy`, mapped from `path`, for a graph of `nodes`
    /// vertices: its shape must be `[2, E]` and its type `<i8` or `<i4`.
    pub fn npy(path: PathBuf, npy: Npy, nodes: u64) -> Result<EdgeSource<'static>> {
        Self::npy_in_batches(path, npy, nodes, FILE_BATCH)
    }

    /// [`EdgeSource::npy`], read `batch` edges at a time.
    pub(crate) fn npy_in_batches(
        path: PathBuf,
        npy: Npy,
        nodes: u64,
        batch: u64,
    ) -> Result<EdgeSource<'static>> {
        if npy.shape.len() != 2 || npy.shape[0] != 2 {
            return Err(Error::invalid(
                &path,
                "shape",
                format!("{:?}; expected [2, E]", npy.shape),
            ));
        }
        if npy.shape[1] == 0 {
            // As an edge-list file with none: a graph's layers aggregate
            // over its edges, and a folder with none is a broken one.
            return Err(Error::invalid(
                &path,
                "shape",
                "[2, 0]: no edges; a graph needs at least one",
            ));
        }
        if !matches!(npy.dtype, Dtype::I64 | Dtype::I32) {
            return Err(Error::invalid(
                &path,
                "descr",
                format!(
                    "{} is not an integer type; expected <i8 or <i4",
                    npy.dtype.descr()
                ),
            ));
        }
        Ok(EdgeSource::Npy(NpyEdges {
            path,
            npy,
            nodes,
            nodes_from: "N from x.npy",
            batch: batch.max(1),
        }))
    }

    /// [`EdgeSource::npy`] for a graph with no other array to give its
    /// vertex count: the vertices are `0..=` the largest end, found by
    /// reading the file once, a batch at a time (a negative end is an
    /// error naming the element). Returns the vertex count too, and the
    /// element `[row, column]` that gives it (the first largest end).
    pub fn npy_counting_nodes(
        path: PathBuf,
        npy: Npy,
    ) -> Result<(EdgeSource<'static>, u64, [u64; 2])> {
        Self::npy_counting_nodes_in_batches(path, npy, FILE_BATCH)
    }

    /// [`EdgeSource::npy_counting_nodes`], read `batch` edges at a time.
    pub(crate) fn npy_counting_nodes_in_batches(
        path: PathBuf,
        npy: Npy,
        batch: u64,
    ) -> Result<(EdgeSource<'static>, u64, [u64; 2])> {
        let EdgeSource::Npy(mut file) = Self::npy_in_batches(path, npy, u64::MAX, batch)? else {
            unreachable!("npy_in_batches makes a file's source")
        };
        let mut most = None;
        let edges = file.npy.shape[1];
        for row in 0..2 {
            for first in (0..edges).step_by(file.batch as usize) {
                let last = (first + file.batch).min(edges);
                let values = file.npy.row_ints(row, first..last, &file.path)?;
                file.npy.release_row_range(row, first..last);
                if let Some(at) = values.iter().position(|&v| v < 0) {
                    return Err(Error::invalid(
                        &file.path,
                        format!("edge_index[{row}, {}]", first + at as u64),
                        format!("{} is negative", values[at]),
                    ));
                }
                let Some(&largest) = values.iter().max() else {
                    continue;
                };
                if most.is_none_or(|(before, _)| largest > before) {
                    let at = values.iter().position(|&v| v == largest).unwrap_or(0);
                    most = Some((largest, [row, first + at as u64]));
                }
            }
        }
        // A file of no edges was refused when opened (`npy_in_batches`);
        // said again here rather than assumed.
        let Some((most, element)) = most else {
            return Err(Error::invalid(
                &file.path,
                "shape",
                "[2, 0]: no edges; a graph needs at least one",
            ));
        };
        let nodes = most as u64 + 1;
        file.nodes = nodes;
        file.nodes_from = "N from the largest end, read before";
        Ok((EdgeSource::Npy(file), nodes, element))
    }

    /// A file's vertex count raised to `nodes` (where larger), `from`
    /// saying where it comes from: vertices past the largest end that a
    /// folder's `y.npy` labels. Other sources are as they are.
    pub(crate) fn widen_nodes(&mut self, nodes: u64, from: &'static str) {
        if let EdgeSource::Npy(file) = self {
            if nodes > file.nodes {
                file.nodes = nodes;
                file.nodes_from = from;
            }
        }
    }

    /// Edges in all (a list's sources, where the lists differ).
    pub fn len(&self) -> u64 {
        match self {
            EdgeSource::Lists { src, .. } => src.len() as u64,
            EdgeSource::Npy(file) => file.npy.shape[1],
            EdgeSource::Rmat(spec) => spec.drawn_edges() * (1 + u64::from(spec.symmetric)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `each` with every edge once, a batch `(src, dst)` at a time:
    /// lists in one batch (a source and a destination list of different
    /// lengths are an error), a file's in order (an end that is not a
    /// vertex is an error naming the element; the pages read are let go
    /// after each batch), an R-MAT spec's as `RmatSpec::edge_batches`
    /// draws them. Stops at the first error `each` returns.
    pub fn for_each_batch(&self, each: EachBatch<'_>) -> Result<()> {
        self.for_each_batch_of(EDGE_BATCH_CHUNKS, each)
    }

    /// [`EdgeSource::for_each_batch`] with batches of `chunks` chunks of
    /// an R-MAT spec's edges.
    fn for_each_batch_of(&self, chunks: usize, each: EachBatch<'_>) -> Result<()> {
        match self {
            EdgeSource::Lists { src, dst } => {
                check_lengths(src, dst)?;
                each(src, dst)
            }
            EdgeSource::Npy(file) => file.for_each_batch(each),
            EdgeSource::Rmat(spec) => spec.edge_batches(chunks, each),
        }
    }

    /// Every edge, as lists in the graph's order (borrowed where they are
    /// lists already).
    pub fn lists(&self) -> Result<EdgeLists<'_>> {
        match self {
            EdgeSource::Lists { src, dst } => {
                check_lengths(src, dst)?;
                Ok((Cow::Borrowed(&**src), Cow::Borrowed(&**dst)))
            }
            // In the order `generate` lists them (its batches hand a
            // symmetric graph's reverse edges out early).
            EdgeSource::Rmat(spec) => {
                spec.validate(&spec.to_string())?;
                let (src, dst) = spec.edge_lists()?;
                Ok((Cow::Owned(src), Cow::Owned(dst)))
            }
            EdgeSource::Npy(file) => {
                let length = self.len() as usize;
                let room = |ends: &str| {
                    crate::error::room(length, || {
                        format!("the {ends} of {}'s edges", file.path.display())
                    })
                };
                let (mut src, mut dst) = (room("sources")?, room("destinations")?);
                self.for_each_batch(&mut |s, d| {
                    src.extend_from_slice(s);
                    dst.extend_from_slice(d);
                    Ok(())
                })?;
                Ok((Cow::Owned(src), Cow::Owned(dst)))
            }
        }
    }
}

/// Lists of edges must be as long as each other.
fn check_lengths(src: &[u64], dst: &[u64]) -> Result<()> {
    if src.len() == dst.len() {
        return Ok(());
    }
    Err(Error::invalid(
        Path::new("edge list"),
        "dst",
        format!("{} sources but {} destinations", src.len(), dst.len()),
    ))
}

impl NpyEdges {
    /// Row `row` (0: sources, 1: destinations) of the edges `first..`, a
    /// batch of them, each checked to be a vertex.
    fn ends(&self, row: u64, first: u64) -> Result<Vec<u64>> {
        let last = (first + self.batch).min(self.npy.shape[1]);
        let values = self.npy.row_ints(row, first..last, &self.path)?;
        let nodes = self.nodes;
        // Checked as a whole first (loops the compiler vectorises); the
        // first end out of range is looked for only where there is one.
        let (least, most) = values
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let in_range = |v: i64| u64::try_from(v).is_ok_and(|v| v < nodes);
        let every_one_in = values.is_empty() || (in_range(least) && in_range(most));
        if !every_one_in {
            if let Some((v, k)) = values.iter().zip(first..).find(|(&v, _)| !in_range(v)) {
                return Err(Error::invalid(
                    &self.path,
                    format!("edge_index[{row}, {k}]"),
                    format!("{v} is not a node in 0..{nodes} ({})", self.nodes_from),
                ));
            }
        }
        Ok(values.into_iter().map(|v| v as u64).collect())
    }

    fn for_each_batch(&self, each: EachBatch<'_>) -> Result<()> {
        let edges = self.npy.shape[1];
        for first in (0..edges).step_by(self.batch as usize) {
            let last = (first + self.batch).min(edges);
            let src = self.ends(0, first)?;
            let dst = self.ends(1, first)?;
            self.npy.release_row_range(0, first..last);
            self.npy.release_row_range(1, first..last);
            each(&src, &dst)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy::tests::{write_fortran_npy, write_npy};

    /// Every batch of `edges`, `chunks` chunks at a time for an R-MAT
    /// spec's, and the lists they make together.
    fn batches(edges: &EdgeSource<'_>, chunks: usize) -> (Vec<usize>, Vec<u64>, Vec<u64>) {
        let (mut sizes, mut src, mut dst) = (Vec::new(), Vec::new(), Vec::new());
        edges
            .for_each_batch_of(chunks, &mut |s, d| {
                assert_eq!(s.len(), d.len());
                sizes.push(s.len());
                src.extend_from_slice(s);
                dst.extend_from_slice(d);
                Ok(())
            })
            .unwrap();
        (sizes, src, dst)
    }

    #[test]
    fn a_file_is_read_in_batches_in_either_order_and_type_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge_index.npy");
        let (src, dst) = ([0u64, 1, 2, 3, 3], [1u64, 2, 3, 0, 3]);
        let open = |descr: &str, fortran: bool, values: &[i64]| {
            let bytes: Vec<u8> = match descr {
                "<i8" => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                _ => values
                    .iter()
                    .flat_map(|&v| (v as i32).to_le_bytes())
                    .collect(),
            };
            if fortran {
                write_fortran_npy(&path, descr, &[2, 5], &bytes);
            } else {
                write_npy(&path, descr, &[2, 5], &bytes);
            }
            EdgeSource::npy_in_batches(path.clone(), Npy::open(&path).unwrap(), 4, 2).unwrap()
        };
        let c_order: Vec<i64> = src.iter().chain(&dst).map(|&v| v as i64).collect();
        // Fortran order holds (src[k], dst[k]) pairs in turn.
        let f_order: Vec<i64> = src
            .iter()
            .zip(&dst)
            .flat_map(|(&s, &d)| [s as i64, d as i64])
            .collect();
        for descr in ["<i8", "<i4"] {
            for (fortran, values) in [(false, &c_order), (true, &f_order)] {
                let edges = open(descr, fortran, values);
                assert_eq!(edges.len(), 5);
                let (sizes, s, d) = batches(&edges, 1);
                assert_eq!(sizes, [2, 2, 1], "{descr} {fortran}");
                assert_eq!((&s[..], &d[..]), (&src[..], &dst[..]), "{descr} {fortran}");
                let (lists_src, lists_dst) = edges.lists().unwrap();
                assert_eq!((&*lists_src, &*lists_dst), (&src[..], &dst[..]));
            }
        }
        // A destination that is not a vertex, in the last batch, and a
        // negative source in the first: each named by its element.
        for (at, value, name) in [(9, 4, "edge_index[1, 4]"), (1, -1, "edge_index[0, 1]")] {
            let mut bad = c_order.clone();
            bad[at] = value;
            let edges = open("<i8", false, &bad);
            let error = edges
                .for_each_batch(&mut |_, _| Ok(()))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(name) && error.contains(&format!("{value} is not a node in 0..4")),
                "{error}"
            );
        }
        // What takes the batches stops the reading with its error.
        let edges = open("<i8", false, &c_order);
        let mut calls = 0;
        let error = edges
            .for_each_batch(&mut |_, _| {
                calls += 1;
                Err(crate::Error::invalid(Path::new("taker"), "field", "stop"))
            })
            .unwrap_err();
        assert!(error.to_string().contains("stop"));
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_file_without_a_vertex_count_is_read_for_its_largest_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge_index.npy");
        let write = |values: &[i64]| {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            write_npy(&path, "<i8", &[2, 5], &bytes);
            Npy::open(&path).unwrap()
        };
        // The largest end is a destination in the last batch of two.
        let npy = write(&[0, 1, 2, 3, 3, 1, 2, 3, 0, 9]);
        let (edges, nodes, element) =
            EdgeSource::npy_counting_nodes_in_batches(path.clone(), npy, 2).unwrap();
        assert_eq!((nodes, element), (10, [1, 4]));
        let (sizes, src, dst) = batches(&edges, 1);
        assert_eq!(sizes, [2, 2, 1]);
        assert_eq!((src, dst), (vec![0, 1, 2, 3, 3], vec![1, 2, 3, 0, 9]));
        // A negative end in the second batch is named by its element.
        let npy = write(&[0, 1, 2, -4, 3, 1, 2, 3, 0, 9]);
        let error = EdgeSource::npy_counting_nodes_in_batches(path.clone(), npy, 2)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("edge_index[0, 3]") && error.contains("-4 is negative"),
            "{error}"
        );
        let bytes: Vec<u8> = Vec::new();
        write_npy(&path, "<i8", &[2, 0], &bytes);
        let error = EdgeSource::npy_counting_nodes(path.clone(), Npy::open(&path).unwrap())
            .unwrap_err()
            .to_string();
        assert!(error.contains("shape: [2, 0]: no edges"), "{error}");
        // With the vertex count given (a folder's x.npy), as well.
        let error = EdgeSource::npy(path.clone(), Npy::open(&path).unwrap(), 5)
            .unwrap_err()
            .to_string();
        assert!(error.contains("shape: [2, 0]: no edges"), "{error}");
    }

    #[test]
    fn lists_of_different_lengths_are_refused() {
        let edges = EdgeSource::owned(vec![0, 1], vec![1]);
        let error = edges
            .for_each_batch(&mut |_, _| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(error.contains("2 sources but 1 destinations"), "{error}");
        let error = edges.lists().unwrap_err().to_string();
        assert!(error.contains("2 sources but 1 destinations"), "{error}");
        let (sizes, src, dst) = batches(&EdgeSource::borrowed(&[0, 1], &[1, 0]), 1);
        assert_eq!((sizes, src, dst), (vec![2], vec![0, 1], vec![1, 0]));
    }

    #[test]
    fn rmat_edges_drawn_in_batches_are_the_generated_edges() {
        for text in [
            // 81 920 edges: a whole chunk and a short one.
            "rmat:scale=12,edge_factor=20,features=1,classes=2,seed=5",
            "rmat:scale=12,edge_factor=20,features=1,classes=2,symmetric=true,seed=5",
            "rmat:scale=12,edge_factor=20,features=1,classes=2,scramble=false,seed=5",
        ] {
            let crate::generate::GeneratorSpec::Rmat(spec) =
                crate::generate::GeneratorSpec::parse(text).unwrap()
            else {
                panic!("{text} is an R-MAT spec");
            };
            let whole = spec.generate().unwrap();
            let edges = EdgeSource::Rmat(spec.clone());
            assert_eq!(edges.len(), whole.edges(), "{text}");
            let (sizes, src, dst) = batches(&edges, 1);
            let expected: &[usize] = if spec.symmetric {
                &[65536, 65536, 16384, 16384]
            } else {
                &[65536, 16384]
            };
            assert_eq!(sizes, expected, "{text}");
            let sorted = |src: &[u64], dst: &[u64]| {
                let mut pairs: Vec<(u64, u64)> =
                    src.iter().copied().zip(dst.iter().copied()).collect();
                pairs.sort_unstable();
                pairs
            };
            assert_eq!(sorted(&src, &dst), sorted(&whole.src, &whole.dst), "{text}");
            // As lists, in the whole graph's order.
            let (lists_src, lists_dst) = edges.lists().unwrap();
            assert_eq!(
                (&*lists_src, &*lists_dst),
                (&whole.src[..], &whole.dst[..]),
                "{text}"
            );
            // In one batch of many chunks, too.
            let (sizes, src, dst) = batches(&edges, 16);
            assert_eq!(sizes.len(), if spec.symmetric { 2 } else { 1 }, "{text}");
            assert_eq!(sorted(&src, &dst), sorted(&whole.src, &whole.dst), "{text}");
        }
    }
}
