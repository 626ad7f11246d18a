//! The Qwen3-VL specific parts: the vision tower (learned interpolated positions, LayerNorm blocks, DeepStack
//! mergers). Its decoder (q/k norm, no q/k/v bias, interleaved M-RoPE) is the shared one configured by
//! `TextConfig`, and the DeepStack features are added by the shared prefill.

mod fused;
pub mod pos_embed;
pub mod vision;

#[cfg(test)]
mod tests;
