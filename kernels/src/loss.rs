//! Softmax cross-entropy over the masked rows of a partition, and accuracy.
//!
//! The loss of a partition is `Σ_{masked r} −log softmax(logits[r])[label_r]
//! / normaliser`, accumulated in `f64`: one partial per [`REDUCE_ROWS`] rows,
//! added in chunk order. The executor sums the partitions' losses in
//! partition order and passes the same `normaliser` (the number of masked
//! rows of the whole graph) to every partition, so the gradient is that of
//! the mean loss.

use rayon::prelude::*;

use crate::isa::Isa;
use crate::math::exp_nonpositive;
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

/// The largest value of `row` (NaNs ignored; −∞ for an empty row or one of
/// NaNs), taken in eight lanes: one running maximum has each compare wait
/// for the last, and the compiler may not reorder it.
#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut tail = row.chunks_exact(8);
    for eight in &mut tail {
        for (lane, &x) in lanes.iter_mut().zip(eight) {
            *lane = lane.max(x);
        }
    }
    for (lane, &x) in lanes.iter_mut().zip(tail.remainder()) {
        *lane = lane.max(x);
    }
    lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// The first index of `row`'s largest value (0 for an empty row or one
/// of NaNs). The max first, then a word of which values equal it, 64
/// values at a time: a compare of each value with the best so far, or a
/// search that stops at the max, mispredicts a branch about once a row.
#[inline(always)]
fn first_max(row: &[f32]) -> usize {
    let max = row_max(row);
    for (k, word) in row.chunks(64).enumerate() {
        let equal = word
            .iter()
            .enumerate()
            .fold(0u64, |bits, (b, &x)| bits | (u64::from(x == max) << b));
        if equal != 0 {
            return 64 * k + equal.trailing_zeros() as usize;
        }
    }
    0
}

/// Row max, and `e^(x − max)` of each value into `exps`; returns their sum
/// in `f64`, added in eight lanes combined in a fixed order.
#[inline(always)]
fn shifted_exps(row: &[f32], exps: &mut [f32]) -> (f32, f64) {
    let max = row_max(row);
    for (e, &x) in exps.iter_mut().zip(row) {
        *e = exp_nonpositive(x - max);
    }
    let mut lanes = [0.0f64; 8];
    let mut tail = exps.chunks_exact(8);
    for eight in &mut tail {
        for (lane, &e) in lanes.iter_mut().zip(eight) {
            *lane += e as f64;
        }
    }
    for (lane, &e) in lanes.iter_mut().zip(tail.remainder()) {
        *lane += e as f64;
    }
    let sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    (max, sum)
}

/// `Σ −log softmax(row)[label]` over the masked rows `r0..r0 + n`.
#[inline(always)]
fn loss_rows(
    logits: &[f32],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    r0: usize,
    n: usize,
) -> f64 {
    let mut exps = vec![0.0f32; classes];
    let mut sum = 0.0f64;
    for r in r0..r0 + n {
        if !mask[r] {
            continue;
        }
        let row = &logits[r * classes..(r + 1) * classes];
        let (max, total) = shifted_exps(row, &mut exps);
        sum += total.ln() - (row[labels[r] as usize] - max) as f64;
    }
    sum
}

/// The gradient rows of `grad` (rows `r0..`): `(softmax − onehot) · scale`
/// on masked rows, 0 elsewhere.
#[inline(always)]
fn loss_grad_rows(
    logits: &[f32],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    scale: f64,
    r0: usize,
    grad: &mut [f32],
) {
    let mut exps = vec![0.0f32; classes];
    for (k, g) in grad.chunks_exact_mut(classes).enumerate() {
        let r = r0 + k;
        if !mask[r] {
            g.fill(0.0);
            continue;
        }
        let row = &logits[r * classes..(r + 1) * classes];
        let (_, total) = shifted_exps(row, &mut exps);
        let factor = (scale / total) as f32;
        for (gv, &e) in g.iter_mut().zip(&exps) {
            *gv = e * factor;
        }
        // `(p − 1) · scale` at the label, from the other classes' share:
        // `p · scale − scale` in f32 cancels where `p` is near 1.
        let label = labels[r] as usize;
        g[label] = (-(scale * (total - exps[label] as f64) / total)) as f32;
    }
}

/// [`loss_rows`] and [`loss_grad_rows`] built for each instruction set.
#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn loss_rows_avx512(
        logits: &[f32],
        classes: usize,
        labels: &[i64],
        mask: &[bool],
        r0: usize,
        n: usize,
    ) -> f64 {
        super::loss_rows(logits, classes, labels, mask, r0, n)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn loss_rows_avx2(
        logits: &[f32],
        classes: usize,
        labels: &[i64],
        mask: &[bool],
        r0: usize,
        n: usize,
    ) -> f64 {
        super::loss_rows(logits, classes, labels, mask, r0, n)
    }

    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn loss_grad_rows_avx512(
        logits: &[f32],
        classes: usize,
        labels: &[i64],
        mask: &[bool],
        scale: f64,
        r0: usize,
        grad: &mut [f32],
    ) {
        super::loss_grad_rows(logits, classes, labels, mask, scale, r0, grad)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn loss_grad_rows_avx2(
        logits: &[f32],
        classes: usize,
        labels: &[i64],
        mask: &[bool],
        scale: f64,
        r0: usize,
        grad: &mut [f32],
    ) {
        super::loss_grad_rows(logits, classes, labels, mask, scale, r0, grad)
    }
}

/// [`loss_rows`] on `isa`.
fn loss_rows_on(
    isa: Isa,
    logits: &[f32],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    r0: usize,
    n: usize,
) -> f64 {
    match isa {
        Isa::Generic => loss_rows(logits, classes, labels, mask, r0, n),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::loss_rows_avx512(logits, classes, labels, mask, r0, n) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::loss_rows_avx2(logits, classes, labels, mask, r0, n) },
    }
}

/// [`loss_grad_rows`] on `isa`.
#[allow(clippy::too_many_arguments)]
fn loss_grad_rows_on(
    isa: Isa,
    logits: &[f32],
    classes: usize,
    labels: &[i64],
    mask: &[bool],
    scale: f64,
    r0: usize,
    grad: &mut [f32],
) {
    match isa {
        Isa::Generic => loss_grad_rows(logits, classes, labels, mask, scale, r0, grad),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            x86::loss_grad_rows_avx512(logits, classes, labels, mask, scale, r0, grad)
        },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe {
            x86::loss_grad_rows_avx2(logits, classes, labels, mask, scale, r0, grad)
        },
    }
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
    let isa = Isa::detect();
    let partials: Vec<f64> = (0..rows.div_ceil(REDUCE_ROWS))
        .into_par_iter()
        .map(|chunk| {
            let r0 = chunk * REDUCE_ROWS;
            let n = REDUCE_ROWS.min(rows - r0);
            loss_rows_on(isa, logits, classes, labels, mask, r0, n)
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
    let isa = Isa::detect();
    grad.par_chunks_mut(ROW_CHUNK * classes)
        .enumerate()
        .for_each(|(chunk, part)| {
            let r0 = chunk * ROW_CHUNK;
            loss_grad_rows_on(isa, logits, classes, labels, mask, scale, r0, part);
        });
    Ok(())
}

/// `(correct, total)` over the masked rows of each of `masks`, where a row
/// is correct when the first index of its largest logit equals its label
/// (NaN logits are passed over; a row of NaNs predicts class 0). Each
/// row's prediction is found once, for every mask.
pub fn accuracy(
    logits: &[f32],
    rows: usize,
    classes: usize,
    labels: &[i64],
    masks: &[&[bool]],
) -> Result<Vec<(u64, u64)>> {
    ensure(classes > 0, || "accuracy: `classes` is 0".to_string())?;
    check_len("accuracy", "logits", logits.len(), rows * classes)?;
    check_len("accuracy", "labels", labels.len(), rows)?;
    for mask in masks {
        check_len("accuracy", "mask", mask.len(), rows)?;
        check_labels("accuracy", classes, labels, mask)?;
    }
    let counts = (0..rows.div_ceil(REDUCE_ROWS))
        .into_par_iter()
        .map(|chunk| {
            let r0 = chunk * REDUCE_ROWS;
            let mut counts = vec![(0u64, 0u64); masks.len()];
            for r in r0..(r0 + REDUCE_ROWS).min(rows) {
                if !masks.iter().any(|m| m[r]) {
                    continue;
                }
                let row = &logits[r * classes..(r + 1) * classes];
                let correct = u64::from(first_max(row) as i64 == labels[r]);
                // Counted without a branch: which masks hold a row is as
                // unpredictable as its prediction.
                for (count, mask) in counts.iter_mut().zip(masks) {
                    let held = u64::from(mask[r]);
                    count.0 += correct & held;
                    count.1 += held;
                }
            }
            counts
        })
        .reduce(
            || vec![(0, 0); masks.len()],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    x.0 += y.0;
                    x.1 += y.1;
                }
                a
            },
        );
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_largest_value_is_found_in_any_word() {
        // 150 values: words of 64, 64 and 22.
        for at in [0, 1, 63, 64, 100, 127, 128, 149] {
            let mut row: Vec<f32> = (0..150).map(|i| (i % 7) as f32).collect();
            row[at] = 50.0;
            assert_eq!(first_max(&row), at, "largest at {at}");
            // A tie later on goes to the first.
            if at + 70 < row.len() {
                row[at + 70] = 50.0;
                assert_eq!(first_max(&row), at, "tied at {at} and {}", at + 70);
            }
        }
        let mut row = vec![f32::NAN; 150];
        assert_eq!(first_max(&row), 0, "a row of NaNs");
        row[130] = -1.0;
        assert_eq!(first_max(&row), 130, "NaNs are passed over");
    }

    #[test]
    fn a_confident_row_keeps_its_label_gradient() {
        // p at the label is 1 − 3·e^-20 (about 6e-9 from 1): `p − 1` in
        // f32 would be 0 or off by a large factor.
        let row = [20.0f32, 0.0, 0.0, 0.0];
        let mut g = [f32::NAN; 4];
        let scale = 0.5;
        loss_grad_rows(&row, 4, &[0], &[true], scale, 0, &mut g);
        let other = (-20.0f64).exp() / (1.0 + 3.0 * (-20.0f64).exp());
        let want = -3.0 * other * scale;
        assert!(
            ((g[0] as f64 - want) / want).abs() < 1e-5,
            "{} vs {want}",
            g[0]
        );
        let sum: f64 = g.iter().map(|&v| v as f64).sum();
        assert!(sum.abs() < 1e-5 * want.abs(), "row sums to {sum}");
    }

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let (rows, classes) = (300, 19);
        let logits: Vec<f32> = (0..rows * classes)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 25.0)
            .collect();
        let labels: Vec<i64> = (0..rows).map(|r| (r % classes) as i64).collect();
        let mask: Vec<bool> = (0..rows).map(|r| r % 3 != 0).collect();
        let loss = loss_rows_on(Isa::Generic, &logits, classes, &labels, &mask, 0, rows);
        let mut grad = vec![0.0f32; rows * classes];
        loss_grad_rows_on(
            Isa::Generic,
            &logits,
            classes,
            &labels,
            &mask,
            0.01,
            0,
            &mut grad,
        );
        for isa in Isa::available() {
            let other = loss_rows_on(isa, &logits, classes, &labels, &mask, 0, rows);
            assert_eq!(loss.to_bits(), other.to_bits(), "{isa:?}");
            let mut g = vec![f32::NAN; rows * classes];
            loss_grad_rows_on(isa, &logits, classes, &labels, &mask, 0.01, 0, &mut g);
            let same = grad.iter().zip(&g).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{isa:?}");
        }
    }
}
