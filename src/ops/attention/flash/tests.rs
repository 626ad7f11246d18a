//! The flash attention (on tiles and by dot products) against torch's flash-attention order written out, and its
//! `exp_u20` against the formula.
use super::*;

/// The products this CPU runs; a message where none.
fn products() -> Vec<Products> {
    let ran: Vec<Products> = [Products::Tiles, Products::Dots]
        .into_iter()
        .filter(|p| p.supported())
        .collect();
    if ran.is_empty() {
        eprintln!("skipped: no AVX512-BF16 here");
    }
    ran
}

/// Values in [-2, 2) from a hash of `i` and `seed`, rounded to bf16.
fn values(len: usize, seed: u64) -> Vec<bf16> {
    (0..len as u64)
        .map(|i| {
            let x = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ seed.wrapping_mul(0xbf58_476d_1ce4_e5b9))
            .wrapping_mul(0x94d0_49bb_1331_11eb);
            bf16::from_f32((x >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0)
        })
        .collect()
}

/// torch's CPU flash attention for bf16 written out one query at a time, sums in order: f32 scores
/// times the scale, per block of 512 keys the running maximum, `exp` in f32 summed in f32, the weights
/// rounded to bf16, the output accumulated in f32 and multiplied by the reciprocal of the sum.
fn flash_reference(
    (q, k, v): (&[bf16], &[bf16], &[bf16]),
    segs: &[(usize, usize)],
    h: Heads,
    (scale, causal): (f32, bool),
) -> Vec<bf16> {
    let n = q.len() / (h.heads * h.d);
    let mut out = vec![bf16::ZERO; n * h.heads * h.d];
    let f = |x: &[bf16], i: usize| x[i].to_f32();
    for &(start, len) in segs {
        for head in 0..h.heads {
            let g = head / (h.heads / h.kv_heads);
            for i in start..start + len {
                let qi = (i * h.heads + head) * h.d;
                let kv = |j: usize| ((start + j) * h.kv_heads + g) * h.d;
                let (mut max, mut sum, mut acc) = (f32::NEG_INFINITY, 0f32, vec![0f32; h.d]);
                // Causal: the blocks up to the query's own key, later keys -inf inside its block.
                let seen = if causal { i - start + 1 } else { len };
                for k0 in (0..seen).step_by(KEY_BLOCK) {
                    let block = k0..len.min(k0 + KEY_BLOCK);
                    let s: Vec<f32> = block
                        .clone()
                        .map(|j| match j < seen {
                            true => {
                                (0..h.d)
                                    .map(|e| f(q, qi + e) * f(k, kv(j) + e))
                                    .sum::<f32>()
                                    * scale
                            }
                            false => f32::NEG_INFINITY,
                        })
                        .collect();
                    let new = s.iter().cloned().fold(max, f32::max);
                    let whole = s.len() / 16 * 16;
                    let p: Vec<f32> = s
                        .iter()
                        .enumerate()
                        .map(|(j, x)| match j < whole {
                            true => exp_u20(x - new),
                            false => (x - new).exp(),
                        })
                        .collect();
                    let rescale = (max - new).exp();
                    // 16 lanes summed across the whole vectors, reduced by halves, then the tail in order.
                    let mut lanes = [0f32; 16];
                    for (j, p) in p[..whole].iter().enumerate() {
                        lanes[j % 16] += p;
                    }
                    for half in [8, 4, 2, 1] {
                        for l in 0..half {
                            lanes[l] += lanes[l + half];
                        }
                    }
                    let total = p[whole..].iter().fold(lanes[0], |t, p| t + p);
                    sum = total + rescale * sum;
                    if k0 > 0 {
                        acc.iter_mut().for_each(|a| *a *= rescale);
                    }
                    for (j, p) in block.zip(&p) {
                        let w = bf16::from_f32(*p).to_f32();
                        for (e, a) in acc.iter_mut().enumerate() {
                            *a += w * f(v, kv(j) + e);
                        }
                    }
                    max = new;
                }
                for (e, a) in acc.iter().enumerate() {
                    out[qi + e] = bf16::from_f32(a * (1.0 / sum));
                }
            }
        }
    }
    out
}

/// torch's `exp_u20` one lane at a time (the formula of [`super::exp_u20`], each fused step a `mul_add`).
fn exp_u20(x: f32) -> f32 {
    let (ln_min, ln_max) = (f32::from_bits(0xc2ae_ac50), f32::from_bits(0x42b1_7218));
    let below = x < ln_min;
    let x = x.min(ln_max).max(ln_min);
    let n = x.mul_add(f32::from_bits(0x3fb8_aa3b), 0.5).floor();
    let r = (-n).mul_add(f32::from_bits(0x3f31_7218), x);
    let mut y = r.mul_add(0.008_289_291, 0.041_897_822);
    for c in [0.166_676_52, 0.499_991_5, 0.999_999_7, 1.0] {
        y = r.mul_add(y, c);
    }
    let pow = match below {
        true => 0.0,
        false => f32::from_bits((((n - 1.0) as i32 + 127) << 23) as u32),
    };
    y * pow * 2.0
}

/// The vector `exp_u20` gives the scalar formula's bits on every lane, from below ln FLT_MIN (zero) to
/// past ln FLT_MAX (clamped), and stays within about 20 ulp of libm's `exp` on [-87, 88).
#[test]
fn exp_u20_lanes_follow_the_formula() {
    if !Products::Dots.supported() {
        eprintln!("skipped: no AVX-512 here");
        return;
    }
    let xs: Vec<f32> = (0..8000).map(|i| -95.0 + i as f32 * 0.0233).collect();
    for c in xs.chunks_exact(16) {
        let mut out = [0f32; 16];
        // SAFETY: the dot products' check includes AVX-512F (and every such CPU has FMA); 16 values in and out.
        unsafe {
            use std::arch::x86_64::*;
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                super::exp_u20(_mm512_loadu_ps(c.as_ptr())),
            );
        }
        for (x, got) in c.iter().zip(out) {
            assert_eq!(got.to_bits(), exp_u20(*x).to_bits(), "exp({x})");
            let want = x.exp();
            if (-87.0..88.0).contains(x) {
                assert!(
                    (got - want).abs() <= want * 3e-6,
                    "exp({x}): {got:e} vs {want:e}"
                );
            }
        }
    }
}

/// The attention in f64 from the same bf16 values (softmax exact, nothing rounded).
fn exact_attention(
    (q, k, v): (&[bf16], &[bf16], &[bf16]),
    segs: &[(usize, usize)],
    h: Heads,
    scale: f32,
) -> Vec<f64> {
    let mut out = vec![0f64; q.len()];
    let f = |x: &[bf16], i: usize| x[i].to_f64();
    for &(start, len) in segs {
        for head in 0..h.heads {
            let g = head / (h.heads / h.kv_heads);
            let kv = |j: usize| ((start + j) * h.kv_heads + g) * h.d;
            for i in start..start + len {
                let qi = (i * h.heads + head) * h.d;
                let s: Vec<f64> = (0..len)
                    .map(|j| {
                        (0..h.d)
                            .map(|e| f(q, qi + e) * f(k, kv(j) + e))
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = p.iter().sum();
                for e in 0..h.d {
                    out[qi + e] = (0..len).map(|j| p[j] * f(v, kv(j) + e)).sum::<f64>() / sum;
                }
            }
        }
    }
    out
}

/// On segments of one key, of partial tiles, of a window's 64 keys and of two key blocks, with grouped
/// heads and head dimensions of one and a half to four depth chunks: tiles and dot products give the bits of
/// torch's order written out (at least 99.5 % of the values; elsewhere the sums' order moved a rounding:
/// within two bf16 steps plus 2⁻¹¹), and their error against the exact attention is that order's.
#[test]
fn products_follow_torchs_flash_attention() {
    for products in products() {
        follow_torchs_flash_attention(products);
    }
}

fn follow_torchs_flash_attention(products: Products) {
    let segs = [(0, 1), (1, 37), (38, 64), (102, 700), (802, 17)];
    let n = 819;
    for (heads, kv_heads, d) in [(4, 2, 80), (2, 2, 64), (2, 1, 128), (3, 3, 48), (2, 1, 40)] {
        let h = Heads { heads, kv_heads, d };
        let (q, k, v) = (
            values(n * heads * d, 1),
            values(n * kv_heads * d, 2),
            values(n * kv_heads * d, 3),
        );
        let scale = 1.0 / (d as f32).sqrt();
        let whole: Vec<Seg<'_>> = segs
            .iter()
            .map(|&(start, len)| Seg {
                start,
                len,
                prefix: None,
            })
            .collect();
        let got = attend((&q, &k, &v), &whole, h, (scale, false), products);
        let want = flash_reference((&q, &k, &v), &segs, h, (scale, false));
        let mut exact = 0;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Two bf16 steps of the value, plus 2⁻¹¹ for values that cancellation made small.
            let steps = w.to_f32().abs() / 128.0 + 1.0 / 2048.0;
            assert!(
                (g.to_f32() - w.to_f32()).abs() <= steps,
                "{products:?} {h:?} value {i}: {g} vs {w}"
            );
            exact += usize::from(g == w);
        }
        assert!(
            exact * 1000 >= 995 * got.len(),
            "{products:?} {h:?}: {exact} of {} exact",
            got.len()
        );
        let truth = exact_attention((&q, &k, &v), &segs, h, scale);
        let rms = |x: &[bf16]| {
            let s2: f64 = x
                .iter()
                .zip(&truth)
                .map(|(x, t)| (x.to_f64() - t).powi(2))
                .sum();
            (s2 / x.len() as f64).sqrt()
        };
        assert!(
            rms(&got) <= 1.01 * rms(&want),
            "{products:?} {h:?}: {} vs {}",
            rms(&got),
            rms(&want)
        );
    }
}

/// A head dimension short of whole chunks (80: the products stop at its 40 depth pairs) gives, bit for bit, what
/// the same heads padded with zero dimensions to whole chunks (96: every pair multiplied) give in their first 80
/// dimensions: the pairs left out only added exact zeros. Causal, so the blocks' last key chunks are partial too.
#[test]
fn depth_pairs_past_the_head_dimension_add_nothing() {
    for products in products() {
        let (n, heads, kv_heads, (d, wide)) = (300, 4, 2, (80, 96));
        let pad = |x: &[bf16], rows: usize| -> Vec<bf16> {
            x.chunks(d)
                .take(rows)
                .flat_map(|r| {
                    r.iter()
                        .copied()
                        .chain(std::iter::repeat_n(bf16::ZERO, wide - d))
                })
                .collect()
        };
        let (q, k, v) = (
            values(n * heads * d, 7),
            values(n * kv_heads * d, 8),
            values(n * kv_heads * d, 9),
        );
        let segs = [Seg {
            start: 0,
            len: n,
            prefix: None,
        }];
        let h = |d| Heads { heads, kv_heads, d };
        let narrow = attend((&q, &k, &v), &segs, h(d), (0.11, true), products);
        let (qw, kw, vw) = (
            pad(&q, n * heads),
            pad(&k, n * kv_heads),
            pad(&v, n * kv_heads),
        );
        let padded = attend((&qw, &kw, &vw), &segs, h(wide), (0.11, true), products);
        let firsts: Vec<u16> = padded
            .chunks(wide)
            .flat_map(|r| r[..d].iter().map(|x| x.to_bits()))
            .collect();
        let got: Vec<u16> = narrow.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, firsts, "{products:?}");
    }
}

/// Causal attention with and without a cached prefix: torch's order written out (masked keys inside a block
/// count as -inf), and a segment that continues a cache gives, bit for bit, the rows the whole sequence gives.
#[test]
fn causal_attention_and_cached_prefixes() {
    for products in products() {
        causal_and_cached(products);
    }
}

fn causal_and_cached(products: Products) {
    let (heads, kv_heads, d, n) = (4, 2, 64, 700);
    let h = Heads { heads, kv_heads, d };
    let (q, k, v) = (
        values(n * heads * d, 4),
        values(n * kv_heads * d, 5),
        values(n * kv_heads * d, 6),
    );
    let scale = 0.125;
    let seg = |start, len| Seg {
        start,
        len,
        prefix: None,
    };
    let full = attend(
        (&q, &k, &v),
        &[seg(0, 37), seg(37, 663)],
        h,
        (scale, true),
        products,
    );
    let want = flash_reference((&q, &k, &v), &[(0, 37), (37, 663)], h, (scale, true));
    let exact = full.iter().zip(&want).filter(|(g, w)| g == w).count();
    assert!(
        exact * 1000 >= 995 * full.len(),
        "{products:?}: {exact} of {} exact",
        full.len()
    );
    for (g, w) in full.iter().zip(&want) {
        assert!((g.to_f32() - w.to_f32()).abs() <= w.to_f32().abs() / 128.0 + 1.0 / 2048.0);
    }
    // The second segment's first 530 rows as a cache of capacity 600 (kv_heads × capacity × d), the rest
    // (133 rows, from row 567) attending after it.
    let (cap, p, first) = (600, 530, 37 + 530);
    let cache = |x: &[bf16]| {
        let mut c = vec![bf16::ZERO; kv_heads * cap * d];
        for g in 0..kv_heads {
            for j in 0..p {
                let src = &x[((37 + j) * kv_heads + g) * d..][..d];
                c[(g * cap + j) * d..][..d].copy_from_slice(src);
            }
        }
        c
    };
    let (ck, cv) = (cache(&k), cache(&v));
    let cont = Seg {
        start: first,
        len: n - first,
        prefix: Some((&ck, &cv, cap, p)),
    };
    let got = attend((&q, &k, &v), &[cont], h, (scale, true), products);
    let rows = first * heads * d..;
    assert_eq!(&got[rows.clone()], &full[rows]);
    assert!(got[..first * heads * d].iter().all(|x| *x == bf16::ZERO));
}

/// `cargo test --release --lib attention::flash::tests::timing -- --ignored --nocapture`: the Qwen2.5-VL vision
/// tower's full attention at `max_pixels` 1,003,520 (one segment of 5,088 rows, 16 heads of 80) and its windowed
/// attention (segments of 64 rows), the Qwen3-VL-2B tower's full attention over such a screenshot (3,864 rows, 16
/// heads of 64) and a causal prompt of 1,306 tokens (14 heads of 64 over 2 KV heads), best of three (of 23 calls
/// for the windows), with each choice of products the CPU runs; `FLASH_CASE` (a case's name as printed) keeps
/// only that one, for a profiler.
#[test]
#[ignore = "a timing run: use --release --ignored --nocapture"]
fn timing() {
    for products in products() {
        timing_of(products);
    }
}

fn timing_of(products: Products) {
    let cases = [
        ("full", 5088, 5088, (16, 16, 80), false),
        ("windows", 5088, 64, (16, 16, 80), false),
        ("qwen3 full", 3864, 3864, (16, 16, 64), false),
        ("prompt", 1306, 1306, (14, 2, 64), true),
    ];
    for (name, n, len, (heads, kv_heads, d), causal) in cases {
        if std::env::var("FLASH_CASE").is_ok_and(|c| c != name) {
            continue;
        }
        let h = Heads { heads, kv_heads, d };
        let (q, k, v) = (
            values(n * heads * d, 1),
            values(n * kv_heads * d, 2),
            values(n * kv_heads * d, 3),
        );
        let segs: Vec<Seg<'_>> = (0..n / len)
            .map(|s| Seg {
                start: s * len,
                len,
                prefix: None,
            })
            .collect();
        let calls = if len < 512 { 24 } else { 4 };
        let best = (0..calls)
            .map(|_| {
                let t0 = std::time::Instant::now();
                std::hint::black_box(attend((&q, &k, &v), &segs, h, (0.11, causal), products));
                t0.elapsed().as_secs_f64()
            })
            .skip(1)
            .fold(f64::INFINITY, f64::min);
        eprintln!(
            "{products:?} {name}: {n} rows in segments of {len}, {heads} heads of {d} over {kv_heads}: {:.1} ms",
            best * 1e3
        );
    }
}
