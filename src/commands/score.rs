//! `score`: judge a predictions file against a benchmark and write `metrics.json`, `steps.jsonl`, `summary.md`.
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::ScoreArgs;
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
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

fn default_out(predictions: &Path) -> PathBuf {
    match predictions.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Entry point.
pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let rules = args.rules.preset();
    let bench = load_benchmark(args.data.as_deref())?;
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
    if !scored.unknown.is_empty() {
        let shown: Vec<String> = scored
            .unknown
            .iter()
            .take(10)
            .map(|(t, s)| format!("({t}, {s})"))
            .collect();
        eprintln!(
            "warning: {} predictions match no benchmark step (trajectory, step): {}{}",
            scored.unknown.len(),
            shown.join(" "),
            if scored.unknown.len() > 10 {
                " …"
            } else {
                ""
            }
        );
    }
    let out = args.out.unwrap_or_else(|| default_out(&args.predictions));
    let paths = report::write_all(&out, &metrics, &scored.steps)?;
    let page =
        report::html::write_scored(&out, &bench, &metrics, &scored.steps, &args.predictions)?;
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
