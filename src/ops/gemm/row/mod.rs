//! The f32 product of independent rows (decode, the logits of last positions) on CPUs with AVX2 and FMA: `c = a ·
//! wᵀ` as one dot product per (row of `a`, row of `w`), each weight row read once for all rows of `a`.
//!
//! Decode multiplies one row per sequence, so its products are matrix-vector ones that stream the weight from
//! memory. Every output is `dot(a_i, w_j)` in one fixed order: a single 8-lane FMA chain over `k` (the last
//! `k mod 8` values through a masked load), then the eight lanes added in a fixed tree. Nothing depends on `m`, on
//! the row's place, on `n` or on the thread count, so a row's result is the same whatever else is multiplied with
//! it: batch-invariant by construction, with no padding rows.
//!
//! On CPUs with AVX-512F the products of two rows or more run 16 lanes wide ([`avx512`]): each 512-bit register
//! holds the 8-lane chains of two rows of `a`, so every output keeps the AVX2 chain and tree and the two paths
//! give the same bits. [`RowGemm`] says which path a run takes; it does not depend on the GEMM of long segments.

use rayon::prelude::*;

use super::packed::{supported, SharedOut};

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Rows of `a` per register tile.
const TR: usize = 4;
/// Rows of `w` per register tile (4 × 3 accumulators, three weight vectors and one row vector: 16 registers).
const TC: usize = 3;
/// Weight rows per parallel task, at least; more where the weight is large.
const TASK_ROWS: usize = 24;
/// How many tiles of weight rows ahead the kernel prefetches.
const PREFETCH_TILES: usize = 2;

/// What multiplies independent f32 rows on the CPU: the row kernel wherever the CPU has AVX2 and FMA (1.2–20× the
/// `gemm` crate's 16-row products at 1–64 rows on every decode product timed, on AVX2-only and AVX-512 CPUs
/// alike: `docs/performance.md`), else the `gemm` crate in products of [`crate::ops::ROW_BLOCK`] rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowGemm {
    /// The `gemm` crate in products of `ROW_BLOCK` rows (the last zero-padded).
    GemmCrate,
    /// The row kernel, 8 lanes.
    Avx2,
    /// The row kernel, two rows of 8 lanes per 512-bit register for two rows or more (the AVX2 path's bits).
    Avx512,
}

impl RowGemm {
    /// The path for this CPU: the row kernel at its widest, unless `gemm_crate_only` (`--cpu-gemm gemm-crate`)
    /// or the CPU lacks AVX2/FMA.
    pub fn for_this_cpu(gemm_crate_only: bool) -> Self {
        if gemm_crate_only || !supported() {
            Self::GemmCrate
        } else if avx512_available() {
            Self::Avx512
        } else {
            Self::Avx2
        }
    }

    /// Its description in the manifest (`ops.cpu_gemm_independent_rows`).
    pub fn describe(self) -> &'static str {
        match self {
            Self::GemmCrate => "gemm crate, in products of ROW_BLOCK rows",
            Self::Avx2 => "row kernel: one AVX2 dot product per output (row_gemm)",
            Self::Avx512 => {
                "row kernel: one 8-lane dot product per output (row_gemm), two rows per AVX-512 register \
                 from two rows up (the AVX2 path's bits)"
            }
        }
    }
}

/// Whether the CPU has AVX-512F (and AVX2/FMA), which [`avx512`] needs.
fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        supported() && is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `c = a · wᵀ` for `a` (m × k) and `w` (n × k), both row-major, into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads, on the widest path the CPU has (the same bits on each). Panics where
/// the CPU lacks AVX2/FMA ([`supported`]) or a slice is shorter than its shape.
pub fn sgemm_nt_rows(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if dims.0 >= 2 && avx512_available() {
        return avx512::sgemm_nt_rows(a, w, dims, c);
    }
    sgemm_nt_rows_avx2(a, w, dims, c);
}

/// Split the `n` weight rows into tasks of at least `min_rows` rows (a multiple of `group`), enough for every
/// thread to have several, and run `task` on each range on rayon's threads.
pub(in crate::ops::gemm) fn for_column_tasks(
    n: usize,
    (group, min_rows): (usize, usize),
    task: impl Fn(std::ops::Range<usize>) + Sync + Send,
) {
    let per = min_rows.next_multiple_of(group).max(
        n.div_ceil(8 * rayon::current_num_threads())
            .next_multiple_of(group),
    );
    let starts: Vec<usize> = (0..n).step_by(per).collect();
    starts
        .into_par_iter()
        .for_each(|j0| task(j0..n.min(j0 + per)));
}

/// [`sgemm_nt_rows`] on the AVX2 path.
pub(crate) fn sgemm_nt_rows_avx2(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let (m, k, n) = dims;
    assert!(supported(), "row_gemm needs AVX2 and FMA");
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let out = SharedOut(c.as_mut_ptr());
    // SAFETY: AVX2/FMA checked above; the tasks write disjoint columns of c, inside its m × n values.
    for_column_tasks(n, (TC, TASK_ROWS), |cols| unsafe {
        columns(a, w, dims, cols, &out)
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
        // The weight rows PREFETCH_TILES tiles on follow these in memory: ask for their line at this depth once per
        // 64 bytes, into L2, so that it is near when that tile loads it (decode streams the weights; hints into L1
        // one tile on measured about 10% faster than the hardware prefetchers alone, and into L2, which keeps more
        // misses in flight, 20–40% faster again on Zen 4). A hint: it reads nothing and cannot fault.
        if p % 16 == 0 {
            for wt in &w {
                _mm_prefetch::<_MM_HINT_T1>(wt.wrapping_add(PREFETCH_TILES * TC * k + p).cast());
            }
        }
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
    use crate::ops::gemm::packed::check::{self, matches_reference, rows_stand_alone, Kernel};

    /// The AVX2 path, the AVX-512 one at any row count where the CPU has it, and the dispatch between them.
    fn paths() -> Vec<Kernel> {
        let mut paths: Vec<Kernel> = vec![sgemm_nt_rows_avx2, sgemm_nt_rows];
        #[cfg(target_arch = "x86_64")]
        if avx512_available() {
            paths.push(avx512::sgemm_nt_rows);
        }
        paths
    }

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_tails() {
        if check::skip_without_avx2() {
            return;
        }
        // Partial row and weight groups (odd rows: a half-empty last pair on AVX-512; 17 rows: three tiles of
        // pairs), depths with and without a tail, k = 0, several tasks.
        for f in paths() {
            matches_reference(
                f,
                &[
                    (1, 1, 1),
                    (1, 8, 2),
                    (2, 13, 4),
                    (4, 16, 3),
                    (5, 31, 7),
                    (17, 45, 9),
                    (9, 0, 5),
                    (3, 20, 200),
                ],
            );
        }
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip_without_avx2() {
            return;
        }
        // Each row alone, rows 5..8 together, and all rows on one thread.
        let mut parts: Vec<_> = (0..11).map(|i| i..i + 1).collect();
        parts.push(5..8);
        for f in paths() {
            rows_stand_alone(f, (11, 901, 301), &parts);
        }
    }

    #[test]
    fn the_path_follows_the_cpu_and_gemm_crate_only() {
        assert_eq!(RowGemm::for_this_cpu(true), RowGemm::GemmCrate);
        let want = match (supported(), avx512_available()) {
            (false, _) => RowGemm::GemmCrate,
            (true, false) => RowGemm::Avx2,
            (true, true) => RowGemm::Avx512,
        };
        assert_eq!(RowGemm::for_this_cpu(false), want);
    }
}

/// `cargo test --release --lib gemm::row::timing -- --ignored --nocapture`: the `small` checkpoint's decode
/// products (1, 4, 16 and 64 rows) through the `gemm` crate in products of 16 rows, as independent rows ran
/// without this kernel, through this kernel's AVX2 path and through its widest path (AVX-512 where the CPU has it),
/// alternated, best of seven each.
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
        eprintln!("widest path: {:?}", RowGemm::for_this_cpu(false));
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
                let mut best = [f64::INFINITY; 3];
                for round in 0..8 {
                    let mut t = [std::time::Instant::now(); 4];
                    for b in 0..blocks {
                        let (a, c) = (&a[b * block * k..], &mut c[b * block * n..]);
                        gemm_crate(a, &w, (block, k, n), c);
                    }
                    t[1] = std::time::Instant::now();
                    sgemm_nt_rows_avx2(&a, &w, (m, k, n), &mut c);
                    t[2] = std::time::Instant::now();
                    sgemm_nt_rows(&a, &w, (m, k, n), &mut c);
                    t[3] = std::time::Instant::now();
                    if round > 0 {
                        for (i, b) in best.iter_mut().enumerate() {
                            *b = b.min((t[i + 1] - t[i]).as_secs_f64());
                        }
                    }
                }
                line += &format!(
                    "  m {m}: gemm crate ({blocks} x 16 rows) {:.2} ms, rows AVX2 {:.2} ms, widest {:.2} ms",
                    best[0] * 1e3,
                    best[1] * 1e3,
                    best[2] * 1e3,
                );
            }
            eprintln!("{line}");
        }
    }
}
