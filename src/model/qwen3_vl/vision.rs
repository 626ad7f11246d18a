//! The Qwen3-VL vision tower (HF `Qwen3VLVisionModel`): patch embedding with bias, the interpolated learned
//! position embedding, LayerNorm blocks with full attention per frame and 2-D rotary, the final merger and the
//! DeepStack mergers fed by intermediate blocks. Several images of different sizes go through one call;
//! attention never crosses frames, and each frame's rows are multiplied on their own (batch-invariant).

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;

use super::fused::LayerNorm;
use super::pos_embed::position_taps;
use crate::model::config::VisionConfig;
use crate::model::nn::{weight, Linear, Pass};
use crate::model::qwen2_5_vl::vision::{VisionAttention, VisionCtx};
use crate::model::rope::vision_rope_tables;
use crate::model::tower::{VisionOutput, VisionTrace};
use crate::ops::{Ops, Rows};

/// LayerNorm epsilon of the tower (fixed in the model code, not in the config).
const VISION_EPS: f64 = 1e-6;

/// `x + fc2(gelu_tanh(fc1(x)))` with biases.
#[derive(Debug, Clone)]
struct VisionMlp {
    fc1: Linear,
    fc2: Linear,
}

impl VisionMlp {
    fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (d, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            fc1: Linear::new(d, i, true, vb.pp("linear_fc1"))?,
            fc2: Linear::new(i, d, true, vb.pp("linear_fc2"))?,
        })
    }

    /// Let the ops hold `linear_fc1` and `linear_fc2` in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.fc1.hold(ops, false)?;
        self.fc2.hold(ops, false)
    }

    fn forward(&self, p: Pass<'_>, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let (y, b) = self.fc1.matmul_bias_or_zeros(p, x, "vision linear_fc1")?;
        let h = p.ops.section("vision.mlp.bias_gelu", x.device(), || {
            p.ops.bias_gelu_tanh(&y, &b)
        })?;
        self.fc2.forward_residual(p, &h, residual)
    }
}

/// One pre-norm block: `x + attn(norm1(x))`, then `+ mlp(norm2(x))`.
#[derive(Debug, Clone)]
struct VisionBlock {
    norm1: LayerNorm,
    norm2: LayerNorm,
    attn: VisionAttention,
    mlp: VisionMlp,
}

impl VisionBlock {
    fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let d = cfg.hidden_size;
        Ok(Self {
            norm1: LayerNorm::new(d, VISION_EPS, vb.pp("norm1"))?,
            norm2: LayerNorm::new(d, VISION_EPS, vb.pp("norm2"))?,
            attn: VisionAttention::new(cfg, vb.pp("attn"))?,
            mlp: VisionMlp::new(cfg, vb.pp("mlp"))?,
        })
    }

    /// Let the ops hold the block's linear layers in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.attn.hold_weights(ops)?;
        self.mlp.hold_weights(ops)
    }

    fn forward(&self, p: Pass<'_>, x: &Tensor, ctx: &VisionCtx) -> Result<Tensor> {
        let (dev, ops) = (x.device(), p.ops);
        let x = ops.section("vision.attn.full", dev, || {
            self.attn
                .forward(p, &self.norm1.forward(ops, x)?, (ctx, true), x)
        })?;
        ops.section("vision.mlp", dev, || {
            self.mlp.forward(p, &self.norm2.forward(ops, &x)?, &x)
        })
    }
}

/// A patch merger: LayerNorm (over each patch for the final merger, over the concatenated 2×2 block for the
/// DeepStack ones), `linear_fc1`, exact GELU, `linear_fc2`.
#[derive(Debug, Clone)]
struct Merger {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    unit: usize,
    /// Normalise after concatenating the block (DeepStack) instead of per patch.
    postshuffle: bool,
}

impl Merger {
    fn new(cfg: &VisionConfig, postshuffle: bool, vb: VarBuilder) -> Result<Self> {
        let wide = cfg.hidden_size * cfg.merge_unit();
        let norm_dim = if postshuffle { wide } else { cfg.hidden_size };
        Ok(Self {
            norm: LayerNorm::new(norm_dim, VISION_EPS, vb.pp("norm"))?,
            fc1: Linear::new(wide, wide, true, vb.pp("linear_fc1"))?,
            fc2: Linear::new(wide, cfg.out_hidden_size, true, vb.pp("linear_fc2"))?,
            unit: cfg.merge_unit(),
            postshuffle,
        })
    }

    /// Let the ops hold `linear_fc1` and `linear_fc2` in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.fc1.hold(ops, false)?;
        self.fc2.hold(ops, false)
    }

    /// (N, D) → (N/unit, out_hidden); `p.rows` counts merged rows.
    fn forward(&self, p: Pass<'_>, x: &Tensor) -> Result<Tensor> {
        let (n, d) = x.dims2()?;
        let x = if self.postshuffle {
            self.norm
                .forward(p.ops, &x.reshape((n / self.unit, d * self.unit))?)?
        } else {
            self.norm
                .forward(p.ops, x)?
                .reshape((n / self.unit, d * self.unit))?
        };
        let h = self.fc1.forward(p, &x)?;
        let h = p
            .ops
            .section("vision.merger.gelu", x.device(), || p.ops.gelu_erf(&h))?;
        self.fc2.forward(p, &h)
    }
}

/// The whole tower.
#[derive(Debug, Clone)]
pub(crate) struct VisionModel {
    patch_embed: Linear,
    pos_embed: Tensor,
    blocks: Vec<VisionBlock>,
    merger: Merger,
    deepstack: Vec<Merger>,
    cfg: VisionConfig,
}

impl VisionModel {
    /// Load `patch_embed`, `pos_embed`, `blocks.{i}`, `merger` and `deepstack_merger_list.{j}` under `vb`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (p, t, d) = (cfg.patch_size, cfg.temporal_patch_size, cfg.hidden_size);
        let pe = vb.pp("patch_embed.proj");
        let w = weight(&pe, (d, cfg.in_channels, t, p, p), "weight")?;
        let patch_embed = Linear::from_parts(
            w.reshape((d, cfg.patch_dim()))?,
            Some(weight(&pe, d, "bias")?),
        );
        let blocks = (0..cfg.depth)
            .map(|i| VisionBlock::new(cfg, vb.pp(format!("blocks.{i}"))))
            .collect::<Result<_>>()?;
        let deepstack = (0..cfg.deepstack_visual_indexes.len())
            .map(|j| Merger::new(cfg, true, vb.pp(format!("deepstack_merger_list.{j}"))))
            .collect::<Result<_>>()?;
        Ok(Self {
            patch_embed,
            pos_embed: weight(
                &vb.pp("pos_embed"),
                (cfg.num_position_embeddings, d),
                "weight",
            )?,
            blocks,
            merger: Merger::new(cfg, false, vb.pp("merger"))?,
            deepstack,
            cfg: cfg.clone(),
        })
    }

    /// Let the ops hold the tower's linear layers (patch embedding, blocks, mergers) in their tile layout where
    /// their products run faster so ([`Linear::hold`]): the tower's rows always come as segments.
    pub(crate) fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.patch_embed.hold(ops, false)?;
        for block in &mut self.blocks {
            block.hold_weights(ops)?;
        }
        for merger in std::iter::once(&mut self.merger).chain(&mut self.deepstack) {
            merger.hold_weights(ops)?;
        }
        Ok(())
    }

    /// Rotary tables (merge-block order, no permutation) and per-frame attention ranges of `grids`.
    fn context(&self, grids: &[[usize; 3]], device: &Device) -> Result<VisionCtx> {
        let half = self.cfg.head_dim() / 2;
        let (cos, sin) =
            vision_rope_tables(grids, self.cfg.head_dim(), self.cfg.spatial_merge_size);
        let n = cos.len() / half;
        let mut full = Vec::new();
        let mut start = 0;
        for &[t, h, w] in grids {
            for _ in 0..t {
                full.push((start, h * w));
                start += h * w;
            }
        }
        Ok(VisionCtx {
            cos: Tensor::from_vec(cos, (n, half), device)?,
            sin: Tensor::from_vec(sin, (n, half), device)?,
            image_rows: full.iter().map(|&(_, len)| len).collect(),
            win_segs: full.clone(),
            full,
        })
    }

    /// The interpolated position embedding of every patch (N, D), f32 taps summed in order, in `dtype`.
    fn position_embedding(&self, grids: &[[usize; 3]], dtype: DType) -> Result<Tensor> {
        let dev = self.pos_embed.device();
        let side = self.cfg.position_grid_side();
        let taps = position_taps(grids, side, self.cfg.spatial_merge_size);
        let table = self.pos_embed.to_dtype(DType::F32)?;
        let mut sum: Option<Tensor> = None;
        for (idx, w) in taps.index.iter().zip(&taps.weight) {
            let n = idx.len();
            let rows = table.index_select(&Tensor::new(idx.as_slice(), dev)?, 0)?;
            let term = rows.broadcast_mul(&Tensor::from_slice(w, (n, 1), dev)?)?;
            sum = Some(match sum {
                Some(s) => (s + term)?,
                None => term,
            });
        }
        sum.ok_or_else(|| candle_core::Error::Msg("no taps".into()))?
            .to_dtype(dtype)
    }

    /// Encode `pixels` (N, C·T·P·P) of images `grids` into merged tokens (N/4, out_hidden) and the DeepStack
    /// features (one (N/4, out_hidden) tensor per tapped block), per image in order.
    pub fn forward(
        &self,
        ops: &Ops,
        pixels: &Tensor,
        grids: &[[usize; 3]],
        mut trace: Option<&mut VisionTrace>,
    ) -> Result<VisionOutput> {
        let ctx = self.context(grids, pixels.device())?;
        let p = Pass {
            ops,
            rows: Rows::Segments(&ctx.image_rows),
        };
        let x = ops.section("vision.patch_embed", pixels.device(), || {
            self.patch_embed.forward(p, pixels)
        })?;
        let pos = self.position_embedding(grids, x.dtype())?;
        if let Some(tr) = trace.as_deref_mut() {
            tr.patch_embed = Some(x.clone());
            tr.pos_embed = Some(pos.clone());
        }
        let mut x = (x + pos)?;
        let unit = self.cfg.merge_unit();
        let merged: Vec<usize> = ctx.image_rows.iter().map(|len| len / unit).collect();
        let pm = Pass {
            ops,
            rows: Rows::Segments(&merged),
        };
        let mut deepstack = Vec::with_capacity(self.deepstack.len());
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.forward(p, &x, &ctx)?;
            if let Some(tr) = trace.as_deref_mut() {
                tr.blocks.push(x.clone());
            }
            if let Some(j) = self
                .cfg
                .deepstack_visual_indexes
                .iter()
                .position(|&b| b == i)
            {
                deepstack.push(ops.section("vision.deepstack_merger", x.device(), || {
                    self.deepstack[j].forward(pm, &x)
                })?);
            }
        }
        let merged = ops.section("vision.merger", pixels.device(), || {
            self.merger.forward(pm, &x)
        })?;
        Ok(VisionOutput { merged, deepstack })
    }
}
