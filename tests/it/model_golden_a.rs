//! tiny-a golden parity (f32, CPU): every vision and text stage, positions, greedy tokens and logprobs,
//! and the flat Hub-style config giving the same logits.
use crate::model_support::*;
use candle_core::Tensor;
use mobile_r1_eval::model::rope::{rope_index, RopeTokens};
use mobile_r1_eval::model::window::window_index;
use mobile_r1_eval::model::{PrefillRequest, Trace};

const TOL: f32 = 1e-4;

#[test]
fn rope_positions_and_window_index_match_golden() {
    let gold = goldens("tiny-a");
    let input = golden_input(&gold, "");
    let tok = RopeTokens {
        image_token_id: 151655,
        spatial_merge_size: 2,
    };
    let rp = rope_index(&input.input_ids, &[input.images[0].grid_thw], tok).unwrap();
    let want = i64s(g(&gold, "position_ids")); // (3, 1, S)
    let s = rp.pos.len();
    for axis in 0..3 {
        let got: Vec<i64> = rp.pos.iter().map(|p| p[axis]).collect();
        assert_eq!(got, want[axis * s..(axis + 1) * s], "axis {axis}");
    }
    assert_eq!(rp.delta(), i64s(g(&gold, "rope_deltas"))[0]);
    let wi = window_index(&[input.images[0].grid_thw], 2, 4);
    let want_wi: Vec<usize> = i64s(g(&gold, "vision.window_index"))
        .into_iter()
        .map(|x| x as usize)
        .collect();
    assert_eq!(wi.window_index, want_wi);
    let want_cu: Vec<usize> = i64s(g(&gold, "vision.cu_window_seqlens"))
        .into_iter()
        .map(|x| x as usize)
        .collect();
    let mut dedup = want_cu.clone();
    dedup.dedup();
    assert_eq!(wi.cu_window_seqlens, dedup);
}

#[test]
fn every_stage_matches_golden() {
    let gold = goldens("tiny-a");
    for (variant, model) in model_variants("tiny-a", false) {
        eprintln!("ops: {variant}");
        let input = golden_input(&gold, "");
        let mut trace = Trace::default();
        let (caches, logits) = model
            .prefill_traced(&[PrefillRequest::new(&input)], Some(&mut trace))
            .unwrap();
        assert_close(
            "vision.patch_embed",
            trace.vision.patch_embed.as_ref().unwrap(),
            g(&gold, "vision.patch_embed"),
            TOL,
        );
        assert_eq!(trace.vision.blocks.len(), 4);
        for (i, b) in trace.vision.blocks.iter().enumerate() {
            assert_close(
                &format!("vision.block{i}"),
                b,
                g(&gold, &format!("vision.block{i}")),
                TOL,
            );
        }
        assert_close(
            "vision.merged",
            trace.vision_merged.as_ref().unwrap(),
            g(&gold, "vision.merged"),
            TOL,
        );
        assert_close(
            "text.inputs_embeds",
            trace.inputs_embeds.as_ref().unwrap(),
            g(&gold, "text.inputs_embeds"),
            TOL,
        );
        for (i, l) in trace.text_layers.iter().enumerate() {
            assert_close(
                &format!("text.layer{i}"),
                l,
                g(&gold, &format!("text.layer{i}")),
                TOL,
            );
        }
        assert_close(
            "text.final_norm",
            trace.final_norm.as_ref().unwrap(),
            g(&gold, "text.final_norm"),
            TOL,
        );
        assert_close(
            "text.logits_last",
            &logits,
            g(&gold, "text.logits_last"),
            TOL,
        );
        assert_eq!(caches[0].len(), 153);
        assert_eq!(caches[0].next_position(), 41);
    }
}

#[test]
fn greedy_tokens_and_logprobs_match_golden() {
    let gold = goldens("tiny-a");
    for (variant, model) in model_variants("tiny-a", false) {
        eprintln!("ops: {variant}");
        let input = golden_input(&gold, "");
        let (max_new, top_k) = (8, 5);
        let out = greedy(&model, &[&input], max_new, top_k);
        assert_eq!(out[0].token_ids, ids(g(&gold, "gen.ids")));
        assert_eq!(out[0].prompt_tokens, 153);
        let want_ids = ids(g(&gold, "gen.step_top5_ids"));
        let want_lp = g(&gold, "gen.step_top5_logprobs")
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut worst = 0f32;
        for (step, top) in out[0].top_logprobs.iter().enumerate() {
            for (j, &(id, lp)) in top.iter().enumerate() {
                assert_eq!(id, want_ids[step * 5 + j], "step {step} rank {j}");
                worst = worst.max((lp - want_lp[step * 5 + j]).abs());
            }
        }
        eprintln!("parity tiny-a top5 logprobs: max abs diff {worst:.3e}");
        assert!(worst < TOL);
    }
}

#[test]
fn hub_style_config_gives_same_logits() {
    let gold = goldens("tiny-a");
    let src = fixture("models/tiny-a");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name == "config.json" || name == "config.hub-style.json" {
            continue;
        }
        std::fs::copy(&p, dir.path().join(&name)).unwrap();
    }
    std::fs::copy(
        src.join("config.hub-style.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let files = mobile_r1_eval::model::ModelFiles::from_dir(dir.path()).unwrap();
    let hub = mobile_r1_eval::model::VlModel::load(
        &files,
        &candle_core::Device::Cpu,
        candle_core::DType::F32,
        &mobile_r1_eval::ops::OpsConfig::default(),
    )
    .unwrap();
    let nested = load_model("tiny-a");
    assert_eq!(hub.config(), nested.config());
    let input = golden_input(&gold, "");
    let req = [PrefillRequest::new(&input)];
    let (_, a) = hub.prefill(&req).unwrap();
    let (_, b) = nested.prefill(&req).unwrap();
    let d = max_abs(&a, &b);
    assert_eq!(d, 0.0, "hub-style vs nested config logits differ by {d}");
    assert_close(
        "text.logits_last (hub config)",
        &a,
        g(&gold, "text.logits_last"),
        TOL,
    );
    let _ = Tensor::zeros(1, candle_core::DType::F32, &candle_core::Device::Cpu);
}
