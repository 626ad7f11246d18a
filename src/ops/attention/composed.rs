//! The composed (candle-op) attention behind every attention op when no fused path covers the call: memory-bounded
//! scaled dot-product attention, its chunk planner, the additive masks it uses, and the padded batch that runs many
//! short segments (vision windows) as one call.
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
pub(crate) fn log_softmax_f32(logits: &Tensor) -> Result<Tensor> {
    let x = logits.to_dtype(DType::F32)?;
    let max = x.max_keepdim(D::Minus1)?;
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}

/// Gather plan for batched window attention: every window padded to `width` rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PaddedWindows {
    /// Number of windows.
    pub n_windows: usize,
    /// Padded window length.
    pub width: usize,
    /// Source row of each padded slot (n_windows·width); padding slots repeat the window's first row.
    pub gather: Vec<u32>,
    /// Additive key mask per slot (0 valid, `MASK_MIN` padding), n_windows·width.
    pub key_mask: Vec<f32>,
    /// Padded slot of each real row, in row order (N).
    pub scatter_back: Vec<u32>,
}

/// Build the padded-window plan from cumulative boundaries `cu` (rows), padding each window to the longest.
pub fn pad_windows(cu: &[usize], mask_min: f32) -> PaddedWindows {
    let n_windows = cu.len().saturating_sub(1);
    let width = cu.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0).max(1);
    let mut gather = Vec::with_capacity(n_windows * width);
    let mut key_mask = Vec::with_capacity(n_windows * width);
    let mut scatter_back = Vec::with_capacity(*cu.last().unwrap_or(&0));
    for (w, p) in cu.windows(2).enumerate() {
        let (start, len) = (p[0], p[1] - p[0]);
        for j in 0..width {
            let valid = j < len;
            gather.push(if valid { start + j } else { start } as u32);
            key_mask.push(if valid { 0.0 } else { mask_min });
            if valid {
                scatter_back.push((w * width + j) as u32);
            }
        }
    }
    PaddedWindows {
        n_windows,
        width,
        gather,
        key_mask,
        scatter_back,
    }
}

/// [`super::Ops::varlen_attention`] composed, at most `budget` scores at a time: many short non-causal segments
/// without prefixes (vision windows) as one padded batch ([`pad_windows`]) when padding at most doubles the
/// rows, anything else one segment at a time ([`varlen_per_segment`]).
pub fn varlen(a: super::Varlen<'_>, budget: usize) -> Result<Tensor> {
    let total: usize = a.segs.iter().map(|s| s.len).sum();
    let width = a.segs.iter().map(|s| s.len).max().unwrap_or(0);
    let contiguous = a
        .segs
        .iter()
        .scan(0, |next, s| {
            let ok = s.start == *next;
            *next = s.start + s.len;
            Some(ok)
        })
        .all(|ok| ok);
    if !a.causal
        && a.segs.len() > 1
        && contiguous
        && total == a.q.dim(0)?
        && a.segs.iter().all(|s| s.prefix.is_none() && s.len > 0)
        && width * a.segs.len() <= 2 * total
    {
        return varlen_padded(a, budget);
    }
    varlen_per_segment(a, budget)
}

/// Per segment, the prefix K/V concatenated with its rows, then [`attention`] with a causal mask when asked.
pub(crate) fn varlen_per_segment(a: super::Varlen<'_>, budget: usize) -> Result<Tensor> {
    let (q, k, v, segs, causal, scale) = (a.q, a.k, a.v, a.segs, a.causal, a.scale);
    let mut outs = Vec::with_capacity(segs.len());
    for s in segs {
        let heads_first = |t: &Tensor| t.narrow(0, s.start, s.len)?.transpose(0, 1)?.contiguous();
        let (mut ks, mut vs) = (heads_first(k)?, heads_first(v)?);
        let p = s.prefix.map_or(0, |(_, _, p)| p);
        if let Some((pk, pv, p)) = s.prefix {
            ks = Tensor::cat(&[&pk.narrow(1, 0, p)?, &ks], 1)?;
            vs = Tensor::cat(&[&pv.narrow(1, 0, p)?, &vs], 1)?;
        }
        let mask = if causal {
            Some(causal_mask(s.len, p, q.device())?.unsqueeze(0)?)
        } else {
            None
        };
        let o = attention(
            &heads_first(q)?.unsqueeze(0)?,
            &ks.unsqueeze(0)?,
            &vs.unsqueeze(0)?,
            mask.as_ref(),
            scale as f64,
            budget,
        )?;
        outs.push(o.squeeze(0)?.transpose(0, 1)?);
    }
    Tensor::cat(&outs, 0)
}

/// Non-causal segments covering q's rows in order, padded to the longest and attended as one batch with a key
/// mask; the padding rows repeat each segment's first row and are dropped from the output.
fn varlen_padded(a: super::Varlen<'_>, budget: usize) -> Result<Tensor> {
    let (n, h, d) = a.q.dims3()?;
    let dev = a.q.device();
    let mut cu = vec![0];
    cu.extend(a.segs.iter().map(|s| s.start + s.len));
    let pw = pad_windows(&cu, MASK_MIN);
    let (nw, ww) = (pw.n_windows, pw.width);
    let gather = Tensor::new(pw.gather.as_slice(), dev)?;
    let back = Tensor::new(pw.scatter_back.as_slice(), dev)?;
    let mask = Tensor::from_vec(pw.key_mask, (nw, 1, ww), dev)?;
    let windows = |t: &Tensor| -> Result<Tensor> {
        let heads = t.dim(1)?;
        t.reshape((n, heads * d))?
            .index_select(&gather, 0)?
            .reshape((nw, ww, heads, d))?
            .transpose(1, 2)?
            .contiguous()
    };
    let o = attention(
        &windows(a.q)?,
        &windows(a.k)?,
        &windows(a.v)?,
        Some(&mask),
        a.scale as f64,
        budget,
    )?;
    o.transpose(1, 2)?
        .reshape((nw * ww, h * d))?
        .index_select(&back, 0)?
        .reshape((n, h, d))
}

/// Longest length after a decode step for caches of `lens` valid positions before it, and the (B, 1, lmax)
/// additive mask hiding each sequence's positions past its new one.
pub(crate) fn length_mask(lens: &[usize], device: &candle_core::Device) -> Result<(usize, Tensor)> {
    let lmax = lens.iter().map(|l| l + 1).max().unwrap_or(1);
    let mask: Vec<f32> = lens
        .iter()
        .flat_map(|&l| (0..lmax).map(move |j| if j <= l { 0.0 } else { MASK_MIN }))
        .collect();
    Ok((lmax, Tensor::from_vec(mask, (lens.len(), 1, lmax), device)?))
}

/// Decode attention as one padded batch: row i's new K/V are written at position `len` of its buffers, then
/// every buffer is viewed (or zero-padded) to `lmax` positions and stacked; `mask` ([`length_mask`]) hides the
/// positions past each sequence's new one. Fewer launches than one attention per sequence, at the cost of one
/// K/V copy per step. Returns (B, heads, d).
pub(crate) fn decode_padded(
    q: &Tensor,
    k_new: &Tensor,
    v_new: &Tensor,
    kv: &[super::DecodeKv<'_>],
    (lmax, mask): (usize, &Tensor),
    scale: f32,
    budget: usize,
) -> Result<Tensor> {
    let (b, h, d) = q.dims3()?;
    let mut ks = Vec::with_capacity(b);
    let mut vs = Vec::with_capacity(b);
    for (i, c) in kv.iter().enumerate() {
        c.write_new(i, k_new, v_new)?;
        let padded = |buf: &Tensor| -> Result<Tensor> {
            if buf.dim(1)? >= lmax {
                return buf.narrow(1, 0, lmax);
            }
            let valid = buf.narrow(1, 0, c.len + 1)?;
            let (hk, l, dk) = valid.dims3()?;
            let pad = Tensor::zeros((hk, lmax - l, dk), valid.dtype(), valid.device())?;
            Tensor::cat(&[&valid, &pad], 1)
        };
        ks.push(padded(c.k)?);
        vs.push(padded(c.v)?);
    }
    let (kb, vb) = (Tensor::stack(&ks, 0)?, Tensor::stack(&vs, 0)?);
    let o = attention(&q.unsqueeze(2)?, &kb, &vb, Some(mask), scale as f64, budget)?;
    o.reshape((b, h, d))
}
