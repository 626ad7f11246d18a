//! What the model's work counts, for throughput and MFU figures and the CPU time estimate: its parameters (two
//! FLOPs per parameter and token through the linear layers, [`param_counts`]) and the FLOPs of the attention itself
//! (scores and weighted sums; the projections are the linear layers') that prefills and decode steps run: each
//! query row and layer costs `4 · keys it sees · heads · head_dim`.

use super::config::ModelConfig;
use super::window::window_index;
use crate::settings::ModelFamily;

/// One prompt of a prefill: its images' patch grids `(t, h, w)`, its new tokens and its cached prefix's tokens.
#[derive(Debug, Clone, Copy)]
pub struct PromptShape<'a> {
    /// The images' patch grids.
    pub grids: &'a [[usize; 3]],
    /// Tokens prefilled.
    pub new_tokens: usize,
    /// Tokens served from the prefix cache (seen by the new tokens, not computed again).
    pub cached_tokens: usize,
}

/// The attention FLOPs of prefilling `prompts`: the vision tower's window layers over each window and its
/// full-attention layers over each image, then the language model's causal attention of each prompt's new tokens
/// over its prefix and themselves.
pub fn prefill_attention_flops(cfg: &ModelConfig, prompts: &[PromptShape<'_>]) -> f64 {
    let v = &cfg.vision;
    let squares =
        |cu: &[usize]| -> f64 { cu.windows(2).map(|p| ((p[1] - p[0]) as f64).powi(2)).sum() };
    let full_layers = v.fullatt_block_indexes.len().min(v.depth) as f64;
    let window_layers = v.depth as f64 - full_layers;
    let vision: f64 = prompts
        .iter()
        .map(|p| match cfg.family {
            ModelFamily::Qwen25Vl => {
                let wi = window_index(p.grids, v.spatial_merge_size, v.merger_window());
                full_layers * squares(&wi.cu_seqlens)
                    + window_layers * squares(&wi.cu_window_seqlens)
            }
            // Every block attends over each whole frame.
            ModelFamily::Qwen3Vl => {
                let frames: f64 = p
                    .grids
                    .iter()
                    .map(|&[t, h, w]| t as f64 * ((h * w) as f64).powi(2))
                    .sum();
                v.depth as f64 * frames
            }
        })
        .sum();
    let text: f64 = prompts
        .iter()
        .map(|p| {
            let (n, c) = (p.new_tokens as f64, p.cached_tokens as f64);
            n * c + n * (n + 1.0) / 2.0
        })
        .sum();
    4.0 * vision * v.hidden_size as f64 + text * text_flops_per_key(cfg)
}

/// The attention FLOPs of one decode step whose sequences' new tokens see `keys` keys each (the cached tokens and
/// themselves).
pub fn decode_attention_flops(cfg: &ModelConfig, keys: impl IntoIterator<Item = usize>) -> f64 {
    keys.into_iter().sum::<usize>() as f64 * text_flops_per_key(cfg)
}

/// The language model's attention FLOPs per (query row, key) pair over all its layers.
fn text_flops_per_key(cfg: &ModelConfig) -> f64 {
    let t = &cfg.text;
    4.0 * (t.num_attention_heads * t.head_dim * t.num_hidden_layers) as f64
}

/// Parameter counts `(vision, language model)` of a config, for FLOP estimates.
pub(crate) fn param_counts(cfg: &ModelConfig) -> (u64, u64) {
    let v = &cfg.vision;
    let (vh, vi) = (v.hidden_size as u64, v.intermediate_size as u64);
    // Qwen2.5-VL's MLP is SwiGLU (three matrices), Qwen3-VL's plain (two); Qwen3-VL has a merger per DeepStack
    // tap besides the final one.
    let mlp_mats = match cfg.family {
        ModelFamily::Qwen25Vl => 3,
        ModelFamily::Qwen3Vl => 2,
    };
    let block = 4 * vh * vh + mlp_mats * vh * vi;
    let merge = vh * 4;
    let mergers = 1 + v.deepstack_visual_indexes.len() as u64;
    let vision = v.depth as u64 * block
        + mergers * (merge * merge + merge * cfg.text.hidden_size as u64)
        + vh * v.patch_dim() as u64;
    let t = &cfg.text;
    let (h, hd) = (t.hidden_size as u64, t.head_dim as u64);
    let attn = h * hd * (t.num_attention_heads as u64 * 2 + t.num_key_value_heads as u64 * 2);
    let mlp = 3 * h * t.intermediate_size as u64;
    let lm = t.num_hidden_layers as u64 * (attn + mlp) + t.vocab_size as u64 * h;
    (vision, lm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_windows_full_layers_and_causal_prompts_by_hand() {
        let json = include_str!("../../tests/fixtures/models/tiny-a/config.json");
        let mut cfg = ModelConfig::from_json(json, None).unwrap();
        let (v, t) = (cfg.vision.clone(), cfg.text.clone());
        // A text-only prompt of 3 new tokens after 2 cached: rows see 3, 4 and 5 keys.
        let text = [PromptShape {
            grids: &[],
            new_tokens: 3,
            cached_tokens: 2,
        }];
        let per_row = 4.0 * (t.num_attention_heads * t.head_dim * t.num_hidden_layers) as f64;
        assert_eq!(prefill_attention_flops(&cfg, &text), 12.0 * per_row);
        // Two sequences' decode step after 5 and 7 tokens: their new tokens see 6 and 8 keys.
        assert_eq!(decode_attention_flops(&cfg, [6, 8]), 14.0 * per_row);
        // One image whose grid is a single window: every layer sees all of its patches.
        let side = v.spatial_merge_size;
        let grid = [[1, side, side]];
        let image = [PromptShape {
            grids: &grid,
            new_tokens: 0,
            cached_tokens: 0,
        }];
        let n = (side * side) as f64;
        let want = 4.0 * n * n * (v.depth * v.hidden_size) as f64;
        assert_eq!(prefill_attention_flops(&cfg, &image), want);
        // With no full-attention layers, still every layer once.
        cfg.vision.fullatt_block_indexes.clear();
        assert_eq!(prefill_attention_flops(&cfg, &image), want);
    }
}
