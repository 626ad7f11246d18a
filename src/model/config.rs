//! `config.json` (+ `generation_config.json`) parsing for the supported families ([`ModelFamily`]).
//!
//! Accepts both the flat Hub layout (text fields at the top level, `rope_scaling: {type: mrope, mrope_section}`)
//! and the nested layout (`text_config` with `rope_scaling` or transformers-5 `rope_parameters`).

use serde_json::Value;

use super::detect::detect_family;
use super::ModelError;
use crate::preprocess::ImageProcessorConfig;
use crate::settings::ModelFamily;

/// Language-model (Qwen2 decoder) hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    /// Embedding rows.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA).
    pub num_key_value_heads: usize,
    /// Per-head width (`hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// M-RoPE sections (t, h, w) over the half head dimension; sums to `head_dim / 2`.
    pub mrope_section: [usize; 3],
    /// Maximum positions (informational; caches are sized by need).
    pub max_position_embeddings: usize,
    /// Whether q/k/v projections have biases (Qwen2.5-VL) or not (Qwen3-VL).
    pub attention_bias: bool,
    /// Per-head RMSNorm of q and k before the rotary (Qwen3-VL's `q_norm`/`k_norm`).
    pub qk_norm: bool,
    /// M-RoPE axes interleaved over the frequencies (Qwen3-VL) instead of contiguous sections (Qwen2.5-VL).
    pub mrope_interleaved: bool,
}

/// Vision tower hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// Number of transformer blocks.
    pub depth: usize,
    /// Width.
    pub hidden_size: usize,
    /// SwiGLU MLP width.
    pub intermediate_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Spatial patch size in pixels (14).
    pub patch_size: usize,
    /// Temporal patch size (2).
    pub temporal_patch_size: usize,
    /// Merge factor per side (2).
    pub spatial_merge_size: usize,
    /// Window size in pixels (112).
    pub window_size: usize,
    /// Blocks that use full (per-image) attention instead of window attention.
    pub fullatt_block_indexes: Vec<usize>,
    /// Merger output width (= LM hidden size).
    pub out_hidden_size: usize,
    /// Input channels (3).
    pub in_channels: usize,
    /// Rows of the learned position-embedding table (Qwen3-VL: a square grid, 2304 = 48²; 0 when absent).
    pub num_position_embeddings: usize,
    /// Blocks whose outputs feed the DeepStack mergers (Qwen3-VL; empty otherwise).
    pub deepstack_visual_indexes: Vec<usize>,
}

impl VisionConfig {
    /// Values per patch row: `in_channels · temporal_patch_size · patch_size²` (1176).
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
    /// Per-head width.
    pub(crate) fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }
    /// Patches per merged token (4).
    pub(crate) fn merge_unit(&self) -> usize {
        self.spatial_merge_size * self.spatial_merge_size
    }
    /// Side of the square position-embedding grid (Qwen3-VL: √2304 = 48).
    pub fn position_grid_side(&self) -> usize {
        (self.num_position_embeddings as f64).sqrt().round() as usize
    }
    /// Window side in merged tokens (`window_size / merge / patch` = 4).
    pub(crate) fn merger_window(&self) -> usize {
        self.window_size / self.spatial_merge_size / self.patch_size
    }
}

/// Everything the model needs from the checkpoint's JSON files.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The model family, from `model_type` / `architectures`.
    pub family: ModelFamily,
    /// Language model.
    pub text: TextConfig,
    /// Vision tower.
    pub vision: VisionConfig,
    /// `<|image_pad|>` id (151655).
    pub image_token_id: u32,
    /// `<|video_pad|>` id (151656).
    pub video_token_id: u32,
    /// `<|vision_start|>` id (151652).
    pub vision_start_token_id: u32,
    /// Whether `lm_head` shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// End-of-sequence ids (from `generation_config.json`, else `config.json`).
    pub eos_token_ids: Vec<u32>,
}

fn cfg_err(msg: impl Into<String>) -> ModelError {
    ModelError::Config(msg.into())
}

fn get_usize(obj: &Value, key: &str) -> Option<usize> {
    obj.get(key).and_then(Value::as_u64).map(|v| v as usize)
}

fn req_usize(obj: &Value, key: &str, ctx: &str) -> Result<usize, ModelError> {
    get_usize(obj, key)
        .ok_or_else(|| cfg_err(format!("missing or invalid `{ctx}{key}` in config.json")))
}

/// Token ids given as a number or a list of numbers.
fn id_list(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as u32)
            .collect(),
        _ => Vec::new(),
    }
}

impl ModelConfig {
    /// Parse `config.json` text and optional `generation_config.json` text.
    pub fn from_json(config: &str, generation: Option<&str>) -> Result<Self, ModelError> {
        let root: Value = serde_json::from_str(config)
            .map_err(|e| cfg_err(format!("config.json is not valid JSON: {e}")))?;
        let family = detect_family(&root)?;
        let text = parse_text(&root, family)?;
        let vis = root
            .get("vision_config")
            .ok_or_else(|| cfg_err("config.json has no `vision_config`"))?;
        let vision = parse_vision(vis, text.hidden_size, family)?;
        let text_obj = root.get("text_config");
        let tie = root
            .get("tie_word_embeddings")
            .or_else(|| text_obj.and_then(|t| t.get("tie_word_embeddings")))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let id = |k: &str, d: u32| {
            root.get(k)
                .or_else(|| text_obj.and_then(|t| t.get(k)))
                .and_then(Value::as_u64)
                .map(|v| v as u32)
                .unwrap_or(d)
        };
        let mut eos = Vec::new();
        if let Some(g) = generation {
            let g: Value = serde_json::from_str(g)
                .map_err(|e| cfg_err(format!("generation_config.json is not valid JSON: {e}")))?;
            eos = id_list(g.get("eos_token_id"));
        }
        if eos.is_empty() {
            eos = id_list(
                root.get("eos_token_id")
                    .or_else(|| text_obj.and_then(|t| t.get("eos_token_id"))),
            );
        }
        Ok(Self {
            family,
            text,
            vision,
            image_token_id: id("image_token_id", 151655),
            video_token_id: id("video_token_id", 151656),
            vision_start_token_id: id("vision_start_token_id", 151652),
            tie_word_embeddings: tie,
            eos_token_ids: eos,
        })
    }

    /// Refuse an image processor that cuts pictures into other patches than the vision tower reads: its
    /// (patch_size, temporal_patch_size, merge_size) must be `config.json`'s.
    pub fn check_image_processor(&self, image: &ImageProcessorConfig) -> Result<(), ModelError> {
        let v = &self.vision;
        let img = (
            image.patch_size,
            image.temporal_patch_size,
            image.merge_size,
        );
        let vis = (v.patch_size, v.temporal_patch_size, v.spatial_merge_size);
        if img == vis {
            return Ok(());
        }
        Err(cfg_err(format!(
            "preprocessor_config.json has (patch_size, temporal_patch_size, merge_size) {img:?} but the {} vision \
             tower in config.json expects {vis:?}",
            self.family
        )))
    }
}

/// Text fields live in `text_config` (transformers 5) or at the top level (Hub).
fn parse_text(root: &Value, family: ModelFamily) -> Result<TextConfig, ModelError> {
    let t = match root.get("text_config") {
        Some(t) if t.get("hidden_size").is_some() => t,
        _ => root,
    };
    let ctx = if std::ptr::eq(t, root) {
        ""
    } else {
        "text_config."
    };
    let hidden_size = req_usize(t, "hidden_size", ctx)?;
    let num_attention_heads = req_usize(t, "num_attention_heads", ctx)?;
    let num_key_value_heads = get_usize(t, "num_key_value_heads").unwrap_or(num_attention_heads);
    if num_key_value_heads == 0 || !num_attention_heads.is_multiple_of(num_key_value_heads) {
        return Err(cfg_err(format!(
            "{ctx}num_key_value_heads ({num_key_value_heads}) must divide {ctx}num_attention_heads \
             ({num_attention_heads})"
        )));
    }
    let head_dim = get_usize(t, "head_dim").unwrap_or(hidden_size / num_attention_heads.max(1));
    let rope = ["rope_parameters", "rope_scaling"]
        .iter()
        .find_map(|k| t.get(*k).or_else(|| root.get(*k)).filter(|v| v.is_object()));
    let section = rope
        .and_then(|r| r.get("mrope_section"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            cfg_err("config.json has no `mrope_section` (rope_scaling / rope_parameters)")
        })?;
    let section: Vec<usize> = section
        .iter()
        .filter_map(Value::as_u64)
        .map(|v| v as usize)
        .collect();
    if section.len() != 3 || section.iter().sum::<usize>() * 2 != head_dim {
        return Err(cfg_err(format!(
            "mrope_section {section:?} must have 3 entries summing to head_dim/2"
        )));
    }
    let rope_theta = t
        .get("rope_theta")
        .or_else(|| root.get("rope_theta"))
        .or_else(|| rope.and_then(|r| r.get("rope_theta")))
        .and_then(Value::as_f64)
        .unwrap_or(match family {
            ModelFamily::Qwen25Vl => 1_000_000.0,
            ModelFamily::Qwen3Vl => 5_000_000.0,
        });
    let qwen3 = family == ModelFamily::Qwen3Vl;
    Ok(TextConfig {
        vocab_size: get_usize(t, "vocab_size")
            .or_else(|| get_usize(root, "vocab_size"))
            .unwrap_or(151936),
        hidden_size,
        intermediate_size: req_usize(t, "intermediate_size", ctx)?,
        num_hidden_layers: req_usize(t, "num_hidden_layers", ctx)?,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: t
            .get("rms_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6),
        rope_theta,
        mrope_section: [section[0], section[1], section[2]],
        max_position_embeddings: get_usize(t, "max_position_embeddings").unwrap_or(128000),
        attention_bias: t
            .get("attention_bias")
            .and_then(Value::as_bool)
            .unwrap_or(!qwen3),
        qk_norm: qwen3,
        mrope_interleaved: qwen3,
    })
}

fn parse_vision(
    v: &Value,
    text_hidden: usize,
    family: ModelFamily,
) -> Result<VisionConfig, ModelError> {
    let ctx = "vision_config.";
    let list = |key: &str| -> Vec<usize> {
        v.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_u64)
                    .map(|x| x as usize)
                    .collect()
            })
            .unwrap_or_default()
    };
    let qwen3 = family == ModelFamily::Qwen3Vl;
    let cfg = VisionConfig {
        depth: req_usize(v, "depth", ctx)?,
        hidden_size: req_usize(v, "hidden_size", ctx)?,
        intermediate_size: req_usize(v, "intermediate_size", ctx)?,
        num_heads: req_usize(v, "num_heads", ctx)?,
        patch_size: get_usize(v, "patch_size")
            .or_else(|| get_usize(v, "spatial_patch_size"))
            .unwrap_or(if qwen3 { 16 } else { 14 }),
        temporal_patch_size: get_usize(v, "temporal_patch_size").unwrap_or(2),
        spatial_merge_size: get_usize(v, "spatial_merge_size").unwrap_or(2),
        window_size: get_usize(v, "window_size").unwrap_or(if qwen3 { 0 } else { 112 }),
        fullatt_block_indexes: list("fullatt_block_indexes"),
        out_hidden_size: get_usize(v, "out_hidden_size").unwrap_or(text_hidden),
        in_channels: get_usize(v, "in_channels")
            .or_else(|| get_usize(v, "in_chans"))
            .unwrap_or(3),
        num_position_embeddings: if qwen3 {
            req_usize(v, "num_position_embeddings", ctx)?
        } else {
            0
        },
        deepstack_visual_indexes: list("deepstack_visual_indexes"),
    };
    if cfg.num_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_heads) {
        return Err(cfg_err(
            "inconsistent vision_config: num_heads must divide hidden_size",
        ));
    }
    if !qwen3 && cfg.merger_window() == 0 {
        return Err(cfg_err(
            "inconsistent vision_config: window_size is smaller than a merged token",
        ));
    }
    if qwen3 {
        check_qwen3_vision(&cfg)?;
    }
    Ok(cfg)
}

/// Qwen3-VL's tower: a square position-embedding table, DeepStack taps inside the tower.
fn check_qwen3_vision(cfg: &VisionConfig) -> Result<(), ModelError> {
    let side = cfg.position_grid_side();
    if side < 2 || side * side != cfg.num_position_embeddings {
        return Err(cfg_err(format!(
            "vision_config.num_position_embeddings ({}) must be a square of at least 4",
            cfg.num_position_embeddings
        )));
    }
    if let Some(&i) = cfg
        .deepstack_visual_indexes
        .iter()
        .find(|&&i| i >= cfg.depth)
    {
        return Err(cfg_err(format!(
            "vision_config.deepstack_visual_indexes has {i}, but depth is {}",
            cfg.depth
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_architecture_is_refused_with_the_supported_list() {
        let tiny = include_str!("../../tests/fixtures/models/tiny-b/config.json");
        assert!(ModelConfig::from_json(tiny, None).is_ok());
        let qwen2 = tiny
            .replace(
                "Qwen2_5_VLForConditionalGeneration",
                "Qwen2VLForConditionalGeneration",
            )
            .replace("\"qwen2_5_vl\"", "\"qwen2_vl\"");
        let err = ModelConfig::from_json(&qwen2, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("qwen2_vl") && err.contains("qwen2_5_vl"),
            "{err}"
        );
        let arch = tiny.replace("Qwen2_5_VLForConditionalGeneration", "LlavaForCausal");
        let err = ModelConfig::from_json(&arch, None).unwrap_err().to_string();
        assert!(
            err.contains("LlavaForCausal") && err.contains("supported"),
            "{err}"
        );
    }

    #[test]
    fn an_image_processor_with_other_patches_than_the_tower_is_refused() {
        let tiny = include_str!("../../tests/fixtures/models/tiny-b/config.json");
        let cfg = ModelConfig::from_json(tiny, None).unwrap();
        let image = ImageProcessorConfig::default();
        assert!(cfg.check_image_processor(&image).is_ok());
        let sixteen = ImageProcessorConfig {
            patch_size: 16,
            ..image
        };
        let err = cfg.check_image_processor(&sixteen).unwrap_err().to_string();
        assert!(
            err.contains("(16, 2, 2)") && err.contains("expects (14, 2, 2)"),
            "{err}"
        );
    }

    /// A nested Qwen3-VL config as transformers 5 saves it (`rope_parameters`, explicit head_dim).
    fn qwen3(rope_key: &str) -> String {
        format!(
            r#"{{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
            "tie_word_embeddings": true, "image_token_id": 151655,
            "text_config": {{"model_type": "qwen3_vl_text", "hidden_size": 80, "intermediate_size": 160,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
              "rms_norm_eps": 1e-6, "vocab_size": 151936, "attention_bias": false,
              "{rope_key}": {{"rope_type": "default", "mrope_section": [8, 4, 4], "mrope_interleaved": true,
                "rope_theta": 5000000.0}}}},
            "vision_config": {{"depth": 4, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
              "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 80,
              "num_position_embeddings": 144, "deepstack_visual_indexes": [1, 3],
              "hidden_act": "gelu_pytorch_tanh"}}}}"#
        )
    }

    #[test]
    fn qwen3_nested_config_is_read_with_its_own_defaults() {
        for key in ["rope_parameters", "rope_scaling"] {
            let c = ModelConfig::from_json(&qwen3(key), None).unwrap();
            assert_eq!(c.family, ModelFamily::Qwen3Vl);
            assert_eq!(c.text.head_dim, 32);
            assert_eq!(c.text.rope_theta, 5e6);
            assert!(c.text.qk_norm && c.text.mrope_interleaved && !c.text.attention_bias);
            assert!(c.tie_word_embeddings);
            assert_eq!(c.vision.patch_size, 16);
            assert_eq!(c.vision.position_grid_side(), 12);
            assert_eq!(c.vision.deepstack_visual_indexes, [1, 3]);
        }
        let tiny = include_str!("../../tests/fixtures/models/tiny-b/config.json");
        let c = ModelConfig::from_json(tiny, None).unwrap();
        assert_eq!(c.family, ModelFamily::Qwen25Vl);
        assert!(c.text.attention_bias && !c.text.qk_norm && !c.text.mrope_interleaved);
    }

    #[test]
    fn qwen3_moe_and_bad_qwen3_vision_are_refused() {
        let moe = qwen3("rope_parameters")
            .replace(
                "Qwen3VLForConditionalGeneration",
                "Qwen3VLMoeForConditionalGeneration",
            )
            .replace("\"qwen3_vl\"", "\"qwen3_vl_moe\"");
        let err = ModelConfig::from_json(&moe, None).unwrap_err().to_string();
        assert!(
            err.contains("qwen3_vl_moe") && err.contains("Qwen3-VL") && err.contains("Qwen2.5-VL"),
            "{err}"
        );
        // The architecture alone also decides.
        let arch = qwen3("rope_parameters").replace("\"model_type\": \"qwen3_vl\",", "");
        assert!(ModelConfig::from_json(&arch, None).is_ok());
        let arch = arch.replace(
            "Qwen3VLForConditionalGeneration",
            "Qwen3VLMoeForConditionalGeneration",
        );
        let err = ModelConfig::from_json(&arch, None).unwrap_err().to_string();
        assert!(err.contains("Qwen3VLMoeForConditionalGeneration"), "{err}");
        let mixed = qwen3("rope_parameters").replace("\"qwen3_vl\"", "\"qwen2_5_vl\"");
        assert!(ModelConfig::from_json(&mixed, None).is_err());
        let not_square = qwen3("rope_parameters").replace("144", "150");
        let err = ModelConfig::from_json(&not_square, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("num_position_embeddings"), "{err}");
        let deep = qwen3("rope_parameters").replace("[1, 3]", "[1, 4]");
        let err = ModelConfig::from_json(&deep, None).unwrap_err().to_string();
        assert!(err.contains("deepstack_visual_indexes"), "{err}");
    }
}
