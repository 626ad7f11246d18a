//! Writing score results: `metrics.json`, `steps.jsonl`, `summary.md`, and the readable summary table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::score::{Metrics, StepScore};

/// Errors of writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file or folder could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Serialization failed.
    #[error("serializing {what}: {source}")]
    Json {
        /// What was serialized.
        what: &'static str,
        /// The error.
        source: serde_json::Error,
    },
}

/// The files written by [`write_all`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReportPaths {
    /// `metrics.json`.
    pub metrics: PathBuf,
    /// `steps.jsonl`.
    pub steps: PathBuf,
    /// `summary.md`.
    pub summary: PathBuf,
}

/// Write `contents` to `path` atomically (temporary file in the same folder, then rename).
fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    crate::safe_io::replace_atomic(path, &tmp, contents).map_err(io)
}

/// Write `DIR/metrics.json` (pretty-printed).
pub fn write_metrics(dir: &Path, metrics: &Metrics) -> Result<PathBuf, ReportError> {
    let path = dir.join("metrics.json");
    let mut text = serde_json::to_string_pretty(metrics).map_err(|source| ReportError::Json {
        what: "metrics",
        source,
    })?;
    text.push('\n');
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Write `DIR/steps.jsonl`, one [`StepScore`] per line.
pub fn write_steps(dir: &Path, steps: &[StepScore]) -> Result<PathBuf, ReportError> {
    let path = dir.join("steps.jsonl");
    let mut text = String::with_capacity(steps.len() * 512);
    for s in steps {
        let line = serde_json::to_string(s).map_err(|source| ReportError::Json {
            what: "a step",
            source,
        })?;
        text.push_str(&line);
        text.push('\n');
    }
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Write `DIR/summary.md` (the rendered summary).
pub fn write_summary(dir: &Path, metrics: &Metrics) -> Result<PathBuf, ReportError> {
    let path = dir.join("summary.md");
    write_atomic(&path, render_summary(metrics).as_bytes())?;
    Ok(path)
}

/// Write all three files into `dir` (created when absent).
pub fn write_all(
    dir: &Path,
    metrics: &Metrics,
    steps: &[StepScore],
) -> Result<ReportPaths, ReportError> {
    Ok(ReportPaths {
        metrics: write_metrics(dir, metrics)?,
        steps: write_steps(dir, steps)?,
        summary: write_summary(dir, metrics)?,
    })
}

fn extra_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), fmt_num),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{f:.0}")
    } else {
        format!("{f:.2}")
    }
}

/// Render the metrics as a Markdown summary: headline table, per-action table, per-app table.
pub fn render_summary(m: &Metrics) -> String {
    let mut s = String::new();
    let r = &m.rules;
    let _ = writeln!(s, "# Mobile-R1 evaluation\n");
    let _ = writeln!(
        s,
        "Rules: `{}` v{} (box scale {}, distance {}, distance with boxes: {}, text: {:?})\n",
        r.name,
        r.version,
        r.bbox_scale,
        r.distance_threshold,
        r.distance_fallback_with_boxes,
        r.text
    );
    let _ = writeln!(s, "| metric | value |\n|---|---|");
    let rows: [(&str, String); 12] = [
        ("steps (N)", m.steps.to_string()),
        ("trajectories (T)", m.trajectories.to_string()),
        ("accuracy %", format!("{:.2}", m.accuracy)),
        ("task success %", format!("{:.2}", m.task_success)),
        ("tail success %", format!("{:.2}", m.tail_success)),
        ("type accuracy %", format!("{:.2}", m.type_accuracy)),
        ("args errors (Avg Err)", m.args_errors.to_string()),
        (
            "avg args errors / trajectory",
            format!("{:.3}", m.avg_args_errors),
        ),
        ("format errors", m.format_errors.to_string()),
        ("type errors", m.type_errors.to_string()),
        (
            "full three-tag format %",
            format!("{:.2}", m.full_format_rate),
        ),
        (
            "missing / unknown / malformed predictions",
            format!(
                "{} / {} / {}",
                m.missing_predictions, m.unknown_predictions, m.malformed_prediction_lines
            ),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    for (k, v) in &m.extra {
        let _ = writeln!(s, "| {k} | {} |", extra_value(v));
    }
    let _ = writeln!(
        s,
        "\n| action | steps | type acc % | exact acc % |\n|---|---|---|---|"
    );
    for a in &m.per_action {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} |",
            a.action, a.count, a.type_accuracy, a.exact_accuracy
        );
    }
    let _ = writeln!(
        s,
        "\n| app | trajectories | steps | accuracy % | task success % |\n|---|---|---|---|---|"
    );
    for g in &m.per_app {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.2} |",
            g.key,
            g.trajectories,
            g.steps,
            g.accuracy,
            g.task_success.unwrap_or(0.0)
        );
    }
    if !m.format_error_kinds.is_empty() {
        let kinds: Vec<String> = m
            .format_error_kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(s, "\nFormat errors by kind: {}", kinds.join(", "));
    }
    s
}
