//! Exponentials that vectorise: written with separate multiplies and adds
//! (no fused multiply-add) and no calls, so that a loop over them runs on
//! the widest vectors the instruction set has and every instruction set
//! gives the same bits. The softmaxes (the loss, GAT's edge softmax) and
//! ELU use them instead of the C library's scalar `exp`.

use crate::isa::Isa;

/// Below this, `e^x` is taken as 0: `e^-87` is near the smallest normal
/// `f32`, and the terms dropped are under `2^-125` each.
const EXP_LOW: f32 = -87.0;

/// `e^x` for `x ≤ 0`, within 2 units in the last place, NaN for NaN; 0 below
/// [`EXP_LOW`]: `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, `e^r` by its Taylor
/// polynomial to degree 7, times `2^n` built in the exponent bits.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // Rounds to the nearest integer: adding 1.5 · 2^23 leaves no fraction bits.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let low = x < EXP_LOW;
    let xc = if low { EXP_LOW } else { x };
    let t = xc * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // `n` is in -126..=0 here: `2^n` is a normal number.
    let bits = (t.to_bits() as i32 - ROUND.to_bits() as i32 + 127) << 23;
    let e = p * f32::from_bits(bits as u32);
    if low {
        0.0
    } else {
        e
    }
}

/// `e^x − 1` for `x ≤ 0`, within 3 units in the last place, NaN for NaN:
/// above −1 its Taylor polynomial to degree 11 (so that the result keeps
/// its precision near 0, where `e^x − 1` cancels), below it
/// `exp_nonpositive(x) − 1`.
#[inline(always)]
pub(crate) fn expm1_nonpositive(x: f32) -> f32 {
    let large = exp_nonpositive(x) - 1.0;
    // 1/k! for k = 11 down to 2.
    const C: [f32; 10] = [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];
    let mut p = C[0];
    for c in &C[1..] {
        p = p * x + c;
    }
    p = p * x + 1.0;
    let small = p * x;
    // NaN compares false: the NaN of `large`.
    if x > -1.0 {
        small
    } else {
        large
    }
}

/// `xs[i] = e^xs[i]` for values `≤ 0` ([`exp_nonpositive`]).
#[inline(always)]
fn exp_all(xs: &mut [f32]) {
    for x in xs {
        *x = exp_nonpositive(*x);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn exp_all_avx512(xs: &mut [f32]) {
        super::exp_all(xs)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn exp_all_avx2(xs: &mut [f32]) {
        super::exp_all(xs)
    }
}

/// `xs[i] = e^xs[i]` for values `≤ 0`, on `isa`: the same bits on every
/// instruction set.
pub(crate) fn exp_on(isa: Isa, xs: &mut [f32]) {
    match isa {
        Isa::Generic => exp_all(xs),
        // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::exp_all_avx512(xs) },
        // SAFETY: `Isa::Avx2` names an instruction set the CPU has.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::exp_all_avx2(xs) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place between `got` and the correctly rounded
    /// `want`.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        (got as f64 - want).abs() / ulp
    }

    #[test]
    fn exp_is_within_two_ulps_and_keeps_nan() {
        let mut worst = 0.0f64;
        for i in 0..=1_000_000 {
            let x = -87.0 * i as f32 / 1_000_000.0;
            worst = worst.max(ulps(exp_nonpositive(x), (x as f64).exp()));
        }
        assert!(worst <= 2.0, "worst error {worst} ulps");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-87.5), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn expm1_is_within_three_ulps_near_zero_and_far_and_keeps_nan() {
        let mut worst = 0.0f64;
        // Dense near 0, where `e^x − 1` cancels, then out to −100.
        let near = (1..=200_000).map(|i| -(i as f32) * 1e-6);
        let far = (0..=1_000_000).map(|i| -100.0 * i as f32 / 1_000_000.0);
        for x in near.chain(far) {
            let want = (x as f64).exp_m1();
            worst = worst.max(ulps(expm1_nonpositive(x), want));
        }
        assert!(worst <= 3.0, "worst error {worst} ulps");
        assert_eq!(expm1_nonpositive(0.0), 0.0);
        assert_eq!(expm1_nonpositive(-1e-30), -1e-30);
        assert_eq!(expm1_nonpositive(f32::NEG_INFINITY), -1.0);
        assert!(expm1_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn every_instruction_set_gives_the_same_exponentials() {
        let xs: Vec<f32> = (0..1000)
            .map(|i| -((i * 7919 % 1000) as f32) / 9.0)
            .chain([0.0, -0.0, f32::NEG_INFINITY, f32::NAN, -1e-30])
            .collect();
        let want: Vec<u32> = xs.iter().map(|&x| exp_nonpositive(x).to_bits()).collect();
        for isa in Isa::available() {
            let mut got = xs.clone();
            exp_on(isa, &mut got);
            let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{isa:?}");
        }
    }
}
