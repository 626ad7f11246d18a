//! The bf16 GEMMs through the ops: which kernel runs where (CPU, setting, dtype), the bias and the SwiGLU in the
//! kernels, and the kernels against candle's bf16 matmul.
use super::*;
use candle_core::{DType, Device};

#[test]
fn the_path_follows_the_cpu_and_gemm_crate_only() {
    assert_eq!(
        Bf16Gemm::for_this_cpu(true, &GemmCalibration::EachStart),
        Bf16Gemm::Candle
    );
    let got = Bf16Gemm::for_this_cpu(false, &GemmCalibration::EachStart);
    assert_eq!(got.row_kernel(), supported());
    if !supported() {
        assert!(matches!(
            got,
            Bf16Gemm::Candle | Bf16Gemm::WidenedOnly { .. }
        ));
    }
    eprintln!("{}", got.describe());
}

/// The choice at load: the first of AMX, packed, widened that is at least as fast as the kernels after it and
/// candle's matmul; without AVX512-BF16 only the widened kernel or candle's.
#[test]
fn the_fastest_segment_kernel_is_chosen_in_order() {
    let rates = |amx_gflops, packed_gflops, widened_gflops, candle_gflops| Rates {
        amx_gflops,
        packed_gflops,
        widened_gflops,
        candle_gflops,
    };
    for (r, want) in [
        (rates(900.0, 300.0, 280.0, 200.0), "AMX tile kernel"),
        (rates(0.0, 300.0, 300.0, 200.0), "AVX512-BF16 packed kernel"),
        (
            rates(0.0, 160.0, 280.0, 200.0),
            "f32 GEMM on exact f32 copies",
        ),
        (rates(0.0, 160.0, 180.0, 200.0), "candle bf16 matmul"),
    ] {
        assert_eq!(Bf16Gemm::choose(r, true).segments_name(), want);
    }
    let slow_dots = Bf16Gemm::choose(rates(0.0, 160.0, 180.0, 200.0), true);
    assert!(slow_dots.row_kernel() && slow_dots.segment_kernel().is_none());
    let without = Bf16Gemm::choose(rates(0.0, 0.0, 280.0, 200.0), false);
    assert!(matches!(without, Bf16Gemm::WidenedOnly { .. }) && !without.row_kernel());
    assert!(without
        .describe()
        .contains("280.0 GFLOP/s vs candle's bf16 matmul's 200.0"));
    assert_eq!(
        Bf16Gemm::choose(rates(0.0, 0.0, 180.0, 200.0), false),
        Bf16Gemm::Candle
    );
}

/// `Ops::matmul_nt` on bf16 tensors: the packed kernel's bits for segments, the row kernel's for independent
/// rows (3-d input), candle's matmul under `--cpu-gemm gemm-crate`; the manifest says which.
#[test]
fn ops_matmul_nt_dispatches_bf16_by_cpu_and_setting() {
    use crate::ops::{CpuGemm, Ops, OpsConfig, Rows};
    let (m, k, n) = (6, 70, 33);
    let dev = Device::Cpu;
    let (a, w) = (check::values(m * k, 9), check::values(n * k, 10));
    let x = Tensor::from_slice(&a, (2, m / 2, k), &dev).unwrap();
    let wt = Tensor::from_slice(&w, (n, k), &dev).unwrap();
    let bits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
    let ops = check::builtin_ops();
    let want = Bf16Gemm::for_this_cpu(false, &GemmCalibration::EachStart);
    assert_eq!(ops.manifest().cpu_bf16_gemm, want.describe());
    let seg = bits(ops.matmul_nt(&x, &wt, Rows::Segments(&[2, 4])).unwrap());
    let ind = bits(ops.matmul_nt(&x, &wt, Rows::Independent).unwrap());
    let config = OpsConfig {
        cpu_gemm: CpuGemm::GemmCrate,
        ..OpsConfig::default()
    };
    let crate_only = Ops::new(&config, &dev, DType::BF16).unwrap();
    assert_eq!(
        crate_only.manifest().cpu_bf16_gemm,
        Bf16Gemm::Candle.describe()
    );
    let candle = bits(x.reshape((m, k)).unwrap().matmul(&wt.t().unwrap()).unwrap());
    assert_eq!(
        bits(crate_only.matmul_nt(&x, &wt, Rows::Independent).unwrap()),
        candle
    );
    let x2 = x.reshape((m, k)).unwrap();
    let per_segment = bits(
        Tensor::cat(
            &[
                x2.narrow(0, 0, 2)
                    .unwrap()
                    .matmul(&wt.t().unwrap())
                    .unwrap(),
                x2.narrow(0, 2, 4)
                    .unwrap()
                    .matmul(&wt.t().unwrap())
                    .unwrap(),
            ],
            0,
        )
        .unwrap(),
    );
    match want.segment_kernel() {
        // Each segment alone (the widened kernel's bits depend on a segment's length).
        Some(f) => assert_eq!(
            seg,
            [
                check::product(&f, &a[..2 * k], &w, (2, k, n)),
                check::product(&f, &a[2 * k..], &w, (4, k, n)),
            ]
            .concat()
        ),
        None => assert_eq!(seg, per_segment),
    }
    if !want.row_kernel() {
        eprintln!("skipped the row kernel's part: this CPU has no AVX512-BF16");
        return;
    }
    assert_eq!(ind, check::product(&row::gemm_nt_rows, &a, &w, (m, k, n)));
}

/// `Ops::matmul_swiglu` runs the fused pass on segments where the bf16 segments run on this module's kernels
/// (AMX or AVX512-BF16), with the bits of the biased product followed by the SwiGLU op; `None` for independent
/// rows, with `--kernels off`, `--cpu-gemm gemm-crate`, in f32 and on CPUs without those kernels.
#[test]
fn ops_fuse_the_swiglu_only_on_the_bf16_kernels_segments() {
    use crate::ops::{CpuGemm, Ops, OpsConfig, Rows};
    let (m, k, i) = (6, 70, 21);
    let dev = Device::Cpu;
    let (a, w) = (check::values(m * k, 11), check::values(2 * i * k, 12));
    let x = Tensor::from_slice(&a, (2, m / 2, k), &dev).unwrap();
    let wt = Tensor::from_slice(&w, (2 * i, k), &dev).unwrap();
    let b = Tensor::from_vec(check::values(2 * i, 13), 2 * i, &dev).unwrap();
    let segs = Rows::Segments(&[2, 4]);
    let ops = check::builtin_ops();
    let got = ops.matmul_swiglu(&x, &wt, Some(&b), segs).unwrap();
    if Bf16Gemm::for_this_cpu(false, &GemmCalibration::EachStart)
        .swiglu_kernel()
        .is_none()
    {
        assert!(got.is_none());
        eprintln!(
            "skipped the fused pass's bits: no AMX or AVX512-BF16 kernel runs the segments here"
        );
        return;
    }
    let got = got.expect("fused on the bf16 kernels");
    assert_eq!(got.dims(), [2, m / 2, i]);
    let gu = ops
        .matmul_nt_bias(&x, &wt, &b, segs)
        .unwrap()
        .expect("folded");
    let want = ops.swiglu_packed(&gu, None).unwrap();
    let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
    assert_eq!(bits(&got), bits(&want));
    assert!(ops
        .matmul_swiglu(&x, &wt, Some(&b), Rows::Independent)
        .unwrap()
        .is_none());
    let f32s = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    assert!(ops
        .matmul_swiglu(&f32s(&x), &f32s(&wt), None, segs)
        .unwrap()
        .is_none());
    for config in [
        OpsConfig {
            fused_kernels: false,
            ..OpsConfig::default()
        },
        OpsConfig {
            cpu_gemm: CpuGemm::GemmCrate,
            ..OpsConfig::default()
        },
    ] {
        let other = Ops::new(&config, &dev, DType::BF16).unwrap();
        assert!(other
            .matmul_swiglu(&x, &wt, Some(&b), segs)
            .unwrap()
            .is_none());
    }
}

/// bf16 operands of a product with a bias, `dims` = (m, k, n), from seeds `seed`, `seed + 1`, `seed + 2`: the
/// values (`a`, `w`, the bias in f32) and the same as CPU tensors (`x`, `wt`, `b`).
struct BiasCase {
    a: Vec<bf16>,
    w: Vec<bf16>,
    bias: Vec<f32>,
    x: Tensor,
    wt: Tensor,
    b: Tensor,
}

impl BiasCase {
    fn new((m, k, n): (usize, usize, usize), seed: usize) -> Self {
        let dev = Device::Cpu;
        let (a, w, bv) = (
            check::values(m * k, seed),
            check::values(n * k, seed + 1),
            check::values(n, seed + 2),
        );
        Self {
            x: Tensor::from_slice(&a, (m, k), &dev).unwrap(),
            wt: Tensor::from_slice(&w, (n, k), &dev).unwrap(),
            b: Tensor::from_slice(&bv, n, &dev).unwrap(),
            bias: bv.iter().map(|v| v.to_f32()).collect(),
            a,
            w,
        }
    }
}

/// `Ops::matmul_nt_bias` adds the bias inside the bf16 kernels (their bits with the bias) and leaves it to the
/// caller (`None`) where no bf16 kernel runs the rows, with `--kernels off` and in f32.
#[test]
fn ops_fold_the_bias_into_the_bf16_kernels_only() {
    use crate::ops::{Ops, OpsConfig, Rows};
    let (m, k, n) = (6, 70, 33);
    let dev = Device::Cpu;
    let BiasCase {
        a,
        w,
        bias,
        x,
        wt,
        b,
    } = BiasCase::new((m, k, n), 9);
    let ops = check::builtin_ops();
    let choice = Bf16Gemm::for_this_cpu(false, &GemmCalibration::EachStart);
    let row = choice.row_kernel().then_some(row::gemm_nt_rows as Kernel);
    for (rows, kernel) in [
        (Rows::Segments(&[m]), choice.segment_kernel()),
        (Rows::Independent, row),
    ] {
        let got = ops.matmul_nt_bias(&x, &wt, &b, rows).unwrap();
        match kernel {
            Some(f) => {
                let mut want = vec![bf16::NAN; m * n];
                f(&a, &w, &bias, (m, k, n), check::storage(&mut want));
                let got = got
                    .expect("folded")
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<bf16>()
                    .unwrap();
                assert_eq!(got, want);
            }
            None => assert!(got.is_none()),
        }
    }
    let off = OpsConfig {
        fused_kernels: false,
        ..OpsConfig::default()
    };
    let off = Ops::new(&off, &dev, DType::BF16).unwrap();
    assert!(off
        .matmul_nt_bias(&x, &wt, &b, Rows::Independent)
        .unwrap()
        .is_none());
    let f32s = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let ops32 = Ops::new(&OpsConfig::default(), &dev, DType::F32).unwrap();
    let folded = ops32.matmul_nt_bias(&f32s(&x), &f32s(&wt), &f32s(&b), Rows::Independent);
    assert!(folded.unwrap().is_none());
}

/// Segments through the packed kernel, independent rows through the row kernel, both close to candle's
/// bf16 matmul, on a strided (transposed twice) input.
#[test]
fn tensors_in_segments_or_independent_rows_match_candles_product() {
    if check::skip() {
        return;
    }
    let (m, k, n) = (37, 130, 45);
    let dev = Device::Cpu;
    let x = Tensor::from_vec(check::values(m * k, 7), (k, m), &dev)
        .unwrap()
        .t()
        .unwrap();
    let w = Tensor::from_vec(check::values(n * k, 8), (n, k), &dev).unwrap();
    let want = x
        .to_dtype(DType::F32)
        .unwrap()
        .matmul(&w.to_dtype(DType::F32).unwrap().t().unwrap());
    let want: Vec<f32> = want.unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let mut kernels: Vec<Kernel> = vec![packed::gemm_nt];
    if amx::supported() {
        kernels.push(amx::gemm_nt);
    }
    let cases = kernels
        .iter()
        .flat_map(|&f| [(None, f), (Some(vec![5, 0, 32]), f)]);
    for (lens, f) in cases {
        let got = matmul_nt(&x, &w, None, lens.as_deref(), f).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let got: Vec<f32> = got
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= w.abs() / 256.0 + 1e-3,
                "{lens:?}: {g} vs {w}"
            );
        }
    }
}

/// The choice of a CPU without AVX512-BF16 where the widened kernel measured faster, driven through the ops on
/// any CPU: segments on the widened kernel (each alone, the bias before the rounding, the SwiGLU in its store),
/// independent rows on candle's matmul in blocks of 16 rows as under `--cpu-gemm gemm-crate`, and the attention
/// on f32 copies (no dot products without AVX512-BF16).
#[test]
fn ops_without_avx512_bf16_run_segments_widened_and_rows_on_candle() {
    use crate::ops::{CpuGemm, Ops, OpsConfig, Rows};
    let (m, k, n) = (6, 70, 34);
    let dev = Device::Cpu;
    let BiasCase {
        a,
        w,
        bias,
        x,
        wt,
        b,
    } = BiasCase::new((m, k, n), 14);
    let mut ops = check::builtin_ops();
    ops.bf16 = Bf16Gemm::WidenedOnly {
        widened_gflops: 2.0,
        candle_gflops: 1.0,
    };
    let bits = |t: Tensor| t.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
    let segs = Rows::Segments(&[2, 4]);
    let per_segment = |f: &KernelFn<'_>, bias: &[f32], cols: usize| {
        let mut want = vec![bf16::NAN; m * cols];
        f(
            &a[..2 * k],
            &w,
            bias,
            (2, k, cols),
            check::storage(&mut want[..2 * cols]),
        );
        f(
            &a[2 * k..],
            &w,
            bias,
            (4, k, cols),
            check::storage(&mut want[2 * cols..]),
        );
        want
    };
    let seg = bits(ops.matmul_nt(&x, &wt, segs).unwrap());
    assert_eq!(seg, per_segment(&widened::gemm_nt, &[], n));
    let folded = ops.matmul_nt_bias(&x, &wt, &b, segs).unwrap();
    assert_eq!(
        bits(folded.expect("folded")),
        per_segment(&widened::gemm_nt, &bias, n)
    );
    let fused = ops.matmul_swiglu(&x, &wt, Some(&b), segs).unwrap();
    assert_eq!(
        bits(fused.expect("fused")),
        per_segment(&widened::gemm_nt_swiglu, &bias, n / 2)
    );
    let crate_only = OpsConfig {
        cpu_gemm: CpuGemm::GemmCrate,
        ..OpsConfig::default()
    };
    let crate_only = Ops::new(&crate_only, &dev, DType::BF16).unwrap();
    assert_eq!(
        bits(ops.matmul_nt(&x, &wt, Rows::Independent).unwrap()),
        bits(crate_only.matmul_nt(&x, &wt, Rows::Independent).unwrap())
    );
    assert!(ops
        .matmul_nt_bias(&x, &wt, &b, Rows::Independent)
        .unwrap()
        .is_none());
    assert!(crate::ops::attention::describe_bf16(ops.bf16).starts_with("the f32 attention"));
}
