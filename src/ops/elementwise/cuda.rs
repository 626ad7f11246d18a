//! CUDA launchers of the elementwise kernels: RMSNorm, SwiGLU of a packed projection, the bias epilogues and
//! q/k/v + rotary.

use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{bail, DType, Result, Shape, Storage, Tensor};
use half::{bf16, f16};

use super::{swiglu_out_shape, QkvRope};
use crate::ops::cuda::kernels::{config, cuda_device, kernel, tensor_of, with_view};
use crate::ops::cuda::launch;

/// See [`crate::ops::Ops::rms_norm_hf`].
pub fn rms_norm_hf(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    match x.dtype() {
        DType::F32 => rms_norm_t::<f32>(x, w, eps),
        DType::BF16 => rms_norm_t::<bf16>(x, w, eps),
        DType::F16 => rms_norm_t::<f16>(x, w, eps),
        other => bail!("rms_norm_hf: no kernel for {other:?}"),
    }
}

fn rms_norm_t<T: CudaDType + DeviceRepr>(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let dev = cuda_device(x)?;
    let x = x.contiguous()?;
    let cols = x.dim(candle_core::D::Minus1)?;
    if w.dims() != [cols] {
        bail!("rms_norm_hf: weight {:?} for rows of {cols}", w.dims());
    }
    let rows = x.elem_count() / cols.max(1);
    let func = kernel(&dev, &launch::kernel_name("rmsnorm_hf", x.dtype())?)?;
    let out = unsafe { dev.alloc::<T>(x.elem_count())? };
    with_view::<T, _>(&x, |xs| {
        with_view::<T, _>(w, |ws| {
            let cfg = config(launch::rms_norm(rows, cols));
            let cols = cols as i32;
            let mut b = func.builder();
            b.arg(&xs).arg(&ws).arg(&out).arg(&cols).arg(&eps);
            // SAFETY: the kernel reads rows·cols elements of x, cols of w and writes rows·cols of out.
            unsafe { b.launch(cfg) }.w()?;
            Ok(())
        })
    })?;
    Ok(tensor_of(out, &dev, x.shape().clone()))
}

/// Launch shape of the kernels that loop over (rows, cols) (`blockIdx.y` over rows, `blockIdx.x` over column
/// blocks, both grid-stride) and the two sizes as kernel arguments.
fn rows_cols_launch(rows: usize, cols: usize) -> Result<(LaunchConfig, i32, i32)> {
    let arg = |x: usize| i32::try_from(x).map_err(candle_core::Error::wrap);
    Ok((
        config(launch::rows_cols(rows, cols)),
        arg(rows)?,
        arg(cols)?,
    ))
}

/// See [`crate::ops::Ops::swiglu_packed`].
pub fn swiglu_packed(gu: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    match gu.dtype() {
        DType::F32 => swiglu_packed_t::<f32>(gu, bias),
        DType::BF16 => swiglu_packed_t::<bf16>(gu, bias),
        DType::F16 => swiglu_packed_t::<f16>(gu, bias),
        other => bail!("swiglu_packed: no kernel for {other:?}"),
    }
}

fn swiglu_packed_t<T: CudaDType + DeviceRepr>(
    gu: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let dev = cuda_device(gu)?;
    let gu = gu.contiguous()?;
    let shape = swiglu_out_shape(&gu, bias)?;
    let cols = *shape.last().expect("rank ≥ 1");
    let rows = gu.elem_count() / (2 * cols).max(1);
    let func = kernel(&dev, &launch::kernel_name("swiglu_packed", gu.dtype())?)?;
    let out = unsafe { dev.alloc::<T>(rows * cols)? };
    if rows > 0 && cols > 0 {
        let has_bias = i32::from(bias.is_some());
        // Without a bias the kernel never reads its bias argument; the projection stands in for it.
        let bias = bias
            .map(|b| b.contiguous())
            .transpose()?
            .unwrap_or_else(|| gu.clone());
        with_view::<T, _>(&gu, |gs| {
            with_view::<T, _>(&bias, |bs| {
                let (cfg, r, c) = rows_cols_launch(rows, cols)?;
                let mut b = func.builder();
                b.arg(&gs).arg(&bs).arg(&has_bias).arg(&out).arg(&r).arg(&c);
                // SAFETY: gu holds rows·2·cols elements, the bias (when read) 2·cols, out rows·cols.
                unsafe { b.launch(cfg) }.w()?;
                Ok(())
            })
        })?;
    }
    Ok(tensor_of(out, &dev, Shape::from(shape)))
}

/// See [`crate::ops::Ops::bias_add`] and [`crate::ops::Ops::bias_residual`]: `op` is `bias_add` or
/// `bias_residual`; `full` are the (rows, cols) operands and `per_col` the (cols) biases, in the kernel's argument
/// order (full operands first, except `bias_residual`: y, b, r).
pub fn bias_op(op: &str, full: &[&Tensor], per_col: &[&Tensor]) -> Result<Tensor> {
    match full[0].dtype() {
        DType::F32 => bias_t::<f32>(op, full, per_col),
        DType::BF16 => bias_t::<bf16>(op, full, per_col),
        DType::F16 => bias_t::<f16>(op, full, per_col),
        other => bail!("{op}: no kernel for {other:?}"),
    }
}

fn bias_t<T: CudaDType + DeviceRepr>(
    op: &str,
    full: &[&Tensor],
    per_col: &[&Tensor],
) -> Result<Tensor> {
    let dev = cuda_device(full[0])?;
    let shape = full[0].shape().clone();
    let cols = full[0].dim(candle_core::D::Minus1)?;
    let rows = shape.elem_count() / cols.max(1);
    let full: Vec<Tensor> = full.iter().map(|t| t.contiguous()).collect::<Result<_>>()?;
    let per_col: Vec<Tensor> = per_col
        .iter()
        .map(|t| t.contiguous())
        .collect::<Result<_>>()?;
    if full.iter().any(|t| t.shape() != &shape) || per_col.iter().any(|b| b.dims() != [cols]) {
        bail!(
            "{op}: operands {:?} with biases {:?}",
            full.iter().map(|t| t.dims()).collect::<Vec<_>>(),
            per_col.iter().map(|t| t.dims()).collect::<Vec<_>>()
        );
    }
    let args: Vec<&Tensor> = if op == "bias_residual" {
        vec![&full[0], &per_col[0], &full[1]]
    } else {
        full.iter().chain(&per_col).collect()
    };
    let guards: Vec<_> = args.iter().map(|t| t.storage_and_layout()).collect();
    let mut views = Vec::with_capacity(guards.len());
    for (storage, layout) in &guards {
        let Storage::Cuda(cs) = &**storage else {
            bail!("{op}: expected CUDA tensors");
        };
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg(format!("{op}: non-contiguous operand")))?;
        views.push(cs.as_cuda_slice::<T>()?.slice(start..end));
    }
    let func = kernel(&dev, &launch::kernel_name(op, full[0].dtype())?)?;
    let out = unsafe { dev.alloc::<T>(shape.elem_count())? };
    if rows == 0 || cols == 0 {
        return Ok(tensor_of(out, &dev, shape));
    }
    let (cfg, r, c) = rows_cols_launch(rows, cols)?;
    let mut b = func.builder();
    for v in &views {
        b.arg(v);
    }
    b.arg(&out).arg(&r).arg(&c);
    // SAFETY: every full operand and `out` hold rows·cols elements, every bias cols (checked above); the kernel
    // loops over rows < `rows` and columns < `cols`.
    unsafe { b.launch(cfg) }.w()?;
    drop(views);
    Ok(tensor_of(out, &dev, shape))
}

/// See [`crate::ops::Ops::qkv_rope`].
pub fn qkv_rope(a: QkvRope<'_>) -> Result<(Tensor, Tensor, Tensor)> {
    match (a.y.dtype(), a.cos.dtype()) {
        (DType::F32, DType::F32) => qkv_rope_t::<f32, f32>(a),
        (DType::BF16, DType::BF16) => qkv_rope_t::<bf16, bf16>(a),
        (DType::F16, DType::F16) => qkv_rope_t::<f16, f16>(a),
        (DType::BF16, DType::F32) => qkv_rope_t::<bf16, f32>(a),
        (DType::F16, DType::F32) => qkv_rope_t::<f16, f32>(a),
        (y, c) => bail!("qkv_rope: no kernel for {y:?} activations with {c:?} tables"),
    }
}

fn qkv_rope_t<T: CudaDType + DeviceRepr, C: CudaDType + DeviceRepr>(
    a: QkvRope<'_>,
) -> Result<(Tensor, Tensor, Tensor)> {
    let dev = cuda_device(a.y)?;
    let (n, d) = a.dims()?;
    let (heads, kv_heads) = (a.heads, a.kv_heads);
    let (y, b, cos, sin) = (a.y, a.bias, a.cos, a.sin);
    let (y, b, cos, sin) = (
        y.contiguous()?,
        b.contiguous()?,
        cos.contiguous()?,
        sin.contiguous()?,
    );
    let family = if cos.dtype() == y.dtype() {
        "qkv_rope"
    } else {
        "qkv_rope_f32rot"
    };
    let func = kernel(&dev, &launch::kernel_name(family, y.dtype())?)?;
    let q = unsafe { dev.alloc::<T>(n * heads * d)? };
    let k = unsafe { dev.alloc::<T>(n * kv_heads * d)? };
    let v = unsafe { dev.alloc::<T>(n * kv_heads * d)? };
    if n > 0 {
        with_view::<T, _>(&y, |ys| {
            with_view::<T, _>(&b, |bs| {
                with_view::<C, _>(&cos, |cs| {
                    with_view::<C, _>(&sin, |ss| {
                        let cfg = config(launch::qkv_rope(n));
                        let (h, kvh, dd) = (heads as i32, kv_heads as i32, d as i32);
                        let mut bld = func.builder();
                        bld.arg(&ys).arg(&bs).arg(&cs).arg(&ss);
                        bld.arg(&q).arg(&k).arg(&v).arg(&h).arg(&kvh).arg(&dd);
                        // SAFETY: y is (n, width), b (width), cos/sin (n, d/2), checked above; q, k, v were
                        // allocated with n·heads·d and n·kv_heads·d elements.
                        unsafe { bld.launch(cfg) }.w()?;
                        Ok(())
                    })
                })
            })
        })?;
    }
    Ok((
        tensor_of(q, &dev, Shape::from((n, heads, d))),
        tensor_of(k, &dev, Shape::from((n, kv_heads, d))),
        tensor_of(v, &dev, Shape::from((n, kv_heads, d))),
    ))
}
