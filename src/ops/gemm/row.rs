//! The f32 product of independent rows (decode, the logits of last positions) on CPUs with AVX2 and FMA: `c = a ·
//! wᵀ` as one dot product per (row of `a`, row of `w`), each weight row read once for all rows of `a`.
//!
//! Decode multiplies one row per sequence, so its products are matrix-vector ones that stream the weight from
//! memory. Every output is `dot(a_i, w_j)` in one fixed order: a single 8-lane FMA chain over `k` (the last
//! `k mod 8` values through a masked load), then the eight lanes added in a fixed tree. Nothing depends on `m`, on
//! the row's place, on `n` or on the thread count, so a row's result is the same whatever else is multiplied with
//! it: batch-invariant by construction, with no padding rows.

use rayon::prelude::*;

use super::packed::{supported, SharedOut};

/// Rows of `a` per register tile.
const TR: usize = 4;
/// Rows of `w` per register tile (4 × 3 accumulators, three weight vectors and one row vector: 16 registers).
const TC: usize = 3;
/// Weight rows per parallel task, at least; more where the weight is large.
const TASK_ROWS: usize = 24;

/// `c = a · wᵀ` for `a` (m × k) and `w` (n × k), both row-major, into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AVX2/FMA ([`supported`]) or a slice is
/// shorter than its shape.
pub fn sgemm_nt_rows(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let (m, k, n) = dims;
    assert!(supported(), "row_gemm needs AVX2 and FMA");
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let out = SharedOut(c.as_mut_ptr());
    let per = TASK_ROWS.max(
        n.div_ceil(8 * rayon::current_num_threads())
            .next_multiple_of(TC),
    );
    let starts: Vec<usize> = (0..n).step_by(per).collect();
    starts.into_par_iter().for_each(|j0| {
        let cols = j0..n.min(j0 + per);
        // SAFETY: AVX2/FMA checked above; the tasks write disjoint columns of c, inside its m × n values.
        unsafe { columns(a, w, dims, cols, &out) }
    });
}

/// The outputs of weight rows `cols` for every row of `a`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `out` holds the m × n outputs and no other task writes these columns.
unsafe fn columns(
    a: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    cols: std::ops::Range<usize>,
    out: &SharedOut,
) {
    for j0 in cols.clone().step_by(TC) {
        // A short last group repeats its last weight row; those sums are not written.
        let wj = |t: usize| (j0 + t).min(cols.end - 1);
        let wrows: [*const f32; TC] = std::array::from_fn(|t| w.as_ptr().add(wj(t) * k));
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
                    *out.at((i0 + r) * n + j0 + t) = v;
                }
            }
        }
    }
}

/// The dot products of `R` rows of `a` with [`TC`] rows of `w`, each of length `k`, into `sums[r][t]`.
///
/// # Safety
/// The CPU has AVX2 and FMA; every pointer reads `k` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize>(
    k: usize,
    a: [*const f32; R],
    w: [*const f32; TC],
    sums: &mut [[f32; TC]; TR],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); TC]; R];
    // One depth step of 8: the weight vectors, then each row's vector times them.
    macro_rules! step {
        ($p:expr, $load:expr) => {{
            let wv: [__m256; TC] = std::array::from_fn(|t| $load(w[t].add($p)));
            for (r, row) in acc.iter_mut().enumerate() {
                let x = $load(a[r].add($p));
                for (s, wt) in row.iter_mut().zip(&wv) {
                    *s = _mm256_fmadd_ps(x, *wt, *s);
                }
            }
        }};
    }
    let full = k - k % 8;
    for p in (0..full).step_by(8) {
        step!(p, |ptr| _mm256_loadu_ps(ptr));
    }
    if full < k {
        let mask = tail_mask(k - full);
        step!(full, |ptr| _mm256_maskload_ps(ptr, mask));
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
    _: [*const f32; R],
    _: [*const f32; TC],
    _: &mut [[f32; TC]; TR],
) {
    unreachable!("row_gemm runs only where packed_gemm::supported()")
}

/// The load mask of the first `len` (< 8) lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tail_mask(len: usize) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(len as i32), lane)
}

/// The eight lanes of `v` added in a fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_sum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::packed::check::{self, matches_reference, rows_stand_alone};

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_tails() {
        if check::skip_without_avx2() {
            return;
        }
        // Partial row and weight groups, depths with and without a tail, k = 0, several tasks.
        matches_reference(
            sgemm_nt_rows,
            &[
                (1, 1, 1),
                (1, 8, 2),
                (2, 13, 4),
                (4, 16, 3),
                (5, 31, 7),
                (9, 0, 5),
                (3, 20, 200),
            ],
        );
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip_without_avx2() {
            return;
        }
        // Each row alone, rows 5..8 together, and all rows on one thread.
        let mut parts: Vec<_> = (0..11).map(|i| i..i + 1).collect();
        parts.push(5..8);
        rows_stand_alone(sgemm_nt_rows, (11, 901, 301), &parts);
    }
}

/// `cargo test --release --lib gemm::row::timing -- --ignored --nocapture`: the `small` checkpoint's decode
/// products (1, 4, 16 and 64 rows) through the `gemm` crate in products of 16 rows, as independent rows ran
/// without this kernel, and through this kernel, alternated, best of seven each.
#[cfg(test)]
mod timing {
    use super::*;
    use crate::ops::gemm::packed::check;
    use crate::ops::gemm::packed::timing::gemm_crate;

    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn decode_shapes() {
        if check::skip_without_avx2() {
            return;
        }
        let block = crate::ops::ROW_BLOCK;
        for (k, n) in [
            (896, 1152),
            (896, 896),
            (896, 9728),
            (4864, 896),
            (896, 151_936),
            (1280, 3420),
        ] {
            let a: Vec<f32> = (0..64 * k).map(|i| (i % 17) as f32 / 17.0).collect();
            let w: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32 / 13.0 - 0.5).collect();
            let mut c = vec![0f32; 64 * n];
            let mut line = format!("k {k}, n {n}:");
            for m in [1usize, 4, 16, 64] {
                // The `gemm` crate ran independent rows in products of `block` rows.
                let blocks = m.div_ceil(block);
                let mut best = [f64::INFINITY; 2];
                for round in 0..8 {
                    let t0 = std::time::Instant::now();
                    for b in 0..blocks {
                        let (a, c) = (&a[b * block * k..], &mut c[b * block * n..]);
                        gemm_crate(a, &w, (block, k, n), c);
                    }
                    let t1 = std::time::Instant::now();
                    sgemm_nt_rows(&a, &w, (m, k, n), &mut c);
                    if round > 0 {
                        best[0] = best[0].min((t1 - t0).as_secs_f64());
                        best[1] = best[1].min(t1.elapsed().as_secs_f64());
                    }
                }
                line += &format!(
                    "  m {m}: gemm crate ({blocks} x 16 rows) {:.2} ms, rows {:.2} ms",
                    best[0] * 1e3,
                    best[1] * 1e3,
                );
            }
            eprintln!("{line}");
        }
    }
}
