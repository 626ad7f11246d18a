//! What a run's judgements add to its metrics: the judge summary and the bootstrap interval of judge success.
//! Pure; shared by every writer and reader of `metrics.json` through [`score_run`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{percent_interval, score_predictions, Metrics, RulePreset, StepScore};
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::records::{History, JudgementLine};

/// The judge's figures in `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    /// 100 · trajectories judged successful / T.
    pub judge_success: f64,
    /// Verdicts without a parseable answer.
    pub judge_unparseable: usize,
    /// Trajectories without a verdict line.
    pub judge_missing: usize,
    /// Trajectories with a verdict line.
    pub judge_judged: usize,
}

/// The judge summary of `judgements` (later lines win; lines that do not parse are ignored).
pub fn summarize(bench: &Benchmark, judgements: &[JudgementLine]) -> JudgeSummary {
    let latest: HashMap<&str, Option<bool>> = judgements
        .iter()
        .map(|j| (j.trajectory.as_str(), j.success))
        .collect();
    let verdicts: Vec<Option<&Option<bool>>> = bench
        .trajectories
        .iter()
        .map(|t| latest.get(t.id.as_str()))
        .collect();
    let n = bench.trajectories.len();
    let success = verdicts
        .iter()
        .filter(|v| matches!(v, Some(Some(true))))
        .count();
    let missing = verdicts.iter().filter(|v| v.is_none()).count();
    JudgeSummary {
        judge_success: if n > 0 {
            100.0 * success as f64 / n as f64
        } else {
            0.0
        },
        judge_unparseable: verdicts.iter().filter(|v| matches!(v, Some(None))).count(),
        judge_missing: missing,
        judge_judged: n - missing,
    }
}

/// The metrics of a run: the predictions scored, the judge summary added when the run had a judge (`judged`) or
/// judgements exist, the number of prediction lines that carry an error, and the semi-online figures when the
/// run's `history` was the model's own. What `eval`, `merge` and `score` write and `report` shows.
pub fn score_run(
    rules: &RulePreset,
    bench: &Benchmark,
    preds: &PredictionSet,
    judgements: &[JudgementLine],
    judged: bool,
    history: &History,
) -> (Metrics, Vec<StepScore>) {
    let (mut metrics, scored) = score_predictions(rules, bench, preds);
    if judged || !judgements.is_empty() {
        metrics.judge = Some(summarize(bench, judgements));
        add_judge_interval(&mut metrics, bench, judgements);
    }
    metrics.prediction_errors = Some(preds.errors);
    super::add_semi_online(&mut metrics, &scored.steps, history);
    (metrics, scored.steps)
}

/// Judge success's bootstrap interval, beside the other metrics' (when there are intervals).
fn add_judge_interval(metrics: &mut Metrics, bench: &Benchmark, judgements: &[JudgementLine]) {
    let latest: HashMap<&str, Option<bool>> = judgements
        .iter()
        .map(|j| (j.trajectory.as_str(), j.success))
        .collect();
    let flags: Vec<bool> = bench
        .trajectories
        .iter()
        .map(|t| latest.get(t.id.as_str()) == Some(&Some(true)))
        .collect();
    if let Some(iv) = metrics.intervals.as_mut() {
        let interval = percent_interval(&flags, iv.resamples, iv.seed);
        iv.metrics.insert("judge_success".into(), interval);
    }
}
