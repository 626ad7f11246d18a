//! Uncertainty of the metrics: percentile-bootstrap confidence intervals over trajectories (one run, or the
//! paired difference of two runs on the same benchmark), and McNemar's exact test on step correctness.
//!
//! Trajectories, not steps, are resampled: the steps of one trajectory share an instruction and an app, so
//! they are not independent. Everything here is deterministic for a given seed (an in-crate SplitMix64).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::StepScore;

/// Bootstrap resamples used by `score`, `eval` and `report`.
pub const DEFAULT_RESAMPLES: usize = 2000;
/// Seed of the bootstrap's random numbers.
pub const DEFAULT_SEED: u64 = 42;
/// Two-sided confidence level of the intervals.
pub const CONFIDENCE: f64 = 0.95;

/// The metrics that get an interval (keys of [`Intervals::metrics`], same names as in `metrics.json`).
pub const INTERVAL_METRICS: &[&str] = &[
    "accuracy",
    "task_success",
    "tail_success",
    "type_accuracy",
    "avg_args_errors",
    "full_format_rate",
    "args_errors",
    "format_errors",
    "type_errors",
];

/// A confidence interval `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// Bootstrap confidence intervals of the headline metrics (the `intervals` field of `metrics.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intervals {
    /// How they were computed.
    pub method: String,
    /// Two-sided level (0.95).
    pub confidence: f64,
    /// Number of bootstrap resamples.
    pub resamples: usize,
    /// Seed of the resampling.
    pub seed: u64,
    /// Metric name → interval (for a comparison: of the difference B − A).
    pub metrics: BTreeMap<String, Interval>,
}

/// What one trajectory contributes to the headline metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TrajTotals {
    steps: f64,
    correct: f64,
    type_match: f64,
    full_format: f64,
    args_errors: f64,
    format_errors: f64,
    type_errors: f64,
    trajectories: f64,
    success: f64,
    tail: f64,
}

impl TrajTotals {
    fn add_scaled(&mut self, o: &TrajTotals, w: f64) {
        self.steps += w * o.steps;
        self.correct += w * o.correct;
        self.type_match += w * o.type_match;
        self.full_format += w * o.full_format;
        self.args_errors += w * o.args_errors;
        self.format_errors += w * o.format_errors;
        self.type_errors += w * o.type_errors;
        self.trajectories += w * o.trajectories;
        self.success += w * o.success;
        self.tail += w * o.tail;
    }

    /// The value of metric `INTERVAL_METRICS[i]` for these totals.
    fn metric(&self, i: usize) -> f64 {
        let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
        match INTERVAL_METRICS[i] {
            "accuracy" => pct(self.correct, self.steps),
            "task_success" => pct(self.success, self.trajectories),
            "tail_success" => pct(self.tail, self.trajectories),
            "type_accuracy" => pct(self.type_match, self.steps),
            "avg_args_errors" if self.trajectories > 0.0 => self.args_errors / self.trajectories,
            "full_format_rate" => pct(self.full_format, self.steps),
            // Counts over a resample of the benchmark's T trajectories (the weights add up to T).
            "args_errors" => self.args_errors,
            "format_errors" => self.format_errors,
            "type_errors" => self.type_errors,
            _ => 0.0,
        }
    }

    fn metrics(&self) -> Vec<f64> {
        (0..INTERVAL_METRICS.len())
            .map(|i| self.metric(i))
            .collect()
    }
}

/// Per-trajectory totals, indexed by `traj_index` (trajectories without a step are absent from the output).
pub(crate) fn trajectory_totals(steps: &[StepScore]) -> Vec<TrajTotals> {
    let mut by: BTreeMap<usize, TrajTotals> = BTreeMap::new();
    for s in steps {
        let t = by.entry(s.traj_index).or_insert(TrajTotals {
            trajectories: 1.0,
            success: 1.0,
            ..TrajTotals::default()
        });
        t.steps += 1.0;
        t.correct += s.correct as u8 as f64;
        t.type_match += s.type_match as u8 as f64;
        t.full_format += s.full_format as u8 as f64;
        t.args_errors += (s.outcome == super::Outcome::ArgsError) as u8 as f64;
        t.format_errors += (s.outcome == super::Outcome::FormatError) as u8 as f64;
        t.type_errors += (s.outcome == super::Outcome::TypeError) as u8 as f64;
        if !s.correct {
            t.success = 0.0;
        }
        if s.last {
            t.tail = s.correct as u8 as f64;
        }
    }
    by.into_values().collect()
}

/// SplitMix64: a tiny, well-mixed generator; enough for resampling indices.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2⁻³² for any n that fits in memory).
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// Linear-interpolated quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Percentile bootstrap of `stat(weights)` (one value per name) where `weights[i]` counts how often trajectory
/// `i` was drawn.
fn bootstrap(
    names: &[&str],
    n: usize,
    resamples: usize,
    seed: u64,
    stat: impl Fn(&[f64]) -> Vec<f64>,
) -> Intervals {
    let mut rng = SplitMix64(seed);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); names.len()];
    let mut weights = vec![0.0; n];
    for _ in 0..resamples {
        weights.iter_mut().for_each(|w| *w = 0.0);
        for _ in 0..n {
            weights[rng.below(n)] += 1.0;
        }
        for (d, v) in draws.iter_mut().zip(stat(&weights)) {
            d.push(v);
        }
    }
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    let metrics = names
        .iter()
        .zip(draws)
        .map(|(name, mut d)| {
            d.sort_by(f64::total_cmp);
            let (low, high) = (quantile(&d, alpha), quantile(&d, 1.0 - alpha));
            (name.to_string(), Interval { low, high })
        })
        .collect();
    Intervals {
        method: "percentile bootstrap over trajectories".into(),
        confidence: CONFIDENCE,
        resamples,
        seed,
        metrics,
    }
}

fn weighted(totals: &[TrajTotals], weights: &[f64]) -> TrajTotals {
    let mut sum = TrajTotals::default();
    for (t, &w) in totals.iter().zip(weights) {
        if w > 0.0 {
            sum.add_scaled(t, w);
        }
    }
    sum
}

/// Bootstrap intervals of the headline metrics of one run's step scores.
pub fn intervals(steps: &[StepScore], resamples: usize, seed: u64) -> Intervals {
    let totals = trajectory_totals(steps);
    bootstrap(INTERVAL_METRICS, totals.len(), resamples, seed, |w| {
        weighted(&totals, w).metrics()
    })
}

/// Paired bootstrap intervals of the differences B − A of the headline metrics: both runs' step scores cover
/// the same trajectories (same `traj_index` values); the same trajectories are drawn for both.
pub fn paired_intervals(
    a: &[StepScore],
    b: &[StepScore],
    resamples: usize,
    seed: u64,
) -> Intervals {
    let (ta, tb) = (trajectory_totals(a), trajectory_totals(b));
    let n = ta.len().min(tb.len());
    let mut out = bootstrap(INTERVAL_METRICS, n, resamples, seed, |w| {
        let (ma, mb) = (
            weighted(&ta[..n], w).metrics(),
            weighted(&tb[..n], w).metrics(),
        );
        mb.iter().zip(&ma).map(|(b, a)| b - a).collect()
    });
    out.method = "paired percentile bootstrap over trajectories (B - A)".into();
    out
}

/// Bootstrap interval of the percentage of trajectories with `flags[i]` set (e.g. judged successful).
pub fn percent_interval(flags: &[bool], resamples: usize, seed: u64) -> Interval {
    let iv = bootstrap(&["percent"], flags.len(), resamples, seed, |w| {
        let hits: f64 = w
            .iter()
            .zip(flags)
            .filter(|(_, &f)| f)
            .map(|(w, _)| w)
            .sum();
        vec![100.0 * hits / w.iter().sum::<f64>().max(1.0)]
    });
    iv.metrics["percent"]
}

/// Bootstrap interval of the mean of one value per trajectory (e.g. a progress in percent).
pub fn bootstrap_mean(values: &[f64], resamples: usize, seed: u64) -> Interval {
    let iv = bootstrap(&["mean"], values.len(), resamples, seed, |w| {
        let weighted: f64 = w.iter().zip(values).map(|(w, v)| w * v).sum();
        vec![weighted / w.iter().sum::<f64>().max(1.0)]
    });
    iv.metrics["mean"]
}

/// McNemar's exact test on paired step correctness.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Steps correct in A and wrong in B.
    pub a_only: usize,
    /// Steps wrong in A and correct in B.
    pub b_only: usize,
    /// Two-sided exact p-value: `min(1, 2·P[X ≤ min(b, c)])` with `X ~ Binomial(b + c, 1/2)`.
    pub p_value: f64,
}

/// McNemar's exact (binomial) test from the two discordant counts.
pub fn mcnemar_exact(a_only: usize, b_only: usize) -> McNemar {
    let n = a_only + b_only;
    let k = a_only.min(b_only);
    // Sum the binomial terms in log space: C(n, i)·2⁻ⁿ underflows for large n.
    let (mut log_c, mut tail) = (0.0f64, 0.0f64);
    let log_half_n = n as f64 * 0.5f64.ln();
    for i in 0..=k {
        if i > 0 {
            log_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (log_c + log_half_n).exp();
    }
    McNemar {
        a_only,
        b_only,
        p_value: if n == 0 { 1.0 } else { (2.0 * tail).min(1.0) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcnemar_matches_hand_computed_values() {
        // n = 10, k = 2: 2·(1 + 10 + 45)/1024.
        let m = mcnemar_exact(2, 8);
        assert!((m.p_value - 112.0 / 1024.0).abs() < 1e-12, "{}", m.p_value);
        assert_eq!(mcnemar_exact(0, 0).p_value, 1.0);
        assert_eq!(mcnemar_exact(5, 5).p_value, 1.0);
        assert!(mcnemar_exact(0, 2000).p_value < 1e-300);
    }

    #[test]
    fn percent_interval_brackets_the_proportion() {
        let flags: Vec<bool> = (0..200).map(|i| i % 4 == 0).collect();
        let i = percent_interval(&flags, 1000, 3);
        assert!(
            i.low < 25.0 && 25.0 < i.high && i.high - i.low < 20.0,
            "{i:?}"
        );
        assert_eq!(
            percent_interval(&[true; 10], 100, 3),
            Interval {
                low: 100.0,
                high: 100.0
            }
        );
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [0.0, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.125), 0.5);
    }

    #[test]
    fn generator_is_uniform_enough() {
        let mut rng = SplitMix64(1);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[rng.below(4)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
    }
}
