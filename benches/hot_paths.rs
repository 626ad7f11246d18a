//! Criterion benchmarks of the hot paths: screenshot preprocessing, output parsing + scoring, the vision
//! encoder, prefill, one decode step at batch 1 and 8, varlen attention (fused vs composed, the shapes of the 3B
//! vision tower's windows and full-attention layers), the CPU's f32 GEMM (`gemm` crate vs OpenBLAS), and the
//! engine end to end on the tiny config.
//!
//! `cargo bench --bench hot_paths` (release). Models use random weights (`mobile_r1_eval::bench::random`); the
//! real 3B vision tower case runs only with `MOBILE_R1_BENCH_BIG=1` (it allocates 2.7 GB of f32 weights).

use std::hint::black_box;

use candle_core::{DType, Device};
use criterion::{criterion_group, criterion_main, Criterion};
use image::{Rgb, RgbImage};
use mobile_r1_eval::bench::random::{load_config, random_model};
use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::model::{PrefillRequest, SeqCache, VlModel};
use mobile_r1_eval::ops::{Ops, OpsConfig};
use mobile_r1_eval::predictions::{Prediction, PredictionSet};
use mobile_r1_eval::preprocess::{prepare_rgb8, ImageProcessorConfig, ModelInput, PreparedImage};
use mobile_r1_eval::records::PredictionLine;
use mobile_r1_eval::score::{aggregate, score_benchmark};
use mobile_r1_eval::settings::RulePreset;

fn screenshot(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x % 251) as u8, (y % 241) as u8, ((x + y) % 239) as u8])
    })
}

fn preprocess(c: &mut Criterion) {
    let img = screenshot(1080, 2400);
    let mut g = c.benchmark_group("preprocess_1080x2400");
    for (name, max) in [
        ("max_pixels_1003520", 1_003_520u64),
        ("max_pixels_hub", 12_845_056),
    ] {
        let cfg = ImageProcessorConfig::default().with_pixel_bounds(3136, max);
        g.bench_function(name, |b| {
            b.iter(|| prepare_rgb8(black_box(&img), &cfg).unwrap())
        });
    }
    g.finish();
}

fn parse_and_score(c: &mut Criterion) {
    let dir = mobile_r1_eval::sample::materialize_default().unwrap();
    let bench = Benchmark::load(&dir).unwrap();
    // 10,000 steps: the sample's trajectories repeated under new ids, each step answered with its gold response.
    let per_copy = bench.num_steps();
    let copies = 10_000usize.div_ceil(per_copy);
    let mut big = bench.clone();
    big.trajectories = (0..copies)
        .flat_map(|k| bench.trajectories.iter().map(move |t| (k, t)))
        .map(|(k, t)| {
            let mut t = t.clone();
            t.id = format!("{k}-{}", t.id);
            t
        })
        .collect();
    let mut lines = Vec::new();
    for t in &big.trajectories {
        for (si, s) in t.steps.iter().enumerate() {
            lines.push(PredictionLine {
                trajectory: t.id.clone(),
                step: si,
                response: s.response.clone(),
                image_size: None,
                prompt_tokens: None,
                generated_tokens: None,
                finish: None,
                error: None,
            });
        }
    }
    let rules = RulePreset::by_name("mobile-r1").unwrap();
    c.bench_function("parse_and_score_10k_steps", |b| {
        b.iter(|| {
            let mut preds = PredictionSet::default();
            for l in black_box(&lines) {
                preds.insert(Prediction::from_line(l.clone()));
            }
            let scored = score_benchmark(&rules, black_box(&big), &preds);
            aggregate(&scored.steps, &rules)
        })
    });
}

fn image_input(model: &VlModel, w: u32, h: u32, text_tokens: usize) -> ModelInput {
    let img: PreparedImage =
        prepare_rgb8(&screenshot(w, h), &ImageProcessorConfig::default()).unwrap();
    let cfg = model.config();
    let mut ids: Vec<u32> = (0..text_tokens as u32).map(|i| 1000 + i).collect();
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.image_token_id, img.n_tokens()));
    ids.push(151653);
    ids.extend((0..16u32).map(|i| 2000 + i));
    ModelInput {
        input_ids: ids,
        images: vec![img],
    }
}

fn model_paths(c: &mut Criterion) {
    let dev = Device::Cpu;
    let model = random_model(
        load_config(&"tiny".parse().unwrap()).unwrap(),
        1,
        &dev,
        DType::F32,
        &OpsConfig::default(),
    )
    .unwrap();
    let input = image_input(&model, 448, 896, 200);
    c.bench_function("tiny_vision_448x896", |b| {
        b.iter(|| model.encode_images(&[&input.images[0]], None).unwrap())
    });
    c.bench_function("tiny_prefill_448x896", |b| {
        b.iter(|| model.prefill(&[PrefillRequest::new(&input)]).unwrap())
    });
    for batch in [1usize, 8] {
        let reqs: Vec<_> = (0..batch).map(|_| PrefillRequest::new(&input)).collect();
        let (caches, _) = model.prefill(&reqs).unwrap();
        c.bench_function(&format!("tiny_decode_step_batch{batch}"), |b| {
            b.iter_batched(
                || caches.clone(),
                |mut cs: Vec<SeqCache>| {
                    let mut refs: Vec<&mut SeqCache> = cs.iter_mut().collect();
                    model.decode(&vec![42; batch], &mut refs).unwrap()
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    if std::env::var_os("MOBILE_R1_BENCH_BIG").is_some() {
        let big = random_model(
            load_config(&"small".parse().unwrap()).unwrap(),
            1,
            &dev,
            DType::F32,
            &OpsConfig::default(),
        )
        .unwrap();
        let input = image_input(&big, 448, 448, 8);
        let mut g = c.benchmark_group("real_vision_tower");
        g.sample_size(10);
        g.bench_function("vision_3b_tower_448x448", |b| {
            b.iter(|| big.encode_images(&[&input.images[0]], None).unwrap())
        });
        g.finish();
    }
}

fn engine_end_to_end(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    let tokenizer =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer");
    let cfg = mobile_r1_eval::bench::BenchConfig {
        config: "tiny".parse().unwrap(),
        devices: vec![mobile_r1_eval::settings::DeviceSpec::Cpu],
        dtype: None,
        steps: 8,
        batch_size: 8,
        max_batch_tokens: None,
        max_new_tokens: 8,
        min_pixels: 3136,
        max_pixels: 200_704,
        tokenizer,
        judge: false,
        seed: 1,
        ops: Default::default(),
        semi_online: None,
        torch_flops: None,
    };
    g.bench_function("tiny_8_steps", |b| {
        b.iter(|| mobile_r1_eval::bench::run_bench(&cfg).unwrap())
    });
    g.finish();
}

/// Varlen attention on the CPU: the fused f32 path against the composed candle reference, on one 1080×2400
/// screenshot at 1,248 patches (16 heads of 80): 20 windows of 64 rows, and the whole image in one segment.
fn varlen_attention(c: &mut Criterion) {
    use candle_core::Tensor;
    use mobile_r1_eval::ops::{reference, Varlen, VarlenSeg};
    let ops = Ops::new(&OpsConfig::default(), &Device::Cpu, candle_core::DType::F32).unwrap();
    let (n, h, d) = (1280, 16, 80);
    let t = || Tensor::randn(0f32, 1.0, (n, h, d), &Device::Cpu).unwrap();
    let (q, k, v) = (t(), t(), t());
    let windows: Vec<VarlenSeg<'_>> = (0..n / 64)
        .map(|i| VarlenSeg {
            start: 64 * i,
            len: 64,
            prefix: None,
        })
        .collect();
    let full = [VarlenSeg {
        start: 0,
        len: n,
        prefix: None,
    }];
    let mut g = c.benchmark_group("varlen_attention_1280x16x80");
    for (name, segs) in [("windows", &windows[..]), ("full", &full[..])] {
        let a = Varlen {
            q: &q,
            k: &k,
            v: &v,
            segs,
            causal: false,
            scale: 0.11,
        };
        g.bench_function(format!("{name}_fused"), |b| {
            b.iter(|| ops.varlen_attention(a).unwrap())
        });
        g.bench_function(format!("{name}_reference"), |b| {
            b.iter(|| reference::varlen_attention(a).unwrap())
        });
    }
    g.finish();
}

/// The linear layers' f32 GEMM on the CPU: candle's `gemm` crate and the packed AVX2 kernel (where the CPU runs
/// it) against `ops::matmul_nt` (as the run chooses), on the `small` bench's shapes: the
/// vision MLP's gate/up projection for four screenshots (4,992 patches), and the text MLP's at decode (1 and 4
/// rows: OpenBLAS serves 4 rows or more, `ops::BLAS_MIN_ROWS`).
fn gemm(c: &mut Criterion) {
    use candle_core::Tensor;
    use mobile_r1_eval::ops::Rows;
    let ops = Ops::new(&OpsConfig::default(), &Device::Cpu, candle_core::DType::F32).unwrap();
    let mut g = c.benchmark_group("gemm_f32");
    g.sample_size(10);
    for (rows, k, n) in [(4992, 1280, 3420), (4, 896, 9728), (1, 896, 9728)] {
        let x = Tensor::randn(0f32, 1.0, (rows, k), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        g.bench_function(format!("{rows}x{k}x{n}_gemm_crate"), |b| {
            b.iter(|| x.matmul(&w.t().unwrap()).unwrap())
        });
        if mobile_r1_eval::ops::gemm::packed::supported() {
            let (xv, wv) = (
                x.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                w.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            let mut c = vec![0f32; rows * n];
            g.bench_function(format!("{rows}x{k}x{n}_packed"), |b| {
                b.iter(|| {
                    mobile_r1_eval::ops::gemm::packed::sgemm_nt(&xv, &wv, (rows, k, n), &mut c)
                })
            });
        }
        // As the model calls it: a prefill's rows as one declared segment (OpenBLAS where installed), a decode
        // step's rows as independent sequences (the `gemm` crate in blocks of `ROW_BLOCK` rows).
        g.bench_function(format!("{rows}x{k}x{n}_matmul_nt"), |b| {
            let lens = [rows];
            let how = if rows > 4 {
                Rows::Segments(&lens)
            } else {
                Rows::Independent
            };
            b.iter(|| ops.matmul_nt(&x, &w, how).unwrap())
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    preprocess,
    parse_and_score,
    model_paths,
    varlen_attention,
    gemm,
    engine_end_to_end
);
criterion_main!(benches);
