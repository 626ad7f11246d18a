//! `cargo test --release --lib gemm::bf16::timing -- --ignored --nocapture`: the `small` checkpoint's products
//! at `max_pixels` 1,003,520 (prefill) and at 1 and 4 rows (decode) through candle's bf16 matmul, this module's
//! kernels and the f32 `gemm` crate as candle calls it, alternated, best of several each.

use half::bf16;

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
        let packed = best(rounds, || super::packed::gemm_nt(&a, &w, (m, k, n), &mut c));
        let row = best(rounds, || {
            super::row::gemm_nt_rows(&a, &w, (m, k, n), &mut c)
        });
        let f32s = best(rounds, || gemm_crate(&a32, &w32, (m, k, n), &mut c32));
        let rate = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
        eprintln!(
            "{m} x {k} x {n}: candle bf16 {:.1}, packed bf16 {:.1}, row bf16 {:.1}, gemm crate f32 {:.1} GFLOP/s \
             ({:.2} / {:.2} / {:.2} / {:.2} ms)",
            rate(candle),
            rate(packed),
            rate(row),
            rate(f32s),
            candle * 1e3,
            packed * 1e3,
            row * 1e3,
            f32s * 1e3
        );
    }
}
