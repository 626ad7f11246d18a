//! What an HTML report shows ([`ReportInput`]), and rebuilding it from a run folder ([`RunData::load`]).
//!
//! A run folder's `manifest.json` (a run's, a shard's or a merged run's) is read as a [`ManifestHeader`]: the
//! benchmark folder, the rule preset and the settings to display. The predictions are scored again with that
//! preset, exactly as `eval`, `merge` and `score` write `metrics.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ReportError;
use crate::dataset::{Benchmark, DATA_FILE};
use crate::predictions::PredictionSet;
use crate::records::{JudgementLine, ManifestHeader, PredictionLine};
use crate::score::{score_run, Metrics, RulePreset, StepScore};

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
    pub metrics: &'a Metrics,
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
    pub metrics: Metrics,
    /// Judge verdicts.
    pub judgements: HashMap<String, Judgement>,
    /// Token counts.
    pub tokens: HashMap<(String, usize), TokenCounts>,
    /// Description.
    pub run: RunInfo,
}

fn run_error(path: &Path, message: impl Into<String>) -> ReportError {
    ReportError::Run {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A file's text, or `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, ReportError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReportError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
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

/// sha256 (hex) of a benchmark's `data.jsonl`.
pub fn benchmark_hash(bench: &Benchmark) -> Result<String, ReportError> {
    let path = bench.root.join(DATA_FILE);
    let bytes = std::fs::read(&path).map_err(|source| ReportError::Io { path, source })?;
    Ok(crate::fingerprint::sha256_hex(&bytes))
}

impl RunData {
    /// Load a run folder: its manifest (for the benchmark, the rules and the settings), predictions (absent:
    /// none yet) and judgements, and score the predictions.
    pub fn load(dir: &Path, overrides: &RunOverrides) -> Result<RunData, ReportError> {
        let manifest_path = dir.join("manifest.json");
        let manifest: Option<ManifestHeader> = match read_optional(&manifest_path)? {
            Some(text) => Some(
                serde_json::from_str(&text)
                    .map_err(|e| run_error(&manifest_path, format!("not a run manifest: {e}")))?,
            ),
            None => None,
        };
        let data = match (&overrides.data, &manifest) {
            (Some(d), _) => d.clone(),
            (None, Some(m)) => m.data.clone(),
            (None, None) => return Err(run_error(&manifest_path, "not found (or pass --data)")),
        };
        let rules = match (&overrides.rules, &manifest) {
            (Some(r), _) => r.clone(),
            (None, Some(m)) => m.rules.clone(),
            (None, None) => RulePreset::default(),
        };
        let bench = Benchmark::load(&data)?;
        let preds_text = read_optional(&dir.join("predictions.jsonl"))?.unwrap_or_default();
        let preds = PredictionSet::parse(&preds_text);
        let tokens = read_token_counts(&preds_text);
        let lines: Vec<JudgementLine> = read_optional(&dir.join("judgements.jsonl"))?
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let judgements = verdicts(&lines);
        // Scored exactly as `eval`, `merge` and `score` write metrics.json.
        let (metrics, steps) = score_run(&rules, &bench, &preds, &lines, !lines.is_empty());
        let mut settings = Vec::new();
        if let Some(m) = &manifest {
            let value = serde_json::to_value(&m.settings).unwrap_or(Value::Null);
            flatten_settings("", &value, &mut settings);
        }
        let run = RunInfo {
            title: dir.file_name().map_or_else(
                || dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            model: manifest.as_ref().map(|m| m.settings.model.clone()),
            data: data.display().to_string(),
            settings,
        };
        Ok(RunData {
            dir: dir.to_path_buf(),
            bench_hash: benchmark_hash(&bench)?,
            bench,
            steps,
            metrics,
            judgements,
            tokens,
            run,
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
