//! Opening the compute device (`--device`), with its CUDA memory-pool setting, and the dtype rule (`--dtype`, else
//! the device's default).

use candle_core::{DType, Device};

use super::ModelError;
use crate::settings::{DTypeSpec, DeviceSpec};

/// Open the device `spec` names (`auto` must be resolved first: the backend layer chooses, and logs, the device
/// it stands for). A CUDA device's memory pool is set to keep freed memory instead of handing it back at every
/// synchronisation.
pub fn open_device(spec: DeviceSpec) -> Result<Device, ModelError> {
    let dev = match spec {
        DeviceSpec::Cpu => return Ok(Device::Cpu),
        DeviceSpec::Cuda(n) => Device::new_cuda(n),
        DeviceSpec::Metal => Device::new_metal(0),
        DeviceSpec::Auto => {
            return Err(ModelError::Input(
                "device `auto` names no device until it is resolved".into(),
            ))
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

/// The dtype `spec` names, or the device's default: f32 on the CPU, bf16 on a GPU.
pub fn dtype_for(spec: Option<DTypeSpec>, device: &Device) -> DType {
    match spec {
        None if device.is_cpu() => DType::F32,
        None | Some(DTypeSpec::Bf16) => DType::BF16,
        Some(DTypeSpec::F32) => DType::F32,
        Some(DTypeSpec::F16) => DType::F16,
    }
}
