//! Seeing a run: per-phase counters, an indicatif bar on a terminal (plain periodic log lines otherwise), and
//! the phase summary that goes into `throughput.json`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Counters of one phase (steps or judgements).
#[derive(Debug, Default, Clone, Serialize)]
pub struct PhaseStats {
    /// Phase name (`steps` or `judge`).
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

impl PhaseStats {
    /// A JSON summary with the derived rates.
    pub fn summary(&self) -> serde_json::Value {
        let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let mut v = serde_json::to_value(self).expect("stats serialise");
        let extra = serde_json::json!({
            "prompts_per_second": rate(self.prompts, self.wall_seconds),
            "images_per_second": rate(self.images, self.wall_seconds),
            "prefill_tokens_per_second": rate(self.prefill_tokens, self.prefill_seconds),
            "decode_tokens_per_second": rate(self.decode_tokens, self.decode_seconds),
            "mean_batch_occupancy": if self.decode_steps > 0 {
                self.decode_seq_sum as f64 / self.decode_steps as f64
            } else { 0.0 },
        });
        if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }
}

/// A progress display: an indicatif bar on a terminal, a log line every few seconds otherwise.
pub struct Progress {
    bar: Option<ProgressBar>,
    name: String,
    total: u64,
    done: u64,
    start: Instant,
    last_log: Instant,
}

const LOG_EVERY: Duration = Duration::from_secs(10);

impl Progress {
    /// Start a display for `total` prompts of phase `name`, `already` of which were done by an earlier run.
    pub fn new(name: &str, total: u64, already: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>6} [{bar:30}] {pos}/{len} {per_sec} ETA {eta} {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b.set_prefix(name.to_string());
            b.set_position(already);
            b
        });
        let now = Instant::now();
        Self {
            bar,
            name: name.to_string(),
            total,
            done: already,
            start: now,
            last_log: now,
        }
    }

    /// Record `n` more finished prompts and refresh the token rates.
    pub fn advance(&mut self, n: u64, stats: &PhaseStats) {
        self.done += n;
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let msg = format!(
            "prompt {:.0} tok/s, gen {:.0} tok/s",
            stats.prefill_tokens as f64 / secs,
            stats.decode_tokens as f64 / secs
        );
        if let Some(b) = &self.bar {
            b.set_message(msg);
            b.inc(n);
        } else if self.last_log.elapsed() >= LOG_EVERY || self.done == self.total {
            self.last_log = Instant::now();
            tracing::info!(
                "{}: {}/{} done, {:.2}/s, {msg}",
                self.name,
                self.done,
                self.total,
                stats.prompts as f64 / secs
            );
        }
    }

    /// Close the display.
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish();
        }
    }
}
