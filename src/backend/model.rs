//! A checkpoint ready to serve prompts: the model on its device plus the tokenizer, chat template and image
//! settings that turn messages and screenshots into its inputs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::Device;

use crate::chat::PromptBuilder;
use crate::model::{self, ModelFiles, VlModel};
use crate::settings::{DTypeSpec, DeviceSpec};

/// How to load a model (`--model`, `--device`, `--dtype`, `--min-pixels`, `--max-pixels`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// Local folder or hub repo id.
    pub model: String,
    /// Where to run it.
    pub device: DeviceSpec,
    /// The dtype; the device's default (f32 on the CPU, bf16 on a GPU) when `None`.
    pub dtype: Option<DTypeSpec>,
    /// How the ops run (fused paths, CPU GEMM library, profiling).
    pub ops: crate::ops::OpsConfig,
    /// `min_pixels` override.
    pub min_pixels: Option<u64>,
    /// `max_pixels` override.
    pub max_pixels: Option<u64>,
    /// How a hub id is fetched (or found in the cache); unused for a local folder.
    pub hub: crate::hub::Hub,
}

/// A loaded checkpoint.
pub struct LoadedModel {
    /// The model.
    pub model: VlModel,
    /// Tokenizer, chat template and image settings.
    pub kit: PromptBuilder,
    /// The device it runs on (`auto` resolved).
    pub device: DeviceSpec,
    /// Where its weights came from.
    pub source: ModelSource,
}

/// Where a loaded model's weights came from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A checkpoint folder.
    Checkpoint {
        /// The local folder the files came from.
        dir: PathBuf,
        /// SHA-256 over the checkpoint's config and weight index (see [`fingerprint`]).
        fingerprint: String,
        /// Content fingerprint of every weight file (checked on resume).
        weights: crate::fingerprint::FilesFingerprint,
    },
    /// Drawn from a seeded generator (`bench`).
    Random {
        /// The generator's seed.
        seed: u64,
    },
}

impl ModelSource {
    /// What identifies the weights: the checkpoint's fingerprint, or the seed they were drawn with.
    pub fn fingerprint(&self) -> String {
        match self {
            Self::Checkpoint { fingerprint, .. } => fingerprint.clone(),
            Self::Random { seed } => format!("random weights, seed {seed}"),
        }
    }

    /// The checkpoint's folder; `None` for random weights.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match self {
            Self::Checkpoint { dir, .. } => Some(dir),
            Self::Random { .. } => None,
        }
    }
}

impl LoadedModel {
    /// Resolve, load and prepare a checkpoint.
    pub fn load(spec: &ModelSpec) -> Result<Self> {
        let files = ModelFiles::resolve(&spec.model, &spec.hub)
            .with_context(|| format!("locating model {}", spec.model))?;
        let (device, device_spec) = choose_device(spec.device)?;
        let dtype = model::dtype_for(spec.dtype, &device);
        let fingerprint = fingerprint(&files)?;
        let weights = crate::fingerprint::of_files(&files.weights)?;
        let model = VlModel::load(&files, &device, dtype, &spec.ops)
            .with_context(|| format!("loading model {}", spec.model))?;
        let mut kit = PromptBuilder::from_model_dir(&files.dir).with_context(|| {
            format!(
                "loading tokenizer, chat template and image settings from {}",
                files.dir.display()
            )
        })?;
        model
            .config()
            .check_image_processor(&kit.image)
            .with_context(|| files.dir.display().to_string())?;
        if spec.min_pixels.is_some() || spec.max_pixels.is_some() {
            // The bounds combined with the checkpoint's must still make a usable image size.
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
            device: device_spec,
            source: ModelSource::Checkpoint {
                dir: files.dir.clone(),
                fingerprint,
                weights,
            },
        })
    }

    /// The dtype's name (`f32`, `bf16`, …) for the manifest.
    pub(crate) fn dtype_name(&self) -> String {
        format!("{:?}", self.model.dtype()).to_lowercase()
    }
}

/// What to do when `spec` names a GPU this build has no support for.
fn build_hint(spec: DeviceSpec) -> &'static str {
    match spec {
        DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => {
            " (this build has no CUDA support: build with `cargo build --release --features cuda`, see the README)"
        }
        DeviceSpec::Metal if !cfg!(feature = "metal") => {
            " (this build has no Metal support: build with `cargo build --release --features metal` on macOS)"
        }
        _ => "",
    }
}

/// Open the device `spec` names; `auto` takes the first CUDA GPU in a CUDA build, Metal in a Metal build, else
/// the CPU, and logs the choice. Returns the device and its resolved spec (for the manifest).
pub fn choose_device(spec: DeviceSpec) -> Result<(Device, DeviceSpec)> {
    let open = |s: DeviceSpec| {
        model::open_device(s).with_context(|| format!("--device {s}{}", build_hint(s)))
    };
    if spec != DeviceSpec::Auto {
        return Ok((open(spec)?, spec));
    }
    let gpu = if cfg!(feature = "cuda") {
        Some(DeviceSpec::Cuda(0))
    } else if cfg!(feature = "metal") {
        Some(DeviceSpec::Metal)
    } else {
        None
    };
    if let Some(g) = gpu {
        match open(g) {
            Ok(d) => {
                tracing::info!("--device auto: using {g}");
                return Ok((d, g));
            }
            Err(e) => tracing::warn!("--device auto: {g} is not usable ({e:#}); using the CPU"),
        }
    } else {
        tracing::info!("--device auto: this build has no GPU support; using the CPU");
    }
    Ok((Device::Cpu, DeviceSpec::Cpu))
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
    Ok(crate::fingerprint::hex(&h.finalize()))
}
