//! What `GET /metrics` shows, in Prometheus' text format: requests by path and status, the queue (accepted and not
//! yet generating), the running sequences and the most that ever ran together (the batcher's occupancy), tokens
//! in and out, and the engine's prefill and decode rates; and, from the queue and the recent answers, how long a
//! client refused for a full queue should wait (`Retry-After`).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use crate::records::PhaseStats;

/// The server's counters, shared by the handlers and the engine thread.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    queued: AtomicUsize,
    running: AtomicUsize,
    peak_running: AtomicUsize,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    engine: Mutex<PhaseStats>,
    /// When the latest answers were finished (at most [`RECENT`]), for the service rate.
    recent: Mutex<VecDeque<Instant>>,
}

/// How many of the latest answers the service rate is measured over.
const RECENT: usize = 32;
/// Answers older than this do not count for the service rate.
const RECENT_WINDOW: Duration = Duration::from_secs(120);
/// The longest `Retry-After`.
const MAX_RETRY_AFTER: u64 = 60;

/// Seconds to wait for a slot: the requests waiting (plus the one asking) served at `per_second` answers a second
/// (none measured: one second each), at least 1, at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after_seconds(waiting: usize, per_second: Option<f64>) -> u64 {
    let ahead = (waiting + 1) as f64;
    let secs = match per_second {
        Some(r) if r > 0.0 => (ahead / r).ceil(),
        _ => ahead,
    };
    (secs as u64).clamp(1, MAX_RETRY_AFTER)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// Count one answered request.
    pub fn request(&self, path: &str, status: u16) {
        *lock(&self.requests)
            .entry((path.to_string(), status))
            .or_default() += 1;
    }

    /// Count a finished generation's tokens and keep the engine's counters.
    pub fn finished(&self, prompt: usize, generated: usize, engine: &PhaseStats) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(generated as u64, Ordering::Relaxed);
        *lock(&self.engine) = engine.clone();
        let mut recent = lock(&self.recent);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(Instant::now());
    }

    /// Answers per second over the recent ones (`None` with fewer than two in the window).
    fn service_rate(&self) -> Option<f64> {
        let now = Instant::now();
        let recent = lock(&self.recent);
        let times: Vec<Instant> = recent
            .iter()
            .copied()
            .filter(|t| now.duration_since(*t) < RECENT_WINDOW)
            .collect();
        let first = *times.first()?;
        let span = now.duration_since(first).as_secs_f64();
        (times.len() >= 2 && span > 0.0).then(|| times.len() as f64 / span)
    }

    /// `Retry-After` for a request refused because all `slots` are taken.
    pub(crate) fn retry_after(&self, slots: usize) -> u64 {
        let queued = self.queued.load(Ordering::Relaxed).min(slots);
        retry_after_seconds(queued, self.service_rate())
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, String)>| {
            let _ = writeln!(out, "# HELP mobile_r1_eval_{name} {help}");
            let _ = writeln!(out, "# TYPE mobile_r1_eval_{name} {kind}");
            for (labels, value) in lines {
                let _ = writeln!(out, "mobile_r1_eval_{name}{labels} {value}");
            }
        };
        let requests = lock(&self.requests)
            .iter()
            .map(|((path, status), n)| {
                (
                    format!("{{path=\"{path}\",status=\"{status}\"}}"),
                    n.to_string(),
                )
            })
            .collect();
        metric(
            "requests_total",
            "counter",
            "HTTP requests answered, by path and status.",
            requests,
        );
        let gauge = |v: usize| vec![(String::new(), v.to_string())];
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        metric(
            "queue_depth",
            "gauge",
            "Requests accepted and not yet generating (preparing or waiting for a batch slot).",
            gauge(load(&self.queued)),
        );
        metric(
            "running_sequences",
            "gauge",
            "Sequences in the running batch.",
            gauge(load(&self.running)),
        );
        metric(
            "batch_occupancy_peak",
            "gauge",
            "Most sequences that ran in one batch since the start.",
            gauge(load(&self.peak_running)),
        );
        let count = |a: &AtomicU64| vec![(String::new(), a.load(Ordering::Relaxed).to_string())];
        metric(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens of finished requests.",
            count(&self.prompt_tokens),
        );
        metric(
            "generated_tokens_total",
            "counter",
            "Tokens generated for finished requests.",
            count(&self.generated_tokens),
        );
        let s = lock(&self.engine).summary();
        let value = |v: f64| vec![(String::new(), format!("{v}"))];
        metric(
            "prefill_tokens_per_second",
            "gauge",
            "Prompt tokens per second of prefill, since the start.",
            value(s.prefill_tokens_per_second),
        );
        metric(
            "decode_tokens_per_second",
            "gauge",
            "Generated tokens per second of decode, since the start.",
            value(s.decode_tokens_per_second),
        );
        metric(
            "batch_occupancy_mean",
            "gauge",
            "Mean sequences per decode step, since the start.",
            value(s.mean_batch_occupancy),
        );
        out
    }
}

/// One accepted request's place: it holds a slot of the bounded queue and counts as queued until its first token,
/// then as running, until it is dropped (finished, refused or abandoned).
#[derive(Debug)]
pub(crate) struct Ticket {
    metrics: Arc<Metrics>,
    running: bool,
    since: Instant,
    first_token: Option<Duration>,
    _slot: OwnedSemaphorePermit,
}

impl Ticket {
    /// A request that took `slot`, now queued.
    pub fn new(metrics: Arc<Metrics>, slot: OwnedSemaphorePermit) -> Self {
        metrics.queued.fetch_add(1, Ordering::Relaxed);
        Self {
            metrics,
            running: false,
            since: Instant::now(),
            first_token: None,
            _slot: slot,
        }
    }

    /// Time from the slot to the first token (waiting, preparing, queueing and prefill), once there is one.
    pub fn first_token(&self) -> Option<Duration> {
        self.first_token
    }

    /// Time since the slot was taken.
    pub fn age(&self) -> Duration {
        self.since.elapsed()
    }

    /// Its first token came: it is running.
    pub fn start(&mut self) {
        if self.running {
            return;
        }
        self.running = true;
        self.first_token = Some(self.since.elapsed());
        let m = &self.metrics;
        m.queued.fetch_sub(1, Ordering::Relaxed);
        let now = m.running.fetch_add(1, Ordering::Relaxed) + 1;
        m.peak_running.fetch_max(now, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let gauge = if self.running {
            &self.metrics.running
        } else {
            &self.metrics.queued
        };
        gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_move_from_the_queue_to_the_batch_and_the_text_is_prometheus() {
        let m = Arc::new(Metrics::default());
        let slots = Arc::new(tokio::sync::Semaphore::new(4));
        let mut a = Ticket::new(m.clone(), slots.clone().try_acquire_owned().unwrap());
        let mut b = Ticket::new(m.clone(), slots.clone().try_acquire_owned().unwrap());
        a.start();
        b.start();
        drop(a);
        let c = Ticket::new(m.clone(), slots.clone().try_acquire_owned().unwrap());
        m.request("/v1/chat/completions", 200);
        m.request("/v1/chat/completions", 429);
        m.request("/v1/chat/completions", 200);
        let text = m.render();
        for line in [
            "mobile_r1_eval_requests_total{path=\"/v1/chat/completions\",status=\"200\"} 2",
            "mobile_r1_eval_requests_total{path=\"/v1/chat/completions\",status=\"429\"} 1",
            "mobile_r1_eval_queue_depth 1",
            "mobile_r1_eval_running_sequences 1",
            "mobile_r1_eval_batch_occupancy_peak 2",
            "# TYPE mobile_r1_eval_generated_tokens_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        drop((b, c));
        assert_eq!(slots.available_permits(), 4);
        assert!(m.render().contains("mobile_r1_eval_running_sequences 0"));
    }

    #[test]
    fn retry_after_follows_the_queue_and_the_service_rate() {
        // Nothing measured yet: a second per request ahead.
        assert_eq!(retry_after_seconds(0, None), 1);
        assert_eq!(retry_after_seconds(9, None), 10);
        // Two answers a second, 7 waiting: the eighth slot frees in 4 s.
        assert_eq!(retry_after_seconds(7, Some(2.0)), 4);
        // A fast server still says at least 1; a stalled one at most the cap.
        assert_eq!(retry_after_seconds(3, Some(100.0)), 1);
        assert_eq!(retry_after_seconds(500, Some(0.1)), MAX_RETRY_AFTER);
        let m = Metrics::default();
        assert_eq!(m.retry_after(4), 1);
        let slots = Arc::new(tokio::sync::Semaphore::new(8));
        let m = Arc::new(Metrics::default());
        let waiting: Vec<Ticket> = (0..5)
            .map(|_| Ticket::new(m.clone(), slots.clone().try_acquire_owned().unwrap()))
            .collect();
        assert_eq!(m.retry_after(8), 6);
        drop(waiting);
    }
}
