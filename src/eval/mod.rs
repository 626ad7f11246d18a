//! The evaluation program: every step of every trajectory as an independent prompt (phase 1), one aggregation
//! (judge) prompt per trajectory (phase 2), then the scorer. Both phases run through a [`Backend`] and append
//! each result as it finishes, so a killed run resumes without losing or duplicating a step.

mod checks;
mod dump;
pub mod history;
mod judge;
mod phase;
pub mod progress;
pub mod prompts;
mod screens;
mod semi_online;
mod steps;

use std::path::PathBuf;

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

pub(crate) use checks::{error_causes, step_errors};
pub(crate) use dump::{check_target as check_dump_target, PromptDump};
pub(crate) use judge::{pending_trajectories, JudgePhase};
pub use phase::{run_phase, run_phase_dumping, Phase};
pub use prompts::SystemPrompt;
pub(crate) use semi_online::{Decide, SemiOnlineConfig, SemiOnlinePhase};
pub use steps::{pending_steps, prediction_line, StepJob, StepPhase};

use crate::backend::{
    fingerprint, Backend, LoadedModel, LocalBackend, ModelSpec, MultiBackend, OpenAiBackend,
    OpenAiSettings,
};
use crate::dataset::Benchmark;
use crate::engine::{memory, BatchLimits};
use crate::interrupt::Cancel;
use crate::predictions::PredictionSet;
use crate::records::{
    History, JudgeSettings, JudgementLine, Manifest, PhaseSummary, PredictionLine, Procedure,
    RunSettings, SemiOnlineSettings, Throughput, Versions, LINE_SCHEMA_VERSION,
    MANIFEST_SCHEMA_VERSION,
};
use crate::rundir::{self, RunDir};
use crate::score::{Metrics, RulePreset};
use crate::settings::{CoordinateFrame, DeviceSpec, ModelFamily};

/// Which model answers the aggregation prompts.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeChoice {
    /// The evaluated model.
    SameModel,
    /// Another checkpoint (folder or hub id).
    Other(String),
    /// No aggregation phase.
    None,
    /// A model on an OpenAI-compatible server (`--judge-endpoint`, `--judge-api-model`).
    Served(Box<OpenAiSettings>),
}

/// The server that answers a run's prompts instead of a local checkpoint (`eval --backend openai`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServedConfig {
    /// The step prompts' server (and the judge's, unless [`JudgeChoice::Served`] names another).
    pub steps: OpenAiSettings,
    /// Where the pixel bounds came from, for the manifest.
    pub pixel_bounds_from: String,
}

/// Everything `eval` needs, validated by the CLI.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    /// The evaluated model and how to load it (with `served`, only its pixel bounds count).
    pub model: ModelSpec,
    /// An OpenAI-compatible server that answers the prompts instead of `model`.
    pub served: Option<ServedConfig>,
    /// The devices to run it on: one copy of the model per device (`model.device` is ignored).
    pub devices: Vec<DeviceSpec>,
    /// Benchmark folder (already resolved: the sample benchmark when the user gave none).
    pub data: PathBuf,
    /// Run folder (taken by the caller, who holds its lock).
    pub out: RunDir,
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
    /// The evaluated model's family: its default system prompt and coordinate frame (the loaded backend's,
    /// set by [`run_eval_with`]).
    pub family: ModelFamily,
    /// `--coordinate-frame`; the family's default when `None`.
    pub coordinate_frame: Option<CoordinateFrame>,
    /// Judge model.
    pub judge: JudgeChoice,
    /// `--shard`: evaluate only this shard's trajectories (`out` is then the shard's own folder).
    pub shard: Option<crate::shard::ShardSpec>,
    /// A stop request (Ctrl-C, SIGTERM): nothing more is admitted, what runs finishes and is saved.
    pub cancel: Cancel,
    /// The command line the run was started with (for the command that resumes it).
    pub command_line: Vec<String>,
    /// The Hub dataset the benchmark was fetched from, for the manifest.
    pub data_source: Option<crate::records::DataSource>,
    /// `--history predicted --semi-online P`: the step prompts show the model's own earlier outputs under this
    /// procedure; `None`: the gold history.
    pub semi_online: Option<Procedure>,
    /// `--dump-prompts`: write every step prompt built into this file.
    pub dump_prompts: Option<PathBuf>,
    /// `--allow-step-errors`: judge a trajectory even when some of its steps failed (without those steps); else
    /// such a trajectory is left unjudged until its steps are redone.
    pub allow_step_errors: bool,
}

impl EvalConfig {
    /// The frame the agent's coordinates are read in: the flag's, else the family's default.
    pub fn frame(&self) -> CoordinateFrame {
        self.coordinate_frame
            .unwrap_or_else(|| self.family.default_coordinate_frame())
    }

    /// What the step prompts' system turn is made from.
    pub fn prompt_style(&self) -> prompts::PromptStyle {
        prompts::PromptStyle {
            source: self.system_prompt,
            family: self.family,
            frame: self.frame(),
        }
    }

    /// The history of the run's step prompts, as its manifest records it.
    pub fn history(&self) -> History {
        match self.semi_online {
            None => History::Gold,
            Some(p) => History::Predicted(Box::new(SemiOnlineSettings::new(p, self.rules.clone()))),
        }
    }
}

/// What a finished `eval` produced.
#[derive(Debug)]
pub struct EvalOutcome {
    /// `metrics.json` as written.
    pub metrics: Metrics,
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
        JudgeChoice::None | JudgeChoice::Served(_) => None,
    }
}

/// The backend of the step prompts: the server of `--backend openai`, else the checkpoint on the run's devices.
pub(crate) fn step_backend(cfg: &EvalConfig) -> Result<Box<dyn Backend>> {
    match &cfg.served {
        Some(s) => Ok(Box::new(connect(cfg, &s.steps)?)),
        None => load_backend(cfg, &cfg.model),
    }
}

/// A server's backend for this run.
fn connect(cfg: &EvalConfig, s: &OpenAiSettings) -> Result<OpenAiBackend> {
    OpenAiBackend::connect(s.clone(), cfg.max_new_tokens, cfg.cancel.clone())
        .with_context(|| format!("connecting to {}", s.endpoint))
}

/// The judge phase's backend (`None` without a judge phase): the step backend itself, or another model loaded or
/// reached once the step backend is dropped (one model in memory at a time).
fn judge_backend(cfg: &EvalConfig, steps: Box<dyn Backend>) -> Result<Option<Box<dyn Backend>>> {
    Ok(match &cfg.judge {
        JudgeChoice::None => None,
        JudgeChoice::SameModel => Some(steps),
        JudgeChoice::Other(m) => {
            drop(steps);
            let spec = ModelSpec {
                model: m.clone(),
                ..cfg.model.clone()
            };
            Some(load_backend(cfg, &spec)?)
        }
        JudgeChoice::Served(s) => {
            drop(steps);
            Some(Box::new(connect(cfg, s)?))
        }
    })
}

/// Load a checkpoint of `spec` on each of the run's devices, each under its own batch limits (budget from its own
/// free memory).
pub fn load_devices(cfg: &EvalConfig, spec: &ModelSpec) -> Result<Vec<LocalBackend>> {
    cfg.devices
        .iter()
        .map(|&device| {
            let spec = ModelSpec {
                device,
                ..spec.clone()
            };
            let loaded = LoadedModel::load(&spec)?;
            let context = loaded.model.config().text.max_position_embeddings;
            crate::validate::new_tokens_fit_context(cfg.max_new_tokens, context)
                .with_context(|| format!("model {}", spec.model))?;
            let limits = BatchLimits::auto(
                &loaded.model,
                cfg.batch_size,
                cfg.max_new_tokens,
                cfg.max_batch_tokens,
            );
            Ok(LocalBackend::new(&spec.model, loaded, limits).with_cancel(cfg.cancel.clone()))
        })
        .collect()
}

/// The run's backend for `spec`: one device's checkpoint, or several sharing the work through a
/// [`MultiBackend`].
pub(crate) fn load_backend(cfg: &EvalConfig, spec: &ModelSpec) -> Result<Box<dyn Backend>> {
    let mut devices = load_devices(cfg, spec)?;
    if devices.len() == 1 {
        Ok(Box::new(devices.remove(0)))
    } else {
        Ok(Box::new(MultiBackend::local(devices)?))
    }
}

/// Everything that changes the predictions or verdicts: a resumed run must have the same.
fn settings(cfg: &EvalConfig, backend: &dyn Backend) -> Result<RunSettings> {
    let data = cfg.data.join("data.jsonl");
    let bytes = std::fs::read(&data).with_context(|| format!("reading {}", data.display()))?;
    let info = backend.info();
    // A served model is named by its id on the server; a checkpoint as `--model` gave it.
    let model = match &cfg.served {
        Some(_) => info.model.clone(),
        None => cfg.model.model.clone(),
    };
    let judge = match (&cfg.judge, judge_spec(cfg)) {
        (JudgeChoice::SameModel, _) => Some(JudgeSettings {
            model: model.clone(),
            hash: info.fingerprint.clone(),
            weights: info.weights.clone(),
        }),
        (JudgeChoice::Served(s), _) => Some(JudgeSettings {
            model: s.api_model.clone(),
            hash: connect(cfg, s)?.info().fingerprint.clone(),
            weights: Default::default(),
        }),
        (_, Some(spec)) => {
            let files = crate::model::ModelFiles::resolve(&spec.model, &spec.hub)
                .with_context(|| format!("--judge-model {}", spec.model))?;
            Some(JudgeSettings {
                model: spec.model,
                hash: fingerprint(&files)?,
                weights: crate::fingerprint::of_files(&files.weights)?,
            })
        }
        (_, None) => None,
    };
    Ok(RunSettings {
        model,
        model_hash: info.fingerprint.clone(),
        weights: info.weights.clone(),
        dtype: info.dtype.clone(),
        data_hash: crate::fingerprint::sha256_hex(&bytes),
        prompt_hashes: prompts::template_hashes()
            .into_iter()
            .chain(
                cfg.semi_online
                    .map(prompts::procedure_template_hashes)
                    .unwrap_or_default(),
            )
            .chain(prompts::family_template_hashes(cfg.family))
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        system_prompt: cfg.system_prompt,
        coordinate_frame: cfg.frame(),
        image_processor: backend.image_config().clone(),
        max_new_tokens: cfg.max_new_tokens,
        judge,
        version: env!("CARGO_PKG_VERSION").into(),
        shard: None,
        history: cfg.history(),
        family: info.family,
    })
}

/// The manifest of a run starting (or resuming) now.
fn manifest(
    cfg: &EvalConfig,
    backend: &dyn Backend,
    settings: RunSettings,
    previous: Option<Manifest>,
) -> Manifest {
    let info = backend.info();
    let now = now_secs();
    Manifest {
        schema_version: MANIFEST_SCHEMA_VERSION,
        line_schema_version: LINE_SCHEMA_VERSION,
        settings,
        model_path: info.model_path.clone(),
        device: info.device.clone(),
        data: cfg.data.clone(),
        rules: cfg.rules.clone(),
        batch_limits: backend.limits(),
        kv_bytes_per_token: info.kv_bytes_per_token,
        ops: info.ops.clone(),
        versions: Versions::current(),
        started_at_unix: previous.as_ref().map_or(now, |p| p.started_at_unix),
        resumed_at_unix: previous.map(|_| now),
        finished_at_unix: None,
        shard: None,
        screenshots: Default::default(),
        served: cfg.served.as_ref().map(|s| served_record(cfg, s)),
        data_source: cfg.data_source.clone(),
    }
}

/// The manifest's record of the servers (never the key).
fn served_record(cfg: &EvalConfig, s: &ServedConfig) -> crate::records::ServedRecord {
    let judge = match &cfg.judge {
        JudgeChoice::Served(j) => Some(j),
        _ => None,
    };
    crate::records::ServedRecord {
        endpoint: s.steps.endpoint.clone(),
        model: s.steps.api_model.clone(),
        judge_endpoint: judge.map(|j| j.endpoint.clone()),
        judge_model: judge.map(|j| j.api_model.clone()),
        concurrency: s.steps.concurrency,
        request_timeout_seconds: s.steps.request_timeout.as_secs_f64(),
        max_retries: s.steps.max_retries,
        busy_wait_seconds: Some(s.steps.busy_wait.as_secs_f64()),
        max_connection_failures: Some(s.steps.max_connection_failures),
        pixel_bounds_from: s.pixel_bounds_from.clone(),
    }
}

/// Run (or resume) an evaluation, with the evaluated model already loaded as `backend` (on `cfg.devices` or not: the caller
/// chooses, e.g. to wrap a device); a separate judge model is still loaded from `cfg`.
pub fn run_eval_with(cfg: &EvalConfig, backend: Box<dyn Backend>) -> Result<EvalOutcome> {
    // The family is the loaded model's: it chooses the default system prompt and coordinate frame.
    let cfg = &EvalConfig {
        family: backend.info().family,
        ..cfg.clone()
    };
    run_loaded(cfg, load_benchmark(cfg)?, backend)
}

fn load_benchmark(cfg: &EvalConfig) -> Result<Benchmark> {
    Benchmark::load(&cfg.data)
        .with_context(|| format!("loading the benchmark {}", cfg.data.display()))
}

/// Run (or resume) an evaluation of `bench` by `backend`: the manifest, both phases, the scores and reports.
fn run_loaded(
    cfg: &EvalConfig,
    bench: Benchmark,
    backend: Box<dyn Backend>,
) -> Result<EvalOutcome> {
    let (bench, mut manifest) = open_run(cfg, bench, backend.as_ref())?;
    let steps = run_steps(cfg, &bench, backend.as_ref())
        .map_err(|e| checks::served_stop(cfg, "steps", bench.num_steps(), e))?;
    let mut phases = vec![steps.summary()];
    checks::stop_if_interrupted(cfg, "steps", bench.num_steps())?;
    // The step model's section table (a separately loaded judge keeps its own).
    let profile = backend.profile_snapshot();
    let preds =
        PredictionSet::read_optional(cfg.out.path(rundir::PREDICTIONS))?.in_frame(cfg.frame());
    if let Some(judge) = judge_backend(cfg, backend)? {
        let total = bench.trajectories.len();
        let judged = run_judge(cfg, &bench, judge.as_ref(), &preds)
            .map_err(|e| checks::served_stop(cfg, "judged trajectories", total, e))?;
        phases.push(judged.summary());
        checks::stop_if_interrupted(cfg, "judged trajectories", total)?;
    }

    let (metrics, summary) = score_and_report(cfg, &bench, &preds)?;
    cfg.out.write_json(
        rundir::THROUGHPUT,
        &throughput(phases, manifest.batch_limits, profile),
    )?;
    manifest.finished_at_unix = Some(now_secs());
    cfg.out.write_json(rundir::MANIFEST, &manifest)?;
    Ok(EvalOutcome { metrics, summary })
}

/// Open (or create) the run folder for `bench`, refusing other settings, and write its manifest: returns the
/// part of `bench` this run evaluates (its shard) and the manifest.
fn open_run(
    cfg: &EvalConfig,
    bench: Benchmark,
    backend: &dyn Backend,
) -> Result<(Benchmark, Manifest)> {
    let mut settings = settings(cfg, backend)?;
    // The whole benchmark's screenshots, so every shard of a run records the same.
    let screenshots = screens::fingerprint(&bench)?;
    // A shard evaluates its part only; its spec is a setting, so a resume cannot mix two shards' folders.
    let bench = match cfg.shard {
        Some(s) => {
            settings.shard = Some(s.to_string());
            crate::shard::select(&bench, backend.image_config(), s)
        }
        None => bench,
    };
    let previous = cfg.out.check_resume(&settings)?;
    if let Some(p) = &previous {
        screens::check_resume(&cfg.out, &bench, p, &screenshots)?;
    }
    let mut manifest = manifest(cfg, backend, settings, previous);
    manifest.screenshots = screenshots;
    manifest.shard = cfg.shard.map(|s| {
        let ids = bench.trajectories.iter().map(|t| t.id.clone()).collect();
        crate::shard::ShardManifestEntry::new(s, ids)
    });
    cfg.out.write_json(rundir::MANIFEST, &manifest)?;
    tracing::info!(
        "run folder {}; batch limits {:?}",
        cfg.out.root().display(),
        backend.limits()
    );
    Ok((bench, manifest))
}

/// `throughput.json` of a run: its phases, peak memory, and the step model's profile when one was taken.
fn throughput(
    phases: Vec<PhaseSummary>,
    limits: BatchLimits,
    profile: Option<crate::ops::ProfileSnapshot>,
) -> Throughput {
    let mut t = Throughput::new(phases, limits);
    t.peak_rss_bytes = memory::peak_rss_bytes();
    t.peak_device_bytes = t
        .phases
        .iter()
        .filter_map(|p| p.stats.peak_device_bytes)
        .max();
    t.profile = profile;
    t
}

fn run_steps(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
) -> Result<crate::records::PhaseStats> {
    let dump = cfg
        .dump_prompts
        .as_deref()
        .map(PromptDump::create)
        .transpose()?;
    if let Some(procedure) = cfg.semi_online {
        return run_semi_online(cfg, bench, backend, procedure, dump.as_ref());
    }
    let path = cfg.out.path(rundir::PREDICTIONS);
    let jobs = pending_steps(bench, &cfg.out.completed_steps()?);
    tracing::info!(
        "steps: {} to predict, {} already done",
        jobs.len(),
        bench.num_steps() - jobs.len()
    );
    checks::first_prompt_checks(cfg, bench, backend, &jobs)?;
    let phase = StepPhase {
        bench,
        jobs,
        system: cfg.prompt_style(),
        image: backend.image_config(),
        max_new_tokens: cfg.max_new_tokens,
    };
    run_phase_dumping(backend, &phase, &path, dump.as_ref())
}

/// The step phase of a semi-online run: each trajectory's steps as a chain, resumed from the saved lines.
fn run_semi_online(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
    procedure: Procedure,
    dump: Option<&PromptDump>,
) -> Result<crate::records::PhaseStats> {
    let path = cfg.out.path(rundir::PREDICTIONS);
    let saved: Vec<PredictionLine> = cfg.out.read_lines(rundir::PREDICTIONS)?;
    let semi = SemiOnlineConfig {
        procedure,
        decide: Decide::Rules(&cfg.rules),
        system: cfg.prompt_style(),
        image: backend.image_config(),
        max_new_tokens: cfg.max_new_tokens,
    };
    let phase = SemiOnlinePhase::new(bench, &saved, semi);
    tracing::info!(
        "steps ({procedure} history): {} chains to run, {} steps at most, {} done or not to be reached",
        phase.first_steps().len(),
        phase.pending(),
        bench.num_steps() - phase.pending()
    );
    // Later prompts grow with the answers; the checks see each chain's first prompt (a longer one runs alone).
    checks::first_prompt_checks(cfg, bench, backend, &phase.first_steps())?;
    run_phase_dumping(backend, &phase, &path, dump)
}

fn run_judge(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
    preds: &PredictionSet,
) -> Result<crate::records::PhaseStats> {
    let path = cfg.out.path(rundir::JUDGEMENTS);
    let reached_only = cfg.semi_online.is_some();
    let judgements = cfg.out.judgements()?;
    let plan = pending_trajectories(
        bench,
        preds,
        &judgements,
        reached_only,
        cfg.allow_step_errors,
    );
    log_plan(&plan);
    let indices: Vec<usize> = plan.jobs.iter().map(|(ti, _)| *ti).collect();
    checks::largest_judge_prompt_fits(cfg, bench, backend, preds, &indices)?;
    let phase = JudgePhase {
        bench,
        preds,
        jobs: plan.jobs,
        max_new_tokens: cfg.max_new_tokens,
    };
    run_phase(backend, &phase, &path)
}

/// What the judge phase is about to do, and why it leaves trajectories out.
fn log_plan(plan: &judge::JudgePlan) {
    tracing::info!(
        "judge: {} to judge ({} whose steps changed since their verdict), {} already judged",
        plan.jobs.len(),
        plan.stale,
        plan.current
    );
    if plan.skipped > 0 {
        tracing::warn!(
            "judge: {} trajectories not judged because some of their steps failed (redo them by running the same              command again once their inputs are fixed, or pass --allow-step-errors to judge without them)",
            plan.skipped
        );
    }
}

/// Score the predictions, add the judge summary and the prediction errors, and write the reports.
fn score_and_report(
    cfg: &EvalConfig,
    bench: &Benchmark,
    preds: &PredictionSet,
) -> Result<(Metrics, String)> {
    let judgements: Vec<JudgementLine> = cfg.out.judgements()?;
    let judged = !matches!(cfg.judge, JudgeChoice::None);
    let history = cfg.history();
    let (metrics, steps) =
        crate::score::score_run(&cfg.rules, bench, preds, &judgements, judged, &history);
    crate::report::write_all(&cfg.out, &metrics, &steps)?;
    // The HTML report is a view of the files above: failing to write it must not fail the run.
    if let Err(e) = crate::report::html::write_run(&cfg.out) {
        tracing::warn!("report.html not written: {e}");
    }
    let summary = crate::report::render_summary(&metrics);
    Ok((metrics, summary))
}
