//! Seeing a run: an indicatif bar on a terminal, plain periodic log lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crate::records::PhaseStats;
use indicatif::{ProgressBar, ProgressStyle};

/// A progress display: an indicatif bar on a terminal, a log line every few seconds otherwise.
pub(crate) struct Progress {
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
    pub(crate) fn advance(&mut self, n: u64, stats: &PhaseStats) {
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
