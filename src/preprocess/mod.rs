//! Pixels and tokens in, plain vectors out: smart-resize, bicubic resampling, CLIP normalisation and the
//! Qwen2-VL patch order (`image`), and prompt token ids with expanded image placeholders. No candle here.
//!
//! The types below are the contract between preprocessing and the model (`crate::model`).
//!
//! Parity with transformers (see the integration tests `tests/it/preprocess_*.rs`): without a resize the patches are
//! bit-identical to either backend; with a resize they are bit-identical to the backend selected by
//! [`ProcessorBackend`] (torchvision by default, as transformers uses), and the two backends differ from each
//! other by at most one uint8 level (≤ 0.0146 in normalised units, the largest step `1/(255·min std)`).

mod config;
mod image;
mod resample;
mod smart_resize;

pub use self::config::{
    ImageProcessorConfig, ProcessorBackend, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS,
    OPENAI_CLIP_MEAN, OPENAI_CLIP_STD,
};
pub use self::image::{image_dimensions, load_and_prepare, load_rgb8, prepare_image, prepare_rgb8};
pub(crate) use self::resample::resize_rgb8;
pub use self::smart_resize::{smart_resize, MAX_ASPECT_RATIO};

/// Errors of image preprocessing.
#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    /// `preprocessor_config.json` could not be read, parsed, or holds unusable values.
    #[error("image processor config {path}: {reason}")]
    Config {
        /// The file (or `<string>` / `<in memory>`).
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// A picture file could not be opened or decoded.
    #[error("cannot decode image {path}: {reason}")]
    Decode {
        /// The file.
        path: String,
        /// The decoder's message.
        reason: String,
    },
    /// A picture's size cannot be smart-resized (zero side, aspect ratio over 200).
    #[error("cannot resize a {height}x{width} image: {reason}")]
    BadSize {
        /// Height in pixels.
        height: usize,
        /// Width in pixels.
        width: usize,
        /// Why.
        reason: String,
    },
}

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
    pub(crate) fn n_patches(&self) -> usize {
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
