//! Graph attention (GAT), split so that it runs block by block.
//!
//! A layer has `H` heads of width `C` (`d_out = H·C`; hidden layers concat
//! their heads, the last layer has one head) and weights laid out as `W`
//! (`d_in × d_out`), `att_src` (`d_out`), `att_dst` (`d_out`), bias
//! (`d_out`). For a destination row `r` of partition `i` and an edge from
//! row `c` of partition `j`, per head `h`:
//!
//! ```text
//! z          = h_in · W                                  (dense::matmul_rows)
//! a_src[v,h] = ⟨att_src_h, z[v]_h⟩,  a_dst[v,h] = ⟨att_dst_h, z[v]_h⟩
//!                                                        (node_scores)
//! u_e        = a_dst_i[r,h] + a_src_j[c,h],  s_e = LeakyReLU(u_e, 0.2)
//!                                                        (edge_scores)
//! alpha_e    = exp(s_e) / Σ_{e' into r, over every block (i, ·)} exp(s_e')
//!                                                        (edge_softmax)
//! out[r]_h   = Σ_e alpha_e · z_j[c]_h                    (aggregate)
//! y          = out + bias                                (dense::add_bias)
//! ```
//!
//! Only the softmax needs a whole destination row: [`edge_softmax`] takes
//! the score slices of every source block of a row partition (in the
//! executor's block order) and turns them into `alpha` in place. The rest
//! runs one block at a time.
//!
//! Backward, given `dout = dy` (rows of partition `i`):
//!
//! ```text
//! dalpha_e = ⟨dout[r]_h, z_j[c]_h⟩
//! ds_e     = alpha_e · (dalpha_e − Σ_{e'} alpha_e' dalpha_e')
//!          = alpha_e · (dalpha_e − ⟨dout[r]_h, out[r]_h⟩)
//! du_e     = ds_e · (1 if u_e > 0 else 0.2)
//! dz_j[c]_h     += alpha_e · dout[r]_h       da_src_j[c,h] += du_e
//! da_dst_i[r,h] += du_e
//! ```
//!
//! The sum over the row's edges in the softmax backward equals
//! `⟨dout[r]_h, out[r]_h⟩`, where `out` is the row's full aggregation
//! (before the bias), so [`aggregate_bwd`] needs from the other blocks of
//! the row only that forward output, not their edges. Its outputs are
//! accumulated over blocks: `dz_j` and `da_src_j` over the destination
//! blocks of source partition `j`, `da_dst_i` over the source blocks of
//! partition `i`. Finally [`node_scores_bwd`] adds the score path to `dz`
//! (`dz[v]_h += da_src[v,h]·att_src_h + da_dst[v,h]·att_dst_h`) and gives
//! the gradients of `att_src` and `att_dst`; `dense::matmul_rows_bwd` then
//! gives `dW` and `dh_in`, and `dense::column_sums(dy)` the bias gradient.
//!
//! Attention dropout (as PyTorch Geometric's `GATConv(dropout=p)`)
//! aggregates with `alpha'_e = m_e · alpha_e` (`m_e` is 0 or `1/(1-p)`):
//! the caller applies the mask to a copy of `alpha` and passes that copy
//! to [`aggregate`] and, as [`BlockInputs::alpha_dropped`], to
//! [`aggregate_bwd`]. Then `dalpha_e = m_e·⟨dout[r]_h, z_j[c]_h⟩`, the
//! row's sum `Σ_e' alpha_e' dalpha_e'` is still `⟨dout[r]_h, out[r]_h⟩`,
//! so `ds_e = alpha'_e·⟨dout[r]_h, z_j[c]_h⟩ − alpha_e·⟨dout[r]_h,
//! out[r]_h⟩`, and the value path is `dz_j[c]_h += alpha'_e · dout[r]_h`.
//!
//! `u_e` is recomputed in the backward from `a_dst` and `a_src` with the
//! same `f32` addition as the forward, so the LeakyReLU branch agrees.
//! Edge-wise arrays (`scores`, `alpha`) are `nnz × H`, edge-major.

use rayon::prelude::*;

use crate::dropout::{Dropout, RowKeys};
use crate::isa::Isa;
use crate::math::exp_on;
use crate::sparse::{prefetch_row, scatter_pair, ScatterOut, PREFETCH_EDGES};
use crate::{check_len, ensure, rows_of, BlockRef, Init, Result, Write, REDUCE_ROWS, ROW_CHUNK};

/// LeakyReLU's slope for negative scores.
pub const NEGATIVE_SLOPE: f32 = 0.2;

/// Heads of a GAT layer: `heads × head_width` features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub heads: usize,
    pub head_width: usize,
}

impl Heads {
    pub fn width(&self) -> usize {
        self.heads * self.head_width
    }

    fn check(&self, kernel: &str) -> Result<()> {
        ensure(self.heads > 0 && self.head_width > 0, || {
            format!(
                "{kernel}: `heads` ({}) and `head_width` ({}) must be positive",
                self.heads, self.head_width
            )
        })
    }
}

#[inline(always)]
fn leaky_relu(u: f32) -> f32 {
    if u > 0.0 {
        u
    } else {
        NEGATIVE_SLOPE * u
    }
}

#[inline(always)]
fn leaky_relu_grad(u: f32) -> f32 {
    if u > 0.0 {
        1.0
    } else {
        NEGATIVE_SLOPE
    }
}

/// `⟨a, b⟩` over `min(len)` elements, in eight lanes (element `k` into
/// lane `k mod 8`) summed as a tree at the end: a fixed order, so the
/// same bits on every CPU instruction set, and one that vectorises (a head's
/// dot product is most of GAT's node scores and of its attention
/// backward).
#[inline(always)]
pub(crate) fn lane_dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (a_chunks, a_tail) = a[..n].as_chunks::<LANES>();
    let (b_chunks, b_tail) = b[..n].as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    for (k, (x, y)) in a_tail.iter().zip(b_tail).enumerate() {
        acc[k] += x * y;
    }
    let half = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (half[0] + half[2]) + (half[1] + half[3])
}

/// Per-vertex halves of the attention score: `a_src[v,h] = ⟨att_src_h,
/// z[v]_h⟩` and `a_dst[v,h] = ⟨att_dst_h, z[v]_h⟩`. `z` is `rows × H·C`;
/// `a_src`, `a_dst` are `rows × H`.
pub fn node_scores(
    z: &[f32],
    heads: Heads,
    att_src: &[f32],
    att_dst: &[f32],
    a_src: &mut [f32],
    a_dst: &mut [f32],
) -> Result<()> {
    let k = "gat::node_scores";
    heads.check(k)?;
    let d = heads.width();
    let rows = rows_of(k, "z", z.len(), d)?;
    check_len(k, "att_src", att_src.len(), d)?;
    check_len(k, "att_dst", att_dst.len(), d)?;
    check_len(k, "a_src", a_src.len(), rows * heads.heads)?;
    check_len(k, "a_dst", a_dst.len(), rows * heads.heads)?;
    let (h_n, c_n) = (heads.heads, heads.head_width);
    a_src
        .par_chunks_mut(ROW_CHUNK * h_n)
        .zip(a_dst.par_chunks_mut(ROW_CHUNK * h_n))
        .zip(z.par_chunks(ROW_CHUNK * d))
        .for_each(|((src, dst), z)| {
            for ((s, t), zr) in src
                .chunks_exact_mut(h_n)
                .zip(dst.chunks_exact_mut(h_n))
                .zip(z.chunks_exact(d))
            {
                for h in 0..h_n {
                    let zh = &zr[h * c_n..(h + 1) * c_n];
                    s[h] = lane_dot(zh, &att_src[h * c_n..(h + 1) * c_n]);
                    t[h] = lane_dot(zh, &att_dst[h * c_n..(h + 1) * c_n]);
                }
            }
        });
    Ok(())
}

/// Edge scores of one block: `scores[e,h] = LeakyReLU(a_dst[r,h] +
/// a_src[c,h])`. `a_dst` covers the block's destination rows, `a_src` its
/// source partition; `scores` is `nnz × H`.
pub fn edge_scores(
    block: BlockRef,
    a_dst: &[f32],
    a_src: &[f32],
    heads: usize,
    scores: &mut [f32],
) -> Result<()> {
    let k = "gat::edge_scores";
    let src_rows = rows_of(k, "a_src", a_src.len(), heads)?;
    check_ends(block, k, src_rows)?;
    check_len(k, "a_dst", a_dst.len(), block.rows() * heads)?;
    check_len(k, "scores", scores.len(), block.nnz() * heads)?;
    let sound = par_row_chunks(block, src_rows, heads, scores, |rows, e0, part| {
        for r in rows {
            let ad = &a_dst[r * heads..(r + 1) * heads];
            for e in block.edges(r) {
                let c = block.columns[e] as usize;
                let asrc = &a_src[c * heads..(c + 1) * heads];
                let s = &mut part[(e - e0) * heads..(e - e0 + 1) * heads];
                for ((s, &d), &a) in s.iter_mut().zip(ad).zip(asrc) {
                    *s = leaky_relu(d + a);
                }
            }
        }
    });
    block.fault_found(k, src_rows, false, sound)
}

/// The checks of `block` a kernel makes before its tasks run: its ends
/// ([`BlockRef::validate_ends`]) and the offsets its edge-wise arrays are
/// split at ([`BlockRef::chunk_starts_valid`]). Each task then checks its
/// own rows as it reads them ([`BlockRef::rows_valid`], in
/// [`par_row_chunks`] and the kernels' own tasks). Where these fail, the
/// whole check ([`BlockRef::validate`]) names the fault.
fn check_ends(block: BlockRef, k: &str, src_rows: usize) -> Result<()> {
    if block.validate_ends(k, src_rows, false).is_ok() && block.chunk_starts_valid() {
        return Ok(());
    }
    block.validate(k, src_rows, false)?;
    Err(crate::Error::InvalidInput(format!(
        "{k}: the block's row offsets fail a check that the whole block passes"
    )))
}

/// `f(rows, e0, part)` in parallel over the chunks of [`ROW_CHUNK`] rows
/// of an edge-wise array (`nnz × width`): `part` holds the values of the
/// edges of `rows`, the first of which is edge `e0`. Each task first
/// checks its rows of the block for `src_rows` source rows
/// ([`BlockRef::rows_valid`], after the caller's [`check_ends`]); a task
/// whose rows are not sound leaves its part as it was, and the result is
/// false.
#[must_use]
fn par_row_chunks<F>(block: BlockRef, src_rows: usize, width: usize, data: &mut [f32], f: F) -> bool
where
    F: Fn(std::ops::Range<usize>, usize, &mut [f32]) + Sync + Send,
{
    split_by_rows(block, width, data)
        .into_par_iter()
        .enumerate()
        .map(|(chunk, part)| {
            let r0 = chunk * ROW_CHUNK;
            let rows = r0..(r0 + ROW_CHUNK).min(block.rows());
            if !block.rows_valid(rows.clone(), src_rows) {
                return false;
            }
            f(rows, block.row_start[r0] as usize, part);
            true
        })
        .reduce(|| true, |a, b| a & b)
}

/// Splits an edge-wise array (`nnz × width`) at the edges of every
/// `ROW_CHUNK`-th row (whose offsets [`check_ends`] has checked).
fn split_by_rows<'a>(block: BlockRef, width: usize, mut data: &'a mut [f32]) -> Vec<&'a mut [f32]> {
    let mut pieces = Vec::with_capacity(block.rows().div_ceil(ROW_CHUNK));
    let mut r0 = 0;
    while r0 < block.rows() {
        let r1 = (r0 + ROW_CHUNK).min(block.rows());
        let n = (block.row_start[r1] - block.row_start[r0]) as usize * width;
        let (head, tail) = std::mem::take(&mut data).split_at_mut(n);
        pieces.push(head);
        data = tail;
        r0 = r1;
    }
    pieces
}

/// Attention dropout on one block's edge values (`values`: `nnz × heads`,
/// in the block's edge order), in place. The mask of head `h` of the edge
/// from source row `c` to destination row `r` is that of element
/// `(dst.key(r) · nodes + src.key(c)) · heads + h` (wrapping), where the
/// keys are the rows' numbers in the whole graph as given and `nodes` its
/// vertex count. The mask therefore depends on the edge's endpoints only,
/// not on how the graph is partitioned or shared out to devices; parallel
/// edges (the same endpoints twice) share it.
#[allow(clippy::too_many_arguments)]
pub fn dropout_edges(
    block: BlockRef,
    heads: usize,
    dst: RowKeys,
    src: RowKeys,
    src_rows: usize,
    nodes: u64,
    dropout: &Dropout,
    values: &mut [f32],
) -> Result<()> {
    let k = "gat::dropout_edges";
    ensure(heads > 0, || format!("{k}: `heads` is 0"))?;
    check_ends(block, k, src_rows)?;
    check_len(k, "values", values.len(), block.nnz() * heads)?;
    dst.check(k, block.rows())?;
    src.check(k, src_rows)?;
    dropout.validate()?;
    if dropout.is_identity() {
        // No task reads the rows: the whole check, as a kernel that did.
        return block.validate(k, src_rows, false);
    }
    let mask = dropout.mask();
    let heads64 = heads as u64;
    let sound = par_row_chunks(block, src_rows, heads, values, |rows, e0, part| {
        let mut factors = vec![0.0f32; heads];
        for r in rows {
            let row_key = dst.key(r).wrapping_mul(nodes);
            for e in block.edges(r) {
                let edge = row_key.wrapping_add(src.key(block.columns[e] as usize));
                mask.fill(edge.wrapping_mul(heads64), &mut factors);
                let v = &mut part[(e - e0) * heads..(e - e0 + 1) * heads];
                for (v, f) in v.iter_mut().zip(&factors) {
                    *v *= f;
                }
            }
        }
    });
    block.fault_found(k, src_rows, false, sound)
}

/// Softmax over all edges of each destination row and head, where a row's
/// edges are spread over `blocks` (every source block of one destination
/// partition, all with the same rows). `scores[b]` holds block `b`'s edge
/// scores (`nnz_b × H`) and is overwritten with `alpha` in the same order.
/// A row without edges has no `alpha`. The max and the sum run over the
/// blocks in the given order, so that order must be fixed.
pub fn edge_softmax(blocks: &[BlockRef], heads: usize, scores: &mut [&mut [f32]]) -> Result<()> {
    let k = "gat::edge_softmax";
    ensure(heads > 0, || format!("{k}: `heads` is 0"))?;
    ensure(blocks.len() == scores.len(), || {
        format!(
            "{k}: {} blocks but {} score slices",
            blocks.len(),
            scores.len()
        )
    })?;
    let Some(first) = blocks.first() else {
        return Ok(());
    };
    let rows = first.rows();
    for (b, (block, s)) in blocks.iter().zip(scores.iter()).enumerate() {
        check_ends(*block, k, usize::MAX)?;
        ensure(block.rows() == rows, || {
            format!(
                "{k}: block {b} has {} rows, block 0 has {rows}",
                block.rows()
            )
        })?;
        check_len(k, "scores[b]", s.len(), block.nnz() * heads)?;
    }
    // pieces[chunk][block]
    let mut pieces: Vec<Vec<&mut [f32]>> =
        (0..rows.div_ceil(ROW_CHUNK)).map(|_| Vec::new()).collect();
    for (block, s) in blocks.iter().zip(scores.iter_mut()) {
        for (chunk, piece) in split_by_rows(*block, heads, s).into_iter().enumerate() {
            pieces[chunk].push(piece);
        }
    }
    let isa = Isa::detect();
    let sound = pieces
        .into_par_iter()
        .enumerate()
        .map(|(chunk, mut parts)| {
            let r0 = chunk * ROW_CHUNK;
            let n = ROW_CHUNK.min(rows - r0);
            // Each block's rows of the chunk, checked as they are read.
            if !blocks.iter().all(|b| b.rows_valid(r0..r0 + n, usize::MAX)) {
                return false;
            }
            // Each block is walked row after row, its piece in order, so a
            // row's blocks are visited in block order and its edges in
            // edge order: the same maximum and the same sums, in the same
            // order, as walking each row across its blocks.
            let span = r0..=r0 + n;
            // Each row's scores less their maximum per head, ...
            let mut per_row = vec![f32::NEG_INFINITY; n * heads];
            fold_rows(blocks, &parts, &span, heads, &mut per_row, f32::max);
            apply_rows(blocks, &mut parts, &span, heads, &per_row, |x, m| *x -= m);
            // ... the exponentials of the chunk's rows in one pass a block
            // (a row of a block holds a few edges: per row, the call would
            // cost more than its exponentials), ...
            for part in parts.iter_mut() {
                exp_on(isa, part);
            }
            // ... and each row divided by its sums, added in block and
            // edge order.
            per_row.fill(0.0);
            fold_rows(blocks, &parts, &span, heads, &mut per_row, |t, x| t + x);
            apply_rows(blocks, &mut parts, &span, heads, &per_row, |x, t| *x /= t);
            true
        })
        .reduce(|| true, |a, b| a & b);
    // Where a task found a fault, the first block that fails its whole
    // check names it.
    for block in blocks.iter().filter(|_| !sound) {
        block.validate(k, usize::MAX, false)?;
    }
    match sound {
        true => Ok(()),
        false => Err(crate::Error::InvalidInput(format!(
            "{k}: a task found its rows of a block not sound, but every block checks as sound"
        ))),
    }
}

/// Folds each row of `span` into its `heads` values of `per_row` with
/// `fold`, block after block, each row's scores in edge order (`parts`:
/// each block's scores of those rows).
fn fold_rows(
    blocks: &[BlockRef],
    parts: &[&mut [f32]],
    span: &std::ops::RangeInclusive<usize>,
    heads: usize,
    per_row: &mut [f32],
    fold: impl Fn(f32, f32) -> f32,
) {
    for (b, part) in blocks.iter().zip(parts) {
        let runs = row_runs(&b.row_start[span.clone()], heads);
        for (run, acc) in runs.zip(per_row.chunks_exact_mut(heads)) {
            if heads == 1 {
                acc[0] = part[run].iter().fold(acc[0], |a, &x| fold(a, x));
                continue;
            }
            for s in part[run].chunks_exact(heads) {
                for (a, &x) in acc.iter_mut().zip(s) {
                    *a = fold(*a, x);
                }
            }
        }
    }
}

/// Applies `apply(score, its row's value for its head)` to every score of
/// the rows of `span`, block after block (as [`fold_rows`]).
fn apply_rows(
    blocks: &[BlockRef],
    parts: &mut [&mut [f32]],
    span: &std::ops::RangeInclusive<usize>,
    heads: usize,
    per_row: &[f32],
    apply: impl Fn(&mut f32, f32),
) {
    for (b, part) in blocks.iter().zip(parts.iter_mut()) {
        let runs = row_runs(&b.row_start[span.clone()], heads);
        for (run, value) in runs.zip(per_row.chunks_exact(heads)) {
            if heads == 1 {
                part[run].iter_mut().for_each(|x| apply(x, value[0]));
                continue;
            }
            for s in part[run].chunks_exact_mut(heads) {
                for (x, &v) in s.iter_mut().zip(value) {
                    apply(x, v);
                }
            }
        }
    }
}

/// Per row of `starts` (a block's row starts over a run of rows, one
/// more than the rows), its scores' range in that run's piece of the
/// block's scores, `heads` to an edge.
fn row_runs(starts: &[u64], heads: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let e0 = starts[0] as usize;
    starts
        .windows(2)
        .map(move |w| (w[0] as usize - e0) * heads..(w[1] as usize - e0) * heads)
}

/// `out[r]_h = init + Σ_e alpha[e,h] · z_src[c]_h` over the edges of one
/// block. `z_src` is the source partition (`src_rows × H·C`), `out` the
/// destination rows (`rows × H·C`); chain the blocks of a row partition
/// with [`Init::Out`].
pub fn aggregate(
    block: BlockRef,
    alpha: &[f32],
    z_src: &[f32],
    heads: Heads,
    init: Init,
    out: &mut [f32],
) -> Result<()> {
    let k = "gat::aggregate";
    heads.check(k)?;
    let d = heads.width();
    let src_rows = rows_of(k, "z_src", z_src.len(), d)?;
    check_ends(block, k, src_rows)?;
    check_len(k, "alpha", alpha.len(), block.nnz() * heads.heads)?;
    check_len(k, "out", out.len(), block.rows() * d)?;
    init.check(k, out.len())?;
    let (h_n, c_n) = (heads.heads, heads.head_width);
    let sound = out
        .par_chunks_mut(ROW_CHUNK * d)
        .enumerate()
        .map(|(chunk, part)| {
            let r0 = chunk * ROW_CHUNK;
            if !block.rows_valid(r0..r0 + part.len() / d, src_rows) {
                return false;
            }
            for (i, row) in part.chunks_exact_mut(d).enumerate() {
                let r = chunk * ROW_CHUNK + i;
                init.apply(row, r * d);
                for e in block.edges(r) {
                    let c = block.columns[e] as usize;
                    let a = &alpha[e * h_n..(e + 1) * h_n];
                    let s = &z_src[c * d..(c + 1) * d];
                    for ((o, s), &a) in row.chunks_exact_mut(c_n).zip(s.chunks_exact(c_n)).zip(a) {
                        for (o, &x) in o.iter_mut().zip(s) {
                            *o += a * x;
                        }
                    }
                }
            }
            true
        })
        .reduce(|| true, |a, b| a & b);
    block.fault_found(k, src_rows, false, sound)
}

/// Inputs of [`aggregate_bwd`] for one block `(i, j)`.
#[derive(Debug, Clone, Copy)]
pub struct BlockInputs<'a> {
    pub block: BlockRef<'a>,
    /// The block's `alpha` from [`edge_softmax`] (`nnz × H`).
    pub alpha: &'a [f32],
    /// With attention dropout: `alpha` times the mask, as the forward
    /// aggregated with (`nnz × H`); `None` without dropout.
    pub alpha_dropped: Option<&'a [f32]>,
    /// Score halves of the destination rows (`rows_i × H`) and of the
    /// source partition (`rows_j × H`), as in the forward.
    pub a_dst: &'a [f32],
    pub a_src: &'a [f32],
    /// Projected features of the source partition (`rows_j × H·C`).
    pub z_src: &'a [f32],
    /// Gradient of the destination rows' aggregation (`rows_i × H·C`).
    pub grad_out: &'a [f32],
    /// The destination rows' full forward aggregation over all blocks,
    /// before the bias (`rows_i × H·C`).
    pub out: &'a [f32],
}

/// Gradients [`aggregate_bwd`] writes for one block `(i, j)`.
#[derive(Debug)]
pub struct BlockGrads<'a> {
    /// `rows_j × H·C`: `Σ alpha_e · grad_out[r]_h` into source rows.
    pub grad_z_src: &'a mut [f32],
    /// `rows_j × H`: the score path into `a_src`.
    pub grad_a_src: &'a mut [f32],
    /// `rows_i × H`: the score path into `a_dst`.
    pub grad_a_dst: &'a mut [f32],
}

/// Backward of one block's share of the attention aggregation (see the
/// module doc). `write` applies to all three outputs: accumulate to sum
/// over blocks, in a fixed block order.
pub fn aggregate_bwd(
    inputs: BlockInputs,
    heads: Heads,
    grads: BlockGrads,
    write: Write,
) -> Result<()> {
    let k = "gat::aggregate_bwd";
    heads.check(k)?;
    let BlockInputs {
        block,
        alpha,
        alpha_dropped,
        a_dst,
        a_src,
        z_src,
        grad_out,
        out,
    } = inputs;
    let (h_n, c_n, d) = (heads.heads, heads.head_width, heads.width());
    let src_rows = rows_of(k, "z_src", z_src.len(), d)?;
    let rows = block.rows();
    check_ends(block, k, src_rows)?;
    check_len(k, "alpha", alpha.len(), block.nnz() * h_n)?;
    if let Some(dropped) = alpha_dropped {
        check_len(k, "alpha_dropped", dropped.len(), block.nnz() * h_n)?;
    }
    check_len(k, "a_dst", a_dst.len(), rows * h_n)?;
    check_len(k, "a_src", a_src.len(), src_rows * h_n)?;
    check_len(k, "grad_out", grad_out.len(), rows * d)?;
    check_len(k, "out", out.len(), rows * d)?;
    check_len(k, "grad_z_src", grads.grad_z_src.len(), src_rows * d)?;
    check_len(k, "grad_a_src", grads.grad_a_src.len(), src_rows * h_n)?;
    check_len(k, "grad_a_dst", grads.grad_a_dst.len(), rows * h_n)?;
    let init = match write {
        Write::Overwrite => Init::Zero,
        Write::Accumulate => Init::Out,
    };

    // Per destination row: du for each edge, and its sum into a_dst.
    let mut du = vec![0.0f32; block.nnz() * h_n];
    let du_pieces = split_by_rows(block, h_n, &mut du);
    // Every row is walked here, each task checking its own first, before
    // the scatter below walks them all again.
    let sound = grads
        .grad_a_dst
        .par_chunks_mut(ROW_CHUNK * h_n)
        .zip(du_pieces)
        .enumerate()
        .map(|(chunk, (ga_dst, du))| {
            let r0 = chunk * ROW_CHUNK;
            let r1 = r0 + ga_dst.len() / h_n;
            if !block.rows_valid(r0..r1, src_rows) {
                return false;
            }
            let e0 = block.row_start[r0] as usize;
            // The edges this task checked: its prefetches look no further
            // (the next task's columns are not checked yet).
            let checked = &block.columns[..block.row_start[r1] as usize];
            let mut row_dot = vec![0.0f32; h_n];
            for (i, ga) in ga_dst.chunks_exact_mut(h_n).enumerate() {
                let r = r0 + i;
                let g = &grad_out[r * d..(r + 1) * d];
                let o = &out[r * d..(r + 1) * d];
                for (h, t) in row_dot.iter_mut().enumerate() {
                    let span = h * c_n..(h + 1) * c_n;
                    *t = lane_dot(&g[span.clone()], &o[span]);
                }
                init.apply(ga, r * h_n);
                for e in block.edges(r) {
                    if let Some(&next) = checked.get(e + PREFETCH_EDGES) {
                        let next = next as usize;
                        prefetch_row(&z_src[next * d..(next + 1) * d]);
                        prefetch_row(&a_src[next * h_n..(next + 1) * h_n]);
                    }
                    let c = block.columns[e] as usize;
                    let s = &z_src[c * d..(c + 1) * d];
                    for h in 0..h_n {
                        let span = h * c_n..(h + 1) * c_n;
                        let dalpha = lane_dot(&g[span.clone()], &s[span]);
                        let a = alpha[e * h_n + h];
                        let ds = match alpha_dropped {
                            None => a * (dalpha - row_dot[h]),
                            Some(kept) => kept[e * h_n + h] * dalpha - a * row_dot[h],
                        };
                        let u = a_dst[r * h_n + h] + a_src[c * h_n + h];
                        let v = ds * leaky_relu_grad(u);
                        du[(e - e0) * h_n + h] = v;
                        ga[h] += v;
                    }
                }
            }
            true
        })
        .reduce(|| true, |a, b| a & b);
    // `grad_a_dst` then holds the sound tasks' rows; nothing is scattered.
    block.fault_found(k, src_rows, false, sound)?;

    // Into source rows: the value path and the score path.
    let value_alpha = alpha_dropped.unwrap_or(alpha);
    // Both in one walk over the edges.
    let value = ScatterOut {
        out: grads.grad_z_src,
        width: d,
        init,
    };
    let score = ScatterOut {
        out: grads.grad_a_src,
        width: h_n,
        init,
    };
    scatter_pair(block, src_rows, value, score, |e, r, row, score_row| {
        let g = &grad_out[r * d..(r + 1) * d];
        let a = &value_alpha[e * h_n..(e + 1) * h_n];
        for ((o, g), &a) in row.chunks_exact_mut(c_n).zip(g.chunks_exact(c_n)).zip(a) {
            for (o, &x) in o.iter_mut().zip(g) {
                *o += a * x;
            }
        }
        for (o, &v) in score_row.iter_mut().zip(&du[e * h_n..(e + 1) * h_n]) {
            *o += v;
        }
    });
    Ok(())
}

/// Gradients [`node_scores_bwd`] writes for one partition.
#[derive(Debug)]
pub struct NodeScoreGrads<'a> {
    /// `rows × H·C`: the score path is added to what it holds (the value
    /// path from [`aggregate_bwd`]).
    pub grad_z: &'a mut [f32],
    /// `H·C` each: this partition's share, written as `write` says.
    pub grad_att_src: &'a mut [f32],
    pub grad_att_dst: &'a mut [f32],
}

/// Backward of [`node_scores`] for one partition: `grad_z[v]_h +=
/// grad_a_src[v,h]·att_src_h + grad_a_dst[v,h]·att_dst_h`, and
/// `grad_att_src_h = Σ_v grad_a_src[v,h]·z[v]_h` (same for `dst`), one
/// partial per [`REDUCE_ROWS`] rows added in order.
#[allow(clippy::too_many_arguments)]
pub fn node_scores_bwd(
    z: &[f32],
    heads: Heads,
    att_src: &[f32],
    att_dst: &[f32],
    grad_a_src: &[f32],
    grad_a_dst: &[f32],
    grads: NodeScoreGrads,
    write: Write,
) -> Result<()> {
    let k = "gat::node_scores_bwd";
    heads.check(k)?;
    let (h_n, c_n, d) = (heads.heads, heads.head_width, heads.width());
    let rows = rows_of(k, "z", z.len(), d)?;
    check_len(k, "att_src", att_src.len(), d)?;
    check_len(k, "att_dst", att_dst.len(), d)?;
    check_len(k, "grad_a_src", grad_a_src.len(), rows * h_n)?;
    check_len(k, "grad_a_dst", grad_a_dst.len(), rows * h_n)?;
    check_len(k, "grad_z", grads.grad_z.len(), rows * d)?;
    check_len(k, "grad_att_src", grads.grad_att_src.len(), d)?;
    check_len(k, "grad_att_dst", grads.grad_att_dst.len(), d)?;

    grads
        .grad_z
        .par_chunks_mut(ROW_CHUNK * d)
        .enumerate()
        .for_each(|(chunk, part)| {
            for (i, row) in part.chunks_exact_mut(d).enumerate() {
                let v = chunk * ROW_CHUNK + i;
                for h in 0..h_n {
                    let (gs, gd) = (grad_a_src[v * h_n + h], grad_a_dst[v * h_n + h]);
                    let span = h * c_n..(h + 1) * c_n;
                    let targets = row[span.clone()].iter_mut();
                    for ((o, &s), &t) in targets.zip(&att_src[span.clone()]).zip(&att_dst[span]) {
                        *o += gs * s + gd * t;
                    }
                }
            }
        });

    // [grad_att_src | grad_att_dst] partials per REDUCE_ROWS rows.
    let partials: Vec<Vec<f32>> = (0..rows.div_ceil(REDUCE_ROWS))
        .into_par_iter()
        .map(|chunk| {
            let mut part = vec![0.0f32; 2 * d];
            let (ps, pd) = part.split_at_mut(d);
            for v in chunk * REDUCE_ROWS..((chunk + 1) * REDUCE_ROWS).min(rows) {
                let zr = &z[v * d..(v + 1) * d];
                for h in 0..h_n {
                    let (gs, gd) = (grad_a_src[v * h_n + h], grad_a_dst[v * h_n + h]);
                    let span = h * c_n..(h + 1) * c_n;
                    let targets = ps[span.clone()].iter_mut().zip(&mut pd[span.clone()]);
                    for ((s, t), &x) in targets.zip(&zr[span]) {
                        *s += gs * x;
                        *t += gd * x;
                    }
                }
            }
            part
        })
        .collect();
    let pairs = grads
        .grad_att_src
        .iter_mut()
        .zip(grads.grad_att_dst.iter_mut());
    for (f, (s, t)) in pairs.enumerate() {
        if write == Write::Overwrite {
            *s = 0.0;
            *t = 0.0;
        }
        for p in &partials {
            *s += p[f];
            *t += p[d + f];
        }
    }
    Ok(())
}
