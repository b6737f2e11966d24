//! Dropout masks from a counter-based generator, so that a mask is never
//! stored: the forward and the backward regenerate it from the element's
//! global index.
//!
//! Element `i` of a tensor (for a row-major `rows × width` tensor,
//! `i = global_row * width + column`) belongs to group `i / 4`. A group's
//! 64 random bits are SplitMix64's output function applied to
//! `key + group * GOLDEN`, where `key` mixes `seed` and `stream`; element
//! `i` takes the 16 bits `16 * (i % 4)..` of its group and is kept when
//! they are at least `round(p * 65536)`. A kept element is scaled by
//! `1 / (1 - p)`, a dropped one becomes 0. The mask therefore depends only
//! on `(seed, stream, i)`, bit for bit, on every machine.

use crate::{ensure, Result};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Elements that share one 64-bit hash.
pub const GROUP: usize = 4;

/// Inverted dropout with drop probability `p`; `p == 0` is the identity.
/// The executor picks `stream` per (epoch, layer, site) so that every mask
/// differs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropout {
    pub p: f32,
    pub seed: u64,
    pub stream: u64,
}

#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A dropout mask ready to evaluate: the key and the integer threshold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mask {
    key: u64,
    threshold: u32,
    pub(crate) scale: f32,
}

impl Dropout {
    pub fn new(p: f32, seed: u64, stream: u64) -> Result<Dropout> {
        let dropout = Dropout { p, seed, stream };
        dropout.validate()?;
        Ok(dropout)
    }

    /// `p` must lie in `[0, 1)`.
    pub fn validate(&self) -> Result<()> {
        ensure((0.0..1.0).contains(&self.p), || {
            format!("dropout: `p` is {}, expected a value in [0, 1)", self.p)
        })
    }

    pub fn is_identity(&self) -> bool {
        self.threshold() == 0
    }

    fn threshold(&self) -> u32 {
        ((self.p as f64 * 65536.0).round() as u32).min(65535)
    }

    /// `1 / (1 - p)` in `f32`, the factor applied to kept elements.
    pub fn scale(&self) -> f32 {
        1.0 / (1.0 - self.p)
    }

    pub(crate) fn mask(&self) -> Mask {
        Mask {
            key: mix64(self.seed ^ mix64(self.stream.wrapping_add(GOLDEN))),
            threshold: self.threshold(),
            scale: self.scale(),
        }
    }

    /// Whether element `index` is kept.
    pub fn keep(&self, index: u64) -> bool {
        self.mask().keep(index)
    }

    /// The factor for element `index`: 0 or `1 / (1 - p)` (1 when `p == 0`).
    pub fn value(&self, index: u64) -> f32 {
        if self.is_identity() {
            1.0
        } else if self.keep(index) {
            self.scale()
        } else {
            0.0
        }
    }
}

impl Mask {
    #[inline(always)]
    fn group_bits(&self, group: u64) -> u64 {
        mix64(self.key.wrapping_add(group.wrapping_mul(GOLDEN)))
    }

    #[inline]
    pub(crate) fn keep(&self, index: u64) -> bool {
        let bits = self.group_bits(index / GROUP as u64);
        let u = (bits >> (16 * (index % GROUP as u64))) as u32 & 0xFFFF;
        u >= self.threshold
    }

    /// Writes the factors (0 or `scale`) of elements `start..start +
    /// out.len()` into `out`.
    #[inline]
    pub(crate) fn fill(&self, start: u64, out: &mut [f32]) {
        let (threshold, scale) = (self.threshold, self.scale);
        let mut index = start;
        let mut rest = out;
        // Leading elements up to a group boundary.
        while index % GROUP as u64 != 0 && !rest.is_empty() {
            rest[0] = if self.keep(index) { scale } else { 0.0 };
            rest = &mut rest[1..];
            index += 1;
        }
        let mut group = index / GROUP as u64;
        let mut quads = rest.chunks_exact_mut(GROUP);
        for quad in &mut quads {
            let bits = self.group_bits(group);
            for (k, v) in quad.iter_mut().enumerate() {
                let u = (bits >> (16 * k)) as u32 & 0xFFFF;
                *v = if u >= threshold { scale } else { 0.0 };
            }
            group += 1;
        }
        let tail = quads.into_remainder();
        let bits = self.group_bits(group);
        for (k, v) in tail.iter_mut().enumerate() {
            let u = (bits >> (16 * k)) as u32 & 0xFFFF;
            *v = if u >= threshold { scale } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_keep_at_any_offset() {
        let d = Dropout::new(0.3, 7, 11).unwrap();
        let m = d.mask();
        for start in 0..9u64 {
            for len in 0..13usize {
                let mut out = vec![-1.0; len];
                m.fill(start, &mut out);
                for (k, &v) in out.iter().enumerate() {
                    assert_eq!(v, d.value(start + k as u64), "start {start} k {k}");
                }
            }
        }
    }

    #[test]
    fn keep_rate_is_close_to_one_minus_p() {
        for p in [0.1f32, 0.5, 0.6] {
            let d = Dropout::new(p, 1, 2).unwrap();
            let n = 200_000u64;
            let kept = (0..n).filter(|&i| d.keep(i)).count() as f64 / n as f64;
            assert!(
                (kept - (1.0 - p as f64)).abs() < 0.005,
                "p {p}: kept {kept}"
            );
        }
    }

    #[test]
    fn streams_differ_and_p_is_checked() {
        let a = Dropout::new(0.5, 1, 0).unwrap();
        let b = Dropout::new(0.5, 1, 1).unwrap();
        let same = (0..1000u64).filter(|&i| a.keep(i) == b.keep(i)).count();
        assert!((400..600).contains(&same), "{same}");
        assert!(Dropout::new(1.0, 0, 0).is_err());
        assert!(Dropout::new(-0.1, 0, 0).is_err());
        assert!(Dropout::new(f32::NAN, 0, 0).is_err());
        assert!(Dropout::new(0.0, 0, 0).unwrap().is_identity());
        assert_eq!(Dropout::new(0.0, 0, 0).unwrap().value(5), 1.0);
    }
}
