//! What `GET /metrics` shows, in Prometheus' text format: requests by path and status, the queue (accepted and not
//! yet generating), the running sequences and the most that ever ran together (the batcher's occupancy), tokens
//! in and out, and the engine's prefill and decode rates.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
    _slot: OwnedSemaphorePermit,
}

impl Ticket {
    /// A request that took `slot`, now queued.
    pub fn new(metrics: Arc<Metrics>, slot: OwnedSemaphorePermit) -> Self {
        metrics.queued.fetch_add(1, Ordering::Relaxed);
        Self {
            metrics,
            running: false,
            _slot: slot,
        }
    }

    /// Its first token came: it is running.
    pub fn start(&mut self) {
        if self.running {
            return;
        }
        self.running = true;
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
}
