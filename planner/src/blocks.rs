//! How a graph's edges fall into the P × P blocks of a vertex-range partition.
//!
//! Partition `p` holds a contiguous range of vertex ids; block `(i, j)` holds
//! the edges whose destination is in partition `i` and source in partition
//! `j`, as 2-D partitioned full-graph systems store them.

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
                format!("{partitions} partitions for a graph of {nodes} nodes"),
            ));
        }
        Ok(())
    }

    /// Counts the edges of a real graph per block. `src[k] -> dst[k]` is edge k.
    pub fn from_edges(nodes: u64, src: &[u64], dst: &[u64], partitions: u32) -> Result<Self> {
        Self::check_partitions(nodes, partitions)?;
        if src.len() != dst.len() {
            return Err(Error::invalid(
                "edge list",
                format!("{} sources but {} destinations", src.len(), dst.len()),
            ));
        }
        let p = partitions as usize;
        let mut edges = vec![0u64; p * p];
        for (k, (&s, &d)) in src.iter().zip(dst).enumerate() {
            if s >= nodes || d >= nodes {
                return Err(Error::invalid(
                    format!("edge {k}"),
                    format!("{s} -> {d} names a vertex outside 0..{nodes}"),
                ));
            }
            let (i, j) = (
                partition_of(nodes, partitions, d),
                partition_of(nodes, partitions, s),
            );
            edges[i as usize * p + j as usize] += 1;
        }
        Ok(BlockCounts {
            partitions,
            nodes,
            edges,
        })
    }

    /// Distributes `edges` over the blocks with the statistics-only model: a
    /// `DIAGONAL_FRACTION` share on the diagonal, the rest in proportion to
    /// `w_i * w_j` with power-law partition weights. Counts are rounded by
    /// largest remainder so that they sum to `edges` exactly.
    pub fn skewed(nodes: u64, edges: u64, partitions: u32) -> Result<Self> {
        Self::check_partitions(nodes, partitions)?;
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
    pub fn range(&self, p: u32) -> (u64, u64) {
        partition_range(self.nodes, self.partitions, p)
    }

    pub fn partition_nodes(&self, p: u32) -> u64 {
        let (start, end) = self.range(p);
        end - start
    }

    pub fn block_edges(&self, dst: u32, src: u32) -> u64 {
        self.edges[dst as usize * self.partitions as usize + src as usize]
    }

    pub fn total_edges(&self) -> u64 {
        self.edges.iter().sum()
    }
}

/// Vertex range of partition `p` of `partitions` equal ranges over `nodes`.
pub fn partition_range(nodes: u64, partitions: u32, p: u32) -> (u64, u64) {
    let (q, r) = (nodes / partitions as u64, nodes % partitions as u64);
    let p = p as u64;
    let start = p * q + p.min(r);
    let len = q + u64::from(p < r);
    (start, start + len)
}

/// Partition holding vertex `v`.
pub fn partition_of(nodes: u64, partitions: u32, v: u64) -> u32 {
    let (q, r) = (nodes / partitions as u64, nodes % partitions as u64);
    let big = r * (q + 1);
    if v < big {
        (v / (q + 1)) as u32
    } else {
        (r + (v - big) / q) as u32
    }
}

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
        for (nodes, parts) in [(10u64, 3u32), (7, 7), (1000, 16), (5, 1)] {
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
}
