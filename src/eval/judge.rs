//! Phase 2: one aggregation prompt per trajectory — the instruction, the predicted steps with their thoughts
//! and the final screenshot — answered by the judge model with a JSON verdict, appended to `judgements.jsonl`.
//!
//! Each verdict records a digest of the step answers it was built from ([`judged_steps`]). A trajectory is
//! judged (again) unless its latest verdict ran and was built from the answers saved now: a step redone on
//! resume (a screenshot fixed, a server back up) sends its trajectory back to the judge. A trajectory with a
//! failed or absent step is judged only under `--allow-step-errors`, its verdict recording how many it lacked.

use std::collections::HashMap;

use anyhow::Result;

use super::phase::Phase;
use super::prompts::{judge_messages, parse_verdict};
use crate::backend::{ChatRequest, ChatResult};
use crate::dataset::{Benchmark, Trajectory};
use crate::parse::{parse_response, ParsedOutput};
use crate::predictions::PredictionSet;
use crate::records::JudgementLine;
use crate::score::{is_current, judged_steps, JudgedSteps};

/// Which trajectories the judge phase runs, and why the others do not.
#[derive(Debug, Default)]
pub(crate) struct JudgePlan {
    /// Indices of the trajectories to judge, with the steps each prompt shows.
    pub jobs: Vec<(usize, JudgedSteps)>,
    /// Trajectories whose latest verdict is current (not judged again).
    pub current: usize,
    /// Of the jobs, those whose latest verdict was built from other step answers.
    pub stale: usize,
    /// Trajectories left unjudged because some of their steps failed (without `--allow-step-errors`).
    pub skipped: usize,
}

/// The judge phase's plan over `bench`: every trajectory but those with a current, error-free verdict in
/// `judgements` (file order, later lines win) and, unless `allow_step_errors`, those with a failed or absent
/// step. `reached_only`: a semi-online run (see [`judged_steps`]).
pub(crate) fn pending_trajectories(
    bench: &Benchmark,
    preds: &PredictionSet,
    judgements: &[JudgementLine],
    reached_only: bool,
    allow_step_errors: bool,
) -> JudgePlan {
    let latest: HashMap<&str, &JudgementLine> = judgements
        .iter()
        .map(|j| (j.trajectory.as_str(), j))
        .collect();
    let mut plan = JudgePlan::default();
    for (ti, t) in bench.trajectories.iter().enumerate() {
        let steps = judged_steps(t, preds, reached_only);
        let line = latest.get(t.id.as_str());
        // A line without a digest (an older run's) cannot tell which answers it saw: judged again.
        let current = line.filter(|l| l.error.is_none() && l.steps_sha256.is_some());
        if current.is_some_and(|l| is_current(l, &steps)) {
            plan.current += 1;
        } else if steps.missing > 0 && !allow_step_errors {
            plan.skipped += 1;
        } else {
            plan.stale += usize::from(current.is_some());
            plan.jobs.push((ti, steps));
        }
    }
    plan
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
    /// Indices of the trajectories to judge, with the steps each prompt shows (every step, or in a semi-online
    /// run those up to the first one without a prediction, with that last step's screenshot).
    pub jobs: Vec<(usize, JudgedSteps)>,
    /// Most generated tokens.
    pub max_new_tokens: usize,
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
        let (ti, steps) = &self.jobs[i];
        let t = &self.bench.trajectories[*ti];
        let empty = parse_response("");
        let mut predicted = predicted_steps(t, self.preds, &empty);
        predicted.truncate(steps.count);
        let last = t
            .steps
            .get(steps.count.saturating_sub(1))
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
        let (ti, steps) = &self.jobs[i];
        let mut line = steps.blank_line(self.bench.trajectories[*ti].id.clone());
        match outcome {
            Ok(r) => {
                let v = parse_verdict(&r.text);
                line.success = v.success;
                line.reason = v.reason;
                line.prompt_tokens = Some(r.prompt_tokens);
                line.generated_tokens = Some(r.generated_tokens);
                line.response = r.text;
            }
            Err(msg) => {
                tracing::warn!("judging trajectory {}: {msg}", line.trajectory);
                line.error = Some(msg);
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::dataset::testing::{step, trajectory};

    /// Trajectories `A`, `B`, `C`, `D`, two steps each, every step answered but `D`'s second (failed).
    fn setup() -> (Benchmark, PredictionSet) {
        let traj = |id: &str| {
            let steps = vec![step("", Action::Wait { time: None }); 2];
            trajectory(id, [1000, 2000], steps)
        };
        let bench = Benchmark {
            root: "/nonexistent".into(),
            info: None,
            trajectories: ["A", "B", "C", "D"].map(traj).to_vec(),
        };
        let mut text = String::new();
        for t in ["A", "B", "C", "D"] {
            for s in 0..2 {
                let error = (t == "D" && s == 1).then_some("bad png");
                let v = serde_json::json!({"trajectory": t, "step": s, "response": "r", "error": error});
                text.push_str(&format!("{v}\n"));
            }
        }
        (bench, PredictionSet::parse(&text))
    }

    fn line(t: &str, sha256: Option<String>, error: Option<&str>) -> JudgementLine {
        let steps = JudgedSteps {
            count: 2,
            missing: 0,
            sha256: String::new(),
        };
        JudgementLine {
            success: Some(true),
            error: error.map(String::from),
            steps_sha256: sha256,
            ..steps.blank_line(t.into())
        }
    }

    #[test]
    fn judged_again_unless_current_and_failed_steps_only_when_allowed() {
        let (bench, preds) = setup();
        let digest = |ti: usize| judged_steps(&bench.trajectories[ti], &preds, false).sha256;
        let lines = vec![
            line("A", Some(digest(0)), None),        // current
            line("B", Some("other".into()), None),   // stale
            line("C", None, None),                   // line schema 1: no digest
            line("A", Some(digest(0)), Some("500")), // a later failed prompt wins
        ];
        let plan = pending_trajectories(&bench, &preds, &lines, false, false);
        let jobs: Vec<usize> = plan.jobs.iter().map(|j| j.0).collect();
        assert_eq!(jobs, vec![0, 1, 2]);
        assert_eq!((plan.current, plan.stale, plan.skipped), (0, 1, 1));
        let plan = pending_trajectories(&bench, &preds, &lines[..3], false, true);
        let jobs: Vec<usize> = plan.jobs.iter().map(|j| j.0).collect();
        assert_eq!(jobs, vec![1, 2, 3]);
        assert_eq!(plan.jobs[2].1.missing, 1);
        assert_eq!((plan.current, plan.skipped), (1, 0));
    }
}
