//! The decoder with M-RoPE of both families (HF `Qwen2_5_VLTextModel` / `Qwen3VLTextModel` + `lm_head`):
//! Qwen2.5-VL's q/k/v have biases; Qwen3-VL's have none and RMS-normalise q and k per head before the rotary.
//!
//! Tokens of all sequences in a call are packed into one (N, hidden) matrix so every Linear is one GEMM;
//! attention runs per sequence (no padding, no cross-sequence mask), against that sequence's own KV cache.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use super::cache::SeqCache;
use super::config::TextConfig;
use super::nn::{weight, Linear, Pass, RmsNorm};
use crate::ops::{DecodeStep, Ops, Rows, Varlen, VarlenSeg};

/// Self-attention: q/k/v (packed into one projection at load, with or without biases), o without; optional
/// per-head q/k RMSNorm; GQA; rotary applied by the caller-provided tables.
#[derive(Debug, Clone)]
pub(crate) struct TextAttention {
    qkv_proj: Linear,
    /// Zeros: the bias the rotary pass adds where the projection has none or its product holds it already (`+0`
    /// is exact).
    qkv_zeros: Tensor,
    /// `q_norm` and `k_norm` (head_dim each), Qwen3-VL.
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    o_proj: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// Packed q (N, H, d), k and v (N, KV, d) after rotary.
pub(crate) type Qkv = (Tensor, Tensor, Tensor);

impl TextAttention {
    /// Load `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        let (d, h, kv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let bias = cfg.attention_bias;
        let qkv_proj = Linear::concat(&[
            Linear::new(d, h * hd, bias, vb.pp("q_proj"))?,
            Linear::new(d, kv * hd, bias, vb.pp("k_proj"))?,
            Linear::new(d, kv * hd, bias, vb.pp("v_proj"))?,
        ])?;
        let qkv_zeros = Tensor::zeros((h + 2 * kv) * hd, vb.dtype(), vb.device())?;
        let qk_norm = if cfg.qk_norm {
            Some((
                RmsNorm::new(hd, cfg.rms_norm_eps, vb.pp("q_norm"))?,
                RmsNorm::new(hd, cfg.rms_norm_eps, vb.pp("k_norm"))?,
            ))
        } else {
            None
        };
        Ok(Self {
            qkv_proj,
            qkv_zeros,
            qk_norm,
            o_proj: Linear::new(h * hd, d, false, vb.pp("o_proj"))?,
            heads: h,
            kv_heads: kv,
            head_dim: hd,
        })
    }

    /// Project packed rows (N, hidden) and rotate q and k with cos/sin half-tables (N, head_dim/2).
    pub(crate) fn qkv(&self, p: Pass<'_>, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Qkv> {
        // The bias goes into the product where the ops fold it in ([`Linear::matmul_bias`]), else into the rotary.
        let (mut y, bias) = self.qkv_proj.matmul_bias(p, x)?;
        if let Some(norms) = &self.qk_norm {
            y = p.ops.section("text.qk_norm", x.device(), || {
                self.norm_qk(p.ops, &y, norms)
            })?;
        }
        p.ops.section("text.qkv_rope", x.device(), || {
            p.ops.qkv_rope(crate::ops::QkvRope {
                y: &y,
                bias: bias.unwrap_or(&self.qkv_zeros),
                cos,
                sin,
                heads: self.heads,
                kv_heads: self.kv_heads,
            })
        })
    }

    /// RMS-normalise each q and k head of the packed projection (N, (H + 2·KV)·d) over its d values; v is
    /// left as is.
    fn norm_qk(&self, ops: &Ops, y: &Tensor, (qn, kn): &(RmsNorm, RmsNorm)) -> Result<Tensor> {
        let heads = crate::ops::QkHeads {
            heads: self.heads,
            kv_heads: self.kv_heads,
        };
        let (qw, eps) = qn.parts();
        ops.rms_norm_qk(y, (qw, kn.parts().0), heads, eps)
    }

    /// Attention scale 1/√head_dim.
    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }
}

/// SwiGLU MLP without biases; `gate_proj` and `up_proj` are packed into one projection at load.
#[derive(Debug, Clone)]
pub(crate) struct TextMlp {
    gate_up: Linear,
    down_proj: Linear,
}

impl TextMlp {
    /// Load `gate_proj`, `up_proj`, `down_proj`.
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        let (d, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_up: Linear::concat(&[
                Linear::new(d, i, false, vb.pp("gate_proj"))?,
                Linear::new(d, i, false, vb.pp("up_proj"))?,
            ])?,
            down_proj: Linear::new(i, d, false, vb.pp("down_proj"))?,
        })
    }

    /// `residual + down(silu(gate(x)) · up(x))`.
    pub fn forward(&self, p: Pass<'_>, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let h = match self.gate_up.matmul_swiglu(p, x)? {
            Some(h) => h,
            None => p.ops.swiglu_packed(&self.gate_up.matmul(p, x)?, None)?,
        };
        self.down_proj.forward_residual(p, &h, residual)
    }
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    /// Self-attention.
    pub self_attn: TextAttention,
    mlp: TextMlp,
}

impl DecoderLayer {
    /// Load one layer.
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            input_layernorm: RmsNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("input_layernorm"),
            )?,
            post_attention_layernorm: RmsNorm::new(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
            self_attn: TextAttention::new(cfg, vb.pp("self_attn"))?,
            mlp: TextMlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    /// `x + o_proj(attend(qkv(norm(x))))`, then `+ mlp(norm(x))`; `attend` maps the packed q/k/v to the packed
    /// attention output (N, H·d).
    pub fn forward(
        &self,
        p: Pass<'_>,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        attend: impl FnOnce(&TextAttention, Qkv) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let (dev, ops) = (x.device(), p.ops);
        let qkv = ops.section("text.norm_qkv_rope", dev, || {
            self.self_attn
                .qkv(p, &self.input_layernorm.forward(ops, x)?, cos, sin)
        })?;
        let o = ops.section("text.attend", dev, || attend(&self.self_attn, qkv))?;
        let x = ops.section("text.o_proj", dev, || {
            self.self_attn.o_proj.forward_residual(p, &o, x)
        })?;
        ops.section("text.mlp", dev, || {
            self.mlp
                .forward(p, &self.post_attention_layernorm.forward(ops, &x)?, &x)
        })
    }
}

/// One sequence's slice of a packed prefill.
#[derive(Debug)]
pub(crate) struct PackedSeq<'a> {
    /// First packed row.
    pub start: usize,
    /// Number of new rows.
    pub len: usize,
    /// Cached prefix this sequence continues, if any.
    pub prefix: Option<&'a SeqCache>,
}

/// Prefill attention of all sequences in one [`Ops::varlen_attention`] call (causal, each sequence over its
/// prefix and its own rows); pushes each sequence's full K and V (KV, prefix+len, d) to `kv_out`.
pub(crate) fn prefill_attend(
    ops: &Ops,
    attn: &TextAttention,
    (q, k, v): Qkv,
    (layer, seqs): (usize, &[PackedSeq<'_>]),
    kv_out: &mut Vec<(Tensor, Tensor)>,
) -> Result<Tensor> {
    let n = q.dim(0)?;
    let mut prefixes = Vec::with_capacity(seqs.len());
    for s in seqs {
        let heads_first = |t: &Tensor| t.narrow(0, s.start, s.len)?.transpose(0, 1)?.contiguous();
        let (mut ks, mut vs) = (heads_first(&k)?, heads_first(&v)?);
        let prefix = s.prefix.map(|p| p.kv(layer)).transpose()?;
        if let Some((pk, pv)) = &prefix {
            ks = Tensor::cat(&[pk, &ks], 1)?;
            vs = Tensor::cat(&[pv, &vs], 1)?;
        }
        prefixes.push(prefix);
        kv_out.push((ks, vs));
    }
    let segs: Vec<VarlenSeg<'_>> = seqs
        .iter()
        .zip(&prefixes)
        .map(|(s, p)| VarlenSeg {
            start: s.start,
            len: s.len,
            prefix: p.as_ref().map(|(pk, pv)| (pk, pv, pk.dim(1).unwrap_or(0))),
        })
        .collect();
    let o = ops.varlen_attention(Varlen {
        q: &q,
        k: &k,
        v: &v,
        segs: &segs,
        causal: true,
        scale: attn.scale() as f32,
    })?;
    o.reshape((n, attn.heads * attn.head_dim))
}

/// Decode attention of one layer on the step's implementation ([`DecodeStep`]): row i of the packed q/k/v
/// belongs to sequence i, whose new K/V are written at its cache's end and attended together with the cached
/// positions.
pub(crate) fn decode_attend(
    attn: &TextAttention,
    (q, k, v): Qkv,
    layer: usize,
    step: &DecodeStep<'_>,
) -> Result<Tensor> {
    let b = q.dim(0)?;
    let o = step.attend(layer, &q, &k, &v, attn.scale() as f32)?;
    o.reshape((b, attn.heads * attn.head_dim))
}

/// Embedding, decoder stack, final norm and `lm_head`.
#[derive(Debug, Clone)]
pub(crate) struct TextModel {
    /// Token embedding (vocab, hidden).
    pub embed_tokens: Tensor,
    /// Decoder layers.
    pub layers: Vec<DecoderLayer>,
    /// Final RMSNorm.
    pub norm: RmsNorm,
    /// Output projection (the embedding when tied).
    pub lm_head: Linear,
}

impl TextModel {
    /// Load `embed_tokens`, `layers.{i}`, `norm` under `vb`; `lm_head` is the given separate weight or the
    /// embedding when `None`.
    pub fn new(cfg: &TextConfig, vb: VarBuilder, lm_head: Option<Tensor>) -> Result<Self> {
        let embed = weight(
            &vb.pp("embed_tokens"),
            (cfg.vocab_size, cfg.hidden_size),
            "weight",
        )?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::new(cfg, vb.pp(format!("layers.{i}"))))
            .collect::<Result<_>>()?;
        Ok(Self {
            lm_head: Linear::from_weight(lm_head.unwrap_or_else(|| embed.clone())),
            embed_tokens: embed,
            layers,
            norm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("norm"))?,
        })
    }

    /// Embed token ids (u32 tensor) → (N, hidden).
    pub(crate) fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        self.embed_tokens.index_select(ids, 0)
    }

    /// Final norm and `lm_head` on selected rows (R, hidden), each its own sequence → (R, vocab) f32 logits.
    pub fn logits(&self, ops: &Ops, rows: &Tensor) -> Result<Tensor> {
        let p = Pass {
            ops,
            rows: Rows::Independent,
        };
        self.lm_head
            .forward(p, &self.norm.forward(ops, rows)?)?
            .to_dtype(candle_core::DType::F32)
    }
}
