//! Writing score results: `metrics.json`, `steps.jsonl`, `summary.md` (the readable summary table), the HTML
//! report of a run (`report.html` with its thumbnails in `report/`), and the comparison of two runs.
//!
//! Pure: no candle. [`RunData::load`] rebuilds a report's input from a run folder by re-scoring its predictions.

mod charts;
pub mod compare;
mod compare_html;
mod compare_types;
mod escape;
pub mod html;
mod input;
mod overlay;
mod semi_online;
mod summary;
mod thumbs;

use std::path::{Path, PathBuf};

use crate::rundir::{self, RunDir};
use crate::score::{RunMetrics, StepScore};

pub use input::{
    flatten_settings, read_token_counts, verdicts, Judgement, ReportInput, RunData, RunInfo,
    RunOverrides, TokenCounts,
};
pub(crate) use summary::render_summary;

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
    /// A run folder lacks what the report needs, or holds something unreadable.
    #[error("{}: {message}", path.display())]
    Run {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The run's benchmark could not be loaded.
    #[error("loading the run's benchmark: {0}")]
    Dataset(#[from] crate::dataset::DatasetError),
    /// The run folder could not be read, or its benchmark found.
    #[error(transparent)]
    RunDir(#[from] crate::rundir::RunDirError),
    /// The run's predictions could not be read.
    #[error("reading the run's predictions: {0}")]
    Predictions(#[from] crate::predictions::PredictionsError),
    /// Two compared runs are on different benchmarks.
    #[error(
        "the runs are on different benchmarks (data.jsonl sha256 {hash_a} for {}, {hash_b} for {}); \
         a comparison needs the same benchmark", run_a.display(), run_b.display()
    )]
    DifferentBenchmarks {
        /// First run folder.
        run_a: PathBuf,
        /// Its benchmark hash.
        hash_a: String,
        /// Second run folder.
        run_b: PathBuf,
        /// Its benchmark hash.
        hash_b: String,
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
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
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
pub(crate) fn write_metrics(dir: &RunDir, metrics: &RunMetrics) -> Result<PathBuf, ReportError> {
    let path = dir.path(rundir::METRICS);
    let mut text = serde_json::to_string_pretty(metrics).map_err(|source| ReportError::Json {
        what: "metrics",
        source,
    })?;
    text.push('\n');
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Write `DIR/steps.jsonl`, one [`StepScore`] per line.
pub(crate) fn write_steps(dir: &RunDir, steps: &[StepScore]) -> Result<PathBuf, ReportError> {
    let path = dir.path(rundir::STEPS);
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
pub(crate) fn write_summary(dir: &RunDir, metrics: &RunMetrics) -> Result<PathBuf, ReportError> {
    let path = dir.path(rundir::SUMMARY);
    write_atomic(&path, render_summary(metrics).as_bytes())?;
    Ok(path)
}

/// Write all three files into `dir` (created when absent).
pub fn write_all(
    dir: &RunDir,
    metrics: &RunMetrics,
    steps: &[StepScore],
) -> Result<ReportPaths, ReportError> {
    Ok(ReportPaths {
        metrics: write_metrics(dir, metrics)?,
        steps: write_steps(dir, steps)?,
        summary: write_summary(dir, metrics)?,
    })
}
