//! Memory-bounded scaled dot-product attention shared by the vision tower and the language model.
//!
//! Scores are computed in the activation dtype, the additive mask is applied and softmax runs in f32 (HF eager
//! order), then the probabilities are cast back for the product with V. Work is split into chunks (over the
//! batch, then heads, then query rows) so that no more than `max_score_elems` scores exist at once: a 13,000-patch
//! screenshot's full-attention layer never materialises the whole `heads × N × N` matrix.

use candle_core::{DType, Result, Tensor, D};

/// Default cap on simultaneously materialised attention scores (elements): 2²⁶ f32 = 256 MiB.
pub const DEFAULT_MAX_SCORE_ELEMS: usize = 1 << 26;

/// Finite "minus infinity" for additive masks (never produces NaN, even for fully masked rows).
pub const MASK_MIN: f32 = -1.0e30;

/// How one attention call is split: sizes of the batch, head and query-row chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Batch items per chunk.
    pub batch: usize,
    /// Query heads per chunk (a multiple of the GQA group size, or all heads).
    pub heads: usize,
    /// Query rows per chunk.
    pub rows: usize,
}

impl ChunkPlan {
    /// Scores alive at once for this plan with `l` keys.
    pub fn score_elems(&self, l: usize) -> usize {
        self.batch * self.heads * self.rows * l
    }
}

/// Choose chunk sizes for `b` batch items, `hq` query heads (in GQA groups of `group`), `n` queries and `l`
/// keys so that one chunk holds at most `budget` scores (or the smallest possible chunk: one group, one row).
pub fn plan_chunks(
    b: usize,
    hq: usize,
    group: usize,
    n: usize,
    l: usize,
    budget: usize,
) -> ChunkPlan {
    let (b, n, l, group) = (b.max(1), n.max(1), l.max(1), group.max(1));
    let per_item = hq * n * l;
    if b * per_item <= budget {
        return ChunkPlan {
            batch: b,
            heads: hq,
            rows: n,
        };
    }
    if per_item <= budget {
        return ChunkPlan {
            batch: budget / per_item,
            heads: hq,
            rows: n,
        };
    }
    // One item at a time: keep as many heads as allow blocks of at least 64 rows, then block the rows.
    let min_rows = n.min(64);
    let heads = ((budget / (min_rows * l)) / group * group).clamp(group, hq);
    let rows = (budget / (heads * l)).clamp(1, n);
    ChunkPlan {
        batch: 1,
        heads,
        rows,
    }
}

/// Attention of `q` (B, Hq, n, d) over `k`, `v` (B, Hkv, L, d); `mask` is an additive f32 mask of shape
/// (B or 1, n, L) or None. `Hq` must be a multiple of `Hkv` (GQA: kv head j serves query heads j·g..(j+1)·g).
/// Returns (B, Hq, n, d) in q's dtype.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    budget: usize,
) -> Result<Tensor> {
    let (b, hq, n, _d) = q.dims4()?;
    let (_, hkv, l, _) = k.dims4()?;
    let group = hq / hkv;
    let plan = plan_chunks(b, hq, group, n, l, budget);
    if plan.batch >= b && plan.heads >= hq && plan.rows >= n {
        return attend_chunk(q, k, v, mask, scale, group);
    }
    let mut outs_b = Vec::new();
    for b0 in (0..b).step_by(plan.batch) {
        let nb = plan.batch.min(b - b0);
        let mut outs_h = Vec::new();
        for h0 in (0..hq).step_by(plan.heads) {
            let nh = plan.heads.min(hq - h0);
            let (qb, kb, vb) = (
                q.narrow(0, b0, nb)?.narrow(1, h0, nh)?,
                k.narrow(0, b0, nb)?.narrow(1, h0 / group, nh / group)?,
                v.narrow(0, b0, nb)?.narrow(1, h0 / group, nh / group)?,
            );
            let mb = match mask {
                Some(m) if m.dim(0)? == b && b > 1 => Some(m.narrow(0, b0, nb)?),
                Some(m) => Some(m.clone()),
                None => None,
            };
            let mut outs_r = Vec::new();
            for r0 in (0..n).step_by(plan.rows) {
                let nr = plan.rows.min(n - r0);
                let qr = qb.narrow(2, r0, nr)?.contiguous()?;
                let mr = match &mb {
                    Some(m) if m.dim(1)? == n && n > 1 => Some(m.narrow(1, r0, nr)?),
                    other => other.clone(),
                };
                outs_r.push(attend_chunk(&qr, &kb, &vb, mr.as_ref(), scale, group)?);
            }
            outs_h.push(Tensor::cat(&outs_r, 2)?);
        }
        outs_b.push(Tensor::cat(&outs_h, 1)?);
    }
    Tensor::cat(&outs_b, 0)
}

/// One unchunked attention: GQA by viewing q as (B, Hkv, g·n, d), so K/V are never repeated.
fn attend_chunk(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    g: usize,
) -> Result<Tensor> {
    let (b, hq, n, d) = q.dims4()?;
    let (_, hkv, l, _) = k.dims4()?;
    let dtype = q.dtype();
    let q = q.contiguous()?.reshape((b, hkv, g * n, d))?;
    let scores = (q.matmul(&k.transpose(2, 3)?)? * scale)?;
    let mut scores = scores.to_dtype(DType::F32)?.reshape((b, hkv, g, n, l))?;
    if let Some(m) = mask {
        let mb = m.dim(0)?;
        let mn = m.dim(1)?;
        scores = scores.broadcast_add(&m.reshape((mb, 1, 1, mn, l))?)?;
    }
    let probs =
        candle_nn::ops::softmax_last_dim(&scores.reshape((b, hkv, g * n, l))?)?.to_dtype(dtype)?;
    probs.matmul(v)?.reshape((b, hq, n, d))
}

/// Additive causal mask (n, L) for `n` queries at absolute positions `offset..offset+n` over `L = offset + n`
/// keys: key j is visible to query i when `j <= offset + i`.
pub fn causal_mask(n: usize, offset: usize, device: &candle_core::Device) -> Result<Tensor> {
    let l = offset + n;
    let rows = Tensor::arange(offset as u32, l as u32, device)?.reshape((n, 1))?;
    let cols = Tensor::arange(0u32, l as u32, device)?.reshape((1, l))?;
    let visible = cols.broadcast_le(&rows)?;
    let zeros = Tensor::zeros((n, l), DType::F32, device)?;
    let neg = Tensor::full(MASK_MIN, (n, l), device)?;
    visible.where_cond(&zeros, &neg)
}

/// Softmax-free helper: log-softmax in f32 over the last dimension.
pub fn log_softmax_f32(logits: &Tensor) -> Result<Tensor> {
    let x = logits.to_dtype(DType::F32)?;
    let max = x.max_keepdim(D::Minus1)?;
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}
