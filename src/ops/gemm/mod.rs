//! The linear layers' GEMM on the CPU, `x · wᵀ` ([`Ops::matmul_nt`]), with every row's bits independent of the
//! batch around it: which rows belong together ([`Rows`]), the built-in packed AVX2 kernel for long segments
//! ([`packed`]), the row kernel for independent rows ([`row`]), the optional CBLAS library with its choice and
//! calibration ([`blas`]), and the matmul rates a machine reaches ([`peak`]).

pub mod bf16;
pub mod blas;
mod held;
pub mod packed;
pub(crate) mod peak;
pub mod row;
mod rows;

pub use held::HeldWeight;
pub use rows::Rows;

use candle_core::{DType, Device, Result, Tensor};

use super::cpu_data::{with_f32, written};
use super::Ops;
use packed::BuiltinGemm;

/// Fewest rows of a segment for which [`Ops::matmul_nt`] uses the CBLAS library: below it the product is a
/// matrix-vector one, where the `gemm` crate is faster here (1 row: 2× faster; 2–3 rows: 10–20%; 4 rows and more:
/// OpenBLAS is).
pub const BLAS_MIN_ROWS: usize = 4;

/// Independent rows (decode, the logits of last positions) that take the `gemm` crate (where [`row`] does
/// not run: no AVX2/FMA, or `--cpu-gemm gemm-crate`) are multiplied in products of exactly this many rows (the last one zero-padded): the `gemm` crate's
/// result for a row depends on the number of rows of the product but not on the row's place in it or on the
/// other rows, so a fixed count makes it batch-invariant.
pub const ROW_BLOCK: usize = 16;

impl Ops {
    /// `x · wᵀ` for x (…, in) and w (out, in): the linear layers' GEMM. On the CPU every row gets the same bits
    /// whatever else is in the batch ([`Rows`]): rows in `rows`' segments are multiplied one segment at a time
    /// (in f32 with a CBLAS library loaded, [`OpsConfig::cpu_gemm`](crate::ops::OpsConfig::cpu_gemm), for segments of at least [`BLAS_MIN_ROWS`]
    /// rows; else, where it is the built-in GEMM, by [`packed`] for segments of at least
    /// [`packed::MIN_ROWS`] rows; otherwise by candle's matmul, the `gemm` crate), independent f32 rows by
    /// [`row`] where the CPU runs it ([`row::RowGemm`], whatever the GEMM of segments), else in `gemm` crate
    /// products of [`ROW_BLOCK`] rows. bf16 `x` and `w` take [`bf16`]'s kernels where they run
    /// (independent rows: the row one, on AVX512-BF16; segments: the AMX, packed or widened one, whichever measured
    /// fastest at load, where it beat candle's bf16 matmul), bf16 segments the CBLAS library's bf16 GEMM where it
    /// was chosen ([`bf16::blas`]). Elsewhere it is candle's matmul.
    pub fn matmul_nt(&self, x: &Tensor, w: &Tensor, rows: Rows<'_>) -> Result<Tensor> {
        if !x.device().is_cpu() {
            return candle_matmul_nt(x, w);
        }
        let (dims, count, lens) = product_shape(x, w, rows)?;
        let (n, k) = w.dims2()?;
        if count == 0 {
            return candle_matmul_nt(x, w);
        }
        let x2 = x.reshape((count, k))?;
        if let (Some(lib), Some(lens)) = (self.bf16_blas_for(x, w), &lens) {
            return bf16::blas::matmul_nt(&x2, w, None, lens, lib)?.reshape(dims);
        }
        if let Some(segments) = self.bf16_kernel(x, w, lens.is_some()) {
            // bf16 on AVX512-BF16 or AMX: every row's bits stand alone in each kernel, whatever the segments.
            return bf16::matmul_nt(&x2, w, None, lens.as_deref(), segments)?.reshape(dims);
        }
        let f32s = x.dtype() == DType::F32 && w.dtype() == DType::F32;
        let y = match (
            lens,
            self.segment_gemm(f32s && blas::fits_cblas(count, k, n)),
        ) {
            (Some(lens), Some((large, min_rows))) => {
                let large: blas::Product<'_> = &*large;
                let small = |a: &[f32], len: usize| {
                    let xs = Tensor::from_slice(a, (len, k), &Device::Cpu)?;
                    xs.matmul(&w.t()?)?.flatten_all()?.to_vec1::<f32>()
                };
                blas::matmul_nt_segments(large, &x2, w, &lens, min_rows, &small)?
            }
            (Some(lens), None) => per_block(&x2, w, &lens)?,
            (None, _) if f32s && self.rows != row::RowGemm::GemmCrate => independent_rows(&x2, w)?,
            (None, _) => in_row_blocks(&x2, w)?,
        };
        y.reshape(dims)
    }

    /// `x · wᵀ + b` for bf16 `x` (…, in), `w` (out, in) and `b` (out) with the bias added to each f32 sum before
    /// its one rounding to bf16, as torch's bf16 linear layers add theirs, where a bf16 kernel of this CPU runs the
    /// product ([`bf16`]) and the fused ops are on; `None` elsewhere (`--kernels off` included: the composed order),
    /// where the caller adds the bias to [`Self::matmul_nt`]'s product.
    pub fn matmul_nt_bias(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        rows: Rows<'_>,
    ) -> Result<Option<Tensor>> {
        if !self.config.fused_kernels || !x.device().is_cpu() || b.dtype() != DType::BF16 {
            return Ok(None);
        }
        let (dims, count, lens) = product_shape(x, w, rows)?;
        if let (Some(lib), Some(lens), true) = (self.bf16_blas_for(x, w), &lens, count > 0) {
            let x2 = x.reshape((count, w.dim(1)?))?;
            return Ok(Some(
                bf16::blas::matmul_nt(&x2, w, Some(b), lens, lib)?.reshape(dims)?,
            ));
        }
        match self.bf16_kernel(x, w, lens.is_some()) {
            Some(segments) if count > 0 => {
                let x2 = x.reshape((count, w.dim(1)?))?;
                let y = bf16::matmul_nt(&x2, w, Some(b), lens.as_deref(), segments)?;
                Ok(Some(y.reshape(dims)?))
            }
            _ => Ok(None),
        }
    }

    /// `silu(x · gᵀ + b_g) · (x · uᵀ + b_u)` for bf16 `x` (…, in), a packed gate-up weight `w` = [g | u] (2·I, in)
    /// and its bias `b` (2·I, if any) in one pass over the register tiles of the kernel that runs the bf16 segments
    /// (AMX, AVX512-BF16 or the widened f32 one: [`bf16::Bf16Gemm::swiglu_kernel`]): the bits of
    /// [`Self::matmul_nt_bias`] followed by `swiglu_packed`, without the (…, 2·I) projection in memory. Where the
    /// rows form segments, the bf16 segments run on one of those kernels (no bf16 library) and the fused ops are
    /// on; `None` elsewhere (the caller runs the product, then the SwiGLU). Returns (…, I).
    pub fn matmul_swiglu(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        rows: Rows<'_>,
    ) -> Result<Option<Tensor>> {
        let bf16s = (x.dtype(), w.dtype()) == (DType::BF16, DType::BF16)
            && b.is_none_or(|b| b.dtype() == DType::BF16);
        let kernel = self
            .bf16
            .swiglu_kernel()
            .filter(|_| self.bf16_blas.is_none());
        let Some(kernel) =
            kernel.filter(|_| self.config.fused_kernels && x.device().is_cpu() && bf16s)
        else {
            return Ok(None);
        };
        let (mut dims, count, lens) = product_shape(x, w, rows)?;
        let (n, k) = w.dims2()?;
        let Some(lens) = lens else {
            return Ok(None);
        };
        if count == 0 || k == 0 || !n.is_multiple_of(2) {
            return Ok(None);
        }
        if let Some(last) = dims.last_mut() {
            *last = n / 2;
        }
        let x2 = x.reshape((count, k))?;
        Ok(Some(
            bf16::matmul_swiglu(&x2, w, b, &lens, kernel)?.reshape(dims)?,
        ))
    }

    /// The CBLAS library whose bf16 GEMM multiplies row segments where `x` and `w` are bf16 and one does.
    fn bf16_blas_for(&self, x: &Tensor, w: &Tensor) -> Option<&blas::Blas> {
        let bf16s = (x.dtype(), w.dtype()) == (DType::BF16, DType::BF16);
        self.bf16_blas.as_deref().filter(|_| bf16s)
    }

    /// The bf16 kernel of segments (or, for independent rows, the row kernel) where `x` and `w` are bf16 and this
    /// CPU runs one for such rows.
    fn bf16_kernel(&self, x: &Tensor, w: &Tensor, segments: bool) -> Option<bf16::Kernel> {
        if (x.dtype(), w.dtype()) != (DType::BF16, DType::BF16) {
            return None;
        }
        match segments {
            false => self
                .bf16
                .row_kernel()
                .then_some(bf16::row::gemm_nt_rows as bf16::Kernel),
            true => self.bf16.segment_kernel(),
        }
    }

    /// The product of f32 segments that take something other than the `gemm` crate, with the fewest rows it
    /// takes: the CBLAS library, else the packed kernel where it is the built-in GEMM; `None` otherwise or
    /// unless `eligible`.
    fn segment_gemm(&self, eligible: bool) -> Option<(Box<SegmentProduct<'_>>, usize)> {
        if !eligible {
            return None;
        }
        match (self.blas(), self.builtin) {
            (Some(b), _) => Some((
                Box::new(move |a, w, dims, c| b.sgemm_nt_into(a, w, dims, c)),
                BLAS_MIN_ROWS,
            )),
            (None, BuiltinGemm::Packed) => Some((Box::new(packed::sgemm_nt), packed::MIN_ROWS)),
            (None, BuiltinGemm::GemmCrate) => None,
        }
    }
}

/// The output dims of `x · wᵀ` (x's with the last one `w`'s outputs), the number of rows and their segments'
/// lengths (`None`: independent rows), after checking that `x` ends in `w`'s input size.
fn product_shape(
    x: &Tensor,
    w: &Tensor,
    rows: Rows<'_>,
) -> Result<(Vec<usize>, usize, Option<Vec<usize>>)> {
    let (n, k) = w.dims2()?;
    let mut dims = x.dims().to_vec();
    match dims.last_mut() {
        Some(last) if *last == k => *last = n,
        _ => candle_core::bail!(
            "matmul_nt: x {:?} does not end in w's input size {k}",
            x.dims()
        ),
    }
    let count = x.elem_count() / k.max(1);
    let lens = rows.lens(count)?;
    Ok((dims, count, lens))
}

/// A product of f32 slices `c = a · wᵀ` ([`blas::Product`]).
type SegmentProduct<'a> = dyn Fn(&[f32], &[f32], (usize, usize, usize), &mut [f32]) + Sync + 'a;

/// `x · wᵀ` for independent f32 rows x (rows, in) by [`row`]: one dot product per output.
fn independent_rows(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let ((m, k), (n, _)) = (x.dims2()?, w.dims2()?);
    let c = with_f32(x, |a| {
        with_f32(w, |b| {
            let mut c = vec![0f32; m * n];
            row::sgemm_nt_rows(a, b, (m, k, n), &mut c);
            Ok(c)
        })
    })?;
    Tensor::from_vec(c, (m, n), x.device())
}

/// `x · wᵀ` for independent rows x (rows, in): products of exactly [`ROW_BLOCK`] rows, the last zero-padded.
fn in_row_blocks(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (rows, k) = x.dims2()?;
    let blocks = rows.div_ceil(ROW_BLOCK);
    let x = match blocks * ROW_BLOCK - rows {
        0 => x.clone(),
        pad => Tensor::cat(&[x, &Tensor::zeros((pad, k), x.dtype(), x.device())?], 0)?,
    };
    per_block(&x, w, &vec![ROW_BLOCK; blocks])?.narrow(0, 0, rows)
}

/// candle's `x · wᵀ` for x (rows, in) as one product per block of consecutive rows (`lens` rows each); f32 on the
/// CPU through [`gemm_crate_blocks`].
fn per_block(x: &Tensor, w: &Tensor, lens: &[usize]) -> Result<Tensor> {
    if x.device().is_cpu() && (x.dtype(), w.dtype()) == (DType::F32, DType::F32) {
        return gemm_crate_blocks(x, w, lens);
    }
    let wt = w.t()?;
    if lens.len() == 1 {
        return x.matmul(&wt);
    }
    let mut r0 = 0;
    let mut outs = Vec::with_capacity(lens.len());
    for &len in lens {
        outs.push(x.narrow(0, r0, len)?.matmul(&wt)?);
        r0 += len;
    }
    Tensor::cat(&outs, 0)
}

/// f32 `x · wᵀ` for x (rows, in) and w (out, in) on the CPU, one `gemm` crate product per block of consecutive
/// rows (`lens` rows each, adding up to x's rows): for each block the call candle's matmul makes (the same
/// operands, strides, scalars and thread count, so the same bits), all of them into one fresh output that the
/// products write. candle's matmul zero-fills each output on the calling thread first, a pass over tens of MB
/// per product of a screenshot's rows while rayon's threads wait.
fn gemm_crate_blocks(x: &Tensor, w: &Tensor, lens: &[usize]) -> Result<Tensor> {
    let ((m, k), (n, kw)) = (x.dims2()?, w.dims2()?);
    if kw != k || lens.iter().sum::<usize>() != m {
        candle_core::bail!(
            "matmul_nt: x {:?}, w {:?}, blocks {lens:?}",
            x.dims(),
            w.dims()
        );
    }
    let threads = candle_core::utils::get_num_threads();
    let c = with_f32(x, |a| {
        with_f32(w, |b| {
            let fill = |c: &mut [std::mem::MaybeUninit<f32>]| {
                let mut r0 = 0;
                for &len in lens {
                    let rows = &a[r0 * k..(r0 + len) * k];
                    // SAFETY: this block's rows r0..r0 + len of c (m × n) lie inside it.
                    unsafe {
                        gemm_crate_nt(
                            rows,
                            b,
                            (len, k, n),
                            c[r0 * n..].as_mut_ptr().cast(),
                            threads,
                        )
                    };
                    r0 += len;
                }
            };
            // SAFETY: the blocks cover the m rows, and a product that does not read its output writes every one of
            // its values (zeros where k is 0).
            Ok(unsafe { written(m * n, fill) })
        })
    })?;
    Tensor::from_vec(c, (m, n), x.device())
}

/// The `gemm` crate's `c = a · wᵀ` for row-major `a` (m × k) and `w` (n × k) into row-major `c` (m × n), which it
/// writes without reading, as candle's matmul calls it (`dims` = (m, k, n)), on `threads` of rayon's threads.
///
/// # Safety
/// `c` points to m × n writable values; `a` and `w` hold m × k and n × k.
pub(in crate::ops) unsafe fn gemm_crate_nt(
    a: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    c: *mut f32,
    threads: usize,
) {
    assert!(
        a.len() >= m * k && w.len() >= n * k,
        "gemm_crate_nt: short operands"
    );
    let parallelism = match threads {
        0 | 1 => gemm::Parallelism::None,
        t => gemm::Parallelism::Rayon(t),
    };
    // SAFETY: the operands hold their shapes (asserted), `c` its m × n values (the caller's promise).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
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
            parallelism,
        )
    }
}

fn candle_matmul_nt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    match x.rank() {
        2 => x.matmul(&w.t()?),
        _ => x.broadcast_matmul(&w.t()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `gemm` crate's products into fresh storage give candle's matmul bits block by block, for one block
    /// or several, and zeros where the depth is 0.
    #[test]
    fn gemm_crate_blocks_give_candles_products() {
        let dev = Device::Cpu;
        let cases = [
            (1, 7, 5, vec![1]),
            (37, 64, 33, vec![37]),
            (40, 96, 130, vec![16, 16, 8]),
            (300, 129, 70, vec![100, 200]),
            (5, 0, 3, vec![5]),
        ];
        for (m, k, n, lens) in cases {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            let got = gemm_crate_blocks(&x, &w, &lens).unwrap();
            assert_eq!(got.dims(), &[m, n]);
            let mut r0 = 0;
            for len in lens {
                let want = x.narrow(0, r0, len).unwrap().matmul(&w.t().unwrap());
                let got = got.narrow(0, r0, len).unwrap();
                assert_eq!(
                    got.to_vec2::<f32>().unwrap(),
                    want.unwrap().to_vec2::<f32>().unwrap(),
                    "{m} x {k} x {n}, block at {r0}"
                );
                r0 += len;
            }
        }
        let (x, w) = (
            Tensor::zeros((4, 3), DType::F32, &dev).unwrap(),
            Tensor::zeros((2, 3), DType::F32, &dev).unwrap(),
        );
        assert!(
            gemm_crate_blocks(&x, &w, &[3]).is_err(),
            "blocks short of the rows"
        );
    }
}
