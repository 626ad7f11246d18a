//! `ImageProcessorConfig`: the parameters of transformers' `Qwen2VLImageProcessor`, read from a model folder's
//! `preprocessor_config.json` in either layout (Hub `min_pixels`/`max_pixels`, or transformers-5
//! `size: {shortest_edge, longest_edge}`), with the class defaults for anything the file omits.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::PreprocessError;

/// `OPENAI_CLIP_MEAN` (transformers `utils/constants.py`), the class default for `image_mean`. The digits are
/// transformers' own, kept verbatim so the source can be compared with it.
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
/// `OPENAI_CLIP_STD`, the class default for `image_std` (transformers' digits, verbatim).
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];
/// Class default `min_pixels` (56·56 = 4 tokens).
pub const DEFAULT_MIN_PIXELS: u64 = 56 * 56;
/// Class default `max_pixels` (28·28·1280 = 1280 tokens). The Hub files use 12,845,056 instead.
pub const DEFAULT_MAX_PIXELS: u64 = 28 * 28 * 1280;

/// Which transformers image-processor backend to reproduce bit for bit: it decides the resampler used when an
/// image must be resized and the float32 arithmetic of rescale + normalise.
///
/// Both resamplers are bicubic (a = −0.5) with antialiasing; without a resize the two differ only by float
/// rounding (≤ 2.4e-7 after normalisation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessorBackend {
    /// torchvision `F.resize(BICUBIC, antialias=True)` on the uint8 tensor (torch's int16 fixed-point kernel),
    /// then a fused rescale+normalise `(x − 255·mean) / (255·std)` in float32: transformers' default
    /// (`Qwen2VLImageProcessor` in v5, `Qwen2VLImageProcessorFast` in 4.5x).
    #[default]
    Torchvision,
    /// PIL `Image.resize(BICUBIC)` (fixed-point `ImagingResample`), then `x/255` in float64 cast to float32 and
    /// `(x − mean) / std` in float32: transformers' PIL backend (`Qwen2VLImageProcessorPil` in v5, the slow
    /// `Qwen2VLImageProcessor` in 4.x).
    Pil,
}

/// Parameters of the Qwen2-VL image processor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageProcessorConfig {
    /// Lower bound on `h·w` after smart-resize (`size.shortest_edge` in transformers 5).
    pub min_pixels: u64,
    /// Upper bound on `h·w` after smart-resize (`size.longest_edge` in transformers 5).
    pub max_pixels: u64,
    /// Side of one vision patch in pixels (14).
    pub patch_size: usize,
    /// Frames per temporal patch (2); a still image is repeated to fill it.
    pub temporal_patch_size: usize,
    /// Side of the square of patches merged into one LM token (2).
    pub merge_size: usize,
    /// Per-channel mean subtracted after rescaling.
    pub image_mean: [f32; 3],
    /// Per-channel std divided by after subtracting the mean.
    pub image_std: [f32; 3],
    /// Factor from uint8 to `[0, 1]` (1/255).
    pub rescale_factor: f64,
    /// Which transformers backend the resize and float arithmetic reproduce (not read from the JSON file).
    pub backend: ProcessorBackend,
}

impl Default for ImageProcessorConfig {
    /// transformers' class defaults (not the Hub file's: those have `max_pixels` 12,845,056).
    fn default() -> Self {
        Self {
            min_pixels: DEFAULT_MIN_PIXELS,
            max_pixels: DEFAULT_MAX_PIXELS,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            image_mean: OPENAI_CLIP_MEAN,
            image_std: OPENAI_CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            backend: ProcessorBackend::default(),
        }
    }
}

/// The file as written by either transformers generation; every key optional.
#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
    size: Option<RawSize>,
    patch_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    merge_size: Option<usize>,
    image_mean: Option<[f32; 3]>,
    image_std: Option<[f32; 3]>,
    rescale_factor: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
struct RawSize {
    shortest_edge: Option<u64>,
    longest_edge: Option<u64>,
}

impl ImageProcessorConfig {
    /// Reads `preprocessor_config.json` from a file path.
    pub(crate) fn from_file(path: &Path) -> Result<Self, PreprocessError> {
        let err = |reason: String| PreprocessError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let raw: RawConfig = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        Self::from_raw(raw).map_err(err)
    }

    /// Reads `<dir>/preprocessor_config.json`.
    pub fn from_model_dir(dir: &Path) -> Result<Self, PreprocessError> {
        Self::from_file(&dir.join("preprocessor_config.json"))
    }

    /// Returns a copy with other pixel bounds (e.g. a throughput cap such as `max_pixels = 1280·28·28`).
    pub fn with_pixel_bounds(mut self, min_pixels: u64, max_pixels: u64) -> Self {
        self.min_pixels = min_pixels;
        self.max_pixels = max_pixels;
        self
    }

    /// Returns a copy that reproduces the given transformers backend.
    pub fn with_backend(mut self, backend: ProcessorBackend) -> Self {
        self.backend = backend;
        self
    }

    /// The `[width, height]` a picture of `wh` pixels is smart-resized to (what the model sees).
    pub(crate) fn resized_size(&self, wh: [u32; 2]) -> Result<[u32; 2], super::PreprocessError> {
        let (h, w) = super::smart_resize(
            wh[1] as usize,
            wh[0] as usize,
            self.factor(),
            self.min_pixels,
            self.max_pixels,
        )?;
        Ok([w as u32, h as u32])
    }

    /// The smart-resize factor: `patch_size · merge_size` (28).
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }

    /// Length of one patch row: `3 · temporal_patch_size · patch_size²` (1176).
    pub fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Checks the values are usable (non-zero sizes, positive std, `min_pixels <= max_pixels`).
    pub fn validate(&self) -> Result<(), String> {
        if self.patch_size == 0 || self.temporal_patch_size == 0 || self.merge_size == 0 {
            return Err("patch_size, temporal_patch_size and merge_size must be positive".into());
        }
        if self.image_std.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!(
                "image_std must be positive, got {:?}",
                self.image_std
            ));
        }
        if !(self.rescale_factor.is_finite() && self.rescale_factor > 0.0) {
            return Err(format!(
                "rescale_factor must be positive, got {}",
                self.rescale_factor
            ));
        }
        if self.min_pixels > self.max_pixels {
            return Err(format!(
                "min_pixels {} exceeds max_pixels {}",
                self.min_pixels, self.max_pixels
            ));
        }
        Ok(())
    }

    fn from_raw(raw: RawConfig) -> Result<Self, String> {
        let d = Self::default();
        let size = raw.size.unwrap_or_default();
        let cfg = Self {
            min_pixels: raw
                .min_pixels
                .or(size.shortest_edge)
                .unwrap_or(d.min_pixels),
            max_pixels: raw.max_pixels.or(size.longest_edge).unwrap_or(d.max_pixels),
            patch_size: raw.patch_size.unwrap_or(d.patch_size),
            temporal_patch_size: raw.temporal_patch_size.unwrap_or(d.temporal_patch_size),
            merge_size: raw.merge_size.unwrap_or(d.merge_size),
            image_mean: raw.image_mean.unwrap_or(d.image_mean),
            image_std: raw.image_std.unwrap_or(d.image_std),
            rescale_factor: raw.rescale_factor.unwrap_or(d.rescale_factor),
            backend: d.backend,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
