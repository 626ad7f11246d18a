//! Fused ops behind the model code: each has a reference made of candle ops (the transformers order, used on the
//! CPU and Metal, and whenever the fused ops are off) and, with the `cuda` feature, one of the project's own CUDA
//! kernels (`kernels/fused.cu`). `check` compares the two on a device (`mobile-r1-eval self-test`).
//!
//! The ops run through an [`Ops`] value built from the run's [`OpsConfig`] at load: it says which paths are on,
//! holds the loaded CBLAS library and the section profiler, and chooses each attention's implementation (fused
//! kernel, fused CPU path or the composed fallback of [`composed`]).

mod attention;
pub mod blas;
pub mod check;
pub mod composed;
mod config;
mod cpu_attn;
mod cpu_elementwise;
#[cfg(feature = "cuda")]
mod cuda;
pub mod launch;
pub mod packed_gemm;
pub mod profile;
pub mod reference;
pub mod row_gemm;
pub mod rows;
mod simd;

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};

pub use attention::{DecodeAttention, DecodeKv, DecodePlan, DecodeStep, Varlen, VarlenSeg};
pub use config::{kernels_sha256, CpuGemm, OpsConfig, OpsManifest};
pub use profile::{ProfileSnapshot, Profiler, SectionTime};
pub use rows::Rows;

/// The ops' runtime context: the settings, the CBLAS library they loaded and the section profiler. Cheap to
/// clone (the library and the profiler's table are shared).
#[derive(Clone)]
pub struct Ops {
    config: OpsConfig,
    blas: Option<Arc<blas::Blas>>,
    /// Why no library is loaded, for the manifest, when none is.
    gemm_note: String,
    /// The built-in f32 GEMM of large segments when no library is used.
    builtin: packed_gemm::BuiltinGemm,
    /// How the library was chosen, on the CPU.
    blas_choice: Option<blas::BlasChoice>,
    profiler: Profiler,
    attention_budget: usize,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("config", &self.config)
            .field("cpu_f32_gemm", &self.gemm_description())
            .field("attention_budget", &self.attention_budget)
            .finish()
    }
}

/// One log line saying what the CPU's f32 GEMMs run on and why (a warning when the library misfits the CPU).
fn log_blas_choice(c: &blas::BlasChoice, builtin: packed_gemm::BuiltinGemm) {
    let what = match (&c.library, c.used) {
        (Some(lib), true) => format!("CBLAS {lib}"),
        _ => format!("the {}", builtin.describe()),
    };
    if c.needs_attention() {
        tracing::warn!("CPU f32 GEMMs: {what}: {}", c.reason);
    } else {
        tracing::info!("CPU f32 GEMMs: {what}: {}", c.reason);
    }
}

impl Ops {
    /// The context of `config` for work on `device`: on the CPU the CBLAS library asked for is loaded here (a
    /// required one that cannot be loaded is an error); elsewhere none is.
    pub fn new(config: &OpsConfig, device: &Device) -> std::result::Result<Self, blas::BlasError> {
        let builtin = packed_gemm::BuiltinGemm::for_this_cpu(config.cpu_gemm == CpuGemm::GemmCrate);
        let (blas, gemm_note, blas_choice) = if device.is_cpu() {
            let calibration = config.cpu_gemm_calibration.as_deref();
            let (blas, choice) = blas::choose(&config.cpu_gemm.to_string(), calibration, builtin)?;
            log_blas_choice(&choice, builtin);
            match blas {
                Some(b) => (Some(Arc::new(b)), String::new(), Some(choice)),
                None => (None, builtin.describe(), Some(choice)),
            }
        } else {
            (None, "none (not a CPU run)".to_string(), None)
        };
        Ok(Self {
            config: config.clone(),
            blas,
            gemm_note,
            builtin,
            blas_choice,
            profiler: Profiler::new(config.profile),
            attention_budget: composed::DEFAULT_MAX_SCORE_ELEMS,
        })
    }

    /// The settings this context was built from.
    pub fn config(&self) -> &OpsConfig {
        &self.config
    }

    /// The CBLAS library the CPU's f32 GEMMs use, if any.
    pub fn blas(&self) -> Option<&blas::Blas> {
        self.blas.as_deref()
    }

    /// The section profiler.
    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// [`Profiler::section`] of this context's profiler.
    pub fn section<T, E: From<candle_core::Error>>(
        &self,
        name: &'static str,
        device: &Device,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.profiler.section(name, device, f)
    }

    /// The section table so far; `None` when profiling is off.
    pub fn profile_snapshot(&self) -> Option<ProfileSnapshot> {
        self.profiler.snapshot()
    }

    /// Cap on attention scores the composed attention materialises at once (elements).
    pub fn attention_budget(&self) -> usize {
        self.attention_budget
    }

    /// Lower (or raise) [`Self::attention_budget`] to trade speed for memory; at least 1.
    pub fn set_attention_budget(&mut self, max_score_elems: usize) {
        self.attention_budget = max_score_elems.max(1);
    }

    fn gemm_description(&self) -> String {
        match &self.blas {
            Some(b) => format!("cblas: {}", b.description),
            None => self.gemm_note.clone(),
        }
    }

    /// What the run manifest records about the ops.
    pub fn manifest(&self) -> OpsManifest {
        OpsManifest {
            fused: self.config.fused_kernels,
            cuda_kernels: cfg!(feature = "cuda"),
            tensor_core_attention: self.config.tensor_core_attention,
            kernels_sha256: kernels_sha256(),
            cpu_f32_gemm: self.gemm_description(),
            cpu_blas_choice: self.blas_choice.clone(),
            cpu_gemm_row_block: ROW_BLOCK,
            cpu_gemm_independent_rows: self.builtin.independent_rows().to_string(),
            cpu_gemm_blas_min_rows: BLAS_MIN_ROWS,
            cpu_gemm_packed_min_rows: packed_gemm::MIN_ROWS,
            cpu_attention_tiled_min_keys: cpu_attn::TILED_MIN_KEYS,
            cpu_attention_packed_min_keys: cpu_attn::packed_min_keys(self.builtin),
        }
    }

    /// True when `device` is a CUDA device, the fused ops are on and `dtype` has a kernel.
    fn on_kernel_path(&self, device: &Device, dtype: DType) -> bool {
        cfg!(feature = "cuda")
            && device.is_cuda()
            && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
            && self.config.fused_kernels
    }

    /// [`Self::on_kernel_path`] for an op's main operand `t`, which must not be empty (an empty input takes the
    /// composed path instead of launching an empty grid).
    #[cfg(feature = "cuda")]
    fn kernel_for(&self, t: &Tensor) -> bool {
        self.on_kernel_path(t.device(), t.dtype()) && t.elem_count() > 0
    }
}

/// Fewest rows of a segment for which [`matmul_nt`] uses the CBLAS library: below it the product is a
/// matrix-vector one, where the `gemm` crate is faster here (1 row: 2× faster; 2–3 rows: 10–20%; 4 rows and more:
/// OpenBLAS is).
pub const BLAS_MIN_ROWS: usize = 4;

/// Independent rows (decode, the logits of last positions) that take the `gemm` crate (where [`row_gemm`] does
/// not run) are multiplied in products of exactly this many rows (the last one zero-padded): the `gemm` crate's
/// result for a row depends on the number of rows of the product but not on the row's place in it or on the
/// other rows, so a fixed count makes it batch-invariant.
pub const ROW_BLOCK: usize = 16;

impl Ops {
    /// `x · wᵀ` for x (…, in) and w (out, in): the linear layers' GEMM. On the CPU every row gets the same bits
    /// whatever else is in the batch ([`rows`]): rows in `rows`' segments are multiplied one segment at a time
    /// (in f32 with a CBLAS library loaded, [`OpsConfig::cpu_gemm`], for segments of at least [`BLAS_MIN_ROWS`]
    /// rows; else, where it is the built-in GEMM, by [`packed_gemm`] for segments of at least
    /// [`packed_gemm::MIN_ROWS`] rows; otherwise by candle's matmul, the `gemm` crate), independent f32 rows by
    /// [`row_gemm`] where the packed kernel is the built-in GEMM, else in `gemm` crate products of
    /// [`ROW_BLOCK`] rows. Elsewhere it is candle's matmul.
    pub fn matmul_nt(&self, x: &Tensor, w: &Tensor, rows: Rows<'_>) -> Result<Tensor> {
        if !x.device().is_cpu() {
            return candle_matmul_nt(x, w);
        }
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
        if count == 0 {
            return candle_matmul_nt(x, w);
        }
        let x2 = x.reshape((count, k))?;
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
            (None, _) if f32s && self.builtin == packed_gemm::BuiltinGemm::Packed => {
                independent_rows(&x2, w)?
            }
            (None, _) => in_row_blocks(&x2, w)?,
        };
        y.reshape(dims)
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
            (None, packed_gemm::BuiltinGemm::Packed) => {
                Some((Box::new(packed_gemm::sgemm_nt), packed_gemm::MIN_ROWS))
            }
            (None, packed_gemm::BuiltinGemm::GemmCrate) => None,
        }
    }
}

/// A product of f32 slices `c = a · wᵀ` ([`blas::Product`]).
type SegmentProduct<'a> = dyn Fn(&[f32], &[f32], (usize, usize, usize), &mut [f32]) + Sync + 'a;

/// `x · wᵀ` for independent f32 rows x (rows, in) by [`row_gemm`]: one dot product per output.
fn independent_rows(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let ((m, k), (n, _)) = (x.dims2()?, w.dims2()?);
    use cpu_elementwise::with_f32;
    let c = with_f32(x, |a| {
        with_f32(w, |b| {
            let mut c = vec![0f32; m * n];
            row_gemm::sgemm_nt_rows(a, b, (m, k, n), &mut c);
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

/// candle's `x · wᵀ` for x (rows, in) as one product per block of consecutive rows (`lens` rows each).
fn per_block(x: &Tensor, w: &Tensor, lens: &[usize]) -> Result<Tensor> {
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

fn candle_matmul_nt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    match x.rank() {
        2 => x.matmul(&w.t()?),
        _ => x.broadcast_matmul(&w.t()?),
    }
}

impl Ops {
    /// Qwen2 RMSNorm in transformers' order over the last dimension of `x`: normalise in f32, round to `x`'s
    /// dtype, multiply by `w` (same dtype as `x`).
    pub fn rms_norm_hf(&self, x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(x) && w.dtype() == x.dtype() {
            return cuda::rms_norm_hf(x, w, eps);
        }
        reference::rms_norm_hf(x, w, eps)
    }

    /// `y + b` over the last dimension (a Linear layer's bias), rounded to the dtype.
    pub fn bias_add(&self, y: &Tensor, b: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(y) && b.dtype() == y.dtype() {
            return cuda::bias_op("bias_add", &[y], &[b]);
        }
        reference::bias_add(y, b)
    }

    /// `silu(g) · u` with transformers' roundings, for a packed projection `gu` (rows, 2·I) = [gate | up] whose
    /// bias (2·I), if any, is added first (the vision MLP has one, the text MLP not). Returns (rows, I).
    pub fn swiglu_packed(&self, gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(gu) && bias.is_none_or(|b| b.dtype() == gu.dtype()) {
            return cuda::swiglu_packed(gu, bias);
        }
        if self.config.fused_kernels
            && cpu_elementwise::supported(&[gu])
            && bias.is_none_or(|b| b.dtype() == gu.dtype())
        {
            return cpu_elementwise::swiglu_packed(gu, bias);
        }
        reference::swiglu_packed(gu, bias)
    }

    /// `r + (y + b)`, each op rounded to the dtype: a biased projection closing a residual branch.
    pub fn bias_residual(&self, y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(y) && b.dtype() == y.dtype() && r.dtype() == y.dtype() {
            return cuda::bias_op("bias_residual", &[y, r], &[b]);
        }
        reference::bias_residual(y, b, r)
    }

    /// q (N, heads, d), k and v (N, kv_heads, d) from a packed projection ([`QkvRope`]): bias added, q and k
    /// rotated as transformers does (`x·cos + rotate_half(x)·sin`). The rotary runs in the tables' dtype: the
    /// activation dtype for the text model (each op rounded to it), f32 for the vision tower (rounded once at the
    /// end).
    pub fn qkv_rope(&self, a: QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(a.y)
            && a.bias.dtype() == a.y.dtype()
            && a.sin.dtype() == a.cos.dtype()
            && (a.cos.dtype() == a.y.dtype() || a.cos.dtype() == DType::F32)
        {
            return cuda::qkv_rope(a);
        }
        if self.config.fused_kernels && cpu_elementwise::supported(&[a.y, a.bias, a.cos, a.sin]) {
            return cpu_elementwise::qkv_rope(a);
        }
        reference::qkv_rope(a)
    }
}

/// The output shape of [`Ops::swiglu_packed`] (the last dimension halved), after checking the shapes.
fn swiglu_out_shape(gu: &Tensor, bias: Option<&Tensor>) -> Result<Vec<usize>> {
    let width = gu.dim(candle_core::D::Minus1)?;
    if !width.is_multiple_of(2) || bias.is_some_and(|b| b.dims() != [width]) {
        candle_core::bail!(
            "swiglu_packed: projection {:?} with bias {:?}",
            gu.dims(),
            bias.map(|b| b.dims())
        );
    }
    let mut shape = gu.dims().to_vec();
    *shape.last_mut().expect("rank ≥ 1") = width / 2;
    Ok(shape)
}

/// The inputs of [`Ops::qkv_rope`]: a packed attention projection `y` (N, (heads + 2·kv_heads)·d) without its
/// `bias`, and the rotary cos/sin half-tables (N, d/2).
#[derive(Clone, Copy)]
pub struct QkvRope<'a> {
    /// The projection's output, bias not added.
    pub y: &'a Tensor,
    /// The projection's bias ((heads + 2·kv_heads)·d).
    pub bias: &'a Tensor,
    /// Cosine half-table (N, d/2).
    pub cos: &'a Tensor,
    /// Sine half-table (N, d/2).
    pub sin: &'a Tensor,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
}

impl QkvRope<'_> {
    /// Check the shapes; returns (rows, head_dim).
    fn dims(&self) -> Result<(usize, usize)> {
        let (n, width) = self.y.dims2()?;
        let rows = self.heads + 2 * self.kv_heads;
        let d = width / rows.max(1);
        if !d.is_multiple_of(2)
            || width != rows * d
            || self.bias.dims() != [width]
            || self.cos.dims() != [n, d / 2]
            || self.sin.dims() != [n, d / 2]
        {
            candle_core::bail!(
                "qkv_rope: y {:?}, bias {:?}, cos {:?}, sin {:?} for {}/{} heads",
                self.y.dims(),
                self.bias.dims(),
                self.cos.dims(),
                self.sin.dims(),
                self.heads,
                self.kv_heads
            );
        }
        Ok((n, d))
    }
}
