//! The exact (erf) GELU of the Qwen3-VL tower's patch mergers, on the CPU in f32: one parallel pass over the
//! values, vectorised. `0.5·v·(1 + erf(v/√2))` is computed as `0.5·v·erfc(−v/√2)`, and `erfc` with the Chebyshev
//! fit of Numerical Recipes (`erfc(z) = t·exp(−z² − 1.26551223 + t·P(t))`, `t = 1/(1 + z/2)`, relative error
//! under 1.2·10⁻⁷ for every `z ≥ 0`; `erfc(−z) = 2 − erfc(z)`), so the vector paths need only the vectorised
//! `exp` of [`crate::ops::simd`] instead of libm's scalar `erff` on one thread. Negative inputs keep their small
//! results, which `1 + erf` loses to cancellation; elsewhere the result is within a few ulps of candle's
//! `gelu_erf`. The AVX2 and AVX-512 paths give the same bits.

use candle_core::{Result, Tensor};

use crate::ops::cpu_data::map_rows;
use crate::ops::simd::Level;

/// `1/√2`.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// The fit's coefficients, constant term first, then the polynomial in `t` from its lowest power.
const C0: f32 = -1.265_512_2;
const P: [f32; 9] = [
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_204,
    1.488_515_9,
    -0.822_152_2,
    0.170_872_77,
];
/// Values handed to one parallel task.
const MIN_PER_TASK: usize = 16 * 1024;

/// One value, in the vector paths' order of operations.
fn gelu_one(v: f32) -> f32 {
    let x = v * FRAC_1_SQRT_2;
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = P[8];
    for c in P[..8].iter().rev() {
        p = p.mul_add(t, *c);
    }
    let arg = p.mul_add(t, C0) - z * z;
    // The vector paths clamp `exp`'s argument to [−87.3, 88]; the fit's argument never exceeds 0.
    let erfc = t * arg.max(-87.3).exp();
    let one_plus_erf = if x < 0.0 { erfc } else { 2.0 - erfc };
    0.5 * v * one_plus_erf
}

/// See [`crate::ops::Ops::gelu_erf`] (an f32 CPU tensor).
pub fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    gelu_erf_at(x, Level::detect())
}

/// [`gelu_erf`] on the vector path `level`, which must be one the CPU supports.
fn gelu_erf_at(x: &Tensor, level: Level) -> Result<Tensor> {
    map_rows(x, (MIN_PER_TASK, MIN_PER_TASK), 1, x.shape(), |xs, o| {
        let done = vector_part(xs, o, level);
        for (o, &v) in o[done..].iter_mut().zip(&xs[done..]) {
            *o = gelu_one(v);
        }
    })
}

/// The vector part of a run of values at `level` (one the CPU supports): how many leading values it wrote.
fn vector_part(xs: &[f32], out: &mut [f32], level: Level) -> usize {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both arms): the CPU supports `level`; `out` is as long as `xs`.
        Level::Avx512 => return unsafe { x86::run_avx512(xs, out) },
        Level::Avx2 => return unsafe { x86::run_avx2(xs, out) },
        Level::Portable => {}
    }
    let _ = (xs, out, level);
    0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{C0, FRAC_1_SQRT_2, P};
    use crate::ops::simd::{avx2::exp8, avx512::exp16};

    /// [`super::gelu_one`] on 8 lanes, operation for operation.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn gelu8(v: __m256) -> __m256 {
        let x = _mm256_mul_ps(v, _mm256_set1_ps(FRAC_1_SQRT_2));
        let z = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        let one = _mm256_set1_ps(1.0);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5), z, one));
        let mut p = _mm256_set1_ps(P[8]);
        for c in P[..8].iter().rev() {
            p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(*c));
        }
        let arg = _mm256_sub_ps(
            _mm256_fmadd_ps(p, t, _mm256_set1_ps(C0)),
            _mm256_mul_ps(z, z),
        );
        let erfc = _mm256_mul_ps(t, exp8(arg));
        let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
        let upper = _mm256_sub_ps(_mm256_set1_ps(2.0), erfc);
        let one_plus_erf = _mm256_blendv_ps(upper, erfc, negative);
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), v), one_plus_erf)
    }

    /// [`gelu8`] on 16 lanes, operation for operation (same bits).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn gelu16(v: __m512) -> __m512 {
        let x = _mm512_mul_ps(v, _mm512_set1_ps(FRAC_1_SQRT_2));
        let z = _mm512_abs_ps(x);
        let one = _mm512_set1_ps(1.0);
        let t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.5), z, one));
        let mut p = _mm512_set1_ps(P[8]);
        for c in P[..8].iter().rev() {
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(*c));
        }
        let arg = _mm512_sub_ps(
            _mm512_fmadd_ps(p, t, _mm512_set1_ps(C0)),
            _mm512_mul_ps(z, z),
        );
        let erfc = _mm512_mul_ps(t, exp16(arg));
        let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        let upper = _mm512_sub_ps(_mm512_set1_ps(2.0), erfc);
        let one_plus_erf = _mm512_mask_blend_ps(negative, upper, erfc);
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5), v), one_plus_erf)
    }

    /// Every value, 8 at a time, the last fewer than 8 through a zero-padded register (so that each value has
    /// the same bits wherever it lies); returns how many it wrote (all).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `out` must be at least as long as `xs`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn run_avx2(xs: &[f32], out: &mut [f32]) -> usize {
        let n8 = xs.len() / 8 * 8;
        for c in (0..n8).step_by(8) {
            let v = _mm256_loadu_ps(xs.as_ptr().add(c));
            _mm256_storeu_ps(out.as_mut_ptr().add(c), gelu8(v));
        }
        let rest = xs.len() - n8;
        if rest > 0 {
            let mut lanes = [0f32; 8];
            lanes[..rest].copy_from_slice(&xs[n8..]);
            let v = gelu8(_mm256_loadu_ps(lanes.as_ptr()));
            _mm256_storeu_ps(lanes.as_mut_ptr(), v);
            out[n8..xs.len()].copy_from_slice(&lanes[..rest]);
        }
        xs.len()
    }

    /// Every value, 16 at a time and then the rest through [`run_avx2`]; returns how many it wrote (all).
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA; `out` must be at least as long as `xs`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn run_avx512(xs: &[f32], out: &mut [f32]) -> usize {
        let n16 = xs.len() / 16 * 16;
        for c in (0..n16).step_by(16) {
            let v = _mm512_loadu_ps(xs.as_ptr().add(c));
            _mm512_storeu_ps(out.as_mut_ptr().add(c), gelu16(v));
        }
        n16 + run_avx2(&xs[n16..], &mut out[n16..])
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{bits, every_level};
    use super::*;
    use candle_core::Device;

    /// Every vector path this CPU supports against candle's `gelu_erf` (lengths with a 16-, 8- and scalar tail,
    /// values out to where `erfc` underflows, and zero); the AVX2 and AVX-512 paths give the same bits, and a
    /// value's result does not depend on the values around it.
    #[test]
    fn every_supported_path_matches_candles_gelu_erf() {
        let dev = Device::Cpu;
        for len in [3 * MIN_PER_TASK + 40, 40, 29] {
            let wide = Tensor::rand(-30f32, 30f32, len, &dev).unwrap();
            let near = Tensor::rand(-4f32, 4f32, len, &dev).unwrap();
            let zero = Tensor::zeros(1, candle_core::DType::F32, &dev).unwrap();
            let x = Tensor::cat(&[&wide, &near, &zero], 0).unwrap();
            let want = x.gelu_erf().unwrap();
            eprintln!("gelu_erf len={len}");
            for (level, got) in every_level(&want, 1e-6, |l| gelu_erf_at(&x, l).unwrap()) {
                let part = gelu_erf_at(&x.narrow(0, 5, 21).unwrap(), level).unwrap();
                assert_eq!(bits(&part), bits(&got.narrow(0, 5, 21).unwrap()));
            }
        }
    }

    /// Where `erfc` is tiny, the result keeps its relative accuracy (against `0.5·v·erfc(−v/√2)` with libm's
    /// `erfc` in f64): the fit's 1.2·10⁻⁷ plus the f32 rounding of `exp`'s argument `−z²…`, which grows with z².
    #[test]
    fn negative_inputs_keep_relative_accuracy() {
        let xs: Vec<f32> = (0..200).map(|i| -0.5 - i as f32 * 0.05).collect();
        let x = Tensor::new(xs.as_slice(), &Device::Cpu).unwrap();
        for level in Level::supported() {
            let got = gelu_erf_at(&x, level).unwrap().to_vec1::<f32>().unwrap();
            for (&v, &g) in xs.iter().zip(&got) {
                let want = 0.5
                    * v as f64
                    * candle_core::cpu::erf::erfc_f64(-(v as f64) / std::f64::consts::SQRT_2);
                if want.abs() < 1e-30 {
                    continue;
                }
                let rel = ((g as f64 - want) / want).abs();
                let z2 = (v * v / 2.0) as f64;
                assert!(
                    rel < 3e-7 * (1.0 + z2),
                    "{level:?}: gelu_erf({v}) = {g}, want {want} ({rel})"
                );
            }
        }
    }
}
