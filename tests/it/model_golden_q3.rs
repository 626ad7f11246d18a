//! Qwen3-VL golden parity (f32, CPU) on `qwen3-tiny-a` (tied, DeepStack [1,3]) and `qwen3-tiny-b` (untied,
//! DeepStack [0,2]) against transformers 5.24: position-embedding taps, every vision and text stage, rope
//! positions, the last logits, 16 greedy tokens with their top-5 log-probabilities, packed batches against single
//! runs, a cached text prefix, and the image preprocessing (factor 32, the 65536-pixel minimum).

use std::collections::HashMap;

use candle_core::Tensor;
use mobile_r1_eval::model::qwen3_vl::pos_embed::position_taps;
use mobile_r1_eval::model::rope::{rope_index, RopeTokens};
use mobile_r1_eval::model::{PrefillRequest, Trace, VlModel};
use mobile_r1_eval::preprocess::{
    load_and_prepare, ImageProcessorConfig, ModelInput, PreparedImage,
};

use crate::model_support::*;

const TOL: f32 = 1e-4;
const MODELS: [&str; 2] = ["qwen3-tiny-a", "qwen3-tiny-b"];
const CASES: [&str; 4] = ["p0.", "p1.", "p2.", "p3."];

/// The golden model input of case `p` (images split from the concatenated pixel rows by their grids).
fn input(gold: &HashMap<String, Tensor>, p: &str) -> ModelInput {
    let input_ids = ids(g(gold, &format!("{p}input_ids")));
    let Some(px) = gold.get(&format!("{p}pixel_values")) else {
        return ModelInput {
            input_ids,
            images: Vec::new(),
        };
    };
    let grids = ids(g(gold, &format!("{p}image_grid_thw")));
    let px = px.to_vec2::<f32>().unwrap();
    let mut rows = px.into_iter();
    let images = grids
        .chunks(3)
        .map(|c| {
            let grid_thw = [c[0] as usize, c[1] as usize, c[2] as usize];
            let n = grid_thw.iter().product();
            let (w, h) = ((grid_thw[2] * 16) as u32, (grid_thw[1] * 16) as u32);
            PreparedImage {
                patches: rows.by_ref().take(n).flatten().collect(),
                grid_thw,
                resized_wh: [w, h],
                original_wh: [w, h],
            }
        })
        .collect();
    ModelInput { input_ids, images }
}

fn grids(input: &ModelInput) -> Vec<[usize; 3]> {
    input.images.iter().map(|i| i.grid_thw).collect()
}

/// Our last-position logits at the golden top-64 indices against the golden values (and the full row for p0).
fn check_logits(gold: &HashMap<String, Tensor>, p: &str, logits: &Tensor) {
    let row = logits.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let idx = ids(g(gold, &format!("{p}text.logits_last_top64_indices")));
    let want = g(gold, &format!("{p}text.logits_last_top64_values"))
        .to_vec1::<f32>()
        .unwrap();
    let worst = idx
        .iter()
        .zip(&want)
        .map(|(&i, w)| (row[i as usize] - w).abs())
        .fold(0f32, f32::max);
    eprintln!("parity {p}logits top64: max abs diff {worst:.3e}");
    assert!(worst < TOL, "{p}logits: {worst}");
    if let Some(full) = gold.get(&format!("{p}text.logits_last")) {
        assert_close(&format!("{p}logits"), logits, full, TOL);
    }
}

/// Every traced stage of case `p` against the goldens.
fn check_stages(gold: &HashMap<String, Tensor>, p: &str, trace: &Trace) {
    let close = |name: &str, t: &Tensor| {
        assert_close(
            &format!("{p}{name}"),
            t,
            g(gold, &format!("{p}{name}")),
            TOL,
        );
    };
    if gold.contains_key(&format!("{p}pixel_values")) {
        close(
            "vision.patch_embed",
            trace.vision.patch_embed.as_ref().unwrap(),
        );
        close(
            "vision.pos_embed_interp",
            trace.vision.pos_embed.as_ref().unwrap(),
        );
        for (i, b) in trace.vision.blocks.iter().enumerate() {
            close(&format!("vision.block{i}"), b);
        }
        for (j, d) in trace.deepstack.iter().enumerate() {
            close(&format!("vision.deepstack{j}"), d);
        }
        close("vision.merged", trace.vision_merged.as_ref().unwrap());
    }
    close("text.inputs_embeds", trace.inputs_embeds.as_ref().unwrap());
    // The traced layer output is the next layer's input: after the DeepStack addition.
    for (i, l) in trace.text_layers.iter().enumerate() {
        close(&format!("text.layer{i}.after_deepstack"), l);
    }
    close("text.final_norm", trace.final_norm.as_ref().unwrap());
}

#[test]
fn position_taps_and_rope_positions_match_golden() {
    for name in MODELS {
        let gold = goldens(name);
        let m = load_model(name);
        let side = m.config().vision.position_grid_side();
        for p in CASES {
            let input = input(&gold, p);
            if !input.images.is_empty() {
                let taps = position_taps(&grids(&input), side, 2);
                let want_idx = i64s(g(&gold, &format!("{p}vision.pos_interp_indices")));
                let want_w = g(&gold, &format!("{p}vision.pos_interp_weights"))
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap();
                for k in 0..taps.index[0].len() {
                    for t in 0..4 {
                        assert_eq!(
                            taps.index[t][k] as i64,
                            want_idx[k * 4 + t],
                            "{name} {p} patch {k}"
                        );
                        let d = (taps.weight[t][k] - want_w[k * 4 + t]).abs();
                        assert!(d < 1e-6, "{name} {p} patch {k} tap {t}: {d}");
                    }
                }
            }
            let tok = RopeTokens {
                image_token_id: m.config().image_token_id,
                spatial_merge_size: 2,
            };
            let rp = rope_index(&input.input_ids, &grids(&input), tok).unwrap();
            let want = i64s(g(&gold, &format!("{p}position_ids")));
            let s = rp.pos.len();
            for axis in 0..3 {
                let got: Vec<i64> = rp.pos.iter().map(|q| q[axis]).collect();
                assert_eq!(
                    got,
                    want[axis * s..(axis + 1) * s],
                    "{name} {p} axis {axis}"
                );
            }
            assert_eq!(
                rp.delta(),
                i64s(g(&gold, &format!("{p}rope_deltas")))[0],
                "{name} {p}"
            );
        }
    }
}

#[test]
fn every_stage_and_the_logits_match_golden() {
    for name in MODELS {
        let gold = goldens(name);
        for (variant, model) in model_variants(name, false) {
            eprintln!("{name}, ops: {variant}");
            for p in CASES {
                let input = input(&gold, p);
                let mut trace = Trace::default();
                let (caches, logits) = model
                    .prefill_traced(&[PrefillRequest::new(&input)], Some(&mut trace))
                    .unwrap();
                check_stages(&gold, p, &trace);
                check_logits(&gold, p, &logits);
                let max = i64s(g(&gold, &format!("{p}position_ids")))
                    .into_iter()
                    .max()
                    .unwrap();
                assert_eq!(caches[0].next_position(), max + 1);
            }
        }
    }
}

/// Our greedy generations of `inputs` against the golden ids and top-5 log-probs of cases `cases`.
fn check_greedy(model: &VlModel, gold: &HashMap<String, Tensor>, cases: &[&str], what: &str) {
    let inputs: Vec<ModelInput> = cases.iter().map(|p| input(gold, p)).collect();
    let refs: Vec<&ModelInput> = inputs.iter().collect();
    let out = greedy(model, &refs, 16, 5);
    for (p, o) in cases.iter().zip(&out) {
        assert_eq!(
            o.token_ids,
            ids(g(gold, &format!("{p}gen.ids"))),
            "{what} {p}"
        );
        let want_ids = ids(g(gold, &format!("{p}gen.step_top5_ids")));
        let want_lp = g(gold, &format!("{p}gen.step_top5_logprobs"))
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut worst = 0f32;
        for (step, top) in o.top_logprobs.iter().enumerate() {
            for (j, &(id, lp)) in top.iter().enumerate() {
                assert_eq!(
                    id,
                    want_ids[step * 5 + j],
                    "{what} {p} step {step} rank {j}"
                );
                worst = worst.max((lp - want_lp[step * 5 + j]).abs());
            }
        }
        eprintln!("parity {what} {p} top5 logprobs: max abs diff {worst:.3e}");
        assert!(worst < TOL, "{what} {p}: {worst}");
    }
}

#[test]
fn greedy_tokens_and_logprobs_match_golden_alone_and_batched() {
    for name in MODELS {
        let gold = goldens(name);
        for (variant, model) in model_variants(name, true) {
            for p in CASES {
                check_greedy(&model, &gold, &[p], &format!("{name} {variant} alone"));
            }
            check_greedy(&model, &gold, &CASES, &format!("{name} {variant} batched"));
        }
        // transformers' left-padded batch of p0, p1, p3 generated the same tokens.
        let batch = ids(g(&gold, "batch.gen.ids"));
        for (row, p) in ["p0.", "p1.", "p3."].iter().enumerate() {
            assert_eq!(
                batch[row * 16..(row + 1) * 16],
                ids(g(&gold, &format!("{p}gen.ids")))
            );
        }
    }
}

#[test]
fn packed_prefill_and_decode_equal_single_runs_bit_for_bit() {
    for name in MODELS {
        let gold = goldens(name);
        let model = load_model(name);
        let inputs: Vec<ModelInput> = CASES.iter().map(|p| input(&gold, p)).collect();
        let reqs: Vec<PrefillRequest<'_>> = inputs.iter().map(PrefillRequest::new).collect();
        let (mut packed, logits) = model.prefill(&reqs).unwrap();
        let next: Vec<u32> = (0..inputs.len() as u32).map(|i| 1000 + i).collect();
        let mut refs: Vec<&mut _> = packed.iter_mut().collect();
        let step = model.decode(&next, &mut refs).unwrap();
        for (i, r) in reqs.iter().enumerate() {
            let (mut alone, l) = model.prefill(std::slice::from_ref(r)).unwrap();
            assert_eq!(
                max_abs(&l.get(0).unwrap(), &logits.get(i).unwrap()),
                0.0,
                "{name} prefill {i}"
            );
            let d = model.decode(&next[i..=i], &mut [&mut alone[0]]).unwrap();
            assert_eq!(
                max_abs(&d.get(0).unwrap(), &step.get(i).unwrap()),
                0.0,
                "{name} decode {i}"
            );
        }
    }
}

#[test]
fn a_cached_text_prefix_continues_like_the_full_prompt() {
    for name in MODELS {
        let gold = goldens(name);
        let model = load_model(name);
        for p in ["p0.", "p2.", "p3."] {
            let input = input(&gold, p);
            // The prefix ends before the first picture (the template's `<|im_start|>user\n`), or halfway.
            let cut = input
                .input_ids
                .iter()
                .position(|&t| t == model.config().vision_start_token_id)
                .unwrap_or(input.input_ids.len() / 2);
            let prefix = model.prefill_prefix(&input.input_ids[..cut]).unwrap();
            let req = PrefillRequest {
                input: &input,
                prefix: Some(&prefix),
            };
            let (_, logits) = model.prefill(&[req]).unwrap();
            check_logits(&gold, p, &logits);
        }
    }
}

#[test]
fn preprocessing_matches_the_qwen3_goldens() {
    let meta = golden_meta("qwen3-preprocess");
    let gold = goldens("qwen3-preprocess");
    let base = ImageProcessorConfig::from_model_dir(&fixture("models/qwen3-tiny-a")).unwrap();
    assert_eq!((base.factor(), base.patch_dim()), (32, 1536));
    for (case, c) in meta["cases"].as_object().unwrap() {
        let (min, max) = (
            c["min_pixels"].as_u64().unwrap(),
            c["max_pixels"].as_u64().unwrap(),
        );
        let cfg = base.clone().with_pixel_bounds(min, max);
        let img = load_and_prepare(&fixture(c["image"].as_str().unwrap()), &cfg).unwrap();
        let grid = i64s(g(&gold, &format!("{case}.image_grid_thw")));
        assert_eq!(img.grid_thw.map(|x| x as i64).to_vec(), grid, "{case}");
        let hw = i64s(g(&gold, &format!("{case}.resized_hw")));
        assert_eq!(
            [img.resized_wh[1] as i64, img.resized_wh[0] as i64].to_vec(),
            hw,
            "{case}"
        );
        let full = format!("{case}.pixel_values");
        let (ours, want) = match gold.get(&full) {
            Some(t) => (
                img.patches.clone(),
                t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            ),
            None => {
                let head = g(&gold, &format!("{case}.pixel_values.head8"));
                let want = head.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                (img.patches[..want.len()].to_vec(), want)
            }
        };
        assert_eq!(ours.len(), want.len(), "{case}");
        let worst = ours
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("parity {case}: max abs diff {worst:.3e}");
        assert!(worst < 1e-6, "{case}: {worst}");
    }
}

#[test]
fn the_hub_style_config_reads_as_the_nested_one() {
    use mobile_r1_eval::model::ModelConfig;
    for name in MODELS {
        let dir = fixture(&format!("models/{name}"));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        let nested = ModelConfig::from_json(&read("config.json"), None).unwrap();
        let hub = ModelConfig::from_json(&read("config.hub-style.json"), None).unwrap();
        assert_eq!(hub, nested, "{name}");
        assert_eq!(nested.text.rope_theta, 5e6, "{name}");
        assert!(
            nested.text.mrope_interleaved && nested.text.qk_norm,
            "{name}"
        );
    }
}
