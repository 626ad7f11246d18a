//! What every family's vision tower returns: the merged tokens (with any DeepStack features) and, on request,
//! its intermediate outputs. The families' towers build these; [`super::VlModel`] picks the tower of its family.

use candle_core::Tensor;

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
