//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::Path;

use anyhow::{Context, Result};

use super::model_spec;
use crate::cli::EvalArgs;
use crate::engine::{run_eval, EvalConfig, JudgeChoice};

/// Issue 18: every value checked before any work, each error naming its flag.
fn check_values(a: &EvalArgs) -> Result<()> {
    use crate::validate;
    validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    validate::pixel_bounds(a.model.min_pixels, a.model.max_pixels, validate::PATCH_SIDE)?;
    validate::device(&a.model.device)?;
    validate::model_location("--model", &a.model.model)?;
    if let Some(j) = a.judge_model.as_deref() {
        validate::model_location("--judge-model", j)?;
    }
    Ok(())
}

/// Build the engine configuration from the command line.
pub fn config(a: EvalArgs) -> Result<EvalConfig> {
    let rules = super::score::rules_by_name(&a.rules)?;
    let system_prompt = a.system_prompt.parse().map_err(anyhow::Error::msg)?;
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
        out: match a.out {
            Some(out) => out,
            // Issue 18: a fresh folder two runs cannot share (millisecond time + random suffix, create_dir).
            None => crate::runlock::create_fresh_run_dir(Path::new("runs"), &a.model.model)?,
        },
        model: model_spec(&a.model),
        data,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        rules,
        system_prompt,
        judge,
    })
}

/// Entry point of `eval`.
pub fn run(args: EvalArgs) -> Result<()> {
    check_values(&args)?; // hook (issue 18)
    crate::interrupt::install(); // hook (issue 18): Ctrl-C/SIGTERM stop after saving what is finished
    let cfg = config(args)?;
    // Hook (issue 18): one process per run folder, held until this function returns (or the process dies).
    let _lock = crate::runlock::RunLock::acquire(&cfg.out)?;
    eprintln!("run folder: {}", cfg.out.display());
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
