//! What an HTML report shows ([`ReportInput`]), and rebuilding it from a run folder ([`RunData::load`]).
//!
//! A run folder's `manifest.json` is read as untyped JSON and only for `data` (the benchmark folder), `rules`
//! (the preset's name) and the settings to display; missing keys are tolerated. The predictions are scored
//! again, so a report always matches the rules and the scorer of this build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ReportError;
use crate::dataset::{Benchmark, DATA_FILE};
use crate::predictions::PredictionSet;
use crate::records::JudgementLine;
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

/// The rule preset named by the manifest's `rules` (a name, or an object with a `name`).
fn manifest_rules(manifest: &Value, path: &Path) -> Result<RulePreset, ReportError> {
    let name = match manifest.get("rules") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Object(o)) => o.get("name").and_then(Value::as_str).unwrap_or_default(),
        _ => "mobile-r1",
    };
    RulePreset::by_name(name).ok_or_else(|| {
        run_error(
            path,
            format!(
                "unknown rule preset {name:?} (known: {}); pass --rules",
                RulePreset::NAMES.join(", ")
            ),
        )
    })
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

/// `(trajectory, step)` → token counts and errors from the prediction lines.
pub fn read_token_counts(text: &str) -> HashMap<(String, usize), TokenCounts> {
    let mut out = HashMap::new();
    for v in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let traj = match v.get("trajectory") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        let Some(step) = v.get("step").and_then(Value::as_u64) else {
            continue;
        };
        let counts = TokenCounts {
            prompt: v.get("prompt_tokens").and_then(Value::as_u64),
            generated: v.get("generated_tokens").and_then(Value::as_u64),
            error: v.get("error").and_then(Value::as_str).map(str::to_owned),
        };
        out.insert((traj, step as usize), counts);
    }
    out
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
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

impl RunData {
    /// Load a run folder: its manifest (for the benchmark, the rules and the settings), predictions (absent:
    /// none yet) and judgements, and score the predictions.
    pub fn load(dir: &Path, overrides: &RunOverrides) -> Result<RunData, ReportError> {
        let manifest_path = dir.join("manifest.json");
        let manifest: Value = match read_optional(&manifest_path)? {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| run_error(&manifest_path, format!("malformed JSON: {e}")))?,
            None if overrides.data.is_some() => Value::Null,
            None => return Err(run_error(&manifest_path, "not found (or pass --data)")),
        };
        let data = match (
            &overrides.data,
            manifest.get("data").and_then(Value::as_str),
        ) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => return Err(run_error(&manifest_path, "no `data` (pass --data)")),
        };
        let rules = match &overrides.rules {
            Some(r) => r.clone(),
            None => manifest_rules(&manifest, &manifest_path)?,
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
        flatten_settings(
            "",
            manifest.get("settings").unwrap_or(&Value::Null),
            &mut settings,
        );
        let run = RunInfo {
            title: dir.file_name().map_or_else(
                || dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            model: manifest
                .pointer("/settings/model")
                .and_then(Value::as_str)
                .map(str::to_owned),
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
