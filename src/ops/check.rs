//! Compare the fused ops on a device with their references on the CPU, on seeded random inputs of the model's
//! shapes, in f32, bf16 and f16. `mobile-r1-eval self-test --device cuda` prints these results; on the CPU the
//! ops are their references, so every difference is 0.

use candle_core::{DType, Device, Result, Tensor};
use serde::Serialize;

use super::{reference, DecodeKv, VarlenSeg};

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

fn input(shape: &[usize], seed: u64, scale: f32, dtype: DType) -> Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = values(n, seed).into_iter().map(|x| x * scale).collect();
    Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)
}

fn compare(
    case: String,
    dtype: DType,
    got: &Tensor,
    want: &Tensor,
    kernel: bool,
) -> Result<CheckResult> {
    let got = got.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    let want = want.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    let max_abs_diff = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
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

/// Run every comparison on `device`.
pub fn run(device: &Device) -> Result<Vec<CheckResult>> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let kernel = device.is_cuda() && super::kernels_enabled();
        // The CPU has fused f32 paths for SwiGLU, q/k/v + rotary and varlen attention.
        let cpu_f32 = device.is_cpu() && super::kernels_enabled() && dtype == DType::F32;
        for (rows, cols) in [(7, 2048), (3, 1280), (2, 100)] {
            let x = input(&[rows, cols], 1 + cols as u64, 3.0, dtype)?;
            let w = input(&[cols], 2 + cols as u64, 1.0, dtype)?;
            let want = reference::rms_norm_hf(&x, &w, 1e-6)?;
            let got = super::rms_norm_hf(&x.to_device(device)?, &w.to_device(device)?, 1e-6)?;
            out.push(compare(
                format!("rms_norm_hf {rows}x{cols}"),
                dtype,
                &got,
                &want,
                kernel,
            )?);
        }
        for (rows, cols, bias) in [
            (7, 5504, false),
            (2, 50, false),
            (3, 3420, true),
            (5, 1280, true),
        ] {
            out.push(check_swiglu(
                device,
                dtype,
                rows,
                cols,
                bias,
                kernel || cpu_f32,
            )?);
        }
        for (kv_heads, group, d) in [(2, 8, 128), (2, 7, 64), (4, 7, 128), (1, 2, 32)] {
            out.push(check_decode(device, dtype, kv_heads, group, d)?);
        }
        for (rows, cols) in [(5, 3420), (3, 1280)] {
            out.extend(check_bias(device, dtype, rows, cols, kernel)?);
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
            out.push(check_qkv_rope(device, dtype, shape, kernel || cpu_f32)?);
        }
        // On CUDA, bf16/f16 have two varlen kernels (CUDA cores, tensor cores): check both.
        let mma_too = device.is_cuda() && kernel && dtype != DType::F32;
        for case in VARLEN_CASES {
            out.push(check_varlen(device, dtype, case, false)?);
            if mma_too {
                out.push(check_varlen(device, dtype, case, true)?);
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
fn check_qkv_rope(
    device: &Device,
    dtype: DType,
    shape: QkvShape,
    kernel: bool,
) -> Result<CheckResult> {
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
    let on = |t: &Tensor| t.to_device(device);
    let (yd, bd, cd, sd) = (on(&y)?, on(&b)?, on(&cos)?, on(&sin)?);
    let args = |y, bias, cos, sin| super::QkvRope {
        y,
        bias,
        cos,
        sin,
        heads,
        kv_heads,
    };
    let got = super::qkv_rope(args(&yd, &bd, &cd, &sd))?;
    let want = reference::qkv_rope(args(&y, &b, &cos, &sin))?;
    compare(
        format!(
            "qkv_rope n{n} h{heads}/{kv_heads} d{d}{}",
            if f32_tables { " f32 rotary" } else { "" }
        ),
        dtype,
        &flat(got)?,
        &flat(want)?,
        kernel,
    )
}

/// SwiGLU of a packed (rows, 2·cols) projection, with or without its bias.
fn check_swiglu(
    device: &Device,
    dtype: DType,
    rows: usize,
    cols: usize,
    bias: bool,
    kernel: bool,
) -> Result<CheckResult> {
    let seed = (rows * 13 + cols) as u64;
    let gu = input(&[rows, 2 * cols], seed, 6.0, dtype)?;
    let b = bias
        .then(|| input(&[2 * cols], seed + 1, 1.0, dtype))
        .transpose()?;
    let bd = b.as_ref().map(|b| b.to_device(device)).transpose()?;
    compare(
        format!(
            "swiglu_packed {rows}x{cols}{}",
            if bias { " bias" } else { "" }
        ),
        dtype,
        &super::swiglu_packed(&gu.to_device(device)?, bd.as_ref())?,
        &reference::swiglu_packed(&gu, b.as_ref())?,
        kernel,
    )
}

/// The bias epilogues on (rows, cols) operands.
fn check_bias(
    device: &Device,
    dtype: DType,
    rows: usize,
    cols: usize,
    kernel: bool,
) -> Result<Vec<CheckResult>> {
    let seed = (rows * 7 + cols) as u64;
    let y = input(&[rows, cols], seed, 4.0, dtype)?;
    let u = input(&[rows, cols], seed + 1, 2.0, dtype)?;
    let b = input(&[cols], seed + 2, 1.0, dtype)?;
    let on = |t: &Tensor| t.to_device(device);
    let (yd, ud, bd) = (on(&y)?, on(&u)?, on(&b)?);
    let shape = format!("{rows}x{cols}");
    Ok(vec![
        compare(
            format!("bias_add {shape}"),
            dtype,
            &super::bias_add(&yd, &bd)?,
            &reference::bias_add(&y, &b)?,
            kernel,
        )?,
        compare(
            format!("bias_residual {shape}"),
            dtype,
            &super::bias_residual(&yd, &bd, &ud)?,
            &reference::bias_residual(&y, &b, &u)?,
            kernel,
        )?,
    ])
}

/// Fused decode attention over five sequences of lengths 0..1000 (new K/V written at each length) against the
/// composed reference on the CPU; the written K/V are compared too.
fn check_decode(
    device: &Device,
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
    let on_device: Vec<(Tensor, Tensor)> = bufs
        .iter()
        .map(|(k, v)| {
            Ok((
                k.to_device(device)?.contiguous()?,
                v.to_device(device)?.contiguous()?,
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
    let got = super::decode_attention(
        &q.to_device(device)?,
        &k_new.to_device(device)?,
        &v_new.to_device(device)?,
        &kv(&on_device, lens),
        scale,
    )?;
    let f32s = |t: &Tensor| t.to_dtype(DType::F32);
    let cpu: Vec<(Tensor, Tensor)> = bufs
        .iter()
        .map(|(k, v)| Ok((f32s(k)?, f32s(v)?)))
        .collect::<Result<_>>()?;
    let want = reference::decode_attention(
        &f32s(&q)?,
        &f32s(&k_new)?,
        &f32s(&v_new)?,
        &kv(&cpu, lens),
        scale,
    )?;
    let mut r = compare(
        format!("decode_attention kv{kv_heads} g{group} d{d}"),
        dtype,
        &got,
        &want,
        super::fused_decode_supported(device, dtype, d, group),
    )?;
    // The new position must have been written into every buffer.
    for ((k, v), (kc, vc)) in on_device.iter().zip(&cpu) {
        for (a, b) in [(k, kc), (v, vc)] {
            let diff = (f32s(&a.to_device(&Device::Cpu)?)? - b)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
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

/// Varlen attention on the device against the composed reference on the CPU (f32 from the same inputs); on CUDA
/// with the kernels on, `mma` picks the tensor-core kernel over the CUDA-core one.
fn check_varlen(device: &Device, dtype: DType, case: VarlenCase, mma: bool) -> Result<CheckResult> {
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
    let on_device: Vec<(Tensor, Tensor)> = prefixes
        .iter()
        .map(|(k, v)| Ok((k.to_device(device)?, v.to_device(device)?)))
        .collect::<Result<_>>()?;
    let scale = 1.0 / (d as f32).sqrt();
    let (qd, kd, vd) = (
        q.to_device(device)?,
        k.to_device(device)?,
        v.to_device(device)?,
    );
    let segs_d = segs(spec, &on_device);
    let call = |q, k, v, segs| super::Varlen {
        q,
        k,
        v,
        segs,
        causal,
        scale,
    };
    let got = if device.is_cuda() && super::varlen_supported(device, dtype, d) {
        #[cfg(not(feature = "cuda"))]
        unreachable!("varlen_supported holds on CUDA only with the cuda feature");
        #[cfg(feature = "cuda")]
        super::varlen_attention_cuda(call(&qd, &kd, &vd, &segs_d), mma)?
    } else {
        super::varlen_attention(call(&qd, &kd, &vd, &segs_d))?
    };
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
        &got,
        &want,
        super::varlen_supported(device, dtype, d),
    )
}
