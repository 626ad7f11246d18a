//! The bias epilogues, the RMSNorm, the q/k/v bias + rotary and the SwiGLU of bf16 activations on the CPU as one
//! parallel pass over the rows: each op in f32 and rounded to bf16 (to nearest, ties to even). The epilogues, the
//! norm and the rotary round each op exactly as the composed reference's bf16 ops do, so the same bits; the SwiGLU
//! rounds as torch's bf16 ops do (below). The composed ops widen and round 8 values per call of an intrinsic the
//! binary was not compiled to inline; here the rounding is a few integer operations the compiler vectorises.

use std::mem::MaybeUninit;

use candle_core::{DType, Result, Tensor};
use half::bf16;
use rayon::prelude::*;

use crate::ops::cpu_data::{cpu_slice, written, zeroed};
use crate::ops::simd::{vectorised, Level};

/// Whether this path serves `tensors`: all bf16 and on the CPU.
pub fn supported(tensors: &[&Tensor]) -> bool {
    tensors
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::BF16)
}

/// `x` rounded to bf16, to nearest with ties to even (a NaN stays a quiet NaN).
/// Branch-free (a select), so loops of it vectorise.
#[inline(always)]
pub(crate) fn round(x: f32) -> bf16 {
    let b = x.to_bits();
    let nan = (b >> 16) | 0x40;
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    bf16::from_bits(if x.is_nan() { nan } else { rounded } as u16)
}

/// Rows of `width` values of `y` (and of `r`, where given), each turned into an output row by `f`.
fn rows(
    y: &Tensor,
    r: Option<&Tensor>,
    width: usize,
    f: impl Fn(&[bf16], Option<&[bf16]>, &mut [bf16]) + Sync + Send,
) -> Result<Tensor> {
    row_blocks(y, r, (width, 1), f)
}

/// [`rows`] handed to `f` `block` rows at a time (the last block may hold fewer).
fn row_blocks(
    y: &Tensor,
    r: Option<&Tensor>,
    (width, block): (usize, usize),
    f: impl Fn(&[bf16], Option<&[bf16]>, &mut [bf16]) + Sync + Send,
) -> Result<Tensor> {
    let y = y.contiguous()?;
    let r = r.map(Tensor::contiguous).transpose()?;
    let (ys, yl) = y.storage_and_layout();
    let yd = cpu_slice::<bf16>(&ys, yl, y.elem_count())?;
    let rg = r.as_ref().map(|r| r.storage_and_layout());
    let rd = match &rg {
        Some((s, l)) => Some(cpu_slice::<bf16>(s, l, yd.len())?),
        None => None,
    };
    if yd.is_empty() {
        return Tensor::from_vec(Vec::<bf16>::new(), y.shape(), y.device());
    }
    if width == 0 || !yd.len().is_multiple_of(width) {
        candle_core::bail!("bf16 rows of {width} values in {} values", yd.len());
    }
    let fill = |out: &mut [MaybeUninit<bf16>]| {
        let chunk = width * block;
        out.par_chunks_mut(chunk)
            .enumerate()
            .with_min_len(8usize.div_ceil(block))
            .for_each(|(i, o)| {
                let row = i * chunk..i * chunk + o.len();
                let o = zeroed(o);
                vectorised(
                    #[inline(always)]
                    || f(&yd[row.clone()], rd.map(|r| &r[row]), o),
                )
            })
    };
    // SAFETY: the chunks cover the output (a whole number of rows); each is zeroed, then written.
    let out = unsafe { written(yd.len(), fill) };
    Tensor::from_vec(out, y.shape(), y.device())
}

/// The values of a vector (a bias, a norm's weight), its length checked against the last dimension of `y`.
fn vector_values(op: &str, y: &Tensor, b: &Tensor) -> Result<(usize, Vec<f32>)> {
    let width = y.dim(candle_core::D::Minus1)?;
    if b.dims() != [width] {
        candle_core::bail!("{op}: rows {:?}, vector {:?}", y.dims(), b.dims());
    }
    Ok((width, b.to_dtype(DType::F32)?.to_vec1::<f32>()?))
}

/// `y + b` over the last dimension, rounded to bf16.
pub fn bias_add(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (width, b) = vector_values("bias_add", y, b)?;
    rows(
        y,
        None,
        width,
        #[inline(always)]
        |y, _, o| {
            for ((o, y), b) in o.iter_mut().zip(y).zip(&b) {
                *o = round(y.to_f32() + b);
            }
        },
    )
}

/// `r + (y + b)`, each addition rounded to bf16.
pub fn bias_residual(y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
    let (width, b) = vector_values("bias_residual", y, b)?;
    if r.dims() != y.dims() {
        candle_core::bail!("bias_residual: y {:?}, residual {:?}", y.dims(), r.dims());
    }
    rows(
        y,
        Some(r),
        width,
        #[inline(always)]
        |y, r, o| {
            let r = r.unwrap_or_default();
            for (((o, y), r), b) in o.iter_mut().zip(y).zip(r).zip(&b) {
                *o = round(r.to_f32() + round(y.to_f32() + b).to_f32());
            }
        },
    )
}

/// `r + y` rounded to bf16 (the composed bf16 add's bits).
pub fn add(y: &Tensor, r: &Tensor) -> Result<Tensor> {
    if r.dims() != y.dims() {
        candle_core::bail!("residual add: y {:?}, residual {:?}", y.dims(), r.dims());
    }
    let width = y.dims().last().copied().unwrap_or(1);
    rows(
        y,
        Some(r),
        width,
        #[inline(always)]
        |y, r, o| {
            let r = r.unwrap_or_default();
            for ((o, y), r) in o.iter_mut().zip(y).zip(r) {
                *o = round(r.to_f32() + y.to_f32());
            }
        },
    )
}

/// Rows whose sums of squares [`rms_norm`] takes side by side.
const NORM_ROWS: usize = 16;

/// Qwen2 RMSNorm of bf16 rows as the composed reference computes it: per row the sum of squares in f32 in order,
/// `x / sqrt(mean + eps)` in f32 rounded to bf16, then times the weight rounded to bf16. One row's sum is a chain
/// of dependent additions; [`NORM_ROWS`] rows' chains run side by side, each in its row's order (same bits).
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let (width, w) = vector_values("rms_norm", x, w)?;
    let wide = Level::detect() == Level::Avx512 && width >= 2;
    row_blocks(
        x,
        None,
        (width, NORM_ROWS),
        #[inline(always)]
        |x, _, o| {
            let sums = sums_of_squares(x, width, wide);
            for ((o, x), sum2) in o.chunks_mut(width).zip(x.chunks(width)).zip(sums) {
                let m = (sum2 / width as f32 + eps).sqrt();
                for ((o, x), w) in o.iter_mut().zip(x).zip(&w) {
                    *o = round(round(x.to_f32() / m).to_f32() * w);
                }
            }
        },
    )
}

/// The sums of squares of the rows of `width` values in `x` (up to [`NORM_ROWS`]), each in f32 from its first
/// value to its last (the composed reference's order); a whole block's side by side where `wide` (AVX-512F, from
/// +0 rather than -0: the same for squares).
#[inline(always)]
fn sums_of_squares(x: &[bf16], width: usize, wide: bool) -> [f32; NORM_ROWS] {
    #[cfg(target_arch = "x86_64")]
    if wide && x.len() == NORM_ROWS * width {
        // SAFETY: wide means AVX-512F and width ≥ 2; x holds 16 rows.
        return unsafe { crate::ops::simd::avx512::sums_of_squares16(x, width) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = wide;
    let mut sums = [0f32; NORM_ROWS];
    for (s, row) in sums.iter_mut().zip(x.chunks(width)) {
        *s = row.iter().map(|v| v.to_f32() * v.to_f32()).sum::<f32>();
    }
    sums
}

/// `silu(g)·u` of a packed bf16 projection `gu` (rows, 2·I) = [gate | up] after its bias (2·I, if any; each
/// half's sum rounded as in [`bias_add`]): the SiLU in f32 rounded once to bf16 and the product rounded to bf16,
/// as torch computes `act_fn(gate) * up` in bf16 (the composed candle ops round inside the SiLU too). The SiLU's
/// `exp` is the vectorised one of the f32 SwiGLU (within about an ulp of libm's). Returns (rows, I).
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let shape = super::swiglu_out_shape(gu, bias)?;
    let cols = *shape.last().expect("rank ≥ 1");
    let bias = match bias {
        Some(b) => Some(vector_values("swiglu_packed", gu, b)?.1),
        None => None,
    };
    let gu = gu.contiguous()?;
    let (gs, gl) = gu.storage_and_layout();
    let data = cpu_slice::<bf16>(&gs, gl, gu.elem_count())?;
    let (level, ones) = (Level::detect(), vec![1f32; cols]);
    let mut out = vec![bf16::ZERO; data.len() / 2];
    if cols > 0 {
        let scratch = || (vec![0f32; cols], vec![0f32; cols], vec![0f32; cols]);
        out.par_chunks_mut(cols)
            .zip(data.par_chunks(2 * cols))
            .with_min_len(8)
            .for_each_init(scratch, |(g, u, silu), (o, row)| {
                vectorised(
                    #[inline(always)]
                    || {
                        let (rg, ru) = row.split_at(cols);
                        let (bg, bu) = match &bias {
                            Some(b) => b.split_at(cols),
                            None => (&[][..], &[][..]),
                        };
                        widen(rg, bg, g);
                        widen(ru, bu, u);
                        swiglu_row((g, u), &ones, silu, level, o);
                    },
                )
            });
    }
    Tensor::from_vec(out, shape, gu.device())
}

/// One row of [`swiglu_packed`] from its gate and up values `g` and `u` (each already `bf16(sum + bias)`, widened):
/// `o = bf16(bf16(silu(g)) · u)`, with `silu` as scratch and `ones` (at least as long as `g`) as [`silu_row`]'s.
/// Inlined, so that its rounding loop takes the vector level of a [`vectorised`] caller.
#[inline(always)]
pub(crate) fn swiglu_row(
    (g, u): (&[f32], &[f32]),
    ones: &[f32],
    silu: &mut [f32],
    level: Level,
    o: &mut [bf16],
) {
    silu_row(g, &ones[..g.len()], silu, level);
    for ((o, s), u) in o.iter_mut().zip(silu.iter()).zip(u.iter()) {
        *o = round(round(*s).to_f32() * u);
    }
}

/// `out = silu(g)` as [`swiglu_packed`] computes it: whole vectors through the f32 SwiGLU's row function on
/// `level` (times `ones`, as long as `g`: silu(g)·1 is silu(g), bit for bit), the last columns through libm's
/// `exp`. The partition depends only on `g`'s length, so a slice starting at a multiple of 16 gets the bits the
/// whole row gets there.
pub(crate) fn silu_row(g: &[f32], ones: &[f32], out: &mut [f32], level: Level) {
    let done = super::cpu::vector_swiglu(g, ones, None, out, level);
    for c in done..g.len() {
        out[c] = g[c] / (1.0 + (-g[c]).exp());
    }
}

/// `t` (bf16 on the CPU) widened to f32, exactly, in one parallel pass; other tensors through `to_dtype`.
pub fn to_f32(t: &Tensor) -> Result<Tensor> {
    if !supported(&[t]) {
        return t.to_dtype(DType::F32);
    }
    convert(
        t,
        #[inline(always)]
        |x: &bf16| x.to_f32(),
    )
}

/// `t` (f32 on the CPU) rounded to bf16 as `half` rounds (to nearest, ties to even) in one parallel pass;
/// other tensors through `to_dtype`.
pub fn to_bf16(t: &Tensor) -> Result<Tensor> {
    if !t.device().is_cpu() || t.dtype() != DType::F32 {
        return t.to_dtype(DType::BF16);
    }
    convert(
        t,
        #[inline(always)]
        |x: &f32| round(*x),
    )
}

/// `f` over every value of the CPU tensor `t` (made contiguous), in parallel blocks ([`map_into`]).
fn convert<A, B>(t: &Tensor, f: impl Fn(&A) -> B + Sync) -> Result<Tensor>
where
    A: candle_core::WithDType,
    B: candle_core::WithDType,
{
    let t = t.contiguous()?;
    let (ts, tl) = t.storage_and_layout();
    let data = cpu_slice::<A>(&ts, tl, t.elem_count())?;
    // SAFETY: map_into writes every value.
    let out = unsafe { written(data.len(), |o| map_into(data, o, f)) };
    Tensor::from_vec(out, t.shape(), t.device())
}

/// `o[i] = f(x[i])` for every value of `o` (as long as `x`), in parallel blocks, each loop compiled for the CPU's
/// vector level: the fresh storage written by the threads, with no zero-fill first.
pub(crate) fn map_into<A: Sync, B: Send>(
    x: &[A],
    o: &mut [MaybeUninit<B>],
    f: impl Fn(&A) -> B + Sync,
) {
    const BLOCK: usize = 1 << 14;
    assert_eq!(
        x.len(),
        o.len(),
        "map_into: {} values into {}",
        x.len(),
        o.len()
    );
    o.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(o, x)| {
            vectorised(
                #[inline(always)]
                || {
                    for (o, x) in o.iter_mut().zip(x) {
                        o.write(f(x));
                    }
                },
            )
        });
}

/// `out = x + b` in f32 with the sum rounded to bf16 (as [`bias_add`]), or `x` widened where `b` is empty.
fn widen(x: &[bf16], b: &[f32], out: &mut [f32]) {
    match b.is_empty() {
        true => out.iter_mut().zip(x).for_each(|(o, x)| *o = x.to_f32()),
        false => {
            for ((o, x), b) in out.iter_mut().zip(x).zip(b) {
                *o = round(x.to_f32() + b).to_f32();
            }
        }
    }
}

/// [`crate::ops::Ops::qkv_rope`] of a bf16 projection: per row `x = y + b` rounded to bf16, then for each q and
/// k head and j < d/2 `x[j]·cos − x[j+d/2]·sin` and `x[j]·sin + x[j+d/2]·cos` as candle's `rope_thd` computes
/// them in the tables' dtype: with f32 tables (the vision tower) in f32 and rounded once, with bf16 tables (the
/// text model) each product and sum rounded to bf16. The composed reference's bits.
pub fn qkv_rope(a: super::QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, d) = a.dims()?;
    let (heads, kv_heads, half) = (a.heads, a.kv_heads, d / 2);
    let width = (heads + 2 * kv_heads) * d;
    let (_, bias) = vector_values("qkv_rope", a.y, a.bias)?;
    let table = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
    let (cos, sin) = (table(a.cos)?, table(a.sin)?);
    let f32_tables = a.cos.dtype() == DType::F32;
    let y = a.y.contiguous()?;
    let (ys, yl) = y.storage_and_layout();
    let data = cpu_slice::<bf16>(&ys, yl, n * width)?;
    let (mut q, mut k, mut v) = (
        Vec::with_capacity(n * heads * d),
        Vec::with_capacity(n * kv_heads * d),
        Vec::with_capacity(n * kv_heads * d),
    );
    let (qw, kw) = (heads * d, kv_heads * d);
    if n > 0 && qw > 0 && kw > 0 {
        fn spare(v: &mut Vec<bf16>, len: usize) -> &mut [MaybeUninit<bf16>] {
            &mut v.spare_capacity_mut()[..len]
        }
        spare(&mut q, n * qw)
            .par_chunks_mut(qw)
            .zip(spare(&mut k, n * kw).par_chunks_mut(kw))
            .zip(spare(&mut v, n * kw).par_chunks_mut(kw))
            .enumerate()
            .with_min_len(8)
            .for_each(|(i, ((qo, ko), vo))| {
                let (qo, ko, vo) = (zeroed(qo), zeroed(ko), zeroed(vo));
                vectorised(
                    #[inline(always)]
                    || {
                        let row = &data[i * width..(i + 1) * width];
                        let cs = (
                            &cos[i * half..(i + 1) * half],
                            &sin[i * half..(i + 1) * half],
                        );
                        rotate(&row[..qw], &bias[..qw], cs, qo, d, f32_tables);
                        rotate(&row[qw..qw + kw], &bias[qw..qw + kw], cs, ko, d, f32_tables);
                        for ((o, x), b) in vo.iter_mut().zip(&row[qw + kw..]).zip(&bias[qw + kw..])
                        {
                            *o = round(x.to_f32() + b);
                        }
                    },
                )
            });
        // SAFETY: the n rows of each output were zeroed, then written, above.
        unsafe {
            q.set_len(n * qw);
            k.set_len(n * kw);
            v.set_len(n * kw);
        }
    } else {
        q.resize(n * qw, bf16::ZERO);
        k.resize(n * kw, bf16::ZERO);
        v.resize(n * kw, bf16::ZERO);
    }
    let dev = a.y.device();
    Ok((
        Tensor::from_vec(q, (n, heads, d), dev)?,
        Tensor::from_vec(k, (n, kv_heads, d), dev)?,
        Tensor::from_vec(v, (n, kv_heads, d), dev)?,
    ))
}

/// The q or k heads (`d` values each) of one row of [`qkv_rope`].
#[inline(always)]
fn rotate(x: &[bf16], b: &[f32], cs: (&[f32], &[f32]), o: &mut [bf16], d: usize, f32_tables: bool) {
    for ((o, x), b) in o.chunks_mut(d).zip(x.chunks(d)).zip(b.chunks(d)) {
        match f32_tables {
            true => rotate_head(
                x,
                b,
                cs,
                o,
                #[inline(always)]
                |a, b, c, s| (round(a * c - b * s), round(a * s + b * c)),
            ),
            false => rotate_head(
                x,
                b,
                cs,
                o,
                #[inline(always)]
                |a, b, c, s| {
                    let m = |x: f32, y: f32| round(x * y).to_f32();
                    (round(m(a, c) - m(b, s)), round(m(a, s) + m(b, c)))
                },
            ),
        }
    }
}

/// One head of [`qkv_rope`]: each value with its bias, rounded, as it is read (no per-row buffer), then the
/// pair `(x[j], x[j + d/2])` through `pair` with the tables' `(cos, sin)` of `j`.
#[inline(always)]
fn rotate_head(
    x: &[bf16],
    b: &[f32],
    (cos, sin): (&[f32], &[f32]),
    o: &mut [bf16],
    pair: impl Fn(f32, f32, f32, f32) -> (bf16, bf16),
) {
    let half = x.len() / 2;
    let (x1, x2) = x.split_at(half);
    let (b1, b2) = b.split_at(half);
    let (o1, o2) = o.split_at_mut(half);
    let biased = |x: &bf16, b: &f32| round(x.to_f32() + b).to_f32();
    let inputs = x1.iter().zip(b1).zip(x2.iter().zip(b2));
    let tables = cos.iter().zip(sin);
    for ((o1, o2), ((p, q), (c, s))) in o1.iter_mut().zip(o2).zip(inputs.zip(tables)) {
        (*o1, *o2) = pair(biased(p.0, p.1), biased(q.0, q.1), *c, *s);
    }
}

#[cfg(test)]
mod tests;
