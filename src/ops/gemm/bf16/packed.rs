//! The bf16 GEMM of row segments on AVX512-BF16: `c = a · wᵀ` for a row-major bf16 `a` (m × k) and a linear
//! layer's bf16 weight `w` (n × k), read in place.
//!
//! `vdpbf16ps` adds to each f32 lane the products of one pair of bf16 values from each operand. Here a vector
//! holds 16 rows of `a` at one pair of depths (the activation packed once per call: [`pack_a`]), and the other
//! operand is one weight row's pair of depths broadcast to all lanes, read straight from `w` (its rows are
//! contiguous in depth, which is what a broadcast needs: no packing of the weight, no copy of it). A register
//! tile is [`MV`] × 16 rows of `a` by [`NJ`] weight rows: 24 accumulators, each an f32 chain over all of `k`'s
//! pairs in order from zero, rounded to bf16 once when stored.
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
/// Panels of `a` per task: the weight rows of a tile are read once for this many panels.
const PANELS_PER_TASK: usize = 4;

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
    let packed = pack_a(a, m, k);
    let panel_len = k.div_ceil(2) * MR;
    let out = SharedOut::new(c, n, bias);
    let row_tasks = m.div_ceil(MR * PANELS_PER_TASK);
    let groups = n.div_ceil(NJ);
    let want = 4 * rayon::current_num_threads();
    let per = groups.div_ceil(want.div_ceil(row_tasks)).max(1);
    let tasks: Vec<(usize, usize)> = (0..row_tasks)
        .flat_map(|t| (0..groups).step_by(per).map(move |g| (t, g)))
        .collect();
    tasks.into_par_iter().for_each(|(t, g0)| {
        let panels = t * PANELS_PER_TASK..(m.div_ceil(MR)).min((t + 1) * PANELS_PER_TASK);
        for g in g0..groups.min(g0 + per) {
            let j0 = g * NJ;
            // A short last group repeats its last weight row; those sums are not written.
            let wrows: [*const bf16; NJ] =
                std::array::from_fn(|t| w[(j0 + t).min(n - 1) * k..].as_ptr());
            for p in panels.clone() {
                let mut sums = [[0f32; MR]; NJ];
                // SAFETY: AVX512-BF16 checked above; the panel holds k.div_ceil(2) pairs of MR rows, each weight
                // row k values.
                unsafe { tile(k, packed[p * panel_len..].as_ptr(), wrows, &mut sums) };
                let (i0, rows, cols) = (p * MR, MR.min(m - p * MR), NJ.min(n - j0));
                for (jt, col) in sums.iter().take(cols).enumerate() {
                    for (r, &v) in col.iter().take(rows).enumerate() {
                        // SAFETY: (i0 + r, j0 + jt) lies inside c; this task alone writes these columns of
                        // these panels' rows.
                        unsafe { out.set(i0 + r, j0 + jt, v) };
                    }
                }
            }
        }
    });
}

/// The rows of `a` (m × k) as panels of [`MR`] rows, each a run of depth pairs: pair `q` of row `r` of panel `p`
/// is the 32-bit value at `(p · pairs + q) · MR + r`, depth `2q` in its low half and `2q + 1` in its high half
/// (the order `vdpbf16ps` pairs them in); zeros past `k` and for rows past `m`.
fn pack_a(a: &[bf16], m: usize, k: usize) -> Vec<u32> {
    let pairs = k.div_ceil(2);
    let mut packed = vec![0u32; m.div_ceil(MR) * pairs * MR];
    packed
        .par_chunks_mut(pairs * MR)
        .enumerate()
        .for_each(|(p, panel)| {
            for r in 0..MR.min(m - p * MR) {
                let row = &a[(p * MR + r) * k..][..k];
                for (q, pair) in row.chunks(2).enumerate() {
                    let hi = pair.get(1).map_or(0, |v| v.to_bits() as u32);
                    panel[q * MR + r] = pair[0].to_bits() as u32 | hi << 16;
                }
            }
        });
    packed
}

/// The products of one packed panel of `a` (`k.div_ceil(2)` pairs of [`MR`] rows) with [`NJ`] weight rows of `k`
/// values each, into `sums[t][r]` (weight row `t`, row `r` of the panel).
///
/// # Safety
/// The CPU has AVX-512F and AVX512-BF16; `a` reads the panel, every weight pointer `k` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile(k: usize, a: *const u32, w: [*const bf16; NJ], sums: &mut [[f32; MR]; NJ]) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NJ]; MV];
    // One pair of depths: the rows' vectors, then each weight row's pair broadcast and multiplied with them.
    macro_rules! step {
        ($q:expr, $pair:expr) => {{
            let av: [__m512bh; MV] = std::array::from_fn(|v| {
                std::mem::transmute(_mm512_loadu_si512(a.add($q * MR + v * LANES).cast()))
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
    for (v, row) in acc.iter().enumerate() {
        for (t, s) in row.iter().enumerate() {
            _mm512_storeu_ps(sums[t][v * LANES..].as_mut_ptr(), *s);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(_: usize, _: *const u32, _: [*const bf16; NJ], _: &mut [[f32; MR]; NJ]) {
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
            ],
        );
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip() {
            return;
        }
        // Rows 100..111 alone (another place in the panels and tasks), rows across a task's end, one row, and
        // all rows on one thread.
        let parts = [100..111, 125..131, 7..8];
        rows_stand_alone(&gemm_nt, (2 * MR * PANELS_PER_TASK + 9, 301, 70), &parts);
    }
}
