//! The bf16 GEMM `c = a · wᵀ` on CPUs with AVX512-BF16: bf16 activations and weights, products summed in f32
//! by `vdpbf16ps` (32 bf16 pairs per instruction), each output rounded to bf16 once at the end, as torch's
//! oneDNN path does. Weights stay in bf16 (half the bytes of f32) and are read in place, not packed.
//!
//! Two kernels, each with every output a fixed sum whatever else is multiplied with it:
//!
//! * [`packed`] for row segments (prefill, the vision tower): the activation is packed in pairs of depths, 16
//!   rows per vector; each output is one f32 chain over the depth pairs in order.
//! * [`row`] for independent rows (decode, the logits of last positions): one 16-lane dot product per output,
//!   the lanes added in a fixed tree at the end; each weight row is read once for all rows.
//!
//! Where `vdpbf16ps` runs at half the f32 FMA's rate (Intel's AVX512-BF16 cores without AMX), segments measure
//! faster on the f32 GEMM over exact f32 copies of the operands ([`widened`]); the choice is measured at load
//! (once per machine where the f32 GEMM's calibration is kept in a file: [`calibration`]).
//! CPUs without AVX512-BF16 run segments on the widened kernel where it measures faster than candle's bf16 matmul
//! and everything else on candle's, as `--cpu-gemm gemm-crate` does everywhere ([`Bf16Gemm::Candle`]).

pub mod amx;
pub(crate) mod blas;
mod calibration;
pub mod packed;
pub mod row;
#[cfg(test)]
mod timing;
pub mod widened;

use std::mem::MaybeUninit;

use candle_core::{Result, Storage, Tensor};
use half::bf16;

use crate::ops::cpu_data::written;
use crate::ops::GemmCalibration;
use calibration::Rates;

/// What multiplies bf16 activations by bf16 weights on the CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bf16Gemm {
    /// candle's bf16 matmul (the `gemm` crate's bf16 path: bf16 widened to f32 while packing, f32 FMA).
    Candle,
    /// The row kernel for independent rows; segments on candle's matmul, which measured faster at load (where
    /// `vdpbf16ps` runs at half the f32 FMA's rate, as on Intel's AVX512-BF16 cores): the two rates in GFLOP/s.
    RowKernelOnly {
        /// The packed kernel's rate on the calibration product.
        packed_gflops: f64,
        /// candle's rate on it.
        candle_gflops: f64,
    },
    /// Both kernels of this module: the packed one measured at least as fast as candle's at load.
    Kernels {
        /// The packed kernel's rate on the calibration product.
        packed_gflops: f64,
        /// candle's rate on it.
        candle_gflops: f64,
    },
    /// The f32 GEMM on exact f32 copies ([`widened`]) for row segments, measured the fastest at load, and the
    /// row kernel for independent rows.
    Widened {
        /// The widened kernel's rate on the calibration product.
        widened_gflops: f64,
        /// The packed kernel's rate on it.
        packed_gflops: f64,
        /// candle's rate on it.
        candle_gflops: f64,
    },
    /// On a CPU without AVX512-BF16: the f32 GEMM on exact f32 copies ([`widened`]) for row segments, measured
    /// faster than candle's bf16 matmul at load; independent rows on candle's matmul (there is no row kernel).
    WidenedOnly {
        /// The widened kernel's rate on the calibration product.
        widened_gflops: f64,
        /// candle's rate on it.
        candle_gflops: f64,
    },
    /// The AMX tile kernel ([`amx`]) for row segments, measured the fastest at load, and the row kernel for
    /// independent rows.
    Amx {
        /// The AMX kernel's rate on the calibration product.
        amx_gflops: f64,
        /// The packed kernel's rate on it.
        packed_gflops: f64,
        /// candle's rate on it.
        candle_gflops: f64,
    },
}

impl Bf16Gemm {
    /// Whether row segments run on the AMX tile kernel.
    pub fn amx(&self) -> bool {
        matches!(self, Self::Amx { .. })
    }

    /// The kernels of this module, unless `gemm_crate_only`: the segments' kernel chosen by timing the AMX (where
    /// the CPU has it), packed (where it has AVX512-BF16) and widened kernels against candle's bf16 matmul on a
    /// 512 × 896 × 1,152 product, the first of them in that order at least as fast as the others; the row kernel
    /// for independent rows where the CPU has AVX512-BF16. The timing is kept per machine beside the f32 GEMM's
    /// `calibration` file where there is one ([`calibration::kept_rates`]), and once per process in any case.
    pub fn for_this_cpu(gemm_crate_only: bool, calibration: &GemmCalibration) -> Self {
        static CHOICE: std::sync::OnceLock<Bf16Gemm> = std::sync::OnceLock::new();
        if gemm_crate_only {
            return Self::Candle;
        }
        *CHOICE.get_or_init(|| {
            let dots = supported();
            let (rates, source) =
                calibration::kept_rates(calibration, dots, &mut || calibration::calibrate(dots));
            let choice = Self::choose(rates, dots);
            tracing::info!("CPU bf16 GEMMs: {}; rates {source}", choice.describe());
            choice
        })
    }

    /// The choice for the rates `r` measured at load, on a CPU with AVX512-BF16 (`dots`: the packed and row
    /// kernels run) or without it.
    fn choose(r: Rates, dots: bool) -> Self {
        let Rates {
            amx_gflops,
            packed_gflops,
            widened_gflops,
            candle_gflops,
        } = r;
        if !dots {
            return match widened_gflops >= candle_gflops {
                true => Self::WidenedOnly {
                    widened_gflops,
                    candle_gflops,
                },
                false => Self::Candle,
            };
        }
        if amx_gflops >= packed_gflops.max(widened_gflops).max(candle_gflops) {
            Self::Amx {
                amx_gflops,
                packed_gflops,
                candle_gflops,
            }
        } else if packed_gflops >= widened_gflops.max(candle_gflops) {
            Self::Kernels {
                packed_gflops,
                candle_gflops,
            }
        } else if widened_gflops >= candle_gflops {
            Self::Widened {
                widened_gflops,
                packed_gflops,
                candle_gflops,
            }
        } else {
            Self::RowKernelOnly {
                packed_gflops,
                candle_gflops,
            }
        }
    }

    /// Whether independent rows take [`row`].
    pub fn row_kernel(self) -> bool {
        !matches!(self, Self::Candle | Self::WidenedOnly { .. })
    }

    /// The kernel of row segments where it is one of this module's: [`packed`], [`widened`] or [`amx`].
    pub fn segment_kernel(self) -> Option<Kernel> {
        match self {
            Self::Kernels { .. } => Some(packed::gemm_nt),
            Self::Widened { .. } | Self::WidenedOnly { .. } => Some(widened::gemm_nt),
            Self::Amx { .. } => Some(amx::gemm_nt),
            Self::Candle | Self::RowKernelOnly { .. } => None,
        }
    }

    /// The gate-up product and its SwiGLU in one pass over row segments, where they run on one of this module's
    /// kernels: [`packed::gemm_nt_swiglu`] or [`amx::gemm_nt_swiglu`] (each the bits of its own product followed by
    /// the SwiGLU pass).
    pub fn swiglu_kernel(self) -> Option<Kernel> {
        match self {
            Self::Kernels { .. } => Some(packed::gemm_nt_swiglu),
            Self::Widened { .. } | Self::WidenedOnly { .. } => Some(widened::gemm_nt_swiglu),
            Self::Amx { .. } => Some(amx::gemm_nt_swiglu),
            Self::Candle | Self::RowKernelOnly { .. } => None,
        }
    }

    /// The name of what multiplies row segments.
    pub fn segments_name(self) -> &'static str {
        match self {
            Self::Candle | Self::RowKernelOnly { .. } => "candle bf16 matmul",
            Self::Kernels { .. } => "AVX512-BF16 packed kernel",
            Self::Widened { .. } | Self::WidenedOnly { .. } => "f32 GEMM on exact f32 copies",
            Self::Amx { .. } => "AMX tile kernel",
        }
    }

    /// Its description in the manifest (`ops.cpu_bf16_gemm`).
    pub fn describe(self) -> String {
        // Where this module's kernels run a product, a linear layer's bias joins the f32 sums (fused ops on).
        const BIAS: &str = "; a linear layer's bias added to the f32 sums before the rounding where these kernels \
                            run the product (fused ops on)";
        match self {
            Self::Candle => "gemm crate (candle's bf16 matmul)".to_string(),
            Self::RowKernelOnly {
                packed_gflops,
                candle_gflops,
            } => format!(
                "AVX512-BF16 row kernel (vdpbf16ps, f32 sums) for independent rows; gemm crate (candle's bf16 \
                 matmul) for row segments: {candle_gflops:.1} GFLOP/s vs the packed kernel's {packed_gflops:.1} \
                 on the calibration product{BIAS}"
            ),
            Self::Kernels {
                packed_gflops,
                candle_gflops,
            } => format!(
                "AVX512-BF16 (vdpbf16ps, f32 sums, bf16 output): packed kernel for row segments \
                 ({packed_gflops:.1} GFLOP/s vs candle's {candle_gflops:.1} on the calibration product), row \
                 kernel for independent rows{BIAS}"
            ),
            Self::Widened {
                widened_gflops,
                packed_gflops,
                candle_gflops,
            } => format!(
                "the gemm crate's f32 GEMM on exact f32 copies of the bf16 operands (f32 sums, bf16 output) for row \
                 segments ({widened_gflops:.1} GFLOP/s vs the AVX512-BF16 packed kernel's {packed_gflops:.1} and \
                 candle's bf16 matmul's {candle_gflops:.1} on the calibration product), AVX512-BF16 row kernel for \
                 independent rows{BIAS}"
            ),
            Self::WidenedOnly {
                widened_gflops,
                candle_gflops,
            } => format!(
                "the gemm crate's f32 GEMM on exact f32 copies of the bf16 operands (f32 sums, bf16 output) for row \
                 segments ({widened_gflops:.1} GFLOP/s vs candle's bf16 matmul's {candle_gflops:.1} on the \
                 calibration product); gemm crate (candle's bf16 matmul) for independent rows{BIAS}"
            ),
            Self::Amx {
                amx_gflops,
                packed_gflops,
                candle_gflops,
            } => format!(
                "AMX tiles (tdpbf16ps, f32 sums, bf16 output) for row segments ({amx_gflops:.1} GFLOP/s vs the \
                 AVX512-BF16 packed kernel's {packed_gflops:.1} and candle's {candle_gflops:.1} on the calibration \
                 product), AVX512-BF16 row kernel for independent rows{BIAS}; the weights that only row segments multiply \
                 (the vision tower's) held in the tiles' layout from load where the fused ops are on"
            ),
        }
    }
}

/// A bf16 kernel `c = a · wᵀ + bias` with `dims` = (m, k, n): `bias` holds `n` values added to each output's f32
/// sum before its one rounding to bf16 (as torch's bf16 linear layers add theirs), or none (empty). The kernel
/// writes every one of the m × n outputs of `c` (fresh storage: it reads none of them).
pub type Kernel = fn(&[bf16], &[bf16], &[f32], (usize, usize, usize), &mut [MaybeUninit<bf16>]);

/// Whether this CPU runs the kernels (AVX-512F, BW, VL and DQ, and AVX512-BF16: every CPU with AVX512-BF16 has
/// the other four).
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x · wᵀ (+ b)` for bf16 `x` (rows, k), bf16 `w` (n, k) and an optional bias `b` (n) on the CPU, the bias added
/// to the f32 sums before their rounding: the rows of each segment of `lens` by `segments` (each segment alone), or
/// every row by [`row`] where `lens` is `None` (independent rows). Needs [`supported`].
pub(crate) fn matmul_nt(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    lens: Option<&[usize]>,
    segments: Kernel,
) -> Result<Tensor> {
    let (m, n) = (x.dim(0)?, w.dim(0)?);
    match lens {
        Some(lens) => by_segments(x, w, b, (lens, n), &segments),
        None => by_segments(x, w, b, (&[m], n), &row::gemm_nt_rows),
    }
}

/// `silu(x · gᵀ + b_g) · (x · uᵀ + b_u)` for bf16 `x` (rows, k), the packed gate-up weight `w` = [g | u] (2·I, k) and
/// its bias `b` (2·I), the rows of each segment of `lens` by `kernel` ([`Bf16Gemm::swiglu_kernel`], each segment
/// alone). Needs the kernel's CPU features and k > 0. Returns (rows, I).
pub(crate) fn matmul_swiglu(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    lens: &[usize],
    kernel: Kernel,
) -> Result<Tensor> {
    by_segments(x, w, b, (lens, w.dim(0)? / 2), &kernel)
}

/// `x · wᵀ (+ b)` for bf16 `x` (rows, k) and a weight held in tiles (n × k) with its bias `b` (n), or for a gate-up
/// weight the SwiGLU of its two halves ([`amx::gemm_nt_held`]), all rows in one product: each row's bits stand
/// alone in the tile kernel, so segments need no separate products; with a `residual` (rows, n) of a plain weight
/// added in the store. Returns (rows, n) or (rows, n / 2). Needs [`amx::supported`]; the caller checks the
/// residual's shape (the kernel panics on a short one).
pub(crate) fn matmul_held(
    x: &Tensor,
    w: &amx::TileWeight,
    b: Option<&Tensor>,
    residual: Option<&Tensor>,
) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let (n, wk) = w.dims();
    if k != wk {
        candle_core::bail!("bf16 GEMM: rows of {k} for a weight of {n} x {wk}");
    }
    let (bias, cols) = (bias_values(b, n)?, w.out_cols());
    let run = |a: &[bf16], r: Option<&[bf16]>| {
        let fill = |c: &mut [MaybeUninit<bf16>]| amx::gemm_nt_held(a, w, (&bias, r), m, c);
        // SAFETY: the kernel writes all m × cols outputs.
        let c = unsafe { written(m * cols, fill) };
        Tensor::from_vec(c, (m, cols), x.device())
    };
    with_bf16(x, |a| match residual {
        Some(r) => with_bf16(r, |r| run(a, Some(r))),
        None => run(a, None),
    })
}

/// The checks of a fused gate-up and SwiGLU kernel's arguments (`a` m × k, `w` 2I × k, `bias` 2I values or none,
/// `c` m × I; panics where `k` is 0 or a slice is shorter than its shape), and whether there are outputs to write.
fn swiglu_has_work(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, i): (usize, usize, usize),
    c: &[MaybeUninit<bf16>],
) -> bool {
    assert!(k > 0, "a SwiGLU projection of no depth");
    assert!(a.len() >= m * k && w.len() >= 2 * i * k && c.len() >= m * i);
    assert!(
        bias.is_empty() || bias.len() == 2 * i,
        "bias of {} for 2 x {i}",
        bias.len()
    );
    m > 0 && i > 0
}

/// A [`Kernel`], or a closure with its contract.
pub(crate) type KernelFn<'a> =
    dyn Fn(&[bf16], &[bf16], &[f32], (usize, usize, usize), &mut [MaybeUninit<bf16>]) + Sync + 'a;

/// `kernel` over the rows of each segment of `lens` of bf16 `x` (rows, k) with the weight `w` (n, k) and its bias
/// (n, as f32), each segment alone, into a new (rows, `cols`) output.
fn by_segments(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    (lens, cols): (&[usize], usize),
    kernel: &KernelFn<'_>,
) -> Result<Tensor> {
    let ((m, k), (n, _)) = (x.dims2()?, w.dims2()?);
    let bias = bias_values(b, n)?;
    if lens.iter().sum::<usize>() != m {
        candle_core::bail!("bf16 GEMM: segments {lens:?} for {m} rows");
    }
    with_bf16(x, |a| {
        with_bf16(w, |w| {
            let fill = |c: &mut [MaybeUninit<bf16>]| {
                let mut r0 = 0;
                for &len in lens {
                    let (a, c) = (
                        &a[r0 * k..(r0 + len) * k],
                        &mut c[r0 * cols..(r0 + len) * cols],
                    );
                    kernel(a, w, &bias, (len, k, cols), c);
                    r0 += len;
                }
            };
            // SAFETY: the segments' lengths add up to m (checked above); each kernel writes its segment's outputs.
            let c = unsafe { written(m * cols, fill) };
            Tensor::from_vec(c, (m, cols), x.device())
        })
    })
}

/// A linear layer's bias (`n` values) as f32, or none (empty).
fn bias_values(b: Option<&Tensor>, n: usize) -> Result<Vec<f32>> {
    match b {
        Some(b) if b.dims() != [n] => {
            candle_core::bail!("bf16 GEMM: bias {:?} for {n} outputs", b.dims())
        }
        Some(b) => b.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>(),
        None => Ok(Vec::new()),
    }
}

/// Run `f` on the bf16 data of a CPU tensor (made contiguous).
pub(super) fn with_bf16<R>(t: &Tensor, f: impl FnOnce(&[bf16]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cs) = &*storage else {
        candle_core::bail!("bf16 GEMM: expected a CPU tensor");
    };
    let start = layout.start_offset();
    f(&cs.as_slice::<bf16>()?[start..start + t.elem_count()])
}

/// The product over no depth (k = 0) into `c` (m × n): each output its column's bias (zero without one), rounded
/// to bf16.
fn no_depth(c: &mut [MaybeUninit<bf16>], (m, n): (usize, usize), bias: &[f32]) {
    for row in c[..m * n].chunks_mut(n) {
        for (j, o) in row.iter_mut().enumerate() {
            o.write(bf16::from_f32(bias.get(j).copied().unwrap_or(0.0)));
        }
    }
}

/// A kernel's output (m × n, row-major) shared by its rayon tasks, which write disjoint parts of it, with the
/// bias added to each column's sums before they are rounded (where there is one), and a residual added to the
/// rounded product and rounded again (where there is one: the AMX stores only).
struct SharedOut {
    c: *mut bf16,
    n: usize,
    /// `n` values, or null.
    bias: *const f32,
    /// m × n values laid out as `c`, or null.
    residual: *const bf16,
}
// SAFETY: the tasks write disjoint outputs inside one rayon scope; the bias is only read.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The output `c` of `n` columns and the `bias` (`n` values, or empty: none). Panics on another bias length.
    fn new(c: &mut [MaybeUninit<bf16>], n: usize, bias: &[f32]) -> Self {
        assert!(
            bias.is_empty() || bias.len() == n,
            "bias of {} for {n} columns",
            bias.len()
        );
        let bias = if bias.is_empty() {
            std::ptr::null()
        } else {
            bias.as_ptr()
        };
        Self {
            c: c.as_mut_ptr().cast(),
            n,
            bias,
            residual: std::ptr::null(),
        }
    }

    /// The same output with `residual` (m × n values) added to each rounded product, `r + y` rounded again as
    /// the residual add rounds it. Panics where `residual` is shorter than `c`'s m × n values (`m` rows).
    fn with_residual(self, residual: &[bf16], m: usize) -> Self {
        assert!(
            residual.len() >= m * self.n,
            "residual of {} for {m} x {}",
            residual.len(),
            self.n
        );
        Self {
            residual: residual.as_ptr(),
            ..self
        }
    }

    /// Write the sum `v` (plus column `j`'s bias) rounded to bf16 at row `i`, column `j`.
    ///
    /// # Safety
    /// (i, j) lies inside the output and no other task writes it.
    unsafe fn set(&self, i: usize, j: usize, v: f32) {
        debug_assert!(self.residual.is_null(), "the residual is the AMX stores'");
        let v = if self.bias.is_null() {
            v
        } else {
            v + *self.bias.add(j)
        };
        *self.c.add(i * self.n + j) = bf16::from_f32(v);
    }
}

#[cfg(test)]
mod check;

#[cfg(test)]
mod tests;
