//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::model_spec;
use crate::cli::EvalArgs;
use crate::eval::{run_eval, EvalConfig, JudgeChoice};
use crate::shard::{SchedulerEnv, ShardSpec};

/// Every value checked before any work, each error naming its flag.
fn check_values(a: &EvalArgs) -> Result<()> {
    use crate::validate;
    validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    validate::pixel_bounds(a.model.min_pixels, a.model.max_pixels, validate::PATCH_SIDE)?;
    validate::model_location("--model", &a.model.model)?;
    if let Some(j) = a.judge_model.as_deref() {
        validate::model_location("--judge-model", j)?;
    }
    Ok(())
}

/// With `--shard`, `--out RUN` is the run folder all shards share; this shard writes only into
/// `RUN/shards/I-of-N/`, so shards never write the same file.
fn out_dir(out: Option<PathBuf>, model: &str, shard: Option<ShardSpec>) -> Result<PathBuf> {
    match (out, shard) {
        (Some(run), Some(s)) => Ok(run.join(crate::merge::SHARDS_DIR).join(s.dir_name())),
        (None, Some(s)) => anyhow::bail!(
            "--shard {s} needs --out RUN: the run folder all shards share (then `merge RUN`)"
        ),
        (Some(out), None) => Ok(out),
        // A fresh folder two runs cannot share (millisecond time + random suffix, create_dir).
        (None, None) => Ok(crate::runlock::create_fresh_run_dir(
            Path::new("runs"),
            model,
        )?),
    }
}

/// Build the engine configuration from the command line; `env` holds the scheduler variables `--shard auto`
/// reads (taken from the process environment once, by the caller).
pub fn config(a: EvalArgs, env: &SchedulerEnv) -> Result<EvalConfig> {
    let shard = a.shard.map(|s| s.resolve(env)).transpose()?;
    let data = match a.data {
        Some(d) => d,
        None => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    let rules = super::rules_for(a.rules, &data)?;
    let judge = match (a.no_judge, a.judge_model) {
        (true, _) => JudgeChoice::None,
        (false, Some(m)) => JudgeChoice::Other(m),
        (false, None) => JudgeChoice::SameModel,
    };
    Ok(EvalConfig {
        out: out_dir(a.out, &a.model.model, shard)?,
        model: model_spec(&a.model),
        devices: a.model.device.clone(),
        data,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        rules,
        system_prompt: a.system_prompt,
        judge,
        shard,
    })
}

/// Entry point of `eval`.
pub fn run(args: EvalArgs, env: &SchedulerEnv) -> Result<()> {
    check_values(&args)?;
    crate::interrupt::install(); // Ctrl-C/SIGTERM stop after saving what is finished
    let cfg = config(args, env)?;
    // One process per run folder, held until this function returns (or the process dies).
    let _lock = crate::runlock::RunLock::acquire(&cfg.out)?;
    eprintln!("run folder: {}", cfg.out.display());
    if let Some(s) = cfg.shard {
        tracing::info!("shard {s}: writing into {}", cfg.out.display());
    }
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
