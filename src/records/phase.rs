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
    /// FLOPs of the prefills' attention itself (scores and weighted sums, vision and text), which 2 × parameters
    /// per patch and token leaves out.
    #[serde(default)]
    pub prefill_attention_flops: f64,
    /// FLOPs of the decode steps' attention itself (each new token over its sequence's keys).
    #[serde(default)]
    pub decode_attention_flops: f64,
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
    /// Peak device memory in use (bytes), sampled after each prefill and decode step, on CUDA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_device_bytes: Option<u64>,
    /// Each device's share, when several devices ran the phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceShare>,
    /// The HTTP requests, when a server answered the phase (`eval --backend openai`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestStats>,
}

/// The requests of a phase answered by an OpenAI-compatible server.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestStats {
    /// Most requests in flight at once (`--concurrency`).
    pub concurrency: usize,
    /// The fewest requests allowed in flight at once, after the server's busy answers (429) lowered the allowance
    /// (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lowest_concurrency: Option<usize>,
    /// Prompts sent (each once, however often it was retried).
    pub requests: usize,
    /// HTTP calls, retries included.
    pub attempts: usize,
    /// Calls repeated after a connection error, a timeout, a 429 or a 5xx.
    pub retries: usize,
    /// Of the calls, busy answers (429) waited out (absent in older files).
    #[serde(default)]
    pub busy: usize,
    /// Prompts given up on (recorded as errors and redone on resume) or refused by the server.
    pub failed: usize,
    /// Answered prompts per second of the phase.
    pub requests_per_second: f64,
    /// Seconds from a prompt's first call to its answer (retries and waits included), over answered prompts.
    pub latency_seconds: LatencySummary,
}

/// A distribution of durations, in seconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl LatencySummary {
    /// The summary of `samples` (nearest-rank percentiles; all zero without samples).
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |p: f64| s[((p * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Self {
            mean: s.iter().sum::<f64>() / s.len() as f64,
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: s[s.len() - 1],
        }
    }
}

/// One device's share of a phase run on several devices.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceShare {
    /// The device (`cuda:1#1`: device, then its worker number).
    pub device: String,
    /// Prompts it finished.
    pub prompts: usize,
    /// Prompt tokens it prefilled.
    pub prefill_tokens: usize,
    /// Tokens it generated.
    pub decode_tokens: usize,
    /// Seconds in its prefill and decode calls.
    pub busy_seconds: f64,
}

impl DeviceShare {
    /// The share of a device whose counters are `s`.
    pub fn of(device: String, s: &PhaseStats) -> Self {
        Self {
            device,
            prompts: s.prompts,
            prefill_tokens: s.prefill_tokens,
            decode_tokens: s.decode_tokens,
            busy_seconds: s.prefill_seconds + s.decode_seconds,
        }
    }
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
    /// Add another worker's counters (devices and wall time are not added: the workers run at the same time).
    pub fn add(&mut self, o: &PhaseStats) {
        self.prompts += o.prompts;
        self.errors += o.errors;
        self.images += o.images;
        self.patches += o.patches;
        self.prepare_seconds += o.prepare_seconds;
        self.prefill_tokens += o.prefill_tokens;
        self.prefix_cached_tokens += o.prefix_cached_tokens;
        self.prefill_attention_flops += o.prefill_attention_flops;
        self.decode_attention_flops += o.decode_attention_flops;
        self.decode_tokens += o.decode_tokens;
        self.decode_steps += o.decode_steps;
        self.decode_seq_sum += o.decode_seq_sum;
        self.prefill_seconds += o.prefill_seconds;
        self.decode_seconds += o.decode_seconds;
        self.wait_seconds += o.wait_seconds;
        self.oom_retries += o.oom_retries;
        self.note_device_in_use(o.peak_device_bytes);
    }

    /// Keep the highest device memory in use seen (a reading of `None` changes nothing).
    pub(crate) fn note_device_in_use(&mut self, bytes: Option<u64>) {
        self.peak_device_bytes = self.peak_device_bytes.max(bytes);
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_are_nearest_rank() {
        let l = LatencySummary::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(
            (l.mean, l.p50, l.p90, l.p99, l.max),
            (2.5, 2.0, 4.0, 4.0, 4.0)
        );
        assert_eq!(LatencySummary::of(&[]), LatencySummary::default());
    }
}
