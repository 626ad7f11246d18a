//! Fused ops behind the model code: each has a reference made of candle ops (the transformers order, used on the
//! CPU and Metal, and whenever the kernels are off) and, with the `cuda` feature, one of the project's own CUDA
//! kernels (`kernels/fused.cu`). `check` compares the two on a device (`mobile-r1-eval self-test`).
//!
//! `MOBILE_R1_EVAL_KERNELS=off` routes every op through its reference, to measure what the kernels bring.

pub mod blas;
pub mod check;
mod cpu_attn;
mod cpu_elementwise;
#[cfg(feature = "cuda")]
mod cuda;
pub mod launch;
pub mod reference;
pub mod rows;
mod simd;

use candle_core::{DType, Device, Result, Tensor};

/// True unless `MOBILE_R1_EVAL_KERNELS=off`.
pub fn kernels_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("MOBILE_R1_EVAL_KERNELS").map_or(true, |v| !v.eq_ignore_ascii_case("off"))
    })
}

/// True when `MOBILE_R1_EVAL_MMA` is on (`1`, `true`, `yes`, `on`): bf16/f16 varlen attention on CUDA runs on
/// tensor cores (`varlen_mma_*`) instead of the CUDA-core kernel. Opt-in until the kernel has passed
/// `self-test` on a GPU (it was written and compile-checked on a machine without one).
pub fn mma_attention_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::model::files::env_flag("MOBILE_R1_EVAL_MMA"))
}

/// What the run manifest records about the fused ops: whether they are on, whether this build has the CUDA
/// kernels, and the SHA-256 of `kernels/fused.cu` as compiled into this build.
pub fn manifest_entry() -> serde_json::Value {
    use sha2::{Digest, Sha256};
    let source = include_str!("../../kernels/fused.cu");
    let sha: String = Sha256::digest(source.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    serde_json::json!({
        "fused": kernels_enabled(),
        "cuda_kernels": cfg!(feature = "cuda"),
        "tensor_core_attention": mma_attention_enabled(),
        "kernels_sha256": sha,
        "cpu_f32_gemm": blas::describe(),
        "cpu_blas_choice": blas::choice(),
        "cpu_gemm_row_block": ROW_BLOCK,
        "cpu_gemm_blas_min_rows": BLAS_MIN_ROWS,
    })
}

/// Fewest rows of a segment for which [`matmul_nt`] uses the CBLAS library: below it the product is a
/// matrix-vector one, where the `gemm` crate is faster here (1 row: 2× faster; 2–3 rows: 10–20%; 4 rows and more:
/// OpenBLAS is).
pub const BLAS_MIN_ROWS: usize = 4;

/// Independent rows (decode, the logits of last positions) are multiplied in products of exactly this many
/// rows (the last one zero-padded): the `gemm` crate's result for a row depends on the number of rows of the
/// product but not on the row's place in it or on the other rows, so a fixed count makes it batch-invariant.
pub const ROW_BLOCK: usize = 16;

/// `x · wᵀ` for x (…, in) and w (out, in): the linear layers' GEMM. On the CPU every row gets the same bits
/// whatever else is in the batch ([`rows`]): rows in declared segments are multiplied one segment at a time (in
/// f32 with a CBLAS library loaded, [`blas`] / `MOBILE_R1_EVAL_BLAS`, for segments of at least
/// [`BLAS_MIN_ROWS`] rows; otherwise by candle's matmul, the `gemm` crate), other rows in blocks of
/// [`ROW_BLOCK`]. Elsewhere it is candle's matmul.
pub fn matmul_nt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
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
    let rows = x.elem_count() / k.max(1);
    if rows == 0 {
        return candle_matmul_nt(x, w);
    }
    let lens = rows::current_for(rows);
    let blas = match &lens {
        Some(_)
            if x.dtype() == DType::F32
                && w.dtype() == DType::F32
                && blas::fits_cblas(rows, k, n) =>
        {
            blas::global().map_err(|e| candle_core::Error::Msg(e.to_string()))?
        }
        _ => None,
    };
    let x2 = x.reshape((rows, k))?;
    let y = match (lens, blas) {
        (Some(lens), Some(b)) => {
            let small = |a: &[f32], len: usize| {
                let xs = Tensor::from_slice(a, (len, k), &Device::Cpu)?;
                xs.matmul(&w.t()?)?.flatten_all()?.to_vec1::<f32>()
            };
            blas::matmul_nt_segments(b, &x2, w, &lens, BLAS_MIN_ROWS, &small)?
        }
        (Some(lens), None) => per_block(&x2, w, &lens)?,
        (None, _) => in_row_blocks(&x2, w)?,
    };
    y.reshape(dims)
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

/// True when `device` is a CUDA device, the kernels are on and `dtype` has a kernel.
fn on_kernel_path(device: &Device, dtype: DType) -> bool {
    cfg!(feature = "cuda")
        && device.is_cuda()
        && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
        && kernels_enabled()
}

/// [`on_kernel_path`] for an op's main operand `t`, which must not be empty (an empty input takes the composed
/// path instead of launching an empty grid).
#[cfg(feature = "cuda")]
fn kernel_for(t: &Tensor) -> bool {
    on_kernel_path(t.device(), t.dtype()) && t.elem_count() > 0
}

/// Qwen2 RMSNorm in transformers' order over the last dimension of `x`: normalise in f32, round to `x`'s
/// dtype, multiply by `w` (same dtype as `x`).
pub fn rms_norm_hf(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if kernel_for(x) && w.dtype() == x.dtype() {
        return cuda::rms_norm_hf(x, w, eps);
    }
    reference::rms_norm_hf(x, w, eps)
}

/// `y + b` over the last dimension (a Linear layer's bias), rounded to the dtype.
pub fn bias_add(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if kernel_for(y) && b.dtype() == y.dtype() {
        return cuda::bias_op("bias_add", &[y], &[b]);
    }
    reference::bias_add(y, b)
}

/// `silu(g) · u` with transformers' roundings, for a packed projection `gu` (rows, 2·I) = [gate | up] whose
/// bias (2·I), if any, is added first (the vision MLP has one, the text MLP not). Returns (rows, I).
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if kernel_for(gu) && bias.is_none_or(|b| b.dtype() == gu.dtype()) {
        return cuda::swiglu_packed(gu, bias);
    }
    if kernels_enabled()
        && cpu_elementwise::supported(&[gu])
        && bias.is_none_or(|b| b.dtype() == gu.dtype())
    {
        return cpu_elementwise::swiglu_packed(gu, bias);
    }
    reference::swiglu_packed(gu, bias)
}

/// The output shape of [`swiglu_packed`] (the last dimension halved), after checking the shapes.
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

/// `r + (y + b)`, each op rounded to the dtype: a biased projection closing a residual branch.
pub fn bias_residual(y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if kernel_for(y) && b.dtype() == y.dtype() && r.dtype() == y.dtype() {
        return cuda::bias_op("bias_residual", &[y, r], &[b]);
    }
    reference::bias_residual(y, b, r)
}

/// The inputs of [`qkv_rope`]: a packed attention projection `y` (N, (heads + 2·kv_heads)·d) without its
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

/// q (N, heads, d), k and v (N, kv_heads, d) from a packed projection ([`QkvRope`]): bias added, q and k rotated
/// as transformers does (`x·cos + rotate_half(x)·sin`). The rotary runs in the tables' dtype: the activation
/// dtype for the text model (each op rounded to it), f32 for the vision tower (rounded once at the end).
pub fn qkv_rope(a: QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    #[cfg(feature = "cuda")]
    if kernel_for(a.y)
        && a.bias.dtype() == a.y.dtype()
        && a.sin.dtype() == a.cos.dtype()
        && (a.cos.dtype() == a.y.dtype() || a.cos.dtype() == DType::F32)
    {
        return cuda::qkv_rope(a);
    }
    if kernels_enabled() && cpu_elementwise::supported(&[a.y, a.bias, a.cos, a.sin]) {
        return cpu_elementwise::qkv_rope(a);
    }
    reference::qkv_rope(a)
}

/// One layer's KV buffers of one sequence for [`decode_attention`]: K and V of shape (kv_heads, capacity,
/// head_dim), contiguous, not shared with any other cache (the new position is written into them), and `len`
/// valid positions before this step (`len < capacity`).
#[derive(Clone, Copy)]
pub struct DecodeKv<'a> {
    /// K buffer.
    pub k: &'a Tensor,
    /// V buffer.
    pub v: &'a Tensor,
    /// Valid positions before this step.
    pub len: usize,
}

/// Whether [`decode_attention`] has a fused kernel for these shapes on this device (else the caller keeps its
/// composed path): CUDA, kernels on, head_dim 32, 64 or 128, at most 8 query heads per KV head.
pub fn fused_decode_supported(
    device: &Device,
    dtype: DType,
    head_dim: usize,
    group: usize,
) -> bool {
    on_kernel_path(device, dtype) && matches!(head_dim, 32 | 64 | 128) && (1..=8).contains(&group)
}

/// One decode step of attention for B sequences with separate KV buffers, in one launch: writes each
/// sequence's new K/V (`k_new`, `v_new`: (B, kv_heads, head_dim)) at position `len` of its buffers, then attends
/// its queries `q` (B, kv_heads·group, head_dim) over positions `0..=len`. Returns (B, heads, head_dim).
/// One launch where [`fused_decode_supported`] holds, else [`reference::decode_attention`].
pub fn decode_attention(
    q: &Tensor,
    k_new: &Tensor,
    v_new: &Tensor,
    kv: &[DecodeKv<'_>],
    scale: f32,
) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if !kv.is_empty()
        && fused_decode_supported(
            q.device(),
            q.dtype(),
            q.dim(2)?,
            q.dim(1)? / k_new.dim(1)?.max(1),
        )
    {
        let plan = DecodePlan::new(q.dtype(), std::slice::from_ref(&kv.to_vec()))?;
        return plan.attend(q, k_new, v_new, 0, scale);
    }
    reference::decode_attention(q, k_new, v_new, kv, scale)
}

/// The fused decode attention of one step over all layers: the buffer tables are checked and uploaded once per
/// step instead of once per layer. CUDA only (where [`fused_decode_supported`] holds).
pub struct DecodePlan {
    #[cfg(feature = "cuda")]
    tables: cuda::DecodeTables,
}

impl DecodePlan {
    /// `layers[l][b]`: the buffers of sequence b in layer l, reserved for this step.
    pub fn new(dtype: DType, layers: &[Vec<DecodeKv<'_>>]) -> Result<Self> {
        #[cfg(feature = "cuda")]
        return Ok(Self {
            tables: cuda::DecodeTables::new(dtype, layers)?,
        });
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (dtype, layers);
            candle_core::bail!("the fused decode attention needs the `cuda` feature")
        }
    }

    /// [`decode_attention`] for layer `layer` of the plan.
    pub fn attend(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        layer: usize,
        scale: f32,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        return cuda::decode_attention(
            &self.tables,
            cuda::DecodeCall {
                q,
                k_new,
                v_new,
                layer,
                scale,
            },
        );
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (q, k_new, v_new, layer, scale);
            candle_core::bail!("the fused decode attention needs the `cuda` feature")
        }
    }
}

/// One segment of a packed varlen attention: rows `start..start+len` of q/k/v, optionally continuing a cached
/// prefix whose K/V buffers are (kv_heads, capacity ≥ prefix_len, head_dim).
#[derive(Clone, Copy)]
pub struct VarlenSeg<'a> {
    /// First packed row.
    pub start: usize,
    /// Number of rows.
    pub len: usize,
    /// `(K buffer, V buffer, prefix_len)` of a cached prefix the segment's queries also attend to.
    pub prefix: Option<(&'a Tensor, &'a Tensor, usize)>,
}

/// One packed varlen attention call: queries `q` (N, heads, d), keys/values `k`/`v` (N, kv_heads, d), the
/// segments (in order, covering every row), causal or not, and the score scale.
#[derive(Clone, Copy)]
pub struct Varlen<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub segs: &'a [VarlenSeg<'a>],
    pub causal: bool,
    pub scale: f32,
}

/// Whether [`varlen_attention`] runs a fused implementation for tensors of `dtype` on `device` with this
/// head_dim (kernels on): CUDA with head_dim 64, 80 or 128, or the CPU in f32 with head_dim a multiple of 8.
pub fn varlen_supported(device: &Device, dtype: DType, head_dim: usize) -> bool {
    (on_kernel_path(device, dtype) && matches!(head_dim, 64 | 80 | 128))
        || (kernels_enabled() && cpu_attn::supported(device, dtype, head_dim))
}

/// Attention of packed segments: the queries of each segment (its rows of `q`) attend to the segment's keys (its
/// prefix, then its rows of `k`/`v`), causally or not. Returns (N, heads, d). One launch on CUDA and the fused
/// f32 path on the CPU where [`varlen_supported`] holds, else [`reference::varlen_attention`].
pub fn varlen_attention(a: Varlen<'_>) -> Result<Tensor> {
    let q = a.q;
    // Empty inputs take the composed path: the kernels would launch an empty grid.
    if varlen_supported(q.device(), q.dtype(), q.dim(2)?) && q.elem_count() > 0 {
        #[cfg(feature = "cuda")]
        if q.device().is_cuda() {
            // The tensor-core kernel covers bf16/f16 only.
            let mma = mma_attention_enabled() && q.dtype() != DType::F32;
            return cuda::varlen_attention(a, mma);
        }
        return cpu_attn::varlen_attention(a);
    }
    reference::varlen_attention(a)
}

/// [`varlen_attention`] on CUDA with the kernel chosen by the caller (`mma`: tensor cores, bf16/f16 only), for
/// `self-test` to check both kernels whatever `MOBILE_R1_EVAL_MMA` says.
#[cfg(feature = "cuda")]
pub(crate) fn varlen_attention_cuda(a: Varlen<'_>, mma: bool) -> Result<Tensor> {
    cuda::varlen_attention(a, mma)
}
