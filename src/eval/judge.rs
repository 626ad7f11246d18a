//! Phase 2: one aggregation prompt per trajectory — the instruction, the predicted steps with their thoughts
//! and the final screenshot — answered by the judge model with a JSON verdict, appended to `judgements.jsonl`.

use std::collections::HashSet;

use anyhow::Result;

use super::phase::Phase;
use super::prompts::{judge_messages, parse_verdict};
use crate::backend::{ChatRequest, ChatResult};
use crate::dataset::{Benchmark, Trajectory};
use crate::parse::{parse_response, ParsedOutput};
use crate::predictions::PredictionSet;
use crate::records::JudgementLine;

/// Indices of the trajectories whose id is not in `done`.
pub(crate) fn pending_trajectories(bench: &Benchmark, done: &HashSet<String>) -> Vec<usize> {
    (0..bench.trajectories.len())
        .filter(|&i| !done.contains(&bench.trajectories[i].id))
        .collect()
}

/// The parsed predicted steps of `t` (`empty` where a step has no prediction).
pub(crate) fn predicted_steps<'a>(
    t: &Trajectory,
    preds: &'a PredictionSet,
    empty: &'a ParsedOutput,
) -> Vec<&'a ParsedOutput> {
    (0..t.steps.len())
        .map(|si| preds.get(&t.id, si).map_or(empty, |p| &p.parsed))
        .collect()
}

/// The judge phase over trajectories `jobs`, judging the predictions `preds`.
pub(crate) struct JudgePhase<'a> {
    /// The benchmark.
    pub bench: &'a Benchmark,
    /// The predictions of the step phase (each response parsed once, when read).
    pub preds: &'a PredictionSet,
    /// Indices of the trajectories to judge.
    pub jobs: Vec<usize>,
    /// Most generated tokens.
    pub max_new_tokens: usize,
    /// Judge the steps up to the first one without a prediction, with that last predicted step's screenshot (a
    /// semi-online run, whose trajectory stops there); else every step, with the final screenshot.
    pub reached_only: bool,
}

impl Phase for JudgePhase<'_> {
    type Record = JudgementLine;

    fn name(&self) -> &'static str {
        "judge"
    }

    fn total(&self) -> usize {
        self.bench.trajectories.len()
    }

    fn pending(&self) -> usize {
        self.jobs.len()
    }

    fn request(&self, i: usize) -> Result<ChatRequest> {
        let t = &self.bench.trajectories[self.jobs[i]];
        let empty = parse_response("");
        let mut predicted = predicted_steps(t, self.preds, &empty);
        if self.reached_only {
            let reached = (0..t.steps.len())
                .take_while(|&si| self.preds.get(&t.id, si).is_some())
                .count();
            predicted.truncate(reached.max(1));
        }
        let last = t
            .steps
            .get(predicted.len().saturating_sub(1))
            .ok_or_else(|| anyhow::anyhow!("trajectory {} has no steps", t.id))?;
        Ok(ChatRequest {
            messages: judge_messages(t, &predicted)?,
            images: vec![self.bench.root.join(&last.image)],
            max_new_tokens: self.max_new_tokens,
            top_logprobs: 0,
            ignore_eos: false,
        })
    }

    fn record(&self, i: usize, outcome: Result<ChatResult, String>) -> JudgementLine {
        let trajectory = self.bench.trajectories[self.jobs[i]].id.clone();
        match outcome {
            Ok(r) => {
                let v = parse_verdict(&r.text);
                JudgementLine {
                    trajectory,
                    success: v.success,
                    reason: v.reason,
                    prompt_tokens: Some(r.prompt_tokens),
                    generated_tokens: Some(r.generated_tokens),
                    response: r.text,
                    error: None,
                }
            }
            Err(msg) => {
                tracing::warn!("judging trajectory {trajectory}: {msg}");
                JudgementLine {
                    trajectory,
                    success: None,
                    reason: None,
                    response: String::new(),
                    prompt_tokens: None,
                    generated_tokens: None,
                    error: Some(msg),
                }
            }
        }
    }
}
