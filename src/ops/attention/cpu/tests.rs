//! The fused f32 CPU attention: its vector `exp` against libm, and every path (levels, tiles) against the
//! reference.
use super::*;
use crate::ops::{reference, Varlen, VarlenSeg};
use candle_core::Device;

#[test]
fn vector_exp_matches_libm() {
    #[cfg(target_arch = "x86_64")]
    for level in Level::supported() {
        if level == Level::Portable {
            continue;
        }
        eprintln!("exp_sum at {level:?}");
        let xs: Vec<f32> = (0..20_003).map(|i| -80.0 + i as f32 * 0.0041).collect();
        let mut got = xs.clone();
        // SAFETY: the CPU supports `level` (Level::supported).
        let sum = unsafe { kernels::exp_sum_for_test(&mut got, level) };
        let m = xs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut want_sum = 0f64;
        for (g, x) in got.iter().zip(&xs) {
            let want = ((*x - m) as f64).exp();
            want_sum += want;
            assert!(
                ((*g as f64) - want).abs() <= 3e-7 * want + 1e-38,
                "exp({}) = {g} vs {want}",
                x - m
            );
        }
        assert!(((sum as f64) - want_sum).abs() <= 1e-5 * want_sum);
    }
}

/// The four-row kernel, GEMM tiles on the `gemm` crate, and where the CPU runs it tiles on the packed kernel in
/// query blocks and, on each of its tiles, with the scores transposed, each for every segment: `(tiled,
/// packed)`.
fn paths() -> Vec<(usize, Option<PackedPlan>)> {
    let mut p = vec![(usize::MAX, None), (1, None)];
    let plan = |transposed| {
        Some(PackedPlan {
            min_keys: 1,
            transposed,
        })
    };
    if crate::ops::gemm::packed::supported() {
        p.push((1, plan(None)));
    }
    p.extend(Isa::all_supported().into_iter().map(|i| (1, plan(Some(i)))));
    p
}

/// Every vector path this CPU supports, through the four-row kernel and through GEMM tiles (on the `gemm`
/// crate and, where the CPU runs it, on the packed kernel), against the
/// composed reference, on window-like segments (one with a cached prefix), a segment of several tiles,
/// causal and not, and head dims 80 (16·5: the AVX-512 32/16-dim steps and no 8-dim tail) and 72 (an 8-dim
/// tail); the AVX2 and AVX-512 paths give the same bits.
#[test]
fn every_supported_path_matches_the_reference() {
    let dev = Device::Cpu;
    for d in [80usize, 72] {
        let (n, heads, kv) = (53 + 2 * tiled::TILE + 9, 4usize, 2usize);
        let r = |shape: (usize, usize, usize)| Tensor::rand(-1f32, 1f32, shape, &dev).unwrap();
        let (q, k, v) = (r((n, heads, d)), r((n, kv, d)), r((n, kv, d)));
        let (pk, pv) = (r((kv, 40, d)), r((kv, 40, d)));
        let segs = [
            VarlenSeg {
                start: 0,
                len: 37,
                prefix: None,
            },
            VarlenSeg {
                start: 37,
                len: 16,
                prefix: Some((&pk, &pv, 33)),
            },
            VarlenSeg {
                start: 53,
                len: n - 53,
                prefix: None,
            },
        ];
        for causal in [false, true] {
            let a = Varlen {
                q: &q,
                k: &k,
                v: &v,
                segs: &segs,
                causal,
                scale: 0.11,
            };
            let want = reference::varlen_attention(a).unwrap();
            let mut bits = Vec::new();
            for (level, path) in Level::supported()
                .into_iter()
                .flat_map(|l| paths().into_iter().map(move |p| (l, p)))
            {
                eprintln!("varlen attention d={d} causal={causal} at {level:?}, {path:?}");
                let got = varlen_attention_at(a, level, path).unwrap();
                let diff = (&got - &want).unwrap().abs().unwrap().max_all().unwrap();
                let diff = diff.to_scalar::<f32>().unwrap();
                assert!(
                    diff < 2e-6,
                    "{level:?} {path:?} d={d} causal={causal}: {diff}"
                );
                if level != Level::Portable {
                    bits.push((path, got.flatten_all().unwrap().to_vec1::<f32>().unwrap()));
                }
            }
            for path in paths() {
                let same: Vec<_> = bits.iter().filter(|b| b.0 == path).collect();
                assert!(
                    same.windows(2).all(|w| w[0].1 == w[1].1),
                    "AVX2 and AVX-512 bits differ ({path:?})"
                );
            }
        }
    }
}
