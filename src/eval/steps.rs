//! Phase 1: one prompt per benchmark step (instruction, golden history, screenshot); each answer is appended
//! to `predictions.jsonl` at once.

use std::collections::HashSet;

use anyhow::Result;

use super::phase::Phase;
use super::prompts::{step_messages, PromptStyle};
use crate::backend::{ChatRequest, ChatResult};
use crate::dataset::Benchmark;
use crate::preprocess::{image_dimensions, ImageProcessorConfig};
use crate::records::PredictionLine;
use crate::rundir::step_key;

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

/// The step phase over `jobs`.
pub struct StepPhase<'a> {
    /// The benchmark.
    pub bench: &'a Benchmark,
    /// The pending steps.
    pub jobs: Vec<StepJob>,
    /// What the system prompt is made from.
    pub system: PromptStyle,
    /// How the backend resizes screenshots (the prompt states the size the model sees).
    pub image: &'a ImageProcessorConfig,
    /// Most generated tokens.
    pub max_new_tokens: usize,
}

impl Phase for StepPhase<'_> {
    type Record = PredictionLine;

    fn name(&self) -> &'static str {
        "steps"
    }

    fn total(&self) -> usize {
        self.bench.num_steps()
    }

    fn pending(&self) -> usize {
        self.jobs.len()
    }

    fn request(&self, i: usize) -> Result<ChatRequest> {
        let (ti, si) = self.jobs[i];
        let traj = &self.bench.trajectories[ti];
        let path = self.bench.root.join(&traj.steps[si].image);
        let resized = self.image.resized_size(image_dimensions(&path)?)?;
        Ok(ChatRequest {
            messages: step_messages(traj, si, resized, self.system)?,
            images: vec![path],
            max_new_tokens: self.max_new_tokens,
            top_logprobs: 0,
            ignore_eos: false,
        })
    }

    /// A trajectory's pending steps go to one device together; the trajectories with the most screen pixels to
    /// read go first, so the longest work starts early (ties: benchmark order).
    fn groups(&self) -> Vec<Vec<usize>> {
        let mut by_traj: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, &(ti, _)) in self.jobs.iter().enumerate() {
            by_traj.entry(ti).or_default().push(i);
        }
        let mut groups: Vec<(usize, Vec<usize>)> = by_traj.into_iter().collect();
        groups.sort_by_key(|(ti, g)| {
            let t = &self.bench.trajectories[*ti];
            let pixels = t.image_width as u64 * t.image_height as u64 * g.len() as u64;
            (std::cmp::Reverse(pixels), *ti)
        });
        groups.into_iter().map(|(_, g)| g).collect()
    }

    fn record(&self, i: usize, outcome: Result<ChatResult, String>) -> PredictionLine {
        let (ti, si) = self.jobs[i];
        prediction_line(&self.bench.trajectories[ti].id, si, outcome)
    }

    fn describe(&self, i: usize) -> serde_json::Value {
        let (ti, si) = self.jobs[i];
        serde_json::json!({"trajectory": self.bench.trajectories[ti].id, "step": si})
    }
}

/// The `predictions.jsonl` line of step `si` of trajectory `trajectory`: its answer, or why it could not run.
pub fn prediction_line(
    trajectory: &str,
    si: usize,
    outcome: Result<ChatResult, String>,
) -> PredictionLine {
    let trajectory = trajectory.to_string();
    match outcome {
        Ok(r) => PredictionLine {
            trajectory,
            step: si,
            response: r.text,
            image_size: r.image_sizes.last().copied(),
            prompt_tokens: Some(r.prompt_tokens),
            generated_tokens: Some(r.generated_tokens),
            finish: Some(r.finish),
            error: None,
        },
        Err(msg) => {
            tracing::warn!("trajectory {trajectory} step {si}: {msg}");
            PredictionLine {
                trajectory,
                step: si,
                response: String::new(),
                image_size: None,
                prompt_tokens: None,
                generated_tokens: None,
                finish: None,
                error: Some(msg),
            }
        }
    }
}
