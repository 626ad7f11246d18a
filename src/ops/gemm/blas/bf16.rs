//! The CBLAS library's own bf16 GEMM, where it exports one: MKL's `cblas_gemm_bf16bf16f32` or OpenBLAS's
//! `cblas_sbgemm`, both `c = alpha · op(a) · op(b) + beta · c` with bf16 operands and f32 sums and output (the
//! LP64 prototype of `cblas_sgemm` with 16-bit operands). It is bound beside `cblas_sgemm` when the library is
//! opened and checked on a small known product; a library whose bf16 GEMM fails the check keeps its f32 one.

use half::bf16;

use super::{Blas, SendPtr, NO_TRANS, ROW_MAJOR, TRANS};

/// `cblas_gemm_bf16bf16f32` / `cblas_sbgemm`: as `cblas_sgemm` with bf16 (`u16`) operands.
pub(super) type GemmBf16 = super::Gemm<u16>;

/// The bf16 GEMM symbols tried, in order.
pub(super) const SYMBOLS: [&str; 2] = ["cblas_gemm_bf16bf16f32", "cblas_sbgemm"];

/// Rows of a segment per library call: a segment is multiplied in chunks of this many rows, at fixed places in it
/// (so a row's bits still depend only on its segment), each chunk's f32 sums kept only until they are rounded.
pub const CHUNK_ROWS: usize = 256;

/// A bound bf16 GEMM.
#[derive(Clone, Copy)]
pub(super) struct Bf16Symbol {
    pub f: GemmBf16,
    pub name: &'static str,
}

/// Bind the first of [`SYMBOLS`] that `lib` exports.
///
/// # Safety
/// A symbol of one of those names must have the [`GemmBf16`] prototype.
pub(super) unsafe fn bind(lib: &libloading::Library) -> Option<Bf16Symbol> {
    SYMBOLS.iter().find_map(|name| {
        let symbol = format!("{name}\0");
        let f = *lib.get::<GemmBf16>(symbol.as_bytes()).ok()?;
        Some(Bf16Symbol { f, name })
    })
}

/// The f32 sums of one block of a bf16 product, handed to the caller to round.
pub struct Block<'a> {
    /// The block's first row in the product.
    pub row: usize,
    /// Its first column.
    pub col: usize,
    /// Its columns.
    pub cols: usize,
    /// Its sums, row-major (rows × `cols`).
    pub sums: &'a [f32],
}

impl Blas {
    /// The name of the library's bf16 GEMM (`cblas_gemm_bf16bf16f32`, `cblas_sbgemm`), where it has one that
    /// passed the check at load.
    pub fn bf16_gemm(&self) -> Option<&'static str> {
        self.bf16.map(|s| s.name)
    }

    /// One product of small integers (exact in bf16 and f32) against its known result.
    pub(super) fn check_bf16(&self) -> Result<(), String> {
        let (m, k, n) = (3, 5, 4);
        let a: Vec<bf16> = (0..m * k)
            .map(|i| bf16::from_f32((i % 7) as f32 - 3.0))
            .collect();
        let w: Vec<bf16> = (0..n * k)
            .map(|i| bf16::from_f32((i % 5) as f32 - 2.0))
            .collect();
        let c = std::sync::Mutex::new(vec![f32::NAN; m * n]);
        self.gemm_bf16_nt(&a, &w, (m, k, n), &|b: Block<'_>| {
            let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
            for (r, sums) in b.sums.chunks(b.cols).enumerate() {
                let at = (b.row + r) * n + b.col;
                c[at..at + b.cols].copy_from_slice(sums);
            }
        })?;
        let c = c.into_inner().unwrap_or_else(|p| p.into_inner());
        let want = (0..m * n).map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k)
                .map(|l| a[i * k + l].to_f32() * w[j * k + l].to_f32())
                .sum::<f32>()
        });
        if c.iter().copied().eq(want) {
            Ok(())
        } else {
            Err(format!("its bf16 GEMM gave wrong results ({c:?})"))
        }
    }

    /// `a · wᵀ` for row-major bf16 `a` (m × k) and `w` (n × k), in f32: the rows in chunks of [`CHUNK_ROWS`],
    /// the columns in one block per rayon thread (multiples of 32), one single-threaded library call per chunk
    /// and block, whose sums go to `block` (on the rayon thread that made them). An error where the library has
    /// no bf16 GEMM; panics on short operands.
    pub fn gemm_bf16_nt(
        &self,
        a: &[bf16],
        w: &[bf16],
        (m, k, n): (usize, usize, usize),
        block: &(dyn Fn(Block<'_>) + Sync),
    ) -> Result<(), String> {
        let Some(sym) = self.bf16 else {
            return Err(format!("{}: no bf16 GEMM", self.description));
        };
        assert!(
            a.len() >= m * k && w.len() >= n * k,
            "gemm_bf16_nt: short operands"
        );
        assert!(super::fits_cblas(m, k, n), "gemm_bf16_nt: sizes beyond i32");
        if m == 0 || n == 0 {
            return Ok(());
        }
        let threads = rayon::current_num_threads().max(1);
        let width = n.div_ceil(threads).div_ceil(32) * 32;
        let (a, w) = (
            SendPtr(a.as_ptr().cast_mut()),
            SendPtr(w.as_ptr().cast_mut()),
        );
        let (a, w) = (&a, &w);
        rayon::scope(|s| {
            for i0 in (0..m).step_by(CHUNK_ROWS) {
                for j0 in (0..n).step_by(width) {
                    let (rows, cols) = (CHUNK_ROWS.min(m - i0), width.min(n - j0));
                    s.spawn(move |_| {
                        let mut sums = vec![0f32; rows * cols];
                        if k == 0 {
                            return block(Block {
                                row: i0,
                                col: j0,
                                cols,
                                sums: &sums,
                            });
                        }
                        // SAFETY: rows i0.. of a and rows j0.. of w lie inside the operands checked above; the
                        // output is this task's own buffer of rows × cols.
                        unsafe {
                            (sym.f)(
                                ROW_MAJOR,
                                NO_TRANS,
                                TRANS,
                                rows as i32,
                                cols as i32,
                                k as i32,
                                1.0,
                                a.0.cast::<u16>().add(i0 * k),
                                k as i32,
                                w.0.cast::<u16>().add(j0 * k),
                                k as i32,
                                0.0,
                                sums.as_mut_ptr(),
                                cols as i32,
                            )
                        };
                        block(Block {
                            row: i0,
                            col: j0,
                            cols,
                            sums: &sums,
                        });
                    });
                }
            }
        });
        Ok(())
    }
}
