//! Softmax cross-entropy over the masked rows of a partition, and accuracy.
//!
//! The loss of a partition is `Σ_{masked r} −log softmax(logits[r])[label_r]
//! / normaliser`, accumulated in `f64`: one partial per [`REDUCE_ROWS`] rows,
//! added in chunk order. The executor sums the partitions' losses in
//! partition order and passes the same `normaliser` (the number of masked
//! rows of the whole graph) to every partition, so the gradient is that of
//! the mean loss.

use rayon::prelude::*;

use crate::{check_len, ensure, Error, Result, REDUCE_ROWS, ROW_CHUNK};

fn check(
    kernel: &str,
    logits: &[f32],
    rows: usize,
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    normaliser: usize,
) -> Result<()> {
    ensure(classes > 0, || format!("{kernel}: `classes` is 0"))?;
    ensure(normaliser > 0, || format!("{kernel}: `normaliser` is 0"))?;
    check_len(kernel, "logits", logits.len(), rows * classes)?;
    check_len(kernel, "labels", labels.len(), rows)?;
    check_len(kernel, "mask", mask.len(), rows)?;
    check_labels(kernel, classes, labels, mask)
}

/// Labels of masked rows must lie in `0..classes`; unmasked rows may hold
/// anything (say −1 for unlabelled vertices).
fn check_labels(kernel: &str, classes: usize, labels: &[i64], mask: &[bool]) -> Result<()> {
    match labels
        .iter()
        .zip(mask)
        .position(|(&l, &m)| m && !(0..classes as i64).contains(&l))
    {
        Some(r) => Err(Error::InvalidInput(format!(
            "{kernel}: label {} of row {r} is out of range for {classes} classes",
            labels[r]
        ))),
        None => Ok(()),
    }
}

/// Row max and `log Σ exp(x − max)`, in `f64`.
#[inline]
fn log_sum_exp(row: &[f32]) -> (f32, f64) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    (max, sum.ln())
}

/// `Σ_{r: mask[r]} −log softmax(logits[r])[labels[r]] / normaliser`.
/// `logits` is `rows × classes`. A masked row's label out of
/// `0..classes` returns an error.
pub fn softmax_cross_entropy(
    logits: &[f32],
    rows: usize,
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    normaliser: usize,
) -> Result<f64> {
    check(
        "softmax_cross_entropy",
        logits,
        rows,
        classes,
        labels,
        mask,
        normaliser,
    )?;
    let partials: Vec<f64> = (0..rows.div_ceil(REDUCE_ROWS))
        .into_par_iter()
        .map(|chunk| {
            let r0 = chunk * REDUCE_ROWS;
            let mut sum = 0.0f64;
            for r in r0..(r0 + REDUCE_ROWS).min(rows) {
                if !mask[r] {
                    continue;
                }
                let row = &logits[r * classes..(r + 1) * classes];
                let (max, lse) = log_sum_exp(row);
                sum += lse - (row[labels[r] as usize] - max) as f64;
            }
            sum
        })
        .collect();
    Ok(partials.iter().sum::<f64>() / normaliser as f64)
}

/// Gradient of [`softmax_cross_entropy`] with respect to the logits:
/// `(softmax(logits[r]) − onehot(labels[r])) / normaliser` on masked rows,
/// 0 elsewhere.
pub fn softmax_cross_entropy_bwd(
    logits: &[f32],
    rows: usize,
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    normaliser: usize,
    grad: &mut [f32],
) -> Result<()> {
    check(
        "softmax_cross_entropy_bwd",
        logits,
        rows,
        classes,
        labels,
        mask,
        normaliser,
    )?;
    check_len(
        "softmax_cross_entropy_bwd",
        "grad",
        grad.len(),
        rows * classes,
    )?;
    let scale = 1.0 / normaliser as f64;
    grad.par_chunks_mut(ROW_CHUNK * classes)
        .enumerate()
        .for_each(|(chunk, part)| {
            for (k, g) in part.chunks_exact_mut(classes).enumerate() {
                let r = chunk * ROW_CHUNK + k;
                if !mask[r] {
                    g.fill(0.0);
                    continue;
                }
                let row = &logits[r * classes..(r + 1) * classes];
                let (max, lse) = log_sum_exp(row);
                for (c, (gv, &x)) in g.iter_mut().zip(row).enumerate() {
                    let p = ((x - max) as f64 - lse).exp();
                    let onehot = if c as i64 == labels[r] { 1.0 } else { 0.0 };
                    *gv = ((p - onehot) * scale) as f32;
                }
            }
        });
    Ok(())
}

/// `(correct, total)` over masked rows, where a row is correct when the
/// first index of its largest logit equals its label.
pub fn accuracy(
    logits: &[f32],
    rows: usize,
    classes: usize,
    labels: &[i64],
    mask: &[bool],
) -> Result<(u64, u64)> {
    ensure(classes > 0, || "accuracy: `classes` is 0".to_string())?;
    check_len("accuracy", "logits", logits.len(), rows * classes)?;
    check_len("accuracy", "labels", labels.len(), rows)?;
    check_len("accuracy", "mask", mask.len(), rows)?;
    check_labels("accuracy", classes, labels, mask)?;
    let (correct, total) = (0..rows)
        .into_par_iter()
        .filter(|&r| mask[r])
        .map(|r| {
            let row = &logits[r * classes..(r + 1) * classes];
            let mut best = 0;
            for (c, &x) in row.iter().enumerate() {
                if x > row[best] {
                    best = c;
                }
            }
            (u64::from(best as i64 == labels[r]), 1u64)
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    Ok((correct, total))
}
