//! The Qwen2.5-VL specific parts: the vision tower with window attention and RMSNorm blocks, and its window
//! bookkeeping. The decoder, caches and the prefill/decode driver are shared with the other families
//! (`crate::model`).

pub mod vision;
pub mod window;
