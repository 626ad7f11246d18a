use super::*;
use crate::ops::attention::reference;

/// Values in [-1, 1) from a seed, exactly representable in bf16 (so both dtypes hold the same numbers).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = ((x >> 40) % 2000) as f32 / 1000.0 - 1.0;
            bf16::from_f32(v).to_f32()
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, seed), shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// The attention of one query over `keys` rows of K/V (kv_heads, cap, d) for KV head `kh`, in f64.
fn exact(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (kh, cap, keys): (usize, usize, usize),
    scale: f64,
) -> Vec<f64> {
    let d = q.len();
    let row = |t: &[f32], j: usize| t[(kh * cap + j) * d..][..d].to_vec();
    let s: Vec<f64> = (0..keys)
        .map(|j| {
            let kj = row(k, j);
            q.iter()
                .zip(&kj)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
                * scale
        })
        .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let total: f64 = e.iter().sum();
    let mut o = vec![0f64; d];
    for (j, ej) in e.iter().enumerate() {
        for (x, y) in o.iter_mut().zip(row(v, j)) {
            *x += ej * y as f64 / total;
        }
    }
    o
}

/// A step of four sequences (empty cache, short, two and three chunks) with their buffers.
struct Case {
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    bufs: Vec<(Tensor, Tensor)>,
    lens: Vec<usize>,
}

fn case((heads, kv_heads, d): (usize, usize, usize), dtype: DType) -> Case {
    let lens = vec![0, 5, CHUNK + 44, 2 * CHUNK + 1];
    let b = lens.len();
    let bufs = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let cap = l + 1 + i;
            let s = 10 * i as u64;
            (
                tensor(&[kv_heads, cap, d], s + 3, dtype),
                tensor(&[kv_heads, cap, d], s + 4, dtype),
            )
        })
        .collect();
    Case {
        q: tensor(&[b, heads, d], 1, dtype),
        k_new: tensor(&[b, kv_heads, d], 2, dtype),
        v_new: tensor(&[b, kv_heads, d], 5, dtype),
        bufs,
        lens,
    }
}

impl Case {
    fn kv(&self) -> Vec<DecodeKv<'_>> {
        self.bufs
            .iter()
            .zip(&self.lens)
            .map(|((k, v), &len)| DecodeKv { k, v, len })
            .collect()
    }

    /// A copy with fresh buffers (the step writes into them).
    fn fresh(&self) -> Case {
        Case {
            bufs: self
                .bufs
                .iter()
                .map(|(k, v)| (k.copy().unwrap(), v.copy().unwrap()))
                .collect(),
            lens: self.lens.clone(),
            q: self.q.clone(),
            k_new: self.k_new.clone(),
            v_new: self.v_new.clone(),
        }
    }
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Every vector level, f32 and bf16 buffers, group sizes 7 and 2 and head dims 64, 72 (an 8-dim tail), 80 and
/// 128: within float rounding of the exact attention (bf16: the exact result rounded once, within a bf16 step),
/// the new K/V written into the buffers, the same bits at AVX2 and AVX-512, and each sequence's bits the same
/// alone as beside the others.
#[test]
fn every_level_matches_the_exact_attention_and_sequences_stand_alone() {
    for (shape, dtype) in [
        ((14, 2, 64), DType::F32),
        ((14, 2, 72), DType::F32),
        ((4, 2, 80), DType::BF16),
        ((16, 8, 128), DType::BF16),
        ((16, 8, 128), DType::F32),
    ] {
        let (heads, kv_heads, d) = shape;
        let base = case(shape, dtype);
        let scale = 1.0 / (d as f32).sqrt();
        let mut vector_bits: Vec<Vec<f32>> = Vec::new();
        for level in Level::supported() {
            eprintln!("decode {shape:?} {dtype:?} at {level:?}");
            let c = base.fresh();
            let out = attention_at(&c.q, (&c.k_new, &c.v_new), &c.kv(), scale, level).unwrap();
            assert_eq!(out.dtype(), dtype);
            let got = f32s(&out);
            let q = f32s(&c.q);
            for (b, (kb, vb)) in c.bufs.iter().enumerate() {
                let keys = c.lens[b] + 1;
                let (k, v) = (f32s(kb), f32s(vb));
                let cap = kb.dim(1).unwrap();
                for kh in 0..kv_heads {
                    let at = (kh * cap + c.lens[b]) * d;
                    let new = (b * kv_heads + kh) * d;
                    assert_eq!(
                        k[at..at + d],
                        f32s(&c.k_new)[new..new + d],
                        "new key {b}/{kh}"
                    );
                    assert_eq!(
                        v[at..at + d],
                        f32s(&c.v_new)[new..new + d],
                        "new value {b}/{kh}"
                    );
                }
                for h in 0..heads {
                    let row = (b * heads + h) * d;
                    let want = exact(
                        &q[row..row + d],
                        &k,
                        &v,
                        (h / (heads / kv_heads), cap, keys),
                        scale as f64,
                    );
                    for (g, w) in got[row..row + d].iter().zip(&want) {
                        let tol = match dtype {
                            DType::F32 => 2e-6,
                            _ => w.abs() / 128.0 + 1e-7,
                        };
                        assert!(
                            (*g as f64 - w).abs() <= tol,
                            "{level:?} {shape:?} seq {b} head {h}: {g} vs {w}"
                        );
                    }
                }
            }
            if level != Level::Portable {
                vector_bits.push(got.clone());
            }
            // Each sequence alone gives the bits it gave beside the others.
            for b in 0..c.lens.len() {
                let one = base.fresh();
                let kv = [one.kv()[b]];
                let alone = attention_at(
                    &one.q.narrow(0, b, 1).unwrap(),
                    (
                        &one.k_new.narrow(0, b, 1).unwrap(),
                        &one.v_new.narrow(0, b, 1).unwrap(),
                    ),
                    &kv,
                    scale,
                    level,
                )
                .unwrap();
                assert_eq!(
                    f32s(&alone),
                    got[b * heads * d..(b + 1) * heads * d],
                    "{level:?} seq {b} alone"
                );
            }
        }
        assert!(
            vector_bits.windows(2).all(|w| w[0] == w[1]),
            "AVX2 and AVX-512 bits differ {shape:?}"
        );
    }
}

/// The fused step agrees with the composed reference (candle's attention per sequence) in f32.
#[test]
fn fused_decode_matches_the_composed_reference() {
    let base = case((14, 2, 64), DType::F32);
    let (a, b) = (base.fresh(), base.fresh());
    let got = attention(&a.q, (&a.k_new, &a.v_new), &a.kv(), 0.125).unwrap();
    let want = reference::decode_attention(&b.q, &b.k_new, &b.v_new, &b.kv(), 0.125).unwrap();
    let diff = (&got - &want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff < 2e-6, "{diff}");
}

/// A block of keys scored together gives each score the bits it has scored alone, on every vector path: head
/// dims with and without an 8-dim tail, full blocks and short ones, two queries.
#[test]
fn block_scores_have_each_keys_own_bits() {
    for d in [64, 72, 128] {
        for n in [kernel::KEYS, 8, 9, 3] {
            let (q, k) = (values(2 * d, d as u64), values(n * d, 7 + n as u64));
            for level in Level::supported() {
                let rows = n + 5;
                let at = |j0| kernel::At { rows, j0 };
                let mut block = vec![0f32; 2 * rows];
                kernel::scores(&q, &k, &mut block, d, at(2), level);
                let mut alone = vec![0f32; 2 * rows];
                for (j, kj) in k.chunks_exact(d).enumerate() {
                    kernel::scores(&q, kj, &mut alone, d, at(2 + j), level);
                }
                let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&block), bits(&alone), "d {d}, {n} keys at {level:?}");
            }
        }
    }
}

/// Weighted sums added a block of rows at a time give the bits of one pass over all the rows, on every vector
/// path: group sizes 7 and 2 (the query blocks' tails), head dims with and without an 8-dim tail.
#[test]
fn weighted_sums_in_blocks_have_one_passs_bits() {
    for (group, d) in [(7, 64), (2, 72), (7, 128)] {
        let rows = 45;
        let (p, v) = (values(group * rows, 3), values(rows * d, d as u64));
        for level in Level::supported() {
            let mut whole = vec![0f32; group * d];
            kernel::weighted_sums(&p, &v, &mut whole, d, kernel::At { rows, j0: 0 }, level);
            let mut blocks = vec![0f32; group * d];
            for (b, vb) in v.chunks(16 * d).enumerate() {
                let at = kernel::At { rows, j0: 16 * b };
                kernel::weighted_sums(&p, vb, &mut blocks, d, at, level);
            }
            let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&whole),
                bits(&blocks),
                "group {group}, d {d} at {level:?}"
            );
        }
    }
}

/// Shapes the fused path cannot take give an error naming them.
#[test]
fn mismatched_caches_are_refused() {
    let c = case((14, 2, 64), DType::F32);
    let kv = c.kv();
    let err = attention(&c.q, (&c.k_new, &c.v_new), &kv[..2], 0.1).unwrap_err();
    assert!(err.to_string().contains("2 caches"), "{err}");
    let full = [DecodeKv {
        len: c.bufs[0].0.dim(1).unwrap(),
        ..kv[0]
    }];
    let one = |t: &Tensor| t.narrow(0, 0, 1).unwrap();
    let err = attention(&one(&c.q), (&one(&c.k_new), &one(&c.v_new)), &full, 0.1).unwrap_err();
    assert!(err.to_string().contains("valid positions"), "{err}");
}

/// The bf16 widening gives `to_f32`'s bits and the score maximum the portable fold's on every vector path, at
/// lengths around the vector widths (special values included: infinities, NaN, signed zeros, subnormals).
#[test]
fn widen_and_max_are_exact() {
    let specials = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
        1e-40,
        -3.5,
    ];
    for n in [0, 1, 7, 8, 15, 16, 17, 33, 256] {
        let mut xs = values(n, n as u64 + 1);
        for (x, s) in xs.iter_mut().zip(specials) {
            *x = s;
        }
        let b: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
        let want: Vec<u32> = b.iter().map(|x| x.to_f32().to_bits()).collect();
        let finite: Vec<f32> = values(n, n as u64 + 7).iter().map(|x| x * 30.0).collect();
        let top = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        // A scratch buffer longer than the values, as a thread's is after a longer chunk.
        let mut scratch = vec![7f32; n + 5];
        let widened = <bf16 as Kv>::widen(&b, &mut scratch);
        let got: Vec<u32> = widened.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, want, "widen, {n} values");
        for level in Level::supported() {
            assert_eq!(
                kernel::max(&finite, level),
                top,
                "max, {n} values at {level:?}"
            );
        }
    }
}

/// Times of one decode step's attention for one layer, fused against the composed per-sequence path (bf16: on
/// f32 copies, [`crate::ops::attention`]'s `bf16` module), alternated, best of 200: the `small` preset's shape
/// (14 heads of 64 over 2 KV heads) over a 300-token prompt and a 1,306-token screenshot prompt, Qwen3-VL-2B's
/// (16 heads of 128 over 8) over the latter, one sequence and four:
/// `cargo test --release --lib attention::cpu::decode::tests::timing -- --ignored --nocapture`
/// (for a profiler: `DECODE_FUSED_ONLY=1` the fused path alone, `DECODE_CASE='small 1306 BF16 1'` one case,
/// `DECODE_ROUNDS=20000` more rounds; `DECODE_LEVEL=avx2` the AVX2 path on an AVX-512 CPU).
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn timing() {
    let level = match std::env::var("DECODE_LEVEL").as_deref() {
        Ok("avx2") => Level::Avx2,
        _ => Level::detect(),
    };
    for (name, shape, keys) in [
        ("small 300", (14, 2, 64), 300),
        ("small 1306", (14, 2, 64), 1306),
        ("qwen3 1306", (16, 8, 128), 1306),
    ] {
        for dtype in [DType::F32, DType::BF16] {
            for b in [1, 4] {
                if std::env::var("DECODE_CASE").is_ok_and(|c| c != format!("{name} {dtype:?} {b}"))
                {
                    continue;
                }
                let (heads, kv_heads, d) = shape;
                let bufs: Vec<(Tensor, Tensor)> = (0..b)
                    .map(|i| {
                        let t = |s| tensor(&[kv_heads, keys + 64, d], s, dtype);
                        (t(3 + i as u64), t(40 + i as u64))
                    })
                    .collect();
                let kv: Vec<DecodeKv<'_>> = bufs
                    .iter()
                    .map(|(k, v)| DecodeKv { k, v, len: keys })
                    .collect();
                let q = tensor(&[b, heads, d], 1, dtype);
                let (kn, vn) = (
                    tensor(&[b, kv_heads, d], 2, dtype),
                    tensor(&[b, kv_heads, d], 5, dtype),
                );
                let composed = || match dtype {
                    DType::F32 => reference::decode_attention(&q, &kn, &vn, &kv, 0.1).unwrap(),
                    _ => crate::ops::attention::bf16_decode_for_timing(&q, (&kn, &vn), &kv, 0.1),
                };
                let mut best = [f64::INFINITY; 2];
                for _ in 0..std::env::var("DECODE_ROUNDS").map_or(200, |r| r.parse().unwrap()) {
                    let t0 = std::time::Instant::now();
                    attention_at(&q, (&kn, &vn), &kv, 0.1, level).unwrap();
                    best[0] = best[0].min(t0.elapsed().as_secs_f64());
                    if std::env::var("DECODE_FUSED_ONLY").is_ok() {
                        continue;
                    }
                    let t0 = std::time::Instant::now();
                    composed();
                    best[1] = best[1].min(t0.elapsed().as_secs_f64());
                }
                let bytes = (2 * b * kv_heads * (keys + 1) * d * dtype.size_in_bytes()) as f64;
                eprintln!(
                    "{name} {dtype:?} B={b}: fused {:.1} µs ({:.1} GB/s of K/V), composed {:.1} µs",
                    best[0] * 1e6,
                    bytes / best[0] / 1e9,
                    best[1] * 1e6
                );
            }
        }
    }
}
