//! The built-in f32 GEMM: `c = a · wᵀ` for a row-major `a` (m × k) and a linear layer's weight `w` (n × k),
//! blocked for the caches with packed panels and a register tile per instruction set ([`micro`]): 14 × 32 with
//! AVX-512F, 6 × 16 with AVX2/FMA (the layout of BLIS and OpenBLAS). On a Zen 3 the AVX2 tile runs the vision
//! tower's products 13–29% faster than the `gemm` crate's AVX2 kernels, the text model's within 10%; on an
//! AVX-512 Xeon the AVX-512 tile, in the loop order of BLIS ([`blis`]) with panels packed by AVX-512 transposes
//! ([`pack`]), runs them within a few percent of the `gemm` crate's `x86-v4` kernels, some faster, some slower
//! (docs/performance.md has the figures).
//!
//! Every output is `Σ` over `k` in a fixed order: one FMA chain per block of `KC` values from zero, the blocks
//! added to the output in order. Nothing depends on `m`, on the row's place, on `n` or on the thread count
//! (padding rows and columns are zeros and only reach padding outputs), so each row's result is the same
//! whatever else is multiplied with it: batch-invariant by construction. The two tiles' blocks differ in depth,
//! so an AVX2-only and an AVX-512 CPU give different last bits.

use std::cell::RefCell;
use std::sync::OnceLock;

use rayon::prelude::*;

mod blis;
mod micro;
pub(crate) mod pack;
mod prepacked;
#[cfg(test)]
pub(super) mod timing;

pub use micro::Isa;
pub(crate) use micro::{Avx2, Avx512, Micro};
pub(crate) use prepacked::{gemm_nt_packed, PackedW};

/// The largest tile's values, the size of the stack copy of a partial tile.
const MAX_TILE: usize = 14 * 32;

/// Fewest rows for which the kernel beats the `gemm` crate: every product packs the whole weight, which a few
/// rows do not repay (AVX2 tile: 256 rows by a 1536 × 8960 weight, 0.8× the `gemm` crate; 768 by 1280 × 3420,
/// 1.07×).
pub const MIN_ROWS: usize = 768;

/// Whether this CPU runs the kernel (AVX2 and FMA).
pub fn supported() -> bool {
    Isa::detect().is_some()
}

/// The tile this CPU runs ([`Isa::detect`], looked up once); `None` where it runs none.
pub fn active() -> Option<Isa> {
    static ACTIVE: OnceLock<Option<Isa>> = OnceLock::new();
    *ACTIVE.get_or_init(Isa::detect)
}

/// The run's built-in f32 GEMM (no CBLAS library) for a segment of at least [`MIN_ROWS`] rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinGemm {
    /// The `gemm` crate behind candle's matmul (its AVX-512 kernels where the CPU has them).
    GemmCrate,
    /// This module's kernel, with the widest tile the CPU runs ([`active`]).
    Packed,
}

impl BuiltinGemm {
    /// The built-in GEMM for this CPU: the packed kernel where the CPU has AVX2 and FMA but no AVX-512F, unless
    /// `gemm_crate_only`. With AVX-512F the `gemm` crate's `x86-v4` kernels stay: the AVX-512 tile does not run
    /// every one of the model's products faster than they on an AVX-512 Xeon (docs/performance.md), though the
    /// tile alone runs at the core's FMA peak.
    pub fn for_this_cpu(gemm_crate_only: bool) -> Self {
        if active() == Some(Isa::Avx2) && !gemm_crate_only {
            Self::Packed
        } else {
            Self::GemmCrate
        }
    }

    /// Its name in logs and the manifest, with the tile that runs.
    pub fn describe(self) -> String {
        match (self, active()) {
            (Self::Packed, Some(isa)) => format!(
                "packed kernel ({}) for segments of {MIN_ROWS} rows or more, gemm crate (candle) below",
                isa.describe()
            ),
            _ => "gemm crate (candle)".to_string(),
        }
    }
}

/// `c = a · wᵀ` for `a` (m × k) and `w` (n × k), both row-major, into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads, with the CPU's widest tile. Panics where the CPU lacks AVX2/FMA
/// ([`supported`]) or a slice is shorter than its shape.
pub fn sgemm_nt(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let isa = active().expect("packed_gemm needs AVX2 and FMA");
    sgemm_nt_on(isa, a, w, dims, c);
}

/// [`sgemm_nt`] with the tile of `isa`, which the CPU must run.
pub fn sgemm_nt_on(isa: Isa, a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    assert!(
        Isa::detect().is_some_and(|best| best == isa || isa == Isa::Avx2),
        "this CPU does not run the packed kernel's {isa:?} tile"
    );
    match isa {
        Isa::Avx2 => sgemm_nt_with::<Avx2>(a, w, dims, c),
        Isa::Avx512 => {
            let blocking = blis::Blocking::for_caches::<Avx512>(blis::Caches::this_cpu());
            blis::sgemm_nt_blis::<Avx512>(a, w, dims, c, blocking)
        }
    }
}

/// [`sgemm_nt`] with the tile `M` (which the CPU runs), in the loop order of GotoBLAS: per depth block, the `w`
/// columns packed once and shared by the threads, each task packing `MC` rows of `a` (the AVX2 tile's order).
fn sgemm_nt_with<M: Micro>(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let (m, k, n) = dims;
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let out = SharedOut(c.as_mut_ptr());
    let mut bpack = Vec::new();
    for jc in (0..n).step_by(M::NC) {
        let nc = M::NC.min(n - jc);
        let panels = nc.div_ceil(M::NR);
        for pc in (0..k).step_by(M::KC) {
            let kc = M::KC.min(k - pc);
            bpack.resize(panels * M::NR * kc, 0.0);
            bpack
                .par_chunks_mut(M::NR * kc)
                .enumerate()
                .for_each(|(p, dst)| {
                    let cols = (jc + p * M::NR, n.min(jc + p * M::NR + M::NR));
                    pack_panel::<M>(|j| &w[j * k..(j + 1) * k], cols, (pc, kc), dst)
                });
            let block = DepthBlock {
                a,
                dims,
                jc,
                depth: (pc, kc),
                packed_w: &bpack,
            };
            blocks(m, panels, M::MC)
                .into_par_iter()
                // SAFETY: the CPU runs M (checked by the callers); the tasks cover disjoint row blocks × column
                // panels of c.
                .for_each(|(ic, cols)| unsafe { block.task::<M>(ic, cols, &out) });
        }
    }
}

/// One (column block, depth block) of a product: `a` and the product's `dims`, the block's first column `jc`, its
/// depths `(pc, kc)` and the weight's columns packed for them.
struct DepthBlock<'a> {
    a: &'a [f32],
    dims: (usize, usize, usize),
    jc: usize,
    depth: (usize, usize),
    packed_w: &'a [f32],
}

impl DepthBlock<'_> {
    /// Pack the `MC` rows of `a` from `ic` and multiply them by the packed column panels `cols`, into `out`
    /// (written for the first depth block, added to after).
    ///
    /// # Safety
    /// The CPU runs `M`; `out` is the product's output and no other task writes these rows × panels.
    unsafe fn task<M: Micro>(&self, ic: usize, cols: std::ops::Range<usize>, out: &SharedOut) {
        let ((m, k, n), (pc, kc)) = (self.dims, self.depth);
        let mc = M::MC.min(m - ic);
        APACK.with(|cell| {
            let mut ap = cell.borrow_mut();
            ap.resize(mc.div_ceil(M::MR) * M::MR * kc, 0.0);
            pack_rows::<M>(
                |i| &self.a[i * k..(i + 1) * k],
                (ic, ic + mc),
                (pc, kc),
                &mut ap,
            );
            for p in cols {
                let j0 = self.jc + p * M::NR;
                let b = &self.packed_w[p * M::NR * kc..(p + 1) * M::NR * kc];
                for (t, ablk) in ap.chunks(M::MR * kc).enumerate() {
                    let i0 = ic + t * M::MR;
                    let tile = (M::MR.min(m - i0), M::NR.min(n - j0), pc == 0);
                    // The tile lies inside c: i0 < m, j0 < n.
                    run_tile::<M>(tile, kc, ablk, b, out.at(i0 * n + j0), n);
                }
            }
        });
    }
}

thread_local! {
    static APACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

pub(super) struct SharedOut(pub(super) *mut f32);
// SAFETY: the tasks write disjoint tiles of the output inside one rayon scope.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The output's value `i`.
    ///
    /// # Safety
    /// `i` lies inside the output.
    pub(super) unsafe fn at(&self, i: usize) -> *mut f32 {
        self.0.add(i)
    }
}

/// The tasks of one (column block, depth block): row blocks of `mc` rows × ranges of column panels, enough
/// of them for every thread to have several.
fn blocks(m: usize, panels: usize, mc: usize) -> Vec<(usize, std::ops::Range<usize>)> {
    let row_blocks = m.div_ceil(mc);
    let want = 4 * rayon::current_num_threads();
    let chunks = want.div_ceil(row_blocks).clamp(1, panels);
    let per = panels.div_ceil(chunks);
    (0..m)
        .step_by(mc)
        .flat_map(|ic| {
            (0..panels)
                .step_by(per)
                .map(move |p| (ic, p..panels.min(p + per)))
        })
        .collect()
}

/// Pack rows `row(i)` for `i` in `rows` (each at least `pc + kc` values), the `kc` depths from `pc`, as panels of
/// `MR` rows: value (p, r) of a panel at `p * MR + r`; rows past the end are zeros.
pub(crate) fn pack_rows<'a, M: Micro>(
    row: impl Fn(usize) -> &'a [f32],
    rows: (usize, usize),
    (pc, kc): (usize, usize),
    dst: &mut [f32],
) {
    if M::PACK16 {
        for (t, panel) in dst.chunks_mut(M::MR * kc).enumerate() {
            let first = rows.0 + t * M::MR;
            let srcs: Vec<*const f32> = (first..rows.1.min(first + M::MR))
                .map(|i| row(i)[pc..pc + kc].as_ptr())
                .collect();
            // SAFETY: M::PACK16 tiles run only on CPUs with AVX-512F; each source row holds kc values from its
            // pointer, the panel kc × MR (MR ≤ 16).
            unsafe { pack::transpose_into(&srcs, kc, panel.as_mut_ptr(), M::MR, lanes(M::MR)) };
        }
        return;
    }
    for (t, panel) in dst.chunks_mut(M::MR * kc).enumerate() {
        for r in 0..M::MR {
            let i = rows.0 + t * M::MR + r;
            if i < rows.1 {
                for (p, &v) in row(i)[pc..pc + kc].iter().enumerate() {
                    panel[p * M::MR + r] = v;
                }
            } else {
                for p in 0..kc {
                    panel[p * M::MR + r] = 0.0;
                }
            }
        }
    }
}

/// Pack weight rows (output columns) `row(j)` for `j` in `cols` (at most `NR`; each at least `pc + kc` values),
/// the `kc` depths from `pc`, as one panel: value (p, c) at `p * NR + c`; columns past the end are zeros.
pub(crate) fn pack_panel<'a, M: Micro>(
    row: impl Fn(usize) -> &'a [f32],
    cols: (usize, usize),
    (pc, kc): (usize, usize),
    dst: &mut [f32],
) {
    let valid = cols.1 - cols.0;
    if M::PACK16 {
        let srcs: Vec<*const f32> = (cols.0..cols.1)
            .map(|j| row(j)[pc..pc + kc].as_ptr())
            .collect();
        for (h, part) in srcs
            .chunks(16)
            .chain(std::iter::repeat(&[][..]))
            .take(M::NR / 16)
            .enumerate()
        {
            // SAFETY: M::PACK16 tiles run only on CPUs with AVX-512F; each source row holds kc values from its
            // pointer, the panel kc × NR (NR a multiple of 16).
            unsafe { pack::transpose_into(part, kc, dst[h * 16..].as_mut_ptr(), M::NR, u16::MAX) };
        }
        return;
    }
    if valid < M::NR {
        dst.fill(0.0);
    }
    let rows: Vec<&[f32]> = (0..valid).map(|c| &row(cols.0 + c)[pc..pc + kc]).collect();
    for (p, out) in dst.chunks_exact_mut(M::NR).enumerate() {
        for (o, r) in out.iter_mut().zip(&rows) {
            *o = r[p];
        }
    }
}

/// The mask of the first `n` of 16 lanes.
fn lanes(n: usize) -> u16 {
    if n >= 16 {
        u16::MAX
    } else {
        (1u16 << n) - 1
    }
}

/// Multiply a packed `a` panel by a packed `w` panel of depth `kc` into the tile `(rows, cols, first)` at `c` (row
/// stride `ldc`): its valid rows and columns, and whether this depth block is the first (the output is written)
/// or a later one (added to the output).
///
/// # Safety
/// The CPU runs `M`; `c` points at `rows` rows of `cols` writable values `ldc` apart; the panels hold
/// `kc` × `MR` and `kc` × `NR` values.
unsafe fn run_tile<M: Micro>(
    (rows, cols, first): (usize, usize, bool),
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    ldc: usize,
) {
    debug_assert!(a.len() >= kc * M::MR && b.len() >= kc * M::NR);
    if rows == M::MR && cols == M::NR {
        M::kernel(kc, a.as_ptr(), b.as_ptr(), c, ldc, !first);
        return;
    }
    // A partial tile goes through a full one on the stack: the same sums, then its valid part copied.
    let mut tmp = [0f32; MAX_TILE];
    for r in 0..rows {
        for j in 0..cols {
            tmp[r * M::NR + j] = *c.add(r * ldc + j);
        }
    }
    M::kernel(kc, a.as_ptr(), b.as_ptr(), tmp.as_mut_ptr(), M::NR, !first);
    for r in 0..rows {
        for j in 0..cols {
            *c.add(r * ldc + j) = tmp[r * M::NR + j];
        }
    }
}

/// What the CPU GEMM kernels' tests share: inputs, and the check against an f64 reference.
#[cfg(test)]
pub(crate) mod check {
    use std::ops::Range;

    /// `len` values in [-1, 1), different for each `seed`.
    pub fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2000) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// True, with a line saying so, where this CPU cannot run the kernels (no AVX2/FMA): the test then skips.
    pub(crate) fn skip_without_avx2() -> bool {
        let skip = !super::supported();
        if skip {
            eprintln!("skipped: this CPU has no AVX2/FMA");
        }
        skip
    }

    /// True, with a line saying so, where this CPU has no AVX-512F: the test then skips.
    pub(crate) fn skip_without_avx512() -> bool {
        let skip = super::Isa::detect() != Some(super::Isa::Avx512);
        if skip {
            eprintln!("skipped: this CPU has no AVX-512F");
        }
        skip
    }

    /// A kernel `c = a · wᵀ` with `dims` = (m, k, n).
    pub(crate) type Kernel = fn(&[f32], &[f32], (usize, usize, usize), &mut [f32]);

    /// `f`'s product, into an output that starts as NaN.
    pub fn product(f: Kernel, a: &[f32], w: &[f32], dims: (usize, usize, usize)) -> Vec<f32> {
        let mut c = vec![f32::NAN; dims.0 * dims.2];
        f(a, w, dims, &mut c);
        c
    }

    /// Assert `f` gives `a · wᵀ` on random inputs of each shape (m, k, n) of `shapes`.
    pub(crate) fn matches_reference(f: Kernel, shapes: &[(usize, usize, usize)]) {
        for &(m, k, n) in shapes {
            let (a, w) = (values(m * k, 1), values(n * k, 2));
            near_f64_reference(&a, &w, (m, k, n), &product(f, &a, &w, (m, k, n)));
        }
    }

    /// Assert that `f`'s rows `r` of a product of shape `dims` on random inputs have the same bits when computed
    /// without the other rows, for each range `r` of `parts`, and that the whole product has the same bits on
    /// one thread.
    pub(crate) fn rows_stand_alone(
        f: Kernel,
        (m, k, n): (usize, usize, usize),
        parts: &[Range<usize>],
    ) {
        let (a, w) = (values(m * k, 3), values(n * k, 4));
        let all = product(f, &a, &w, (m, k, n));
        for r in parts {
            let part = product(f, &a[r.start * k..r.end * k], &w, (r.len(), k, n));
            assert_eq!(part, all[r.start * n..r.end * n].to_vec(), "rows {r:?}");
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| product(f, &a, &w, (m, k, n))), all);
    }

    /// Assert `c` (m × n) is `a · wᵀ` for `a` (m × k) and `w` (n × k) within f32 rounding of an f64 reference.
    fn near_f64_reference(a: &[f32], w: &[f32], (m, k, n): (usize, usize, usize), c: &[f32]) {
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum();
                let got = c[i * n + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + k as f64),
                    "({m},{k},{n}) at ({i},{j}): {got} vs {want}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
