//! The run itself: open (or resume) the run folder, the step phase, the judge phase, the scores and reports.

use anyhow::{Context, Result};

use crate::backend::Backend;
use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;
use crate::records::{JudgementLine, Manifest, PhaseStats, PredictionLine, Procedure};
use crate::rundir;
use crate::score::RunMetrics;

use super::backends::judge_backend;
use super::config::{EvalConfig, EvalOutcome, JudgeChoice};
use super::dump::PromptDump;
use super::judge::{self, pending_trajectories, JudgePhase};
use super::manifest::{manifest, now_secs, settings, throughput};
use super::phase::{run_phase, run_phase_dumping, Phase};
use super::semi_online::{Decide, SemiOnlineConfig, SemiOnlinePhase};
use super::steps::{pending_steps, StepPhase};
use super::{checks, screens};

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
    let mut manifest = manifest(cfg, backend, settings, previous)?;
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

fn run_steps(cfg: &EvalConfig, bench: &Benchmark, backend: &dyn Backend) -> Result<PhaseStats> {
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
) -> Result<PhaseStats> {
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
) -> Result<PhaseStats> {
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
) -> Result<(RunMetrics, String)> {
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
