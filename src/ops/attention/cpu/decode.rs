//! Decode attention on the CPU, fused: each sequence's query heads attend over its KV buffers where they lie, in
//! f32 or in bf16 (widened to f32 as they are read, a chunk at a time, as torch's CPU attention computes bf16),
//! with no per-sequence tensors, copies of the cache or candle ops. The keys of a (sequence, KV head) are split
//! into chunks of [`CHUNK`] keys; each chunk is one work item on rayon (the scores of the head group's queries,
//! their softmax before its division, the weighted sum of the values), and the chunks of a (sequence, KV head)
//! are merged in order with the usual rescaling by `exp(max_chunk − max)`. The chunks are fixed in size, so a
//! sequence's result depends neither on the thread count nor on the other sequences of the step. Every score is
//! the same FMA chain at AVX2 and at AVX-512 (two 8-lane halves of each 16 dims, reduced in one order), and the
//! weighted sums are lane-wise, so both levels give the same bits.

use candle_core::{DType, Device, Result, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

use super::super::DecodeKv;
use super::kernels::exp_shifted;
use super::Dims;
use crate::ops::cpu_data::cpu_slice;
use crate::ops::simd::{vectorised, Level};

/// Keys per work item.
pub(crate) const CHUNK: usize = 256;

/// Whether the fused CPU decode attention covers buffers of `dtype` on `device`: CPU, f32 or bf16, head_dim a
/// multiple of 8.
pub(crate) fn supported(device: &Device, dtype: DType, head_dim: usize) -> bool {
    device.is_cpu()
        && matches!(dtype, DType::F32 | DType::BF16)
        && head_dim > 0
        && head_dim.is_multiple_of(8)
}

/// One decode step of attention for B sequences ([`crate::ops::Ops::decode_attention`]): writes each new K/V at
/// position `len` of its sequence's buffers, then attends the sequence's queries `q` (B, heads, d) over positions
/// `0..=len`. Returns (B, heads, d) in `q`'s dtype (bf16: the f32 result rounded once).
pub(crate) fn attention(
    q: &Tensor,
    (k_new, v_new): (&Tensor, &Tensor),
    kv: &[DecodeKv<'_>],
    scale: f32,
) -> Result<Tensor> {
    attention_at(q, (k_new, v_new), kv, scale, Level::detect())
}

/// [`attention`] on the vector path `level`, one the CPU supports (at most [`Level::detect`]).
fn attention_at(
    q: &Tensor,
    (k_new, v_new): (&Tensor, &Tensor),
    kv: &[DecodeKv<'_>],
    scale: f32,
    level: Level,
) -> Result<Tensor> {
    let (b, heads, d) = q.dims3()?;
    let kv_heads = k_new.dim(1)?;
    if kv.len() != b || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        candle_core::bail!(
            "decode attention: {b} queries of {heads} heads for {} caches of {kv_heads} KV heads",
            kv.len()
        );
    }
    for (i, c) in kv.iter().enumerate() {
        let (kh, cap, kd) = c.k.dims3()?;
        if (kh, kd) != (kv_heads, d) || c.v.dims3()? != (kh, cap, kd) || c.len >= cap {
            candle_core::bail!(
                "decode attention: cache {i} has buffers {:?}/{:?} for {} valid positions",
                c.k.dims(),
                c.v.dims(),
                c.len
            );
        }
        c.write_new(i, k_new, v_new)?;
    }
    let qs: Vec<f32> = q
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?
        .into_iter()
        .map(|x| x * scale)
        .collect();
    let dims = Dims {
        heads,
        kv_heads,
        d,
        level,
    };
    let out = match q.dtype() {
        DType::F32 => with_buffers::<f32>(kv, |bufs| step(&qs, bufs, dims))?,
        DType::BF16 => with_buffers::<bf16>(kv, |bufs| step(&qs, bufs, dims))?,
        other => candle_core::bail!("decode attention on the CPU: no fused path for {other:?}"),
    };
    Tensor::from_vec(out, (b, heads, d), q.device())?.to_dtype(q.dtype())
}

/// An element of the KV buffers: f32, or bf16 widened to f32 as it is read.
trait Kv: candle_core::WithDType + Send + Sync {
    /// `src` as f32 values: borrowed where they are f32, else widened into `scratch`.
    fn widen<'a>(src: &'a [Self], scratch: &'a mut Vec<f32>) -> &'a [f32];
}

impl Kv for f32 {
    fn widen<'a>(src: &'a [f32], _: &'a mut Vec<f32>) -> &'a [f32] {
        src
    }
}

impl Kv for bf16 {
    fn widen<'a>(src: &'a [bf16], scratch: &'a mut Vec<f32>) -> &'a [f32] {
        if scratch.len() < src.len() {
            scratch.resize(src.len(), 0.0);
        }
        let out = &mut scratch[..src.len()];
        // A bf16 is the top half of its f32 (exact): the loop compiles to vector shifts at the widest width.
        vectorised(
            #[inline(always)]
            || {
                for (o, x) in out.iter_mut().zip(src) {
                    *o = f32::from_bits(u32::from(x.to_bits()) << 16);
                }
            },
        );
        out
    }
}

/// One sequence's buffers: K and V values (kv_heads, cap, d), cap, and the keys it attends to (len + 1).
struct Seq<'a, E> {
    k: &'a [E],
    v: &'a [E],
    cap: usize,
    keys: usize,
}

/// Run `f` on the values of every cache's K and V buffers (read-locked for its duration).
fn with_buffers<E: Kv>(
    kv: &[DecodeKv<'_>],
    f: impl FnOnce(&[Seq<'_, E>]) -> Vec<f32>,
) -> Result<Vec<f32>> {
    let held: Vec<_> = kv
        .iter()
        .map(|c| (c.k.storage_and_layout(), c.v.storage_and_layout()))
        .collect();
    let seqs = held
        .iter()
        .zip(kv)
        .map(|((k, v), c)| {
            Ok(Seq {
                k: values(&k.0, k.1)?,
                v: values(&v.0, v.1)?,
                cap: c.k.dim(1)?,
                keys: c.len + 1,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(f(&seqs))
}

/// The values of a contiguous CPU buffer.
fn values<'a, E: Kv>(s: &'a Storage, l: &candle_core::Layout) -> Result<&'a [E]> {
    if !l.is_contiguous() {
        candle_core::bail!("decode attention on the CPU: a cache buffer is not contiguous");
    }
    cpu_slice::<E>(s, l, l.shape().elem_count())
}

/// One chunk's result for the head group's queries: each query's score maximum and sum of `exp(s − max)`, and
/// its unnormalised weighted sum (group × d).
struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    o: Vec<f32>,
}

/// The attention of every sequence: one work item per (sequence, KV head, chunk), merged per (sequence, KV head)
/// into the (B, heads, d) output.
fn step<E: Kv>(qs: &[f32], seqs: &[Seq<'_, E>], dims: Dims) -> Vec<f32> {
    let (d, group) = (dims.d, dims.heads / dims.kv_heads);
    let items: Vec<(usize, usize, usize)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(b, s)| {
            (0..dims.kv_heads)
                .flat_map(move |kh| (0..s.keys.div_ceil(CHUNK)).map(move |c| (b, kh, c * CHUNK)))
        })
        .collect();
    let parts: Vec<Partial> = items
        .par_iter()
        .map(|&(b, kh, j0)| {
            let s = &seqs[b];
            let rows = CHUNK.min(s.keys - j0);
            let at = (kh * s.cap + j0) * d;
            let qg = &qs[(b * dims.heads + kh * group) * d..][..group * d];
            chunk::<E>(qg, (&s.k[at..at + rows * d], &s.v[at..at + rows * d]), dims)
        })
        .collect();
    let mut out = vec![0f32; qs.len()];
    let mut parts = items.iter().zip(parts).peekable();
    while let Some(&(&(b, kh, _), _)) = parts.peek() {
        let mine: Vec<Partial> = std::iter::from_fn(|| {
            parts
                .next_if(|((pb, pk, _), _)| (*pb, *pk) == (b, kh))
                .map(|(_, p)| p)
        })
        .collect();
        merge(
            &mine,
            &mut out[(b * dims.heads + kh * group) * d..][..group * d],
            d,
        );
    }
    out
}

/// The attention of the head group's pre-scaled queries `qg` (group × d) over one chunk of keys and values
/// (rows × d each).
fn chunk<E: Kv>(qg: &[f32], (k, v): (&[E], &[E]), dims: Dims) -> Partial {
    let d = dims.d;
    let (group, rows) = (qg.len() / d, k.len() / d);
    let mut scores = vec![0f32; group * rows];
    let (mut max, mut sum) = (Vec::with_capacity(group), Vec::with_capacity(group));
    let mut o = vec![0f32; group * d];
    SCRATCH.with_borrow_mut(|scratch| {
        let k = E::widen(k, scratch);
        for (qi, s) in qg.chunks_exact(d).zip(scores.chunks_exact_mut(rows)) {
            kernel::scores(qi, k, s, dims.level);
        }
        for s in scores.chunks_exact_mut(rows) {
            max.push(kernel::max(s, dims.level));
            sum.push(exp_shifted(s, dims.level));
        }
        let v = E::widen(v, scratch);
        for (p, oi) in scores.chunks_exact(rows).zip(o.chunks_exact_mut(d)) {
            kernel::weighted_sum(p, v, oi, dims.level);
        }
    });
    Partial { max, sum, o }
}

thread_local! {
    /// Each thread's widened keys or values of a chunk, kept between work items.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `out` (group × d) from the chunks of one (sequence, KV head), in order: each chunk's sums and weighted sums
/// scaled by `exp(its max − the overall max)` (1 for a single chunk), added, and the weighted sum divided by the
/// sum.
fn merge(parts: &[Partial], out: &mut [f32], d: usize) {
    for (i, o) in out.chunks_exact_mut(d).enumerate() {
        let m = parts
            .iter()
            .map(|p| p.max[i])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        o.fill(0.0);
        for p in parts {
            let w = (p.max[i] - m).exp();
            sum += w * p.sum[i];
            for (x, y) in o.iter_mut().zip(&p.o[i * d..(i + 1) * d]) {
                *x += w * y;
            }
        }
        let inv = 1.0 / sum;
        o.iter_mut().for_each(|x| *x *= inv);
    }
}

/// The inner loops on each vector path.
mod kernel {
    use crate::ops::simd::Level;

    /// The largest of `s` (−∞ for none; scores are never NaN where the inputs are not) on `level`.
    pub(super) fn max(s: &[f32], level: Level) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if level == Level::Avx512 {
            // SAFETY: the caller checked the CPU supports AVX-512.
            return unsafe { x86::max16(s) };
        }
        let _ = level;
        s.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    }

    /// `s[j] = q·k_j` for every key row of `k` (rows × d) on `level` (one the CPU supports).
    pub(super) fn scores(q: &[f32], k: &[f32], s: &mut [f32], level: Level) {
        let d = q.len();
        #[cfg(target_arch = "x86_64")]
        match level {
            // SAFETY (both arms): the caller checked the CPU supports `level`; d is a multiple of 8 and `k`
            // holds s.len() rows of d.
            Level::Avx512 => return unsafe { x86::scores16(q, k, s) },
            Level::Avx2 => return unsafe { x86::scores8(q, k, s) },
            Level::Portable => {}
        }
        let _ = level;
        for (sj, kj) in s.iter_mut().zip(k.chunks_exact(d)) {
            *sj = q.iter().zip(kj).map(|(a, b)| a * b).sum();
        }
    }

    /// `o = Σ_j p[j]·v_j` over the value rows of `v` (rows × d) on `level` (one the CPU supports).
    pub(super) fn weighted_sum(p: &[f32], v: &[f32], o: &mut [f32], level: Level) {
        let d = o.len();
        #[cfg(target_arch = "x86_64")]
        match level {
            // SAFETY (both arms): as in `scores`; `v` holds p.len() rows of d.
            Level::Avx512 => return unsafe { x86::weighted_sum16(p, v, o) },
            Level::Avx2 => return unsafe { x86::weighted_sum8(p, v, o) },
            Level::Portable => {}
        }
        let _ = level;
        o.fill(0.0);
        for (pj, vj) in p.iter().zip(v.chunks_exact(d)) {
            for (x, y) in o.iter_mut().zip(vj) {
                *x += pj * y;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        /// [`super::max`] in 16 lanes.
        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn max16(s: &[f32]) -> f32 {
            let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
            let mut blocks = s.chunks_exact(16);
            for b in &mut blocks {
                m = _mm512_max_ps(m, _mm512_loadu_ps(b.as_ptr()));
            }
            let tail = blocks.remainder().iter().copied();
            tail.fold(_mm512_reduce_max_ps(m), f32::max)
        }

        /// The sum of 8 lanes: the halves added, then pairs, then the last two.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn sum8(a: __m256) -> f32 {
            let t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let t = _mm_add_ps(t, _mm_movehl_ps(t, t));
            _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps::<1>(t, t)))
        }

        /// Each score: per 16 dims one FMA into the low and one into the high 8-lane accumulator (a last 8 dims
        /// into the low one), the two added, then [`sum8`].
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn scores8(q: &[f32], k: &[f32], s: &mut [f32]) {
            let d = q.len();
            let qp = q.as_ptr();
            for (j, sj) in s.iter_mut().enumerate() {
                let kp = k.as_ptr().add(j * d);
                let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut c = 0;
                while c + 16 <= d {
                    lo =
                        _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
                    let (q8, k8) = (qp.add(c + 8), kp.add(c + 8));
                    hi = _mm256_fmadd_ps(_mm256_loadu_ps(q8), _mm256_loadu_ps(k8), hi);
                    c += 16;
                }
                if c < d {
                    lo =
                        _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
                }
                *sj = sum8(_mm256_add_ps(lo, hi));
            }
        }

        /// [`scores8`] with the two halves of each 16 dims in one 16-lane accumulator.
        #[target_feature(enable = "avx512f,avx2,fma")]
        pub(super) unsafe fn scores16(q: &[f32], k: &[f32], s: &mut [f32]) {
            let d = q.len();
            let qp = q.as_ptr();
            for (j, sj) in s.iter_mut().enumerate() {
                let kp = k.as_ptr().add(j * d);
                let mut acc = _mm512_setzero_ps();
                let mut c = 0;
                while c + 16 <= d {
                    acc = _mm512_fmadd_ps(
                        _mm512_loadu_ps(qp.add(c)),
                        _mm512_loadu_ps(kp.add(c)),
                        acc,
                    );
                    c += 16;
                }
                let mut lo = _mm512_castps512_ps256(acc);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
                if c < d {
                    lo =
                        _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
                }
                *sj = sum8(_mm256_add_ps(lo, hi));
            }
        }

        /// `o[c..c + 8·N] = Σ_j p[j]·v_j[c..c + 8·N]` (rows of `v` of o.len() values), N 8-lane accumulators.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn block8<const N: usize>(p: &[f32], v: &[f32], o: &mut [f32], c: usize) {
            let d = o.len();
            let mut acc = [_mm256_setzero_ps(); N];
            for (j, pj) in p.iter().enumerate() {
                let (pb, vp) = (_mm256_set1_ps(*pj), v.as_ptr().add(j * d + c));
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vp.add(8 * l)), *a);
                }
            }
            for (l, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(c + 8 * l), *a);
            }
        }

        /// [`block8`] with 16-lane accumulators (16·N dims).
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn block16<const N: usize>(p: &[f32], v: &[f32], o: &mut [f32], c: usize) {
            let d = o.len();
            let mut acc = [_mm512_setzero_ps(); N];
            for (j, pj) in p.iter().enumerate() {
                let (pb, vp) = (_mm512_set1_ps(*pj), v.as_ptr().add(j * d + c));
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(pb, _mm512_loadu_ps(vp.add(16 * l)), *a);
                }
            }
            for (l, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(o.as_mut_ptr().add(c + 16 * l), *a);
            }
        }

        /// `o = Σ_j p[j]·v_j`, 32 dims at a time, then 8.
        #[target_feature(enable = "avx2,fma")]
        pub(super) unsafe fn weighted_sum8(p: &[f32], v: &[f32], o: &mut [f32]) {
            let mut c = 0;
            while c + 32 <= o.len() {
                block8::<4>(p, v, o, c);
                c += 32;
            }
            while c < o.len() {
                block8::<1>(p, v, o, c);
                c += 8;
            }
        }

        /// [`weighted_sum8`] 64 dims at a time, then 16, then 8 (each value the same FMA chain).
        #[target_feature(enable = "avx512f,avx2,fma")]
        pub(super) unsafe fn weighted_sum16(p: &[f32], v: &[f32], o: &mut [f32]) {
            let mut c = 0;
            while c + 64 <= o.len() {
                block16::<4>(p, v, o, c);
                c += 64;
            }
            while c + 16 <= o.len() {
                block16::<1>(p, v, o, c);
                c += 16;
            }
            if c < o.len() {
                block8::<1>(p, v, o, c);
            }
        }
    }
}

#[cfg(test)]
mod tests;
