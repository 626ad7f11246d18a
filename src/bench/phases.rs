//! The phases `bench` measures: the step phase (with the gold history, and with `--history predicted` then again
//! as semi-online chains on the same trajectories) and the judge phase, through the same driver as `eval`.

use anyhow::Result;

use super::{BenchConfig, HistoryCost};
use crate::backend::Backend;
use crate::eval::{
    pending_steps, pending_trajectories, run_phase, Decide, JudgePhase, SemiOnlineConfig,
    SemiOnlinePhase, StepPhase,
};
use crate::predictions::PredictionSet;
use crate::records::PhaseStats;
use crate::settings::SystemPrompt;

/// What the step phases of a benchmark run measured.
pub(super) struct StepRuns {
    /// The step phase the report's figures describe (the semi-online one with `--history predicted`).
    pub steps: PhaseStats,
    /// The judge phase, when run.
    pub judge: Option<PhaseStats>,
    /// With `--history predicted`: the same steps with the gold history, then as semi-online chains.
    pub history: Option<HistoryCost>,
}

/// Run the step phase (and, when asked, the judge phase) of `bench` through `backend` in the folder `dir`; with
/// `--history predicted`, the gold-history step phase first and then the semi-online one on the same
/// trajectories.
pub(super) fn run_phases(
    cfg: &BenchConfig,
    backend: &dyn Backend,
    bench: &crate::dataset::Benchmark,
    dir: &std::path::Path,
) -> Result<StepRuns> {
    let steps_phase = StepPhase {
        bench,
        jobs: pending_steps(bench, &Default::default()),
        system: SystemPrompt::Default.into(),
        image: backend.image_config(),
        max_new_tokens: cfg.max_new_tokens,
    };
    let mut steps = run_phase(backend, &steps_phase, &dir.join(crate::rundir::PREDICTIONS))?;
    steps.phase = "bench".into();
    let mut history = None;
    if let Some(procedure) = cfg.semi_online {
        let semi = SemiOnlineConfig {
            procedure,
            decide: Decide::AlwaysRight,
            system: SystemPrompt::Default.into(),
            image: backend.image_config(),
            max_new_tokens: cfg.max_new_tokens,
        };
        let phase = SemiOnlinePhase::new(bench, &[], semi);
        let mut chained = run_phase(backend, &phase, &dir.join("predictions-semi-online.jsonl"))?;
        chained.phase = format!("bench ({procedure} history)");
        history = Some(HistoryCost::of(procedure, &steps, &chained));
        steps = chained;
    }
    if !cfg.judge {
        return Ok(StepRuns {
            steps,
            judge: None,
            history,
        });
    }
    let preds = PredictionSet::read(dir.join(crate::rundir::PREDICTIONS))?;
    let phase = JudgePhase {
        bench,
        preds: &preds,
        // Every trajectory, whatever its steps' state: the bench times the judge prompts.
        jobs: pending_trajectories(bench, &preds, &[], false, true).jobs,
        max_new_tokens: cfg.max_new_tokens,
    };
    let judge = run_phase(backend, &phase, &dir.join("judgements.jsonl"))?;
    Ok(StepRuns {
        steps,
        judge: Some(judge),
        history,
    })
}
