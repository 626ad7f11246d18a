//! The f32 values of CPU tensors as slices, without a copy where the tensor is contiguous: what the fused CPU
//! paths (GEMM segments, attention, elementwise loops) read their operands through; and fresh output storage
//! that the parallel passes write without a zero-fill of the whole output first.

use std::mem::MaybeUninit;

use candle_core::{Result, Shape, Storage, Tensor};
use rayon::prelude::*;

/// The `n` values of a contiguous CPU tensor's storage (f32 unless named), from its layout's start.
pub(super) fn cpu_slice<'a, T: candle_core::WithDType>(
    storage: &'a Storage,
    layout: &candle_core::Layout,
    n: usize,
) -> Result<&'a [T]> {
    let Storage::Cpu(cs) = storage else {
        candle_core::bail!("fused CPU op: expected a CPU tensor");
    };
    let start = layout.start_offset();
    Ok(&cs.as_slice::<T>()?[start..start + n])
}

/// A vector of `len` values whose fresh storage `fill` writes. Zero-filling an output before a kernel overwrites
/// it is a pass over memory on one thread (tens of MB per GEMM of a screenshot) while the other cores wait;
/// here the kernels write into the storage directly, or zero each chunk just before writing it ([`zeroed`]).
///
/// # Safety
/// `fill` writes every one of the `len` values (a panic inside it leaves an empty vector behind).
pub(crate) unsafe fn written<T>(len: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the caller's fill wrote all len values.
    unsafe { v.set_len(len) };
    v
}

/// `len` zeros, the large ones written by rayon's threads a chunk each: `vec![0f32; len]` is one `memset` on the
/// calling thread (tens of MB for an output of a screenshot's rows) while the other cores wait for the op that
/// follows it.
pub(crate) fn zeros(len: usize) -> Vec<f32> {
    /// Values below which one thread zeroes the vector (256 KiB).
    const SERIAL: usize = 1 << 16;
    if len < SERIAL {
        return vec![0f32; len];
    }
    // SAFETY: the chunks cover all len values, each zeroed.
    unsafe {
        written(len, |c| {
            c.par_chunks_mut(SERIAL).for_each(|c| {
                zeroed(c);
            })
        })
    }
}

/// Types whose value of all-zero bytes is their zero.
///
/// # Safety
/// All-zero bytes are a valid value of the type.
pub(crate) unsafe trait ZeroBytes: Copy {}

// SAFETY: zero bytes are +0.
unsafe impl ZeroBytes for half::bf16 {}

// SAFETY: zero bytes are +0.0.
unsafe impl ZeroBytes for f32 {}

/// The chunk `c` of fresh storage set to zero throughout (one `memset`), as initialised values: what a parallel
/// pass does to each chunk it then writes, while the chunk is in its core's cache.
pub(crate) fn zeroed<T: ZeroBytes>(c: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: c's values are writable; zero bytes are a T (ZeroBytes).
    unsafe {
        std::ptr::write_bytes(c.as_mut_ptr(), 0, c.len());
        &mut *(c as *mut [MaybeUninit<T>] as *mut [T])
    }
}

/// Initialised values seen as storage to overwrite, for the kernels that write fresh storage.
///
/// # Safety
/// Whoever writes through the result writes initialised values only.
pub(crate) unsafe fn as_storage<T>(c: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: same layout; the caller writes initialised values only.
    unsafe { &mut *(c as *mut [T] as *mut [MaybeUninit<T>]) }
}

/// Run `f` on the f32 data of a CPU tensor (made contiguous).
pub(super) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    f(cpu_slice(&storage, layout, t.elem_count())?)
}

/// A new f32 CPU tensor of `shape` made row by row from the f32 CPU tensor `t` (made contiguous): `f(input, output)`
/// for each run of `in_width` input values and its run of `out_width` output values (the last runs may be shorter
/// where the widths are equal), the runs split over rayon's threads at least `min_rows` at a time.
pub(crate) fn map_rows(
    t: &Tensor,
    (in_width, out_width): (usize, usize),
    min_rows: usize,
    shape: impl Into<Shape>,
    f: impl Fn(&[f32], &mut [f32]) + Sync + Send,
) -> Result<Tensor> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let data = cpu_slice(&storage, layout, t.elem_count())?;
    let len = data
        .len()
        .checked_div(in_width)
        .map_or(0, |rows| rows * out_width + data.len() % in_width);
    let mut out = zeros(len);
    if in_width > 0 && out_width > 0 {
        out.par_chunks_mut(out_width)
            .zip(data.par_chunks(in_width))
            .with_min_len(min_rows)
            .for_each(|(o, row)| f(row, o));
    }
    Tensor::from_vec(out, shape, t.device())
}

#[cfg(test)]
mod tests {
    /// Small vectors and large ones (zeroed by rayon's threads a chunk each) are zeros throughout.
    #[test]
    fn zeros_are_zeros() {
        for len in [0, 1, (1 << 16) - 1, (1 << 16) + 1, 3 << 17] {
            let v = super::zeros(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|x| x.to_bits() == 0), "{len}");
        }
    }
}
