//! Pixels and tokens in, plain vectors out: smart-resize, bicubic resampling, CLIP normalisation and the
//! Qwen2-VL patch order (`image`), and prompt token ids with expanded image placeholders. No candle here.
//!
//! The types below are the contract between preprocessing and the model (`crate::model`).

/// One image ready for the vision tower, in transformers' `Qwen2VLImageProcessor` layout.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedImage {
    /// Patch rows, `n_patches × 1176` values (C=3, T=2, 14, 14), row-major, in merge-block order.
    pub patches: Vec<f32>,
    /// `(grid_t, grid_h, grid_w)` in patches; `n_patches = t·h·w`.
    pub grid_thw: [usize; 3],
    /// Size of the picture the model saw after smart-resize, `(width, height)` in pixels.
    pub resized_wh: [u32; 2],
    /// Size of the original picture, `(width, height)`.
    pub original_wh: [u32; 2],
}

impl PreparedImage {
    /// Number of patches (rows of `patches`).
    pub fn n_patches(&self) -> usize {
        self.grid_thw.iter().product()
    }
    /// Number of `<|image_pad|>` tokens (merged 2×2 patches) this image occupies in the prompt.
    pub fn n_tokens(&self) -> usize {
        self.n_patches() / 4
    }
}

/// A whole prompt for the model: token ids with every image's `<|image_pad|>` run already expanded, and the
/// images in order of appearance.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInput {
    /// Prompt token ids.
    pub input_ids: Vec<u32>,
    /// The images whose pad runs appear in `input_ids`, in order.
    pub images: Vec<PreparedImage>,
}
