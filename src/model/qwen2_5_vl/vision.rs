//! The Qwen2.5-VL vision tower (HF `Qwen2_5_VisionTransformerPretrainedModel`): patch embed, window/full
//! attention blocks with 2-D rotary, and the patch merger. Several images of different sizes go through one
//! call; attention never crosses images.

use candle_core::{Device, Result, Tensor};
use candle_nn::VarBuilder;

use super::window::window_index;
use crate::model::config::VisionConfig;
use crate::model::nn::{weight, Linear, Pass, RmsNorm};
use crate::model::rope::vision_rope_tables;
use crate::model::tower::VisionTrace;
use crate::ops::{Ops, Rows, Varlen, VarlenSeg};

const VISION_EPS: f64 = 1e-6;

/// Conv3d patch embedding (no bias) as one matmul on the 1176-value patch rows.
#[derive(Debug, Clone)]
pub(crate) struct PatchEmbed {
    w: Tensor,
}

impl PatchEmbed {
    /// Load `proj.weight` (D, C, T, P, P) and flatten it to (D, C·T·P·P).
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (p, t) = (cfg.patch_size, cfg.temporal_patch_size);
        let w = weight(
            &vb.pp("proj"),
            (cfg.hidden_size, cfg.in_channels, t, p, p),
            "weight",
        )?;
        Ok(Self {
            w: w.reshape((cfg.hidden_size, cfg.patch_dim()))?,
        })
    }
}

impl PatchEmbed {
    /// Embed patch rows (N, C·T·P·P) → (N, D).
    pub fn forward(&self, p: Pass<'_>, x: &Tensor) -> Result<Tensor> {
        p.ops.matmul_nt(x, &self.w, p.rows)
    }
}

/// Per-call layout shared by every block: rotary tables and the two attention groupings.
#[derive(Debug)]
pub(crate) struct VisionCtx {
    /// Rotary cosine half-table (N, head_dim/2), f32, rows in the blocks' order.
    pub cos: Tensor,
    /// Rotary sine half-table.
    pub sin: Tensor,
    /// Per image/frame (start, len) row ranges, in permuted order (for full-attention blocks).
    pub full: Vec<(usize, usize)>,
    /// Per window (start, len) row ranges in permuted order (the window-attention blocks).
    pub win_segs: Vec<(usize, usize)>,
    /// Rows per image frame, in order: the GEMMs' segments of the blocks.
    pub image_rows: Vec<usize>,
}

/// Multi-head self-attention with fused `qkv` and `proj` (both with bias).
#[derive(Debug, Clone)]
pub(crate) struct VisionAttention {
    qkv: Linear,
    proj: Linear,
    heads: usize,
}

impl VisionAttention {
    /// Load `qkv` and `proj`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let d = cfg.hidden_size;
        Ok(Self {
            qkv: Linear::new(d, 3 * d, true, vb.pp("qkv"))?,
            proj: Linear::new(d, d, true, vb.pp("proj"))?,
            heads: cfg.num_heads,
        })
    }

    /// Let the ops hold `qkv` and `proj` in their tile layout ([`Linear::hold`]).
    pub(crate) fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.qkv.hold(ops, false)?;
        self.proj.hold(ops, false)
    }

    /// `residual + proj(attention over the (N, D) rows x)`; `full` selects per-image attention instead of windows.
    pub fn forward(
        &self,
        p: Pass<'_>,
        x: &Tensor,
        (ctx, full): (&VisionCtx, bool),
        residual: &Tensor,
    ) -> Result<Tensor> {
        let (n, dm) = x.dims2()?;
        let (h, d) = (self.heads, dm / self.heads);
        let ops = p.ops;
        // Bias, split and the f32 rotary (transformers' apply_rotary_pos_emb_vision) in one pass.
        let (y, b) = self.qkv.matmul_bias_or_zeros(p, x, "vision qkv")?;
        let (q, k, v) = ops.section("vision.qkv_rope", x.device(), || {
            ops.qkv_rope(crate::ops::QkvRope {
                y: &y,
                bias: &b,
                cos: &ctx.cos,
                sin: &ctx.sin,
                heads: h,
                kv_heads: h,
            })
        })?;
        let (name, ranges) = if full {
            ("vision.attn_core.full", &ctx.full)
        } else {
            ("vision.attn_core.window", &ctx.win_segs)
        };
        let segs: Vec<VarlenSeg<'_>> = ranges
            .iter()
            .map(|&(start, len)| VarlenSeg {
                start,
                len,
                prefix: None,
            })
            .collect();
        let out = ops.section(name, x.device(), || {
            ops.varlen_attention(Varlen {
                q: &q,
                k: &k,
                v: &v,
                segs: &segs,
                causal: false,
                scale: (1.0 / (d as f64).sqrt()) as f32,
            })?
            .reshape((n, dm))
        })?;
        self.proj.forward_residual(p, &out, residual)
    }
}

/// SwiGLU MLP with biases: `down(silu(gate(x)) · up(x))`.
#[derive(Debug, Clone)]
pub(crate) struct VisionMlp {
    /// `gate_proj` and `up_proj` packed into one projection at load.
    gate_up: Linear,
    down_proj: Linear,
}

impl VisionMlp {
    /// Load `gate_proj`, `up_proj`, `down_proj`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let (d, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_up: Linear::concat(&[
                Linear::new(d, i, true, vb.pp("gate_proj"))?,
                Linear::new(d, i, true, vb.pp("up_proj"))?,
            ])?,
            down_proj: Linear::new(i, d, true, vb.pp("down_proj"))?,
        })
    }

    /// Let the ops hold the gate-up pair and `down_proj` in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.gate_up.hold(ops, true)?;
        self.down_proj.hold(ops, false)
    }
}

impl VisionMlp {
    /// `residual + down(silu(gate(x)) · up(x))`; the biases of gate and up are folded into the SwiGLU, the one of
    /// down into the residual add.
    pub fn forward(&self, p: Pass<'_>, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let h = match self.gate_up.matmul_swiglu(p, x)? {
            Some(h) => h,
            None => {
                let (gu, b) = self.gate_up.matmul_bias(p, x)?;
                p.ops.section("vision.mlp.swiglu", x.device(), || {
                    p.ops.swiglu_packed(&gu, b)
                })?
            }
        };
        self.down_proj.forward_residual(p, &h, residual)
    }
}

/// One pre-norm transformer block.
#[derive(Debug, Clone)]
pub(crate) struct VisionBlock {
    norm1: RmsNorm,
    norm2: RmsNorm,
    attn: VisionAttention,
    mlp: VisionMlp,
    full: bool,
}

impl VisionBlock {
    /// Load block `i` (full attention when listed in `fullatt_block_indexes`).
    pub fn new(cfg: &VisionConfig, i: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm1: RmsNorm::new(cfg.hidden_size, VISION_EPS, vb.pp("norm1"))?,
            norm2: RmsNorm::new(cfg.hidden_size, VISION_EPS, vb.pp("norm2"))?,
            attn: VisionAttention::new(cfg, vb.pp("attn"))?,
            mlp: VisionMlp::new(cfg, vb.pp("mlp"))?,
            full: cfg.fullatt_block_indexes.contains(&i),
        })
    }

    /// Let the ops hold the block's linear layers in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.attn.hold_weights(ops)?;
        self.mlp.hold_weights(ops)
    }

    /// `x + attn(norm1(x))`, then `+ mlp(norm2(x))`.
    pub fn forward(&self, p: Pass<'_>, x: &Tensor, ctx: &VisionCtx) -> Result<Tensor> {
        let (dev, ops) = (x.device(), p.ops);
        let name = if self.full {
            "vision.attn.full"
        } else {
            "vision.attn.window"
        };
        let x = ops.section(name, dev, || {
            self.attn
                .forward(p, &self.norm1.forward(ops, x)?, (ctx, self.full), x)
        })?;
        ops.section("vision.mlp", dev, || {
            self.mlp.forward(p, &self.norm2.forward(ops, &x)?, &x)
        })
    }
}

/// `ln_q` RMSNorm, concatenation of each 2×2 block, `mlp.0` → exact GELU → `mlp.2`.
#[derive(Debug, Clone)]
pub(crate) struct PatchMerger {
    ln_q: RmsNorm,
    fc1: Linear,
    fc2: Linear,
    unit: usize,
}

impl PatchMerger {
    /// Load `ln_q`, `mlp.0`, `mlp.2`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let wide = cfg.hidden_size * cfg.merge_unit();
        Ok(Self {
            ln_q: RmsNorm::new(cfg.hidden_size, VISION_EPS, vb.pp("ln_q"))?,
            fc1: Linear::new(wide, wide, true, vb.pp("mlp.0"))?,
            fc2: Linear::new(wide, cfg.out_hidden_size, true, vb.pp("mlp.2"))?,
            unit: cfg.merge_unit(),
        })
    }

    /// Let the ops hold `mlp.0` and `mlp.2` in their tile layout ([`Linear::hold`]).
    fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        self.fc1.hold(ops, false)?;
        self.fc2.hold(ops, false)
    }
}

impl PatchMerger {
    /// Merge every `unit` consecutive rows (N, D) → (N/unit, out_hidden); `p.rows` counts merged rows.
    pub fn forward(&self, p: Pass<'_>, x: &Tensor) -> Result<Tensor> {
        let (n, d) = x.dims2()?;
        let x = self
            .ln_q
            .forward(p.ops, x)?
            .reshape((n / self.unit, d * self.unit))?;
        self.fc2.forward(p, &self.fc1.forward(p, &x)?.gelu_erf()?)
    }
}

/// The whole tower.
#[derive(Debug, Clone)]
pub(crate) struct VisionModel {
    patch_embed: PatchEmbed,
    blocks: Vec<VisionBlock>,
    merger: PatchMerger,
    cfg: VisionConfig,
}

impl VisionModel {
    /// Load `patch_embed`, `blocks.{i}` and `merger` under `vb`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        let blocks = (0..cfg.depth)
            .map(|i| VisionBlock::new(cfg, i, vb.pp(format!("blocks.{i}"))))
            .collect::<Result<_>>()?;
        Ok(Self {
            patch_embed: PatchEmbed::new(cfg, vb.pp("patch_embed"))?,
            blocks,
            merger: PatchMerger::new(cfg, vb.pp("merger"))?,
            cfg: cfg.clone(),
        })
    }

    /// Let the ops hold the blocks' and the merger's linear layers in their tile layout where their products run
    /// faster so ([`Linear::hold`]): the tower's rows always come as segments, never decoded one at a time.
    pub(crate) fn hold_weights(&mut self, ops: &Ops) -> Result<()> {
        for block in &mut self.blocks {
            block.hold_weights(ops)?;
        }
        self.merger.hold_weights(ops)
    }

    /// Build the per-call layout for `grids`: permuted rotary tables and window/full groupings.
    pub(crate) fn context(
        &self,
        grids: &[[usize; 3]],
        device: &Device,
    ) -> Result<(VisionCtx, Vec<u32>)> {
        let (m, unit) = (self.cfg.spatial_merge_size, self.cfg.merge_unit());
        let wi = window_index(grids, m, self.cfg.merger_window());
        let half = self.cfg.head_dim() / 2;
        let (cos, sin) = vision_rope_tables(grids, self.cfg.head_dim(), m);
        let permute = |t: &[f32]| -> Vec<f32> {
            let row = unit * half;
            wi.window_index
                .iter()
                .flat_map(|&j| t[j * row..(j + 1) * row].iter().copied())
                .collect()
        };
        let n = wi.window_index.len() * unit;
        let cos = Tensor::from_vec(permute(&cos), (n, half), device)?;
        let sin = Tensor::from_vec(permute(&sin), (n, half), device)?;
        let full: Vec<(usize, usize)> = wi
            .cu_seqlens
            .windows(2)
            .map(|p| (p[0], p[1] - p[0]))
            .collect();
        let image_rows = full.iter().map(|&(_, len)| len).collect();
        let win_segs = wi
            .cu_window_seqlens
            .windows(2)
            .map(|p| (p[0], p[1] - p[0]))
            .collect();
        let ctx = VisionCtx {
            cos,
            sin,
            full,
            win_segs,
            image_rows,
        };
        let perm: Vec<u32> = wi.window_index.iter().map(|&j| j as u32).collect();
        Ok((ctx, perm))
    }

    /// Encode `pixels` (N, 1176) of images `grids` into merged tokens (N/4, out_hidden), per image in order.
    pub fn forward(
        &self,
        ops: &Ops,
        pixels: &Tensor,
        grids: &[[usize; 3]],
        mut trace: Option<&mut VisionTrace>,
    ) -> Result<Tensor> {
        let (n, _) = pixels.dims2()?;
        let unit = self.cfg.merge_unit();
        let (ctx, perm) = self.context(grids, pixels.device())?;
        let rev: Vec<u32> = {
            let mut r = vec![0u32; perm.len()];
            perm.iter()
                .enumerate()
                .for_each(|(k, &j)| r[j as usize] = k as u32);
            r
        };
        let perm = Tensor::new(perm.as_slice(), pixels.device())?;
        let rev = Tensor::new(rev.as_slice(), pixels.device())?;
        // Each image's patches are multiplied on their own (the window order keeps them together), so its
        // features do not depend on the other images of the call.
        let p = Pass {
            ops,
            rows: Rows::Segments(&ctx.image_rows),
        };
        let x = ops.section("vision.patch_embed", pixels.device(), || {
            self.patch_embed.forward(p, pixels)
        })?;
        let d = x.dim(1)?;
        let groups = |t: &Tensor, idx: &Tensor| {
            t.reshape((n / unit, unit * d))?
                .index_select(idx, 0)?
                .reshape((n, d))
        };
        if let Some(tr) = trace.as_deref_mut() {
            tr.patch_embed = Some(x.clone());
        }
        let mut x = groups(&x, &perm)?;
        for block in &self.blocks {
            x = block.forward(p, &x, &ctx)?;
            if let Some(tr) = trace.as_deref_mut() {
                tr.blocks.push(groups(&x, &rev)?);
            }
        }
        let merged: Vec<usize> = ctx.image_rows.iter().map(|len| len / unit).collect();
        let p = Pass {
            ops,
            rows: Rows::Segments(&merged),
        };
        ops.section("vision.merger", pixels.device(), || {
            self.merger.forward(p, &x)?.index_select(&rev, 0)
        })
    }
}
