//! fateplan's kernels: graph storage and the math of GNN layers, on the CPU.
//!
//! Every tensor is `f32`, row-major, `rows × width`. The graph's vertices
//! are split into contiguous partitions and its edges into blocks: block
//! `(i, j)` is a [`BlockRef`], a CSR over the destination rows of partition
//! `i` whose columns are local row indices into source partition `j`, with
//! one weight per edge (normalisation already folded in).
//!
//! Modules, in the order a layer runs them:
//! - [`sparse`]: aggregation, `out = init + block · src` (optionally with
//!   dropout on `src` generated on the fly), and its transpose.
//! - [`dense`]: the linear layers and their backward, and fixed-order sums.
//! - [`activation`]: ReLU / ELU fused with dropout, and their backward.
//! - [`loss`]: softmax cross-entropy and accuracy.
//! - [`optim`]: Adam with PyTorch's semantics.
//! - [`gat`]: graph attention, split so that it runs block by block.
//! - [`dropout`]: the counter-based mask every kernel regenerates.
//! - [`mod@reference`]: `f64` loops, the oracle the tests compare against.
//! - [`cuda`]: the CUDA sources of the same kernels (`kernels/cuda/*.cu`),
//!   compiled at run time by the runtime's CUDA backend.
//!
//! Architecture invariant: results are bit-identical whatever the rayon
//! thread count. Reductions over rows are split into chunks of a fixed
//! number of rows ([`REDUCE_ROWS`]), never into as many pieces as there are
//! threads, and add their per-chunk partials in chunk order; the weight
//! and bias gradients hold at most [`REDUCE_GROUP`] partials at once.
//! Scatters
//! (transposed SpMM) give each task a range of output rows and walk every
//! edge in CSR order, so each output element sees its terms in edge order
//! however the rows are split.
//!
//! Architecture invariant: bad shapes return [`Error::InvalidInput`]; no
//! kernel panics on its inputs. The only `unsafe` is the cache prefetch
//! hint in [`sparse`], which cannot fault, and the calls of the AVX2 and
//! AVX-512 builds of the masked gather ([`sparse`]), the dropout hash
//! ([`dropout`]), the loss ([`loss`]), the activations ([`activation`])
//! and the exponentials of the edge softmax (`math`), made only with an
//! `Isa` that run-time detection found. Nothing needs target features at compile
//! time, and every build of a kernel gives the same bits.

pub mod activation;
pub mod cuda;
pub mod dense;
pub mod dropout;
pub mod gat;
mod isa;
pub mod loss;
mod math;

pub mod optim;
pub mod reference;
pub mod sparse;

#[cfg(test)]
mod tests;

/// Rows per parallel task for row-wise kernels (SpMM, GEMM, activations);
/// fewer for GEMMs over inputs wider than 128 (`dense::rows_per_task`).
pub const ROW_CHUNK: usize = 256;
/// Rows per partial sum in reductions over rows (weight and bias
/// gradients, the loss). Partials are added in chunk order.
pub const REDUCE_ROWS: usize = 4096;
/// Partials a weight or bias gradient's reduction (`dense`) holds at
/// once: it computes a group of chunks' partials in parallel (fewer chunks
/// where each has lanes) and adds them onto its result, in chunk order,
/// before it starts the next group. (GAT's `node_scores_bwd` and the loss
/// still hold a partial per chunk, each a row or a number.) The sum
/// is the one over all partials at once, bit for bit, and the partials
/// take at most this many times the result's bytes however many rows
/// there are (the planner counts them so: `scratch::REDUCE_GROUP`).
pub const REDUCE_GROUP: usize = 64;
/// Fewest output rows per task in transposed SpMM, where every task walks
/// all edges and keeps those whose source lies in its rows.
pub const SCATTER_MIN_ROWS: usize = 4096;

const _: () = assert!(REDUCE_ROWS.is_multiple_of(ROW_CHUNK));
const _: () = assert!(SCATTER_MIN_ROWS > 0 && ROW_CHUNK > 0);
const _: () = assert!(REDUCE_GROUP.is_multiple_of(dense::DROPPED_LANES));
const _: () = assert!(
    REDUCE_GROUP.is_multiple_of(dense::GRAD_LANES) && REDUCE_ROWS.is_multiple_of(dense::GRAD_LANES)
);

/// What can go wrong in a kernel: only bad input, for now (more variants
/// may come: a `match` on it needs a wildcard arm).
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A shape, length, index or parameter that does not fit; the message
    /// names the kernel, the argument and the value.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A buffer a kernel makes could not be allocated: `bytes` for
    /// `what` (`transpose: the columns`).
    #[error("out of memory: {bytes} bytes for {what} could not be allocated")]
    OutOfMemory { bytes: u64, what: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Returns `InvalidInput` unless `cond` holds.
pub(crate) fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::InvalidInput(msg()))
    }
}

/// `len` copies of `value` in a fresh buffer, or [`Error::OutOfMemory`]
/// naming `what`: a buffer as large as a graph's edges ends the caller's
/// work with an error, not the process.
pub(crate) fn filled<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut out = room(len, what)?;
    out.resize(len, value);
    Ok(out)
}

/// An empty buffer with room for `len` values, or [`Error::OutOfMemory`]
/// as [`filled`].
pub(crate) fn room<T>(len: usize, what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what: what.to_string(),
    })?;
    Ok(out)
}

/// Checks that `slice` holds exactly `len` values.
pub(crate) fn check_len(kernel: &str, arg: &str, slice_len: usize, len: usize) -> Result<()> {
    ensure(slice_len == len, || {
        format!("{kernel}: `{arg}` has {slice_len} values, expected {len}")
    })
}

/// How a kernel writes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The output is overwritten.
    Overwrite,
    /// The result is added to what the output holds.
    Accumulate,
}

/// Where a kernel's output starts from, for `out = init + …`.
#[derive(Debug, Clone, Copy)]
pub enum Init<'a> {
    /// From zero.
    Zero,
    /// From a copy of this slice (the shape of the output).
    From(&'a [f32]),
    /// From what the output already holds: accumulate (the chain of block
    /// SpMMs of one destination partition).
    Out,
}

impl<'a> From<Option<&'a [f32]>> for Init<'a> {
    fn from(init: Option<&'a [f32]>) -> Self {
        init.map_or(Init::Zero, Init::From)
    }
}

impl Init<'_> {
    pub(crate) fn check(&self, kernel: &str, out_len: usize) -> Result<()> {
        match self {
            Init::From(init) => check_len(kernel, "init", init.len(), out_len),
            _ => Ok(()),
        }
    }

    /// Sets `part`, which starts at element `offset` of the output.
    #[inline]
    pub(crate) fn apply(&self, part: &mut [f32], offset: usize) {
        match self {
            Init::Zero => part.fill(0.0),
            Init::From(init) => part.copy_from_slice(&init[offset..offset + part.len()]),
            Init::Out => {}
        }
    }
}

/// How a block's `weights` give the weight of edge `e = (r, c)`.
///
/// The normalisations the models use factor into a scale per destination
/// row and one per source row, so a block stores those (4 bytes a row)
/// instead of 4 bytes an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weighting {
    /// `weights[e]`: one weight per edge.
    #[default]
    PerEdge,
    /// `weights[r]`: one scale per destination row (GraphSAGE's mean,
    /// `1 / in-degree`).
    Row,
    /// `weights[r] · weights[rows + c]`: a scale per destination row, then
    /// one per source row (GCN's `1 / sqrt(d_r · d_c)`).
    RowColumn,
    /// 1, with `weights` empty (GAT, whose attention weighs the edges).
    Unit,
}

impl Weighting {
    /// Values `weights` must hold for a block of `rows` destination rows,
    /// `src_rows` source rows and `nnz` edges.
    pub fn len(self, rows: usize, src_rows: usize, nnz: usize) -> usize {
        match self {
            Weighting::PerEdge => nnz,
            Weighting::Row => rows,
            Weighting::RowColumn => rows + src_rows,
            Weighting::Unit => 0,
        }
    }

    /// The code the CUDA kernels take (`weighting` of `spmm_f32`,
    /// `spmm_carry_f32`, `spmm_t_f32` and `spmm_t_carry_f32` in
    /// `kernels/cuda/sparse.cu`, which switch on it).
    pub fn code(self) -> i32 {
        match self {
            Weighting::PerEdge => 0,
            Weighting::Row => 1,
            Weighting::RowColumn => 2,
            Weighting::Unit => 3,
        }
    }
}

/// One block of the adjacency: a CSR over destination rows whose columns
/// index rows of one source partition, with its edges' weights.
#[derive(Debug, Clone, Copy)]
pub struct BlockRef<'a> {
    /// `row_start[r]..row_start[r + 1]` indexes `columns` (and per-edge
    /// `weights`) for destination row `r`; `rows + 1` values, starting at 0.
    pub row_start: &'a [u64],
    /// Local row indices into the source partition.
    pub columns: &'a [u32],
    /// The edges' weights, laid out as `weighting` says.
    pub weights: &'a [f32],
    pub weighting: Weighting,
}

impl<'a> BlockRef<'a> {
    /// Destination rows.
    pub fn rows(&self) -> usize {
        self.row_start.len().saturating_sub(1)
    }

    pub fn nnz(&self) -> usize {
        self.columns.len()
    }

    /// Edge range of destination row `r`.
    #[inline]
    pub(crate) fn edges(&self, r: usize) -> std::ops::Range<usize> {
        self.row_start[r] as usize..self.row_start[r + 1] as usize
    }

    /// The weight of edge `e`, in destination row `r`.
    #[inline]
    pub fn weight(&self, r: usize, e: usize) -> f32 {
        match self.weighting {
            Weighting::PerEdge => self.weights[e],
            Weighting::Row => self.weights[r],
            Weighting::RowColumn => {
                self.weights[r] * self.weights[self.rows() + self.columns[e] as usize]
            }
            Weighting::Unit => 1.0,
        }
    }

    /// The weights of row `r`'s edges, in edge order: a slice of `weights`
    /// when they are stored per edge, else computed into `scratch`.
    #[inline]
    pub(crate) fn row_weights<'s>(&'s self, r: usize, scratch: &'s mut Vec<f32>) -> &'s [f32] {
        let edges = self.edges(r);
        scratch.clear();
        match self.weighting {
            Weighting::PerEdge => return &self.weights[edges],
            Weighting::Row => scratch.resize(edges.len(), self.weights[r]),
            Weighting::RowColumn => {
                let (scale, sources) = (self.weights[r], &self.weights[self.rows()..]);
                let columns = &self.columns[edges];
                scratch.extend(columns.iter().map(|&c| scale * sources[c as usize]));
            }
            Weighting::Unit => scratch.resize(edges.len(), 1.0),
        }
        scratch
    }

    /// Checks the CSR structure: `row_start` starts at 0, never decreases
    /// and ends at the edge count, `weights` holds what its weighting
    /// needs (unless `weights_needed` is false) and every column is below
    /// `src_rows`.
    pub fn validate(&self, kernel: &str, src_rows: usize, weights_needed: bool) -> Result<()> {
        self.validate_start(kernel)?;
        // Checked without an early exit first, so that the check
        // vectorises; the place of a fault is found only when there is
        // one.
        let (starts, ends) = (self.row_start, &self.row_start[1..]);
        let falls = starts
            .iter()
            .zip(ends)
            .fold(0u64, |falls, (&a, &b)| falls | u64::from(b < a));
        let rising = falls == 0;
        if let Some(r) = (!rising)
            .then(|| self.row_start.windows(2).position(|w| w[1] < w[0]))
            .flatten()
        {
            return Err(Error::InvalidInput(format!(
                "{kernel}: block `row_start` decreases at row {r} ({} > {})",
                self.row_start[r],
                self.row_start[r + 1]
            )));
        }
        self.validate_ends(kernel, src_rows, weights_needed)?;
        let past = self.columns.iter().fold(0u32, |most, &c| most.max(c));
        let in_range = self.columns.is_empty() || (past as usize) < src_rows;
        if let Some(&c) = (!in_range)
            .then(|| self.columns.iter().find(|&&c| c as usize >= src_rows))
            .flatten()
        {
            return Err(Error::InvalidInput(format!(
                "{kernel}: block column {c} is out of range for {src_rows} source rows"
            )));
        }
        Ok(())
    }

    /// `row_start` holds at least one value, and starts at 0.
    fn validate_start(&self, kernel: &str) -> Result<()> {
        ensure(!self.row_start.is_empty(), || {
            format!("{kernel}: block `row_start` is empty, expected rows + 1 values")
        })?;
        ensure(self.row_start[0] == 0, || {
            format!(
                "{kernel}: block `row_start[0]` is {}, expected 0",
                self.row_start[0]
            )
        })
    }

    /// [`BlockRef::validate`]'s checks that read no row and no edge: a
    /// kernel that checks its rows as it reads them ([`BlockRef::rows_valid`])
    /// checks these first, and the rest with [`BlockRef::validate`] only
    /// where some rows are not valid, to name the fault.
    pub(crate) fn validate_ends(
        &self,
        kernel: &str,
        src_rows: usize,
        weights_needed: bool,
    ) -> Result<()> {
        self.validate_start(kernel)?;
        let last = *self.row_start.last().unwrap_or(&0);
        ensure(last == self.columns.len() as u64, || {
            format!(
                "{kernel}: block `row_start` ends at {last} but `columns` has {} values",
                self.columns.len()
            )
        })?;
        if weights_needed {
            let expected = self.weighting.len(self.rows(), src_rows, self.nnz());
            ensure(self.weights.len() == expected, || {
                format!(
                    "{kernel}: block `weights` has {} values, expected {expected} ({:?} weights \
                     of {} rows, {src_rows} source rows, {} edges)",
                    self.weights.len(),
                    self.weighting,
                    self.rows(),
                    self.nnz()
                )
            })?;
        }
        Ok(())
    }

    /// Whether the block's offsets at every [`ROW_CHUNK`]-th row and at
    /// the end never decrease and stay within the edges: what splitting
    /// an edge-wise array at those rows needs, before each task checks its
    /// own rows ([`BlockRef::rows_valid`]).
    pub(crate) fn chunk_starts_valid(&self) -> bool {
        let rows = self.rows();
        let edges = self.columns.len() as u64;
        let mut last = 0u64;
        let mut ok = true;
        for r in (ROW_CHUNK..rows).step_by(ROW_CHUNK).chain([rows]) {
            let at = self.row_start[r];
            ok &= last <= at && at <= edges;
            last = at;
        }
        ok
    }

    /// Whether destination rows `rows` of the block are sound: their edge
    /// offsets never decrease and stay within the edges, and their
    /// columns are below `src_rows`. A kernel checks its task's rows just
    /// before it reads them (in cache, on the task's thread) after
    /// [`BlockRef::validate_ends`]; every row valid is every check of
    /// [`BlockRef::validate`].
    #[inline(always)]
    pub(crate) fn rows_valid(&self, rows: std::ops::Range<usize>, src_rows: usize) -> bool {
        let starts = &self.row_start[rows.start..=rows.end];
        let rising = starts.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
        // Compared as u64 before either is cast: rising and at most the
        // edge count, both fit in usize.
        if !rising || starts[starts.len() - 1] > self.columns.len() as u64 {
            return false;
        }
        let (first, last) = (starts[0] as usize, starts[starts.len() - 1] as usize);
        let past = self.columns[first..last]
            .iter()
            .fold(0u32, |most, &c| most.max(c));
        first == last || (past as usize) < src_rows
    }

    /// After a kernel's parallel tasks checked their rows
    /// ([`BlockRef::rows_valid`]): where one found them not sound
    /// (`sound` false), the fault, named by [`BlockRef::validate`]. The
    /// kernel's outputs then hold the rows of the tasks that were sound.
    pub(crate) fn fault_found(
        &self,
        kernel: &str,
        src_rows: usize,
        weights_needed: bool,
        sound: bool,
    ) -> Result<()> {
        if sound {
            return Ok(());
        }
        self.validate(kernel, src_rows, weights_needed)?;
        Err(Error::InvalidInput(format!(
            "{kernel}: a task found its rows of the block not sound, but the block checks as sound"
        )))
    }
}

impl BlockRef<'_> {
    /// The transpose, a block over the `src_rows` source rows whose
    /// columns are this block's destination rows: [`crate::sparse::spmm`]
    /// over it computes what [`crate::sparse::spmm_t`] computes over this
    /// one. A source row's edges keep their order (destination rows
    /// ascending, so each output element sees its terms in the same
    /// order), and so do the weights: per edge ones are permuted with
    /// their edges, scales per row are swapped (`Row` becomes
    /// `RowColumn` with a scale of 1 per new row, so each weight is
    /// `1 · w`, the same bits).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] where the block fails
    /// [`BlockRef::validate`] for `src_rows`, or has 2³² rows or more;
    /// [`Error::OutOfMemory`] where its buffers could not be allocated.
    pub fn transpose(&self, src_rows: usize) -> Result<Block> {
        self.validate("transpose", src_rows, true)?;
        let rows = self.rows();
        ensure(u32::try_from(rows).is_ok(), || {
            format!("transpose: {rows} destination rows do not fit the u32 columns")
        })?;
        // Past any memory where `src_rows` is usize::MAX: refused as such.
        let mut row_start = filled(
            src_rows.saturating_add(1),
            0u64,
            "transpose: the row starts",
        )?;
        for &c in self.columns {
            row_start[c as usize + 1] += 1;
        }
        for s in 0..src_rows {
            row_start[s + 1] += row_start[s];
        }
        let mut next = room(src_rows, "transpose: the rows' cursors")?;
        next.extend_from_slice(&row_start[..src_rows]);
        let mut columns = filled(self.nnz(), 0u32, "transpose: the columns")?;
        let per_edge = self.weighting == Weighting::PerEdge;
        let mut placed = filled(
            if per_edge { self.nnz() } else { 0 },
            0usize,
            "transpose: the edges' places",
        )?;
        for r in 0..rows {
            for e in self.edges(r) {
                let c = self.columns[e] as usize;
                let at = next[c] as usize;
                next[c] += 1;
                columns[at] = r as u32;
                if let Some(p) = placed.get_mut(at) {
                    *p = e;
                }
            }
        }
        drop(next);
        let weights_of = |len: usize| filled(len, 0.0f32, "transpose: the weights");
        let (weights, weighting) = match self.weighting {
            Weighting::PerEdge => {
                let mut w = weights_of(placed.len())?;
                for (w, &e) in w.iter_mut().zip(&placed) {
                    *w = self.weights[e];
                }
                (w, Weighting::PerEdge)
            }
            Weighting::Row => {
                let mut w = weights_of(src_rows + self.weights.len())?;
                w[..src_rows].fill(1.0);
                w[src_rows..].copy_from_slice(self.weights);
                (w, Weighting::RowColumn)
            }
            Weighting::RowColumn => {
                let (dst, src) = self.weights.split_at(rows);
                let mut w = weights_of(self.weights.len())?;
                w[..src.len()].copy_from_slice(src);
                w[src.len()..].copy_from_slice(dst);
                (w, Weighting::RowColumn)
            }
            Weighting::Unit => (Vec::new(), Weighting::Unit),
        };
        Ok(Block {
            row_start,
            columns,
            weights,
            weighting,
        })
    }
}

/// An owned block, for tests, benches and callers that build blocks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Block {
    pub row_start: Vec<u64>,
    pub columns: Vec<u32>,
    pub weights: Vec<f32>,
    pub weighting: Weighting,
}

impl Block {
    pub fn as_ref(&self) -> BlockRef<'_> {
        BlockRef {
            row_start: &self.row_start,
            columns: &self.columns,
            weights: &self.weights,
            weighting: self.weighting,
        }
    }

    /// Cuts rows `dst` (a range of `csr`'s rows) and the edges whose source
    /// lies in `src` into a block with local indices, keeping edge order.
    /// `weights` holds one value per edge of `csr`.
    pub fn from_csr(
        csr: &Csr,
        weights: &[f32],
        dst: std::ops::Range<usize>,
        src: std::ops::Range<usize>,
    ) -> Block {
        let mut block = Block {
            row_start: vec![0],
            ..Block::default()
        };
        for v in dst {
            let edges = csr.row_start[v] as usize..csr.row_start[v + 1] as usize;
            for e in edges {
                let c = csr.columns[e] as usize;
                if src.contains(&c) {
                    block.columns.push((c - src.start) as u32);
                    block.weights.push(weights[e]);
                }
            }
            block.row_start.push(block.columns.len() as u64);
        }
        block
    }
}

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

/// Checks that `width` is positive and `data` holds whole rows; returns
/// the row count.
pub(crate) fn rows_of(kernel: &str, arg: &str, len: usize, width: usize) -> Result<usize> {
    ensure(width > 0, || format!("{kernel}: `width` is 0"))?;
    ensure(len.is_multiple_of(width), || {
        format!("{kernel}: `{arg}` has {len} values, not a multiple of width {width}")
    })?;
    Ok(len / width)
}
