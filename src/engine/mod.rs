//! The inference engine: token-level requests in, greedy generations out through a sink. Prompts join the
//! running batch as soon as the token budget and the sequence cap allow (continuous batching), a text-only
//! prefix shared by many prompts is computed once, and every result is handed over the moment it is complete.
//!
//! The engine knows nothing of benchmarks, prompts or scores: [`crate::backend`] turns chat requests into
//! [`Request`]s, and [`crate::eval`] drives the phases of an evaluation.

mod batcher;
pub mod memory;
mod prefetch;
mod scheduler;

pub use batcher::{argmax_rows, is_oom, top_k_logprobs, Engine, MAX_PREFILL_TOKENS};
pub use prefetch::prefetch;
pub use scheduler::{admit_count, prefill_chunks, BatchLimits, Occupancy, MIN_AUTO_BATCH_TOKENS};

use crate::preprocess::ModelInput;
pub use crate::records::FinishReason;

/// One prompt to generate for (greedy: no sampling, no repetition penalty).
#[derive(Debug, Clone)]
pub struct Request {
    /// Caller's id, returned with the result.
    pub id: usize,
    /// Token ids (image pads expanded) and images.
    pub input: ModelInput,
    /// Length of the text-only prefix (e.g. the system turn) whose KV may be shared between prompts; 0 for none.
    pub prefix_len: usize,
    /// Most generated tokens (at most the engine's `max_new_tokens`).
    pub max_new_tokens: usize,
    /// Tokens that end generation (the checkpoint's end-of-sequence ids); empty to generate exactly
    /// `max_new_tokens`.
    pub stop_tokens: Vec<u32>,
    /// Record this many most likely (token, log-probability) pairs per generated position (0 = none).
    pub top_logprobs: usize,
}

/// One finished prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The request's id.
    pub id: usize,
    /// Generated token ids, the stop token excluded.
    pub token_ids: Vec<u32>,
    /// The stop token that ended generation, if one did.
    pub stop_token: Option<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Why it stopped.
    pub finish: FinishReason,
    /// Per generated position (the stop token's included), the most likely (id, log-softmax in f32), best first.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
}
