//! Tests of the kernels against the `f64` reference, finite differences,
//! and bit-identity across thread counts.

mod core;
mod gat;

use crate::{Block, Csr};

/// A small seeded generator (SplitMix64), so tests replay exactly.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `len` values uniform in `[-1, 1)`.
    pub(crate) fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| (2.0 * self.unit() - 1.0) as f32).collect()
    }
}

/// A random block: `rows` destinations, `src_rows` sources, degrees in
/// `0..2 * avg_degree` (so some rows are empty), random weights.
pub(crate) fn random_block(
    rng: &mut Rng,
    rows: usize,
    src_rows: usize,
    avg_degree: usize,
) -> Block {
    let mut block = Block {
        row_start: vec![0],
        ..Block::default()
    };
    for _ in 0..rows {
        let degree = if src_rows == 0 {
            0
        } else {
            rng.below(2 * avg_degree + 1)
        };
        for _ in 0..degree {
            block.columns.push(rng.below(src_rows) as u32);
            block.weights.push(rng.unit() as f32);
        }
        block.row_start.push(block.columns.len() as u64);
    }
    block
}

/// A random graph on `nodes` vertices (no self loops guaranteed).
pub(crate) fn random_csr(rng: &mut Rng, nodes: usize, edges: usize) -> Csr {
    let src: Vec<u64> = (0..edges).map(|_| rng.below(nodes) as u64).collect();
    let dst: Vec<u64> = (0..edges).map(|_| rng.below(nodes) as u64).collect();
    Csr::from_edges(nodes, &src, &dst)
}

pub(crate) fn to64(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Asserts `|a − b| ≤ tol · (1 + |b|)` elementwise.
#[track_caller]
pub(crate) fn assert_close(what: &str, a: &[f32], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x as f64 - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: kernel {x}, reference {y}"
        );
    }
}

/// Asserts `|a − b| ≤ tol · (1 + |b|)` elementwise, both in `f64`.
#[track_caller]
pub(crate) fn assert_close64(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// Runs `f` in pools of 1 and 3 threads and asserts the results are
/// bit-identical; returns the result.
#[track_caller]
pub(crate) fn same_bits_across_threads<F>(what: &str, f: F) -> Vec<f32>
where
    F: Fn() -> Vec<f32> + Send + Sync,
{
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(&f)
    };
    let one = run(1);
    let three = run(3);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&one) == bits(&three),
        "{what}: results differ between 1 and 3 threads"
    );
    one
}

/// Central finite differences of a scalar function of `x`, in `f64`.
pub(crate) fn numeric_grad(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let keep = x[i];
            x[i] = keep + h;
            let up = f(&x);
            x[i] = keep - h;
            let down = f(&x);
            x[i] = keep;
            (up - down) / (2.0 * h)
        })
        .collect()
}

pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn csr_rows_by_destination() {
    let csr = Csr::from_edges(3, &[0, 2, 1, 0], &[1, 1, 2, 0]);
    assert_eq!(csr.row(0), &[0]);
    assert_eq!(csr.row(1), &[0, 2]);
    assert_eq!(csr.row(2), &[1]);
    assert_eq!(csr.rows(), 3);
    let block = Block::from_csr(&csr, &[1.0, 2.0, 3.0, 4.0], 1..3, 0..2);
    assert_eq!(block.row_start, vec![0, 1, 2]);
    assert_eq!(block.columns, vec![0, 1]);
    assert_eq!(block.weights, vec![2.0, 4.0]);
}
