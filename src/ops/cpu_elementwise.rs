//! Fused elementwise ops on the CPU in f32, each one parallel pass over the rows without the composed reference's
//! intermediate tensors: the packed q/k/v bias + rotary (the reference's arithmetic in its order, so the same bits)
//! and SwiGLU of a packed `[gate | up]` projection (with AVX2, `exp` is the vectorised Cephes scheme of
//! [`super::simd`], within about an ulp of libm's, so the result may differ from the reference's in the last bit).

use candle_core::{DType, Result, Storage, Tensor};
use rayon::prelude::*;

/// Whether this path serves `tensors`: all f32 and on the CPU.
pub fn supported(tensors: &[&Tensor]) -> bool {
    tensors
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
}

/// The `n` f32 values of a contiguous CPU tensor's storage, from its layout's start.
pub(super) fn cpu_slice<'a>(
    storage: &'a Storage,
    layout: &candle_core::Layout,
    n: usize,
) -> Result<&'a [f32]> {
    let Storage::Cpu(cs) = storage else {
        candle_core::bail!("fused CPU op: expected a CPU tensor");
    };
    let start = layout.start_offset();
    Ok(&cs.as_slice::<f32>()?[start..start + n])
}

/// Run `f` on the f32 data of a CPU tensor (made contiguous).
pub(super) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    f(cpu_slice(&storage, layout, t.elem_count())?)
}

/// Copy the f32 data of a CPU tensor (made contiguous) into a `Vec`.
fn f32_data(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// The AVX2 part of a SwiGLU row, if this CPU has it: how many leading columns it wrote.
fn vector_swiglu(g: &[f32], u: &[f32], bias: Option<(&[f32], &[f32])>, out: &mut [f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if super::simd::avx2::available() {
        // SAFETY: AVX2 and FMA are present; u, out and the biases are as long as g (one row's halves).
        return unsafe { super::simd::avx2::swiglu_row(g, u, bias, out) };
    }
    let _ = (g, u, bias, out);
    0
}

/// See [`super::swiglu_packed`].
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let shape = super::swiglu_out_shape(gu, bias)?;
    let cols = *shape.last().expect("rank ≥ 1");
    let width = 2 * cols;
    let bias = bias.map(f32_data).transpose()?;
    let gu = gu.contiguous()?;
    let (storage, layout) = gu.storage_and_layout();
    let data = cpu_slice(&storage, layout, gu.elem_count())?;
    let mut out = vec![0f32; data.len() / 2];
    if cols > 0 {
        out.par_chunks_mut(cols)
            .zip(data.par_chunks(width))
            .for_each(|(o, row)| {
                let (g, u) = row.split_at(cols);
                let bias = bias.as_deref().map(|b| b.split_at(cols));
                let done = vector_swiglu(g, u, bias, o);
                for c in done..cols {
                    let (gv, uv) = match bias {
                        Some((bg, bu)) => (g[c] + bg[c], u[c] + bu[c]),
                        None => (g[c], u[c]),
                    };
                    o[c] = gv / (1.0 + (-gv).exp()) * uv;
                }
            });
    }
    Tensor::from_vec(out, shape, gu.device())
}

/// See [`super::qkv_rope`] (f32 projection, bias and tables): rows in parallel; per rotated head and j < d/2,
/// x = y + b, then `x[j]·cos − x[j+d/2]·sin` and `x[j]·sin + x[j+d/2]·cos` as candle's `rope_thd` computes them.
pub fn qkv_rope(a: super::QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, d) = a.dims()?;
    let (heads, kv_heads, y) = (a.heads, a.kv_heads, a.y);
    let (width, half) = ((heads + 2 * kv_heads) * d, d / 2);
    // Borrowed in place: no copy where the tensors are already contiguous, as they are in the model.
    let (bias_t, cos_t, sin_t) = (
        a.bias.contiguous()?,
        a.cos.contiguous()?,
        a.sin.contiguous()?,
    );
    let y = y.contiguous()?;
    let (bg, cg, sg, yg) = (
        bias_t.storage_and_layout(),
        cos_t.storage_and_layout(),
        sin_t.storage_and_layout(),
        y.storage_and_layout(),
    );
    let (bias, cos) = (
        cpu_slice(&bg.0, bg.1, width)?,
        cpu_slice(&cg.0, cg.1, n * half)?,
    );
    let (sin, data) = (
        cpu_slice(&sg.0, sg.1, n * half)?,
        cpu_slice(&yg.0, yg.1, n * width)?,
    );
    let (mut q, mut k, mut v) = (
        vec![0f32; n * heads * d],
        vec![0f32; n * kv_heads * d],
        vec![0f32; n * kv_heads * d],
    );
    if n > 0 && d > 0 {
        q.par_chunks_mut(heads * d)
            .zip(k.par_chunks_mut(kv_heads * d))
            .zip(v.par_chunks_mut(kv_heads * d))
            .zip(data.par_chunks(width))
            .enumerate()
            .for_each(|(r, (((qr, kr), vr), yr))| {
                let (c, s) = (
                    &cos[r * half..(r + 1) * half],
                    &sin[r * half..(r + 1) * half],
                );
                for hh in 0..heads + kv_heads {
                    let o = hh * d;
                    let dst = if hh < heads {
                        &mut qr[o..o + d]
                    } else {
                        &mut kr[o - heads * d..o - heads * d + d]
                    };
                    for j in 0..half {
                        let x1 = yr[o + j] + bias[o + j];
                        let x2 = yr[o + j + half] + bias[o + j + half];
                        dst[j] = x1 * c[j] - x2 * s[j];
                        dst[j + half] = x1 * s[j] + x2 * c[j];
                    }
                }
                let o = (heads + kv_heads) * d;
                for (i, out) in vr.iter_mut().enumerate() {
                    *out = yr[o + i] + bias[o + i];
                }
            });
    }
    let dev = y.device();
    Ok((
        Tensor::from_vec(q, (n, heads, d), dev)?,
        Tensor::from_vec(k, (n, kv_heads, d), dev)?,
        Tensor::from_vec(v, (n, kv_heads, d), dev)?,
    ))
}
