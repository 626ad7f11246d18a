//! The packed kernel on one thread with the `w` side packed once and reused: attention multiplies every query
//! block of a head by the same keys and values, so they are packed once per (segment, KV head) rather than once
//! per product.

use super::micro::{Avx2, Avx512, Isa, Micro};
use super::{pack_panel, pack_rows, run_tile};

/// A matrix packed as the kernel's `w` panels for one tile ([`Isa`]), `n` rows (output columns) by `k` depths: for
/// each depth block of the tile's `KC`, its `NR`-column panels in order, value (p, c) of a panel at `p * NR + c`.
pub(crate) struct PackedW {
    isa: Isa,
    n: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedW {
    /// Pack `n` rows `row(j)` of `k` values each (`w` of `a · wᵀ`; attention's keys) for the CPU's widest tile.
    /// Panics where the CPU lacks AVX2/FMA.
    pub fn rows<'a>(n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        Self::rows_for(active_isa(), n, k, row)
    }

    /// Pack the transpose of `k` rows `row(p)` of `n` values each (`w` = xᵀ for `a · x`; attention's values) for
    /// the CPU's widest tile. Panics where the CPU lacks AVX2/FMA.
    pub fn columns<'a>(n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        Self::columns_for(active_isa(), n, k, row)
    }

    /// [`PackedW::rows`] for the tile of `isa`.
    fn rows_for<'a>(isa: Isa, n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        match isa {
            Isa::Avx2 => Self::rows_with::<Avx2>(isa, n, k, row),
            Isa::Avx512 => Self::rows_with::<Avx512>(isa, n, k, row),
        }
    }

    /// [`PackedW::columns`] for the tile of `isa`.
    fn columns_for<'a>(isa: Isa, n: usize, k: usize, row: impl Fn(usize) -> &'a [f32]) -> Self {
        match isa {
            Isa::Avx2 => Self::columns_with::<Avx2>(isa, n, k, row),
            Isa::Avx512 => Self::columns_with::<Avx512>(isa, n, k, row),
        }
    }

    fn rows_with<'a, M: Micro>(
        isa: Isa,
        n: usize,
        k: usize,
        row: impl Fn(usize) -> &'a [f32],
    ) -> Self {
        let mut me = Self::zeros::<M>(isa, n, k);
        let panels = n.div_ceil(M::NR);
        for pc in (0..k).step_by(M::KC) {
            let kc = M::KC.min(k - pc);
            let block = &mut me.data[pc * panels * M::NR..][..panels * M::NR * kc];
            for (p, dst) in block.chunks_mut(M::NR * kc).enumerate() {
                pack_panel::<M>(&row, (p * M::NR, n.min(p * M::NR + M::NR)), (pc, kc), dst);
            }
        }
        me
    }

    fn columns_with<'a, M: Micro>(
        isa: Isa,
        n: usize,
        k: usize,
        row: impl Fn(usize) -> &'a [f32],
    ) -> Self {
        let mut me = Self::zeros::<M>(isa, n, k);
        let (nr, kcmax) = (M::NR, M::KC);
        let panels = n.div_ceil(nr);
        for p in 0..k {
            let (src, block_at) = (&row(p)[..n], (p / kcmax) * kcmax * panels * nr);
            let kc = kcmax.min(k - (p / kcmax) * kcmax);
            for (j, &v) in src.iter().enumerate() {
                let at = block_at + (j / nr) * nr * kc + (p % kcmax) * nr + j % nr;
                me.data[at] = v;
            }
        }
        me
    }

    fn zeros<M: Micro>(isa: Isa, n: usize, k: usize) -> Self {
        Self {
            isa,
            n,
            k,
            data: vec![0.0; n.div_ceil(M::NR) * M::NR * k],
        }
    }
}

/// The CPU's widest tile; panics where it runs none.
fn active_isa() -> Isa {
    super::active().expect("packed_gemm needs AVX2 and FMA")
}

/// `c = a · wᵀ` over the first `n` columns and the first `k` depths of `w`, for `m` rows `a(i)` (each at least `k`
/// values), into `c` (row stride `ldc`; written, not added to), on this thread, with the tile `w` was packed for.
/// Each output has the bits of [`super::sgemm_nt`]'s with that tile: one FMA chain per depth block from zero, the
/// blocks added in order.
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
    assert!(
        Isa::detect().is_some_and(|best| best == w.isa || w.isa == Isa::Avx2),
        "this CPU does not run the packed kernel's {:?} tile",
        w.isa
    );
    assert!(k <= w.k && n <= w.n && ldc >= n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n);
    if k == 0 {
        c.chunks_mut(ldc).take(m).for_each(|r| r[..n].fill(0.0));
        return;
    }
    match w.isa {
        Isa::Avx2 => gemm_nt_packed_with::<Avx2>(m, (k, n), a, w, c, ldc),
        Isa::Avx512 => gemm_nt_packed_with::<Avx512>(m, (k, n), a, w, c, ldc),
    }
}

/// [`gemm_nt_packed`] with the tile `M` that `w` was packed for, `m`, `n`, `k` > 0.
fn gemm_nt_packed_with<'a, M: Micro>(
    m: usize,
    (k, n): (usize, usize),
    a: impl Fn(usize) -> &'a [f32],
    w: &PackedW,
    c: &mut [f32],
    ldc: usize,
) {
    let (mr, nr) = (M::MR, M::NR);
    let panels = w.n.div_ceil(nr);
    let mut apack = vec![0f32; m.div_ceil(mr) * mr * M::KC.min(k)];
    for pc in (0..k).step_by(M::KC) {
        let (kc, stored) = (M::KC.min(k - pc), M::KC.min(w.k - pc));
        let ap = &mut apack[..m.div_ceil(mr) * mr * kc];
        pack_rows::<M>(&a, (0, m), (pc, kc), ap);
        let block = &w.data[pc * panels * nr..];
        for p in 0..n.div_ceil(nr) {
            let b = &block[p * nr * stored..][..nr * kc];
            for (t, ablk) in ap.chunks(mr * kc).enumerate() {
                let (i0, j0) = (t * mr, p * nr);
                let tile = (mr.min(m - i0), nr.min(n - j0), pc == 0);
                // SAFETY: the CPU runs M (checked by the caller); the tile's rows × columns lie inside c (i0 < m,
                // j0 < n, c checked).
                unsafe { run_tile::<M>(tile, kc, ablk, b, c[i0 * ldc + j0..].as_mut_ptr(), ldc) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{self, values};
    use super::super::sgemm_nt_on;
    use super::*;

    /// Against `sgemm_nt` bit for bit with each tile the CPU runs, for a `w` packed as rows and as the transpose
    /// of its transpose, over a part of its columns and depths (the attention's causal blocks) and the whole.
    #[test]
    fn has_sgemm_nts_bits_on_part_or_all_of_w() {
        if check::skip_without_avx2() {
            return;
        }
        for isa in Isa::all_supported() {
            has_sgemm_nts_bits(isa);
        }
    }

    fn has_sgemm_nts_bits(isa: Isa) {
        let (m, k, n) = (13, 2 * 384 + 37, 41);
        let (a, w) = (values(m * k, 5), values(n * k, 6));
        let wt: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let by_rows = PackedW::rows_for(isa, n, k, |j| &w[j * k..(j + 1) * k]);
        let by_columns = PackedW::columns_for(isa, n, k, |p| &wt[p * n..(p + 1) * n]);
        for (kk, nn) in [(k, n), (384 + 5, 17), (256 + 5, 33), (40, 3)] {
            let wpart: Vec<f32> = (0..nn)
                .flat_map(|j| w[j * k..j * k + kk].to_vec())
                .collect();
            let apart: Vec<f32> = a.chunks(k).flat_map(|r| r[..kk].to_vec()).collect();
            let mut want = vec![0f32; m * nn];
            sgemm_nt_on(isa, &apart, &wpart, (m, kk, nn), &mut want);
            for packed in [&by_rows, &by_columns] {
                let ldc = nn + 3;
                let mut c = vec![f32::NAN; m * ldc];
                gemm_nt_packed(m, (kk, nn), |i| &a[i * k..(i + 1) * k], packed, &mut c, ldc);
                let got: Vec<f32> = c.chunks(ldc).flat_map(|r| r[..nn].to_vec()).collect();
                assert_eq!(got, want, "{isa:?}: k {kk}, n {nn}");
            }
        }
    }
}
