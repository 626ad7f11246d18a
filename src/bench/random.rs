//! Random-weight models for benchmarking without a checkpoint: the real architecture (presets with the real
//! Qwen2.5-VL and Qwen3-VL dimensions, or any `config.json`) with deterministic pseudo-random weights generated
//! on demand.

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;

use crate::model::{ModelConfig, VlModel};
use crate::settings::{BenchModel, ShapePreset};

/// `config.json` text of a preset: `tiny` (the test checkpoint's sizes), `small` (Qwen2.5-0.5B text dimensions
/// with the real 3B vision tower), `3b` and `7b` (the real Qwen2.5-VL configurations, flat Hub layout), and
/// `qwen3-2b`, `qwen3-4b`, `qwen3-8b` (the real Qwen3-VL configurations, nested layout).
pub(crate) fn preset_config(name: ShapePreset) -> String {
    let p = match name {
        ShapePreset::Qwen3Vl2B => {
            return qwen3_config(2048, 6144, 28, 16, true, QWEN3_SMALL_VISION)
        }
        ShapePreset::Qwen3Vl4B => {
            return qwen3_config(2560, 9728, 36, 32, true, QWEN3_SMALL_VISION)
        }
        ShapePreset::Qwen3Vl8B => {
            return qwen3_config(4096, 12288, 36, 32, false, QWEN3_LARGE_VISION)
        }
        ShapePreset::Tiny => Preset {
            h: 16,
            i: 48,
            l: 2,
            nh: 1,
            kv: 1,
            tied: false,
            vd: 3,
            vh: 32,
            vnh: 2,
            vi: 64,
            full: "[2]",
            mrope: "[2,3,3]",
            vocab: 151936,
        },
        ShapePreset::Small => Preset {
            h: 896,
            i: 4864,
            l: 24,
            nh: 14,
            kv: 2,
            tied: true,
            mrope: "[8,12,12]",
            ..REAL_VISION
        },
        ShapePreset::Qwen3B => Preset {
            h: 2048,
            i: 11008,
            l: 36,
            nh: 16,
            kv: 2,
            tied: true,
            ..REAL_VISION
        },
        ShapePreset::Qwen7B => Preset {
            h: 3584,
            i: 18944,
            l: 28,
            nh: 28,
            kv: 4,
            tied: false,
            vocab: 152064,
            ..REAL_VISION
        },
    };
    let Preset {
        h,
        i,
        l,
        nh,
        kv,
        tied,
        vd,
        vh,
        vnh,
        vi,
        full,
        mrope,
        vocab,
    } = p;
    format!(
        r#"{{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
  "hidden_size": {h}, "intermediate_size": {i}, "num_hidden_layers": {l}, "num_attention_heads": {nh},
  "num_key_value_heads": {kv}, "vocab_size": {vocab}, "tie_word_embeddings": {tied}, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "max_position_embeddings": 128000, "hidden_act": "silu",
  "rope_scaling": {{"type": "mrope", "mrope_section": {mrope}}},
  "bos_token_id": 151643, "eos_token_id": 151645, "image_token_id": 151655, "video_token_id": 151656,
  "vision_start_token_id": 151652, "vision_end_token_id": 151653,
  "vision_config": {{"depth": {vd}, "hidden_size": {vh}, "num_heads": {vnh}, "intermediate_size": {vi},
    "hidden_act": "silu", "out_hidden_size": {h}, "patch_size": 14, "spatial_patch_size": 14,
    "temporal_patch_size": 2, "spatial_merge_size": 2, "window_size": 112, "in_chans": 3,
    "fullatt_block_indexes": {full}, "tokens_per_second": 2}}}}"#
    )
}

/// A Qwen3-VL vision tower: depth, hidden, intermediate, DeepStack taps.
type Qwen3Vision = (usize, usize, usize, &'static str);
/// The tower of Qwen3-VL-2B and -4B.
const QWEN3_SMALL_VISION: Qwen3Vision = (24, 1024, 4096, "[5,11,17]");
/// The tower of Qwen3-VL-8B.
const QWEN3_LARGE_VISION: Qwen3Vision = (27, 1152, 4304, "[8,16,24]");

/// A nested Qwen3-VL `config.json` with text (hidden, intermediate, layers, heads) and the given tower; every
/// size has 8 KV heads of 128, and the M-RoPE, vocabulary and patch settings of the released checkpoints.
fn qwen3_config(
    h: usize,
    i: usize,
    l: usize,
    nh: usize,
    tied: bool,
    vision: Qwen3Vision,
) -> String {
    let (vd, vh, vi, ds) = vision;
    format!(
        r#"{{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
  "tie_word_embeddings": {tied}, "image_token_id": 151655, "video_token_id": 151656,
  "vision_start_token_id": 151652, "vision_end_token_id": 151653,
  "text_config": {{"model_type": "qwen3_vl_text", "hidden_size": {h}, "intermediate_size": {i},
    "num_hidden_layers": {l}, "num_attention_heads": {nh}, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 151936, "rms_norm_eps": 1e-06, "max_position_embeddings": 262144, "attention_bias": false,
    "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645,
    "rope_scaling": {{"rope_type": "default", "mrope_section": [24,20,20], "mrope_interleaved": true}},
    "rope_theta": 5000000}},
  "vision_config": {{"depth": {vd}, "hidden_size": {vh}, "intermediate_size": {vi}, "num_heads": 16,
    "hidden_act": "gelu_pytorch_tanh", "out_hidden_size": {h}, "patch_size": 16, "temporal_patch_size": 2,
    "spatial_merge_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
    "deepstack_visual_indexes": {ds}}}}}"#
    )
}

/// The dimensions a preset varies: text (hidden, intermediate, layers, heads, kv heads, tied, vocab, M-RoPE
/// sections) and vision (depth, hidden, heads, intermediate, full-attention blocks).
struct Preset {
    h: usize,
    i: usize,
    l: usize,
    nh: usize,
    kv: usize,
    tied: bool,
    vd: usize,
    vh: usize,
    vnh: usize,
    vi: usize,
    full: &'static str,
    mrope: &'static str,
    vocab: usize,
}

/// The real Qwen2.5-VL vision tower (3B and 7B share it) and the text defaults of the real checkpoints.
const REAL_VISION: Preset = Preset {
    h: 0,
    i: 0,
    l: 0,
    nh: 0,
    kv: 0,
    tied: true,
    vd: 32,
    vh: 1280,
    vnh: 16,
    vi: 3420,
    full: "[7,15,23,31]",
    mrope: "[16,24,24]",
    vocab: 151936,
};

/// The config of a preset, or of a `config.json` file or model folder.
pub fn load_config(model: &BenchModel) -> anyhow::Result<ModelConfig> {
    let text = match model {
        BenchModel::Preset(p) => preset_config(*p),
        BenchModel::Config(path) => {
            let p = if path.is_dir() {
                path.join("config.json")
            } else {
                path.clone()
            };
            std::fs::read_to_string(&p).map_err(|e| {
                anyhow::anyhow!(
                    "--config {}: not a preset ({}) nor a readable config ({}: {e})",
                    path.display(),
                    ShapePreset::NAMES.join(", "),
                    p.display()
                )
            })?
        }
    };
    let mut cfg = ModelConfig::from_json(&text, None)?;
    if cfg.eos_token_ids.is_empty() {
        cfg.eos_token_ids = vec![151645, 151643];
    }
    Ok(cfg)
}

/// Serves every tensor the model asks for, filled with deterministic pseudo-random values: norms ≈ 1, biases
/// small, matrices uniform with variance 1/fan_in (so activations stay in range through the depth).
struct RandomBackend {
    seed: u64,
    tied: bool,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn name_seed(seed: u64, name: &str) -> u64 {
    name.bytes()
        .fold(splitmix(seed), |h, b| splitmix(h ^ b as u64))
}

/// `n` values uniform in `center ± half_width`; value `i` depends only on `(seed, i)`, so the fill runs in
/// parallel (the 3B preset built in ≈6 s on 16 cores) and is the same on any number of threads.
fn fill(n: usize, seed: u64, center: f32, half_width: f32) -> Vec<f32> {
    use rayon::prelude::*;
    let base = splitmix(seed);
    (0..n)
        .into_par_iter()
        .map(|i| {
            let u = (splitmix(base ^ (i as u64)) >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            center + half_width * (2.0 * u - 1.0)
        })
        .collect()
}

impl SimpleBackend for RandomBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let dims = s.dims();
        let n = s.elem_count();
        let seed = name_seed(self.seed, name);
        let values = if name.contains("norm") || name.contains("ln_q") {
            fill(n, seed, 1.0, 0.1)
        } else if name.ends_with("bias") {
            fill(n, seed, 0.0, 0.05)
        } else {
            let fan_in: usize = dims[1..].iter().product::<usize>().max(1);
            fill(n, seed, 0.0, (3.0 / fan_in as f32).sqrt())
        };
        Tensor::from_vec(values, s, &Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random backend: tensor `{name}` requested without a shape")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        // Serve the legacy Hub names; an lm_head only when the config is untied.
        !name.starts_with("model.visual") && (name != "lm_head.weight" || !self.tied)
    }
}

/// Build the model of `cfg` with random weights (seeded) on `device` in `dtype`, its ops running as `ops` says.
pub fn random_model(
    cfg: ModelConfig,
    seed: u64,
    device: &Device,
    dtype: DType,
    ops: &crate::ops::OpsConfig,
) -> anyhow::Result<VlModel> {
    let vb = random_var_builder(&cfg, seed, device, dtype);
    Ok(VlModel::from_var_builder(cfg, vb, ops)?)
}

/// A var builder over random weights (seeded) for the checkpoint of `cfg`, on `device` in `dtype`.
pub(crate) fn random_var_builder(
    cfg: &ModelConfig,
    seed: u64,
    device: &Device,
    dtype: DType,
) -> VarBuilder<'static> {
    let backend = RandomBackend {
        seed,
        tied: cfg.tie_word_embeddings,
    };
    VarBuilder::from_backend(Box::new(backend), dtype, device.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flops::param_counts;

    #[test]
    fn presets_parse_with_their_real_dimensions() {
        let c = load_config(&"3b".parse().unwrap()).unwrap();
        assert_eq!(
            (
                c.text.hidden_size,
                c.text.num_hidden_layers,
                c.text.head_dim
            ),
            (2048, 36, 128)
        );
        assert!(c.tie_word_embeddings);
        let c = load_config(&"7b".parse().unwrap()).unwrap();
        assert_eq!((c.text.vocab_size, c.tie_word_embeddings), (152064, false));
        let c = load_config(&"small".parse().unwrap()).unwrap();
        assert_eq!((c.text.head_dim, c.vision.hidden_size), (64, 1280));
        let (v, l) = param_counts(&load_config(&"3b".parse().unwrap()).unwrap());
        assert!((600_000_000..750_000_000).contains(&v), "vision params {v}");
        assert!((2_900_000_000..3_300_000_000).contains(&l), "lm params {l}");
    }

    #[test]
    fn qwen3_presets_parse_with_their_real_dimensions() {
        use crate::settings::ModelFamily;
        let shape = |name: &str| {
            let c = load_config(&name.parse().unwrap()).unwrap();
            assert_eq!(c.family, ModelFamily::Qwen3Vl, "{name}");
            let t = &c.text;
            let v = &c.vision;
            (
                (
                    t.hidden_size,
                    t.num_attention_heads * t.head_dim,
                    t.num_hidden_layers,
                ),
                (v.depth, v.hidden_size, v.deepstack_visual_indexes.clone()),
                c.tie_word_embeddings,
                param_counts(&c),
            )
        };
        let (text, vision, tied, (v, l)) = shape("qwen3-2b");
        assert_eq!((text, tied), ((2048, 2048, 28), true));
        assert_eq!(vision, (24, 1024, vec![5, 11, 17]));
        assert!((350_000_000..450_000_000).contains(&v), "vision params {v}");
        assert!((1_600_000_000..1_900_000_000).contains(&l), "lm params {l}");
        let (text, _, tied, _) = shape("qwen3-4b");
        assert_eq!((text, tied), ((2560, 4096, 36), true));
        let (text, vision, tied, (v, l)) = shape("qwen3-8b");
        assert_eq!((text, tied), ((4096, 4096, 36), false));
        assert_eq!(vision, (27, 1152, vec![8, 16, 24]));
        assert!(
            (7_500_000_000..9_500_000_000).contains(&(v + l)),
            "params {}",
            v + l
        );
    }

    #[test]
    fn random_weights_are_deterministic_and_build_the_model() {
        let a = fill(8, name_seed(1, "x.weight"), 0.0, 1.0);
        assert_eq!(a, fill(8, name_seed(1, "x.weight"), 0.0, 1.0));
        assert_ne!(a, fill(8, name_seed(2, "x.weight"), 0.0, 1.0));
        let m = random_model(
            load_config(&"tiny".parse().unwrap()).unwrap(),
            7,
            &Device::Cpu,
            DType::F32,
            &crate::ops::OpsConfig::default(),
        )
        .unwrap();
        assert_eq!(m.config().text.hidden_size, 16);
    }

    #[test]
    fn real_checkpoints_get_the_cpu_estimate_and_the_test_ones_do_not() {
        use crate::cpu_estimate::MIN_PARAMS;
        use crate::model::flops::param_counts;
        for real in ["3b", "7b", "small"] {
            let (v, l) = param_counts(&load_config(&real.parse().unwrap()).unwrap());
            assert!(v + l >= MIN_PARAMS, "{real}: {}", v + l);
        }
        let tiny = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/models/tiny-b");
        let (v, l) = param_counts(&load_config(&tiny.parse().unwrap()).unwrap());
        assert!(v + l < MIN_PARAMS / 10, "tiny-b: {}", v + l);
    }

    #[test]
    fn unknown_config_is_a_clear_error() {
        let e = load_config(&"13b".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a preset"), "{e}");
    }
}
