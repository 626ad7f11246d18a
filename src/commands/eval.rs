//! `eval`: evaluate a checkpoint on a benchmark (the embedded sample when `--data` is absent).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::model_spec;
use crate::backend::openai::normalize_endpoint;
use crate::backend::ModelSpec;
use crate::backend::OpenAiSettings;
use crate::cli::{BackendKind, EvalArgs};
use crate::eval::{run_eval_with, step_backend, EvalConfig, JudgeChoice, ServedConfig};
use crate::interrupt::Cancel;
use crate::preprocess::ImageProcessorConfig;
use crate::rundir::{self, ClaimedRun, RunDir};
use crate::shard::{SchedulerEnv, ShardSpec};

/// Every value checked before any work, each error naming its flag.
fn check_values(a: &EvalArgs) -> Result<()> {
    use crate::validate;
    validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    validate::pixel_bounds(a.model.min_pixels, a.model.max_pixels, validate::PATCH_SIDE)?;
    let s = &a.served;
    match s.backend {
        BackendKind::Local => {
            if a.model.model.is_empty() {
                anyhow::bail!(
                    "--model is required (a checkpoint folder or hub id), unless the prompts go to a server: \
                     --backend openai --endpoint URL --api-model NAME"
                );
            }
            validate::model_location("--model", &a.model.model)?;
            if s.endpoint.is_some()
                || s.api_model.is_some()
                || s.judge_endpoint.is_some()
                || s.judge_api_model.is_some()
            {
                anyhow::bail!("--endpoint, --api-model, --judge-endpoint and --judge-api-model need --backend openai");
            }
            if s.model_family.is_some() {
                anyhow::bail!(
                    "--model-family needs --backend openai (a local checkpoint's family is read from its config.json)"
                );
            }
        }
        BackendKind::Openai => {
            if s.endpoint.is_none() || s.api_model.is_none() {
                anyhow::bail!("--backend openai needs --endpoint URL and --api-model NAME");
            }
            if s.concurrency == 0 {
                anyhow::bail!("--concurrency 0: must be at least 1");
            }
            if !(s.request_timeout > 0.0 && s.request_timeout.is_finite()) {
                anyhow::bail!(
                    "--request-timeout {}: must be a positive number of seconds",
                    s.request_timeout
                );
            }
            let served_judge = s.judge_endpoint.is_some() || s.judge_api_model.is_some();
            if served_judge && (a.no_judge || a.judge_model.is_some()) {
                anyhow::bail!("--judge-endpoint and --judge-api-model conflict with --no-judge and --judge-model");
            }
        }
    }
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

/// Fetch the hub checkpoints the run loads (the model unless a server answers the step prompts, a separate
/// judge) into the cache, and check that folders carried in a bundle are whole.
fn fetch_models(spec: &ModelSpec, served: bool, judge: &JudgeChoice, data: &Path) -> Result<()> {
    let judge = match judge {
        JudgeChoice::Other(m) => Some(m.as_str()),
        _ => None,
    };
    let model = Some(spec.model.as_str()).filter(|m| !m.is_empty() && !served);
    crate::pack::check_present(data).context("--data")?;
    for (flag, model) in [("--model", model), ("--judge-model", judge)] {
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
    let served = served_config(&a)?;
    let moved_judge = served_judge(&a);
    let spec = model_spec(&a.model);
    let (data, mut data_source) = super::setup::resolve_data(a.data, &spec.hub)?;
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
    let mut rules = super::rules_for(a.rules, &data)?;
    if a.lenient_reading {
        rules.reading = crate::settings::Reading::Lenient;
    }
    let judge = match (a.no_judge, a.judge_model) {
        (true, _) => JudgeChoice::None,
        (false, Some(m)) => JudgeChoice::Other(m),
        (false, None) => match (&served, moved_judge) {
            (Some(s), Some((endpoint, model))) => JudgeChoice::Served(Box::new(OpenAiSettings {
                endpoint,
                api_model: model,
                // The judge may be another model: the step checkpoint's prompt counts do not apply to it.
                prompt_check: None,
                ..s.steps.clone()
            })),
            _ => JudgeChoice::SameModel,
        },
    };
    let semi_online = super::setup::semi_online(a.history, a.semi_online)?;
    let name = match &served {
        Some(s) => s.steps.api_model.clone(),
        None => a.model.model.clone(),
    };
    fetch_models(&spec, served.is_some(), &judge, &data)?;
    if let Some(dump) = &a.dump_prompts {
        check_dump(dump, &data, a.out.as_deref(), &spec.model, &judge)?;
    }
    let claim = claim_out(a.out, &name, shard)?;
    let cfg = EvalConfig {
        out: claim.dir().clone(),
        model: spec,
        served,
        devices: a.model.device.clone(),
        data,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        rules,
        system_prompt: a.system_prompt,
        // Replaced by the family of the model the backend loads (`run_eval_with`).
        family: crate::settings::ModelFamily::Qwen25Vl,
        coordinate_frame: a.coordinate_frame,
        judge,
        shard,
        cancel: Cancel::on_signals(),
        command_line: std::env::args().collect(),
        semi_online,
        dump_prompts: a.dump_prompts,
        data_source,
        allow_step_errors: a.allow_step_errors,
    };
    Ok((cfg, claim))
}

/// `--dump-prompts FILE` must not be inside what the run reads or writes (the benchmark, the run folder, a model
/// folder), nor an existing file that is not an earlier dump: the dump empties its file first.
fn check_dump(
    dump: &Path,
    data: &Path,
    out: Option<&Path>,
    model: &str,
    judge: &JudgeChoice,
) -> Result<()> {
    let mut guarded: Vec<(&str, &Path)> = vec![("benchmark", data)];
    guarded.extend(out.map(|o| ("run folder", o)));
    let judge = match judge {
        JudgeChoice::Other(m) => Some(m.as_str()),
        _ => None,
    };
    for (what, m) in [("model folder", Some(model)), ("judge model folder", judge)] {
        guarded.extend(m.map(Path::new).filter(|p| p.is_dir()).map(|p| (what, p)));
    }
    crate::eval::check_dump_target(dump, &guarded)
}

/// The server settings of `--backend openai` (`None` for a local run).
fn served_config(a: &EvalArgs) -> Result<Option<ServedConfig>> {
    let s = &a.served;
    let (Some(endpoint), Some(api_model), BackendKind::Openai) =
        (&s.endpoint, &s.api_model, s.backend)
    else {
        return Ok(None);
    };
    let (image, pixel_bounds_from) = served_image_config(a)?;
    let steps = OpenAiSettings {
        endpoint: normalize_endpoint(endpoint)?,
        api_model: api_model.clone(),
        api_key: super::setup::api_key("--api-key-env", s.api_key_env.as_deref())?,
        concurrency: s.concurrency,
        request_timeout: std::time::Duration::from_secs_f64(s.request_timeout),
        max_retries: s.max_retries,
        image,
        family: s.model_family,
        busy_wait: std::time::Duration::from_secs_f64(s.busy_wait),
        max_connection_failures: s.max_connection_failures,
        prompt_check: (!a.model.model.is_empty()).then(|| PathBuf::from(&a.model.model)),
    };
    Ok(Some(ServedConfig {
        steps,
        pixel_bounds_from,
    }))
}

/// The judge's server and model when `--judge-endpoint` or `--judge-api-model` moves it (each defaulting to the
/// step prompts' one).
fn served_judge(a: &EvalArgs) -> Option<(String, String)> {
    let s = &a.served;
    if s.judge_endpoint.is_none() && s.judge_api_model.is_none() {
        return None;
    }
    let endpoint = s.judge_endpoint.as_ref().or(s.endpoint.as_ref())?;
    let model = s.judge_api_model.as_ref().or(s.api_model.as_ref())?;
    Some((normalize_endpoint(endpoint).ok()?, model.clone()))
}

/// How the client resizes screenshots for a server: the pixel bounds of `--model DIR`'s
/// `preprocessor_config.json` when `--model` names a checkpoint folder, else the Qwen2-VL processor's defaults;
/// `--min-pixels`/`--max-pixels` override either. Returns the settings and where they came from.
fn served_image_config(a: &EvalArgs) -> Result<(ImageProcessorConfig, String)> {
    let (base, from) = if a.model.model.is_empty() {
        let from = "the Qwen2-VL image processor's defaults".to_string();
        (ImageProcessorConfig::default(), from)
    } else {
        let dir = Path::new(&a.model.model);
        if !dir.is_dir() {
            anyhow::bail!(
                "--model {}: with --backend openai, --model names a local checkpoint folder (for its pixel bounds)",
                a.model.model
            );
        }
        let cfg = ImageProcessorConfig::from_model_dir(dir).context("--model")?;
        (
            cfg,
            format!("{}", dir.join("preprocessor_config.json").display()),
        )
    };
    let (min, max) = crate::validate::effective_pixel_bounds(
        (a.model.min_pixels, a.model.max_pixels),
        (base.min_pixels, base.max_pixels),
        base.factor() as u64,
    )?;
    let overridden = a.model.min_pixels.is_some() || a.model.max_pixels.is_some();
    let from = if overridden {
        format!("{from}, with --min-pixels/--max-pixels")
    } else {
        from
    };
    Ok((base.with_pixel_bounds(min, max), from))
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
    let loading = super::setup::ExitOnStop::start(cfg.cancel.clone(), "loading the model");
    let backend = step_backend(&cfg)?;
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
    if let Some(w) = outcome.metrics.frame_warning() {
        eprintln!("warning: {w}");
    }
    let failed = outcome.metrics.prediction_errors.unwrap_or(0);
    if failed > 0 && !allow_step_errors {
        let (what, fix) = match cfg.served {
            Some(_) => ("answered", "Once the server answers again, run"),
            None => ("prepared", "Fix their inputs and run"),
        };
        let causes = crate::eval::error_causes(&crate::eval::step_errors(&cfg.out));
        anyhow::bail!(
            "{failed} of {} steps could not be {what} ({causes}; their lines in {} carry the `error`); they count \
             as missing predictions. {fix} the same command again to redo only them, or pass \
             --allow-step-errors to accept the run as it is",
            outcome.metrics.steps,
            cfg.out.path(rundir::PREDICTIONS).display()
        );
    }
    Ok(())
}
