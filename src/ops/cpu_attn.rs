//! Varlen attention on the CPU in f32, fused: for each (segment, KV head) the segment's keys are gathered once,
//! transposed, and its values into contiguous rows; then the query rows of that head group take their scores,
//! softmax and weighted sum four rows at a time, so each key/value load serves four queries.
//! No score matrix is materialised, no mask tensor is built, and windows need no padding. Work items run on
//! rayon; the inner products use AVX2/FMA when the CPU has them (checked at run time).

use candle_core::{DType, Result, Tensor};
use rayon::prelude::*;

use super::cpu_elementwise::with_f32;
use super::VarlenSeg;

/// Query rows processed together against each key row.
const ROWS: usize = 4;
/// Keys scored together (two AVX registers); the transposed keys are padded to a multiple of it.
const KEY_BLOCK: usize = 16;

/// Whether the fused CPU path covers tensors of `dtype` on `device`: CPU, f32, head_dim a multiple of 8.
pub fn supported(device: &candle_core::Device, dtype: DType, head_dim: usize) -> bool {
    device.is_cpu() && dtype == DType::F32 && head_dim.is_multiple_of(8) && head_dim > 0
}

/// A cached prefix copied out of its buffers: K and V (kv_heads, cap, d) data, cap, valid positions.
type Prefix = (Vec<f32>, Vec<f32>, usize, usize);

/// Shapes of one call.
#[derive(Clone, Copy)]
struct Dims {
    heads: usize,
    kv_heads: usize,
    d: usize,
}

/// See [`super::varlen_attention`]; `q` (N, H, d), `k`/`v` (N, KV, d), all f32 on the CPU.
pub fn varlen_attention(a: super::Varlen<'_>) -> Result<Tensor> {
    let (q, k, v, segs, causal, scale) = (a.q, a.k, a.v, a.segs, a.causal, a.scale);
    let (n, heads, d) = q.dims3()?;
    let (_, kv_heads, _) = k.dims3()?;
    let dims = Dims { heads, kv_heads, d };
    let prefixes: Vec<Option<Prefix>> = segs
        .iter()
        .map(|s| {
            s.prefix
                .map(|(pk, pv, p)| {
                    let cap = pk.dim(1)?;
                    let kv = with_f32(pk, |x| Ok(x.to_vec()))?;
                    let vv = with_f32(pv, |x| Ok(x.to_vec()))?;
                    Ok::<_, candle_core::Error>((kv, vv, cap, p))
                })
                .transpose()
        })
        .collect::<Result<_>>()?;
    let mut out = vec![0f32; n * heads * d];
    with_f32(q, |qs| {
        with_f32(k, |ks| {
            with_f32(v, |vs| {
                let items: Vec<(usize, usize)> = (0..segs.len())
                    .flat_map(|s| (0..kv_heads).map(move |h| (s, h)))
                    .collect();
                let blocks: Vec<(usize, usize, Vec<f32>)> = items
                    .par_iter()
                    .map(|&(si, kh)| {
                        let seg = &segs[si];
                        let (kt, vc) = gather(ks, vs, seg, prefixes[si].as_ref(), kh, dims);
                        let p = prefixes[si].as_ref().map_or(0, |x| x.3);
                        let o = attend_group(qs, &kt, &vc, seg, p, kh, dims, causal, scale);
                        (si, kh, o)
                    })
                    .collect();
                scatter(&mut out, &blocks, segs, dims);
                Ok(())
            })
        })
    })?;
    Tensor::from_vec(out, (n, heads, d), q.device())
}

/// Keys and values of one segment for KV head `kh`: keys transposed to (d, lpad) with lpad the key count
/// (prefix first) rounded up to [`KEY_BLOCK`] and zero columns after it, values as (P + len, d) rows.
fn gather(
    ks: &[f32],
    vs: &[f32],
    seg: &VarlenSeg<'_>,
    prefix: Option<&Prefix>,
    kh: usize,
    dims: Dims,
) -> (Vec<f32>, Vec<f32>) {
    let d = dims.d;
    let p = prefix.map_or(0, |x| x.3);
    let total = p + seg.len;
    let lpad = total.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let mut kt = vec![0f32; d * lpad];
    let mut vc = Vec::with_capacity(total * d);
    let mut put_key = |j: usize, row: &[f32]| {
        for (c, x) in row.iter().enumerate() {
            kt[c * lpad + j] = *x;
        }
    };
    if let Some((pk, pv, cap, _)) = prefix {
        for j in 0..p {
            put_key(j, &pk[(kh * cap + j) * d..][..d]);
        }
        vc.extend_from_slice(&pv[kh * cap * d..(kh * cap + p) * d]);
    }
    for (j, r) in (seg.start..seg.start + seg.len).enumerate() {
        let at = (r * dims.kv_heads + kh) * d;
        put_key(p + j, &ks[at..at + d]);
        vc.extend_from_slice(&vs[at..at + d]);
    }
    (kt, vc)
}

/// Attention of every query head served by KV head `kh` over one segment; returns (len, group, d).
#[allow(clippy::too_many_arguments)]
fn attend_group(
    qs: &[f32],
    kt: &[f32],
    vc: &[f32],
    seg: &VarlenSeg<'_>,
    p: usize,
    kh: usize,
    dims: Dims,
    causal: bool,
    scale: f32,
) -> Vec<f32> {
    let (d, group) = (dims.d, dims.heads / dims.kv_heads);
    let total = p + seg.len;
    let lpad = total.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let mut out = vec![0f32; seg.len * group * d];
    let mut q_rows = vec![0f32; ROWS * d];
    let mut scores = vec![0f32; ROWS * lpad];
    let mut o = vec![0f32; ROWS * d];
    for g in 0..group {
        let head = kh * group + g;
        for r0 in (0..seg.len).step_by(ROWS) {
            let rows = ROWS.min(seg.len - r0);
            q_rows.fill(0.0);
            for i in 0..rows {
                let at = ((seg.start + r0 + i) * dims.heads + head) * d;
                for (dst, src) in q_rows[i * d..(i + 1) * d].iter_mut().zip(&qs[at..at + d]) {
                    *dst = src * scale;
                }
            }
            let visible: [usize; ROWS] = std::array::from_fn(|i| match (i < rows, causal) {
                (false, _) => 0,
                (true, true) => (p + r0 + i + 1).min(total),
                (true, false) => total,
            });
            let blk = kernels::Block {
                q: &q_rows,
                kt,
                lpad,
                v: vc,
                d,
                visible,
            };
            kernels::run(&blk, &mut scores, &mut o);
            for i in 0..rows {
                let at = ((r0 + i) * group + g) * d;
                out[at..at + d].copy_from_slice(&o[i * d..(i + 1) * d]);
            }
        }
    }
    out
}

/// Copy each (segment, KV head) result into the (N, H, d) output.
fn scatter(
    out: &mut [f32],
    blocks: &[(usize, usize, Vec<f32>)],
    segs: &[VarlenSeg<'_>],
    dims: Dims,
) {
    let (d, group) = (dims.d, dims.heads / dims.kv_heads);
    for (si, kh, o) in blocks {
        let seg = &segs[*si];
        for r in 0..seg.len {
            for g in 0..group {
                let src = &o[(r * group + g) * d..][..d];
                let at = ((seg.start + r) * dims.heads + kh * group + g) * d;
                out[at..at + d].copy_from_slice(src);
            }
        }
    }
}

mod kernels {
    //! The inner loops for up to [`ROWS`] query rows: scores against every visible key (keys transposed, so
    //! one load serves 8 keys), softmax, weighted sum of the values.

    use super::{KEY_BLOCK, ROWS};

    /// One block of query rows against one segment's keys and values.
    pub struct Block<'a> {
        /// Query rows (ROWS, d), pre-scaled; rows past the block's end are zero.
        pub q: &'a [f32],
        /// Keys transposed (d, lpad).
        pub kt: &'a [f32],
        /// Padded key count.
        pub lpad: usize,
        /// Values (keys, d).
        pub v: &'a [f32],
        /// Head dim (a multiple of 8).
        pub d: usize,
        /// Keys each row sees (0 for rows past the block's end).
        pub visible: [usize; ROWS],
    }

    /// Fill `out` (ROWS, d) with the attention of the block's rows; `scores` holds ROWS × lpad.
    pub fn run(b: &Block<'_>, scores: &mut [f32], out: &mut [f32]) {
        let last = b.visible.iter().copied().max().unwrap_or(0);
        let kpad = last.div_ceil(KEY_BLOCK) * KEY_BLOCK;
        #[cfg(target_arch = "x86_64")]
        if crate::ops::simd::avx2::available() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); every index stays inside the buffers
            // (kpad ≤ lpad, d a multiple of 8).
            unsafe {
                avx2::scores(b, kpad, scores);
                softmax_rows(b, last, scores, |s| avx2::exp_sum(s));
                avx2::weighted_sum(b, last, scores, out);
            }
            return;
        }
        portable_scores(b, kpad, scores);
        softmax_rows(b, last, scores, exp_sum);
        portable_weighted_sum(b, last, scores, out);
    }

    /// Softmax of each row's visible scores in place, the row's remaining scores up to `last` set to 0 and
    /// the visible ones already divided by their sum. `exp_sum` replaces each `x` by `exp(x − max)` and returns
    /// the sum.
    fn softmax_rows(
        b: &Block<'_>,
        last: usize,
        scores: &mut [f32],
        exp_sum: impl Fn(&mut [f32]) -> f32,
    ) {
        for (i, &vis) in b.visible.iter().enumerate() {
            let row = &mut scores[i * b.lpad..i * b.lpad + last];
            let (s, rest) = row.split_at_mut(vis);
            rest.fill(0.0);
            if vis == 0 {
                continue;
            }
            let inv = 1.0 / exp_sum(s);
            s.iter_mut().for_each(|x| *x *= inv);
        }
    }

    /// `x ← exp(x − max x)` over `s`, returning the sum (libm's `expf`).
    fn exp_sum(s: &mut [f32]) -> f32 {
        let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for x in s.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        sum
    }

    fn portable_scores(b: &Block<'_>, kpad: usize, scores: &mut [f32]) {
        for i in 0..ROWS {
            for j in 0..kpad {
                let mut acc = 0f32;
                for c in 0..b.d {
                    acc += b.q[i * b.d + c] * b.kt[c * b.lpad + j];
                }
                scores[i * b.lpad + j] = acc;
            }
        }
    }

    fn portable_weighted_sum(b: &Block<'_>, last: usize, scores: &[f32], out: &mut [f32]) {
        for i in 0..ROWS {
            let o = &mut out[i * b.d..(i + 1) * b.d];
            o.fill(0.0);
            for j in 0..last {
                let p = scores[i * b.lpad + j];
                for (x, y) in o.iter_mut().zip(&b.v[j * b.d..(j + 1) * b.d]) {
                    *x += p * y;
                }
            }
        }
    }

    /// The vector `exp_sum`, for the unit test.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(all(test, target_arch = "x86_64"))]
    pub unsafe fn avx2_exp_sum_for_test(s: &mut [f32]) -> f32 {
        avx2::exp_sum(s)
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::{Block, KEY_BLOCK, ROWS};
        use crate::ops::simd::avx2::exp8;
        use std::arch::x86_64::*;

        /// [`super::exp_sum`] 8 lanes at a time.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn exp_sum(s: &mut [f32]) -> f32 {
            let n8 = s.len() / 8 * 8;
            let p = s.as_mut_ptr();
            let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
            for i in (0..n8).step_by(8) {
                mv = _mm256_max_ps(mv, _mm256_loadu_ps(p.add(i)));
            }
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), mv);
            let m = lanes
                .iter()
                .chain(&s[n8..])
                .cloned()
                .fold(f32::NEG_INFINITY, f32::max);
            let (mb, mut acc) = (_mm256_set1_ps(m), _mm256_setzero_ps());
            for i in (0..n8).step_by(8) {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mb));
                _mm256_storeu_ps(p.add(i), e);
                acc = _mm256_add_ps(acc, e);
            }
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
            let mut sum: f32 = lanes.iter().sum();
            for x in &mut s[n8..] {
                *x = (*x - m).exp();
                sum += *x;
            }
            sum
        }

        /// Scores of all ROWS rows for keys 0..kpad, 16 keys × 4 rows per inner step (8 accumulators).
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn scores(b: &Block<'_>, kpad: usize, scores: &mut [f32]) {
            let (q, kt, sp) = (b.q.as_ptr(), b.kt.as_ptr(), scores.as_mut_ptr());
            for j0 in (0..kpad).step_by(KEY_BLOCK) {
                let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
                for c in 0..b.d {
                    let k0 = _mm256_loadu_ps(kt.add(c * b.lpad + j0));
                    let k1 = _mm256_loadu_ps(kt.add(c * b.lpad + j0 + 8));
                    for (i, a) in acc.iter_mut().enumerate() {
                        let qb = _mm256_broadcast_ss(&*q.add(i * b.d + c));
                        a[0] = _mm256_fmadd_ps(qb, k0, a[0]);
                        a[1] = _mm256_fmadd_ps(qb, k1, a[1]);
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(sp.add(i * b.lpad + j0), a[0]);
                    _mm256_storeu_ps(sp.add(i * b.lpad + j0 + 8), a[1]);
                }
            }
        }

        /// out[i] = Σ_j p[i][j]·v[j] for keys 0..last, 16 dims × 4 rows per inner step (8 lanes at the end).
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn weighted_sum(b: &Block<'_>, last: usize, scores: &[f32], out: &mut [f32]) {
            let (v, sp, op) = (b.v.as_ptr(), scores.as_ptr(), out.as_mut_ptr());
            let mut c = 0;
            while c + 16 <= b.d {
                let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
                for j in 0..last {
                    let v0 = _mm256_loadu_ps(v.add(j * b.d + c));
                    let v1 = _mm256_loadu_ps(v.add(j * b.d + c + 8));
                    for (i, a) in acc.iter_mut().enumerate() {
                        let p = _mm256_broadcast_ss(&*sp.add(i * b.lpad + j));
                        a[0] = _mm256_fmadd_ps(p, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(p, v1, a[1]);
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(op.add(i * b.d + c), a[0]);
                    _mm256_storeu_ps(op.add(i * b.d + c + 8), a[1]);
                }
                c += 16;
            }
            if c < b.d {
                let mut acc = [_mm256_setzero_ps(); ROWS];
                for j in 0..last {
                    let v0 = _mm256_loadu_ps(v.add(j * b.d + c));
                    for (i, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(_mm256_broadcast_ss(&*sp.add(i * b.lpad + j)), v0, *a);
                    }
                }
                for (i, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(op.add(i * b.d + c), *a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn vector_exp_matches_libm() {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            let xs: Vec<f32> = (0..20_003).map(|i| -80.0 + i as f32 * 0.0041).collect();
            let mut got = xs.clone();
            // SAFETY: AVX2 and FMA are present (checked above).
            let sum = unsafe { super::kernels::avx2_exp_sum_for_test(&mut got) };
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
}
