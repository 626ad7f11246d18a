//! Decode attention on the CPU, fused: each sequence's query heads attend over its KV buffers where they lie, in
//! f32 or in bf16 (widened to f32 as they are read, a block of rows at a time, as torch's CPU attention computes
//! bf16), with no per-sequence tensors, copies of the cache or candle ops. The keys of a (sequence, KV head) are split
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
/// (rows × d each): the scores a block of [`kernel::KEYS`] keys at a time, their softmax before its division,
/// then the weighted sums a block of [`VALUES`] rows at a time (bf16 blocks widened first, into a buffer that
/// stays in L1).
fn chunk<E: Kv>(qg: &[f32], (k, v): (&[E], &[E]), dims: Dims) -> Partial {
    let (d, level) = (dims.d, dims.level);
    let (group, rows) = (qg.len() / d, k.len() / d);
    let mut scores = vec![0f32; group * rows];
    let (mut max, mut sum) = (Vec::with_capacity(group), Vec::with_capacity(group));
    let mut o = vec![0f32; group * d];
    SCRATCH.with_borrow_mut(|scratch| {
        for (b, kb) in k.chunks(kernel::KEYS * d).enumerate() {
            let at = kernel::At {
                rows,
                j0: b * kernel::KEYS,
            };
            kernel::scores(qg, E::widen(kb, scratch), &mut scores, d, at, level);
        }
        for s in scores.chunks_exact_mut(rows) {
            max.push(kernel::max(s, level));
            sum.push(exp_shifted(s, level));
        }
        for (b, vb) in v.chunks(VALUES * d).enumerate() {
            let at = kernel::At {
                rows,
                j0: b * VALUES,
            };
            kernel::weighted_sums(&scores, E::widen(vb, scratch), &mut o, d, at, level);
        }
    });
    Partial { max, sum, o }
}

/// Value rows added into the running weighted sums at a time.
const VALUES: usize = 32;

thread_local! {
    /// Each thread's widened block of keys or values, kept between work items.
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

mod kernel;

#[cfg(test)]
mod tests;
