//! The references of the attention ops, made of candle ops ([`composed`]'s attention, softmax in f32): what the
//! fused decode and varlen attention are compared with.

use candle_core::{Result, Tensor};

use super::composed::{self, attention, DEFAULT_MAX_SCORE_ELEMS};

/// Decode attention of one sequence, composed: K/V `(kv_heads, L, d)` (the new position included), query
/// `(heads, d)`; softmax in f32, at most `budget` scores at a time. Returns `(heads, d)`.
fn decode_one(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, budget: usize) -> Result<Tensor> {
    let (h, d) = q.dims2()?;
    let o = attention(
        &q.reshape((1, h, 1, d))?,
        &k.unsqueeze(0)?,
        &v.unsqueeze(0)?,
        None,
        scale,
        budget,
    )?;
    o.reshape((h, d))
}

/// [`crate::ops::Ops::decode_attention`] composed: `slice_set` of each new K/V at position `len`, then
/// the attention of each sequence over its buffers.
pub fn decode_attention(
    q: &Tensor,
    k_new: &Tensor,
    v_new: &Tensor,
    kv: &[super::DecodeKv<'_>],
    scale: f32,
) -> Result<Tensor> {
    decode_attention_budget(q, k_new, v_new, kv, scale, DEFAULT_MAX_SCORE_ELEMS)
}

/// [`decode_attention`] with at most `budget` attention scores at a time.
pub(crate) fn decode_attention_budget(
    q: &Tensor,
    k_new: &Tensor,
    v_new: &Tensor,
    kv: &[super::DecodeKv<'_>],
    scale: f32,
    budget: usize,
) -> Result<Tensor> {
    let mut outs = Vec::with_capacity(kv.len());
    for (i, c) in kv.iter().enumerate() {
        c.write_new(i, k_new, v_new)?;
        let (k, v) = (c.k.narrow(1, 0, c.len + 1)?, c.v.narrow(1, 0, c.len + 1)?);
        outs.push(decode_one(&q.get(i)?, &k, &v, scale as f64, budget)?);
    }
    Tensor::stack(&outs, 0)
}

/// [`crate::ops::Ops::varlen_attention`] composed: per segment, the prefix K/V concatenated with its rows, then
/// [`attention`] with a causal mask when asked ([`composed::varlen_per_segment`]).
pub fn varlen_attention(a: super::Varlen<'_>) -> Result<Tensor> {
    composed::varlen_per_segment(a, DEFAULT_MAX_SCORE_ELEMS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn decode_attention_of_one_sequence_is_softmax_weighted_values() {
        // One head, two positions: weights softmax(q·k·scale).
        let q = Tensor::from_slice(&[1.0f32, 0.0], (1, 2), &Device::Cpu).unwrap();
        let k = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0], (1, 2, 2), &Device::Cpu).unwrap();
        let v = Tensor::from_slice(&[10.0f32, 0.0, 0.0, 20.0], (1, 2, 2), &Device::Cpu).unwrap();
        let o = decode_one(&q, &k, &v, 2.0, DEFAULT_MAX_SCORE_ELEMS)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let (e0, e1) = (2.0f32.exp(), 1.0f32);
        assert!((o[0][0] - 10.0 * e0 / (e0 + e1)).abs() < 1e-4);
        assert!((o[0][1] - 20.0 * e1 / (e0 + e1)).abs() < 1e-4);
    }
}
