//! Scoring a predictions file against a benchmark into a folder: `metrics.json`, `steps.jsonl`, `summary.md` and
//! `report.html` (what `score` runs).
//!
//! The predictions of a run (`RUN/predictions.jsonl`, its manifest beside it) are scored into the run, keeping its
//! judge results, against the run's own benchmark. Any other output folder becomes a scored folder: a copy of the
//! predictions and `scored.json` (what was scored against what) beside the scores, so that `report` and
//! `report --compare` read it exactly as written. Above `score` (the judgement) and `report` (the files), below
//! the command that parses the flags.

mod folder;
mod unmatched;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::predictions::PredictionSet;
use crate::report::ReportPaths;
use crate::rundir::{self, find_benchmark, Origin, RunDir};
use crate::score::{score_run, RunMetrics};
use crate::settings::{CoordinateFrame, RulePreset};

/// What to score, and where to (the command line's values, `--data` already resolved to a folder).
#[derive(Debug, Clone)]
pub(crate) struct ScoreJob {
    /// The predictions file.
    pub predictions: PathBuf,
    /// `--out`: the folder to score into; `None`: the predictions' own folder.
    pub out: Option<PathBuf>,
    /// The benchmark folder; `None`: the one the predictions' folder names, else the embedded sample.
    pub data: Option<PathBuf>,
    /// `--rules`; `None`: a run's own preset when scored into the run, else the benchmark's suggested one.
    pub rules: Option<RulePreset>,
    /// `--lenient-reading`.
    pub lenient_reading: bool,
    /// `--coordinate-frame`; `None`: a run's own frame, else image pixels.
    pub coordinate_frame: Option<CoordinateFrame>,
}

/// What a scoring wrote.
#[derive(Debug)]
pub(crate) struct Scored {
    /// The metrics.
    pub metrics: RunMetrics,
    /// `metrics.json`, `steps.jsonl` and `summary.md`.
    pub paths: ReportPaths,
    /// `report.html`.
    pub page: PathBuf,
}

/// The folder a predictions file lies in.
fn folder_of(predictions: &Path) -> RunDir {
    match predictions.parent() {
        Some(p) if !p.as_os_str().is_empty() => RunDir::new(p),
        _ => RunDir::new("."),
    }
}

/// What made the predictions: the origin of their folder (a run's manifest, a scored folder's record). An
/// unreadable record is an error unless `--out` sends the scores elsewhere.
fn origin_of(source: &RunDir, out_given: bool) -> anyhow::Result<Option<Origin>> {
    match source.origin() {
        Ok(o) => Ok(o),
        Err(e) if out_given => {
            tracing::warn!("{e}; the benchmark is not checked against it");
            Ok(None)
        }
        Err(e) => Err(e).context(
            "scoring cannot tell whether the benchmark matches and would write beside it; pass --out to \
             write the scores elsewhere",
        ),
    }
}

/// Score `job.predictions` and write the scores (warnings about the predictions go to stderr).
pub(crate) fn score_predictions_file(job: &ScoreJob) -> anyhow::Result<Scored> {
    let source = folder_of(&job.predictions);
    let origin = origin_of(&source, job.out.is_some())?;
    let named_by = match &origin {
        Some(Origin::Scored(_)) => source.path(rundir::SCORED),
        _ => source.path(rundir::MANIFEST),
    };
    let found = find_benchmark(job.data.as_deref(), origin.as_ref(), &named_by, true)?;
    // A run's predictions are read in the run's frame unless the flag says otherwise; others in image pixels.
    let frame = job
        .coordinate_frame
        .or_else(|| origin.as_ref().map(Origin::coordinate_frame))
        .unwrap_or_default();
    let preds = read_predictions(&job.predictions, frame)?;
    let unknown = crate::score::unknown_predictions(&found.bench, &preds);
    unmatched::refuse_unmatched(&found.bench, &preds, unknown.len(), &job.predictions)?;
    unmatched::warn_unknown(&found.bench, &preds, &unknown);
    let out = job.out.clone().map_or_else(|| source.clone(), RunDir::new);
    let into_run = matches!(origin, Some(Origin::Run(_))) && out == source;
    // A run folder keeps eval's rules unless --rules says otherwise; other scores take the benchmark's
    // suggested preset (its benchmark.json), else the default.
    let mut rules = match (&job.rules, &origin) {
        (Some(r), _) => r.clone(),
        (None, Some(o)) if into_run => o.rules().clone(),
        (None, _) => crate::dataset::BenchmarkInfo::suggested_rules(&found.bench.root)?,
    };
    if job.lenient_reading {
        rules.reading = crate::settings::Reading::Lenient;
    }
    let _claim = if into_run {
        None
    } else {
        Some(folder::prepare_scored_folder(&out, &job.predictions)?)
    };
    let _lock = into_run
        .then(|| rundir::RunLock::acquire(out.root()))
        .transpose()?;
    // A run folder keeps eval's judge results: its predictions are scored exactly as eval scores them.
    let judgements = if into_run {
        out.judgements()?
    } else {
        Vec::new()
    };
    // Predictions of a run whose prompts showed the model's own history get that procedure's figures too.
    let history = origin.as_ref().map(Origin::history).unwrap_or_default();
    let (metrics, steps) = score_run(
        &rules,
        &found.bench,
        &preds,
        &judgements,
        !judgements.is_empty(),
        &history,
    );
    if !into_run {
        let made_by = origin.as_ref().and_then(Origin::made_by).cloned();
        folder::write_score_record(&out, &job.predictions, &found, &rules, frame, made_by)?;
    }
    let paths = crate::report::write_all(&out, &metrics, &steps)?;
    let page = crate::report::html::write_run(&out)?;
    Ok(Scored {
        metrics,
        paths,
        page,
    })
}

/// The predictions of `file` in `frame`; malformed lines and replaced duplicates are told on stderr, a file
/// without a prediction is an error.
fn read_predictions(file: &Path, frame: CoordinateFrame) -> anyhow::Result<PredictionSet> {
    let preds = PredictionSet::read(file)?.in_frame(frame);
    for m in &preds.malformed {
        eprintln!("warning: {}: {m}", file.display());
    }
    if preds.is_empty() {
        anyhow::bail!(
            "{} holds no prediction (expected one JSON line per step: trajectory, step, response)",
            file.display()
        );
    }
    if preds.duplicates > 0 {
        eprintln!(
            "note: {} prediction lines were replaced by later lines for the same step",
            preds.duplicates
        );
    }
    Ok(preds)
}
