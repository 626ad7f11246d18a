//! The vision tower of a loaded model, whichever family it is, and what it returns.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use super::config::VisionConfig;
use super::{qwen2_5_vl, qwen3_vl};
use crate::ops::Ops;
use crate::settings::ModelFamily;

/// Intermediate vision outputs, in natural (un-permuted) patch order.
#[derive(Debug, Default, Clone)]
pub struct VisionTrace {
    /// Patch embedding (N, D).
    pub patch_embed: Option<Tensor>,
    /// The learned position embedding added to it (N, D) (Qwen3-VL).
    pub pos_embed: Option<Tensor>,
    /// Output of every block (N, D).
    pub blocks: Vec<Tensor>,
}

/// What a tower returns for a set of images, rows per image in order.
#[derive(Debug, Clone)]
pub(crate) struct VisionOutput {
    /// Merged tokens (Σ tokens, out_hidden): the features that replace the image pads.
    pub merged: Tensor,
    /// DeepStack features, one (Σ tokens, out_hidden) per tapped block, added to the image positions after the
    /// first decoder layers (Qwen3-VL; empty otherwise).
    pub deepstack: Vec<Tensor>,
}

/// A family's vision tower.
#[derive(Debug, Clone)]
pub(crate) enum VisionTower {
    /// Window attention, RMSNorm, SwiGLU (Qwen2.5-VL).
    Qwen25(qwen2_5_vl::vision::VisionModel),
    /// Learned positions, LayerNorm, DeepStack (Qwen3-VL).
    Qwen3(qwen3_vl::vision::VisionModel),
}

impl VisionTower {
    /// Load the family's tower under `vb`.
    pub fn new(family: ModelFamily, cfg: &VisionConfig, vb: VarBuilder) -> Result<Self> {
        Ok(match family {
            ModelFamily::Qwen25Vl => Self::Qwen25(qwen2_5_vl::vision::VisionModel::new(cfg, vb)?),
            ModelFamily::Qwen3Vl => Self::Qwen3(qwen3_vl::vision::VisionModel::new(cfg, vb)?),
        })
    }

    /// Encode `pixels` (N, patch_dim) of images `grids`.
    pub fn forward(
        &self,
        ops: &Ops,
        pixels: &Tensor,
        grids: &[[usize; 3]],
        trace: Option<&mut VisionTrace>,
    ) -> Result<VisionOutput> {
        match self {
            Self::Qwen25(m) => Ok(VisionOutput {
                merged: m.forward(ops, pixels, grids, trace)?,
                deepstack: Vec::new(),
            }),
            Self::Qwen3(m) => m.forward(ops, pixels, grids, trace),
        }
    }
}
