//! The project's CUDA kernels (`kernels/fused.cu`): how each is launched (grid and block sizes, the varlen
//! kernels' metadata: [`launch`], which needs no CUDA and is shared with the kernels' CPU emulation in
//! `tests/it/kernels_emulated.rs`) and, with the `cuda` feature, the launchers the ops call.

pub mod launch;

#[cfg(feature = "cuda")]
mod attention;
#[cfg(feature = "cuda")]
mod kernels;

#[cfg(feature = "cuda")]
pub(super) use attention::{decode_attention, varlen_attention, DecodeCall, DecodeTables};
#[cfg(feature = "cuda")]
pub(super) use kernels::{bias_op, qkv_rope, rms_norm_hf, swiglu_packed};
