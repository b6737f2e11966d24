//! Activations fused with dropout: `h = dropout(act(z))`, and the backward
//! `grad_z = grad_h · mask · act'(z)`, which regenerates the mask from the
//! element's global index `key(r) * width + f`, where `key(r)` is row `r`'s
//! row of the whole graph ([`RowKeys`]: `row0 + r` for contiguous rows;
//! see [`crate::dropout`]).
//! Rows are independent, so any split gives the same bits.

use rayon::prelude::*;

use crate::dropout::{Dropout, Mask, RowKeys};
use crate::isa::Isa;
use crate::math::{exp_nonpositive, expm1_nonpositive};

use crate::{check_len, rows_of, Result, ROW_CHUNK};

/// ELU's `alpha`.
pub const ELU_ALPHA: f32 = 1.0;

#[inline(always)]
fn relu(z: f32) -> f32 {
    if z > 0.0 {
        z
    } else {
        0.0
    }
}

#[inline(always)]
fn relu_grad(z: f32) -> f32 {
    if z > 0.0 {
        1.0
    } else {
        0.0
    }
}

/// Both sides are computed and one is selected, so that a loop over it
/// vectorises; NaN stays NaN.
#[inline(always)]
fn elu(z: f32) -> f32 {
    let e = ELU_ALPHA * expm1_nonpositive(if z > 0.0 { 0.0 } else { z });
    if z > 0.0 {
        z
    } else {
        e
    }
}

#[inline(always)]
fn elu_grad(z: f32) -> f32 {
    let e = ELU_ALPHA * exp_nonpositive(if z > 0.0 { 0.0 } else { z });
    if z > 0.0 {
        1.0
    } else {
        e
    }
}

/// `out = dropout(relu(z))`; `z` and `out` are `rows × width`, and `keys`
/// are the rows' global indices (the mask's counter): a `u64` is the first
/// of contiguous rows. `None` or `p == 0` means no dropout.
pub fn relu_dropout<'k>(
    z: &[f32],
    out: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
) -> Result<()> {
    map_masked(
        "relu_dropout",
        (z, None),
        None,
        out,
        width,
        keys.into(),
        dropout,
        |z, _| relu(z),
    )
}

/// Backward of [`relu_dropout`]: `grad_z = grad_out · mask · [z > 0]`.
pub fn relu_dropout_bwd<'k>(
    grad_out: &[f32],
    z: &[f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    map_masked(
        "relu_dropout_bwd",
        (z, None),
        Some(grad_out),
        grad_z,
        width,
        keys.into(),
        dropout,
        |z, g| g * relu_grad(z),
    )
}

/// `out = dropout(relu(z + bias))`: [`relu_dropout`] of `z` with `bias`
/// (`width` values) added to every row, as a layer that projects first
/// takes its aggregation, in one pass. The same bits as [`relu_dropout`]
/// of [`crate::dense::add_bias`]'s sum, which it does not write.
pub fn relu_dropout_biased<'k>(
    z: &[f32],
    bias: &[f32],
    out: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
) -> Result<()> {
    map_masked(
        "relu_dropout_biased",
        (z, Some(bias)),
        None,
        out,
        width,
        keys.into(),
        dropout,
        |v, _| relu(v),
    )
}

/// [`positive_bits`] of `z + bias` (`bias`, `width` values, added to every
/// row): the bits of [`positive_bits`] of [`crate::dense::add_bias`]'s
/// sum, which it does not write; each task sums a few words' values at a
/// time into a buffer on its stack and packs them.
pub fn positive_bits_biased(z: &[f32], bias: &[f32], width: usize, bits: &mut [u64]) -> Result<()> {
    const KERNEL: &str = "positive_bits_biased";
    rows_of(KERNEL, "z", z.len(), width)?;
    check_len(KERNEL, "bias", bias.len(), width)?;
    check_len(KERNEL, "bits", bits.len(), z.len().div_ceil(64))?;
    const WORDS: usize = 16;
    let isa = Isa::detect();
    bits.par_chunks_mut(MASK_WORDS_PER_TASK)
        .enumerate()
        .for_each(|(task, words)| {
            let first = task * MASK_WORDS_PER_TASK * 64;
            let values = &z[first..(first + words.len() * 64).min(z.len())];
            let mut sums = [0.0f32; WORDS * 64];
            let runs = values.chunks(WORDS * 64).zip(words.chunks_mut(WORDS));
            for (k, (run, words)) in runs.enumerate() {
                let sums = &mut sums[..run.len()];
                // The generic sum: dispatched on AVX-512, the mask ran
                // slower (docs/runtime.md, "A projecting layer's bias
                // added in the activation's pass").
                map_biased(run, None, bias, first + k * WORDS * 64, sums, &|v, _| v);
                pack_on(isa, sums, words);
            }
        });
    Ok(())
}

/// `out[j] = f(z[j] + bias[(first + j) % bias.len()], g[j])` (`g` is 0
/// when absent): `z`, `g` and `out` are a run of a tensor's elements from
/// element `first`, whose rows are `bias.len()` wide; row segment by row
/// segment, so that each loop vectorises.
#[inline(always)]
fn map_biased<F: Fn(f32, f32) -> f32>(
    z: &[f32],
    g: Option<&[f32]>,
    bias: &[f32],
    first: usize,
    out: &mut [f32],
    f: &F,
) {
    let width = bias.len();
    let (mut col, mut j) = (first % width, 0);
    while j < out.len() {
        let n = (width - col).min(out.len() - j);
        let (o, zs, b) = (&mut out[j..j + n], &z[j..j + n], &bias[col..col + n]);
        match g {
            Some(g) => {
                for (((o, &v), &b), &g) in o.iter_mut().zip(zs).zip(b).zip(&g[j..j + n]) {
                    *o = f(v + b, g);
                }
            }
            None => {
                for ((o, &v), &b) in o.iter_mut().zip(zs).zip(b) {
                    *o = f(v + b, 0.0);
                }
            }
        }
        j += n;
        col = 0;
    }
}

/// [`map_biased`] on `isa`.
fn map_biased_on<F: Fn(f32, f32) -> f32>(
    isa: Isa,
    z: &[f32],
    g: Option<&[f32]>,
    bias: &[f32],
    first: usize,
    out: &mut [f32],
    f: &F,
) {
    match isa {
        Isa::Generic => map_biased(z, g, bias, first, out, f),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::map_biased_avx512(z, g, bias, first, out, f) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::map_biased_avx2(z, g, bias, first, out, f) },
    }
}

/// Words of 64 mask bits a parallel task sets.
const MASK_WORDS_PER_TASK: usize = 1024;

/// ReLU's mask: bit `i % 64` of `bits[i / 64]` is set where `z[i] > 0`,
/// the bits past `z`'s end clear; `bits` holds `z.len().div_ceil(64)`
/// words. [`relu_dropout_bwd_bits`] reads it in place of `z`.
pub fn positive_bits(z: &[f32], bits: &mut [u64]) -> Result<()> {
    check_len("positive_bits", "bits", bits.len(), z.len().div_ceil(64))?;
    let isa = Isa::detect();
    bits.par_chunks_mut(MASK_WORDS_PER_TASK)
        .enumerate()
        .for_each(|(task, words)| {
            let first = task * MASK_WORDS_PER_TASK * 64;
            let values = &z[first..(first + words.len() * 64).min(z.len())];
            pack_on(isa, values, words);
        });
    Ok(())
}

/// Backward of [`relu_dropout`] from its mask ([`positive_bits`] of `z`):
/// `grad_z = grad_out · mask · bit`, the same bits as
/// [`relu_dropout_bwd`] of `z`; other arguments as there.
pub fn relu_dropout_bwd_bits<'k>(
    grad_out: &[f32],
    bits: &[u64],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    const KERNEL: &str = "relu_dropout_bwd_bits";
    let keys = keys.into();
    let rows = rows_of(KERNEL, "grad_out", grad_out.len(), width)?;
    keys.check(KERNEL, rows)?;
    check_len(KERNEL, "grad_z", grad_z.len(), grad_out.len())?;
    check_len(KERNEL, "bits", bits.len(), grad_out.len().div_ceil(64))?;
    by_row_chunks(grad_z, width, keys, dropout, |isa, base, part| {
        gate_on(isa, bits, base, &grad_out[base..base + part.len()], part)
    })
}

/// Fills `out` (`rows × width`) a task at a time in parallel,
/// `fill(isa, first element, task's elements)`, then multiplies each
/// task's elements by the dropout mask of their rows (`keys`); `None` or
/// `p == 0` means none. Tasks are as [`masked_copy`]'s: contiguous rows
/// are masked as one flat run, so narrow rows cost no more an element
/// than wide ones.
fn by_row_chunks<F>(
    out: &mut [f32],
    width: usize,
    keys: RowKeys,
    dropout: Option<&Dropout>,
    fill: F,
) -> Result<()>
where
    F: Fn(Isa, usize, &mut [f32]) + Sync,
{
    let mask: Option<Mask> = match dropout {
        Some(d) => {
            d.validate()?;
            (!d.is_identity()).then(|| d.mask())
        }
        None => None,
    };
    let isa = Isa::detect();
    let task = task_elements(keys, width);
    out.par_chunks_mut(task)
        .enumerate()
        .for_each(|(chunk, part)| {
            fill(isa, chunk * task, part);
            if let Some(mask) = &mask {
                mask_task(mask, isa, keys, width, chunk * task, None, part);
            }
        });
    Ok(())
}

/// Elements of one masking task: [`FLAT_CHUNK`] for contiguous rows,
/// [`ROW_CHUNK`] whole rows for renumbered ones (masked row by row).
fn task_elements(keys: RowKeys, width: usize) -> usize {
    match keys {
        RowKeys::Contiguous(_) => FLAT_CHUNK,
        RowKeys::Ids(_) => ROW_CHUNK * width,
    }
}

/// `part = from * mask` (`part *= mask` without `from`), `part` being
/// `out`'s elements from `first`, a task of [`task_elements`]: for
/// contiguous rows one flat run of mask indices from `row0 · width +
/// first`, for renumbered ones row by row.
fn mask_task(
    mask: &Mask,
    isa: Isa,
    keys: RowKeys,
    width: usize,
    first: usize,
    from: Option<&[f32]>,
    part: &mut [f32],
) {
    match keys {
        RowKeys::Contiguous(row0) => {
            let mut scratch = vec![0u64; part.len().div_ceil(64)];
            let start = row0 * width as u64 + first as u64;
            mask.apply_on(isa, start, from, part, &mut scratch);
        }
        RowKeys::Ids(_) => mask.apply_rows(isa, keys.skip(first / width), from, part, width),
    }
}

/// `words[k]`'s bit `b` is `values[64k + b] > 0`; the bits past `values`'
/// end are clear.
#[inline(always)]
fn pack(values: &[f32], words: &mut [u64]) {
    let mut groups = values.chunks_exact(64);
    for (word, group) in words.iter_mut().zip(&mut groups) {
        let mut w = 0u64;
        for (b, &v) in group.iter().enumerate() {
            w |= u64::from(v > 0.0) << b;
        }
        *word = w;
    }
    let rest = groups.remainder();
    if let Some(word) = words.get_mut(values.len() / 64) {
        *word = rest
            .iter()
            .enumerate()
            .fold(0u64, |w, (b, &v)| w | (u64::from(v > 0.0) << b));
    }
}

/// `out[j] = g[j] · bit(first + j)` of the mask `bits`, as
/// `g · relu_grad(z)`: the same product, so the same bits.
#[inline(always)]
fn gate(bits: &[u64], first: usize, g: &[f32], out: &mut [f32]) {
    let one = |i: usize| -> f32 {
        if (bits[i / 64] >> (i % 64)) & 1 == 1 {
            1.0
        } else {
            0.0
        }
    };
    // Up to the first whole word, then word by word, then the rest.
    let lead = ((64 - first % 64) % 64).min(out.len());
    for j in 0..lead {
        out[j] = g[j] * one(first + j);
    }
    let (out, g) = (&mut out[lead..], &g[lead..]);
    let word0 = (first + lead) / 64;
    let done = out.len() / 64 * 64;
    let mut outs = out.chunks_exact_mut(64);
    for (k, (o, gs)) in (&mut outs).zip(g.chunks_exact(64)).enumerate() {
        let w = bits[word0 + k];
        for (b, (o, &g)) in o.iter_mut().zip(gs).enumerate() {
            *o = g * if (w >> b) & 1 == 1 { 1.0 } else { 0.0 };
        }
    }
    for (j, o) in outs.into_remainder().iter_mut().enumerate() {
        *o = g[done + j] * one(first + lead + done + j);
    }
}

/// [`pack`] on `isa`.
fn pack_on(isa: Isa, values: &[f32], words: &mut [u64]) {
    match isa {
        Isa::Generic => pack(values, words),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::pack_avx512(values, words) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::pack_avx2(values, words) },
    }
}

/// [`gate`] on `isa`.
fn gate_on(isa: Isa, bits: &[u64], first: usize, g: &[f32], out: &mut [f32]) {
    match isa {
        Isa::Generic => gate(bits, first, g, out),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::gate_avx512(bits, first, g, out) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::gate_avx2(bits, first, g, out) },
    }
}

/// `out = dropout(elu(z))` with `alpha = 1`; arguments as [`relu_dropout`].
pub fn elu_dropout<'k>(
    z: &[f32],
    out: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
) -> Result<()> {
    let keys = keys.into();
    map_masked(
        "elu_dropout",
        (z, None),
        None,
        out,
        width,
        keys,
        dropout,
        |z, _| elu(z),
    )
}

/// Backward of [`elu_dropout`]: `grad_z = grad_out · mask · elu'(z)`, with
/// `elu'(z) = 1` for `z > 0` and `exp(z)` otherwise.
pub fn elu_dropout_bwd<'k>(
    grad_out: &[f32],
    z: &[f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    map_masked(
        "elu_dropout_bwd",
        (z, None),
        Some(grad_out),
        grad_z,
        width,
        keys.into(),
        dropout,
        |z, g| g * elu_grad(z),
    )
}

/// `out = dropout(elu(z + bias))`: [`elu_dropout`] of `z` with `bias`
/// (`width` values) added to every row, in one pass, as GAT's layers take
/// their aggregation. The same bits as [`elu_dropout`] of
/// [`crate::dense::add_bias`]'s sum, which it does not write.
pub fn elu_dropout_biased<'k>(
    z: &[f32],
    bias: &[f32],
    out: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
) -> Result<()> {
    map_masked(
        "elu_dropout_biased",
        (z, Some(bias)),
        None,
        out,
        width,
        keys.into(),
        dropout,
        |v, _| elu(v),
    )
}

/// Backward of [`elu_dropout_biased`]: [`elu_dropout_bwd`] at `z + bias`,
/// the same bits as it on [`crate::dense::add_bias`]'s sum.
pub fn elu_dropout_bwd_biased<'k>(
    grad_out: &[f32],
    z: &[f32],
    bias: &[f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    map_masked(
        "elu_dropout_bwd_biased",
        (z, Some(bias)),
        Some(grad_out),
        grad_z,
        width,
        keys.into(),
        dropout,
        |v, g| g * elu_grad(v),
    )
}

/// Elements of one task of [`dropout_in_place`] and of the activations
/// with dropout, for contiguous rows.
pub const FLAT_CHUNK: usize = 1 << 14;

/// `x *= mask` in place: plain dropout, or the backward of a dropout.
/// `x` is rows of `width` elements whose global indices are `keys`. Rows
/// `row0..` (a `u64`) have the mask values of global elements `row0 ·
/// width ..`, one run of indices: they are masked as one flat run in tasks
/// of [`FLAT_CHUNK`] elements, so that narrow rows (GAT's attention
/// coefficients are a row of `H` per edge) cost no more per element than
/// wide ones. Renumbered rows ([`RowKeys::Ids`]) are masked row by row.
pub fn dropout_in_place<'k>(
    x: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: &Dropout,
) -> Result<()> {
    masked_copy("dropout_in_place", None, x, width, keys.into(), dropout)
}

/// `out = x * mask`: [`dropout_in_place`] on a copy of `x`, each task's
/// elements copied and masked while they are in cache, the tasks in
/// parallel. The same bits as copying `x` and masking the copy.
pub fn dropout_into<'k>(
    x: &[f32],
    out: &mut [f32],
    width: usize,
    keys: impl Into<RowKeys<'k>>,
    dropout: &Dropout,
) -> Result<()> {
    check_len("dropout_into", "out", out.len(), x.len())?;
    masked_copy("dropout_into", Some(x), out, width, keys.into(), dropout)
}

/// `out = from * mask` (`out *= mask` without `from`), in tasks of
/// [`FLAT_CHUNK`] elements for contiguous rows and [`ROW_CHUNK`] rows for
/// renumbered ones (masked row by row); `from`, where given, has
/// `out`'s length.
fn masked_copy(
    kernel: &str,
    from: Option<&[f32]>,
    out: &mut [f32],
    width: usize,
    keys: RowKeys,
    dropout: &Dropout,
) -> Result<()> {
    let rows = rows_of(kernel, "x", out.len(), width)?;
    keys.check(kernel, rows)?;
    dropout.validate()?;
    let identity = dropout.is_identity();
    if identity && from.is_none() {
        return Ok(());
    }
    let (mask, isa) = (dropout.mask(), Isa::detect());
    let task = task_elements(keys, width);
    out.par_chunks_mut(task)
        .enumerate()
        .for_each(|(chunk, part)| {
            let from = from.map(|from| &from[chunk * task..][..part.len()]);
            if identity {
                if let Some(from) = from {
                    part.copy_from_slice(from);
                }
                return;
            }
            mask_task(&mask, isa, keys, width, chunk * task, from, part);
        });
    Ok(())
}

/// `out[i] = f(z[i], g[i])` (`g` is 0 when absent).
#[inline(always)]
fn map<F: Fn(f32, f32) -> f32>(z: &[f32], g: Option<&[f32]>, out: &mut [f32], f: &F) {
    match g {
        Some(g) => {
            for ((o, &z), &g) in out.iter_mut().zip(z).zip(g) {
                *o = f(z, g);
            }
        }
        None => {
            for (o, &z) in out.iter_mut().zip(z) {
                *o = f(z, 0.0);
            }
        }
    }
}

/// [`map`] built for each instruction set: ELU's exponentials run on
/// the widest vectors.
#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn pack_avx512(values: &[f32], words: &mut [u64]) {
        super::pack(values, words)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_avx2(values: &[f32], words: &mut [u64]) {
        super::pack(values, words)
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn gate_avx512(bits: &[u64], first: usize, g: &[f32], out: &mut [f32]) {
        super::gate(bits, first, g, out)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn gate_avx2(bits: &[u64], first: usize, g: &[f32], out: &mut [f32]) {
        super::gate(bits, first, g, out)
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn map_avx512<F: Fn(f32, f32) -> f32>(
        z: &[f32],
        g: Option<&[f32]>,
        out: &mut [f32],
        f: &F,
    ) {
        super::map(z, g, out, f)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn map_avx2<F: Fn(f32, f32) -> f32>(
        z: &[f32],
        g: Option<&[f32]>,
        out: &mut [f32],
        f: &F,
    ) {
        super::map(z, g, out, f)
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn map_biased_avx512<F: Fn(f32, f32) -> f32>(
        z: &[f32],
        g: Option<&[f32]>,
        bias: &[f32],
        first: usize,
        out: &mut [f32],
        f: &F,
    ) {
        super::map_biased(z, g, bias, first, out, f)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn map_biased_avx2<F: Fn(f32, f32) -> f32>(
        z: &[f32],
        g: Option<&[f32]>,
        bias: &[f32],
        first: usize,
        out: &mut [f32],
        f: &F,
    ) {
        super::map_biased(z, g, bias, first, out, f)
    }
}

/// [`map`] on `isa`.
fn map_on<F: Fn(f32, f32) -> f32>(isa: Isa, z: &[f32], g: Option<&[f32]>, out: &mut [f32], f: &F) {
    match isa {
        Isa::Generic => map(z, g, out, f),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::map_avx512(z, g, out, f) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::map_avx2(z, g, out, f) },
    }
}

/// `out[i] = f(z[i] + bias[i % width], g[i]) · mask[i]` (`bias` and `g`
/// are 0 when absent; without a bias, nothing is added).
#[allow(clippy::too_many_arguments)]
fn map_masked<F>(
    kernel: &str,
    (z, bias): (&[f32], Option<&[f32]>),
    g: Option<&[f32]>,
    out: &mut [f32],
    width: usize,
    keys: RowKeys,
    dropout: Option<&Dropout>,
    f: F,
) -> Result<()>
where
    F: Fn(f32, f32) -> f32 + Sync,
{
    let rows = rows_of(kernel, "z", z.len(), width)?;
    keys.check(kernel, rows)?;
    check_len(kernel, "out", out.len(), z.len())?;
    if let Some(bias) = bias {
        check_len(kernel, "bias", bias.len(), width)?;
    }
    if let Some(g) = g {
        check_len(kernel, "grad_out", g.len(), z.len())?;
    }
    by_row_chunks(out, width, keys, dropout, |isa, base, part| {
        let zs = &z[base..base + part.len()];
        let gs = g.map(|g| &g[base..base + part.len()]);
        match bias {
            Some(bias) => map_biased_on(isa, zs, gs, bias, base, part, &f),
            None => map_on(isa, zs, gs, part, &f),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The biased ReLU, ELU, ELU backward and mask give the bits of the
    /// plain ones on the sum [`crate::dense::add_bias`] writes, on every
    /// instruction set: rows over a mask task's 65,536 elements, a width
    /// that is no multiple of 64 (runs start mid-row), NaN, signed zeros,
    /// and a bias that cancels some values; a bias of the wrong length is
    /// refused by name.
    #[test]
    fn the_biased_activations_and_mask_are_the_plain_ones_on_the_sum() {
        let (rows, width) = (1100, 67);
        let n = rows * width;
        let z: Vec<f32> = (0..n)
            .map(|i| match i % 89 {
                0 => f32::NAN,
                1 => -0.0,
                2 => 0.0,
                _ => ((i * 7919 % 301) as f32 - 150.0) / 7.0,
            })
            .collect();
        let bias: Vec<f32> = (0..width).map(|f| (f as f32 - 33.0) / 5.0).collect();
        let mut sum = z.clone();
        crate::dense::add_bias(&mut sum, width, &bias).unwrap();
        let bits_of = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let ids: Vec<u64> = (0..rows as u64).map(|r| 5 * r + 2).collect();
        let g: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.5).collect();
        for dropout in [None, Some(Dropout::new(0.5, 7, 1).unwrap())] {
            let d = dropout.as_ref();
            for keys in [RowKeys::Contiguous(3), RowKeys::Ids(&ids)] {
                let same = |plain: &[f32], biased: &[f32], what: &str| {
                    assert_eq!(
                        bits_of(biased),
                        bits_of(plain),
                        "{what} {dropout:?} {keys:?}"
                    )
                };
                let (mut plain, mut biased) = (vec![0.0f32; n], vec![1.0f32; n]);
                relu_dropout(&sum, &mut plain, width, keys, d).unwrap();
                relu_dropout_biased(&z, &bias, &mut biased, width, keys, d).unwrap();
                same(&plain, &biased, "relu");
                elu_dropout(&sum, &mut plain, width, keys, d).unwrap();
                elu_dropout_biased(&z, &bias, &mut biased, width, keys, d).unwrap();
                same(&plain, &biased, "elu");
                elu_dropout_bwd(&g, &sum, width, keys, d, &mut plain).unwrap();
                elu_dropout_bwd_biased(&g, &z, &bias, width, keys, d, &mut biased).unwrap();
                same(&plain, &biased, "elu_bwd");
            }
        }
        // On every instruction set, from an element in mid-row.
        let first = 3 * width + 5;
        let (zs, gs) = (&z[first..], &g[first..]);
        fn same_on<F: Fn(f32, f32) -> f32>(
            isa: Isa,
            (sum, z, g): (&[f32], &[f32], Option<&[f32]>),
            (bias, first): (&[f32], usize),
            f: F,
        ) -> bool {
            let (mut plain, mut biased) = (vec![0.0f32; z.len()], vec![1.0f32; z.len()]);
            map_on(isa, sum, g, &mut plain, &f);
            map_biased_on(isa, z, g, bias, first, &mut biased, &f);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            bits(&biased) == bits(&plain)
        }
        for isa in Isa::available() {
            let at = (&bias[..], first);
            let (plain, grads) = ((&sum[first..], zs, None), (&sum[first..], zs, Some(gs)));
            assert!(same_on(isa, plain, at, |v, _| relu(v)), "relu on {isa:?}");
            assert!(same_on(isa, plain, at, |v, _| elu(v)), "elu on {isa:?}");
            assert!(
                same_on(isa, grads, at, |v, g| g * elu_grad(v)),
                "elu_bwd on {isa:?}"
            );
        }
        let mut plain = vec![0u64; n.div_ceil(64)];
        let mut biased = vec![u64::MAX; n.div_ceil(64)];
        positive_bits(&sum, &mut plain).unwrap();
        positive_bits_biased(&z, &bias, width, &mut biased).unwrap();
        assert_eq!(biased, plain);
        let short = &bias[1..];
        let mut out = vec![0.0f32; n];
        let message = relu_dropout_biased(&z, short, &mut out, width, 0u64, None)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("relu_dropout_biased") && message.contains("bias"),
            "{message}"
        );
        let message = elu_dropout_bwd_biased(&g, &z, short, width, 0u64, None, &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("elu_dropout_bwd_biased") && message.contains("bias"),
            "{message}"
        );
        let message = positive_bits_biased(&z, short, width, &mut biased)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("positive_bits_biased") && message.contains("bias"),
            "{message}"
        );
    }

    #[test]
    fn the_mask_gives_the_backward_of_z() {
        // 600 rows of 50 over three row chunks; the last word part-filled.
        let (rows, width) = (600, 50);
        let n = rows * width;
        let specials = [0.0, -0.0, f32::NAN, 1e-38, -1e-38, f32::INFINITY];
        let z: Vec<f32> = (0..n)
            .map(|i| match i % 97 {
                k @ 0..=5 => specials[k],
                _ => ((i * 7919 % 301) as f32 - 150.0) / 7.0,
            })
            .collect();
        let g: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.5).collect();
        let mut bits = vec![u64::MAX; n.div_ceil(64)];
        positive_bits(&z, &mut bits).unwrap();
        for (i, &v) in z.iter().enumerate() {
            assert_eq!((bits[i / 64] >> (i % 64)) & 1 == 1, v > 0.0, "element {i}");
        }
        assert_eq!(bits[n / 64] >> (n % 64), 0, "bits past the end are clear");
        for isa in Isa::available() {
            let mut words = vec![u64::MAX; bits.len()];
            pack_on(isa, &z, &mut words);
            assert_eq!(words, bits, "pack on {isa:?}");
        }
        let bits_of = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for dropout in [None, Some(Dropout::new(0.5, 7, 1).unwrap())] {
            let (mut from_z, mut from_bits) = (vec![0.0f32; n], vec![1.0f32; n]);
            relu_dropout_bwd(&g, &z, width, 3u64, dropout.as_ref(), &mut from_z).unwrap();
            relu_dropout_bwd_bits(&g, &bits, width, 3u64, dropout.as_ref(), &mut from_bits)
                .unwrap();
            assert_eq!(bits_of(&from_bits), bits_of(&from_z), "dropout {dropout:?}");
        }
        // A stretch starting anywhere in a word, on every instruction set.
        for first in [0, 1, 5, 63, 64, 65, 130] {
            for len in [0, 1, 63, 64, 200] {
                let want: Vec<f32> = (first..first + len)
                    .map(|i| g[i] * relu_grad(z[i]))
                    .collect();
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; len];
                    gate_on(isa, &bits, first, &g[first..first + len], &mut got);
                    assert_eq!(bits_of(&got), bits_of(&want), "{isa:?} from {first}, {len}");
                }
            }
        }
        let err = positive_bits(&z, &mut bits[1..]).unwrap_err();
        assert!(err.to_string().contains("bits"), "{err}");
        let err = relu_dropout_bwd_bits(&g, &bits[1..], width, 3u64, None, &mut vec![0.0; n])
            .unwrap_err();
        assert!(err.to_string().contains("bits"), "{err}");
    }

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let z: Vec<f32> = (0..3000)
            .map(|i| ((i * 7919 % 2000) as f32 - 1000.0) / 97.0)
            .chain([0.0, -0.0, f32::NAN, f32::NEG_INFINITY, -1e-30])
            .collect();
        let g: Vec<f32> = (0..z.len()).map(|i| (i % 13) as f32 - 6.0).collect();
        // Generic, so that the function is built inside each build.
        fn run<F: Fn(f32, f32) -> f32>(isa: Isa, z: &[f32], g: Option<&[f32]>, f: F) -> Vec<u32> {
            let mut out = vec![0.0f32; z.len()];
            map_on(isa, z, g, &mut out, &f);
            out.iter().map(|v| v.to_bits()).collect()
        }
        let forward = |z: f32, _| elu(z);
        let backward = |z: f32, g: f32| g * elu_grad(z);
        let want = (
            run(Isa::Generic, &z, None, forward),
            run(Isa::Generic, &z, Some(&g), backward),
        );
        assert!(f32::from_bits(want.0[z.len() - 3]).is_nan());
        for isa in Isa::available() {
            assert_eq!(run(isa, &z, None, forward), want.0, "elu on {isa:?}");
            assert_eq!(
                run(isa, &z, Some(&g), backward),
                want.1,
                "elu_grad on {isa:?}"
            );
        }
    }
}
