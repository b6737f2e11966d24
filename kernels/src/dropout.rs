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

use rayon::prelude::*;

use crate::isa::Isa;
use crate::{ensure, Result, ROW_CHUNK};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Elements that share one 64-bit hash.
pub const GROUP: usize = 4;
/// The shortest run whose keep bits [`Mask::fill_bits`] (the generic and
/// AVX2 builds) hashes as whole words shifted into place when it does not
/// start on a word: at most a word more than the run, a quarter more
/// hashes at this length. On AVX-512 a word's bits cost a few vector
/// instructions, so runs of a word or more are all taken by words.
const SHIFTED_WORDS_FROM: usize = 256;

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

/// Which rows of the whole graph a tensor's rows are: the mask of row `r`'s
/// element `f` is that of global element `key(r) * width + f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKeys<'a> {
    /// Rows `first, first + 1, ...`: one device, or a device's share of a
    /// range of vertices.
    Contiguous(u64),
    /// Row `r` is row `ids[r]`: renumbered vertices (a device's min-cut
    /// share keys its rows by their number in the whole graph as given).
    Ids(&'a [u64]),
}

impl<'a> RowKeys<'a> {
    /// The whole graph's row of row `r`.
    #[inline(always)]
    pub fn key(&self, r: usize) -> u64 {
        match *self {
            RowKeys::Contiguous(first) => first + r as u64,
            RowKeys::Ids(ids) => ids[r],
        }
    }

    /// The keys of rows `n..`.
    pub fn skip(&self, n: usize) -> RowKeys<'a> {
        match *self {
            RowKeys::Contiguous(first) => RowKeys::Contiguous(first + n as u64),
            RowKeys::Ids(ids) => RowKeys::Ids(&ids[n.min(ids.len())..]),
        }
    }

    /// `Ids` must name every one of `rows` rows.
    pub(crate) fn check(&self, kernel: &str, rows: usize) -> Result<()> {
        match self {
            RowKeys::Contiguous(_) => Ok(()),
            RowKeys::Ids(ids) => ensure(ids.len() >= rows, || {
                format!(
                    "{kernel}: {} row keys for {rows} rows of the masked tensor",
                    ids.len()
                )
            }),
        }
    }
}

impl From<u64> for RowKeys<'_> {
    fn from(first: u64) -> Self {
        RowKeys::Contiguous(first)
    }
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

    /// The mask as a kernel on another device evaluates it: the key, the
    /// 16-bit threshold (0: no dropout) and the factor of kept elements.
    /// Element `i` is kept when the 16 bits `16 * (i % 4)` of
    /// SplitMix64's output function of `key + (i / 4) * GOLDEN` are at
    /// least the threshold.
    pub fn device_params(&self) -> (u64, u32, f32) {
        let mask = self.mask();
        (mask.key, mask.threshold, mask.scale)
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

    /// The keep bits of the 4 elements of a group, bit `k` for lane `k`.
    #[inline(always)]
    fn group_keep_bits(&self, group: u64) -> u64 {
        let bits = self.group_bits(group);
        let mut keep = 0;
        for k in 0..GROUP {
            let u = (bits >> (16 * k)) as u32 & 0xFFFF;
            keep |= ((u >= self.threshold) as u64) << k;
        }
        keep
    }

    /// [`Mask::fill_bits`] on `isa`: the hash is 64-bit multiplies, which
    /// only AVX-512 DQ has as vector instructions, and on AVX-512 a word's
    /// 64 threshold compares are one BW compare of 16-bit lanes.
    pub(crate) fn fill_bits_on(&self, isa: Isa, start: u64, len: usize, out: &mut [u64]) {
        match isa {
            Isa::Generic => self.fill_bits(start, len, out),
            // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::fill_bits_avx512(self, start, len, out) },
            // SAFETY: as above, for AVX2.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::fill_bits_avx2(self, start, len, out) },
        }
    }

    /// `row[f] = from[f] * factor(start + f)` (`row[f] *= factor(start +
    /// f)` without `from`, which has `row`'s length where given): dropout
    /// on one row, through its keep bits (`scratch` holds at least
    /// `ceil(row.len() / 64)` words). The same products as multiplying by
    /// [`Mask::fill`]'s factors.
    pub(crate) fn apply_on(
        &self,
        isa: Isa,
        start: u64,
        from: Option<&[f32]>,
        row: &mut [f32],
        scratch: &mut [u64],
    ) {
        match isa {
            Isa::Generic => self.apply(start, from, row, scratch),
            // SAFETY: `Isa::Avx512` names an instruction set the CPU has.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { x86::apply_avx512(self, start, from, row, scratch) },
            // SAFETY: as above, for AVX2.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { x86::apply_avx2(self, start, from, row, scratch) },
        }
    }

    #[inline(always)]
    fn apply(&self, start: u64, from: Option<&[f32]>, row: &mut [f32], scratch: &mut [u64]) {
        let bits = &mut scratch[..row.len().div_ceil(64)];
        self.fill_bits(start, row.len(), bits);
        self.apply_bits(from, row, bits);
    }

    #[inline(always)]
    fn apply_bits(&self, from: Option<&[f32]>, row: &mut [f32], bits: &[u64]) {
        const LANES: usize = 16;
        if let Some(from) = from {
            assert_eq!(from.len(), row.len(), "a masked copy's lengths");
        }
        let blocked = row.len() / LANES * LANES;
        for j in 0..blocked / LANES {
            let m = factors16((bits[j / 4] >> (LANES * (j % 4))) as u32, self.scale);
            let v = &mut row[j * LANES..][..LANES];
            match from {
                Some(from) => {
                    let x = &from[j * LANES..][..LANES];
                    for k in 0..LANES {
                        v[k] = x[k] * m[k];
                    }
                }
                None => {
                    for k in 0..LANES {
                        v[k] *= m[k];
                    }
                }
            }
        }
        for f in blocked..row.len() {
            let x = from.map_or(row[f], |from| from[f]);
            row[f] = x * factor(bits, f, self.scale);
        }
    }

    /// Writes the keep bits of elements `start..start + len` into `out`
    /// (`ceil(len / 64)` words): bit `f % 64` of word `f / 64` for element
    /// `start + f`. Bits past `len` are 0.
    #[inline(always)]
    pub(crate) fn fill_bits(&self, start: u64, len: usize, out: &mut [u64]) {
        debug_assert_eq!(out.len(), len.div_ceil(64));
        let shift = (start % 64) as usize;
        if shift == 0 || len < SHIFTED_WORDS_FROM {
            return self.fill_bits_by_groups(start, len, out);
        }
        // Whole words of the mask's bits from a multiple of 64 on, each
        // shifted into place: the hashes of a word vectorise, one group's
        // bits at an odd offset do not.
        fill_words(start, len, out, |w| self.word_keep_bits(w))
    }

    /// `row = from * mask` (`row *= mask` without `from`) for each row of
    /// `rows` (`width` wide), row `r` keyed by `keys.key(r)`.
    pub(crate) fn apply_rows(
        &self,
        isa: Isa,
        keys: RowKeys,
        from: Option<&[f32]>,
        rows: &mut [f32],
        width: usize,
    ) {
        let mut scratch = vec![0u64; width.div_ceil(64)];
        for (r, row) in rows.chunks_exact_mut(width).enumerate() {
            let from = from.map(|from| &from[r * width..][..width]);
            self.apply_on(isa, keys.key(r) * width as u64, from, row, &mut scratch);
        }
    }

    /// The keep bits of elements `64 * word ..`: bit `k` for element
    /// `64 * word + k`.
    #[inline(always)]
    fn word_keep_bits(&self, word: u64) -> u64 {
        let group = word.wrapping_mul((64 / GROUP) as u64);
        let mut bits = 0;
        for k in 0..64 / GROUP {
            bits |= self.group_keep_bits(group.wrapping_add(k as u64)) << (GROUP * k);
        }
        bits
    }

    /// [`Mask::fill_bits`] group by group (a short run, or one that starts
    /// on a word).
    #[inline(always)]
    fn fill_bits_by_groups(&self, start: u64, len: usize, out: &mut [u64]) {
        out.fill(0);
        let mut f = 0;
        // Leading elements up to a group boundary.
        while !(start + f as u64).is_multiple_of(GROUP as u64) && f < len {
            out[f / 64] |= (self.keep(start + f as u64) as u64) << (f % 64);
            f += 1;
        }
        let mut group = (start + f as u64) / GROUP as u64;
        if f == 0 {
            // Aligned: 16 whole groups a word.
            for word in out.iter_mut().take(len / 64) {
                let mut bits = 0;
                for k in 0..64 / GROUP {
                    bits |= self.group_keep_bits(group + k as u64) << (GROUP * k);
                }
                *word = bits;
                f += 64;
                group += (64 / GROUP) as u64;
            }
        }
        while f + GROUP <= len {
            let keep = self.group_keep_bits(group);
            let shift = f % 64;
            out[f / 64] |= keep << shift;
            if shift > 64 - GROUP {
                out[f / 64 + 1] |= keep >> (64 - shift);
            }
            f += GROUP;
            group += 1;
        }
        while f < len {
            out[f / 64] |= (self.keep(start + f as u64) as u64) << (f % 64);
            f += 1;
        }
    }

    /// Writes the factors (0 or `scale`) of elements `start..start +
    /// out.len()` into `out`.
    #[inline]
    pub(crate) fn fill(&self, start: u64, out: &mut [f32]) {
        let (threshold, scale) = (self.threshold, self.scale);
        let mut index = start;
        let mut rest = out;
        // Leading elements up to a group boundary.
        while !index.is_multiple_of(GROUP as u64) && !rest.is_empty() {
            rest[0] = if self.keep(index) { scale } else { 0.0 };
            rest = &mut rest[1..];
            index = index.wrapping_add(1);
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
        if tail.is_empty() {
            return;
        }
        let bits = self.group_bits(group);
        for (k, v) in tail.iter_mut().enumerate() {
            let u = (bits >> (16 * k)) as u32 & 0xFFFF;
            *v = if u >= threshold { scale } else { 0.0 };
        }
    }
}

/// The keep bits of a `rows × width` block of a mask, computed once so that
/// a kernel that reads an element many times (the SpMM gather reads a
/// source row once per edge) hashes it once. Row `r` holds
/// `words_per_row = ceil(width / 64)` words; bit `f % 64` of word `f / 64`
/// is set iff element `keys.key(r) * width + f` is kept. The workspace is
/// `rows * ceil(width / 64) * 8` bytes: 1/32 of the tensor when `width`
/// is a multiple of 64 (16 MiB for 1M rows × 128).
#[derive(Debug, Clone)]
pub(crate) struct MaskBits {
    words: Vec<u64>,
    pub(crate) words_per_row: usize,
}

impl MaskBits {
    /// Fills the bits in parallel over chunks of [`ROW_CHUNK`] rows; each
    /// row's bits depend only on the mask and its index. With `used`,
    /// only the rows it marks (`used[r]`); the other rows' words are left
    /// 0 and are not to be read.
    pub(crate) fn new(
        mask: &Mask,
        keys: RowKeys,
        rows: usize,
        width: usize,
        isa: Isa,
        used: Option<&[bool]>,
    ) -> MaskBits {
        let words_per_row = width.div_ceil(64);
        let mut words = vec![0u64; rows * words_per_row];
        if words_per_row > 0 {
            words
                .par_chunks_mut(ROW_CHUNK * words_per_row)
                .enumerate()
                .for_each(|(chunk, part)| {
                    for (k, row) in part.chunks_exact_mut(words_per_row).enumerate() {
                        let r = chunk * ROW_CHUNK + k;
                        if used.is_none_or(|used| used[r]) {
                            mask.fill_bits_on(isa, keys.key(r) * width as u64, width, row);
                        }
                    }
                });
        }
        MaskBits {
            words,
            words_per_row,
        }
    }

    /// The bits of row `r`.
    #[inline(always)]
    pub(crate) fn row(&self, r: usize) -> &[u64] {
        &self.words[r * self.words_per_row..(r + 1) * self.words_per_row]
    }
}

/// The keep bits of elements `start..start + len` into `out` from whole
/// words' bits (`word(w)`: elements `64 w ..`), shifted into place where
/// the run does not start on a word; bits past `len` are 0.
#[inline(always)]
fn fill_words(start: u64, len: usize, out: &mut [u64], word: impl Fn(u64) -> u64) {
    let (first, shift) = (start / 64, (start % 64) as u32);
    if shift == 0 {
        for (i, out) in out.iter_mut().enumerate() {
            *out = word(first + i as u64);
        }
    } else {
        let mut next = word(first);
        for (i, out) in out.iter_mut().enumerate() {
            let low = next;
            next = word(first + i as u64 + 1);
            *out = (low >> shift) | (next << (64 - shift));
        }
    }
    if !len.is_multiple_of(64) {
        if let Some(last) = out.last_mut() {
            *last &= (1u64 << (len % 64)) - 1;
        }
    }
}

/// The builds of the mask loops for wider instruction sets: the same code,
/// compiled with more target features, and on AVX-512 the keep bits of a
/// word in vector instructions.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Mask, GOLDEN, GROUP};

    /// Groups a word's keep bits come from.
    const WORD_GROUPS: u64 = (64 / GROUP) as u64;

    /// SplitMix64's output function on 8 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn mix64x8(z: __m512i) -> __m512i {
        let z = _mm512_xor_si512(z, _mm512_srli_epi64::<30>(z));
        let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(0xBF58_476D_1CE4_E5B9u64 as i64));
        let z = _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z));
        let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(0x94D0_49BB_1331_11EBu64 as i64));
        _mm512_xor_si512(z, _mm512_srli_epi64::<31>(z))
    }

    /// [`Mask::word_keep_bits`]: the 16 groups' hashes in two vectors,
    /// each hash four 16-bit lanes, element `4g + k` the `k`-th lane of
    /// group `g`; one unsigned compare of the 32 lanes of each vector
    /// against the threshold gives 32 keep bits in element order.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512bw")]
    fn word_keep_bits(mask: &Mask, word: u64) -> u64 {
        let step = |k: u64| k.wrapping_mul(GOLDEN) as i64;
        let base = mask
            .key
            .wrapping_add(word.wrapping_mul(WORD_GROUPS).wrapping_mul(GOLDEN));
        let low = _mm512_add_epi64(
            _mm512_set1_epi64(base as i64),
            _mm512_setr_epi64(
                step(0),
                step(1),
                step(2),
                step(3),
                step(4),
                step(5),
                step(6),
                step(7),
            ),
        );
        let high = _mm512_add_epi64(low, _mm512_set1_epi64(step(8)));
        let threshold = _mm512_set1_epi16(mask.threshold as u16 as i16);
        let low = _mm512_cmpge_epu16_mask(mix64x8(low), threshold);
        let high = _mm512_cmpge_epu16_mask(mix64x8(high), threshold);
        low as u64 | (high as u64) << 32
    }

    /// [`Mask::fill_bits`] with the words' bits from [`word_keep_bits`],
    /// shifted into place where the run does not start on a word; a run
    /// shorter than a word group by group.
    #[target_feature(enable = "avx512f,avx512dq,avx512bw")]
    pub(super) fn fill_bits_avx512(mask: &Mask, start: u64, len: usize, out: &mut [u64]) {
        debug_assert_eq!(out.len(), len.div_ceil(64));
        if len < 64 {
            return mask.fill_bits_by_groups(start, len, out);
        }
        super::fill_words(start, len, out, |w| word_keep_bits(mask, w))
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn fill_bits_avx2(mask: &Mask, start: u64, len: usize, out: &mut [u64]) {
        mask.fill_bits(start, len, out)
    }

    #[target_feature(enable = "avx512f,avx512dq,avx512bw")]
    pub(super) fn apply_avx512(
        mask: &Mask,
        start: u64,
        from: Option<&[f32]>,
        row: &mut [f32],
        scratch: &mut [u64],
    ) {
        let bits = &mut scratch[..row.len().div_ceil(64)];
        fill_bits_avx512(mask, start, row.len(), bits);
        mask.apply_bits(from, row, bits)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn apply_avx2(
        mask: &Mask,
        start: u64,
        from: Option<&[f32]>,
        row: &mut [f32],
        scratch: &mut [u64],
    ) {
        mask.apply(start, from, row, scratch)
    }
}

/// The factor of element `f` of a row with keep bits `bits`.
#[inline(always)]
pub(crate) fn factor(bits: &[u64], f: usize, scale: f32) -> f32 {
    if bits[f / 64] >> (f % 64) & 1 == 1 {
        scale
    } else {
        0.0
    }
}

/// The factors of 16 consecutive elements whose keep bits are the low 16
/// bits of `bits`: `scale` where the bit is set, `0.0` elsewhere. Written
/// as a broadcast, an AND with the lane's bit and a compare, so that it
/// vectorises.
#[inline(always)]
pub(crate) fn factors16(bits: u32, scale: f32) -> [f32; 16] {
    let mut m = [0.0f32; 16];
    for (k, v) in m.iter_mut().enumerate() {
        *v = if bits & (1 << k) != 0 { scale } else { 0.0 };
    }
    m
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
    fn thresholds_are_kept_when_reached() {
        // Element `i` keeps when its 16 bits are at least the threshold:
        // with the threshold set to an element's own bits (the upper half
        // of the range too), it keeps, and one above, it drops.
        let d = Dropout::new(0.5, 3, 5).unwrap();
        let base = d.mask();
        let u = |i: u64| (base.group_bits(i / 4) >> (16 * (i % 4))) as u32 & 0xFFFF;
        let start = 1_000_003u64;
        let len = 300usize;
        let mut seen_high = false;
        for f in (0..len as u64).step_by(7) {
            let i = start + f;
            let bits = u(i);
            seen_high |= bits >= 32768;
            for (threshold, kept) in [(bits, true), (bits + 1, false)] {
                if threshold == 0 || threshold > 65535 {
                    continue;
                }
                let m = Mask { threshold, ..base };
                assert_eq!(m.keep(i), kept, "element {i}, threshold {threshold}");
                for isa in Isa::available() {
                    let mut out = vec![0u64; len.div_ceil(64)];
                    m.fill_bits_on(isa, start, len, &mut out);
                    let bit = out[f as usize / 64] >> (f % 64) & 1 == 1;
                    assert_eq!(bit, kept, "{isa:?} element {i}, threshold {threshold}");
                }
            }
        }
        assert!(seen_high, "no element's bits in the upper half");
    }

    #[test]
    fn bits_match_keep_at_any_offset() {
        let d = Dropout::new(0.3, 7, 11).unwrap();
        let m = d.mask();
        let specials = [-0.0, 0.0, f32::INFINITY, f32::NAN, -1.5];
        for isa in Isa::available() {
            // Long runs off a word's start are hashed a word at a time.
            for start in (0..9u64).chain([63, 65, 127, 970_141, u64::MAX / 2 + 3]) {
                let long = [191, 192, 193, 255, 256, 257, 320, 1433];
                for len in (0..140usize).chain(long) {
                    let mut out = vec![u64::MAX; len.div_ceil(64)];
                    m.fill_bits_on(isa, start, len, &mut out);
                    for f in 0..len.div_ceil(64) * 64 {
                        let bit = out[f / 64] >> (f % 64) & 1 == 1;
                        let expect = f < len && d.keep(start + f as u64);
                        assert_eq!(bit, expect, "{isa:?} start {start} len {len} f {f}");
                    }
                    // Dropout on a row: the same bits as the products with
                    // `fill`'s factors, signed zeros and NaN included.
                    let row: Vec<f32> = (0..len)
                        .map(|f| specials.get(f % 13).copied().unwrap_or(f as f32 - 60.5))
                        .collect();
                    let mut factors = vec![0.0; len];
                    m.fill(start, &mut factors);
                    let expect: Vec<u32> = row
                        .iter()
                        .zip(&factors)
                        .map(|(x, m)| (x * m).to_bits())
                        .collect();
                    let mut got = row.clone();
                    m.apply_on(isa, start, None, &mut got, &mut vec![0; len.div_ceil(64)]);
                    let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(got, expect, "{isa:?} start {start} len {len}");
                }
            }
        }
        for width in [1, 3, 7, 64, 100, 128] {
            let rows = 2 * ROW_CHUNK + 5;
            let bits = MaskBits::new(
                &m,
                RowKeys::Contiguous(13),
                rows,
                width,
                Isa::detect(),
                None,
            );
            for r in 0..rows {
                for (f, j) in (0..width).step_by(16).zip(0..) {
                    let word = bits.row(r)[f / 64];
                    let factors = factors16((word >> (16 * (j % 4))) as u32, m.scale);
                    for (k, &v) in factors.iter().enumerate().take(width - f) {
                        let index = (13 + r as u64) * width as u64 + (f + k) as u64;
                        assert_eq!(v, d.value(index), "width {width} r {r} f {}", f + k);
                    }
                }
            }
        }
    }

    #[test]
    fn device_params_give_the_same_mask() {
        // The formula of kernels/cuda/prelude.cuh (`mask_keep`), from the
        // parameters the CUDA backend passes.
        for (p, seed, stream) in [(0.5f32, 1u64, 0u64), (0.3, 99, 7 << 16), (0.0, 3, 4)] {
            let d = Dropout::new(p, seed, stream).unwrap();
            let (key, threshold, scale) = d.device_params();
            assert_eq!(scale, d.scale());
            assert_eq!(threshold == 0, d.is_identity());
            for i in 0..4096u64 {
                let bits = mix64(key.wrapping_add((i >> 2).wrapping_mul(GOLDEN)));
                let u = (bits >> (16 * (i & 3))) as u32 & 0xFFFF;
                let value = if threshold == 0 {
                    1.0
                } else if u >= threshold {
                    scale
                } else {
                    0.0
                };
                assert_eq!(value, d.value(i), "p {p} element {i}");
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
