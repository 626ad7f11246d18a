//! The OpenAI backend's accounting of a phase: each worker's report of one request, and the phase's counters
//! (prompts, attempts, retries, busy answers, failures, latencies) as the reports arrive.

use super::ChatResult;
use crate::records::{LatencySummary, PhaseStats, RequestStats};

/// A worker's report of one request.
pub(super) struct Reply {
    /// The request's index in the phase.
    pub index: usize,
    /// Its answer, or why there is none.
    pub outcome: Result<ChatResult, String>,
    /// HTTP calls made.
    pub attempts: usize,
    /// Of them, busy answers (429) waited out.
    pub busy: usize,
    /// Seconds from its first call to its end.
    pub seconds: f64,
    /// Its pictures.
    pub images: usize,
}

/// The phase's counters as replies arrive.
#[derive(Default)]
pub(super) struct Tally {
    /// The phase's counters so far (the sink sees them).
    pub stats: PhaseStats,
    requests: RequestStats,
    latencies: Vec<f64>,
}

impl Tally {
    /// Count one reply.
    pub fn add(&mut self, r: &Reply) {
        self.requests.requests += usize::from(r.attempts > 0);
        self.requests.attempts += r.attempts;
        self.requests.retries += r.attempts.saturating_sub(1);
        self.requests.busy += r.busy;
        match &r.outcome {
            Ok(c) => {
                self.stats.prompts += 1;
                self.stats.images += r.images;
                self.stats.prefill_tokens += c.prompt_tokens;
                self.stats.decode_tokens += c.generated_tokens;
                self.latencies.push(r.seconds);
            }
            Err(_) => {
                self.stats.errors += 1;
                self.requests.failed += usize::from(r.attempts > 0);
            }
        }
    }

    /// The phase's counters, with the request figures of `concurrency` workers over `seconds`, at times as few as
    /// `lowest` in flight.
    pub fn finish(mut self, concurrency: usize, lowest: usize, seconds: f64) -> PhaseStats {
        self.requests.concurrency = concurrency;
        self.requests.lowest_concurrency = Some(lowest);
        self.requests.requests_per_second = if seconds > 0.0 {
            self.latencies.len() as f64 / seconds
        } else {
            0.0
        };
        self.requests.latency_seconds = LatencySummary::of(&self.latencies);
        self.stats.requests = Some(self.requests);
        self.stats
    }
}
