//! The references of the elementwise ops, made of candle ops in transformers' order: what runs where no fused
//! path does, and what the fused CPU loops and the CUDA kernels are compared with.

use candle_core::{DType, Result, Tensor, D};

/// RMSNorm over the last dimension: `x·rsqrt(mean(x²) + eps)` in f32, rounded to `x`'s dtype, times `w`.
pub fn rms_norm_hf(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let dtype = x.dtype();
    if dtype == DType::F32 {
        return candle_nn::ops::rms_norm(x, w, eps);
    }
    let dim = x.dim(D::Minus1)?;
    let ones = Tensor::ones(dim, DType::F32, x.device())?;
    let normed = candle_nn::ops::rms_norm(&x.to_dtype(DType::F32)?, &ones, eps)?;
    normed.to_dtype(dtype)?.broadcast_mul(w)
}

/// `silu(g)·u`, each op rounded to the dtype.
pub(crate) fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    g.silu()? * u
}

/// `y + b` broadcast over rows.
pub fn bias_add(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    y.broadcast_add(b)
}

/// [`crate::ops::Ops::swiglu_packed`] composed: bias, split, [`swiglu`].
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let gu = match bias {
        Some(b) => gu.broadcast_add(b)?,
        None => gu.clone(),
    };
    let i = gu.dim(candle_core::D::Minus1)? / 2;
    let last = gu.rank() - 1;
    swiglu(&gu.narrow(last, 0, i)?, &gu.narrow(last, i, i)?)
}

/// `r + (y + b)`.
pub fn bias_residual(y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
    r + y.broadcast_add(b)?
}

/// `gelu_tanh(y + b)`: candle's tanh-approximated GELU after the bias.
pub fn bias_gelu_tanh(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    y.broadcast_add(b)?.gelu()
}

/// [`crate::ops::Ops::qkv_rope`] composed: bias, split, candle's `rope_thd` on q and k in the tables' dtype.
pub fn qkv_rope(a: super::QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    qkv_rope_biased(&a.y.broadcast_add(a.bias)?, a)
}

/// [`qkv_rope`] on `x`, the projection `a.y` with its bias already added.
fn qkv_rope_biased(x: &Tensor, a: super::QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, d) = a.dims()?;
    let (heads, kv_heads) = (a.heads, a.kv_heads);
    let part = |first: usize, count: usize| -> Result<Tensor> {
        x.narrow(1, first * d, count * d)?
            .reshape((n, count, d))?
            .contiguous()
    };
    let rope = |t: Tensor| -> Result<Tensor> {
        let r = t.to_dtype(a.cos.dtype())?.unsqueeze(0)?;
        candle_nn::rotary_emb::rope_thd(&r, a.cos, a.sin)?
            .squeeze(0)?
            .to_dtype(t.dtype())
    };
    Ok((
        rope(part(0, heads)?)?,
        rope(part(heads, kv_heads)?)?,
        part(heads + kv_heads, kv_heads)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(v: &[f32], shape: (usize, usize)) -> Tensor {
        Tensor::from_slice(v, shape, &Device::Cpu).unwrap()
    }

    #[test]
    fn rms_norm_matches_the_formula() {
        let x = [1.0f32, -2.0, 3.0, 0.5, 0.0, 4.0];
        let w = [1.0f32, 0.5, 2.0];
        let out = rms_norm_hf(
            &t(&x, (2, 3)),
            &Tensor::new(&w, &Device::Cpu).unwrap(),
            1e-6,
        )
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
        for r in 0..2 {
            let row = &x[3 * r..3 * r + 3];
            let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / 3.0 + 1e-6).sqrt();
            for c in 0..3 {
                assert!((out[r][c] - row[c] * inv * w[c]).abs() < 1e-6);
            }
        }
        // bf16: the normalised value is rounded before the weight.
        let xb = t(&x, (2, 3)).to_dtype(DType::BF16).unwrap();
        let wb = Tensor::new(&w, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let got = rms_norm_hf(&xb, &wb, 1e-6).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let want = rms_norm_hf(
            &t(&x, (2, 3)),
            &Tensor::ones(3, DType::F32, &Device::Cpu).unwrap(),
            1e-6,
        )
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
        .broadcast_mul(&wb)
        .unwrap();
        let diff = (got.to_dtype(DType::F32).unwrap() - want.to_dtype(DType::F32).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(diff, 0.0);
    }

    #[test]
    fn swiglu_matches_the_formula() {
        let g = [-3.0f32, -0.5, 0.0, 2.0];
        let u = [1.0f32, 2.0, 3.0, -1.5];
        let out = swiglu(&t(&g, (1, 4)), &t(&u, (1, 4)))
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for i in 0..4 {
            let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
            assert!(
                (out[0][i] - want).abs() < 1e-6,
                "{i}: {} vs {want}",
                out[0][i]
            );
        }
    }
}
