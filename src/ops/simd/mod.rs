//! AVX2/FMA and AVX-512 building blocks of the fused CPU ops (`attention::cpu`, `elementwise::cpu`); callers pick a
//! [`Level`] at run time ([`Level::detect`]) and call only the functions of a level the CPU supports.
//!
//! The AVX-512 functions compute every lane with the same operations in the same order as the AVX2 ones (and
//! reduce sums in the same 8-lane order), so both levels give the same bits: a run's fused ops do not depend on
//! which of the two the CPU has.

/// The widest vector path the fused CPU ops may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Plain Rust (any CPU).
    Portable,
    /// AVX2 and FMA, 8 lanes.
    Avx2,
    /// AVX-512F (with AVX2 and FMA), 16 lanes.
    Avx512,
}

impl Level {
    /// The widest level this CPU supports (checked once).
    pub fn detect() -> Self {
        static LEVEL: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
        *LEVEL.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                return if is_x86_feature_detected!("avx512f") {
                    Level::Avx512
                } else {
                    Level::Avx2
                };
            }
            Level::Portable
        })
    }

    /// Every level this CPU supports, narrowest first (for tests that run them all).
    #[cfg(test)]
    pub fn supported() -> Vec<Self> {
        [Level::Portable, Level::Avx2, Level::Avx512]
            .into_iter()
            .filter(|l| *l <= Self::detect())
            .collect()
    }
}

/// `f()` inlined into a function compiled for the widest vector level this CPU has, so that plain loops in `f`
/// (conversions, roundings, elementwise arithmetic without a reduction) are vectorised at that width; the
/// binary itself targets baseline x86-64. Elementwise IEEE arithmetic gives the same bits at every width.
#[inline(always)]
pub(crate) fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    match Level::detect() {
        // SAFETY (both arms): the CPU has the features the wrappers enable (Level::detect checked them).
        Level::Avx512 => return unsafe { wide::avx512(f) },
        Level::Avx2 => return unsafe { wide::avx2(f) },
        Level::Portable => {}
    }
    f()
}

#[cfg(target_arch = "x86_64")]
mod wide {
    /// `f()` compiled with AVX-512F enabled.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// `f()` compiled with AVX2 and FMA enabled.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// True when this CPU has AVX2 and FMA (checked once).
    pub(crate) fn available() -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ON.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    /// `exp` of 8 lanes: range reduction by ln 2 (split in two constants) and a degree-5 polynomial
    /// (the Cephes `expf` scheme, about 1 ulp), inputs clamped to [-87.3, 88].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.3)),
            _mm256_set1_ps(88.0),
        );
        let n = _mm256_round_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_2e-4);
        for c in [
            1.398_199_9e-3,
            8.333_452e-3,
            4.166_579_6e-2,
            0.166_666_65,
            0.5,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_fmadd_ps(
            _mm256_mul_ps(p, r),
            r,
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        let pow2 = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
            23,
        );
        _mm256_mul_ps(y, _mm256_castsi256_ps(pow2))
    }

    /// `out[c] = silu(g[c] + bg[c]) · (u[c] + bu[c])` (biases optional) for the first ⌊n/8⌋·8 columns, 8 at a
    /// time, with [`exp8`] for `exp`; returns how many columns it wrote (the caller finishes the rest).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `u`, `out` and the biases must be at least as long as `g`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn swiglu_row(
        g: &[f32],
        u: &[f32],
        bias: Option<(&[f32], &[f32])>,
        out: &mut [f32],
    ) -> usize {
        let n8 = g.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        let zero = _mm256_setzero_ps();
        for c in (0..n8).step_by(8) {
            let mut gv = _mm256_loadu_ps(g.as_ptr().add(c));
            let mut uv = _mm256_loadu_ps(u.as_ptr().add(c));
            if let Some((bg, bu)) = bias {
                gv = _mm256_add_ps(gv, _mm256_loadu_ps(bg.as_ptr().add(c)));
                uv = _mm256_add_ps(uv, _mm256_loadu_ps(bu.as_ptr().add(c)));
            }
            let e = exp8(_mm256_sub_ps(zero, gv));
            let s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
            _mm256_storeu_ps(out.as_mut_ptr().add(c), _mm256_mul_ps(s, uv));
        }
        n8
    }
}
