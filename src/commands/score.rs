//! `score`: judge a predictions file against a benchmark and write `metrics.json`, `steps.jsonl`, `summary.md`.
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::ScoreArgs;
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::records::ManifestHeader;
use crate::report;
use crate::score::score_predictions;

/// Load `--data`, or the embedded sample when absent.
pub fn load_benchmark(data: Option<&Path>) -> anyhow::Result<Benchmark> {
    let dir = match data {
        Some(d) => d.to_path_buf(),
        None => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    Benchmark::load(&dir).with_context(|| format!("loading benchmark {}", dir.display()))
}

/// The run that made a predictions file: its folder's `manifest.json` (a run, shard or merged run folder), if any.
struct RunFolder {
    dir: PathBuf,
    manifest: PathBuf,
    /// What the run recorded (the benchmark folder and the SHA-256 of its `data.jsonl` among them), or why the
    /// file is not a run manifest this version reads.
    header: Result<ManifestHeader, String>,
}

impl RunFolder {
    fn header(&self) -> Option<&ManifestHeader> {
        self.header.as_ref().ok()
    }
}

fn run_folder_of(predictions: &Path) -> anyhow::Result<Option<RunFolder>> {
    let dir = match predictions.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let manifest = dir.join("manifest.json");
    let text = match std::fs::read_to_string(&manifest) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", manifest.display())),
    };
    let header = serde_json::from_str(&text).map_err(|e| e.to_string());
    Ok(Some(RunFolder {
        dir,
        manifest,
        header,
    }))
}

/// The benchmark folder to score against — `--data`, else the run's own benchmark, else the sample —
/// and, for a run's predictions, the check that it is the benchmark the run predicted.
fn benchmark_for(data: Option<&Path>, run: Option<&RunFolder>) -> anyhow::Result<PathBuf> {
    let header = run.and_then(RunFolder::header);
    let dir = match (data, header.map(|h| &h.data)) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) if d.join("data.jsonl").is_file() => d.clone(),
        (None, _) => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    if let Some(h) = header {
        let want = &h.settings.data_hash;
        let file = dir.join("data.jsonl");
        let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        let have = crate::fingerprint::sha256_hex(&bytes);
        if &have != want {
            let r = run.expect("a header comes from a run");
            anyhow::bail!(
                "{} was made on another benchmark (data.jsonl sha256 {}…) than {} (sha256 {}…); scoring its \
                 predictions against it would be meaningless. Pass --data with the run's benchmark ({})",
                r.manifest.display(),
                &want[..want.len().min(12)],
                file.display(),
                &have[..12],
                h.data.display()
            );
        }
    }
    Ok(dir)
}

/// Entry point.
pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let run = run_folder_of(&args.predictions)?;
    let data = benchmark_for(args.data.as_deref(), run.as_ref())?;
    let rules = super::rules_for(args.rules, &data)?;
    let bench =
        Benchmark::load(&data).with_context(|| format!("loading benchmark {}", data.display()))?;
    let preds = PredictionSet::read(&args.predictions)?;
    for m in &preds.malformed {
        eprintln!("warning: {}: {m}", args.predictions.display());
    }
    if preds.duplicates > 0 {
        eprintln!(
            "note: {} prediction lines were replaced by later lines for the same step",
            preds.duplicates
        );
    }
    let (metrics, scored) = score_predictions(&rules, &bench, &preds);
    warn_unknown(&scored.unknown, preds.len(), &data);
    // A run folder (its manifest matched above) keeps eval's judge results; any other folder is written as before.
    let out = match (args.out.clone(), &run) {
        (Some(out), _) => out,
        (None, Some(RunFolder { dir, header: Ok(_), .. })) => dir.clone(),
        (None, Some(RunFolder { manifest, header: Err(e), .. })) => anyhow::bail!(
            "{} is not a run manifest ({e}), so scoring cannot tell whether its benchmark matches and would \
             write beside it; pass --out to write the scores elsewhere",
            manifest.display()
        ),
        (None, None) => default_out(&args.predictions),
    };
    let into_run = run.as_ref().is_some_and(|r| out == r.dir);
    let _lock = into_run
        .then(|| crate::runlock::RunLock::acquire(&out))
        .transpose()?;
    // A run folder keeps eval's judge results: its predictions are scored exactly as eval scores them.
    let (metrics, steps) = if into_run {
        let judgements = crate::eval::rundir::read_records(&out.join("judgements.jsonl"))?;
        crate::score::score_run(&rules, &bench, &preds, &judgements, !judgements.is_empty())
    } else {
        (metrics, scored.steps)
    };
    let paths = report::write_all(&out, &metrics, &steps)?;
    let page = report::html::write_scored(&out, &bench, &metrics, &steps, &args.predictions)?;
    print!("{}", report::render_summary(&metrics));
    println!(
        "\nWrote {}, {}, {} and {}",
        paths.metrics.display(),
        paths.steps.display(),
        paths.summary.display(),
        page.display()
    );
    Ok(())
}

/// One line about predictions that match no benchmark step; a hint about `--data` when they are most of them.
fn warn_unknown(unknown: &[(String, usize)], total: usize, data: &Path) {
    if unknown.is_empty() {
        return;
    }
    let shown: Vec<String> = unknown
        .iter()
        .take(10)
        .map(|(t, s)| format!("({t}, {s})"))
        .collect();
    let more = if unknown.len() > 10 { " …" } else { "" };
    let hint = if 2 * unknown.len() > total {
        format!(
            "; most predictions are for another benchmark than {} (pass the right --data)",
            data.display()
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

fn default_out(predictions: &Path) -> PathBuf {
    match predictions.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
