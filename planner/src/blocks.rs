//! How a graph's edges fall into the P × P blocks of a vertex-range partition.
//!
//! Partition `p` holds a contiguous range of vertex ids; block `(i, j)` holds
//! the edges whose destination is in partition `i` and source in partition
//! `j`, as 2-D partitioned full-graph systems store them.

use rayon::prelude::*;

use crate::{Error, Result};

/// Largest partition count: the workload has P² aggregation blocks per layer.
pub const MAX_PARTITIONS: u32 = 256;

/// Exponent of the power-law weight of partition `i`, `(i + 1)^-SKEW_EXPONENT`,
/// in the model used when only a dataset's statistics are known.
pub const SKEW_EXPONENT: f64 = 0.5;
/// Share of edges the statistics-only model puts in diagonal blocks
/// (vertex-id locality: neighbours tend to have nearby ids).
pub const DIAGONAL_FRACTION: f64 = 0.3;

const _: () = assert!(DIAGONAL_FRACTION >= 0.0 && DIAGONAL_FRACTION <= 1.0);

/// Edges of a batch each of [`BlockCounts::count`]'s side-by-side tasks
/// takes: batches under twice this are counted on the calling thread.
const COUNT_CHUNK: usize = 1 << 18;

/// Whether a batch's lists are as long as each other and name only the
/// graph's `nodes` vertices; the error names the first edge that does
/// not, `first` being the batch's first edge's number.
fn check_batch(nodes: u64, first: u64, src: &[u64], dst: &[u64]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(Error::invalid(
            "edge list",
            format!("{} sources but {} destinations", src.len(), dst.len()),
        ));
    }
    // The largest vertex first (a loop the compiler vectorises), and the
    // edge to name only where it is out of range.
    let largest = src.iter().chain(dst).fold(0u64, |a, &b| a.max(b));
    if largest < nodes {
        return Ok(());
    }
    match (0..src.len()).find(|&k| src[k] >= nodes || dst[k] >= nodes) {
        Some(k) => Err(Error::invalid(
            format!("edge {}", first + k as u64),
            format!("{} -> {} names a vertex outside 0..{nodes}", src[k], dst[k]),
        )),
        None => Ok(()),
    }
}

/// Vertex and edge counts of every partition and block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockCounts {
    pub partitions: u32,
    pub nodes: u64,
    /// Edges of block `(dst i, src j)` at `i * partitions + j`.
    pub edges: Vec<u64>,
}

impl BlockCounts {
    fn check_partitions(nodes: u64, partitions: u32) -> Result<()> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(Error::invalid(
                "partitions",
                format!("{partitions} is outside 1..={MAX_PARTITIONS}"),
            ));
        }
        if nodes < partitions as u64 {
            return Err(Error::invalid(
                "partitions",
                format!(
                    "{} for a graph of {}: each partition needs a vertex",
                    crate::units::count(partitions as u64, "partition"),
                    crate::units::count(nodes, "node")
                ),
            ));
        }
        Ok(())
    }

    /// Counts the edges of a real graph per block. `src[k] -> dst[k]` is edge k.
    pub fn from_edges(nodes: u64, src: &[u64], dst: &[u64], partitions: u32) -> Result<Self> {
        let mut counts = Self::empty(nodes, partitions)?;
        counts.count(0, src, dst)?;
        Ok(counts)
    }

    /// No edges in any block yet: [`BlockCounts::count`] adds them a batch
    /// at a time, for a graph whose edges are read rather than held.
    pub fn empty(nodes: u64, partitions: u32) -> Result<Self> {
        Self::check_partitions(nodes, partitions)?;
        let p = partitions as usize;
        Ok(BlockCounts {
            partitions,
            nodes,
            edges: vec![0u64; p * p],
        })
    }

    /// Adds a batch of edges, `src[k] -> dst[k]` being edge `first + k` of
    /// the graph (the number an error names). A batch with an edge naming
    /// a vertex outside the graph adds nothing.
    pub fn count(&mut self, first: u64, src: &[u64], dst: &[u64]) -> Result<()> {
        check_batch(self.nodes, first, src, dst)?;
        self.count_checked(src, dst);
        Ok(())
    }

    /// [`BlockCounts::count`] into each of `counts`, counts of one graph
    /// at several partition counts: the batch checked once, the counts
    /// made side by side on rayon's threads. A batch with an edge naming
    /// a vertex outside the graph adds nothing to any of them.
    pub fn count_each(
        counts: &mut [BlockCounts],
        first: u64,
        src: &[u64],
        dst: &[u64],
    ) -> Result<()> {
        let Some(nodes) = counts.first().map(|c| c.nodes) else {
            return Ok(());
        };
        if let Some(other) = counts.iter().find(|c| c.nodes != nodes) {
            return Err(Error::invalid(
                "block counts",
                format!(
                    "counted together for graphs of {nodes} and {} nodes",
                    other.nodes
                ),
            ));
        }
        check_batch(nodes, first, src, dst)?;
        counts
            .par_iter_mut()
            .for_each(|c| c.count_checked(src, dst));
        Ok(())
    }

    /// Adds a batch whose every vertex is one of the graph's; a large one
    /// in chunks side by side, each into a table of its own.
    fn count_checked(&mut self, src: &[u64], dst: &[u64]) {
        let p = self.partitions as usize;
        let ranges = RangeTable::new(self.nodes, self.partitions);
        let count_into = |table: &mut [u64], src: &[u64], dst: &[u64]| {
            for (&s, &d) in src.iter().zip(dst) {
                table[ranges.of(d) * p + ranges.of(s)] += 1;
            }
        };
        if src.len() < 2 * COUNT_CHUNK {
            count_into(&mut self.edges, src, dst);
            return;
        }
        let tables: Vec<Vec<u64>> = src
            .par_chunks(COUNT_CHUNK)
            .zip(dst.par_chunks(COUNT_CHUNK))
            .map(|(s, d)| {
                let mut table = vec![0u64; p * p];
                count_into(&mut table, s, d);
                table
            })
            .collect();
        for table in tables {
            for (total, n) in self.edges.iter_mut().zip(table) {
                *total += n;
            }
        }
    }

    /// Distributes `edges` over the blocks with the statistics-only model: a
    /// `DIAGONAL_FRACTION` share on the diagonal, the rest in proportion to
    /// `w_i * w_j` with power-law partition weights. Counts are rounded by
    /// largest remainder so that they sum to `edges` exactly.
    pub fn skewed(nodes: u64, edges: u64, partitions: u32) -> Result<Self> {
        Self::check_partitions(nodes, partitions)?;
        // Shared out in 64-bit floats, which count whole numbers exactly
        // up to 2^53 (no graph comes near it).
        if edges > MOST_SKEWED_EDGES {
            return Err(Error::invalid(
                "edges",
                format!("{edges} is above {MOST_SKEWED_EDGES} (2^53), the most shared out exactly"),
            ));
        }
        let p = partitions as usize;
        let weights: Vec<f64> = (0..p)
            .map(|i| ((i + 1) as f64).powf(-SKEW_EXPONENT))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut shares = vec![0.0f64; p * p];
        for i in 0..p {
            for j in 0..p {
                let (wi, wj) = (weights[i] / total, weights[j] / total);
                let mut share = (1.0 - DIAGONAL_FRACTION) * wi * wj;
                if i == j {
                    share += DIAGONAL_FRACTION * wi;
                }
                shares[i * p + j] = share;
            }
        }
        Ok(BlockCounts {
            partitions,
            nodes,
            edges: apportion(edges, &shares),
        })
    }

    /// Vertex range `[start, end)` of partition `p`; sizes differ by at most one.
    /// Panics where `p` is not a partition (as a slice's index does).
    pub fn range(&self, p: u32) -> (u64, u64) {
        partition_range(self.nodes, self.partitions, p)
    }

    pub fn partition_nodes(&self, p: u32) -> u64 {
        let (start, end) = self.range(p);
        end - start
    }

    /// Edges of block `(dst, src)`. Panics where either is not a
    /// partition (as a slice's index does).
    pub fn block_edges(&self, dst: u32, src: u32) -> u64 {
        let p = self.partitions;
        assert!(
            dst < p && src < p,
            "block ({dst}, {src}) of {p} partitions: both must be below {p}"
        );
        self.edges[dst as usize * p as usize + src as usize]
    }

    pub fn total_edges(&self) -> u64 {
        self.edges.iter().sum()
    }
}

/// Vertex range of partition `p` of `partitions` equal ranges over `nodes`.
/// Panics where `p` is not below `partitions` (as a slice's index does).
pub fn partition_range(nodes: u64, partitions: u32, p: u32) -> (u64, u64) {
    assert!(
        p < partitions,
        "partition {p} of {partitions}: it must be below {partitions}"
    );
    let (q, r) = (nodes / partitions as u64, nodes % partitions as u64);
    let p = p as u64;
    let start = p * q + p.min(r);
    let len = q + u64::from(p < r);
    (start, start + len)
}

/// Partition holding vertex `v`. Panics where `v` is not below `nodes`
/// or there are no partitions (as a slice's index does).
pub fn partition_of(nodes: u64, partitions: u32, v: u64) -> u32 {
    assert!(
        v < nodes && partitions > 0,
        "vertex {v} of {nodes} in {partitions} partitions: it must be below {nodes}, and \
         there must be a partition"
    );
    let (q, r) = (nodes / partitions as u64, nodes % partitions as u64);
    let big = r * (q + 1);
    if v < big {
        (v / (q + 1)) as u32
    } else {
        (r + (v - big) / q) as u32
    }
}

/// [`partition_of`] by table rather than division, for counting many
/// edges: vertices fall into buckets of `2^shift` ids, no wider than the
/// smallest partition, so a bucket meets at most two partitions.
struct RangeTable {
    /// First vertex of each partition, and the vertex count.
    starts: Vec<u64>,
    /// Partition of each bucket's first vertex.
    first: Vec<u32>,
    shift: u32,
}

impl RangeTable {
    /// For `partitions` ranges of `nodes` vertices, at most `nodes`.
    fn new(nodes: u64, partitions: u32) -> RangeTable {
        let smallest = (nodes / u64::from(partitions)).max(1);
        let shift = smallest.ilog2();
        let mut starts: Vec<u64> = (0..partitions)
            .map(|p| partition_range(nodes, partitions, p).0)
            .collect();
        starts.push(nodes);
        let first = (0..nodes.div_ceil(1 << shift))
            .map(|b| partition_of(nodes, partitions, b << shift))
            .collect();
        RangeTable {
            starts,
            first,
            shift,
        }
    }

    /// Partition of vertex `v`, one of the `nodes`.
    fn of(&self, v: u64) -> usize {
        let p = self.first[(v >> self.shift) as usize] as usize;
        p + usize::from(v >= self.starts[p + 1])
    }
}

/// The most edges [`BlockCounts::skewed`] shares out.
pub const MOST_SKEWED_EDGES: u64 = 1 << 53;

/// Splits `total` in proportion to `shares` (which sum to about 1), rounding
/// by largest remainder; ties go to the lower index.
fn apportion(total: u64, shares: &[f64]) -> Vec<u64> {
    let sum: f64 = shares.iter().sum();
    let exact: Vec<f64> = shares.iter().map(|s| s / sum * total as f64).collect();
    let mut counts: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
    let assigned: u64 = counts.iter().sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &index in order
        .iter()
        .cycle()
        .take(total.saturating_sub(assigned) as usize)
    {
        counts[index] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_vertex_once() {
        for (nodes, parts) in [
            (10u64, 3u32),
            (7, 7),
            (1000, 16),
            (5, 1),
            (100, 33),
            (4099, 256),
            (1_000_003, 7),
        ] {
            let mut next = 0;
            for p in 0..parts {
                let (start, end) = partition_range(nodes, parts, p);
                assert_eq!(start, next);
                for v in start..end {
                    assert_eq!(partition_of(nodes, parts, v), p);
                }
                next = end;
            }
            assert_eq!(next, nodes);
            let table = RangeTable::new(nodes, parts);
            for v in 0..nodes {
                assert_eq!(table.of(v), partition_of(nodes, parts, v) as usize);
            }
        }
    }

    #[test]
    fn skewed_counts_sum_exactly() {
        let blocks = BlockCounts::skewed(1_000_000, 12_070_502, 16).unwrap();
        assert_eq!(blocks.total_edges(), 12_070_502);
        assert!(blocks.block_edges(0, 0) > blocks.block_edges(15, 15));
        assert!(blocks.block_edges(3, 3) > blocks.block_edges(3, 4));
    }

    #[test]
    fn real_edges_are_counted_per_block() {
        let blocks = BlockCounts::from_edges(4, &[0, 1, 3, 2], &[1, 0, 0, 3], 2).unwrap();
        assert_eq!(blocks.edges, vec![2, 1, 0, 1]);
        assert!(BlockCounts::from_edges(4, &[9], &[0], 2).is_err());
        assert!(BlockCounts::from_edges(4, &[0], &[0], 0).is_err());
    }

    #[test]
    fn edges_counted_in_batches_are_counted_once_and_named_by_their_number() {
        let (src, dst) = ([0u64, 1, 3, 2, 4, 0], [1u64, 0, 0, 3, 2, 4]);
        let whole = BlockCounts::from_edges(5, &src, &dst, 2).unwrap();
        let mut batched = BlockCounts::empty(5, 2).unwrap();
        for first in (0..6).step_by(4) {
            let last = (first + 4).min(6);
            batched
                .count(first as u64, &src[first..last], &dst[first..last])
                .unwrap();
        }
        assert_eq!(batched, whole);
        assert_eq!(whole.edges, vec![2, 2, 2, 0]);
        // The second batch's first edge is edge 4 of the graph; the
        // batch adds nothing.
        let error = batched.count(4, &[1, 7], &[0, 0]).unwrap_err().to_string();
        assert!(
            error.contains("edge 5") && error.contains("7 -> 0"),
            "{error}"
        );
        assert_eq!(batched, whole);
        assert!(BlockCounts::empty(1, 2).is_err());
    }

    /// A batch large enough to be counted in chunks side by side gives the
    /// counts of one edge at a time; several counts made together give
    /// each one's own; a bad edge in a batch counted together is named
    /// and adds nothing to any.
    #[test]
    fn counts_made_side_by_side_are_the_counts_of_one_edge_at_a_time() {
        let (nodes, edges) = (100_003u64, 2 * COUNT_CHUNK + 12_345);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % nodes
        };
        let src: Vec<u64> = (0..edges).map(|_| next()).collect();
        let dst: Vec<u64> = (0..edges).map(|_| next()).collect();
        let by_one = |partitions: u32| {
            let mut counts = BlockCounts::empty(nodes, partitions).unwrap();
            let p = partitions as usize;
            for (&s, &d) in src.iter().zip(&dst) {
                let of = |v: u64| partition_of(nodes, partitions, v) as usize;
                counts.edges[of(d) * p + of(s)] += 1;
            }
            counts
        };
        let chunked = BlockCounts::from_edges(nodes, &src, &dst, 7).unwrap();
        assert_eq!(chunked, by_one(7));
        assert_eq!(chunked.edges.iter().sum::<u64>(), edges as u64);
        let mut together: Vec<BlockCounts> = [3, 7, 16]
            .iter()
            .map(|&p| BlockCounts::empty(nodes, p).unwrap())
            .collect();
        BlockCounts::count_each(&mut together, 0, &src, &dst).unwrap();
        for counts in &together {
            assert_eq!(*counts, by_one(counts.partitions));
        }
        let before = together.clone();
        let error = BlockCounts::count_each(&mut together, 10, &[1, 2, nodes], &[0, 0, 0])
            .unwrap_err()
            .to_string();
        assert!(error.contains("edge 12"), "{error}");
        assert_eq!(together, before);
        together.push(BlockCounts::empty(nodes + 1, 2).unwrap());
        assert!(BlockCounts::count_each(&mut together, 0, &[0], &[0]).is_err());
    }
}
