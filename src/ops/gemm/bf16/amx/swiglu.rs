//! The gate and up projections of a SwiGLU MLP and the SwiGLU itself in one pass on AMX tiles:
//! `c = silu(a · gᵀ + b_g) · (a · uᵀ + b_u)` for the packed weight `w` = [g | u] (2I × k) of a gate-up
//! projection, without writing the (m × 2I) projection out and reading it back.
//!
//! A register block pairs gate tile `j` with up tile `j` (the same 16 output columns), so its sums hold both
//! halves of those columns for 32 rows. Each output is the product path's bits followed by the SwiGLU pass's:
//! each half's f32 sum plus its bias rounded to bf16 once, then the SiLU of the gate in f32 with the vectorised
//! `exp` of `elementwise::bf16::swiglu_packed` rounded to bf16, times the up value, rounded to bf16.

use std::mem::MaybeUninit;

use half::bf16;

use super::{run, supported, tiles, Plan, SharedOut, Tile, Weights, TILE};

/// `c = silu(a · gᵀ + b_g) · (a · uᵀ + b_u)` for `a` (m × k) and the gate-up weight `w` (2I × k: the gate's I rows,
/// then the up's), both row-major bf16, and `bias` (2I values, or empty: none) into `c` (m × I, row-major,
/// overwritten); `dims` = (m, k, I). Panics where the CPU lacks AMX ([`supported`]), `k` is 0, or a slice is
/// shorter than its shape.
pub fn gemm_nt_swiglu(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, i): (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    assert!(supported(), "the AMX bf16 GEMM needs AMX-BF16");
    if !super::super::swiglu_has_work(a, w, bias, (m, k, i), c) {
        return;
    }
    let (gate, up) = w[..2 * i * k].split_at(i * k);
    let plan = SwiGlu {
        gate: Weights::new(gate, i, k),
        up: Weights::new(up, i, k),
        bias: (!bias.is_empty()).then(|| bias.split_at(i)),
        out: SharedOut::new(c, i, &[]),
    };
    run(&plan, a, (m, k));
}

/// Gate tile `wp` and up tile `wp` as one pair; the SwiGLU of their sums into `out`.
struct SwiGlu<'a> {
    gate: Weights<'a>,
    up: Weights<'a>,
    /// The gate's and the up's bias (I values each).
    bias: Option<(&'a [f32], &'a [f32])>,
    out: SharedOut,
}

impl Plan for SwiGlu<'_> {
    fn pairs(&self) -> usize {
        self.gate.tiles
    }

    fn tiles_in(&self, _: usize) -> usize {
        2
    }

    fn chunk(&self, wp: usize, t: usize, q: usize) -> (*const u8, usize) {
        match t {
            0 => self.gate.chunk(wp, q),
            _ => self.up.chunk(wp, q),
        }
    }

    unsafe fn store(&self, wp: usize, (rt, nr): ([usize; 2], usize), sums: &[Tile; 4], m: usize) {
        let j0 = wp * TILE;
        let bias = self.bias.map(|(g, u)| (&g[j0..], &u[j0..]));
        for (r, &tile) in rt.iter().enumerate().take(nr) {
            let i0 = tile * TILE;
            let part = (TILE.min(m - i0), TILE.min(self.out.n - j0));
            // SAFETY: the tile's rows and columns lie inside c; this task alone writes them.
            unsafe {
                tiles::store_swiglu(
                    [&sums[r], &sums[2 + r]],
                    bias,
                    &self.out,
                    (i0, j0),
                    part,
                    true,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::check;
    use super::*;

    /// The fused pass gives the bits of the AMX product (the bias in its sums) followed by the bf16 SwiGLU pass,
    /// with and without a bias, over partial row and column tiles, an odd depth, several tasks.
    #[test]
    fn matches_the_product_then_the_swiglu_pass() {
        if check::skip() || !supported() {
            eprintln!("skipped: no AMX tiles here");
            return;
        }
        check::swiglu_matches_product_then_pass(
            &super::super::gemm_nt,
            &gemm_nt_swiglu,
            &[
                (1, 1, 1),
                (37, 70, 12),
                (70, 96, 16),
                (150, 97, 29),
                (64, 1280, 53),
            ],
        );
    }
}
