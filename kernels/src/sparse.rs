//! Aggregation over one block: `out = init + block · src` and its
//! transpose `out = init + blockᵀ · grad`.
//!
//! The forward is parallel over chunks of destination rows; each row is
//! summed in edge order, so the result does not depend on the split. The
//! transpose scatters: each task owns a range of source rows and walks all
//! edges in CSR order, keeping the ones that land in its range, so each
//! output element also sees its terms in edge order.

use rayon::prelude::*;

use crate::dropout::{Dropout, Mask};
use crate::{check_len, rows_of, BlockRef, Init, Result, ROW_CHUNK, SCATTER_MIN_ROWS};

/// `out[r] = init[r] + Σ_e w_e · src[c_e]` over the edges `e` of
/// destination row `r`. `src` is the source partition (`src_rows × width`),
/// `out` and `init` are `block.rows() × width`.
pub fn spmm(block: BlockRef, src: &[f32], width: usize, init: Init, out: &mut [f32]) -> Result<()> {
    check_spmm("spmm", block, src, width, init, out)?;
    gather(block, src, width, init, out, None, 0);
    Ok(())
}

/// [`spmm`] with dropout on `src`: element `(c, f)` of `src` is multiplied
/// by the mask value of global element `(src_row0 + c) * width + f` (0 or
/// `1 / (1 - p)`), generated on the fly so that the dropped features are
/// never stored. The backward is [`spmm_t`] followed by the same mask on
/// its output ([`crate::activation::dropout_in_place`]).
pub fn spmm_dropout(
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    dropout: &Dropout,
    src_row0: u64,
) -> Result<()> {
    check_spmm("spmm_dropout", block, src, width, init, out)?;
    dropout.validate()?;
    let mask = (!dropout.is_identity()).then(|| dropout.mask());
    gather(block, src, width, init, out, mask, src_row0);
    Ok(())
}

/// `out = init + blockᵀ · grad_dst`: `out[c] += w_e · grad_dst[r]`
/// for every edge `e = (r, c)`. `grad_dst` is `block.rows() × width`; `out`
/// and `init` are `src_rows × width`, `src_rows = out.len() / width`.
pub fn spmm_t(
    block: BlockRef,
    grad_dst: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
) -> Result<()> {
    let src_rows = rows_of("spmm_t", "out", out.len(), width)?;
    block.validate("spmm_t", src_rows, true)?;
    check_len("spmm_t", "grad_dst", grad_dst.len(), block.rows() * width)?;
    init.check("spmm_t", out.len())?;
    scatter(block, width, init, out, |e, r, out_row| {
        let w = block.weights[e];
        let g = &grad_dst[r * width..(r + 1) * width];
        for (o, &x) in out_row.iter_mut().zip(g) {
            *o += w * x;
        }
    });
    Ok(())
}

fn check_spmm(
    kernel: &str,
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &[f32],
) -> Result<()> {
    let src_rows = rows_of(kernel, "src", src.len(), width)?;
    block.validate(kernel, src_rows, true)?;
    check_len(kernel, "out", out.len(), block.rows() * width)?;
    init.check(kernel, out.len())?;
    Ok(())
}

/// The forward gather, with an optional mask on `src`.
fn gather(
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    mask: Option<Mask>,
    src_row0: u64,
) {
    out.par_chunks_mut(ROW_CHUNK * width)
        .enumerate()
        .for_each(|(chunk, out_chunk)| {
            let mut factors = vec![0.0f32; if mask.is_some() { width } else { 0 }];
            let rows_end = ((chunk + 1) * ROW_CHUNK).min(block.rows());
            let chunk_end = block.row_start[rows_end] as usize;
            for (k, out_row) in out_chunk.chunks_exact_mut(width).enumerate() {
                let r = chunk * ROW_CHUNK + k;
                init.apply(out_row, r * width);
                let edges = block.edges(r);
                let ahead = &block.columns[edges.start..chunk_end.max(edges.start)];
                let columns = &block.columns[edges.clone()];
                let weights = &block.weights[edges];
                match &mask {
                    None => row_gather(out_row, columns, weights, ahead, src, width),
                    Some(mask) => {
                        for (k, (&c, &w)) in columns.iter().zip(weights).enumerate() {
                            if let Some(&next) = ahead.get(k + PREFETCH_EDGES) {
                                let next = next as usize;
                                prefetch_row(&src[next * width..(next + 1) * width]);
                            }
                            let c = c as usize;
                            mask.fill((src_row0 + c as u64) * width as u64, &mut factors);
                            let s = &src[c * width..(c + 1) * width];
                            for ((o, &x), &m) in out_row.iter_mut().zip(s).zip(&factors) {
                                *o += w * (x * m);
                            }
                        }
                    }
                }
            }
        });
}

/// Edges ahead whose source rows are prefetched in the gather.
const PREFETCH_EDGES: usize = 8;

/// Hints the CPU to load the cache lines of `row` (a source row about to be
/// gathered). Random gathers are latency-bound; this overlaps the misses.
#[inline(always)]
fn prefetch_row(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE_F32: usize = 16;
        for k in (0..row.len()).step_by(LINE_F32) {
            // SAFETY: a prefetch is only a hint; it never faults and has no
            // effect on program state, and `k` is in bounds of `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().add(k).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// `out_row += Σ w_e · src[c_e]`, two edges a pass. The sum is formed as
/// `(o + w0·s0) + w1·s1`, the same rounding as one edge at a time. The
/// source rows `PREFETCH_EDGES` edges ahead are prefetched: `ahead` holds
/// the columns from this row's first edge to the end of the chunk, so the
/// prefetch runs on into the next rows.
#[inline]
fn row_gather(
    out_row: &mut [f32],
    columns: &[u32],
    weights: &[f32],
    ahead: &[u32],
    src: &[f32],
    width: usize,
) {
    let src_row = |c: u32| &src[c as usize * width..(c as usize + 1) * width];
    let mut e = 0;
    while e + 2 <= columns.len() {
        for &c in ahead.iter().skip(e + PREFETCH_EDGES).take(2) {
            prefetch_row(src_row(c));
        }
        let (w0, w1) = (weights[e], weights[e + 1]);
        let (s0, s1) = (src_row(columns[e]), src_row(columns[e + 1]));
        for ((o, &x0), &x1) in out_row.iter_mut().zip(s0).zip(s1) {
            *o = (*o + w0 * x0) + w1 * x1;
        }
        e += 2;
    }
    if e < columns.len() {
        if let Some(&c) = ahead.get(e + PREFETCH_EDGES) {
            prefetch_row(src_row(c));
        }
        let w = weights[e];
        for (o, &x) in out_row.iter_mut().zip(src_row(columns[e])) {
            *o += w * x;
        }
    }
}

/// Scatters over the edges of `block` into `out` (`src_rows × width`):
/// `out` starts from `init`, then `f(e, r, out_row_c)` runs for every
/// edge `e = (r, c)` in CSR order. Each task owns a contiguous range of
/// output rows and walks all edges, so the order of the calls that touch
/// one output row never depends on the split (or the thread count).
pub(crate) fn scatter<F>(block: BlockRef, width: usize, init: Init, out: &mut [f32], f: F)
where
    F: Fn(usize, usize, &mut [f32]) + Sync,
{
    let src_rows = out.len() / width;
    let tasks = rayon::current_num_threads().max(1);
    let rows_per_task = src_rows.div_ceil(tasks).max(SCATTER_MIN_ROWS);
    out.par_chunks_mut(rows_per_task * width)
        .enumerate()
        .for_each(|(task, part)| {
            let lo = task * rows_per_task;
            let hi = lo + part.len() / width;
            init.apply(part, lo * width);
            for r in 0..block.rows() {
                for e in block.edges(r) {
                    if let Some(&next) = block.columns.get(e + PREFETCH_EDGES) {
                        let next = next as usize;
                        if (lo..hi).contains(&next) {
                            prefetch_row(&part[(next - lo) * width..(next - lo + 1) * width]);
                        }
                    }
                    let c = block.columns[e] as usize;
                    if (lo..hi).contains(&c) {
                        f(e, r, &mut part[(c - lo) * width..(c - lo + 1) * width]);
                    }
                }
            }
        });
}
