//! What an HTML report shows ([`ReportInput`]), and rebuilding it from a run folder ([`RunData::load`]).
//!
//! A folder's origin ([`Origin`]: a run's manifest, or a scored folder's record) gives the benchmark folder, the
//! rule preset and the settings to display. The predictions are scored again with that preset, exactly as
//! `eval`, `merge` and `score` write `metrics.json`.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

use super::ReportError;
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::records::{JudgementLine, PredictionLine};
use crate::rundir::{self, find_benchmark, Origin, RunDir};
use crate::score::{score_run, RunMetrics, StepScore};
use crate::settings::RulePreset;

/// A run's description for the report's header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInfo {
    /// Title of the page (usually the run folder's name).
    pub title: String,
    /// The evaluated model, when known.
    pub model: Option<String>,
    /// The benchmark folder.
    pub data: String,
    /// Settings to display, flattened to `dotted.key` → value.
    pub settings: Vec<(String, String)>,
}

/// The judge's verdict on one trajectory (a line of `judgements.jsonl`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// `Some(true)` when judged successful; `None` when the verdict could not be read.
    pub success: Option<bool>,
    /// The judge's reason.
    pub reason: Option<String>,
}

/// Per-step facts of a prediction line beyond the response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenCounts {
    /// Prompt tokens.
    pub prompt: Option<u64>,
    /// Generated tokens.
    pub generated: Option<u64>,
    /// Why the step has no response (a failed prediction).
    pub error: Option<String>,
}

/// Everything an HTML report shows, borrowed from its owner.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The benchmark (screenshots are resolved against its folder).
    pub bench: &'a Benchmark,
    /// One score per benchmark step, in benchmark order.
    pub steps: &'a [StepScore],
    /// The metrics of those steps (with intervals when computed).
    pub metrics: &'a RunMetrics,
    /// Trajectory id → judge verdict (empty without a judge phase).
    pub judgements: &'a HashMap<String, Judgement>,
    /// `(trajectory id, step)` → token counts (empty when the predictions have none).
    pub tokens: &'a HashMap<(String, usize), TokenCounts>,
    /// The run's description.
    pub run: &'a RunInfo,
}

/// Choices that replace what a run folder's manifest says.
#[derive(Debug, Clone, Default)]
pub struct RunOverrides {
    /// Benchmark folder.
    pub data: Option<PathBuf>,
    /// Rule preset.
    pub rules: Option<RulePreset>,
}

/// A run folder loaded and scored: the owner of a [`ReportInput`].
#[derive(Debug, Clone)]
pub struct RunData {
    /// The run folder.
    pub dir: PathBuf,
    /// The benchmark.
    pub bench: Benchmark,
    /// sha256 of the benchmark's `data.jsonl`.
    pub bench_hash: String,
    /// Step scores.
    pub steps: Vec<StepScore>,
    /// Metrics, with bootstrap intervals and the judge summary.
    pub metrics: RunMetrics,
    /// Judge verdicts.
    pub judgements: HashMap<String, Judgement>,
    /// Token counts.
    pub tokens: HashMap<(String, usize), TokenCounts>,
    /// Description.
    pub run: RunInfo,
}

/// Flatten a JSON value into `dotted.key` → display text (arrays of scalars stay on one line).
pub fn flatten_settings(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten_settings(&key, v, out);
            }
        }
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        Value::Null => {}
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}

fn no_predictions(dir: &RunDir, what: &str) -> ReportError {
    ReportError::Run {
        path: dir.root().to_path_buf(),
        message: format!(
            "{what}: nothing to report. Give a folder written by `eval` (a run, with at least one step done), \
             `merge` or `score --out`"
        ),
    }
}

/// The header of a folder's report: its name, and the model and settings of the run, or the inputs of a scored
/// folder.
fn run_info(dir: &RunDir, origin: Option<&Origin>, bench: &Benchmark) -> RunInfo {
    let root = dir.root();
    let mut settings = Vec::new();
    match origin {
        Some(Origin::Run(h)) => {
            let value = serde_json::to_value(&h.settings).unwrap_or(Value::Null);
            flatten_settings("", &value, &mut settings);
        }
        Some(Origin::Scored(s)) => {
            settings.push(("predictions".into(), s.predictions.display().to_string()));
            settings.push(("predictions_sha256".into(), s.predictions_sha256.clone()));
            settings.push(("data_hash".into(), s.data_hash.clone()));
            // The run that made the predictions, as the scored folder recorded it.
            if let Some(r) = &s.run_settings {
                let value = serde_json::to_value(r).unwrap_or(Value::Null);
                flatten_settings("run", &value, &mut settings);
            }
        }
        None => {}
    }
    RunInfo {
        title: root.file_name().map_or_else(
            || root.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        model: origin.and_then(Origin::made_by).map(|s| s.model.clone()),
        data: bench.root.display().to_string(),
        settings,
    }
}

/// `(trajectory, step)` → token counts and errors from the prediction lines (unreadable lines are skipped: the
/// scorer reports them).
pub fn read_token_counts(text: &str) -> HashMap<(String, usize), TokenCounts> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<PredictionLine>(l).ok())
        .map(|p| {
            let counts = TokenCounts {
                prompt: p.prompt_tokens.map(|n| n as u64),
                generated: p.generated_tokens.map(|n| n as u64),
                error: p.error,
            };
            ((p.trajectory, p.step), counts)
        })
        .collect()
}

/// Trajectory id → verdict of judgement lines (later lines win).
pub fn verdicts(lines: &[JudgementLine]) -> HashMap<String, Judgement> {
    lines
        .iter()
        .map(|j| {
            let verdict = Judgement {
                success: j.success,
                reason: j.reason.clone(),
            };
            (j.trajectory.clone(), verdict)
        })
        .collect()
}

impl RunData {
    /// Load a folder that `eval`, `merge` or `score --out` wrote: what it was made with (for the benchmark, the
    /// rules and the settings), its predictions and judgements, and score the predictions exactly as those
    /// commands wrote `metrics.json`. A folder without predictions is refused, and so is a benchmark other than
    /// the one the folder records.
    pub fn load(dir: &RunDir, overrides: &RunOverrides) -> Result<RunData, ReportError> {
        let origin = dir.origin()?;
        let preds_path = dir.path(rundir::PREDICTIONS);
        let preds_text = match std::fs::read_to_string(&preds_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(no_predictions(dir, "has no predictions.jsonl"))
            }
            Err(source) => {
                return Err(ReportError::Io {
                    path: preds_path,
                    source,
                })
            }
        };
        let frame = origin
            .as_ref()
            .map(Origin::coordinate_frame)
            .unwrap_or_default();
        let preds = PredictionSet::parse(&preds_text).in_frame(frame);
        if preds.is_empty() {
            return Err(no_predictions(
                dir,
                "has no prediction in predictions.jsonl",
            ));
        }
        let named_by = match &origin {
            Some(Origin::Scored(_)) => dir.path(rundir::SCORED),
            _ => dir.path(rundir::MANIFEST),
        };
        let found = find_benchmark(overrides.data.as_deref(), origin.as_ref(), &named_by, false)?;
        let rules = overrides
            .rules
            .clone()
            .or_else(|| origin.as_ref().map(|o| o.rules().clone()))
            .unwrap_or_default();
        let lines = dir.judgements()?;
        let judged = !lines.is_empty()
            || origin
                .as_ref()
                .and_then(Origin::settings)
                .is_some_and(|s| s.judge.is_some());
        let history = origin.as_ref().map(Origin::history).unwrap_or_default();
        // Scored exactly as `eval`, `merge` and `score` write metrics.json.
        let (metrics, steps) = score_run(&rules, &found.bench, &preds, &lines, judged, &history);
        Ok(RunData {
            run: run_info(dir, origin.as_ref(), &found.bench),
            dir: dir.root().to_path_buf(),
            bench_hash: found.hash,
            bench: found.bench,
            steps,
            metrics,
            judgements: verdicts(&lines),
            tokens: read_token_counts(&preds_text),
        })
    }

    /// The report input borrowing this run.
    pub fn input(&self) -> ReportInput<'_> {
        ReportInput {
            bench: &self.bench,
            steps: &self.steps,
            metrics: &self.metrics,
            judgements: &self.judgements,
            tokens: &self.tokens,
            run: &self.run,
        }
    }
}
