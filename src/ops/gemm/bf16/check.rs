//! What the bf16 kernels' tests share: inputs and the check against an f64 reference.

use std::mem::MaybeUninit;
use std::ops::Range;

use half::bf16;

pub(crate) use super::KernelFn;

/// True, with a line saying so, where this CPU has no AVX512-BF16: the test then skips.
pub fn skip() -> bool {
    let skip = !super::supported();
    if skip {
        eprintln!("skipped: this CPU has no AVX512-BF16");
    }
    skip
}

/// The CPU ops of a bf16 run on the built-in kernels (`--cpu-gemm off`: no CBLAS library, whatever is installed).
pub fn builtin_ops() -> crate::ops::Ops {
    let config = crate::ops::OpsConfig {
        cpu_gemm: crate::ops::CpuGemm::Builtin,
        ..crate::ops::OpsConfig::default()
    };
    crate::ops::Ops::new(&config, &candle_core::Device::Cpu, candle_core::DType::BF16).unwrap()
}

/// `len` bf16 values in [-1, 1), different for each `seed`.
pub fn values(len: usize, seed: usize) -> Vec<bf16> {
    (0..len)
        .map(|i| bf16::from_f32(((i * 7919 + seed * 104_729) % 2000) as f32 / 1000.0 - 1.0))
        .collect()
}

/// An initialised output handed to a kernel as the storage it writes (the kernels write bf16 values only).
pub fn storage(c: &mut [bf16]) -> &mut [MaybeUninit<bf16>] {
    // SAFETY: the kernels under test write initialised values only.
    unsafe { crate::ops::cpu_data::as_storage(c) }
}

/// `f`'s product, into an output that starts as NaN (so that an output it leaves unwritten shows).
pub fn product(f: &KernelFn<'_>, a: &[bf16], w: &[bf16], dims: (usize, usize, usize)) -> Vec<bf16> {
    let mut c = vec![bf16::NAN; dims.0 * dims.2];
    f(a, w, &[], dims, storage(&mut c));
    c
}

/// Assert `f` gives `a · wᵀ`, and `a · wᵀ + bias`, on random inputs of each shape (m, k, n) of `shapes`,
/// within the output's bf16 rounding (and f32 sums) of an f64 reference.
pub fn matches_reference(f: &KernelFn<'_>, shapes: &[(usize, usize, usize)]) {
    bias_is_added_before_the_rounding(f);
    for &(m, k, n) in shapes {
        let (a, w) = (values(m * k, 1), values(n * k, 2));
        // Without a bias, then with one (added to the f32 sums before their rounding).
        let bias: Vec<f32> = values(n, 5).iter().map(|b| 4.0 * b.to_f32()).collect();
        for bias in [&[][..], &bias[..]] {
            let mut c = vec![bf16::NAN; m * n];
            f(&a, &w, bias, (m, k, n), storage(&mut c));
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| a[i * k + p].to_f64() * w[j * k + p].to_f64())
                        .sum::<f64>()
                        + bias.get(j).map_or(0.0, |&b| b as f64);
                    let got = c[i * n + j].to_f64();
                    assert!(
                        (got - want).abs() <= want.abs() / 256.0 + 1e-5 * (1.0 + k as f64),
                        "({m},{k},{n}) at ({i},{j}), bias {}: {got} vs {want}",
                        !bias.is_empty()
                    );
                }
            }
        }
    }
}

/// Assert that `f` rounds `a·w + bias` once: at depth 1 each sum `a·w` is exact in f32, so the output must be
/// `bf16(a·w + b)` bit for bit, which differs from `bf16(bf16(a·w) + b)` somewhere among these values.
fn bias_is_added_before_the_rounding(f: &KernelFn<'_>) {
    let (m, n) = (7, 40);
    let (a, w) = (values(m, 6), values(n, 7));
    let bias: Vec<f32> = values(n, 8).iter().map(|b| b.to_f32() / 3.0).collect();
    let mut c = vec![bf16::NAN; m * n];
    f(&a, &w, &bias, (m, 1, n), storage(&mut c));
    let mut twice_differs = false;
    for i in 0..m {
        for j in 0..n {
            let s = a[i].to_f32() * w[j].to_f32();
            let once = bf16::from_f32(s + bias[j]);
            assert_eq!(c[i * n + j].to_bits(), once.to_bits(), "at ({i},{j})");
            twice_differs |= bf16::from_f32(bf16::from_f32(s).to_f32() + bias[j]) != once;
        }
    }
    assert!(
        twice_differs,
        "the values do not tell one rounding from two"
    );
}

/// Assert that `f`'s rows `r` of a product of shape `dims` have the same bits when computed without the
/// other rows, for each range `r` of `parts`, and that the whole product has the same bits on one thread.
pub fn rows_stand_alone(
    f: &KernelFn<'_>,
    (m, k, n): (usize, usize, usize),
    parts: &[Range<usize>],
) {
    let (a, w) = (values(m * k, 3), values(n * k, 4));
    let all = product(f, &a, &w, (m, k, n));
    for r in parts {
        let part = product(f, &a[r.start * k..r.end * k], &w, (r.len(), k, n));
        assert_eq!(part, all[r.start * n..r.end * n].to_vec(), "rows {r:?}");
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    assert_eq!(pool.install(|| product(f, &a, &w, (m, k, n))), all);
}

/// `swiglu` (a fused gate-up and SwiGLU kernel: (m, k, I) into m × I) gives the bits of `product` (its sums with
/// the bias, into m × 2I) followed by the bf16 SwiGLU pass, with and without a bias, on each (m, k, I) of
/// `shapes`.
pub fn swiglu_matches_product_then_pass(
    product: &KernelFn<'_>,
    swiglu: &KernelFn<'_>,
    shapes: &[(usize, usize, usize)],
) {
    for &(m, k, i) in shapes {
        let (a, w) = (values(m * k, 1), values(2 * i * k, 2));
        let b32: Vec<f32> = values(2 * i, 3).iter().map(|v| v.to_f32() * 4.0).collect();
        for bias in [&b32[..], &[][..]] {
            let mut gu = vec![bf16::ZERO; m * 2 * i];
            product(&a, &w, bias, (m, k, 2 * i), storage(&mut gu));
            let gu =
                candle_core::Tensor::from_vec(gu, (m, 2 * i), &candle_core::Device::Cpu).unwrap();
            let want = crate::ops::elementwise::bf16::swiglu_packed(&gu, None)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<bf16>()
                .unwrap();
            let mut got = vec![bf16::ZERO; m * i];
            swiglu(&a, &w, bias, (m, k, i), storage(&mut got));
            let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "{m} x {k} x {i}, bias {}",
                !bias.is_empty()
            );
        }
    }
}
