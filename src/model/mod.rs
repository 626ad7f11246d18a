//! The vision-language models on candle, numerically following HF transformers: Qwen2.5-VL
//! (`Qwen2_5_VLForConditionalGeneration`) and dense Qwen3-VL (`Qwen3VLForConditionalGeneration`), detected from
//! `config.json` ([`ModelConfig::family`]).
//!
//! A family is a folder ([`qwen2_5_vl`], [`qwen3_vl`]) holding what only it has (its vision tower); the decoder,
//! caches, rotary helpers, weights and the prefill/decode driver here serve every family, configured by the
//! parsed config.
//!
//! * [`VlModel::load`] reads a checkpoint found by [`ModelFiles::resolve`] (local folder or hub id) onto a device
//!   opened by [`open_device`]; its ops run as the given [`OpsConfig`] says (an [`Ops`] context built at load and
//!   passed down every forward call, which also picks each attention's implementation).
//! * [`VlModel::prefill`] encodes any mix of prompts (each with its images, optionally continuing a text-only
//!   prefix cache) in one packed pass: every Linear runs once over all tokens, attention runs per sequence.
//! * [`VlModel::decode`] advances any set of per-sequence [`SeqCache`]s by one token each.
//! * Greedy generation on top of both is the engine's (`crate::engine`).
//!
//! Design: no padding anywhere. Each sequence owns its KV cache with its exact length and its next M-RoPE
//! position, so results do not depend on batch composition (up to GEMM summation order).

pub mod cache;
pub mod config;
mod detect;
pub mod device;
pub mod files;
pub mod flops;
mod forward;
#[cfg(test)]
mod held_tests;
pub mod nn;
pub mod qwen2_5_vl;
pub mod qwen3_vl;
pub mod rope;
pub mod text;
pub mod tower;
pub mod weights;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

pub use cache::SeqCache;
pub use config::{ModelConfig, TextConfig, VisionConfig};
pub use device::{dtype_for, open_device};
pub use files::ModelFiles;
pub use qwen2_5_vl::window;
use tower::VisionOutput;
pub use tower::VisionTrace;

use crate::ops::{Ops, OpsConfig, OpsManifest, ProfileSnapshot};
use crate::preprocess::ModelInput;
use crate::records::DecodeAttention;
use crate::settings::ModelFamily;

/// Errors of the model layer.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A tensor operation or weight load failed (weight errors name the tensor).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// `config.json` / `generation_config.json` problem.
    #[error("config: {0}")]
    Config(String),
    /// Checkpoint files could not be located or read.
    #[error("model files: {0}")]
    Files(String),
    /// A hub checkpoint could not be fetched (or was not in the cache offline), or the fetch was stopped.
    #[error("{0}")]
    Hub(#[from] crate::hub::HubError),
    /// Invalid request (prompt/image mismatch, bad prefix, unknown device, ...).
    #[error("invalid input: {0}")]
    Input(String),
}

/// Result type of the model layer.
pub type Result<T> = std::result::Result<T, ModelError>;

/// One sequence to prefill: its prompt and images, and optionally a text-only prefix cache whose tokens the
/// prompt starts with (only the rest is computed).
#[derive(Debug, Clone, Copy)]
pub struct PrefillRequest<'a> {
    /// Prompt ids (image pads expanded) and images.
    pub input: &'a ModelInput,
    /// Cache of a prefix of `input.input_ids` (built by [`VlModel::prefill_prefix`]).
    pub prefix: Option<&'a SeqCache>,
}

impl<'a> PrefillRequest<'a> {
    /// A request for `input` without a cached prefix.
    pub fn new(input: &'a ModelInput) -> Self {
        Self {
            input,
            prefix: None,
        }
    }
}

/// Intermediate outputs recorded by [`VlModel::prefill_traced`] (for golden tests and debugging).
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// Vision patch embedding and block outputs (natural patch order).
    pub vision: VisionTrace,
    /// Merger output (merged tokens, natural order).
    pub vision_merged: Option<Tensor>,
    /// Language-model input after the image scatter (packed rows of all sequences' new tokens).
    pub inputs_embeds: Option<Tensor>,
    /// Output of every decoder layer (packed rows).
    pub text_layers: Vec<Tensor>,
    /// After the final norm (packed rows).
    pub final_norm: Option<Tensor>,
    /// Per sequence, the M-RoPE positions of its new tokens.
    pub positions: Vec<Vec<[i64; 3]>>,
    /// DeepStack features (Qwen3-VL), one per tapped vision block, rows of all images in order.
    pub deepstack: Vec<Tensor>,
}

/// The loaded model, of any supported family.
#[derive(Debug, Clone)]
pub struct VlModel {
    cfg: ModelConfig,
    vision: VisionTower,
    text: text::TextModel,
    device: Device,
    dtype: DType,
    inv_freq: Vec<f32>,
    /// The position axis of each rotary frequency ([`rope::mrope_axes`]).
    rope_axes: Vec<usize>,
    ops: Ops,
    /// A decode attention forced by [`VlModel::set_decode_attention`] instead of the ops' choice.
    decode_attention: Option<DecodeAttention>,
}

/// A family's vision tower.
#[derive(Debug, Clone)]
enum VisionTower {
    /// Window attention, RMSNorm, SwiGLU (Qwen2.5-VL).
    Qwen25(qwen2_5_vl::vision::VisionModel),
    /// Learned positions, LayerNorm, DeepStack (Qwen3-VL).
    Qwen3(qwen3_vl::vision::VisionModel),
}

impl VisionTower {
    /// Load the family's tower under `vb`.
    fn new(family: ModelFamily, cfg: &VisionConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(match family {
            ModelFamily::Qwen25Vl => Self::Qwen25(qwen2_5_vl::vision::VisionModel::new(cfg, vb)?),
            ModelFamily::Qwen3Vl => Self::Qwen3(qwen3_vl::vision::VisionModel::new(cfg, vb)?),
        })
    }

    /// Let the ops hold the tower's linear layers in their tile layout where they run faster so.
    fn hold_weights(&mut self, ops: &Ops) -> candle_core::Result<()> {
        match self {
            Self::Qwen25(m) => m.hold_weights(ops),
            Self::Qwen3(m) => m.hold_weights(ops),
        }
    }

    /// Encode `pixels` (N, patch_dim) of images `grids`.
    fn forward(
        &self,
        ops: &Ops,
        pixels: &Tensor,
        grids: &[[usize; 3]],
        trace: Option<&mut VisionTrace>,
    ) -> candle_core::Result<VisionOutput> {
        match self {
            Self::Qwen25(m) => Ok(VisionOutput {
                merged: m.forward(ops, pixels, grids, trace)?,
                deepstack: Vec::new(),
            }),
            Self::Qwen3(m) => m.forward(ops, pixels, grids, trace),
        }
    }
}

/// [`VlModel`] under its former name.
pub type Qwen25VL = VlModel;

/// Tensor name prefixes of the vision tower and the language model in a checkpoint.
fn detect_prefixes(vb: &VarBuilder) -> Result<(&'static str, &'static str)> {
    const CANDIDATES: [(&str, &str); 2] = [
        ("model.visual", "model.language_model"),
        ("visual", "model"),
    ];
    CANDIDATES
        .into_iter()
        .find(|(v, _)| vb.contains_tensor(&format!("{v}.patch_embed.proj.weight")))
        .ok_or_else(|| {
            ModelError::Files(
                "no vision tower found: neither `visual.patch_embed.proj.weight` nor \
                 `model.visual.patch_embed.proj.weight` is in the safetensors files"
                    .into(),
            )
        })
}

impl VlModel {
    /// Load config and memory-mapped weights on `device`, casting to `dtype`; the ops run as `ops` says (a CBLAS
    /// library it asks for is loaded here, before any work starts).
    pub fn load(
        files: &ModelFiles,
        device: &Device,
        dtype: DType,
        ops: &OpsConfig,
    ) -> Result<Self> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .map_err(|e| ModelError::Files(format!("{}: {e}", p.display())))
        };
        let gen = files.generation_config.as_deref().map(read).transpose()?;
        let cfg = ModelConfig::from_json(&read(&files.config)?, gen.as_deref())?;
        let weights = weights::MmapWeights::open(&files.weights)?;
        let vb = VarBuilder::from_backend(Box::new(weights), dtype, device.clone());
        let model = Self::from_var_builder(cfg, vb, ops)?;
        release_freed_heap();
        Ok(model)
    }

    /// Build from a parsed config and a var builder over the checkpoint's tensors; the ops run as `ops` says.
    pub(crate) fn from_var_builder(
        cfg: ModelConfig,
        vb: VarBuilder,
        ops: &OpsConfig,
    ) -> Result<Self> {
        let ops =
            Ops::new(ops, vb.device(), vb.dtype()).map_err(|e| ModelError::Input(e.to_string()))?;
        let (vis_prefix, lm_prefix) = detect_prefixes(&vb)?;
        let (v, d) = (cfg.text.vocab_size, cfg.text.hidden_size);
        let lm_head = if !cfg.tie_word_embeddings && vb.contains_tensor("lm_head.weight") {
            Some(nn::weight(&vb, (v, d), "lm_head.weight")?)
        } else {
            if !cfg.tie_word_embeddings {
                tracing::warn!("config says untied embeddings but there is no lm_head.weight; using embed_tokens");
            }
            None
        };
        let mut vision = VisionTower::new(cfg.family, &cfg.vision, vb.pp(vis_prefix))?;
        vision.hold_weights(&ops)?;
        let text = text::TextModel::new(&cfg.text, vb.pp(lm_prefix), lm_head)?;
        let t = &cfg.text;
        Ok(Self {
            inv_freq: rope::text_inv_freq(t.head_dim, t.rope_theta),
            rope_axes: rope::mrope_axes(t.head_dim / 2, t.mrope_section, t.mrope_interleaved),
            device: vb.device().clone(),
            dtype: vb.dtype(),
            cfg,
            vision,
            text,
            ops,
            decode_attention: None,
        })
    }

    /// How decode runs attention: the ops' choice for this device, dtype and head shape, unless forced by
    /// [`Self::set_decode_attention`].
    pub fn decode_attention(&self) -> DecodeAttention {
        let t = &self.cfg.text;
        let group = t.num_attention_heads / t.num_key_value_heads.max(1);
        let auto = self
            .ops
            .decode_attention_path(&self.device, self.dtype, t.head_dim, group);
        match self.decode_attention {
            Some(DecodeAttention::Fused) | None => auto,
            Some(forced) => forced,
        }
    }

    /// The ops' runtime context (settings, CBLAS library, profiler).
    pub fn ops(&self) -> &Ops {
        &self.ops
    }

    /// FLOPs of the attention itself (scores and weighted sums) in a prefill of `reqs` ([`flops`]).
    pub fn prefill_attention_flops(&self, reqs: &[PrefillRequest<'_>]) -> f64 {
        let grids: Vec<Vec<[usize; 3]>> = reqs
            .iter()
            .map(|r| r.input.images.iter().map(|i| i.grid_thw).collect())
            .collect();
        let shapes: Vec<flops::PromptShape<'_>> = reqs
            .iter()
            .zip(&grids)
            .map(|(r, g)| {
                let cached = r.prefix.map_or(0, |c| c.len());
                flops::PromptShape {
                    grids: g,
                    new_tokens: r.input.input_ids.len().saturating_sub(cached),
                    cached_tokens: cached,
                }
            })
            .collect();
        flops::prefill_attention_flops(&self.cfg, &shapes)
    }

    /// What the run manifest records about the ops.
    pub fn ops_manifest(&self) -> OpsManifest {
        self.ops.manifest()
    }

    /// The section timings so far ([`OpsConfig::profile`]); `None` when profiling is off.
    pub fn profile_snapshot(&self) -> Option<ProfileSnapshot> {
        self.ops.profile_snapshot()
    }

    /// The model family (from `config.json`).
    pub fn family(&self) -> crate::settings::ModelFamily {
        self.cfg.family
    }

    /// The parsed configuration (including eos ids from `generation_config.json`).
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Device holding the weights.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Activation and weight dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Cap on attention scores materialised at once (elements); lower it to trade speed for memory.
    pub fn set_attention_budget(&mut self, max_score_elems: usize) {
        self.ops.set_attention_budget(max_score_elems);
    }

    /// Force a composed decode attention instead of the ops' choice (results agree to float rounding), e.g. to
    /// compare them; `Fused` restores the ops' choice (the kernel runs only where it covers the call).
    pub fn set_decode_attention(&mut self, mode: DecodeAttention) {
        self.decode_attention = Some(mode).filter(|m| *m != DecodeAttention::Fused);
    }

    /// KV-cache bytes per cached token (all layers, K and V).
    pub fn kv_bytes_per_token(&self) -> usize {
        let t = &self.cfg.text;
        t.num_hidden_layers * 2 * t.num_key_value_heads * t.head_dim * self.dtype.size_in_bytes()
    }

    /// Rough transient activation bytes per prefill token in the language model (one layer alive at a time).
    pub(crate) fn activation_bytes_per_token(&self) -> usize {
        let t = &self.cfg.text;
        let per = 4 * t.hidden_size
            + 3 * t.intermediate_size
            + (t.num_attention_heads + 2 * t.num_key_value_heads) * t.head_dim;
        per * self.dtype.size_in_bytes()
    }

    /// Rough transient activation bytes per vision patch (one block alive at a time), excluding attention
    /// scores, which are capped by the attention budget (×4 bytes).
    pub(crate) fn vision_activation_bytes_per_patch(&self) -> usize {
        let v = &self.cfg.vision;
        (8 * v.hidden_size + 3 * v.intermediate_size + v.patch_dim()) * self.dtype.size_in_bytes()
    }
}

/// Hand the heap's free pages back to the OS. Loading leaves freed buffers behind (the parts of each packed
/// projection, copied into one weight), and the binary turns glibc's automatic trimming off (see `main.rs`), so
/// without this they would stay resident: about 0.3 GB more peak RSS on the `small` config.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_heap() {
    // SAFETY: malloc_trim only returns free memory to the OS; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_heap() {}
