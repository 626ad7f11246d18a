//! A checkpoint ready to serve prompts: the model on its device plus the tokenizer, chat template and image
//! settings that turn messages and screenshots into its inputs.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::chat::PromptBuilder;
use crate::model::{self, ModelFiles, Qwen25VL};

/// How to load a model (`--model`, `--device`, `--dtype`, `--min-pixels`, `--max-pixels`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Local folder or hub repo id.
    pub model: String,
    /// `cpu`, `cuda[:N]` or `metal`.
    pub device: String,
    /// `f32`, `bf16`, `f16`; the device's default when `None`.
    pub dtype: Option<String>,
    /// `min_pixels` override.
    pub min_pixels: Option<u64>,
    /// `max_pixels` override.
    pub max_pixels: Option<u64>,
}

/// A loaded checkpoint.
pub struct LoadedModel {
    /// The model.
    pub model: Qwen25VL,
    /// Tokenizer, chat template and image settings.
    pub kit: PromptBuilder,
    /// The local folder the files came from.
    pub dir: PathBuf,
    /// SHA-256 over the checkpoint's config and weight index (see [`fingerprint`]).
    pub fingerprint: String,
    /// Content fingerprint of every weight file (issue 18: checked on resume).
    pub weights: crate::fingerprint::WeightsFingerprint,
}

impl LoadedModel {
    /// Resolve, load and prepare a checkpoint.
    pub fn load(spec: &ModelSpec) -> Result<Self> {
        let files = ModelFiles::resolve(&spec.model)
            .with_context(|| format!("locating model {}", spec.model))?;
        crate::validate::device(&spec.device)?; // issue 18: a bad value is named as `--device`
        let device = model::parse_device(&spec.device)
            .with_context(|| format!("--device {}", spec.device))?;
        let dtype = model::parse_dtype(spec.dtype.as_deref(), &device)?;
        let fingerprint = fingerprint(&files)?;
        let weights = crate::fingerprint::of_files(&files.weights)?;
        let model = Qwen25VL::load(&files, &device, dtype)
            .with_context(|| format!("loading model {}", spec.model))?;
        let mut kit = PromptBuilder::from_model_dir(&files.dir).with_context(|| {
            format!(
                "loading tokenizer, chat template and image settings from {}",
                files.dir.display()
            )
        })?;
        if spec.min_pixels.is_some() || spec.max_pixels.is_some() {
            // Issue 18: the bounds combined with the checkpoint's must still make a usable image size.
            let (min, max) = crate::validate::effective_pixel_bounds(
                (spec.min_pixels, spec.max_pixels),
                (kit.image.min_pixels, kit.image.max_pixels),
                kit.image.factor() as u64,
            )?;
            kit.image = kit.image.clone().with_pixel_bounds(min, max);
        }
        Ok(Self {
            model,
            kit,
            dir: files.dir.clone(),
            fingerprint,
            weights,
        })
    }

    /// The dtype's name (`f32`, `bf16`, …) for the manifest.
    pub fn dtype_name(&self) -> String {
        format!("{:?}", self.model.dtype()).to_lowercase()
    }
}

/// SHA-256 (hex) identifying a checkpoint without reading its weights: `config.json`, `generation_config.json`,
/// and for every safetensors file its size and header (the tensor index: names, dtypes, shapes, offsets).
pub fn fingerprint(files: &ModelFiles) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut h = Sha256::new();
    for p in std::iter::once(&files.config).chain(files.generation_config.as_ref()) {
        h.update(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?);
    }
    for w in &files.weights {
        let mut f = std::fs::File::open(w).with_context(|| format!("opening {}", w.display()))?;
        let size = f.metadata()?.len();
        let mut len = [0u8; 8];
        f.read_exact(&mut len)
            .with_context(|| format!("{} is not a safetensors file", w.display()))?;
        let n = u64::from_le_bytes(len).min(size.saturating_sub(8));
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header)
            .with_context(|| format!("{}: truncated safetensors header", w.display()))?;
        h.update(size.to_le_bytes());
        h.update(&header);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
