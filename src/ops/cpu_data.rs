//! The f32 values of CPU tensors as slices, without a copy where the tensor is contiguous: what the fused CPU
//! paths (GEMM segments, attention, elementwise loops) read their operands through.

use candle_core::{Result, Storage, Tensor};

/// The `n` f32 values of a contiguous CPU tensor's storage, from its layout's start.
pub(super) fn cpu_slice<'a>(
    storage: &'a Storage,
    layout: &candle_core::Layout,
    n: usize,
) -> Result<&'a [f32]> {
    let Storage::Cpu(cs) = storage else {
        candle_core::bail!("fused CPU op: expected a CPU tensor");
    };
    let start = layout.start_offset();
    Ok(&cs.as_slice::<f32>()?[start..start + n])
}

/// Run `f` on the f32 data of a CPU tensor (made contiguous).
pub(super) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    f(cpu_slice(&storage, layout, t.elem_count())?)
}
