//! The bias plus tanh-GELU after the Qwen3-VL vision MLP's first projection, fused on the CPU in f32: one parallel
//! pass over the rows. `0.5·v·(1 + tanh(u))` is computed as `v / (1 + exp(−2u))` (the same function: `0.5·(1 +
//! tanh(u))` is the logistic of `2u`), so the vector paths need only the vectorised `exp` of
//! [`crate::ops::simd`] instead of libm's scalar `tanh` (which made this pass as slow as the projection itself).
//! The result is within a few ulps of candle's `gelu`; the AVX2 and AVX-512 paths give the same bits.

use candle_core::{Result, Tensor, D};

use crate::ops::cpu_data::map_rows;
use crate::ops::simd::Level;

/// `√(2/π)`, the tanh-GELU's scale.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic term's coefficient.
const CUBIC: f32 = 0.044_715;
/// Rows handed to one parallel task (a row is 4,096–4,608 values in the released towers).
const MIN_ROWS_PER_TASK: usize = 8;

/// One value: `v / (1 + exp(−2·√(2/π)·v·(1 + 0.044715·v²)))` with `v = y + b`, in the vector paths' order.
fn gelu_one(y: f32, b: f32) -> f32 {
    let v = y + b;
    let u = (SQRT_2_OVER_PI * v) * (1.0 + CUBIC * (v * v));
    v / (1.0 + (-2.0 * u).exp())
}

/// See [`crate::ops::Ops::bias_gelu_tanh`] (f32 CPU `y` (…, width) and bias (width)).
pub fn bias_gelu_tanh(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    bias_gelu_tanh_at(y, b, Level::detect())
}

/// [`bias_gelu_tanh`] on the vector path `level`, which must be one the CPU supports.
fn bias_gelu_tanh_at(y: &Tensor, b: &Tensor, level: Level) -> Result<Tensor> {
    let width = y.dim(D::Minus1)?;
    if b.dims() != [width] {
        candle_core::bail!("bias_gelu_tanh: bias {:?} for rows of {width}", b.dims());
    }
    let b = b.to_vec1::<f32>()?;
    map_rows(y, (width, width), MIN_ROWS_PER_TASK, y.shape(), |row, o| {
        let done = vector_row(row, &b, o, level);
        for ((o, &y), &b) in o[done..].iter_mut().zip(&row[done..]).zip(&b[done..]) {
            *o = gelu_one(y, b);
        }
    })
}

/// The vector part of one row at `level` (one the CPU supports): how many leading columns it wrote.
fn vector_row(y: &[f32], b: &[f32], out: &mut [f32], level: Level) -> usize {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both arms): the CPU supports `level`; `b` and `out` are as long as `y` (one row).
        Level::Avx512 => return unsafe { x86::row_avx512(y, b, out) },
        Level::Avx2 => return unsafe { x86::row_avx2(y, b, out) },
        Level::Portable => {}
    }
    let _ = (y, b, out, level);
    0
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{CUBIC, SQRT_2_OVER_PI};
    use crate::ops::simd::{avx2::exp8, avx512::exp16};

    /// [`super::gelu_one`] on 8 lanes, operation for operation.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn gelu8(y: __m256, b: __m256) -> __m256 {
        let v = _mm256_add_ps(y, b);
        let inner = _mm256_add_ps(
            _mm256_set1_ps(1.0),
            _mm256_mul_ps(_mm256_set1_ps(CUBIC), _mm256_mul_ps(v, v)),
        );
        let u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(SQRT_2_OVER_PI), v), inner);
        let e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0), u));
        _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// [`gelu8`] on 16 lanes, operation for operation (same bits).
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn gelu16(y: __m512, b: __m512) -> __m512 {
        let v = _mm512_add_ps(y, b);
        let inner = _mm512_add_ps(
            _mm512_set1_ps(1.0),
            _mm512_mul_ps(_mm512_set1_ps(CUBIC), _mm512_mul_ps(v, v)),
        );
        let u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(SQRT_2_OVER_PI), v), inner);
        let e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0), u));
        _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), e))
    }

    /// The first ⌊n/8⌋·8 columns of a row, 8 at a time; returns how many it wrote.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `b` and `out` must be at least as long as `y`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn row_avx2(y: &[f32], b: &[f32], out: &mut [f32]) -> usize {
        let n8 = y.len() / 8 * 8;
        for c in (0..n8).step_by(8) {
            let yv = _mm256_loadu_ps(y.as_ptr().add(c));
            let bv = _mm256_loadu_ps(b.as_ptr().add(c));
            _mm256_storeu_ps(out.as_mut_ptr().add(c), gelu8(yv, bv));
        }
        n8
    }

    /// The first ⌊n/8⌋·8 columns of a row, 16 at a time and then 8 through [`row_avx2`]; returns how many it
    /// wrote.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA; `b` and `out` must be at least as long as `y`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn row_avx512(y: &[f32], b: &[f32], out: &mut [f32]) -> usize {
        let n16 = y.len() / 16 * 16;
        for c in (0..n16).step_by(16) {
            let yv = _mm512_loadu_ps(y.as_ptr().add(c));
            let bv = _mm512_loadu_ps(b.as_ptr().add(c));
            _mm512_storeu_ps(out.as_mut_ptr().add(c), gelu16(yv, bv));
        }
        n16 + row_avx2(&y[n16..], &b[n16..], &mut out[n16..])
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{bits, every_level};
    use super::*;
    use crate::ops::reference;
    use candle_core::Device;

    /// Every vector path this CPU supports against candle's `gelu` after the bias (widths with a 16-, 8- and
    /// scalar tail, values out to where `exp` saturates); the AVX2 and AVX-512 paths give the same bits, and a
    /// row's result does not depend on the rows around it.
    #[test]
    fn every_supported_path_matches_candles_gelu() {
        let dev = Device::Cpu;
        for cols in [4096usize, 40, 29] {
            let y = Tensor::rand(-60f32, 60f32, (9, cols), &dev).unwrap();
            let y = Tensor::cat(
                &[&y, &Tensor::rand(-4f32, 4f32, (9, cols), &dev).unwrap()],
                0,
            )
            .unwrap();
            let b = Tensor::rand(-1f32, 1f32, cols, &dev).unwrap();
            let want = reference::bias_gelu_tanh(&y, &b).unwrap();
            // Against 1 + |want|: candle's `0.5·v·(1 + tanh(u))` loses the small values of large negative `v` to
            // cancellation, where the logistic form keeps them.
            eprintln!("bias_gelu_tanh cols={cols}");
            for (level, got) in every_level(&want, 2e-6, |l| bias_gelu_tanh_at(&y, &b, l).unwrap())
            {
                let head = bias_gelu_tanh_at(&y.narrow(0, 3, 2).unwrap(), &b, level).unwrap();
                assert_eq!(bits(&head), bits(&got.narrow(0, 3, 2).unwrap()));
            }
        }
    }

    #[test]
    fn a_bias_of_the_wrong_width_is_an_error() {
        let y = Tensor::zeros((3, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = Tensor::zeros(9, candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = bias_gelu_tanh(&y, &b).unwrap_err().to_string();
        assert!(err.contains("bias [9] for rows of 8"), "{err}");
    }
}
