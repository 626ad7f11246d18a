//! Run versus run on the same benchmark: metric deltas with paired-bootstrap intervals, McNemar's exact test
//! on step correctness, the steps that flipped, and per-app / per-action deltas (`compare.json`,
//! `compare.html`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) use super::compare_types::{
    Comparison, Flip, GroupDelta, MetricDelta, SettingDelta, COMPARE_SCHEMA_VERSION,
};
use super::input::RunData;
use super::{write_atomic, ReportError};
use crate::score::{
    average_progress, mcnemar_exact, paired_intervals, paired_progress_interval, RunMetrics,
    StepScore, DEFAULT_RESAMPLES, DEFAULT_SEED, INTERVAL_METRICS,
};

fn metric_value(m: &RunMetrics, name: &str) -> f64 {
    match name {
        "accuracy" => m.accuracy,
        "task_success" => m.task_success,
        "tail_success" => m.tail_success,
        "type_accuracy" => m.type_accuracy,
        "avg_args_errors" => m.avg_args_errors,
        "full_format_rate" => m.full_format_rate,
        "args_errors" => m.args_errors as f64,
        "format_errors" => m.format_errors as f64,
        "type_errors" => m.type_errors as f64,
        _ => f64::NAN,
    }
}

/// Step accuracy per group key, in both runs (steps aligned).
fn group_deltas(
    a: &[StepScore],
    b: &[StepScore],
    key: impl Fn(&StepScore) -> String,
) -> Vec<GroupDelta> {
    let mut acc: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (sa, sb) in a.iter().zip(b) {
        let e = acc.entry(key(sa)).or_default();
        e.0 += 1;
        e.1 += sa.correct as usize;
        e.2 += sb.correct as usize;
    }
    acc.into_iter()
        .map(|(key, (n, ca, cb))| {
            let (a, b) = (100.0 * ca as f64 / n as f64, 100.0 * cb as f64 / n as f64);
            GroupDelta {
                key,
                steps: n,
                a,
                b,
                delta: b - a,
            }
        })
        .collect()
}

/// The steps right in one run and wrong in the other, and the two discordant counts.
fn flips(a: &[StepScore], b: &[StepScore]) -> (Vec<Flip>, usize, usize) {
    let mut flipped = Vec::new();
    let (mut a_only, mut b_only) = (0, 0);
    for (sa, sb) in a.iter().zip(b) {
        if sa.correct == sb.correct {
            continue;
        }
        if sa.correct {
            a_only += 1;
        } else {
            b_only += 1;
        }
        flipped.push(Flip {
            trajectory: sa.trajectory.clone(),
            step: sa.step,
            direction: if sa.correct {
                "right_to_wrong"
            } else {
                "wrong_to_right"
            }
            .into(),
            response_a: sa.response.clone(),
            response_b: sb.response.clone(),
        });
    }
    (flipped, a_only, b_only)
}

/// Compare two loaded runs; an error when their benchmarks differ.
pub fn compare(a: &RunData, b: &RunData) -> Result<Comparison, ReportError> {
    if a.bench_hash != b.bench_hash || a.steps.len() != b.steps.len() {
        return Err(ReportError::DifferentBenchmarks {
            run_a: a.dir.clone(),
            hash_a: a.bench_hash.clone(),
            run_b: b.dir.clone(),
            hash_b: b.bench_hash.clone(),
        });
    }
    let iv = paired_intervals(&a.steps, &b.steps, DEFAULT_RESAMPLES, DEFAULT_SEED);
    let mut metrics: Vec<MetricDelta> = INTERVAL_METRICS
        .iter()
        .filter_map(|&name| {
            let i = iv.metrics.get(name)?;
            let (va, vb) = (
                metric_value(&a.metrics, name),
                metric_value(&b.metrics, name),
            );
            Some(MetricDelta {
                metric: name.to_owned(),
                a: va,
                b: vb,
                delta: vb - va,
                low: i.low,
                high: i.high,
            })
        })
        .collect();
    let history = semi_online_history(a, b);
    if history.is_some() {
        metrics.push(progress_delta(a, b));
    }
    let (flipped, a_only, b_only) = flips(&a.steps, &b.steps);
    Ok(Comparison {
        schema_version: COMPARE_SCHEMA_VERSION,
        run_a: a.dir.display().to_string(),
        run_b: b.dir.display().to_string(),
        benchmark_hash: a.bench_hash.clone(),
        rules: a.metrics.rules.name.clone(),
        steps: a.steps.len(),
        trajectories: a.metrics.trajectories,
        interval_method: iv.method,
        confidence: iv.confidence,
        resamples: iv.resamples,
        seed: iv.seed,
        metrics,
        mcnemar: mcnemar_exact(a_only, b_only),
        flipped,
        per_app: group_deltas(&a.steps, &b.steps, |s| s.app.clone()),
        per_action: group_deltas(&a.steps, &b.steps, |s| s.gold_type.to_string()),
        settings: setting_deltas(a, b),
        history,
    })
}

/// The displayed settings in which the runs differ, in key order.
fn setting_deltas(a: &RunData, b: &RunData) -> Vec<SettingDelta> {
    let map =
        |r: &RunData| -> BTreeMap<String, String> { r.run.settings.iter().cloned().collect() };
    let (ma, mb) = (map(a), map(b));
    let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| ma.get(*k) != mb.get(*k))
        .map(|k| SettingDelta {
            key: k.clone(),
            a: ma.get(k).cloned(),
            b: mb.get(k).cloned(),
        })
        .collect()
}

/// The history of each run (`gold` or its semi-online procedure) when either showed the model its own.
fn semi_online_history(a: &RunData, b: &RunData) -> Option<[String; 2]> {
    let label = |r: &RunData| {
        r.metrics
            .semi_online
            .as_ref()
            .map_or_else(|| "gold".to_string(), |s| s.procedure.to_string())
    };
    (a.metrics.semi_online.is_some() || b.metrics.semi_online.is_some())
        .then(|| [label(a), label(b)])
}

/// Average progress (correct steps before the first wrong one, per trajectory) in both runs, with the paired
/// interval of its difference: computed from the step scores, so a gold-history run has one too.
fn progress_delta(a: &RunData, b: &RunData) -> MetricDelta {
    let (va, vb) = (average_progress(&a.steps), average_progress(&b.steps));
    let i = paired_progress_interval(&a.steps, &b.steps, DEFAULT_RESAMPLES, DEFAULT_SEED);
    MetricDelta {
        metric: "average_progress".into(),
        a: va,
        b: vb,
        delta: vb - va,
        low: i.low,
        high: i.high,
    }
}

/// What [`write()`] wrote.
#[derive(Debug, Clone)]
pub struct CompareOutput {
    /// `compare.html`.
    pub html: PathBuf,
    /// `compare.json`.
    pub json: PathBuf,
    /// A plain-text summary for the terminal.
    pub summary: String,
}

/// A plain-text summary of a comparison.
pub(crate) fn render_summary(c: &Comparison) -> String {
    let mut s = format!(
        "B ({}) - A ({}), {:.0}% paired-bootstrap intervals:\n",
        c.run_b,
        c.run_a,
        c.confidence * 100.0
    );
    if let Some([a, b]) = &c.history {
        let _ = writeln!(s, "  history: A {a}, B {b}");
    }
    for m in &c.metrics {
        let _ = writeln!(
            s,
            "  {:<18} {:>8.3} -> {:>8.3}  delta {:+.3} [{:+.3}, {:+.3}]",
            m.metric, m.a, m.b, m.delta, m.low, m.high
        );
    }
    let _ = writeln!(
        s,
        "McNemar exact test: {} steps right only in A, {} only in B, p = {:.4}",
        c.mcnemar.a_only, c.mcnemar.b_only, c.mcnemar.p_value
    );
    s
}

/// Compare `a` and `b` and write `out/compare.json`, `out/compare.html` and its thumbnails.
pub fn write(out: &Path, a: &RunData, b: &RunData) -> Result<CompareOutput, ReportError> {
    let c = compare(a, b)?;
    let json = out.join("compare.json");
    let mut text = serde_json::to_string_pretty(&c).map_err(|source| ReportError::Json {
        what: "the comparison",
        source,
    })?;
    text.push('\n');
    write_atomic(&json, text.as_bytes())?;
    let html = super::compare_html::write(out, &c, a, b)?;
    Ok(CompareOutput {
        html,
        json,
        summary: render_summary(&c),
    })
}
