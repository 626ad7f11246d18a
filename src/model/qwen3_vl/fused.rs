//! The tower's LayerNorm in one pass per row where the activations are f32 on the CPU (candle composes torch's
//! LayerNorm from nine tensor ops, each a pass over the activations with a broadcast; the bias plus tanh-GELU
//! after the MLP's first projection is [`Ops::bias_gelu_tanh`]). Rows run in parallel, each on its
//! own, so a row's result does not depend on the rows around it. Other devices and dtypes, and runs with the
//! fused ops off (`--kernels off`), take candle's ops.

use candle_core::{DType, Result, Tensor, D};
use candle_nn::VarBuilder;

use crate::model::nn::weight;
use crate::ops::{map_rows, Ops};

/// Rows handed to one parallel task (a row is 1,024–4,608 values in the released towers).
const MIN_ROWS_PER_TASK: usize = 8;

/// Whether the fused ops are on and every tensor is f32, contiguous and on the CPU: the fused loops' inputs.
fn fused_input(ops: &Ops, ts: &[&Tensor]) -> bool {
    ops.config().fused_kernels
        && ts
            .iter()
            .all(|t| t.device().is_cpu() && t.dtype() == DType::F32 && t.is_contiguous())
}

/// Sum of `f` over `row` in 16 interleaved partial sums (so that the loop vectorises), then those in order and
/// the remainder.
fn sum16(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    rest.iter().fold(acc.iter().sum(), |s, &v| s + f(v))
}

/// torch's LayerNorm with weight and bias over the last dimension: mean and variance in f32, affine in f32, one
/// rounding to the activation dtype at the end (as `torch.nn.functional.layer_norm` does for half-precision
/// inputs).
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Load `weight` and `bias` (dim), kept in f32.
    pub fn new(dim: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            w: weight(&vb, dim, "weight")?.to_dtype(DType::F32)?,
            b: weight(&vb, dim, "bias")?.to_dtype(DType::F32)?,
            eps,
        })
    }

    /// Normalise `x` over its last dimension.
    pub fn forward(&self, ops: &Ops, x: &Tensor) -> Result<Tensor> {
        if fused_input(ops, &[x, &self.w, &self.b]) {
            return self.forward_rows(x);
        }
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        centred
            .broadcast_div(&(var + self.eps)?.sqrt()?)?
            .broadcast_mul(&self.w)?
            .broadcast_add(&self.b)?
            .to_dtype(dtype)
    }

    /// The same arithmetic as the composed path, one row at a time.
    fn forward_rows(&self, x: &Tensor) -> Result<Tensor> {
        let d = x.dim(D::Minus1)?;
        let (w, b) = (self.w.to_vec1::<f32>()?, self.b.to_vec1::<f32>()?);
        let eps = self.eps as f32;
        map_rows(x, (d, d), MIN_ROWS_PER_TASK, x.shape(), |row, out| {
            let n = d as f32;
            let mean = sum16(row, |v| v) / n;
            let var = sum16(row, |v| (v - mean) * (v - mean)) / n;
            let std = (var + eps).sqrt();
            for (((o, v), w), b) in out.iter_mut().zip(row).zip(&w).zip(&b) {
                *o = (v - mean) / std * w + b;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    use crate::ops::OpsConfig;

    /// The fused ops on, and off (candle's ops).
    fn both() -> (Ops, Ops) {
        let on = OpsConfig::default();
        let off = OpsConfig {
            fused_kernels: false,
            ..on.clone()
        };
        let ops = |c: &OpsConfig| Ops::new(c, &Device::Cpu, candle_core::DType::F32).unwrap();
        (ops(&on), ops(&off))
    }

    fn rows(n: usize, d: usize, seed: u32) -> Tensor {
        let v: Vec<f32> = (0..n * d)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
                (h % 20_000) as f32 / 1_000.0 - 10.0
            })
            .collect();
        Tensor::from_vec(v, (n, d), &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn fused_layer_norm_matches_the_composed_ops() {
        let (on, off) = both();
        let (n, d) = (37, 1040);
        let norm = LayerNorm {
            w: rows(1, d, 3).reshape(d).unwrap(),
            b: rows(1, d, 5).reshape(d).unwrap(),
            eps: 1e-6,
        };
        let x = rows(n, d, 7);
        let fused = norm.forward(&on, &x).unwrap();
        let composed = norm.forward(&off, &x).unwrap();
        let diff = max_diff(&fused, &composed);
        assert!(diff < 2e-5, "{diff}");
        // Each row is its own: the first rows alone give the same bits.
        let head = norm.forward(&on, &x.narrow(0, 0, 5).unwrap()).unwrap();
        assert_eq!(max_diff(&head, &fused.narrow(0, 0, 5).unwrap()), 0.0);
    }
}
