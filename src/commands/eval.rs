//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::model_spec;
use crate::cli::EvalArgs;
use crate::eval::{run_eval, EvalConfig, JudgeChoice};

/// A fresh run folder under `runs/`: `runs/<UTC time>-<model name>`.
fn default_run_dir(model: &str) -> PathBuf {
    let name: String = model
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("model")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut dir = PathBuf::from("runs").join(format!("{secs}-{name}"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = PathBuf::from("runs").join(format!("{secs}-{name}-{n}"));
    }
    dir
}

/// Build the engine configuration from the command line.
pub fn config(a: EvalArgs) -> Result<EvalConfig> {
    let data = match a.data {
        Some(d) => d,
        None => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    let judge = match (a.no_judge, a.judge_model) {
        (true, _) => JudgeChoice::None,
        (false, Some(m)) => JudgeChoice::Other(m),
        (false, None) => JudgeChoice::SameModel,
    };
    Ok(EvalConfig {
        out: a.out.unwrap_or_else(|| default_run_dir(&a.model.model)),
        model: model_spec(&a.model),
        devices: a.model.device.clone(),
        data,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        rules: a.rules.preset(),
        system_prompt: a.system_prompt,
        judge,
    })
}

/// Entry point of `eval`.
pub fn run(args: EvalArgs) -> Result<()> {
    let cfg = config(args)?;
    let outcome = run_eval(&cfg)?;
    println!("{}", outcome.summary);
    println!("Results written to {}:", outcome.out.display());
    for f in [
        "metrics.json",
        "steps.jsonl",
        "summary.md",
        "predictions.jsonl",
        "judgements.jsonl",
        "throughput.json",
        "manifest.json",
    ] {
        if outcome.out.join(f).exists() {
            println!("  {}", outcome.out.join(f).display());
        }
    }
    Ok(())
}
