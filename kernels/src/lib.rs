//! fateplan's kernels: graph storage and the math of GNN layers.
//!
//! The compressed sparse row layout here is what the aggregation kernels
//! read: row `v` lists the sources of the edges into `v`.

/// A graph in compressed sparse row form, rows by destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csr {
    /// `row_start[v]..row_start[v + 1]` indexes `columns` for row `v`.
    pub row_start: Vec<u64>,
    pub columns: Vec<u32>,
}

impl Csr {
    /// Builds rows by destination with a counting sort; within a row,
    /// sources keep the order of the edge list. Vertex ids must be below
    /// `nodes`, which must fit in u32 (callers validate both).
    pub fn from_edges(nodes: usize, src: &[u64], dst: &[u64]) -> Csr {
        assert!(nodes <= u32::MAX as usize, "Csr holds u32 column ids");
        let mut row_start = vec![0u64; nodes + 1];
        for &d in dst {
            row_start[d as usize + 1] += 1;
        }
        for v in 0..nodes {
            row_start[v + 1] += row_start[v];
        }
        let mut next: Vec<u64> = row_start[..nodes].to_vec();
        let mut columns = vec![0u32; src.len()];
        for (&s, &d) in src.iter().zip(dst) {
            let slot = &mut next[d as usize];
            columns[*slot as usize] = s as u32;
            *slot += 1;
        }
        Csr { row_start, columns }
    }

    pub fn rows(&self) -> usize {
        self.row_start.len() - 1
    }

    /// Sources of the edges into `row`.
    pub fn row(&self, row: usize) -> &[u32] {
        &self.columns[self.row_start[row] as usize..self.row_start[row + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_destination() {
        let csr = Csr::from_edges(3, &[0, 2, 1, 0], &[1, 1, 2, 0]);
        assert_eq!(csr.row(0), &[0]);
        assert_eq!(csr.row(1), &[0, 2]);
        assert_eq!(csr.row(2), &[1]);
        assert_eq!(csr.rows(), 3);
    }
}
