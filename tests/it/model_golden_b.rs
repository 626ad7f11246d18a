//! tiny-b golden parity (untied lm_head, flat Hub config, new tensor names) for three prompts with different
//! image sizes, and batch-vs-single equality of prefill, decode and greedy generation.
use crate::model_support::*;
use mobile_r1_eval::model::{PrefillRequest, SeqCache, Trace};
use mobile_r1_eval::preprocess::ModelInput;

const TOL: f32 = 1e-4;
const CASES: [&str; 3] = ["p0.", "p1.", "p2."];

#[test]
fn each_prompt_matches_golden_stages() {
    let gold = goldens("tiny-b");
    for (variant, model) in model_variants("tiny-b", false) {
        eprintln!("ops: {variant}");
        for p in CASES {
            let input = golden_input(&gold, p);
            let mut trace = Trace::default();
            let (_, logits) = model
                .prefill_traced(&[PrefillRequest::new(&input)], Some(&mut trace))
                .unwrap();
            let s = input.input_ids.len();
            let want = i64s(g(&gold, &format!("{p}position_ids")));
            for axis in 0..3 {
                let got: Vec<i64> = trace.positions[0].iter().map(|q| q[axis]).collect();
                assert_eq!(got, want[axis * s..(axis + 1) * s], "{p} axis {axis}");
            }
            assert_close(
                &format!("{p}vision.patch_embed"),
                trace.vision.patch_embed.as_ref().unwrap(),
                g(&gold, &format!("{p}vision.patch_embed")),
                TOL,
            );
            for (i, b) in trace.vision.blocks.iter().enumerate() {
                assert_close(
                    &format!("{p}vision.block{i}"),
                    b,
                    g(&gold, &format!("{p}vision.block{i}")),
                    TOL,
                );
            }
            assert_close(
                &format!("{p}vision.merged"),
                trace.vision_merged.as_ref().unwrap(),
                g(&gold, &format!("{p}vision.merged")),
                TOL,
            );
            for (i, l) in trace.text_layers.iter().enumerate() {
                assert_close(
                    &format!("{p}text.layer{i}"),
                    l,
                    g(&gold, &format!("{p}text.layer{i}")),
                    TOL,
                );
            }
            assert_close(
                &format!("{p}text.logits_last"),
                &logits,
                g(&gold, &format!("{p}text.logits_last")),
                TOL,
            );
        }
    }
}

fn inputs() -> Vec<ModelInput> {
    let gold = goldens("tiny-b");
    CASES.iter().map(|p| golden_input(&gold, p)).collect()
}

#[test]
fn greedy_ids_and_top5_match_golden_alone_and_batched() {
    let gold = goldens("tiny-b");
    for (variant, model) in model_variants("tiny-b", false) {
        eprintln!("ops: {variant}");
        let inputs = inputs();
        let (max_new, top_k) = (10, 5);
        let refs: Vec<&ModelInput> = inputs.iter().collect();
        let batched = greedy(&model, &refs, max_new, top_k);
        for (i, p) in CASES.iter().enumerate() {
            let alone = greedy(&model, &[&inputs[i]], max_new, top_k).remove(0);
            assert_eq!(
                alone.token_ids,
                ids(g(&gold, &format!("{p}gen.ids"))),
                "{p} alone"
            );
            assert_eq!(batched[i].token_ids, alone.token_ids, "{p} batched");
            let want_ids = ids(g(&gold, &format!("{p}gen.step_top5_ids")));
            let want_lp = g(&gold, &format!("{p}gen.step_top5_logprobs"))
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let mut worst = 0f32;
            let mut worst_batch = 0f32;
            for (step, top) in alone.top_logprobs.iter().enumerate() {
                for (j, &(id, lp)) in top.iter().enumerate() {
                    assert_eq!(id, want_ids[step * 5 + j], "{p} step {step} rank {j}");
                    worst = worst.max((lp - want_lp[step * 5 + j]).abs());
                    let (bid, blp) = batched[i].top_logprobs[step][j];
                    assert_eq!(bid, id);
                    worst_batch = worst_batch.max((blp - lp).abs());
                }
            }
            eprintln!(
            "parity {p} top5 logprobs: {worst:.3e} vs golden, {worst_batch:.3e} batched vs alone"
        );
            // Bit for bit on the fused paths; the composed references batch the vision windows of all images of
            // a call padded to the widest, so their sums may differ in the last bits.
            let batch_tol = if variant == "composed" { TOL } else { 0.0 };
            assert!(
                worst < TOL && worst_batch <= batch_tol,
                "{variant}: {worst} {worst_batch}"
            );
        }
    }
}

#[test]
fn batched_prefill_and_ragged_decode_equal_single() {
    for (variant, model) in model_variants("tiny-b", true) {
        eprintln!("ops: {variant}");
        let inputs = inputs();
        let reqs: Vec<PrefillRequest<'_>> = inputs.iter().map(PrefillRequest::new).collect();
        let (mut bc, bl) = model.prefill(&reqs).unwrap();
        let mut singles: Vec<(SeqCache, candle_core::Tensor)> = reqs
            .iter()
            .map(|r| {
                let (mut c, l) = model.prefill(&[*r]).unwrap();
                (c.remove(0), l)
            })
            .collect();
        // Bit for bit, with OpenBLAS or the `gemm` crate (src/ops/gemm/rows.rs).
        for (i, (_, l)) in singles.iter().enumerate() {
            assert_eq!(max_abs(&bl.narrow(0, i, 1).unwrap(), l), 0.0, "prefill {i}");
        }
        // Decode the three (different-length) sequences together, and the middle one alone.
        let toks = [11u32, 22, 33];
        let mut refs: Vec<&mut SeqCache> = bc.iter_mut().collect();
        let bd = model.decode(&toks, &mut refs).unwrap();
        for (i, (c, _)) in singles.iter_mut().enumerate() {
            let sd = model.decode(&[toks[i]], &mut [c]).unwrap();
            let d = max_abs(&bd.narrow(0, i, 1).unwrap(), &sd);
            assert_eq!(d, 0.0, "decode {i}");
            assert_eq!(c.len(), bc[i].len());
        }
    }
}

#[test]
fn prefix_cache_continuation_equals_full_prefill() {
    let model = load_model("tiny-b");
    let inputs = inputs();
    // The system prompt part (first 14 tokens: up to "<|im_start|>user\n") is shared text.
    let prefix = model.prefill_prefix(&inputs[0].input_ids[..14]).unwrap();
    let reqs: Vec<PrefillRequest<'_>> = inputs
        .iter()
        .map(|i| PrefillRequest {
            input: i,
            prefix: Some(&prefix),
        })
        .collect();
    let (mut with, lw) = model.prefill(&reqs).unwrap();
    let full: Vec<PrefillRequest<'_>> = inputs.iter().map(PrefillRequest::new).collect();
    let (mut without, lf) = model.prefill(&full).unwrap();
    let d = max_abs(&lw, &lf);
    eprintln!("prefix-cache vs full prefill logits: {d:.3e}");
    // Same math, other f32 summation order (the prefix's K/V come from their own prefill): ~1e-5 on logits of
    // this checkpoint's scale.
    assert!(d <= 3e-5);
    assert_eq!(prefix.len(), 14, "the shared prefix must be untouched");
    let mut a: Vec<&mut SeqCache> = with.iter_mut().collect();
    let mut b: Vec<&mut SeqCache> = without.iter_mut().collect();
    let da = model.decode(&[5, 6, 7], &mut a).unwrap();
    let db = model.decode(&[5, 6, 7], &mut b).unwrap();
    assert!(max_abs(&da, &db) <= 1e-5);
}

#[test]
fn cloned_cache_is_copy_on_write() {
    let model = load_model("tiny-b");
    let inputs = inputs();
    let (mut c, _) = model.prefill(&[PrefillRequest::new(&inputs[1])]).unwrap();
    let mut a = c.remove(0);
    let mut b = a.clone();
    let la = model.decode(&[100], &mut [&mut a]).unwrap();
    let lb = model.decode(&[100], &mut [&mut b]).unwrap();
    assert_eq!(max_abs(&la, &lb), 0.0);
    let la2 = model.decode(&[7], &mut [&mut a]).unwrap();
    let lb2 = model.decode(&[8], &mut [&mut b]).unwrap();
    let la3 = model.decode(&[9], &mut [&mut a]).unwrap();
    let mut fresh = model
        .prefill(&[PrefillRequest::new(&inputs[1])])
        .unwrap()
        .0
        .remove(0);
    model.decode(&[100], &mut [&mut fresh]).unwrap();
    assert_eq!(
        max_abs(&la2, &model.decode(&[7], &mut [&mut fresh]).unwrap()),
        0.0
    );
    assert_eq!(
        max_abs(&la3, &model.decode(&[9], &mut [&mut fresh]).unwrap()),
        0.0
    );
    let _ = lb2;
}

#[test]
fn padded_and_fused_decode_equal_per_sequence_decode() {
    use mobile_r1_eval::records::DecodeAttention;
    let gold = goldens("tiny-b");
    let mut model = load_model("tiny-b");
    let inputs = inputs();
    let reqs: Vec<PrefillRequest<'_>> = inputs.iter().map(PrefillRequest::new).collect();
    let (mut a, _) = model.prefill(&reqs).unwrap();
    let (mut b, mut c) = (a.clone(), a.clone());
    // Give one cache spare capacity so both the view and the zero-padding branch run.
    for caches in [&mut a, &mut b, &mut c] {
        caches[1].reserve(200).unwrap();
    }
    for (step, toks) in [[3u32, 4, 5], [6, 7, 8], [9, 10, 11]].iter().enumerate() {
        model.set_decode_attention(DecodeAttention::PerSequence);
        let la = model
            .decode(toks, &mut a.iter_mut().collect::<Vec<_>>())
            .unwrap();
        model.set_decode_attention(DecodeAttention::Padded);
        let lb = model
            .decode(toks, &mut b.iter_mut().collect::<Vec<_>>())
            .unwrap();
        let d = max_abs(&la, &lb);
        eprintln!("padded vs per-sequence decode, step {step}: {d:.3e}");
        assert!(d <= 1e-5);
        model.set_decode_attention(DecodeAttention::Fused);
        assert_eq!(model.decode_attention(), DecodeAttention::Fused);
        let lc = model
            .decode(toks, &mut c.iter_mut().collect::<Vec<_>>())
            .unwrap();
        let d = max_abs(&la, &lc);
        eprintln!("fused vs per-sequence decode, step {step}: {d:.3e}");
        // The fused path scales the queries before the scores and sums in its own order: float rounding, carried
        // into the next steps through the caches.
        assert!(d <= 5e-5);
    }
    let refs: Vec<&ModelInput> = inputs.iter().collect();
    let out = greedy(&model, &refs, 10, 0);
    for (i, p) in CASES.iter().enumerate() {
        assert_eq!(
            out[i].token_ids,
            ids(g(&gold, &format!("{p}gen.ids"))),
            "{p} padded"
        );
    }
}

/// The engine's continuous batcher (what `eval` runs) gives transformers' greedy ids: two sequences at a time, so
/// the third prompt is prefilled while the first two decode or after they leave, with the three prompts' common
/// text prefix computed once and shared from the prefix cache.
#[test]
fn continuous_batcher_matches_golden_greedy_ids() {
    use mobile_r1_eval::engine::{Engine, Generation, Request, Requests};
    use mobile_r1_eval::records::PhaseStats;
    use mobile_r1_eval::settings::BatchLimits;
    let gold = goldens("tiny-b");
    let model = load_model("tiny-b");
    let inputs = inputs();
    let image_token = model.config().image_token_id;
    let shared = (0..inputs[0].input_ids.len())
        .take_while(|&i| {
            let t = inputs[0].input_ids[i];
            t != image_token && inputs.iter().all(|x| x.input_ids.get(i) == Some(&t))
        })
        .count();
    assert!(shared > 0, "the golden prompts share a text prefix");
    // The attention FLOPs the phase should record: the shared prefix once, then each prompt's rest after it.
    use mobile_r1_eval::model::flops::{
        decode_attention_flops, prefill_attention_flops, PromptShape,
    };
    let grids: Vec<Vec<[usize; 3]>> = inputs
        .iter()
        .map(|x| x.images.iter().map(|i| i.grid_thw).collect())
        .collect();
    let mut shapes = vec![PromptShape {
        grids: &[],
        new_tokens: shared,
        cached_tokens: 0,
    }];
    shapes.extend(inputs.iter().zip(&grids).map(|(x, g)| PromptShape {
        grids: g,
        new_tokens: x.input_ids.len() - shared,
        cached_tokens: shared,
    }));
    let attention_flops = prefill_attention_flops(model.config(), &shapes);
    let requests = inputs
        .clone()
        .into_iter()
        .enumerate()
        .map(|(id, input)| Request {
            id,
            input,
            prefix_len: shared,
            max_new_tokens: 10,
            stop_tokens: model.config().eos_token_ids.clone(),
            top_logprobs: 0,
            sampling: Default::default(),
        });
    let limits = BatchLimits {
        max_seqs: 2,
        max_batch_tokens: 1_000_000,
        max_new_tokens: 10,
    };
    let mut stats = PhaseStats::default();
    let mut got = vec![None; CASES.len()];
    // Each decode step's new token sees its prompt, the tokens generated before it and itself: after the first
    // token (from the prefill), the j-th decode step of a prompt of p tokens sees p + j keys.
    let mut decode_keys = Vec::new();
    Engine::new(&model, limits, Default::default())
        .run(
            &mut Requests(requests),
            &mut stats,
            &mut |r: Generation, _: &_| {
                let generated = r.token_ids.len() + usize::from(r.stop_token.is_some());
                decode_keys.extend((1..generated).map(|j| r.prompt_tokens + j));
                got[r.id] = Some(r.token_ids);
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(stats.prefix_cached_tokens, shared * CASES.len());
    let close = |counted: f64, want: f64| (counted - want).abs() <= 1e-9 * want && counted > 0.0;
    assert!(close(stats.prefill_attention_flops, attention_flops));
    let decode_flops = decode_attention_flops(model.config(), decode_keys);
    assert!(close(stats.decode_attention_flops, decode_flops));
    let eos = &model.config().eos_token_ids;
    for (i, p) in CASES.iter().enumerate() {
        let want: Vec<u32> = ids(g(&gold, &format!("{p}gen.ids")))
            .into_iter()
            .take_while(|t| !eos.contains(t))
            .collect();
        assert_eq!(got[i].as_deref(), Some(want.as_slice()), "{p}");
    }
}
