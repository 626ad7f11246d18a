//! A work item's row copies in and out, 32 values a vector.

use std::arch::x86_64::*;

use half::bf16;

use crate::ops::gemm::bf16::amx::round16_bf16;

/// The lanes of the first `n` of 32 values.
pub(super) fn first32(n: usize) -> __mmask32 {
    match n {
        32.. => u32::MAX,
        _ => (1u32 << n) - 1,
    }
}

/// `dst` ← `src` followed by zeros (a query row padded to whole chunks of 32).
///
/// # Safety
/// The CPU has AVX-512F and BW; `dst` is a whole number of 32-value chunks at least as long as `src`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn padded(src: &[bf16], dst: &mut [bf16]) {
    assert!(dst.len().is_multiple_of(32) && dst.len() >= src.len());
    for (c, chunk) in dst.chunks_exact_mut(32).enumerate() {
        let n = src.len().saturating_sub(32 * c);
        // SAFETY: the mask covers the n values left in src from 32c; the chunk holds 32.
        unsafe {
            let at = src.as_ptr().add((32 * c).min(src.len()));
            let v = _mm512_maskz_loadu_epi16(first32(n), at.cast());
            _mm512_storeu_si512(chunk.as_mut_ptr().cast(), v);
        }
    }
}

/// `o` ← bf16(`x` · `inv`) (a row of the output: its f32 sums times the reciprocal of the softmax's sum).
///
/// # Safety
/// The CPU has AVX-512F, BW, VL, DQ and BF16; `x` holds at least `o.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
pub(super) unsafe fn scaled(x: &[f32], inv: f32, o: &mut [bf16]) {
    assert!(x.len() >= o.len());
    let vinv = _mm512_set1_ps(inv);
    for i in (0..o.len()).step_by(16) {
        let m = first32(o.len() - i) as __mmask16;
        // SAFETY: the mask covers the values left in x and o from i.
        unsafe {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x.as_ptr().add(i)), vinv);
            _mm256_mask_storeu_epi16(o.as_mut_ptr().add(i).cast(), m, round16_bf16(v));
        }
    }
}
