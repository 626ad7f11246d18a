//! `eval` end to end: open or resume the run folder, predict the pending steps, judge the pending trajectories,
//! score everything, and write `metrics.json`, `steps.jsonl`, `summary.md`, `judgements.jsonl`,
//! `throughput.json` and `manifest.json`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::batcher::MAX_PREFILL_TOKENS;
use super::judge::{judge_trajectories, pending_trajectories, summarize};
use super::loaded::{LoadedModel, ModelSpec};
use super::memory;
use super::pipeline::{run_phase, Runner};
use super::progress::PhaseStats;
use super::prompts::{self, SystemPrompt};
use super::rundir::{self, completed_keys, step_key_of, trajectory_key_of};
use super::scheduler::BatchLimits;
use super::steps::{pending_steps, predict_steps};
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::score::{score_predictions, RulePreset};

/// Which model answers the aggregation prompts.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeChoice {
    /// The evaluated model.
    SameModel,
    /// Another checkpoint (folder or hub id).
    Other(String),
    /// No aggregation phase.
    None,
}

/// Everything `eval` needs, validated by the CLI.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    /// The evaluated model and how to load it.
    pub model: ModelSpec,
    /// Benchmark folder (already resolved: the sample benchmark when the user gave none).
    pub data: PathBuf,
    /// Run folder.
    pub out: PathBuf,
    /// `--batch-size`.
    pub batch_size: usize,
    /// `--max-batch-tokens`; automatic when `None`.
    pub max_batch_tokens: Option<usize>,
    /// `--max-new-tokens`.
    pub max_new_tokens: usize,
    /// Rule preset for the metrics.
    pub rules: RulePreset,
    /// System prompt source.
    pub system_prompt: SystemPrompt,
    /// Judge model.
    pub judge: JudgeChoice,
}

/// What a finished `eval` produced.
#[derive(Debug)]
pub struct EvalOutcome {
    /// The run folder.
    pub out: PathBuf,
    /// `metrics.json` as written.
    pub metrics: Value,
    /// The readable summary table.
    pub summary: String,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The judge model's spec, if there is an aggregation phase.
fn judge_spec(cfg: &EvalConfig) -> Option<ModelSpec> {
    match &cfg.judge {
        JudgeChoice::SameModel => Some(cfg.model.clone()),
        JudgeChoice::Other(m) => Some(ModelSpec {
            model: m.clone(),
            ..cfg.model.clone()
        }),
        JudgeChoice::None => None,
    }
}

/// Everything that changes the predictions or verdicts: a resumed run must have the same.
fn settings(cfg: &EvalConfig, model: &LoadedModel) -> Result<Value> {
    let data_hash = prompts::sha256_hex(&std::fs::read(cfg.data.join("data.jsonl"))?);
    let judge = match (&cfg.judge, judge_spec(cfg)) {
        (JudgeChoice::SameModel, _) => json!({"model": cfg.model.model, "hash": model.fingerprint}),
        (_, Some(spec)) => {
            let files = crate::model::ModelFiles::resolve(&spec.model)?;
            json!({"model": spec.model, "hash": super::loaded::fingerprint(&files)?})
        }
        (_, None) => Value::Null,
    };
    Ok(json!({
        "model": cfg.model.model,
        "model_hash": model.fingerprint,
        "dtype": model.dtype_name(),
        "data_hash": data_hash,
        "prompt_hashes": prompts::template_hashes(),
        "system_prompt": cfg.system_prompt,
        "image_processor": model.kit.image,
        "max_new_tokens": cfg.max_new_tokens,
        "judge": judge,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// `--batch-size`, `--max-new-tokens`, and `--max-batch-tokens` or the automatic budget from free memory.
fn batch_limits(cfg: &EvalConfig, model: &LoadedModel) -> BatchLimits {
    let m = &model.model;
    BatchLimits {
        max_seqs: cfg.batch_size.max(1),
        max_new_tokens: cfg.max_new_tokens.max(1),
        max_batch_tokens: cfg.max_batch_tokens.unwrap_or_else(|| {
            let reserve = memory::prefill_reserve(m, MAX_PREFILL_TOKENS);
            let min = 4096 + cfg.max_new_tokens;
            memory::auto_batch_tokens(
                memory::free_bytes(m.device()),
                m.kv_bytes_per_token(),
                reserve,
                min,
            )
        }),
    }
}

/// Run (or resume) an evaluation.
pub fn run_eval(cfg: &EvalConfig) -> Result<EvalOutcome> {
    let started = now_secs();
    let bench = Benchmark::load(&cfg.data)
        .with_context(|| format!("loading the benchmark {}", cfg.data.display()))?;
    let model = LoadedModel::load(&cfg.model)?;
    let settings = settings(cfg, &model)?;
    let previous = rundir::open_or_create(&cfg.out, &settings)?;
    let limits = batch_limits(cfg, &model);
    let mut manifest = json!({
        "settings": settings,
        "model_path": model.dir,
        "device": cfg.model.device,
        "data": cfg.data,
        "rules": cfg.rules,
        "batch_limits": limits,
        "kv_bytes_per_token": model.model.kv_bytes_per_token(),
        "ops": crate::ops::manifest_entry(),
        "decode_attention": format!("{:?}", model.model.decode_attention()),
        "profiled": crate::model::profile::enabled(),
        "versions": {"mobile-r1-eval": env!("CARGO_PKG_VERSION"), "candle": env!("MOBILE_R1_EVAL_CANDLE_VERSION"),
                     "git_revision": env!("MOBILE_R1_EVAL_GIT_REV")},
        "started_at_unix": previous.as_ref().and_then(|p| p.get("started_at_unix").cloned()).unwrap_or(started.into()),
        "resumed_at_unix": previous.as_ref().map(|_| started),
        "finished_at_unix": Value::Null,
    });
    rundir::write_json_atomic(&cfg.out.join("manifest.json"), &manifest)?;
    tracing::info!(
        "run folder {}; batch limits {:?}",
        cfg.out.display(),
        limits
    );

    let mut phases = vec![run_steps(cfg, &bench, &model, limits)?.summary()];
    let preds = PredictionSet::read(cfg.out.join("predictions.jsonl"))?;
    if let Some(spec) = judge_spec(cfg) {
        let judge = if cfg.judge == JudgeChoice::SameModel {
            model
        } else {
            drop(model); // one model in memory at a time
            LoadedModel::load(&spec)?
        };
        phases.push(run_judge(cfg, &bench, &judge, limits, &preds)?.summary());
    }

    let (metrics, summary) = score_and_report(cfg, &bench, &preds)?;
    let throughput = json!({
        "phases": phases,
        "peak_rss_bytes": memory::peak_rss_bytes(),
        "peak_device_bytes": memory::peak_device_bytes(),
        "batch_limits": limits,
        // Per-section device-synchronised timings when MOBILE_R1_EVAL_PROFILE is on (slower run), else null.
        "profile": crate::model::profile::enabled()
            .then(|| crate::model::profile::to_json(&crate::model::profile::snapshot())),
    });
    rundir::write_json_atomic(&cfg.out.join("throughput.json"), &throughput)?;
    manifest["finished_at_unix"] = now_secs().into();
    rundir::write_json_atomic(&cfg.out.join("manifest.json"), &manifest)?;
    Ok(EvalOutcome {
        out: cfg.out.clone(),
        metrics,
        summary,
    })
}

fn run_steps(
    cfg: &EvalConfig,
    bench: &Benchmark,
    model: &LoadedModel,
    limits: BatchLimits,
) -> Result<PhaseStats> {
    let path = cfg.out.join("predictions.jsonl");
    let jobs = pending_steps(bench, &completed_keys(&path, step_key_of)?);
    let total = bench.num_steps();
    tracing::info!(
        "steps: {} to predict, {} already done",
        jobs.len(),
        total - jobs.len()
    );
    let runner = Runner {
        model: &model.model,
        kit: &model.kit,
        limits,
    };
    run_phase("steps", &path, total, jobs.len(), |out, stats, progress| {
        predict_steps(
            &runner,
            bench,
            cfg.system_prompt,
            &jobs,
            out,
            stats,
            progress,
        )
    })
}

fn run_judge(
    cfg: &EvalConfig,
    bench: &Benchmark,
    judge: &LoadedModel,
    limits: BatchLimits,
    preds: &PredictionSet,
) -> Result<PhaseStats> {
    let path = cfg.out.join("judgements.jsonl");
    let jobs = pending_trajectories(bench, &completed_keys(&path, trajectory_key_of)?);
    let runner = Runner {
        model: &judge.model,
        kit: &judge.kit,
        limits,
    };
    run_phase(
        "judge",
        &path,
        bench.trajectories.len(),
        jobs.len(),
        |out, stats, progress| {
            judge_trajectories(&runner, bench, preds, &jobs, out, stats, progress)
        },
    )
}

/// Score the predictions, add the judge summary and the prediction errors, and write the reports.
fn score_and_report(
    cfg: &EvalConfig,
    bench: &Benchmark,
    preds: &PredictionSet,
) -> Result<(Value, String)> {
    let (mut metrics, scored) = score_predictions(&cfg.rules, bench, preds);
    let judgements = read_optional(&cfg.out.join("judgements.jsonl"))?;
    if let Value::Object(j) = summarize(bench, &judgements) {
        if !matches!(cfg.judge, JudgeChoice::None) || !judgements.is_empty() {
            metrics.extra.extend(j);
            let verdicts = crate::report::read_judgements(&judgements);
            crate::report::add_judge_summary(&mut metrics, bench, &verdicts);
        }
    }
    let errors = read_optional(&cfg.out.join("predictions.jsonl"))?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("error").is_some_and(|e| !e.is_null()))
        .count();
    metrics
        .extra
        .insert("prediction_errors".into(), errors.into());
    crate::report::write_all(&cfg.out, &metrics, &scored.steps)?;
    // The HTML report is a view of the files above: failing to write it must not fail the run.
    if let Err(e) = crate::report::html::write_run(&cfg.out) {
        tracing::warn!("report.html not written: {e}");
    }
    let summary = crate::report::render_summary(&metrics);
    Ok((serde_json::to_value(&metrics)?, summary))
}

fn read_optional(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}
