//! A graph's adjacency by destination, and its binary cache file.
//!
//! Row `v` of a [`Csr`] lists the sources of the edges that end at `v`,
//! sorted, one entry per edge: duplicate edges stay duplicate and self loops
//! stay, exactly as in the edge list (so that counts agree with the
//! planner's [`BlockCounts`]).
//!
//! # Cache file format (version 1)
//!
//! All integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `FATECSR\0` |
//! | 4 | version, `1` |
//! | 4 | header bytes, `32` |
//! | 8 | `N`, nodes |
//! | 8 | `E`, edges |
//! | 8 · (N + 1) | `row_start`, u64 |
//! | 4 · E | `columns`, u32 |
//! | 4 | CRC-32C (IEEE) of every byte before it |
//!
//! Reading it back skips parsing and sorting the edge list; it checks the
//! magic, version, size, checksum and that the arrays form a valid CSR.

use std::io::Write;
use std::path::Path;

use fateplan_planner::blocks::BlockCounts;
use memmap2::Mmap;
use rayon::prelude::*;

use crate::{Error, Result};

pub const CACHE_MAGIC: [u8; 8] = *b"FATECSR\0";
pub const CACHE_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const CHECKSUM_BYTES: usize = 4;
/// Most nodes: columns are u32.
pub const MAX_CSR_NODES: u64 = 1 << 32;
/// Elements converted per write while saving.
const WRITE_CHUNK: usize = 1 << 16;

/// Adjacency by destination: `columns[row_start[v]..row_start[v + 1]]` are
/// the sources of the edges ending at `v`, in ascending order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csr {
    pub nodes: u64,
    pub row_start: Vec<u64>,
    pub columns: Vec<u32>,
}

/// An order-independent digest of an edge multiset (`src[k] -> dst[k]`):
/// the wrapping sum of a mixing hash of each edge. A CSR gives the same
/// digest as the edge list it was built from ([`Csr::digest`]), so a cache
/// can be checked against a graph without sorting its edges.
pub fn edge_digest(src: &[u64], dst: &[u64]) -> u64 {
    src.par_iter()
        .zip(dst.par_iter())
        .map(|(&u, &v)| edge_hash(u, v))
        .reduce(|| 0, u64::wrapping_add)
}

/// Places a source into row `row`.
pub(crate) type PlaceEdge<'a> = &'a mut dyn FnMut(u32, usize) -> Result<()>;

/// The columns of a CSR whose rows `row_start` sizes: `edges` places
/// every edge's source in its row (in any order), then each row's sources
/// are sorted, rows in parallel. Placing more edges in a row than it holds,
/// or fewer, is an error (the edges read differ from those counted).
pub(crate) fn fill_rows(
    row_start: &[u64],
    edges: &mut dyn FnMut(PlaceEdge<'_>) -> Result<()>,
) -> Result<Vec<u32>> {
    let rows = row_start.len().saturating_sub(1);
    let total = row_start.last().copied().unwrap_or(0);
    let mut columns: Vec<u32> = crate::error::zeroed(total as usize, || {
        format!("the sources of the adjacency's {total} edges")
    })?;
    let mut next: Vec<u64> = crate::error::room(rows, || {
        format!("the fill positions of the adjacency's {rows} rows")
    })?;
    next.extend_from_slice(&row_start[..rows]);
    let counted = |row: usize, placed: u64| {
        edge_error(
            format!("row {row}"),
            format!(
                "{placed} edges placed, but {} were counted: the edges read differ from \
                 those counted",
                row_start[row + 1] - row_start[row]
            ),
        )
    };
    edges(&mut |source, row| {
        let Some(at) = next.get_mut(row) else {
            return Err(edge_error(
                format!("row {row}"),
                format!("is not a row of the {rows} being filled"),
            ));
        };
        if *at == row_start[row + 1] {
            return Err(counted(row, *at - row_start[row] + 1));
        }
        columns[*at as usize] = source;
        *at += 1;
        Ok(())
    })?;
    if let Some(row) = (0..rows).find(|&r| next[r] != row_start[r + 1]) {
        return Err(counted(row, next[row] - row_start[row]));
    }
    drop(next);
    let mut each: Vec<&mut [u32]> =
        crate::error::room(rows, || format!("the adjacency's {rows} rows to sort"))?;
    let mut rest: &mut [u32] = &mut columns;
    for v in 0..rows {
        let length = (row_start[v + 1] - row_start[v]) as usize;
        let (row, tail) = rest.split_at_mut(length);
        each.push(row);
        rest = tail;
    }
    each.par_iter_mut()
        .with_min_len(1 << 10)
        .for_each(|row| row.sort_unstable());
    Ok(columns)
}

/// SplitMix64's finaliser over an edge's endpoints.
fn edge_hash(src: u64, dst: u64) -> u64 {
    let mut z = (src << 32 ^ dst).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn edge_error(context: String, message: String) -> Error {
    fateplan_planner::Error::InvalidInput { context, message }.into()
}

impl Csr {
    /// Groups edge `k` (`src[k] -> dst[k]`) under its destination, sources
    /// sorted per row.
    pub fn from_edges(nodes: u64, src: &[u64], dst: &[u64]) -> Result<Csr> {
        if nodes == 0 || nodes > MAX_CSR_NODES {
            return Err(edge_error(
                "nodes".into(),
                format!("{nodes} is outside 1..={MAX_CSR_NODES}"),
            ));
        }
        if src.len() != dst.len() {
            return Err(edge_error(
                "edge list".into(),
                format!("{} sources but {} destinations", src.len(), dst.len()),
            ));
        }
        let n = nodes as usize;
        let mut row_start: Vec<u64> = crate::error::zeroed(n + 1, || {
            format!("the row starts of the adjacency of {nodes} nodes")
        })?;
        for (k, (&s, &d)) in src.iter().zip(dst).enumerate() {
            if s >= nodes || d >= nodes {
                return Err(edge_error(
                    format!("edge {k}"),
                    format!("{s} -> {d} names a vertex outside 0..{nodes}"),
                ));
            }
            row_start[d as usize + 1] += 1;
        }
        for v in 0..n {
            row_start[v + 1] += row_start[v];
        }
        let columns = fill_rows(&row_start, &mut |place| {
            for (&s, &d) in src.iter().zip(dst) {
                place(s as u32, d as usize)?;
            }
            Ok(())
        })?;
        Ok(Csr {
            nodes,
            row_start,
            columns,
        })
    }

    pub fn edges(&self) -> u64 {
        self.columns.len() as u64
    }

    /// Sources of the edges ending at `v`.
    pub fn row(&self, v: u64) -> &[u32] {
        let (start, end) = (self.row_start[v as usize], self.row_start[v as usize + 1]);
        &self.columns[start as usize..end as usize]
    }

    pub fn in_degree(&self, v: u64) -> u64 {
        self.row_start[v as usize + 1] - self.row_start[v as usize]
    }

    /// The edge list, sorted by destination then source.
    pub fn to_edges(&self) -> (Vec<u64>, Vec<u64>) {
        let mut dst = Vec::with_capacity(self.columns.len());
        for v in 0..self.nodes {
            dst.extend(std::iter::repeat_n(v, self.in_degree(v) as usize));
        }
        let src = self.columns.iter().map(|&u| u as u64).collect();
        (src, dst)
    }

    /// [`edge_digest`] of the edges the CSR holds.
    pub fn digest(&self) -> u64 {
        (0..self.nodes as usize)
            .into_par_iter()
            .map(|v| {
                let row = &self.columns[self.row_start[v] as usize..self.row_start[v + 1] as usize];
                row.iter().fold(0u64, |sum, &u| {
                    sum.wrapping_add(edge_hash(u as u64, v as u64))
                })
            })
            .reduce(|| 0, u64::wrapping_add)
    }

    /// Edge counts per block of a `partitions`-way vertex-range partition:
    /// the planner's [`BlockCounts::from_edges`] without the edge list.
    pub fn block_counts(&self, partitions: u32) -> Result<BlockCounts> {
        self.block_counts_split(&crate::blockcsr::Split::Equal {
            nodes: self.nodes,
            partitions,
        })
    }

    /// [`Csr::block_counts`] over the partitions of `split` (its node
    /// count must be this graph's).
    pub fn block_counts_split(&self, split: &crate::blockcsr::Split) -> Result<BlockCounts> {
        let partitions = split.partitions();
        let mut counts = BlockCounts::from_edges(self.nodes, &[], &[], partitions)?;
        if split.nodes() != self.nodes {
            return Err(Error::invalid(
                Path::new("split"),
                "nodes",
                format!("{} split for a graph of {}", split.nodes(), self.nodes),
            ));
        }
        let p = partitions as usize;
        for v in 0..self.nodes {
            let i = split.of(v) as usize;
            for &u in self.row(v) {
                let j = split.of(u as u64) as usize;
                counts.edges[i * p + j] += 1;
            }
        }
        Ok(counts)
    }

    /// Checks that the arrays form a CSR over `nodes` rows with sorted
    /// columns naming existing nodes; `path` names the file they came from.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let n = self.nodes as usize;
        if self.row_start.len() != n + 1 {
            return Err(Error::invalid(
                path,
                "row_start",
                format!("{} entries for {} nodes", self.row_start.len(), n),
            ));
        }
        if self.row_start[0] != 0 || self.row_start[n] != self.columns.len() as u64 {
            return Err(Error::invalid(
                path,
                "row_start",
                format!(
                    "runs from {} to {}, not from 0 to the {} edges",
                    self.row_start[0],
                    self.row_start[n],
                    self.columns.len()
                ),
            ));
        }
        if let Some(v) = (0..n).find(|&v| self.row_start[v] > self.row_start[v + 1]) {
            return Err(Error::invalid(
                path,
                format!("row_start[{}]", v + 1),
                format!(
                    "{} is below row_start[{v}] = {}",
                    self.row_start[v + 1],
                    self.row_start[v]
                ),
            ));
        }
        for v in 0..self.nodes {
            let row = self.row(v);
            if let Some(&u) = row.iter().find(|&&u| u as u64 >= self.nodes) {
                return Err(Error::invalid(
                    path,
                    format!("columns of row {v}"),
                    format!("{u} is not a node in 0..{}", self.nodes),
                ));
            }
            if let Some(w) = row.windows(2).find(|w| w[0] > w[1]) {
                return Err(Error::invalid(
                    path,
                    format!("columns of row {v}"),
                    format!("{} before {} is not sorted", w[0], w[1]),
                ));
            }
        }
        Ok(())
    }

    /// Writes the cache file (see the module docs), through a temporary
    /// file of its own ([`crate::cleanup::create`]), renamed into place
    /// so that a reader never sees half a file (two runs writing one cache
    /// at once each rename a whole file; the last stays). A write that
    /// fails removes its temporary file.
    pub fn write_cache(&self, path: &Path) -> Result<()> {
        let (partial, file) = crate::cleanup::create(path).map_err(|e| Error::io(path, e))?;
        let written = self.write_cache_via(file, &partial, path);
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        crate::cleanup::unregister(&partial);
        written
    }

    fn write_cache_via(&self, file: std::fs::File, partial: &Path, path: &Path) -> Result<()> {
        let mut out = Checksummed {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            crc: 0,
        };
        let io = |e| Error::io(partial, e);
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend(CACHE_MAGIC);
        header.extend(CACHE_VERSION.to_le_bytes());
        header.extend((HEADER_BYTES as u32).to_le_bytes());
        header.extend(self.nodes.to_le_bytes());
        header.extend(self.edges().to_le_bytes());
        out.write_all(&header).map_err(io)?;
        let mut buffer = Vec::with_capacity(WRITE_CHUNK * 8);
        for chunk in self.row_start.chunks(WRITE_CHUNK) {
            buffer.clear();
            buffer.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            out.write_all(&buffer).map_err(io)?;
        }
        for chunk in self.columns.chunks(WRITE_CHUNK) {
            buffer.clear();
            buffer.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            out.write_all(&buffer).map_err(io)?;
        }
        let checksum = out.crc;
        let mut file = out.inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.write_all(&checksum.to_le_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(partial, path).map_err(|e| Error::io(path, e))
    }

    /// The CSR cached at `path` if that file exists, else `build()`'s, which
    /// is then written there. A cache that exists but does not read (wrong
    /// version, corrupt) is an error, not silently rebuilt: delete it to
    /// rebuild. `expected`, when given, is the graph's (nodes, edges, and
    /// [`edge_digest`] of its edge list): the cache must match all three,
    /// so a cache of another graph of the same size is refused too.
    pub fn cached(
        path: &Path,
        expected: Option<(u64, u64, u64)>,
        build: impl FnOnce() -> Result<Csr>,
    ) -> Result<Csr> {
        if path.exists() {
            let csr = Csr::read_cache(path)?;
            if let Some((nodes, edges, digest)) = expected {
                if (csr.nodes, csr.edges()) == (nodes, edges) && csr.digest() != digest {
                    return Err(Error::invalid(
                        path,
                        "edges",
                        format!(
                            "the cache's {edges} edges are not the graph's (digest {:#018x}, \
                             the graph's {digest:#018x}); delete the stale cache",
                            csr.digest()
                        ),
                    ));
                }
                if (csr.nodes, csr.edges()) != (nodes, edges) {
                    return Err(Error::invalid(
                        path,
                        "size",
                        format!(
                            "{} nodes and {} edges, but the graph has {nodes} and {edges}; \
                             delete the stale cache",
                            csr.nodes,
                            csr.edges()
                        ),
                    ));
                }
            }
            return Ok(csr);
        }
        let csr = build()?;
        csr.write_cache(path)?;
        Ok(csr)
    }

    /// Reads a cache file written by [`Csr::write_cache`], checking its magic,
    /// version, size, checksum and contents.
    pub fn read_cache(path: &Path) -> Result<Csr> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // Safety: read-only map; a concurrent writer could only change values,
        // which the checksum and the validation below catch.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let bytes: &[u8] = &map;
        if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
            return Err(Error::invalid(
                path,
                "header",
                format!(
                    "the file has {} bytes, fewer than a header and its checksum ({} and {})",
                    bytes.len(),
                    HEADER_BYTES,
                    CHECKSUM_BYTES
                ),
            ));
        }
        if bytes[..8] != CACHE_MAGIC {
            return Err(Error::invalid(
                path,
                "magic",
                format!(
                    "the file starts {:?}, not as a CSR cache fateplan writes does ({:?})",
                    String::from_utf8_lossy(&bytes[..8]),
                    String::from_utf8_lossy(&CACHE_MAGIC)
                ),
            ));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        let version = u32_at(8);
        if version != CACHE_VERSION {
            return Err(Error::invalid(
                path,
                "version",
                format!("{version}; this fateplan reads version {CACHE_VERSION}"),
            ));
        }
        let header_bytes = u32_at(12);
        if header_bytes as usize != HEADER_BYTES {
            return Err(Error::invalid(
                path,
                "header bytes",
                format!("{header_bytes}; version {CACHE_VERSION} has {HEADER_BYTES}"),
            ));
        }
        let (nodes, edges) = (u64_at(16), u64_at(24));
        if nodes == 0 || nodes > MAX_CSR_NODES {
            return Err(Error::invalid(
                path,
                "nodes",
                format!("{nodes} is outside 1..={MAX_CSR_NODES}"),
            ));
        }
        let expected = (nodes + 1)
            .checked_mul(8)
            .and_then(|b| edges.checked_mul(4)?.checked_add(b))
            .and_then(|b| b.checked_add((HEADER_BYTES + CHECKSUM_BYTES) as u64));
        if expected != Some(bytes.len() as u64) {
            return Err(Error::invalid(
                path,
                "size",
                format!(
                    "{} bytes, but {nodes} nodes and {edges} edges need {}",
                    bytes.len(),
                    expected.map_or("more than 2^64".into(), |e| e.to_string())
                ),
            ));
        }
        let body = bytes.len() - CHECKSUM_BYTES;
        let stored = u32_at(body);
        let actual = crc32c::crc32c(&bytes[..body]);
        if stored != actual {
            return Err(Error::invalid(
                path,
                "checksum",
                format!("stored {stored:#010x} but the contents give {actual:#010x}"),
            ));
        }
        let columns_at = HEADER_BYTES + (nodes as usize + 1) * 8;
        let row_start = bytes[HEADER_BYTES..columns_at]
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        let columns = bytes[columns_at..body]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        let csr = Csr {
            nodes,
            row_start,
            columns,
        };
        csr.validate(path)?;
        Ok(csr)
    }
}

/// A writer that checksums what passes through it.
struct Checksummed<W> {
    inner: W,
    crc: u32,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.crc = crc32c::crc32c_append(self.crc, &bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_filled_with_other_edges_than_counted_are_an_error() {
        let row_start = [0u64, 2, 2, 3];
        let fill = |edges: &[(u32, usize)]| {
            fill_rows(&row_start, &mut |place| {
                for &(source, row) in edges {
                    place(source, row)?;
                }
                Ok(())
            })
        };
        assert_eq!(fill(&[(4, 0), (1, 2), (0, 0)]).unwrap(), [0, 4, 1]);
        let error = fill(&[(4, 0), (1, 0), (0, 0)]).unwrap_err().to_string();
        assert!(
            error.contains("row 0") && error.contains("3 edges placed, but 2"),
            "{error}"
        );
        let error = fill(&[(4, 0), (1, 2)]).unwrap_err().to_string();
        assert!(
            error.contains("row 0") && error.contains("1 edges placed, but 2"),
            "{error}"
        );
        let error = fill(&[(4, 3)]).unwrap_err().to_string();
        assert!(
            error.contains("row 3") && error.contains("of the 3"),
            "{error}"
        );
    }

    fn tiny() -> Csr {
        // Edges (src -> dst): 2->0, 1->0, 0->1, 1->1 (self loop), 2->1 twice.
        Csr::from_edges(4, &[2, 1, 0, 1, 2, 2], &[0, 0, 1, 1, 1, 1]).unwrap()
    }

    #[test]
    fn groups_by_destination_with_sorted_sources() {
        let csr = tiny();
        assert_eq!(csr.row_start, vec![0, 2, 6, 6, 6]);
        assert_eq!(csr.columns, vec![1, 2, 0, 1, 2, 2]);
        assert_eq!(
            csr.to_edges(),
            (vec![1, 2, 0, 1, 2, 2], vec![0, 0, 1, 1, 1, 1])
        );
        let (src, dst) = csr.to_edges();
        assert_eq!(
            csr.block_counts(2).unwrap(),
            BlockCounts::from_edges(4, &src, &dst, 2).unwrap()
        );
        csr.validate(Path::new("tiny")).unwrap();
        let message = Csr::from_edges(4, &[0, 7], &[1, 1])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("edge 1") && message.contains("7 -> 1"),
            "{message}"
        );
    }

    #[test]
    fn cache_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.csr");
        let csr = tiny();
        csr.write_cache(&path).unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert_eq!(bytes, 32 + 5 * 8 + 6 * 4 + 4);
        assert_eq!(Csr::read_cache(&path).unwrap(), csr);
        // A graph with isolated nodes and no edges too.
        let empty = Csr::from_edges(3, &[], &[]).unwrap();
        empty.write_cache(&path).unwrap();
        assert_eq!(Csr::read_cache(&path).unwrap(), empty);
    }

    #[test]
    fn cached_builds_once_then_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.csr");
        let builds = std::cell::Cell::new(0);
        let build = || {
            builds.set(builds.get() + 1);
            Ok(tiny())
        };
        let digest = tiny().digest();
        let (src, dst) = tiny().to_edges();
        // The edge list's digest, in any order, is the CSR's.
        assert_eq!(edge_digest(&src, &dst), digest);
        let (mut rsrc, mut rdst) = (src.clone(), dst.clone());
        rsrc.reverse();
        rdst.reverse();
        assert_eq!(edge_digest(&rsrc, &rdst), digest);
        assert_eq!(
            Csr::cached(&path, Some((4, 6, digest)), build).unwrap(),
            tiny()
        );
        assert_eq!(
            Csr::cached(&path, Some((4, 6, digest)), build).unwrap(),
            tiny()
        );
        assert_eq!(builds.get(), 1);
        let message = Csr::cached(&path, Some((4, 7, digest)), build)
            .unwrap_err()
            .to_string();
        assert!(message.contains("stale"), "{message}");
        // Same size, one edge moved: refused, not read as this graph.
        let mut moved = dst.clone();
        moved[0] = (moved[0] + 1) % 4;
        assert_ne!(edge_digest(&src, &moved), digest);
        let message = Csr::cached(&path, Some((4, 6, edge_digest(&src, &moved))), build)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("edges") && message.contains("stale"),
            "{message}"
        );
    }

    #[test]
    fn cache_reading_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.csr");
        tiny().write_cache(&path).unwrap();
        let good = std::fs::read(&path).unwrap();
        let check = |bytes: &[u8], parts: &[&str]| {
            std::fs::write(&path, bytes).unwrap();
            let message = Csr::read_cache(&path).unwrap_err().to_string();
            for part in parts {
                assert!(message.contains(part), "{part:?} not in {message:?}");
            }
            assert!(message.contains("g.csr"), "{message}");
        };
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        check(&flipped, &["checksum"]);
        check(&good[..good.len() - 1], &["size", "99 bytes", "need 100"]);
        check(&good[..10], &["header", "10 bytes"]);
        let mut magic = good.clone();
        magic[0] = b'X';
        check(&magic, &["magic"]);
        let mut version = good.clone();
        version[8] = 9;
        check(&version, &["version", "9"]);
        // A valid checksum over a broken CSR: a column past the last node.
        let mut broken = good[..good.len() - 4].to_vec();
        let columns_at = 32 + 5 * 8;
        broken[columns_at..columns_at + 4].copy_from_slice(&9u32.to_le_bytes());
        let checksum = crc32c::crc32c(&broken);
        broken.extend(checksum.to_le_bytes());
        check(&broken, &["columns of row 0", "9 is not a node"]);
    }
}
