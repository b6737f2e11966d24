//! Dense layers: `z = Σ_k x_k · W_k + b` and its backward, on faer's
//! sequential GEMM inside fixed row chunks.
//!
//! Weight layout (the planner's byte sizes depend on it): the `k` matrices
//! `W_k` (`d_in × d_out`, row-major) one after the other, then the bias
//! (`d_out`). GCN and GAT have `k = 1`, SAGE has `k = 2` (`W_self`, then
//! `W_neigh`). GAT's projection has no bias here: its bias is added after
//! the aggregation ([`add_bias`], [`column_sums`]).
//!
//! Reductions over rows (weight and bias gradients) compute one partial
//! per [`REDUCE_ROWS`] rows in parallel and add the partials in chunk
//! order, so the result does not depend on the thread count; they take
//! [`REDUCE_GROUP`] chunks at a time (`reduce_in_groups`), so that a
//! weight gradient over millions of rows holds at most that many
//! partials, not one per chunk. A weight gradient of fewer than
//! [`FEW_CHUNKS`] chunks sums each in [`GRAD_LANES`] lanes of rows, added
//! in order, so that a small partition's gradient spreads over the
//! threads. Within a
//! partial, each `GRAD_ROWS` rows of a weight gradient (input features)
//! are a task of their own: a partition of few rows and many features
//! (a citation graph's first layer) is one partial, which would otherwise
//! run on one thread. A narrow gradient over enough lanes to spread
//! takes each lane's columns in a few wide groups instead, in slabs of
//! rows that stay in cache (`in_slabs`): a task per 128 columns read the
//! rows of wide features in strided pieces, at half the projection's
//! speed.
//!
//! Where the input's rows lie a multiple of 4 KiB apart, each task of
//! the plain weight gradient copies its columns into a packed buffer,
//! 256 rows at a time, before multiplying (`packs_columns`).
//!
//! Row-wise products take [`ROW_CHUNK`] rows a task, fewer where the
//! input is wider than `WIDE_INPUT` features, so that a few hundred
//! rows of a thousand features still spread over the threads.
//!
//! [`matmul_rows_dropped`] and its backward take the input through
//! dropout: each task masks a slab of its rows into a buffer of its own
//! and multiplies it while it is in cache, so that no dropped copy of
//! the whole input is written and read back. The weight gradient's tasks
//! are `DROPPED_LANES` runs of rows per partial, each adding its slabs'
//! products in row order, the lanes then added in order: rows streamed
//! in order, a fixed sum whatever the thread count.

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

use crate::dropout::{Dropout, Mask, RowKeys};
use crate::isa::Isa;
use crate::{check_len, ensure, Result, Write, REDUCE_GROUP, REDUCE_ROWS, ROW_CHUNK};

/// Rows of a weight gradient (its input features) a task computes.
pub(crate) const GRAD_ROWS: usize = 128;
/// Lanes of a dropped input's weight gradient ([`matmul_rows_dropped_bwd`])
/// per [`REDUCE_ROWS`] rows: each sums the products of its own run of
/// rows, slab after slab, into a partial of its own.
pub const DROPPED_LANES: usize = 8;
/// The fewest rows a slab of [`matmul_rows_dropped_bwd`] takes (a
/// wide input's [`rows_per_task`] is fewer): each slab adds its product
/// onto the lane's `d_in × d_out` partial. On 677 rows of 1,433
/// features into 16 outputs, slabs of 22 rows took 624-709 µs and slabs
/// of at least 64 took 414-451 µs (`cargo bench -p fateplan-kernels
/// --bench kernels -- matmul_dropped_bwd`, the builds run in turn).
pub(crate) const DROPPED_SLAB_ROWS: usize = 64;
/// Rows of a packed weight-gradient block ([`packs_columns`]).
const PACKED_ROWS: usize = 256;
/// Input width above which a row-wise product takes fewer than
/// [`ROW_CHUNK`] rows a task: about `ROW_CHUNK · WIDE_INPUT` input values
/// a task, at least [`MIN_TASK_ROWS`] rows.
pub(crate) const WIDE_INPUT: usize = 128;
/// The fewest rows a task of a row-wise product takes.
pub(crate) const MIN_TASK_ROWS: usize = 16;

/// Rows a task of a row-wise product over inputs `d_in` wide takes.
pub(crate) fn rows_per_task(d_in: usize) -> usize {
    (ROW_CHUNK * WIDE_INPUT / d_in.max(1)).clamp(MIN_TASK_ROWS, ROW_CHUNK)
}

/// Values in a linear layer's weights with `inputs` input matrices:
/// `inputs * d_in * d_out + d_out`.
pub fn linear_weight_len(inputs: usize, d_in: usize, d_out: usize) -> usize {
    inputs * d_in * d_out + d_out
}

fn check_dims(kernel: &str, d_in: usize, d_out: usize) -> Result<()> {
    ensure(d_in > 0 && d_out > 0, || {
        format!("{kernel}: `d_in` ({d_in}) and `d_out` ({d_out}) must be positive")
    })
}

/// `out = x · w` (`rows × d_in` times `d_in × d_out`), no bias: GAT's
/// projection.
pub fn matmul_rows(
    x: &[f32],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    out: &mut [f32],
) -> Result<()> {
    check_product("matmul_rows", (x, rows, d_in), w, d_out, out)?;
    forward(&[x], d_in, w, d_out, None, None, out);
    Ok(())
}

/// The lengths of `out = x · w` (`x`: `rows × d_in`).
fn check_product(
    kernel: &str,
    (x, rows, d_in): (&[f32], usize, usize),
    w: &[f32],
    d_out: usize,
    out: &[f32],
) -> Result<()> {
    check_dims(kernel, d_in, d_out)?;
    check_len(kernel, "x", x.len(), rows * d_in)?;
    check_len(kernel, "w", w.len(), d_in * d_out)?;
    check_len(kernel, "out", out.len(), rows * d_out)
}

/// The input of a product through dropout: element `f` of row `r` is
/// masked as element `key(r) * d_in + f` ([`crate::activation`]).
struct Dropped<'k> {
    keys: RowKeys<'k>,
    mask: Mask,
    isa: Isa,
}

impl<'k> Dropped<'k> {
    /// `None` for a dropout that keeps everything.
    fn new(
        kernel: &str,
        keys: RowKeys<'k>,
        dropout: &Dropout,
        rows: usize,
    ) -> Result<Option<Self>> {
        dropout.validate()?;
        keys.check(kernel, rows)?;
        Ok((!dropout.is_identity()).then(|| Dropped {
            keys,
            mask: dropout.mask(),
            isa: Isa::detect(),
        }))
    }

    /// Rows `r0..r0 + n` of `x` (`d_in` wide), masked, into `buf`
    /// (`n × d_in`, row-major).
    fn copy<'b>(
        &self,
        x: &[f32],
        d_in: usize,
        (r0, n): (usize, usize),
        buf: &'b mut Vec<f32>,
    ) -> &'b [f32] {
        // Every value is written: a buffer of this length already is not
        // cleared.
        buf.resize(n * d_in, 0.0);
        let from = Some(&x[r0 * d_in..(r0 + n) * d_in]);
        self.mask
            .apply_rows(self.isa, self.keys.skip(r0), from, buf, d_in);
        buf
    }
}

/// `out = dropout(x) · w` (`rows × d_in` times `d_in × d_out`), with
/// `x`'s rows keyed by `keys` as [`crate::activation::dropout_into`]
/// keys them: the same products as [`matmul_rows`] on that dropped copy,
/// without it.
#[allow(clippy::too_many_arguments)]
pub fn matmul_rows_dropped<'k>(
    x: &[f32],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    out: &mut [f32],
    keys: impl Into<RowKeys<'k>>,
    dropout: &Dropout,
) -> Result<()> {
    let kernel = "matmul_rows_dropped";
    check_product(kernel, (x, rows, d_in), w, d_out, out)?;
    let dropped = Dropped::new(kernel, keys.into(), dropout, rows)?;
    forward(&[x], d_in, w, d_out, None, dropped.as_ref(), out);
    Ok(())
}

/// `out = Σ_k inputs[k] · W_k + b`, with `w` laid out as the module doc
/// says (`inputs.len()` matrices, then the bias). Each input and `out` have
/// `rows` rows.
pub fn linear(
    inputs: &[&[f32]],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    out: &mut [f32],
) -> Result<()> {
    check_dims("linear", d_in, d_out)?;
    ensure(!inputs.is_empty(), || "linear: no inputs".to_string())?;
    for x in inputs {
        check_len("linear", "inputs[k]", x.len(), rows * d_in)?;
    }
    check_len(
        "linear",
        "w",
        w.len(),
        linear_weight_len(inputs.len(), d_in, d_out),
    )?;
    check_len("linear", "out", out.len(), rows * d_out)?;
    let bias = &w[inputs.len() * d_in * d_out..];
    forward(inputs, d_in, w, d_out, Some(bias), None, out);
    Ok(())
}

fn forward(
    inputs: &[&[f32]],
    d_in: usize,
    w: &[f32],
    d_out: usize,
    bias: Option<&[f32]>,
    dropped: Option<&Dropped>,
    out: &mut [f32],
) {
    let task = rows_per_task(d_in);
    out.par_chunks_mut(task * d_out).enumerate().for_each_init(
        Vec::new,
        |buf, (chunk, out_chunk)| {
            let n = out_chunk.len() / d_out;
            let r0 = chunk * task;
            let mut o = MatMut::from_row_major_slice_mut(out_chunk, n, d_out);
            for (k, x) in inputs.iter().enumerate() {
                let x = match dropped {
                    Some(d) => d.copy(x, d_in, (r0, n), buf),
                    None => &x[r0 * d_in..(r0 + n) * d_in],
                };
                let x = MatRef::from_row_major_slice(x, n, d_in);
                let wk = MatRef::from_row_major_slice(
                    &w[k * d_in * d_out..(k + 1) * d_in * d_out],
                    d_in,
                    d_out,
                );
                let accum = if k == 0 { Accum::Replace } else { Accum::Add };
                matmul(o.as_mut(), accum, x, wk, 1.0f32, Par::Seq);
            }
            if let Some(bias) = bias {
                for row in out_chunk.chunks_exact_mut(d_out) {
                    for (z, &b) in row.iter_mut().zip(bias) {
                        *z += b;
                    }
                }
            }
        },
    );
}

/// Backward of [`linear`]. Writes `dw` (the layout of `w`: `dW_k =
/// inputs[k]ᵀ · dz`, bias gradient = column sums of `dz`) for these rows,
/// and for each `dx[k]` that is `Some`, `dx_k = dz · W_kᵀ`. `write` says
/// whether `dw` and the `dx` are overwritten or accumulated into (to sum
/// the weight gradients of partitions in a fixed order, or to add the
/// self-input gradient of SAGE to the aggregation's).
#[allow(clippy::too_many_arguments)]
pub fn linear_bwd(
    dz: &[f32],
    inputs: &[&[f32]],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    dw: &mut [f32],
    dx: &mut [Option<&mut [f32]>],
    write: Write,
) -> Result<()> {
    check_dims("linear_bwd", d_in, d_out)?;
    ensure(!inputs.is_empty(), || "linear_bwd: no inputs".to_string())?;
    let len = linear_weight_len(inputs.len(), d_in, d_out);
    check_len("linear_bwd", "w", w.len(), len)?;
    check_len("linear_bwd", "dw", dw.len(), len)?;
    backward(
        "linear_bwd",
        dz,
        inputs,
        rows,
        d_in,
        w,
        d_out,
        true,
        dw,
        dx,
        write,
    )
}

/// Backward of [`matmul_rows`]: `dw = xᵀ · dz` and, if given, `dx = dz ·
/// wᵀ`, written as `write` says.
#[allow(clippy::too_many_arguments)]
pub fn matmul_rows_bwd(
    dz: &[f32],
    x: &[f32],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    dw: &mut [f32],
    dx: Option<&mut [f32]>,
    write: Write,
) -> Result<()> {
    check_dims("matmul_rows_bwd", d_in, d_out)?;
    check_len("matmul_rows_bwd", "w", w.len(), d_in * d_out)?;
    check_len("matmul_rows_bwd", "dw", dw.len(), d_in * d_out)?;
    backward(
        "matmul_rows_bwd",
        dz,
        &[x],
        rows,
        d_in,
        w,
        d_out,
        false,
        dw,
        &mut [dx],
        write,
    )
}

/// Backward of [`matmul_rows_dropped`] for an input that has no
/// gradient (a first layer's features): `dw = dropout(x)ᵀ · dz`, written
/// as `write` says, the mask regenerated as the forward drew it. Its sum
/// runs in lanes of rows (the module doc), so its bits differ from
/// [`matmul_rows_bwd`]'s on a dropped copy; they do not depend on the
/// thread count.
#[allow(clippy::too_many_arguments)]
pub fn matmul_rows_dropped_bwd<'k>(
    dz: &[f32],
    x: &[f32],
    rows: usize,
    d_in: usize,
    d_out: usize,
    dw: &mut [f32],
    keys: impl Into<RowKeys<'k>>,
    dropout: &Dropout,
    write: Write,
) -> Result<()> {
    let kernel = "matmul_rows_dropped_bwd";
    check_dims(kernel, d_in, d_out)?;
    check_len(kernel, "dz", dz.len(), rows * d_out)?;
    check_len(kernel, "x", x.len(), rows * d_in)?;
    check_len(kernel, "dw", dw.len(), d_in * d_out)?;
    let Some(dropped) = Dropped::new(kernel, keys.into(), dropout, rows)? else {
        return backward(
            kernel,
            dz,
            &[x],
            rows,
            d_in,
            &[],
            d_out,
            false,
            dw,
            &mut [],
            write,
        );
    };
    let slab = rows_per_task(d_in).max(DROPPED_SLAB_ROWS);
    // A chunk's lanes: (first row, rows), none past the chunk's rows.
    let lane_rows = |chunk: usize, lane: usize| {
        let r0 = chunk * REDUCE_ROWS;
        let n = REDUCE_ROWS.min(rows - r0);
        let per_lane = n.div_ceil(DROPPED_LANES);
        let l0 = lane * per_lane;
        (l0 < n).then(|| (r0 + l0, per_lane.min(n - l0)))
    };
    let chunks = rows.div_ceil(REDUCE_ROWS);
    // Each lane's partial is held until its group is added: fewer chunks
    // a group, so that a group holds `REDUCE_GROUP` partials.
    let group = REDUCE_GROUP / DROPPED_LANES;
    reduce_in_groups(chunks, group, DROPPED_LANES, dw, write, |chunk, lane| {
        let (l0, ln) = lane_rows(chunk, lane)?;
        let mut part = vec![0.0f32; d_in * d_out];
        let mut buf = Vec::new();
        for s0 in (l0..l0 + ln).step_by(slab) {
            let sn = slab.min(l0 + ln - s0);
            let xs = dropped.copy(x, d_in, (s0, sn), &mut buf);
            let xs = MatRef::from_row_major_slice(xs, sn, d_in);
            let g = &dz[s0 * d_out..(s0 + sn) * d_out];
            let g = MatRef::from_row_major_slice(g, sn, d_out);
            let o = MatMut::from_row_major_slice_mut(&mut part, d_in, d_out);
            matmul(o, Accum::Add, xs.transpose(), g, 1.0f32, Par::Seq);
        }
        Some(part)
    });
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn backward(
    kernel: &str,
    dz: &[f32],
    inputs: &[&[f32]],
    rows: usize,
    d_in: usize,
    w: &[f32],
    d_out: usize,
    has_bias: bool,
    dw: &mut [f32],
    dx: &mut [Option<&mut [f32]>],
    write: Write,
) -> Result<()> {
    check_len(kernel, "dz", dz.len(), rows * d_out)?;
    for x in inputs {
        check_len(kernel, "inputs[k]", x.len(), rows * d_in)?;
    }
    ensure(dx.len() <= inputs.len(), || {
        format!("{kernel}: {} `dx` for {} inputs", dx.len(), inputs.len())
    })?;
    for x in dx.iter().flatten() {
        check_len(kernel, "dx[k]", x.len(), rows * d_in)?;
    }

    // Input gradients: row-wise, no reduction.
    for (k, dxk) in dx.iter_mut().enumerate() {
        let Some(dxk) = dxk else { continue };
        let wk =
            MatRef::from_row_major_slice(&w[k * d_in * d_out..(k + 1) * d_in * d_out], d_in, d_out);
        let task = rows_per_task(d_in);
        dxk.par_chunks_mut(task * d_in)
            .enumerate()
            .for_each(|(chunk, dx_chunk)| {
                let n = dx_chunk.len() / d_in;
                let r0 = chunk * task;
                let g = MatRef::from_row_major_slice(&dz[r0 * d_out..(r0 + n) * d_out], n, d_out);
                let accum = match write {
                    Write::Overwrite => Accum::Replace,
                    Write::Accumulate => Accum::Add,
                };
                let o = MatMut::from_row_major_slice_mut(dx_chunk, n, d_in);
                matmul(o, accum, g, wk.transpose(), 1.0f32, Par::Seq);
            });
    }

    // Weight gradients: one partial per REDUCE_ROWS rows, summed in order,
    // in lanes where the chunks are few; within a lane, a task per
    // GRAD_ROWS of its rows (`x[:, c0..]ᵀ · dz`), or its rows in slabs.
    let len = dw.len();
    let chunks = rows.div_ceil(REDUCE_ROWS);
    let lanes = grad_lanes(rows, len);
    let lane_rows = REDUCE_ROWS / lanes;
    // A narrow gradient over lanes enough to spread: each lane's columns
    // in a few wide groups, slab after slab; otherwise a task per
    // `GRAD_ROWS` columns.
    let tasks = rows.div_ceil(lane_rows);
    let slabs = in_slabs(tasks, d_out) && !packs_columns(d_in);
    let columns = match slabs {
        true => slab_columns(tasks, d_in),
        false => GRAD_ROWS,
    };
    reduce_in_groups(
        chunks,
        REDUCE_GROUP / lanes,
        lanes,
        dw,
        write,
        |chunk, lane| {
            let r0 = chunk * REDUCE_ROWS + lane * lane_rows;
            if r0 >= rows.min((chunk + 1) * REDUCE_ROWS) {
                return None;
            }
            let n = lane_rows.min(rows - r0);
            let mut part = vec![0.0f32; len];
            let dz = &dz[r0 * d_out..(r0 + n) * d_out];
            let g = MatRef::from_row_major_slice(dz, n, d_out);
            let (grads, bias) = part.split_at_mut(inputs.len() * d_in * d_out);
            grads
                .par_chunks_mut(d_in * d_out)
                .zip(inputs.par_iter())
                .for_each(|(dwk, x)| {
                    dwk.par_chunks_mut(columns * d_out)
                        .enumerate()
                        .for_each(|(task, out)| {
                            let (c0, m) = (task * columns, out.len() / d_out);
                            let x = &x[r0 * d_in..(r0 + n) * d_in];
                            let o = MatMut::from_row_major_slice_mut(out, m, d_out);
                            if packs_columns(d_in) {
                                return packed_grad(x, d_in, (c0, m), g, o);
                            }
                            if slabs {
                                return slabbed_grad(x, d_in, (c0, m), g, o);
                            }
                            let x = MatRef::from_row_major_slice(x, n, d_in).subcols(c0, m);
                            matmul(o, Accum::Replace, x.transpose(), g, 1.0f32, Par::Seq);
                        });
                });
            if has_bias {
                column_sums_seq(dz, d_out, bias);
            }
            Some(part)
        },
    );
    Ok(())
}

/// Weight gradients of fewer [`REDUCE_ROWS`] chunks than this, of at most
/// [`GRAD_LANE_MAX_VALUES`], sum each chunk in [`GRAD_LANES`] lanes
/// (`grad_lanes`).
pub const FEW_CHUNKS: usize = 4;
/// Lanes of a weight gradient's chunk where the chunks are few: runs of
/// `REDUCE_ROWS / GRAD_LANES` rows, each its own partial, added in order.
pub const GRAD_LANES: usize = 4;
/// The most values (weights and bias) a weight gradient summed in lanes
/// has (128 KiB): each lane holds a partial as large, and a wider layer's
/// gradient already spreads over tasks of input features, so lanes would
/// add memory where a plan is short of it for little.
pub const GRAD_LANE_MAX_VALUES: usize = 32 << 10;

/// Lanes of each chunk of a weight gradient of `len` values over `rows`
/// rows: 1, or [`GRAD_LANES`] where there are fewer than [`FEW_CHUNKS`]
/// chunks (a partition of a small graph) and the gradient has at most
/// [`GRAD_LANE_MAX_VALUES`], whose one to three partials would otherwise
/// run on as many threads. At 4,096 rows on two threads (`cargo bench -p
/// fateplan-kernels --bench kernels -- weight_grad_4096`, the builds run
/// in turn twice, medians of 30), 64 features into 128 took 663 and 716
/// µs as one partial, 436 and 467 in lanes; 128 into 128, 1.36 and 1.42
/// ms, then 0.74 and 0.77. Split into tasks of 16 of its rows instead,
/// the first took 630-652 µs: each task packs the whole of `dz`. Rows
/// decide the lanes, not the threads, so the bits do not depend on the
/// thread count.
fn grad_lanes(rows: usize, len: usize) -> usize {
    match rows.div_ceil(REDUCE_ROWS) < FEW_CHUNKS && len <= GRAD_LANE_MAX_VALUES {
        true => GRAD_LANES,
        false => 1,
    }
}

/// Whether a weight gradient's task copies its columns of `x` into a
/// packed buffer first: where `x`'s rows lie a multiple of 4 KiB apart
/// (`d_in` a multiple of 1,024), the column blocks faer reads in place
/// map to the same cache sets. `cargo bench -p fateplan-kernels --bench
/// kernels -- matmul_bwd_4096` (4,096 rows, the fastest of 30), builds
/// without and with packing run in turn three times: at 1,024 features
/// 1.58-1.72 ms in place and 1.19-1.41 ms packed into 16 outputs,
/// 6.94-7.22 and 6.09-6.63 ms into 128 (at 1,023 features, in place
/// either way, 1.03-1.19 and 5.56-5.87 ms). At other widths, tried on
/// every task, packing was as fast or slower (1,433 features: 2.4-3.0
/// ms packed, 2.0 in place, into 16 outputs on 4,096 rows: a variant
/// of that bench not kept).
fn packs_columns(d_in: usize) -> bool {
    (d_in * std::mem::size_of::<f32>()).is_multiple_of(4096)
}

/// `out = x[:, c0..c0 + m]ᵀ · g` over the rows of `x` (`d_in` wide) and
/// `g` (at least one), [`PACKED_ROWS`] rows of the columns copied
/// together at a time, each block's product added in row order.
fn packed_grad(
    x: &[f32],
    d_in: usize,
    (c0, m): (usize, usize),
    g: MatRef<'_, f32>,
    mut out: MatMut<'_, f32>,
) {
    let n = g.nrows();
    let mut buf = vec![0.0f32; PACKED_ROWS.min(n) * m];
    for s0 in (0..n).step_by(PACKED_ROWS) {
        let sn = PACKED_ROWS.min(n - s0);
        for (r, to) in buf.chunks_exact_mut(m).take(sn).enumerate() {
            to.copy_from_slice(&x[(s0 + r) * d_in + c0..][..m]);
        }
        let xs = MatRef::from_row_major_slice(&buf[..sn * m], sn, m);
        let accum = if s0 == 0 { Accum::Replace } else { Accum::Add };
        matmul(
            out.as_mut(),
            accum,
            xs.transpose(),
            g.subrows(s0, sn),
            1.0f32,
            Par::Seq,
        );
    }
}

/// The most outputs a weight gradient computed in slabs of rows has
/// (`in_slabs`).
pub const SLAB_MAX_OUTPUTS: usize = 32;
/// The fewest lanes of rows a weight gradient computed in slabs of rows
/// takes (`in_slabs`).
pub const SLAB_MIN_LANES: usize = 4;
/// Tasks a weight gradient in slabs aims at, its lanes times its groups
/// of columns (`slab_columns`), and the fewest columns of a group.
const SLAB_TASKS: usize = 16;
const SLAB_MIN_COLUMNS: usize = 512;
/// Bytes of input rows a slab of [`slabbed_grad`] takes, and the fewest
/// rows it takes.
const SLAB_BYTES: usize = 128 << 10;
const MIN_SLAB_ROWS: usize = 16;

/// Whether a weight gradient summed in `tasks` lanes of rows (over every
/// chunk) into `d_out` outputs computes each lane's columns in a few wide
/// groups (`slab_columns`), in slabs of rows ([`slabbed_grad`]): at most
/// [`SLAB_MAX_OUTPUTS`] outputs, and at least [`SLAB_MIN_LANES`] lanes to
/// spread over the threads (fewer take a task per [`GRAD_ROWS`] columns,
/// as wider gradients and inputs a multiple of 1,024 wide do:
/// `packs_columns`). Rows and widths decide, not the threads, so the bits
/// do not depend on the thread count.
///
/// Into 16 outputs on two threads (`cargo bench -p fateplan-kernels
/// --bench kernels -- weight_grad_tall`, the builds run in turn, the
/// fastest of 10), a task per 128 columns over each chunk's rows took
/// 27.4-29.0 ms on 32,768 rows of 1,433 features and 21.4-22.4 ms on
/// 65,536 of 512; in slabs, 17.4-18.0 (two groups of 717 columns) and
/// 12.5-13.2 ms (the projection of the same rows took 14.7 and 13.2;
/// docs/runtime.md, "A narrow weight gradient in slabs of rows"). The
/// slab's size was picked on the same benches, on slabs of 16 to 4,096
/// rows: the best held 90-128 KiB
/// at 1,433 and 512 features (16 and 64 rows; slabs of 0.7-1 MiB took
/// 1.6-1.7 times as long), and at 128 features any slab of 256 rows or
/// more ran as fast as one product. Into 128 outputs (128 features over a
/// million rows), slabs of 256 rows were 15% slower than one product,
/// hence the bound on the outputs.
pub(crate) fn in_slabs(tasks: usize, d_out: usize) -> bool {
    d_out <= SLAB_MAX_OUTPUTS && tasks >= SLAB_MIN_LANES
}

/// Columns of each task of a weight gradient in slabs over `lanes` lanes
/// of rows, `d_in` wide: the columns split into groups, enough for
/// [`SLAB_TASKS`] tasks where the lanes are fewer, none narrower than
/// [`SLAB_MIN_COLUMNS`]. Lanes are few where a partition's rows are, and
/// a machine of many cores would otherwise leave most idle. On two
/// threads (`weight_grad_tall`, 32,768 rows of 1,433 features, 8 lanes),
/// two groups of 717 took 15.2-16.5 ms and whole rows 15.3-15.4; groups of
/// 512 took 17.1-18.0 and of 256 27.8-28.6, the strided reads of the
/// tasks per 128 columns again.
pub(crate) fn slab_columns(lanes: usize, d_in: usize) -> usize {
    let groups = SLAB_TASKS
        .div_ceil(lanes.max(1))
        .min(d_in.div_ceil(SLAB_MIN_COLUMNS))
        .max(1);
    d_in.div_ceil(groups)
}

/// `out = x[:, c0..c0 + m]ᵀ · g` over the rows of `x` (`d_in` wide) and
/// `g` (at least one), in slabs of about [`SLAB_BYTES`] of `x`'s rows (at
/// least [`MIN_SLAB_ROWS`] rows), each slab's product added in row order.
fn slabbed_grad(
    x: &[f32],
    d_in: usize,
    (c0, m): (usize, usize),
    g: MatRef<'_, f32>,
    mut out: MatMut<'_, f32>,
) {
    let n = g.nrows();
    let slab = (SLAB_BYTES / (d_in * std::mem::size_of::<f32>())).max(MIN_SLAB_ROWS);
    let x = MatRef::from_row_major_slice(x, n, d_in).subcols(c0, m);
    for s0 in (0..n).step_by(slab) {
        let sn = slab.min(n - s0);
        let accum = if s0 == 0 { Accum::Replace } else { Accum::Add };
        let xs = x.subrows(s0, sn).transpose();
        matmul(out.as_mut(), accum, xs, g.subrows(s0, sn), 1.0f32, Par::Seq);
    }
}

/// `out[f] = Σ_r x[r, f]`, sequentially in row order.
fn column_sums_seq(x: &[f32], width: usize, out: &mut [f32]) {
    out.fill(0.0);
    for row in x.chunks_exact(width) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
}

/// Column sums of `x` (`rows × width`): the bias gradient. One partial per
/// [`REDUCE_ROWS`] rows, added in chunk order.
pub fn column_sums(x: &[f32], width: usize, out: &mut [f32], write: Write) -> Result<()> {
    let rows = crate::rows_of("column_sums", "x", x.len(), width)?;
    check_len("column_sums", "out", out.len(), width)?;
    reduce_in_groups(
        rows.div_ceil(REDUCE_ROWS),
        REDUCE_GROUP,
        1,
        out,
        write,
        |chunk, _| {
            let r0 = chunk * REDUCE_ROWS;
            let n = REDUCE_ROWS.min(rows - r0);
            let mut part = vec![0.0f32; width];
            column_sums_seq(&x[r0 * width..(r0 + n) * width], width, &mut part);
            Some(part)
        },
    );
    Ok(())
}

/// Adds `bias` (`width` values) to every row of `x`.
pub fn add_bias(x: &mut [f32], width: usize, bias: &[f32]) -> Result<()> {
    crate::rows_of("add_bias", "x", x.len(), width)?;
    check_len("add_bias", "bias", bias.len(), width)?;
    x.par_chunks_mut(ROW_CHUNK * width).for_each(|chunk| {
        for row in chunk.chunks_exact_mut(width) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        }
    });
    Ok(())
}

/// `out = parts[0] + parts[1] + …`, added in that order element by element
/// (weight-gradient accumulation over partitions).
pub fn sum_into(parts: &[&[f32]], out: &mut [f32]) -> Result<()> {
    for p in parts {
        check_len("sum_into", "parts[k]", p.len(), out.len())?;
    }
    sum_parts(parts, out, Write::Overwrite);
    Ok(())
}

/// `out += x`, element by element: a partition's weight gradient added
/// into the running sum over those before it. Since addition commutes,
/// the running sum of `parts` is [`sum_into`]'s, bit for bit.
pub fn add_into(x: &[f32], out: &mut [f32]) -> Result<()> {
    check_len("add_into", "x", x.len(), out.len())?;
    sum_parts(&[x], out, Write::Accumulate);
    Ok(())
}

/// `out (= or +=) sum(0) + sum(1) + … + sum(chunks - 1)`, in order, where
/// `sum(c)` is chunk `c`'s lanes `part(c, 0) + part(c, 1) + …` added in
/// order (`None`: no such lane; a chunk has at least its first). The
/// lanes of `group` chunks are computed in parallel, one task each, and
/// added onto `out` before the next group's start. Since [`sum_parts`]
/// adds each element's terms left to right, adding group after group
/// gives the same bits as adding every chunk at once, with at most
/// `group · lanes` partials held.
fn reduce_in_groups(
    chunks: usize,
    group: usize,
    lanes: usize,
    out: &mut [f32],
    mut write: Write,
    part: impl Fn(usize, usize) -> Option<Vec<f32>> + Sync + Send,
) {
    if chunks == 0 {
        return sum_parts(&[], out, write);
    }
    let (group, lanes) = (group.max(1), lanes.max(1));
    for g0 in (0..chunks).step_by(group) {
        let g1 = (g0 + group).min(chunks);
        let mut partials: Vec<Option<Vec<f32>>> = (g0 * lanes..g1 * lanes)
            .into_par_iter()
            .map(|task| part(task / lanes, task % lanes))
            .collect();
        // Each chunk's lanes added in order onto its first.
        let sums: Vec<Vec<f32>> = partials
            .chunks_mut(lanes)
            .filter_map(|chunk| {
                let mut chunk = chunk.iter_mut().filter_map(Option::take);
                let mut sum = chunk.next()?;
                let rest: Vec<Vec<f32>> = chunk.collect();
                if !rest.is_empty() {
                    let rest: Vec<&[f32]> = rest.iter().map(Vec::as_slice).collect();
                    sum_parts(&rest, &mut sum, Write::Accumulate);
                }
                Some(sum)
            })
            .collect();
        let parts: Vec<&[f32]> = sums.iter().map(Vec::as_slice).collect();
        sum_parts(&parts, out, write);
        write = Write::Accumulate;
    }
}

/// `out (= or +=) parts[0] + parts[1] + …` in order; parallel over
/// element ranges, which does not change any element's order of addition.
fn sum_parts(parts: &[&[f32]], out: &mut [f32], write: Write) {
    const SPAN: usize = 16 * 1024;
    out.par_chunks_mut(SPAN).enumerate().for_each(|(chunk, o)| {
        let lo = chunk * SPAN;
        let hi = lo + o.len();
        let mut rest = parts;
        if write == Write::Overwrite {
            match parts.first() {
                Some(first) => o.copy_from_slice(&first[lo..hi]),
                None => o.fill(0.0),
            }
            rest = parts.get(1..).unwrap_or(&[]);
        }
        for p in rest {
            for (v, &x) in o.iter_mut().zip(&p[lo..hi]) {
                *v += x;
            }
        }
    });
}
