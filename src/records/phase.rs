//! Counters of one phase of prompts (the step prompts, the judge prompts, a bench run), filled by the engine
//! and the backend, and their summary with derived rates as written into `throughput.json` and bench reports.

use serde::{Deserialize, Serialize};

/// Counters of one phase.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    /// Phase name (`steps`, `judge`, `bench`).
    pub phase: String,
    /// Prompts finished in this run (resumed ones excluded).
    pub prompts: usize,
    /// Prompts that failed before the model (unreadable screenshot, …).
    pub errors: usize,
    /// Images through the vision tower.
    pub images: usize,
    /// Vision patches through the vision tower.
    pub patches: usize,
    /// Seconds the workers spent preparing prompts (decode, resize, patchify, tokenise), summed over threads.
    pub prepare_seconds: f64,
    /// Prompt tokens prefilled (prefix-cache hits excluded).
    pub prefill_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub prefix_cached_tokens: usize,
    /// Tokens generated.
    pub decode_tokens: usize,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Sum over decode steps of the running sequences (for the mean batch occupancy).
    pub decode_seq_sum: usize,
    /// Seconds spent in prefill calls (vision tower included).
    pub prefill_seconds: f64,
    /// Seconds spent in decode calls.
    pub decode_seconds: f64,
    /// Seconds spent waiting for prepared prompts (preprocessing not keeping up).
    pub wait_seconds: f64,
    /// Wall time of the phase.
    pub wall_seconds: f64,
    /// Batches that hit an out-of-memory error and were retried smaller.
    pub oom_retries: usize,
}

/// [`PhaseStats`] with the derived rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// The counters.
    #[serde(flatten)]
    pub stats: PhaseStats,
    /// Prompts per wall-clock second.
    pub prompts_per_second: f64,
    /// Images per wall-clock second.
    pub images_per_second: f64,
    /// Prefilled tokens per second of prefill.
    pub prefill_tokens_per_second: f64,
    /// Generated tokens per second of decode.
    pub decode_tokens_per_second: f64,
    /// Mean number of sequences per decode step.
    pub mean_batch_occupancy: f64,
}

fn rate(n: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

impl PhaseStats {
    /// The summary with derived rates.
    pub fn summary(&self) -> PhaseSummary {
        PhaseSummary {
            prompts_per_second: rate(self.prompts, self.wall_seconds),
            images_per_second: rate(self.images, self.wall_seconds),
            prefill_tokens_per_second: rate(self.prefill_tokens, self.prefill_seconds),
            decode_tokens_per_second: rate(self.decode_tokens, self.decode_seconds),
            mean_batch_occupancy: if self.decode_steps > 0 {
                self.decode_seq_sum as f64 / self.decode_steps as f64
            } else {
                0.0
            },
            stats: self.clone(),
        }
    }
}
