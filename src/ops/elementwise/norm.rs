//! The per-head RMSNorm of q and k in a packed attention projection (the Qwen3 text model's `q_norm` and
//! `k_norm`), fused on the CPU in f32: one parallel pass over the rows writes the normalised q and k heads and the
//! untouched v heads into one new projection, instead of copying the q and k parts out, normalising them and
//! concatenating the three parts again. Each head is normalised as candle's `rms_norm` does (`x / √(mean(x²) + ε)
//! · w`), its sum of squares taken in eight interleaved lanes (so that the loop vectorises): within an ulp or two
//! of the composed reference, and the same bits on every x86 vector path.

use candle_core::{Result, Tensor};

use crate::ops::cpu_data::map_rows;

/// Rows handed to one parallel task.
const MIN_ROWS_PER_TASK: usize = 16;

/// The heads of a packed projection (N, (heads + 2·kv_heads)·d): queries, keys, then values.
#[derive(Clone, Copy, Debug)]
pub struct QkHeads {
    /// Query heads.
    pub heads: usize,
    /// Key (and value) heads.
    pub kv_heads: usize,
}

/// The shapes of a call: (rows, head_dim), after checking them.
fn dims(y: &Tensor, qw: &Tensor, kw: &Tensor, h: QkHeads) -> Result<(usize, usize)> {
    let (n, width) = y.dims2()?;
    let d = qw.dims1()?;
    if kw.dims() != [d] || width != (h.heads + 2 * h.kv_heads) * d {
        candle_core::bail!(
            "rms_norm_qk: projection {:?} with q/k norm weights {:?}/{:?} for {}/{} heads",
            y.dims(),
            qw.dims(),
            kw.dims(),
            h.heads,
            h.kv_heads
        );
    }
    Ok((n, d))
}

/// The composed path: the q and k parts copied out, each normalised over its heads by `norm(x, w)` (an RMSNorm
/// over the last dimension), the three parts concatenated again (any dtype, any device).
pub fn composed(
    y: &Tensor,
    (qw, kw): (&Tensor, &Tensor),
    h: QkHeads,
    norm: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (n, d) = dims(y, qw, kw, h)?;
    let part = |start: usize, heads: usize| -> Result<Tensor> {
        y.narrow(1, start * d, heads * d)?.reshape((n, heads, d))
    };
    let q = norm(&part(0, h.heads)?, qw)?;
    let k = norm(&part(h.heads, h.kv_heads)?, kw)?;
    let v = y.narrow(1, (h.heads + h.kv_heads) * d, h.kv_heads * d)?;
    Tensor::cat(
        &[
            &q.reshape((n, h.heads * d))?,
            &k.reshape((n, h.kv_heads * d))?,
            &v,
        ],
        1,
    )
}

/// The fused pass over an f32 CPU projection `y` with f32 weights.
pub fn rms_norm_qk(
    y: &Tensor,
    (qw, kw): (&Tensor, &Tensor),
    h: QkHeads,
    eps: f32,
) -> Result<Tensor> {
    let (_, d) = dims(y, qw, kw, h)?;
    let (qw, kw) = (qw.to_vec1::<f32>()?, kw.to_vec1::<f32>()?);
    let width = (h.heads + 2 * h.kv_heads) * d;
    map_rows(y, (width, width), MIN_ROWS_PER_TASK, y.shape(), |row, o| {
        let (qk, v) = row.split_at((h.heads + h.kv_heads) * d);
        for (i, (o, x)) in o.chunks_exact_mut(d).zip(qk.chunks_exact(d)).enumerate() {
            norm_head(x, if i < h.heads { &qw } else { &kw }, eps, o);
        }
        o[qk.len()..].copy_from_slice(v);
    })
}

/// `o = x / √(mean(x²) + ε) · w` over one head.
fn norm_head(x: &[f32], w: &[f32], eps: f32, o: &mut [f32]) {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    let sum: f32 = acc.iter().sum::<f32>() + rest.iter().map(|v| v * v).sum::<f32>();
    let m = (sum / x.len() as f32 + eps).sqrt();
    for ((o, &v), &w) in o.iter_mut().zip(x).zip(w) {
        *o = v / m * w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// Against the composed reference, for head dims with and without an 8-value tail and values of very
    /// different scales per head; v stays bit for bit, and a row's result does not depend on the rows around it.
    #[test]
    fn matches_the_composed_reference() {
        let dev = Device::Cpu;
        for (heads, kv, d) in [(4usize, 2usize, 128usize), (3, 1, 20)] {
            let h = QkHeads {
                heads,
                kv_heads: kv,
            };
            let n = 37;
            let width = (heads + 2 * kv) * d;
            let scale = Tensor::rand(0.01f32, 30f32, (n, width / d, 1), &dev).unwrap();
            let y = Tensor::rand(-1f32, 1f32, (n, width / d, d), &dev)
                .unwrap()
                .broadcast_mul(&scale)
                .unwrap()
                .reshape((n, width))
                .unwrap();
            let qw = Tensor::rand(0.5f32, 2f32, d, &dev).unwrap();
            let kw = Tensor::rand(0.5f32, 2f32, d, &dev).unwrap();
            let norm = |x: &Tensor, w: &Tensor| crate::ops::reference::rms_norm_hf(x, w, 1e-6);
            let want = composed(&y, (&qw, &kw), h, norm).unwrap();
            let got = rms_norm_qk(&y, (&qw, &kw), h, 1e-6).unwrap();
            let err = ((&got - &want).unwrap().abs().unwrap() / (want.abs().unwrap() + 1e-3))
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(err < 1e-6, "heads {heads}/{kv}, d {d}: error {err}");
            let v_at = (heads + kv) * d;
            let bits = |t: &Tensor| {
                let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
            };
            let v = |t: &Tensor| t.narrow(1, v_at, kv * d).unwrap();
            assert_eq!(bits(&v(&got)), bits(&v(&y)));
            let rows = rms_norm_qk(&y.narrow(0, 5, 3).unwrap(), (&qw, &kw), h, 1e-6).unwrap();
            assert_eq!(bits(&rows), bits(&got.narrow(0, 5, 3).unwrap()));
        }
    }

    #[test]
    fn mismatched_shapes_are_an_error() {
        let dev = Device::Cpu;
        let y = Tensor::zeros((2, 5 * 8), DType::F32, &dev).unwrap();
        let w = Tensor::ones(8, DType::F32, &dev).unwrap();
        let h = QkHeads {
            heads: 4,
            kv_heads: 1,
        };
        let err = rms_norm_qk(&y, (&w, &w), h, 1e-6).unwrap_err().to_string();
        assert!(err.contains("for 4/1 heads"), "{err}");
    }
}
