//! The elementwise ops of the model: Qwen2's RMSNorm, the bias epilogues of the linear layers, SwiGLU of a packed
//! `[gate | up]` projection, the bias plus tanh-GELU of the Qwen3-VL tower's MLP and the q/k/v split with its bias
//! and rotary. [`Ops`] picks each call's path: the CUDA
//! kernel, the fused CPU loop ([`cpu`], f32), the fused bias additions and RMSNorm of bf16 on the CPU ([`bf16`],
//! the rest of an op composed) or the candle reference ([`reference`](mod@reference)).

pub(crate) mod bf16;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod gelu;
mod gelu_erf;
mod norm;
pub(super) mod reference;

pub use norm::QkHeads;

use candle_core::{Result, Tensor};

use super::Ops;

impl Ops {
    /// Qwen2 RMSNorm in transformers' order over the last dimension of `x`: normalise in f32, round to `x`'s
    /// dtype, multiply by `w` (same dtype as `x`).
    pub fn rms_norm_hf(&self, x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(x) && w.dtype() == x.dtype() {
            return cuda::rms_norm_hf(x, w, eps);
        }
        if self.bf16_epilogue(&[x, w]) {
            return bf16::rms_norm(x, w, eps);
        }
        reference::rms_norm_hf(x, w, eps)
    }

    /// The per-head RMSNorm of the q and k heads of a packed projection `y` (N, (heads + 2·kv_heads)·d) with the
    /// weights `qw` and `kw` (d each), v left as is ([`Self::rms_norm_hf`] per head): one fused pass for f32 on
    /// the CPU with the fused ops on, the parts copied out, normalised and concatenated otherwise.
    pub fn rms_norm_qk(
        &self,
        y: &Tensor,
        (qw, kw): (&Tensor, &Tensor),
        heads: QkHeads,
        eps: f32,
    ) -> Result<Tensor> {
        if self.config.fused_kernels && cpu::supported(&[y, qw, kw]) {
            return norm::rms_norm_qk(y, (qw, kw), heads, eps);
        }
        norm::composed(y, (qw, kw), heads, |x, w| self.rms_norm_hf(x, w, eps))
    }

    /// The exact (erf) GELU of `x`: one vectorised parallel pass for f32 on the CPU with the fused ops on,
    /// candle's `gelu_erf` otherwise.
    pub fn gelu_erf(&self, x: &Tensor) -> Result<Tensor> {
        if self.config.fused_kernels && cpu::supported(&[x]) {
            return gelu_erf::gelu_erf(x);
        }
        x.gelu_erf()
    }

    /// `y + b` over the last dimension (a Linear layer's bias), rounded to the dtype.
    pub fn bias_add(&self, y: &Tensor, b: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(y) && b.dtype() == y.dtype() {
            return cuda::bias_op("bias_add", &[y], &[b]);
        }
        if self.bf16_epilogue(&[y, b]) {
            return bf16::bias_add(y, b);
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
            && cpu::supported(&[gu])
            && bias.is_none_or(|b| b.dtype() == gu.dtype())
        {
            return cpu::swiglu_packed(gu, bias);
        }
        if self.bf16_epilogue(&[gu]) && bias.is_none_or(|b| b.dtype() == gu.dtype()) {
            return bf16::swiglu_packed(gu, bias);
        }
        reference::swiglu_packed(gu, bias)
    }

    /// `gelu_tanh(y + b)` over the last dimension of `y` (transformers' `gelu_pytorch_tanh` after a biased
    /// projection): one fused pass for f32 on the CPU with the fused ops on, candle's ops otherwise.
    pub fn bias_gelu_tanh(&self, y: &Tensor, b: &Tensor) -> Result<Tensor> {
        if self.config.fused_kernels && cpu::supported(&[y, b]) {
            return gelu::bias_gelu_tanh(y, b);
        }
        if self.bf16_epilogue(&[y, b]) {
            return bf16::bias_add(y, b)?.gelu();
        }
        reference::bias_gelu_tanh(y, b)
    }

    /// `r + (y + b)`, each op rounded to the dtype: a biased projection closing a residual branch.
    pub fn bias_residual(&self, y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if self.kernel_for(y) && b.dtype() == y.dtype() && r.dtype() == y.dtype() {
            return cuda::bias_op("bias_residual", &[y, r], &[b]);
        }
        if self.config.fused_kernels && cpu::supported(&[y, b, r]) && r.dims() == y.dims() {
            return cpu::bias_residual(y, b, r);
        }
        if self.bf16_epilogue(&[y, b, r]) && r.dims() == y.dims() {
            return bf16::bias_residual(y, b, r);
        }
        reference::bias_residual(y, b, r)
    }

    /// `r + y` of two tensors of one shape (a residual branch closing without a bias): one parallel pass for
    /// bf16 on the CPU with the fused ops on (the same bits), candle's add otherwise.
    pub fn residual_add(&self, y: &Tensor, r: &Tensor) -> Result<Tensor> {
        if self.bf16_epilogue(&[y, r]) && r.dims() == y.dims() {
            return bf16::add(y, r);
        }
        r + y
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
            && (a.cos.dtype() == a.y.dtype() || a.cos.dtype() == candle_core::DType::F32)
        {
            return cuda::qkv_rope(a);
        }
        if self.config.fused_kernels && cpu::supported(&[a.y, a.bias, a.cos, a.sin]) {
            return cpu::qkv_rope(a);
        }
        if self.bf16_epilogue(&[a.y, a.bias]) && a.sin.dtype() == a.cos.dtype() {
            return bf16::qkv_rope(a);
        }
        reference::qkv_rope(a)
    }

    /// Whether the bias additions and RMSNorm of bf16 CPU tensors take the fused pass ([`bf16`]): the fused ops on.
    fn bf16_epilogue(&self, tensors: &[&Tensor]) -> bool {
        self.config.fused_kernels && bf16::supported(tensors)
    }
}

/// The output shape of [`Ops::swiglu_packed`] (the last dimension halved), after checking the shapes.
pub(super) fn swiglu_out_shape(gu: &Tensor, bias: Option<&Tensor>) -> Result<Vec<usize>> {
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
    pub(super) fn dims(&self) -> Result<(usize, usize)> {
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

/// Checks the vector paths' tests share.
#[cfg(test)]
pub(super) mod check {
    use candle_core::Tensor;

    use crate::ops::simd::Level;

    /// The f32 values' bits.
    pub fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// `run` at every vector path this CPU supports, each result within `tol` of `want` relative to 1 + |want|
    /// (the references lose the small values of large negative inputs to cancellation, which the vector forms
    /// keep); the AVX2 and AVX-512 paths give the same bits. Returns each path's result.
    pub fn every_level(
        want: &Tensor,
        tol: f32,
        run: impl Fn(Level) -> Tensor,
    ) -> Vec<(Level, Tensor)> {
        let mut out = Vec::new();
        for level in Level::supported() {
            let got = run(level);
            let err = ((&got - want).unwrap().abs().unwrap()
                / (want.abs().unwrap() + 1.0).unwrap())
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
            assert!(err < tol, "{level:?}: error {err}");
            out.push((level, got));
        }
        let vector: Vec<Vec<u32>> = out
            .iter()
            .filter(|(l, _)| *l != Level::Portable)
            .map(|(_, t)| bits(t))
            .collect();
        assert!(
            vector.windows(2).all(|w| w[0] == w[1]),
            "AVX2 and AVX-512 bits differ"
        );
        out
    }
}
