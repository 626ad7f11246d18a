//! Opening the compute device (`--device`), with its CUDA memory-pool setting, and choosing the dtype (`--dtype`).

use candle_core::{DType, Device};

use super::ModelError;

/// Open the device `spec` names: `cpu`, `cuda`, `cuda:N` or `metal`. A CUDA device's memory pool is set to keep
/// freed memory instead of handing it back at every synchronisation.
pub fn open_device(spec: &str) -> Result<Device, ModelError> {
    let dev = match spec {
        "cpu" => return Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0),
        "metal" => Device::new_metal(0),
        s if s.starts_with("cuda:") => {
            let n: usize = s[5..]
                .parse()
                .map_err(|_| ModelError::Input(format!("bad device `{s}`")))?;
            Device::new_cuda(n)
        }
        s => {
            return Err(ModelError::Input(format!(
                "unknown device `{s}` (cpu, cuda, cuda:N, metal)"
            )))
        }
    };
    let dev = dev.map_err(|e| {
        ModelError::Input(format!(
            "device `{spec}` is not available in this build or machine: {e}"
        ))
    })?;
    #[cfg(feature = "cuda")]
    if let candle_core::DeviceLocation::Cuda { gpu_id } = dev.location() {
        keep_pool_memory(gpu_id);
    }
    Ok(dev)
}

/// Let the device's stream-ordered memory pool (every candle allocation) keep freed memory instead of returning
/// it to the driver at each synchronisation, so the next batch's large activations reuse it (PyTorch's caching
/// allocator behaves so). Best effort: a failure only costs speed.
#[cfg(feature = "cuda")]
fn keep_pool_memory(ordinal: usize) {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    // SAFETY: the device exists (candle created its context); the attribute takes a u64.
    let r = unsafe {
        result::device::get(ordinal as i32).and_then(|dev| {
            let pool = result::device::get_default_mem_pool(dev)?;
            let mut threshold = u64::MAX;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut std::ffi::c_void,
            )
        })
    };
    if let Err(e) = r {
        tracing::warn!("could not raise the CUDA memory pool's release threshold: {e}");
    }
}

/// Parse `f32`, `bf16` or `f16`; default bf16 on GPU and f32 on CPU.
pub fn parse_dtype(spec: Option<&str>, device: &Device) -> Result<DType, ModelError> {
    match spec {
        None if device.is_cpu() => Ok(DType::F32),
        None => Ok(DType::BF16),
        Some("f32") => Ok(DType::F32),
        Some("bf16") => Ok(DType::BF16),
        Some("f16") => Ok(DType::F16),
        Some(s) => Err(ModelError::Input(format!(
            "unknown dtype `{s}` (f32, bf16, f16)"
        ))),
    }
}
