//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::model_spec;
use crate::backend::ModelSpec;
use crate::cli::EvalArgs;
use crate::eval::{load_backend, run_eval_with, EvalConfig, JudgeChoice};
use crate::interrupt::Cancel;
use crate::rundir::{self, ClaimedRun, RunDir};
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

/// Take the run folder: `--out`, or a fresh folder under `runs/`. With `--shard`, `--out RUN` is the run folder
/// all shards share; this shard writes only into `RUN/shards/I-of-N/`, so shards never write the same file.
fn claim_out(out: Option<PathBuf>, model: &str, shard: Option<ShardSpec>) -> Result<ClaimedRun> {
    let claim = match (out, shard) {
        (Some(run), Some(s)) => RunDir::new(run).shard(s).claim(),
        (None, Some(s)) => anyhow::bail!(
            "--shard {s} needs --out RUN: the run folder all shards share (then `merge RUN`)"
        ),
        (Some(out), None) => RunDir::new(out).claim(),
        // A fresh folder two runs cannot share (millisecond time + random suffix, create_dir).
        (None, None) => RunDir::claim_fresh(Path::new("runs"), model),
    };
    claim.context("--out")
}

/// Fetch the hub checkpoints of the run (the model, a separate judge) into the cache, and check that folders
/// carried in a bundle are whole.
fn fetch_models(spec: &ModelSpec, judge: &JudgeChoice, data: &Path) -> Result<()> {
    let judge = match judge {
        JudgeChoice::Other(m) => Some(m.as_str()),
        _ => None,
    };
    crate::pack::check_present(data).context("--data")?;
    for (flag, model) in [
        ("--model", Some(spec.model.as_str())),
        ("--judge-model", judge),
    ] {
        let Some(m) = model else { continue };
        if Path::new(m).is_dir() {
            crate::pack::check_present(Path::new(m)).with_context(|| format!("{flag} {m}"))?;
        } else {
            crate::model::ModelFiles::resolve(m, &spec.hub)
                .with_context(|| format!("{flag} {m}"))?;
        }
    }
    Ok(())
}

/// Build the evaluation's configuration from the command line and take its run folder (held, locked, until the
/// claim is dropped); `env` holds the scheduler variables `--shard auto` reads (taken from the process
/// environment once, by the caller). `--data hf:…` and hub checkpoints are fetched first, so a failed or stopped
/// download leaves no run folder behind.
pub fn config(a: EvalArgs, env: &SchedulerEnv) -> Result<(EvalConfig, ClaimedRun)> {
    let shard = a.shard.map(|s| s.resolve(env)).transpose()?;
    let spec = model_spec(&a.model);
    let (data, mut data_source) = super::hub::resolve_data(a.data, &spec.hub)?;
    let data = match data {
        Some(d) => d,
        None => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    if data_source.is_none() {
        // A benchmark carried in a bundle keeps the Hub origin `pack` recorded.
        data_source = crate::pack::data_source_of(&data);
    }
    let rules = super::rules_for(a.rules, &data)?;
    let judge = match (a.no_judge, a.judge_model) {
        (true, _) => JudgeChoice::None,
        (false, Some(m)) => JudgeChoice::Other(m),
        (false, None) => JudgeChoice::SameModel,
    };
    fetch_models(&spec, &judge, &data)?;
    let claim = claim_out(a.out, &a.model.model, shard)?;
    let cfg = EvalConfig {
        out: claim.dir().clone(),
        model: spec,
        devices: a.model.device.clone(),
        data,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        rules,
        system_prompt: a.system_prompt,
        judge,
        shard,
        cancel: Cancel::on_signals(),
        command_line: std::env::args().collect(),
        data_source,
    };
    Ok((cfg, claim))
}

/// Entry point of `eval`.
pub fn run(args: EvalArgs, env: &SchedulerEnv) -> Result<()> {
    check_values(&args)?;
    let allow_step_errors = args.allow_step_errors;
    crate::interrupt::install(); // Ctrl-C/SIGTERM stop after saving what is finished
                                 // One process per run folder, held until this function returns (or the process dies).
    let (cfg, _claim) = config(args, env)?;
    let out = cfg.out.root();
    eprintln!("run folder: {}", out.display());
    if let Some(s) = cfg.shard {
        tracing::info!("shard {s}: writing into {}", out.display());
    }
    // Until the first prompt runs there is nothing to save: a stop while the model loads exits at once.
    let loading = super::hub::ExitOnStop::start(cfg.cancel.clone(), "loading the model");
    let backend = load_backend(&cfg, &cfg.model)?;
    drop(loading);
    let outcome = run_eval_with(&cfg, backend)?;
    println!("{}", outcome.summary);
    println!("Results written to {}:", out.display());
    for f in [
        rundir::METRICS,
        rundir::STEPS,
        rundir::SUMMARY,
        rundir::REPORT_HTML,
        rundir::PREDICTIONS,
        rundir::JUDGEMENTS,
        rundir::THROUGHPUT,
        rundir::MANIFEST,
    ] {
        let path = cfg.out.path(f);
        if path.exists() {
            println!("  {}", path.display());
        }
    }
    let failed = outcome.metrics.prediction_errors.unwrap_or(0);
    if failed > 0 && !allow_step_errors {
        anyhow::bail!(
            "{failed} of {} steps could not be prepared (their lines in {} carry an `error`, and the log says why); \
             they count as missing predictions. Fix their inputs and run the same command again to redo only \
             them, or pass --allow-step-errors to accept the run as it is",
            outcome.metrics.steps,
            cfg.out.path(rundir::PREDICTIONS).display()
        );
    }
    Ok(())
}
