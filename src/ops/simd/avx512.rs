//! AVX-512F versions of the [`super::avx2`] building blocks, lane for lane the same arithmetic (same bits).
//! Callers check that [`super::Level::detect`] is [`super::Level::Avx512`] before calling any of them.

use std::arch::x86_64::*;

/// [`super::avx2::exp8`] on 16 lanes: the same clamp, range reduction and polynomial, operation for operation.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn exp16(x: __m512) -> __m512 {
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(-87.3)),
        _mm512_set1_ps(88.0),
    );
    // Round to nearest, exceptions suppressed: the rounding `_mm256_round_ps` does in `exp8`.
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_2e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let y = _mm512_fmadd_ps(
        _mm512_mul_ps(p, r),
        r,
        _mm512_add_ps(r, _mm512_set1_ps(1.0)),
    );
    let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(y, _mm512_castsi512_ps(pow2))
}

/// `g / (1 + exp(0 − g))` on 16 lanes: the SiLU of [`swiglu_row`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn silu16(g: __m512) -> __m512 {
    let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// [`super::avx2::swiglu_row`] 16 columns at a time (then 8 through the AVX2 one); returns how many leading
/// columns it wrote (⌊n/8⌋·8, the caller finishes the rest).
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA; `u`, `out` and the biases must be at least as long as `g`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn swiglu_row(
    g: &[f32],
    u: &[f32],
    bias: Option<(&[f32], &[f32])>,
    out: &mut [f32],
) -> usize {
    let n16 = g.len() / 16 * 16;
    for c in (0..n16).step_by(16) {
        let mut gv = _mm512_loadu_ps(g.as_ptr().add(c));
        let mut uv = _mm512_loadu_ps(u.as_ptr().add(c));
        if let Some((bg, bu)) = bias {
            gv = _mm512_add_ps(gv, _mm512_loadu_ps(bg.as_ptr().add(c)));
            uv = _mm512_add_ps(uv, _mm512_loadu_ps(bu.as_ptr().add(c)));
        }
        _mm512_storeu_ps(out.as_mut_ptr().add(c), _mm512_mul_ps(silu16(gv), uv));
    }
    let bias = bias.map(|(bg, bu)| (&bg[n16..], &bu[n16..]));
    n16 + super::avx2::swiglu_row(&g[n16..], &u[n16..], bias, &mut out[n16..])
}

/// `x ← exp(x − max x)` over `s`, returning the sum, with the sum's additions in the order of the AVX2 version
/// (an 8-lane accumulator fed 8 values at a time, its lanes added in order, then the scalar tail with libm's
/// `exp`), so both give the same bits.
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn exp_sum(s: &mut [f32]) -> f32 {
    let (n16, n8) = (s.len() / 16 * 16, s.len() / 8 * 8);
    let p = s.as_mut_ptr();
    let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..n16).step_by(16) {
        mv = _mm512_max_ps(mv, _mm512_loadu_ps(p.add(i)));
    }
    let m = _mm512_reduce_max_ps(mv);
    let m = s[n16..].iter().cloned().fold(m, f32::max);
    let (mb, mb8) = (_mm512_set1_ps(m), _mm256_set1_ps(m));
    let mut acc = _mm256_setzero_ps();
    for i in (0..n16).step_by(16) {
        let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), mb));
        _mm512_storeu_ps(p.add(i), e);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e)));
        acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
        acc = _mm256_add_ps(acc, hi);
    }
    if n8 > n16 {
        let e = super::avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(n16)), mb8));
        _mm256_storeu_ps(p.add(n16), e);
        acc = _mm256_add_ps(acc, e);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    let mut sum: f32 = lanes.iter().sum();
    for x in &mut s[n8..] {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

/// The sums of squares of 16 rows of `width` bf16 values (`x` holds them one after another), lane `r` adding
/// row `r`'s squares in f32 from its first value to its last, as a loop over the row does (the same bits; bf16
/// NaNs widened quiet, as `half` widens them). One 32-bit gather reads a pair of values of each row.
///
/// # Safety
/// The CPU has AVX-512F; `width` ≥ 2 and `x` holds 16 rows.
#[target_feature(enable = "avx512f")]
pub unsafe fn sums_of_squares16(x: &[half::bf16], width: usize) -> [f32; 16] {
    assert!(width >= 2 && x.len() >= 16 * width && 32 * width < i32::MAX as usize);
    let rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((2 * width) as i32),
    );
    let high = _mm512_set1_epi32(0xffff_0000_u32 as i32);
    let square = |bits: __m512i| {
        let nan = _mm512_cmpgt_epu32_mask(
            _mm512_and_si512(bits, _mm512_set1_epi32(0x7fff_ffff)),
            _mm512_set1_epi32(0x7f80_0000),
        );
        let v = _mm512_castsi512_ps(_mm512_mask_or_epi32(
            bits,
            nan,
            bits,
            _mm512_set1_epi32(0x0040_0000),
        ));
        _mm512_mul_ps(v, v)
    };
    // SAFETY (the gathers): pair (j, j + 1) of each row lies inside its row (j + 1 < width).
    let pair = |j: usize| unsafe { _mm512_i32gather_epi32::<1>(rows, x.as_ptr().add(j).cast()) };
    let mut sums = _mm512_setzero_ps();
    let mut j = 0;
    while j + 1 < width {
        let v = pair(j);
        sums = _mm512_add_ps(sums, square(_mm512_slli_epi32::<16>(v)));
        sums = _mm512_add_ps(sums, square(_mm512_and_si512(v, high)));
        j += 2;
    }
    if j < width {
        // An odd width's last value: the high half of the pair before it.
        sums = _mm512_add_ps(sums, square(_mm512_and_si512(pair(j - 1), high)));
    }
    let mut out = [0f32; 16];
    // SAFETY: 16 values.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sums) };
    out
}
