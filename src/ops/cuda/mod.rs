//! The project's CUDA kernels (`kernels/fused.cu`): how each is launched (grid and block sizes, the varlen
//! kernels' metadata: [`launch`], which needs no CUDA and is shared with the kernels' CPU emulation in
//! `tests/it/kernels_emulated.rs`) and, with the `cuda` feature, how the kernel module is loaded and the helpers
//! every launcher uses (`kernels`). The launchers sit with their ops (`attention/cuda.rs`, `elementwise/cuda.rs`)
//! and import these, never the other way round.

pub mod launch;

#[cfg(feature = "cuda")]
pub(super) mod kernels;
