//! The AVX-512 inner loops: 16 lanes a register, 32 keys (scores) or 32 dims (weighted sum) × 4 rows per inner
//! step (8 accumulators), narrower steps at the ends. Each value is the same FMA chain as in the AVX2 loops.

use super::{Block, KEY_BLOCK, ROWS};
use std::arch::x86_64::*;

/// Scores of all ROWS rows for keys 0..kpad (kpad a multiple of [`KEY_BLOCK`] = 16).
///
/// # Safety
/// The CPU must have AVX-512F; kpad ≤ b.lpad, `scores` holds ROWS × lpad.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn scores(b: &Block<'_>, kpad: usize, scores: &mut [f32]) {
    let (q, kt, sp) = (b.q.as_ptr(), b.kt.as_ptr(), scores.as_mut_ptr());
    let mut j0 = 0;
    while j0 + 2 * KEY_BLOCK <= kpad {
        let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
        for c in 0..b.d {
            let k0 = _mm512_loadu_ps(kt.add(c * b.lpad + j0));
            let k1 = _mm512_loadu_ps(kt.add(c * b.lpad + j0 + 16));
            for (i, a) in acc.iter_mut().enumerate() {
                let qb = _mm512_set1_ps(*q.add(i * b.d + c));
                a[0] = _mm512_fmadd_ps(qb, k0, a[0]);
                a[1] = _mm512_fmadd_ps(qb, k1, a[1]);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(sp.add(i * b.lpad + j0), a[0]);
            _mm512_storeu_ps(sp.add(i * b.lpad + j0 + 16), a[1]);
        }
        j0 += 2 * KEY_BLOCK;
    }
    if j0 < kpad {
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for c in 0..b.d {
            let k0 = _mm512_loadu_ps(kt.add(c * b.lpad + j0));
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(i * b.d + c)), k0, *a);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(sp.add(i * b.lpad + j0), *a);
        }
    }
}

/// `out[i] = Σ_j p[i][j]·v[j]` for keys 0..last: 32 dims × 4 rows per inner step, then 16, then 8.
///
/// # Safety
/// The CPU must have AVX-512F; d is a multiple of 8, `out` holds ROWS × d, `scores` ROWS × lpad.
#[target_feature(enable = "avx512f,avx2,fma")]
pub unsafe fn weighted_sum(b: &Block<'_>, last: usize, scores: &[f32], out: &mut [f32]) {
    let (v, sp, op) = (b.v.as_ptr(), scores.as_ptr(), out.as_mut_ptr());
    let mut c = 0;
    while c + 32 <= b.d {
        let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
        for j in 0..last {
            let v0 = _mm512_loadu_ps(v.add(j * b.d + c));
            let v1 = _mm512_loadu_ps(v.add(j * b.d + c + 16));
            for (i, a) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(*sp.add(i * b.lpad + j));
                a[0] = _mm512_fmadd_ps(p, v0, a[0]);
                a[1] = _mm512_fmadd_ps(p, v1, a[1]);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(op.add(i * b.d + c), a[0]);
            _mm512_storeu_ps(op.add(i * b.d + c + 16), a[1]);
        }
        c += 32;
    }
    if c + 16 <= b.d {
        let mut acc = [_mm512_setzero_ps(); ROWS];
        for j in 0..last {
            let v0 = _mm512_loadu_ps(v.add(j * b.d + c));
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_set1_ps(*sp.add(i * b.lpad + j)), v0, *a);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(op.add(i * b.d + c), *a);
        }
        c += 16;
    }
    if c < b.d {
        let mut acc = [_mm256_setzero_ps(); ROWS];
        for j in 0..last {
            let v0 = _mm256_loadu_ps(v.add(j * b.d + c));
            for (i, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_set1_ps(*sp.add(i * b.lpad + j)), v0, *a);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(i * b.d + c), *a);
        }
    }
}
