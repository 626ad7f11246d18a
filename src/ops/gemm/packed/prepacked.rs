//! The packed kernel on one thread with the `w` side packed once and reused: attention multiplies every query
//! block of a head by the same keys and values, so they are packed once per (segment, KV head) rather than once
//! per product.

use super::{kernel_tile, pack_panel, pack_rows, KC, MR, NR};

/// A matrix packed as the kernel's `w` panels, `n` rows (output columns) by `k` depths: for each depth block of
/// [`KC`], its 16-column panels in order, value (p, c) of a panel at `p * NR + c`.
pub(crate) struct PackedW {
    n: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedW {
    /// Pack `n` rows `row(j)` of `k` values each (`w` of `a · wᵀ`; attention's keys).
    pub fn rows<'a>(n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        let mut me = Self::zeros(n, k);
        let panels = n.div_ceil(NR);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let block = &mut me.data[pc * panels * NR..][..panels * NR * kc];
            for (p, dst) in block.chunks_mut(NR * kc).enumerate() {
                pack_panel(&row, (p * NR, n.min(p * NR + NR)), (pc, kc), dst);
            }
        }
        me
    }

    /// Pack the transpose of `k` rows `row(p)` of `n` values each (`w` = xᵀ for `a · x`; attention's values).
    pub fn columns<'a>(n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        let mut me = Self::zeros(n, k);
        let panels = n.div_ceil(NR);
        for p in 0..k {
            let (src, block_at) = (&row(p)[..n], (p / KC) * KC * panels * NR);
            let kc = KC.min(k - (p / KC) * KC);
            for (j, &v) in src.iter().enumerate() {
                let at = block_at + (j / NR) * NR * kc + (p % KC) * NR + j % NR;
                me.data[at] = v;
            }
        }
        me
    }

    fn zeros(n: usize, k: usize) -> Self {
        Self {
            n,
            k,
            data: vec![0.0; n.div_ceil(NR) * NR * k],
        }
    }
}

/// `c = a · wᵀ` over the first `n` columns and the first `k` depths of `w`, for `m` rows `a(i)` (each at least `k`
/// values), into `c` (row stride `ldc`; written, not added to), on this thread. Each output has the bits of
/// [`super::sgemm_nt`]'s: one FMA chain per depth block from zero, the blocks added in order.
///
/// Panics where the CPU lacks AVX2/FMA, `n` or `k` exceed `w`'s, or `c` is shorter than `(m - 1) · ldc + n`.
pub(crate) fn gemm_nt_packed<'a>(
    m: usize,
    (k, n): (usize, usize),
    a: impl Fn(usize) -> &'a [f32],
    w: &PackedW,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(super::supported(), "packed_gemm needs AVX2 and FMA");
    assert!(k <= w.k && n <= w.n && ldc >= n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n);
    if k == 0 {
        c.chunks_mut(ldc).take(m).for_each(|r| r[..n].fill(0.0));
        return;
    }
    let panels = w.n.div_ceil(NR);
    let mut apack = vec![0f32; m.div_ceil(MR) * MR * KC.min(k)];
    for pc in (0..k).step_by(KC) {
        let (kc, stored) = (KC.min(k - pc), KC.min(w.k - pc));
        let ap = &mut apack[..m.div_ceil(MR) * MR * kc];
        pack_rows(&a, (0, m), (pc, kc), ap);
        let block = &w.data[pc * panels * NR..];
        for p in 0..n.div_ceil(NR) {
            let b = &block[p * NR * stored..][..NR * kc];
            for (t, ablk) in ap.chunks(MR * kc).enumerate() {
                let (i0, j0) = (t * MR, p * NR);
                let tile = (MR.min(m - i0), NR.min(n - j0), pc == 0);
                // SAFETY: AVX2/FMA checked; the tile's rows × columns lie inside c (i0 < m, j0 < n, c checked).
                unsafe { kernel_tile(tile, kc, ablk, b, c[i0 * ldc + j0..].as_mut_ptr(), ldc) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{self, values};
    use super::*;

    /// Against `sgemm_nt` bit for bit, for a `w` packed as rows and as the transpose of its transpose, over a
    /// part of its columns and depths (the attention's causal blocks) and the whole.
    #[test]
    fn has_sgemm_nts_bits_on_part_or_all_of_w() {
        if check::skip_without_avx2() {
            return;
        }
        let (m, k, n) = (13, 2 * KC + 37, 41);
        let (a, w) = (values(m * k, 5), values(n * k, 6));
        let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let by_rows = PackedW::rows(n, k, |j| &w[j * k..(j + 1) * k]);
        let by_columns = PackedW::columns(n, k, |p| &wt[p * n..(p + 1) * n]);
        for (kk, nn) in [(k, n), (KC + 5, 17), (40, 3)] {
            let wpart: Vec<f32> = (0..nn)
                .flat_map(|j| w[j * k..j * k + kk].to_vec())
                .collect();
            let mut want = vec![0f32; m * nn];
            super::super::sgemm_nt(
                &a.chunks(k)
                    .flat_map(|r| r[..kk].to_vec())
                    .collect::<Vec<_>>(),
                &wpart,
                (m, kk, nn),
                &mut want,
            );
            for packed in [&by_rows, &by_columns] {
                let ldc = nn + 3;
                let mut c = vec![f32::NAN; m * ldc];
                gemm_nt_packed(m, (kk, nn), |i| &a[i * k..(i + 1) * k], packed, &mut c, ldc);
                let got: Vec<f32> = c.chunks(ldc).flat_map(|r| r[..nn].to_vec()).collect();
                assert_eq!(got, want, "k {kk}, n {nn}");
            }
        }
    }
}
