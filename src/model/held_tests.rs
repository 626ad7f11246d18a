//! The vision towers with their linear layers' weights held in the ops' tile layout give the bits of the same
//! towers reading the weights in place, for both families (random weights, bf16 on the CPU).

use candle_core::{DType, Device, Tensor};

use super::{ModelConfig, VisionTower};
use crate::ops::{Ops, OpsConfig};

/// A tiny config of each family: Qwen2.5-VL (windows and full attention, the SwiGLU MLP) and Qwen3-VL (the GELU
/// MLP, DeepStack mergers); odd-sized layers (an intermediate size of 40: partial weight tiles and pairs).
const CONFIGS: [&str; 2] = [
    r#"{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
  "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 1000, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
  "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}, "tie_word_embeddings": true,
  "vision_config": {"depth": 2, "fullatt_block_indexes": [1], "hidden_size": 48, "intermediate_size": 40,
    "num_heads": 2, "out_hidden_size": 32, "patch_size": 14, "spatial_merge_size": 2,
    "temporal_patch_size": 2, "window_size": 56}}"#,
    r#"{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
  "tie_word_embeddings": true, "text_config": {"hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 1000, "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default",
    "mrope_section": [4, 2, 2], "rope_theta": 5000000.0}},
  "vision_config": {"depth": 2, "hidden_size": 48, "intermediate_size": 40, "num_heads": 2, "patch_size": 16,
    "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 32, "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0]}}"#,
];

#[test]
fn held_weights_give_the_towers_bits() {
    let dev = Device::Cpu;
    let ops = Ops::new(&OpsConfig::default(), &dev, DType::BF16).unwrap();
    let probe = Tensor::zeros((32, 32), DType::BF16, &dev).unwrap();
    if ops.hold_weight(&probe, false).unwrap().is_none() {
        eprintln!("skipped: the ops hold no weights here (no AMX, or another bf16 GEMM chosen)");
        return;
    }
    for config in CONFIGS {
        let cfg = ModelConfig::from_json(config, None).unwrap();
        let vb = crate::bench::random::random_var_builder(&cfg, 5, &dev, DType::BF16);
        let tower = || VisionTower::new(cfg.family, &cfg.vision, vb.pp("visual")).unwrap();
        let (in_place, mut held) = (tower(), tower());
        held.hold_weights(&ops).unwrap();
        // Two images: 8 × 12 and 4 × 4 patches (several windows, partial row tiles).
        let grids = [[1, 8, 12], [1, 4, 4]];
        let patches: usize = grids.iter().map(|g| g.iter().product::<usize>()).sum();
        let pixels = Tensor::rand(-1f32, 1., (patches, cfg.vision.patch_dim()), &dev)
            .and_then(|t| t.to_dtype(DType::BF16))
            .unwrap();
        let bits = |t: &Tensor| {
            let v = t.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
            v.to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        };
        let (a, b) = (
            in_place.forward(&ops, &pixels, &grids, None).unwrap(),
            held.forward(&ops, &pixels, &grids, None).unwrap(),
        );
        assert_eq!(bits(&a.merged), bits(&b.merged), "{:?}", cfg.family);
        assert_eq!(a.deepstack.len(), b.deepstack.len());
        for (x, y) in a.deepstack.iter().zip(&b.deepstack) {
            assert_eq!(bits(x), bits(y), "{:?} DeepStack", cfg.family);
        }
    }
}
