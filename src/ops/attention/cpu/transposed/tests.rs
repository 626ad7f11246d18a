//! The transposed-score tiles against the reference, each segment standing alone.
use super::*;
use crate::ops::gemm::packed::check::values;
use crate::ops::VarlenSeg;

/// Vector `i` of `d` values in `data`.
fn vec_of(data: &[f32], i: usize, d: usize) -> &[f32] {
    &data[i * d..][..d]
}

/// The attention output of query `q` over the given keys and values, in f64.
fn reference(q: &[f32], keys: &[&[f32]], vals: &[&[f32]], scale: f32) -> Vec<f64> {
    let s: Vec<f64> = keys
        .iter()
        .map(|k| q.iter().zip(*k).map(|(a, b)| (a * b) as f64).sum::<f64>() * scale as f64)
        .collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let z: f64 = e.iter().sum();
    (0..q.len())
        .map(|c| {
            e.iter()
                .zip(vals)
                .map(|(w, v)| w * v[c] as f64)
                .sum::<f64>()
                / z
        })
        .collect()
}

/// Two segments of four heads of 72 dims over two KV heads: 45 rows, then 437 rows after a cached prefix of
/// 300 keys (more keys than one depth block of a tile).
struct Case {
    heads: usize,
    kv_heads: usize,
    d: usize,
    first: usize,
    n: usize,
    p: usize,
    cap: usize,
    /// Queries, keys and values of the rows, then the prefix's keys and values.
    data: [Vec<f32>; 5],
}

impl Case {
    fn new() -> Self {
        let (heads, kv_heads, d, first, n, p, cap) = (4, 2, 72, 45, 482, 300, 310);
        let len = |i| match i {
            0 => n * heads * d,
            1 | 2 => n * kv_heads * d,
            _ => kv_heads * cap * d,
        };
        Self {
            heads,
            kv_heads,
            d,
            first,
            n,
            p,
            cap,
            data: std::array::from_fn(|i| values(len(i), i + 1)),
        }
    }

    /// Row `i`'s head `h` attended over the keys it sees, in f64.
    fn expected(&self, i: usize, h: usize, (causal, scale): (bool, f32)) -> Vec<f64> {
        let (d, kh) = (self.d, h / (self.heads / self.kv_heads));
        let [qs, ks, vs, pk, pv] = &self.data;
        let row = |j: usize| j * self.kv_heads + kh;
        let (own, prefix) = if i < self.first {
            (0..self.first, 0)
        } else {
            (self.first..self.n, self.p)
        };
        let last = if causal { i + 1 } else { own.end };
        let (keys, vals): (Vec<&[f32]>, Vec<&[f32]>) = (0..prefix)
            .map(|j| {
                (
                    vec_of(pk, kh * self.cap + j, d),
                    vec_of(pv, kh * self.cap + j, d),
                )
            })
            .chain((own.start..last).map(|j| (vec_of(ks, row(j), d), vec_of(vs, row(j), d))))
            .unzip();
        reference(vec_of(qs, i * self.heads + h, d), &keys, &vals, scale)
    }
}

/// Each tile this CPU runs on each vector path, causal and not, against an f64 reference (a cached prefix,
/// query rows not a whole number of panels, grouped KV heads, a head dimension that is not a whole number of
/// tile rows); the second segment's result is the same bits as when it is attended alone.
#[test]
fn every_tile_matches_the_reference_and_each_segment_stands_alone() {
    let (c, scale) = (Case::new(), 0.09f32);
    let (first, n, d) = (c.first, c.n, c.d);
    let [qs, ks, vs, pk, pv] = &c.data;
    let seg = |start, len| VarlenSeg {
        start,
        len,
        prefix: None,
    };
    let segs = [seg(0, first), seg(first, n - first)];
    let prefixes = [None, Some((pk.clone(), pv.clone(), c.cap, c.p))];
    for (isa, level, causal) in Isa::all_supported().into_iter().flat_map(|isa| {
        Level::supported()
            .into_iter()
            .flat_map(move |l| [(isa, l, false), (isa, l, true)])
    }) {
        let inp = Inputs {
            qs,
            ks,
            vs,
            segs: &segs,
            prefixes: &prefixes,
            causal,
            scale,
            packed: None,
        };
        let (heads, kv_heads) = (c.heads, c.kv_heads);
        let dims = Dims {
            heads,
            kv_heads,
            d,
            level,
        };
        let mut out = vec![0f32; n * heads * d];
        attend(&inp, 0, dims, isa, &mut out);
        attend(&inp, 1, dims, isa, &mut out);
        for (i, h) in (0..n).flat_map(|i| (0..heads).map(move |h| (i, h))) {
            let want = c.expected(i, h, (causal, scale));
            let got = vec_of(&out, i * heads + h, d);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let at = format!("{isa:?} {level:?} causal {causal} row {i} head {h} dim {k}");
                assert!((*g as f64 - w).abs() < 2e-6, "{at}: {g} vs {w}");
            }
        }
        let alone_segs = [seg(0, n - first)];
        let alone = Inputs {
            qs: &qs[first * heads * d..],
            ks: &ks[first * kv_heads * d..],
            vs: &vs[first * kv_heads * d..],
            segs: &alone_segs,
            prefixes: &prefixes[1..],
            ..inp
        };
        let mut out2 = vec![0f32; (n - first) * heads * d];
        attend(&alone, 0, dims, isa, &mut out2);
        assert_eq!(out2, out[first * heads * d..], "{isa:?} {level:?} {causal}");
    }
}
