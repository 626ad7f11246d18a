//! `score`: judge a predictions file against a benchmark and write `metrics.json`, `steps.jsonl`, `summary.md`
//! and `report.html`.
//!
//! The predictions of a run (`RUN/predictions.jsonl`, its manifest beside it) are scored into the run, keeping its
//! judge results, against the run's own benchmark. Any other output folder becomes a scored folder: a copy of the
//! predictions and `scored.json` (what was scored against what) beside the scores, so that `report` and
//! `report --compare` read it exactly as written.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::cli::ScoreArgs;
use crate::dataset::Benchmark;
use crate::fingerprint::sha256_hex;
use crate::predictions::PredictionSet;
use crate::records::{ScoreRecord, Versions, SCORED_SCHEMA_VERSION};
use crate::report;
use crate::rundir::{self, find_benchmark, FoundBenchmark, Origin, RunDir};
use crate::score::score_run;

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

/// Entry point.
pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let source = folder_of(&args.predictions);
    let origin = origin_of(&source, args.out.is_some())?;
    let named_by = match &origin {
        Some(Origin::Scored(_)) => source.path(rundir::SCORED),
        _ => source.path(rundir::MANIFEST),
    };
    let hub = super::setup::hub(&args.hub, crate::interrupt::Cancel::new());
    let (data, _) = super::setup::resolve_data(args.data.clone(), &hub)?;
    let found = find_benchmark(data.as_deref(), origin.as_ref(), &named_by, true)?;
    // A run's predictions are read in the run's frame unless the flag says otherwise; others in image pixels.
    let frame = args
        .coordinate_frame
        .or_else(|| origin.as_ref().map(Origin::coordinate_frame))
        .unwrap_or_default();
    let preds = PredictionSet::read(&args.predictions)?.in_frame(frame);
    for m in &preds.malformed {
        eprintln!("warning: {}: {m}", args.predictions.display());
    }
    if preds.is_empty() {
        anyhow::bail!(
            "{} holds no prediction (expected one JSON line per step: trajectory, step, response)",
            args.predictions.display()
        );
    }
    if preds.duplicates > 0 {
        eprintln!(
            "note: {} prediction lines were replaced by later lines for the same step",
            preds.duplicates
        );
    }
    let unknown = crate::score::unknown_predictions(&found.bench, &preds);
    super::unmatched::refuse_unmatched(&found.bench, &preds, unknown.len(), &args.predictions)?;
    warn_unknown(&found.bench, &preds, &unknown);
    let out = args.out.clone().map_or_else(|| source.clone(), RunDir::new);
    let into_run = matches!(origin, Some(Origin::Run(_))) && out == source;
    // A run folder keeps eval's rules unless --rules says otherwise; other scores take the benchmark's
    // suggested preset (its benchmark.json), else the default.
    let mut rules = match (args.rules, &origin) {
        (Some(r), _) => r.preset(),
        (None, Some(o)) if into_run => o.rules().clone(),
        (None, _) => super::rules_for(None, &found.bench.root)?,
    };
    if args.lenient_reading {
        rules.reading = crate::settings::Reading::Lenient;
    }
    let _claim = if into_run {
        None
    } else {
        Some(prepare_scored_folder(&out, &args.predictions)?)
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
        write_score_record(&out, &args.predictions, &found, &rules, frame, made_by)?;
    }
    let paths = report::write_all(&out, &metrics, &steps)?;
    let page = report::html::write_run(&out)?;
    print!("{}", report::render_summary(&metrics));
    if let Some(w) = metrics.frame_warning() {
        eprintln!("warning: {w}");
    }
    println!(
        "\nWrote {}, {}, {} and {}",
        paths.metrics.display(),
        paths.steps.display(),
        paths.summary.display(),
        page.display()
    );
    Ok(())
}

/// Take `out` for a scored folder: never another run's folder, never a folder holding predictions that are not
/// the ones scored (unless it is an earlier scored folder); the predictions are copied in.
fn prepare_scored_folder(out: &RunDir, predictions: &Path) -> anyhow::Result<rundir::ClaimedRun> {
    if out.path(rundir::MANIFEST).exists() {
        anyhow::bail!(
            "--out {} is a run folder (it has a manifest.json): scoring other predictions into it would \
             overwrite that run's results; choose another --out",
            out.root().display()
        );
    }
    let copy = out.path(rundir::PREDICTIONS);
    let same_file = same_file(&copy, predictions);
    if copy.exists() && !same_file && !out.path(rundir::SCORED).exists() {
        anyhow::bail!(
            "--out {} already holds a predictions.jsonl that is not {}; choose another --out",
            out.root().display(),
            predictions.display()
        );
    }
    let claim = out.claim().context("--out")?;
    if !same_file {
        let tmp: PathBuf = out.path(".predictions.jsonl.tmp");
        let bytes = std::fs::read(predictions)
            .with_context(|| format!("reading {}", predictions.display()))?;
        crate::safe_io::replace_atomic(&copy, &tmp, &bytes)
            .with_context(|| format!("writing {}", copy.display()))?;
    }
    Ok(claim)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn write_score_record(
    out: &RunDir,
    predictions: &Path,
    found: &FoundBenchmark,
    rules: &crate::settings::RulePreset,
    coordinate_frame: crate::settings::CoordinateFrame,
    run_settings: Option<crate::records::RunSettings>,
) -> anyhow::Result<()> {
    let copy = out.path(rundir::PREDICTIONS);
    let bytes = std::fs::read(&copy).with_context(|| format!("reading {}", copy.display()))?;
    let record = ScoreRecord {
        schema_version: SCORED_SCHEMA_VERSION,
        predictions: predictions.to_path_buf(),
        predictions_sha256: sha256_hex(&bytes),
        data: found.bench.root.clone(),
        data_hash: found.hash.clone(),
        rules: rules.clone(),
        coordinate_frame,
        scored_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        versions: Versions::current(),
        run_settings,
    };
    out.write_json(rundir::SCORED, &record)?;
    Ok(())
}

/// One line about predictions that match no benchmark step; a hint about `--data` when they are most of them.
fn warn_unknown(bench: &Benchmark, preds: &PredictionSet, unknown: &[(String, usize)]) {
    if unknown.is_empty() {
        return;
    }
    let total = preds.len();
    let shown: Vec<String> = unknown
        .iter()
        .take(10)
        .map(|(t, s)| format!("({t}, {s})"))
        .collect();
    let more = if unknown.len() > 10 { " …" } else { "" };
    let hint = if 2 * unknown.len() > total {
        format!(
            "; most predictions are for another benchmark than {} (pass the right --data)",
            bench.root.display()
        )
    } else {
        String::new()
    };
    eprintln!(
        "warning: {} of {total} predictions match no benchmark step (trajectory, step): {}{more}{hint}",
        unknown.len(),
        shown.join(" "),
    );
}
