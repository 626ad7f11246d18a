//! Launching the project's CUDA kernels (`kernels/fused.cu`, compiled by `kernels/build.rs` into a fatbin with
//! machine code for the build's GPU and PTX for newer ones, and loaded once per CUDA context): the helpers every
//! launcher uses (the launchers sit with their ops: `attention/cuda.rs`, `elementwise/cuda.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DeviceRepr, LaunchArgs, LaunchConfig,
};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDType, CudaStorage, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{bail, CudaDevice, Result, Shape, Storage, Tensor};

use super::launch;

const FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fused.fatbin"));

/// One of the project's kernels, launched on the stream of the device it was loaded for.
pub(in crate::ops) struct Kernel {
    func: CudaFunction,
    stream: Arc<CudaStream>,
}

impl Kernel {
    pub(in crate::ops) fn builder(&self) -> LaunchArgs<'_> {
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
pub(in crate::ops) fn kernel(dev: &CudaDevice, name: &str) -> Result<Kernel> {
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
pub(in crate::ops) fn cuda_device(t: &Tensor) -> Result<CudaDevice> {
    match t.device() {
        candle_core::Device::Cuda(d) => Ok(d.clone()),
        other => bail!("expected a CUDA tensor, found one on {other:?}"),
    }
}

/// Run `f` on the contiguous data of `t` as a typed view.
pub(in crate::ops) fn with_view<T: CudaDType + DeviceRepr, R>(
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
pub(in crate::ops) fn config(g: launch::Geometry) -> LaunchConfig {
    LaunchConfig {
        grid_dim: g.grid,
        block_dim: g.block,
        shared_mem_bytes: 0,
    }
}

/// Wrap a freshly written device buffer as a tensor of `shape`.
pub(in crate::ops) fn tensor_of<T: CudaDType>(
    out: CudaSlice<T>,
    dev: &CudaDevice,
    shape: Shape,
) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}
