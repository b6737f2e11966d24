//! Activations fused with dropout: `h = dropout(act(z))`, and the backward
//! `grad_z = grad_h · mask · act'(z)`, which regenerates the mask from the
//! element's global index `(row0 + r) * width + f` (see [`crate::dropout`]).
//! Rows are independent, so any split gives the same bits.

use rayon::prelude::*;

use crate::dropout::{Dropout, Mask};
use crate::isa::Isa;
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

#[inline(always)]
fn elu(z: f32) -> f32 {
    if z > 0.0 {
        z
    } else {
        ELU_ALPHA * z.exp_m1()
    }
}

#[inline(always)]
fn elu_grad(z: f32) -> f32 {
    if z > 0.0 {
        1.0
    } else {
        ELU_ALPHA * z.exp()
    }
}

/// `out = dropout(relu(z))`; `z` and `out` are `rows × width`, and `row0`
/// is the global index of row 0 (the mask's counter). `None` or `p == 0`
/// means no dropout.
pub fn relu_dropout(
    z: &[f32],
    out: &mut [f32],
    width: usize,
    row0: u64,
    dropout: Option<&Dropout>,
) -> Result<()> {
    map_masked(
        "relu_dropout",
        z,
        None,
        out,
        width,
        row0,
        dropout,
        |z, _| relu(z),
    )
}

/// Backward of [`relu_dropout`]: `grad_z = grad_out · mask · [z > 0]`.
pub fn relu_dropout_bwd(
    grad_out: &[f32],
    z: &[f32],
    width: usize,
    row0: u64,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    map_masked(
        "relu_dropout_bwd",
        z,
        Some(grad_out),
        grad_z,
        width,
        row0,
        dropout,
        |z, g| g * relu_grad(z),
    )
}

/// `out = dropout(elu(z))` with `alpha = 1`; arguments as [`relu_dropout`].
pub fn elu_dropout(
    z: &[f32],
    out: &mut [f32],
    width: usize,
    row0: u64,
    dropout: Option<&Dropout>,
) -> Result<()> {
    map_masked("elu_dropout", z, None, out, width, row0, dropout, |z, _| {
        elu(z)
    })
}

/// Backward of [`elu_dropout`]: `grad_z = grad_out · mask · elu'(z)`, with
/// `elu'(z) = 1` for `z > 0` and `exp(z)` otherwise.
pub fn elu_dropout_bwd(
    grad_out: &[f32],
    z: &[f32],
    width: usize,
    row0: u64,
    dropout: Option<&Dropout>,
    grad_z: &mut [f32],
) -> Result<()> {
    map_masked(
        "elu_dropout_bwd",
        z,
        Some(grad_out),
        grad_z,
        width,
        row0,
        dropout,
        |z, g| g * elu_grad(z),
    )
}

/// `x *= mask` in place: plain dropout, or the backward of a dropout.
pub fn dropout_in_place(x: &mut [f32], width: usize, row0: u64, dropout: &Dropout) -> Result<()> {
    rows_of("dropout_in_place", "x", x.len(), width)?;
    dropout.validate()?;
    if dropout.is_identity() {
        return Ok(());
    }
    let (mask, isa) = (dropout.mask(), Isa::detect());
    x.par_chunks_mut(ROW_CHUNK * width)
        .enumerate()
        .for_each(|(chunk, part)| {
            let mut scratch = vec![0u64; width.div_ceil(64)];
            for (k, row) in part.chunks_exact_mut(width).enumerate() {
                let r = (chunk * ROW_CHUNK + k) as u64;
                mask.apply_on(isa, (row0 + r) * width as u64, row, &mut scratch);
            }
        });
    Ok(())
}

/// `out[i] = f(z[i], g[i]) · mask[i]` (`g` is 0 when absent).
#[allow(clippy::too_many_arguments)]
fn map_masked<F>(
    kernel: &str,
    z: &[f32],
    g: Option<&[f32]>,
    out: &mut [f32],
    width: usize,
    row0: u64,
    dropout: Option<&Dropout>,
    f: F,
) -> Result<()>
where
    F: Fn(f32, f32) -> f32 + Sync,
{
    rows_of(kernel, "z", z.len(), width)?;
    check_len(kernel, "out", out.len(), z.len())?;
    if let Some(g) = g {
        check_len(kernel, "grad_out", g.len(), z.len())?;
    }
    let mask: Option<Mask> = match dropout {
        Some(d) => {
            d.validate()?;
            (!d.is_identity()).then(|| d.mask())
        }
        None => None,
    };
    let isa = Isa::detect();
    let span = ROW_CHUNK * width;
    out.par_chunks_mut(span)
        .enumerate()
        .for_each(|(chunk, part)| {
            let base = chunk * span;
            let zs = &z[base..base + part.len()];
            match g {
                Some(g) => {
                    let gs = &g[base..base + part.len()];
                    for ((o, &z), &g) in part.iter_mut().zip(zs).zip(gs) {
                        *o = f(z, g);
                    }
                }
                None => {
                    for (o, &z) in part.iter_mut().zip(zs) {
                        *o = f(z, 0.0);
                    }
                }
            }
            if let Some(mask) = &mask {
                let mut scratch = vec![0u64; width.div_ceil(64)];
                for (k, row) in part.chunks_exact_mut(width).enumerate() {
                    let r = (chunk * ROW_CHUNK + k) as u64;
                    mask.apply_on(isa, (row0 + r) * width as u64, row, &mut scratch);
                }
            }
        });
    Ok(())
}
