//! The batcher on the tiny checkpoint: the same tokens in any batch, and an out-of-memory that shrinks the batch
//! without changing a token.
use super::*;
use crate::model::{ModelFiles, VlModel};
use crate::preprocess::{prepare_rgb8, ImageProcessorConfig, ModelInput};
use crate::records::PhaseStats;

fn tiny() -> VlModel {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b");
    let files = ModelFiles::from_dir(&dir).unwrap();
    VlModel::load(
        &files,
        &candle_core::Device::Cpu,
        candle_core::DType::F32,
        &crate::ops::OpsConfig::default(),
    )
    .unwrap()
}

fn requests(model: &VlModel) -> Vec<Request> {
    let cfg = ImageProcessorConfig::default().with_pixel_bounds(3136, 20_000);
    (0..5u32)
        .map(|i| {
            let img = image::RgbImage::from_fn(100 + 20 * i, 180, |x, y| {
                image::Rgb([(x * 3 + i) as u8, (y * 5) as u8, 90])
            });
            let img = prepare_rgb8(&img, &cfg).unwrap();
            let c = model.config();
            let mut ids: Vec<u32> = (0..(10 + 7 * i)).map(|t| 500 + t * 13 + i).collect();
            ids.push(c.vision_start_token_id);
            ids.extend(std::iter::repeat_n(c.image_token_id, img.n_tokens()));
            ids.extend([151653, 872, 198]);
            Request {
                id: i as usize,
                input: ModelInput {
                    input_ids: ids,
                    images: vec![img],
                },
                prefix_len: 0,
                max_new_tokens: 6,
                stop_tokens: model.config().eos_token_ids.clone(),
                top_logprobs: 0,
                sampling: super::super::Sampling::Greedy,
            }
        })
        .collect()
}

fn run(model: &VlModel, inject: (usize, usize)) -> (Vec<(usize, Vec<u32>)>, PhaseStats) {
    let limits = BatchLimits {
        max_seqs: 4,
        max_batch_tokens: 100_000,
        max_new_tokens: 6,
    };
    let mut b = Engine::new(model, limits, Cancel::new());
    b.inject_oom = inject;
    let mut stats = PhaseStats::default();
    let mut out = Vec::new();
    let mut source = super::super::Requests(requests(model).into_iter());
    let mut sink = |r: Generation, _: &PhaseStats| {
        out.push((r.id, r.token_ids));
        Ok(())
    };
    b.run(&mut source, &mut stats, &mut sink).unwrap();
    out.sort();
    (out, stats)
}

#[test]
fn out_of_memory_shrinks_the_batch_and_changes_no_token() {
    let model = tiny();
    let (clean, s0) = run(&model, (0, 0));
    assert_eq!(clean.len(), 5);
    assert_eq!(s0.oom_retries, 0);
    // The 4-prompt prefill fails twice (4 → 2+2 → 1+1+2).
    let (retried, s1) = run(&model, (2, 0));
    assert_eq!((retried, s1.oom_retries), (clean.clone(), 2));
    // Decode fails twice: groups of 4 → 2 → 1, every sequence advancing exactly once per step.
    let (retried, s2) = run(&model, (0, 2));
    assert_eq!((retried, s2.oom_retries), (clean, 2));
}
