//! Aggregation over one block: `out = init + block · src` and its
//! transpose `out = init + blockᵀ · grad`.
//!
//! The forward is parallel over chunks of destination rows; each row is
//! summed in edge order, so the result does not depend on the split.
//! Each chunk's task checks its rows of the block before it reads them:
//! where some are not sound the kernel fails, naming the fault, and
//! `out` may hold the rows of the tasks that were. The
//! transpose scatters: each task owns a range of source rows and walks all
//! edges in CSR order, keeping the ones that land in its range, so each
//! output element also sees its terms in edge order.

use rayon::prelude::*;

use crate::dropout::{factor, factors16, Dropout, Mask, MaskBits, RowKeys};
use crate::isa::Isa;
use crate::{check_len, rows_of, BlockRef, Init, Result, Weighting, ROW_CHUNK, SCATTER_MIN_ROWS};

/// `out[r] = init[r] + Σ_e w_e · src[c_e]` over the edges `e` of
/// destination row `r`. `src` is the source partition (`src_rows × width`),
/// `out` and `init` are `block.rows() × width`. A block whose offsets
/// fall or whose columns are out of range is refused as
/// [`BlockRef::validate`] names it, found as the rows are read: `out`
/// may then hold the rows of the parallel tasks that were sound (so may
/// [`spmm_dropout`]'s).
pub fn spmm(block: BlockRef, src: &[f32], width: usize, init: Init, out: &mut [f32]) -> Result<()> {
    check_spmm("spmm", block, src, width, init, out)?;
    let sound = gather(block, src, width, init, out, Masking::None);
    block.fault_found("spmm", src.len() / width, true, sound)
}

/// [`spmm`] with dropout on `src`: element `(c, f)` of `src` is multiplied
/// by the mask value of global element `key(c) * width + f` (0 or
/// `1 / (1 - p)`), where `src_keys` gives source row `c`'s global row
/// (`src_row0 + c` for a `u64 src_row0`, see [`RowKeys`]), so that the
/// dropped features are never stored. Each edge adds `w · (x · m)` in edge order, as if the dropped `src` had been
/// stored. The backward is [`spmm_t`] followed by the same mask on its
/// output ([`crate::activation::dropout_in_place`]).
///
/// When the block has at least one edge per [`MASK_WORKSPACE_ROWS_PER_EDGE`]
/// rows of `src`, the keep bits of all of `src` are computed once per
/// call into a workspace of `src_rows * ceil(width / 64) * 8` bytes
/// (16 MiB for 1M source rows of width 128), instead of hashing each
/// gathered row again per edge; with fewer edges the mask is generated
/// per edge. Both give the same bits. With at most
/// [`USED_ROWS_EDGES_PER_ROW`] edges a source row, only the rows the
/// edges read get their bits, marked in a byte a source row first.
pub fn spmm_dropout<'k>(
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    dropout: &Dropout,
    src_keys: impl Into<RowKeys<'k>>,
) -> Result<()> {
    let src_keys = src_keys.into();
    check_spmm("spmm_dropout", block, src, width, init, out)?;
    src_keys.check("spmm_dropout", src.len() / width)?;
    dropout.validate()?;
    if dropout.is_identity() {
        let sound = gather(block, src, width, init, out, Masking::None);
        return block.fault_found("spmm_dropout", src.len() / width, true, sound);
    }
    let masked = MaskedSrc {
        mask: dropout.mask(),
        src_keys,
        isa: Isa::detect(),
    };
    let sound = gather(block, src, width, init, out, Masking::Auto(masked));
    block.fault_found("spmm_dropout", src.len() / width, true, sound)
}

/// [`spmm_dropout`] that always generates the mask per edge: the
/// formulation before the mask workspace, kept for the bench and tests.
#[doc(hidden)]
pub fn spmm_dropout_per_edge<'k>(
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    dropout: &Dropout,
    src_keys: impl Into<RowKeys<'k>>,
) -> Result<()> {
    let src_keys = src_keys.into();
    check_spmm("spmm_dropout_per_edge", block, src, width, init, out)?;
    src_keys.check("spmm_dropout_per_edge", src.len() / width)?;
    dropout.validate()?;
    let masking = match dropout.is_identity() {
        true => Masking::None,
        false => Masking::PerEdge(MaskedSrc {
            mask: dropout.mask(),
            src_keys,
            isa: Isa::Generic,
        }),
    };
    let sound = gather(block, src, width, init, out, masking);
    block.fault_found("spmm_dropout_per_edge", src.len() / width, true, sound)
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
        let w = block.weight(r, e);
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
    // The rows and edges are checked by the gather's tasks as they read
    // them ([`gather`]). Where the ends are wrong, the whole check names
    // the first fault, as it did before the tasks checked their rows.
    block
        .validate_ends(kernel, src_rows, true)
        .or_else(|_| block.validate(kernel, src_rows, true))?;
    check_len(kernel, "out", out.len(), block.rows() * width)?;
    init.check(kernel, out.len())?;
    Ok(())
}

/// How many rows of `src` one edge of a block may stand for and the
/// dropout mask still be made for all of `src` at once ([`spmm_dropout`]):
/// a row's bits made in the workspace (vectorised, a row at a time) cost
/// a fraction of a row's made per edge. At 1 (the mask made per edge
/// wherever a block had fewer edges than source rows), a 2-layer GCN of
/// 128 on R-MAT scale 18 in 32 partitions, whose blocks have about half
/// an edge per source row, spent 646-1250 ms an iteration in its forward
/// aggregations over five rounds; at 8, 449-783 ms (docs/runtime.md,
/// "Input dropout in many partitions").
pub const MASK_WORKSPACE_ROWS_PER_EDGE: usize = 8;

/// The most edges per source row a block may have and its mask
/// workspace hold only the rows its edges read ([`spmm_dropout`]): in
/// many partitions, a block's edges read a fraction of its source rows,
/// whose bits were made for each block again. On R-MAT scale 18 (2-layer
/// GCN of 128) in 32 partitions, the first layer's masked aggregations
/// took 284.7-303.9 ms an iteration with every row's bits and
/// 254.5-270.7 with the rows read alone, against 186.3 ms without
/// dropout (in 16, within the noise: docs/runtime.md, "Keep bits of the
/// rows read"). With more edges a row, nearly every row is read and
/// marking them costs a pass over the edges.
pub const USED_ROWS_EDGES_PER_ROW: usize = 2;

/// A dropout mask on `src`, whose rows are global rows `src_keys`.
#[derive(Clone, Copy)]
pub(crate) struct MaskedSrc<'a> {
    pub(crate) mask: Mask,
    pub(crate) src_keys: RowKeys<'a>,
    pub(crate) isa: Isa,
}

/// How the gather masks `src`.
#[derive(Clone, Copy)]
pub(crate) enum Masking<'a> {
    None,
    /// The keep bits of `src`'s rows when the block has at least an edge
    /// per [`MASK_WORKSPACE_ROWS_PER_EDGE`] of them (of the rows its edges
    /// read alone with at most [`USED_ROWS_EDGES_PER_ROW`] edges a row),
    /// else the mask per edge.
    Auto(MaskedSrc<'a>),
    /// The mask hashed again for every edge.
    PerEdge(MaskedSrc<'a>),
    /// The keep bits of the `src` rows the block reads (every row's, or
    /// those its edges read), the scale of a kept element, and the
    /// instruction set.
    Bits(&'a MaskBits, f32, Isa),
}

/// The forward gather, with an optional mask on `src`, on the
/// instruction set `masking` names where it names one ([`spmm_dropout`]'s
/// widest, its mask per edge included; the generic build for
/// [`spmm_dropout_per_edge`]), else on the widest this CPU has. Each task
/// checks its rows of the block before it reads them
/// ([`BlockRef::rows_valid`]: on its own thread, in cache for the
/// gather), after the caller's [`BlockRef::validate_ends`]; a task whose
/// rows are not sound writes nothing, and the result is false.
#[must_use]
pub(crate) fn gather(
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    masking: Masking,
) -> bool {
    let isa = match masking {
        Masking::None => Isa::detect(),
        Masking::Auto(m) | Masking::PerEdge(m) => m.isa,
        Masking::Bits(_, _, isa) => isa,
    };
    gather_on(isa, block, src, width, init, out, masking)
}

/// [`gather`] with its rows run by the build for `isa`: every build does
/// the same arithmetic in the same order (no fused multiply-adds: Rust
/// does not contract them), so the bits do not depend on it. The
/// baseline build's SSE2 takes four instructions for what AVX-512 does
/// in one: at width 128 the plain gather takes about a fifth less time
/// on AVX-512 (docs/runtime.md, "The plain gather on the CPU's widest
/// vectors").
#[must_use]
pub(crate) fn gather_on(
    isa: Isa,
    block: BlockRef,
    src: &[f32],
    width: usize,
    init: Init,
    out: &mut [f32],
    masking: Masking,
) -> bool {
    let src_rows = src.len() / width;
    if let Masking::Auto(m) = masking {
        if block.nnz() * MASK_WORKSPACE_ROWS_PER_EDGE >= src_rows {
            let used = (block.nnz() <= src_rows * USED_ROWS_EDGES_PER_ROW).then(|| {
                let mut used = vec![false; src_rows];
                // Columns out of range are found by the tasks.
                for &c in block.columns {
                    if let Some(u) = used.get_mut(c as usize) {
                        *u = true;
                    }
                }
                used
            });
            let bits = MaskBits::new(&m.mask, m.src_keys, src_rows, width, m.isa, used.as_deref());
            let masking = Masking::Bits(&bits, m.mask.scale, m.isa);
            return gather_on(isa, block, src, width, init, out, masking);
        }
        return gather_on(isa, block, src, width, init, out, Masking::PerEdge(m));
    }
    out.par_chunks_mut(ROW_CHUNK * width)
        .enumerate()
        .map(|(chunk, out_chunk)| {
            let rows = Chunk {
                block,
                src,
                width,
                init,
                chunk,
                masking,
            };
            match isa {
                Isa::Generic => rows.gather(out_chunk),
                // SAFETY: `Isa::Avx512` is only made when the CPU has
                // AVX-512F, the function's only requirement beyond its
                // safe body.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => unsafe { rows.gather_avx512(out_chunk) },
                // SAFETY: as above, for AVX2.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { rows.gather_avx2(out_chunk) },
            }
        })
        .reduce(|| true, |a, b| a & b)
}

/// One parallel task of [`gather_on`]: the rows of chunk `chunk`.
#[derive(Clone, Copy)]
struct Chunk<'a> {
    block: BlockRef<'a>,
    src: &'a [f32],
    width: usize,
    init: Init<'a>,
    chunk: usize,
    masking: Masking<'a>,
}

impl Chunk<'_> {
    /// [`Chunk::gather`] compiled for AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn gather_avx512(self, out_chunk: &mut [f32]) -> bool {
        self.gather(out_chunk)
    }

    /// [`Chunk::gather`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn gather_avx2(self, out_chunk: &mut [f32]) -> bool {
        self.gather(out_chunk)
    }

    /// Sums the chunk's rows into `out_chunk`, for any instruction set,
    /// where the block's rows of the chunk are sound
    /// ([`BlockRef::rows_valid`], checked here to be compiled for the
    /// same instruction set); where they are not, writes nothing and
    /// returns false.
    #[inline(always)]
    fn gather(self, out_chunk: &mut [f32]) -> bool {
        let Chunk {
            block,
            src,
            width,
            init,
            chunk,
            masking,
        } = self;
        let rows_end = ((chunk + 1) * ROW_CHUNK).min(block.rows());
        if !block.rows_valid(chunk * ROW_CHUNK..rows_end, src.len() / width) {
            return false;
        }
        let per_edge = matches!(masking, Masking::PerEdge(..));
        let mut factors = vec![0.0f32; if per_edge { width } else { 0 }];
        let mut scratch = Vec::new();
        let chunk_end = block.row_start[rows_end] as usize;
        for (k, out_row) in out_chunk.chunks_exact_mut(width).enumerate() {
            let r = chunk * ROW_CHUNK + k;
            init.apply(out_row, r * width);
            let edges = block.edges(r);
            if edges.is_empty() {
                // Most rows of a block of many partitions have none.
                continue;
            }
            let ahead = &block.columns[edges.start..chunk_end.max(edges.start)];
            let columns = &block.columns[edges.clone()];
            match masking {
                Masking::None | Masking::Auto(_) => {
                    row_gather_weighted(block, r, out_row, columns, ahead, src, width)
                }
                Masking::Bits(bits, scale, isa) => {
                    let weights = block.row_weights(r, &mut scratch);
                    row_gather_bits(out_row, columns, weights, ahead, src, bits, scale, isa)
                }
                Masking::PerEdge(MaskedSrc { mask, src_keys, .. }) => {
                    let weights = block.row_weights(r, &mut scratch);
                    for (k, (&c, &w)) in columns.iter().zip(weights).enumerate() {
                        if let Some(&next) = ahead.get(k + PREFETCH_EDGES) {
                            let next = next as usize;
                            prefetch_row(&src[next * width..(next + 1) * width]);
                        }
                        let c = c as usize;
                        mask.fill(src_keys.key(c) * width as u64, &mut factors);
                        let s = &src[c * width..(c + 1) * width];
                        for ((o, &x), &m) in out_row.iter_mut().zip(s).zip(&factors) {
                            *o += w * (x * m);
                        }
                    }
                }
            }
        }
        true
    }
}

/// Edges ahead whose source rows are prefetched in the gather.
pub(crate) const PREFETCH_EDGES: usize = 8;

/// Hints the CPU to load the cache lines of `row` (a source row about to be
/// gathered). Random gathers are latency-bound; this overlaps the misses.
#[inline(always)]
pub(crate) fn prefetch_row(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE_F32: usize = 16;
        // A counted loop, not `step_by`, whose bookkeeping showed in
        // the gather's profile.
        for line in 0..row.len().div_ceil(LINE_F32) {
            // SAFETY: a prefetch is only a hint; it never faults and has no
            // effect on program state, and `line * LINE_F32` is in bounds
            // of `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().add(line * LINE_F32).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// [`row_gather`] of destination row `r`, each edge's weight computed as
/// it is gathered (no per-row buffer: at narrow widths that buffer costs
/// as much as the gather). Always inlined, so that [`Chunk::gather`]'s
/// builds for AVX2 and AVX-512 compile it for their instruction set.
#[inline(always)]
fn row_gather_weighted(
    block: BlockRef,
    r: usize,
    out_row: &mut [f32],
    columns: &[u32],
    ahead: &[u32],
    src: &[f32],
    width: usize,
) {
    let ws = block.weights;
    match block.weighting {
        Weighting::PerEdge => {
            let ws = &ws[block.edges(r)];
            row_gather(out_row, columns, |k| ws[k], ahead, src, width)
        }
        Weighting::Row => row_gather(out_row, columns, |_| ws[r], ahead, src, width),
        Weighting::RowColumn => {
            let (w, sources) = (ws[r], &ws[block.rows()..]);
            let weight = |k: usize| w * sources[columns[k] as usize];
            row_gather(out_row, columns, weight, ahead, src, width)
        }
        Weighting::Unit => row_gather(out_row, columns, |_| 1.0, ahead, src, width),
    }
}

/// `out_row += Σ w_e · src[c_e]`, two edges a pass. The sum is formed as
/// `(o + w0·s0) + w1·s1`, the same rounding as one edge at a time. The
/// source rows `PREFETCH_EDGES` edges ahead are prefetched: `ahead` holds
/// the columns from this row's first edge to the end of the chunk, so the
/// prefetch runs on into the next rows.
#[inline(always)]
fn row_gather(
    out_row: &mut [f32],
    columns: &[u32],
    weight: impl Fn(usize) -> f32,
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
        let (w0, w1) = (weight(e), weight(e + 1));
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
        let w = weight(e);
        for (o, &x) in out_row.iter_mut().zip(src_row(columns[e])) {
            *o += w * x;
        }
    }
}

/// [`row_gather`] with the mask of `src` given as keep bits: `out_row +=
/// Σ w_e · (src[c_e] · m[c_e])`, two edges a pass, rounded as
/// `(o + w0·(x0·m0)) + w1·(x1·m1)`, the same as one edge at a time. The
/// factors are expanded from the bits 16 lanes at a time ([`factors16`]).
/// Runs the AVX-512 or AVX2 build of the same code as `isa` says (see
/// [`Isa::detect`]): the bit expansion takes several vector instructions
/// per lane group, so the width of the vectors shows even though the
/// gather waits on memory (measured at width 128: SSE2 ~2×, AVX2 ~1.4×,
/// AVX-512 ~1.1–1.2× the time of [`spmm`]). Every build does the same
/// operations in the same order, so the bits are the same.
#[inline]
#[allow(clippy::too_many_arguments)]
fn row_gather_bits(
    out_row: &mut [f32],
    columns: &[u32],
    weights: &[f32],
    ahead: &[u32],
    src: &[f32],
    bits: &MaskBits,
    scale: f32,
    isa: Isa,
) {
    match isa {
        Isa::Generic => row_gather_bits_generic(out_row, columns, weights, ahead, src, bits, scale),
        // SAFETY: `Isa::Avx512` is only made when the CPU has AVX-512F,
        // the function's only requirement beyond its safe body.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            row_gather_bits_avx512(out_row, columns, weights, ahead, src, bits, scale)
        },
        // SAFETY: as above, for AVX2.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe {
            row_gather_bits_avx2(out_row, columns, weights, ahead, src, bits, scale)
        },
    }
}

/// [`row_gather_bits_generic`] compiled for AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_gather_bits_avx512(
    out_row: &mut [f32],
    columns: &[u32],
    weights: &[f32],
    ahead: &[u32],
    src: &[f32],
    bits: &MaskBits,
    scale: f32,
) {
    row_gather_bits_generic(out_row, columns, weights, ahead, src, bits, scale)
}

/// [`row_gather_bits_generic`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row_gather_bits_avx2(
    out_row: &mut [f32],
    columns: &[u32],
    weights: &[f32],
    ahead: &[u32],
    src: &[f32],
    bits: &MaskBits,
    scale: f32,
) {
    row_gather_bits_generic(out_row, columns, weights, ahead, src, bits, scale)
}

/// The body of [`row_gather_bits`], for any instruction set.
#[inline(always)]
fn row_gather_bits_generic(
    out_row: &mut [f32],
    columns: &[u32],
    weights: &[f32],
    ahead: &[u32],
    src: &[f32],
    bits: &MaskBits,
    scale: f32,
) {
    const LANES: usize = 16;
    let width = out_row.len();
    let blocked = width / LANES * LANES;
    let src_row = |c: u32| &src[c as usize * width..(c as usize + 1) * width];
    let prefetch = |c: u32| {
        prefetch_row(src_row(c));
        prefetch_row_bits(bits.row(c as usize));
    };
    // The 16 keep bits of lanes `16 j..16 j + 16`.
    let lane_bits = |b: &[u64], j: usize| (b[j / 4] >> (LANES * (j % 4))) as u32;
    let mut e = 0;
    while e + 2 <= columns.len() {
        for &c in ahead.iter().skip(e + PREFETCH_EDGES).take(2) {
            prefetch(c);
        }
        let (w0, w1) = (weights[e], weights[e + 1]);
        let (c0, c1) = (columns[e], columns[e + 1]);
        let (s0, s1) = (src_row(c0), src_row(c1));
        let (b0, b1) = (bits.row(c0 as usize), bits.row(c1 as usize));
        let (head, tail) = out_row.split_at_mut(blocked);
        let blocks = head
            .chunks_exact_mut(LANES)
            .zip(s0.chunks_exact(LANES))
            .zip(s1.chunks_exact(LANES));
        for (j, ((o, x0), x1)) in blocks.enumerate() {
            let m0 = factors16(lane_bits(b0, j), scale);
            let m1 = factors16(lane_bits(b1, j), scale);
            for k in 0..LANES {
                o[k] = (o[k] + w0 * (x0[k] * m0[k])) + w1 * (x1[k] * m1[k]);
            }
        }
        let rest = tail.iter_mut().zip(&s0[blocked..]).zip(&s1[blocked..]);
        for (k, ((o, &x0), &x1)) in rest.enumerate() {
            let f = blocked + k;
            let (m0, m1) = (factor(b0, f, scale), factor(b1, f, scale));
            *o = (*o + w0 * (x0 * m0)) + w1 * (x1 * m1);
        }
        e += 2;
    }
    if e < columns.len() {
        if let Some(&c) = ahead.get(e + PREFETCH_EDGES) {
            prefetch(c);
        }
        let w = weights[e];
        let (s, b) = (src_row(columns[e]), bits.row(columns[e] as usize));
        let (head, tail) = out_row.split_at_mut(blocked);
        for (j, (o, x)) in head
            .chunks_exact_mut(LANES)
            .zip(s.chunks_exact(LANES))
            .enumerate()
        {
            let m = factors16(lane_bits(b, j), scale);
            for k in 0..LANES {
                o[k] += w * (x[k] * m[k]);
            }
        }
        for (k, (o, &x)) in tail.iter_mut().zip(&s[blocked..]).enumerate() {
            *o += w * (x * factor(b, blocked + k, scale));
        }
    }
}

/// Prefetches the keep bits of a source row (one line for width ≤ 512).
#[inline(always)]
fn prefetch_row_bits(bits: &[u64]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE_U64: usize = 8;
        for k in (0..bits.len()).step_by(LINE_U64) {
            // SAFETY: as in `prefetch_row`: a hint that never faults, and
            // `k` is in bounds of `bits`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bits.as_ptr().add(k).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bits;
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
    let none = ScatterOut {
        out: &mut [],
        width: 0,
        init: Init::Out,
    };
    let src_rows = out.len() / width;
    let first = ScatterOut { out, width, init };
    scatter_pair(block, src_rows, first, none, |e, r, row, _| f(e, r, row));
}

/// One output of [`scatter_pair`]: `src_rows × width`, starting from
/// `init`.
pub(crate) struct ScatterOut<'a, 'i> {
    pub out: &'a mut [f32],
    pub width: usize,
    pub init: Init<'i>,
}

/// [`scatter`] into two outputs of the same `src_rows` rows in one walk
/// over the edges: `f(e, r, first_row_c, second_row_c)`. An output of
/// width 0 gets empty rows.
pub(crate) fn scatter_pair<F>(
    block: BlockRef,
    src_rows: usize,
    first: ScatterOut,
    second: ScatterOut,
    f: F,
) where
    F: Fn(usize, usize, &mut [f32], &mut [f32]) + Sync,
{
    let tasks = rayon::current_num_threads().max(1);
    let rows_per_task = src_rows.div_ceil(tasks).max(SCATTER_MIN_ROWS);
    let (wa, wb) = (first.width, second.width);
    let mut parts = Vec::new();
    let (mut a, mut b) = (first.out, second.out);
    for lo in (0..src_rows).step_by(rows_per_task) {
        let n = rows_per_task.min(src_rows - lo);
        let (pa, rest_a) = std::mem::take(&mut a).split_at_mut(n * wa);
        let (pb, rest_b) = std::mem::take(&mut b).split_at_mut(n * wb);
        (a, b) = (rest_a, rest_b);
        parts.push((lo, n, pa, pb));
    }
    let (init_a, init_b) = (first.init, second.init);
    parts.into_par_iter().for_each(|(lo, n, part_a, part_b)| {
        let hi = lo + n;
        init_a.apply(part_a, lo * wa);
        init_b.apply(part_b, lo * wb);
        for r in 0..block.rows() {
            for e in block.edges(r) {
                if let Some(&next) = block.columns.get(e + PREFETCH_EDGES) {
                    let next = next as usize;
                    if (lo..hi).contains(&next) {
                        prefetch_row(&part_a[(next - lo) * wa..(next - lo + 1) * wa]);
                    }
                }
                let c = block.columns[e] as usize;
                if (lo..hi).contains(&c) {
                    let k = c - lo;
                    let row_a = &mut part_a[k * wa..(k + 1) * wa];
                    f(e, r, row_a, &mut part_b[k * wb..(k + 1) * wb]);
                }
            }
        }
    });
}
