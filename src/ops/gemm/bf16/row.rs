//! The bf16 product of independent rows (decode, the logits of last positions) on AVX512-BF16: `c = a · wᵀ` as
//! one dot product per (row of `a`, row of `w`), each weight row read once for all rows of `a`.
//!
//! Decode streams the weights from memory, so bf16 weights halve its bytes. Every output is `dot(a_i, w_j)` in one
//! fixed order: a single 16-lane `vdpbf16ps` chain over `k` in steps of 32 values (the last `k mod 32` through a
//! masked load, zeros past the end), then the 16 lanes added in a fixed tree and the sum rounded to bf16. Nothing
//! depends on `m`, on the row's place, on `n` or on the thread count: batch-invariant by construction.

use std::mem::MaybeUninit;

use half::bf16;

use super::SharedOut;
use crate::ops::gemm::row::for_column_tasks;

/// Rows of `a` per register tile.
const TR: usize = 4;
/// Rows of `w` per register tile (4 × 4 accumulators, four weight vectors and one row vector).
const TC: usize = 4;
/// Weight rows per parallel task, at least; more where the weight is large.
const TASK_ROWS: usize = 32;
/// Values per step: one 512-bit vector of bf16.
const STEP: usize = 32;
/// How many tiles of weight rows ahead the kernel prefetches.
const PREFETCH_TILES: usize = 4;

/// `c = a · wᵀ (+ bias)` for `a` (m × k) and `w` (n × k), both row-major bf16, and `bias` ([`super::Kernel`]),
/// into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AVX512-BF16 ([`super::supported`]) or a
/// slice is shorter than its shape.
pub fn gemm_nt_rows(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    dims: (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    let (m, k, n) = dims;
    assert!(super::supported(), "the bf16 GEMM needs AVX512-BF16");
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let out = SharedOut::new(c, n, bias);
    // SAFETY: AVX512-BF16 checked above; the tasks write disjoint columns of c, inside its m × n values.
    for_column_tasks(n, (TC, TASK_ROWS), |cols| unsafe {
        columns(a, w, dims, cols, &out)
    });
}

/// The outputs of weight rows `cols` for every row of `a`.
///
/// # Safety
/// The CPU has AVX512-BF16; `out` holds the m × n outputs and no other task writes these columns.
unsafe fn columns(
    a: &[bf16],
    w: &[bf16],
    (m, k, _): (usize, usize, usize),
    cols: std::ops::Range<usize>,
    out: &SharedOut,
) {
    for j0 in cols.clone().step_by(TC) {
        // A short last group repeats its last weight row; those sums are not written.
        let wrows: [*const bf16; TC] =
            std::array::from_fn(|t| w.as_ptr().add((j0 + t).min(cols.end - 1) * k));
        let valid = TC.min(cols.end - j0);
        for i0 in (0..m).step_by(TR) {
            let rows = TR.min(m - i0);
            let mut sums = [[0f32; TC]; TR];
            let arow = |r: usize| a.as_ptr().add((i0 + r) * k);
            match rows {
                1 => tile::<1>(k, [arow(0)], wrows, &mut sums),
                2 => tile::<2>(k, [arow(0), arow(1)], wrows, &mut sums),
                3 => tile::<3>(k, [arow(0), arow(1), arow(2)], wrows, &mut sums),
                _ => tile::<4>(k, [arow(0), arow(1), arow(2), arow(3)], wrows, &mut sums),
            }
            for (r, row) in sums.iter().take(rows).enumerate() {
                for (t, &v) in row.iter().take(valid).enumerate() {
                    out.set(i0 + r, j0 + t, v);
                }
            }
        }
    }
}

/// The dot products of `R` rows of `a` with [`TC`] rows of `w`, each of length `k`, into `sums[r][t]`.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX512-BF16; every pointer reads `k` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn tile<const R: usize>(
    k: usize,
    a: [*const bf16; R],
    w: [*const bf16; TC],
    sums: &mut [[f32; TC]; TR],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); TC]; R];
    // One step of 32 values: the weight vectors, then each row's vector times them.
    macro_rules! step {
        ($p:expr, $load:expr) => {{
            let wv: [__m512bh; TC] =
                std::array::from_fn(|t| std::mem::transmute($load(w[t].add($p))));
            for (r, row) in acc.iter_mut().enumerate() {
                let x: __m512bh = std::mem::transmute($load(a[r].add($p)));
                for (s, wt) in row.iter_mut().zip(&wv) {
                    *s = _mm512_dpbf16_ps(*s, x, *wt);
                }
            }
        }};
    }
    let full = k - k % STEP;
    for p in (0..full).step_by(STEP) {
        // The weight rows PREFETCH_TILES tiles on follow these in memory: ask for their line at this depth now,
        // into L2, so that it is near when that tile loads it (decode streams the weights; hints into L1 measured
        // 10–15% faster than the hardware prefetchers alone, and into L2, which keeps more misses in flight than
        // L1's fill buffers, 20–40% faster again on Zen 4). A hint: it reads nothing and cannot fault, wherever
        // it points.
        for wt in &w {
            _mm_prefetch::<_MM_HINT_T1>(wt.wrapping_add(PREFETCH_TILES * TC * k + p).cast());
        }
        step!(p, |ptr: *const half::bf16| _mm512_loadu_si512(ptr.cast()));
    }
    if full < k {
        let mask: __mmask32 = (1u32 << (k - full)) - 1;
        step!(full, |ptr: *const half::bf16| _mm512_maskz_loadu_epi16(
            mask,
            ptr.cast()
        ));
    }
    for (r, row) in acc.iter().enumerate() {
        for (t, v) in row.iter().enumerate() {
            sums[r][t] = lanes_sum(*v);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const R: usize>(
    _: usize,
    _: [*const bf16; R],
    _: [*const bf16; TC],
    _: &mut [[f32; TC]; TR],
) {
    unreachable!("the bf16 GEMM runs only where super::supported()")
}

/// The 16 lanes of `v` added in a fixed tree: the two halves, then the halves of that, down to one value.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn lanes_sum(v: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::*;
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let o = _mm256_add_ps(lo, hi);
    let q = _mm_add_ps(_mm256_castps256_ps128(o), _mm256_extractf128_ps::<1>(o));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
}

#[cfg(test)]
mod tests {
    use super::super::check::{self, matches_reference, rows_stand_alone};
    use super::*;

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_tails() {
        if check::skip() {
            return;
        }
        // Partial row and weight groups, depths with and without a tail (odd ones too), k = 0, several tasks.
        matches_reference(
            &gemm_nt_rows,
            &[
                (1, 1, 1),
                (1, 32, 2),
                (2, 13, 4),
                (4, 64, 3),
                (5, 95, 7),
                (17, 45, 9),
                (9, 0, 5),
                (3, 20, 200),
            ],
        );
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip() {
            return;
        }
        // Each row alone, rows 5..8 together, and all rows on one thread.
        let mut parts: Vec<_> = (0..11).map(|i| i..i + 1).collect();
        parts.push(5..8);
        rows_stand_alone(&gemm_nt_rows, (11, 901, 301), &parts);
    }
}
