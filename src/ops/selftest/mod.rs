//! Compare the fused ops with their references on the CPU, on seeded random inputs of the model's shapes, in f32,
//! bf16 and f16. The ops run through an [`Executor`]: [`OnDevice`] runs them on a device (`mobile-r1-eval
//! self-test --device cuda` prints these results; on the CPU most ops are their references, so most differences
//! are 0), and `tests/it/kernels_emulated.rs` runs the CUDA kernels' source on the CPU through the same cases.

use candle_core::{DType, Device, Result, Tensor};
use serde::Serialize;

use super::{reference, DecodeKv, QkvRope, Varlen, VarlenSeg};

mod device;

pub(crate) use device::OnDevice;

/// An op's output, and whether a fused implementation (a kernel) produced it rather than the reference.
pub struct Ran<T> {
    pub out: T,
    pub kernel: bool,
}

/// A decode attention's output and the K/V buffers after the step.
pub type DecodeOut = (Tensor, Vec<(Tensor, Tensor)>);

/// What runs the fused ops for [`run_with`]. Inputs are CPU tensors; outputs may live on any device.
pub trait Executor {
    /// Whether the tensor-core varlen kernel exists for `dtype` here (then both varlen kernels are checked).
    fn has_mma(&self, dtype: DType) -> bool;
    /// [`super::Ops::rms_norm_hf`].
    fn rms_norm_hf(&self, x: &Tensor, w: &Tensor, eps: f32) -> Result<Ran<Tensor>>;
    /// [`super::Ops::swiglu_packed`].
    fn swiglu_packed(&self, gu: &Tensor, bias: Option<&Tensor>) -> Result<Ran<Tensor>>;
    /// [`super::Ops::bias_add`].
    fn bias_add(&self, y: &Tensor, b: &Tensor) -> Result<Ran<Tensor>>;
    /// [`super::Ops::bias_residual`].
    fn bias_residual(&self, y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Ran<Tensor>>;
    /// [`super::Ops::qkv_rope`].
    fn qkv_rope(&self, a: QkvRope<'_>) -> Result<Ran<(Tensor, Tensor, Tensor)>>;
    /// [`super::Ops::decode_attention`] over `kv` (CPU buffers, left unchanged); returns the output and every buffer
    /// after the step (the new position written), in the order of `kv`.
    fn decode_attention(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        kv: &[DecodeKv<'_>],
        scale: f32,
    ) -> Result<Ran<DecodeOut>>;
    /// [`super::Ops::varlen_attention`]; `mma` asks for the tensor-core kernel (only when [`Executor::has_mma`]).
    fn varlen_attention(&self, a: Varlen<'_>, mma: bool) -> Result<Ran<Tensor>>;
}

/// One comparison.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// Op and shape, e.g. `rms_norm_hf 7x2048`.
    pub case: String,
    /// Dtype of the inputs.
    pub dtype: String,
    /// True when a fused implementation ran (a CUDA kernel, or the fused CPU attention), not the reference.
    pub kernel: bool,
    /// Largest |device − reference|.
    pub max_abs_diff: f32,
    /// Largest allowed difference: `atol + rtol·max|reference|`.
    pub tolerance: f32,
    /// `max_abs_diff <= tolerance`.
    pub passed: bool,
}

/// Relative tolerance of a dtype: about two units in the last place.
fn rtol(dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => 2.0 / 128.0,
        DType::F16 => 2.0 / 1024.0,
        _ => 2e-5,
    }
}

/// Seeded uniform values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A CPU tensor of `shape` with seeded values in [-scale, scale), in `dtype`.
fn input(shape: &[usize], seed: u64, scale: f32, dtype: DType) -> Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = values(n, seed).into_iter().map(|x| x * scale).collect();
    Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)
}

/// `got` against `want` with the tolerance of `dtype`.
fn compare(
    case: String,
    dtype: DType,
    got: &Tensor,
    want: &Tensor,
    kernel: bool,
) -> Result<CheckResult> {
    let flat = |t: &Tensor| {
        t.to_device(&Device::Cpu)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()
    };
    let (got, want) = (flat(got)?, flat(want)?);
    if got.len() != want.len() {
        candle_core::bail!(
            "{case}: {} values where {} are expected",
            got.len(),
            want.len()
        );
    }
    // A NaN or infinity where the reference is finite (an element never written, say) is an infinite difference.
    let max_abs_diff = got
        .iter()
        .zip(&want)
        .map(|(g, w)| match (g - w).abs() {
            d if d.is_finite() || !w.is_finite() => d,
            _ => f32::INFINITY,
        })
        .fold(0f32, f32::max);
    let scale = want.iter().map(|w| w.abs()).fold(0f32, f32::max);
    let tolerance = 1e-6 + rtol(dtype) * scale;
    Ok(CheckResult {
        case,
        dtype: format!("{dtype:?}").to_lowercase(),
        kernel,
        max_abs_diff,
        tolerance,
        passed: max_abs_diff <= tolerance,
    })
}

/// Run every comparison on `device`, the ops running as `ops` says.
pub fn run(ops: &super::Ops, device: &Device) -> Result<Vec<CheckResult>> {
    run_with(&OnDevice { device, ops })
}

/// Run every comparison through `ex`.
pub fn run_with(ex: &dyn Executor) -> Result<Vec<CheckResult>> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (rows, cols) in [(7, 2048), (3, 1280), (2, 100)] {
            let x = input(&[rows, cols], 1 + cols as u64, 3.0, dtype)?;
            let w = input(&[cols], 2 + cols as u64, 1.0, dtype)?;
            let want = reference::rms_norm_hf(&x, &w, 1e-6)?;
            let got = ex.rms_norm_hf(&x, &w, 1e-6)?;
            let case = format!("rms_norm_hf {rows}x{cols}");
            out.push(compare(case, dtype, &got.out, &want, got.kernel)?);
        }
        // 17,000 columns take the column loop of the (rows, cols) kernels past one grid (64 blocks of 256).
        for (rows, cols, bias) in [
            (7, 5504, false),
            (2, 50, false),
            (3, 3420, true),
            (5, 1280, true),
            (2, 17_000, true),
        ] {
            out.push(check_swiglu(ex, dtype, rows, cols, bias)?);
        }
        for (kv_heads, group, d) in [(2, 8, 128), (2, 7, 64), (4, 7, 128), (1, 2, 32)] {
            out.push(check_decode(ex, dtype, kv_heads, group, d)?);
        }
        for (rows, cols) in [(5, 3420), (3, 1280), (2, 17_000)] {
            out.extend(check_bias(ex, dtype, rows, cols)?);
        }
        // The text shapes (tables in the activation dtype) and the vision tower's (f32 tables).
        for (n, heads, kv_heads, d, f32_tables) in [
            (7, 16, 2, 128, false),
            (3, 14, 2, 64, false),
            (5, 16, 16, 80, true),
        ] {
            let shape = QkvShape {
                n,
                heads,
                kv_heads,
                d,
                f32_tables,
            };
            out.push(check_qkv_rope(ex, dtype, shape)?);
        }
        // Where bf16/f16 have two varlen kernels (CUDA cores, tensor cores), check both.
        for case in VARLEN_CASES {
            out.push(check_varlen(ex, dtype, case, false)?);
            if ex.has_mma(dtype) {
                out.push(check_varlen(ex, dtype, case, true)?);
            }
        }
    }
    Ok(out)
}

/// Rows, heads, head_dim and the dtype of the rotary tables of a qkv_rope case.
struct QkvShape {
    n: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    f32_tables: bool,
}

/// Packed q/k/v + bias + rotary: q, k and v compared as one flattened tensor.
fn check_qkv_rope(ex: &dyn Executor, dtype: DType, shape: QkvShape) -> Result<CheckResult> {
    let QkvShape {
        n,
        heads,
        kv_heads,
        d,
        f32_tables,
    } = shape;
    let width = (heads + 2 * kv_heads) * d;
    let seed = (n * 31 + heads + d) as u64;
    let y = input(&[n, width], seed, 3.0, dtype)?;
    let b = input(&[width], seed + 1, 1.0, dtype)?;
    let angles: Vec<f32> = values(n * d / 2, seed + 2)
        .iter()
        .map(|x| x * 40.0)
        .collect();
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    let table_dtype = if f32_tables { DType::F32 } else { dtype };
    let table = |v: Vec<f32>| Tensor::from_vec(v, (n, d / 2), &Device::Cpu)?.to_dtype(table_dtype);
    let (cos, sin) = (table(cos)?, table(sin)?);
    let flat = |(q, k, v): (Tensor, Tensor, Tensor)| -> Result<Tensor> {
        let cpu = |t: Tensor| t.to_device(&Device::Cpu)?.flatten_all();
        Tensor::cat(&[cpu(q)?, cpu(k)?, cpu(v)?], 0)
    };
    let args = QkvRope {
        y: &y,
        bias: &b,
        cos: &cos,
        sin: &sin,
        heads,
        kv_heads,
    };
    let got = ex.qkv_rope(args)?;
    let want = reference::qkv_rope(args)?;
    compare(
        format!(
            "qkv_rope n{n} h{heads}/{kv_heads} d{d}{}",
            if f32_tables { " f32 rotary" } else { "" }
        ),
        dtype,
        &flat(got.out)?,
        &flat(want)?,
        got.kernel,
    )
}

/// SwiGLU of a packed (rows, 2·cols) projection, with or without its bias.
fn check_swiglu(
    ex: &dyn Executor,
    dtype: DType,
    rows: usize,
    cols: usize,
    bias: bool,
) -> Result<CheckResult> {
    let seed = (rows * 13 + cols) as u64;
    let gu = input(&[rows, 2 * cols], seed, 6.0, dtype)?;
    let b = bias
        .then(|| input(&[2 * cols], seed + 1, 1.0, dtype))
        .transpose()?;
    let got = ex.swiglu_packed(&gu, b.as_ref())?;
    compare(
        format!(
            "swiglu_packed {rows}x{cols}{}",
            if bias { " bias" } else { "" }
        ),
        dtype,
        &got.out,
        &reference::swiglu_packed(&gu, b.as_ref())?,
        got.kernel,
    )
}

/// The bias epilogues on (rows, cols) operands.
fn check_bias(
    ex: &dyn Executor,
    dtype: DType,
    rows: usize,
    cols: usize,
) -> Result<Vec<CheckResult>> {
    let seed = (rows * 7 + cols) as u64;
    let y = input(&[rows, cols], seed, 4.0, dtype)?;
    let u = input(&[rows, cols], seed + 1, 2.0, dtype)?;
    let b = input(&[cols], seed + 2, 1.0, dtype)?;
    let shape = format!("{rows}x{cols}");
    let (add, residual) = (ex.bias_add(&y, &b)?, ex.bias_residual(&y, &b, &u)?);
    Ok(vec![
        compare(
            format!("bias_add {shape}"),
            dtype,
            &add.out,
            &reference::bias_add(&y, &b)?,
            add.kernel,
        )?,
        compare(
            format!("bias_residual {shape}"),
            dtype,
            &residual.out,
            &reference::bias_residual(&y, &b, &u)?,
            residual.kernel,
        )?,
    ])
}

/// Fused decode attention over five sequences of lengths 0..1000 (new K/V written at each length) against the
/// composed reference on the CPU; the written K/V are compared too.
fn check_decode(
    ex: &dyn Executor,
    dtype: DType,
    kv_heads: usize,
    group: usize,
    d: usize,
) -> Result<CheckResult> {
    let lens = [0usize, 1, 17, 300, 1000];
    let b = lens.len();
    let seed = (kv_heads * 1000 + group * 100 + d) as u64;
    let q = input(&[b, kv_heads * group, d], seed, 2.0, dtype)?;
    let k_new = input(&[b, kv_heads, d], seed + 1, 2.0, dtype)?;
    let v_new = input(&[b, kv_heads, d], seed + 2, 1.0, dtype)?;
    let bufs: Vec<(Tensor, Tensor)> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| {
            let cap = l + 1 + i;
            let s = seed + 10 * i as u64;
            Ok((
                input(&[kv_heads, cap, d], s + 3, 2.0, dtype)?,
                input(&[kv_heads, cap, d], s + 4, 1.0, dtype)?,
            ))
        })
        .collect::<Result<_>>()?;
    fn kv(bs: &[(Tensor, Tensor)], lens: [usize; 5]) -> Vec<DecodeKv<'_>> {
        bs.iter()
            .zip(lens)
            .map(|((k, v), len)| DecodeKv { k, v, len })
            .collect()
    }
    let scale = 1.0 / (d as f32).sqrt();
    let got = ex.decode_attention(&q, &k_new, &v_new, &kv(&bufs, lens), scale)?;
    let f32s = |t: &Tensor| t.to_device(&Device::Cpu)?.to_dtype(DType::F32);
    let cpu: Vec<(Tensor, Tensor)> = bufs
        .iter()
        .map(|(k, v)| Ok((f32s(k)?.copy()?, f32s(v)?.copy()?)))
        .collect::<Result<_>>()?;
    let want = reference::decode_attention(
        &f32s(&q)?,
        &f32s(&k_new)?,
        &f32s(&v_new)?,
        &kv(&cpu, lens),
        scale,
    )?;
    let (out, written) = got.out;
    let mut r = compare(
        format!("decode_attention kv{kv_heads} g{group} d{d}"),
        dtype,
        &out,
        &want,
        got.kernel,
    )?;
    // The new position must have been written into every buffer.
    for ((k, v), (kc, vc)) in written.iter().zip(&cpu) {
        for (a, b) in [(k, kc), (v, vc)] {
            let diff = (f32s(a)? - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
            r.max_abs_diff = r.max_abs_diff.max(diff);
        }
    }
    r.passed = r.max_abs_diff <= r.tolerance;
    Ok(r)
}

/// A varlen attention case: heads, kv_heads, head_dim, causal, segments as (rows, prefix_len, prefix_cap).
type VarlenCase = (usize, usize, usize, bool, &'static [(usize, usize, usize)]);

/// The vision tower's windows and images (no prefix), and prefill batches of the 3B and 0.5B text shapes.
const VARLEN_CASES: [VarlenCase; 3] = [
    (
        16,
        16,
        80,
        false,
        &[(64, 0, 0), (64, 0, 0), (50, 0, 0), (300, 0, 0), (7, 0, 0)],
    ),
    (16, 2, 128, true, &[(5, 0, 0), (100, 20, 24), (37, 64, 64)]),
    (14, 2, 64, true, &[(70, 33, 40), (1, 0, 0), (33, 5, 5)]),
];

/// Varlen attention through `ex` against the composed reference on the CPU (f32 from the same inputs); `mma`
/// asks for the tensor-core kernel.
fn check_varlen(
    ex: &dyn Executor,
    dtype: DType,
    case: VarlenCase,
    mma: bool,
) -> Result<CheckResult> {
    let (heads, kv_heads, d, causal, spec) = case;
    let n: usize = spec.iter().map(|s| s.0).sum();
    let seed = (heads * 1000 + d) as u64;
    let q = input(&[n, heads, d], seed, 2.0, dtype)?;
    let k = input(&[n, kv_heads, d], seed + 1, 2.0, dtype)?;
    let v = input(&[n, kv_heads, d], seed + 2, 1.0, dtype)?;
    let prefixes: Vec<(Tensor, Tensor)> = spec
        .iter()
        .enumerate()
        .map(|(i, &(_, _, cap))| {
            let s = seed + 10 * i as u64;
            let shape = [kv_heads, cap.max(1), d];
            Ok((
                input(&shape, s + 3, 2.0, dtype)?,
                input(&shape, s + 4, 1.0, dtype)?,
            ))
        })
        .collect::<Result<_>>()?;
    fn segs<'a>(
        spec: &[(usize, usize, usize)],
        bufs: &'a [(Tensor, Tensor)],
    ) -> Vec<VarlenSeg<'a>> {
        let mut start = 0;
        spec.iter()
            .zip(bufs)
            .map(|(&(len, p, _), (k, v))| {
                let seg = VarlenSeg {
                    start,
                    len,
                    prefix: (p > 0).then_some((k, v, p)),
                };
                start += len;
                seg
            })
            .collect()
    }
    let scale = 1.0 / (d as f32).sqrt();
    let call = |q, k, v, segs| Varlen {
        q,
        k,
        v,
        segs,
        causal,
        scale,
    };
    let segs_in = segs(spec, &prefixes);
    let got = ex.varlen_attention(call(&q, &k, &v, &segs_in), mma)?;
    let f32s = |t: &Tensor| t.to_dtype(DType::F32);
    let cpu: Vec<(Tensor, Tensor)> = prefixes
        .iter()
        .map(|(k, v)| Ok((f32s(k)?, f32s(v)?)))
        .collect::<Result<_>>()?;
    let (qf, kf, vf, segs_f) = (f32s(&q)?, f32s(&k)?, f32s(&v)?, segs(spec, &cpu));
    let want = reference::varlen_attention(call(&qf, &kf, &vf, &segs_f))?;
    let lens: Vec<String> = spec.iter().map(|s| format!("{}+{}", s.1, s.0)).collect();
    compare(
        format!(
            "varlen{} h{heads}/{kv_heads} d{d}{} [{}]",
            if mma { " mma" } else { "" },
            if causal { " causal" } else { "" },
            lens.join(",")
        ),
        dtype,
        &got.out,
        &want,
        got.kernel,
    )
}
