//! The one-pass bf16 ops against the composed references' bits: conversions, bias epilogues, RMSNorm, q/k/v +
//! rotary, SwiGLU.
use super::*;
use crate::ops::elementwise::reference;
use candle_core::Device;

fn bits(t: &Tensor) -> Vec<u16> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<bf16>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Both epilogues and the RMSNorm give the composed reference's bits on values whose sums need rounding (ties included),
/// and the rounding is half's for every finite sum and for NaN.
#[test]
fn bf16_epilogues_give_the_reference_bits() {
    let dev = Device::Cpu;
    let r = |shape: (usize, usize), s: f64| {
        (Tensor::randn(0f32, 1.0, shape, &dev).unwrap() * s)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (y, res) = (r((37, 300), 3.0), r((37, 300), 50.0));
    let b = r((1, 300), 1.0).squeeze(0).unwrap();
    assert_eq!(
        bits(&bias_add(&y, &b).unwrap()),
        bits(&reference::bias_add(&y, &b).unwrap())
    );
    assert_eq!(
        bits(&bias_residual(&y, &b, &res).unwrap()),
        bits(&reference::bias_residual(&y, &b, &res).unwrap())
    );
    assert_eq!(bits(&add(&y, &res).unwrap()), bits(&(&res + &y).unwrap()));
    assert!(add(&y, &b).is_err());
    for x in [
        1.0f32 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        -2.5e-3,
        3.0e38,
        f32::NAN,
    ] {
        for v in [
            x,
            f32::from_bits(x.to_bits() + 1),
            f32::from_bits(x.to_bits() - 1),
        ] {
            assert_eq!(round(v).to_bits(), bf16::from_f32(v).to_bits(), "{v:e}");
        }
    }
    assert_eq!(
        bits(&rms_norm(&res, &b, 1e-6).unwrap()),
        bits(&reference::rms_norm_hf(&res, &b, 1e-6).unwrap())
    );
    // Whole blocks of 16 rows and a partial one, an odd width (its last value alone).
    let (odd, w_odd) = (r((35, 301), 20.0), r((1, 301), 1.0).squeeze(0).unwrap());
    assert_eq!(
        bits(&rms_norm(&odd, &w_odd, 1e-6).unwrap()),
        bits(&reference::rms_norm_hf(&odd, &w_odd, 1e-6).unwrap())
    );
    assert!(bias_add(&y, &b.narrow(0, 0, 10).unwrap()).is_err());
}

/// The conversions give `to_dtype`'s bits (strided inputs and NaN included).
#[test]
fn conversions_give_to_dtypes_bits() {
    let dev = Device::Cpu;
    let x = (Tensor::randn(0f32, 1.0, (70, 300), &dev).unwrap() * 1e3)
        .unwrap()
        .t()
        .unwrap();
    let x = Tensor::cat(&[x, Tensor::new(&[[f32::NAN; 70]], &dev).unwrap()], 0).unwrap();
    let b = to_bf16(&x).unwrap();
    assert_eq!(bits(&b), bits(&x.to_dtype(DType::BF16).unwrap()));
    let (w, want) = (
        to_f32(&b.t().unwrap()).unwrap(),
        b.t().unwrap().to_dtype(DType::F32).unwrap(),
    );
    let f = |t: &Tensor| {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(f(&w), f(&want));
}

/// The q/k/v rotary gives the composed reference's bits with f32 tables (the vision tower) and bf16 tables
/// (the text model), grouped heads included.
#[test]
fn qkv_rope_gives_the_reference_bits() {
    let dev = Device::Cpu;
    let (n, heads, kv_heads, d) = (9, 4, 2, 16);
    let r = |shape: &[usize], s: f64| {
        (Tensor::randn(0f32, 1.0, shape, &dev).unwrap() * s)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (y, bias) = (
        r(&[n, (heads + 2 * kv_heads) * d], 2.0),
        r(&[(heads + 2 * kv_heads) * d], 1.0),
    );
    let angles = Tensor::randn(0f32, 2.0, (n, d / 2), &dev).unwrap();
    for dtype in [DType::F32, DType::BF16] {
        let (cos, sin) = (
            angles.cos().unwrap().to_dtype(dtype).unwrap(),
            angles.sin().unwrap().to_dtype(dtype).unwrap(),
        );
        let a = super::super::QkvRope {
            y: &y,
            bias: &bias,
            cos: &cos,
            sin: &sin,
            heads,
            kv_heads,
        };
        let (got, want) = (qkv_rope(a).unwrap(), reference::qkv_rope(a).unwrap());
        for (g, w) in [(&got.0, &want.0), (&got.1, &want.1), (&got.2, &want.2)] {
            assert_eq!(g.dims(), w.dims());
            assert_eq!(bits(g), bits(w), "{dtype:?} tables");
        }
    }
}

/// The SwiGLU rounds as torch does: `round(round(silu(g + b_g)) · (u + b_u))`, the biased halves rounded
/// first; against libm's `exp` the bits agree but where the vectorised `exp`'s last f32 bit moves a
/// rounding (within one bf16 step), with and without a bias, on rows with a vector tail.
#[test]
fn swiglu_rounds_as_torch_does() {
    let dev = Device::Cpu;
    let (rows, cols) = (13, 75);
    let gu = (Tensor::randn(0f32, 1.0, (rows, 2 * cols), &dev).unwrap() * 4.0)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let b = Tensor::randn(0f32, 1.0, 2 * cols, &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let x: Vec<f32> = gu
        .flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap();
    let bv: Vec<f32> = b.to_dtype(DType::F32).unwrap().to_vec1().unwrap();
    for bias in [None, Some(&b)] {
        let got = bits(&swiglu_packed(&gu, bias).unwrap());
        assert_eq!(got.len(), rows * cols);
        let mut exact = 0;
        for (i, got) in got.iter().enumerate() {
            let (r, c) = (i / cols, i % cols);
            let add = |v: f32, j: usize| match bias {
                Some(_) => bf16::from_f32(v + bv[j]).to_f32(),
                None => v,
            };
            let (g, u) = (
                add(x[r * 2 * cols + c], c),
                add(x[r * 2 * cols + cols + c], cols + c),
            );
            let silu = bf16::from_f32(g / (1.0 + (-g).exp())).to_f32();
            let want = bf16::from_f32(silu * u).to_bits();
            assert!(got.abs_diff(want) <= 1, "({r},{c}): {got:#x} vs {want:#x}");
            exact += usize::from(*got == want);
        }
        assert!(
            exact * 100 >= 99 * rows * cols,
            "{exact} of {} exact",
            rows * cols
        );
    }
}
