//! Phase 1: one prompt per benchmark step; each finished step is appended to `predictions.jsonl` at once.

use std::collections::HashSet;

use anyhow::Result;
use serde_json::json;

use super::pipeline::{Outcome, Runner};
use super::prepare::step_input;
use super::progress::{PhaseStats, Progress};
use super::prompts::SystemPrompt;
use super::rundir::{step_key, JsonlAppender};
use crate::dataset::Benchmark;

/// A step still to predict: (trajectory index, step index).
pub type StepJob = (usize, usize);

/// The steps of `bench` not in `done`, largest prompt first (screen area, then history length), so big prompts
/// start early and similar lengths share batches.
pub fn pending_steps(bench: &Benchmark, done: &HashSet<String>) -> Vec<StepJob> {
    let mut jobs: Vec<StepJob> = bench
        .trajectories
        .iter()
        .enumerate()
        .flat_map(|(ti, t)| (0..t.steps.len()).map(move |si| (ti, si)))
        .filter(|&(ti, si)| !done.contains(&step_key(&bench.trajectories[ti].id, si)))
        .collect();
    jobs.sort_by_key(|&(ti, si)| {
        let t = &bench.trajectories[ti];
        let history: usize = t.steps[..si].iter().map(|s| s.subtask.len()).sum();
        std::cmp::Reverse((
            t.image_width as u64 * t.image_height as u64,
            history + t.instruction.len(),
            ti,
            si,
        ))
    });
    jobs
}

/// Predict every step in `jobs`, appending each result (or its preparation error) to `out`.
pub fn predict_steps(
    runner: &Runner<'_>,
    bench: &Benchmark,
    system: SystemPrompt,
    jobs: &[StepJob],
    out: &mut JsonlAppender,
    stats: &mut PhaseStats,
    progress: &mut Progress,
) -> Result<()> {
    let kit = runner.kit;
    let prepare = |&(ti, si): &StepJob| step_input(kit, bench, &bench.trajectories[ti], si, system);
    runner.run(jobs, prepare, stats, |&(ti, si), outcome, st| {
        let traj = &bench.trajectories[ti].id;
        let line = match outcome {
            Outcome::Generated(r, size) => json!({
                "trajectory": traj, "step": si, "response": kit.tokenizer.decode(&r.token_ids, true)?,
                "image_size": size, "prompt_tokens": r.prompt_tokens,
                "generated_tokens": r.token_ids.len(), "finish": r.finish,
            }),
            Outcome::Failed(msg) => {
                tracing::warn!("trajectory {traj} step {si}: {msg}");
                json!({"trajectory": traj, "step": si, "response": "", "image_size": null, "error": msg})
            }
        };
        out.append(&line)?;
        progress.advance(1, st);
        Ok(())
    })
}
