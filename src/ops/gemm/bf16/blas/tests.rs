//! The bf16 GEMM of a CBLAS library (MKL's, put into `.mkl/` by `.ci/mkl.sh`) against the f64 reference, and
//! through the ops: which products it takes, the manifest, the kept calibration. Skipped where MKL is absent.

use super::*;
use crate::ops::gemm::bf16::check;
use crate::ops::gemm::blas::bf16::CHUNK_ROWS;
use crate::ops::{CpuGemm, Ops, OpsConfig, Rows};
use candle_core::DType;

/// MKL's single library where `.ci/mkl.sh` put it (or `MOBILE_R1_EVAL_TEST_MKL` says), with a line saying so
/// where it is absent.
pub(crate) fn mkl_path() -> Option<String> {
    let path = std::env::var("MOBILE_R1_EVAL_TEST_MKL").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.mkl/libmkl_rt.so.3").to_string()
    });
    let found = std::path::Path::new(&path).exists();
    if !found {
        eprintln!("skipped: no MKL at {path} (bash .ci/mkl.sh puts it there)");
    }
    found.then_some(path)
}

fn mkl() -> Option<Blas> {
    let blas = Blas::open(&mkl_path()?).expect("MKL loads");
    assert_eq!(blas.bf16_gemm(), Some("cblas_gemm_bf16bf16f32"));
    Some(blas)
}

#[test]
fn the_library_product_matches_the_reference_with_the_bias_rounded_once() {
    let Some(blas) = mkl() else { return };
    let kernel = |a: &[bf16], w: &[bf16], bias: &[f32], dims, c: &mut [MaybeUninit<bf16>]| {
        product(&blas, a, w, bias, dims, c)
    };
    check::matches_reference(
        &kernel,
        &[
            (1, 1, 1),
            (3, 70, 33),
            (CHUNK_ROWS + 9, 301, 70),
            (17, 0, 5),
        ],
    );
}

/// A segment is multiplied in chunks at fixed places: its rows past the first chunk have the bits they have as
/// a segment of their own starting there; and the columns' split over threads does not change a bit.
#[test]
fn chunks_sit_at_fixed_places_and_threads_do_not_change_bits() {
    let Some(blas) = mkl() else { return };
    let kernel = |a: &[bf16], w: &[bf16], bias: &[f32], dims, c: &mut [MaybeUninit<bf16>]| {
        product(&blas, a, w, bias, dims, c)
    };
    let (m, k, n) = (2 * CHUNK_ROWS + 5, 96, 150);
    let (a, w) = (check::values(m * k, 1), check::values(n * k, 2));
    let all = check::product(&kernel, &a, &w, (m, k, n));
    let tail = check::product(&kernel, &a[CHUNK_ROWS * k..], &w, (m - CHUNK_ROWS, k, n));
    assert_eq!(tail, all[CHUNK_ROWS * n..].to_vec());
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(
        one.install(|| check::product(&kernel, &a, &w, (m, k, n))),
        all
    );
}

fn mkl_ops(path: &str, calibration: GemmCalibration, dtype: DType) -> Ops {
    let config = OpsConfig {
        cpu_gemm: CpuGemm::Library(path.into()),
        cpu_gemm_calibration: calibration,
        ..OpsConfig::default()
    };
    Ops::new(&config, &Device::Cpu, dtype).unwrap()
}

/// Named by path, the library's bf16 GEMM takes bf16 row segments (each alone, the bias in the sums), the
/// SwiGLU is not fused, independent rows keep the built-in path; the manifest says so. Not in f32 runs.
#[test]
fn the_ops_send_bf16_segments_to_a_named_library() {
    let Some(path) = mkl_path() else { return };
    let blas = Blas::open(&path).unwrap();
    let ops = mkl_ops(&path, GemmCalibration::EachStart, DType::BF16);
    let manifest = ops.manifest();
    let choice = manifest
        .cpu_bf16_blas_choice
        .clone()
        .expect("a bf16 choice");
    assert!(
        choice.used && choice.reason.contains("asked for"),
        "{choice:?}"
    );
    assert!(choice.blas_gflops.unwrap() > 0.0 && choice.builtin_gflops.unwrap() > 0.0);
    assert!(
        manifest.cpu_bf16_gemm.contains("cblas_gemm_bf16bf16f32"),
        "{}",
        manifest.cpu_bf16_gemm
    );
    let (m, k, n) = (6, 70, 34);
    let (a, w, b) = (
        check::values(m * k, 3),
        check::values(n * k, 4),
        check::values(n, 5),
    );
    let dev = Device::Cpu;
    let x = Tensor::from_slice(&a, (2, m / 2, k), &dev).unwrap();
    let (wt, bt) = (
        Tensor::from_slice(&w, (n, k), &dev).unwrap(),
        Tensor::from_slice(&b, n, &dev).unwrap(),
    );
    let bits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
    let bias: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
    let by_lib = |rows: std::ops::Range<usize>, bias: &[f32]| {
        let mut c = vec![bf16::NAN; rows.len() * n];
        product(
            &blas,
            &a[rows.start * k..rows.end * k],
            &w,
            bias,
            (rows.len(), k, n),
            check::storage(&mut c),
        );
        c
    };
    let segments = Rows::Segments(&[2, 4]);
    let want = [by_lib(0..2, &[]), by_lib(2..6, &[])].concat();
    assert_eq!(bits(ops.matmul_nt(&x, &wt, segments).unwrap()), want);
    let want = [by_lib(0..2, &bias), by_lib(2..6, &bias)].concat();
    let biased = ops
        .matmul_nt_bias(&x, &wt, &bt, segments)
        .unwrap()
        .expect("the bias in the sums");
    assert_eq!(bits(biased), want);
    assert!(ops
        .matmul_swiglu(&x, &wt, Some(&bt), segments)
        .unwrap()
        .is_none());
    let builtin = check::builtin_ops();
    let independent = |o: &Ops| bits(o.matmul_nt(&x, &wt, Rows::Independent).unwrap());
    assert_eq!(independent(&ops), independent(&builtin));
    let f32_run = mkl_ops(&path, GemmCalibration::EachStart, DType::F32);
    assert!(f32_run.manifest().cpu_bf16_blas_choice.is_none());
}

/// Under a calibration file, the bf16 rates are measured once and kept beside it, then read by later starts.
#[test]
fn the_bf16_calibration_is_kept_beside_the_f32_one() {
    let Some(path) = mkl_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu-gemm.json");
    assert_eq!(file_beside(&file), dir.path().join("cpu-gemm-bf16.json"));
    let calibration = GemmCalibration::File(file.clone());
    let first = mkl_ops(&path, calibration.clone(), DType::BF16)
        .manifest()
        .cpu_bf16_blas_choice
        .unwrap();
    assert!(
        first
            .calibration
            .as_deref()
            .unwrap()
            .contains("measured now"),
        "{first:?}"
    );
    let kept: record::Calibration =
        serde_json::from_str(&std::fs::read_to_string(file_beside(&file)).unwrap()).unwrap();
    assert_eq!(Some(kept.rates.blas_gflops), first.blas_gflops);
    assert!(
        kept.key.library.contains("cblas_gemm_bf16bf16f32"),
        "{:?}",
        kept.key
    );
    let again = mkl_ops(&path, calibration, DType::BF16)
        .manifest()
        .cpu_bf16_blas_choice
        .unwrap();
    assert!(
        again
            .calibration
            .as_deref()
            .unwrap()
            .contains("measured once"),
        "{again:?}"
    );
    assert_eq!(
        (again.blas_gflops, again.builtin_gflops),
        (first.blas_gflops, first.builtin_gflops)
    );
}

/// `cargo test --release --lib bf16::blas::tests::timing -- --ignored --nocapture`: the `small` checkpoint's
/// prefill products at 1,003,520 pixels and the calibration product through the library's bf16 GEMM (as the ops
/// call it: chunks of rows, columns split over the threads) against this CPU's own kernel, alternated, best of
/// three each: with AMX the tile kernel in place and on a weight held in tiles, else the AVX512-BF16 packed one.
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn timing() {
    use crate::ops::gemm::bf16::{amx, packed};
    let Some(blas) = mkl() else { return };
    let tiles = amx::supported();
    if !tiles && !crate::ops::gemm::bf16::supported() {
        eprintln!("skipped: neither AMX nor AVX512-BF16");
        return;
    }
    let shapes = [
        CALIBRATION,
        (5088, 1280, 3840),
        (5088, 1280, 1280),
        (5088, 3420, 1280),
        (1306, 896, 1152),
        (1306, 896, 9728),
        (1306, 4864, 896),
    ];
    for (m, k, n) in shapes {
        let (a, w) = (check::values(m * k, 1), check::values(n * k, 2));
        let held = tiles.then(|| amx::TileWeight::new(&w, (n, k), false));
        let mut c = vec![bf16::ZERO; m * n];
        let mut time = |f: &mut dyn FnMut(&mut [MaybeUninit<bf16>])| {
            let t = std::time::Instant::now();
            f(check::storage(&mut c));
            t.elapsed().as_secs_f64()
        };
        let mut best = [f64::INFINITY; 3];
        for round in 0..4 {
            let t = [
                time(&mut |c| product(&blas, &a, &w, &[], (m, k, n), c)),
                time(&mut |c| match tiles {
                    true => amx::gemm_nt(&a, &w, &[], (m, k, n), c),
                    false => packed::gemm_nt(&a, &w, &[], (m, k, n), c),
                }),
                match &held {
                    Some(held) => time(&mut |c| amx::gemm_nt_held(&a, held, (&[], None), m, c)),
                    None => f64::NAN,
                },
            ];
            for (b, t) in best.iter_mut().zip(t).filter(|_| round > 0) {
                *b = b.min(t);
            }
        }
        let rate = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
        match tiles {
            true => eprintln!(
                "{m} x {k} x {n}: MKL bf16 {:.0}, AMX in place {:.0}, AMX held {:.0} GFLOP/s",
                rate(best[0]),
                rate(best[1]),
                rate(best[2])
            ),
            false => eprintln!(
                "{m} x {k} x {n}: MKL bf16 {:.0}, AVX512-BF16 packed {:.0} GFLOP/s",
                rate(best[0]),
                rate(best[1])
            ),
        }
    }
}
