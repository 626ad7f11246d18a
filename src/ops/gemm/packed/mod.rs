//! The built-in f32 GEMM for CPUs with AVX2 and FMA but no AVX-512: `c = a · wᵀ` for a row-major `a` (m × k)
//! and a linear layer's weight `w` (n × k), blocked for the caches with packed panels and a 6 × 16 register tile
//! (the layout of BLIS and OpenBLAS). On a Zen 3 it runs the vision tower's products 13–29% faster than the
//! `gemm` crate's AVX2 kernels, the text model's within 10% (docs/performance.md has the figures).
//!
//! Every output is `Σ` over `k` in a fixed order: one FMA chain per block of [`KC`] values from zero, the blocks
//! added to the output in order. Nothing depends on `m`, on the row's place, on `n` or on the thread count
//! (padding rows and columns are zeros and only reach padding outputs), so each row's result is the same
//! whatever else is multiplied with it: batch-invariant by construction.

use std::cell::RefCell;

use rayon::prelude::*;

mod prepacked;
pub(crate) use prepacked::{gemm_nt_packed, PackedW};

/// Rows of the register tile.
const MR: usize = 6;
/// Columns of the register tile (two AVX2 vectors).
const NR: usize = 16;
/// Depth of one block: a packed 16-column panel of it (24 KiB) stays in a 32 KiB L1.
pub(crate) const KC: usize = 384;
/// Rows of `a` packed at once (96 × 384 × 4 B = 144 KiB, in a 512 KiB L2).
const MC: usize = 96;
/// Columns of `w` packed at once (3 MiB, shared by the threads from L3).
const NC: usize = 2048;
/// Fewest rows for which the kernel beats the `gemm` crate: every product packs the whole weight, which a few
/// rows do not repay (256 rows by a 1536 × 8960 weight: 0.8× the `gemm` crate; 768 by 1280 × 3420: 1.07×).
pub const MIN_ROWS: usize = 768;

/// Whether this CPU runs the kernel (AVX2 and FMA).
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The run's built-in f32 GEMM (no CBLAS library) for a segment of at least [`MIN_ROWS`] rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinGemm {
    /// The `gemm` crate behind candle's matmul (its AVX-512 kernels where the CPU has them).
    GemmCrate,
    /// This module's kernel.
    Packed,
}

impl BuiltinGemm {
    /// The built-in GEMM for this CPU: the packed kernel where the CPU has AVX2 and FMA but no AVX-512F (with
    /// AVX-512 the `gemm` crate's `x86-v4` kernels are the faster), unless `gemm_crate_only`.
    pub fn for_this_cpu(gemm_crate_only: bool) -> Self {
        #[cfg(target_arch = "x86_64")]
        let avx512 = is_x86_feature_detected!("avx512f");
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        if supported() && !avx512 && !gemm_crate_only {
            Self::Packed
        } else {
            Self::GemmCrate
        }
    }

    /// Its name in logs and the manifest.
    pub fn describe(self) -> String {
        match self {
            Self::GemmCrate => "gemm crate (candle)".to_string(),
            Self::Packed => format!(
                "packed AVX2 kernel for segments of {MIN_ROWS} rows or more, gemm crate (candle) below"
            ),
        }
    }
}

/// `c = a · wᵀ` for `a` (m × k) and `w` (n × k), both row-major, into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AVX2/FMA ([`supported`]) or a slice is
/// shorter than its shape.
pub fn sgemm_nt(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    let (m, k, n) = dims;
    assert!(supported(), "packed_gemm needs AVX2 and FMA");
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let out = SharedOut(c.as_mut_ptr());
    let mut bpack = Vec::new();
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        let panels = nc.div_ceil(NR);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            bpack.resize(panels * NR * kc, 0.0);
            bpack
                .par_chunks_mut(NR * kc)
                .enumerate()
                .for_each(|(p, dst)| {
                    pack_w(w, k, (jc + p * NR, n.min(jc + p * NR + NR)), (pc, kc), dst)
                });
            let block = DepthBlock {
                a,
                dims,
                jc,
                depth: (pc, kc),
                packed_w: &bpack,
            };
            blocks(m, panels)
                .into_par_iter()
                // SAFETY: AVX2/FMA checked above; the tasks cover disjoint row blocks × column panels of c.
                .for_each(|(ic, cols)| unsafe { block.task(ic, cols, &out) });
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
    /// Pack the [`MC`] rows of `a` from `ic` and multiply them by the packed column panels `cols`, into `out`
    /// (written for the first depth block, added to after).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `out` is the product's output and no other task writes these rows × panels.
    unsafe fn task(&self, ic: usize, cols: std::ops::Range<usize>, out: &SharedOut) {
        let ((m, k, n), (pc, kc)) = (self.dims, self.depth);
        let mc = MC.min(m - ic);
        APACK.with(|cell| {
            let mut ap = cell.borrow_mut();
            ap.resize(mc.div_ceil(MR) * MR * kc, 0.0);
            pack_a(self.a, k, (ic, ic + mc), (pc, kc), &mut ap);
            for p in cols {
                let j0 = self.jc + p * NR;
                let b = &self.packed_w[p * NR * kc..(p + 1) * NR * kc];
                for (t, ablk) in ap.chunks(MR * kc).enumerate() {
                    let i0 = ic + t * MR;
                    let tile = Tile {
                        rows: MR.min(m - i0),
                        cols: NR.min(n - j0),
                        first: pc == 0,
                    };
                    // The tile lies inside c: i0 < m, j0 < n.
                    tile.run(kc, ablk, b, out.at(i0 * n + j0), n);
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

/// The tasks of one (column block, depth block): row blocks of [`MC`] rows × ranges of column panels, enough
/// of them for every thread to have several.
fn blocks(m: usize, panels: usize) -> Vec<(usize, std::ops::Range<usize>)> {
    let row_blocks = m.div_ceil(MC);
    let want = 4 * rayon::current_num_threads();
    let chunks = want.div_ceil(row_blocks).clamp(1, panels);
    let per = panels.div_ceil(chunks);
    (0..m)
        .step_by(MC)
        .flat_map(|ic| {
            (0..panels)
                .step_by(per)
                .map(move |p| (ic, p..panels.min(p + per)))
        })
        .collect()
}

/// Pack rows `rows` of `a` (row stride `k`), the `kc` depths from `pc`, as panels of [`MR`] rows: value (p, r) of a
/// panel at `p * MR + r`; rows past the end are zeros.
fn pack_a(a: &[f32], k: usize, rows: (usize, usize), depth: (usize, usize), dst: &mut [f32]) {
    pack_rows(|i| &a[i * k..(i + 1) * k], rows, depth, dst);
}

/// [`pack_a`] for rows `row(i)` wherever they lie (each holds at least `pc + kc` values).
fn pack_rows<'a>(
    row: impl Fn(usize) -> &'a [f32],
    rows: (usize, usize),
    (pc, kc): (usize, usize),
    dst: &mut [f32],
) {
    for (t, panel) in dst.chunks_mut(MR * kc).enumerate() {
        for r in 0..MR {
            let i = rows.0 + t * MR + r;
            if i < rows.1 {
                for (p, &v) in row(i)[pc..pc + kc].iter().enumerate() {
                    panel[p * MR + r] = v;
                }
            } else {
                for p in 0..kc {
                    panel[p * MR + r] = 0.0;
                }
            }
        }
    }
}

/// Pack weight rows (output columns) `cols` (at most [`NR`]; row stride `k`), the `kc` depths from `pc`, as one
/// panel: value (p, c) at `p * NR + c`; columns past the end are zeros.
fn pack_w(w: &[f32], k: usize, cols: (usize, usize), depth: (usize, usize), dst: &mut [f32]) {
    pack_panel(|j| &w[j * k..(j + 1) * k], cols, depth, dst);
}

/// [`pack_w`] for weight rows `row(j)` wherever they lie (each holds at least `pc + kc` values).
fn pack_panel<'a>(
    row: impl Fn(usize) -> &'a [f32],
    cols: (usize, usize),
    (pc, kc): (usize, usize),
    dst: &mut [f32],
) {
    let valid = cols.1 - cols.0;
    if valid < NR {
        dst.fill(0.0);
    }
    let rows: Vec<&[f32]> = (0..valid).map(|c| &row(cols.0 + c)[pc..pc + kc]).collect();
    for (p, out) in dst.chunks_exact_mut(NR).enumerate() {
        for (o, r) in out.iter_mut().zip(&rows) {
            *o = r[p];
        }
    }
}

/// [`Tile::run`] for the tile `(rows, cols, first)`.
///
/// # Safety
/// As [`Tile::run`].
unsafe fn kernel_tile(
    (rows, cols, first): (usize, usize, bool),
    kc: usize,
    a: &[f32],
    b: &[f32],
    c: *mut f32,
    ldc: usize,
) {
    Tile { rows, cols, first }.run(kc, a, b, c, ldc);
}

/// One register tile's place: its valid rows and columns, and whether this depth block is the first (the
/// output is written) or a later one (added to the output).
struct Tile {
    rows: usize,
    cols: usize,
    first: bool,
}

impl Tile {
    /// Multiply a packed `a` panel by a packed `w` panel of depth `kc` into the tile at `c` (row stride `ldc`).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `c` points at `rows` rows of `cols` writable values `ldc` apart; the panels hold
    /// `kc` × [`MR`] and `kc` × [`NR`] values.
    unsafe fn run(&self, kc: usize, a: &[f32], b: &[f32], c: *mut f32, ldc: usize) {
        debug_assert!(a.len() >= kc * MR && b.len() >= kc * NR);
        if self.rows == MR && self.cols == NR {
            kernel(kc, a.as_ptr(), b.as_ptr(), c, ldc, !self.first);
            return;
        }
        // A partial tile goes through a full one on the stack: the same sums, then its valid part copied.
        let mut tmp = [0f32; MR * NR];
        for r in 0..self.rows {
            for j in 0..self.cols {
                tmp[r * NR + j] = *c.add(r * ldc + j);
            }
        }
        kernel(
            kc,
            a.as_ptr(),
            b.as_ptr(),
            tmp.as_mut_ptr(),
            NR,
            !self.first,
        );
        for r in 0..self.rows {
            for j in 0..self.cols {
                *c.add(r * ldc + j) = tmp[r * NR + j];
            }
        }
    }
}

/// The 6 × 16 register tile: twelve accumulators, one FMA chain each over the `kc` depths, then stored (or added
/// to `c` when `add`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    for r in 0..MR {
        let row = c.add(r * ldc) as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(row);
        _mm_prefetch::<_MM_HINT_T0>(row.add(63));
    }
    let z = _mm256_setzero_ps();
    let mut acc = [[z; 2]; MR];
    for p in 0..kc {
        let b0 = _mm256_loadu_ps(b.add(p * NR));
        let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
        let ap = a.add(p * MR);
        for (r, row) in acc.iter_mut().enumerate() {
            let x = _mm256_broadcast_ss(&*ap.add(r));
            row[0] = _mm256_fmadd_ps(x, b0, row[0]);
            row[1] = _mm256_fmadd_ps(x, b1, row[1]);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        let out = c.add(r * ldc);
        let (mut v0, mut v1) = (row[0], row[1]);
        if add {
            v0 = _mm256_add_ps(_mm256_loadu_ps(out), v0);
            v1 = _mm256_add_ps(_mm256_loadu_ps(out.add(8)), v1);
        }
        _mm256_storeu_ps(out, v0);
        _mm256_storeu_ps(out.add(8), v1);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn kernel(_: usize, _: *const f32, _: *const f32, _: *mut f32, _: usize, _: bool) {
    unreachable!("packed_gemm::supported() is false off x86-64")
}

/// What the CPU GEMM kernels' tests share: inputs, and the check against an f64 reference.
#[cfg(test)]
pub(super) mod check {
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
mod tests {
    use super::check::{matches_reference, rows_stand_alone};
    use super::*;

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_several_blocks() {
        if check::skip_without_avx2() {
            return;
        }
        // Partial register tiles, several depth blocks (k > KC), several column blocks (n > NC), k = 0.
        matches_reference(
            sgemm_nt,
            &[
                (1, 1, 1),
                (5, 7, 15),
                (6, 16, 16),
                (7, KC + 1, 17),
                (13, 2 * KC + 5, 33),
                (3, 20, NC + 18),
                (4, 0, 9),
            ],
        );
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if check::skip_without_avx2() {
            return;
        }
        // Rows 100..111 alone (another place in the tiles and row blocks), rows across the first row block's end,
        // and all rows on one thread.
        let parts = [100..111, MC - 3..MC + 4];
        rows_stand_alone(sgemm_nt, (2 * MC + 7, KC + 40, 70), &parts);
    }
}

/// `cargo test --release --lib gemm::packed::timing -- --ignored --nocapture`: the register tile alone on panels
/// that stay in L1 (its ceiling), and the f32 products of the `small` checkpoint at `max_pixels` 1,003,520 (one
/// screenshot's 5,088 patches, the merger's 1,272 rows, a 1,306-token prompt), 2048³ and two shorter segments,
/// through the `gemm` crate as candle calls it, this kernel and OpenBLAS where installed, alternated, best of
/// seven each.
#[cfg(test)]
pub(super) mod timing {
    use super::*;

    pub(in crate::ops) fn gemm_crate(
        a: &[f32],
        w: &[f32],
        (m, k, n): (usize, usize, usize),
        c: &mut [f32],
    ) {
        let threads = rayon::current_num_threads();
        // SAFETY: the slices hold m × k, n × k and m × n values, row-major.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            )
        }
    }

    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn in_cache_kernel() {
        if !supported() {
            return;
        }
        let (a, b) = (vec![0.5f32; MR * KC], vec![0.25f32; NR * KC]);
        let mut c = vec![0f32; MR * NR];
        let calls = 200_000;
        let t0 = std::time::Instant::now();
        for _ in 0..calls {
            // SAFETY: AVX2/FMA checked; the panels hold KC × MR and KC × NR values, c one full tile.
            unsafe { kernel(KC, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), NR, true) };
        }
        let s = t0.elapsed().as_secs_f64();
        eprintln!(
            "kernel in L1: {:.1} GFLOP/s",
            (2 * MR * NR * KC * calls) as f64 / s / 1e9
        );
    }

    /// One product path, writing its output into the slice.
    type Path<'a> = Box<dyn Fn(&mut [f32]) + 'a>;

    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn model_shapes() {
        if check::skip_without_avx2() {
            return;
        }
        let blas = crate::ops::gemm::blas::Blas::load(&crate::ops::CpuGemm::Auto).unwrap();
        let shapes = [
            (5088, 1280, 3840),
            (5088, 1280, 1280),
            (5088, 1280, 6840),
            (5088, 3420, 1280),
            (1272, 5120, 5120),
            (1306, 896, 1152),
            (1306, 896, 9728),
            (1306, 4864, 896),
            (2048, 2048, 2048),
            (768, 1280, 3420),
            (256, 896, 9728),
        ];
        for dims @ (m, k, n) in shapes {
            let values = |len: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                    .collect()
            };
            let (a, w, mut c) = (values(m * k), values(n * k), vec![0f32; m * n]);
            let mut paths: Vec<(&str, Path<'_>)> = vec![
                ("gemm crate", Box::new(|c| gemm_crate(&a, &w, dims, c))),
                ("packed", Box::new(|c| sgemm_nt(&a, &w, dims, c))),
            ];
            if let Some(b) = &blas {
                paths.push(("OpenBLAS", Box::new(|c| b.sgemm_nt_into(&a, &w, dims, c))));
            }
            let mut best = vec![f64::INFINITY; paths.len()];
            for round in 0..8 {
                for (i, (_, f)) in paths.iter().enumerate() {
                    let t0 = std::time::Instant::now();
                    f(&mut c);
                    if round > 0 {
                        best[i] = best[i].min(t0.elapsed().as_secs_f64());
                    }
                }
            }
            let flop = 2.0 * (m * k * n) as f64;
            let rates: Vec<String> = paths
                .iter()
                .zip(&best)
                .map(|((name, _), s)| format!("{name} {:.1}", flop / s / 1e9))
                .collect();
            eprintln!("{m} x {k} x {n}: {} GFLOP/s", rates.join(", "));
        }
    }
}
