//! Launching the project's CUDA kernels (`kernels/fused.cu`, compiled by `kernels/build.rs` into a fatbin with
//! machine code for the build's GPU and PTX for newer ones, and loaded once per CUDA context): the helpers every
//! launcher uses, and the launchers of the elementwise ops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DeviceRepr, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDType, CudaStorage, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{bail, CudaDevice, DType, Result, Shape, Storage, Tensor};
use half::{bf16, f16};

use super::launch;
use crate::ops::elementwise::swiglu_out_shape;
use crate::ops::QkvRope;

const FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fused.fatbin"));

/// One of the project's kernels, launched on the stream of the device it was loaded for.
pub(super) struct Kernel {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Kernel {
    pub(super) fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.func)
    }
}

/// The module loaded into one CUDA context, and the functions looked up in it so far.
struct Loaded {
    module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
}

/// Kernel `name` of `kernels/fused.cu` on `dev`. The module is loaded once per CUDA context (the driver picks the
/// fatbin's machine code when it matches the GPU, with no JIT, else compiles its PTX), and each function is looked
/// up once: later launches only clone its handle.
pub(super) fn kernel(dev: &CudaDevice, name: &str) -> Result<Kernel> {
    static LOADED: OnceLock<Mutex<HashMap<usize, Loaded>>> = OnceLock::new();
    let stream = dev.cuda_stream();
    let ctx = stream.context();
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| candle_core::Error::Msg("the kernel module cache is poisoned".into()))?;
    let entry = match loaded.entry(ctx.cu_ctx() as usize) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Loaded {
            module: ctx.load_module(Ptx::from_binary(FATBIN.to_vec())).w()?,
            functions: HashMap::new(),
        }),
    };
    let func = match entry.functions.get(name) {
        Some(f) => f.clone(),
        None => {
            let f = entry.module.load_function(name).w()?;
            entry.functions.insert(name.to_string(), f.clone());
            f
        }
    };
    Ok(Kernel { func, stream })
}

/// The CUDA device of `t`.
pub(super) fn cuda_device(t: &Tensor) -> Result<CudaDevice> {
    match t.device() {
        candle_core::Device::Cuda(d) => Ok(d.clone()),
        other => bail!("expected a CUDA tensor, found one on {other:?}"),
    }
}

/// Run `f` on the contiguous data of `t` as a typed view.
pub(super) fn with_view<T: CudaDType + DeviceRepr, R>(
    t: &Tensor,
    f: impl FnOnce(CudaView<'_, T>) -> Result<R>,
) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        bail!("expected a CUDA tensor");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        bail!(
            "fused kernels need contiguous inputs (shape {:?})",
            layout.shape()
        );
    };
    f(cs.as_cuda_slice::<T>()?.slice(start..end))
}

/// The launch configuration of a [`launch::Geometry`] (no dynamic shared memory).
pub(super) fn config(g: launch::Geometry) -> LaunchConfig {
    LaunchConfig {
        grid_dim: g.grid,
        block_dim: g.block,
        shared_mem_bytes: 0,
    }
}

/// Wrap a freshly written device buffer as a tensor of `shape`.
pub(super) fn tensor_of<T: CudaDType>(out: CudaSlice<T>, dev: &CudaDevice, shape: Shape) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}

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
