//! The run folder: the one module that knows the names of a run's files, takes a folder for a run (creating and
//! locking it), checks a resumed run's settings, appends and reads its lines, writes its JSON files atomically,
//! and finds the benchmark a folder was made on.
//!
//! Two kinds of folder share this layout and hold `predictions.jsonl`: a **run** (`eval`, one shard of a sharded
//! run, or a merged run), whose `manifest.json` starts with the fields of [`ManifestHeader`], and a **scored
//! folder** (`score --out`), whose `scored.json` ([`ScoreRecord`]) names the predictions and the benchmark it was
//! scored from. [`RunDir::origin`] reads either.
//!
//! A line is only ever appended whole and newline-terminated; a run killed mid-write leaves at most one partial
//! last line, which [`JsonlAppender::open`] cuts off before appending, so the step is simply redone. Readers
//! read lines under one policy ([`crate::records::parse_lines`]).

mod append;
mod benchmark;
mod claim;
mod lock;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) use append::JsonlAppender;
pub(crate) use benchmark::{find_benchmark, FoundBenchmark};
pub use claim::ClaimedRun;
pub(crate) use lock::{create_fresh_run_dir, RunLock, RunLockError, LOCK_FILE};

use crate::records::{
    History, JudgementLine, Manifest, ManifestHeader, PredictionLine, RunSettings, ScoreRecord,
};
use crate::settings::RulePreset;
use crate::shard::ShardSpec;

/// `manifest.json`: what a run was made with.
pub(crate) const MANIFEST: &str = "manifest.json";
/// `scored.json`: what a scored folder was scored from.
pub(crate) const SCORED: &str = "scored.json";
/// `predictions.jsonl`: one line per step.
pub(crate) const PREDICTIONS: &str = "predictions.jsonl";
/// `judgements.jsonl`: one line per judged trajectory.
pub(crate) const JUDGEMENTS: &str = "judgements.jsonl";
/// `metrics.json`: the scores.
pub(crate) const METRICS: &str = "metrics.json";
/// `steps.jsonl`: one scored step per line.
pub(crate) const STEPS: &str = "steps.jsonl";
/// `summary.md`: the readable summary table.
pub(crate) const SUMMARY: &str = "summary.md";
/// `throughput.json`: how fast the phases ran.
pub(crate) const THROUGHPUT: &str = "throughput.json";
/// `report.html`: the HTML report.
pub(crate) const REPORT_HTML: &str = "report.html";
/// `report/`: the HTML report's thumbnails.
pub(crate) const REPORT_ASSETS: &str = "report";
/// `shards/`: the shard folders of a sharded run (`shards/I-of-N/`).
pub const SHARDS: &str = "shards";

/// Errors of the run folder.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The existing manifest (or scored record) is not one this version reads.
    #[error("{path}: not a valid {what}: {source}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// `run manifest` or `scored-folder record`.
        what: &'static str,
        /// The cause.
        source: serde_json::Error,
    },
    /// The existing run was made with other settings.
    #[error(
        "{path} was made with other settings, so its results cannot be resumed with these:\n{diffs}\n\
         Use another --out folder, or the original settings."
    )]
    ManifestMismatch {
        /// The manifest file.
        path: PathBuf,
        /// One line per differing setting.
        diffs: String,
    },
    /// A weight file of the resumed run was replaced.
    #[error(transparent)]
    WeightsChanged(#[from] crate::fingerprint::FingerprintError),
    /// The folder cannot hold a run.
    #[error("{path}: {reason}")]
    NotARunFolder {
        /// The path given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The folder is in use, or cannot be locked.
    #[error(transparent)]
    Lock(#[from] RunLockError),
    /// The benchmark of a folder cannot be found, read, or is not the one the folder was made on.
    #[error("{0}")]
    Benchmark(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a folder's predictions were made and scored with: a run's manifest, or a scored folder's record.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// `manifest.json` of a run, a shard or a merged run.
    Run(Box<ManifestHeader>),
    /// `scored.json` of a folder written by `score --out`.
    Scored(Box<ScoreRecord>),
}

impl Origin {
    /// The benchmark folder it names.
    pub fn data(&self) -> &Path {
        match self {
            Origin::Run(h) => &h.data,
            Origin::Scored(s) => &s.data,
        }
    }

    /// SHA-256 of that benchmark's `data.jsonl`.
    pub fn data_hash(&self) -> &str {
        match self {
            Origin::Run(h) => &h.settings.data_hash,
            Origin::Scored(s) => &s.data_hash,
        }
    }

    /// The rule preset its metrics were scored with.
    pub fn rules(&self) -> &RulePreset {
        match self {
            Origin::Run(h) => &h.rules,
            Origin::Scored(s) => &s.rules,
        }
    }

    /// The frame its predicted coordinates were read in.
    pub fn coordinate_frame(&self) -> crate::settings::CoordinateFrame {
        match self {
            Origin::Run(h) => h.settings.coordinate_frame,
            Origin::Scored(s) => s.coordinate_frame,
        }
    }

    /// The run's settings (a scored folder has none: no model ran).
    pub fn settings(&self) -> Option<&RunSettings> {
        match self {
            Origin::Run(h) => Some(&h.settings),
            Origin::Scored(_) => None,
        }
    }

    /// The settings of the run that made the predictions: a run's own, or those a scored folder recorded from
    /// the run whose predictions it scored.
    pub fn made_by(&self) -> Option<&RunSettings> {
        match self {
            Origin::Run(h) => Some(&h.settings),
            Origin::Scored(s) => s.run_settings.as_ref(),
        }
    }

    /// The history of the prompts that made the predictions (gold when no run is recorded).
    pub fn history(&self) -> History {
        self.made_by()
            .map(|s| s.history.clone())
            .unwrap_or_default()
    }
}

/// A run folder (or a scored folder): every path inside it, and its reading and writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The folder at `root` (nothing is read or created).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A file of the folder by name (one of this module's constants).
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The folder of one shard of a sharded run: `RUN/shards/I-of-N`.
    pub fn shard(&self, spec: ShardSpec) -> RunDir {
        RunDir::new(self.root.join(SHARDS).join(spec.dir_name()))
    }

    /// Check that an existing run in this folder was made with the same `settings` (everything that changes the
    /// predictions: model hash, dtype, prompts, pixel bounds, …), but for a judge phase added to a run made
    /// without one. Returns its manifest when resuming.
    pub(crate) fn check_resume(
        &self,
        settings: &RunSettings,
    ) -> Result<Option<Manifest>, RunDirError> {
        let path = self.path(MANIFEST);
        let Some(old) = read_json::<Manifest>(&path, "run manifest")? else {
            return Ok(None);
        };
        // A replaced weight file gets its own message, before the settings diff.
        crate::fingerprint::check_unchanged(&path, &old.settings.weights, &settings.weights)?;
        // A run made without the judge phase may take it on: the judge does not change any step's answer.
        let adds_judge =
            |d: &crate::records::SettingDiff| d.name == "judge" && old.settings.judge.is_none();
        let diffs: Vec<_> = old
            .settings
            .differences(settings)
            .into_iter()
            .filter(|d| !adds_judge(d))
            .collect();
        if diffs.is_empty() {
            return Ok(Some(old));
        }
        let diffs: Vec<String> = diffs.iter().map(|d| format!("  {d}")).collect();
        Err(RunDirError::ManifestMismatch {
            path,
            diffs: diffs.join("\n"),
        })
    }

    /// What the folder's predictions were made and scored with: its `manifest.json` read as a header, else its
    /// `scored.json`; `None` when it has neither.
    pub fn origin(&self) -> Result<Option<Origin>, RunDirError> {
        if let Some(h) = read_json::<ManifestHeader>(&self.path(MANIFEST), "run manifest")? {
            return Ok(Some(Origin::Run(Box::new(h))));
        }
        let scored = read_json::<ScoreRecord>(&self.path(SCORED), "scored-folder record")?;
        Ok(scored.map(|s| Origin::Scored(Box::new(s))))
    }

    /// The keys (`"<trajectory>#<step>"`) of the steps of `predictions.jsonl` that ran (no `error`).
    pub(crate) fn completed_steps(&self) -> Result<HashSet<String>, RunDirError> {
        Ok(self
            .read_lines::<PredictionLine>(PREDICTIONS)?
            .into_iter()
            .filter(|p| p.error.is_none())
            .map(|p| step_key(&p.trajectory, p.step))
            .collect())
    }

    /// The trajectory ids of `judgements.jsonl` whose prompt ran (no `error`).
    pub(crate) fn completed_trajectories(&self) -> Result<HashSet<String>, RunDirError> {
        Ok(self
            .judgements()?
            .into_iter()
            .filter(|j| j.error.is_none())
            .map(|j| j.trajectory)
            .collect())
    }

    /// The lines of `judgements.jsonl`, in file order (none when the file is absent).
    pub fn judgements(&self) -> Result<Vec<JudgementLine>, RunDirError> {
        self.read_lines(JUDGEMENTS)
    }

    /// The records of one of the folder's JSONL files, in file order; lines that do not read as `T` (a torn last
    /// line, hand edits) are skipped. A missing file has none.
    pub(crate) fn read_lines<T: DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Vec<T>, RunDirError> {
        let path = self.path(name);
        let lines = crate::records::read_lines(&path).map_err(io_err(&path))?;
        Ok(lines.records)
    }

    /// Write one of the folder's JSON files atomically.
    pub(crate) fn write_json(&self, name: &str, value: &impl Serialize) -> Result<(), RunDirError> {
        write_json_atomic(&self.path(name), value)
    }
}

/// A JSON file as `T`, or `None` when it does not exist.
fn read_json<T: DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<Option<T>, RunDirError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    serde_json::from_str(crate::safe_io::strip_bom(&text))
        .map(Some)
        .map_err(|source| RunDirError::BadRecord {
            path: path.to_path_buf(),
            what,
            source,
        })
}

/// Write `value` as pretty JSON atomically (temp file + rename), so a reader never sees half a file; no temporary
/// file stays behind when the write fails.
pub(crate) fn write_json_atomic(path: &Path, value: &impl Serialize) -> Result<(), RunDirError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(value).expect("serialising a JSON value cannot fail");
    crate::safe_io::replace_atomic(path, &tmp, (text + "\n").as_bytes()).map_err(io_err(path))
}

/// The key of a step: `"<trajectory>#<step>"`.
pub fn step_key(trajectory: &str, step: usize) -> String {
    format!("{trajectory}#{step}")
}

#[cfg(test)]
mod tests;
