//! Fused elementwise ops on the CPU in f32, each one parallel pass over the rows without the composed reference's
//! intermediate tensors: the packed q/k/v bias + rotary and a projection's bias + residual (the reference's
//! arithmetic in its order, so the same bits) and SwiGLU of a packed `[gate | up]` projection (with AVX2 or
//! AVX-512, `exp` is the vectorised Cephes scheme of [`crate::ops::simd`], within about an ulp of libm's, so the
//! result may differ from the reference's in the last bit; the AVX2 and AVX-512 paths give the same bits).

use candle_core::{DType, Result, Tensor};
use rayon::prelude::*;

use crate::ops::cpu_data::{cpu_slice, map_rows, zeros};
use crate::ops::simd::{self, Level};

/// Whether this path serves `tensors`: all f32 and on the CPU.
pub fn supported(tensors: &[&Tensor]) -> bool {
    tensors
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
}

/// Copy the f32 data of a CPU tensor (made contiguous) into a `Vec`.
fn f32_data(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// The vector part of a SwiGLU row at `level` (one the CPU supports): how many leading columns it wrote.
pub(super) fn vector_swiglu(
    g: &[f32],
    u: &[f32],
    bias: Option<(&[f32], &[f32])>,
    out: &mut [f32],
    level: Level,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both arms): the CPU supports `level`; u, out and the biases are as long as g (one row's halves).
        Level::Avx512 => return unsafe { simd::avx512::swiglu_row(g, u, bias, out) },
        Level::Avx2 => return unsafe { simd::avx2::swiglu_row(g, u, bias, out) },
        Level::Portable => {}
    }
    let _ = (g, u, bias, out, level);
    0
}

/// See [`crate::ops::Ops::swiglu_packed`].
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    swiglu_packed_at(gu, bias, Level::detect())
}

/// [`swiglu_packed`] on the vector path `level`, which must be one the CPU supports.
fn swiglu_packed_at(gu: &Tensor, bias: Option<&Tensor>, level: Level) -> Result<Tensor> {
    let shape = super::swiglu_out_shape(gu, bias)?;
    let cols = *shape.last().expect("rank ≥ 1");
    let width = 2 * cols;
    let bias = bias.map(f32_data).transpose()?;
    map_rows(gu, (width, cols), 1, shape, |row, o| {
        let (g, u) = row.split_at(cols);
        let bias = bias.as_deref().map(|b| b.split_at(cols));
        let done = vector_swiglu(g, u, bias, o, level);
        for c in done..cols {
            let (gv, uv) = match bias {
                Some((bg, bu)) => (g[c] + bg[c], u[c] + bu[c]),
                None => (g[c], u[c]),
            };
            o[c] = gv / (1.0 + (-gv).exp()) * uv;
        }
    })
}

/// See [`crate::ops::Ops::bias_residual`] (f32 `y` and `r` of the same shape, bias over the last dimension):
/// `r + (y + b)` in one parallel pass over the rows, the reference's two additions in its order (the same bits).
pub fn bias_residual(y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Tensor> {
    let width = y.dim(candle_core::D::Minus1)?;
    if b.dims() != [width] || r.dims() != y.dims() {
        candle_core::bail!(
            "bias_residual: y {:?}, bias {:?}, residual {:?}",
            y.dims(),
            b.dims(),
            r.dims()
        );
    }
    let b = f32_data(b)?;
    let (y, r) = (y.contiguous()?, r.contiguous()?);
    let (ys, yl) = y.storage_and_layout();
    let (rs, rl) = r.storage_and_layout();
    let (yd, rd) = (
        cpu_slice::<f32>(&ys, yl, y.elem_count())?,
        cpu_slice::<f32>(&rs, rl, r.elem_count())?,
    );
    let mut out = zeros(yd.len());
    if width > 0 {
        out.par_chunks_mut(width)
            .zip(yd.par_chunks(width).zip(rd.par_chunks(width)))
            .with_min_len(8)
            .for_each(|(o, (yr, rr))| {
                for (((o, y), r), b) in o.iter_mut().zip(yr).zip(rr).zip(&b) {
                    *o = r + (y + b);
                }
            });
    }
    Tensor::from_vec(out, y.shape(), y.device())
}

/// See [`crate::ops::Ops::qkv_rope`] (f32 projection, bias and tables): rows in parallel; per rotated head and j < d/2,
/// x = y + b, then `x[j]·cos − x[j+d/2]·sin` and `x[j]·sin + x[j+d/2]·cos` as candle's `rope_thd` computes them.
pub fn qkv_rope(a: super::QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    qkv_rope_at(a, Level::detect())
}

/// [`qkv_rope`] compiled for the vector path `level`, which must be one the CPU supports.
fn qkv_rope_at(a: super::QkvRope<'_>, level: Level) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, d) = a.dims()?;
    let (heads, kv_heads, y) = (a.heads, a.kv_heads, a.y);
    let (width, half) = ((heads + 2 * kv_heads) * d, d / 2);
    // Borrowed in place: no copy where the tensors are already contiguous, as they are in the model.
    let (bias_t, cos_t, sin_t) = (
        a.bias.contiguous()?,
        a.cos.contiguous()?,
        a.sin.contiguous()?,
    );
    let y = y.contiguous()?;
    let (bg, cg, sg, yg) = (
        bias_t.storage_and_layout(),
        cos_t.storage_and_layout(),
        sin_t.storage_and_layout(),
        y.storage_and_layout(),
    );
    let (bias, cos) = (
        cpu_slice(&bg.0, bg.1, width)?,
        cpu_slice(&cg.0, cg.1, n * half)?,
    );
    let (sin, data) = (
        cpu_slice(&sg.0, sg.1, n * half)?,
        cpu_slice(&yg.0, yg.1, n * width)?,
    );
    let (mut q, mut k, mut v) = (
        zeros(n * heads * d),
        zeros(n * kv_heads * d),
        zeros(n * kv_heads * d),
    );
    if n > 0 && d > 0 {
        q.par_chunks_mut(heads * d)
            .zip(k.par_chunks_mut(kv_heads * d))
            .zip(v.par_chunks_mut(kv_heads * d))
            .zip(data.par_chunks(width))
            .enumerate()
            .for_each(|(r, (((qr, kr), vr), yr))| {
                let rows = RopeRow {
                    y: yr,
                    bias,
                    cos: &cos[r * half..(r + 1) * half],
                    sin: &sin[r * half..(r + 1) * half],
                };
                rope_row_at(&rows, qr, kr, vr, level);
            });
    }
    let dev = y.device();
    Ok((
        Tensor::from_vec(q, (n, heads, d), dev)?,
        Tensor::from_vec(k, (n, kv_heads, d), dev)?,
        Tensor::from_vec(v, (n, kv_heads, d), dev)?,
    ))
}

/// One row of a packed projection for [`qkv_rope`]: its values, the bias and the row's rotary half-tables.
struct RopeRow<'a> {
    y: &'a [f32],
    bias: &'a [f32],
    cos: &'a [f32],
    sin: &'a [f32],
}

/// Bias + rotary of one row into its q, k and v rows; the same Rust code compiled for `level` (the compiler
/// vectorises it; it never fuses a multiply and an add, so every level gives the reference's bits).
fn rope_row_at(r: &RopeRow<'_>, q: &mut [f32], k: &mut [f32], v: &mut [f32], level: Level) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn avx512(r: &RopeRow<'_>, q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
            rope_row(r, q, k, v)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(r: &RopeRow<'_>, q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
            rope_row(r, q, k, v)
        }
        match level {
            // SAFETY (both arms): the CPU supports `level`.
            Level::Avx512 => return unsafe { avx512(r, q, k, v) },
            Level::Avx2 => return unsafe { avx2(r, q, k, v) },
            Level::Portable => {}
        }
    }
    let _ = level;
    rope_row(r, q, k, v)
}

/// Per rotated head and j < d/2: x = y + b, then `x[j]·cos − x[j+d/2]·sin` and `x[j]·sin + x[j+d/2]·cos` as
/// candle's `rope_thd` computes them; v = y + b.
#[inline(always)]
fn rope_row(r: &RopeRow<'_>, q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
    let half = r.cos.len();
    let d = 2 * half;
    let rotated = q.chunks_exact_mut(d).chain(k.chunks_exact_mut(d));
    for (hh, dst) in rotated.enumerate() {
        let o = hh * d;
        let (y1, y2) = r.y[o..o + d].split_at(half);
        let (b1, b2) = r.bias[o..o + d].split_at(half);
        let (d1, d2) = dst.split_at_mut(half);
        for j in 0..half {
            let x1 = y1[j] + b1[j];
            let x2 = y2[j] + b2[j];
            d1[j] = x1 * r.cos[j] - x2 * r.sin[j];
            d2[j] = x1 * r.sin[j] + x2 * r.cos[j];
        }
    }
    let o = q.len() + k.len();
    for ((out, y), b) in v.iter_mut().zip(&r.y[o..]).zip(&r.bias[o..]) {
        *out = y + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{reference, QkvRope};
    use candle_core::Device;

    pub(super) fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// SwiGLU on every vector path this CPU supports against the composed reference (widths with a 16-, 8- and
    /// scalar tail); the AVX2 and AVX-512 paths give the same bits.
    #[test]
    fn swiglu_every_supported_path_matches_the_reference() {
        for cols in [3420usize, 40, 29] {
            let gu = Tensor::rand(-6f32, 6f32, (7, 2 * cols), &Device::Cpu).unwrap();
            let b = Tensor::rand(-1f32, 1f32, 2 * cols, &Device::Cpu).unwrap();
            for bias in [None, Some(&b)] {
                let want = reference::swiglu_packed(&gu, bias).unwrap();
                let mut vector = Vec::new();
                for level in Level::supported() {
                    eprintln!("swiglu cols={cols} bias={} at {level:?}", bias.is_some());
                    let got = swiglu_packed_at(&gu, bias, level).unwrap();
                    let diff = (&got - &want).unwrap().abs().unwrap().max_all().unwrap();
                    assert!(
                        diff.to_scalar::<f32>().unwrap() < 1e-5,
                        "{level:?} cols={cols}"
                    );
                    if level != Level::Portable {
                        vector.push(bits(&got));
                    }
                }
                assert!(
                    vector.windows(2).all(|w| w[0] == w[1]),
                    "AVX2 and AVX-512 bits differ"
                );
            }
        }
    }

    /// The fused bias + residual has the reference's bits; mismatched shapes are an error.
    #[test]
    fn bias_residual_has_the_reference_bits() {
        let dev = Device::Cpu;
        let y = Tensor::rand(-3f32, 3f32, (11, 1030), &dev).unwrap();
        let r = Tensor::rand(-3f32, 3f32, (11, 1030), &dev).unwrap();
        let b = Tensor::rand(-1f32, 1f32, 1030, &dev).unwrap();
        let got = bias_residual(&y, &b, &r).unwrap();
        assert_eq!(
            bits(&got),
            bits(&reference::bias_residual(&y, &b, &r).unwrap())
        );
        let short = r.narrow(0, 0, 10).unwrap();
        assert!(bias_residual(&y, &b, &short).is_err());
    }

    /// q/k/v + rotary on every path this CPU supports has the composed reference's bits.
    #[test]
    fn qkv_rope_every_supported_path_has_the_reference_bits() {
        let (n, heads, kv, d) = (9usize, 3usize, 1usize, 80usize);
        let dev = Device::Cpu;
        let y = Tensor::rand(-2f32, 2f32, (n, (heads + 2 * kv) * d), &dev).unwrap();
        let bias = Tensor::rand(-1f32, 1f32, (heads + 2 * kv) * d, &dev).unwrap();
        let cos = Tensor::rand(-1f32, 1f32, (n, d / 2), &dev).unwrap();
        let sin = Tensor::rand(-1f32, 1f32, (n, d / 2), &dev).unwrap();
        let a = QkvRope {
            y: &y,
            bias: &bias,
            cos: &cos,
            sin: &sin,
            heads,
            kv_heads: kv,
        };
        let want = reference::qkv_rope(a).unwrap();
        for level in Level::supported() {
            eprintln!("qkv_rope at {level:?}");
            let got = qkv_rope_at(a, level).unwrap();
            assert_eq!(bits(&got.0), bits(&want.0), "q at {level:?}");
            assert_eq!(bits(&got.1), bits(&want.1), "k at {level:?}");
            assert_eq!(bits(&got.2), bits(&want.2), "v at {level:?}");
        }
    }
}

/// Times of SwiGLU and q/k/v + rotary at each vector path this CPU supports (the `small` vision tower's shapes
/// for one screenshot), then the bf16 q/k/v + rotary beside a plain copy of its input (the memory traffic it
/// needs; both write fresh outputs, so both also pay the page faults this test process's allocator gives them):
/// `cargo test --release --lib ops::elementwise::cpu::timing -- --ignored --nocapture`.
#[cfg(test)]
mod timing {
    use super::tests::bits;
    use super::*;
    use crate::ops::QkvRope;
    use candle_core::Device;

    fn best(mut f: impl FnMut()) -> f64 {
        (0..7)
            .map(|_| {
                let t0 = std::time::Instant::now();
                f();
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn levels() {
        let dev = Device::Cpu;
        let gu = Tensor::randn(0f32, 2.0, (4992, 2 * 3420), &dev).unwrap();
        let y = Tensor::randn(0f32, 1.0, (4992, 3 * 1280), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, 3 * 1280, &dev).unwrap();
        let cos = Tensor::randn(0f32, 1.0, (4992, 40), &dev).unwrap();
        let sin = Tensor::randn(0f32, 1.0, (4992, 40), &dev).unwrap();
        let a = QkvRope {
            y: &y,
            bias: &bias,
            cos: &cos,
            sin: &sin,
            heads: 16,
            kv_heads: 16,
        };
        let mut outs = Vec::new();
        for level in Level::supported() {
            if level != Level::Portable {
                outs.push(bits(&swiglu_packed_at(&gu, None, level).unwrap()));
            }
            let s = best(|| drop(swiglu_packed_at(&gu, None, level).unwrap()));
            let r = best(|| drop(qkv_rope_at(a, level).unwrap()));
            eprintln!(
                "at {level:?}: swiglu 4992x3420 {:.2} ms, qkv_rope 4992x3x1280 {:.2} ms",
                s * 1e3,
                r * 1e3
            );
        }
        assert!(
            outs.windows(2).all(|w| w[0] == w[1]),
            "AVX2 and AVX-512 bits differ"
        );
        let (y16, bias16) = (
            y.to_dtype(DType::BF16).unwrap(),
            bias.to_dtype(DType::BF16).unwrap(),
        );
        let a16 = QkvRope {
            y: &y16,
            bias: &bias16,
            ..a
        };
        let r = best(|| drop(super::super::bf16::qkv_rope(a16).unwrap()));
        let c = best(|| drop(y16.copy().unwrap()));
        eprintln!(
            "bf16 qkv_rope 4992x3x1280 {:.2} ms, a copy of its input {:.2} ms",
            r * 1e3,
            c * 1e3
        );
    }
}
