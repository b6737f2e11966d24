//! The normalised adjacency, cut into the P × P blocks the executor feeds to
//! the aggregation kernels.
//!
//! Partition `p` holds the contiguous node range [`BlockCsr::range`] (the
//! planner's `partition_range`, or boundaries given as a [`Split`]). Block `(i, j)` is a CSR over the rows of
//! partition `i` (destinations) whose columns are sources in partition `j`,
//! numbered from the partition's first node. Row `v` aggregates over the
//! edges `u -> v`.
//!
//! A block exists exactly when the planner gives it an `adj[i,j]` tensor:
//! it has entries, or it is on the diagonal. Its entries are those the
//! planner counts: every edge of the list (duplicates stay separate entries,
//! existing self loops stay) plus, for [`Normalization::GcnSym`] and
//! [`Normalization::Unweighted`], one added self loop per node. So the
//! adjacency is the multigraph's: `A[v][u]` is the number of edges `u -> v`.
//! Within a row entries are sorted by source; an added self loop comes after
//! any existing one.
//!
//! The weights are not stored per edge: every normalisation factors into
//! a scale per destination row and one per source row
//! ([`fateplan_kernels::Weighting`]), so a block stores those, 4 bytes a
//! row, and its edges cost 4 bytes each (the column).

use fateplan_kernels::{BlockRef, Weighting};
use fateplan_planner::blocks::{partition_of, partition_range, MAX_PARTITIONS};
use fateplan_planner::gnn::GnnModel;
use rayon::prelude::*;

use crate::csr::Csr;
use crate::Result;

/// How the vertices are cut into partitions of contiguous ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// The planner's equal ranges (`partition_range`).
    Equal { nodes: u64, partitions: u32 },
    /// Partition `p` is `starts[p]..starts[p + 1]`: made by
    /// [`Split::starts`], which checks them.
    Starts(Boundaries),
}

/// Partition boundaries that begin at 0, never decrease and end at the
/// node count ([`Split::starts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries(Vec<u64>);

impl Split {
    /// Boundaries `starts`, checked (`what` names them in errors).
    pub fn starts(starts: Vec<u64>, what: &str) -> Result<Split> {
        let bad = |why: String| crate::Error::invalid(std::path::Path::new(what), "starts", why);
        if starts.len() < 2 || starts.len() - 1 > MAX_PARTITIONS as usize {
            return Err(bad(format!(
                "{} boundaries: expected 2 to {}",
                starts.len(),
                MAX_PARTITIONS + 1
            )));
        }
        if starts[0] != 0 {
            return Err(bad(format!("the first is {}, not 0", starts[0])));
        }
        if let Some(w) = starts.windows(2).position(|w| w[1] < w[0]) {
            return Err(bad(format!(
                "boundary {} ({}) is below boundary {w} ({})",
                w + 1,
                starts[w + 1],
                starts[w]
            )));
        }
        Ok(Split::Starts(Boundaries(starts)))
    }

    pub fn nodes(&self) -> u64 {
        match self {
            Split::Equal { nodes, .. } => *nodes,
            Split::Starts(s) => *s.0.last().expect("checked: at least two"),
        }
    }

    pub fn partitions(&self) -> u32 {
        match self {
            Split::Equal { partitions, .. } => *partitions,
            Split::Starts(s) => (s.0.len() - 1) as u32,
        }
    }

    /// Node range `[start, end)` of partition `p`.
    pub fn range(&self, p: u32) -> (u64, u64) {
        match self {
            Split::Equal { nodes, partitions } => partition_range(*nodes, *partitions, p),
            Split::Starts(s) => (s.0[p as usize], s.0[p as usize + 1]),
        }
    }

    /// The partition holding vertex `v` (of empty partitions that start
    /// where it is, the one that holds it).
    pub fn of(&self, v: u64) -> u32 {
        match self {
            Split::Equal { nodes, partitions } => partition_of(*nodes, *partitions, v),
            Split::Starts(s) => (s.0.partition_point(|&start| start <= v) - 1) as u32,
        }
    }
}

/// How edge weights are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalization {
    /// GCN: `D^-1/2 (A + I) D^-1/2`, weight `1 / sqrt(d_u · d_v)` for edge
    /// `u -> v`, where `d` is the in-degree counting the added self loop
    /// (and duplicates and existing self loops: PyG's `gcn_norm` on the
    /// multigraph).
    GcnSym,
    /// GraphSAGE mean: weight `1 / in-degree(v)`, no self loops; a row with
    /// no in-edges has no entries and aggregates to zero.
    Mean,
    /// GAT: weight 1 with self loops added; attention supplies the weights.
    Unweighted,
}

impl Normalization {
    /// The normalisation each model aggregates with.
    pub fn for_model(model: GnnModel) -> Normalization {
        match model {
            GnnModel::Gcn => Normalization::GcnSym,
            GnnModel::Sage => Normalization::Mean,
            GnnModel::Gat => Normalization::Unweighted,
        }
    }

    pub fn self_loops(self) -> bool {
        !matches!(self, Normalization::Mean)
    }

    /// How a block stores its weights: GCN's `1 / sqrt(d_u · d_v)` as a
    /// scale per destination and per source row, the mean's `1 / d_v` per
    /// destination row, GAT's none.
    pub fn weighting(self) -> Weighting {
        match self {
            Normalization::GcnSym => Weighting::RowColumn,
            Normalization::Mean => Weighting::Row,
            Normalization::Unweighted => Weighting::Unit,
        }
    }
}

/// One block: rows of a destination partition, columns local to a source
/// partition.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrBlock {
    pub dst_partition: u32,
    pub src_partition: u32,
    /// `rows + 1` offsets into `columns`.
    pub row_start: Vec<u64>,
    /// Source node minus the source partition's first node.
    pub columns: Vec<u32>,
    /// The scales `weighting` names: per destination row (then, for
    /// GCN, per source row), none for GAT.
    pub weights: Vec<f32>,
    pub weighting: Weighting,
}

impl CsrBlock {
    pub fn rows(&self) -> u64 {
        self.row_start.len() as u64 - 1
    }

    pub fn edges(&self) -> u64 {
        self.columns.len() as u64
    }

    /// The kernels' view.
    pub fn view(&self) -> BlockRef<'_> {
        BlockRef {
            row_start: &self.row_start,
            columns: &self.columns,
            weights: &self.weights,
            weighting: self.weighting,
        }
    }

    /// Bytes of the three arrays: the planner's `adj[i,j]` tensor size,
    /// `(rows + 1) · 8 + edges · 4 + scales · 4`.
    pub fn byte_size(&self) -> u64 {
        self.row_start.len() as u64 * 8 + self.edges() * 4 + self.weights.len() as u64 * 4
    }
}

/// Every block of a `partitions`-way partition, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockCsr {
    pub nodes: u64,
    pub partitions: u32,
    pub normalization: Normalization,
    split: Split,
    /// Block `(i, j)` at `i * partitions + j`; `None` where the planner has
    /// no `adj[i,j]`.
    blocks: Vec<Option<CsrBlock>>,
}

impl BlockCsr {
    /// Cuts `csr` into blocks and weights them by `normalization`;
    /// destination partitions are built in parallel.
    pub fn build(csr: &Csr, partitions: u32, normalization: Normalization) -> Result<BlockCsr> {
        // Validates the partition count with the planner's rules.
        fateplan_planner::blocks::BlockCounts::from_edges(csr.nodes, &[], &[], partitions)?;
        debug_assert!(partitions <= MAX_PARTITIONS);
        let split = Split::Equal {
            nodes: csr.nodes,
            partitions,
        };
        Self::build_split(csr, split, normalization)
    }

    /// [`BlockCsr::build`] over the partitions of `split`.
    pub fn build_split(csr: &Csr, split: Split, normalization: Normalization) -> Result<BlockCsr> {
        if split.nodes() != csr.nodes {
            return Err(crate::Error::invalid(
                std::path::Path::new("split"),
                "nodes",
                format!("{} split for a graph of {}", split.nodes(), csr.nodes),
            ));
        }
        let partitions = split.partitions();
        if partitions == 0 {
            return Err(crate::Error::invalid(
                std::path::Path::new("split"),
                "partitions",
                "0: expected at least 1",
            ));
        }
        let nodes = csr.nodes;
        let rows_of = build_destinations(csr, &split, normalization, 0..partitions);
        Ok(BlockCsr {
            nodes,
            partitions,
            normalization,
            split,
            blocks: rows_of.into_iter().flatten().collect(),
        })
    }

    /// Node range `[start, end)` of partition `p`.
    pub fn range(&self, p: u32) -> (u64, u64) {
        self.split.range(p)
    }

    /// Block (dst partition `i`, src partition `j`), if the planner has one.
    pub fn block(&self, i: u32, j: u32) -> Option<&CsrBlock> {
        self.blocks[i as usize * self.partitions as usize + j as usize].as_ref()
    }

    /// Every block slot, `(i, j)` at `i * partitions + j`, taken out
    /// without copying.
    pub fn into_slots(self) -> Vec<Option<CsrBlock>> {
        self.blocks
    }

    /// Every existing block, by destination then source partition.
    pub fn blocks(&self) -> impl Iterator<Item = &CsrBlock> {
        self.blocks.iter().flatten()
    }

    /// Entries of every block, added self loops included.
    pub fn total_edges(&self) -> u64 {
        self.blocks().map(CsrBlock::edges).sum()
    }

    pub fn byte_size(&self) -> u64 {
        self.blocks().map(CsrBlock::byte_size).sum()
    }
}

/// The rows of a graph a block build reads: each destination's sources,
/// ascending, and every vertex's in-degree (which weights the blocks).
pub(crate) trait Adjacency: Sync {
    /// Sources of the edges ending at `v`, ascending.
    fn row(&self, v: u64) -> &[u32];
    /// Edges ending at `v` in the whole graph.
    fn in_degree(&self, v: u64) -> u64;
}

impl Adjacency for Csr {
    fn row(&self, v: u64) -> &[u32] {
        Csr::row(self, v)
    }

    fn in_degree(&self, v: u64) -> u64 {
        Csr::in_degree(self, v)
    }
}

/// The blocks of the destination partitions `destinations` of `split`
/// (each a row of `split.partitions()` slots, by source partition), from
/// `adjacency`'s rows of those partitions; built in parallel. Where
/// [`Normalization::GcnSym`] weights them, every vertex's degree is read.
pub(crate) fn build_destinations(
    adjacency: &impl Adjacency,
    split: &Split,
    normalization: Normalization,
    destinations: std::ops::Range<u32>,
) -> Vec<Vec<Option<CsrBlock>>> {
    if destinations.is_empty() {
        return Vec::new();
    }
    debug_assert!(destinations.end <= split.partitions());
    let nodes = split.nodes();
    let loops = normalization.self_loops();
    let degree = |v: u64| adjacency.in_degree(v) + u64::from(loops);
    let inverse_sqrt_degree: Vec<f64> = match normalization {
        Normalization::GcnSym => (0..nodes)
            .into_par_iter()
            .map(|v| 1.0 / (degree(v) as f64).sqrt())
            .collect(),
        _ => Vec::new(),
    };
    let partitions = split.partitions();
    let p = partitions as usize;
    destinations
        .into_par_iter()
        .map(|i| {
            let (first, end) = split.range(i);
            // Entries per source partition, to size the blocks.
            let mut counts = vec![0u64; p];
            for v in first..end {
                for &u in adjacency.row(v) {
                    counts[split.of(u as u64) as usize] += 1;
                }
            }
            if loops {
                counts[i as usize] += end - first;
            }
            let mut blocks: Vec<Option<CsrBlock>> = (0..partitions)
                .map(|j| {
                    (counts[j as usize] > 0 || j == i).then(|| {
                        let mut row_start = Vec::with_capacity((end - first + 1) as usize);
                        row_start.push(0);
                        CsrBlock {
                            dst_partition: i,
                            src_partition: j,
                            row_start,
                            columns: Vec::with_capacity(counts[j as usize] as usize),
                            weights: Vec::new(),
                            weighting: normalization.weighting(),
                        }
                    })
                })
                .collect();
            let starts: Vec<u64> = (0..partitions).map(|j| split.range(j).0).collect();
            let existing: Vec<usize> = (0..p).filter(|&j| blocks[j].is_some()).collect();
            for v in first..end {
                let mut push = |u: u64| {
                    let j = split.of(u) as usize;
                    let block = blocks[j].as_mut().expect("counted block exists");
                    block.columns.push((u - starts[j]) as u32);
                };
                let mut looped = !loops;
                for &u in adjacency.row(v) {
                    let u = u as u64;
                    if !looped && u > v {
                        push(v);
                        looped = true;
                    }
                    push(u);
                }
                if !looped {
                    push(v);
                }
                for &j in &existing {
                    let block = blocks[j].as_mut().expect("existing block");
                    block.row_start.push(block.columns.len() as u64);
                }
            }
            // The scales: the destination rows', then (GCN) the source rows'.
            let scales = |range: (u64, u64)| -> Vec<f32> {
                (range.0..range.1)
                    .map(|v| match normalization {
                        Normalization::GcnSym => inverse_sqrt_degree[v as usize] as f32,
                        Normalization::Mean => match adjacency.in_degree(v) {
                            0 => 0.0,
                            d => (1.0 / d as f64) as f32,
                        },
                        Normalization::Unweighted => 1.0,
                    })
                    .collect()
            };
            for block in blocks.iter_mut().flatten() {
                block.weights = match block.weighting {
                    Weighting::Row => scales((first, end)),
                    Weighting::RowColumn => {
                        let mut w = scales((first, end));
                        w.extend(scales(split.range(block.src_partition)));
                        w
                    }
                    Weighting::PerEdge | Weighting::Unit => Vec::new(),
                };
            }
            blocks
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense `N × N` f64 matrix of the aggregation, from the blocks.
    fn dense_from_blocks(blocks: &BlockCsr) -> Vec<Vec<f64>> {
        let n = blocks.nodes as usize;
        let mut dense = vec![vec![0.0; n]; n];
        for block in blocks.blocks() {
            let (row0, _) = blocks.range(block.dst_partition);
            let (column0, _) = blocks.range(block.src_partition);
            for r in 0..block.rows() as usize {
                for k in block.row_start[r] as usize..block.row_start[r + 1] as usize {
                    dense[row0 as usize + r][column0 as usize + block.columns[k] as usize] +=
                        block.view().weight(r, k) as f64;
                }
            }
        }
        dense
    }

    // 5 nodes; edges include a duplicate (3 -> 0 twice) and a self loop (2 -> 2);
    // node 4 has no in-edges.
    const SRC: [u64; 8] = [1, 3, 3, 0, 2, 2, 0, 4];
    const DST: [u64; 8] = [0, 0, 0, 1, 1, 2, 3, 3];

    fn build(partitions: u32, normalization: Normalization) -> BlockCsr {
        let csr = Csr::from_edges(5, &SRC, &DST).unwrap();
        BlockCsr::build(&csr, partitions, normalization).unwrap()
    }

    #[test]
    fn gcn_weights_match_a_dense_computation() {
        // A[v][u] = number of edges u -> v, plus I; d = row sums (in-degrees).
        let n = 5;
        let mut a = vec![vec![0.0f64; n]; n];
        for (&s, &d) in SRC.iter().zip(&DST) {
            a[d as usize][s as usize] += 1.0;
        }
        for (v, row) in a.iter_mut().enumerate() {
            row[v] += 1.0;
        }
        let d: Vec<f64> = a.iter().map(|row| row.iter().sum()).collect();
        for partitions in [1, 2, 3, 5] {
            let blocks = build(partitions, Normalization::GcnSym);
            let dense = dense_from_blocks(&blocks);
            for v in 0..n {
                for u in 0..n {
                    let expected = a[v][u] / (d[v] * d[u]).sqrt();
                    assert!(
                        (dense[v][u] - expected).abs() < 1e-6,
                        "P={partitions} [{v}][{u}]: {} vs {expected}",
                        dense[v][u]
                    );
                }
            }
            assert_eq!(blocks.total_edges(), 8 + 5);
        }
        // Row sums of D^-1/2 (A+I) D^-1/2 times sqrt(d_v / d_u) weights are 1:
        // for node 4 (only its self loop) the weight is exactly 1.
        let blocks = build(1, Normalization::GcnSym);
        let block = blocks.block(0, 0).unwrap();
        assert_eq!(&block.columns[block.row_start[4] as usize..], &[4]);
        let last = block.edges() as usize - 1;
        assert_eq!(block.view().weight(4, last), 1.0);
    }

    #[test]
    fn mean_rows_sum_to_one_or_are_empty() {
        for partitions in [1, 2, 3] {
            let blocks = build(partitions, Normalization::Mean);
            let dense = dense_from_blocks(&blocks);
            for (v, row) in dense.iter().enumerate() {
                let sum: f64 = row.iter().sum();
                let expected = if v == 4 { 0.0 } else { 1.0 };
                assert!((sum - expected).abs() < 1e-6, "row {v}: {sum}");
            }
            // The duplicate counts twice: node 0 has in-edges 1, 3, 3.
            assert!((dense[0][3] - 2.0 / 3.0).abs() < 1e-6);
            assert_eq!(blocks.total_edges(), 8);
        }
    }

    #[test]
    fn unweighted_adds_self_loops_in_source_order() {
        let blocks = build(2, Normalization::Unweighted);
        assert_eq!((blocks.range(0), blocks.range(1)), ((0, 3), (3, 5)));
        let diagonal = blocks.block(0, 0).unwrap();
        // Rows 0..3 of partition 0, sources in 0..3:
        // row 0: 0 (loop), 1; row 1: 0, 1 (loop), 2; row 2: 2 (edge), 2 (loop).
        assert_eq!(diagonal.row_start, vec![0, 2, 5, 7]);
        assert_eq!(diagonal.columns, vec![0, 1, 0, 1, 2, 2, 2]);
        assert_eq!(diagonal.weighting, Weighting::Unit);
        assert!(diagonal.weights.is_empty());
        let off = blocks.block(0, 1).unwrap();
        assert_eq!(
            (off.row_start.clone(), off.columns.clone()),
            (vec![0, 2, 2, 2], vec![0, 0])
        );
        let lower = blocks.block(1, 0).unwrap();
        assert_eq!(lower.columns, vec![0]);
        // Every block has rows + 1 row offsets and sorted columns.
        for block in blocks.blocks() {
            let (start, end) = blocks.range(block.dst_partition);
            assert_eq!(block.rows(), end - start);
            // GAT's blocks store no weights: 4 bytes an edge.
            assert_eq!(
                block.byte_size(),
                (block.rows() + 1) * 8 + block.edges() * 4
            );
        }
    }

    #[test]
    fn mean_keeps_empty_diagonal_blocks_and_drops_empty_others() {
        // Only edges 0 -> 3: block (1, 0) exists; (0, 1) does not; both
        // diagonal blocks exist, (0, 0) without entries.
        let csr = Csr::from_edges(4, &[0], &[3]).unwrap();
        let blocks = BlockCsr::build(&csr, 2, Normalization::Mean).unwrap();
        assert!(blocks.block(0, 1).is_none());
        assert_eq!(blocks.block(0, 0).unwrap().edges(), 0);
        assert_eq!(blocks.block(1, 0).unwrap().row_start, vec![0, 0, 1]);
        assert_eq!(blocks.blocks().count(), 3);
        assert!(BlockCsr::build(&csr, 5, Normalization::Mean).is_err());
        assert!(BlockCsr::build(&csr, 0, Normalization::Mean).is_err());
    }

    #[test]
    fn given_boundaries_cut_the_same_graph() {
        let csr = Csr::from_edges(5, &SRC, &DST).unwrap();
        // The equal split's boundaries give the equal split's blocks.
        let equal = BlockCsr::build(&csr, 2, Normalization::GcnSym).unwrap();
        let starts = vec![0, equal.range(0).1, 5];
        let given = BlockCsr::build_split(
            &csr,
            Split::starts(starts, "t").unwrap(),
            Normalization::GcnSym,
        )
        .unwrap();
        assert_eq!(
            equal.blocks().collect::<Vec<_>>(),
            given.blocks().collect::<Vec<_>>()
        );
        // Uneven and empty partitions: the same matrix.
        let split = Split::starts(vec![0, 1, 1, 5], "t").unwrap();
        assert_eq!((split.of(0), split.of(1), split.of(4)), (0, 2, 2));
        let uneven = BlockCsr::build_split(&csr, split, Normalization::GcnSym).unwrap();
        assert_eq!(uneven.range(1), (1, 1));
        assert_eq!(dense_from_blocks(&uneven), dense_from_blocks(&equal));
        assert_eq!(
            csr.block_counts_split(&Split::starts(vec![0, 1, 1, 5], "t").unwrap())
                .unwrap()
                .total_edges(),
            SRC.len() as u64
        );
        // Bad boundaries are named.
        for (starts, needle) in [
            (vec![0], "1 boundaries"),
            (vec![1, 5], "the first is 1"),
            (vec![0, 3, 2, 5], "boundary 2 (2) is below boundary 1 (3)"),
        ] {
            let e = Split::starts(starts, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let short = Split::starts(vec![0, 2, 4], "t").unwrap();
        let e = BlockCsr::build_split(&csr, short, Normalization::Mean).unwrap_err();
        assert!(e.to_string().contains("4 split for a graph of 5"), "{e}");
    }
}
