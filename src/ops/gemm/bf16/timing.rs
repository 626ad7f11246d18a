//! `cargo test --release --lib gemm::bf16::timing -- --ignored --nocapture`: the `small` checkpoint's products
//! at `max_pixels` 1,003,520 (prefill) and at 1 and 4 rows (decode) through candle's bf16 matmul, this module's
//! kernels (the widened one included) and the f32 `gemm` crate as candle calls it, alternated, best of several
//! each.

use half::bf16;

use super::check::storage;
use crate::ops::gemm::packed::timing::gemm_crate;

/// Best seconds of `f` over `rounds` runs after one warm-up.
fn best(rounds: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..rounds)
        .map(|_| {
            let t0 = std::time::Instant::now();
            f();
            t0.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn model_shapes() {
    if super::check::skip() {
        return;
    }
    use candle_core::{Device, Tensor};
    let shapes = [
        (5088, 1280, 3840),
        (5088, 3420, 1280),
        (1306, 896, 4864),
        (1306, 4864, 896),
        (1, 896, 4864),
        (1, 4864, 896),
        (4, 896, 4864),
        (1, 896, 151_936),
    ];
    for (m, k, n) in shapes {
        let a32: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let w32: Vec<f32> = (0..n * k)
            .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let (a, w): (Vec<bf16>, Vec<bf16>) = (
            a32.iter().map(|&v| bf16::from_f32(v)).collect(),
            w32.iter().map(|&v| bf16::from_f32(v)).collect(),
        );
        let (mut c, mut c32) = (vec![bf16::ZERO; m * n], vec![0f32; m * n]);
        let rounds = if m > 1000 { 3 } else { 10 };
        let x = Tensor::from_slice(&a, (m, k), &Device::Cpu).unwrap();
        let wt = Tensor::from_slice(&w, (n, k), &Device::Cpu).unwrap();
        let candle = best(rounds, || {
            x.matmul(&wt.t().unwrap()).unwrap();
        });
        let packed = best(rounds, || {
            super::packed::gemm_nt(&a, &w, &[], (m, k, n), storage(&mut c))
        });
        let amx = match super::amx::supported() {
            true => best(rounds, || {
                super::amx::gemm_nt(&a, &w, &[], (m, k, n), storage(&mut c))
            }),
            false => f64::INFINITY,
        };
        let widened = best(rounds, || {
            super::widened::gemm_nt(&a, &w, &[], (m, k, n), storage(&mut c))
        });
        let row = best(rounds, || {
            super::row::gemm_nt_rows(&a, &w, &[], (m, k, n), storage(&mut c))
        });
        let f32s = best(rounds, || gemm_crate(&a32, &w32, (m, k, n), &mut c32));
        let rate = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
        eprintln!(
            "{m} x {k} x {n}: candle bf16 {:.1}, AMX bf16 {:.1}, packed bf16 {:.1}, widened bf16 {:.1}, row bf16 \
             {:.1}, gemm crate f32 {:.1} GFLOP/s ({:.2} / {:.2} / {:.2} / {:.2} / {:.2} / {:.2} ms)",
            rate(candle),
            rate(amx),
            rate(packed),
            rate(widened),
            rate(row),
            rate(f32s),
            candle * 1e3,
            amx * 1e3,
            packed * 1e3,
            widened * 1e3,
            row * 1e3,
            f32s * 1e3
        );
    }
}

/// `cargo test --release --lib gemm::bf16::timing::decode_step -- --ignored --nocapture`: one decode step's
/// products of the `small` checkpoint's 24 text layers at one row (each layer its own weights, 0.72 GB in bf16,
/// 1.43 GB in f32: far beyond the caches, as in a real step), through the bf16 row kernel and the f32 row kernel;
/// the bytes of weights per second each reaches, in all and per projection (best of five steps), between two
/// measurements of the stream read bandwidth (`bench`'s yardstick), so that the share of it reads off one run.
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn decode_step() {
    if super::check::skip() {
        return;
    }
    // (k, n): qkv, o, gate and up together, down.
    let shapes = [(896, 1152), (896, 896), (896, 9728), (4864, 896)];
    let names = ["qkv", "o", "gate_up", "down"];
    let layers = 24;
    let w16: Vec<Vec<bf16>> = (0..layers * shapes.len())
        .map(|i| super::check::values(shapes[i % 4].0 * shapes[i % 4].1, i))
        .collect();
    let a16 = super::check::values(4864, 999);
    let mut c16 = vec![bf16::ZERO; 9728];
    let calls = layers * shapes.len();
    let stream = || {
        let (bytes, kernel) = crate::bench::yardstick::stream_read_bandwidth();
        eprintln!("stream read ({kernel}): {:.1} GB/s", bytes / 1e9);
    };
    stream();
    let per_shape = |dtype_bytes: usize, run: &mut dyn FnMut(usize)| {
        let mut best = ([f64::INFINITY; 4], f64::INFINITY);
        for _ in 0..6 {
            let mut secs = [0f64; 4];
            let t0 = std::time::Instant::now();
            for i in 0..calls {
                let t = std::time::Instant::now();
                run(i);
                secs[i % 4] += t.elapsed().as_secs_f64();
            }
            let all = t0.elapsed().as_secs_f64();
            if all < best.1 {
                best = (secs, all);
            }
        }
        let bytes = |s: usize| (shapes[s].0 * shapes[s].1 * layers * dtype_bytes) as f64;
        let total: f64 = (0..4).map(bytes).sum();
        let mut line = format!("{:.1} ms, {:.1} GB/s:", best.1 * 1e3, total / best.1 / 1e9);
        for (s, name) in names.iter().enumerate() {
            line += &format!(
                "  {name} {:.2} ms/layer {:.1} GB/s",
                best.0[s] / layers as f64 * 1e3,
                bytes(s) / best.0[s] / 1e9
            );
        }
        line
    };
    let line = per_shape(2, &mut |i| {
        let (k, n) = shapes[i % 4];
        super::row::gemm_nt_rows(&a16[..k], &w16[i], &[], (1, k, n), storage(&mut c16[..n]));
    });
    eprintln!("bf16 row kernel, one decode step: {line}");
    drop(w16);
    let w32: Vec<Vec<f32>> = (0..layers * shapes.len())
        .map(|i| {
            super::check::values(shapes[i % 4].0 * shapes[i % 4].1, i)
                .iter()
                .map(|v| v.to_f32())
                .collect()
        })
        .collect();
    let a32: Vec<f32> = a16.iter().map(|v| v.to_f32()).collect();
    let mut c32 = vec![0f32; 9728];
    let line = per_shape(4, &mut |i| {
        let (k, n) = shapes[i % 4];
        crate::ops::gemm::row::sgemm_nt_rows(&a32[..k], &w32[i], (1, k, n), &mut c32[..n]);
    });
    eprintln!("f32 row kernel, one decode step: {line}");
    stream();
}

/// `cargo test --release --lib gemm::bf16::timing::swiglu -- --ignored --nocapture`: the `small` checkpoint's
/// gate-up projections at `max_pixels` 1,003,520 (the vision tower's 5,088 rows with a bias, the text model's
/// 1,306 without): the AMX product and the bf16 SwiGLU pass over its output, each alone, and the fused AMX pass;
/// best of five each (the test's thread allocates outside the main heap, so large buffers cost their page faults
/// here where the binary's main thread reuses them).
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn swiglu() {
    use candle_core::{Device, Tensor};
    if super::check::skip() || !super::amx::supported() {
        eprintln!("skipped: no AMX tiles here");
        return;
    }
    for (m, k, i, biased) in [(5088, 1280, 3420, true), (1306, 896, 4864, false)] {
        let (a, w) = (
            super::check::values(m * k, 1),
            super::check::values(2 * i * k, 2),
        );
        let bias: Vec<f32> = match biased {
            true => (0..2 * i).map(|j| (j % 7) as f32 * 0.01).collect(),
            false => Vec::new(),
        };
        let (mut gu, mut c) = (vec![bf16::ZERO; m * 2 * i], vec![bf16::ZERO; m * i]);
        let product = best(5, || {
            super::amx::gemm_nt(&a, &w, &bias, (m, k, 2 * i), storage(&mut gu))
        });
        let t = Tensor::from_slice(&gu, (m, 2 * i), &Device::Cpu).unwrap();
        let pass = best(5, || {
            std::hint::black_box(crate::ops::elementwise::bf16::swiglu_packed(&t, None).unwrap());
        });
        let fused = best(5, || {
            super::amx::gemm_nt_swiglu(&a, &w, &bias, (m, k, i), storage(&mut c))
        });
        let rate = |s: f64| 2.0 * (m * k * 2 * i) as f64 / s / 1e9;
        eprintln!(
            "{m} x {k} x 2·{i}: product {:.2} ms ({:.1} GFLOP/s) + SwiGLU pass {:.2} ms; fused {:.2} ms ({:.1} GFLOP/s)",
            product * 1e3,
            rate(product),
            pass * 1e3,
            fused * 1e3,
            rate(fused)
        );
    }
}

/// `cargo test --release --lib gemm::bf16::timing::vision_tower_cold -- --ignored --nocapture`: a screenshot's
/// products of the Qwen2.5-VL vision tower (5,088 patches, 32 layers, each its own weights: about 1.26 GB in bf16,
/// beyond the caches as in the model, where a product timed alone would find its weight in the L3) through the AMX
/// kernel with the weights in place and held in tiles ([`super::amx::TileWeight`]), alternated: q/k/v, out, the
/// fused gate/up SwiGLU and down per layer; GFLOP/s per projection (best of three passes).
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn vision_tower_cold() {
    use super::amx::{gemm_nt, gemm_nt_held, gemm_nt_swiglu, TileWeight};
    if super::check::skip() || !super::amx::supported() {
        eprintln!("skipped: no AMX tiles here");
        return;
    }
    let (m, d, i, layers) = (5088, 1280, 3420, 32);
    // (k, n) of each layer's products: qkv, proj, gate and up (the SwiGLU's 2I rows), down.
    let shapes = [(d, 3 * d), (d, d), (d, 2 * i), (i, d)];
    let names = ["qkv", "proj", "gate_up+swiglu", "down"];
    let weights: Vec<Vec<bf16>> = (0..layers * shapes.len())
        .map(|j| super::check::values(shapes[j % 4].0 * shapes[j % 4].1, j))
        .collect();
    let t0 = std::time::Instant::now();
    let held: Vec<TileWeight> = weights
        .iter()
        .enumerate()
        .map(|(j, w)| TileWeight::new(w, (shapes[j % 4].1, shapes[j % 4].0), j % 4 == 2))
        .collect();
    eprintln!(
        "held in tiles in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    let a = super::check::values(m * i, 7);
    let mut c = vec![bf16::ZERO; m * 3 * d];
    for held_weights in [false, true, false, true] {
        let mut best = ([f64::INFINITY; 4], f64::INFINITY);
        for _ in 0..3 {
            let mut secs = [0f64; 4];
            let t0 = std::time::Instant::now();
            for (j, w) in weights.iter().enumerate() {
                let (k, n) = shapes[j % 4];
                let cols = if j % 4 == 2 { n / 2 } else { n };
                let (a, c) = (&a[..m * k], storage(&mut c[..m * cols]));
                let t = std::time::Instant::now();
                match (held_weights, j % 4) {
                    (true, _) => gemm_nt_held(a, &held[j], (&[], None), m, c),
                    (false, 2) => gemm_nt_swiglu(a, w, &[], (m, k, n / 2), c),
                    (false, _) => gemm_nt(a, w, &[], (m, k, n), c),
                }
                secs[j % 4] += t.elapsed().as_secs_f64();
            }
            let all = t0.elapsed().as_secs_f64();
            if all < best.1 {
                best = (secs, all);
            }
        }
        let flops = |s: usize| 2.0 * (m * shapes[s].0 * shapes[s].1 * layers) as f64;
        let total: f64 = (0..4).map(flops).sum();
        let mut line = format!(
            "{:.0} ms, {:.0} GFLOP/s:",
            best.1 * 1e3,
            total / best.1 / 1e9
        );
        for (s, name) in names.iter().enumerate() {
            line += &format!(
                "  {name} {:.1} ms/layer {:.0} GFLOP/s",
                best.0[s] / layers as f64 * 1e3,
                flops(s) / best.0[s] / 1e9
            );
        }
        let how = if held_weights { "held" } else { "in place" };
        eprintln!("AMX bf16, a screenshot's vision tower products, weights {how}: {line}");
    }
}
