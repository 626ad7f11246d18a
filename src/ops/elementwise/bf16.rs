//! The bias epilogues and the RMSNorm of bf16 activations on the CPU as one parallel pass over the rows: each op
//! in f32 and rounded to bf16 (to nearest, ties to even), exactly as the composed reference's bf16 ops round each
//! op, so the same bits. The composed ops widen and round 8 values per call of an intrinsic the binary was not compiled to
//! inline; here the rounding is a few integer operations the compiler vectorises.

use candle_core::{DType, Result, Tensor};
use half::bf16;
use rayon::prelude::*;

use crate::ops::cpu_data::cpu_slice;

/// Whether this path serves `tensors`: all bf16 and on the CPU.
pub fn supported(tensors: &[&Tensor]) -> bool {
    tensors
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::BF16)
}

/// `x` rounded to bf16, to nearest with ties to even (a NaN stays a quiet NaN).
#[inline(always)]
fn round(x: f32) -> bf16 {
    let b = x.to_bits();
    let rounded = if x.is_nan() {
        (b >> 16) | 0x40
    } else {
        (b + 0x7fff + ((b >> 16) & 1)) >> 16
    };
    bf16::from_bits(rounded as u16)
}

/// Rows of `width` values of `y` (and of `r`, where given), each turned into an output row by `f`.
fn rows(
    y: &Tensor,
    r: Option<&Tensor>,
    width: usize,
    f: impl Fn(&[bf16], Option<&[bf16]>, &mut [bf16]) + Sync + Send,
) -> Result<Tensor> {
    let y = y.contiguous()?;
    let r = r.map(Tensor::contiguous).transpose()?;
    let (ys, yl) = y.storage_and_layout();
    let yd = cpu_slice::<bf16>(&ys, yl, y.elem_count())?;
    let rg = r.as_ref().map(|r| r.storage_and_layout());
    let rd = match &rg {
        Some((s, l)) => Some(cpu_slice::<bf16>(s, l, yd.len())?),
        None => None,
    };
    let mut out = vec![bf16::ZERO; yd.len()];
    if width > 0 {
        out.par_chunks_mut(width)
            .enumerate()
            .with_min_len(8)
            .for_each(|(i, o)| {
                let row = i * width..(i + 1) * width;
                f(&yd[row.clone()], rd.map(|r| &r[row]), o)
            });
    }
    Tensor::from_vec(out, y.shape(), y.device())
}

/// The values of a vector (a bias, a norm's weight), its length checked against the last dimension of `y`.
fn vector_values(op: &str, y: &Tensor, b: &Tensor) -> Result<(usize, Vec<f32>)> {
    let width = y.dim(candle_core::D::Minus1)?;
    if b.dims() != [width] {
        candle_core::bail!("{op}: rows {:?}, vector {:?}", y.dims(), b.dims());
    }
    Ok((width, b.to_dtype(DType::F32)?.to_vec1::<f32>()?))
}

/// `y + b` over the last dimension, rounded to bf16.
pub fn bias_add(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (width, b) = vector_values("bias_add", y, b)?;
    rows(y, None, width, |y, _, o| {
        for ((o, y), b) in o.iter_mut().zip(y).zip(&b) {
            *o = round(y.to_f32() + b);
        }
    })
}

/// `r + (y + b)`, each addition rounded to bf16.
pub fn bias_residual(y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
    let (width, b) = vector_values("bias_residual", y, b)?;
    if r.dims() != y.dims() {
        candle_core::bail!("bias_residual: y {:?}, residual {:?}", y.dims(), r.dims());
    }
    rows(y, Some(r), width, |y, r, o| {
        let r = r.unwrap_or_default();
        for (((o, y), r), b) in o.iter_mut().zip(y).zip(r).zip(&b) {
            *o = round(r.to_f32() + round(y.to_f32() + b).to_f32());
        }
    })
}

/// Qwen2 RMSNorm of bf16 rows as the composed reference computes it: per row the sum of squares in f32 in order,
/// `x / sqrt(mean + eps)` in f32 rounded to bf16, then times the weight rounded to bf16.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let (width, w) = vector_values("rms_norm", x, w)?;
    rows(x, None, width, |x, _, o| {
        let sum2 = x.iter().map(|v| v.to_f32() * v.to_f32()).sum::<f32>();
        let m = (sum2 / width as f32 + eps).sqrt();
        for ((o, x), w) in o.iter_mut().zip(x).zip(&w) {
            *o = round(round(x.to_f32() / m).to_f32() * w);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::reference;
    use candle_core::Device;

    fn bits(t: &Tensor) -> Vec<u16> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<bf16>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// Both epilogues and the RMSNorm give the composed reference's bits on values whose sums need rounding (ties included),
    /// and the rounding is half's for every finite sum and for NaN.
    #[test]
    fn bf16_epilogues_give_the_reference_bits() {
        let dev = Device::Cpu;
        let r = |shape: (usize, usize), s: f64| {
            (Tensor::randn(0f32, 1.0, shape, &dev).unwrap() * s)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let (y, res) = (r((37, 300), 3.0), r((37, 300), 50.0));
        let b = r((1, 300), 1.0).squeeze(0).unwrap();
        assert_eq!(
            bits(&bias_add(&y, &b).unwrap()),
            bits(&reference::bias_add(&y, &b).unwrap())
        );
        assert_eq!(
            bits(&bias_residual(&y, &b, &res).unwrap()),
            bits(&reference::bias_residual(&y, &b, &res).unwrap())
        );
        for x in [
            1.0f32 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            -2.5e-3,
            3.0e38,
            f32::NAN,
        ] {
            for v in [
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits() - 1),
            ] {
                assert_eq!(round(v).to_bits(), bf16::from_f32(v).to_bits(), "{v:e}");
            }
        }
        assert_eq!(
            bits(&rms_norm(&res, &b, 1e-6).unwrap()),
            bits(&reference::rms_norm_hf(&res, &b, 1e-6).unwrap())
        );
        assert!(bias_add(&y, &b.narrow(0, 0, 10).unwrap()).is_err());
    }
}
