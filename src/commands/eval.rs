//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::model_spec;
use crate::cli::EvalArgs;
use crate::eval::{run_eval, EvalConfig, JudgeChoice};
use crate::interrupt::Cancel;
use crate::records::{HistorySource, Procedure};
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

/// The semi-online procedure of `--history` and `--semi-online` (`None`: the gold history); `--semi-online`
/// without `--history predicted` is refused rather than ignored.
pub fn semi_online(
    history: HistorySource,
    procedure: Option<Procedure>,
) -> Result<Option<Procedure>> {
    match (history, procedure) {
        (HistorySource::Gold, None) => Ok(None),
        (HistorySource::Gold, Some(p)) => anyhow::bail!(
            "--semi-online {p} needs --history predicted (with the gold history every step is independent)"
        ),
        (HistorySource::Predicted, p) => Ok(Some(p.unwrap_or(Procedure::Uis1Sop))),
    }
}

/// Build the evaluation's configuration from the command line and take its run folder (held, locked, until the
/// claim is dropped); `env` holds the scheduler variables `--shard auto` reads (taken from the process
/// environment once, by the caller).
pub fn config(a: EvalArgs, env: &SchedulerEnv) -> Result<(EvalConfig, ClaimedRun)> {
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
    let semi_online = semi_online(a.history, a.semi_online)?;
    let claim = claim_out(a.out, &a.model.model, shard)?;
    let cfg = EvalConfig {
        out: claim.dir().clone(),
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
        cancel: Cancel::on_signals(),
        command_line: std::env::args().collect(),
        semi_online,
        dump_prompts: a.dump_prompts,
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
    let outcome = run_eval(&cfg)?;
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
