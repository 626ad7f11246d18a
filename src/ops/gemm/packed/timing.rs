//! `cargo test --release --lib gemm::packed::timing -- --ignored --nocapture`: the register tile alone on panels
//! that stay in L1 (its ceiling), and the f32 products of the `small` checkpoint at `max_pixels` 1,003,520 (one
//! screenshot's 5,088 patches, the merger's 1,272 rows, a 1,306-token prompt), 2048³ and two shorter segments,
//! through the `gemm` crate as candle calls it, this kernel with each tile the CPU runs and OpenBLAS where installed, alternated, best of
//! seven each; with AVX-512 also its tile at depth blocks of 256 and in the older loop order (the AVX2 tile's).

use super::micro::{Avx2, Avx512, Micro};
use super::*;

pub(in crate::ops) fn gemm_crate(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
    assert!(c.len() >= dims.0 * dims.2);
    // SAFETY: c holds m × n values.
    unsafe {
        crate::ops::gemm::gemm_crate_nt(a, w, dims, c.as_mut_ptr(), rayon::current_num_threads())
    }
}

#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn in_cache_kernel() {
    for isa in Isa::all_supported() {
        let rate = match isa {
            Isa::Avx2 => tile_in_l1::<Avx2>(),
            Isa::Avx512 => tile_in_l1::<Avx512>(),
        };
        eprintln!("{} in L1, one thread: {rate:.1} GFLOP/s", isa.describe());
    }
}

/// One product path, writing its output into the slice.
type Path<'a> = Box<dyn Fn(&mut [f32]) + 'a>;

#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn model_shapes() {
    if check::skip_without_avx2() {
        return;
    }
    let blas = crate::ops::gemm::blas::Blas::load(&crate::ops::CpuGemm::Auto).unwrap();
    let shapes = [
        (5088, 1280, 3840),
        (5088, 1280, 1280),
        (5088, 1280, 6840),
        (5088, 3420, 1280),
        (1272, 5120, 5120),
        (1306, 896, 1152),
        (1306, 896, 9728),
        (1306, 4864, 896),
        (2048, 2048, 2048),
        (768, 1280, 3420),
        (256, 896, 9728),
    ];
    for dims @ (m, k, n) in shapes {
        let values = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect()
        };
        let (a, w, mut c) = (values(m * k), values(n * k), vec![0f32; m * n]);
        let mut paths: Vec<(&str, Path<'_>)> =
            vec![("gemm crate", Box::new(|c| gemm_crate(&a, &w, dims, c)))];
        for isa in Isa::all_supported() {
            let name = match isa {
                Isa::Avx2 => "packed AVX2",
                Isa::Avx512 => "packed AVX-512",
            };
            let (a, w) = (&a, &w);
            paths.push((name, Box::new(move |c| sgemm_nt_on(isa, a, w, dims, c))));
        }
        if active() == Some(Isa::Avx512) {
            use super::blis::{sgemm_nt_blis, Blocking, Caches};
            use super::micro::Avx512Blocked;
            let (a, w) = (&a, &w);
            type Kc256 = Avx512Blocked<256, 8>;
            let blocking = Blocking::for_caches::<Kc256>(Caches::this_cpu());
            paths.push((
                "AVX-512 KC 256",
                Box::new(move |c| sgemm_nt_blis::<Kc256>(a, w, dims, c, blocking)),
            ));
            paths.push((
                "AVX-512 Goto order KC 256",
                Box::new(move |c| sgemm_nt_with::<Avx512Blocked<256, 0>>(a, w, dims, c)),
            ));
        }
        if let Some(b) = &blas {
            paths.push(("OpenBLAS", Box::new(|c| b.sgemm_nt_into(&a, &w, dims, c))));
        }
        let mut best = vec![f64::INFINITY; paths.len()];
        for round in 0..8 {
            for (i, (_, f)) in paths.iter().enumerate() {
                let t0 = std::time::Instant::now();
                f(&mut c);
                if round > 0 {
                    best[i] = best[i].min(t0.elapsed().as_secs_f64());
                }
            }
        }
        let flop = 2.0 * (m * k * n) as f64;
        let rates: Vec<String> = paths
            .iter()
            .zip(&best)
            .map(|((name, _), s)| format!("{name} {:.1}", flop / s / 1e9))
            .collect();
        eprintln!("{m} x {k} x {n}: {} GFLOP/s", rates.join(", "));
    }
}

/// GFLOP/s of the tile `M` alone, over panels of depth `KC` that stay in L1, on this thread.
fn tile_in_l1<M: Micro>() -> f64 {
    let (a, b) = (vec![0.5f32; M::MR * M::KC], vec![0.25f32; M::NR * M::KC]);
    let mut c = vec![0f32; M::MR * M::NR];
    let calls = 200_000;
    let t0 = std::time::Instant::now();
    for _ in 0..calls {
        // SAFETY: the CPU runs M (Isa::all_supported); the panels hold KC × MR and KC × NR values, c one tile.
        unsafe { M::kernel(M::KC, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), M::NR, true) };
    }
    (2 * M::MR * M::NR * M::KC * calls) as f64 / t0.elapsed().as_secs_f64() / 1e9
}
