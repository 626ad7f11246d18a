//! The row kernel on AVX-512F for two rows of `a` or more, with the AVX2 path's bits.
//!
//! The AVX2 path keeps each output as one 8-lane FMA chain over `k` (lane `l` sums the depths `l mod 8`), then adds
//! the lanes in a fixed tree. Here a 512-bit register holds two such chains side by side, those of two rows of `a`
//! against the same weight row: the rows are packed in pairs once per call (lanes 0–7 the first row's 8 depths, lanes
//! 8–15 the second's, zeros past `k` and for a missing second row), the weight's 8 depths are broadcast to both
//! halves, and one FMA advances both chains. Every lane sees the same operands in the same order as on the AVX2
//! path, the tail's masked lanes included (0 · 0 added, as there), so the two paths give the same bits, while each
//! instruction does twice the work.

use std::arch::x86_64::*;

use super::super::packed::SharedOut;
use super::{for_column_tasks, lanes_sum, tail_mask};

/// Row pairs of `a` per register tile.
const RP: usize = 4;
/// Rows of `w` per register tile (4 × 4 accumulators, four weight vectors and one row-pair vector: 21 of the 32
/// registers).
const TC: usize = 4;

/// [`super::sgemm_nt_rows`] on AVX-512F. Panics where the CPU lacks AVX-512F, AVX2 or FMA, or a slice is shorter
/// than its shape.
pub(super) fn sgemm_nt_rows(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let (m, k, n) = dims;
    assert!(
        super::avx512_available(),
        "row_gemm's AVX-512 path needs AVX-512F, AVX2 and FMA"
    );
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let pairs = pack_pairs(a, m, k);
    let out = SharedOut(c.as_mut_ptr());
    // SAFETY: AVX-512F/AVX2/FMA checked above; the tasks write disjoint columns of c, inside its m × n values.
    for_column_tasks(n, (TC, super::TASK_ROWS), |cols| unsafe {
        columns(&pairs, w, dims, cols, &out)
    });
}

/// The rows of `a` (m × k) in pairs, 16 values per depth step of 8: row `2q`'s 8 depths, then row `2q + 1`'s;
/// zeros past `k` and for the second row of a last odd pair.
fn pack_pairs(a: &[f32], m: usize, k: usize) -> Vec<f32> {
    let steps = k.div_ceil(8);
    let mut packed = vec![0f32; m.div_ceil(2) * steps * 16];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for (s, chunk) in row.chunks(8).enumerate() {
            let at = ((i / 2) * steps + s) * 16 + (i % 2) * 8;
            packed[at..at + chunk.len()].copy_from_slice(chunk);
        }
    }
    packed
}

/// The outputs of weight rows `cols` for every row of `a` (packed by [`pack_pairs`]).
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; `out` holds the m × n outputs and no other task writes these columns.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn columns(
    pairs: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    cols: std::ops::Range<usize>,
    out: &SharedOut,
) {
    let pair_len = k.div_ceil(8) * 16;
    let npairs = m.div_ceil(2);
    for j0 in cols.clone().step_by(TC) {
        // A short last group repeats its last weight row; those sums are not written.
        let wj = |t: usize| (j0 + t).min(cols.end - 1);
        let wrows: [*const f32; TC] = std::array::from_fn(|t| w.as_ptr().add(wj(t) * k));
        let valid = TC.min(cols.end - j0);
        for q0 in (0..npairs).step_by(RP) {
            let np = RP.min(npairs - q0);
            let mut sums = [[0f32; TC]; 2 * RP];
            let pair = |p: usize| pairs.as_ptr().add((q0 + p) * pair_len);
            match np {
                1 => tile::<1>(k, [pair(0)], wrows, &mut sums),
                2 => tile::<2>(k, [pair(0), pair(1)], wrows, &mut sums),
                3 => tile::<3>(k, [pair(0), pair(1), pair(2)], wrows, &mut sums),
                _ => tile::<4>(k, [pair(0), pair(1), pair(2), pair(3)], wrows, &mut sums),
            }
            let rows = (2 * np).min(m - 2 * q0);
            for (r, row) in sums.iter().take(rows).enumerate() {
                for (t, &v) in row.iter().take(valid).enumerate() {
                    *out.at((2 * q0 + r) * n + j0 + t) = v;
                }
            }
        }
    }
}

/// The 8 values at `v` in both halves of a 512-bit register.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn both_halves(v: __m256) -> __m512 {
    _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(v)))
}

/// The dot products of `P` row pairs of `a` (packed) with [`TC`] rows of `w`, each of length `k`, into
/// `sums[row][t]` (rows `2p` and `2p + 1` of pair `p`).
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; every pair pointer reads `k.div_ceil(8) * 16` values, every weight
/// pointer `k`.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile<const P: usize>(
    k: usize,
    a: [*const f32; P],
    w: [*const f32; TC],
    sums: &mut [[f32; TC]; 2 * RP],
) {
    let mut acc = [[_mm512_setzero_ps(); TC]; P];
    // One depth step of 8: the weight vectors in both halves, then each pair's vector times them (the pair's
    // values first, as the AVX2 path multiplies the row's by the weight's).
    macro_rules! step {
        ($s:expr, $load:expr) => {{
            let wv: [__m512; TC] = std::array::from_fn(|t| both_halves($load(w[t].add(8 * $s))));
            for (p, row) in acc.iter_mut().enumerate() {
                let x = _mm512_loadu_ps(a[p].add(16 * $s));
                for (s, wt) in row.iter_mut().zip(&wv) {
                    *s = _mm512_fmadd_ps(x, *wt, *s);
                }
            }
        }};
    }
    let full = k / 8;
    for s in 0..full {
        step!(s, |ptr| _mm256_loadu_ps(ptr));
    }
    if full * 8 < k {
        let mask = tail_mask(k - full * 8);
        step!(full, |ptr| _mm256_maskload_ps(ptr, mask));
    }
    for (p, row) in acc.iter().enumerate() {
        for (t, v) in row.iter().enumerate() {
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*v)));
            sums[2 * p][t] = lanes_sum(_mm512_castps512_ps256(*v));
            sums[2 * p + 1][t] = lanes_sum(hi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::packed::check;

    /// True, with a line saying so, where this CPU has no AVX-512F: the test then skips.
    fn skip_without_avx512() -> bool {
        let skip = !super::super::avx512_available();
        if skip {
            eprintln!("skipped: this CPU has no AVX-512F");
        }
        skip
    }

    #[test]
    fn gives_the_avx2_paths_bits() {
        if skip_without_avx512() {
            return;
        }
        for (m, k, n) in [
            (2, 7, 5),
            (3, 8, 9),
            (5, 901, 31),
            (8, 896, 64),
            (16, 64, 19),
            (11, 0, 3),
        ] {
            let (a, w) = (check::values(m * k, 5), check::values(n * k, 6));
            let wide = check::product(sgemm_nt_rows, &a, &w, (m, k, n));
            let narrow = check::product(super::super::sgemm_nt_rows_avx2, &a, &w, (m, k, n));
            let same = wide
                .iter()
                .zip(&narrow)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "({m}, {k}, {n}): the AVX-512 and AVX2 paths differ");
        }
    }
}
