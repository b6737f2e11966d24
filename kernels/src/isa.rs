//! The instruction set a kernel's hot loop runs on, chosen at run time:
//! the crate is built for the baseline target, and the loops that gain
//! from wide vectors (the gathers, plain and masked, the dropout hash,
//! the loss, the activations, the exponentials of `math`) also have AVX2
//! and AVX-512 builds of the same code; on AVX-512 the dropout's keep bits are also
//! written in vector instructions (`dropout::x86::word_keep_bits`). Every
//! build does the same arithmetic in the same order, so the bits never
//! depend on the choice.

/// An instruction set this CPU has. Made only by [`Isa::detect`] and
/// [`Isa::available`], so that a variant always names an instruction set
/// the CPU runs (the `unsafe` calls of the builds rely on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    Generic,
    /// AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 F, DQ and BW (64-bit lane multiplies for the hash, 16-bit
    /// lane compares for its keep bits).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The widest instruction set this CPU has. Called on every kernel
    /// call: no allocation, and `is_x86_feature_detected!` reads a cached
    /// word after its first use.
    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if Isa::has_avx512() {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Generic
    }

    /// Every instruction set this CPU has, narrowest first (the tests run
    /// each build).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut all = vec![Isa::Generic];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Isa::Avx2);
            }
            if Isa::has_avx512() {
                all.push(Isa::Avx512);
            }
        }
        all
    }

    /// AVX-512 as [`Isa::Avx512`] needs it.
    #[cfg(target_arch = "x86_64")]
    fn has_avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
}

#[cfg(test)]
mod tests {
    use super::Isa;

    #[test]
    fn the_widest_is_the_last_available() {
        let all = Isa::available();
        assert_eq!(all[0], Isa::Generic);
        assert_eq!(Some(&Isa::detect()), all.last());
    }
}
