//! The fused ops (`src/ops`, `kernels/fused.cu`): the composed references against naive loops on the CPU, and
//! every kernel against its reference on a CUDA device when this build and machine have one (the same
//! comparisons `mobile-r1-eval self-test --device cuda` prints; without a GPU they run on the CPU, where the ops
//! are their references).

use candle_core::{Device, Tensor};
use mobile_r1_eval::ops::selftest as check;
use mobile_r1_eval::ops::{self, DecodeKv, Ops, OpsConfig, VarlenSeg};
use mobile_r1_eval::records::DecodeAttention;

fn cuda_or_cpu() -> Device {
    Device::new_cuda(0).unwrap_or(Device::Cpu)
}

/// The ops on `device` with the fused paths on or off.
fn ops_with(device: &Device, fused_kernels: bool) -> Ops {
    let config = OpsConfig {
        fused_kernels,
        ..OpsConfig::default()
    };
    Ops::new(&config, device, candle_core::DType::BF16).unwrap()
}

/// The values of any tensor as f32, flattened.
fn flat_f32(x: &Tensor) -> Vec<f32> {
    x.to_dtype(candle_core::DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Naive attention of one query head over positions `keys` (each a d-vector), softmax in f64.
fn naive_attend(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], scale: f32) -> Vec<f32> {
    let scores: Vec<f64> = keys
        .iter()
        .map(|k| q.iter().zip(k).map(|(a, b)| (a * b) as f64).sum::<f64>() * scale as f64)
        .collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let z: f64 = e.iter().sum();
    (0..q.len())
        .map(|j| {
            (e.iter()
                .zip(values)
                .map(|(w, v)| w * v[j] as f64)
                .sum::<f64>()
                / z) as f32
        })
        .collect()
}

#[test]
fn bias_epilogues_and_packed_swiglu_follow_the_transformers_roundings() {
    // bf16 makes each op's rounding visible: y + b is rounded before it meets the residual or the SwiGLU.
    use candle_core::DType;
    let (rows, cols) = (3, 5);
    let val = |i: usize| ((i * 29 % 17) as f32 - 8.0) / 3.0;
    let t = |n: usize, off: usize, shape: &[usize]| {
        let v: Vec<f32> = (0..n).map(|i| val(i + off)).collect();
        Tensor::from_vec(v, shape, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (y, u, r) = (
        t(rows * cols, 0, &[rows, cols]),
        t(rows * cols, 7, &[rows, cols]),
        t(rows * cols, 3, &[rows, cols]),
    );
    let (b, bu) = (t(cols, 11, &[cols]), t(cols, 5, &[cols]));
    let flat = flat_f32;
    let bf = |x: f32| half::bf16::from_f32(x).to_f32();
    let (yv, uv, rv, bv, buv) = (flat(&y), flat(&u), flat(&r), flat(&b), flat(&bu));
    let dev = cuda_or_cpu();
    let on = |x: &Tensor| x.to_device(&dev).unwrap();
    let ops = ops_with(&dev, true);
    let add = flat(&ops.bias_add(&on(&y), &on(&b)).unwrap());
    let gu = Tensor::cat(&[&y, &u], 1).unwrap();
    let bgu = Tensor::cat(&[&b, &bu], 0).unwrap();
    let swi = flat(&ops.swiglu_packed(&on(&gu), Some(&on(&bgu))).unwrap());
    let res = flat(&ops.bias_residual(&on(&y), &on(&b), &on(&r)).unwrap());
    for i in 0..rows * cols {
        let c = i % cols;
        let yb = bf(yv[i] + bv[c]);
        assert_eq!(add[i], yb, "bias_add at {i}");
        assert_eq!(res[i], bf(rv[i] + yb), "bias_residual at {i}");
        let g = yb;
        let up = bf(uv[i] + buv[c]);
        let silu = bf(g / (1.0 + (-g).exp()));
        let want = bf(silu * up);
        assert!(
            (swi[i] - want).abs() <= want.abs() / 128.0,
            "swiglu_packed at {i}: {} vs {want}",
            swi[i]
        );
    }
}

#[test]
fn fused_cpu_elementwise_ops_match_their_references() {
    let (rows, cols) = (5, 37);
    let val = |i: usize| ((i * 7919 % 1013) as f32 - 506.0) / 61.0;
    let gu = Tensor::from_vec(
        (0..rows * 2 * cols).map(val).collect::<Vec<f32>>(),
        (rows, 2 * cols),
        &Device::Cpu,
    )
    .unwrap();
    let b = Tensor::from_vec(
        (0..2 * cols)
            .map(|i| val(i + 3) / 4.0)
            .collect::<Vec<f32>>(),
        2 * cols,
        &Device::Cpu,
    )
    .unwrap();
    // q/k/v + rotary: 2 rows of 3 + 2·1 heads of 4 (the packed projection is gu's first 2 rows, 20 of its columns).
    let y = gu.narrow(0, 0, 2).unwrap().narrow(1, 0, 20).unwrap();
    let b20 = b.narrow(0, 0, 20).unwrap();
    let table = |row: usize, col: usize| {
        let t = gu.narrow(0, row, 2).unwrap().narrow(1, col, 2).unwrap();
        (t / 9.0).unwrap().contiguous().unwrap()
    };
    let (cos, sin) = (table(2, 0), table(3, 5));
    let flat = |(q, k, v): (Tensor, Tensor, Tensor)| -> Vec<f32> {
        [q, k, v]
            .iter()
            .flat_map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    };
    let args = ops::QkvRope {
        y: &y,
        bias: &b20,
        cos: &cos,
        sin: &sin,
        heads: 3,
        kv_heads: 1,
    };
    assert_eq!(
        flat(ops_with(&Device::Cpu, true).qkv_rope(args).unwrap()),
        flat(ops::reference::qkv_rope(args).unwrap())
    );
    // SwiGLU: with AVX2 the fused path's exp is vectorised (about an ulp from libm's), so compare closely, not
    // bitwise.
    for bias in [None, Some(&b)] {
        let got = flat_f32(
            &ops_with(&Device::Cpu, true)
                .swiglu_packed(&gu, bias)
                .unwrap(),
        );
        let want = flat_f32(&ops::reference::swiglu_packed(&gu, bias).unwrap());
        assert_eq!(got.len(), rows * cols);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 4.0 * f32::EPSILON * w.abs() + 1e-30,
                "bias {}: element {i}: {g} vs {w}",
                bias.is_some()
            );
        }
    }
}

#[test]
fn qkv_rope_splits_adds_the_bias_and_rotates_half() {
    // One row, heads 2 / kv 1, d 4: columns [q0 | q1 | k | v], bf16 roundings per op.
    use candle_core::DType;
    let (heads, kv, d) = (2usize, 1usize, 4usize);
    let width = (heads + 2 * kv) * d;
    let yv: Vec<f32> = (0..width).map(|i| (i as f32 - 7.3) / 3.1).collect();
    let bv: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
    let (cv, sv) = (vec![0.8f32, -0.3], vec![0.6f32, 0.95]);
    let bf = |x: f32| half::bf16::from_f32(x).to_f32();
    let t = |v: &[f32], shape: &[usize]| {
        Tensor::from_slice(v, shape, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
            .to_device(&cuda_or_cpu())
            .unwrap()
    };
    let (y, b, c, s) = (
        t(&yv, &[1, width]),
        t(&bv, &[width]),
        t(&cv, &[1, 2]),
        t(&sv, &[1, 2]),
    );
    let (q, k, v) = ops_with(&cuda_or_cpu(), true)
        .qkv_rope(ops::QkvRope {
            y: &y,
            bias: &b,
            cos: &c,
            sin: &s,
            heads,
            kv_heads: kv,
        })
        .unwrap();
    assert_eq!(q.dims(), [1, heads, d]);
    assert_eq!(k.dims(), [1, kv, d]);
    let flat = flat_f32;
    let x: Vec<f32> = (0..width).map(|i| bf(bf(yv[i]) + bf(bv[i]))).collect();
    let (c, s) = (cv.iter().map(|&a| bf(a)), sv.iter().map(|&a| bf(a)));
    let (c, s): (Vec<f32>, Vec<f32>) = (c.collect(), s.collect());
    let rotated = |h: usize| -> Vec<f32> {
        let o = h * d;
        let mut out = vec![0.0; d];
        for j in 0..d / 2 {
            let (x1, x2) = (x[o + j], x[o + j + d / 2]);
            out[j] = bf(bf(x1 * c[j]) - bf(x2 * s[j]));
            out[j + d / 2] = bf(bf(x2 * c[j]) + bf(x1 * s[j]));
        }
        out
    };
    assert_eq!(flat(&q), [rotated(0), rotated(1)].concat());
    assert_eq!(flat(&k), rotated(2));
    assert_eq!(flat(&v), x[3 * d..].to_vec());
}

#[test]
fn decode_attention_writes_the_new_position_and_attends_over_it() {
    let (kv_heads, group, d) = (2, 3, 8);
    let lens = [0usize, 2, 5];
    let val = |i: usize| ((i * 37 % 23) as f32 - 11.0) / 7.0;
    let b = lens.len();
    let h = kv_heads * group;
    let q: Vec<f32> = (0..b * h * d).map(val).collect();
    let k_new: Vec<f32> = (0..b * kv_heads * d).map(|i| val(i + 5)).collect();
    let v_new: Vec<f32> = (0..b * kv_heads * d).map(|i| val(i + 9)).collect();
    let dev = Device::Cpu;
    let bufs: Vec<(Tensor, Tensor)> = lens
        .iter()
        .enumerate()
        .map(|(s, &l)| {
            let n = kv_heads * (l + 2) * d;
            let kb: Vec<f32> = (0..n).map(|i| val(i + 100 * s)).collect();
            let vb: Vec<f32> = (0..n).map(|i| val(i + 100 * s + 3)).collect();
            (
                Tensor::from_vec(kb, (kv_heads, l + 2, d), &dev).unwrap(),
                Tensor::from_vec(vb, (kv_heads, l + 2, d), &dev).unwrap(),
            )
        })
        .collect();
    let kv: Vec<DecodeKv<'_>> = bufs
        .iter()
        .zip(lens)
        .map(|((k, v), len)| DecodeKv { k, v, len })
        .collect();
    let t = |v: &[f32], s: (usize, usize, usize)| Tensor::from_slice(v, s, &dev).unwrap();
    let scale = 0.5;
    // The CPU's choice (the fused CPU decode with the fused ops on, one composed attention per sequence without
    // them), the composed and padded paths forced, and the fused path asked for with the fused ops off; the
    // zero-length cache's buffer is shorter than the longest, so the padded path pads it and views the others.
    for (fused, path, want) in [
        (true, None, DecodeAttention::Fused),
        (false, None, DecodeAttention::PerSequence),
        (
            true,
            Some(DecodeAttention::PerSequence),
            DecodeAttention::PerSequence,
        ),
        (true, Some(DecodeAttention::Padded), DecodeAttention::Padded),
        (
            false,
            Some(DecodeAttention::Padded),
            DecodeAttention::Padded,
        ),
        (true, Some(DecodeAttention::Fused), DecodeAttention::Fused),
        (
            false,
            Some(DecodeAttention::Fused),
            DecodeAttention::PerSequence,
        ),
    ] {
        let step = ops_with(&dev, fused)
            .decode_step(
                vec![kv.clone()],
                (&dev, candle_core::DType::F32),
                (d, group),
                path,
            )
            .unwrap();
        assert_eq!(step.path(), want);
        let out = step
            .attend(
                0,
                &t(&q, (b, h, d)),
                &t(&k_new, (b, kv_heads, d)),
                &t(&v_new, (b, kv_heads, d)),
                scale,
            )
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        for (s, &len) in lens.iter().enumerate() {
            let kb = bufs[s].0.to_vec3::<f32>().unwrap();
            let vb = bufs[s].1.to_vec3::<f32>().unwrap();
            for kvh in 0..kv_heads {
                let new_k = &k_new[(s * kv_heads + kvh) * d..][..d];
                let new_v = &v_new[(s * kv_heads + kvh) * d..][..d];
                assert_eq!(kb[kvh][len], new_k, "K written at position {len}");
                assert_eq!(vb[kvh][len], new_v, "V written at position {len}");
                for g in 0..group {
                    let hh = kvh * group + g;
                    let qh = &q[(s * h + hh) * d..][..d];
                    let want = naive_attend(qh, &kb[kvh][..=len], &vb[kvh][..=len], scale);
                    for j in 0..d {
                        assert!(
                            (out[s][hh][j] - want[j]).abs() < 1e-5,
                            "seq {s} head {hh} dim {j}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn varlen_attention_attends_within_segments_after_their_prefix() {
    let (heads, kv_heads, d) = (4, 2, 3);
    let group = heads / kv_heads;
    let val = |i: usize| ((i * 53 % 29) as f32 - 14.0) / 9.0;
    // Segments: 3 rows after a 2-position prefix (buffer of 4), then 2 rows without prefix.
    let (lens, plens, cap) = ([3usize, 2], [2usize, 0], 4);
    let n = 5;
    let dev = Device::Cpu;
    let q: Vec<f32> = (0..n * heads * d).map(val).collect();
    let k: Vec<f32> = (0..n * kv_heads * d).map(|i| val(i + 7)).collect();
    let v: Vec<f32> = (0..n * kv_heads * d).map(|i| val(i + 11)).collect();
    let pk: Vec<f32> = (0..kv_heads * cap * d).map(|i| val(i + 19)).collect();
    let pv: Vec<f32> = (0..kv_heads * cap * d).map(|i| val(i + 23)).collect();
    let t = |x: &[f32], s: (usize, usize, usize)| Tensor::from_slice(x, s, &dev).unwrap();
    let (pkt, pvt) = (t(&pk, (kv_heads, cap, d)), t(&pv, (kv_heads, cap, d)));
    let segs = [
        VarlenSeg {
            start: 0,
            len: 3,
            prefix: Some((&pkt, &pvt, 2)),
        },
        VarlenSeg {
            start: 3,
            len: 2,
            prefix: None,
        },
    ];
    let no_prefix = segs.map(|s| VarlenSeg { prefix: None, ..s });
    for (causal, fused, with_prefix) in [true, false].into_iter().flat_map(|c| {
        [
            (c, true, true),
            (c, false, true),
            (c, false, false),
            (c, true, false),
        ]
    }) {
        let plens = if with_prefix { plens } else { [0, 0] };
        let segs = if with_prefix { &segs } else { &no_prefix };
        let (qt, kt, vt) = (
            t(&q, (n, heads, d)),
            t(&k, (n, kv_heads, d)),
            t(&v, (n, kv_heads, d)),
        );
        let out = ops_with(&dev, fused)
            .varlen_attention(ops::Varlen {
                q: &qt,
                k: &kt,
                v: &vt,
                segs,
                causal,
                scale: 0.7,
            })
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        let row = |x: &[f32], r: usize, h: usize, hs: usize| x[(r * hs + h) * d..][..d].to_vec();
        let mut start = 0;
        for (s, (&len, &p)) in lens.iter().zip(&plens).enumerate() {
            for i in 0..len {
                for (h, got_row) in out[start + i].iter().enumerate() {
                    let kvh = h / group;
                    let (mut keys, mut values) = (vec![], vec![]);
                    for j in 0..p {
                        keys.push(pk[(kvh * cap + j) * d..][..d].to_vec());
                        values.push(pv[(kvh * cap + j) * d..][..d].to_vec());
                    }
                    let visible = if causal { i + 1 } else { len };
                    for j in 0..visible {
                        keys.push(row(&k, start + j, kvh, kv_heads));
                        values.push(row(&v, start + j, kvh, kv_heads));
                    }
                    let want = naive_attend(&row(&q, start + i, h, heads), &keys, &values, 0.7);
                    for (c, got) in got_row.iter().enumerate() {
                        assert!(
                            (got - want[c]).abs() < 1e-5,
                            "causal={causal} fused={fused} prefix={with_prefix} seg {s} row {i} head {h}"
                        );
                    }
                }
            }
            start += len;
        }
    }
}

#[test]
fn every_kernel_matches_its_reference_on_this_machine() {
    let device = cuda_or_cpu();
    for fused_kernels in [true, false] {
        let ops = ops_with(&device, fused_kernels);
        let results = check::run(&ops, &device).unwrap();
        // Per dtype: RMSNorm, SwiGLU, bias epilogues, decode, varlen; on CUDA bf16/f16 also run the varlen cases
        // on the tensor-core kernel.
        let kernels = device.is_cuda() && fused_kernels;
        let mma = if kernels { 2 * 3 } else { 0 };
        assert_eq!(results.len(), 3 * (3 + 5 + 6 + 3 + 4 + 3) + mma);
        for r in &results {
            assert!(r.passed, "fused={fused_kernels}: {r:?}");
        }
        let fused: Vec<&str> = results
            .iter()
            .filter(|r| r.kernel)
            .map(|r| r.case.as_str())
            .collect();
        if kernels {
            assert_eq!(
                fused.len(),
                results.len(),
                "every case runs a kernel on CUDA"
            );
        } else if !fused_kernels {
            assert_eq!(fused, Vec::<&str>::new(), "the fused paths are off");
        } else {
            // On the CPU the f32 varlen attention, SwiGLU and q/k/v + rotary have fused implementations, and
            // the decode attention in f32 and bf16.
            assert_eq!(fused.len(), 3 + 5 + 3 + 2 * 4, "{fused:?}");
            assert!(fused.iter().all(|c| [
                "varlen",
                "swiglu_packed",
                "qkv_rope",
                "decode_attention"
            ]
            .iter()
            .any(|p| c.starts_with(p))));
            eprintln!("no CUDA device: the CUDA kernels were not exercised (run `self-test --device cuda` on a GPU)");
        }
    }
}

#[test]
fn self_test_command_reports_json() {
    let out = crate::util::bin()
        .args(["self-test", "--device", "cpu", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], true);
    // Per dtype: 3 RMSNorm, 5 SwiGLU, 6 bias epilogues, 3 qkv_rope, 4 decode and 3 varlen cases.
    assert_eq!(v["results"].as_array().unwrap().len(), 72);
    assert_eq!(v["results"][0]["dtype"], "f32");
    let bad = crate::util::bin()
        .args(["self-test", "--device", "tpu"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tpu"));
}
