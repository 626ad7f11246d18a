//! Qwen3-VL on a tiny random-weight model: packing several prompts (with pictures of different sizes, or none)
//! gives each the results it gets alone, decode likewise, and a cached text prefix continues like a full prefill.

use candle_core::{DType, Device, Tensor};

use crate::model::{ModelConfig, PrefillRequest, Trace, VlModel};
use crate::preprocess::{prepare_rgb8, ImageProcessorConfig, ModelInput};

const CONFIG: &str = r#"{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
  "tie_word_embeddings": true, "image_token_id": 151655, "vision_start_token_id": 151652,
  "text_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 151936,
    "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "mrope_section": [4, 2, 2],
    "rope_theta": 5000000.0}},
  "vision_config": {"depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
    "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 32, "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0, 2]}}"#;

fn model() -> VlModel {
    let cfg = ModelConfig::from_json(CONFIG, None).unwrap();
    crate::bench::random::random_model(
        cfg,
        11,
        &Device::Cpu,
        DType::F32,
        &crate::ops::OpsConfig::default(),
    )
    .unwrap()
}

/// A prompt of `text` tokens, then a `w × h` picture (when given), then three more tokens.
fn prompt(m: &VlModel, text: u32, picture: Option<(u32, u32)>) -> ModelInput {
    let c = m.config();
    let mut ids: Vec<u32> = (0..text).map(|t| 300 + 17 * t).collect();
    let mut images = Vec::new();
    if let Some((w, h)) = picture {
        let cfg = ImageProcessorConfig {
            patch_size: 16,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ..ImageProcessorConfig::default()
        }
        .with_pixel_bounds(4096, 40_000);
        let img =
            image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 5) as u8, (y * 3) as u8, 77]));
        let img = prepare_rgb8(&img, &cfg).unwrap();
        ids.push(c.vision_start_token_id);
        ids.extend(std::iter::repeat_n(c.image_token_id, img.n_tokens()));
        images.push(img);
    }
    ids.extend([151653, 872, 198]);
    ModelInput {
        input_ids: ids,
        images,
    }
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2::<f32>().unwrap()
}

#[test]
fn packed_prefill_and_decode_give_each_sequence_its_own_results() {
    let m = model();
    let inputs = [
        prompt(&m, 5, Some((70, 90))),
        prompt(&m, 9, None),
        prompt(&m, 3, Some((130, 64))),
    ];
    let reqs: Vec<PrefillRequest<'_>> = inputs.iter().map(PrefillRequest::new).collect();
    let mut trace = Trace::default();
    let (mut packed, logits) = m.prefill_traced(&reqs, Some(&mut trace)).unwrap();
    assert_eq!(trace.deepstack.len(), 2);
    let tokens: usize = inputs
        .iter()
        .map(|i| i.images.iter().map(|im| im.n_tokens()).sum::<usize>())
        .sum();
    assert_eq!(trace.deepstack[0].dims(), [tokens, 32]);
    let packed_rows = rows(&logits);
    let next = [5u32, 6, 7];
    let mut refs: Vec<&mut _> = packed.iter_mut().collect();
    let step = rows(&m.decode(&next, &mut refs).unwrap());
    for (i, r) in reqs.iter().enumerate() {
        let (mut alone, l) = m.prefill(std::slice::from_ref(r)).unwrap();
        assert_eq!(rows(&l)[0], packed_rows[i], "prefill of sequence {i}");
        let d = m.decode(&next[i..=i], &mut [&mut alone[0]]).unwrap();
        assert_eq!(rows(&d)[0], step[i], "decode of sequence {i}");
    }
}

#[test]
fn deepstack_features_are_added_to_the_image_rows_after_the_first_layers() {
    let m = model();
    // The same weights (they are seeded by name) without DeepStack taps.
    let plain_cfg = ModelConfig::from_json(&CONFIG.replace("[0, 2]", "[]"), None).unwrap();
    let plain = crate::bench::random::random_model(
        plain_cfg,
        11,
        &Device::Cpu,
        DType::F32,
        &crate::ops::OpsConfig::default(),
    )
    .unwrap();
    let input = prompt(&m, 4, Some((64, 64)));
    let run = |model: &VlModel| {
        let mut trace = Trace::default();
        model
            .prefill_traced(&[PrefillRequest::new(&input)], Some(&mut trace))
            .unwrap();
        trace
    };
    let (with, without) = (run(&m), run(&plain));
    assert_eq!((with.deepstack.len(), without.deepstack.len()), (2, 0));
    assert_eq!(with.vision.blocks.len(), 3);
    assert_eq!(
        with.vision.pos_embed.as_ref().unwrap().dims(),
        with.vision.blocks[0].dims()
    );
    let image: Vec<usize> = (0..input.input_ids.len())
        .filter(|&i| input.input_ids[i] == m.config().image_token_id)
        .collect();
    let ds0 = rows(&with.deepstack[0]);
    let (a, b) = (rows(&with.text_layers[0]), rows(&without.text_layers[0]));
    for (r, (ra, rb)) in a.iter().zip(&b).enumerate() {
        match image.iter().position(|&i| i == r) {
            Some(k) => {
                for ((x, y), d) in ra.iter().zip(rb).zip(&ds0[k]) {
                    assert!((x - y - d).abs() < 1e-5, "row {r}: {x} - {y} != {d}");
                }
            }
            None => assert_eq!(ra, rb, "text row {r}"),
        }
    }
    assert!(ds0[0].iter().any(|v| v.abs() > 1e-3));
}

#[test]
fn a_cached_text_prefix_continues_like_a_full_prefill() {
    let m = model();
    let input = prompt(&m, 12, Some((96, 80)));
    let prefix = m.prefill_prefix(&input.input_ids[..8]).unwrap();
    let (_, full) = m.prefill(&[PrefillRequest::new(&input)]).unwrap();
    let req = PrefillRequest {
        input: &input,
        prefix: Some(&prefix),
    };
    let (caches, cont) = m.prefill(&[req]).unwrap();
    assert_eq!(caches[0].len(), input.input_ids.len());
    let (a, b) = (rows(&full), rows(&cont));
    let worst = a[0]
        .iter()
        .zip(&b[0])
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "max abs diff {worst}");
}
