//! `merge`: turn the shard folders of a sharded run (`RUN/shards/I-of-N/`, written by `eval --shard`) into what
//! one unsharded run would have written into `RUN/`: `predictions.jsonl`, `judgements.jsonl`, `metrics.json`,
//! `steps.jsonl`, `summary.md`, `throughput.json` and a `manifest.json` naming the shards.
//!
//! Pure file logic (no model): every shard must exist, be finished and share the settings (unless
//! `allow_partial`); lines are written in benchmark order, so merging twice gives the same files.

mod files;
mod shards;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use files::{merge_lines, merge_throughput, MergedPhase, MergedThroughput, ShardThroughput};
pub(crate) use shards::{discover, settings_differences, ShardState};

use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::records::{whole_lines, JudgementLine, RunSettings, Throughput};
use crate::rundir::{self, find_benchmark, Origin, RunDir};
use crate::score::RunMetrics;
use crate::settings::RulePreset;

/// Why a run could not be merged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MergeError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The run folder has no `shards/I-of-N/` folder.
    #[error("{}: no shards to merge ({reason}); expected {}/I-of-N/ folders written by `eval --shard I/N --out {}`",
            run.display(), rundir::SHARDS, run.display())]
    NoShards {
        /// The run folder.
        run: PathBuf,
        /// What was found.
        reason: String,
    },
    /// Shard folders of several counts.
    #[error("{}: shard folders of several shard counts ({counts}); one run folder holds one split",
            run.display())]
    MixedCounts {
        /// The run folder.
        run: PathBuf,
        /// The counts found.
        counts: String,
    },
    /// Shards missing or not finished (without `--allow-partial`).
    #[error("{n} of {count} shards are not complete:\n{list}\nRun them (each resumes where it stopped), or \
             merge with --allow-partial to score what exists (the rest counts as missing predictions)")]
    Incomplete {
        /// How many.
        n: usize,
        /// Shard count.
        count: usize,
        /// One line per shard: folder and problem.
        list: String,
    },
    /// Shards made with other settings.
    #[error("the shards were made with different settings, so they are not one run:\n{diffs}")]
    SettingsDiffer {
        /// One line per differing setting.
        diffs: String,
    },
    /// The benchmark cannot be found or is not the one the shards evaluated.
    #[error("{0}")]
    Data(String),
    /// The shards' trajectory lists overlap or do not cover the benchmark.
    #[error("the shards' trajectory lists are inconsistent: {0}")]
    Coverage(String),
    /// Writing the reports failed.
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    /// Reading or writing the run folder failed.
    #[error(transparent)]
    RunDir(#[from] crate::rundir::RunDirError),
}

/// What to merge.
#[derive(Debug, Clone)]
pub(crate) struct MergeOptions {
    /// The run folder given to every shard's `--out`.
    pub run: PathBuf,
    /// Benchmark folder; default: the one named in the shards' manifests.
    pub data: Option<PathBuf>,
    /// Rule preset for the metrics; default: the shards' preset.
    pub rules: Option<RulePreset>,
    /// Score what exists when shards are missing or unfinished.
    pub allow_partial: bool,
}

/// `manifest.json` of a merged run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MergedManifest {
    /// Version of this file's layout.
    pub schema_version: u32,
    /// The shards, in order, with their state.
    pub merged_from: Vec<MergedShard>,
    /// Some shard was missing or unfinished (`--allow-partial`).
    pub partial: bool,
    /// The settings the shards share (their `settings` without `shard`).
    pub settings: RunSettings,
    /// The benchmark folder scored against.
    pub data: PathBuf,
    /// The rule preset of the metrics.
    pub rules: RulePreset,
    /// Earliest shard start (Unix seconds).
    pub started_at_unix: Option<u64>,
    /// Latest shard finish (Unix seconds).
    pub finished_at_unix: Option<u64>,
}

/// One shard as recorded in a merged manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MergedShard {
    /// `I/N`.
    pub shard: String,
    /// Its folder, relative to the run folder.
    pub dir: String,
    /// Why it was incomplete; `None` when complete.
    pub problem: Option<String>,
    /// Its trajectory count (from its manifest).
    pub trajectories: usize,
}

/// What a merge produced.
#[derive(Debug)]
pub(crate) struct MergeOutcome {
    /// The readable summary table.
    pub summary: String,
    /// The shards as found.
    pub shards: Vec<ShardState>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> MergeError + '_ {
    move |source| MergeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), MergeError> {
    let tmp = path.with_extension("merge.tmp");
    crate::safe_io::replace_atomic(path, &tmp, contents).map_err(io_err(path))
}

/// The shards' benchmark: `--data`, else the folder their manifests name, else the embedded sample when it is
/// theirs; always the one whose hash their manifests record.
fn load_benchmark(data: Option<&Path>, first: &ShardState) -> Result<Benchmark, MergeError> {
    let manifest = first
        .manifest
        .as_ref()
        .expect("the first shard with a manifest");
    let origin = Origin::Run(Box::new(manifest.header()));
    let named_by = RunDir::new(&first.dir).path(rundir::MANIFEST);
    Ok(find_benchmark(data, Some(&origin), &named_by, false)?.bench)
}

/// Merge the shards of `opts.run` into `opts.run` (see the module documentation).
pub(crate) fn merge_run(opts: &MergeOptions) -> Result<MergeOutcome, MergeError> {
    let shards = discover(&opts.run)?;
    check_complete(&shards, opts.allow_partial)?;
    let diffs = settings_differences(&shards);
    if !diffs.is_empty() {
        return Err(MergeError::SettingsDiffer {
            diffs: diffs.join("\n"),
        });
    }
    let first = shards
        .iter()
        .find(|s| s.manifest.is_some())
        .ok_or_else(|| MergeError::Data("no shard has a manifest.json: nothing to merge".into()))?;
    let mut settings = first.common_settings().expect("a shard with a manifest");
    settings.shard = None;
    let bench = load_benchmark(opts.data.as_deref(), first)?;
    check_coverage(&bench, &shards)?;
    let rules = opts.rules.clone().unwrap_or_else(|| {
        let m = first.manifest.as_ref().expect("a shard with a manifest");
        m.rules.clone()
    });
    let run = RunDir::new(&opts.run);
    let predictions = merged_jsonl(&run, &bench, &shards, rundir::PREDICTIONS)?.unwrap_or_default();
    let judgements = merged_jsonl(&run, &bench, &shards, rundir::JUDGEMENTS)?;
    let judged = settings.judge.is_some();
    let history = settings.history.clone();
    let (metrics, steps) = score(
        &rules,
        &bench,
        &predictions,
        judgements.as_deref(),
        judged,
        &history,
        settings.coordinate_frame,
    );
    crate::report::write_all(&run, &metrics, &steps)?;
    write_throughput(&run, &shards)?;
    write_manifest(&run, &shards, &bench, rules, settings)?;
    // The HTML report is a view of the files above: failing to write it must not fail the merge.
    if let Err(e) = crate::report::html::write_run(&run) {
        tracing::warn!("report.html not written: {e}");
    }
    Ok(MergeOutcome {
        summary: crate::report::render_summary(&metrics),
        shards,
    })
}

fn check_complete(shards: &[ShardState], allow_partial: bool) -> Result<(), MergeError> {
    let bad: Vec<String> = shards
        .iter()
        .filter_map(|s| Some(format!("  {}: {}", s.dir.display(), s.problem.as_ref()?)))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    if allow_partial {
        for line in &bad {
            tracing::warn!("--allow-partial: {}", line.trim_start());
        }
        return Ok(());
    }
    Err(MergeError::Incomplete {
        n: bad.len(),
        count: shards.len(),
        list: bad.join("\n"),
    })
}

/// Every listed trajectory is in the benchmark and in one shard only; complete shards together cover it all.
fn check_coverage(bench: &Benchmark, shards: &[ShardState]) -> Result<(), MergeError> {
    let known: HashSet<&str> = bench.trajectories.iter().map(|t| t.id.as_str()).collect();
    let mut seen: HashSet<String> = HashSet::new();
    for s in shards.iter().filter(|s| s.manifest.is_some()) {
        for id in shards::listed_trajectories(s) {
            if !known.contains(id.as_str()) {
                return Err(MergeError::Coverage(format!(
                    "{} lists trajectory {id}, not in the benchmark",
                    s.dir.display()
                )));
            }
            if !seen.insert(id.clone()) {
                return Err(MergeError::Coverage(format!(
                    "trajectory {id} is in two shards (again in {})",
                    s.dir.display()
                )));
            }
        }
    }
    if shards.iter().all(ShardState::complete) && seen.len() != known.len() {
        return Err(MergeError::Coverage(format!(
            "the shards hold {} of the benchmark's {} trajectories",
            seen.len(),
            known.len()
        )));
    }
    Ok(())
}

/// Merge one JSONL file of every shard into `RUN/name`; `None` (nothing written) when no shard has the file.
fn merged_jsonl(
    run: &RunDir,
    bench: &Benchmark,
    shards: &[ShardState],
    name: &str,
) -> Result<Option<String>, MergeError> {
    let mut texts = Vec::new();
    for s in shards {
        let path = s.dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(t) => texts.push(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => texts.push(None),
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    if texts.iter().all(Option::is_none) {
        return Ok(None);
    }
    let per_shard: Vec<Vec<&str>> = texts
        .iter()
        .map(|t| t.as_deref().map(whole_lines).unwrap_or_default())
        .collect();
    let merged = merge_lines(bench, &per_shard);
    write_atomic(&run.path(name), merged.as_bytes())?;
    Ok(Some(merged))
}

/// Score exactly as `eval` does (the predictions read in the run's coordinate frame): metrics of the predictions, the judge summary (when the run had a judge or
/// judgements exist), the count of prediction lines carrying an error, and the semi-online figures of a run whose
/// history was the model's own.
pub fn score(
    rules: &RulePreset,
    bench: &Benchmark,
    predictions: &str,
    judgements: Option<&str>,
    judged: bool,
    history: &crate::records::History,
    frame: crate::settings::CoordinateFrame,
) -> (RunMetrics, Vec<crate::score::StepScore>) {
    let preds = PredictionSet::parse(predictions).in_frame(frame);
    let judgements =
        crate::records::parse_lines::<JudgementLine>(judgements.unwrap_or_default()).records;
    crate::score::score_run(rules, bench, &preds, &judgements, judged, history)
}

/// The earliest start and the latest finish of the shards with a manifest.
fn span(shards: &[ShardState]) -> (Option<u64>, Option<u64>) {
    let manifests = || shards.iter().filter_map(|s| s.manifest.as_ref());
    let start = manifests().map(|m| m.started_at_unix).min();
    let end = manifests().filter_map(|m| m.finished_at_unix).max();
    (start, end)
}

/// A shard's `throughput.json`, when it has a readable one (a shard stopped early may have none).
fn read_throughput(path: &Path) -> Option<Throughput> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text)
        .map_err(|e| {
            tracing::warn!(
                "{}: not a throughput record ({e}); left out",
                path.display()
            )
        })
        .ok()
}

fn write_throughput(run: &RunDir, shards: &[ShardState]) -> Result<(), MergeError> {
    let files = shards
        .iter()
        .map(|s| {
            let path = RunDir::new(&s.dir).path(rundir::THROUGHPUT);
            (s.spec.to_string(), read_throughput(&path))
        })
        .collect();
    let merged = merge_throughput(files, span(shards));
    Ok(run.write_json(rundir::THROUGHPUT, &merged)?)
}

fn write_manifest(
    run: &RunDir,
    shards: &[ShardState],
    bench: &Benchmark,
    rules: RulePreset,
    settings: RunSettings,
) -> Result<(), MergeError> {
    let (started_at_unix, finished_at_unix) = span(shards);
    let manifest = MergedManifest {
        schema_version: 1,
        merged_from: shards
            .iter()
            .map(|s| MergedShard {
                shard: s.spec.to_string(),
                dir: format!("{}/{}", rundir::SHARDS, s.spec.dir_name()),
                problem: s.problem.clone(),
                trajectories: shards::listed_trajectories(s).len(),
            })
            .collect(),
        partial: !shards.iter().all(ShardState::complete),
        settings,
        data: bench.root.clone(),
        rules,
        started_at_unix,
        finished_at_unix,
    };
    Ok(run.write_json(rundir::MANIFEST, &manifest)?)
}
