//! An optional CBLAS library for the CPU's f32 GEMMs, loaded at run time (and its bf16 GEMM, where it exports one,
//! for bf16 row segments: [`bf16`], [`super::bf16::blas`]).
//!
//! The `gemm` crate behind candle's CPU matmul uses AVX-512 kernels where the CPU has AVX-512F and FMA kernels
//! elsewhere (chosen at run time). A CBLAS library (OpenBLAS, MKL, BLIS) can be faster on some machines and much
//! slower on others (an OpenBLAS that does not know the CPU), so it is used by default only where it measures
//! faster ([`choose`], [`choice`]). Nothing is linked at build time: the library is opened with `dlopen` on first
//! use, so the binary runs unchanged where it is absent.
//!
//! [`crate::ops::CpuGemm`] selects it: `auto` tries OpenBLAS under its usual names and uses it only when it fits the
//! CPU and is at least as fast as the built-in GEMM ([`BuiltinGemm`]) on a calibration
//! product ([`choose`]), else the built-in GEMM; `on` requires OpenBLAS; `off` and `gemm-crate` use no library;
//! a path names a shared library that exports the LP64 (32-bit integer) `cblas_sgemm` (OpenBLAS, MKL's
//! `libmkl_rt`, BLIS). A library that is required but cannot
//! be loaded, or that fails a small known product at load, is an error. [`crate::ops::Ops::new`] loads it.
//!
//! The library runs single-threaded inside rayon's pool: the output's columns are split across the pool's
//! threads, so no BLAS thread pool spins beside rayon's.
//!
//! Unlike the `gemm` crate, whose sum for a row does not depend on how many rows are multiplied with it (for two
//! rows or more), OpenBLAS's sums depend on each call's shape: a sequence's logits may change in the last bits
//! with the batch's size or the thread count, so each segment of rows (one prompt, one image) is its own call
//! ([`super::Rows`]). `gemm-crate` gives the `gemm` crate's bit-for-bit behaviour back.

pub mod bf16;
mod choice;
pub(crate) mod record;

pub(crate) use crate::records::BlasChoice;
pub(crate) use choice::needs_attention;
pub use choice::{core_misfit, CpuSimd};
pub use record::{cpuinfo_field, Calibration, LibraryRates};

use candle_core::Tensor;

use super::packed::BuiltinGemm;
use crate::ops::{CpuGemm, GemmCalibration};

/// `cblas_sgemm(layout, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)` with 32-bit ints, for
/// operands of `T` (f32; the bf16 GEMMs take 16-bit operands) and an f32 output.
type Gemm<T> = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    f32,
    *const T,
    i32,
    *const T,
    i32,
    f32,
    *mut f32,
    i32,
);
/// `cblas_sgemm`.
type Sgemm = Gemm<f32>;
type SetThreads = unsafe extern "C" fn(i32);
/// MKL's `int MKL_Set_Threading_Layer(int)`.
type SetLayer = unsafe extern "C" fn(i32) -> i32;
/// `MKL_THREADING_SEQUENTIAL`.
const MKL_THREADING_SEQUENTIAL: i32 = 1;
/// `const char *openblas_get_config(void)`, `char *openblas_get_corename(void)`.
type GetString = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// The string an optional `char *symbol(void)` export of `lib` returns (OpenBLAS's config and corename), trimmed.
///
/// # Safety
/// `symbol`, when exported, must have that prototype and return null or a NUL-terminated string.
unsafe fn exported_string(lib: &libloading::Library, symbol: &[u8]) -> Option<String> {
    let f = lib.get::<GetString>(symbol).ok()?;
    let p = f();
    (!p.is_null()).then(|| {
        std::ffi::CStr::from_ptr(p)
            .to_string_lossy()
            .trim()
            .to_string()
    })
}

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;
/// The names tried by `auto`, in order.
const AUTO_NAMES: [&str; 3] = ["libopenblas.so.0", "libopenblas.so", "libopenblas.dylib"];
/// The names `auto` also tries in a bf16 run for a library with a bf16 GEMM, where the one found for f32 has none:
/// MKL's single dynamic library.
const BF16_AUTO_NAMES: [&str; 3] = ["libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"];

/// A loaded CBLAS library.
pub struct Blas {
    sgemm: Sgemm,
    /// Its bf16 GEMM, where it exports one that passed the check at load.
    bf16: Option<bf16::Bf16Symbol>,
    /// What was loaded: the library's own description (OpenBLAS's config string) and its file name.
    pub description: String,
    /// The kernels OpenBLAS picked for this CPU (`openblas_get_corename`, e.g. `Haswell`, `SkylakeX`), when the
    /// library exports it.
    pub corename: Option<String>,
    _lib: libloading::Library,
}

/// Why a requested library could not be used.
#[derive(Debug, thiserror::Error)]
#[error("CPU GEMM library `{spec}`: {reason}")]
pub struct BlasError {
    pub spec: String,
    pub reason: String,
}

impl Blas {
    /// Open `path` and bind `cblas_sgemm`; pin the library's own threads to one.
    pub fn open(path: &str) -> Result<Self, String> {
        // SAFETY: loading a shared library runs its initialisers; a CBLAS library's are benign.
        let lib =
            unsafe { libloading::Library::new(path) }.map_err(
                |e| match std::error::Error::source(&e) {
                    Some(cause) => format!("cannot load {path}: {cause}"),
                    None => format!("cannot load {path}: {e}"),
                },
            )?;
        // SAFETY: the symbol types are the CBLAS / OpenBLAS / MKL C prototypes (LP64 interface).
        unsafe {
            let sgemm = *lib
                .get::<Sgemm>(b"cblas_sgemm\0")
                .map_err(|e| format!("{path}: no cblas_sgemm ({e})"))?;
            // MKL's single library loads its threading layer on the first call: the sequential one, as each call
            // runs on one of rayon's threads (its default, Intel OpenMP, is a separate package).
            if let Ok(layer) = lib.get::<SetLayer>(b"MKL_Set_Threading_Layer\0") {
                layer(MKL_THREADING_SEQUENTIAL);
            }
            for name in [&b"openblas_set_num_threads\0"[..], b"MKL_Set_Num_Threads\0"] {
                if let Ok(set) = lib.get::<SetThreads>(name) {
                    set(1);
                }
            }
            let config = exported_string(&lib, b"openblas_get_config\0");
            let corename = exported_string(&lib, b"openblas_get_corename\0");
            let description = match config {
                Some(c) => format!("{c} ({path})"),
                None => path.to_string(),
            };
            let mut blas = Self {
                sgemm,
                bf16: bf16::bind(&lib),
                description,
                corename,
                _lib: lib,
            };
            blas.check().map_err(|e| format!("{path}: {e}"))?;
            if let Some(Err(e)) = blas.bf16.is_some().then(|| blas.check_bf16()) {
                tracing::warn!("{path}: {e}; its bf16 GEMM is not used");
                blas.bf16 = None;
            }
            Ok(blas)
        }
    }

    /// One product with small integers (exact in f32) against its known result: a library with another integer
    /// width (ILP64) or a broken build is refused here instead of giving wrong logits.
    fn check(&self) -> Result<(), String> {
        let (m, k, n) = (3, 5, 4);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut c = vec![f32::NAN; m * n];
        // SAFETY: the operands are m×k and n×k, the output m×n, as the call says.
        unsafe { self.call(&a, &w, (m, k, n), c.as_mut_ptr(), n) };
        let want = (0..m * n).map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k).map(|l| a[i * k + l] * w[j * k + l]).sum::<f32>()
        });
        if c.iter().copied().eq(want) {
            Ok(())
        } else {
            Err(format!(
                "cblas_sgemm gave wrong results ({c:?}); is it an ILP64 (64-bit integer) build?"
            ))
        }
    }

    /// One single-threaded `cblas_sgemm`: `c = a · wᵀ` for `a` (m × k) and `w` (n × k), row-major, writing c's
    /// m rows of n values with row stride `ldc`.
    ///
    /// # Safety
    /// `a` holds m·k values, `w` n·k, and `c` points to m rows of `ldc ≥ n` writable values.
    unsafe fn call(
        &self,
        a: &[f32],
        w: &[f32],
        (m, k, n): (usize, usize, usize),
        c: *mut f32,
        ldc: usize,
    ) {
        (self.sgemm)(
            ROW_MAJOR,
            NO_TRANS,
            TRANS,
            m as i32,
            n as i32,
            k as i32,
            1.0,
            a.as_ptr(),
            k as i32,
            w.as_ptr(),
            k as i32,
            0.0,
            c,
            ldc as i32,
        )
    }

    /// Load the library `gemm` asks for: `None` for the built-in GEMM (`off`, `gemm-crate`), or for `auto` when
    /// no OpenBLAS is installed; `on` requires OpenBLAS, a path that library.
    pub fn load(gemm: &CpuGemm) -> Result<Option<Self>, BlasError> {
        let auto = || AUTO_NAMES.iter().find_map(|n| Self::open(n).ok());
        match gemm {
            CpuGemm::Builtin | CpuGemm::GemmCrate => Ok(None),
            CpuGemm::Auto => Ok(auto()),
            CpuGemm::Blas => auto().map(Some).ok_or_else(|| BlasError {
                spec: gemm.to_string(),
                reason: format!("no OpenBLAS found (tried {})", AUTO_NAMES.join(", ")),
            }),
            CpuGemm::Library(path) => {
                let spec = path.display().to_string();
                Self::open(&spec)
                    .map(Some)
                    .map_err(|reason| BlasError { spec, reason })
            }
        }
    }

    /// The first library of [`BF16_AUTO_NAMES`] that loads with a bf16 GEMM, for `auto` in a bf16 run.
    pub fn find_bf16() -> Option<Self> {
        BF16_AUTO_NAMES
            .iter()
            .filter_map(|n| Self::open(n).ok())
            .find(|b| b.bf16_gemm().is_some())
    }

    /// `c = a · wᵀ` for row-major `a` (m × k) and `w` (n × k); returns c (m × n). The columns are split into one
    /// block per rayon thread (multiples of 16), each a single-threaded `sgemm`.
    pub fn sgemm_nt(&self, a: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        self.sgemm_nt_into(a, w, (m, k, n), &mut c);
        c
    }

    /// [`Self::sgemm_nt`] into `c` (m × n, row-major), which it overwrites.
    pub(crate) fn sgemm_nt_into(
        &self,
        a: &[f32],
        w: &[f32],
        (m, k, n): (usize, usize, usize),
        c: &mut [f32],
    ) {
        assert!(
            a.len() >= m * k && w.len() >= n * k && c.len() >= m * n,
            "sgemm_nt: short operands"
        );
        assert!(fits_cblas(m, k, n), "sgemm_nt: sizes beyond i32");
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            c[..m * n].fill(0.0);
            return;
        }
        let threads = rayon::current_num_threads().max(1);
        let block = n.div_ceil(threads).div_ceil(16) * 16;
        let out = SendPtr(c.as_mut_ptr());
        let out = &out;
        rayon::scope(|s| {
            for n0 in (0..n).step_by(block) {
                let cols = block.min(n - n0);
                s.spawn(move |_| {
                    // SAFETY: each task writes only columns n0..n0+cols of every row of `c` (ldc = n); the
                    // operands outlive the scope and their sizes were checked above.
                    unsafe { self.call(a, &w[n0 * k..], (m, k, cols), out.0.add(n0), n) }
                });
            }
        });
    }
}

struct SendPtr<T>(*mut T);
// SAFETY: the pointer is only read, or written in disjoint blocks, inside one rayon scope.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Load and judge what `gemm` (`--cpu-gemm`, `MOBILE_R1_EVAL_BLAS`) asks for: the library loaded, if any, and
/// the record of the choice for the f32 GEMMs (`used`: see [`choice`] for the rules), its calibration kept where
/// `calibration` says. A library loaded but not used for f32 may still multiply bf16 ([`super::bf16::blas`]).
/// An error only where a library required by `gemm` cannot be loaded.
pub fn choose(
    gemm: &CpuGemm,
    calibration: &GemmCalibration,
    builtin: BuiltinGemm,
) -> Result<(Option<Blas>, BlasChoice), BlasError> {
    let spec = gemm.to_string();
    let loaded = Blas::load(gemm)?;
    let required = matches!(gemm, CpuGemm::Blas | CpuGemm::Library(_));
    Ok(match loaded {
        None if matches!(gemm, CpuGemm::Builtin | CpuGemm::GemmCrate) => (
            None,
            choice::none(
                &spec,
                &format!("MOBILE_R1_EVAL_BLAS={spec}: the built-in GEMM"),
            ),
        ),
        None => (
            None,
            choice::none(&spec, "no OpenBLAS installed: the built-in GEMM"),
        ),
        Some(b) => {
            let (b, choice) = choice::decide(b, &spec, required, calibration, builtin);
            (Some(b), choice)
        }
    })
}

/// Whether an m×k by n×k product fits the LP64 interface (every size and leading dimension an `i32`).
pub fn fits_cblas(m: usize, k: usize, n: usize) -> bool {
    [m, k, n].iter().all(|&d| d <= i32::MAX as usize)
}

/// The product of a few rows (k values each, row-major) by the weight, for segments below the library's minimum.
pub(crate) type SmallProduct<'a> = &'a dyn Fn(&[f32], usize) -> candle_core::Result<Vec<f32>>;

/// A product `c = a · wᵀ` of row-major f32 slices, `dims` = (m, k, n), into `c`, which it overwrites.
pub(crate) type Product<'a> =
    &'a (dyn Fn(&[f32], &[f32], (usize, usize, usize), &mut [f32]) + Sync);

/// `x · wᵀ` for f32 CPU tensors x (rows, k) and w (n, k), with x's rows in consecutive segments of `lens` rows
/// (adding up to all rows), one product per segment, so that a row's result depends only on its own segment (see
/// [`super::Rows`]): through `large` for a segment of at least `min_rows` rows, else through `small(rows, count)`
/// (count rows of k values in, of n out).
pub(crate) fn matmul_nt_segments(
    large: Product<'_>,
    x: &Tensor,
    w: &Tensor,
    lens: &[usize],
    min_rows: usize,
    small: SmallProduct<'_>,
) -> candle_core::Result<Tensor> {
    let (n, k) = w.dims2()?;
    let (m, kx) = x.dims2()?;
    if kx != k {
        candle_core::bail!(
            "matmul_nt: x {:?} does not end in w's input size {k}",
            x.dims()
        );
    }
    if lens.iter().sum::<usize>() != m {
        candle_core::bail!("matmul_nt: segments {lens:?} do not add up to {m} rows");
    }
    use crate::ops::cpu_data::{with_f32, zeros};
    let c = with_f32(x, |a| {
        with_f32(w, |b| {
            let mut c = zeros(m * n);
            let mut r0 = 0;
            for &len in lens {
                let a_seg = &a[r0 * k..(r0 + len) * k];
                let c_seg = &mut c[r0 * n..(r0 + len) * n];
                if len >= min_rows {
                    large(a_seg, b, (len, k, n), c_seg);
                } else {
                    c_seg.copy_from_slice(&small(a_seg, len)?);
                }
                r0 += len;
            }
            Ok(c)
        })
    })?;
    Tensor::from_vec(c, (m, n), x.device())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_it_and_the_built_in_gemm_loads_none() {
        let e = Blas::load(&CpuGemm::Library("/nonexistent/libcblas.so".into()))
            .err()
            .expect("no such library");
        assert_eq!(e.spec, "/nonexistent/libcblas.so");
        assert!(Blas::load(&CpuGemm::Builtin).unwrap().is_none());
        assert!(Blas::load(&CpuGemm::GemmCrate).unwrap().is_none());
    }
}
