//! The bf16 GEMM of row segments on AVX512-BF16: `c = a · wᵀ` for a row-major bf16 `a` (m × k) and a linear
//! layer's bf16 weight `w` (n × k), read in place.
//!
//! `vdpbf16ps` adds to each f32 lane the products of one pair of bf16 values from each operand. Here a vector
//! holds 16 rows of `a` at one pair of depths (the activation packed once per call, as the AMX kernel packs it:
//! [`super::amx::pack_a`]), and the other
//! operand is one weight row's pair of depths broadcast to all lanes, read straight from `w` (its rows are
//! contiguous in depth, which is what a broadcast needs: no packing of the weight, and a copy only where its
//! rows would share the L1 cache's sets: [`rows_share_cache_sets`]). A register
//! tile is [`MV`] × 16 rows of `a` by [`NJ`] weight rows: 24 accumulators, each an f32 chain over all of `k`'s
//! pairs in order from zero, plus the bias, rounded to bf16 once when stored.
//!
//! [`gemm_nt_swiglu`] runs a gate-up projection's tiles with half their weight rows the gate's and half the up's,
//! and stores the SwiGLU of each pair instead of the two halves.
//!
//! Every output is that one chain: nothing depends on `m`, on the row's place, on `n` or on the thread count
//! (padding rows are zeros and only reach outputs that are not written), so each row's bits are the same
//! whatever else is multiplied with it.

use rayon::prelude::*;

use std::mem::MaybeUninit;

use half::bf16;

use super::SharedOut;

/// Rows of `a` per vector (16 f32 lanes).
const LANES: usize = 16;
/// Vectors of rows per register tile.
const MV: usize = 2;
/// Rows of `a` per register tile and per packed panel.
const MR: usize = MV * LANES;
/// Weight rows per register tile (2 × 12 accumulators, two row vectors and a broadcast: 27 of 32 registers).
const NJ: usize = 12;
/// Bytes of packed `a` a task works through (its panels stay in the core's L2 cache beside the weight rows of a
/// tile, each of those read once for all the task's panels).
const A_BYTES_PER_TASK: usize = 448 << 10;
/// Panels of `a` per task at depth `k`: [`A_BYTES_PER_TASK`] of them, at least one, at most 8.
fn panels_per_task(k: usize) -> usize {
    (A_BYTES_PER_TASK / (k.div_ceil(2) * MR * 4)).clamp(1, 8)
}

/// `c = a · wᵀ (+ bias)` for `a` (m × k) and `w` (n × k), both row-major bf16, and `bias` ([`super::Kernel`]),
/// into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AVX512-BF16 ([`super::supported`]) or a
/// slice is shorter than its shape.
pub fn gemm_nt(
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
    if k == 0 {
        super::no_depth(c, (m, n), bias);
        return;
    }
    let copy = rows_share_cache_sets(k).then(|| padded_copy(w, n, k));
    let (w, stride) = match &copy {
        Some(c) => (&c[..], k + COPY_PAD),
        None => (w, k),
    };
    let out = SharedOut::new(c, n, bias);
    over_tiles(a, (m, k), n.div_ceil(NJ), |g, p, panel| {
        let j0 = g * NJ;
        // A short last group repeats its last weight row; those sums are not written.
        let wrows: [*const bf16; NJ] =
            std::array::from_fn(|t| w[(j0 + t).min(n - 1) * stride..][..k].as_ptr());
        let (i0, rows, cols) = (p * MR, MR.min(m - p * MR), NJ.min(n - j0));
        // SAFETY: the kernels' features checked above; each run holds k.div_ceil(2) pairs of 16 rows, each weight
        // row k values; rows × cols from (i0, j0) lie inside c, and this task alone writes these columns of these
        // panels' rows.
        unsafe { tile(k, panel, wrows, &out, (i0, j0), (rows, cols)) };
    });
}

/// Output columns of a register tile of [`gemm_nt_swiglu`]: half its [`NJ`] weight rows are the gate's, half the
/// up's, for the same columns.
const HALF: usize = NJ / 2;

/// The output of [`tile_swiglu`] and the gate's and up's biases (I values each), if any.
type SwiGluOut<'a> = (&'a SharedOut, Option<(&'a [f32], &'a [f32])>);

/// `c = silu(a · gᵀ + b_g) · (a · uᵀ + b_u)` for `a` (m × k) and the gate-up weight `w` (2I × k: the gate's I
/// rows, then the up's), both row-major bf16, and `bias` (2I values, or empty: none) into `c` (m × I, row-major,
/// overwritten); `dims` = (m, k, I). A register tile pairs [`HALF`] gate rows with the up rows of the same
/// columns, so the (m × 2I) projection is never written. Each output has the bits of [`gemm_nt`] followed by
/// `elementwise::bf16::swiglu_packed` (see [`tile_swiglu`]). Panics where the CPU lacks AVX512-BF16, `k` is 0, or
/// a slice is shorter than its shape.
pub fn gemm_nt_swiglu(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, i): (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    assert!(super::supported(), "the bf16 GEMM needs AVX512-BF16");
    if !super::swiglu_has_work(a, w, bias, (m, k, i), c) {
        return;
    }
    let copy = rows_share_cache_sets(k).then(|| padded_copy(w, 2 * i, k));
    let (w, stride) = match &copy {
        Some(c) => (&c[..], k + COPY_PAD),
        None => (w, k),
    };
    let out = SharedOut::new(c, i, &[]);
    let bias = (!bias.is_empty()).then(|| bias.split_at(i));
    over_tiles(a, (m, k), i.div_ceil(HALF), |g, p, panel| {
        let j0 = g * HALF;
        // Gate rows j0.., then the up rows of the same columns; a short last group repeats its last column.
        let wrows: [*const bf16; NJ] = std::array::from_fn(|t| {
            let col = (j0 + t % HALF).min(i - 1);
            let row = if t < HALF { col } else { i + col };
            w[row * stride..][..k].as_ptr()
        });
        let (i0, rows, cols) = (p * MR, MR.min(m - p * MR), HALF.min(i - j0));
        // SAFETY: as in `gemm_nt`; the outputs are m × I, and this task alone writes these columns of these rows.
        unsafe { tile_swiglu(k, panel, wrows, (&out, bias), (i0, j0), (rows, cols)) };
    });
}

/// `f(group, panel, the panel's two runs)` for every group of [`NJ`] weight rows (`groups` of them) and every
/// panel of [`MR`] rows of `a` (m × k, packed here once), on rayon's threads: each task a few panels (their
/// packed rows stay in L2) by a share of the groups, each weight row of a tile read once for all of them.
fn over_tiles(
    a: &[bf16],
    (m, k): (usize, usize),
    groups: usize,
    f: impl Fn(usize, usize, [*const u32; MV]) + Sync,
) {
    // Each 16 rows of `a` packed as a run of AMX tiles: pair `q` of row `r` at `q · 16 + r` from the run's start.
    let packed = super::amx::pack_a(a, m, k);
    let (runs, per_run) = (m.div_ceil(LANES), packed.len() / m.div_ceil(LANES));
    // Panel p's runs; a last panel of one run reads it twice (the second one's sums are not written).
    let panel = |p: usize| -> [*const u32; MV] {
        std::array::from_fn(|v| {
            packed[(MV * p + v).min(runs - 1) * per_run..]
                .as_ptr()
                .cast()
        })
    };
    let per_task = panels_per_task(k);
    let row_tasks = m.div_ceil(MR * per_task);
    let want = 4 * rayon::current_num_threads();
    let per = groups.div_ceil(want.div_ceil(row_tasks)).max(1);
    let tasks: Vec<(usize, usize)> = (0..row_tasks)
        .flat_map(|t| (0..groups).step_by(per).map(move |g| (t, g)))
        .collect();
    tasks.into_par_iter().for_each(|(t, g0)| {
        let panels = t * per_task..(m.div_ceil(MR)).min((t + 1) * per_task);
        for g in g0..groups.min(g0 + per) {
            for p in panels.clone() {
                f(g, p, panel(p));
            }
        }
    });
}

/// Values of padding after each weight row's copy: 64 bytes, one more cache set from row to row.
const COPY_PAD: usize = 32;

/// Whether the [`NJ`] weight rows of a tile, `k` values apart, fall into so few of the L1 data cache's sets
/// (64 sets of 64-byte lines, as on every x86-64 CPU with AVX-512) that they evict each other: more than four of
/// them in one set (at `k` = 2048, 4 KB apart, all twelve share one). Such a weight is read from a copy made
/// once per call, each row padded by [`COPY_PAD`] (the products are the same: the copy holds the same values).
fn rows_share_cache_sets(k: usize) -> bool {
    let mut sets = [0u8; 64];
    for t in 0..NJ {
        sets[t * 2 * k / 64 % 64] += 1;
    }
    sets.iter().any(|&s| s > 4)
}

/// The `n` rows of `w` (each `k` values), each followed by [`COPY_PAD`] zeros.
fn padded_copy(w: &[bf16], n: usize, k: usize) -> Vec<bf16> {
    let mut copy = vec![bf16::ZERO; n * (k + COPY_PAD)];
    copy.par_chunks_mut(k + COPY_PAD)
        .zip(w[..n * k].par_chunks(k))
        .for_each(|(to, from)| to[..k].copy_from_slice(from));
    copy
}

/// The products of one panel of `a` (two runs of packed pairs, `k.div_ceil(2)` pairs of 16 rows each) with
/// [`NJ`] weight rows of `k` values each, stored into `out` from row `i0`, column `j0`: the first `rows` rows'
/// first `cols` sums, each plus its column's bias rounded to bf16 (16 rows at a time through the AMX kernel's
/// stores: transposed in registers, one masked store per row; the bits of `bf16::from_f32`).
///
/// # Safety
/// The CPU has the features of [`super::supported`]; each `a` pointer reads a run, every weight pointer `k` values;
/// those outputs lie inside `out` and no other task writes them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
unsafe fn tile(
    k: usize,
    a: [*const u32; MV],
    w: [*const bf16; NJ],
    out: &SharedOut,
    (i0, j0): (usize, usize),
    (rows, cols): (usize, usize),
) {
    use std::arch::x86_64::*;
    let acc = sums(k, a, w);
    // Weight row t's 16 sums as row t of a tile (rows past NJ zero), stored transposed: one row of c each.
    let mut sums = super::amx::ZERO_TILE;
    for (v, row) in acc.iter().enumerate().take(rows.div_ceil(LANES)) {
        for (t, s) in row.iter().enumerate() {
            _mm512_store_ps(sums.0[t * LANES..].as_mut_ptr().cast(), *s);
        }
        let at = (i0 + v * LANES, j0);
        super::amx::store_sums(&sums, out, at, ((rows - v * LANES).min(LANES), cols), true);
    }
}

/// The SwiGLU of one register tile of [`gemm_nt_swiglu`] into `out` (m × I) from row `i0`, column `j0`: for the
/// first `rows` rows and `cols` columns, each half's sum plus its bias rounded to bf16 once (the product's bits),
/// then as `swiglu_packed` computes a row of I columns: the gate's SiLU in f32 through the vectorised `silu16`
/// for the columns its vector loops cover (the first I rounded down to a multiple of 8; `exp16` is `exp8` lane for
/// lane) and libm's `exp` past them, rounded to bf16, times the up value, rounded to bf16. Each column is one
/// vector over the tile's 16 rows, stored a value at a time.
///
/// # Safety
/// As [`tile`]'s, the CPU also having AVX2 and FMA; each bias holds I values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")]
unsafe fn tile_swiglu(
    k: usize,
    a: [*const u32; MV],
    w: [*const bf16; NJ],
    (out, bias): SwiGluOut<'_>,
    (i0, j0): (usize, usize),
    (rows, cols): (usize, usize),
) {
    use std::arch::x86_64::*;
    let rounded = |v: __m512| super::amx::widen16(super::amx::round16_bf16(v));
    let vector_cols = out.n / 8 * 8;
    let acc = sums(k, a, w);
    for (v, run) in acc.iter().enumerate().take(rows.div_ceil(LANES)) {
        for t in 0..cols {
            let j = j0 + t;
            let (mut g, mut u) = (run[t], run[HALF + t]);
            if let Some((bg, bu)) = bias {
                g = _mm512_add_ps(g, _mm512_set1_ps(bg[j]));
                u = _mm512_add_ps(u, _mm512_set1_ps(bu[j]));
            }
            let (g, u) = (rounded(g), rounded(u));
            let silu = if j < vector_cols {
                crate::ops::simd::avx512::silu16(g)
            } else {
                let mut x = [0f32; LANES];
                _mm512_storeu_ps(x.as_mut_ptr(), g);
                x.iter_mut().for_each(|x| *x /= 1.0 + (-*x).exp());
                _mm512_loadu_ps(x.as_ptr())
            };
            let y = super::amx::round16_bf16(_mm512_mul_ps(rounded(silu), u));
            let mut bits = [0u16; LANES];
            _mm256_storeu_si256(bits.as_mut_ptr().cast(), y);
            for (r, &b) in bits.iter().enumerate().take((rows - v * LANES).min(LANES)) {
                *out.c.add((i0 + v * LANES + r) * out.n + j) = half::bf16::from_bits(b);
            }
        }
    }
}

/// The register tile's sums: `acc[v][t]` holds the 16 rows of run `v` times weight row `t`, each one f32 chain
/// over the depth pairs in order from zero.
///
/// # Safety
/// As [`tile`]'s.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
unsafe fn sums(
    k: usize,
    a: [*const u32; MV],
    w: [*const bf16; NJ],
) -> [[std::arch::x86_64::__m512; NJ]; MV] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NJ]; MV];
    // One pair of depths: the rows' vectors, then each weight row's pair broadcast and multiplied with them.
    macro_rules! step {
        ($q:expr, $pair:expr) => {{
            let av: [__m512bh; MV] = std::array::from_fn(|v| {
                std::mem::transmute(_mm512_load_si512(a[v].add($q * LANES).cast()))
            });
            for (t, wt) in w.iter().enumerate() {
                let b: __m512bh = std::mem::transmute(_mm512_set1_epi32($pair(*wt) as i32));
                for (row, x) in acc.iter_mut().zip(&av) {
                    row[t] = _mm512_dpbf16_ps(row[t], *x, b);
                }
            }
        }};
    }
    let full = k / 2;
    for q in 0..full {
        step!(q, |wt: *const half::bf16| wt
            .add(2 * q)
            .cast::<u32>()
            .read_unaligned());
    }
    if k % 2 == 1 {
        // The last depth alone: its pair's high half is zero, as in the packed rows.
        step!(full, |wt: *const half::bf16| (*wt.add(k - 1)).to_bits()
            as u32);
    }
    acc
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(
    _: usize,
    _: [*const u32; MV],
    _: [*const bf16; NJ],
    _: &SharedOut,
    _: (usize, usize),
    _: (usize, usize),
) {
    unreachable!("the bf16 GEMM runs only where super::supported()")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile_swiglu(
    _: usize,
    _: [*const u32; MV],
    _: [*const bf16; NJ],
    _: SwiGluOut<'_>,
    _: (usize, usize),
    _: (usize, usize),
) {
    unreachable!("the bf16 GEMM runs only where super::supported()")
}

#[cfg(test)]
mod tests {
    use super::super::check::{self, matches_reference, rows_stand_alone};
    use super::*;

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_odd_depths() {
        if check::skip() {
            return;
        }
        // Partial row and weight tiles, odd k (a last lone depth), several tasks, k = 0.
        matches_reference(
            &gemm_nt,
            &[
                (1, 1, 1),
                (5, 7, 15),
                (16, 2, 12),
                (33, 31, 13),
                (32, 64, 24),
                (150, 97, 29),
                (3, 20, 200),
                (4, 0, 9),
                // Weight rows 2 KB and 4 KB apart: read from the padded copy.
                (33, 1024, 29),
                (5, 2048, 13),
            ],
        );
    }

    /// The fused pass gives the bits of the product (the bias in its sums) followed by the bf16 SwiGLU pass, with
    /// and without a bias: partial row and column tiles, an odd depth, several tasks, columns in the SwiGLU pass's
    /// 16-wide, 8-wide and scalar parts (I = 29, 3,420), a weight read from its padded copy (k = 1,024).
    #[test]
    fn swiglu_matches_the_product_then_the_swiglu_pass() {
        if check::skip() {
            return;
        }
        check::swiglu_matches_product_then_pass(
            &gemm_nt,
            &gemm_nt_swiglu,
            &[
                (1, 1, 1),
                (37, 70, 12),
                (70, 96, 16),
                (150, 97, 29),
                (33, 1024, 13),
                (5, 64, 3420),
            ],
        );
    }

    #[test]
    fn weight_rows_a_power_of_two_kilobytes_apart_are_copied() {
        assert!(
            rows_share_cache_sets(2048)
                && rows_share_cache_sets(1024)
                && rows_share_cache_sets(4096)
        );
        for k in [896, 1280, 2080, 3420, 3584, 4864, 11008, 18944] {
            assert!(!rows_share_cache_sets(k), "k = {k}");
        }
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip() {
            return;
        }
        // Rows 100..111 alone (another place in the panels and tasks), rows across a task's end, one row, and
        // all rows on one thread.
        let parts = [100..111, 125..131, 7..8];
        rows_stand_alone(
            &gemm_nt,
            (2 * MR * panels_per_task(301) + 9, 301, 70),
            &parts,
        );
    }
}
