//! The inner loops for up to [`ROWS`] query rows: scores against every visible key (keys transposed, so
//! one load serves 8 or 16 keys), softmax, weighted sum of the values. The AVX2 and AVX-512 versions compute
//! each score and each output value as the same chain of FMAs in the same order, and the softmax sums in the same
//! order, so they give the same bits.

use super::{KEY_BLOCK, ROWS};
use crate::ops::simd::Level;

/// One block of query rows against one segment's keys and values.
pub(crate) struct Block<'a> {
    /// Query rows (ROWS, d), pre-scaled; rows past the block's end are zero.
    pub q: &'a [f32],
    /// Keys transposed (d, lpad).
    pub kt: &'a [f32],
    /// Padded key count.
    pub lpad: usize,
    /// Values (keys, d).
    pub v: &'a [f32],
    /// Head dim (a multiple of 8).
    pub d: usize,
    /// Keys each row sees (0 for rows past the block's end).
    pub visible: [usize; ROWS],
}

/// Fill `out` (ROWS, d) with the attention of the block's rows; `scores` holds ROWS × lpad. `level` must be one
/// the CPU supports (at most [`Level::detect`]).
pub fn run(b: &Block<'_>, scores: &mut [f32], out: &mut [f32], level: Level) {
    let last = b.visible.iter().copied().max().unwrap_or(0);
    let kpad = last.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both arms): the caller checked the CPU supports `level`; every index stays inside the buffers
        // (kpad ≤ lpad, a multiple of 16; d a multiple of 8).
        Level::Avx512 => unsafe {
            avx512::scores(b, kpad, scores);
            softmax_rows(b, last, scores, level);
            avx512::weighted_sum(b, last, scores, out);
            return;
        },
        Level::Avx2 => unsafe {
            avx2::scores(b, kpad, scores);
            softmax_rows(b, last, scores, level);
            avx2::weighted_sum(b, last, scores, out);
            return;
        },
        Level::Portable => {}
    }
    portable_scores(b, kpad, scores);
    softmax_rows(b, last, scores, level);
    portable_weighted_sum(b, last, scores, out);
}

/// Softmax of each row's visible scores in place ([`softmax`] on `level`), the row's remaining scores up to
/// `last` set to 0.
fn softmax_rows(b: &Block<'_>, last: usize, scores: &mut [f32], level: Level) {
    for (i, &vis) in b.visible.iter().enumerate() {
        let row = &mut scores[i * b.lpad..i * b.lpad + last];
        let (s, rest) = row.split_at_mut(vis);
        rest.fill(0.0);
        softmax(s, level);
    }
}

/// `x ← exp(x − max x) / Σ` over `s` on the vector path `level` (one the CPU supports): the softmax of one row,
/// with the same `exp` and sums as the fused kernel's.
pub fn softmax(s: &mut [f32], level: Level) {
    if s.is_empty() {
        return;
    }
    let inv = 1.0 / exp_shifted(s, level);
    s.iter_mut().for_each(|x| *x *= inv);
}

/// `x ← exp(x − max x)` over a non-empty `s` on the vector path `level` (one the CPU supports), returning the sum:
/// softmax before its division.
pub(crate) fn exp_shifted(s: &mut [f32], level: Level) -> f32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY (both arms): the caller checked the CPU supports `level`.
    let sum = match level {
        Level::Avx512 => unsafe { crate::ops::simd::avx512::exp_sum(s) },
        Level::Avx2 => unsafe { avx2::exp_sum(s) },
        Level::Portable => exp_sum(s),
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sum = {
        let _ = level;
        exp_sum(s)
    };
    sum
}

/// `x ← exp(x − max x)` over `s`, returning the sum (libm's `expf`).
fn exp_sum(s: &mut [f32]) -> f32 {
    let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for x in s.iter_mut() {
        *x = (*x - m).exp();
        sum += *x;
    }
    sum
}

fn portable_scores(b: &Block<'_>, kpad: usize, scores: &mut [f32]) {
    for i in 0..ROWS {
        for j in 0..kpad {
            let mut acc = 0f32;
            for c in 0..b.d {
                acc += b.q[i * b.d + c] * b.kt[c * b.lpad + j];
            }
            scores[i * b.lpad + j] = acc;
        }
    }
}

fn portable_weighted_sum(b: &Block<'_>, last: usize, scores: &[f32], out: &mut [f32]) {
    for i in 0..ROWS {
        let o = &mut out[i * b.d..(i + 1) * b.d];
        o.fill(0.0);
        for j in 0..last {
            let p = scores[i * b.lpad + j];
            for (x, y) in o.iter_mut().zip(&b.v[j * b.d..(j + 1) * b.d]) {
                *x += p * y;
            }
        }
    }
}

/// The vector `exp_sum` of `level` (AVX2 or AVX-512), for the unit test.
///
/// # Safety
/// The CPU must support `level`.
#[cfg(all(test, target_arch = "x86_64"))]
pub unsafe fn exp_sum_for_test(s: &mut [f32], level: Level) -> f32 {
    match level {
        Level::Avx512 => crate::ops::simd::avx512::exp_sum(s),
        _ => avx2::exp_sum(s),
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Block, KEY_BLOCK, ROWS};
    use crate::ops::simd::avx2::exp8;
    use std::arch::x86_64::*;

    /// [`super::exp_sum`] 8 lanes at a time.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_sum(s: &mut [f32]) -> f32 {
        let n8 = s.len() / 8 * 8;
        let p = s.as_mut_ptr();
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        for i in (0..n8).step_by(8) {
            mv = _mm256_max_ps(mv, _mm256_loadu_ps(p.add(i)));
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), mv);
        let m = lanes
            .iter()
            .chain(&s[n8..])
            .cloned()
            .fold(f32::NEG_INFINITY, f32::max);
        let (mb, mut acc) = (_mm256_set1_ps(m), _mm256_setzero_ps());
        for i in (0..n8).step_by(8) {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mb));
            _mm256_storeu_ps(p.add(i), e);
            acc = _mm256_add_ps(acc, e);
        }
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        let mut sum: f32 = lanes.iter().sum();
        for x in &mut s[n8..] {
            *x = (*x - m).exp();
            sum += *x;
        }
        sum
    }

    /// Scores of all ROWS rows for keys 0..kpad, 16 keys × 4 rows per inner step (8 accumulators).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scores(b: &Block<'_>, kpad: usize, scores: &mut [f32]) {
        let (q, kt, sp) = (b.q.as_ptr(), b.kt.as_ptr(), scores.as_mut_ptr());
        for j0 in (0..kpad).step_by(KEY_BLOCK) {
            let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
            for c in 0..b.d {
                let k0 = _mm256_loadu_ps(kt.add(c * b.lpad + j0));
                let k1 = _mm256_loadu_ps(kt.add(c * b.lpad + j0 + 8));
                for (i, a) in acc.iter_mut().enumerate() {
                    let qb = _mm256_broadcast_ss(&*q.add(i * b.d + c));
                    a[0] = _mm256_fmadd_ps(qb, k0, a[0]);
                    a[1] = _mm256_fmadd_ps(qb, k1, a[1]);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(sp.add(i * b.lpad + j0), a[0]);
                _mm256_storeu_ps(sp.add(i * b.lpad + j0 + 8), a[1]);
            }
        }
    }

    /// `out[i] = Σ_j p[i][j]·v[j]` for keys 0..last, 16 dims × 4 rows per inner step (8 lanes at the end).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn weighted_sum(b: &Block<'_>, last: usize, scores: &[f32], out: &mut [f32]) {
        let (v, sp, op) = (b.v.as_ptr(), scores.as_ptr(), out.as_mut_ptr());
        let mut c = 0;
        while c + 16 <= b.d {
            let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
            for j in 0..last {
                let v0 = _mm256_loadu_ps(v.add(j * b.d + c));
                let v1 = _mm256_loadu_ps(v.add(j * b.d + c + 8));
                for (i, a) in acc.iter_mut().enumerate() {
                    let p = _mm256_broadcast_ss(&*sp.add(i * b.lpad + j));
                    a[0] = _mm256_fmadd_ps(p, v0, a[0]);
                    a[1] = _mm256_fmadd_ps(p, v1, a[1]);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(i * b.d + c), a[0]);
                _mm256_storeu_ps(op.add(i * b.d + c + 8), a[1]);
            }
            c += 16;
        }
        if c < b.d {
            let mut acc = [_mm256_setzero_ps(); ROWS];
            for j in 0..last {
                let v0 = _mm256_loadu_ps(v.add(j * b.d + c));
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_broadcast_ss(&*sp.add(i * b.lpad + j)), v0, *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(i * b.d + c), *a);
            }
        }
    }
}
