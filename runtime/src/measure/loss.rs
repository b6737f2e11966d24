//! The loss's time per row and per class.
//!
//! A loss operator takes a row's softmax, its label's log-probability and
//! its prediction (the accuracy of three masks); its backward the row's
//! gradient. Much of that is a row's own work whatever its classes: on
//! the development machine a 2-layer GCN's loss and its backward took
//! about 65 ns a row at 8 and 16 classes and 280 ns at 128
//! (`docs/profile.md`, "The gathers' working set, and the loss's time a
//! row"). A rate of its math, measured at one class count, priced 8
//! classes at about half their time and 128 at twice theirs.
//!
//! [`loss_fit`] times the CPU's loss kernels alone at several class
//! counts, and fits their time a row and a byte: the `softmax` class's fit
//! in a profile's `class_rates`.

use std::time::Instant;

use fateplan_kernels::loss;
use fateplan_planner::profile::ClassRate;
use fateplan_planner::workload::ComputeClass;

use super::{fill_pattern_f32, median, median_of_rounds, Rounds};
use crate::{Error, Result};

/// Class counts of the fit: citation graphs' few, and as many as a
/// large graph's (papers100M has 172).
pub const LOSS_CLASSES: [u32; 5] = [4, 8, 16, 64, 256];

/// Rows of the logits a full profile times (2^16; `--quick` a quarter).
pub const LOSS_ROWS: usize = 1 << 16;

/// Sweeps over the class counts; each point's figure is the median over
/// them.
pub const SWEEPS: usize = 3;

/// Shares of the rows in the train, validation and test masks: the
/// generators' default split.
const SPLIT: [f64; 3] = [0.6, 0.2, 0.2];

/// One class count timed: the loss and its backward, together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossPoint {
    pub classes: u32,
    pub rows: u64,
    /// Bytes of the loss and its backward as the workload counts them:
    /// the logits and labels read, and the gradient's logits read and
    /// gradient written.
    pub bytes: u64,
    pub seconds: f64,
}

/// What [`loss_fit`] measured and fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct LossFit {
    pub points: Vec<LossPoint>,
    /// The `softmax` class's fit (a bandwidth and a time per row); `None`
    /// where the points give no positive pair.
    pub fit: Option<ClassRate>,
}

/// Bytes of a label, as the workload counts them.
const LABEL_BYTES: u64 = 8;

/// Times the loss kernels as the CPU backend runs a loss operator
/// (`softmax_cross_entropy` over the train mask and `accuracy` over the
/// three masks) and its backward (`softmax_cross_entropy_bwd`), on
/// `rows` rows of each of `classes` ([`LOSS_ROWS`] in a full profile), labels and masks drawn at
/// random (the generators' split), in [`SWEEPS`] sweeps of `rounds`
/// each; then fits `seconds = bytes / bytes_per_s + rows ×
/// seconds_per_row` to the points, each weighed by its own time (a
/// relative fit: small class counts count as much as large ones).
pub fn loss_fit(classes: &[u32], rows: usize, rounds: &Rounds) -> Result<LossFit> {
    let mut sweeps: Vec<Vec<f64>> = Vec::new();
    for _ in 0..SWEEPS {
        let sweep = classes
            .iter()
            .map(|&c| time_loss(c, rows, rounds))
            .collect::<Result<Vec<f64>>>()?;
        sweeps.push(sweep);
    }
    let points: Vec<LossPoint> = classes
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let mut seconds: Vec<f64> = sweeps.iter().map(|s| s[k]).collect();
            LossPoint {
                classes: c,
                rows: rows as u64,
                bytes: loss_bytes(rows as u64, u64::from(c)),
                seconds: median(&mut seconds),
            }
        })
        .collect();
    let fit = fit_rows_and_bytes(&points);
    Ok(LossFit { points, fit })
}

/// The workload's bytes of a loss over `rows` rows of `classes` and of
/// its backward (`planner/src/gnn.rs`).
fn loss_bytes(rows: u64, classes: u64) -> u64 {
    let forward = rows * (classes * 4 + LABEL_BYTES);
    let backward = 2 * rows * classes * 4;
    forward + backward
}

/// The least squares of `seconds = bytes × a + rows × b` weighed by
/// `1 / seconds`, as a fit: `None` where `a` or `b` is not positive.
fn fit_rows_and_bytes(points: &[LossPoint]) -> Option<ClassRate> {
    let (mut aa, mut ab, mut bb, mut ay, mut by) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for p in points {
        let w = 1.0 / p.seconds;
        let (x0, x1) = (p.bytes as f64 * w, p.rows as f64 * w);
        aa += x0 * x0;
        ab += x0 * x1;
        bb += x1 * x1;
        ay += x0;
        by += x1;
    }
    let det = aa * bb - ab * ab;
    if !(det.is_finite() && det.abs() > 1e-12 * aa * bb) {
        return None;
    }
    let per_byte = (ay * bb - ab * by) / det;
    let per_row = (aa * by - ab * ay) / det;
    (per_byte > 0.0 && per_row > 0.0 && (1.0 / per_byte).is_finite()).then_some(ClassRate {
        class: ComputeClass::Softmax,
        bytes_per_s: 1.0 / per_byte,
        seconds_per_edge: 0.0,
        seconds_per_edge_head: 0.0,
        // The loss and its backward each walk the rows: each is charged
        // half of the pair's time a row.
        seconds_per_row: per_row / 2.0,
        on_curve: false,
    })
}

/// The median seconds of a loss and its backward over `rows` rows of
/// `classes`.
fn time_loss(classes: u32, rows: usize, rounds: &Rounds) -> Result<f64> {
    let c = classes as usize;
    let mut logits = vec![0.0f32; rows * c];
    fill_pattern_f32(&mut logits, u64::from(classes));
    // Logits of a few units, as a trained layer's.
    for x in &mut logits {
        *x *= 4.0;
    }
    let draw = |r: usize, salt: u64| splitmix(r as u64 ^ salt.wrapping_mul(0x9E37_79B9));
    let labels: Vec<i64> = (0..rows)
        .map(|r| (draw(r, 1) % u64::from(classes)) as i64)
        .collect();
    let split: Vec<usize> = (0..rows)
        .map(|r| {
            let u = (draw(r, 2) >> 11) as f64 / (1u64 << 53) as f64;
            usize::from(u >= SPLIT[0]) + usize::from(u >= SPLIT[0] + SPLIT[1])
        })
        .collect();
    let masks: Vec<Vec<bool>> = (0..3)
        .map(|k| split.iter().map(|&s| s == k).collect())
        .collect();
    let train = &masks[0];
    let normaliser = train.iter().filter(|&&m| m).count().max(1);
    let mask_refs: Vec<&[bool]> = masks.iter().map(|m| m.as_slice()).collect();
    let mut grad = vec![0.0f32; rows * c];
    let kernel = |e: fateplan_kernels::Error| Error::Internal(format!("loss measurement: {e}"));
    let (seconds, _) = median_of_rounds(rounds, || {
        let started = Instant::now();
        loss::softmax_cross_entropy(&logits, rows, c, &labels, train, normaliser)
            .map_err(kernel)?;
        loss::accuracy(&logits, rows, c, &labels, &mask_refs).map_err(kernel)?;
        loss::softmax_cross_entropy_bwd(&logits, rows, c, &labels, train, normaliser, &mut grad)
            .map_err(kernel)?;
        Ok(started.elapsed().as_secs_f64())
    })?;
    Ok(seconds)
}

/// SplitMix64's output function.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(classes: u32, ns_per_row: f64) -> LossPoint {
        let rows = 1000;
        LossPoint {
            classes,
            rows,
            bytes: loss_bytes(rows, u64::from(classes)),
            seconds: ns_per_row * 1e-9 * rows as f64,
        }
    }

    #[test]
    fn the_fit_finds_a_time_per_row_and_per_byte() {
        // 60 ns a row and 1 GB/s: the pair's bytes are 12c + 8 a row.
        let exact = |c: u32| 60.0 + (12.0 * f64::from(c) + 8.0);
        let points: Vec<LossPoint> = [4, 16, 256].iter().map(|&c| point(c, exact(c))).collect();
        let fit = fit_rows_and_bytes(&points).unwrap();
        assert_eq!(fit.class, ComputeClass::Softmax);
        assert!((fit.bytes_per_s / 1e9 - 1.0).abs() < 1e-9, "{fit:?}");
        // Half the pair's time a row to each of the two operators.
        assert!((fit.seconds_per_row * 1e9 - 30.0).abs() < 1e-9, "{fit:?}");
        // A time that falls as classes grow gives no fit.
        let falling = [point(4, 100.0), point(256, 50.0)];
        assert!(fit_rows_and_bytes(&falling).is_none());
        assert!(fit_rows_and_bytes(&[point(4, 100.0)]).is_none());
    }

    #[test]
    fn the_kernels_are_timed_at_each_class_count() {
        let measured = loss_fit(&[4, 64], 2048, &Rounds::tiny()).unwrap();
        let classes: Vec<u32> = measured.points.iter().map(|p| p.classes).collect();
        assert_eq!(classes, [4, 64]);
        for p in &measured.points {
            assert_eq!(p.rows, 2048);
            assert_eq!(p.bytes, loss_bytes(2048, u64::from(p.classes)));
            assert!(p.seconds > 0.0 && p.seconds < 1.0, "{p:?}");
        }
    }
}
