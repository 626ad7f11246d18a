//! A scored folder: `--out` taken for scores of predictions that are not its own run's (never another run's
//! folder, never over other predictions), the predictions copied in, and `scored.json` saying what was scored
//! against what.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::fingerprint::sha256_hex;
use crate::records::{ScoreRecord, Versions, SCORED_SCHEMA_VERSION};
use crate::rundir::{self, FoundBenchmark, RunDir};

/// Take `out` for a scored folder: never another run's folder, never a folder holding predictions that are not
/// the ones scored (unless it is an earlier scored folder); the predictions are copied in.
pub(super) fn prepare_scored_folder(
    out: &RunDir,
    predictions: &Path,
) -> anyhow::Result<rundir::ClaimedRun> {
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

pub(super) fn write_score_record(
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
